// cuda_rt_emu: cuda_rt.h's dev_* calls on the host for the cuda-emu backend: "device" memory is
// host memory in tracked allocations (so the backend's pointer checks can tell a device buffer
// from a host one), copies are memmove, the stream runs everything at once, the GEMM is a loop.
#define SOL_CUDA_EMU 1
#include "cuda_rt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half_bits.cuh"

#include <functional>
#include <vector>

namespace {
struct alloc {
    const unsigned char *p;
    size_t bytes;
};
} // namespace

struct sol_cuda_dev {
    size_t total, used;
    alloc *allocs;
    int n_allocs, cap_allocs;
    sol_emu::stream stream; // kernels launched on it are recorded while a capture is open
    int err;                // the first failure of queued work (an all-reduce), until sync
    char why[SOL_ERR_MSG_MAX];
};

namespace {
// An emulated graph: the recorded work, run in order at each launch. The copies read their
// source when the graph runs, as a GPU's memcpy nodes do: staged host bytes written after the
// capture are what a replay sends.
struct graph {
    std::vector<std::function<void()>> work;
};

// Work on the stream: at once, or into the open capture.
void on_stream(sol_cuda_dev *d, std::function<void()> w) {
    sol_emu::submit(&d->stream, std::move(w));
}
} // namespace

extern "C" int sol_emu_dev_open(int index, size_t mem_bytes, sol_cuda_dev **out, char *why,
                                size_t cap) {
    // One pretend device per tensor-parallel rank (each its own memory), so the ranks of an
    // emulated TP group open devices 0..n-1 as they do on a GPU node.
    if (index < 0 || index >= SOL_TP_MAX) {
        snprintf(why, cap, "the emulation has devices 0..%d", SOL_TP_MAX - 1);
        return -ENODEV;
    }
    sol_cuda_dev *d = (sol_cuda_dev *)calloc(1, sizeof *d);
    if (!d) return -ENOMEM;
    d->total = mem_bytes ? mem_bytes : (size_t)256 << 20; /* small: the KV pool is memset */
    *out = d;
    return 0;
}

extern "C" void sol_emu_dev_close(sol_cuda_dev *d) {
    if (!d) return;
    delete d->stream.capture;
    for (int i = 0; i < d->n_allocs; i++)
        free((void *)d->allocs[i].p);
    free(d->allocs);
    free(d);
}

extern "C" void sol_emu_dev_name(sol_cuda_dev *d, char *out, size_t cap) {
    snprintf(out, cap, "host emulation (%.1f GiB pretend device)", d->total / 1073741824.0);
}

extern "C" void *sol_emu_dev_stream(sol_cuda_dev *d) {
    return &d->stream;
}

extern "C" void *sol_emu_dev_malloc(sol_cuda_dev *d, size_t bytes) {
    if (bytes > d->total - d->used) return NULL;
    if (d->n_allocs == d->cap_allocs) {
        int c = d->cap_allocs ? 2 * d->cap_allocs : 64;
        alloc *a = (alloc *)realloc(d->allocs, sizeof *a * (size_t)c);
        if (!a) return NULL;
        d->allocs = a, d->cap_allocs = c;
    }
    // Exactly `bytes` (rounded to the alignment): ASan then catches a kernel reading past the end.
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + (bytes ? 0 : 64));
    if (!p) return NULL;
    d->allocs[d->n_allocs++] = alloc{(const unsigned char *)p, bytes};
    d->used += bytes;
    return p;
}

extern "C" void sol_emu_dev_free(sol_cuda_dev *d, void *p) {
    for (int i = 0; p && i < d->n_allocs; i++)
        if (d->allocs[i].p == p) {
            d->used -= d->allocs[i].bytes;
            d->allocs[i] = d->allocs[--d->n_allocs];
            free(p);
            return;
        }
}

extern "C" void *sol_emu_dev_host_malloc(sol_cuda_dev *d, size_t bytes) {
    (void)d;
    return malloc(bytes ? bytes : 1);
}

extern "C" void sol_emu_dev_host_free(sol_cuda_dev *d, void *p) {
    (void)d;
    free(p);
}

extern "C" int sol_emu_dev_owns(sol_cuda_dev *d, const void *p, size_t bytes) {
    const unsigned char *q = (const unsigned char *)p;
    for (int i = 0; i < d->n_allocs; i++)
        if (q >= d->allocs[i].p && q + bytes <= d->allocs[i].p + d->allocs[i].bytes) return 1;
    return 0;
}

extern "C" int sol_emu_dev_copy(sol_cuda_dev *d, void *dst, const void *src, size_t bytes,
                                int kind) {
    (void)kind;
    if (bytes) on_stream(d, [=] { memmove(dst, src, bytes); });
    return 0;
}

extern "C" int sol_emu_dev_memset(sol_cuda_dev *d, void *p, int value, size_t bytes) {
    on_stream(d, [=] { memset(p, value, bytes); });
    return 0;
}

// An emulated kernel that goes wrong aborts (deadlock) or trips ASan at once; only a queued
// all-reduce fails softly (a rank that did not arrive), and is reported here once.
extern "C" int sol_emu_dev_last_error(sol_cuda_dev *d, char *why, size_t cap) {
    int rc = d->err;
    if (rc) snprintf(why, cap, "%s", d->why);
    d->err = 0;
    return rc;
}

extern "C" int sol_emu_dev_sync(sol_cuda_dev *d, char *why, size_t cap) {
    return sol_emu_dev_last_error(d, why, cap);
}

extern "C" int sol_emu_dev_mem_info(sol_cuda_dev *d, size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = d->total - d->used;
    *total_bytes = d->total;
    return 0;
}

// The products of halves are exact in float; the sum runs in k order.
static void gemm_half(int bf16, const uint16_t *wh, const uint16_t *xh, float *y, int M, int n,
                      int K, int ldy) {
    auto f = [bf16](uint16_t h) { return bf16 ? sol_bf16_to_f32(h) : sol_f16_to_f32(h); };
    std::vector<float> xf((size_t)K);
    for (int t = 0; t < n; t++) {
        for (int k = 0; k < K; k++)
            xf[k] = f(xh[(size_t)t * K + k]);
        for (int m = 0; m < M; m++) {
            const uint16_t *wr = wh + (size_t)m * K;
            float s = 0.0f;
            for (int k = 0; k < K; k++)
                s += f(wr[k]) * xf[k];
            y[(size_t)t * ldy + m] = s;
        }
    }
}

extern "C" int sol_emu_dev_gemm(sol_cuda_dev *d, int bf16, const void *w, const void *x, float *y,
                                int M, int n, int K, int ldy, char *why, size_t cap) {
    (void)why, (void)cap;
    const uint16_t *wh = (const uint16_t *)w, *xh = (const uint16_t *)x;
    on_stream(d, [=] { gemm_half(bf16, wh, xh, y, M, n, K, ldy); });
    return 0;
}

extern "C" int sol_emu_dev_allreduce(sol_cuda_dev *d, sol_tp_comm *comm, int rank, float *x,
                                     int64_t n, char *why, size_t cap) {
    (void)why, (void)cap;
    on_stream(d, [=] {
        sol_err e = {0, ""};
        int rc = sol_tp_allreduce(comm, rank, x, n, &e);
        if (rc && !d->err) {
            d->err = rc;
            snprintf(d->why, sizeof d->why, "%s", e.msg);
        }
    });
    return 0;
}

extern "C" int sol_emu_dev_allreduce_ready(sol_cuda_dev *d, const sol_tp_comm *comm) {
    (void)d, (void)comm;
    return 1;
}

extern "C" int sol_emu_dev_capture_begin(sol_cuda_dev *d, char *why, size_t cap) {
    if (d->stream.capture) {
        snprintf(why, cap, "a capture is already open");
        return -EBUSY;
    }
    d->stream.capture = new std::vector<std::function<void()>>();
    return 0;
}

// "Update" when the record has as many steps as the graph it replaces (the emulation keeps no
// node types to compare), else "instantiate": the counts a test can check. The staged copy is
// put first, as the GPU side makes it every recorded root's dependency.
extern "C" int sol_emu_dev_capture_end_launch(sol_cuda_dev *d, void *up_dst, const void *up_src,
                                              size_t up_bytes, void **exec, int *how, char *why,
                                              size_t cap) {
    if (!d->stream.capture) {
        snprintf(why, cap, "no capture is open");
        return -EINVAL;
    }
    if (up_bytes)
        d->stream.capture->insert(d->stream.capture->begin(),
                                  [=] { memmove(up_dst, up_src, up_bytes); });
    graph *g = (graph *)*exec;
    *how = g && g->work.size() == d->stream.capture->size() ? 1 : 2;
    if (!g) g = new graph();
    g->work = std::move(*d->stream.capture);
    delete d->stream.capture;
    d->stream.capture = nullptr;
    *exec = g;
    for (auto &w : g->work)
        w();
    return 0;
}

extern "C" void sol_emu_dev_graph_free(sol_cuda_dev *d, void *exec) {
    (void)d;
    delete (graph *)exec;
}
