/* emu_kernels: kernels of tests/unit/backend/test_cuda_emu.cc, compiled by nvcc too (the same
 * source on both sides is the point), including the deliberately wrong ones whose failure the
 * test requires. */
#ifndef SOL_TEST_EMU_KERNELS_CUH
#define SOL_TEST_EMU_KERNELS_CUH

#include "reduce.cuh"

/* One block per row: out = x / sqrt(mean(x^2) + eps) * w (the rmsnorm op's math). */
__global__ void emu_rmsnorm(const float *x, const float *w, float *out, int dim, float eps) {
    __shared__ float scratch[32];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        ss += xr[i] * xr[i];
    float scale = rsqrtf(sol_block_sum(ss, scratch) / dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        out[(size_t)blockIdx.x * dim + i] = xr[i] * scale * w[i];
}

/* Shared-memory tree sum of 256 values per block; skip_sync drops the barrier between levels
 * (a real bug: a thread reads its partner's slot before the partner wrote it). */
__global__ void emu_tree_sum(const float *x, float *out, int skip_sync) {
    __shared__ float buf[256];
    int t = threadIdx.x;
    buf[t] = x[blockIdx.x * 256 + t];
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (t < s) buf[t] += buf[t + s];
        if (!skip_sync) __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = buf[0];
}

/* Warp sums with the butterfly's first offset as a parameter: 16 is right, 8 a bug. */
__global__ void emu_warp_sum(const float *x, float *out, int first_offset) {
    float v = x[threadIdx.x];
    for (int off = first_offset; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    if ((threadIdx.x & 31) == 0) out[threadIdx.x >> 5] = v;
}

/* A full-mask shuffle only half of each warp executes while the other half waits at the block
 * barrier: undefined on a GPU, a reported deadlock here. */
__global__ void emu_divergent_shuffle(float *out) {
    float v = (float)threadIdx.x;
    if ((threadIdx.x & 31) < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
    __syncthreads();
    out[threadIdx.x] = v;
}

#endif
