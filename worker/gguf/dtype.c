/* dtype: element-type table, fp16/bf16 conversion and the scalar reference quantizers.
 * Quantizers reproduce ggml's reference rounding exactly so files we write match llama.cpp's. */
#include "dtype.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "kquant.h"

typedef struct {
    uint32_t id;
    const char *name;
    size_t block_elems;
    size_t block_bytes;
} dtype_info;

static const dtype_info k_types[] = {
    {SOL_DT_F32, "f32", 1, 4},
    {SOL_DT_F16, "f16", 1, 2},
    {SOL_DT_Q4_0, "q4_0", SOL_QK4_0, sizeof(sol_block_q4_0)},
    {SOL_DT_Q5_0, "q5_0", SOL_QK4_0, sizeof(sol_block_q5_0)},
    {SOL_DT_Q5_1, "q5_1", SOL_QK4_0, sizeof(sol_block_q5_1)},
    {SOL_DT_Q8_0, "q8_0", SOL_QK8_0, sizeof(sol_block_q8_0)},
    {SOL_DT_Q4_K, "q4_k", SOL_QK_K, sizeof(sol_block_q4_k)},
    {SOL_DT_Q5_K, "q5_k", SOL_QK_K, sizeof(sol_block_q5_k)},
    {SOL_DT_Q6_K, "q6_k", SOL_QK_K, sizeof(sol_block_q6_k)},
    {SOL_DT_BF16, "bf16", 1, 2},
    {SOL_DT_MXFP4, "mxfp4", SOL_QK4_0, sizeof(sol_block_mxfp4)},
};

const int8_t sol_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static const dtype_info *info_of(uint32_t id) {
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (k_types[i].id == id) return &k_types[i];
    return NULL;
}

int sol_dtype_known(uint32_t id) {
    return info_of(id) != NULL;
}

const char *sol_dtype_name(sol_dtype t) {
    const dtype_info *d = info_of((uint32_t)t);
    return d ? d->name : "unknown";
}

int sol_dtype_parse(const char *name) {
    if (!name) return -1;
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (strcasecmp(name, k_types[i].name) == 0) return (int)k_types[i].id;
    return -1;
}

size_t sol_dtype_block_elems(sol_dtype t) {
    const dtype_info *d = info_of((uint32_t)t);
    return d ? d->block_elems : 0;
}

size_t sol_dtype_block_bytes(sol_dtype t) {
    const dtype_info *d = info_of((uint32_t)t);
    return d ? d->block_bytes : 0;
}

size_t sol_dtype_row_bytes(sol_dtype t, int64_t n) {
    const dtype_info *d = info_of((uint32_t)t);
    if (!d || n < 0 || n % (int64_t)d->block_elems != 0) return 0;
    return (size_t)(n / (int64_t)d->block_elems) * d->block_bytes;
}

static void dequant_mxfp4(const sol_block_mxfp4 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += SOL_QK4_0) {
        const float d = sol_e8m0_half(b[i].e);
        for (int j = 0; j < SOL_QK4_0 / 2; j++) {
            y[j] = sol_mxfp4_values[b[i].qs[j] & 0xF] * d;
            y[j + SOL_QK4_0 / 2] = sol_mxfp4_values[b[i].qs[j] >> 4] * d;
        }
    }
}

static void dequant_q4_0(const sol_block_q4_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += SOL_QK4_0) {
        float d = sol_f16_to_f32(b[i].d);
        for (int j = 0; j < SOL_QK4_0 / 2; j++) {
            y[j] = (float)((b[i].qs[j] & 0xf) - 8) * d;
            y[j + SOL_QK4_0 / 2] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q8_0(const sol_block_q8_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += SOL_QK8_0) {
        float d = sol_f16_to_f32(b[i].d);
        for (int j = 0; j < SOL_QK8_0; j++)
            y[j] = (float)b[i].qs[j] * d;
    }
}

int sol_q5_quant(const uint8_t *qs, const uint8_t *qh, int j) {
    uint32_t h =
        (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    int lo = j < 16 ? qs[j] & 0xf : qs[j - 16] >> 4;
    return lo | (int)((h >> j) & 1) << 4;
}

static void dequant_q5_0(const sol_block_q5_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += SOL_QK4_0) {
        float d = sol_f16_to_f32(b[i].d);
        for (int j = 0; j < SOL_QK4_0; j++)
            y[j] = (float)(sol_q5_quant(b[i].qs, b[i].qh, j) - 16) * d;
    }
}

static void dequant_q5_1(const sol_block_q5_1 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += SOL_QK4_0) {
        float d = sol_f16_to_f32(b[i].d), m = sol_f16_to_f32(b[i].m);
        for (int j = 0; j < SOL_QK4_0; j++)
            y[j] = (float)sol_q5_quant(b[i].qs, b[i].qh, j) * d + m;
    }
}

/* Q4_K packs 8 (scale, min) pairs of 6 bits into 12 bytes: the first four pairs sit in the low
 * 6 bits of bytes 0-3 / 4-7; the last four use bytes 8-11 plus the spare top bits of 0-7. */
void sol_q4k_scale_min(int j, const uint8_t *s, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

static void dequant_q4_k(const sol_block_q4_k *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = sol_f16_to_f32(b[i].d), dmin = sol_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int j = 0; j < SOL_QK_K; j += 64, q += 32) {
            uint8_t sc, m;
            sol_q4k_scale_min(j / 32, b[i].scales, &sc, &m);
            float d1 = d * sc, m1 = dmin * m;
            sol_q4k_scale_min(j / 32 + 1, b[i].scales, &sc, &m);
            float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)(q[l] & 0xf) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* Q5_K: Q4_K's scales and nibbles plus one high bit per element from qh. */
static void dequant_q5_k(const sol_block_q5_k *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = sol_f16_to_f32(b[i].d), dmin = sol_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs, *qh = b[i].qh;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc, m;
            sol_q4k_scale_min(2 * c, b[i].scales, &sc, &m);
            float d1 = d * sc, m1 = dmin * m;
            sol_q4k_scale_min(2 * c + 1, b[i].scales, &sc, &m);
            float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((q[l] & 0xf) | ((qh[l] >> (2 * c)) & 1) << 4) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((q[l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4) - m2;
        }
    }
}

/* Q6_K: each half-block of 128 values takes 64 low-nibble bytes, 32 bytes of 2-bit highs and
 * 8 signed scales (one per 16 values). */
static void dequant_q6_k(const sol_block_q6_k *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = sol_f16_to_f32(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int n = 0; n < SOL_QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * (float)q1;
                y[l + 32] = d * sc[is + 2] * (float)q2;
                y[l + 64] = d * sc[is + 4] * (float)q3;
                y[l + 96] = d * sc[is + 6] * (float)q4;
            }
        }
    }
}

void sol_dequantize_row(sol_dtype t, const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    switch (t) {
    case SOL_DT_F32:
        memmove(dst, src, (size_t)n * sizeof(float));
        return;
    case SOL_DT_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = sol_f16_to_f32(h[i]);
        return;
    case SOL_DT_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = sol_bf16_to_f32(h[i]);
        return;
    case SOL_DT_Q4_0:
        dequant_q4_0(src, dst, n / SOL_QK4_0);
        return;
    case SOL_DT_MXFP4:
        dequant_mxfp4(src, dst, n / SOL_QK4_0);
        return;
    case SOL_DT_Q8_0:
        dequant_q8_0(src, dst, n / SOL_QK8_0);
        return;
    case SOL_DT_Q5_0:
        dequant_q5_0(src, dst, n / SOL_QK4_0);
        return;
    case SOL_DT_Q5_1:
        dequant_q5_1(src, dst, n / SOL_QK4_0);
        return;
    case SOL_DT_Q4_K:
        dequant_q4_k(src, dst, n / SOL_QK_K);
        return;
    case SOL_DT_Q5_K:
        dequant_q5_k(src, dst, n / SOL_QK_K);
        return;
    case SOL_DT_Q6_K:
        dequant_q6_k(src, dst, n / SOL_QK_K);
        return;
    }
}

static void quant_q8_0(const float *x, sol_block_q8_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SOL_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < SOL_QK8_0; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sol_f32_to_f16(d);
        for (int j = 0; j < SOL_QK8_0; j++)
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static void quant_q4_0(const float *x, sol_block_q4_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SOL_QK4_0) {
        float amax = 0.0f, max = 0.0f; /* max keeps the sign of the largest magnitude */
        for (int j = 0; j < SOL_QK4_0; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sol_f32_to_f16(d);
        for (int j = 0; j < SOL_QK4_0 / 2; j++) {
            int8_t a = (int8_t)(x[j] * id + 8.5f), b = (int8_t)(x[j + SOL_QK4_0 / 2] * id + 8.5f);
            uint8_t lo = (uint8_t)(a < 15 ? a : 15), hi = (uint8_t)(b < 15 ? b : 15);
            y[i].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* The value index nearest x / d (the first of equals), as ggml's reference quantizer picks. */
static uint8_t mxfp4_index(float x, float d) {
    int best = 0;
    float best_err = fabsf(sol_mxfp4_values[0] * d - x);
    for (int i = 1; i < 16; i++) {
        float err = fabsf(sol_mxfp4_values[i] * d - x);
        if (err < best_err) best = i, best_err = err;
    }
    return (uint8_t)best;
}

/* ggml's quantize_row_mxfp4_ref: the scale's exponent floor(log2(amax)) - 2 (so the largest
 * value, 6 = 12 / 2, lands near amax), each element its nearest value. */
static void quant_mxfp4(const float *x, sol_block_mxfp4 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SOL_QK4_0) {
        float amax = 0.0f;
        for (int j = 0; j < SOL_QK4_0; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        /* clamped to E8M0's range: ggml converts out-of-range floats unchecked (undefined for
         * a block below 2^-125, which no real weight is); within it the same bytes */
        float ef = amax > 0.0f ? floorf(log2f(amax)) - 2 + 127 : 0.0f;
        const uint8_t e = (uint8_t)(ef < 0.0f ? 0.0f : ef > 254.0f ? 254.0f : ef);
        const float d = sol_e8m0_half(e);
        y[i].e = e;
        for (int j = 0; j < SOL_QK4_0 / 2; j++)
            y[i].qs[j] =
                (uint8_t)(mxfp4_index(x[j], d) | mxfp4_index(x[j + SOL_QK4_0 / 2], d) << 4);
    }
}

int sol_quantize_row(sol_dtype t, const float *src, void *dst, int64_t n) {
    if (n < 0 || (n != 0 && sol_dtype_row_bytes(t, n) == 0)) return -EINVAL;
    uint16_t *h = dst;
    switch (t) {
    case SOL_DT_F32:
        memmove(dst, src, (size_t)n * sizeof(float));
        return 0;
    case SOL_DT_F16:
        for (int64_t i = 0; i < n; i++)
            h[i] = sol_f32_to_f16(src[i]);
        return 0;
    case SOL_DT_BF16:
        for (int64_t i = 0; i < n; i++)
            h[i] = sol_f32_to_bf16(src[i]);
        return 0;
    case SOL_DT_Q8_0:
        quant_q8_0(src, dst, n / SOL_QK8_0);
        return 0;
    case SOL_DT_Q4_0:
        quant_q4_0(src, dst, n / SOL_QK4_0);
        return 0;
    case SOL_DT_MXFP4:
        quant_mxfp4(src, dst, n / SOL_QK4_0);
        return 0;
    case SOL_DT_Q4_K:
    case SOL_DT_Q5_K:
    case SOL_DT_Q6_K:
        return sol_kquant_row(t, src, dst, n) ? -EINVAL : 0;
    default:
        return -EINVAL;
    }
}
