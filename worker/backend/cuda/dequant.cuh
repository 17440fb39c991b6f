/* dequant: element k of a weight row in ggml's layout, as float (F32, F16, BF16, Q8_0, Q4_0),
 * for the kernels that read weights one element at a time (embed). */
#ifndef SOL_CUDA_DEQUANT_CUH
#define SOL_CUDA_DEQUANT_CUH

#include "cuda_kernels.h"
#include "half_bits.cuh"

__device__ __forceinline__ uint16_t sol_load_u16(const unsigned char *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

__device__ __forceinline__ float sol_dequant_elem(int type, const unsigned char *row, int k) {
    switch (type) {
    case SOL_CUDA_F32: {
        float f;
        memcpy(&f, row + 4 * (size_t)k, 4);
        return f;
    }
    case SOL_CUDA_F16:
        return sol_f16_to_f32(sol_load_u16(row + 2 * (size_t)k));
    case SOL_CUDA_BF16:
        return sol_bf16_to_f32(sol_load_u16(row + 2 * (size_t)k));
    case SOL_CUDA_Q8_0: {
        const unsigned char *b = row + (size_t)(k / 32) * 34;
        return sol_f16_to_f32(sol_load_u16(b)) * (float)(int8_t)b[2 + k % 32];
    }
    default: { /* Q4_0: element j < 16 in the low nibble of qs[j], j >= 16 in the high of j-16 */
        const unsigned char *b = row + (size_t)(k / 32) * 18;
        int j = k % 32, q = j < 16 ? (b[2 + j] & 0xF) : (b[2 + j - 16] >> 4);
        return sol_f16_to_f32(sol_load_u16(b)) * (float)(q - 8);
    }
    }
}

__host__ __device__ __forceinline__ bool sol_cuda_type_known(int type) {
    return type == SOL_CUDA_F32 || type == SOL_CUDA_F16 || type == SOL_CUDA_BF16 ||
           type == SOL_CUDA_Q8_0 || type == SOL_CUDA_Q4_0;
}

#endif
