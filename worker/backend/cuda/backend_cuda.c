/* backend_cuda: the ops table on a CUDA device: weights uploaded once, activations and KV in
 * device memory, index arrays staged through pinned memory, kernels queued on one stream.
 *
 * One source, two builds: with nvcc's runtime (cuda_rt.cu) it is the "cuda" backend; with
 * SOL_CUDA_EMU (cuda_rt_emu.cc and the kernels as host C++) it is "cuda-emu", so CI runs this
 * very code, pointer discipline included, without a GPU. docs/backend.md, "The CUDA backend". */
#include "backend_cuda.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda_internal.h"
#include "clock.h"
#include "rope_freq.h"

/* The kernels' bound on a head's pairs (shared memory) is the host rule's. */
_Static_assert(SOL_CUDA_ROPE_MAX_PAIRS == SOL_ROPE_MAX_PAIRS, "one bound for rope's pairs");

/* ---- errors and pointer checks ---- */

int cbe_fail(cuda_backend *b, int rc, const char *op, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sol_err_set(&b->base.err, rc, BE " %s: %s", op, msg);
}

/* After queuing op: a launch error now, or with sync_each the op's execution error. */
int cbe_after(cuda_backend *b, const char *op) {
    char why[256] = "";
    b->last_op = op;
    int rc = SOL_CUDA_FN(dev_last_error)(b->dev, why, sizeof why);
    if (!rc && b->sync_each) rc = SOL_CUDA_FN(dev_sync)(b->dev, why, sizeof why);
    return rc ? cbe_fail(b, rc, op, "%s", why) : 0;
}

int cbe_need_dev(cuda_backend *b, const void *p, size_t bytes, const char *op, const char *what) {
    if (!p) return cbe_fail(b, -EINVAL, op, "%s is NULL", what);
    if (b->strict && !SOL_CUDA_FN(dev_owns)(b->dev, p, bytes))
        return cbe_fail(b, -EFAULT, op,
                        "%s (%zu bytes) is not inside a device buffer: pass memory from buf_alloc "
                        "(and weights through weight_prepare)",
                        what, bytes);
    return 0;
}

/* ---- CUDA graphs ---- */

/* The slot for a capture of `key`: its own, else the least recently used one, whose executable
 * stays as the target that the capture updates in place (cudaGraphExecUpdate) when it can. */
static graph_slot *graph_for(cuda_backend *b, int key) {
    graph_slot *lru = &b->graphs[0];
    for (int i = 0; i < GRAPH_SLOTS; i++) {
        if (b->graphs[i].key == key && b->graphs[i].exec) return &b->graphs[i];
        if (b->graphs[i].used < lru->used) lru = &b->graphs[i];
    }
    lru->key = key, lru->sig_len = 0, lru->used = 0;
    return lru;
}

/* The cached graph a step of `key` may replay without recording: NULL when none. */
static graph_slot *graph_replayable(cuda_backend *b, int key) {
    for (int i = 0; i < GRAPH_SLOTS; i++)
        if (b->graphs[i].key == key && b->graphs[i].exec && b->graphs[i].sig_len)
            return &b->graphs[i];
    return NULL;
}

/* After a whole capture: g's graph is the step's, so its signature and staged copy are too (the
 * signature's buffer is swapped, not copied). A signature that ran out of memory is dropped. */
static void graph_keep_sig(cuda_backend *b, graph_slot *g, const void *up_src, void *up_dst,
                           size_t up) {
    sol_graph_sig *s = &b->stream->sig;
    unsigned char *buf = g->sig;
    size_t cap = g->sig_cap;
    g->sig = s->buf, g->sig_cap = s->cap, g->sig_len = s->miss ? 0 : s->len;
    s->buf = buf, s->cap = cap, s->len = 0;
    g->up_src = up_src, g->up_dst = up_dst, g->up_bytes = up;
}

/* Closes an open capture and launches what it recorded (the step so far); ops then run eagerly
 * until the next step_begin. Everything that waits for the stream or allocates calls this
 * first: a capture must never see those. */
static int end_capture(cuda_backend *b, int whole) {
    if (!b->capturing) return 0;
    b->capturing = 0;
    b->stream->sig.mode = SOL_SIG_OFF;
    /* A step cut short runs as a throwaway graph: the cached one stays the whole step's. */
    void *tmp = NULL, **exec = &tmp;
    graph_slot *g = NULL;
    if (whole) {
        g = graph_for(b, b->key);
        g->used = ++b->tick;
        exec = &g->exec;
    }
    size_t from = b->stage_unsent, up = from < b->stage_used ? b->stage_used - from : 0;
    b->stage_unsent = SIZE_MAX;
    char why[256] = "";
    uint64_t t1 = sol_now_ns();
    int how = 0, rc = SOL_CUDA_FN(dev_capture_end_launch)(
                     b->dev, b->stage_d + from, b->stage_h + from, up, exec, &how, why, sizeof why);
    if (whole) {
        b->record_ns += t1 - b->capture_t0;
        *(how == 1 ? &b->update_ns : &b->instantiate_ns) += sol_now_ns() - t1;
        if (!rc) graph_keep_sig(b, g, b->stage_h + from, b->stage_d + from, up);
    }
    if (!whole) SOL_CUDA_FN(dev_graph_free)(b->dev, tmp); /* freed once it has run */
    if (rc) return sol_err_set(&b->base.err, rc, BE " graph: %s", why);
    b->stage_copies += up > 0;
    b->steps++;
    if (how == 1) b->updated++;
    if (how == 2) b->instantiated++;
    return 0;
}

/* A dry step's end. Its launches matched the cached graph's, byte for byte and to the end, and
 * its staged arrays fill the same range of the ring: the graph is launched as it stands (its
 * head copy sends this step's arrays). Else nothing ran, and SOL_STEP_RERUN asks the caller to
 * run the step again, which step_begin then records. */
static int end_dry(cuda_backend *b) {
    sol_graph_sig *s = &b->stream->sig;
    graph_slot *g = b->dry_slot;
    size_t from = b->stage_unsent, up = from < b->stage_used ? b->stage_used - from : 0;
    int hit = !s->miss && s->at == s->ref_len && up == g->up_bytes &&
              (!up || (g->up_src == b->stage_h + from && g->up_dst == b->stage_d + from));
    b->dry = 0, s->mode = SOL_SIG_OFF, b->stage_unsent = SIZE_MAX;
    b->dry_steps++;
    b->dry_ns += sol_now_ns() - b->capture_t0; /* the host's part: the launch is the GPU's */
    if (!hit) {
        b->force_capture = 1, b->reruns++;
        return SOL_STEP_RERUN;
    }
    g->used = ++b->tick;
    char why[256] = "";
    int rc = SOL_CUDA_FN(dev_graph_launch)(b->dev, g->exec, why, sizeof why);
    if (rc) return sol_err_set(&b->base.err, rc, BE " graph: %s", why);
    b->stage_copies += up > 0;
    b->steps++, b->replayed_dry++;
    return 0;
}

/* In a dry step nothing has run, so there is nothing to end: the step cannot replay (its
 * launches are not all in the signature, or a buffer moved) and will be run again. */
int cbe_flush_capture(cuda_backend *b) {
    if (b->dry) {
        b->stream->sig.miss = 1;
        return 0;
    }
    if (b->capturing) b->flushed++;
    return end_capture(b, 0);
}

/* A GEMM, copy or all-reduce of a graph step written into the signature with its operands, as
 * SOL_LAUNCH does for kernels: 1 when it must not run (a dry step). */
static int note_op(cuda_backend *b, int what, const uint64_t *vals, size_t count) {
    if (!sol_sig_begin(b->stream, what)) return 0;
    sol_sig_put(&b->stream->sig, vals, sizeof *vals * count);
    return sol_sig_dry(b->stream);
}

/* ---- staging of host index arrays ---- */

static int stage_grow(cuda_backend *b, size_t need) {
    char why[256] = "";
    int rc = cbe_flush_capture(b);
    if (rc) return rc;
    rc = SOL_CUDA_FN(dev_sync)(b->dev, why, sizeof why); /* queued copies read the old ones */
    if (rc) return cbe_fail(b, rc, "stage", "%s", why);
    size_t cap = b->stage_cap ? b->stage_cap : 64 * 1024;
    while (cap < need)
        cap *= 2;
    SOL_CUDA_FN(dev_host_free)(b->dev, b->stage_h);
    SOL_CUDA_FN(dev_free)(b->dev, b->stage_d);
    b->stage_h = SOL_CUDA_FN(dev_host_malloc)(b->dev, cap);
    b->stage_d = SOL_CUDA_FN(dev_malloc)(b->dev, cap);
    b->stage_cap = b->stage_h && b->stage_d ? cap : 0;
    b->stage_used = 0, b->n_recent = 0, b->next_recent = 0;
    return b->stage_cap ? 0 : cbe_fail(b, -ENOMEM, "stage", "no memory for %zu staging bytes", cap);
}

/* The device copy of `bytes` of host memory, valid until the next synchronize or the next
 * cbe_stage() call (which may cbe_grow the ring: one op stages one array). Eager ops get one
 * copy per array; a captured step one copy for all (end_capture). The same array
 * (same address, same bytes) staged again in one step is not sent again; matching on the
 * address as well keeps a step's copies the same from one step to the next, as a replayed CUDA
 * graph needs (equal bytes of different arrays come and go). */
const void *cbe_stage(cuda_backend *b, const void *host, size_t bytes, int *rc) {
    *rc = 0;
    for (int i = 0; i < b->n_recent; i++)
        if (b->recent[i].host == host && b->recent[i].bytes == bytes &&
            !memcmp(b->stage_h + b->recent[i].off, host, bytes))
            return b->stage_d + b->recent[i].off;
    size_t off = (b->stage_used + 63) / 64 * 64;
    if (off + bytes > b->stage_cap) {
        if ((*rc = stage_grow(b, 2 * bytes))) return NULL;
        off = 0;
    }
    memcpy(b->stage_h + off, host, bytes);
    if (cbe_graph_step(b)) {
        if (b->stage_unsent == SIZE_MAX) b->stage_unsent = off;
    } else if ((*rc = SOL_CUDA_FN(dev_copy)(b->dev, b->stage_d + off, b->stage_h + off, bytes,
                                            SOL_CUDA_H2D))) {
        cbe_fail(b, *rc, "stage", "copy of %zu bytes to the device failed", bytes);
        return NULL;
    } else {
        b->stage_copies++;
    }
    b->stage_used = off + bytes;
    b->recent[b->next_recent].host = host;
    b->recent[b->next_recent].off = off, b->recent[b->next_recent].bytes = bytes;
    b->next_recent = (b->next_recent + 1) % STAGE_RECENT;
    if (b->n_recent < STAGE_RECENT) b->n_recent++;
    return b->stage_d + off;
}

/* Waits for the stream; an error is left for the caller to word. */
int cbe_wait_quiet(cuda_backend *b) {
    char why[256];
    return SOL_CUDA_FN(dev_sync)(b->dev, why, sizeof why);
}

int cbe_grow(cuda_backend *b, dev_buf *d, size_t need, const char *op) {
    if (need <= d->bytes) return 0;
    char why[256] = "";
    int rc = cbe_flush_capture(b);
    if (rc) return rc;
    /* cudaFree waits for the device: wait first, against the rank group's deadline, so a
     * collective stuck on a dead peer fails the op instead of hanging it in cudaFree. */
    if (d->p && (rc = SOL_CUDA_FN(dev_sync)(b->dev, why, sizeof why)))
        return cbe_fail(b, rc, op, "%s", why);
    SOL_CUDA_FN(dev_free)(b->dev, d->p);
    d->p = SOL_CUDA_FN(dev_malloc)(b->dev, need);
    d->bytes = d->p ? need : 0;
    return d->p ? 0
                : cbe_fail(b, -ENOMEM, op, "out of device memory for %zu bytes of scratch", need);
}

/* ---- weights ---- */

static size_t weight_dev_bytes(const sol_weight *w) {
    return sol_cuda_weight_bytes((int)w->type, (int)w->rows, (int)w->cols, w->row_bytes);
}

/* The kernels' view of a checked weight. */
static sol_cuda_wt wt_of(const sol_weight *w) {
    return (sol_cuda_wt){w->data,      w->row_bytes,
                         (int)w->type, w->layout == SOL_CUDA_LAYOUT_SPLIT,
                         (int)w->rows, (int)w->cols};
}

static int type_ok(sol_dtype t) {
    switch (t) {
    case SOL_DT_F32:
    case SOL_DT_F16:
    case SOL_DT_BF16:
    case SOL_DT_Q8_0:
    case SOL_DT_Q4_0:
    case SOL_DT_Q5_0:
    case SOL_DT_Q5_1:
    case SOL_DT_Q4_K:
    case SOL_DT_Q5_K:
    case SOL_DT_Q6_K:
    case SOL_DT_MXFP4:
        return 1;
    default:
        return 0;
    }
}

/* A prepared weight's layout: the one its type needs on the device (cuda_layout.h), split for
 * Q4_0/Q5_0/Q8_0/Q6_K and ggml rows otherwise, and its bytes inside a device allocation. */
static int check_layout(cuda_backend *b, const sol_weight *w, const char *op) {
    int split = sol_cuda_split_part((int)w->type) != 0;
    if (w->layout != (split ? SOL_CUDA_LAYOUT_SPLIT : 0u)) {
        if (split && w->layout == 0)
            return cbe_fail(b, -EINVAL, op,
                            "a %s weight must go through weight_prepare first (the CUDA backend "
                            "keeps it in its split layout)",
                            sol_dtype_name(w->type));
        return cbe_fail(b, -EINVAL, op, "weight layout %u is not the CUDA backend's for %s",
                        w->layout, sol_dtype_name(w->type));
    }
    return cbe_need_dev(b, w->data, weight_dev_bytes(w) - SOL_CUDA_WEIGHT_SLACK, op,
                        "the weight's data");
}

/* Type and shape, before any layout question. */
static int check_shape(cuda_backend *b, const sol_weight *w, const char *op) {
    if (!w || !w->data) return cbe_fail(b, -EINVAL, op, "weight has no data");
    if (!type_ok(w->type))
        return cbe_fail(
            b, -ENOTSUP, op,
            "weight type %s (%u) is not supported (expected f32, f16, bf16, q8_0, q4_0, q5_0, "
            "q5_1, q4_k, q5_k, q6_k or mxfp4)",
            sol_dtype_name(w->type), (unsigned)w->type);
    if (w->rows <= 0 || w->cols <= 0)
        return cbe_fail(b, -EINVAL, op, "weight shape %lld x %lld is empty", (long long)w->rows,
                        (long long)w->cols);
    size_t per = sol_dtype_block_elems(w->type), bb = sol_dtype_block_bytes(w->type);
    if (w->cols % (int64_t)per != 0)
        return cbe_fail(b, -EINVAL, op,
                        "weight has %lld columns, expected a multiple of %zu for %s",
                        (long long)w->cols, per, sol_dtype_name(w->type));
    if (w->row_bytes < (size_t)w->cols / per * bb)
        return cbe_fail(b, -EINVAL, op, "row_bytes %zu is too small for %s", w->row_bytes,
                        sol_dtype_name(w->type));
    /* rows read in place are read in 16- or 32-bit words; a split type's are repacked (MXFP4's
     * 17-byte blocks make odd rows) */
    if (!sol_cuda_split_part((int)w->type) &&
        (w->type == SOL_DT_F32 ? w->row_bytes % 4 : w->row_bytes % 2))
        return cbe_fail(b, -EINVAL, op, "row_bytes %zu is not a multiple of the %s element",
                        w->row_bytes, sol_dtype_name(w->type));
    return 0;
}

static int check_weight(cuda_backend *b, const sol_weight *w, const char *op) {
    int rc = check_shape(b, w, op);
    return rc ? rc : check_layout(b, w, op);
}

/* By device address only: host memory may be freed and its address reused for other bytes. */
static upload *find_upload(cuda_backend *b, const void *p) {
    for (int i = 0; i < b->n_ups; i++)
        if (b->ups[i].dev == p) return &b->ups[i];
    return NULL;
}

/* Copies the rows to the device and points w at them; a struct that already points at an
 * upload (tied embeddings copy the prepared token_embd) stays as it is. */
static int cuda_weight_prepare(sol_backend *be, sol_weight *w) {
    cuda_backend *b = cbe_bind(be);
    if (cbe_flush_capture(b)) return b->base.err.code;
    int strict = b->strict;
    b->strict = 0; /* the host bytes are what is being uploaded */
    /* ggml rows from the host, or (layout set) a copy of a weight already prepared here */
    int rc = check_shape(b, w, "weight_prepare");
    if (!rc && w->layout) rc = check_layout(b, w, "weight_prepare");
    b->strict = strict;
    if (rc) return rc;
    if (find_upload(b, w->data)) return 0;
    if (w->layout)
        return cbe_fail(b, -EINVAL, "weight_prepare",
                        "the weight is in the CUDA layout but was not uploaded by this backend");
    if (b->n_ups == b->cap_ups) {
        int c = b->cap_ups ? 2 * b->cap_ups : 64;
        upload *a = realloc(b->ups, sizeof *a * (size_t)c);
        if (!a) return cbe_fail(b, -ENOMEM, "weight_prepare", "out of host memory");
        b->ups = a, b->cap_ups = c;
    }
    /* Split types are packed on the host first (cuda_layout.h), then copied like the others. */
    int split = sol_cuda_split_part((int)w->type) != 0;
    size_t row_bytes = split ? sol_dtype_row_bytes(w->type, w->cols) : w->row_bytes;
    sol_weight nw = *w;
    nw.row_bytes = row_bytes, nw.layout = split ? SOL_CUDA_LAYOUT_SPLIT : 0;
    size_t bytes = weight_dev_bytes(&nw);
    void *host = NULL;
    if (split) {
        if (!(host = malloc(bytes)))
            return cbe_fail(b, -ENOMEM, "weight_prepare", "out of host memory");
        sol_cuda_split_pack((int)w->type, w->data, w->row_bytes, (int)w->rows, (int)w->cols, host);
    }
    void *d = SOL_CUDA_FN(dev_malloc)(b->dev, bytes);
    if (!d) {
        free(host);
        return cbe_fail(b, -ENOMEM, "weight_prepare",
                        "out of device memory for a %lld x %lld %s weight (%.1f MiB)",
                        (long long)w->rows, (long long)w->cols, sol_dtype_name(w->type),
                        bytes / 1048576.0);
    }
    char why[256] = "";
    size_t copy = split ? bytes : w->row_bytes * (size_t)w->rows;
    rc = SOL_CUDA_FN(dev_copy)(b->dev, d, split ? host : w->data, copy, SOL_CUDA_H2D);
    if (!rc) rc = SOL_CUDA_FN(dev_sync)(b->dev, why, sizeof why);
    free(host);
    if (rc) {
        SOL_CUDA_FN(dev_free)(b->dev, d);
        return cbe_fail(b, rc, "weight_prepare", "upload failed: %s", why);
    }
    b->ups[b->n_ups++] = (upload){d, bytes};
    nw.data = d;
    *w = nw;
    return 0;
}

/* ---- buffers ---- */

static void *cuda_buf_alloc(sol_backend *be, size_t bytes) {
    cuda_backend *b = cbe_bind(be);
    if (cbe_flush_capture(b)) return NULL;
    void *p = SOL_CUDA_FN(dev_malloc)(b->dev, bytes);
    if (!p) cbe_fail(b, -ENOMEM, "buf_alloc", "out of device memory for %zu bytes", bytes);
    return p;
}

static void cuda_buf_free(sol_backend *be, void *buf) {
    cuda_backend *b = cbe_bind(be);
    cbe_flush_capture(b);
    SOL_CUDA_FN(dev_free)(b->dev, buf);
}

static int cuda_upload(sol_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_backend *b = cbe_bind(be);
    char why[256] = "";
    int rc = cbe_flush_capture(b);
    if (rc) return rc;
    rc = cbe_need_dev(b, dst, bytes, "upload", "the destination");
    if (!rc && bytes) rc = SOL_CUDA_FN(dev_copy)(b->dev, dst, src, bytes, SOL_CUDA_H2D);
    if (!rc) rc = SOL_CUDA_FN(dev_sync)(b->dev, why, sizeof why);
    return rc && !b->base.err.code ? cbe_fail(b, rc, "upload", "%s", why) : rc;
}

static int cuda_download(sol_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_backend *b = cbe_bind(be);
    char why[256] = "";
    int rc = cbe_flush_capture(b);
    if (rc) return rc;
    rc = cbe_need_dev(b, src, bytes, "download", "the source");
    if (!rc && bytes) rc = SOL_CUDA_FN(dev_copy)(b->dev, dst, src, bytes, SOL_CUDA_D2H);
    if (!rc) rc = SOL_CUDA_FN(dev_sync)(b->dev, why, sizeof why);
    return rc && !b->base.err.code ? cbe_fail(b, rc, "download", "%s", why) : rc;
}

/* ---- matmul ---- */

/* dev_gemm, written into a graph step's signature first (not run in a dry step). */
static int gemm(cuda_backend *b, int bf16, const void *w, const void *x, float *y, int M, int n,
                int K, int ldy, char *why, size_t cap) {
    const uint64_t v[] = {(uint64_t)bf16, (uintptr_t)w, (uintptr_t)x, (uintptr_t)y,
                          (uint64_t)M,    (uint64_t)n,  (uint64_t)K,  (uint64_t)ldy};
    if (note_op(b, SOL_SIG_GEMM, v, sizeof v / sizeof *v)) return 0;
    return SOL_CUDA_FN(dev_gemm)(b->dev, bf16, w, x, y, M, n, K, ldy, why, cap);
}

/* The int8 GEMM (k_mmq.cu) for the weights it takes (mmq_act): x quantized once as the GEMV's
 * (xq, n x K, grown on first use), exact integer dots per block, the add in its store. */
static int matmul_mmq(cuda_backend *b, const sol_weight *w, const float *x, float *y, int n,
                      int add, int reuse) {
    int M = (int)w->rows, K = (int)w->cols, rc, act = SOL_CUDA_FN(mmq_act)((int)w->type);
    if (!reuse && (rc = cbe_grow(b, &b->xq, SOL_CUDA_FN(gemv_scratch_bytes)(n, K), "matmul")))
        return rc;
    b->mma_gemms++, b->mmq_gemms++;
    if ((!reuse && (rc = SOL_CUDA_FN(gemv_quantize)(act, x, n, K, b->xq.p, b->stream))) ||
        (rc = SOL_CUDA_FN(mmq_gemm)(wt_of(w), b->xq.p, y, n, M, add, b->stream)))
        return cbe_fail(b, rc, "matmul",
                        "%s weights of %d columns: refused by the int8 tensor-core GEMM (the "
                        "uploaded layout, columns a multiple of the type's block)",
                        sol_dtype_name(w->type), K);
    return cbe_after(b, "matmul");
}

/* y (+)= x W^T for a batch (prefill). Under SOL_CUDA_GEMM=int8 quantized weights take the int8
 * GEMMs (matmul_mmq; mmq_act says which activations); otherwise x is rounded to half once (n x K,
 * grown on first use): F16 and BF16 weights multiply in place through cuBLASLt (x rounded to the
 * weight's type: it takes one input type; an add goes through the gemm_y scratch and the add
 * kernel), quantized ones on Sol's F16 tensor-core kernel (k_mma.cu), which dequantizes tiles in
 * shared memory and adds in its store: no F16 copy of a matrix is written. */
/* What x becomes for weight w's GEMM: Q8 activations of a kind (int8 path, 10 + mmq_act), or
 * half of a kind (BF16 for BF16 weights, else F16): weights of one input kind in a row of
 * matmul_many read one conversion of x. */
static int gemm_input(const cuda_backend *b, const sol_weight *w) {
    int act = SOL_CUDA_FN(mmq_act)((int)w->type);
    if (b->gemm_int8 && act != SOL_CUDA_ACT_FLOAT) return 10 + act;
    return w->type == SOL_DT_BF16;
}

static int mma_many(cuda_backend *b, const sol_weight *const *ws, float *const *ys, int k, int n,
                    int add);

/* reuse: x was converted for this input kind by the previous call of the same matmul_many. */
static int matmul_gemm(cuda_backend *b, const sol_weight *w, const float *x, float *y, int n,
                       int add, int reuse) {
    int M = (int)w->rows, K = (int)w->cols, rc;
    if (gemm_input(b, w) >= 10) return matmul_mmq(b, w, x, y, n, add, reuse);
    if (!reuse && (rc = cbe_grow(b, &b->xh, (size_t)n * (size_t)K * 2, "matmul"))) return rc;
    int half = w->type == SOL_DT_F16 || w->type == SOL_DT_BF16;
    int bf16 = w->type == SOL_DT_BF16;
    if (!reuse) SOL_CUDA_FN(to_half)(x, b->xh.p, (int64_t)n * K, bf16, b->stream);
    if (!half) return mma_many(b, &w, &y, 1, n, add);
    float *out = y;
    if (add && (rc = cbe_grow(b, &b->gemm_y, sizeof(float) * (size_t)n * (size_t)M, "matmul")))
        return rc;
    if (add) out = b->gemm_y.p;
    char why[256] = "";
    if ((rc = gemm(b, bf16, w->data, b->xh.p, out, M, n, K, M, why, sizeof why)))
        return cbe_fail(b, rc, "matmul", "%s", why);
    if (add) SOL_CUDA_FN(add)(y, out, y, (int64_t)n * M, b->stream);
    return cbe_after(b, "matmul");
}

/* The prefill GEMM for n tokens (tensor cores) or the GEMV kernels. Float weights (test models)
 * stay on the GEMV kernels, which sum as the CPU does. */
static int use_gemm(const cuda_backend *b, const sol_weight *w, int n) {
    return !b->batch_invariant && n >= GEMM_MIN_TOKENS && w->type != SOL_DT_F32;
}

/* The run of weights from ws[0] on that k_mma_gemm takes in one launch (matmul_many's q/k/v,
 * gate/up): up to three quantized weights of one K on the F16 half x; 0 or 1: no run. */
static int mma_run(const cuda_backend *b, const sol_weight *const *ws, int count, int n) {
    int k = 0;
    while (k < count && k < 3 && use_gemm(b, ws[k], n) && gemm_input(b, ws[k]) == 0 &&
           ws[k]->type != SOL_DT_F16 && ws[k]->type != SOL_DT_BF16 && ws[k]->cols == ws[0]->cols)
        k++;
    return k;
}

/* Split-K for a k_mma_gemm launch (mma_splits: from the shapes and the SM count; none under
 * SOL_CUDA_SPLIT_K=0). The workspace is sized once for the device's bound, not for the launch (a
 * growth inside a captured step cuts its capture short), and its counters are zeroed when new:
 * every launch leaves them zeroed. */
static int mma_split_of(cuda_backend *b, const sol_cuda_wt *wt, int k, int n,
                        sol_cuda_mma_split *sp) {
    int sms = SOL_CUDA_FN(dev_sm_count)(b->dev), rc;
    *sp = (sol_cuda_mma_split){.splits = b->split_off ? 1 : SOL_CUDA_FN(mma_splits)(wt, k, n, sms)};
    if (sp->splits < 2) return 0;
    size_t had = b->mma_cnt.bytes;
    if ((rc = cbe_grow(b, &b->mma_part, sizeof(float) * SOL_CUDA_FN(mma_split_floats)(sms),
                       "matmul")) ||
        (rc = cbe_grow(b, &b->mma_cnt, sizeof(int) * (size_t)SOL_CUDA_FN(mma_split_counters)(sms),
                       "matmul")))
        return rc;
    if (b->mma_cnt.bytes != had &&
        (rc = SOL_CUDA_FN(dev_memset)(b->dev, b->mma_cnt.p, 0, b->mma_cnt.bytes)))
        return cbe_fail(b, rc, "matmul", "could not zero the split-K counters");
    sp->part = b->mma_part.p, sp->cnt = b->mma_cnt.p;
    sp->floats = b->mma_part.bytes / sizeof(float);
    sp->counters = (int)(b->mma_cnt.bytes / sizeof(int));
    return 0;
}

/* A run's k weights on the half x already in xh (mma_run; one weight from matmul_gemm, where
 * add may be set): one k_mma_gemm launch, each tile's bits those of one launch per weight with
 * the run's split-K. */
static int mma_many(cuda_backend *b, const sol_weight *const *ws, float *const *ys, int k, int n,
                    int add) {
    sol_cuda_wt wt[3];
    sol_cuda_mma_split sp;
    int ldy[3], rc;
    for (int i = 0; i < k; i++)
        wt[i] = wt_of(ws[i]), ldy[i] = (int)ws[i]->rows;
    if ((rc = mma_split_of(b, wt, k, n, &sp))) return rc;
    b->mma_gemms += (unsigned long)k;
    rc = SOL_CUDA_FN(mma_gemm_many)(wt, ys, ldy, k, b->xh.p, n, add, &sp, b->stream);
    if (rc > 0) {
        b->mma_launches += (unsigned long)rc;
        if (sp.splits > 1) b->mma_split += (unsigned long)rc;
        rc = 0;
    }
    if (rc)
        return cbe_fail(b, rc, "matmul",
                        "%d weight(s) of %lld columns (%s first): refused by the tensor-core "
                        "GEMM (a quantized type in the uploaded layout, columns a multiple of "
                        "32)",
                        k, (long long)ws[0]->cols, sol_dtype_name(ws[0]->type));
    return cbe_after(b, "matmul");
}

/* What a GEMV group reads: x as it is; x normalized (norm: RMSNorm weights, eps; the normalized
 * rows go to xn on the way, for float weights and a second activation kind); or the gated
 * product act(x) * up (glu; gelu picks GELU over SiLU), made where it is quantized. */
typedef struct gemv_in {
    const float *x, *norm, *up;
    float eps;
    float *xn;
    int glu, gelu;
} gemv_in;

/* The first quantization of token group [t0, t0 + cnt) for act, with the input's prologue in
 * the same launch; a later kind requantizes the normalized rows. */
static int gemv_prologue(cuda_backend *b, const gemv_in *in, int first, int act, int t0, int cnt,
                         int K) {
    size_t off = (size_t)t0 * (size_t)K;
    void *q = b->qscratch.p;
    if (in->glu) {
        b->fused_glu++;
        return SOL_CUDA_FN(gemv_glu_quantize)(act, in->gelu, in->x + off, in->up + off, cnt, K, q,
                                              b->stream);
    }
    if (!in->norm) return SOL_CUDA_FN(gemv_quantize)(act, in->x + off, cnt, K, q, b->stream);
    if (!first) return SOL_CUDA_FN(gemv_quantize)(act, in->xn + off, cnt, K, q, b->stream);
    /* Float weights read xn itself; in place (xn == x), the one-launch kernel cannot run: each of
     * its blocks reads the whole row while the others write their slices. */
    if (act == SOL_CUDA_ACT_FLOAT || in->xn == in->x) {
        SOL_CUDA_FN(rmsnorm)(in->x + off, in->norm, in->xn + off, cnt, K, in->eps, b->stream);
        if (act == SOL_CUDA_ACT_FLOAT) return 0;
        return SOL_CUDA_FN(gemv_quantize)(act, in->xn + off, cnt, K, q, b->stream);
    }
    b->fused_normq++;
    return SOL_CUDA_FN(gemv_norm_quantize)(act, in->x + off, in->norm, in->eps, in->xn + off, cnt,
                                           K, q, b->stream);
}

/* Whether the op just before this one (the attention merge, a GEMV's norm tail, the gate/up
 * GEMV's gated product) made x's activations for act (and xn its normalized rows) for these n
 * rows of K (one group: n <= SOL_CUDA_GEMV_MAX_TOKENS), from the same input: the same norm, or
 * the same gate, up and activation. */
static int have_q8(const cuda_backend *b, const gemv_in *in, int act, int n, int K, int kinds) {
    const struct cbe_q8_note *p = &b->q8_prev;
    if (!p->x || act != p->act || in->x != p->x || n != p->n || K != p->k) return 0;
    if (in->glu) return p->glu == 1 + in->gelu && p->up == in->up;
    return !p->glu && in->norm == p->norm &&
           (!in->norm || (in->eps == p->eps && in->xn == p->xn && (kinds == 1 || p->xn_made)));
}

/* The gated product's activations the gate/up GEMV may make (gemv_run_glu): next_input said
 * that ys[0] and ys[1] are next read as act(gate) * up by w (glu_matmul_add), so the warp that
 * completes each block of rows quantizes it into qscratch2 (the GEMV reads x from qscratch) and
 * the down projection skips its quantize launch. 0: not here (as tail_plan). */
static int glu_plan(cuda_backend *b, const sol_weight *const *ws, int count, int n,
                    sol_cuda_glu_tail *t) {
    const sol_next_in *ni = &b->next_now;
    if (!ni->glu || ni->norm || !ni->w || count != 2 || n > SOL_CUDA_GEMV_MAX_TOKENS ||
        ws[0]->rows != ws[1]->rows || ni->w->cols != ws[0]->rows || !type_ok(ni->w->type) ||
        use_gemm(b, ni->w, n))
        return 0;
    int act = SOL_CUDA_FN(gemv_act)((int)ni->w->type), rows = (int)ws[0]->rows;
    int blk = act == SOL_CUDA_ACT_Q8_K ? 256 : act == SOL_CUDA_ACT_Q8_0 ? 32 : 0;
    if (!blk || rows % blk) return 0;
    size_t had = b->glu_cnt.bytes, cnt = sizeof(int) * (size_t)(rows / 32);
    if (cbe_grow(b, &b->qscratch2, SOL_CUDA_FN(gemv_scratch_bytes)(SOL_CUDA_GEMV_MAX_TOKENS, rows),
                 "matmul") ||
        cbe_grow(b, &b->glu_cnt, cnt, "matmul"))
        return 0;
    /* the counters, zeroed when new: every launch leaves them at 0 */
    if (b->glu_cnt.bytes != had &&
        SOL_CUDA_FN(dev_memset)(b->dev, b->glu_cnt.p, 0, b->glu_cnt.bytes))
        return 0;
    *t = (sol_cuda_glu_tail){
        .act = act, .gelu = ni->glu == 2, .scratch = b->qscratch2.p, .cnt = b->glu_cnt.p};
    return 1;
}

/* The norm tail matmul_gemv may give a matmul_add (gemv_run_tail): next_input said that y's rows
 * are next normalized and read by a weight, so the GEMV's last block makes that (act: the
 * weight's activation kind, into qscratch; the rows into xn) and the reading op skips its norm
 * launch. 0: not here (another shape, several groups, a hint that does not fit; the reading op
 * then makes it as ever). */
static int tail_plan(cuda_backend *b, const sol_weight *w, const float *y, int n,
                     sol_cuda_norm_tail *t) {
    const sol_next_in *ni = &b->next_now;
    if (!ni->w || !ni->norm || ni->glu || !ni->xn || ni->xn == y ||
        n > SOL_CUDA_NORM_TAIL_MAX_TOKENS || ni->w->cols != w->rows || !type_ok(ni->w->type) ||
        use_gemm(b, ni->w, n))
        return 0;
    int act = SOL_CUDA_FN(gemv_act)((int)ni->w->type), dim = (int)w->rows;
    size_t rows = sizeof(float) * (size_t)n * (size_t)dim;
    if (dim % (act == SOL_CUDA_ACT_Q8_K   ? 256
               : act == SOL_CUDA_ACT_Q8_0 ? 32
                                          : 1) ||
        (b->strict && (!SOL_CUDA_FN(dev_owns)(b->dev, ni->xn, rows) ||
                       !SOL_CUDA_FN(dev_owns)(b->dev, ni->norm, rows / (size_t)n))))
        return 0;
    if (!b->tail_ws.p) { /* the counter, zeroed once: every launch leaves it at 0 */
        if (cbe_grow(b, &b->tail_ws, 16, "matmul") ||
            SOL_CUDA_FN(dev_memset)(b->dev, b->tail_ws.p, 0, b->tail_ws.bytes))
            return 0;
    }
    /* xn is written only where float weights read it; a reading group of quantized weights
     * of two kinds then requantizes xn itself (have_q8) */
    *t = (sol_cuda_norm_tail){.norm = ni->norm,
                              .eps = ni->eps,
                              .xn = act == SOL_CUDA_ACT_FLOAT ? ni->xn : NULL,
                              .act = act,
                              .scratch = b->qscratch.p,
                              .cnt = b->tail_ws.p};
    return 1;
}

/* Tokens in groups of SOL_CUDA_GEMV_MAX_TOKENS (a token's sums never depend on its group); per
 * group, x is quantized once for each activation kind the weights take (gemv_act), so q/k/v
 * (and gate/up) share one quantization (made with the input's norm or gated product in the same
 * launch, gemv_prologue), then each weight's GEMV reads it and adds its bias (bs[i], bs may be
 * NULL) in its store. */
/* Weights of one activation kind handed to one gemv_run_many call (it launches them in threes). */
#define SOL_CUDA_GEMV_RUN 8

static int matmul_gemv(cuda_backend *b, const sol_weight *const *ws, const float *const *bs,
                       float *const *ys, int count, const gemv_in *in, int n, int add,
                       const int *roles, const sol_cuda_rope_epi *epi) {
    int K = (int)ws[0]->cols, Kq = K > ws[0]->rows ? K : (int)ws[0]->rows;
    /* sized for the norm tail's activations too (a matmul_add's output rows) */
    int rc =
        cbe_grow(b, &b->qscratch,
                 SOL_CUDA_FN(gemv_scratch_bytes)(SOL_CUDA_GEMV_MAX_TOKENS, add ? Kq : K), "matmul");
    if (rc) return rc;
    sol_cuda_norm_tail tail;
    sol_cuda_glu_tail gt;
    int tailed =
        add && count == 1 && !roles && (!bs || !bs[0]) && tail_plan(b, ws[0], ys[0], n, &tail);
    int glued = !add && !roles && glu_plan(b, ws, count, n, &gt);
    const float *src = in->norm ? in->xn : in->x; /* what float weights and requantizing read */
    int kinds = 1;
    for (int i = 1; i < count; i++)
        kinds +=
            SOL_CUDA_FN(gemv_act)((int)ws[i]->type) != SOL_CUDA_FN(gemv_act)((int)ws[i - 1]->type);
    for (int t0 = 0; t0 < n; t0 += SOL_CUDA_GEMV_MAX_TOKENS) {
        int cnt = n - t0 < SOL_CUDA_GEMV_MAX_TOKENS ? n - t0 : SOL_CUDA_GEMV_MAX_TOKENS, have = -1;
        for (int i = 0, j; i < count; i = j) {
            int act = SOL_CUDA_FN(gemv_act)((int)ws[i]->type);
            void *qs = b->qscratch.p; /* where this run's activations are */
            if (have == -1 && have_q8(b, in, act, n, K, kinds)) { /* the op before made them */
                qs = b->q8_prev.scratch;
                if (in->glu)
                    b->glu_end_used++; /* the gate/up GEMV made the gated product's */
                else if (in->norm)
                    b->tail_used++; /* the GEMV before made the norm and x's activations */
                else
                    b->fused_attq++; /* the attention merge quantized x on its way out */
            } else if (act != have)  /* again only when the kind changes along the list */
                rc = gemv_prologue(b, in, have == -1, act, t0, cnt, K);
            have = act;
            /* the run of weights of this kind: one quantized x, launched together */
            sol_cuda_wt wts[SOL_CUDA_GEMV_RUN];
            float *out[SOL_CUDA_GEMV_RUN];
            const float *bias[SOL_CUDA_GEMV_RUN];
            int role[SOL_CUDA_GEMV_RUN];
            for (j = i; j < count && j - i < SOL_CUDA_GEMV_RUN &&
                        SOL_CUDA_FN(gemv_act)((int)ws[j]->type) == act;
                 j++) {
                wts[j - i] = wt_of(ws[j]);
                out[j - i] = ys[j] + (size_t)t0 * ws[j]->rows;
                bias[j - i] = bs ? bs[j] : NULL;
                role[j - i] = roles ? roles[j] : SOL_CUDA_EPI_NONE;
            }
            glued &= j - i == 2; /* gate and up in one run, else no gated product is made */
            if (!rc && tailed)
                rc =
                    SOL_CUDA_FN(gemv_run_tail)(wts[0], src, out[0], cnt, qs, add, &tail, b->stream);
            else if (!rc && glued)
                rc = SOL_CUDA_FN(gemv_run_glu)(wts, out, bias, src, cnt, qs, &gt, b->stream);
            else if (!rc)
                rc = SOL_CUDA_FN(gemv_run_epi)(wts, out, bias, roles ? role : NULL, j - i,
                                               src + (size_t)t0 * K, cnt, qs, add, epi, b->stream);
            if (rc)
                return cbe_fail(b, rc, "matmul",
                                "%s weights of %d columns, %d tokens: refused (the GEMV kernels "
                                "take 1..%d tokens and a multiple of 32 columns, 256 for K-quants)",
                                sol_dtype_name(ws[i]->type), K, cnt, SOL_CUDA_GEMV_MAX_TOKENS);
        }
    }
    if (tailed) { /* what the reading op will find made (have_q8) */
        b->fused_tail++;
        b->q8_made = (struct cbe_q8_note){.x = ys[0],
                                          .n = n,
                                          .k = (int)ws[0]->rows,
                                          .act = tail.act,
                                          .norm = tail.norm,
                                          .xn = b->next_now.xn,
                                          .eps = tail.eps,
                                          .xn_made = tail.xn != NULL,
                                          .scratch = tail.scratch};
    }
    if (glued) {
        b->fused_glu_end++;
        b->q8_made = (struct cbe_q8_note){.x = ys[0],
                                          .up = ys[1],
                                          .n = n,
                                          .k = (int)ws[0]->rows,
                                          .act = gt.act,
                                          .glu = 1 + gt.gelu,
                                          .scratch = gt.scratch};
    }
    return cbe_after(b, "matmul");
}

static int cuda_matmul(sol_backend *be, const sol_weight *w, const float *x, float *y, int n) {
    cuda_backend *b = cbe_bind(be);
    int rc = check_weight(b, w, "matmul");
    if (rc) return rc;
    if (n <= 0) return cbe_fail(b, -EINVAL, "matmul", "need n >= 1 tokens, got n=%d", n);
    if ((rc = cbe_need_dev(b, x, sizeof(float) * (size_t)n * (size_t)w->cols, "matmul", "x")) ||
        (rc = cbe_need_dev(b, y, sizeof(float) * (size_t)n * (size_t)w->rows, "matmul", "y")))
        return rc;
    if (use_gemm(b, w, n)) return matmul_gemm(b, w, x, y, n, 0, 0);
    return matmul_gemv(b, &w, NULL, &y, 1, &(gemv_in){.x = x}, n, 0, NULL, NULL);
}

/* y += x W^T: the GEMV adds in its epilogue (one launch fewer per block output); the GEMM
 * writes the product to a scratch that the add kernel then adds, as sol_matmul_add would. */
static int matmul_add_in(cuda_backend *b, const sol_weight *w, const float *x, float *y, int n) {
    int rc = check_weight(b, w, "matmul_add");
    if (rc) return rc;
    if (n <= 0) return cbe_fail(b, -EINVAL, "matmul_add", "need n >= 1 tokens, got n=%d", n);
    size_t ny = (size_t)n * (size_t)w->rows;
    if ((rc = cbe_need_dev(b, x, sizeof(float) * (size_t)n * (size_t)w->cols, "matmul_add", "x")) ||
        (rc = cbe_need_dev(b, y, sizeof(float) * ny, "matmul_add", "y")))
        return rc;
    if (!use_gemm(b, w, n))
        return matmul_gemv(b, &w, NULL, &y, 1, &(gemv_in){.x = x}, n, 1, NULL, NULL);
    return matmul_gemm(b, w, x, y, n, 1, 0);
}

static int cuda_matmul_add(sol_backend *be, const sol_weight *w, const float *x, float *y, int n) {
    return matmul_add_in(cbe_bind(be), w, x, y, n);
}

static int cuda_matmul_many(sol_backend *be, const sol_weight *const *ws, float *const *ys,
                            int count, const float *x, int n) {
    cuda_backend *b = cbe_bind(be);
    if (count < 1 || !ws || !ys)
        return cbe_fail(b, -EINVAL, "matmul_many", "need weights, got %d", count);
    for (int i = 0; i < count; i++) {
        int rc = check_weight(b, ws[i], "matmul_many");
        if (rc) return rc;
        if (ws[i]->cols != ws[0]->cols)
            return cbe_fail(b, -EINVAL, "matmul_many",
                            "weight %d has %lld columns, weight 0 has %lld", i,
                            (long long)ws[i]->cols, (long long)ws[0]->cols);
    }
    int gemv = 1;
    for (int i = 0; i < count; i++)
        gemv = gemv && !use_gemm(b, ws[i], n);
    if (!gemv || n <= 0) {
        /* x converted once for each run of weights of one input kind (as the GEMV path
         * quantizes it once per kind): q/k/v and gate/up share it */
        for (int i = 0, k; i < count; i += k) {
            int rc, reuse = i > 0 && use_gemm(b, ws[i - 1], n) && use_gemm(b, ws[i], n) &&
                            gemm_input(b, ws[i - 1]) == gemm_input(b, ws[i]);
            k = use_gemm(b, ws[i], n) ? mma_run(b, ws + i, count - i, n) : 0;
            k = k > 1 ? k : 1; /* a run of quantized weights: one conversion, one launch */
            if (!use_gemm(b, ws[i], n)) {
                rc = cuda_matmul(be, ws[i], x, ys[i], n);
            } else if (!(rc = cbe_need_dev(b, x, sizeof(float) * (size_t)n * (size_t)ws[i]->cols,
                                           "matmul_many", "x"))) {
                for (int j = i; j < i + k && !rc; j++)
                    rc = cbe_need_dev(b, ys[j], sizeof(float) * (size_t)n * (size_t)ws[j]->rows,
                                      "matmul_many", "y");
                b->gemm_x_reused += (unsigned long)(reuse + k - 1);
                if (!rc && k == 1) rc = matmul_gemm(b, ws[i], x, ys[i], n, 0, reuse);
                if (!rc && k > 1 && !reuse) {
                    size_t nk = (size_t)n * (size_t)ws[i]->cols;
                    if (!(rc = cbe_grow(b, &b->xh, nk * 2, "matmul_many")))
                        SOL_CUDA_FN(to_half)(x, b->xh.p, (int64_t)nk, 0, b->stream);
                }
                if (!rc && k > 1) rc = mma_many(b, ws + i, ys + i, k, n, 0);
            }
            if (rc) return rc;
        }
        return 0;
    }
    int rc =
        cbe_need_dev(b, x, sizeof(float) * (size_t)n * (size_t)ws[0]->cols, "matmul_many", "x");
    for (int i = 0; i < count && !rc; i++)
        rc = cbe_need_dev(b, ys[i], sizeof(float) * (size_t)n * (size_t)ws[i]->rows, "matmul_many",
                          "y");
    return rc ? rc : matmul_gemv(b, ws, NULL, ys, count, &(gemv_in){.x = x}, n, 0, NULL, NULL);
}

/* norm_matmul_many's operands (backend.h) checked for op; *gemv: every weight takes the GEMV. */
static int norm_many_check(cuda_backend *b, const char *op, const float *x, const float *norm,
                           float *xn, const sol_weight *const *ws, const float *const *bs,
                           float *const *ys, int count, int n, int *gemv) {
    if (count < 1 || !ws || !ys) return cbe_fail(b, -EINVAL, op, "need weights, got %d", count);
    if (n <= 0) return cbe_fail(b, -EINVAL, op, "need n >= 1 tokens, got n=%d", n);
    int rc = 0;
    size_t xb = sizeof(float) * (size_t)n * (size_t)ws[0]->cols;
    *gemv = 1;
    for (int i = 0; i < count && !rc; i++) {
        if ((rc = check_weight(b, ws[i], op))) return rc;
        if (ws[i]->cols != ws[0]->cols)
            return cbe_fail(b, -EINVAL, op, "weight %d has %lld columns, weight 0 has %lld", i,
                            (long long)ws[i]->cols, (long long)ws[0]->cols);
        *gemv = *gemv && !use_gemm(b, ws[i], n);
        rc = cbe_need_dev(b, ys[i], sizeof(float) * (size_t)n * (size_t)ws[i]->rows, op, "y");
        if (!rc && bs && bs[i])
            rc = cbe_need_dev(b, bs[i], sizeof(float) * (size_t)ws[i]->rows, op, "a bias");
    }
    if (!rc) rc = cbe_need_dev(b, x, xb, op, "x");
    if (!rc && norm) rc = cbe_need_dev(b, xn, xb, op, "xn");
    if (!rc && norm) rc = cbe_need_dev(b, norm, xb / (size_t)n, op, "the norm's weights");
    return rc;
}

/* ys[i] = rmsnorm(x) ws[i]^T + bs[i]: on the GEMV path the norm and the quantization are one
 * launch per token group and the biases are added in the GEMVs' store; on the GEMM path (or with
 * float weights first) the norm writes xn and each bias is one broadcast add. */
static int norm_matmul_many_in(cuda_backend *b, const float *x, const float *norm, float eps,
                               float *xn, const sol_weight *const *ws, const float *const *bs,
                               float *const *ys, int count, int n) {
    sol_backend *be = &b->base;
    const char *op = "norm_matmul_many";
    int gemv, rc = norm_many_check(b, op, x, norm, xn, ws, bs, ys, count, n, &gemv);
    if (rc) return rc;
    if (gemv) {
        gemv_in in = {.x = x, .norm = norm, .eps = eps, .xn = xn};
        return matmul_gemv(b, ws, bs, ys, count, &in, n, 0, NULL, NULL);
    }
    int K = (int)ws[0]->cols, one_half = norm != NULL;
    for (int i = 0; i < count; i++) /* every weight on the GEMM, reading F16 half */
        one_half = one_half && use_gemm(b, ws[i], n) && gemm_input(b, ws[i]) == 0;
    if (one_half) { /* the norm made where x is rounded to half, once for the group */
        if ((rc = cbe_grow(b, &b->xh, (size_t)n * (size_t)K * 2, op))) return rc;
        SOL_CUDA_FN(to_half_norm)(x, norm, b->xh.p, n, K, eps, 0, b->stream);
        b->fused_normq++;
        for (int i = 0, k; i < count && !rc; i += k) {
            k = mma_run(b, ws + i, count - i, n);
            k = k > 1 ? k : 1; /* a run of quantized weights: one launch */
            b->gemm_x_reused += (unsigned long)(i > 0 ? k : k - 1);
            rc = k > 1 ? mma_many(b, ws + i, ys + i, k, n, 0)
                       : matmul_gemm(b, ws[i], x, ys[i], n, 0, 1);
        }
        if (rc) return rc;
    } else {
        if (norm) SOL_CUDA_FN(rmsnorm)(x, norm, xn, n, K, eps, b->stream);
        if ((rc = cuda_matmul_many(be, ws, ys, count, norm ? xn : x, n))) return rc;
    }
    for (int i = 0; i < count && bs; i++)
        if (bs[i]) SOL_CUDA_FN(add_rows)(ys[i], bs[i], n, (int)ws[i]->rows, b->stream);
    return cbe_after(b, op);
}

static int cuda_norm_matmul_many(sol_backend *be, const float *x, const float *norm, float eps,
                                 float *xn, const sol_weight *const *ws, const float *const *bs,
                                 float *const *ys, int count, int n) {
    return norm_matmul_many_in(cbe_bind(be), x, norm, eps, xn, ws, bs, ys, count, n);
}

/* norm_matmul_many of q/k/v, then rope_kv_write (backend.h): on the GEMV path (one token group)
 * the rope and the cache write happen in the projections' store (gemv_run_epi: one launch
 * fewer per layer), else the two ops. */
static int cuda_qkv_rope_kv(sol_backend *be, const float *x, const float *norm, float eps,
                            float *xn, const sol_weight *const *ws, const float *const *bs,
                            float *const *ys, int n, const sol_qkv_rope *r) {
    cuda_backend *b = cbe_bind(be);
    const char *op = "qkv_rope_kv";
    sol_cuda_rope_epi e;
    int gemv, rc = norm_many_check(b, op, x, norm, xn, ws, bs, ys, 3, n, &gemv);
    if (rc) return rc;
    /* the projections' rows must be the heads rope_kv_write is told of */
    int hd = r->head_dim;
    if (ws[0]->rows != (int64_t)r->heads * hd || ws[1]->rows != (int64_t)r->kv_heads * hd ||
        ws[2]->rows != ws[1]->rows)
        return cbe_fail(b, -EINVAL, op,
                        "q/k/v weights of %lld/%lld/%lld rows for %d heads and %d KV heads of %d",
                        (long long)ws[0]->rows, (long long)ws[1]->rows, (long long)ws[2]->rows,
                        r->heads, r->kv_heads, hd);
    if (!r->q_norm != !r->k_norm)
        return cbe_fail(b, -EINVAL, op, "a per-head norm for %s only", r->q_norm ? "q" : "k");
    if (r->q_norm) { /* the projections, then the norms, rope and the cache in one launch */
        if ((rc = norm_matmul_many_in(b, x, norm, eps, xn, ws, bs, ys, 3, n)) ||
            (rc = cbe_rope_kv_prepare(b, op, r->kv, r->layer, ys[0], ys[1], ys[2], r->pos, r->slots,
                                      n, r->heads, r->kv_heads, hd, r->rope, &e)) ||
            (rc = cbe_need_dev(b, r->q_norm, sizeof(float) * (size_t)hd, op, "q_norm")) ||
            (rc = cbe_need_dev(b, r->k_norm, sizeof(float) * (size_t)hd, op, "k_norm")))
            return rc;
        SOL_CUDA_FN(qk_norm_rope_kv)
        (ys[0], ys[1], ys[2], e.pos_slots, n, r->heads, r->kv_heads, hd, e.p, r->q_norm, r->k_norm,
         r->eps, e.k_pool, e.v_pool, e.f16, b->stream);
        b->fused_qk_norm++;
        return cbe_after(b, op);
    }
    if (!gemv || n > SOL_CUDA_GEMV_MAX_TOKENS) {
        rc = norm_matmul_many_in(b, x, norm, eps, xn, ws, bs, ys, 3, n);
        return rc ? rc
                  : cbe_rope_kv_write(be, r->kv, r->layer, ys[0], ys[1], ys[2], r->pos, r->slots, n,
                                      r->heads, r->kv_heads, hd, r->rope);
    }
    if ((rc = cbe_rope_kv_prepare(b, op, r->kv, r->layer, ys[0], ys[1], ys[2], r->pos, r->slots, n,
                                  r->heads, r->kv_heads, hd, r->rope, &e)))
        return rc;
    static const int roles[3] = {SOL_CUDA_EPI_ROPE, SOL_CUDA_EPI_ROPE_KV, SOL_CUDA_EPI_KV};
    gemv_in in = {.x = x, .norm = norm, .eps = eps, .xn = xn};
    b->fused_rope++;
    return matmul_gemv(b, ws, bs, ys, 3, &in, n, 0, roles, &e);
}

/* y += (act(gate) * up) W^T: on the GEMV path of a quantized weight the product is made where it
 * is quantized (no f32 product written); else silu_mul/gelu_mul into glu, then matmul_add. */
static int cuda_glu_matmul_add(sol_backend *be, const sol_weight *w, const float *gate,
                               const float *up, int gelu, float *glu, float *y, int n) {
    cuda_backend *b = cbe_bind(be);
    const char *op = "glu_matmul_add";
    int rc = check_weight(b, w, op);
    if (rc) return rc;
    if (n <= 0) return cbe_fail(b, -EINVAL, op, "need n >= 1 tokens, got n=%d", n);
    size_t xb = sizeof(float) * (size_t)n * (size_t)w->cols;
    if ((rc = cbe_need_dev(b, gate, xb, op, "gate")) || (rc = cbe_need_dev(b, up, xb, op, "up")) ||
        (rc = cbe_need_dev(b, y, sizeof(float) * (size_t)n * (size_t)w->rows, op, "y")))
        return rc;
    if (!use_gemm(b, w, n) && SOL_CUDA_FN(gemv_act)((int)w->type) != SOL_CUDA_ACT_FLOAT) {
        gemv_in in = {.x = gate, .up = up, .glu = 1, .gelu = gelu};
        return matmul_gemv(b, &w, NULL, &y, 1, &in, n, 1, NULL, NULL);
    }
    int K = (int)w->cols, kind = use_gemm(b, w, n) ? gemm_input(b, w) : -1;
    if (kind == 0) { /* the gated product made where x is rounded to half */
        if ((rc = cbe_grow(b, &b->xh, (size_t)n * (size_t)K * 2, op))) return rc;
        SOL_CUDA_FN(to_half_glu)(gate, up, b->xh.p, (int64_t)n * K, gelu, 0, b->stream);
        b->fused_glu++;
        return matmul_gemm(b, w, gate, y, n, 1, 1);
    }
    if (kind >= 10) { /* ... or where it is quantized for the int8 GEMM */
        if ((rc = cbe_grow(b, &b->xq, SOL_CUDA_FN(gemv_scratch_bytes)(n, K), op))) return rc;
        if ((rc = SOL_CUDA_FN(gemv_glu_quantize)(kind - 10, gelu, gate, up, n, K, b->xq.p,
                                                 b->stream)))
            return cbe_fail(b, rc, op, "the gated product's quantization was refused");
        b->fused_glu++;
        return matmul_gemm(b, w, gate, y, n, 1, 1);
    }
    if ((rc = cbe_need_dev(b, glu, xb, op, "glu"))) return rc;
    if (gelu)
        SOL_CUDA_FN(gelu_mul)(gate, up, glu, (int64_t)n * w->cols, b->stream);
    else
        SOL_CUDA_FN(silu_mul)(gate, up, glu, (int64_t)n * w->cols, b->stream);
    return matmul_add_in(b, w, glu, y, n);
}

/* next_input (backend.h): kept for the op after this one only. No cbe_bind: this call is no op
 * of the stream's, so the notes of what the op before it made stay for the op after it. */
static int cuda_next_input(sol_backend *be, const sol_next_in *ni) {
    cuda_backend *b = cb(be);
    b->next_set = ni && !b->next_off ? *ni : (sol_next_in){0};
    return 0;
}

static int cuda_reserve(sol_backend *be, int max_tokens, int64_t max_dim) {
    cuda_backend *b = cbe_bind(be);
    if (max_tokens < 1 || max_dim < 1) return 0;
    size_t q = SOL_CUDA_FN(gemv_scratch_bytes)(SOL_CUDA_GEMV_MAX_TOKENS, (int)max_dim);
    /* The GEMM's F16 copy of x (n x K, at most tens of MiB) comes on first use: max_dim may be
     * the vocabulary, an M no x ever has as K. */
    return cbe_grow(b, &b->qscratch, q, "reserve");
}

/* ---- elementwise, norm, rope, embed ---- */

static int cuda_rmsnorm(sol_backend *be, const float *x, const float *w, float *out, int n, int dim,
                        float eps) {
    cuda_backend *b = cbe_bind(be);
    if (n < 0 || dim <= 0)
        return cbe_fail(b, -EINVAL, "rmsnorm", "expected n >= 0 and dim > 0, got %d, %d", n, dim);
    size_t bytes = sizeof(float) * (size_t)n * (size_t)dim;
    int rc;
    if (n == 0) return 0;
    if ((rc = cbe_need_dev(b, x, bytes, "rmsnorm", "x")) ||
        (rc = cbe_need_dev(b, out, bytes, "rmsnorm", "out")) ||
        (rc = cbe_need_dev(b, w, sizeof(float) * (size_t)dim, "rmsnorm", "the norm weight")))
        return rc;
    SOL_CUDA_FN(rmsnorm)(x, w, out, n, dim, eps, b->stream);
    return cbe_after(b, "rmsnorm");
}

/* rope's parameters checked (op names the caller). */
int cbe_rope_args(cuda_backend *b, const char *op, int heads, int head_dim,
                  const sol_rope_params *p) {
    if (heads <= 0 || head_dim <= 0 || head_dim % 2 || head_dim > 2 * SOL_ROPE_MAX_PAIRS || !p ||
        p->freq_base <= 0)
        return cbe_fail(b, -EINVAL, op,
                        "expected heads > 0, even head_dim <= %d and freq_base > 0, got heads=%d "
                        "head_dim=%d",
                        2 * SOL_ROPE_MAX_PAIRS, heads, head_dim);
    if (p->scaling_factor > 0 && p->orig_ctx > 0 && p->high_freq_factor <= p->low_freq_factor)
        return cbe_fail(b, -EINVAL, op,
                        "llama-3 scaling needs high_freq_factor > low_freq_factor, got %g and %g",
                        p->high_freq_factor, p->low_freq_factor);
    return 0;
}

/* The kernels' rope arguments for checked parameters: the head's frequencies (rope_freq.h, the
 * CPU backend's own), then n positions and, with slots, n slots, staged as one array (a second
 * cbe_stage() may grow the ring and free the first's copy); *pos_d: the staged positions. */
int cbe_rope_stage(cuda_backend *b, const char *op, const sol_rope_params *p, int head_dim,
                   const int32_t *pos, const int32_t *slots, int n, sol_cuda_rope_args *a,
                   const int32_t **pos_d) {
    size_t fb = sizeof(double) * (size_t)(head_dim / 2);
    size_t bytes = fb + sizeof(int32_t) * (size_t)n * (slots ? 2 : 1);
    if (bytes > b->rope_blob_cap) {
        unsigned char *nb = realloc(b->rope_blob, bytes);
        if (!nb) return cbe_fail(b, -ENOMEM, op, "out of host memory");
        b->rope_blob = nb, b->rope_blob_cap = bytes;
    }
    /* the frequencies only when the parameters change (every layer of a model stages the same
     * ones: 64 pow() a layer otherwise, on the host's path of every step) */
    if (b->rope_head_dim != head_dim || memcmp(&b->rope_key, p, sizeof *p)) {
        sol_rope_inv_freqs(p, head_dim, b->rope_freqs);
        b->rope_key = *p, b->rope_head_dim = head_dim;
    }
    memcpy(b->rope_blob, b->rope_freqs, fb);
    memcpy(b->rope_blob + fb, pos, sizeof(int32_t) * (size_t)n);
    if (slots) memcpy(b->rope_blob + fb + sizeof(int32_t) * (size_t)n, slots, sizeof(int32_t) * n);
    int rc;
    const unsigned char *d = cbe_stage(b, b->rope_blob, bytes, &rc);
    if (rc) return rc;
    *a = (sol_cuda_rope_args){(const double *)d, p->mscale > 0.0f ? p->mscale : 1.0f, p->neox};
    *pos_d = (const int32_t *)(d + fb);
    return 0;
}

static int cuda_rope(sol_backend *be, float *x, const int32_t *pos, int n, int heads, int head_dim,
                     const sol_rope_params *p) {
    cuda_backend *b = cbe_bind(be);
    sol_cuda_rope_args a;
    const int32_t *pos_d;
    int rc = cbe_rope_args(b, "rope", heads, head_dim, p);
    if (rc || n <= 0) return rc;
    if ((rc = cbe_need_dev(b, x, sizeof(float) * (size_t)n * heads * head_dim, "rope", "x")) ||
        (rc = cbe_rope_stage(b, "rope", p, head_dim, pos, NULL, n, &a, &pos_d)))
        return rc;
    SOL_CUDA_FN(rope)(x, pos_d, n, heads, head_dim, a, b->stream);
    return cbe_after(b, "rope");
}

/* Checks the three operands of an elementwise op (b may be NULL). */
static int ew_check(cuda_backend *b, const float *x, const float *y, const float *out, int64_t n,
                    const char *op) {
    size_t bytes = sizeof(float) * (size_t)(n > 0 ? n : 0);
    if (n < 0) return cbe_fail(b, -EINVAL, op, "negative element count %lld", (long long)n);
    int rc = cbe_need_dev(b, x, bytes, op, "the first input");
    if (!rc && y) rc = cbe_need_dev(b, y, bytes, op, "the second input");
    if (!rc) rc = cbe_need_dev(b, out, bytes, op, "out");
    return rc;
}

static int cuda_silu_mul(sol_backend *be, const float *g, const float *u, float *o, int64_t n) {
    cuda_backend *b = cbe_bind(be);
    int rc = ew_check(b, g, u, o, n, "silu_mul");
    if (rc || !n) return rc;
    SOL_CUDA_FN(silu_mul)(g, u, o, n, b->stream);
    return cbe_after(b, "silu_mul");
}

static int cuda_gelu_mul(sol_backend *be, const float *g, const float *u, float *o, int64_t n) {
    cuda_backend *b = cbe_bind(be);
    int rc = ew_check(b, g, u, o, n, "gelu_mul");
    if (rc || !n) return rc;
    SOL_CUDA_FN(gelu_mul)(g, u, o, n, b->stream);
    return cbe_after(b, "gelu_mul");
}

static int cuda_swiglu_oai(sol_backend *be, const float *g, const float *u, float *o, int64_t n,
                           float alpha, float limit) {
    cuda_backend *b = cbe_bind(be);
    int rc = ew_check(b, g, u, o, n, "swiglu_oai");
    if (rc || !n) return rc;
    SOL_CUDA_FN(swiglu_oai)(g, u, o, n, alpha, limit, b->stream);
    return cbe_after(b, "swiglu_oai");
}

static int cuda_scale(sol_backend *be, const float *x, float s, float *o, int64_t n) {
    cuda_backend *b = cbe_bind(be);
    int rc = ew_check(b, x, NULL, o, n, "scale");
    if (rc || !n) return rc;
    SOL_CUDA_FN(scale)(x, s, o, n, b->stream);
    return cbe_after(b, "scale");
}

static int cuda_add(sol_backend *be, const float *a, const float *y, float *o, int64_t n) {
    cuda_backend *b = cbe_bind(be);
    int rc = ew_check(b, a, y, o, n, "add");
    if (rc || !n) return rc;
    SOL_CUDA_FN(add)(a, y, o, n, b->stream);
    return cbe_after(b, "add");
}

/* The rows and weights are staged as one array (a second cbe_stage may grow the ring and free
 * the first's copy). */
static int cuda_moe_combine(sol_backend *be, const float *src, int64_t width, const int32_t *rows,
                            const float *w, int n, int k, int64_t src_rows, float *out) {
    cuda_backend *b = cbe_bind(be);
    const char *op = "moe_combine";
    if (width <= 0 || n < 0 || k < 1)
        return cbe_fail(b, -EINVAL, op, "width %lld, n %d, k %d", (long long)width, n, k);
    size_t nk = (size_t)n * (size_t)k, row = sizeof(float) * (size_t)width;
    for (size_t i = 0; i < nk; i++)
        if (rows[i] < 0 || rows[i] >= src_rows)
            return cbe_fail(b, -EINVAL, op, "row %zu is %d, outside [0, %lld)", i, rows[i],
                            (long long)src_rows);
    if (!n) return 0;
    int rc;
    if ((rc = cbe_need_dev(b, src, row * (size_t)src_rows, op, "src")) ||
        (rc = cbe_need_dev(b, out, row * (size_t)n, op, "out")))
        return rc;
    int32_t *rw = malloc(sizeof(int32_t) * 2 * nk);
    if (!rw) return cbe_fail(b, -ENOMEM, op, "out of memory");
    memcpy(rw, rows, sizeof(int32_t) * nk);
    memcpy(rw + nk, w, sizeof(float) * nk);
    const int32_t *rw_d = cbe_stage(b, rw, sizeof(int32_t) * 2 * nk, &rc);
    free(rw);
    if (rc) return rc;
    rc = SOL_CUDA_FN(moe_combine)(src, width, rw_d, n, k, out, b->stream);
    return rc ? cbe_fail(b, rc, op, "bad shape") : cbe_after(b, op);
}

static int cuda_embed(sol_backend *be, const sol_weight *table, const int32_t *ids, int n,
                      float *out) {
    cuda_backend *b = cbe_bind(be);
    int rc = check_weight(b, table, "embed");
    if (rc) return rc;
    for (int t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= table->rows)
            return cbe_fail(b, -EINVAL, "embed", "token %d has id %d outside [0, %lld)", t, ids[t],
                            (long long)table->rows);
    if (n <= 0) return 0;
    if ((rc =
             cbe_need_dev(b, out, sizeof(float) * (size_t)n * (size_t)table->cols, "embed", "out")))
        return rc;
    const int32_t *ids_d = cbe_stage(b, ids, sizeof(int32_t) * (size_t)n, &rc);
    if (rc) return rc;
    rc = SOL_CUDA_FN(embed)(wt_of(table), ids_d, n, out, b->stream);
    return rc ? cbe_fail(b, rc, "embed", "%s tables are not read", sol_dtype_name(table->type))
              : cbe_after(b, "embed");
}

static int cuda_get_rows(sol_backend *be, const float *src, int64_t width, const int32_t *rows,
                         int n, int64_t src_rows, float *dst) {
    cuda_backend *b = cbe_bind(be);
    size_t row = sizeof(float) * (size_t)width;
    int rc;
    if (width <= 0 || n < 0)
        return cbe_fail(b, -EINVAL, "get_rows", "width %lld and n %d", (long long)width, n);
    for (int i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= src_rows)
            return cbe_fail(b, -EINVAL, "get_rows", "row %d is %d, outside [0, %lld)", i, rows[i],
                            (long long)src_rows);
    if (n == 0) return 0;
    if ((rc = cbe_need_dev(b, src, row * (size_t)src_rows, "get_rows", "src")) ||
        (rc = cbe_need_dev(b, dst, row * (size_t)n, "get_rows", "dst")))
        return rc;
    for (int i = 0; i < n && !rc; i++) {
        float *to = dst + (size_t)i * width;
        const float *from = src + (size_t)rows[i] * width;
        const uint64_t v[] = {(uintptr_t)to, (uintptr_t)from, row};
        if (!note_op(b, SOL_SIG_COPY, v, sizeof v / sizeof *v))
            rc = SOL_CUDA_FN(dev_copy)(b->dev, to, from, row, SOL_CUDA_D2D);
    }
    return rc ? cbe_fail(b, rc, "get_rows", "device copy failed") : cbe_after(b, "get_rows");
}

/* The greedy token of each row on the device (k_argmax.cu): a chunk a block, the row's partials
 * merged by its last block, in a workspace sized for the rows and the width (grown once: a growth
 * inside a captured step cuts the capture short) whose counters are zeroed when it is new. */
static int cuda_argmax_rows(sol_backend *be, const float *x, int n, int64_t width, int32_t *ids,
                            float *vals) {
    cuda_backend *b = cbe_bind(be);
    const char *op = "argmax_rows";
    if (width <= 0 || width > INT32_MAX || n < 0)
        return cbe_fail(b, -EINVAL, op, "width %lld and n %d", (long long)width, n);
    if (n == 0) return 0;
    int rc, chunks = SOL_CUDA_FN(argmax_chunks)(width);
    if ((rc = cbe_need_dev(b, x, sizeof(float) * (size_t)n * (size_t)width, op, "x")) ||
        (rc = cbe_need_dev(b, ids, sizeof(int32_t) * (size_t)n, op, "ids")) ||
        (rc = cbe_need_dev(b, vals, sizeof(float) * (size_t)n, op, "vals")))
        return rc;
    /* [a counter per row, for amax_rows rows][partials]: the counters keep their place while n
     * fits, so a launch finds them at zero where the last one left them */
    size_t part = (size_t)n * (size_t)chunks, had = b->amax_ws.bytes;
    int rows = n > b->amax_rows ? (n > 64 ? n : 64) : b->amax_rows;
    size_t need = sizeof(int) * (size_t)rows + part * (sizeof(float) + sizeof(int));
    if (rows != b->amax_rows) had = 0; /* the counters move: zero them again */
    if ((rc = cbe_grow(b, &b->amax_ws, need, op))) return rc;
    b->amax_rows = rows;
    int *cnt = b->amax_ws.p, *ws_id = cnt + rows;
    float *ws_v = (float *)(ws_id + part);
    if (b->amax_ws.bytes != had && SOL_CUDA_FN(dev_memset)(b->dev, cnt, 0, sizeof(int) * rows))
        return cbe_fail(b, -EIO, op, "could not zero the row counters");
    SOL_CUDA_FN(argmax_rows)(x, n, (long long)width, ws_v, ws_id, cnt, ids, vals, b->stream);
    return cbe_after(b, op);
}

/* ---- the rest ---- */

/* Tensor parallelism: the rank's sum over its group, on the stream. The first call of a group
 * makes the NCCL communicator and waits for every rank, so it must not sit inside a capture. */
static int cuda_allreduce(sol_backend *be, sol_tp_comm *comm, int rank, float *x, int64_t n) {
    cuda_backend *b = cbe_bind(be);
    char why[256] = "";
    int rc = cbe_need_dev(b, x, sizeof(float) * (size_t)n, "allreduce", "x");
    if (rc) return rc;
    if (!SOL_CUDA_FN(dev_allreduce_ready)(b->dev, comm) && (rc = cbe_flush_capture(b))) return rc;
    /* The communicators made so far name the one a graph recorded: one made since (after an
     * abort) is another, so the graph is recorded again. */
    unsigned long made = 0, aborted = 0;
    SOL_CUDA_FN(dev_comm_stats)(b->dev, &made, &aborted);
    const uint64_t v[] = {(uintptr_t)comm, (uint64_t)rank, (uintptr_t)x, (uint64_t)n, made};
    if (note_op(b, SOL_SIG_ALLREDUCE, v, sizeof v / sizeof *v)) return 0;
    rc = SOL_CUDA_FN(dev_allreduce)(b->dev, comm, rank, x, n, why, sizeof why);
    return rc ? cbe_fail(b, rc, "allreduce", "%s", why) : cbe_after(b, "allreduce");
}

/* Waits for the step; the staging buffer is free again afterwards. SOL_STEP_RERUN: a dry step
 * that did not match its graph ran nothing (end_dry). */
static int cuda_synchronize(sol_backend *be) {
    cuda_backend *b = cbe_bind(be);
    char why[256] = "";
    int rc = b->dry ? end_dry(b) : end_capture(b, 1);
    if (rc == SOL_STEP_RERUN) b->stage_used = 0, b->n_recent = 0, b->next_recent = 0;
    if (rc) return rc;
    rc = SOL_CUDA_FN(dev_sync)(b->dev, why, sizeof why);
    b->stage_used = 0, b->n_recent = 0, b->next_recent = 0;
    if (!rc) return 0;
    return cbe_fail(
        b, rc, "synchronize",
        "%s; the last op queued was %s (SOL_CUDA_SYNC=1 waits cbe_after every op, so the "
        "error names the op that failed)",
        why, b->last_op ? b->last_op : "none");
}

/* Decode and verify steps (graph_key = their token count). The first of a key is recorded by
 * stream capture into the key's graph; later ones are dry (launch nothing, compare their
 * launches with the graph's signature) and replay the graph at synchronize, unless they differ:
 * then synchronize answers SOL_STEP_RERUN, and the step, begun again, is recorded (force_capture)
 * and updates the graph in place when its topology allows. */
static int cuda_step_begin(sol_backend *be, int graph_key) {
    cuda_backend *b = cbe_bind(be);
    int rc = cbe_flush_capture(b); /* a step that never reached synchronize (an error path) */
    b->dry = 0, b->stream->sig.mode = SOL_SIG_OFF;
    if (rc || !b->graphs_on || graph_key <= 0) return rc;
    b->capture_t0 = sol_now_ns();
    b->stage_unsent = SIZE_MAX;
    b->key = graph_key;
    sol_graph_sig *s = &b->stream->sig;
    graph_slot *g = b->force_capture ? NULL : graph_replayable(b, graph_key);
    b->force_capture = 0;
    if (g) {
        b->dry = 1, b->dry_slot = g;
        *s = (sol_graph_sig){SOL_SIG_DRY, s->buf, 0, s->cap, g->sig, g->sig_len, 0, 0};
        return 0;
    }
    char why[256] = "";
    if (SOL_CUDA_FN(dev_capture_begin)(b->dev, why, sizeof why)) return 0; /* run eagerly */
    b->capturing = 1;
    *s = (sol_graph_sig){SOL_SIG_RECORD, s->buf, 0, s->cap, NULL, 0, 0, 0};
    return 0;
}

/* Mean host microseconds of ns over n events (0 when none). */
static double mean_us(uint64_t ns, unsigned long n) {
    return n ? (double)ns / 1e3 / (double)n : 0.0;
}

static int cuda_stats(sol_backend *be, char *buf, size_t cap) {
    cuda_backend *b = cbe_bind(be);
    unsigned long made = 0, aborted = 0;
    SOL_CUDA_FN(dev_comm_stats)(b->dev, &made, &aborted);
    unsigned long whole = b->updated + b->instantiated;
    snprintf(buf, cap,
             "cuda graphs %s: %lu steps replayed (%lu with no record, %lu updated in place, %lu "
             "instantiated), %lu cut short by an allocation; %lu staged copies; %lu NCCL "
             "communicators made, %lu aborted; %lu dry steps, %lu run again recorded; host us per "
             "graph step: dry %.1f, record %.1f, update+launch %.1f, instantiate+launch %.1f; "
             "tensor cores: %lu GEMMs, %lu prefill attention calls, %lu int8 GEMMs, %lu on a "
             "shared x; fused "
             "prologues: %lu "
             "norm+quantize, %lu glu+quantize, %lu attention+quantize, %lu rope+KV, %lu q/k "
             "norm+rope+KV; norm tails: %lu GEMVs normalized and quantized their output, %lu "
             "reads of it; gated-product blocks: %lu gate/up GEMVs made them, %lu reads; "
             "next_input %s; tensor-core GEMM launches: %lu (split-K: %lu, %s); programmatic "
             "dependent launch %s",
             b->graphs_on ? "on" : "off (--enforce-eager)", b->steps, b->replayed_dry, b->updated,
             b->instantiated, b->flushed, b->stage_copies, made, aborted, b->dry_steps, b->reruns,
             mean_us(b->dry_ns, b->dry_steps), mean_us(b->record_ns, whole),
             mean_us(b->update_ns, b->updated), mean_us(b->instantiate_ns, b->instantiated),
             b->mma_gemms, b->flash_calls, b->mmq_gemms, b->gemm_x_reused, b->fused_normq,
             b->fused_glu, b->fused_attq, b->fused_rope, b->fused_qk_norm, b->fused_tail,
             b->tail_used, b->fused_glu_end, b->glu_end_used,
             b->next_off ? "off (SOL_CUDA_NEXT_INPUT=0)" : "on", b->mma_launches, b->mma_split,
             b->split_off ? "off (SOL_CUDA_SPLIT_K=0)" : "on",
             b->stream->pdl ? "on" : "off (SOL_CUDA_PDL=0 or before sm_90)");
    return 0;
}

/* A device whose stream missed the rank group's deadline and never drained (dev_health). */
static int cuda_health(sol_backend *be, char *why, size_t cap) {
    cuda_backend *b = cbe_bind(be);
    return SOL_CUDA_FN(dev_health)(b->dev, why, cap);
}

static int cuda_mem_info(sol_backend *be, size_t *free_bytes, size_t *total_bytes) {
    cuda_backend *b = cbe_bind(be);
    int rc = SOL_CUDA_FN(dev_mem_info)(b->dev, free_bytes, total_bytes);
    return rc ? cbe_fail(b, rc, "mem_info", "the runtime could not say") : 0;
}

static void cuda_free(sol_backend *be) {
    cuda_backend *b = cbe_bind(be);
    cbe_flush_capture(b);
    if (b->dev) cbe_wait_quiet(b);
    for (int i = 0; i < GRAPH_SLOTS; i++) {
        SOL_CUDA_FN(dev_graph_free)(b->dev, b->graphs[i].exec);
        free(b->graphs[i].sig);
    }
    while (b->kvs)
        cbe_kv_free(be, b->kvs);
    for (int i = 0; i < b->n_ups; i++)
        SOL_CUDA_FN(dev_free)(b->dev, b->ups[i].dev);
    dev_buf *bufs[] = {&b->qscratch, &b->xh,       &b->xq,      &b->att_ws,
                       &b->gemm_y,   &b->amax_ws,  &b->tail_ws, &b->qscratch2,
                       &b->glu_cnt,  &b->mma_part, &b->mma_cnt};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        SOL_CUDA_FN(dev_free)(b->dev, bufs[i]->p);
    SOL_CUDA_FN(dev_free)(b->dev, b->stage_d);
    SOL_CUDA_FN(dev_host_free)(b->dev, b->stage_h);
    SOL_CUDA_FN(dev_close)(b->dev);
    free(b->ups);
    free(b->tables);
    free(b->rope_blob);
    free(b);
}

static const sol_backend_ops cuda_ops = {
    .name = BE,
    .free = cuda_free,
    .reserve = cuda_reserve,
    .weight_prepare = cuda_weight_prepare,
    .buf_alloc = cuda_buf_alloc,
    .buf_free = cuda_buf_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .matmul = cuda_matmul,
    .matmul_many = cuda_matmul_many,
    .matmul_add = cuda_matmul_add,
    .norm_matmul_many = cuda_norm_matmul_many,
    .glu_matmul_add = cuda_glu_matmul_add,
    .rmsnorm = cuda_rmsnorm,
    .rope = cuda_rope,
    .rope_kv_write = cbe_rope_kv_write,
    .qkv_rope_kv = cuda_qkv_rope_kv,
    .silu_mul = cuda_silu_mul,
    .gelu_mul = cuda_gelu_mul,
    .swiglu_oai = cuda_swiglu_oai,
    .scale = cuda_scale,
    .add = cuda_add,
    .embed = cuda_embed,
    .get_rows = cuda_get_rows,
    .argmax_rows = cuda_argmax_rows,
    .next_input = cuda_next_input,
    .moe_combine = cuda_moe_combine,
    .kv_alloc = cbe_kv_alloc,
    .kv_free = cbe_kv_free,
    .kv_write = cbe_kv_write,
    .kv_copy_blocks = cbe_kv_copy_blocks,
    .kv_host_io = cbe_kv_host_io,
    .kv_host_bytes = cbe_kv_host_bytes,
    .kv_host_alloc = cbe_kv_host_alloc,
    .kv_host_free = cbe_kv_host_free,
    .paged_attention = cbe_paged_attention,
    .allreduce = cuda_allreduce,
    .synchronize = cuda_synchronize,
    .mem_info = cuda_mem_info,
    .step_begin = cuda_step_begin,
    .stats = cuda_stats,
    .health = cuda_health,
};

/* Opens the device and the backend on it; `strict` as backend_cuda.h says. */
static sol_backend *open_backend(int index, size_t mem_bytes, int strict, const sol_backend_opts *o,
                                 sol_err *err) {
    /* SOL_CUDA_PDL=0 launches without programmatic dependent launch (to rule it out when a
     * result looks wrong on a GPU); 1 or unset: on where the device has it (sm_90). */
    const char *pdl = getenv("SOL_CUDA_PDL");
    if (pdl && *pdl && strcmp(pdl, "0") != 0 && strcmp(pdl, "1") != 0) {
        sol_err_set(err, -EINVAL, BE ": SOL_CUDA_PDL=%s: expected 0 or 1", pdl);
        return NULL;
    }
    int pdl_off = pdl && strcmp(pdl, "0") == 0;
    /* SOL_CUDA_NEXT_INPUT=0 ignores next_input's hints (every norm and quantize its own launch,
     * as before 2026-12-07): the two structures side by side on a GPU lease */
    const char *nin = getenv("SOL_CUDA_NEXT_INPUT");
    if (nin && *nin && strcmp(nin, "0") != 0 && strcmp(nin, "1") != 0) {
        sol_err_set(err, -EINVAL, BE ": SOL_CUDA_NEXT_INPUT=%s: expected 0 or 1", nin);
        return NULL;
    }
    /* SOL_CUDA_SPLIT_K=0 launches every batch GEMM unsplit (k_mma.cu's split-K off): the
     * decode batches' small grids both ways on a GPU lease */
    const char *splitk = getenv("SOL_CUDA_SPLIT_K");
    if (splitk && *splitk && strcmp(splitk, "0") != 0 && strcmp(splitk, "1") != 0) {
        sol_err_set(err, -EINVAL, BE ": SOL_CUDA_SPLIT_K=%s: expected 0 or 1", splitk);
        return NULL;
    }
    /* SOL_CUDA_GEMM=int8 sends quantized batches through the int8 kernels (k_mmq.cu) instead of
     * the F16 tiles (k_mma.cu, f16, the default while the performance model predicts them
     * faster): the two paths side by side on a GPU lease */
    const char *gemm = getenv("SOL_CUDA_GEMM");
    if (gemm && *gemm && strcmp(gemm, "int8") != 0 && strcmp(gemm, "f16") != 0) {
        sol_err_set(err, -EINVAL, BE ": SOL_CUDA_GEMM=%s: expected int8 or f16", gemm);
        return NULL;
    }
    cuda_backend *b = calloc(1, sizeof *b);
    if (!b) {
        sol_err_set(err, -ENOMEM, BE ": out of memory");
        return NULL;
    }
    char why[256] = "";
    int rc = SOL_CUDA_FN(dev_open)(index, mem_bytes, &b->dev, why, sizeof why);
    if (rc) {
        free(b);
        sol_err_set(err, rc, BE ": device %d: %s", index, why);
        return NULL;
    }
    b->base.ops = &cuda_ops;
    b->stream = SOL_CUDA_FN(dev_stream)(b->dev);
    b->strict = strict;
    b->batch_invariant = o && o->batch_invariant;
    const char *s = getenv("SOL_CUDA_SYNC");
    b->sync_each = s && strcmp(s, "1") == 0;
    b->graphs_on = !(o && o->enforce_eager) && !b->sync_each; /* a capture cannot wait */
    if (pdl_off) b->stream->pdl = 0;
    b->next_off = nin && strcmp(nin, "0") == 0;
    b->split_off = splitk && strcmp(splitk, "0") == 0;
    b->gemm_int8 = gemm && strcmp(gemm, "int8") == 0;
    b->stage_unsent = SIZE_MAX;
    if (stage_grow(b, 64 * 1024)) { /* now, not inside the first captured step */
        sol_err_set(err, b->base.err.code, "%s", b->base.err.msg);
        cuda_free(&b->base);
        return NULL;
    }
    return &b->base;
}

#ifdef SOL_CUDA_EMU

int sol_backend_cuda_emu_variants(char out[][SOL_BACKEND_VARIANT_MAX], int cap) {
    if (cap < 1) return 0;
    strcpy(out[0], "host");
    return 1;
}

/* SOL_CUDA_EMU_MEMORY_MB: the pretend device's size (tests of the KV sizing; default 256 MiB). */
sol_backend *sol_backend_cuda_emu_create(const char *variant, const sol_backend_opts *o,
                                         sol_err *err) {
    if (variant && *variant && strcmp(variant, "host") != 0) {
        sol_err_set(err, -EINVAL, "cuda-emu:%s: expected the variant host (or none)", variant);
        return NULL;
    }
#if defined(__x86_64__)
    /* The emulated kernels are compiled with FMA contraction (-mfma), as nvcc compiles them. */
    if (!__builtin_cpu_supports("fma")) {
        sol_err_set(err, -ENOTSUP,
                    "cuda-emu: this CPU has no FMA instructions, which the "
                    "emulated kernels are compiled with (as nvcc contracts)");
        return NULL;
    }
#endif
    /* Devices 0..7, each its own pretend memory: the ranks of an emulated tensor-parallel
     * group open one each, as on a GPU node. */
    int dev = o ? o->device : 0;
    if (dev < 0 || dev >= SOL_TP_MAX) {
        sol_err_set(err, -EINVAL, "cuda-emu: device %d: the emulation has devices 0..%d", dev,
                    SOL_TP_MAX - 1);
        return NULL;
    }
    size_t mem = 0;
    const char *m = getenv("SOL_CUDA_EMU_MEMORY_MB");
    if (m && *m) {
        char *end = NULL;
        long long mb = strtoll(m, &end, 10);
        if (*end || mb < 1) {
            sol_err_set(err, -EINVAL, "SOL_CUDA_EMU_MEMORY_MB=%s: expected a positive integer", m);
            return NULL;
        }
        mem = (size_t)mb << 20;
    }
    return open_backend(dev, mem, !(variant && *variant), o, err);
}

#else

int sol_backend_cuda_variants(char out[][SOL_BACKEND_VARIANT_MAX], int cap) {
    int n = sol_cuda_device_count();
    int k = 0;
    for (; k < n && k < cap; k++)
        snprintf(out[k], SOL_BACKEND_VARIANT_MAX, "%d", k);
    return k;
}

/* The device: the variant ("cuda:1"), else opts->device (--device), else 0. */
sol_backend *sol_backend_cuda_create(const char *variant, const sol_backend_opts *o, sol_err *err) {
    char why[256] = "";
    int n = sol_cuda_probe(why, sizeof why);
    if (n == 0) {
        sol_err_set(err, -ENODEV, "no CUDA device: %s", why);
        return NULL;
    }
    long dev = o ? o->device : 0;
    if (variant && *variant) {
        char *end = NULL;
        dev = strtol(variant, &end, 10);
        if (*end) dev = -1;
    }
    if (dev < 0 || dev >= n) {
        if (variant && *variant)
            sol_err_set(err, -EINVAL, "cuda:%s: expected a device index from 0 to %d", variant,
                        n - 1);
        else
            sol_err_set(err, -EINVAL, "worker.device %ld: expected a device index from 0 to %d",
                        dev, n - 1);
        return NULL;
    }
    return open_backend((int)dev, 0, 0, o, err);
}

#endif
