/* graph_sig: a step's launches written down as bytes (kernel, grid, block, shared bytes and every
 * argument; copies, GEMMs and all-reduces by their operands), so that a step which would launch
 * exactly what a cached CUDA graph holds launches that graph instead of recording itself again
 * (docs/backend.md, "CUDA graphs").
 *
 * The bytes are compared, not hashed: a hash collision would replay another step's arguments
 * without a word, and a decode step's few hundred launches are a few tens of KiB to compare.
 * Each value goes in with its size in front, so two different sequences of values never spell
 * the same bytes. */
#ifndef SOL_GRAPH_SIG_H
#define SOL_GRAPH_SIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    SOL_SIG_OFF = 0,    /* launches run (or are captured) and nothing is written down */
    SOL_SIG_RECORD = 1, /* launches run into the open capture and are written down */
    SOL_SIG_DRY = 2     /* launches are compared with the cached graph's and do not run */
};

/* What an operation is, first in its bytes. */
enum { SOL_SIG_KERNEL = 1, SOL_SIG_COPY = 2, SOL_SIG_GEMM = 3, SOL_SIG_ALLREDUCE = 4 };

typedef struct sol_graph_sig {
    int mode;
    unsigned char *buf; /* RECORD: the step's bytes so far */
    size_t len, cap;
    const unsigned char *ref; /* DRY: the cached graph's bytes */
    size_t ref_len, at;       /* DRY: how far this step has matched them */
    int miss;                 /* DRY: a difference; RECORD: no memory to write the bytes down */
} sol_graph_sig;

/* What the kernel launchers get as their `stream` (cuda_kernels.h): the stream, and the
 * signature that SOL_LAUNCH consults. NULL: the default stream, nothing written down. */
typedef struct sol_cuda_queue {
    void *stream; /* a cudaStream_t, or the emulation's stream */
    sol_graph_sig sig;
    int pdl; /* 1: kernels launch with programmatic dependent launch (sol_cuda_kernel.h) */
} sol_cuda_queue;

static inline void sol_sig_bytes(sol_graph_sig *s, const void *p, size_t n) {
    if (s->mode == SOL_SIG_DRY) {
        if (!s->miss && (s->at + n > s->ref_len || memcmp(s->ref + s->at, p, n) != 0)) s->miss = 1;
        s->at += n;
        return;
    }
    if (s->len + n > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 4096;
        while (cap < s->len + n)
            cap *= 2;
        unsigned char *b = (unsigned char *)realloc(s->buf, cap);
        if (!b) {
            s->miss = 1;
            return;
        }
        s->buf = b, s->cap = cap;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
}

/* One value: its size, then its bytes. */
static inline void sol_sig_put(sol_graph_sig *s, const void *p, size_t n) {
    uint32_t sz = (uint32_t)n;
    sol_sig_bytes(s, &sz, sizeof sz);
    sol_sig_bytes(s, p, n);
}

/* The start of an operation of kind `what` on q: 1 when it is written down (its values follow
 * through sol_sig_put), 0 when the signature is off. */
static inline int sol_sig_begin(sol_cuda_queue *q, int what) {
    if (!q || q->sig.mode == SOL_SIG_OFF) return 0;
    sol_sig_put(&q->sig, &what, sizeof what);
    return 1;
}

/* 1 when the operation just written down must not run (a dry step). */
static inline int sol_sig_dry(const sol_cuda_queue *q) {
    return q && q->sig.mode == SOL_SIG_DRY;
}

#ifdef __cplusplus
}

/* A kernel launch written down: the function's address, grid, block, dynamic shared bytes and
 * each argument's bytes as the call site passes them (equal values there give equal kernel
 * parameters). True when it must not run. */
template <class F, class G, class B, class... A>
inline bool sol_sig_launch(void *queue, F fn, G grid, B block, size_t smem, const A &...a) {
    sol_cuda_queue *q = (sol_cuda_queue *)queue;
    if (!sol_sig_begin(q, SOL_SIG_KERNEL)) return false;
    const unsigned dims[6] = {grid.x, grid.y, grid.z, block.x, block.y, block.z};
    sol_sig_put(&q->sig, &fn, sizeof fn);
    sol_sig_put(&q->sig, dims, sizeof dims);
    sol_sig_put(&q->sig, &smem, sizeof smem);
    (sol_sig_put(&q->sig, &a, sizeof a), ...);
    return sol_sig_dry(q);
}
#endif

#endif
