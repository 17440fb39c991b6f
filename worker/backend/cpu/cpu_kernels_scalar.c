/* cpu_kernels_scalar: the portable matmul and attention kernels (the fallback path, and the only
 * path for Q4_K/Q6_K), plus dequantization of one row of every supported type. Each output is
 * one float accumulated left to right, per 32-block for the quantized types. */
#include <math.h>

#include "cpu_internal.h"

static const char *row_of(const sol_weight *w, int64_t r) {
    return (const char *)w->data + (size_t)r * w->row_bytes;
}

static float load_f(sol_dtype t, const void *row, int64_t k) {
    switch (t) {
    case SOL_DT_F16:
        return cpu_fp16_to_fp32(((const uint16_t *)row)[k]);
    case SOL_DT_BF16:
        return cpu_bf16_to_fp32(((const uint16_t *)row)[k]);
    default:
        return ((const float *)row)[k];
    }
}

static void mm_float(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows;
    for (int64_t r = r0; r < r1; r++) {
        const char *wr = row_of(w, r);
        for (int t = 0; t < a->n; t++) {
            const float *x = a->x + (size_t)t * K;
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++)
                acc += load_f(w->type, wr, k) * x[k];
            a->y[(size_t)t * M + r] = acc;
        }
    }
}

static void mm_q8_0(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows, nb = K / 32;
    for (int64_t r = r0; r < r1; r++) {
        const sol_block_q8_0 *wb = (const sol_block_q8_0 *)row_of(w, r);
        for (int t = 0; t < a->n; t++) {
            const int8_t *xq = a->xq + (size_t)t * K;
            const float *xd = a->xd + (size_t)t * nb;
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                int32_t dot = 0;
                for (int j = 0; j < 32; j++)
                    dot += wb[b].qs[j] * xq[b * 32 + j];
                acc += (float)dot * (cpu_fp16_to_fp32(wb[b].d) * xd[b]);
            }
            a->y[(size_t)t * M + r] = acc;
        }
    }
}

static void mm_q4_0(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows, nb = K / 32;
    for (int64_t r = r0; r < r1; r++) {
        const sol_block_q4_0 *wb = (const sol_block_q4_0 *)row_of(w, r);
        for (int t = 0; t < a->n; t++) {
            const int8_t *xq = a->xq + (size_t)t * K;
            const float *xd = a->xd + (size_t)t * nb;
            const int32_t *xs = a->xs + (size_t)t * nb;
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const int8_t *xb = xq + b * 32;
                int32_t dot = -8 * xs[b];
                for (int j = 0; j < 16; j++)
                    dot += (wb[b].qs[j] & 0xF) * xb[j] + (wb[b].qs[j] >> 4) * xb[j + 16];
                acc += (float)dot * (cpu_fp16_to_fp32(wb[b].d) * xd[b]);
            }
            a->y[(size_t)t * M + r] = acc;
        }
    }
}

/* K-quants: dequantize the row once, then a float dot per token. */
static void mm_dequant(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows;
    for (int64_t r = r0; r < r1; r++) {
        cpu_dequant_row(w->type, row_of(w, r), scratch, K);
        for (int t = 0; t < a->n; t++) {
            const float *x = a->x + (size_t)t * K;
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++)
                acc += scratch[k] * x[k];
            a->y[(size_t)t * M + r] = acc;
        }
    }
}

cpu_mm_fn cpu_mm_scalar(sol_dtype t) {
    switch (t) {
    case SOL_DT_F32:
    case SOL_DT_F16:
    case SOL_DT_BF16:
        return mm_float;
    case SOL_DT_Q8_0:
        return mm_q8_0;
    case SOL_DT_Q4_0:
        return mm_q4_0;
    case SOL_DT_Q4_K:
    case SOL_DT_Q6_K:
        return mm_dequant;
    }
    return NULL;
}

static void q4_k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void dequant_q4_k(const sol_block_q4_k *b, float *y) {
    float d = cpu_fp16_to_fp32(b->d), dmin = cpu_fp16_to_fp32(b->dmin);
    const uint8_t *q = b->qs;
    for (int j = 0, is = 0; j < SOL_QK_K; j += 64, is += 2, q += 32) {
        uint8_t sc, m;
        q4_k_scale_min(is, b->scales, &sc, &m);
        float d1 = d * sc, m1 = dmin * m;
        q4_k_scale_min(is + 1, b->scales, &sc, &m);
        float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (q[l] & 0xF) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (q[l] >> 4) - m2;
    }
}

static void dequant_q6_k(const sol_block_q6_k *b, float *y) {
    float d = cpu_fp16_to_fp32(b->d);
    const uint8_t *ql = b->ql, *qh = b->qh;
    const int8_t *sc = b->scales;
    for (int n = 0; n < SOL_QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * sc[is + 0] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
    }
}

void cpu_dequant_row(sol_dtype t, const void *src, float *dst, int64_t n) {
    switch (t) {
    case SOL_DT_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case SOL_DT_F16:
    case SOL_DT_BF16:
        for (int64_t k = 0; k < n; k++)
            dst[k] = load_f(t, src, k);
        return;
    case SOL_DT_Q8_0:
        for (int64_t b = 0; b < n / 32; b++) {
            const sol_block_q8_0 *blk = (const sol_block_q8_0 *)src + b;
            float d = cpu_fp16_to_fp32(blk->d);
            for (int j = 0; j < 32; j++)
                dst[b * 32 + j] = blk->qs[j] * d;
        }
        return;
    case SOL_DT_Q4_0:
        for (int64_t b = 0; b < n / 32; b++) {
            const sol_block_q4_0 *blk = (const sol_block_q4_0 *)src + b;
            float d = cpu_fp16_to_fp32(blk->d);
            for (int j = 0; j < 16; j++) {
                dst[b * 32 + j] = ((blk->qs[j] & 0xF) - 8) * d;
                dst[b * 32 + j + 16] = ((blk->qs[j] >> 4) - 8) * d;
            }
        }
        return;
    case SOL_DT_Q4_K:
        for (int64_t b = 0; b < n / SOL_QK_K; b++)
            dequant_q4_k((const sol_block_q4_k *)src + b, dst + b * SOL_QK_K);
        return;
    case SOL_DT_Q6_K:
        for (int64_t b = 0; b < n / SOL_QK_K; b++)
            dequant_q6_k((const sol_block_q6_k *)src + b, dst + b * SOL_QK_K);
        return;
    }
}

static float attn_dot(const float *q, const void *k, int hd, int f16) {
    float acc = 0.0f;
    if (f16) {
        for (int i = 0; i < hd; i++)
            acc += q[i] * cpu_fp16_to_fp32(((const uint16_t *)k)[i]);
    } else {
        for (int i = 0; i < hd; i++)
            acc += q[i] * ((const float *)k)[i];
    }
    return acc;
}

static void attn_axpy(float *acc, float a, const void *v, int hd, int f16) {
    if (f16) {
        for (int i = 0; i < hd; i++)
            acc[i] += a * cpu_fp16_to_fp32(((const uint16_t *)v)[i]);
    } else {
        for (int i = 0; i < hd; i++)
            acc[i] += a * ((const float *)v)[i];
    }
}

static void attn_scale(float *acc, float a, int hd) {
    for (int i = 0; i < hd; i++)
        acc[i] *= a;
}

const cpu_attn_fns cpu_attn_scalar = {attn_dot, attn_axpy, attn_scale};
