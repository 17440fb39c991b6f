/* backend_cuda_emu: the ops table on the CUDA kernels (k_*.cu) compiled as host C++ against the
 * emulation. Buffers are host memory, launches run at once and in order, so synchronize has
 * nothing to wait for. Inputs are checked as the CPU backend checks them, with the same kind of
 * message ("what was expected, what was found"). */
#include "backend_cuda_emu.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SOL_CUDA_EMU 1
#include "cuda_kernels.h"

typedef struct emu_backend {
    sol_backend base;
    void *scratch; /* quantized activations of up to SOL_CUDA_GEMV_MAX_TOKENS tokens */
    size_t scratch_bytes;
} emu_backend;

struct sol_kv {
    int n_layers, num_blocks, block_size, kv_heads, head_dim, f16;
    size_t pool_bytes;
    unsigned char **pools; /* 2 * n_layers: K of layer l at 2l, V at 2l + 1 */
};

static void emu_free(sol_backend *be) {
    free(((emu_backend *)be)->scratch);
    free(be);
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
        return 1;
    default:
        return 0;
    }
}

static int check_weight(sol_backend *be, const sol_weight *w, const char *op) {
    if (!w || !w->data)
        return sol_err_set(&be->err, -EINVAL, "cuda-emu %s: weight has no data", op);
    if (!type_ok(w->type))
        return sol_err_set(&be->err, -ENOTSUP,
                           "cuda-emu %s: weight type %u is not supported (expected f32, f16, bf16, "
                           "q8_0, q4_0, q5_0, q5_1, q4_k, q5_k or q6_k)",
                           op, (unsigned)w->type);
    if (w->rows <= 0 || w->cols <= 0)
        return sol_err_set(&be->err, -EINVAL, "cuda-emu %s: weight shape %lld x %lld is empty", op,
                           (long long)w->rows, (long long)w->cols);
    size_t per = sol_dtype_block_elems(w->type), bb = sol_dtype_block_bytes(w->type);
    if (w->cols % (int64_t)per != 0)
        return sol_err_set(
            &be->err, -EINVAL,
            "cuda-emu %s: weight has %lld columns, expected a multiple of %zu for %s", op,
            (long long)w->cols, per, sol_dtype_name(w->type));
    if (w->row_bytes < (size_t)w->cols / per * bb)
        return sol_err_set(&be->err, -EINVAL, "cuda-emu %s: row_bytes %zu is too small for %s", op,
                           w->row_bytes, sol_dtype_name(w->type));
    if (w->layout != 0)
        return sol_err_set(&be->err, -EINVAL, "cuda-emu %s: weight layout %u is not ggml's", op,
                           (unsigned)w->layout);
    return 0;
}

static int emu_weight_prepare(sol_backend *be, sol_weight *w) {
    return check_weight(be, w, "weight_prepare"); /* host memory: used where it lies */
}

static void *emu_buf_alloc(sol_backend *be, size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!p) sol_err_set(&be->err, -ENOMEM, "cuda-emu: out of memory for %zu bytes", bytes);
    return p;
}

static void emu_buf_free(sol_backend *be, void *buf) {
    (void)be;
    free(buf);
}

static int emu_copy(sol_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memmove(dst, src, bytes);
    return 0;
}

static int grow_scratch(emu_backend *b, int64_t K) {
    size_t need = SOL_CUDA_FN(gemv_scratch_bytes)(SOL_CUDA_GEMV_MAX_TOKENS, (int)K);
    if (need <= b->scratch_bytes) return 0;
    void *p = realloc(b->scratch, need);
    if (!p) return sol_err_set(&b->base.err, -ENOMEM, "cuda-emu matmul: out of memory");
    b->scratch = p;
    b->scratch_bytes = need;
    return 0;
}

/* Tokens in groups of SOL_CUDA_GEMV_MAX_TOKENS: a token's sums never depend on its group. */
static int emu_matmul(sol_backend *be, const sol_weight *w, const float *x, float *y, int n) {
    int rc = check_weight(be, w, "matmul");
    if (rc) return rc;
    if (n <= 0 || !x || !y)
        return sol_err_set(&be->err, -EINVAL,
                           "cuda-emu matmul: need n >= 1 tokens and buffers, got n=%d", n);
    emu_backend *b = (emu_backend *)be;
    if ((rc = grow_scratch(b, w->cols))) return rc;
    for (int t0 = 0; t0 < n; t0 += SOL_CUDA_GEMV_MAX_TOKENS) {
        int cnt = n - t0 < SOL_CUDA_GEMV_MAX_TOKENS ? n - t0 : SOL_CUDA_GEMV_MAX_TOKENS;
        rc = SOL_CUDA_FN(gemv)((int)w->type, w->data, w->row_bytes, (int)w->rows, (int)w->cols,
                               x + (size_t)t0 * w->cols, y + (size_t)t0 * w->rows, cnt, b->scratch,
                               NULL);
        if (rc)
            return sol_err_set(&be->err, rc, "cuda-emu matmul: %s weights, %d tokens: refused",
                               sol_dtype_name(w->type), cnt);
    }
    return 0;
}

static int emu_matmul_many(sol_backend *be, const sol_weight *const *ws, float *const *ys,
                           int count, const float *x, int n) {
    if (count < 1 || !ws || !ys)
        return sol_err_set(&be->err, -EINVAL, "cuda-emu matmul_many: need weights, got %d", count);
    for (int i = 0; i < count; i++) {
        int rc = check_weight(be, ws[i], "matmul_many");
        if (rc) return rc;
        if (ws[i]->cols != ws[0]->cols)
            return sol_err_set(
                &be->err, -EINVAL,
                "cuda-emu matmul_many: weight %d has %lld columns, weight 0 has %lld", i,
                (long long)ws[i]->cols, (long long)ws[0]->cols);
    }
    for (int i = 0; i < count; i++) {
        int rc = emu_matmul(be, ws[i], x, ys[i], n);
        if (rc) return rc;
    }
    return 0;
}

static int emu_rmsnorm(sol_backend *be, const float *x, const float *w, float *out, int n, int dim,
                       float eps) {
    if (n < 0 || dim <= 0)
        return sol_err_set(&be->err, -EINVAL,
                           "cuda-emu rmsnorm: expected n >= 0 and dim > 0, got %d, %d", n, dim);
    SOL_CUDA_FN(rmsnorm)(x, w, out, n, dim, eps, NULL);
    return 0;
}

static int emu_rope(sol_backend *be, float *x, const int32_t *pos, int n, int heads, int head_dim,
                    const sol_rope_params *p) {
    if (heads <= 0 || head_dim <= 0 || head_dim % 2 || head_dim > 1024 || !p || p->freq_base <= 0)
        return sol_err_set(&be->err, -EINVAL,
                           "cuda-emu rope: expected heads > 0, even head_dim <= 1024 and "
                           "freq_base > 0, got heads=%d head_dim=%d",
                           heads, head_dim);
    if (p->scaling_factor > 0 && p->orig_ctx > 0 && p->high_freq_factor <= p->low_freq_factor)
        return sol_err_set(&be->err, -EINVAL,
                           "cuda-emu rope: llama-3 scaling needs high_freq_factor > "
                           "low_freq_factor, got %g and %g",
                           p->high_freq_factor, p->low_freq_factor);
    sol_cuda_rope_args a = {p->freq_base,
                            p->scaling_factor,
                            p->low_freq_factor,
                            p->high_freq_factor,
                            p->freq_scale,
                            p->orig_ctx,
                            p->neox};
    SOL_CUDA_FN(rope)(x, pos, n, heads, head_dim, a, NULL);
    return 0;
}

static int emu_silu_mul(sol_backend *be, const float *g, const float *u, float *o, int64_t n) {
    (void)be;
    SOL_CUDA_FN(silu_mul)(g, u, o, n, NULL);
    return 0;
}

static int emu_gelu_mul(sol_backend *be, const float *g, const float *u, float *o, int64_t n) {
    (void)be;
    SOL_CUDA_FN(gelu_mul)(g, u, o, n, NULL);
    return 0;
}

static int emu_scale(sol_backend *be, const float *x, float s, float *o, int64_t n) {
    (void)be;
    SOL_CUDA_FN(scale)(x, s, o, n, NULL);
    return 0;
}

static int emu_add(sol_backend *be, const float *a, const float *b, float *o, int64_t n) {
    (void)be;
    SOL_CUDA_FN(add)(a, b, o, n, NULL);
    return 0;
}

static int emu_embed(sol_backend *be, const sol_weight *table, const int32_t *ids, int n,
                     float *out) {
    int rc = check_weight(be, table, "embed");
    if (rc) return rc;
    for (int t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= table->rows)
            return sol_err_set(&be->err, -EINVAL,
                               "cuda-emu embed: token %d has id %d outside [0, %lld)", t, ids[t],
                               (long long)table->rows);
    rc = SOL_CUDA_FN(embed)((int)table->type, table->data, table->row_bytes, (int)table->cols, ids,
                            n, out, NULL);
    return rc ? sol_err_set(&be->err, rc, "cuda-emu embed: %s tables are not read",
                            sol_dtype_name(table->type))
              : 0;
}

static void emu_kv_free(sol_backend *be, sol_kv *kv) {
    (void)be;
    if (!kv) return;
    for (int i = 0; kv->pools && i < 2 * kv->n_layers; i++)
        free(kv->pools[i]);
    free(kv->pools);
    free(kv);
}

static sol_kv *emu_kv_alloc(sol_backend *be, int n_layers, int num_blocks, int block_size,
                            int n_kv_heads, int head_dim, sol_dtype dtype) {
    if ((dtype != SOL_DT_F16 && dtype != SOL_DT_F32) || n_layers < 1 || num_blocks < 1 ||
        block_size < 1 || n_kv_heads < 1 || head_dim < 1 || head_dim > 256) {
        sol_err_set(&be->err, -EINVAL,
                    "cuda-emu kv_alloc: expected f16/f32, positive sizes and head_dim <= 256, got "
                    "%s, layers %d, blocks %d x %d, %d heads of %d",
                    sol_dtype_name(dtype), n_layers, num_blocks, block_size, n_kv_heads, head_dim);
        return NULL;
    }
    sol_kv *kv = calloc(1, sizeof *kv);
    if (!kv || !(kv->pools = calloc((size_t)n_layers * 2, sizeof *kv->pools))) {
        free(kv);
        sol_err_set(&be->err, -ENOMEM, "cuda-emu kv_alloc: out of memory");
        return NULL;
    }
    *kv = (sol_kv){n_layers, num_blocks,          block_size, n_kv_heads,
                   head_dim, dtype == SOL_DT_F16, 0,          kv->pools};
    kv->pool_bytes = (size_t)num_blocks * block_size * n_kv_heads * head_dim * (kv->f16 ? 2 : 4);
    for (int i = 0; i < 2 * n_layers; i++)
        if (!(kv->pools[i] = calloc(1, kv->pool_bytes))) {
            emu_kv_free(be, kv);
            sol_err_set(&be->err, -ENOMEM, "cuda-emu kv_alloc: out of memory for the pools");
            return NULL;
        }
    return kv;
}

static int emu_kv_write(sol_backend *be, sol_kv *kv, int layer, const float *k, const float *v,
                        const int32_t *slots, int n) {
    if (!kv || layer < 0 || layer >= kv->n_layers)
        return sol_err_set(&be->err, -EINVAL, "cuda-emu kv_write: layer %d outside [0, %d)", layer,
                           kv ? kv->n_layers : 0);
    long long cap = (long long)kv->num_blocks * kv->block_size;
    for (int t = 0; t < n; t++)
        if (slots[t] < 0 || slots[t] >= cap)
            return sol_err_set(&be->err, -EINVAL,
                               "cuda-emu kv_write: token %d slot %d outside [0, %lld)", t, slots[t],
                               cap);
    SOL_CUDA_FN(kv_write)
    (kv->pools[2 * layer], kv->pools[2 * layer + 1], kv->f16, kv->kv_heads * kv->head_dim, k, v,
     slots, n, NULL);
    return 0;
}

static int emu_kv_copy_blocks(sol_backend *be, sol_kv *kv, const int32_t *src, const int32_t *dst,
                              int count) {
    for (int i = 0; i < count; i++)
        if (src[i] < 0 || src[i] >= kv->num_blocks || dst[i] < 0 || dst[i] >= kv->num_blocks)
            return sol_err_set(&be->err, -EINVAL,
                               "cuda-emu kv_copy_blocks: pair %d (%d -> %d) outside [0, %d)", i,
                               src[i], dst[i], kv->num_blocks);
    SOL_CUDA_FN(kv_copy_blocks)
    ((void *const *)kv->pools, 2 * kv->n_layers, kv->pool_bytes / (size_t)kv->num_blocks, src, dst,
     count, NULL);
    return 0;
}

static int check_attention(sol_backend *be, const sol_kv *kv, int layer, int n, int heads,
                           int kv_heads, int head_dim, int window, const sol_attn_seq *seq) {
    if (!kv || layer < 0 || layer >= kv->n_layers)
        return sol_err_set(&be->err, -EINVAL, "cuda-emu paged_attention: layer %d outside [0, %d)",
                           layer, kv ? kv->n_layers : 0);
    if (kv_heads != kv->kv_heads || head_dim != kv->head_dim || heads <= 0 || heads % kv_heads)
        return sol_err_set(&be->err, -EINVAL,
                           "cuda-emu paged_attention: heads=%d kv_heads=%d head_dim=%d for a cache "
                           "of %d, %d (heads must be a multiple of kv_heads)",
                           heads, kv_heads, head_dim, kv->kv_heads, kv->head_dim);
    if (window < 0)
        return sol_err_set(&be->err, -EINVAL,
                           "cuda-emu paged_attention: window=%d (expected 0 = none, or > 0)",
                           window);
    for (int t = 0; t < n; t++) {
        int ctx = seq[t].n_ctx, lo = window > 0 && ctx > window ? ctx - window : 0;
        if (ctx <= 0 || !seq[t].block_table)
            return sol_err_set(&be->err, -EINVAL,
                               "cuda-emu paged_attention: token %d has n_ctx=%d (expected >= 1) "
                               "or no block table",
                               t, ctx);
        for (int i = lo / kv->block_size; i < (ctx + kv->block_size - 1) / kv->block_size; i++)
            if (seq[t].block_table[i] < 0 || seq[t].block_table[i] >= kv->num_blocks)
                return sol_err_set(&be->err, -EINVAL,
                                   "cuda-emu paged_attention: token %d block_table[%d]=%d outside "
                                   "[0, %d)",
                                   t, i, seq[t].block_table[i], kv->num_blocks);
    }
    return 0;
}

/* The kernel reads block tables as one n x stride array (what a GPU step uploads). */
static int emu_paged_attention(sol_backend *be, sol_kv *kv, int layer, const float *q, float *out,
                               int n, int heads, int kv_heads, int head_dim, float scale,
                               int window, const sol_attn_seq *seq) {
    int rc = check_attention(be, kv, layer, n, heads, kv_heads, head_dim, window, seq);
    if (rc || n <= 0) return rc;
    int stride = 1;
    for (int t = 0; t < n; t++) {
        int nb = (seq[t].n_ctx + kv->block_size - 1) / kv->block_size;
        stride = nb > stride ? nb : stride;
    }
    int32_t *tables = malloc(sizeof(int32_t) * (size_t)n * (size_t)stride);
    int32_t *ctx = malloc(sizeof(int32_t) * (size_t)n);
    if (!tables || !ctx) {
        free(tables), free(ctx);
        return sol_err_set(&be->err, -ENOMEM, "cuda-emu paged_attention: out of memory");
    }
    for (int t = 0; t < n; t++) {
        int nb = (seq[t].n_ctx + kv->block_size - 1) / kv->block_size;
        memcpy(tables + (size_t)t * stride, seq[t].block_table, sizeof(int32_t) * (size_t)nb);
        ctx[t] = seq[t].n_ctx;
    }
    SOL_CUDA_FN(paged_attention)
    (kv->pools[2 * layer], kv->pools[2 * layer + 1], kv->f16, kv->block_size, q, out, n, heads,
     kv_heads, head_dim, scale, window, tables, stride, ctx, NULL);
    free(tables), free(ctx);
    return 0;
}

static int emu_allreduce(sol_backend *be, float *x, int64_t n) {
    (void)be, (void)x, (void)n;
    return 0;
}

static int emu_synchronize(sol_backend *be) {
    (void)be;
    return 0;
}

static const sol_backend_ops emu_ops = {
    .name = "cuda-emu",
    .free = emu_free,
    .weight_prepare = emu_weight_prepare,
    .buf_alloc = emu_buf_alloc,
    .buf_free = emu_buf_free,
    .upload = emu_copy,
    .download = emu_copy,
    .matmul = emu_matmul,
    .matmul_many = emu_matmul_many,
    .rmsnorm = emu_rmsnorm,
    .rope = emu_rope,
    .silu_mul = emu_silu_mul,
    .gelu_mul = emu_gelu_mul,
    .scale = emu_scale,
    .add = emu_add,
    .embed = emu_embed,
    .kv_alloc = emu_kv_alloc,
    .kv_free = emu_kv_free,
    .kv_write = emu_kv_write,
    .kv_copy_blocks = emu_kv_copy_blocks,
    .paged_attention = emu_paged_attention,
    .allreduce = emu_allreduce,
    .synchronize = emu_synchronize,
};

int sol_backend_cuda_emu_variants(char out[][SOL_BACKEND_VARIANT_MAX], int cap) {
    if (cap < 1) return 0;
    strcpy(out[0], "host");
    return 1;
}

sol_backend *sol_backend_cuda_emu_create(const char *variant, const sol_backend_opts *o,
                                         sol_err *err) {
    (void)o; /* one emulated device; threads do not apply */
    if (variant && *variant && strcmp(variant, "host") != 0) {
        sol_err_set(err, -EINVAL, "cuda-emu:%s: expected the variant host", variant);
        return NULL;
    }
    emu_backend *b = calloc(1, sizeof *b);
    if (!b) {
        sol_err_set(err, -ENOMEM, "cuda-emu: out of memory");
        return NULL;
    }
    b->base.ops = &emu_ops;
    return &b->base;
}
