/* dequant: element k of a weight row in ggml's layout, as float, for every weight type, with the
 * CPU backend's float steps (worker/gguf/dtype.c), for the kernels that read weights one element
 * at a time (embed). Bit for bit the CPU's: a product followed by a sum is written with
 * __fmul_rn/__fadd_rn/__fsub_rn, which nvcc never contracts into an FMA (--fmad=true would fuse
 * a plain `d * q - m` and round once where the CPU, built as ISO C, rounds twice). For today's
 * formats the product is exact anyway (an f16 scale of 11 significant bits times a 6-bit
 * sub-scale times a 4- or 5-bit quant fits float's 24), so fused and unfused agree; the
 * intrinsics keep that from resting on the argument (a format with wider scales would break it).
 * k_rope.cu is where contraction does change bits: the contracted emulation catches it there. */
#ifndef SOL_CUDA_DEQUANT_CUH
#define SOL_CUDA_DEQUANT_CUH

#include "cuda_kernels.h"
#include "half_bits.cuh"
#include "kq_dot.h"

__device__ __forceinline__ uint16_t sol_load_u16(const unsigned char *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* The 5-bit quant j of a Q5_0/Q5_1 block (qh: 32 high bits, qs: 16 bytes of nibbles). */
__device__ __forceinline__ int q5_quant(const unsigned char *qh, const unsigned char *qs, int j) {
    uint32_t h =
        (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    int lo = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
    return lo | (int)((h >> j) & 1) << 4;
}

/* Element k of a Q4_K (qh NULL) or Q5_K super-block: (d sc) q - (dmin m). */
__device__ __forceinline__ float kq45_elem(const unsigned char *b, const unsigned char *scales,
                                           const unsigned char *qh, const unsigned char *qs,
                                           int k) {
    int j = k / 32, c = j / 2, l = k % 32, sc, m;
    sol_kq_scale_min(j, scales, &sc, &m);
    int q = j % 2 ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF;
    if (qh) q |= ((qh[l] >> j) & 1) << 4;
    float d1 = sol_f16_to_f32(sol_load_u16(b)) * (float)sc;
    float m1 = sol_f16_to_f32(sol_load_u16(b + 2)) * (float)m;
    return __fsub_rn(__fmul_rn(d1, (float)q), m1);
}

/* Element k of a Q6_K super-block: d sc (q - 32). */
__device__ __forceinline__ float kq6_elem(const unsigned char *b, int k) {
    int h = k / 128, r = k % 128, part = r / 32, l = r % 32;
    const unsigned char *ql = b + 64 * h, *qh = b + 128 + 32 * h;
    const int8_t *sc = (const int8_t *)(b + 192) + 8 * h;
    int lo = part % 2 ? ql[l + 32] : ql[l];
    int q = ((part < 2 ? lo & 0xF : lo >> 4) | (((qh[l] >> (2 * part)) & 3) << 4)) - 32;
    return sol_f16_to_f32(sol_load_u16(b + 208)) * (float)sc[l / 16 + 2 * part] * (float)q;
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
    case SOL_CUDA_Q5_0: {
        const unsigned char *b = row + (size_t)(k / 32) * 22;
        return (float)(q5_quant(b + 2, b + 6, k % 32) - 16) * sol_f16_to_f32(sol_load_u16(b));
    }
    case SOL_CUDA_Q5_1: {
        const unsigned char *b = row + (size_t)(k / 32) * 24;
        return __fadd_rn(
            __fmul_rn((float)q5_quant(b + 4, b + 8, k % 32), sol_f16_to_f32(sol_load_u16(b))),
            sol_f16_to_f32(sol_load_u16(b + 2)));
    }
    case SOL_CUDA_Q4_K: {
        const unsigned char *b = row + (size_t)(k / 256) * 144;
        return kq45_elem(b, b + 4, nullptr, b + 16, k % 256);
    }
    case SOL_CUDA_Q5_K: {
        const unsigned char *b = row + (size_t)(k / 256) * 176;
        return kq45_elem(b, b + 4, b + 16, b + 48, k % 256);
    }
    case SOL_CUDA_Q6_K:
        return kq6_elem(row + (size_t)(k / 256) * 210, k % 256);
    default: { /* Q4_0: element j < 16 in the low nibble of qs[j], j >= 16 in the high of j-16 */
        const unsigned char *b = row + (size_t)(k / 32) * 18;
        int j = k % 32, q = j < 16 ? (b[2 + j] & 0xF) : (b[2 + j - 16] >> 4);
        return sol_f16_to_f32(sol_load_u16(b)) * (float)(q - 8);
    }
    }
}

__host__ __device__ __forceinline__ bool sol_cuda_type_known(int type) {
    return type == SOL_CUDA_F32 || type == SOL_CUDA_F16 || type == SOL_CUDA_BF16 ||
           type == SOL_CUDA_Q8_0 || type == SOL_CUDA_Q4_0 || type == SOL_CUDA_Q5_0 ||
           type == SOL_CUDA_Q5_1 || type == SOL_CUDA_Q4_K || type == SOL_CUDA_Q5_K ||
           type == SOL_CUDA_Q6_K;
}

#endif
