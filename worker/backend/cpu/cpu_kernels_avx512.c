/* cpu_kernels_avx512: AVX-512 (F, BW, VL, VNNI) matmul and attention kernels. Q8_0/Q4_0 blocks use
 * 256-bit VNNI dot products (vpdpbusd: one instruction per block and token, 32 registers for
 * 4x4 tiles); float weights use 16 lanes. As in the AVX2 file, every output's instruction
 * sequence is the same for every tile shape, so n=1 and GEMM tiles agree bit for bit. */
#include <immintrin.h>
#include <math.h>

#include "cpu_internal.h"

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TGT

#define TR 4
#define TT 4
#define FR 8       /* rows of a one-token float tile: decode needs many rows in flight */
#define FT 7       /* most tokens of a few-token float tile (speculative verify) */
#define PF_ROWS 16 /* few-token tiles: prefetch this many rows ahead, into L2 */

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
    if (t == SOL_DT_F16) return sol_f16_to_f32(((const uint16_t *)row)[k]);
    if (t == SOL_DT_BF16) return sol_bf16_to_f32(((const uint16_t *)row)[k]);
    return ((const float *)row)[k];
}

/* Few tokens (decode, speculative verify: T <= FT), R rows. Consecutive rows are one contiguous
 * stretch of memory, but each row is its own stream to the hardware prefetcher, which stops at
 * page boundaries and starts cold on each new row: prefetching a later tile's rows while this
 * one runs keeps DRAM busy across tiles (about 10% more weight bandwidth on Zen 4). Each weight
 * vector is loaded and converted once for all T tokens, so a k+1-token verify pass streams the
 * weights once and stays near the memory roofline. Same per-output instruction sequence as
 * float_tile, so n=1, few-token and GEMM tiles agree bit for bit. */
INL void float_row_tile(const cpu_mm_args *a, sol_dtype type, int64_t r, int64_t r_end, int R,
                        int t0, int T) {
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows, K16 = K & ~(int64_t)15;
    size_t step = type == SOL_DT_F32 ? 64 : 32;
    const char *wr[FR];
    const float *xr[FT];
    __m512 acc[FR][FT];
    /* Rows PF_ROWS further on in this thread's range, or nothing new near its end (this tile
     * again); a fixed distance in rows whatever R is. */
    ptrdiff_t pf = r + PF_ROWS + R <= r_end ? PF_ROWS * (ptrdiff_t)w->row_bytes : 0;
#pragma GCC unroll 8
    for (int j = 0; j < T; j++)
        xr[j] = a->x + (size_t)(t0 + j) * (size_t)K;
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        wr[i] = row_of(w, r + i);
#pragma GCC unroll 8
        for (int j = 0; j < T; j++)
            acc[i][j] = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < K16; k += 16) {
        __m512 xv[FT];
#pragma GCC unroll 8
        for (int j = 0; j < T; j++)
            xv[j] = _mm512_loadu_ps(xr[j] + k);
        size_t off = (size_t)k / 16 * step;
        if ((off & 63) == 0)
#pragma GCC unroll 8
            for (int i = 0; i < R; i++)
                _mm_prefetch(wr[i] + pf + off, _MM_HINT_T1);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            __m512 wv = load16(type, wr[i], k);
#pragma GCC unroll 8
            for (int j = 0; j < T; j++)
                acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            float s = hsum16(acc[i][j]);
            for (int64_t k = K16; k < K; k++)
                s += load1(type, wr[i], k) * xr[j][k];
            a->y[(size_t)(t0 + j) * M + r + i] = s;
        }
}

/* Rows in tiles of R rows x (T1 + T2) tokens, R x T accumulators plus T activation vectors and
 * one weight vector within the 32 registers: one tile, or for 8-9 tokens two over the same rows
 * (the second reads them from cache). */
#define FEW_WALK(a, type, fr, r1, R, T1, T2)                                                       \
    do {                                                                                           \
        for (; fr + (R) <= (r1); fr += (R)) {                                                      \
            float_row_tile(a, type, fr, r1, R, 0, T1);                                             \
            if (T2) float_row_tile(a, type, fr, r1, R, T1, T2);                                    \
        }                                                                                          \
        for (; fr < (r1); fr++) {                                                                  \
            float_row_tile(a, type, fr, r1, 1, 0, T1);                                             \
            if (T2) float_row_tile(a, type, fr, r1, 1, T1, T2);                                    \
        }                                                                                          \
    } while (0)

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

/* Float weights: few-token row tiles up to FT tokens (decode and verify), else as TILE_WALK
 * with 8-row float tiles. */
#define FLOAT_WALK(a, type, r0, r1)                                                                \
    do {                                                                                           \
        int64_t fr = (r0);                                                                         \
        switch ((a)->n) {                                                                          \
        case 1:                                                                                    \
            FEW_WALK(a, type, fr, r1, 8, 1, 0);                                                    \
            break;                                                                                 \
        case 2:                                                                                    \
            FEW_WALK(a, type, fr, r1, 8, 2, 0);                                                    \
            break;                                                                                 \
        case 3:                                                                                    \
            FEW_WALK(a, type, fr, r1, 6, 3, 0);                                                    \
            break;                                                                                 \
        case 4:                                                                                    \
            FEW_WALK(a, type, fr, r1, 5, 4, 0);                                                    \
            break;                                                                                 \
        case 5:                                                                                    \
            FEW_WALK(a, type, fr, r1, 4, 5, 0);                                                    \
            break;                                                                                 \
        case 6:                                                                                    \
            FEW_WALK(a, type, fr, r1, 3, 6, 0);                                                    \
            break;                                                                                 \
        case 7:                                                                                    \
            FEW_WALK(a, type, fr, r1, 3, 7, 0);                                                    \
            break;                                                                                 \
        case 8:                                                                                    \
            FEW_WALK(a, type, fr, r1, 5, 4, 4);                                                    \
            break;                                                                                 \
        case 9:                                                                                    \
            FEW_WALK(a, type, fr, r1, 4, 5, 4);                                                    \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
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

/* cpu_kernels_scalar.c's lc_f32_dot (llama.cpp's F32 order) for its AVX-512 builds in 16-lane
 * registers: the same FMAs lane by lane and GCC's _mm512_reduce_add_ps, so the same bits, at SIMD
 * speed. Picked only on the avx512 ISA, whose ggml_lanes is 16. */
INL float lc_f32_dot16(const float *w, const float *x, int64_t K, int tiny, int lanes) {
    (void)lanes;
    if (tiny) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t k = 0; k < K; k += 16)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(w + k), _mm512_loadu_ps(x + k), acc);
        return _mm512_reduce_add_ps(acc);
    }
    int64_t np = K & ~(int64_t)63;
    __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            s[j] = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16 * j), _mm512_loadu_ps(x + i + 16 * j),
                                   s[j]);
    s[0] = _mm512_add_ps(s[0], s[2]);
    s[1] = _mm512_add_ps(s[1], s[3]);
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(s[0], s[1]));
    for (int64_t k = np; k < K; k++)
        sum = fmaf(w[k], x[k], sum);
    return sum;
}

static TGT void mm_f32_llamacpp(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    CPU_F32_LC_WALK(lc_f32_dot16);
}

cpu_mm_fn cpu_mm_llamacpp_avx512(sol_dtype t) {
    return t == SOL_DT_F32 ? mm_f32_llamacpp : NULL;
}

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

/* Whole-context attention for one (token, head): q and the output accumulator live in zmm
 * registers (head_dim/16 of each), 16 scores come out of one shuffle-add tree instead of 16
 * horizontal sums, and the chunk's exponentials are one vector exp. Everything depends only on
 * the token's own positions, taken in order, so batches and thread splits cannot change it. */
#define AT_CHUNK 32

/* The four levels of the tree: after all four, lane 4k+j holds the sum of position 4j+k. */
INL __m512 tree_a(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}
INL __m512 tree_b(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}
INL __m512 tree_c(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}
INL __m512 tree_d(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* e^x for x <= 0: Cody-Waite reduction by ln 2, then the Taylor series to r^7 (|r| <= ln2/2, so
 * the truncation error is below 1e-8 relative); below -87 (and for -inf) the result is 0. */
INL __m512 exp_nonpos(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.0f);
    __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
    x = _mm512_max_ps(x, lo);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps(keep, _mm512_scalef_ps(p, n));
}

INL __m512 at_load(const unsigned char *row, int v, int f16) {
    return f16 ? load16(SOL_DT_F16, row, (int64_t)v * 16)
               : load16(SOL_DT_F32, row, (int64_t)v * 16);
}

/* q.k for position i of the chunk as a 16-lane partial (0 past the chunk's end, masked later). */
INL __m512 at_part(const cpu_attend_args *a, const __m512 *qv, const size_t *off, int i, int cnt,
                   int nv, int f16) {
    if (i >= cnt) return _mm512_setzero_ps();
    const unsigned char *k = a->k + off[i];
    __m512 s = _mm512_mul_ps(qv[0], at_load(k, 0, f16));
#pragma GCC unroll 8
    for (int v = 1; v < nv; v++)
        s = _mm512_fmadd_ps(qv[v], at_load(k, v, f16), s);
    return s;
}

INL __m512 at_scores16(const cpu_attend_args *a, const __m512 *qv, const size_t *off, int i0,
                       int cnt, int nv, int f16) {
    __m512 u[2];
    for (int h = 0; h < 2; h++) {
        __m512 w[2];
        for (int g = 0; g < 2; g++) {
            int i = i0 + 8 * h + 4 * g;
            __m512 ab = tree_a(at_part(a, qv, off, i, cnt, nv, f16),
                               at_part(a, qv, off, i + 1, cnt, nv, f16));
            __m512 cd = tree_a(at_part(a, qv, off, i + 2, cnt, nv, f16),
                               at_part(a, qv, off, i + 3, cnt, nv, f16));
            w[g] = tree_b(ab, cd);
        }
        u[h] = tree_c(w[0], w[1]);
    }
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, tree_d(u[0], u[1]));
}

INL void attend_regs(const cpu_attend_args *a, int nv, int f16) {
    __m512 qv[8], acc[8];
#pragma GCC unroll 8
    for (int v = 0; v < nv; v++) {
        qv[v] = _mm512_loadu_ps(a->q + 16 * v);
        acc[v] = _mm512_setzero_ps();
    }
    __m512 scale = _mm512_set1_ps(a->scale), ninf = _mm512_set1_ps(-INFINITY);
    float m = -INFINITY, l = 0.0f, e[AT_CHUNK];
    for (int p0 = a->lo; p0 < a->n_ctx; p0 += AT_CHUNK) {
        int cnt = a->n_ctx - p0 < AT_CHUNK ? a->n_ctx - p0 : AT_CHUNK;
        size_t off[AT_CHUNK]; /* byte offset of each position's K (and V) row */
        int b = p0 / a->block_size, r = p0 % a->block_size;
        for (int i = 0; i < cnt; i++) {
            off[i] = ((size_t)a->table[b] * (size_t)a->block_size + (size_t)r) * a->slot_bytes;
            if (++r == a->block_size) {
                r = 0;
                b++;
            }
        }
        __mmask16 m0 = cnt >= 16 ? 0xffff : (__mmask16)((1u << cnt) - 1);
        __mmask16 m1 = cnt >= 32 ? 0xffff : cnt <= 16 ? 0 : (__mmask16)((1u << (cnt - 16)) - 1);
        __m512 s0 = _mm512_mask_mul_ps(ninf, m0, at_scores16(a, qv, off, 0, cnt, nv, f16), scale);
        __m512 s1 =
            m1 ? _mm512_mask_mul_ps(ninf, m1, at_scores16(a, qv, off, 16, cnt, nv, f16), scale)
               : ninf;
        float mc = fmaxf(m, _mm512_reduce_max_ps(_mm512_max_ps(s0, s1)));
        if (mc != m) {
            float c = expf(m - mc); /* 0 on the first chunk: m is -inf */
            __m512 cv = _mm512_set1_ps(c);
            l *= c;
#pragma GCC unroll 8
            for (int v = 0; v < nv; v++)
                acc[v] = _mm512_mul_ps(acc[v], cv);
            m = mc;
        }
        __m512 mv = _mm512_set1_ps(m);
        __m512 e0 = exp_nonpos(_mm512_sub_ps(s0, mv)), e1 = exp_nonpos(_mm512_sub_ps(s1, mv));
        l += hsum16(_mm512_add_ps(e0, e1));
        _mm512_storeu_ps(e, e0);
        _mm512_storeu_ps(e + 16, e1);
        for (int i = 0; i < cnt; i++) {
            const unsigned char *vr = a->v + off[i];
            __m512 ev = _mm512_set1_ps(e[i]);
#pragma GCC unroll 8
            for (int v = 0; v < nv; v++)
                acc[v] = _mm512_fmadd_ps(ev, at_load(vr, v, f16), acc[v]);
        }
    }
    __m512 inv = _mm512_set1_ps(1.0f / l);
#pragma GCC unroll 8
    for (int v = 0; v < nv; v++)
        _mm512_storeu_ps(a->out + 16 * v, _mm512_mul_ps(acc[v], inv));
}

#define AT_CASE(nv)                                                                                \
    static TGT void attend_nv##nv##_f16(const cpu_attend_args *a) {                                \
        attend_regs(a, nv, 1);                                                                     \
    }                                                                                              \
    static TGT void attend_nv##nv##_f32(const cpu_attend_args *a) {                                \
        attend_regs(a, nv, 0);                                                                     \
    }
AT_CASE(1)
AT_CASE(2)
AT_CASE(3)
AT_CASE(4)
AT_CASE(5)
AT_CASE(6)
AT_CASE(7)
AT_CASE(8)

int cpu_attend_avx512(const cpu_attend_args *a) {
    static void (*const f16[8])(const cpu_attend_args *) = {
        attend_nv1_f16, attend_nv2_f16, attend_nv3_f16, attend_nv4_f16,
        attend_nv5_f16, attend_nv6_f16, attend_nv7_f16, attend_nv8_f16};
    static void (*const f32[8])(const cpu_attend_args *) = {
        attend_nv1_f32, attend_nv2_f32, attend_nv3_f32, attend_nv4_f32,
        attend_nv5_f32, attend_nv6_f32, attend_nv7_f32, attend_nv8_f32};
    if (a->hd % 16 != 0 || a->hd < 16 || a->hd > CPU_ATTEND_AVX512_MAX_HD) return 0;
    (a->f16 ? f16 : f32)[a->hd / 16 - 1](a);
    return 1;
}
