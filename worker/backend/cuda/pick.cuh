/* pick: the matrix of a launch's set a block computes, for the kernels that take up to three
 * matrices reading the same x in one launch (the GEMV sets, k_gemv.cu; the tile GEMM, k_mma.cu). */
#ifndef SOL_CUDA_PICK_CUH
#define SOL_CUDA_PICK_CUH

#include "sol_cuda_kernel.h"

/* Blocks [0, first1) along x compute s.m0, [first1, first2) s.m1, the rest s.m2; bx is the
 * block's index within its matrix. The choice depends on blockIdx only, so it is uniform over
 * the block, and it is made with compares, never by indexing the parameter (which would copy
 * the set to local memory). */
template <class S>
__device__ __forceinline__ auto sol_pick3(const S &s, unsigned &bx) -> decltype(s.m0) {
    unsigned b = blockIdx.x;
    if (b >= s.first2) {
        bx = b - s.first2;
        return s.m2;
    }
    if (b >= s.first1) {
        bx = b - s.first1;
        return s.m1;
    }
    bx = b;
    return s.m0;
}

#endif
