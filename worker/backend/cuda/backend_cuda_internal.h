/* backend_cuda_internal: what backend_cuda.c and cuda_kv.c share: the backend's struct and its
 * helpers. Both files build twice (GPU and emulation), so shared names go through SOL_CUDA_FN. */
#ifndef SOL_BACKEND_CUDA_INTERNAL_H
#define SOL_BACKEND_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cuda_rt.h"

#ifdef SOL_CUDA_EMU
#define BE "cuda-emu"
#else
#define BE "cuda"
#endif

/* Tokens from which matmul takes the F16 GEMM (prefill) instead of Sol's GEMV kernels. */
enum {
    GEMM_MIN_TOKENS = SOL_CUDA_GEMV_MAX_TOKENS + 1,
    STAGE_RECENT = 8,
    ATT_GROUP = 64,
    GRAPH_MIN_STRIDE = 64, /* block-table entries per token in a graph step, at least */
    GRAPH_SLOTS = 8 /* graphs kept, one per key (token count), least recently used replaced */
};

/* A cached graph: its executable, the signature of the launches it holds (graph_sig.h) and its
 * staged copy, which a step must match to replay it without recording. */
typedef struct graph_slot {
    int key;
    void *exec;
    unsigned long used;
    unsigned char *sig; /* NULL: not known (a capture that ran out of memory writing it) */
    size_t sig_len, sig_cap;
    const void *up_src; /* the staged copy: up_bytes from pinned up_src to up_dst */
    void *up_dst;
    size_t up_bytes;
} graph_slot;

typedef struct upload {
    void *dev;
    size_t bytes;
} upload;

typedef struct dev_buf { /* device scratch that grows */
    void *p;
    size_t bytes;
} dev_buf;

struct sol_kv {
    int n_layers, num_blocks, block_size, kv_heads, head_dim, f16;
    size_t pool_bytes;
    void **pools;   /* host array: K of layer l at 2l, V at 2l + 1 (device pointers) */
    void **pools_d; /* the same array in device memory, for kv_copy_blocks */
    struct sol_kv *next;
};

typedef struct cuda_backend {
    sol_backend base;
    sol_cuda_dev *dev;
    sol_cuda_queue *stream; /* the launchers' queue: the stream and the graph signature */
    int strict;             /* refuse activations that are not device buffers */
    int sync_each;          /* SOL_CUDA_SYNC=1: wait after every op, so an error names its op */
    int batch_invariant;    /* never switch matmul kernels with n (sol_backend_opts) */
    const char *last_op;
    dev_buf qscratch, xh; /* GEMV quantized activations; the GEMM's F16 x */
    dev_buf xq;           /* the int8 GEMM's Q8_0 x (a whole prompt's) */
    dev_buf gemm_y;       /* matmul_add through the GEMM: the product before its add */
    dev_buf att_ws;       /* split attention's partial states */
    dev_buf amax_ws;      /* argmax_rows' counters (amax_rows of them, left zeroed), partials */
    dev_buf tail_ws;      /* the GEMV norm tail's counter (gemv_run_tail: left zeroed) */
    dev_buf qscratch2;    /* the gated product's activations made by the gate/up GEMV */
    dev_buf glu_cnt;      /* gemv_run_glu's counters, a zeroed int per block of a row */
    dev_buf mma_part;     /* split-K's partial tiles (k_mma.cu), sized once for the device */
    dev_buf mma_cnt;      /* split-K's tile counters, zeroed once and left zeroed */
    int amax_rows;
    /* Staging: host index arrays go up through one pinned buffer, each array once per step
     * (a copy whose bytes equal a recent one is reused: positions serve every layer's rope). */
    unsigned char *stage_h, *stage_d;
    size_t stage_cap, stage_used;
    /* Inside a capture nothing is sent per array: [stage_unsent, stage_used) goes up as one
     * copy at the head of the step's graph (end_capture). SIZE_MAX: nothing unsent. */
    size_t stage_unsent;
    struct {
        const void *host;
        size_t off, bytes;
    } recent[STAGE_RECENT];
    int n_recent, next_recent;
    int32_t *tables; /* host scratch: attention block tables as one n x stride array */
    size_t tables_cap;
    /* host scratch: rope's frequencies, positions (and slots) as one staged array; its address
     * stays while it is large enough, so every layer's identical copy is staged once */
    unsigned char *rope_blob;
    size_t rope_blob_cap;
    /* the frequencies of the last parameters staged (rope_key, rope_head_dim: 0 = none yet) */
    sol_rope_params rope_key;
    int rope_head_dim;
    double rope_freqs[SOL_CUDA_ROPE_MAX_PAIRS];
    upload *ups;
    int n_ups, cap_ups;
    sol_kv *kvs;
    /* CUDA graphs: a step_begin with a key opens a capture that synchronize closes and launches
     * (docs/backend.md, "CUDA graphs") */
    int graphs_on, capturing, key;
    /* A dry step (a cached graph for its key): launches are compared with dry_slot's signature
     * and run nothing; synchronize replays the graph, or asks for the step again, recorded
     * (force_capture). */
    int dry, force_capture;
    graph_slot *dry_slot;
    graph_slot graphs[GRAPH_SLOTS];
    unsigned long tick, steps, updated, instantiated, flushed, replayed_dry, dry_steps, reruns;
    /* Host time of whole graph steps (ns): recording (step_begin to synchronize: the launches
     * the capture replaces), closing (end capture, update or instantiate, launch) and dry steps
     * (step_begin to the replay's launch, or to the miss). */
    uint64_t capture_t0, record_ns, update_ns, instantiate_ns, dry_ns;
    unsigned long stage_copies;           /* host-to-device copies of staged index arrays */
    unsigned long mma_gemms, flash_calls; /* tensor-core launches: batch GEMMs, prefill attention */
    unsigned long mmq_gemms;              /* of the GEMMs, those on int8 tensor cores (k_mmq.cu) */
    unsigned long mma_launches; /* k_mma_gemm launches (a run of q/k/v or gate/up is one) */
    unsigned long mma_split;    /* of those, launches with split-K (mma_splits > 1) */
    int gemm_int8; /* SOL_CUDA_GEMM=int8: quantized batches on int8 tensor cores (k_mmq.cu) */
    unsigned long fused_normq, fused_glu; /* quantize launches that made their input: norm, glu */
    unsigned long fused_attq;    /* GEMVs that read the attention combine's Q8_0 (no quantize) */
    unsigned long fused_rope;    /* q/k/v GEMVs that roped and wrote the cache in their store */
    unsigned long fused_qk_norm; /* q/k norms, rope and the cache write as one launch */
    unsigned long gemm_x_reused; /* batch GEMMs that read the previous one's converted x */
    unsigned long fused_tail;    /* GEMVs that normalized and quantized their output (norm tail) */
    unsigned long tail_used;     /* GEMV groups that read a norm tail's activations */
    unsigned long fused_glu_end; /* gate/up GEMVs that made the gated product's activations */
    unsigned long glu_end_used;  /* down GEMVs that read them */
    /* Activations of x (n rows of k) for kind act that an op left in `scratch`: the attention
     * merge's (norm NULL), a GEMV's norm tail's (x normalized by norm, eps into xn), or the
     * gate/up GEMV's of the gated product (glu: 1 SiLU, 2 GELU; x the gate, up): made by the
     * op that just ran; prev, by the op before this one. Only the very next op may use them
     * (cbe_bind moves made to prev), so nothing written in between can leave them stale. */
    struct cbe_q8_note {
        const float *x, *up;
        int n, k, act, glu;
        const float *norm, *xn;
        float eps;
        int xn_made; /* the tail wrote xn too (float weights, or a second kind requantizes it) */
        void *scratch;
    } q8_made, q8_prev;
    /* next_input's hint: set by that op, handed by cbe_bind to the op after it (next_now) and
     * to no other */
    sol_next_in next_set, next_now;
    int next_off;  /* SOL_CUDA_NEXT_INPUT=0: hints ignored */
    int split_off; /* SOL_CUDA_SPLIT_K=0: batch GEMMs unsplit */
} cuda_backend;

static inline cuda_backend *cb(sol_backend *be) {
    return (cuda_backend *)be;
}

/* Every op starts here: the device becomes current on the calling thread (CUDA keeps it per
 * thread, and a rank's backend is driven from the engine's or its rank's thread, not the one
 * that opened it), before anything is launched or allocated. Cheap when it already is. */
static inline cuda_backend *cbe_bind(sol_backend *be) {
    cuda_backend *b = (cuda_backend *)be;
    SOL_CUDA_FN(dev_bind)(b->dev);
    b->q8_prev = b->q8_made;
    b->q8_made = (struct cbe_q8_note){0};
    b->next_now = b->next_set;
    b->next_set = (sol_next_in){0};
    return b;
}

/* A step recorded into a graph or compared with one: attention launches at the split cap and the
 * table stride is bucketed, so the launches of a decode step do not follow its context. */
static inline int cbe_graph_step(const cuda_backend *b) {
    return b->capturing || b->dry;
}

#define cbe_fail SOL_CUDA_FN(be_fail)
#define cbe_after SOL_CUDA_FN(be_after)
#define cbe_need_dev SOL_CUDA_FN(be_need_dev)
#define cbe_stage SOL_CUDA_FN(be_stage)
#define cbe_grow SOL_CUDA_FN(be_grow)
#define cbe_flush_capture SOL_CUDA_FN(be_flush_capture)
#define cbe_wait_quiet SOL_CUDA_FN(be_wait_quiet)
#define cbe_kv_free SOL_CUDA_FN(be_kv_free)
#define cbe_kv_alloc SOL_CUDA_FN(be_kv_alloc)
#define cbe_kv_write SOL_CUDA_FN(be_kv_write)
#define cbe_rope_kv_write SOL_CUDA_FN(be_rope_kv_write)
#define cbe_rope_args SOL_CUDA_FN(be_rope_args)
#define cbe_rope_stage SOL_CUDA_FN(be_rope_stage)
#define cbe_rope_kv_prepare SOL_CUDA_FN(be_rope_kv_prepare)
#define cbe_kv_copy_blocks SOL_CUDA_FN(be_kv_copy_blocks)
#define cbe_kv_host_io SOL_CUDA_FN(be_kv_host_io)
#define cbe_kv_host_bytes SOL_CUDA_FN(be_kv_host_bytes)
#define cbe_kv_host_alloc SOL_CUDA_FN(be_kv_host_alloc)
#define cbe_kv_host_free SOL_CUDA_FN(be_kv_host_free)
#define cbe_paged_attention SOL_CUDA_FN(be_paged_attention)

/* Sets be->err to "BE op: message" and returns rc. */
int cbe_fail(cuda_backend *b, int rc, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* After queuing op: a launch error now, or with SOL_CUDA_SYNC=1 the op's execution error. */
int cbe_after(cuda_backend *b, const char *op);
/* 0, or -EFAULT naming `what` when strict and [p, p + bytes) is not device memory. */
int cbe_need_dev(cuda_backend *b, const void *p, size_t bytes, const char *op, const char *what);
/* The device copy of host bytes (backend_cuda.c says for how long). */
const void *cbe_stage(cuda_backend *b, const void *host, size_t bytes, int *rc);
/* Grows d to at least need bytes (ending an open graph capture first). */
int cbe_grow(cuda_backend *b, dev_buf *d, size_t need, const char *op);
/* Ends an open capture and runs what it recorded; ops then run eagerly. */
int cbe_flush_capture(cuda_backend *b);
/* Waits for the stream; an error is left for the caller to word. */
int cbe_wait_quiet(cuda_backend *b);

/* The KV and attention ops (cuda_kv.c). */
void cbe_kv_free(sol_backend *be, sol_kv *kv);
sol_kv *cbe_kv_alloc(sol_backend *be, int n_layers, int num_blocks, int block_size, int n_kv_heads,
                     int head_dim, sol_dtype dtype);
/* rope's checks and the kernels' arguments from its parameters (backend_cuda.c). */
int cbe_rope_args(cuda_backend *b, const char *op, int heads, int head_dim,
                  const sol_rope_params *p);
int cbe_rope_stage(cuda_backend *b, const char *op, const sol_rope_params *p, int head_dim,
                   const int32_t *pos, const int32_t *slots, int n, sol_cuda_rope_args *a,
                   const int32_t **pos_d);
int cbe_rope_kv_prepare(cuda_backend *b, const char *op, sol_kv *kv, int layer, const float *q,
                        const float *k, const float *v, const int32_t *pos, const int32_t *slots,
                        int n, int heads, int kv_heads, int head_dim, const sol_rope_params *p,
                        sol_cuda_rope_epi *e);
int cbe_rope_kv_write(sol_backend *be, sol_kv *kv, int layer, float *q, float *k, const float *v,
                      const int32_t *pos, const int32_t *slots, int n, int heads, int kv_heads,
                      int head_dim, const sol_rope_params *p);
int cbe_kv_write(sol_backend *be, sol_kv *kv, int layer, const float *k, const float *v,
                 const int32_t *slots, int n);
int cbe_kv_copy_blocks(sol_backend *be, sol_kv *kv, const int32_t *src, const int32_t *dst,
                       int count);
/* The second KV tier (backend.h): one block's every layer K and V to or from page-locked host
 * memory, queued on the stream (no wait: stream order puts a spill before later writes to the
 * block and a restore before the attention that reads it). */
int cbe_kv_host_io(sol_backend *be, sol_kv *kv, int32_t block, void *host, int to_host);
size_t cbe_kv_host_bytes(sol_backend *be, const sol_kv *kv);
void *cbe_kv_host_alloc(sol_backend *be, size_t bytes);
void cbe_kv_host_free(sol_backend *be, void *host);
int cbe_paged_attention(sol_backend *be, sol_kv *kv, int layer, const float *q, float *out, int n,
                        int heads, int kv_heads, int head_dim, float scale, int window,
                        const float *sinks, const sol_attn_seq *seq);

#endif
