/* cpu_kernels_x8_avx512: AVX-512 VNNI kernels for both row-interleaved layouts (Q4_0X8, Q8_0X8;
 * cpu_repack.c). One 32-byte load holds 4 quants of each of 8 rows, so one vpdpbusd (256-bit)
 * against a broadcast 4-byte slice of the activations gives 8 rows' partial sums in 8 int32
 * lanes and the 8 scales convert with one instruction: no horizontal sums. The layouts differ
 * only in how a block's 8 slices of quants are read (Q4_0: low then high nibbles of 4 loads,
 * offset 8; Q8_0: 8 loads, offset 128), so one tile serves both. Per block and output the
 * integer dot is exact; the float part (convert, d_w * d_x, FMA in block order) is the same
 * instruction sequence for every tile shape, so n=1, verify and GEMM tiles agree bit for bit. */
#include <immintrin.h>

#include "cpu_internal.h"

#define TGT512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define INL512 static inline __attribute__((always_inline)) TGT512

#define GMAX 4 /* groups of 8 rows per tile */
#define TMAX 9 /* tokens per tile (few-token tiles for speculative verify) */

enum { FMT_Q4 = 0, FMT_Q8 = 1 };

/* Slice v (0..7) of a group block: lane r holds row r's elements 4v..4v+3, unsigned (offset). */
INL512 __m256i slice(int fmt, const unsigned char *blk, int v) {
    if (fmt == FMT_Q8) return _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * v));
    __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * (v & 3)));
    if (v >= 4) q = _mm256_srli_epi16(q, 4);
    return _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
}

INL512 void tile512(int fmt, const cpu_mm_args *a, int64_t r, int t, int G, int T) {
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows, nb = K / 32;
    const size_t block = fmt == FMT_Q8 ? CPU_Q8X8_BLOCK : CPU_Q4X8_BLOCK;
    const int32_t offset = fmt == FMT_Q8 ? 128 : 8;
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
    /* Two integer chains per output (even and odd slices) hide vpdpbusd's latency when few
     * outputs are in flight. Integer sums are exact, so the chain count never changes a result. */
    const int split = G * T < 8;
    for (int64_t b = 0; b < nb; b++) {
        __m256i p0[GMAX][TMAX], p1[GMAX][TMAX];
#pragma GCC unroll 9
        for (int j = 0; j < T; j++) {
            __m256i corr = _mm256_set1_epi32(-offset * a->xs[(size_t)(t + j) * (size_t)nb + b]);
#pragma GCC unroll 4
            for (int i = 0; i < G; i++) {
                p0[i][j] = corr;
                p1[i][j] = _mm256_setzero_si256();
            }
        }
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) {
            __m256i q[GMAX];
#pragma GCC unroll 4
            for (int i = 0; i < G; i++)
                q[i] = slice(fmt, gp[i] + (size_t)b * block, v);
#pragma GCC unroll 9
            for (int j = 0; j < T; j++) {
                __m256i xv = _mm256_set1_epi32(cpu_load4(xr[j] + b * 32 + 4 * v));
#pragma GCC unroll 4
                for (int i = 0; i < G; i++) {
                    if (split && (v & 1))
                        p1[i][j] = _mm256_dpbusd_epi32(p1[i][j], q[i], xv);
                    else
                        p0[i][j] = _mm256_dpbusd_epi32(p0[i][j], q[i], xv);
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < G; i++) {
            __m256 dw =
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gp[i] + (size_t)b * block)));
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

INL512 void tile_q4(const cpu_mm_args *a, int64_t r, int t, int G, int T) {
    tile512(FMT_Q4, a, r, t, G, T);
}

INL512 void tile_q8(const cpu_mm_args *a, int64_t r, int t, int G, int T) {
    tile512(FMT_Q8, a, r, t, G, T);
}

/* n = 2..9 (batched decode, speculative verify): G groups x every token as one to three tiles
 * on the same rows (CPU_X8_FEW), shapes measured with `bench_matmul 2 0.3 verify q4_0|q8_0`;
 * they differ only at n = 5 (Q4_0 4 x (3+2), Q8_0 3 x (3+2)). n = 1 and prefill: CPU_X8_WALK. */
#define X8_MM(tile, G5)                                                                            \
    do {                                                                                           \
        switch (a->n) {                                                                            \
        case 2:                                                                                    \
            CPU_X8_FEW(tile, 4, 2, 0, 0);                                                          \
            return;                                                                                \
        case 3:                                                                                    \
            CPU_X8_FEW(tile, 4, 3, 0, 0);                                                          \
            return;                                                                                \
        case 4:                                                                                    \
            CPU_X8_FEW(tile, 3, 4, 0, 0);                                                          \
            return;                                                                                \
        case 5:                                                                                    \
            CPU_X8_FEW(tile, G5, 3, 2, 0);                                                         \
            return;                                                                                \
        case 6:                                                                                    \
            CPU_X8_FEW(tile, 4, 3, 3, 0);                                                          \
            return;                                                                                \
        case 7:                                                                                    \
            CPU_X8_FEW(tile, 3, 4, 3, 0);                                                          \
            return;                                                                                \
        case 8:                                                                                    \
            CPU_X8_FEW(tile, 3, 4, 4, 0);                                                          \
            return;                                                                                \
        case 9:                                                                                    \
            CPU_X8_FEW(tile, 4, 3, 3, 3);                                                          \
            return;                                                                                \
        default:                                                                                   \
            CPU_X8_WALK(tile, 4, 2, 3);                                                            \
            return;                                                                                \
        }                                                                                          \
    } while (0)

TGT512 void cpu_mm_q4x8_avx512(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    X8_MM(tile_q4, 4);
}

TGT512 void cpu_mm_q8x8_avx512(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    X8_MM(tile_q8, 3);
}
