/* kq_dot: the exact integer parts of K-quant super-blocks against Q8_K activations, written once
 * for the CPU backend (C) and the CUDA kernels (device code), so both compute the same integers.
 *
 * Q4_K/Q5_K: isum = sum_j sc_j * dot_j over the eight 32-element sub-blocks, msum = sum_j m_j *
 * (sum of the token's quants in sub-block j, from its 16-element sums bs). Q6_K: sum_j sc_j *
 * dot_j over sixteen 16-element sub-blocks with the quants' offset 32 removed through bs. */
#ifndef SOL_KQ_DOT_H
#define SOL_KQ_DOT_H

#include <stdint.h>

#ifdef __CUDACC__
#define SOL_KQ_FN static inline __host__ __device__
#else
#define SOL_KQ_FN static inline
#endif

/* Sub-block j's 6-bit scale and min from a Q4_K/Q5_K block's 12 scale bytes. */
SOL_KQ_FN void sol_kq_scale_min(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* qh is NULL for Q4_K. q: the token's 256 quants, bs: its 16 sums of 16. */
SOL_KQ_FN void sol_kq45_sums(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh,
                             const int8_t *q, const int16_t *bs, int32_t *isum, int32_t *msum) {
    int32_t is = 0, ms = 0;
    for (int c = 0; c < 4; c++) {
        int sc1, m1, sc2, m2;
        sol_kq_scale_min(2 * c, scales, &sc1, &m1);
        sol_kq_scale_min(2 * c + 1, scales, &sc2, &m2);
        int32_t s1 = 0, s2 = 0;
        for (int l = 0; l < 32; l++) {
            int h1 = qh ? ((qh[l] >> (2 * c)) & 1) << 4 : 0;
            int h2 = qh ? ((qh[l] >> (2 * c + 1)) & 1) << 4 : 0;
            s1 += ((qs[32 * c + l] & 0xF) | h1) * q[64 * c + l];
            s2 += ((qs[32 * c + l] >> 4) | h2) * q[64 * c + 32 + l];
        }
        is += sc1 * s1 + sc2 * s2;
        ms += m1 * (bs[4 * c] + bs[4 * c + 1]) + m2 * (bs[4 * c + 2] + bs[4 * c + 3]);
    }
    *isum = is;
    *msum = ms;
}

/* ql: 128 bytes of low nibbles, qh: 64 bytes of 2-bit highs, scales: 16 signed scales. */
SOL_KQ_FN int32_t sol_kq6_sum(const uint8_t *ql0, const uint8_t *qh0, const int8_t *scales,
                              const int8_t *q, const int16_t *bs) {
    int32_t is = 0;
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = ql0 + 64 * h, *qh = qh0 + 32 * h;
        const int8_t *sc = scales + 8 * h, *x = q + 128 * h;
        int32_t s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int l = 0; l < 32; l++) {
            s[l / 16] += ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) * x[l];
            s[2 + l / 16] += ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) * x[l + 32];
            s[4 + l / 16] += ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) * x[l + 64];
            s[6 + l / 16] += ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) * x[l + 96];
        }
        for (int j = 0; j < 8; j++)
            is += sc[j] * (s[j] - 32 * bs[8 * h + j]);
    }
    return is;
}

#endif
