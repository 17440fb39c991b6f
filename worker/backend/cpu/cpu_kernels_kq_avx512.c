/* cpu_kernels_kq_avx512: Q4_K, Q5_K and Q6_K weights against Q8_K activations on AVX-512 (BW,
 * VNNI). A super-block's quants are unpacked once per row into four 64-byte registers in element
 * order, with their sub-block scales as 16-bit lanes; each of up to KQ_T tokens then needs four
 * vpmaddubsw + four vpdpwssd for its 256 products, and the super-block's integer sums go into a
 * 16-lane float accumulator (scaled by d * dx) with the mins or the Q6_K offset in the same
 * accumulator (scaled by dmin * dx); one horizontal sum per output at the end of the row.
 *
 * Batch invariance: n = 1 runs the same tile with T = 1, so every output sees the same
 * instruction sequence whatever the batch. (This path's lane-wise float sums differ from the
 * scalar and AVX2 kernels' one-float-per-super-block order: each ISA path is consistent with
 * itself, as everywhere in the CPU backend.) Integer ranges: see cpu_kernels_kq_avx2.c. */
#include <immintrin.h>

#include "cpu_internal.h"

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TGT

enum { KQ_T = 8 }; /* tokens per tile: 8 accumulators + 4 weight + 4 scale registers */

INL float hsum16(__m512 v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* One super-block of one row, unpacked: w[i] = quants of elements [64i, 64i + 64) (unsigned),
 * s[i] = their scales per 16-bit lane of the maddubs result, side = the 16-bit factors that
 * multiply the token's 16 sums of 16 (mins, or Q6_K's scales); d scales the products, dm the
 * side sums. */
typedef struct {
    __m512i w[4], s[4];
    __m256i side;
    __m512 d, dm;
} kq_row;

/* 16-bit lanes [v[2i] x16 | v[2i+1] x16] from eight 16-bit values v: the scales of sub-blocks
 * 2i and 2i+1 (32 elements each) for the maddubs result of w[i]. */
INL __m512i pair_scales(__m512i v, int i) {
    const __m512i idx = _mm512_set_epi16(
        2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1,
        2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1,
        2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i,
        2 * i, 2 * i, 2 * i);
    return _mm512_permutexvar_epi16(idx, v);
}

/* Q4_K (qh NULL) or Q5_K: elements [64i, 64i+64) are the low then the high nibbles of
 * qs[32i, 32i+32), plus, for Q5_K, bits 2i / 2i+1 of qh as the fifth bit. */
INL void unpack_q45(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh, uint16_t dh,
                    uint16_t dminh, kq_row *u) {
    const __m512i shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0); /* high half: high nibbles */
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    uint8_t sc[8], mn[8];
    cpu_q4k_scales(scales, sc, mn);
    __m512i hb = qh ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh))
                    : _mm512_setzero_si512();
    __m512i sv = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc)));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * i)));
        __m512i w = _mm512_and_si512(_mm512_srlv_epi64(q, shift), m4);
        if (qh) {
            /* every byte's bit 2i (low half: low nibbles) or 2i + 1 (high half) */
            const long long lo = (long long)(0x0101010101010101ull << (2 * i)),
                            hi = (long long)(0x0101010101010101ull << (2 * i + 1));
            const __m512i bit = _mm512_set_epi64(hi, hi, hi, hi, lo, lo, lo, lo);
            __mmask64 k = _mm512_test_epi8_mask(hb, bit);
            w = _mm512_mask_add_epi8(w, k, w, _mm512_set1_epi8(16));
        }
        u->w[i] = w;
        u->s[i] = pair_scales(sv, i);
    }
    __m128i m16 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)mn));
    u->side = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
    u->d = _mm512_set1_ps(sol_f16_to_f32(dh));
    u->dm = _mm512_set1_ps(sol_f16_to_f32(dminh));
}

/* Q6_K: per half h, ql[64h, 64h+64) holds elements [128h, 128h+64) in its low nibbles and
 * [128h+64, 128h+128) in its high nibbles; qh[32h, 32h+32) gives bits 4-5 of element 128h+l at
 * bits 0-1, of +32 at 2-3, of +64 at 4-5, of +96 at 6-7. The offset 32 goes to the side sums. */
INL void unpack_q6(const sol_block_q6_k *b, kq_row *u) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i up = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4);   /* bits 0-1 | 2-3 -> 4-5 */
    const __m512i down = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0); /* bits 4-5 | 6-7 -> 4-5 */
    __m512i sv =
        _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales)));
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512i l = _mm512_loadu_si512((const void *)(b->ql + 64 * h));
        __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
        u->w[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4),
                                      _mm512_and_si512(_mm512_sllv_epi64(qh, up), m30));
        u->w[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi64(l, 4), m4),
                                          _mm512_and_si512(_mm512_srlv_epi64(qh, down), m30));
        /* 16-element sub-blocks: w[2h] covers scales 8h..8h+3, w[2h+1] 8h+4..8h+7, 8 lanes each */
        for (int k = 0; k < 2; k++) {
            int s0 = 8 * h + 4 * k;
            const __m512i idx = _mm512_set_epi16(
                s0 + 3, s0 + 3, s0 + 3, s0 + 3, s0 + 3, s0 + 3, s0 + 3, s0 + 3, s0 + 2, s0 + 2,
                s0 + 2, s0 + 2, s0 + 2, s0 + 2, s0 + 2, s0 + 2, s0 + 1, s0 + 1, s0 + 1, s0 + 1,
                s0 + 1, s0 + 1, s0 + 1, s0 + 1, s0, s0, s0, s0, s0, s0, s0, s0);
            u->s[2 * h + k] = _mm512_permutexvar_epi16(idx, sv);
        }
    }
    u->side = _mm512_castsi512_si256(sv);
    float d = sol_f16_to_f32(b->d);
    u->d = _mm512_set1_ps(d);
    u->dm = _mm512_set1_ps(32.0f * d); /* exact: a power of two */
}

/* acc += ((products) * d - (side sums) * dm) * dx for one token's Q8_K block. */
INL __m512 kq_accumulate(const kq_row *u, const int8_t *q, const int16_t *bs, const float *dx,
                         __m512 acc) {
    __m512i p = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        p = _mm512_dpwssd_epi32(
            p, _mm512_maddubs_epi16(u->w[i], _mm512_loadu_si512((const void *)(q + 64 * i))),
            u->s[i]);
    __m256i side = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bs), u->side);
    __m512 v = _mm512_fnmadd_ps(_mm512_zextps256_ps512(_mm256_cvtepi32_ps(side)), u->dm,
                                _mm512_mul_ps(_mm512_cvtepi32_ps(p), u->d));
    return _mm512_fmadd_ps(v, _mm512_set1_ps(*dx), acc);
}

/* Row r against tokens [t0, t0 + T), super-block by super-block. */
#define KQ_TILE(name, block_t, UNPACK)                                                             \
    INL void name(const cpu_mm_args *a, int64_t r, int t0, const int T) {                          \
        const sol_weight *w = a->w;                                                                \
        int64_t K = w->cols, M = w->rows, nb = K / SOL_QK_K;                                       \
        const block_t *row = (const block_t *)((const char *)w->data + (size_t)r * w->row_bytes);  \
        __m512 acc[KQ_T];                                                                          \
        _Pragma("GCC unroll 8") for (int j = 0; j < T; j++) acc[j] = _mm512_setzero_ps();          \
        for (int64_t b = 0; b < nb; b++) {                                                         \
            kq_row u;                                                                              \
            UNPACK;                                                                                \
            _Pragma("GCC unroll 8") for (int j = 0; j < T; j++) {                                  \
                size_t t = (size_t)(t0 + j);                                                       \
                acc[j] = kq_accumulate(&u, a->kq + t * (size_t)K + (size_t)b * SOL_QK_K,           \
                                       a->ks + t * (size_t)(K / 16) + (size_t)b * 16,              \
                                       a->kd + t * (size_t)nb + (size_t)b, acc[j]);                \
            }                                                                                      \
        }                                                                                          \
        _Pragma("GCC unroll 8") for (int j = 0; j < T; j++) a->y[(size_t)(t0 + j) * M + r] =       \
            hsum16(acc[j]);                                                                        \
    }

KQ_TILE(tile_q4_k, sol_block_q4_k,
        unpack_q45(row[b].scales, row[b].qs, NULL, row[b].d, row[b].dmin, &u))
KQ_TILE(tile_q5_k, sol_block_q5_k,
        unpack_q45(row[b].scales, row[b].qs, row[b].qh, row[b].d, row[b].dmin, &u))
KQ_TILE(tile_q6_k, sol_block_q6_k, unpack_q6(&row[b], &u))

/* Token tiles outermost: a tile's activations (KQ_T x K bytes) stay in L1 while the weight rows
 * stream past (144-210 bytes per super-block, shared by the tile's tokens); rows innermost would
 * reload every token's activations from L2 for each row instead. Full KQ_T-token tiles, then one
 * tile of the rest; the compile-time T of each call keeps the accumulators in registers. */
#define KQ_MM(name, tile)                                                                          \
    static TGT void name(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {           \
        (void)scratch;                                                                             \
        int t = 0;                                                                                 \
        for (; t + KQ_T <= a->n; t += KQ_T)                                                        \
            for (int64_t r = r0; r < r1; r++)                                                      \
                tile(a, r, t, KQ_T);                                                               \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            switch (a->n - t) {                                                                    \
            case 1:                                                                                \
                tile(a, r, t, 1);                                                                  \
                break;                                                                             \
            case 2:                                                                                \
                tile(a, r, t, 2);                                                                  \
                break;                                                                             \
            case 3:                                                                                \
                tile(a, r, t, 3);                                                                  \
                break;                                                                             \
            case 4:                                                                                \
                tile(a, r, t, 4);                                                                  \
                break;                                                                             \
            case 5:                                                                                \
                tile(a, r, t, 5);                                                                  \
                break;                                                                             \
            case 6:                                                                                \
                tile(a, r, t, 6);                                                                  \
                break;                                                                             \
            case 7:                                                                                \
                tile(a, r, t, 7);                                                                  \
                break;                                                                             \
            default:                                                                               \
                break;                                                                             \
            }                                                                                      \
        }                                                                                          \
    }

KQ_MM(mm_q4_k, tile_q4_k)
KQ_MM(mm_q5_k, tile_q5_k)
KQ_MM(mm_q6_k, tile_q6_k)

cpu_mm_fn cpu_mm_kq_avx512(sol_dtype t) {
    switch (t) {
    case SOL_DT_Q4_K:
        return mm_q4_k;
    case SOL_DT_Q5_K:
        return mm_q5_k;
    case SOL_DT_Q6_K:
        return mm_q6_k;
    default:
        return NULL;
    }
}
