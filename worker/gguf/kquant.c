/* kquant: Sol's quantizers for the K-quant block layouts (Q4_K, Q5_K, Q6_K; dtype.h) used by
 * sol-quantize. The layouts are ggml's, so llama.cpp reads the files; the search is Sol's own:
 * per sub-block a min/max start refined by two least-squares passes, then the sub-block scales
 * quantized to 6 (Q4_K/Q5_K) or 8 bits (Q6_K) against one fp16 super-block scale. */
#include "kquant.h"

#include <math.h>
#include <string.h>

static int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* Asymmetric fit of n values to s * q - m with q in [0, qmax] and m >= 0 (the formats subtract
 * a non-negative min): start from the range, then refit s and m by least squares on the chosen
 * quants, keeping the better of each pass. */
static void fit_scale_min(const float *x, int n, int qmax, float *scale, float *min) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    if (lo > 0) lo = 0;
    float s = (hi - lo) / (float)qmax, m = -lo;
    if (s <= 0) {
        *scale = 0;
        *min = m;
        return;
    }
    double best = INFINITY;
    float bs = s, bm = m;
    for (int pass = 0; pass < 3; pass++) {
        double sq = 0, sx = 0, sqq = 0, sqx = 0, err = 0;
        for (int i = 0; i < n; i++) {
            int q = clampi((int)lrintf((x[i] + m) / s), 0, qmax);
            double e = (double)s * q - m - x[i];
            err += e * e;
            sq += q, sx += x[i], sqq += (double)q * q, sqx += (double)q * x[i];
        }
        if (err < best) best = err, bs = s, bm = m;
        double det = n * sqq - sq * sq;
        if (det <= 0) break;
        /* x ~ s q - m: least squares for (s, -m) */
        double ns = (n * sqx - sq * sx) / det, nb = (sx - ns * sq) / n;
        if (ns <= 0) break;
        s = (float)ns;
        m = nb > 0 ? 0.0f : (float)-nb;
    }
    *scale = bs;
    *min = bm;
}

/* The 12 scale bytes from 8 (scale, min) pairs of 6 bits (the inverse of sol_q4k_scale_min). */
static void pack_scales(const uint8_t sc[8], const uint8_t mn[8], uint8_t out[12]) {
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        out[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        out[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | (mn[j + 4] & 0xF) << 4);
    }
}

/* Q4_K (qmax 15) and Q5_K (qmax 31): 8 sub-blocks of 32, quants in q[256]. */
static void quant_k45(const float *x, int qmax, uint16_t *d_out, uint16_t *dmin_out,
                      uint8_t scales[12], uint8_t q[256]) {
    float s[8], m[8], smax = 0, mmax = 0;
    for (int j = 0; j < 8; j++) {
        fit_scale_min(x + 32 * j, 32, qmax, &s[j], &m[j]);
        smax = s[j] > smax ? s[j] : smax;
        mmax = m[j] > mmax ? m[j] : mmax;
    }
    uint16_t dh = sol_f32_to_f16(smax / 63), mh = sol_f32_to_f16(mmax / 63);
    float d = sol_f16_to_f32(dh), dmin = sol_f16_to_f32(mh);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d > 0 ? clampi((int)lrintf(s[j] / d), 0, 63) : 0);
        mn[j] = (uint8_t)(dmin > 0 ? clampi((int)lrintf(m[j] / dmin), 0, 63) : 0);
        float ds = d * sc[j], dm = dmin * mn[j];
        for (int i = 0; i < 32; i++)
            q[32 * j + i] =
                (uint8_t)(ds > 0 ? clampi((int)lrintf((x[32 * j + i] + dm) / ds), 0, qmax) : 0);
    }
    *d_out = dh;
    *dmin_out = mh;
    pack_scales(sc, mn, scales);
}

static void quant_q4_k(const float *x, sol_block_q4_k *b) {
    uint8_t q[256];
    quant_k45(x, 15, &b->d, &b->dmin, b->scales, q);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            b->qs[32 * c + l] = (uint8_t)(q[64 * c + l] | q[64 * c + 32 + l] << 4);
}

static void quant_q5_k(const float *x, sol_block_q5_k *b) {
    uint8_t q[256];
    quant_k45(x, 31, &b->d, &b->dmin, b->scales, q);
    memset(b->qh, 0, sizeof b->qh);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            uint8_t lo = q[64 * c + l], hi = q[64 * c + 32 + l];
            b->qs[32 * c + l] = (uint8_t)((lo & 0xF) | (hi & 0xF) << 4);
            b->qh[l] |= (uint8_t)(((lo >> 4) & 1) << (2 * c) | ((hi >> 4) & 1) << (2 * c + 1));
        }
}

/* Q6_K: 16 sub-blocks of 16, symmetric: q in [-32, 31] times an 8-bit signed scale times d. The
 * sub-block scale maps its largest magnitude (sign kept) to -32, so the full range is used. */
static void quant_q6_k(const float *x, sol_block_q6_k *b) {
    float s[16], smax = 0;
    for (int j = 0; j < 16; j++) {
        float amax = 0, max = 0;
        for (int i = 0; i < 16; i++)
            if (fabsf(x[16 * j + i]) > amax) amax = fabsf(x[16 * j + i]), max = x[16 * j + i];
        s[j] = max / -32;
        smax = fabsf(s[j]) > smax ? fabsf(s[j]) : smax;
    }
    uint16_t dh = sol_f32_to_f16(smax / 127);
    float d = sol_f16_to_f32(dh);
    uint8_t q[256];
    for (int j = 0; j < 16; j++) {
        int sc = d > 0 ? clampi((int)lrintf(s[j] / d), -128, 127) : 0;
        b->scales[j] = (int8_t)sc;
        float ds = d * (float)sc;
        for (int i = 0; i < 16; i++)
            q[16 * j + i] =
                (uint8_t)(clampi(ds != 0 ? (int)lrintf(x[16 * j + i] / ds) : 0, -32, 31) + 32);
    }
    b->d = dh;
    memset(b->qh, 0, sizeof b->qh);
    for (int h = 0; h < 2; h++) {
        const uint8_t *qq = q + 128 * h;
        uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        for (int l = 0; l < 32; l++) {
            ql[l] = (uint8_t)((qq[l] & 0xF) | (qq[l + 64] & 0xF) << 4);
            ql[l + 32] = (uint8_t)((qq[l + 32] & 0xF) | (qq[l + 96] & 0xF) << 4);
            qh[l] = (uint8_t)((qq[l] >> 4) | (qq[l + 32] >> 4) << 2 | (qq[l + 64] >> 4) << 4 |
                              (qq[l + 96] >> 4) << 6);
        }
    }
}

int sol_kquant_row(sol_dtype t, const float *src, void *dst, int64_t n) {
    for (int64_t b = 0; b < n / SOL_QK_K; b++) {
        const float *x = src + b * SOL_QK_K;
        if (t == SOL_DT_Q4_K)
            quant_q4_k(x, (sol_block_q4_k *)dst + b);
        else if (t == SOL_DT_Q5_K)
            quant_q5_k(x, (sol_block_q5_k *)dst + b);
        else if (t == SOL_DT_Q6_K)
            quant_q6_k(x, (sol_block_q6_k *)dst + b);
        else
            return -1;
    }
    return 0;
}
