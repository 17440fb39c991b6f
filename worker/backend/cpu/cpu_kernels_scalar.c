/* cpu_kernels_scalar: the portable matmul and attention kernels (the fallback path, and the only
 * path for Q5_0/Q5_1). Each output is one float accumulated left to right, per 32-block for the
 * Q8_0-activation types and per 256-block for the K-quants (the same bits as their SIMD kernels).
 */
#include <math.h>
#include <string.h>

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

/* Sum of a Q5_0/Q5_1 block's 32 quants times the token's quants (offset not applied). */
static int32_t q5_dot(const uint8_t *qs, const uint8_t *qh, const int8_t *x) {
    int32_t dot = 0;
    for (int j = 0; j < 32; j++)
        dot += sol_q5_quant(qs, qh, j) * x[j];
    return dot;
}

/* Q5_0 and Q5_1 against Q8_0 activations (CPU_Q5_WALK). */
static void mm_q5(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    CPU_Q5_WALK(q5_dot);
}

/* Integer parts of one Q4_K or Q5_K super-block (qh NULL for Q4_K) against a token's Q8_K
 * block q with 16-element sums bs: isum = sum_j sc_j * dot_j, msum = sum_j m_j * sum_j(q). */
static void kq45_sums(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh, const int8_t *q,
                      const int16_t *bs, int32_t *isum, int32_t *msum) {
    int32_t is = 0, ms = 0;
    for (int c = 0; c < 4; c++) {
        uint8_t sc1, m1, sc2, m2;
        sol_q4k_scale_min(2 * c, scales, &sc1, &m1);
        sol_q4k_scale_min(2 * c + 1, scales, &sc2, &m2);
        int32_t s1 = 0, s2 = 0;
        for (int l = 0; l < 32; l++) {
            int h1 = qh ? ((qh[l] >> (2 * c)) & 1) << 4 : 0;
            int h2 = qh ? ((qh[l] >> (2 * c + 1)) & 1) << 4 : 0;
            s1 += ((qs[32 * c + l] & 0xF) | h1) * q[64 * c + l];
            s2 += ((qs[32 * c + l] >> 4) | h2) * q[64 * c + 32 + l];
        }
        is += sc1 * s1 + sc2 * s2;
        ms += m1 * (bs[4 * c] + bs[4 * c + 1]) + m2 * (bs[4 * c + 2] + bs[4 * c + 3]);
    }
    *isum = is;
    *msum = ms;
}

/* One Q6_K super-block against a token's Q8_K block: sum_j sc_j * dot_j with the quants' offset
 * 32 removed through the 16-element sums. */
static int32_t kq6_sum(const sol_block_q6_k *b, const int8_t *q, const int16_t *bs) {
    int32_t is = 0;
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        const int8_t *sc = b->scales + 8 * h, *x = q + 128 * h;
        int32_t s[8] = {0};
        for (int l = 0; l < 32; l++) {
            s[l / 16] += ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) * x[l];
            s[2 + l / 16] += ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) * x[l + 32];
            s[4 + l / 16] += ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) * x[l + 64];
            s[6 + l / 16] += ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) * x[l + 96];
        }
        for (int j = 0; j < 8; j++)
            is += sc[j] * (s[j] - 32 * bs[8 * h + j]);
    }
    return is;
}

/* K-quants against Q8_K activations: exact integers per super-block, one float term each. */
static void mm_kquant(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows, nb = K / SOL_QK_K;
    size_t bb = sol_dtype_block_bytes(w->type);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)row_of(w, r);
        for (int t = 0; t < a->n; t++) {
            const int8_t *q = a->kq + (size_t)t * K;
            const float *kd = a->kd + (size_t)t * nb;
            const int16_t *ks = a->ks + (size_t)t * (K / 16);
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = row + b * bb;
                const int8_t *qb = q + b * SOL_QK_K;
                const int16_t *bs = ks + b * 16;
                int32_t isum = 0, msum = 0;
                float d, dmin = 0.0f;
                if (w->type == SOL_DT_Q6_K) {
                    const sol_block_q6_k *k6 = (const sol_block_q6_k *)blk;
                    isum = kq6_sum(k6, qb, bs);
                    d = cpu_fp16_to_fp32(k6->d);
                } else if (w->type == SOL_DT_Q5_K) {
                    const sol_block_q5_k *k5 = (const sol_block_q5_k *)blk;
                    kq45_sums(k5->scales, k5->qs, k5->qh, qb, bs, &isum, &msum);
                    d = cpu_fp16_to_fp32(k5->d);
                    dmin = cpu_fp16_to_fp32(k5->dmin);
                } else {
                    const sol_block_q4_k *k4 = (const sol_block_q4_k *)blk;
                    kq45_sums(k4->scales, k4->qs, NULL, qb, bs, &isum, &msum);
                    d = cpu_fp16_to_fp32(k4->d);
                    dmin = cpu_fp16_to_fp32(k4->dmin);
                }
                acc += cpu_kq_term(kd[b], d, isum, dmin, msum);
            }
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
    case SOL_DT_Q5_0:
    case SOL_DT_Q5_1:
        return mm_q5;
    case SOL_DT_Q4_K:
    case SOL_DT_Q5_K:
    case SOL_DT_Q6_K:
        return mm_kquant;
    }
    return NULL;
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
