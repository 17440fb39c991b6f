/* emu_kernels: kernels of tests/unit/backend/test_cuda_emu.cc, compiled by nvcc too (the same
 * source on both sides is the point), including the deliberately wrong ones whose failure the
 * test requires. */
#ifndef SOL_TEST_EMU_KERNELS_CUH
#define SOL_TEST_EMU_KERNELS_CUH

#include "reduce.cuh"

/* One block per row: out = x / sqrt(mean(x^2) + eps) * w (the rmsnorm op's math). */
__global__ void emu_rmsnorm(const float *x, const float *w, float *out, int dim, float eps) {
    sol_grid_dependency();
    SOL_SHARED(float, scratch, [32]);
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
    sol_grid_dependency();
    SOL_SHARED(float, buf, [256]);
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
    sol_grid_dependency();
    float v = x[threadIdx.x];
    for (int off = first_offset; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    if ((threadIdx.x & 31) == 0) out[threadIdx.x >> 5] = v;
}

/* A full-mask shuffle only half of each warp executes while the other half waits at the block
 * barrier: undefined on a GPU, a reported deadlock here. */
__global__ void emu_divergent_shuffle(float *out) {
    sol_grid_dependency();
    float v = (float)threadIdx.x;
    if ((threadIdx.x & 31) < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
    __syncthreads();
    out[threadIdx.x] = v;
}

/* Mean and variance of each row (LayerNorm's statistics): two block sums through one scratch,
 * which reduce.cuh promises works (its last barrier); under a schedule that lets one warp run
 * ahead, a missing barrier shows as wrong variances. */
__global__ void emu_mean_var(const float *x, float *out, int dim) {
    sol_grid_dependency();
    SOL_SHARED(float, scratch, [32]);
    const float *xr = x + (size_t)blockIdx.x * dim;
    float s = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        s += xr[i];
    float mean = sol_block_sum(s, scratch) / (float)dim, v = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        v += (xr[i] - mean) * (xr[i] - mean);
    float var = sol_block_sum(v, scratch) / (float)dim;
    /* every thread's copy of the results, so a thread that read a stale total shows */
    out[((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 2] = mean;
    out[((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 2 + 1] = var;
}

/* sol_block_sum without its last barrier, and with off_by_one: the second stage reads one slot
 * past the warps' sums (a slot nobody wrote). The bugs the emulation must show. */
__device__ float emu_block_sum_bug(float v, float *scratch, int keep_last_barrier, int off_by_one) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = sol_warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float t = lane < n_warps + off_by_one ? scratch[lane] : 0.0f;
    if (warp == 0) t = sol_warp_sum(t);
    if (threadIdx.x == 0) scratch[0] = t;
    __syncthreads();
    t = scratch[0];
    if (keep_last_barrier) __syncthreads();
    return t;
}

/* Two sums of x's row per block (the second of 2x) through emu_block_sum_bug: out gets each
 * thread's pair. */
__global__ void emu_sum_twice(const float *x, float *out, int dim, int keep_last_barrier,
                              int off_by_one) {
    sol_grid_dependency();
    SOL_SHARED(float, scratch, [32]);
    const float *xr = x + (size_t)blockIdx.x * dim;
    float s = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        s += xr[i];
    float a = emu_block_sum_bug(s, scratch, keep_last_barrier, off_by_one);
    float b = emu_block_sum_bug(2.0f * s, scratch, keep_last_barrier, off_by_one);
    out[((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 2] = a;
    out[((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 2 + 1] = b;
}

/* Reads dynamic shared memory before anyone wrote it. */
__global__ void emu_read_dyn_smem(float *out) {
    sol_grid_dependency();
    SOL_DYN_SMEM(float, dyn);
    out[blockIdx.x * blockDim.x + threadIdx.x] = dyn[threadIdx.x];
    __syncthreads();
    dyn[threadIdx.x] = 1.0f; /* the next block must not see this */
}

/* Warp intrinsics used against their masks. how: 0 a half-warp shuffle by exactly the lanes of
 * its mask (legal); 1 every lane shuffles with a half mask (lanes 16..31 are not in it); 2 the
 * upper half exits, then a full-mask shuffle; 3 __syncwarp with a mask that leaves the caller
 * out; 4 a half-mask shuffle reading a lane outside the mask; 5 a full-mask shuffle by every
 * thread (a block whose last warp is partial has lanes the mask names but the block lacks). */
__global__ void emu_masks(float *out, int how) {
    sol_grid_dependency();
    int lane = threadIdx.x & 31;
    float v = (float)threadIdx.x;
    if (how == 0 && lane < 16) v = __shfl_xor_sync(0x0000ffffu, v, 1);
    if (how == 1) v = __shfl_xor_sync(0x0000ffffu, v, 1);
    if (how == 2) {
        if (lane >= 16) return;
        v = __shfl_xor_sync(0xffffffffu, v, 1);
    }
    if (how == 3) __syncwarp(1u << ((lane + 1) & 31));
    if (how == 4 && lane < 16) v = __shfl_xor_sync(0x0000ffffu, v, 16);
    if (how == 5) v = __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}

/* As much static shared memory as it is given floats for (up to 12289: 48 KiB + 4 bytes). */
template <int N> __global__ void emu_big_shared(float *out) {
    sol_grid_dependency();
    SOL_SHARED(float, big, [N]);
    big[threadIdx.x] = 1.0f;
    out[threadIdx.x] = big[threadIdx.x];
}

/* Does nothing: for launch-limit checks. */
__global__ void emu_nop(void) {
    sol_grid_dependency();
}

/* PDL (sol_cuda_kernel.h): the wait after an early return (how 0), after a barrier (1), twice (2),
 * or as it must be (3). */
__global__ void emu_pdl(float *out, int how) {
    if (how == 0 && threadIdx.x >= 16) return;
    if (how == 1) __syncthreads();
    sol_grid_dependency();
    if (how == 2) sol_grid_dependency();
    out[threadIdx.x] = 1.0f;
}

#endif
