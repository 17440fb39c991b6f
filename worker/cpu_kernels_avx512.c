/* cpu_kernels_avx512: AVX-512 (F, BW, VL, VNNI) matmul and attention kernels. Q8_0/Q4_0 blocks use
 * 256-bit VNNI dot products (vpdpbusd: one instruction per block and token, 32 registers for
 * 4x4 tiles); float weights use 16 lanes. As in the AVX2 file, every output's instruction
 * sequence is the same for every tile shape, so n=1 and GEMM tiles agree bit for bit. */
#include <immintrin.h>

#include "cpu_internal.h"

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TGT

#define TR 4
#define TT 4
#define FR 8       /* rows of a one-token float tile: decode needs many rows in flight */
#define PF_TILES 2 /* one-token tiles: prefetch this many tiles ahead, into L2 */

INL float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INL float hsum16(__m512 v) {
    return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v),
                               _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

INL const char *row_of(const sol_weight *w, int64_t r) {
    return (const char *)w->data + (size_t)r * w->row_bytes;
}

INL __m512 load16(sol_dtype t, const void *row, int64_t k) {
    if (t == SOL_DT_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + k)));
    if (t == SOL_DT_BF16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + k));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return _mm512_loadu_ps((const float *)row + k);
}

INL float load1(sol_dtype t, const void *row, int64_t k) {
    if (t == SOL_DT_F16) return cpu_fp16_to_fp32(((const uint16_t *)row)[k]);
    if (t == SOL_DT_BF16) return cpu_bf16_to_fp32(((const uint16_t *)row)[k]);
    return ((const float *)row)[k];
}

/* One token, FR rows. Consecutive rows are one contiguous stretch of memory, but each row is its
 * own stream to the hardware prefetcher, which stops at page boundaries and starts cold on each
 * new row: prefetching a later tile's rows while this one runs keeps DRAM busy across tiles
 * (about 10% more weight bandwidth on Zen 4). Same per-output
 * instruction sequence as float_tile, so n=1 and GEMM tiles agree bit for bit. */
INL void float_row_tile(const cpu_mm_args *a, sol_dtype type, int64_t r, int64_t r_end) {
    const sol_weight *w = a->w;
    int64_t K = w->cols, K16 = K & ~(int64_t)15;
    size_t span = (size_t)FR * w->row_bytes, step = type == SOL_DT_F32 ? 64 : 32;
    const char *wr[FR];
    const float *xr = a->x;
    __m512 acc[FR];
    /* A tile further on in this thread's range, or nothing new near its end (this tile again). */
    ptrdiff_t pf = r + (PF_TILES + 1) * FR <= r_end ? PF_TILES * (ptrdiff_t)span : 0;
#pragma GCC unroll 8
    for (int i = 0; i < FR; i++) {
        wr[i] = row_of(w, r + i);
        acc[i] = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < K16; k += 16) {
        __m512 xv = _mm512_loadu_ps(xr + k);
        size_t off = (size_t)k / 16 * step;
        if ((off & 63) == 0)
#pragma GCC unroll 8
            for (int i = 0; i < FR; i++)
                _mm_prefetch(wr[i] + pf + off, _MM_HINT_T1);
#pragma GCC unroll 8
        for (int i = 0; i < FR; i++)
            acc[i] = _mm512_fmadd_ps(load16(type, wr[i], k), xv, acc[i]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < FR; i++) {
        float s = hsum16(acc[i]);
        for (int64_t k = K16; k < K; k++)
            s += load1(type, wr[i], k) * xr[k];
        a->y[r + i] = s;
    }
}

INL void float_tile(const cpu_mm_args *a, sol_dtype type, int64_t r, int t, int R, int T) {
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows, K16 = K & ~(int64_t)15;
    const char *wr[FR];
    const float *xr[TT];
    __m512 acc[FR][TT];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
        wr[i] = row_of(w, r + i);
#pragma GCC unroll 4
    for (int j = 0; j < T; j++)
        xr[j] = a->x + (size_t)(t + j) * K;
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++)
            acc[i][j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K16; k += 16) {
        __m512 xv[TT];
#pragma GCC unroll 4
        for (int j = 0; j < T; j++)
            xv[j] = _mm512_loadu_ps(xr[j] + k);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            __m512 wv = load16(type, wr[i], k);
#pragma GCC unroll 4
            for (int j = 0; j < T; j++)
                acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            float s = hsum16(acc[i][j]);
            for (int64_t k = K16; k < K; k++)
                s += load1(type, wr[i], k) * xr[j][k];
            a->y[(size_t)(t + j) * M + r + i] = s;
        }
}

INL __m256i q4_expand(const sol_block_q4_0 *b) {
    __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
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
        __m256i xv[TT], corr[TT];
        float xd[TT];
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
                wq = q4_expand(blk);
                dw = _cvtsh_ss(blk->d);
            } else {
                const sol_block_q8_0 *blk = (const sol_block_q8_0 *)wr[i] + b;
                wq = _mm256_loadu_si256((const __m256i *)blk->qs);
                dw = _cvtsh_ss(blk->d);
            }
            __m256i wabs = type == SOL_DT_Q4_0 ? wq : _mm256_abs_epi8(wq);
#pragma GCC unroll 4
            for (int j = 0; j < T; j++) {
                __m256i xs = type == SOL_DT_Q4_0 ? xv[j] : _mm256_sign_epi8(xv[j], wq);
                __m256i p = _mm256_dpbusd_epi32(corr[j], wabs, xs);
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

/* Float weights: 8 rows per one-token tile (decode: the prefetching row tile at n=1), else as
 * TILE_WALK. */
#define FLOAT_WALK(a, type, r0, r1)                                                                \
    do {                                                                                           \
        int64_t fr = (r0);                                                                         \
        if ((a)->n == 1) {                                                                         \
            for (; fr + FR <= (r1); fr += FR)                                                      \
                float_row_tile(a, type, fr, r1);                                                   \
        }                                                                                          \
        for (; fr + FR <= (r1); fr += FR) {                                                        \
            int t = 0;                                                                             \
            for (; t + TT <= (a)->n; t += TT) {                                                    \
                float_tile(a, type, fr, t, TR, TT);                                                \
                float_tile(a, type, fr + TR, t, TR, TT);                                           \
            }                                                                                      \
            for (; t < (a)->n; t++)                                                                \
                float_tile(a, type, fr, t, FR, 1);                                                 \
        }                                                                                          \
        TILE_WALK(float_tile, a, type, fr, r1);                                                    \
    } while (0)

#define DEFINE_FLOAT_MM(name, type)                                                                \
    static TGT void name(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {           \
        (void)scratch;                                                                             \
        FLOAT_WALK(a, type, r0, r1);                                                               \
    }

#define DEFINE_MM(name, tile, type)                                                                \
    static TGT void name(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {           \
        (void)scratch;                                                                             \
        TILE_WALK(tile, a, type, r0, r1);                                                          \
    }

DEFINE_FLOAT_MM(mm_f32, SOL_DT_F32)
DEFINE_FLOAT_MM(mm_f16, SOL_DT_F16)
DEFINE_FLOAT_MM(mm_bf16, SOL_DT_BF16)
DEFINE_MM(mm_q8_0, quant_tile, SOL_DT_Q8_0)
DEFINE_MM(mm_q4_0, quant_tile, SOL_DT_Q4_0)

cpu_mm_fn cpu_mm_avx512(sol_dtype t) {
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
    default:
        return NULL;
    }
}

/* ---- attention helpers: 16 lanes, scalar tail ---- */

static TGT float attn_dot(const float *q, const void *k, int hd, int f16) {
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= hd; i += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i),
                              f16 ? load16(SOL_DT_F16, k, i) : load16(SOL_DT_F32, k, i), acc);
    float s = hsum16(acc);
    for (; i < hd; i++)
        s += q[i] * (f16 ? load1(SOL_DT_F16, k, i) : load1(SOL_DT_F32, k, i));
    return s;
}

static TGT void attn_axpy(float *acc, float a, const void *v, int hd, int f16) {
    __m512 av = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= hd; i += 16) {
        __m512 vv = f16 ? load16(SOL_DT_F16, v, i) : load16(SOL_DT_F32, v, i);
        _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(av, vv, _mm512_loadu_ps(acc + i)));
    }
    for (; i < hd; i++)
        acc[i] += a * (f16 ? load1(SOL_DT_F16, v, i) : load1(SOL_DT_F32, v, i));
}

static TGT void attn_scale(float *acc, float a, int hd) {
    int i = 0;
    for (; i + 16 <= hd; i += 16)
        _mm512_storeu_ps(acc + i, _mm512_mul_ps(_mm512_loadu_ps(acc + i), _mm512_set1_ps(a)));
    for (; i < hd; i++)
        acc[i] *= a;
}

const cpu_attn_fns cpu_attn_avx512 = {attn_dot, attn_axpy, attn_scale};
