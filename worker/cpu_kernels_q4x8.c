/* cpu_kernels_q4x8: AVX2 and AVX-512 kernels for the row-interleaved Q4_0 layout (cpu_repack.c).
 * One 32-byte load holds 4 bytes of each of 8 rows, so a dot-product instruction against a
 * broadcast 4-byte slice of the activations gives 8 rows' partial sums in 8 int32 lanes, and
 * the 8 scales convert with one instruction: no horizontal sums, ~4 instructions per
 * (block, row) instead of ~12. Per block and output the integer dot is exact; the float part
 * (convert, d_w * d_x, FMA in block order) is the same instruction sequence for every tile
 * shape, so n=1 and GEMM tiles agree bit for bit. */
#include <immintrin.h>

#include "cpu_internal.h"

#define TGT512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define TGT2 __attribute__((target("avx2,fma,f16c")))
#define INL512 static inline __attribute__((always_inline)) TGT512
#define INL2 static inline __attribute__((always_inline)) TGT2

#define GMAX 4 /* groups of 8 rows per tile */
#define TMAX 9 /* tokens per tile (few-token tiles for speculative verify) */

/* ---- AVX-512 VNNI: vpdpbusd on 256-bit vectors ---- */

INL512 void tile512(const cpu_mm_args *a, int64_t r, int t, int G, int T) {
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows, nb = K / 32;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const unsigned char *gp[GMAX];
    const int8_t *xr[TMAX];
    __m256 acc[GMAX][TMAX];
#pragma GCC unroll 4
    for (int i = 0; i < G; i++)
        gp[i] = cpu_group_of(w, r + 8 * i);
#pragma GCC unroll 9
    for (int j = 0; j < T; j++)
        xr[j] = a->xq + (size_t)(t + j) * (size_t)K;
#pragma GCC unroll 4
    for (int i = 0; i < G; i++)
#pragma GCC unroll 9
        for (int j = 0; j < T; j++)
            acc[i][j] = _mm256_setzero_ps();
    /* Two integer chains per output hide vpdpbusd's latency when few outputs are in flight; with
     * 8 or more one chain each keeps the registers for outputs. Integer sums are exact, so the
     * chain count never changes a result. */
    const int split = G * T < 8;
    for (int64_t b = 0; b < nb; b++) {
        __m256i p0[GMAX][TMAX], p1[GMAX][TMAX];
#pragma GCC unroll 9
        for (int j = 0; j < T; j++) {
            __m256i corr = _mm256_set1_epi32(-8 * a->xs[(size_t)(t + j) * (size_t)nb + b]);
#pragma GCC unroll 4
            for (int i = 0; i < G; i++) {
                p0[i][j] = corr;
                p1[i][j] = _mm256_setzero_si256();
            }
        }
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++) {
            __m256i lo[GMAX], hi[GMAX];
#pragma GCC unroll 4
            for (int i = 0; i < G; i++) {
                const unsigned char *blk = gp[i] + (size_t)b * CPU_Q4X8_BLOCK;
                __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * s));
                lo[i] = _mm256_and_si256(q, m4);
                hi[i] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            }
#pragma GCC unroll 9
            for (int j = 0; j < T; j++) {
                __m256i xl = _mm256_set1_epi32(cpu_load4(xr[j] + b * 32 + 4 * s));
                __m256i xh = _mm256_set1_epi32(cpu_load4(xr[j] + b * 32 + 16 + 4 * s));
#pragma GCC unroll 4
                for (int i = 0; i < G; i++) {
                    p0[i][j] = _mm256_dpbusd_epi32(p0[i][j], lo[i], xl);
                    if (split)
                        p1[i][j] = _mm256_dpbusd_epi32(p1[i][j], hi[i], xh);
                    else
                        p0[i][j] = _mm256_dpbusd_epi32(p0[i][j], hi[i], xh);
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < G; i++) {
            __m256 dw = _mm256_cvtph_ps(
                _mm_loadu_si128((const __m128i *)(gp[i] + (size_t)b * CPU_Q4X8_BLOCK)));
#pragma GCC unroll 9
            for (int j = 0; j < T; j++) {
                __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(a->xd[(size_t)(t + j) * nb + b]));
                __m256 f =
                    _mm256_cvtepi32_ps(split ? _mm256_add_epi32(p0[i][j], p1[i][j]) : p0[i][j]);
                acc[i][j] = _mm256_fmadd_ps(f, d, acc[i][j]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < G; i++)
#pragma GCC unroll 9
        for (int j = 0; j < T; j++)
            _mm256_storeu_ps(a->y + (size_t)(t + j) * M + r + 8 * i, acc[i][j]);
}

/* n = 2..9 (batched decode, speculative verify): CPU_X8_FEW schedules, measured on the 1b
 * matmuls (`bench_matmul 2 0.3 verify q4_0`); n = 5 runs best as 4 groups x (3 + 2). */
TGT512 void cpu_mm_q4x8_avx512(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    switch (a->n) {
    case 2:
        CPU_X8_FEW(tile512, 4, 2, 0, 0);
        return;
    case 3:
        CPU_X8_FEW(tile512, 4, 3, 0, 0);
        return;
    case 4:
        CPU_X8_FEW(tile512, 3, 4, 0, 0);
        return;
    case 5:
        CPU_X8_FEW(tile512, 4, 3, 2, 0);
        return;
    case 6:
        CPU_X8_FEW(tile512, 4, 3, 3, 0);
        return;
    case 7:
        CPU_X8_FEW(tile512, 3, 4, 3, 0);
        return;
    case 8:
        CPU_X8_FEW(tile512, 3, 4, 4, 0);
        return;
    case 9:
        CPU_X8_FEW(tile512, 4, 3, 3, 3);
        return;
    default:
        CPU_X8_WALK(tile512, 4, 2, 3);
        return;
    }
}

/* ---- AVX2: maddubs into int16 (8 products of <= 15 * 127 per lane pair stay below 2^15),
 * one madd to int32 per block ---- */

INL2 void tile2(const cpu_mm_args *a, int64_t r, int t, int G, int T) {
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows, nb = K / 32;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const unsigned char *gp[GMAX];
    const int8_t *xr[TMAX];
    __m256 acc[GMAX][TMAX];
#pragma GCC unroll 4
    for (int i = 0; i < G; i++)
        gp[i] = cpu_group_of(w, r + 8 * i);
#pragma GCC unroll 4
    for (int j = 0; j < T; j++)
        xr[j] = a->xq + (size_t)(t + j) * (size_t)K;
#pragma GCC unroll 4
    for (int i = 0; i < G; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++)
            acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i p[GMAX][TMAX];
#pragma GCC unroll 4
        for (int i = 0; i < G; i++)
#pragma GCC unroll 4
            for (int j = 0; j < T; j++)
                p[i][j] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++) {
            __m256i lo[GMAX], hi[GMAX];
#pragma GCC unroll 4
            for (int i = 0; i < G; i++) {
                __m256i q = _mm256_loadu_si256(
                    (const __m256i *)(gp[i] + (size_t)b * CPU_Q4X8_BLOCK + 16 + 32 * s));
                lo[i] = _mm256_and_si256(q, m4);
                hi[i] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            }
#pragma GCC unroll 4
            for (int j = 0; j < T; j++) {
                __m256i xl = _mm256_set1_epi32(cpu_load4(xr[j] + b * 32 + 4 * s));
                __m256i xh = _mm256_set1_epi32(cpu_load4(xr[j] + b * 32 + 16 + 4 * s));
#pragma GCC unroll 4
                for (int i = 0; i < G; i++) {
                    p[i][j] = _mm256_add_epi16(p[i][j], _mm256_maddubs_epi16(lo[i], xl));
                    p[i][j] = _mm256_add_epi16(p[i][j], _mm256_maddubs_epi16(hi[i], xh));
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < G; i++) {
            __m256 dw = _mm256_cvtph_ps(
                _mm_loadu_si128((const __m128i *)(gp[i] + (size_t)b * CPU_Q4X8_BLOCK)));
#pragma GCC unroll 4
            for (int j = 0; j < T; j++) {
                __m256i corr = _mm256_set1_epi32(-8 * a->xs[(size_t)(t + j) * (size_t)nb + b]);
                __m256i d32 = _mm256_madd_epi16(p[i][j], _mm256_set1_epi16(1));
                __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(a->xd[(size_t)(t + j) * nb + b]));
                __m256 f = _mm256_cvtepi32_ps(_mm256_add_epi32(d32, corr));
                acc[i][j] = _mm256_fmadd_ps(f, d, acc[i][j]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < G; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++)
            _mm256_storeu_ps(a->y + (size_t)(t + j) * M + r + 8 * i, acc[i][j]);
}

TGT2 void cpu_mm_q4x8_avx2(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    CPU_X8_WALK(tile2, 2, 2, 2);
}
