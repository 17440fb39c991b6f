/* backend_cpu: the CPU implementation of the ops table. Owns a persistent thread pool, the SIMD
 * path chosen at creation, matmul scratch and its KV caches. Element-wise ops and norms are
 * cheap next to the matmuls and run on the calling thread; matmul (cpu_matmul.c) and attention
 * (cpu_attention.c) fan out over the pool. */
#include <errno.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_cpu.h"
#include "cpu_internal.h"
#include "log.h"
#include "rope_freq.h"

static void cpu_free(sol_backend *be) {
    cpu_backend *cb = (cpu_backend *)be;
    while (cb->kvs)
        cpu_kv_free(be, cb->kvs);
    sol_threadpool_free(cb->tp);
    free(cb->xq_buf);
    free(cb->deq);
    free(cb);
}

static int cpu_reserve(sol_backend *be, int max_tokens, int64_t max_dim) {
    if (max_tokens <= 0 || max_dim <= 0)
        return sol_err_set(&be->err, -EINVAL, "cpu reserve: expected positive sizes, got %d x %lld",
                           max_tokens, (long long)max_dim);
    return cpu_scratch_reserve((cpu_backend *)be, max_tokens, max_dim);
}

/* Q4_0 and Q8_0 weights are repacked in place (see cpu_repack.c); other types are used as they
 * are. The llama.cpp reference mode keeps Q8_0 in ggml layout: that kernel sums each row in
 * llama.cpp's order (8 float lanes of 4-element dots, then a fixed tree), which the interleaved
 * kernel's one-float-per-block order does not, and the mode exists to reproduce llama.cpp. */
static int cpu_weight_prepare(sol_backend *be, sol_weight *w) {
    int rc = cpu_weight_check(be, w, "weight_prepare");
    if (rc) return rc;
    if (!cpu_layout_valid(w))
        return sol_err_set(&be->err, -EINVAL,
                           "cpu weight_prepare: weight layout %u is not the CPU's for %s",
                           (unsigned)w->layout, sol_dtype_name(w->type));
    if (w->layout) return 0;
    if (w->type == SOL_DT_Q4_0) return cpu_repack_q4_0(be, w);
    if (w->type == SOL_DT_Q8_0 && !((cpu_backend *)be)->attn_llamacpp)
        return cpu_repack_q8_0(be, w);
    return 0;
}

static void *cpu_buf_alloc(sol_backend *be, size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) sol_err_set(&be->err, -ENOMEM, "cpu buf_alloc: out of memory for %zu bytes", bytes);
    return p;
}

static void cpu_buf_free(sol_backend *be, void *buf) {
    (void)be;
    free(buf);
}

static int cpu_copy(sol_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memmove(dst, src, bytes);
    return 0;
}

/* The sum of squares in double keeps the norm accurate for wide rows at no real cost. */
static int cpu_rmsnorm(sol_backend *be, const float *x, const float *w, float *out, int n, int dim,
                       float eps) {
    if (n < 0 || dim <= 0)
        return sol_err_set(&be->err, -EINVAL,
                           "cpu rmsnorm: expected n >= 0 and dim > 0, got %d, %d", n, dim);
    int lc = ((cpu_backend *)be)->attn_llamacpp;
    for (int t = 0; t < n; t++) {
        const float *xr = x + (size_t)t * dim;
        float *o = out + (size_t)t * dim;
        double ss = 0.0;
        if (lc) /* llama.cpp squares in float */
            for (int i = 0; i < dim; i++)
                ss += (double)(xr[i] * xr[i]);
        else
            for (int i = 0; i < dim; i++)
                ss += (double)xr[i] * xr[i];
        /* llama.cpp (SOL_CPU_ATTN=llamacpp): float squares, the mean and the root in float */
        float scale =
            lc ? 1.0f / sqrtf((float)(ss / dim) + eps) : (float)(1.0 / sqrt(ss / dim + eps));
        for (int i = 0; i < dim; i++)
            o[i] = xr[i] * scale * w[i];
    }
    return 0;
}

/* ggml's rope_yarn angle in float (SOL_CPU_ATTN=llamacpp): the interpolated angle, or with
 * YaRN its mix with the original one by the ramp of pair i. */
static float lc_yarn_theta(const sol_rope_params *p, int i, float interp, float extrap) {
    if (p->ext_factor == 0.0f) return interp;
    float y = ((float)i - p->yarn_low) / fmaxf(0.001f, p->yarn_high - p->yarn_low);
    float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * p->ext_factor;
    float a = interp * (1.0f - mix), b = extrap * mix;
    return a + b;
}

static int cpu_rope(sol_backend *be, float *x, const int32_t *pos, int n, int heads, int head_dim,
                    const sol_rope_params *p) {
    if (heads <= 0 || head_dim <= 0 || head_dim % 2 || head_dim > 1024 || !p || p->freq_base <= 0)
        return sol_err_set(&be->err, -EINVAL,
                           "cpu rope: expected heads > 0, even head_dim <= 1024 and freq_base > 0, "
                           "got heads=%d head_dim=%d",
                           heads, head_dim);
    if (p->scaling_factor > 0 && p->orig_ctx > 0 && p->high_freq_factor <= p->low_freq_factor)
        return sol_err_set(&be->err, -EINVAL,
                           "cpu rope: llama-3 scaling needs high_freq_factor > low_freq_factor, "
                           "got %g and %g",
                           p->high_freq_factor, p->low_freq_factor);
    double inv_freq[SOL_ROPE_MAX_PAIRS];
    float cs[512], sn[512];
    sol_rope_inv_freqs(p, head_dim, inv_freq);
    /* llama.cpp (SOL_CPU_ATTN=llamacpp, without llama-3 bands): the angle of pair i is built by
     * i float multiplications by base^(-2/d), then cosf/sinf; Sol's default is in double. */
    int lc = ((cpu_backend *)be)->attn_llamacpp && !(p->scaling_factor > 0 && p->orig_ctx > 0);
    float step = powf(p->freq_base, -2.0f / (float)head_dim);
    float fs = p->freq_scale > 0.0f ? p->freq_scale : 1.0f;
    float ms = p->mscale > 0.0f ? p->mscale : 1.0f;
    for (int t = 0; t < n; t++) {
        float th_f = (float)pos[t];
        for (int i = 0; i < head_dim / 2; i++, th_f *= step) {
            double th = pos[t] * inv_freq[i];
            float lth = lc ? lc_yarn_theta(p, i, fs * th_f, th_f) : 0.0f;
            cs[i] = (lc ? cosf(lth) : (float)cos(th)) * ms;
            sn[i] = (lc ? sinf(lth) : (float)sin(th)) * ms;
        }
        /* pair i is (v[i * step], v[i * step + off]): NORM (2i, 2i+1), NEOX (i, i + half) */
        int half = head_dim / 2, step = p->neox ? 1 : 2, off = p->neox ? half : 1;
        for (int h = 0; lc && h < heads; h++) {
            float *v = x + ((size_t)t * heads + h) * head_dim;
            for (int i = 0; i < half; i++) {
                float x0 = v[i * step], x1 = v[i * step + off];
                v[i * step] = fmaf(x0, cs[i], -(x1 * sn[i]));
                v[i * step + off] = fmaf(x0, sn[i], x1 * cs[i]);
            }
        }
        for (int h = 0; !lc && h < heads; h++) {
            float *v = x + ((size_t)t * heads + h) * head_dim;
            for (int i = 0; i < half; i++) {
                float x0 = v[i * step], x1 = v[i * step + off];
                v[i * step] = x0 * cs[i] - x1 * sn[i];
                v[i * step + off] = x0 * sn[i] + x1 * cs[i];
            }
        }
    }
    return 0;
}

/* GELU with the tanh approximation, in float as ggml writes it (llama.cpp's table entries). */
static float gelu_tanh(float x) {
    const float k = 0.79788456080286535588f; /* sqrt(2 / pi) */
    return 0.5f * x * (1.0f + tanhf(k * x * (1.0f + 0.044715f * x * x)));
}

/* The same function as x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): one expf instead of
 * tanhf (whose expm1f took ~10% of a Gemma prompt), within an ulp or two. */
static float gelu_fast(float x) {
    const float k = 0.79788456080286535588f;
    return x / (1.0f + expf(-2.0f * k * x * (1.0f + 0.044715f * x * x)));
}

/* llama.cpp's CPU GELU (SOL_CPU_ATTN=llamacpp): the input rounded to F16 and the result looked up
 * in an F16 table, with the tails cut at |x| >= 10. Reproduced so ids compare one for one. */
static float gelu_llamacpp(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return sol_f16_to_f32(sol_f32_to_f16(gelu_tanh(sol_f16_to_f32(sol_f32_to_f16(x)))));
}

typedef enum { ACT_SILU, ACT_SILU_LLAMACPP, ACT_GELU, ACT_GELU_LLAMACPP, ACT_SWIGLU_OAI } act_kind;

typedef struct {
    const float *gate, *up;
    float *out;
    int64_t n;
    act_kind kind;
    float alpha, limit; /* ACT_SWIGLU_OAI */
    int lanes;          /* ACT_SILU_LLAMACPP: the llama.cpp build's expf (sol_backend.ggml_lanes) */
} act_job;

/* gpt-oss's gate as llama.cpp's CPU build computes it (libm's expf: the same in both modes). */
static float swiglu_oai1(float g, float u, float alpha, float limit) {
    float x = limit < g ? limit : g;
    float y = u < -limit ? -limit : limit < u ? limit : u;
    float glu = x / (1.0f + expf(alpha * -x));
    return glu * (y + 1.0f);
}

/* The kind is chosen once per slice, outside the element loop (SiLU runs in every FFN). */
static void act_task(void *ctx, int task, int n_tasks) {
    const act_job *j = ctx;
    int64_t lo = j->n * task / n_tasks, hi = j->n * (task + 1) / n_tasks;
    const float *g = j->gate, *u = j->up;
    float *o = j->out;
    switch (j->kind) {
    case ACT_SILU:
        for (int64_t i = lo; i < hi; i++)
            o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
        break;
    case ACT_SILU_LLAMACPP: /* llama.cpp's SiLU: its vectorized expf (sol_ggml_expf) */
        for (int64_t i = lo; i < hi; i++)
            o[i] = g[i] / (1.0f + sol_ggml_expf(-g[i], j->lanes)) * u[i];
        break;
    case ACT_GELU:
        for (int64_t i = lo; i < hi; i++)
            o[i] = gelu_fast(g[i]) * u[i];
        break;
    case ACT_GELU_LLAMACPP:
        for (int64_t i = lo; i < hi; i++)
            o[i] = gelu_llamacpp(g[i]) * u[i];
        break;
    case ACT_SWIGLU_OAI:
        for (int64_t i = lo; i < hi; i++)
            o[i] = swiglu_oai1(g[i], u[i], j->alpha, j->limit);
        break;
    }
}

/* out = act(gate) * up, element-wise (so split across the threads for wide FFNs: the result of
 * an element never depends on the split). */
static int run_act(sol_backend *be, const float *gate, const float *up, float *out, int64_t n,
                   act_kind kind) {
    cpu_backend *cb = (cpu_backend *)be;
    act_job j = {gate, up, out, n, kind, 0.0f, 0.0f, cb->base.ggml_lanes};
    int tasks = n >= 16384 ? cb->n_threads : 1;
    sol_threadpool_run(cb->tp, act_task, &j, tasks);
    return 0;
}

static int cpu_silu_mul(sol_backend *be, const float *gate, const float *up, float *out,
                        int64_t n_elems) {
    return run_act(be, gate, up, out, n_elems,
                   ((cpu_backend *)be)->attn_llamacpp ? ACT_SILU_LLAMACPP : ACT_SILU);
}

static int cpu_gelu_mul(sol_backend *be, const float *gate, const float *up, float *out,
                        int64_t n_elems) {
    return run_act(be, gate, up, out, n_elems,
                   ((cpu_backend *)be)->attn_llamacpp ? ACT_GELU_LLAMACPP : ACT_GELU);
}

static int cpu_swiglu_oai(sol_backend *be, const float *gate, const float *up, float *out,
                          int64_t n_elems, float alpha, float limit) {
    cpu_backend *cb = (cpu_backend *)be;
    act_job j = {gate, up, out, n_elems, ACT_SWIGLU_OAI, alpha, limit, 0};
    sol_threadpool_run(cb->tp, act_task, &j, n_elems >= 16384 ? cb->n_threads : 1);
    return 0;
}

static int cpu_scale(sol_backend *be, const float *x, float s, float *out, int64_t n_elems) {
    (void)be;
    for (int64_t i = 0; i < n_elems; i++)
        out[i] = x[i] * s;
    return 0;
}

static int cpu_add(sol_backend *be, const float *a, const float *b, float *out, int64_t n_elems) {
    (void)be;
    for (int64_t i = 0; i < n_elems; i++)
        out[i] = a[i] + b[i];
    return 0;
}

static int cpu_embed(sol_backend *be, const sol_weight *table, const int32_t *ids, int n,
                     float *out) {
    int rc = cpu_weight_check(be, table, "embed");
    if (rc) return rc;
    for (int t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= table->rows)
            return sol_err_set(&be->err, -EINVAL, "cpu embed: token %d has id %d outside [0, %lld)",
                               t, ids[t], (long long)table->rows);
    if (!cpu_layout_valid(table))
        return sol_err_set(&be->err, -EINVAL, "cpu embed: weight layout %u is not the CPU's",
                           (unsigned)table->layout);
    int64_t m8 = cpu_interleaved_rows(table);
    for (int t = 0; t < n; t++) {
        float *o = out + (size_t)t * table->cols;
        if (ids[t] < m8 && table->layout == CPU_LAYOUT_Q4_0X8)
            cpu_q4x8_dequant_row(table, ids[t], o);
        else if (ids[t] < m8)
            cpu_q8x8_dequant_row(table, ids[t], o);
        else
            sol_dequantize_row(table->type,
                               (const char *)table->data + (size_t)ids[t] * table->row_bytes, o,
                               table->cols);
    }
    return 0;
}

static int cpu_get_rows(sol_backend *be, const float *src, int64_t width, const int32_t *rows,
                        int n, int64_t src_rows, float *dst) {
    if (width <= 0 || n < 0)
        return sol_err_set(&be->err, -EINVAL, "cpu get_rows: width %lld and n %d", (long long)width,
                           n);
    for (int i = 0; i < n; i++) {
        if (rows[i] < 0 || rows[i] >= src_rows)
            return sol_err_set(&be->err, -EINVAL, "cpu get_rows: row %d is %d, outside [0, %lld)",
                               i, rows[i], (long long)src_rows);
        memmove(dst + (size_t)i * width, src + (size_t)rows[i] * width,
                sizeof(float) * (size_t)width);
    }
    return 0;
}

static int cpu_argmax_rows(sol_backend *be, const float *x, int n, int64_t width, int32_t *ids,
                           float *vals) {
    if (width <= 0 || width > INT32_MAX || n < 0)
        return sol_err_set(&be->err, -EINVAL, "cpu argmax_rows: width %lld and n %d",
                           (long long)width, n);
    for (int i = 0; i < n; i++)
        ids[i] = sol_argmax_f32(x + (size_t)i * width, width, &vals[i]);
    return 0;
}

static int cpu_moe_combine(sol_backend *be, const float *src, int64_t width, const int32_t *rows,
                           const float *w, int n, int k, int64_t src_rows, float *out) {
    if (width <= 0 || n < 0 || k < 1)
        return sol_err_set(&be->err, -EINVAL, "cpu moe_combine: width %lld, n %d, k %d",
                           (long long)width, n, k);
    for (int64_t i = 0; i < (int64_t)n * k; i++)
        if (rows[i] < 0 || rows[i] >= src_rows)
            return sol_err_set(&be->err, -EINVAL,
                               "cpu moe_combine: row %lld is %d, outside [0, %lld)", (long long)i,
                               rows[i], (long long)src_rows);
    for (int t = 0; t < n; t++) {
        float *o = out + (size_t)t * width;
        const int32_t *r = rows + (size_t)t * k;
        const float *wt = w + (size_t)t * k;
        const float *s0 = src + (size_t)r[0] * width;
        for (int64_t c = 0; c < width; c++)
            o[c] = wt[0] * s0[c];
        /* product, then sum, as two statements: never contracted into an FMA, so the CUDA
         * kernel (__fmul_rn, __fadd_rn) gives the same bits */
        for (int j = 1; j < k; j++) {
            const float *sj = src + (size_t)r[j] * width;
            for (int64_t c = 0; c < width; c++) {
                float p = wt[j] * sj[c];
                o[c] += p;
            }
        }
    }
    return 0;
}

static int cpu_allreduce(sol_backend *be, sol_tp_comm *comm, int rank, float *x, int64_t n_elems) {
    return sol_tp_allreduce(comm, rank, x, n_elems, &be->err);
}

static int cpu_synchronize(sol_backend *be) {
    (void)be;
    return 0;
}

static const sol_backend_ops cpu_ops = {
    .name = "cpu",
    .free = cpu_free,
    .reserve = cpu_reserve,
    .weight_prepare = cpu_weight_prepare,
    .buf_alloc = cpu_buf_alloc,
    .buf_free = cpu_buf_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .matmul = cpu_matmul,
    .matmul_many = cpu_matmul_many,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .silu_mul = cpu_silu_mul,
    .gelu_mul = cpu_gelu_mul,
    .swiglu_oai = cpu_swiglu_oai,
    .scale = cpu_scale,
    .add = cpu_add,
    .embed = cpu_embed,
    .get_rows = cpu_get_rows,
    .argmax_rows = cpu_argmax_rows,
    .moe_combine = cpu_moe_combine,
    .kv_alloc = cpu_kv_alloc,
    .kv_free = cpu_kv_free,
    .kv_write = cpu_kv_write,
    .kv_copy_blocks = cpu_kv_copy_blocks,
    .kv_host_io = cpu_kv_host_io,
    .kv_host_bytes = cpu_kv_host_bytes,
    .paged_attention = cpu_paged_attention,
    .allreduce = cpu_allreduce,
    .synchronize = cpu_synchronize,
};

int sol_backend_cpu_variants(char out[][SOL_BACKEND_VARIANT_MAX], int cap) {
    int n = 0;
    for (int i = SOL_ISA_SCALAR; i <= SOL_ISA_AVX512 && n < cap; i++)
        if (sol_cpu_isa_supported((sol_cpu_isa)i))
            snprintf(out[n++], SOL_BACKEND_VARIANT_MAX, "%s", sol_cpu_isa_name((sol_cpu_isa)i));
    return n;
}

/* The reference modes (docs/backend.md): exact (F32 attention, the default) or llamacpp
 * (llama.cpp's float order and F16 rounding, for comparisons with it). */
static const char *const k_modes[] = {"exact", "llamacpp"};

static int mode_of(const char *name) {
    for (int i = 0; i < 2; i++)
        if (!strcmp(name, k_modes[i])) return i;
    return -1;
}

/* "cpu:" variants: a kernel ISA (scalar, avx2, avx512), a reference mode (exact, llamacpp), or
 * both joined by '+' ("avx2+llamacpp"). What the spec leaves out comes from SOL_CPU_ISA and
 * SOL_CPU_ATTN (the mode's older spelling, kept as an alias), else the best ISA and exact. */
static int parse_variant(const char *variant, sol_cpu_isa *isa, int *llamacpp, sol_err *err) {
    char buf[64], *isa_part = NULL;
    int mode = -1;
    if (snprintf(buf, sizeof buf, "%s", variant ? variant : "") >= (int)sizeof buf)
        return sol_err_set(err, -EINVAL, "cpu:%s: too long", variant);
    for (char *save = NULL, *p = strtok_r(buf, "+", &save); p; p = strtok_r(NULL, "+", &save)) {
        int m = mode_of(p);
        if (m >= 0 ? mode >= 0 : isa_part != NULL)
            return sol_err_set(err, -EINVAL, "cpu:%s: %s given twice", variant,
                               m >= 0 ? "a mode (exact, llamacpp)" : "an ISA");
        if (m >= 0)
            mode = m;
        else
            isa_part = p;
    }
    int rc = sol_cpu_isa_select(isa_part, isa, err);
    if (rc == -EINVAL && isa_part)
        return sol_err_set(err, -EINVAL,
                           "cpu:%s: '%s' is neither a kernel ISA (scalar, avx2, avx512) nor a "
                           "mode (exact, llamacpp)",
                           variant, isa_part);
    if (rc) return rc;
    if (mode < 0) {
        const char *env = getenv("SOL_CPU_ATTN");
        if (env && (mode = mode_of(env)) < 0)
            return sol_err_set(err, -EINVAL, "SOL_CPU_ATTN=%s: expected exact or llamacpp", env);
    }
    *llamacpp = mode == 1;
    return 0;
}

sol_backend *sol_backend_cpu_create(const char *variant, const sol_backend_opts *o, sol_err *err) {
    int n_threads = o ? o->threads : 0;
    if (n_threads < 0) {
        sol_err_set(err, -EINVAL, "cpu backend: n_threads must be >= 0 (0 = all cores), got %d",
                    n_threads);
        return NULL;
    }
    if (n_threads == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    sol_cpu_isa isa;
    int llamacpp = 0;
    if (parse_variant(variant, &isa, &llamacpp, err)) return NULL;
    cpu_backend *cb = calloc(1, sizeof(*cb));
    if (!cb) {
        sol_err_set(err, -ENOMEM, "cpu backend: out of memory");
        return NULL;
    }
    cb->base.ops = &cpu_ops;
    cb->n_threads = n_threads;
    cb->isa = isa;
    cb->attn_llamacpp = llamacpp;
    /* the llama.cpp build the llamacpp mode (and the MoE router) reproduce: its AVX-512 builds on
     * the avx512 ISA, else its AVX2 builds (ggml_float.h) */
    cb->base.ggml_lanes = isa >= SOL_ISA_AVX512 ? SOL_GGML_AVX512 : SOL_GGML_AVX2;
    cb->attn = isa == SOL_ISA_AVX512 ? &cpu_attn_avx512
               : isa == SOL_ISA_AVX2 ? &cpu_attn_avx2
                                     : &cpu_attn_scalar;
    cb->tp = sol_threadpool_new(n_threads, err);
    if (!cb->tp) {
        free(cb);
        return NULL;
    }
    LOG_DEBUG("backend", "cpu backend: %d threads, %s kernels", n_threads, sol_cpu_isa_name(isa));
    return &cb->base;
}
