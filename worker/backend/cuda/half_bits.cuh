/* half_bits: the kernels' F16/BF16 <-> F32 conversions, which are common/half.h's: the same bits
 * on the GPU, in the emulation and in the CPU backend. */
#ifndef SOL_CUDA_HALF_BITS_CUH
#define SOL_CUDA_HALF_BITS_CUH

#include "sol_cuda_kernel.h"

#include "half.h"

#endif
