/* cpu_kernels_q8x8_avx2: AVX2 kernel for the row-interleaved Q8_0 layout (cpu_repack.c; the
 * AVX-512 one is in cpu_kernels_x8_avx512.c). As for Q4_0, one 32-byte load holds 4 quants of
 * each of 8 rows, so each slice's products land in 8 row lanes and the 8 scales convert with one
 * instruction. The integer block dot is exact; the float part (convert, d_w * d_x, FMA in block
 * order) is the same instruction sequence for every tile shape, so n=1, verify and GEMM tiles
 * agree bit for bit. */
#include <immintrin.h>

#include "cpu_internal.h"

#define TGT2 __attribute__((target("avx2,fma,f16c")))
#define INL2 static inline __attribute__((always_inline)) TGT2

#define GMAX 4   /* groups of 8 rows per tile */
#define TMAX 9   /* tokens per tile (few-token tiles for speculative verify) */
#define SLICES 8 /* 32-byte slices per group block */

/* ---- AVX2: maddubs needs an unsigned operand whose pair sums stay below 2^15, so the signed
 * weight's magnitude multiplies the activation with the weight's sign moved onto it
 * (|w| <= 128, |x| <= 127: pair sums <= 32512); madd widens each slice to int32. The offset
 * layout costs one xor to get w back, and no correction. ---- */

INL2 void tile2(const cpu_mm_args *a, int64_t r, int t, int G, int T) {
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows, nb = K / 32;
    const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
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
    for (int64_t b = 0; b < nb; b++) {
        __m256i p[GMAX][TMAX];
#pragma GCC unroll 4
        for (int i = 0; i < G; i++)
#pragma GCC unroll 9
            for (int j = 0; j < T; j++)
                p[i][j] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int s = 0; s < SLICES; s++) {
            __m256i ws[GMAX], wa[GMAX];
#pragma GCC unroll 4
            for (int i = 0; i < G; i++) {
                __m256i q = _mm256_loadu_si256(
                    (const __m256i *)(gp[i] + (size_t)b * CPU_Q8X8_BLOCK + 16 + 32 * s));
                ws[i] = _mm256_xor_si256(q, flip);
                wa[i] = _mm256_abs_epi8(ws[i]);
            }
#pragma GCC unroll 9
            for (int j = 0; j < T; j++) {
                __m256i xv = _mm256_set1_epi32(cpu_load4(xr[j] + b * 32 + 4 * s));
#pragma GCC unroll 4
                for (int i = 0; i < G; i++) {
                    __m256i x16 = _mm256_maddubs_epi16(wa[i], _mm256_sign_epi8(xv, ws[i]));
                    p[i][j] = _mm256_add_epi32(p[i][j], _mm256_madd_epi16(x16, ones));
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < G; i++) {
            __m256 dw = _mm256_cvtph_ps(
                _mm_loadu_si128((const __m128i *)(gp[i] + (size_t)b * CPU_Q8X8_BLOCK)));
#pragma GCC unroll 9
            for (int j = 0; j < T; j++) {
                __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(a->xd[(size_t)(t + j) * nb + b]));
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p[i][j]), d, acc[i][j]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < G; i++)
#pragma GCC unroll 9
        for (int j = 0; j < T; j++)
            _mm256_storeu_ps(a->y + (size_t)(t + j) * M + r + 8 * i, acc[i][j]);
}

TGT2 void cpu_mm_q8x8_avx2(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    switch (a->n) {
    case 2:
        CPU_X8_FEW(tile2, 2, 2, 0, 0);
        return;
    case 3:
        CPU_X8_FEW(tile2, 1, 3, 0, 0);
        return;
    case 4:
        CPU_X8_FEW(tile2, 1, 4, 0, 0);
        return;
    default:
        CPU_X8_WALK(tile2, 2, 2, 2);
        return;
    }
}
