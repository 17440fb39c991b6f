/* half_bits: the kernels' F16/BF16 <-> F32 conversions, which are common/half.h's: the same bits
 * on the GPU, in the emulation and in the CPU backend. */
#ifndef SOL_CUDA_HALF_BITS_CUH
#define SOL_CUDA_HALF_BITS_CUH

#include "sol_cuda_kernel.h"

#include "half.h"

/* Two floats rounded to F16 and packed, lo in the low 16 bits (the MMA fragments' order). On
 * the GPU one cvt.rn.f16x2.f32 (sm_80+), which rounds to nearest even as sol_f32_to_f16 does
 * (IEEE; overflow to inf, subnormals kept): the same bits for every finite float and infinity.
 * sol_f32_to_f16's bit manipulation took ~25 instructions and two branches an element on the
 * GPU, which made the conversion the larger part of the tensor-core GEMM's issue slots. NaN
 * inputs (no finite weight or activation gives one) may differ in their payload. */
#ifdef __CUDACC__
static __device__ __forceinline__ uint32_t sol_f16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); /* a: upper, b: lower */
    return r;
#else
    return (uint32_t)sol_f32_to_f16(lo) | (uint32_t)sol_f32_to_f16(hi) << 16;
#endif
}
#else
static inline uint32_t sol_f16x2(float lo, float hi) {
    return (uint32_t)sol_f32_to_f16(lo) | (uint32_t)sol_f32_to_f16(hi) << 16;
}
#endif

#endif
