/* ggml_float: llama.cpp's float steps that Sol reproduces where its llama.cpp-compatible results
 * need them - the vectorized expf and the order a 16-lane sum is reduced in - for the CPU backend's
 * reference mode and the MoE router. */
#ifndef SOL_GGML_FLOAT_H
#define SOL_GGML_FLOAT_H

#include <math.h>

/* ggml's vectorized expf (ggml_v_expf, AVX-512 build), one lane: the reference mode
 * SOL_CPU_ATTN=llamacpp uses it where llama.cpp does (softmax, SiLU), since it differs from
 * libm's expf in the last bit now and then. */
static inline float sol_ggml_expf(float x) {
    const float r = 0x1.8p23f;
    float z = fmaf(x, 0x1.715476p+0f, r), n = z - r;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    float u = b * b;
    float j = fmaf(
        fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
        u, fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n);
}

/* The order GCC's _mm512_reduce_add_ps sums 16 lanes in: halves, quarters, then pairs. */
static inline float sol_ggml_reduce16(const float v[16]) {
    float h[8], q[4];
    for (int i = 0; i < 8; i++)
        h[i] = v[i + 8] + v[i];
    for (int i = 0; i < 4; i++)
        q[i] = h[i + 4] + h[i];
    return (q[0] + q[2]) + (q[1] + q[3]);
}

#endif
