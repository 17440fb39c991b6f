/* cuda_kv: the CUDA backend's KV cache and paged attention: pools per layer in device memory,
 * block tables flattened, tiled and staged once per step, long windows split (flash-decoding).
 * Part of backend_cuda (backend_cuda_internal.h); built twice like it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda_internal.h"

void cbe_kv_free(sol_backend *be, sol_kv *kv) {
    cuda_backend *b = cbe_bind(be);
    if (!kv) return;
    cbe_flush_capture(b);
    for (sol_kv **p = &b->kvs; *p; p = &(*p)->next)
        if (*p == kv) {
            *p = kv->next;
            break;
        }
    for (int i = 0; kv->pools && i < 2 * kv->n_layers; i++)
        SOL_CUDA_FN(dev_free)(b->dev, kv->pools[i]);
    SOL_CUDA_FN(dev_free)(b->dev, kv->pools_d);
    free(kv->pools);
    free(kv);
}

sol_kv *cbe_kv_alloc(sol_backend *be, int n_layers, int num_blocks, int block_size, int n_kv_heads,
                     int head_dim, sol_dtype dtype) {
    cuda_backend *b = cbe_bind(be);
    if ((dtype != SOL_DT_F16 && dtype != SOL_DT_F32) || n_layers < 1 || num_blocks < 1 ||
        block_size < 1 || n_kv_heads < 1 || head_dim < 1 || head_dim > 256) {
        cbe_fail(b, -EINVAL, "kv_alloc",
                 "expected f16/f32, positive sizes and head_dim <= 256, got %s, layers %d, blocks "
                 "%d x %d, %d heads of %d",
                 sol_dtype_name(dtype), n_layers, num_blocks, block_size, n_kv_heads, head_dim);
        return NULL;
    }
    if (cbe_flush_capture(b)) return NULL;
    sol_kv *kv = calloc(1, sizeof *kv);
    if (!kv || !(kv->pools = calloc((size_t)n_layers * 2, sizeof *kv->pools))) {
        free(kv);
        cbe_fail(b, -ENOMEM, "kv_alloc", "out of host memory");
        return NULL;
    }
    *kv = (sol_kv){n_layers, num_blocks, block_size, n_kv_heads, head_dim, dtype == SOL_DT_F16,
                   0,        kv->pools,  NULL,       b->kvs};
    b->kvs = kv;
    kv->pool_bytes = (size_t)num_blocks * block_size * n_kv_heads * head_dim * (kv->f16 ? 2 : 4);
    size_t ptrs = sizeof(void *) * 2 * (size_t)n_layers;
    /* The slack: attention reads unaligned rows (odd head_dim in F16) as whole 32-bit words. */
    size_t alloc = kv->pool_bytes + SOL_CUDA_ATT_POOL_SLACK;
    for (int i = 0; i < 2 * n_layers; i++)
        if (!(kv->pools[i] = SOL_CUDA_FN(dev_malloc)(b->dev, alloc)) ||
            SOL_CUDA_FN(dev_memset)(b->dev, kv->pools[i], 0, alloc))
            goto oom;
    if (!(kv->pools_d = SOL_CUDA_FN(dev_malloc)(b->dev, ptrs)) ||
        SOL_CUDA_FN(dev_copy)(b->dev, kv->pools_d, kv->pools, ptrs, SOL_CUDA_H2D) ||
        cbe_wait_quiet(b))
        goto oom;
    return kv;
oom:
    cbe_kv_free(be, kv);
    cbe_fail(b, -ENOMEM, "kv_alloc", "out of device memory for %d layers x 2 pools of %.1f MiB",
             n_layers,
             (double)num_blocks * block_size * n_kv_heads * head_dim *
                 (dtype == SOL_DT_F16 ? 2 : 4) / 1048576.0);
    return NULL;
}

int cbe_kv_write(sol_backend *be, sol_kv *kv, int layer, const float *k, const float *v,
                 const int32_t *slots, int n) {
    cuda_backend *b = cbe_bind(be);
    if (!kv || layer < 0 || layer >= kv->n_layers)
        return cbe_fail(b, -EINVAL, "kv_write", "layer %d outside [0, %d)", layer,
                        kv ? kv->n_layers : 0);
    long long cap = (long long)kv->num_blocks * kv->block_size;
    for (int t = 0; t < n; t++)
        if (slots[t] < 0 || slots[t] >= cap)
            return cbe_fail(b, -EINVAL, "kv_write", "token %d slot %d outside [0, %lld)", t,
                            slots[t], cap);
    if (n <= 0) return 0;
    size_t bytes = sizeof(float) * (size_t)n * kv->kv_heads * kv->head_dim;
    int rc;
    if ((rc = cbe_need_dev(b, k, bytes, "kv_write", "k")) ||
        (rc = cbe_need_dev(b, v, bytes, "kv_write", "v")))
        return rc;
    const int32_t *slots_d = cbe_stage(b, slots, sizeof(int32_t) * (size_t)n, &rc);
    if (rc) return rc;
    SOL_CUDA_FN(kv_write)
    (kv->pools[2 * layer], kv->pools[2 * layer + 1], kv->f16, kv->kv_heads * kv->head_dim, k, v,
     slots_d, n, b->stream);
    return cbe_after(b, "kv_write");
}

/* rope_kv_write's operands checked (backend.h), and its frequencies, positions and slots
 * staged (cbe_rope_stage) into e, for the rope_kv launch or the q/k/v GEMV's epilogue (n <= 0:
 * checked, nothing staged). */
int cbe_rope_kv_prepare(cuda_backend *b, const char *op, sol_kv *kv, int layer, const float *q,
                        const float *k, const float *v, const int32_t *pos, const int32_t *slots,
                        int n, int heads, int kv_heads, int head_dim, const sol_rope_params *p,
                        sol_cuda_rope_epi *e) {
    int rc = cbe_rope_args(b, op, heads, head_dim, p);
    if (rc) return rc;
    if (!kv || layer < 0 || layer >= kv->n_layers)
        return cbe_fail(b, -EINVAL, op, "layer %d outside [0, %d)", layer, kv ? kv->n_layers : 0);
    if (kv_heads != kv->kv_heads || head_dim != kv->head_dim)
        return cbe_fail(b, -EINVAL, op, "k rows of %d x %d, the cache's are %d x %d", kv_heads,
                        head_dim, kv->kv_heads, kv->head_dim);
    long long cap = (long long)kv->num_blocks * kv->block_size;
    for (int t = 0; t < n; t++)
        if (slots[t] < 0 || slots[t] >= cap)
            return cbe_fail(b, -EINVAL, op, "token %d slot %d outside [0, %lld)", t, slots[t], cap);
    e->k_pool = kv->pools[2 * layer], e->v_pool = kv->pools[2 * layer + 1];
    e->head_dim = head_dim, e->f16 = kv->f16, e->pos_slots = NULL;
    if (n <= 0) return 0;
    size_t kv_bytes = sizeof(float) * (size_t)n * kv_heads * head_dim;
    if ((rc = cbe_need_dev(b, q, sizeof(float) * (size_t)n * heads * head_dim, op, "q")) ||
        (rc = cbe_need_dev(b, k, kv_bytes, op, "k")) ||
        (rc = cbe_need_dev(b, v, kv_bytes, op, "v")))
        return rc;
    return cbe_rope_stage(b, op, p, head_dim, pos, slots, n, &e->p, &e->pos_slots);
}

/* rope(q), rope(k) and kv_write as one launch (backend.h). */
int cbe_rope_kv_write(sol_backend *be, sol_kv *kv, int layer, float *q, float *k, const float *v,
                      const int32_t *pos, const int32_t *slots, int n, int heads, int kv_heads,
                      int head_dim, const sol_rope_params *p) {
    cuda_backend *b = cbe_bind(be);
    const char *op = "rope_kv_write";
    sol_cuda_rope_epi e;
    int rc = cbe_rope_kv_prepare(b, op, kv, layer, q, k, v, pos, slots, n, heads, kv_heads,
                                 head_dim, p, &e);
    if (rc || n <= 0) return rc;
    SOL_CUDA_FN(rope_kv)
    (q, k, v, e.pos_slots, n, heads, kv_heads, head_dim, e.p, e.k_pool, e.v_pool, e.f16, b->stream);
    return cbe_after(b, op);
}

int cbe_kv_copy_blocks(sol_backend *be, sol_kv *kv, const int32_t *src, const int32_t *dst,
                       int count) {
    cuda_backend *b = cbe_bind(be);
    for (int i = 0; i < count; i++)
        if (src[i] < 0 || src[i] >= kv->num_blocks || dst[i] < 0 || dst[i] >= kv->num_blocks)
            return cbe_fail(b, -EINVAL, "kv_copy_blocks", "pair %d (%d -> %d) outside [0, %d)", i,
                            src[i], dst[i], kv->num_blocks);
    if (count <= 0) return 0;
    /* One staged array: a second cbe_stage() may cbe_grow the ring and free the first's copy. */
    int rc;
    int32_t *pairs = malloc(sizeof(int32_t) * 2 * (size_t)count);
    if (!pairs) return cbe_fail(b, -ENOMEM, "kv_copy_blocks", "out of host memory");
    memcpy(pairs, src, sizeof(int32_t) * (size_t)count);
    memcpy(pairs + count, dst, sizeof(int32_t) * (size_t)count);
    const int32_t *src_d = cbe_stage(b, pairs, sizeof(int32_t) * 2 * (size_t)count, &rc);
    free(pairs);
    if (rc) return rc;
    const int32_t *dst_d = src_d + count;
    SOL_CUDA_FN(kv_copy_blocks)
    ((void *const *)kv->pools_d, 2 * kv->n_layers, kv->pool_bytes / (size_t)kv->num_blocks, src_d,
     dst_d, count, b->stream);
    return cbe_after(b, "kv_copy_blocks");
}

size_t cbe_kv_host_bytes(sol_backend *be, const sol_kv *kv) {
    (void)be;
    return kv->pool_bytes / (size_t)kv->num_blocks * 2 * (size_t)kv->n_layers;
}

/* Outside any graph: the engine moves tier blocks before a step begins, and a copy to host memory
 * recorded into a decode graph would tie the graph to one slot. */
int cbe_kv_host_io(sol_backend *be, sol_kv *kv, int32_t block, void *host, int to_host) {
    cuda_backend *b = cbe_bind(be);
    if (!kv || block < 0 || block >= kv->num_blocks || !host)
        return cbe_fail(b, -EINVAL, "kv_host_io", "block %d outside [0, %d)%s", block,
                        kv ? kv->num_blocks : 0, host ? "" : " or no host buffer");
    int rc = cbe_flush_capture(b);
    if (rc) return rc;
    size_t bb = kv->pool_bytes / (size_t)kv->num_blocks;
    unsigned char *h = host;
    for (int i = 0; i < 2 * kv->n_layers && !rc; i++, h += bb) { /* [layer][K, V] */
        unsigned char *p = (unsigned char *)kv->pools[i] + (size_t)block * bb;
        rc = SOL_CUDA_FN(dev_copy)(b->dev, to_host ? (void *)h : (void *)p, to_host ? p : h, bb,
                                   to_host ? SOL_CUDA_D2H : SOL_CUDA_H2D);
    }
    return rc ? cbe_fail(b, rc, "kv_host_io", "a block copy could not be queued")
              : cbe_after(b, "kv_host_io");
}

void *cbe_kv_host_alloc(sol_backend *be, size_t bytes) {
    cuda_backend *b = cbe_bind(be);
    if (cbe_flush_capture(b)) return NULL;
    void *p = SOL_CUDA_FN(dev_host_malloc)(b->dev, bytes);
    if (!p)
        cbe_fail(b, -ENOMEM, "kv_host_alloc", "no page-locked host memory for %.1f MiB",
                 (double)bytes / 1048576.0);
    return p;
}

void cbe_kv_host_free(sol_backend *be, void *host) {
    cuda_backend *b = cbe_bind(be);
    if (!host) return;
    cbe_flush_capture(b);
    cbe_wait_quiet(b); /* queued copies still read or write it */
    SOL_CUDA_FN(dev_host_free)(b->dev, host);
}

static int check_attention(cuda_backend *b, const sol_kv *kv, int layer, int n, int heads,
                           int kv_heads, int head_dim, int window, const sol_attn_seq *seq) {
    const char *op = "paged_attention";
    if (!kv || layer < 0 || layer >= kv->n_layers)
        return cbe_fail(b, -EINVAL, op, "layer %d outside [0, %d)", layer, kv ? kv->n_layers : 0);
    if (kv_heads != kv->kv_heads || head_dim != kv->head_dim || heads <= 0 || heads % kv_heads)
        return cbe_fail(b, -EINVAL, op,
                        "heads=%d kv_heads=%d head_dim=%d for a cache of %d, %d (heads must be a "
                        "multiple of kv_heads)",
                        heads, kv_heads, head_dim, kv->kv_heads, kv->head_dim);
    if (window < 0)
        return cbe_fail(b, -EINVAL, op, "window=%d (expected 0 = none, or > 0)", window);
    for (int t = 0; t < n; t++) {
        int ctx = seq[t].n_ctx, lo = window > 0 && ctx > window ? ctx - window : 0;
        if (ctx <= 0 || !seq[t].block_table)
            return cbe_fail(b, -EINVAL, op,
                            "token %d has n_ctx=%d (expected >= 1) or no block table", t, ctx);
        for (int i = lo / kv->block_size; i < (ctx + kv->block_size - 1) / kv->block_size; i++)
            if (seq[t].block_table[i] < 0 || seq[t].block_table[i] >= kv->num_blocks)
                return cbe_fail(b, -EINVAL, op, "token %d block_table[%d]=%d outside [0, %d)", t, i,
                                seq[t].block_table[i], kv->num_blocks);
    }
    return 0;
}

/* Tiles of up to `most` consecutive tokens that share a block table (a prefill chunk's), never
 * across a group of ATT_GROUP: their starts and an end entry into tiles (n + 1 entries at most);
 * returns how many. */
static int make_tiles(const sol_attn_seq *seq, int n, int most, int32_t *tiles) {
    int k = 0;
    for (int t = 0; t < n; t++)
        if (t == 0 || t % ATT_GROUP == 0 || t - tiles[k - 1] == most ||
            seq[t].block_table != seq[t - 1].block_table)
            tiles[k++] = t;
    tiles[k] = n;
    return k;
}

/* Long windows are split along the context (flash-decoding) through the ws scratch, in groups
 * of ATT_GROUP tokens so that the scratch stays a few MiB; queries are tiled (make_tiles). A
 * token's bits depend on neither (k_attention.cu): its split count follows its own window and
 * the device's SM count. tiles_d: the staged tiles, n_tiles of them. */
static int attend(cuda_backend *b, sol_kv *kv, int layer, const float *q, float *out, int n,
                  int heads, int head_dim, float scale, int window, const float *sinks,
                  const int32_t *tables, int stride, const sol_attn_seq *seq,
                  const int32_t *tiles_h, const int32_t *tiles_d, int n_tiles) {
    int max_len = 1, rc, sms = SOL_CUDA_FN(dev_sm_count)(b->dev);
    for (int t = 0; t < n; t++) {
        int len = window > 0 && seq[t].n_ctx > window ? window : seq[t].n_ctx;
        max_len = len > max_len ? len : max_len;
    }
    /* A graph step launches for the most splits the device takes (the cap), so its grid does not
     * follow the context; each token still takes its own count (blocks past it return), which
     * keeps its bits those of an eager step. */
    if (cbe_graph_step(b)) max_len = SOL_CUDA_ATT_SPLIT_MIN * SOL_CUDA_ATT_MAX_SPLITS;
    int splits = SOL_CUDA_FN(attention_splits)(max_len, sms, heads, kv->kv_heads, head_dim);
    int group = splits > 1 ? ATT_GROUP : n;
    float *ws = NULL;
    int *counters = NULL;
    if (splits > 1) {
        /* sized for the most splits, so the scratch grows once, not as contexts grow (a growth
         * inside a captured step cuts the capture short); the merge's counters (group x heads
         * ints) after the states, zeroed when the buffer is new and left zeroed by every launch */
        size_t floats =
            SOL_CUDA_FN(attention_ws_floats)(group, heads, head_dim, SOL_CUDA_ATT_MAX_SPLITS);
        /* and the Q8_K merge's block counters (fewer than group x heads) */
        size_t cnt_bytes = 2 * sizeof(int) * (size_t)group * heads, had = b->att_ws.bytes;
        if ((rc = cbe_grow(b, &b->att_ws, floats * sizeof(float) + cnt_bytes, "paged_attention")))
            return rc;
        ws = b->att_ws.p;
        counters = (int *)(ws + floats);
        if (b->att_ws.bytes != had &&
            SOL_CUDA_FN(dev_memset)(b->dev, counters, 0, b->att_ws.bytes - floats * sizeof(float)))
            return cbe_fail(b, -EIO, "paged_attention", "could not zero the split counters");
    }
    /* A decode-sized step's output also leaves as the o projection's activations (the merge's
     * epilogue), so that GEMV needs no quantize launch: Q8_0, or the kind of the weight that
     * next_input named (Q8_K for K-quants); qscratch sized as the GEMV sizes it */
    const sol_next_in *ni = &b->next_now;
    int K = heads * head_dim, act = SOL_CUDA_ACT_Q8_0;
    if (ni->w && !ni->norm && ni->w->cols == K) act = SOL_CUDA_FN(gemv_act)((int)ni->w->type);
    int quant =
        splits > 1 && n <= SOL_CUDA_GEMV_MAX_TOKENS && K % 32 == 0 && act != SOL_CUDA_ACT_FLOAT;
    size_t qb = SOL_CUDA_FN(gemv_scratch_bytes)(SOL_CUDA_GEMV_MAX_TOKENS, K);
    if (quant && (rc = cbe_grow(b, &b->qscratch, qb, "paged_attention"))) return rc;
    const int32_t *ctx = tables + (size_t)n * stride;
    for (int t0 = 0, ti = 0; t0 < n; t0 += group) {
        int cnt = n - t0 < group ? n - t0 : group, tj = ti;
        while (tj < n_tiles && tiles_h[tj] < t0 + cnt)
            tj++;
        quant &= SOL_CUDA_FN(paged_attention)(
            kv->pools[2 * layer], kv->pools[2 * layer + 1], kv->f16, kv->block_size, q, out,
            tj - ti, tiles_d + ti, t0, cnt, heads, kv->kv_heads, head_dim, scale, window, tables,
            stride, ctx, max_len, sms, ws, counters, quant ? b->qscratch.p : NULL, n, act,
            counters ? counters + (size_t)group * heads : NULL, sinks, b->stream);
        ti = tj;
    }
    if (quant)
        b->q8_made =
            (struct cbe_q8_note){.x = out, .n = n, .k = K, .act = act, .scratch = b->qscratch.p};
    return cbe_after(b, "paged_attention");
}

/* A graph step's table stride: a power of two of at least GRAPH_MIN_STRIDE entries, so the
 * staged arrays (and the launches that point into them) keep their shape while contexts grow
 * inside a bucket; a step past it is recorded again. */
static int graph_stride(int stride) {
    int s = GRAPH_MIN_STRIDE;
    while (s < stride)
        s <<= 1;
    return s;
}

/* Prefill on tensor cores (k_flash.cu): a step of more than SOL_CUDA_GEMV_MAX_TOKENS tokens
 * (the GEMM's crossover: such a step is a prefill chunk, or holds one) over an F16 cache of a
 * shape the kernel takes, unless bits must not depend on the batch (its Q and softmax weights
 * are rounded to F16). Returns the tokens per tile, 0 for k_attention.cu's path. */
static int use_flash(const cuda_backend *b, const sol_kv *kv, int n, int heads, int head_dim) {
    if (b->batch_invariant || !kv->f16 || n <= SOL_CUDA_GEMV_MAX_TOKENS) return 0;
    return SOL_CUDA_FN(flash_tile_tokens)(heads, kv->kv_heads, head_dim);
}

/* The block tables go up as one n x stride array followed by the n contexts: one staged copy
 * per step, since every layer's call carries the same bytes. */
int cbe_paged_attention(sol_backend *be, sol_kv *kv, int layer, const float *q, float *out, int n,
                        int heads, int kv_heads, int head_dim, float scale, int window,
                        const float *sinks, const sol_attn_seq *seq) {
    cuda_backend *b = cbe_bind(be);
    int rc = check_attention(b, kv, layer, n, heads, kv_heads, head_dim, window, seq);
    if (rc || n <= 0) return rc;
    size_t qbytes = sizeof(float) * (size_t)n * heads * head_dim;
    if ((rc = cbe_need_dev(b, q, qbytes, "paged_attention", "q")) ||
        (rc = cbe_need_dev(b, out, qbytes, "paged_attention", "out")) ||
        (sinks &&
         (rc = cbe_need_dev(b, sinks, sizeof(float) * (size_t)heads, "paged_attention", "sinks"))))
        return rc;
    int stride = 1;
    for (int t = 0; t < n; t++) {
        int nb = (seq[t].n_ctx + kv->block_size - 1) / kv->block_size;
        stride = nb > stride ? nb : stride;
    }
    if (cbe_graph_step(b)) stride = graph_stride(stride);
    size_t need = (size_t)n * (size_t)stride + (size_t)n + (size_t)n + 1; /* tables, ctx, tiles */
    if (need > b->tables_cap) {
        int32_t *p = realloc(b->tables, sizeof(int32_t) * need);
        if (!p) return cbe_fail(b, -ENOMEM, "paged_attention", "out of host memory");
        b->tables = p, b->tables_cap = need;
    }
    memset(b->tables, 0, sizeof(int32_t) * need);
    int32_t *ctx = b->tables + (size_t)n * stride;
    int32_t *tiles = ctx + n;
    /* the tensor-core kernel takes no sinks: a gpt-oss prefill runs the CUDA-core one */
    int flash = sinks ? 0 : use_flash(b, kv, n, heads, head_dim);
    int n_tiles = make_tiles(seq, n, flash ? flash : SOL_CUDA_ATT_TILE, tiles);
    /* Token t's entries go to its own row and to its tile's first row, which the tile's block
     * reads: the union of the tile's windows (they share one block table). Entries before a
     * window may be stale (freed blocks): never copied, left 0. */
    for (int ti = 0, t = 0; t < n; t++) {
        if (ti + 1 < n_tiles && t == tiles[ti + 1]) ti++;
        int nb = (seq[t].n_ctx + kv->block_size - 1) / kv->block_size;
        int lo = window > 0 && seq[t].n_ctx > window ? (seq[t].n_ctx - window) / kv->block_size : 0;
        size_t bytes = sizeof(int32_t) * (size_t)(nb - lo);
        memcpy(b->tables + (size_t)t * stride + lo, seq[t].block_table + lo, bytes);
        memcpy(b->tables + (size_t)tiles[ti] * stride + lo, seq[t].block_table + lo, bytes);
        ctx[t] = seq[t].n_ctx;
    }
    const int32_t *d = cbe_stage(b, b->tables, sizeof(int32_t) * need, &rc);
    if (rc) return rc;
    if (flash) {
        b->flash_calls++;
        rc = SOL_CUDA_FN(flash_attention)(
            kv->pools[2 * layer], kv->pools[2 * layer + 1], kv->block_size, q, out, n_tiles,
            d + (size_t)n * stride + n, heads, kv_heads, head_dim, scale, window, d, stride,
            d + (size_t)n * stride, b->stream);
        return rc ? cbe_fail(b, rc, "paged_attention", "the tensor-core kernel refused the shape")
                  : cbe_after(b, "paged_attention");
    }
    return attend(b, kv, layer, q, out, n, heads, head_dim, scale, window, sinks, d, stride, seq,
                  tiles, d + (size_t)n * stride + n, n_tiles);
}
