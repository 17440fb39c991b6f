/* cpu_kernels_scalar: the portable matmul and attention kernels (the fallback path, and the only
 * path for Q5_0/Q5_1). Each output is one float accumulated left to right, per 32-block for the
 * Q8_0-activation types and per 256-block for the K-quants (the same bits as their SIMD kernels).
 */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"
#include "kq_dot.h"

static const char *row_of(const sol_weight *w, int64_t r) {
    return (const char *)w->data + (size_t)r * w->row_bytes;
}

static float load_f(sol_dtype t, const void *row, int64_t k) {
    switch (t) {
    case SOL_DT_F16:
        return sol_f16_to_f32(((const uint16_t *)row)[k]);
    case SOL_DT_BF16:
        return sol_bf16_to_f32(((const uint16_t *)row)[k]);
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
                acc += (float)dot * (sol_f16_to_f32(wb[b].d) * xd[b]);
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
                acc += (float)dot * (sol_f16_to_f32(wb[b].d) * xd[b]);
            }
            a->y[(size_t)t * M + r] = acc;
        }
    }
}

/* MXFP4 against Q8_0 activations: the block's 32 values (integers, sol_mxfp4_values) times the
 * token's quants exactly, then one float term with the E8M0 scale. */
static int32_t mxfp4_dot(const uint8_t *qs, const int8_t *xb, int32_t xsum) {
    (void)xsum;
    int32_t dot = 0;
    for (int j = 0; j < 16; j++)
        dot += sol_mxfp4_values[qs[j] & 0xF] * xb[j] + sol_mxfp4_values[qs[j] >> 4] * xb[j + 16];
    return dot;
}

static void mm_mxfp4(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    CPU_MXFP4_WALK(mxfp4_dot);
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
                    isum = sol_kq6_sum(k6->ql, k6->qh, k6->scales, qb, bs);
                    d = sol_f16_to_f32(k6->d);
                } else if (w->type == SOL_DT_Q5_K) {
                    const sol_block_q5_k *k5 = (const sol_block_q5_k *)blk;
                    sol_kq45_sums(k5->scales, k5->qs, k5->qh, qb, bs, &isum, &msum);
                    d = sol_f16_to_f32(k5->d);
                    dmin = sol_f16_to_f32(k5->dmin);
                } else {
                    const sol_block_q4_k *k4 = (const sol_block_q4_k *)blk;
                    sol_kq45_sums(k4->scales, k4->qs, NULL, qb, bs, &isum, &msum);
                    d = sol_f16_to_f32(k4->d);
                    dmin = sol_f16_to_f32(k4->dmin);
                }
                acc += cpu_kq_term(kd[b], d, isum, dmin, msum);
            }
            a->y[(size_t)t * M + r] = acc;
        }
    }
}

/* ---- llama.cpp's float order for K-quants (SOL_CPU_ATTN=llamacpp) -------------------------
 * The same exact integers, combined in floats the way llama.cpp's x86 kernels do (read in
 * ggml-cpu's arch/x86 quants.c and repack.cpp), so its outputs can be reproduced bit for bit:
 * - Q4_K with rows % 8 == 0 is repacked by llama.cpp into 8-row groups: per super-block one
 *   integer dot and one integer min sum, each fused into its own float accumulator with
 *   d * dx, the two subtracted at the end (its GEMM, AVX2 and AVX-512 builds alike, which
 *   takes a batch's first n - n % 4 tokens, fuses per 64-element chunk instead: this mode is
 *   not batch invariant);
 * - otherwise (Q4_K, Q5_K, Q6_K) its AVX2 vec_dot: eight int32 lanes per super-block (lane L
 *   holds bytes 4L..4L+3 of every 32-byte chunk), each fused into its float lane with d * dx,
 *   the lanes summed pairwise at the end; Q4_K's mins in four more lanes, Q5_K's in one float. */

/* Lane sums of one Q4_K/Q5_K super-block, per 64-element chunk j: lane[j][L] covers elements
 * 64j + 4L..4L+3 (low nibbles, scale 2j) and 64j + 32 + 4L..4L+3 (high nibbles, scale 2j + 1). */
static void lc_q45_lanes(const uint8_t *qs, const uint8_t *qh, const uint8_t sc[8], const int8_t *q,
                         int32_t lane[4][8]) {
    for (int j = 0; j < 4; j++)
        for (int L = 0; L < 8; L++) {
            int32_t lo = 0, hi = 0;
            for (int k = 4 * L; k < 4 * L + 4; k++) {
                int h0 = qh ? ((qh[k] >> (2 * j)) & 1) << 4 : 0;
                int h1 = qh ? ((qh[k] >> (2 * j + 1)) & 1) << 4 : 0;
                lo += ((qs[32 * j + k] & 0xF) + h0) * q[64 * j + k];
                hi += ((qs[32 * j + k] >> 4) + h1) * q[64 * j + 32 + k];
            }
            lane[j][L] = sc[2 * j] * lo + sc[2 * j + 1] * hi;
        }
}

/* Lane sums of one Q6_K super-block with the offset 32 removed per lane as llama.cpp does. */
static void lc_q6_lanes(const sol_block_q6_k *b, const int8_t *q, const int16_t *bs,
                        int32_t lane[8]) {
    for (int L = 0; L < 8; L++) {
        int32_t s = 0;
        for (int j = 0; j < 2; j++) {
            const uint8_t *ql = b->ql + 64 * j, *qh = b->qh + 32 * j;
            for (int c = 0; c < 4; c++) {
                int32_t dot = 0;
                for (int k = 4 * L; k < 4 * L + 4; k++) {
                    int lo = c & 1 ? ql[32 + k] : ql[k];
                    int v = (c < 2 ? lo & 0xF : lo >> 4) | (((qh[k] >> (2 * c)) & 3) << 4);
                    dot += v * q[128 * j + 32 * c + k];
                }
                s += b->scales[8 * j + 2 * c + (L >= 4)] * dot;
            }
        }
        lane[L] = s - 32 * (bs[2 * L] * b->scales[2 * L] + bs[2 * L + 1] * b->scales[2 * L + 1]);
    }
}

typedef struct lc_acc {
    float lane[8], mins[4], summs; /* vec_dot: eight lanes, Q4_K's four min lanes, Q5_K's min */
    float dot, min;                /* repacked Q4_K */
} lc_acc;

static void lc_q6_block(const sol_block_q6_k *k6, const int8_t *q, const int16_t *bs, float dx,
                        lc_acc *a) {
    int32_t lane[8];
    float d = dx * sol_f16_to_f32(k6->d);
    lc_q6_lanes(k6, q, bs, lane);
    for (int L = 0; L < 8; L++)
        a->lane[L] = fmaf(d, (float)lane[L], a->lane[L]);
}

/* Repacked Q4_K: one fused term per super-block (GEMV), or per 64-element chunk (the AVX-512
 * GEMM llama.cpp runs on the batch's first n - n % 4 tokens). */
static void lc_q4_repacked(const int32_t lane[4][8], const int32_t msum[4], float d, float dmin,
                           int gemm, lc_acc *a) {
    int32_t S = 0, M = 0;
    for (int j = 0; j < 4; j++) {
        int32_t s = 0;
        for (int L = 0; L < 8; L++)
            s += lane[j][L];
        if (gemm) {
            a->dot = fmaf((float)s, d, a->dot);
            a->min = fmaf((float)msum[j], dmin, a->min);
        }
        S += s;
        M += msum[j];
    }
    if (!gemm) {
        a->dot = fmaf((float)S, d, a->dot);
        a->min = fmaf((float)M, dmin, a->min);
    }
}

static void lc_q45_block(const sol_weight *w, const uint8_t *blk, const int8_t *q,
                         const int16_t *bs, float dx, int gemm, lc_acc *a) {
    int q5 = w->type == SOL_DT_Q5_K;
    const sol_block_q5_k *k5 = (const sol_block_q5_k *)blk;
    const sol_block_q4_k *k4 = (const sol_block_q4_k *)blk;
    float dh = sol_f16_to_f32(q5 ? k5->d : k4->d), mh = sol_f16_to_f32(q5 ? k5->dmin : k4->dmin);
    uint8_t sc[8], mn[8];
    cpu_q4k_scales(q5 ? k5->scales : k4->scales, sc, mn);
    int32_t msum[4], lane[4][8];
    for (int k = 0; k < 4; k++)
        msum[k] = mn[2 * k] * (bs[4 * k] + bs[4 * k + 1]) +
                  mn[2 * k + 1] * (bs[4 * k + 2] + bs[4 * k + 3]);
    lc_q45_lanes(q5 ? k5->qs : k4->qs, q5 ? k5->qh : NULL, sc, q, lane);
    if (!q5 && w->rows % 8 == 0) {
        lc_q4_repacked(lane, msum, dh * dx, mh * dx, gemm, a);
        return;
    }
    float d = dx * dh, dmin = -dx * mh;
    for (int L = 0; L < 8; L++)
        a->lane[L] =
            fmaf(d, (float)(lane[0][L] + lane[1][L] + lane[2][L] + lane[3][L]), a->lane[L]);
    if (q5)
        a->summs = fmaf(dmin, (float)(msum[0] + msum[1] + msum[2] + msum[3]), a->summs);
    else
        for (int k = 0; k < 4; k++)
            a->mins[k] = fmaf(dmin, (float)msum[k], a->mins[k]);
}

/* One output of a K-quant weight row against one token, in llama.cpp's order. */
static float lc_kq_dot(const sol_weight *w, const uint8_t *row, const int8_t *q, const float *kd,
                       const int16_t *ks, int gemm) {
    int64_t nb = w->cols / SOL_QK_K;
    size_t bb = sol_dtype_block_bytes(w->type);
    lc_acc a = {0};
    for (int64_t b = 0; b < nb; b++) {
        if (w->type == SOL_DT_Q6_K)
            lc_q6_block((const sol_block_q6_k *)(row + b * bb), q + b * SOL_QK_K, ks + b * 16,
                        kd[b], &a);
        else
            lc_q45_block(w, row + b * bb, q + b * SOL_QK_K, ks + b * 16, kd[b], gemm, &a);
    }
    if (w->type == SOL_DT_Q4_K && w->rows % 8 == 0) return a.dot - a.min;
    if (w->type == SOL_DT_Q4_K) a.summs = (a.mins[0] + a.mins[2]) + (a.mins[1] + a.mins[3]);
    return sol_ggml_hsum(a.lane, SOL_GGML_AVX2) + a.summs; /* hsum_float_8 */
}

static void mm_kquant_llamacpp(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows, nb = K / SOL_QK_K;
    /* llama.cpp's GEMM takes tokens four at a time; its experts never (SOL_WEIGHT_EXPERT: its
     * MUL_MAT_ID runs the repacked GEMV per token) */
    int n_gemm = w->flags & SOL_WEIGHT_EXPERT ? 0 : a->n - a->n % 4;
    for (int64_t r = r0; r < r1; r++)
        for (int t = 0; t < a->n; t++)
            a->y[(size_t)t * M + r] =
                lc_kq_dot(w, (const uint8_t *)row_of(w, r), a->kq + (size_t)t * K,
                          a->kd + (size_t)t * nb, a->ks + (size_t)t * (K / 16), t < n_gemm);
}

/* llama.cpp's F32 x F32 dot, lane by lane (fmaf: each lane's FMA), in its build's register of L
 * lanes (16: AVX-512, 8: AVX2). A prompt (n >= 2, K a multiple of L; not an expert's matrix) goes
 * through tinyBLAS: one L-lane accumulator over K, reduced as its hsum; a decode token through
 * ggml_vec_dot_f32: four such accumulators over steps of 4L, added pairwise (0 + 2, 1 + 3, then
 * the two), reduced as GGML_F32_VEC_REDUCE, then the leftovers one FMA each. */
static float lc_f32_dot(const float *w, const float *x, int64_t K, int tiny, int L) {
    return sol_ggml_dot(w, x, K, L, tiny, 0);
}

static void mm_f32_llamacpp(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    CPU_F32_LC_WALK(lc_f32_dot);
}

cpu_mm_fn cpu_mm_kq_llamacpp(sol_dtype t) {
    if (t == SOL_DT_F32) return mm_f32_llamacpp;
    return t == SOL_DT_Q4_K || t == SOL_DT_Q5_K || t == SOL_DT_Q6_K ? mm_kquant_llamacpp : NULL;
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
    case SOL_DT_MXFP4:
        return mm_mxfp4;
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
            acc += q[i] * sol_f16_to_f32(((const uint16_t *)k)[i]);
    } else {
        for (int i = 0; i < hd; i++)
            acc += q[i] * ((const float *)k)[i];
    }
    return acc;
}

static void attn_axpy(float *acc, float a, const void *v, int hd, int f16) {
    if (f16) {
        for (int i = 0; i < hd; i++)
            acc[i] += a * sol_f16_to_f32(((const uint16_t *)v)[i]);
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
