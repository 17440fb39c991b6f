/* sol_cuda_kernel: what a Sol kernel source includes instead of the CUDA headers, so one .cu
 * file compiles with nvcc for the GPU and as host C++ against cuda_emu.h for tests.
 *
 * Portable spellings: SOL_LAUNCH(kernel, grid, block, smem, stream, args...) for
 * kernel<<<grid, block, smem, stream>>>(args...), SOL_SHARED(T, name, [dims]) for
 * `__shared__ T name[dims]` (the emulation poisons it before each block, so it has no bare
 * __shared__) and SOL_DYN_SMEM(T, name) for `extern __shared__ T name[]`. Everything else is
 * plain CUDA (SOL_UNROLL for `#pragma unroll`; __global__, __syncthreads, threadIdx, __shfl_*_sync,
 * atomicAdd, __fmul_rn). */
#ifndef SOL_CUDA_KERNEL_H
#define SOL_CUDA_KERNEL_H

/* SOL_UNROLL before a loop of constant trip count: unrolled, so arrays it indexes stay in
 * registers on the GPU (an array indexed at run time lives in local memory); the host compilers
 * of the emulation spell the pragma their own way. */
#if defined(__CUDACC__) || defined(__clang__)
#define SOL_UNROLL _Pragma("unroll")
#else
#define SOL_UNROLL _Pragma("GCC unroll 32")
#endif

#ifdef __CUDACC__
#include <cuda_runtime.h>
#define SOL_LAUNCH(kernel, grid, block, smem, stream, ...)                                         \
    kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define SOL_SHARED(T, name, ...) __shared__ T name __VA_ARGS__
#define SOL_DYN_SMEM(T, name) extern __shared__ T name[]
#else
#include "cuda_emu.h"
#endif

#endif
