/* k_gemv: matmul for decode and verify sizes (n <= 16 tokens), a warp per output row. Float
 * weights: each lane takes every 32nd element, fused multiply-adds, a warp sum per token.
 * Q8_0/Q4_0: x is first quantized to Q8_0 exactly as the CPU backend does; each lane takes every
 * 32nd block and its integer dot, scaled by the two block scales. */
#include <errno.h>

#include "dequant.cuh"
#include "reduce.cuh"

enum { GEMV_WARPS = 4, QUANT_WARPS = 8 };

/* One warp per 32-element block of x (n x K, K a multiple of 32): ggml's Q8_0 rounding (scale
 * amax / 127, halves away from zero, the scale stored as F16) and the block's sum of quants. */
__global__ void k_quantize_q8_0(const float *x, int n_blocks, int8_t *xq, float *xd, int32_t *xs) {
    int blk = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (blk >= n_blocks) return; /* whole warps: blk depends on the warp only */
    float v = x[(size_t)blk * 32 + lane], amax = fabsf(v);
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float dd = amax / 127.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
    int q = (int)roundf(v * id), s = q;
    xq[(size_t)blk * 32 + lane] = (int8_t)q;
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) {
        xd[blk] = sol_f16_to_f32(sol_f32_to_f16(dd));
        xs[blk] = s;
    }
}

__global__ void k_gemv_float(int type, const unsigned char *w, size_t row_bytes, int rows, int K,
                             const float *x, float *y, int n) {
    int row = (int)(blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)), lane = threadIdx.x & 31;
    if (row >= rows) return;
    const unsigned char *wr = w + (size_t)row * row_bytes;
    float acc[SOL_CUDA_GEMV_MAX_TOKENS];
    for (int t = 0; t < n; t++)
        acc[t] = 0.0f;
    for (int k = lane; k < K; k += 32) {
        float wv = sol_dequant_elem(type, wr, k);
        for (int t = 0; t < n; t++)
            acc[t] = fmaf(wv, x[(size_t)t * K + k], acc[t]);
    }
    for (int t = 0; t < n; t++) {
        float s = sol_warp_sum(acc[t]);
        if (lane == 0) y[(size_t)t * rows + row] = s;
    }
}

/* Integer dot of one Q8_0 or Q4_0 weight block with a token's Q8_0 block (Q4_0's offset 8 is
 * removed through the block's sum of quants). */
__device__ __forceinline__ int32_t q_block_dot(int type, const unsigned char *b, const int8_t *xq,
                                               int32_t xs) {
    int32_t dot = 0;
    if (type == SOL_CUDA_Q8_0) {
        for (int j = 0; j < 32; j++)
            dot += (int8_t)b[2 + j] * xq[j];
        return dot;
    }
    for (int j = 0; j < 16; j++)
        dot += (b[2 + j] & 0xF) * xq[j] + (b[2 + j] >> 4) * xq[j + 16];
    return dot - 8 * xs;
}

__global__ void k_gemv_q(int type, const unsigned char *w, size_t row_bytes, int rows, int K,
                         const int8_t *xq, const float *xd, const int32_t *xs, float *y, int n) {
    int row = (int)(blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)), lane = threadIdx.x & 31;
    if (row >= rows) return;
    int nb = K / 32;
    size_t bb = type == SOL_CUDA_Q8_0 ? 34 : 18;
    const unsigned char *wr = w + (size_t)row * row_bytes;
    float acc[SOL_CUDA_GEMV_MAX_TOKENS];
    for (int t = 0; t < n; t++)
        acc[t] = 0.0f;
    for (int b = lane; b < nb; b += 32) {
        const unsigned char *blk = wr + (size_t)b * bb;
        float dw = sol_f16_to_f32(sol_load_u16(blk));
        for (int t = 0; t < n; t++) {
            size_t tb = (size_t)t * nb + b;
            acc[t] += (float)q_block_dot(type, blk, xq + tb * 32, xs[tb]) * (dw * xd[tb]);
        }
    }
    for (int t = 0; t < n; t++) {
        float s = sol_warp_sum(acc[t]);
        if (lane == 0) y[(size_t)t * rows + row] = s;
    }
}

extern "C" size_t sol_cuda_gemv_scratch_bytes(int n, int K) {
    size_t nb = (size_t)n * (size_t)(K / 32);
    return (size_t)n * (size_t)K + nb * sizeof(float) + nb * sizeof(int32_t);
}

extern "C" int sol_cuda_gemv(int type, const void *w, size_t row_bytes, int rows, int K,
                             const float *x, float *y, int n, void *scratch, void *stream) {
    if (!sol_cuda_type_known(type) || n < 1 || n > SOL_CUDA_GEMV_MAX_TOKENS) return -ENOTSUP;
    if (K % 32 || rows < 1) return -EINVAL;
    cudaStream_t st = (cudaStream_t)stream;
    dim3 grid((unsigned)((rows + GEMV_WARPS - 1) / GEMV_WARPS)), block(32 * GEMV_WARPS);
    const unsigned char *wb = (const unsigned char *)w;
    if (type != SOL_CUDA_Q8_0 && type != SOL_CUDA_Q4_0) {
        SOL_LAUNCH(k_gemv_float, grid, block, 0, st, type, wb, row_bytes, rows, K, x, y, n);
        return 0;
    }
    int n_blocks = n * (K / 32);
    int8_t *xq = (int8_t *)scratch;
    float *xd = (float *)(xq + (size_t)n * K);
    int32_t *xs = (int32_t *)(xd + n_blocks);
    SOL_LAUNCH(k_quantize_q8_0, dim3((unsigned)((n_blocks + QUANT_WARPS - 1) / QUANT_WARPS)),
               dim3(32 * QUANT_WARPS), 0, st, x, n_blocks, xq, xd, xs);
    SOL_LAUNCH(k_gemv_q, grid, block, 0, st, type, wb, row_bytes, rows, K, xq, xd, xs, y, n);
    return 0;
}
