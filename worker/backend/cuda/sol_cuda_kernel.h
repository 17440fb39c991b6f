/* sol_cuda_kernel: what a Sol kernel source includes instead of the CUDA headers, so one .cu
 * file compiles with nvcc for the GPU and as host C++ against cuda_emu.h for tests.
 *
 * Portable spellings: SOL_LAUNCH(kernel, grid, block, smem, queue, args...) for
 * kernel<<<grid, block, smem, stream>>>(args...) (queue: the backend's sol_cuda_queue, which
 * carries the stream and the graph signature, graph_sig.h), SOL_SHARED(T, name, [dims]) for
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

#include "graph_sig.h"
/* queue: a sol_cuda_queue * (graph_sig.h) or NULL. A step that replays a cached graph only
 * writes its launches down (sol_sig_launch) and runs none. */
#define SOL_LAUNCH(kernel, grid, block, smem, queue, ...)                                          \
    do {                                                                                           \
        void *sol_q = (void *)(queue);                                                             \
        if (sol_sig_launch(sol_q, &kernel, dim3(grid), dim3(block), (size_t)(smem),                \
                           ##__VA_ARGS__))                                                         \
            break;                                                                                 \
        kernel<<<(grid), (block), (smem),                                                          \
                 sol_q ? (cudaStream_t)((sol_cuda_queue *)sol_q)->stream : 0>>>(__VA_ARGS__);      \
    } while (0)
#define SOL_SHARED(T, name, ...) __shared__ T name __VA_ARGS__
#define SOL_DYN_SMEM(T, name) extern __shared__ T name[]
#else
#include "cuda_emu.h"
#endif

#endif
