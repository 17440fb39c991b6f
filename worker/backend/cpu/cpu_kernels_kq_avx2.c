/* cpu_kernels_kq_avx2: Q4_K, Q5_K and Q6_K weights against Q8_K activations with AVX2 integer
 * dot products (the AVX-512 path runs them too). A super-block's quants are unpacked once into
 * registers and reused by up to KQ_TT tokens; each (row, token) output is summed super-block by
 * super-block through cpu_kq_term from exact integers, so it has the scalar kernel's bits
 * whatever the batch, and so whatever the tile.
 *
 * Integer ranges: maddubs pairs are at most 2 * 63 * 127 = 16002 (no 16-bit saturation, the
 * activations stay in [-127, 127]); a super-block's scaled sum is at most 256 * 63 * 127 * 63
 * (Q4_K/Q5_K: 31 * 127 * 256 * 63 = 63.5M; Q6_K: 63 * 127 * 256 * 128 = 262M), inside int32. */
#include <immintrin.h>

#include "cpu_internal.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TGT

enum { KQ_TT = 4 }; /* tokens per tile: unpacked weights stay in registers or L1 across them */

/* [sum of a's lanes, sum of b's lanes] as two int32 (exact: the sums fit by construction). */
INL void hsum2_i32(__m256i a, __m256i b, int32_t *sa, int32_t *sb) {
    __m256i h = _mm256_hadd_epi32(a, b); /* a01 a23 b01 b23 | a45 a67 b45 b67 */
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    s = _mm_hadd_epi32(s, s); /* a b a b */
    *sa = _mm_cvtsi128_si32(s);
    *sb = _mm_extract_epi32(s, 1);
}

/* The 64 quants of chunk c (0..3) of a Q4_K/Q5_K super-block: lo = elements [64c, 64c+32) (low
 * nibbles of qs[32c..]), hi = [64c+32, 64c+64) (high nibbles); with Q5_K's qh bits (hb, the 32
 * qh bytes) bit 2c / 2c+1 adds 16. */
INL void kq45_chunk(const uint8_t *qs, const __m256i *hb, int c, __m256i *lo, __m256i *hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
    *lo = _mm256_and_si256(v, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (!hb) return;
    const __m256i b1 = _mm256_set1_epi8((char)(1 << (2 * c))),
                  b2 = _mm256_set1_epi8((char)(2 << (2 * c))), f = _mm256_set1_epi8(16);
    *lo =
        _mm256_or_si256(*lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(*hb, b1), b1), f));
    *hi =
        _mm256_or_si256(*hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(*hb, b2), b2), f));
}

/* 16-bit lane j of v in every 16-bit lane (v holds the same 8 values in both 128-bit lanes). */
INL __m256i lane16(__m256i v, int j) {
    const char b0 = (char)(2 * j), b1 = (char)(2 * j + 1);
    return _mm256_shuffle_epi8(v, _mm256_setr_epi8(b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1,
                                                   b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1,
                                                   b0, b1, b0, b1, b0, b1, b0, b1));
}

/* One token against one Q4_K/Q5_K super-block, unpacked on the fly (the decode path: nothing is
 * stored, every loop unrolled). The same integers, hence bits, as kq45_unpack + kq45_dot; it is
 * written out because calling those two inlined spills the 17-register block to the stack (l8
 * Q4_K_M decode on AVX2: 87 tok/s fused, 50-62 through the struct). */
INL float kq45_dot1(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh, uint16_t dh,
                    uint16_t dminh, const int8_t *q, const int16_t *bs, float dx) {
    uint8_t sc[8], mn[8];
    cpu_q4k_scales(scales, sc, mn);
    __m256i s16 =
        _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc)));
    __m256i hb = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    __m256i p0 = _mm256_setzero_si256(), p1 = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m256i lo, hi;
        kq45_chunk(qs, qh ? &hb : NULL, c, &lo, &hi);
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(q + 64 * c));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(q + 64 * c + 32));
        p0 = _mm256_add_epi32(p0,
                              _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), lane16(s16, 2 * c)));
        p1 = _mm256_add_epi32(
            p1, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), lane16(s16, 2 * c + 1)));
    }
    __m128i m16 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)mn));
    __m256i mins = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
    __m256i mv = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bs), mins);
    int32_t isum, msum;
    hsum2_i32(_mm256_add_epi32(p0, p1), mv, &isum, &msum);
    return cpu_kq_term(dx, sol_f16_to_f32(dh), isum, sol_f16_to_f32(dminh), msum);
}

/* A Q4_K or Q5_K super-block unpacked: w[j] holds sub-block j's 32 quants, s[j] its scale in
 * every 16-bit lane, mins [m0 m0 m1 m1 ... m7 m7] for the 16-element sums. */
typedef struct {
    __m256i w[8], s[8], mins;
    float d, dmin;
} kq45_block;

INL void kq45_unpack(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh, uint16_t dh,
                     uint16_t dminh, kq45_block *u) {
    uint8_t sc[8], mn[8];
    cpu_q4k_scales(scales, sc, mn);
    __m256i hb = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i lo, hi;
        kq45_chunk(qs, qh ? &hb : NULL, c, &lo, &hi);
        u->w[2 * c] = lo;
        u->w[2 * c + 1] = hi;
    }
    for (int j = 0; j < 8; j++)
        u->s[j] = _mm256_set1_epi16(sc[j]);
    __m128i m16 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)mn));
    u->mins = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
    u->d = sol_f16_to_f32(dh);
    u->dmin = sol_f16_to_f32(dminh);
}

/* One token's share of an unpacked Q4_K/Q5_K super-block: q its 256 Q8_K quants, bs its 16
 * sums of 16, dx its scale. */
INL float kq45_dot(const kq45_block *u, const int8_t *q, const int16_t *bs, float dx) {
    __m256i p = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(q + 32 * j));
        p = _mm256_add_epi32(p, _mm256_madd_epi16(_mm256_maddubs_epi16(u->w[j], x), u->s[j]));
    }
    __m256i mv = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bs), u->mins);
    int32_t isum, msum;
    hsum2_i32(p, mv, &isum, &msum);
    return cpu_kq_term(dx, u->d, isum, u->dmin, msum);
}

/* A Q6_K super-block unpacked: w[j] the 32 quants (0..63) of elements [32j, 32j+32), s[j] their
 * two 16-element scales (low lane: first 16, high lane: second 16), sc16 all 16 scales. */
typedef struct {
    __m256i w[8], s[8], sc16;
    float d;
} kq6_block;

INL void kq6_unpack(const sol_block_q6_k *b, kq6_block *u) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {
        __m256i la = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        __m256i lb = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        __m256i *w = u->w + 4 * h;
        w[0] = _mm256_or_si256(_mm256_and_si256(la, m4),
                               _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
        w[1] = _mm256_or_si256(_mm256_and_si256(lb, m4),
                               _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
        w[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(la, 4), m4),
                               _mm256_and_si256(qh, m30));
        w[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lb, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
        __m256i s8 = _mm256_broadcastsi128_si256(
            _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(b->scales + 8 * h))));
        for (int j = 0; j < 4; j++) {
            /* low lane: 16-bit scale 2j in every lane; high lane: scale 2j + 1 */
            const char lo0 = (char)(4 * j), lo1 = (char)(4 * j + 1), hi0 = (char)(4 * j + 2),
                       hi1 = (char)(4 * j + 3);
            const __m256i pick = _mm256_setr_epi8(
                lo0, lo1, lo0, lo1, lo0, lo1, lo0, lo1, lo0, lo1, lo0, lo1, lo0, lo1, lo0, lo1, hi0,
                hi1, hi0, hi1, hi0, hi1, hi0, hi1, hi0, hi1, hi0, hi1, hi0, hi1, hi0, hi1);
            u->s[4 * h + j] = _mm256_shuffle_epi8(s8, pick);
        }
    }
    u->sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    u->d = sol_f16_to_f32(b->d);
}

INL float kq6_dot(const kq6_block *u, const int8_t *q, const int16_t *bs, float dx) {
    __m256i p = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(q + 32 * j));
        p = _mm256_add_epi32(p, _mm256_madd_epi16(_mm256_maddubs_epi16(u->w[j], x), u->s[j]));
    }
    /* the quants' offset 32: sum_j sc_j * 32 * (sum of the activations of sub-block j) */
    __m256i o = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bs), u->sc16);
    int32_t isum, osum;
    hsum2_i32(p, o, &isum, &osum);
    return cpu_kq_term(dx, u->d, isum - 32 * osum, 0.0f, 0);
}

/* One token against one Q6_K super-block, unpacked on the fly (the decode path). */
INL float kq6_dot1(const sol_block_q6_k *b, const int8_t *q, const int16_t *bs, float dx) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256i p0 = _mm256_setzero_si256(), p1 = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256i la = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        __m256i lb = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        __m256i s8 = _mm256_broadcastsi128_si256(
            _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(b->scales + 8 * h))));
        __m256i w0 = _mm256_or_si256(_mm256_and_si256(la, m4),
                                     _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
        __m256i w1 = _mm256_or_si256(_mm256_and_si256(lb, m4),
                                     _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
        __m256i w2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(la, 4), m4),
                                     _mm256_and_si256(qh, m30));
        __m256i w3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lb, 4), m4),
                                     _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
        const int8_t *x = q + 128 * h;
        /* scales 2j / 2j + 1 for the low / high 16 elements of w_j */
        __m256i s0 = _mm256_shuffle_epi8(s8, _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
                                                              1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
                                                              2, 3, 2, 3, 2, 3));
        __m256i s1 = _mm256_shuffle_epi8(s8, _mm256_setr_epi8(4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4,
                                                              5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7,
                                                              6, 7, 6, 7, 6, 7));
        __m256i s2 = _mm256_shuffle_epi8(s8, _mm256_setr_epi8(8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8,
                                                              9, 8, 9, 10, 11, 10, 11, 10, 11, 10,
                                                              11, 10, 11, 10, 11, 10, 11, 10, 11));
        __m256i s3 = _mm256_shuffle_epi8(
            s8, _mm256_setr_epi8(12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 14,
                                 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15));
        p0 = _mm256_add_epi32(
            p0, _mm256_madd_epi16(_mm256_maddubs_epi16(w0, _mm256_loadu_si256((const __m256i *)x)),
                                  s0));
        p1 = _mm256_add_epi32(
            p1, _mm256_madd_epi16(
                    _mm256_maddubs_epi16(w1, _mm256_loadu_si256((const __m256i *)(x + 32))), s1));
        p0 = _mm256_add_epi32(
            p0, _mm256_madd_epi16(
                    _mm256_maddubs_epi16(w2, _mm256_loadu_si256((const __m256i *)(x + 64))), s2));
        p1 = _mm256_add_epi32(
            p1, _mm256_madd_epi16(
                    _mm256_maddubs_epi16(w3, _mm256_loadu_si256((const __m256i *)(x + 96))), s3));
    }
    __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    __m256i o = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bs), sc16);
    int32_t isum, osum;
    hsum2_i32(_mm256_add_epi32(p0, p1), o, &isum, &osum);
    return cpu_kq_term(dx, sol_f16_to_f32(b->d), isum - 32 * osum, 0.0f, 0);
}

/* One token (decode): each row's super-blocks in order, unpacked on the fly. */
#define KQ_WALK1(block_t, DOT1)                                                                    \
    do {                                                                                           \
        const sol_weight *w = a->w;                                                                \
        int64_t K = w->cols, nb = K / SOL_QK_K;                                                    \
        const int8_t *q = a->kq;                                                                   \
        const int16_t *bs = a->ks;                                                                 \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            const block_t *row =                                                                   \
                (const block_t *)((const char *)w->data + (size_t)r * w->row_bytes);               \
            float acc = 0.0f;                                                                      \
            for (int64_t b = 0; b < nb; b++)                                                       \
                acc += DOT1;                                                                       \
            a->y[r] = acc;                                                                         \
        }                                                                                          \
    } while (0)

/* Rows [r0, r1) x every token, KQ_TT tokens at a time per unpacked super-block. */
#define KQ_WALK(block_t, UNPACK, DOT)                                                              \
    do {                                                                                           \
        const sol_weight *w = a->w;                                                                \
        int64_t K = w->cols, M = w->rows, nb = K / SOL_QK_K;                                       \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            const block_t *row =                                                                   \
                (const block_t *)((const char *)w->data + (size_t)r * w->row_bytes);               \
            for (int t0 = 0; t0 < a->n; t0 += KQ_TT) {                                             \
                int T = a->n - t0 < KQ_TT ? a->n - t0 : KQ_TT;                                     \
                float acc[KQ_TT] = {0};                                                            \
                for (int64_t b = 0; b < nb; b++) {                                                 \
                    UNPACK;                                                                        \
                    for (int j = 0; j < T; j++) {                                                  \
                        size_t t = (size_t)(t0 + j);                                               \
                        acc[j] += DOT(&u, a->kq + t * (size_t)K + (size_t)b * SOL_QK_K,            \
                                      a->ks + t * (size_t)(K / 16) + (size_t)b * 16,               \
                                      a->kd[t * (size_t)nb + (size_t)b]);                          \
                    }                                                                              \
                }                                                                                  \
                for (int j = 0; j < T; j++)                                                        \
                    a->y[(size_t)(t0 + j) * M + r] = acc[j];                                       \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static TGT void mm_q4_k(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    if (a->n == 1) {
        KQ_WALK1(sol_block_q4_k, kq45_dot1(row[b].scales, row[b].qs, NULL, row[b].d, row[b].dmin,
                                           q + b * SOL_QK_K, bs + b * 16, a->kd[b]));
        return;
    }
    kq45_block u;
    KQ_WALK(sol_block_q4_k, kq45_unpack(row[b].scales, row[b].qs, NULL, row[b].d, row[b].dmin, &u),
            kq45_dot);
}

static TGT void mm_q5_k(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    if (a->n == 1) {
        KQ_WALK1(sol_block_q5_k, kq45_dot1(row[b].scales, row[b].qs, row[b].qh, row[b].d,
                                           row[b].dmin, q + b * SOL_QK_K, bs + b * 16, a->kd[b]));
        return;
    }
    kq45_block u;
    KQ_WALK(sol_block_q5_k,
            kq45_unpack(row[b].scales, row[b].qs, row[b].qh, row[b].d, row[b].dmin, &u), kq45_dot);
}

static TGT void mm_q6_k(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    if (a->n == 1) {
        KQ_WALK1(sol_block_q6_k, kq6_dot1(&row[b], q + b * SOL_QK_K, bs + b * 16, a->kd[b]));
        return;
    }
    kq6_block u;
    KQ_WALK(sol_block_q6_k, kq6_unpack(&row[b], &u), kq6_dot);
}

cpu_mm_fn cpu_mm_kq_avx2(sol_dtype t) {
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
