/* cpu_kernels_q4x8_avx2: AVX2 kernel for the row-interleaved Q4_0 layout (cpu_repack.c; the
 * AVX-512 one is in cpu_kernels_x8_avx512.c). One 32-byte load holds 4 bytes of each of 8 rows,
 * so maddubs against a broadcast 4-byte slice of the activations gives 8 rows' partial sums in
 * 8 lanes and the 8 scales convert with one instruction: no horizontal sums. Per block and
 * output the integer dot is exact; the float part (convert, d_w * d_x, FMA in block order) is
 * the same instruction sequence for every tile shape, so n=1 and GEMM tiles agree bit for bit. */
#include <immintrin.h>

#include "cpu_internal.h"

#define TGT2 __attribute__((target("avx2,fma,f16c")))
#define INL2 static inline __attribute__((always_inline)) TGT2

#define GMAX 4 /* groups of 8 rows per tile */
#define TMAX 9 /* tokens per tile (few-token tiles for speculative verify) */

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
