/* cpu_kernels_avx2: AVX2+FMA+F16C matmul and attention kernels. Register tiles of R weight rows x
 * T tokens load each weight block once per tile; every output keeps its own 8-lane accumulator
 * updated by the same instruction sequence whatever R and T are, so the n=1 path and the GEMM
 * path give bit-identical results. */
#include <immintrin.h>

#include "cpu_internal.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TGT

#define TR 4 /* rows per tile */
#define TT 2 /* tokens per tile (16 ymm registers limit R x T accumulators) */

INL float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INL const char *row_of(const sol_weight *w, int64_t r) {
    return (const char *)w->data + (size_t)r * w->row_bytes;
}

/* ---- float weights (F32, F16, BF16) ---- */

INL __m256 load8(sol_dtype t, const void *row, int64_t k) {
    if (t == SOL_DT_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
    if (t == SOL_DT_BF16) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + k));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    return _mm256_loadu_ps((const float *)row + k);
}

INL float load1(sol_dtype t, const void *row, int64_t k) {
    if (t == SOL_DT_F16) return sol_f16_to_f32(((const uint16_t *)row)[k]);
    if (t == SOL_DT_BF16) return sol_bf16_to_f32(((const uint16_t *)row)[k]);
    return ((const float *)row)[k];
}

INL void float_tile(const cpu_mm_args *a, sol_dtype type, int64_t r, int t, int R, int T) {
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows, K8 = K & ~(int64_t)7;
    const char *wr[TR];
    const float *xr[TT];
    __m256 acc[TR][TT];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
        wr[i] = row_of(w, r + i);
#pragma GCC unroll 4
    for (int j = 0; j < T; j++)
        xr[j] = a->x + (size_t)(t + j) * K;
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++)
            acc[i][j] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K8; k += 8) {
        __m256 xv[TT];
#pragma GCC unroll 4
        for (int j = 0; j < T; j++)
            xv[j] = _mm256_loadu_ps(xr[j] + k);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            __m256 wv = load8(type, wr[i], k);
#pragma GCC unroll 4
            for (int j = 0; j < T; j++)
                acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            float s = hsum8(acc[i][j]);
            for (int64_t k = K8; k < K; k++)
                s += load1(type, wr[i], k) * xr[j][k];
            a->y[(size_t)(t + j) * M + r + i] = s;
        }
}

/* ---- Q8_0 and Q4_0 weights against Q8_0 activations ---- */

/* 16 bytes of nibbles as 32 quants in element order: low nibbles, then high nibbles. */
INL __m256i q4_expand(const uint8_t *qs) {
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* Sum of products in 8 int32 lanes: lane i covers bytes 4i..4i+3 (exact integers). */
INL __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

INL void quant_tile(const cpu_mm_args *a, sol_dtype type, int64_t r, int t, int R, int T) {
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows, nb = K / 32;
    const char *wr[TR];
    __m256 acc[TR][TT];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
        wr[i] = row_of(w, r + i);
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++)
            acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i xv[TT];
        float xd[TT];
        __m256i corr[TT];
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            size_t tj = (size_t)(t + j);
            xv[j] = _mm256_loadu_si256((const __m256i *)(a->xq + tj * (size_t)K + b * 32));
            xd[j] = a->xd[tj * (size_t)nb + b];
            corr[j] = _mm256_setr_epi32(type == SOL_DT_Q4_0 ? -8 * a->xs[tj * (size_t)nb + b] : 0,
                                        0, 0, 0, 0, 0, 0, 0);
        }
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            float dw;
            __m256i wq;
            if (type == SOL_DT_Q4_0) {
                const sol_block_q4_0 *blk = (const sol_block_q4_0 *)wr[i] + b;
                wq = q4_expand(blk->qs);
                dw = _cvtsh_ss(blk->d);
            } else {
                const sol_block_q8_0 *blk = (const sol_block_q8_0 *)wr[i] + b;
                wq = _mm256_loadu_si256((const __m256i *)blk->qs);
                dw = _cvtsh_ss(blk->d);
            }
#pragma GCC unroll 4
            for (int j = 0; j < T; j++) {
                __m256i p;
                if (type == SOL_DT_Q4_0)
                    p = dot_u8s8(wq, xv[j]);
                else
                    p = dot_u8s8(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xv[j], wq));
                p = _mm256_add_epi32(p, corr[j]);
                acc[i][j] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * xd[j]), acc[i][j]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++)
            a->y[(size_t)(t + j) * M + r + i] = hsum8(acc[i][j]);
}

/* ---- Q5_0 / Q5_1 against Q8_0 activations ---- */

/* The 32 five-bit quants of a Q5_0/Q5_1 block in element order: the nibbles of qs (elements
 * 0-15 low, 16-31 high) with bit j of the qh word as element j's fifth bit. */
INL __m256i q5_expand(const uint8_t *qs, const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    __m256i q = q4_expand(qs); /* the nibble order of Q4_0 */
    /* byte j of bits: the byte of h holding bit j, tested against bit j % 8 */
    const __m256i pick =
        _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll, 0x0303030303030303ll);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i hb = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), pick);
    hb = _mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit);
    return _mm256_or_si256(q, _mm256_and_si256(hb, _mm256_set1_epi8(16)));
}

/* Sum of a block's 32 quants times the token's quants, exact (CPU_Q5_WALK). */
INL int32_t q5_dot(const uint8_t *qs, const uint8_t *qh, const int8_t *x) {
    __m256i p = dot_u8s8(q5_expand(qs, qh), _mm256_loadu_si256((const __m256i *)x));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    s4 = _mm_hadd_epi32(s4, s4);
    s4 = _mm_hadd_epi32(s4, s4);
    return _mm_cvtsi128_si32(s4);
}

/* The scalar kernel's walk and float steps, hence its bits. */
static TGT void mm_q5(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    CPU_Q5_WALK(q5_dot);
}

/* An MXFP4 block's 32 values + 12 (0..24: unsigned bytes), looked up with one byte shuffle per
 * half (elements 0..15 the low nibbles, 16..31 the high). */
INL __m256i mxfp4_values12(const uint8_t *qs) {
    const __m128i lut = _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(q, m4));
    __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
    return _mm256_set_m128i(hi, lo);
}

/* The exact dot of those values with a token's 32 quants: unsigned x signed byte products, then
 * 12 times the quants' sum taken back. */
INL int32_t mxfp4_dot_u(__m256i u, const int8_t *x, int32_t xsum) {
    __m256i p = dot_u8s8(u, _mm256_loadu_si256((const __m256i *)x));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    return _mm_cvtsi128_si32(s4) - 12 * xsum;
}

enum { MXFP4_TOKENS = 8 }; /* tokens that share one lookup of a block's values */

/* The eight int32 lanes of each p[i] summed, as lane i of the result. */
INL __m256i hsum8x8(const __m256i p[8]) {
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    __m128i lo = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    __m128i hi = _mm_add_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
    return _mm256_set_m128i(hi, lo);
}

enum { MXFP4_MAX_NB = 512 }; /* blocks a row (K <= 16384) whose token scales fit the stack */

/* Eight tokens t0.. of one row: per block the values looked up once, the eight exact dots summed
 * across their lanes together, and the float steps of CPU_MXFP4_WALK done in eight lanes
 * (product, product, sum: never fused, so each lane has the scalar walk's bits). xd8, xs8: the
 * eight tokens' block scales and quant sums, block-major (8 a block). */
INL void mxfp4_row8(const cpu_mm_args *a, const sol_block_mxfp4 *wb, int64_t nb, int t0,
                    const float *xd8, const int32_t *xs8, float *out) {
    const __m256i twelve = _mm256_set1_epi32(12);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i u = mxfp4_values12(wb[b].qs), p[8];
        const int8_t *x = a->xq + ((size_t)t0 * (size_t)nb + (size_t)b) * 32;
        for (int i = 0; i < 8; i++)
            p[i] =
                dot_u8s8(u, _mm256_loadu_si256((const __m256i *)(x + (size_t)i * (size_t)nb * 32)));
        __m256i xs = _mm256_loadu_si256((const __m256i *)(xs8 + 8 * b));
        __m256i dot = _mm256_sub_epi32(hsum8x8(p), _mm256_mullo_epi32(twelve, xs));
        __m256 dd =
            _mm256_mul_ps(_mm256_set1_ps(sol_e8m0_half(wb[b].e)), _mm256_loadu_ps(xd8 + 8 * b));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(dot), dd));
    }
    _mm256_storeu_ps(out, acc);
}

/* Rows r0..r1 for tokens t0..t0+nt-1, one token at a time through the blocks. */
INL void mxfp4_rows1(const cpu_mm_args *a, int64_t r0, int64_t r1, int t0, int nt) {
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows, nb = K / 32;
    for (int64_t r = r0; r < r1; r++) {
        const sol_block_mxfp4 *wb =
            (const sol_block_mxfp4 *)((const uint8_t *)w->data + (size_t)r * w->row_bytes);
        float acc[MXFP4_TOKENS] = {0};
        for (int64_t b = 0; b < nb; b++) {
            __m256i u = mxfp4_values12(wb[b].qs);
            float d = sol_e8m0_half(wb[b].e);
            for (int i = 0; i < nt; i++) {
                size_t tb = (size_t)(t0 + i) * (size_t)nb + (size_t)b;
                acc[i] += (float)mxfp4_dot_u(u, a->xq + tb * 32, a->xs[tb]) * (d * a->xd[tb]);
            }
        }
        for (int i = 0; i < nt; i++)
            a->y[(size_t)(t0 + i) * M + r] = acc[i];
    }
}

/* CPU_MXFP4_WALK's float steps, hence its bits (each output sums its blocks in order, one float
 * term each), with the tokens taken MXFP4_TOKENS at a time so a block is looked up once for
 * them all (their scales and sums gathered once for every row); fewer tokens one at a time. */
static TGT void mm_mxfp4(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows, nb = K / 32;
    float xd8[8 * MXFP4_MAX_NB];
    int32_t xs8[8 * MXFP4_MAX_NB];
    int t0 = 0;
    for (; nb <= MXFP4_MAX_NB && t0 + MXFP4_TOKENS <= a->n; t0 += MXFP4_TOKENS) {
        for (int64_t b = 0; b < nb; b++)
            for (int i = 0; i < 8; i++) {
                size_t tb = (size_t)(t0 + i) * (size_t)nb + (size_t)b;
                xd8[8 * b + i] = a->xd[tb], xs8[8 * b + i] = a->xs[tb];
            }
        for (int64_t r = r0; r < r1; r++) {
            float acc[8];
            mxfp4_row8(
                a, (const sol_block_mxfp4 *)((const uint8_t *)w->data + (size_t)r * w->row_bytes),
                nb, t0, xd8, xs8, acc);
            for (int i = 0; i < 8; i++)
                a->y[(size_t)(t0 + i) * M + r] = acc[i];
        }
    }
    for (; t0 < a->n; t0 += MXFP4_TOKENS)
        mxfp4_rows1(a, r0, r1, t0, a->n - t0 < MXFP4_TOKENS ? a->n - t0 : MXFP4_TOKENS);
}

/* The tile walk shared by every type: full R x T tiles, then single tokens, then single rows. */
#define TILE_WALK(tile, a, type, r0, r1)                                                           \
    do {                                                                                           \
        int64_t r = (r0);                                                                          \
        for (; r + TR <= (r1); r += TR) {                                                          \
            int t = 0;                                                                             \
            for (; t + TT <= (a)->n; t += TT)                                                      \
                tile(a, type, r, t, TR, TT);                                                       \
            for (; t < (a)->n; t++)                                                                \
                tile(a, type, r, t, TR, 1);                                                        \
        }                                                                                          \
        for (; r < (r1); r++)                                                                      \
            for (int t = 0; t < (a)->n; t++)                                                       \
                tile(a, type, r, t, 1, 1);                                                         \
    } while (0)

#define DEFINE_MM(name, tile, type)                                                                \
    static TGT void name(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {           \
        (void)scratch;                                                                             \
        TILE_WALK(tile, a, type, r0, r1);                                                          \
    }

DEFINE_MM(mm_f32, float_tile, SOL_DT_F32)
DEFINE_MM(mm_f16, float_tile, SOL_DT_F16)
DEFINE_MM(mm_bf16, float_tile, SOL_DT_BF16)
DEFINE_MM(mm_q8_0, quant_tile, SOL_DT_Q8_0)
DEFINE_MM(mm_q4_0, quant_tile, SOL_DT_Q4_0)

cpu_mm_fn cpu_mm_avx2(sol_dtype t) {
    switch (t) {
    case SOL_DT_F32:
        return mm_f32;
    case SOL_DT_F16:
        return mm_f16;
    case SOL_DT_BF16:
        return mm_bf16;
    case SOL_DT_Q8_0:
        return mm_q8_0;
    case SOL_DT_Q4_0:
        return mm_q4_0;
    case SOL_DT_Q5_0:
    case SOL_DT_Q5_1:
        return mm_q5;
    case SOL_DT_MXFP4:
        return mm_mxfp4;
    default:
        return NULL;
    }
}

/* ---- attention helpers: 8 lanes, scalar tail ---- */

static TGT float attn_dot(const float *q, const void *k, int hd, int f16) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= hd; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i),
                              f16 ? load8(SOL_DT_F16, k, i) : load8(SOL_DT_F32, k, i), acc);
    float s = hsum8(acc);
    for (; i < hd; i++)
        s += q[i] * (f16 ? load1(SOL_DT_F16, k, i) : load1(SOL_DT_F32, k, i));
    return s;
}

static TGT void attn_axpy(float *acc, float a, const void *v, int hd, int f16) {
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= hd; i += 8) {
        __m256 vv = f16 ? load8(SOL_DT_F16, v, i) : load8(SOL_DT_F32, v, i);
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(av, vv, _mm256_loadu_ps(acc + i)));
    }
    for (; i < hd; i++)
        acc[i] += a * (f16 ? load1(SOL_DT_F16, v, i) : load1(SOL_DT_F32, v, i));
}

static TGT void attn_scale(float *acc, float a, int hd) {
    int i = 0;
    for (; i + 8 <= hd; i += 8)
        _mm256_storeu_ps(acc + i, _mm256_mul_ps(_mm256_loadu_ps(acc + i), _mm256_set1_ps(a)));
    for (; i < hd; i++)
        acc[i] *= a;
}

const cpu_attn_fns cpu_attn_avx2 = {attn_dot, attn_axpy, attn_scale};
