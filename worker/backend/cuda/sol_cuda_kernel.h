/* sol_cuda_kernel: what a Sol kernel source includes instead of the CUDA headers, so one .cu
 * file compiles with nvcc for the GPU and as host C++ against cuda_emu.h for tests.
 *
 * Portable spellings: SOL_LAUNCH(kernel, grid, block, smem, queue, args...) for
 * kernel<<<grid, block, smem, stream>>>(args...) (queue: the backend's sol_cuda_queue, which
 * carries the stream and the graph signature, graph_sig.h), SOL_SHARED(T, name, [dims]) for
 * `__shared__ T name[dims]` (the emulation poisons it before each block, so it has no bare
 * __shared__) and SOL_DYN_SMEM(T, name) for `extern __shared__ T name[]`. Everything else is
 * plain CUDA (SOL_UNROLL for `#pragma unroll`; __global__, __syncthreads, threadIdx, __shfl_*_sync,
 * atomicAdd, __fmul_rn).
 *
 * Programmatic dependent launch (PDL, sm_90). On a queue with `pdl` set, SOL_LAUNCH launches
 * with cudaLaunchAttributeProgrammaticStreamSerialization: the next kernel's blocks are
 * scheduled while this one drains, so the per-node gap of a graph (about 1 us) mostly hides
 * behind the previous kernel's tail. That is only correct because every kernel's first
 * statement is sol_grid_dependency(): griddepcontrol.wait (return once the previous grid has
 * completed and its memory is visible) and then griddepcontrol.launch_dependents (let the next
 * grid be scheduled). It must come before any global load or store and on every path, a thread
 * that returns early included: a grid none of whose threads waited could complete before its
 * predecessor, and the next kernel would then wait on the wrong grid. The emulation aborts a
 * launch in which some thread never called it; tests/gpu/sass_check.py fails a kernel whose
 * SASS touches global memory before the wait. Without PDL (sm_80, or SOL_CUDA_PDL=0) both
 * instructions are no-ops. */
#ifndef SOL_CUDA_KERNEL_H
#define SOL_CUDA_KERNEL_H

/* SOL_UNROLL before a loop of constant trip count: unrolled, so arrays it indexes stay in
 * registers on the GPU (an array indexed at run time lives in local memory); the host compilers
 * of the emulation spell the pragma their own way. */
/* SOL_NO_UNROLL: kept a loop, where unrolling would hold several iterations' fragments live at
 * once and spill (k_mmq.cu's sub-block loop on sm_80). */
#if defined(__CUDACC__) || defined(__clang__)
#define SOL_UNROLL _Pragma("unroll")
#define SOL_NO_UNROLL _Pragma("unroll 1")
#else
#define SOL_UNROLL _Pragma("GCC unroll 32")
#define SOL_NO_UNROLL _Pragma("GCC unroll 1")
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
        sol_cuda_queue *sol_cq = (sol_cuda_queue *)sol_q;                                          \
        cudaLaunchAttribute sol_attr[1];                                                           \
        cudaLaunchConfig_t sol_cfg = {};                                                           \
        sol_cfg.gridDim = dim3(grid), sol_cfg.blockDim = dim3(block);                              \
        sol_cfg.dynamicSmemBytes = (size_t)(smem);                                                 \
        sol_cfg.stream = sol_cq ? (cudaStream_t)sol_cq->stream : 0;                                \
        if (sol_cq && sol_cq->pdl) {                                                               \
            sol_attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;                   \
            sol_attr[0].val.programmaticStreamSerializationAllowed = 1;                            \
            sol_cfg.attrs = sol_attr, sol_cfg.numAttrs = 1;                                        \
        }                                                                                          \
        (void)cudaLaunchKernelEx(&sol_cfg, kernel, ##__VA_ARGS__); /* cudaGetLastError has it */   \
    } while (0)
/* The kernel's first statement (see the top of this file). */
static __device__ __forceinline__ void sol_grid_dependency() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#define SOL_SHARED(T, name, ...) __shared__ T name __VA_ARGS__
#define SOL_DYN_SMEM(T, name) extern __shared__ T name[]
#else
#include "cuda_emu.h"
#endif

#endif
