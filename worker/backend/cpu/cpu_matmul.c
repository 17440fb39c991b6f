/* cpu_matmul: y = x W^T on the CPU. Quantized weights first get x quantized (Q8_0 per 32, or
 * Q8_K per 256 for the K-quants, as ggml does), then output rows are split statically across the
 * pool's threads. K is never split, so each output is reduced by one thread in one fixed order:
 * batch invariance by construction. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "cpu_internal.h"

/* The scratch holds both activation forms, each region 64-byte aligned:
 * [Q8_0 quants n*K | scales n*K/32 | sums n*K/32] [Q8_K quants n*K | scales n*K/256 | sums n*K/16]
 */
typedef struct {
    size_t xd, xs, kq, kd, ks, total;
} act_layout;

static size_t align64(size_t v) {
    return (v + 63) & ~(size_t)63;
}

static act_layout layout_of(int n, int64_t K) {
    act_layout l;
    size_t nk = (size_t)n * (size_t)K;
    l.xd = align64(nk);
    l.xs = align64(l.xd + (size_t)n * (size_t)(K / 32) * sizeof(float));
    l.kq = align64(l.xs + (size_t)n * (size_t)(K / 32) * sizeof(int32_t));
    l.kd = align64(l.kq + nk);
    l.ks = align64(l.kd + (size_t)n * (size_t)(K / SOL_QK_K) * sizeof(float));
    l.total = align64(l.ks + (size_t)n * (size_t)(K / 16) * sizeof(int16_t));
    return l;
}

int cpu_scratch_reserve(cpu_backend *cb, int max_tokens, int64_t max_dim) {
    size_t need = layout_of(max_tokens, (max_dim + 255) / 256 * 256).total;
    if (need > cb->xq_cap) {
        unsigned char *p = aligned_alloc(64, (need + 63) & ~(size_t)63);
        if (!p)
            return sol_err_set(&cb->base.err, -ENOMEM,
                               "cpu: out of memory for %zu bytes of matmul scratch", need);
        free(cb->xq_buf);
        cb->xq_buf = p;
        cb->xq_cap = need;
    }
    if (max_dim > cb->deq_stride) {
        int64_t stride = (max_dim + 15) & ~(int64_t)15;
        float *d = aligned_alloc(64, (size_t)stride * sizeof(float) * (size_t)cb->n_threads);
        if (!d)
            return sol_err_set(&cb->base.err, -ENOMEM,
                               "cpu: out of memory for dequantize scratch of %lld floats",
                               (long long)max_dim);
        free(cb->deq);
        cb->deq = d;
        cb->deq_stride = stride;
    }
    return 0;
}

int cpu_weight_check(sol_backend *be, const sol_weight *w, const char *op) {
    if (!w || !w->data) return sol_err_set(&be->err, -EINVAL, "cpu %s: weight has no data", op);
    if (!cpu_mm_scalar(w->type))
        return sol_err_set(&be->err, -ENOTSUP,
                           "cpu %s: weight type %u is not supported (expected f32, f16, bf16, "
                           "q8_0, q4_0, q5_0, q5_1, q4_k, q5_k or q6_k)",
                           op, (unsigned)w->type);
    if (w->rows <= 0 || w->cols <= 0)
        return sol_err_set(&be->err, -EINVAL, "cpu %s: weight shape %lld x %lld is empty", op,
                           (long long)w->rows, (long long)w->cols);
    size_t be_n = sol_dtype_block_elems(w->type), bb = sol_dtype_block_bytes(w->type);
    if (w->cols % (int64_t)be_n != 0)
        return sol_err_set(&be->err, -EINVAL,
                           "cpu %s: weight has %lld columns, expected a multiple of %zu for %s", op,
                           (long long)w->cols, be_n, sol_dtype_name(w->type));
    size_t min_row = (size_t)w->cols / be_n * bb;
    if (w->row_bytes < min_row)
        return sol_err_set(&be->err, -EINVAL,
                           "cpu %s: row_bytes %zu is smaller than %zu for %lld %s elements", op,
                           w->row_bytes, min_row, (long long)w->cols, sol_dtype_name(w->type));
    return 0;
}

/* Activations to Q8_0 as llama.cpp's CPU backend quantizes them on x86 (quantize_row_q8_0's AVX
 * path, not the reference routine): the multiplier is 127 / amax (not 1 / (amax / 127), which
 * can differ in the last bit) and the products are rounded half to even (_MM_ROUND_NEAREST; the
 * reference rounds halves away from zero); the scale is amax / 127 in F16. A product on a
 * rounding boundary used to land one quant apart from llama.cpp's, which a qwen3 model with
 * head size 32 amplified to 7e-3 of its logits on one prompt (issue 28). Plus the per-block sum
 * of quants. One scalar routine for every ISA path, so the quantized activations never differ
 * between paths (rintf rounds half to even in the default mode, which Sol never changes). The
 * max skips NaN as fmaxf does. */
static void quantize_x(const float *x, int64_t K, int8_t *q, float *d, int32_t *s) {
    for (int64_t b = 0; b < K / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            float a = fabsf(xb[j]);
            amax = a > amax ? a : amax;
        }
        float dd = amax / 127.0f;
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < 32; j++) {
            int v = (int)rintf(xb[j] * id);
            q[b * 32 + j] = (int8_t)v;
            sum += v;
        }
        d[b] = sol_f16_to_f32(sol_f32_to_f16(dd));
        s[b] = sum;
    }
}

/* Q8_K as ggml's reference quantizer defines it, so K-quant products see llama.cpp's activations:
 * iscale = -127 / (the element of largest magnitude, sign kept), quants rounded half to even and
 * capped at 127 (they stay in [-127, 127], so the kernels' 16-bit pair sums of 63 * 127 cannot
 * saturate), scale d = 1 / iscale as a float, and the sum of every 16 quants. */
static void quantize_x_k(const float *x, int64_t K, int8_t *q, float *d, int16_t *s) {
    for (int64_t b = 0; b < K / SOL_QK_K; b++) {
        const float *xb = x + b * SOL_QK_K;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < SOL_QK_K; j++) {
            float a = fabsf(xb[j]);
            if (a > amax) {
                amax = a;
                max = xb[j];
            }
        }
        float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
        for (int g = 0; g < SOL_QK_K / 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) {
                int v = (int)__builtin_rintf(xb[g * 16 + j] * iscale);
                v = v > 127 ? 127 : v;
                q[b * SOL_QK_K + g * 16 + j] = (int8_t)v;
                sum += v;
            }
            s[b * 16 + g] = (int16_t)sum;
        }
        d[b] = amax != 0.0f ? 1.0f / iscale : 0.0f;
    }
}

typedef struct {
    cpu_backend *cb;
    unsigned acts; /* the forms quant_task writes: bits 1 << cpu_act_kind */
    cpu_mm_fn fn;  /* rows in ggml layout */
    cpu_mm_fn fn8; /* rows [0, m8) of a repacked (Q4_0X8, Q8_0X8) weight; NULL when m8 = 0 */
    int64_t m8;
    cpu_mm_args args;
} mm_job;

/* Row ranges start on multiples of 16 so 8-row groups and 4-row tiles line up; results do not
 * depend on it. */
static void mm_task(void *ctx, int task, int n_tasks) {
    mm_job *j = ctx;
    int64_t M = j->args.w->rows;
    int64_t r0 = ((int64_t)task * M / n_tasks) & ~(int64_t)15;
    int64_t r1 = task + 1 == n_tasks ? M : ((int64_t)(task + 1) * M / n_tasks) & ~(int64_t)15;
    float *scratch = j->cb->deq + (size_t)task * (size_t)j->cb->deq_stride;
    int64_t split = r1 < j->m8 ? r1 : j->m8;
    if (split > r0) j->fn8(&j->args, r0, split, scratch);
    if (split < r0) split = r0;
    if (r1 > split) j->fn(&j->args, split, r1, scratch);
}

static void quant_task(void *ctx, int task, int n_tasks) {
    mm_job *j = ctx;
    const cpu_mm_args *a = &j->args;
    int64_t K = a->w->cols, nb = K / 32, nk = K / SOL_QK_K;
    int t0 = (int)((int64_t)task * a->n / n_tasks),
        t1 = (int)((int64_t)(task + 1) * a->n / n_tasks);
    for (int t = t0; t < t1; t++) {
        const float *x = a->x + (size_t)t * K;
        if (j->acts & (1u << CPU_ACT_Q8_0))
            quantize_x(x, K, (int8_t *)a->xq + (size_t)t * K, (float *)a->xd + (size_t)t * nb,
                       (int32_t *)a->xs + (size_t)t * nb);
        if (j->acts & (1u << CPU_ACT_Q8_K))
            quantize_x_k(x, K, (int8_t *)a->kq + (size_t)t * K, (float *)a->kd + (size_t)t * nk,
                         (int16_t *)a->ks + (size_t)t * (K / 16));
    }
}

static cpu_mm_fn pick_kernel(const cpu_backend *cb, sol_dtype t) {
    cpu_mm_fn fn =
        cb->attn_llamacpp && cb->isa >= SOL_ISA_AVX512 ? cpu_mm_llamacpp_avx512(t) : NULL;
    if (!fn && cb->attn_llamacpp) fn = cpu_mm_kq_llamacpp(t);
    if (fn) return fn;
    if (cb->isa >= SOL_ISA_AVX512) fn = cpu_mm_avx512(t);
    if (!fn && cb->isa >= SOL_ISA_AVX512) fn = cpu_mm_kq_avx512(t);
    if (!fn && cb->isa >= SOL_ISA_AVX2) fn = cpu_mm_avx2(t);
    if (!fn && cb->isa >= SOL_ISA_AVX2) fn = cpu_mm_kq_avx2(t);
    return fn ? fn : cpu_mm_scalar(t);
}

static int check_call(sol_backend *be, const sol_weight *w, const float *x, const float *y, int n) {
    int rc = cpu_weight_check(be, w, "matmul");
    if (rc) return rc;
    if (n <= 0 || !x || !y)
        return sol_err_set(&be->err, -EINVAL,
                           "cpu matmul: need n >= 1 tokens and buffers, got n=%d", n);
    if (!cpu_layout_valid(w))
        return sol_err_set(&be->err, -EINVAL, "cpu matmul: weight layout %u is not the CPU's",
                           (unsigned)w->layout);
    return 0;
}

static mm_job make_job(cpu_backend *cb, const sol_weight *w, const float *x, float *y, int n) {
    mm_job job = {.cb = cb, .acts = 1u << cpu_act_of(w->type), .fn = pick_kernel(cb, w->type)};
    if (w->layout == CPU_LAYOUT_Q4_0X8) job.fn8 = cpu_mm_q4x8(cb->isa);
    if (w->layout == CPU_LAYOUT_Q8_0X8) job.fn8 = cpu_mm_q8x8(cb->isa);
    job.m8 = cpu_interleaved_rows(w);
    job.args = (cpu_mm_args){.w = w, .x = x, .y = y, .n = n, .lanes = cb->base.ggml_lanes};
    act_layout l = layout_of(n, w->cols);
    job.args.xq = (const int8_t *)cb->xq_buf;
    job.args.xd = (const float *)(cb->xq_buf + l.xd);
    job.args.xs = (const int32_t *)(cb->xq_buf + l.xs);
    job.args.kq = (const int8_t *)(cb->xq_buf + l.kq);
    job.args.kd = (const float *)(cb->xq_buf + l.kd);
    job.args.ks = (const int16_t *)(cb->xq_buf + l.ks);
    return job;
}

/* x to Q8_0 and/or Q8_K in the scratch, once for every quantized weight of the call. */
static void quantize_once(cpu_backend *cb, mm_job *job) {
    if (!(job->acts & ~(1u << CPU_ACT_FLOAT))) return;
    if (job->args.n >= 4 * cb->n_threads)
        sol_threadpool_run(cb->tp, quant_task, job, cb->n_threads);
    else
        quant_task(job, 0, 1);
}

int cpu_matmul(sol_backend *be, const sol_weight *w, const float *x, float *y, int n) {
    cpu_backend *cb = (cpu_backend *)be;
    int rc = check_call(be, w, x, y, n);
    if (rc) return rc;
    if ((rc = cpu_scratch_reserve(cb, n, w->cols > w->rows ? w->cols : w->rows))) return rc;
    mm_job job = make_job(cb, w, x, y, n);
    quantize_once(cb, &job);
    /* Decode matmuls are small: a task per thread keeps dispatch at one wake-up. */
    int tasks = w->rows >= 8 * cb->n_threads ? cb->n_threads : 1;
    sol_threadpool_run(cb->tp, mm_task, &job, tasks);
    return 0;
}

#define MANY_MAX 4

typedef struct {
    mm_job jobs[MANY_MAX];
    int count;
} many_job;

/* Each task takes its row range of every weight: the ranges, and so the bits, are those of
 * separate calls with the same task count. */
static void many_task(void *ctx, int task, int n_tasks) {
    many_job *m = ctx;
    for (int i = 0; i < m->count; i++)
        mm_task(&m->jobs[i], task, n_tasks);
}

int cpu_matmul_many(sol_backend *be, const sol_weight *const *ws, float *const *ys, int count,
                    const float *x, int n) {
    cpu_backend *cb = (cpu_backend *)be;
    if (count < 1 || count > MANY_MAX || !ws || !ys)
        return sol_err_set(&be->err, -EINVAL, "cpu matmul_many: need 1..%d weights, got %d",
                           MANY_MAX, count);
    int64_t K = ws[0] ? ws[0]->cols : 0, max_dim = K;
    int rc, small = 0;
    unsigned acts = 0;
    for (int i = 0; i < count; i++) {
        if ((rc = check_call(be, ws[i], x, ys[i], n))) return rc;
        if (ws[i]->cols != K)
            return sol_err_set(&be->err, -EINVAL,
                               "cpu matmul_many: weight %d has %lld columns, weight 0 has %lld", i,
                               (long long)ws[i]->cols, (long long)K);
        if (ws[i]->rows > max_dim) max_dim = ws[i]->rows;
        acts |= 1u << cpu_act_of(ws[i]->type);
        small |= ws[i]->rows < 8 * cb->n_threads;
    }
    if ((rc = cpu_scratch_reserve(cb, n, max_dim))) return rc;
    many_job m = {.count = count};
    for (int i = 0; i < count; i++)
        m.jobs[i] = make_job(cb, ws[i], x, ys[i], n);
    m.jobs[0].acts = acts; /* every form any weight of the call reads */
    quantize_once(cb, &m.jobs[0]);
    sol_threadpool_run(cb->tp, many_task, &m, small ? 1 : cb->n_threads);
    return 0;
}
