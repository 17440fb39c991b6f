/* half: F16/BF16 <-> F32 by bit manipulation, the one copy every backend uses - the GPU kernels,
 * their host emulation, the CPU backend and the GGUF reader - so all see the same values.
 * Rounding is to nearest even; a NaN stays a quiet NaN; F16 subnormals are exact. */
#ifndef SOL_HALF_H
#define SOL_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Host and device under nvcc; plain inline C elsewhere (the emulation compiles the kernels as
 * host C++, where these are host functions like any other). */
#ifdef __CUDACC__
#define SOL_HALF_FN static __host__ __device__ __forceinline__
#else
#define SOL_HALF_FN static inline
#endif

SOL_HALF_FN float sol_bits_f32(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

SOL_HALF_FN uint32_t sol_f32_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

SOL_HALF_FN float sol_f16_to_f32(uint16_t h) {
#ifdef __CUDA_ARCH__
    /* The GPU's conversion (one instruction; the bit manipulation below took ~15 and two branches
     * a scale in the kernels' loops): exact, so the same value for every input but a NaN's
     * payload. */
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    if (exp == 0x1F) return sol_bits_f32(sign | 0x7F800000u | (man << 13));
    if (exp != 0) return sol_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
    if (man == 0) return sol_bits_f32(sign);
    return sol_bits_f32(sign | sol_f32_bits((float)man * (1.0f / 16777216.0f))); /* man 2^-24 */
#endif
}

SOL_HALF_FN uint16_t sol_f32_to_f16(float f) {
#ifdef __CUDA_ARCH__
    /* Round to nearest even, overflow to inf, subnormals kept: the bits below for every input
     * but a NaN's payload, in one instruction. */
    uint16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    uint32_t x = sol_f32_bits(f), sign = (x >> 16) & 0x8000, ax = x & 0x7FFFFFFF;
    if (ax >= 0x7F800000u) return (uint16_t)(sign | 0x7C00 | (ax > 0x7F800000u ? 0x200 : 0));
    if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) /* below the smallest normal: exact scaling, rint rounds to even */
        return (uint16_t)(sign | (uint32_t)rintf(sol_bits_f32(ax) * 16777216.0f));
    uint32_t r = ax + 0xFFF + ((ax >> 13) & 1) - 0x38000000u;
    return (uint16_t)(sign | (r >> 13));
#endif
}

/* Two floats rounded to F16 and packed, lo in the low 16 bits (the MMA fragments' order): on the
 * GPU one cvt.rn.f16x2.f32 (sm_80+), with sol_f32_to_f16's bits for every input but a NaN's
 * payload. */
SOL_HALF_FN uint32_t sol_f16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); /* a: upper, b: lower */
    return r;
#else
    return (uint32_t)sol_f32_to_f16(lo) | (uint32_t)sol_f32_to_f16(hi) << 16;
#endif
}

SOL_HALF_FN float sol_bf16_to_f32(uint16_t h) {
    return sol_bits_f32((uint32_t)h << 16);
}

SOL_HALF_FN uint16_t sol_f32_to_bf16(float f) {
    uint32_t x = sol_f32_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1)) >> 16);
}

#endif
