/* q8: the activations' 8-bit quantization, one warp per block, shared by the GEMV prologues
 * (k_gemv.cu) and the attention epilogue (k_attention.cu) so both write the same bits. */
#ifndef SOL_CUDA_Q8_CUH
#define SOL_CUDA_Q8_CUH

#include <stddef.h>
#include <stdint.h>

#include "half_bits.cuh"

/* Block blk's Q8_0 quantization by its warp (lane holds element v): the CPU backend's Q8_0
 * activations (cpu_matmul.c quantize_x, llama.cpp's x86 rounding: multiplier 127 / amax, halves
 * to even, the scale amax / 127 stored as F16) and the block's sum of quants. */
__device__ __forceinline__ void q8_0_block(float v, int blk, int lane, int8_t *xq, float *xd,
                                           int32_t *xs) {
    float amax = fabsf(v);
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float dd = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int q = (int)rintf(v * id), s = q;
    xq[(size_t)blk * 32 + lane] = (int8_t)q;
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) {
        xd[blk] = sol_f16_to_f32(sol_f32_to_f16(dd));
        xs[blk] = s;
    }
}

/* One warp per 256-element block: ggml's Q8_K (iscale = -127 / the first element of largest
 * magnitude, sign kept; quants rounded half to even, capped at 127; d = 1 / iscale; sums per 16).
 * Lane i holds elements 8i..8i+7 (xb). */
__device__ __forceinline__ void q8_k_block(const float (&xb)[8], int blk, int lane, int8_t *kq,
                                           float *kd, int16_t *ks) {
    float amax = 0.0f, mx = 0.0f;
    int at = 1 << 30;
    for (int j = 0; j < 8; j++)
        if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), mx = xb[j], at = lane * 8 + j;
    for (int o = 16; o > 0; o >>= 1) { /* the largest magnitude, the first one on ties */
        float a = __shfl_xor_sync(0xffffffffu, amax, o), m = __shfl_xor_sync(0xffffffffu, mx, o);
        int i = __shfl_xor_sync(0xffffffffu, at, o);
        if (a > amax || (a == amax && i < at)) amax = a, mx = m, at = i;
    }
    float iscale = amax != 0.0f ? -127.0f / mx : 0.0f;
    int sum = 0;
    for (int j = 0; j < 8; j++) {
        int v = (int)rintf(xb[j] * iscale);
        v = v > 127 ? 127 : v;
        kq[(size_t)blk * 256 + lane * 8 + j] = (int8_t)v;
        sum += v;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1); /* two lanes make a group of 16 */
    if ((lane & 1) == 0) ks[(size_t)blk * 16 + lane / 2] = (int16_t)sum;
    if (lane == 0) kd[blk] = amax != 0.0f ? 1.0f / iscale : 0.0f;
}

/* The scratch of n x K activations quantized in blocks of block_elems (32: Q8_0, 256: Q8_K):
 * the quants, then the scales, then the sums (sol_cuda_gemv_scratch_bytes sizes it). */
struct qx {
    int8_t *q;
    float *d;
    void *s;
    int n_blocks;
};

static size_t align16(size_t v) {
    return (v + 15) & ~(size_t)15;
}

static qx split_scratch(const void *scratch, int n, int K, int block_elems) {
    qx r;
    r.n_blocks = n * (K / block_elems);
    r.q = (int8_t *)scratch;
    r.d = (float *)(r.q + align16((size_t)n * K));
    r.s = (char *)r.d + align16((size_t)r.n_blocks * sizeof(float));
    return r;
}

#endif
