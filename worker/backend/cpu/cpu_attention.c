/* cpu_attention: the paged KV cache of the CPU backend and attention over it. Pools live in one
 * anonymous mapping (pages are committed as blocks are first written). Attention runs one
 * (token, head) per task with an online softmax over fixed 32-position chunks counted from
 * position 0, so a token's result never depends on the batch it is in. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "cpu_internal.h"

#define ATTN_CHUNK 32
#define ATTN_MAX_HEAD_DIM 512

static unsigned char *pool(const sol_kv *kv, int layer, int v) {
    return kv->base + ((size_t)layer * 2 + (size_t)v) * kv->pool_bytes;
}

sol_kv *cpu_kv_alloc(sol_backend *be, int n_layers, int num_blocks, int block_size, int n_kv_heads,
                     int head_dim, sol_dtype dtype) {
    cpu_backend *cb = (cpu_backend *)be;
    if (n_layers <= 0 || num_blocks <= 0 || block_size <= 0 || n_kv_heads <= 0 || head_dim <= 0 ||
        head_dim > ATTN_MAX_HEAD_DIM) {
        sol_err_set(&be->err, -EINVAL,
                    "cpu kv_alloc: expected positive sizes and head_dim <= %d, got layers=%d "
                    "blocks=%d block_size=%d kv_heads=%d head_dim=%d",
                    ATTN_MAX_HEAD_DIM, n_layers, num_blocks, block_size, n_kv_heads, head_dim);
        return NULL;
    }
    if (dtype != SOL_DT_F16 && dtype != SOL_DT_F32) {
        sol_err_set(&be->err, -ENOTSUP, "cpu kv_alloc: KV dtype must be f16 or f32, got %s",
                    sol_dtype_name(dtype));
        return NULL;
    }
    sol_kv *kv = calloc(1, sizeof(*kv));
    if (!kv) goto oom;
    kv->n_layers = n_layers;
    kv->num_blocks = num_blocks;
    kv->block_size = block_size;
    kv->kv_heads = n_kv_heads;
    kv->head_dim = head_dim;
    kv->dtype = dtype;
    kv->elem_bytes = dtype == SOL_DT_F16 ? 2 : 4;
    kv->pool_bytes = (size_t)num_blocks * (size_t)block_size * (size_t)n_kv_heads *
                     (size_t)head_dim * kv->elem_bytes;
    kv->map_bytes = kv->pool_bytes * 2 * (size_t)n_layers;
    void *p = mmap(NULL, kv->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) goto oom;
    kv->base = p;
    kv->next = cb->kvs;
    cb->kvs = kv;
    return kv;
oom:
    sol_err_set(&be->err, -ENOMEM, "cpu kv_alloc: cannot map %zu bytes for %d layers x %d blocks",
                kv ? kv->map_bytes : 0, n_layers, num_blocks);
    free(kv);
    return NULL;
}

void cpu_kv_free(sol_backend *be, sol_kv *kv) {
    cpu_backend *cb = (cpu_backend *)be;
    if (!kv) return;
    for (sol_kv **pp = &cb->kvs; *pp; pp = &(*pp)->next) {
        if (*pp == kv) {
            *pp = kv->next;
            break;
        }
    }
    munmap(kv->base, kv->map_bytes);
    free(kv);
}

static void store_row(const sol_kv *kv, unsigned char *dst, const float *src, int count) {
    if (kv->dtype == SOL_DT_F32) {
        memcpy(dst, src, (size_t)count * sizeof(float));
        return;
    }
    uint16_t *h = (uint16_t *)dst;
    for (int i = 0; i < count; i++)
        h[i] = sol_f32_to_f16(src[i]);
}

int cpu_kv_write(sol_backend *be, sol_kv *kv, int layer, const float *k, const float *v,
                 const int32_t *slots, int n) {
    if (!kv || layer < 0 || layer >= kv->n_layers)
        return sol_err_set(&be->err, -EINVAL, "cpu kv_write: layer %d outside [0, %d)", layer,
                           kv ? kv->n_layers : 0);
    int64_t n_slots = (int64_t)kv->num_blocks * kv->block_size;
    for (int t = 0; t < n; t++)
        if (slots[t] < 0 || slots[t] >= n_slots)
            return sol_err_set(&be->err, -EINVAL,
                               "cpu kv_write: token %d slot %d outside [0, %lld)", t, slots[t],
                               (long long)n_slots);
    int row = kv->kv_heads * kv->head_dim;
    size_t row_bytes = (size_t)row * kv->elem_bytes;
    for (int t = 0; t < n; t++) {
        size_t off = (size_t)slots[t] * row_bytes;
        store_row(kv, pool(kv, layer, 0) + off, k + (size_t)t * row, row);
        store_row(kv, pool(kv, layer, 1) + off, v + (size_t)t * row, row);
    }
    return 0;
}

int cpu_kv_copy_blocks(sol_backend *be, sol_kv *kv, const int32_t *src, const int32_t *dst,
                       int count) {
    for (int i = 0; i < count; i++)
        if (src[i] < 0 || src[i] >= kv->num_blocks || dst[i] < 0 || dst[i] >= kv->num_blocks)
            return sol_err_set(&be->err, -EINVAL,
                               "cpu kv_copy_blocks: pair %d (%d -> %d) outside [0, %d)", i, src[i],
                               dst[i], kv->num_blocks);
    size_t block_bytes = kv->pool_bytes / (size_t)kv->num_blocks;
    for (int l = 0; l < kv->n_layers; l++)
        for (int v = 0; v < 2; v++)
            for (int i = 0; i < count; i++)
                memmove(pool(kv, l, v) + (size_t)dst[i] * block_bytes,
                        pool(kv, l, v) + (size_t)src[i] * block_bytes, block_bytes);
    return 0;
}

size_t cpu_kv_host_bytes(sol_backend *be, const sol_kv *kv) {
    (void)be;
    return kv->pool_bytes / (size_t)kv->num_blocks * 2 * (size_t)kv->n_layers;
}

int cpu_kv_host_io(sol_backend *be, sol_kv *kv, int32_t block, void *host, int to_host) {
    if (block < 0 || block >= kv->num_blocks || !host)
        return sol_err_set(&be->err, -EINVAL, "cpu kv_host_io: block %d outside [0, %d)%s", block,
                           kv->num_blocks, host ? "" : " or no host buffer");
    size_t bb = kv->pool_bytes / (size_t)kv->num_blocks;
    unsigned char *h = host;
    for (int l = 0; l < kv->n_layers; l++)
        for (int v = 0; v < 2; v++, h += bb) {
            unsigned char *p = pool(kv, l, v) + (size_t)block * bb;
            memcpy(to_host ? h : p, to_host ? p : h, bb);
        }
    return 0;
}

typedef struct {
    cpu_backend *cb;
    const sol_kv *kv;
    int layer, n, heads, kv_heads, head_dim;
    float scale;
    int window; /* 0: whole context; else the last `window` positions */
    const float *q;
    float *out;
    const sol_attn_seq *seq;
    const float *sinks; /* per query head, or NULL */
} attn_job;

/* First position token t attends to: 0, or the start of its sliding window. */
static int attn_lo(int n_ctx, int window) {
    return window > 0 && n_ctx > window ? n_ctx - window : 0;
}

/* llama.cpp-compatible attention (SOL_CPU_ATTN=llamacpp): llama.cpp's non-flash CPU path, float
 * for float, in the register width of the llama.cpp build reproduced (L lanes: 16 or 8, the
 * backend's ggml_lanes). K.Q and P.V are its F16 matmuls (the query and the normalized
 * probabilities rounded to F16): in a batch of two tokens or more through tinyBLAS where it takes
 * the shape (one L-lane fused accumulator over the dot, reduced as its hsum), else through
 * ggml_vec_dot_f16 (four L-lane fused accumulators over steps of 4L, reduced as its
 * GGML_F32_VEC_REDUCE, leftovers in double); the softmax sums its vectorized expf in chunks of L
 * positions from position 0, each chunk reduced in float and added in double. Masked positions
 * (before a sliding window, past the context) contribute exact zeros, as in llama.cpp's padded
 * cache. Sol's default keeps F32 throughout (closer to exact); this mode reproduces llama.cpp so
 * the two can be compared id for id (tests/integration/peer_equivalence.sh). */
static float lc_load(const unsigned char *row, int i, int f16) {
    if (!f16) return ((const float *)row)[i];
    return sol_f16_to_f32(((const uint16_t *)row)[i]);
}

static void attend_one_llamacpp(const attn_job *j, int t, int h, const unsigned char *kp,
                                const unsigned char *vp, size_t slot_bytes) {
    int hd = j->head_dim, bs = j->kv->block_size, f16 = j->kv->dtype == SOL_DT_F16;
    const float *q0 = j->q + ((size_t)t * j->heads + h) * hd;
    const int32_t *table = j->seq[t].block_table;
    int n_ctx = j->seq[t].n_ctx, lo = attn_lo(n_ctx, j->window);
    int L = j->cb->base.ggml_lanes, nl = (n_ctx + L - 1) / L * L, n64 = (n_ctx + 63) & ~63;
    /* tinyBLAS (llamafile_sgemm) serves a batch when K is a multiple of L and M of 4: K.Q has
     * K = head size over M = the padded cache, P.V K = the padded cache over M = head size */
    int tiny_kq = j->n >= 2 && hd % L == 0, tiny_pv = j->n >= 2 && hd % 4 == 0;
    float q[ATTN_MAX_HEAD_DIM], k[ATTN_MAX_HEAD_DIM];
    float *o = j->out + ((size_t)t * j->heads + h) * hd;
    float *sc = malloc(sizeof(float) * (size_t)n64 * 2), *pr = sc + n64;
    if (!sc) { /* a reference mode: out of memory shows as NaN, never as a plausible value */
        for (int d = 0; d < hd; d++)
            o[d] = NAN;
        return;
    }
    for (int i = 0; i < hd; i++)
        q[i] = sol_f16_to_f32(sol_f32_to_f16(q0[i]));
    float m = -INFINITY;
    for (int p = 0; p < n64; p++) {
        sc[p] = -INFINITY;
        if (p < lo || p >= n_ctx) continue;
        const unsigned char *kr =
            kp + ((size_t)table[p / bs] * (size_t)bs + (size_t)(p % bs)) * slot_bytes;
        for (int i = 0; i < hd; i++)
            k[i] = lc_load(kr, i, f16);
        sc[p] = sol_ggml_dot(k, q, hd, L, tiny_kq, 1) * j->scale;
        m = fmaxf(m, sc[p]);
    }
    if (j->sinks) m = fmaxf(m, j->sinks[h]); /* ggml's soft_max with sinks */
    double sum = 0.0; /* ggml_vec_soft_max_f32: chunks of L in float, added in double */
    for (int c = 0; c < nl; c += L) {
        float e[16] = {0}; /* lanes past L are never read, but gcc -O3 cannot tell */
        for (int l = 0; l < L; l++)
            e[l] = pr[c + l] = sol_ggml_expf(sc[c + l] - m, L);
        sum += (double)sol_ggml_hsum(e, L);
    }
    if (j->sinks) sum += (double)expf(j->sinks[h] - m);
    float inv = (float)(1.0 / sum);
    for (int p = 0; p < n64; p++)
        pr[p] = p < nl ? sol_f16_to_f32(sol_f32_to_f16(pr[p] * inv)) : 0.0f;
    float *vcol = sc; /* reuse: one V column over the positions */
    for (int d = 0; d < hd; d++) {
        for (int p = 0; p < n64; p++) {
            vcol[p] = 0.0f;
            if (p < lo || p >= n_ctx) continue;
            vcol[p] = lc_load(
                vp + ((size_t)table[p / bs] * (size_t)bs + (size_t)(p % bs)) * slot_bytes, d, f16);
        }
        o[d] = sol_ggml_dot(vcol, pr, n64, L, tiny_pv, 1);
    }
    free(sc);
}

static void attend_one(const attn_job *j, int t, int h) {
    const sol_kv *kv = j->kv;
    const cpu_attn_fns *f = j->cb->attn;
    int hd = j->head_dim, bs = kv->block_size, f16 = kv->dtype == SOL_DT_F16;
    int kvh = h / (j->heads / j->kv_heads);
    size_t slot_bytes = (size_t)kv->kv_heads * (size_t)hd * kv->elem_bytes;
    size_t head_off = (size_t)kvh * (size_t)hd * kv->elem_bytes;
    const unsigned char *kp = pool(kv, j->layer, 0) + head_off;
    const unsigned char *vp = pool(kv, j->layer, 1) + head_off;
    if (j->cb->attn_llamacpp) {
        attend_one_llamacpp(j, t, h, kp, vp, slot_bytes);
        return;
    }
    const float *q = j->q + ((size_t)t * j->heads + h) * hd;
    const int32_t *table = j->seq[t].block_table;
    int n_ctx = j->seq[t].n_ctx, lo = attn_lo(n_ctx, j->window);
    if (f == &cpu_attn_avx512 && !j->sinks) {
        cpu_attend_args a = {.q = q,
                             .k = kp,
                             .v = vp,
                             .slot_bytes = slot_bytes,
                             .table = table,
                             .block_size = bs,
                             .lo = lo,
                             .n_ctx = n_ctx,
                             .hd = hd,
                             .f16 = f16,
                             .scale = j->scale,
                             .out = j->out + ((size_t)t * j->heads + h) * hd};
        if (cpu_attend_avx512(&a)) return;
    }
    float acc[ATTN_MAX_HEAD_DIM], s[ATTN_CHUNK];
    /* a sink is a position with no value: the running max starts at it, its e^0 in the sum */
    float m = j->sinks ? j->sinks[h] : -INFINITY, l = j->sinks ? 1.0f : 0.0f;
    memset(acc, 0, (size_t)hd * sizeof(float));
    for (int p0 = lo; p0 < n_ctx; p0 += ATTN_CHUNK) {
        int cnt = n_ctx - p0 < ATTN_CHUNK ? n_ctx - p0 : ATTN_CHUNK;
        float mc = m;
        for (int i = 0; i < cnt; i++) {
            int p = p0 + i;
            size_t slot = (size_t)table[p / bs] * (size_t)bs + (size_t)(p % bs);
            s[i] = f->dot(q, kp + slot * slot_bytes, hd, f16) * j->scale;
            mc = fmaxf(mc, s[i]);
        }
        if (mc != m) {
            float c = expf(m - mc); /* 0 on the first chunk: m is -inf */
            l *= c;
            f->scale(acc, c, hd);
            m = mc;
        }
        for (int i = 0; i < cnt; i++) {
            int p = p0 + i;
            size_t slot = (size_t)table[p / bs] * (size_t)bs + (size_t)(p % bs);
            float e = expf(s[i] - m);
            l += e;
            f->axpy(acc, e, vp + slot * slot_bytes, hd, f16);
        }
    }
    float *o = j->out + ((size_t)t * j->heads + h) * hd;
    float inv = 1.0f / l;
    for (int i = 0; i < hd; i++)
        o[i] = acc[i] * inv;
}

static void attn_task(void *ctx, int task, int n_tasks) {
    const attn_job *j = ctx;
    int total = j->n * j->heads;
    int lo = (int)((int64_t)task * total / n_tasks),
        hi = (int)((int64_t)(task + 1) * total / n_tasks);
    for (int i = lo; i < hi; i++)
        attend_one(j, i / j->heads, i % j->heads);
}

static int check_attention(sol_backend *be, const sol_kv *kv, int layer, int n, int heads,
                           int kv_heads, int head_dim, int window, const sol_attn_seq *seq) {
    if (!kv || layer < 0 || layer >= kv->n_layers)
        return sol_err_set(&be->err, -EINVAL, "cpu paged_attention: layer %d outside [0, %d)",
                           layer, kv ? kv->n_layers : 0);
    if (kv_heads != kv->kv_heads || head_dim != kv->head_dim)
        return sol_err_set(&be->err, -EINVAL,
                           "cpu paged_attention: kv_heads=%d head_dim=%d but the cache has %d, %d",
                           kv_heads, head_dim, kv->kv_heads, kv->head_dim);
    if (heads <= 0 || heads % kv_heads != 0)
        return sol_err_set(
            &be->err, -EINVAL,
            "cpu paged_attention: heads=%d must be a positive multiple of kv_heads=%d", heads,
            kv_heads);
    if (window < 0)
        return sol_err_set(&be->err, -EINVAL,
                           "cpu paged_attention: window=%d (expected 0 = none, or > 0)", window);
    for (int t = 0; t < n; t++) {
        if (seq[t].n_ctx <= 0 || !seq[t].block_table)
            return sol_err_set(&be->err, -EINVAL,
                               "cpu paged_attention: token %d has n_ctx=%d (expected >= 1) or no "
                               "block table",
                               t, seq[t].n_ctx);
        int nblk = (seq[t].n_ctx + kv->block_size - 1) / kv->block_size;
        for (int i = attn_lo(seq[t].n_ctx, window) / kv->block_size; i < nblk; i++)
            if (seq[t].block_table[i] < 0 || seq[t].block_table[i] >= kv->num_blocks)
                return sol_err_set(
                    &be->err, -EINVAL,
                    "cpu paged_attention: token %d block_table[%d]=%d outside [0, %d)", t, i,
                    seq[t].block_table[i], kv->num_blocks);
    }
    return 0;
}

int cpu_paged_attention(sol_backend *be, sol_kv *kv, int layer, const float *q, float *out, int n,
                        int heads, int kv_heads, int head_dim, float scale, int window,
                        const float *sinks, const sol_attn_seq *per_token) {
    cpu_backend *cb = (cpu_backend *)be;
    int rc = check_attention(be, kv, layer, n, heads, kv_heads, head_dim, window, per_token);
    if (rc || n <= 0) return rc;
    attn_job j = {cb,    kv,     layer, n,   heads,     kv_heads, head_dim,
                  scale, window, q,     out, per_token, sinks};
    int total = n * heads;
    sol_threadpool_run(cb->tp, attn_task, &j, total < cb->n_threads ? total : cb->n_threads);
    return 0;
}
