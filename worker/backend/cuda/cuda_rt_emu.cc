// cuda_rt_emu: cuda_rt.h's dev_* calls on the host for the cuda-emu backend: "device" memory is
// host memory in tracked allocations (so the backend's pointer checks can tell a device buffer
// from a host one), copies are memmove, the stream runs everything at once, the GEMM is a loop.
#define SOL_CUDA_EMU 1
#include "cuda_rt.h"
#include "rank_wait.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    int index;
    int sms; // pretend multiprocessors: 132, or SOL_EMU_SMS (tests of other split counts)
    size_t total, used;
    alloc *allocs;
    int n_allocs, cap_allocs;
    sol_emu::stream stream; // kernels launched on it are recorded while a capture is open
    sol_cuda_queue q;       // that stream for the kernel launchers, with the graph signature
    int err;                // the first failure of queued work (an all-reduce), until sync
    char why[SOL_ERR_MSG_MAX];
    /* The communicator's life as cuda_rt.cu's NCCL one: the rank group, the group epoch the
     * communicator was made in, its failure (NCCL's asynchronous error), made/aborted counts. */
    sol_tp_comm *of;
    int rank, timeout_ms, joined, comm_open;
    unsigned epoch;
    int async_err;
    char async_why[SOL_ERR_MSG_MAX];
    unsigned long made, aborted;
    /* SOL_TEST_CUDA_EMU_FAULT: the collective at which this device hangs or fails; hung: the
     * stream never completes again (a kernel spinning on a dead peer, a hung device). */
    unsigned long collectives, fault_at;
    int fault_hang, hung;
    int stuck; /* a wait's stream did not drain after the abort: dev_health */
    char stuck_why[SOL_ERR_MSG_MAX];
};

namespace {
// An emulated graph: the recorded nodes, run in order at each launch. The copies read their
// source when the graph runs, as a GPU's memcpy nodes do: staged host bytes written after the
// capture are what a replay sends.
struct graph {
    std::vector<sol_emu::node> work;
};

// Work on the stream: at once, or into the open capture as a node of type `as` (the GEMM and
// the all-reduce are kernel nodes, as cuBLASLt's and NCCL's work is on a GPU).
void on_stream(sol_cuda_dev *d, std::function<void()> w,
               sol_emu::node_desc as = {sol_emu::NODE_KERNEL, "host work", 0, 0, 0}) {
    sol_emu::submit(&d->stream, as, std::move(w));
}

int mem_type(sol_cuda_dev *d, const void *p, size_t bytes) {
    return sol_emu_dev_owns(d, p, bytes) ? sol_emu::MEM_DEVICE : sol_emu::MEM_HOST;
}

// The calling thread's current device, as the CUDA runtime keeps it per thread (device 0 until
// the thread sets one). It is the emulated runtime's own state, like the real one's: with it the
// emulation refuses work for a device that is not current, so an op that forgot to bind fails
// in CI instead of launching on another rank's GPU.
thread_local int current_device = 0;

// 0, or -EINVAL when d is not the calling thread's current device.
int not_bound(sol_cuda_dev *d, char *why, size_t cap) {
    if (current_device == d->index) return 0;
    snprintf(why, cap,
             "device %d is not current on this thread (device %d is): a backend op launched "
             "without binding its device (dev_bind)",
             d->index, current_device);
    return -EINVAL;
}

// SOL_TEST_CUDA_EMU_FAULT=DEVICE:N:hang|fail (test-only, docs/configuration.md): device
// DEVICE's N-th collective never completes and nothing queued after it does (hang), or fails as
// an NCCL error would (fail).
// A value that does not parse is refused (0 or -EINVAL with why), never ignored.
int read_fault(sol_cuda_dev *d, char *why, size_t cap) {
    const char *v = getenv("SOL_TEST_CUDA_EMU_FAULT");
    if (!v || !*v) return 0;
    int dev = -1, used = 0;
    unsigned long at = 0;
    char mode[8] = "";
    if (sscanf(v, "%d:%lu:%7[a-z]%n", &dev, &at, mode, &used) != 3 || v[used] || dev < 0 || !at ||
        (strcmp(mode, "hang") != 0 && strcmp(mode, "fail") != 0)) {
        snprintf(why, cap, "SOL_TEST_CUDA_EMU_FAULT=%s: expected DEVICE:N:hang or DEVICE:N:fail",
                 v);
        return -EINVAL;
    }
    if (dev != d->index) return 0;
    d->fault_at = at;
    d->fault_hang = mode[0] == 'h';
    fprintf(stderr,
            "SOL_TEST_CUDA_EMU_FAULT: emulated device %d will %s at its collective %lu (a "
            "test-only fault)\n",
            dev, mode, at);
    return 0;
}

// As cuda_rt.cu's: this rank gives up on the step, aborts its communicator and the group.
void fail_group(sol_cuda_dev *d, const char *why) {
    if (d->comm_open) d->comm_open = 0, d->aborted++;
    d->joined = 0;
    d->async_err = 0; // the aborted communicator's error goes with it
    if (d->of) sol_tp_comm_abort(d->of, why);
}

// The communicator's asynchronous error, or another rank's abort of the group.
int group_failed(sol_cuda_dev *d, char *why, size_t cap) {
    if (d->async_err) {
        snprintf(why, cap, "%s", d->async_why);
        return d->async_err;
    }
    char msg[200];
    if (d->of && sol_tp_comm_aborted(d->of, msg, sizeof msg)) {
        snprintf(why, cap, "tensor parallelism: %s", msg);
        return -ECANCELED;
    }
    return 0;
}

// cuda_rt.cu's wait_stream: the stream is "done" unless the device hung (rank_wait.h).
int wait_stream(sol_cuda_dev *d, char *why, size_t cap) {
    auto finished = [&](int failed, int *out) {
        if (d->hung) return 0;
        /* Done, but one of its collectives failed: its sums are not to be used. Another rank's
         * abort alone does not spoil work that completed. */
        if (!failed && (*out = d->async_err)) {
            snprintf(why, cap, "%s", d->async_why);
            fail_group(d, why);
        }
        return 1;
    };
    auto pause = [](unsigned) {
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
    };
    return sol_rank_wait(d, why, cap, finished, group_failed, fail_group, pause);
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
    d->index = index;
    d->total = mem_bytes ? mem_bytes : (size_t)256 << 20; /* small: the KV pool is memset */
    const char *sms = getenv("SOL_EMU_SMS");
    char *end = nullptr;
    long n_sms = sms ? strtol(sms, &end, 10) : 132;
    if (sms && (end == sms || *end || n_sms < 1 || n_sms > 4096)) { /* refused, never ignored */
        snprintf(why, cap, "SOL_EMU_SMS=%s: expected a multiprocessor count of 1..4096", sms);
        free(d);
        return -EINVAL;
    }
    d->sms = (int)n_sms;
    d->q.pdl = 1; /* an sm_90 pretend: launches carry PDL, kernels must open with the wait */
    int rc = read_fault(d, why, cap);
    if (rc) {
        free(d);
        return rc;
    }
    current_device = index; /* cudaSetDevice, as the real open does */
    *out = d;
    return 0;
}

extern "C" void sol_emu_dev_close(sol_cuda_dev *d) {
    if (!d) return;
    delete d->stream.capture;
    free(d->q.sig.buf);
    for (int i = 0; i < d->n_allocs; i++)
        free((void *)d->allocs[i].p);
    free(d->allocs);
    free(d);
}

extern "C" void sol_emu_dev_name(sol_cuda_dev *d, char *out, size_t cap) {
    snprintf(out, cap, "host emulation (%.1f GiB pretend device)", d->total / 1073741824.0);
}

extern "C" int sol_emu_dev_sm_count(sol_cuda_dev *d) {
    return d->sms;
}

extern "C" sol_cuda_queue *sol_emu_dev_stream(sol_cuda_dev *d) {
    d->q.stream = &d->stream;
    return &d->q;
}

extern "C" void sol_emu_dev_bind(sol_cuda_dev *d) {
    current_device = d->index;
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
    if (bytes)
        on_stream(d, [=] { memmove(dst, src, bytes); },
                  {sol_emu::NODE_MEMCPY, "memcpy", mem_type(d, src, bytes), mem_type(d, dst, bytes),
                   bytes});
    return 0;
}

extern "C" int sol_emu_dev_memset(sol_cuda_dev *d, void *p, int value, size_t bytes) {
    on_stream(d, [=] { memset(p, value, bytes); }, {sol_emu::NODE_MEMSET, "memset", 0, 0, bytes});
    return 0;
}

// An emulated kernel that goes wrong aborts (deadlock) or trips ASan at once; only a queued
// all-reduce fails softly (a rank that did not arrive), and is reported here once.
extern "C" int sol_emu_dev_last_error(sol_cuda_dev *d, char *why, size_t cap) {
    int rc = d->err;
    if (rc) snprintf(why, cap, "%s", d->why);
    d->err = 0;
    return rc ? rc : not_bound(d, why, cap);
}

extern "C" int sol_emu_dev_sync(sol_cuda_dev *d, char *why, size_t cap) {
    int rc = not_bound(d, why, cap);
    if (rc) return rc;
    if (d->stuck) return sol_emu_dev_health(d, why, cap);
    if (d->of && (rc = wait_stream(d, why, cap))) return rc;
    return sol_emu_dev_last_error(d, why, cap);
}

extern "C" int sol_emu_dev_health(sol_cuda_dev *d, char *why, size_t cap) {
    return sol_rank_health(d, why, cap);
}

extern "C" void sol_emu_dev_comm_stats(sol_cuda_dev *d, unsigned long *made,
                                       unsigned long *aborted) {
    *made = d->made;
    *aborted = d->aborted;
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

// The emulated NCCL init: a barrier of the group, with its deadline, as ncclCommInitRank waits
// for every rank (polled against the deadline on a GPU).
static int join(sol_cuda_dev *d, sol_tp_comm *comm, int rank, char *why, size_t cap) {
    unsigned epoch = sol_tp_comm_epoch(comm);
    if (d->comm_open) d->comm_open = 0, d->aborted++; /* one from before an abort */
    d->async_err = 0;
    sol_err e = {0, ""};
    int rc = sol_tp_barrier(comm, rank, &e);
    if (rc) {
        snprintf(why, cap, "ncclCommInitRankConfig (emulated): %s", e.msg);
        fail_group(d, why);
        return rc;
    }
    d->made++;
    d->comm_open = d->joined = 1;
    d->epoch = epoch;
    return 0;
}

extern "C" int sol_emu_dev_allreduce(sol_cuda_dev *d, sol_tp_comm *comm, int rank, float *x,
                                     int64_t n, char *why, size_t cap) {
    int rc = not_bound(d, why, cap);
    if (rc) return rc;
    if (d->stuck) return sol_emu_dev_health(d, why, cap);
    d->of = comm, d->rank = rank, d->timeout_ms = sol_tp_comm_timeout_ms(comm);
    char msg[200];
    if (sol_tp_comm_aborted(comm, msg, sizeof msg)) {
        snprintf(why, cap, "tensor parallelism: %s", msg);
        fail_group(d, why);
        return -ECANCELED;
    }
    if (!sol_emu_dev_allreduce_ready(d, comm) && (rc = join(d, comm, rank, why, cap))) return rc;
    on_stream(d, [=] {
        /* A hung device runs no collective again; a failed communicator none until rebuilt. */
        if (d->hung || d->async_err) return;
        if (++d->collectives == d->fault_at) {
            if (d->fault_hang) {
                d->hung = 1;
                return;
            }
            d->async_err = -EIO;
            snprintf(d->async_why, sizeof d->async_why,
                     "device %d (rank %d): NCCL reported an unhandled system error (emulated: "
                     "SOL_TEST_CUDA_EMU_FAULT)",
                     d->index, d->rank);
            return;
        }
        sol_err e = {0, ""};
        int r = sol_tp_allreduce(comm, rank, x, n, &e);
        if (r) {
            d->async_err = r;
            snprintf(d->async_why, sizeof d->async_why, "%s", e.msg);
        }
    });
    return 0;
}

extern "C" int sol_emu_dev_allreduce_ready(sol_cuda_dev *d, const sol_tp_comm *comm) {
    return d->joined && d->of == comm && d->epoch == sol_tp_comm_epoch(comm);
}

extern "C" int sol_emu_dev_capture_begin(sol_cuda_dev *d, char *why, size_t cap) {
    if (d->stream.capture) {
        snprintf(why, cap, "a capture is already open");
        return -EBUSY;
    }
    d->stream.capture = new std::vector<sol_emu::node>();
    return 0;
}

// cudaGraphExecUpdate's rules (CUDA 12/13 runtime API) for two captures of one stream, which
// are chains, so "the same topology" is the same number of nodes (errorTopologyChanged) with
// the same type at each place (errorNodeTypeChanged). A kernel node may change its arguments,
// grid, block and, since CUDA 11.2, its function, provided the function's context stays the same
// (every emulated kernel shares one) and it does not turn cooperative or use dynamic
// parallelism (Sol's kernels never do). A memcpy node may change its addresses and size but not
// the memory type of either side (host, device). A 1D memset may change its pointer and value;
// other changes are taken only "opportunistically" on a GPU, so here a new size is refused:
// nothing may depend on it.
static bool graph_updatable(const std::vector<sol_emu::node> &was,
                            const std::vector<sol_emu::node> &now) {
    if (was.size() != now.size()) return false;
    for (size_t i = 0; i < was.size(); i++) {
        const sol_emu::node_desc &a = was[i].desc, &b = now[i].desc;
        if (a.type != b.type) return false;
        if (a.type == sol_emu::NODE_MEMCPY && (a.src_mem != b.src_mem || a.dst_mem != b.dst_mem))
            return false;
        if (a.type == sol_emu::NODE_MEMSET && a.bytes != b.bytes) return false;
    }
    return true;
}

// "Update" when graph_updatable says a GPU would update the executable graph in place, else
// "instantiate". The staged copy (pinned host to device) is put first, as the GPU side makes it
// every recorded root's dependency.
extern "C" int sol_emu_dev_capture_end_launch(sol_cuda_dev *d, void *up_dst, const void *up_src,
                                              size_t up_bytes, void **exec, int *how, char *why,
                                              size_t cap) {
    if (!d->stream.capture) {
        snprintf(why, cap, "no capture is open");
        return -EINVAL;
    }
    if (up_bytes)
        d->stream.capture->insert(
            d->stream.capture->begin(),
            sol_emu::node{{sol_emu::NODE_MEMCPY, "staged copy", sol_emu::MEM_HOST,
                           mem_type(d, up_dst, up_bytes), up_bytes},
                          [=] { memmove(up_dst, up_src, up_bytes); }});
    graph *g = (graph *)*exec;
    *how = g && graph_updatable(g->work, *d->stream.capture) ? 1 : 2;
    if (!g) g = new graph();
    g->work = std::move(*d->stream.capture);
    delete d->stream.capture;
    d->stream.capture = nullptr;
    *exec = g;
    for (auto &n : g->work)
        n.work();
    return 0;
}

extern "C" int sol_emu_dev_graph_launch(sol_cuda_dev *d, void *exec, char *why, size_t cap) {
    int rc = not_bound(d, why, cap);
    if (rc) return rc;
    for (auto &n : ((graph *)exec)->work)
        n.work();
    return 0;
}

extern "C" void sol_emu_dev_graph_free(sol_cuda_dev *d, void *exec) {
    (void)d;
    delete (graph *)exec;
}
