/* ggml_float: llama.cpp's float steps that Sol reproduces where its llama.cpp-compatible results
 * need them - the vectorized expf and the orders a register's lanes are summed in - for the CPU
 * backend's reference mode and the MoE router, in either of llama.cpp's two x86 register widths. */
#ifndef SOL_GGML_FLOAT_H
#define SOL_GGML_FLOAT_H

#include <math.h>
#include <stdint.h>

#include "half.h"

/* Which of llama.cpp's x86 CPU builds a float order follows, by its register width in floats:
 * its loader takes the best build the host runs - the AVX-512 ones (skylakex, icelake, zen4, ...)
 * sum 16 lanes, the AVX2 ones (haswell, alderlake) 8, and their vectorized expfs differ too
 * (docs/backend.md, "Which llama.cpp build: the register width"). */
enum { SOL_GGML_AVX2 = 8, SOL_GGML_AVX512 = 16 };

/* ggml_v_expf, one lane: 2^n times a polynomial in the reduced argument b. The AVX-512 build
 * adds the 1 inside the polynomial and scales by n (vscalefps); the AVX2 build keeps j without
 * it and forms k + k * j with k = 2^n built in the exponent bits, with a second path past
 * |n| > 126. They differ in the last bit now and then, as both do from libm's expf. */
static inline float sol_ggml_expf(float x, int lanes) {
    const float r = 0x1.8p23f;
    float z = fmaf(x, 0x1.715476p+0f, r), n = z - r;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    float u = b * b;
    float p =
        fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f));
    if (lanes == SOL_GGML_AVX512) {
        if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
        return ldexpf(fmaf(p, u, fmaf(0x1.ffffecp-1f, b, 1.0f)), (int)n);
    }
    float j = fmaf(p, u, 0x1.ffffecp-1f * b);
    uint32_t e = sol_f32_bits(z) << 23;
    float k = sol_bits_f32(e + 0x3f800000u);
    if (!(fabsf(n) > 126.0f)) return fmaf(k, j, k);
    uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    float s1 = sol_bits_f32(g + 0x7f000000u), s2 = sol_bits_f32(e - g);
    if (fabsf(n) > 192.0f) return s1 * s1;
    return fmaf(s2, j, s2) * s1;
}

/* One register summed as llama.cpp sums it outside its vec_dot reductions (soft_max, tinyBLAS,
 * hsum_float_8): 16 lanes in GCC's _mm512_reduce_add_ps order (halves, quarters, then pairs);
 * 8 lanes as hsum(__m256): the halves, then (0 + 2) + (1 + 3). */
static inline float sol_ggml_hsum(const float *v, int lanes) {
    float h[8], q[4];
    if (lanes == SOL_GGML_AVX512) {
        for (int i = 0; i < 8; i++)
            h[i] = v[i + 8] + v[i];
        v = h;
    }
    for (int i = 0; i < 4; i++)
        q[i] = v[i + 4] + v[i];
    return (q[0] + q[2]) + (q[1] + q[3]);
}

/* The last step of ggml's GGML_F32_VEC_REDUCE (vec_dot_f32, vec_dot_f16): 16 lanes as
 * _mm512_reduce_add_ps; 8 lanes by the halves, then two horizontal adds: (0 + 1) + (2 + 3). */
static inline float sol_ggml_vec_reduce(const float *v, int lanes) {
    if (lanes == SOL_GGML_AVX512) return sol_ggml_hsum(v, lanes);
    float t[4];
    for (int i = 0; i < 4; i++)
        t[i] = v[i] + v[i + 4];
    return (t[0] + t[1]) + (t[2] + t[3]);
}

/* ggml's float dot products on x86, in a build of `lanes` lanes: tinyBLAS's (tiny: one fused
 * accumulator of `lanes` lanes over the whole dot, reduced as its hsum) or ggml_vec_dot's (four
 * such accumulators over steps of 4 * lanes, added 0 + 2, 1 + 3, then the two, reduced as
 * GGML_F32_VEC_REDUCE), the elements past the last step then added one at a time: each product
 * rounded and added in double for vec_dot_f16 (tail_double), fused into the float sum for
 * vec_dot_f32. */
static inline float sol_ggml_dot(const float *x, const float *y, int64_t n, int lanes, int tiny,
                                 int tail_double) {
    float acc[4][16] = {{0}};
    if (tiny) {
        for (int64_t i = 0; i < n; i++)
            acc[0][i % lanes] = fmaf(x[i], y[i], acc[0][i % lanes]);
        return sol_ggml_hsum(acc[0], lanes);
    }
    int64_t np = n - n % (4 * lanes);
    for (int64_t i = 0; i < np; i += 4 * lanes)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < lanes; l++)
                acc[j][l] = fmaf(x[i + lanes * j + l], y[i + lanes * j + l], acc[j][l]);
    for (int l = 0; l < lanes; l++) {
        acc[0][l] += acc[2][l];
        acc[1][l] += acc[3][l];
        acc[0][l] += acc[1][l];
    }
    float sum = sol_ggml_vec_reduce(acc[0], lanes);
    if (tail_double) {
        double s = sum;
        for (int64_t i = np; i < n; i++)
            s += (double)(x[i] * y[i]);
        return (float)s;
    }
    for (int64_t i = np; i < n; i++)
        sum = fmaf(x[i], y[i], sum);
    return sum;
}

#endif
