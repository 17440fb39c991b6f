/* reduce: the warp and block sums the CUDA kernels share (norms, softmax, GEMV outputs), written
 * once for nvcc and the host emulation. Sums are in a fixed tree order, so a result never
 * depends on timing. */
#ifndef SOL_CUDA_REDUCE_CUH
#define SOL_CUDA_REDUCE_CUH

#include "sol_cuda_kernel.h"

/* Sum over the 32 lanes of a warp (butterfly: every lane gets the total). */
__device__ __forceinline__ float sol_warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* Sum over aligned groups of span lanes (a power of two <= 32; every lane gets its group's
 * total): the butterfly's steps below span, the others skipped, so a group's sum has the bits
 * sol_warp_sum gives when the warp's other lanes hold zeros. */
__device__ __forceinline__ float sol_span_sum(float v, int span) {
    for (int off = 16; off > 0; off >>= 1) {
        float o = __shfl_xor_sync(0xffffffffu, v, off);
        if (off < span) v += o;
    }
    return v;
}

/* True on every lane when it is true on one (a butterfly of shuffles: no block barrier). */
__device__ __forceinline__ bool sol_warp_any(bool v) {
    int x = v;
    for (int o = 16; o > 0; o >>= 1)
        x |= __shfl_xor_sync(0xffffffffu, x, o);
    return x != 0;
}

/* A completion counter without a block barrier: every lane of the warp fences its writes and
 * counts itself at cnt; the lane that brings it to `need` makes its warp the last writer of all,
 * which then owns what they wrote: true on every lane of that warp (after the acquire fence),
 * and the counter is set back to 0 for the next launch once every lane of it has read the count
 * (the shuffle meets them all). The attention's split merge, its Q8_K blocks and the GEMV's
 * gated-product blocks count this way. */
__device__ __forceinline__ bool sol_last_of(int *cnt, int need, int lane) {
    __threadfence();
    bool last = atomicAdd(cnt, 1) == need - 1;
    if (!sol_warp_any(last)) return false;
    int seen = atomicAdd(cnt, 0);
    __threadfence(); /* the acquire side: the others' writes are visible */
    if (__shfl_sync(0xffffffffu, seen, 0) == need && lane == 0) atomicExch(cnt, 0);
    return true;
}

/* Sum over a block of R x blockDim.x threads as such a block sums it, each thread holding the
 * values of R of them (v[r]: thread threadIdx.x + r blockDim.x; R x blockDim.x a multiple of 32,
 * at most 1024): warp sums, then the first warp sums those, so a block of 128 threads gives the
 * bits of a 256-thread block (k_gemv.cu's norm tail against k_rmsnorm_quantize). Every thread
 * gets the total. `scratch` holds 32 floats of shared memory; it may be reused after the call
 * returns (the last barrier: no Sol kernel sums twice today, so test_cuda_emu's two-sum kernel
 * is what needs it, under the emulation's schedule that lets one warp run ahead into its next
 * sum). */
template <int R>
__device__ __forceinline__ float sol_block_sum_as(const float (&v)[R], float *scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    SOL_UNROLL
    for (int r = 0; r < R; r++) {
        float s = sol_warp_sum(v[r]);
        if (lane == 0) scratch[r * n_warps + warp] = s;
    }
    __syncthreads();
    float t = lane < R * n_warps ? scratch[lane] : 0.0f;
    if (warp == 0) t = sol_warp_sum(t);
    if (threadIdx.x == 0) scratch[0] = t;
    __syncthreads();
    t = scratch[0];
    __syncthreads(); /* scratch is free again only when every thread has read the total */
    return t;
}

/* Sum over a block of blockDim.x threads (sol_block_sum_as with one value a thread). */
__device__ __forceinline__ float sol_block_sum(float v, float *scratch) {
    float one[1] = {v};
    return sol_block_sum_as<1>(one, scratch);
}

#endif
