/* dequant: how the kernels read weights. Aligned word loads (32, 64 and 128 bits: one LDG each on
 * the GPU, checked in the SASS by tests/gpu/sass_check.py; the emulation aborts on a misaligned
 * one, as a GPU would fault), and element k of a weight row as float in every weight type, in
 * cuda_layout.h's layouts, with the CPU backend's float steps (worker/gguf/dtype.c), for the
 * kernels that read weights one element at a time (embed), and a run of 16 elements from aligned
 * 128-bit loads (the tensor-core GEMM's F16 tiles).
 *
 * Bit for bit the CPU's: a product followed by a sum is written with __fmul_rn/__fadd_rn/
 * __fsub_rn, which nvcc never contracts into an FMA (--fmad=true would fuse a plain `d * q - m`
 * and round once where the CPU, built as ISO C, rounds twice). For today's formats the product is
 * exact anyway (an f16 scale of 11 significant bits times a 6-bit sub-scale times a 4- or 5-bit
 * quant fits float's 24); the intrinsics keep that from resting on the argument. */
#ifndef SOL_CUDA_DEQUANT_CUH
#define SOL_CUDA_DEQUANT_CUH

#include "cuda_kernels.h"
#include "cuda_layout.h"
#include "half_bits.cuh"

#ifndef __CUDACC__
/* The emulation's stand-in for a GPU's misaligned-address fault. */
inline void sol_emu_check_aligned(const void *p, unsigned bytes) {
    if ((uintptr_t)p % bytes)
        SOL_EMU_DIE("misaligned %u-byte global load at %p (a GPU faults)", bytes, p);
}
#endif

/* A 32-bit word at a 4-byte aligned address. */
__device__ __forceinline__ uint32_t sol_ld32(const void *p) {
#ifdef __CUDACC__
    return __ldg((const unsigned int *)p);
#else
    sol_emu_check_aligned(p, 4);
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#endif
}

/* 8 or 16 bytes at an address aligned to their size (uint2 / uint4: LDG.64 / LDG.128). */
__device__ __forceinline__ void sol_ld64(uint32_t v[2], const void *p) {
#ifdef __CUDACC__
    uint2 u = __ldg((const uint2 *)p);
    v[0] = u.x, v[1] = u.y;
#else
    sol_emu_check_aligned(p, 8);
    memcpy(v, p, 8);
#endif
}

__device__ __forceinline__ void sol_ld128(uint32_t v[4], const void *p) {
#ifdef __CUDACC__
    uint4 u = __ldg((const uint4 *)p);
    v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
#else
    sol_emu_check_aligned(p, 16);
    memcpy(v, p, 16);
#endif
}

/* A 16-bit field at a 2-byte aligned address, read as the aligned word that holds it (a weight
 * allocation has SOL_CUDA_WEIGHT_SLACK bytes past its end for the last one). */
__device__ __forceinline__ uint16_t sol_ld16w(const void *p) {
#ifdef __CUDACC__
    uintptr_t a = (uintptr_t)p;
    return (uint16_t)(sol_ld32((const void *)(a & ~(uintptr_t)3)) >> (8 * (a & 2)));
#else
    sol_emu_check_aligned(p, 2);
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
#endif
}

/* A byte, through the aligned word that holds it (element-wise readers only). */
__device__ __forceinline__ unsigned sol_ldb(const void *p) {
#ifdef __CUDACC__
    uintptr_t a = (uintptr_t)p;
    return (sol_ld32((const void *)(a & ~(uintptr_t)3)) >> (8 * (a & 3))) & 0xFF;
#else
    return *(const unsigned char *)p;
#endif
}

/* 2^(e - 128): MXFP4's E8M0 exponent, halved to match its doubled values (dtype.h's
 * sol_e8m0_half; e < 2: the subnormals). */
__device__ __forceinline__ float sol_e8m0_half(unsigned e) {
    return sol_bits_f32(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

/* MXFP4's values (E2M1 doubled: 0 1 2 3 4 6 8 12, bit 3 the sign) of the four nibbles held in
 * the low halves of q's bytes, as four signed bytes: two byte permutes over the tables. */
__device__ __forceinline__ int sol_mxfp4_bytes(uint32_t q) {
    uint32_t s = q & 0x07070707u;
    s |= s >> 4;
    uint32_t sel = (s & 0xFFu) | ((s >> 8) & 0xFF00u);
    uint32_t pos = __byte_perm(0x03020100u, 0x0C080604u, sel);
    uint32_t neg = __byte_perm(0xFDFEFF00u, 0xF4F8FAFCu, sel);
    uint32_t m = ((q >> 3) & 0x01010101u) * 0xFFu;
    return (int)((pos & ~m) | (neg & m));
}

/* The scale of block `blk` (counted over the whole tensor) of a split-layout weight: an f16, or
 * MXFP4's E8M0 byte. */
__device__ __forceinline__ float sol_split_scale(const sol_cuda_wt &w, size_t blk) {
    const unsigned char *s =
        (const unsigned char *)w.data + sol_cuda_scales_offset(w.type, w.rows, w.cols);
    if (w.type == SOL_CUDA_MXFP4) return sol_e8m0_half(sol_ldb(s + blk));
    return sol_f16_to_f32(sol_ld16w(s + 2 * blk));
}

/* The quant bytes of block `blk` of a split-layout weight. */
__device__ __forceinline__ const unsigned char *sol_split_quants(const sol_cuda_wt &w, size_t blk) {
    return (const unsigned char *)w.data + blk * (size_t)sol_cuda_split_part(w.type);
}

/* Byte i (0..11) of a Q4_K/Q5_K block's scales held as three words. */
__device__ __forceinline__ int kq_scale_byte(uint32_t s0, uint32_t s1, uint32_t s2, int i) {
    uint32_t w = i < 4 ? s0 : i < 8 ? s1 : s2;
    return (int)((w >> (8 * (i & 3))) & 0xFF);
}

/* Sub-block j's 6-bit scale and min (kq_dot.h's sol_kq_scale_min, on the words), without a
 * branch: bytes j % 4 of s0 and of s1 (byte j itself when j >= 4) and byte j % 4 of s1 or s2
 * (byte j + 4), both cases made and one selected, so the tile loader's loop stays one path. */
__device__ __forceinline__ void kq_scale_min_w(int j, uint32_t s0, uint32_t s1, uint32_t s2,
                                               int *sc, int *m) {
    unsigned sh = 8u * (unsigned)(j & 3);
    int a = (int)((s0 >> sh) & 0xFF), c = (int)((s1 >> sh) & 0xFF);
    int b = (int)(((j < 4 ? s1 : s2) >> sh) & 0xFF); /* byte j + 4 */
    int lo = j < 4;
    *sc = lo ? a & 63 : (b & 0xF) | ((a >> 6) << 4);
    *m = lo ? b & 63 : (b >> 4) | ((c >> 6) << 4);
}

/* The 5-bit quant j of a Q5_0/Q5_1 block (qh: its 32 high bits, qs: 16 bytes of nibbles). */
__device__ __forceinline__ int q5_quant(uint32_t qh, const unsigned char *qs, int j) {
    int lo = j < 16 ? sol_ldb(qs + j) & 0xF : sol_ldb(qs + j - 16) >> 4;
    return lo | (int)((qh >> j) & 1) << 4;
}

/* Element k of a Q4_K (q5 = 0) or Q5_K super-block at b (ggml's, 16-byte aligned). */
__device__ __forceinline__ float kq45_elem(const unsigned char *b, int q5, int k) {
    int j = k / 32, c = j / 2, l = k % 32, sc, m;
    kq_scale_min_w(j, sol_ld32(b + 4), sol_ld32(b + 8), sol_ld32(b + 12), &sc, &m);
    unsigned v = sol_ldb(b + (q5 ? 48 : 16) + 32 * c + l);
    int q = (int)(j % 2 ? v >> 4 : v & 0xF);
    if (q5) q |= (int)((sol_ldb(b + 16 + l) >> j) & 1) << 4;
    uint32_t dm = sol_ld32(b);
    float d1 = sol_f16_to_f32((uint16_t)dm) * (float)sc;
    float m1 = sol_f16_to_f32((uint16_t)(dm >> 16)) * (float)m;
    return __fsub_rn(__fmul_rn(d1, (float)q), m1);
}

/* Element k of a Q6_K super-block's split quants q (ql 128, qh 64, scales 16) with scale d. */
__device__ __forceinline__ float kq6_elem(const unsigned char *q, float d, int k) {
    int h = k / 128, r = k % 128, part = r / 32, l = r % 32;
    unsigned lo = sol_ldb(q + 64 * h + (part % 2 ? 32 : 0) + l);
    unsigned hb = sol_ldb(q + 128 + 32 * h + l);
    int v = (int)((part < 2 ? lo & 0xF : lo >> 4) | ((hb >> (2 * part)) & 3) << 4) - 32;
    int sc = (int)(int8_t)sol_ldb(q + 192 + 8 * h + l / 16 + 2 * part);
    return d * (float)sc * (float)v;
}

/* Element k of row r of w, as float. */
__device__ __forceinline__ float sol_dequant_elem(const sol_cuda_wt &w, int r, int k) {
    const unsigned char *row = (const unsigned char *)w.data + (size_t)r * w.row_bytes;
    int nb = w.cols / sol_cuda_block_elems(w.type);
    size_t blk = (size_t)r * nb + k / sol_cuda_block_elems(w.type);
    switch (w.type) {
    case SOL_CUDA_F32: {
        uint32_t u = sol_ld32(row + 4 * (size_t)k);
        return sol_bits_f32(u);
    }
    case SOL_CUDA_F16:
        return sol_f16_to_f32(sol_ld16w(row + 2 * (size_t)k));
    case SOL_CUDA_BF16:
        return sol_bf16_to_f32(sol_ld16w(row + 2 * (size_t)k));
    case SOL_CUDA_Q8_0:
        return sol_split_scale(w, blk) * (float)(int8_t)sol_ldb(sol_split_quants(w, blk) + k % 32);
    case SOL_CUDA_Q5_0: {
        const unsigned char *q = sol_split_quants(w, blk);
        return (float)(q5_quant(sol_ld32(q), q + 4, k % 32) - 16) * sol_split_scale(w, blk);
    }
    case SOL_CUDA_Q5_1: {
        const unsigned char *b = row + (size_t)(k / 32) * 24;
        uint32_t dm = sol_ld32(b);
        return __fadd_rn(__fmul_rn((float)q5_quant(sol_ld32(b + 4), b + 8, k % 32),
                                   sol_f16_to_f32((uint16_t)dm)),
                         sol_f16_to_f32((uint16_t)(dm >> 16)));
    }
    case SOL_CUDA_Q4_K:
        return kq45_elem(row + (size_t)(k / 256) * 144, 0, k % 256);
    case SOL_CUDA_Q5_K:
        return kq45_elem(row + (size_t)(k / 256) * 176, 1, k % 256);
    case SOL_CUDA_Q6_K:
        return kq6_elem(sol_split_quants(w, blk), sol_split_scale(w, blk), k % 256);
    default: { /* Q4_0, MXFP4: element j < 16 in the low nibble of qs[j], j >= 16 in the high of
                * j-16 */
        const unsigned char *q = sol_split_quants(w, blk);
        int j = k % 32;
        unsigned v = sol_ldb(q + (j < 16 ? j : j - 16));
        int qv = (int)(j < 16 ? v & 0xF : v >> 4);
        if (w.type == SOL_CUDA_MXFP4)
            return (float)(int8_t)(sol_mxfp4_bytes((uint32_t)qv) & 0xFF) * sol_split_scale(w, blk);
        return sol_split_scale(w, blk) * (float)(qv - 8);
    }
    }
}

/* Byte i of the little-endian words v. */
__device__ __forceinline__ unsigned sol_byte(const uint32_t *v, int i) {
    return (v[i / 4] >> (8 * (i % 4))) & 0xFF;
}

/* Byte i of the words v as a float less off (an integer, 0 <= off < 2^22), exactly: 2^23 + the
 * byte is the float whose bits are 0x4B0000 and the byte (one byte permute), and taking 2^23 + off
 * from it is exact. Two full-rate instructions where a shift, a mask and a conversion took three
 * (the GEMM tile loader's count, bench/gemm_issue.py). */
__device__ __forceinline__ float sol_byte_f(const uint32_t *v, int i, float off) {
    return __uint_as_float(__byte_perm(v[i / 4], 0x4B000000u, 0x7540u | (unsigned)(i % 4))) -
           (8388608.0f + off);
}

/* The nibbles of the words q (the high ones when hi), one to a byte: four elements a word for one
 * shift and one mask, where a per-element choice cost three instructions (k_mma.cu's count). */
__device__ __forceinline__ void sol_nibbles(const uint32_t q[4], int hi, uint32_t out[4]) {
    SOL_UNROLL
    for (int i = 0; i < 4; i++)
        out[i] = (hi ? q[i] >> 4 : q[i]) & 0x0F0F0F0Fu;
}

/* N (16 or 32) elements of a Q4_K (q5 = 0) or Q5_K super-block at b from element kk (N | kk;
 * one sub-block's scale and min, decoded once): sol_dequant16/32's K-quant runs. */
template <int N>
__device__ __forceinline__ void kq45_run(const unsigned char *b, int q5, int kk, float *out) {
    int j = kk / 32, l0 = kk % 32, sc, mn;
    kq_scale_min_w(j, sol_ld32(b + 4), sol_ld32(b + 8), sol_ld32(b + 12), &sc, &mn);
    uint32_t dm = sol_ld32(b);
    float d1 = sol_f16_to_f32((uint16_t)dm) * (float)sc;
    float m1 = sol_f16_to_f32((uint16_t)(dm >> 16)) * (float)mn;
    uint32_t q[N / 4], v[N / 4];
    SOL_UNROLL
    for (int i = 0; i < N / 16; i++) {
        sol_ld128(q + 4 * i, b + (q5 ? 48 : 16) + 32 * (j / 2) + l0 + 16 * i);
        sol_nibbles(q + 4 * i, j % 2, v + 4 * i);
    }
    if (q5) {
        uint32_t h[N / 4];
        SOL_UNROLL
        for (int i = 0; i < N / 16; i++)
            sol_ld128(h + 4 * i, b + 16 + l0 + 16 * i);
        SOL_UNROLL
        for (int i = 0; i < N / 4; i++) /* bit j of each byte to bit 4 of the same byte */
            v[i] |= ((h[i] >> j) & 0x01010101u) << 4;
    }
    SOL_UNROLL
    for (int i = 0; i < N; i++)
        out[i] = fmaf(d1, sol_byte_f(v, i, 0.0f), -m1);
}

/* N (16 or 32) elements of a Q6_K block's split quants b (ql 128, qh 64, scales 16: kq6_elem's
 * layout) with scale d, from element kk (N | kk): a scale per 16 elements, exact products. */
template <int N>
__device__ __forceinline__ void kq6_run(const unsigned char *b, float d, int kk, float *out) {
    int hh = kk / 128, part = kk % 128 / 32, l0 = kk % 32;
    uint32_t q[N / 4], h[N / 4], v[N / 4];
    SOL_UNROLL
    for (int i = 0; i < N / 16; i++) {
        sol_ld128(q + 4 * i, b + 64 * hh + (part % 2 ? 32 : 0) + l0 + 16 * i);
        sol_ld128(h + 4 * i, b + 128 + 32 * hh + l0 + 16 * i);
    }
    int at = 192 + 8 * hh + 2 * part + l0 / 16; /* both of a 32-run's scales in one word */
    uint32_t sw = sol_ld32(b + (at & ~3)) >> (8 * (at & 3));
    float ds[N / 16];
    SOL_UNROLL
    for (int i = 0; i < N / 16; i++)
        ds[i] = d * (float)(int8_t)((sw >> (8 * i)) & 0xFF);
    SOL_UNROLL
    for (int i = 0; i < N / 4; i++) { /* bits 2 part, +1 of each byte to bits 4, 5 */
        v[i] = (part >= 2 ? q[i] >> 4 : q[i]) & 0x0F0F0F0Fu;
        v[i] |= ((h[i] >> (2 * part)) & 0x03030303u) << 4;
    }
    SOL_UNROLL
    for (int i = 0; i < N; i++)
        out[i] = ds[i / 16] * sol_byte_f(v, i, 32.0f);
}

/* Elements k..k+15 of row r of a quantized w (k a multiple of 16), as sol_dequant_elem gives
 * them, bit for bit, but from aligned 128-bit loads of the run's quants (32-bit where a block's
 * bytes are only 4-aligned: Q5_0's 20-byte parts, Q5_1's 24-byte blocks) and each block's scales
 * read once: the GEMM's tile loader (k_mma.cu). Float types are not read here. Where a product
 * is exact in float (a 4- to 6-bit quant times a scale of at most 17 significant bits) the
 * product and the add that follows are one fmaf: the same bits as the two rounded steps. */
__device__ __forceinline__ void sol_dequant16(const sol_cuda_wt &w, int r, int col, float out[16]) {
    const unsigned char *row = (const unsigned char *)w.data + (size_t)r * w.row_bytes;
    unsigned k = (unsigned)col; /* unsigned: its divisions by 32 and 256 are shifts */
    size_t blk = (size_t)r * (size_t)(w.cols / sol_cuda_block_elems(w.type)) +
                 (size_t)(k / (unsigned)sol_cuda_block_elems(w.type));
    uint32_t q[4], h[4];
    switch (w.type) {
    case SOL_CUDA_Q8_0: {
        float d = sol_split_scale(w, blk);
        sol_ld128(q, sol_split_quants(w, blk) + k % 32);
        SOL_UNROLL
        for (int i = 0; i < 16; i++)
            out[i] = d * (float)(int8_t)sol_byte(q, i);
        return;
    }
    case SOL_CUDA_Q4_0: { /* element j < 16: low nibble of qs[j]; j >= 16: high of qs[j - 16] */
        float d = sol_split_scale(w, blk);
        sol_ld128(q, sol_split_quants(w, blk));
        sol_nibbles(q, k % 32 >= 16, h);
        SOL_UNROLL
        for (int i = 0; i < 16; i++)
            out[i] = d * sol_byte_f(h, i, 8.0f);
        return;
    }
    case SOL_CUDA_MXFP4: { /* Q4_0's nibble order; the values from the table, times the scale */
        float d = sol_split_scale(w, blk);
        int hi = k % 32 >= 16;
        sol_ld128(q, sol_split_quants(w, blk));
        SOL_UNROLL
        for (int i = 0; i < 4; i++)
            h[i] = (uint32_t)sol_mxfp4_bytes(hi ? (q[i] >> 4) & 0x0F0F0F0Fu : q[i] & 0x0F0F0F0Fu);
        SOL_UNROLL
        for (int i = 0; i < 16; i++)
            out[i] = (float)(int8_t)sol_byte(h, i) * d;
        return;
    }
    case SOL_CUDA_Q5_0:
    case SOL_CUDA_Q5_1: {
        const unsigned char *b =
            w.type == SOL_CUDA_Q5_0 ? sol_split_quants(w, blk) : row + (size_t)(k / 32) * 24 + 4;
        uint32_t qh = sol_ld32(b);
        SOL_UNROLL
        for (int i = 0; i < 4; i++)
            q[i] = sol_ld32(b + 4 + 4 * i);
        int j0 = k % 32, hi = j0 >= 16;
        float d, m = 0.0f;
        if (w.type == SOL_CUDA_Q5_0) {
            d = sol_split_scale(w, blk);
        } else {
            uint32_t dm = sol_ld32(b - 4);
            d = sol_f16_to_f32((uint16_t)dm), m = sol_f16_to_f32((uint16_t)(dm >> 16));
        }
        sol_nibbles(q, hi, h);
        SOL_UNROLL
        for (int i = 0; i < 16; i++) {
            int v = (int)sol_byte(h, i) | (int)((qh >> (j0 + i)) & 1) << 4;
            out[i] = w.type == SOL_CUDA_Q5_0 ? (float)(v - 16) * d : fmaf((float)v, d, m);
        }
        return;
    }
    case SOL_CUDA_Q4_K:
    case SOL_CUDA_Q5_K: {
        int q5 = w.type == SOL_CUDA_Q5_K;
        kq45_run<16>(row + (size_t)(k / 256) * (q5 ? 176 : 144), q5, (int)(k % 256), out);
        return;
    }
    default: /* Q6_K */
        kq6_run<16>(sol_split_quants(w, blk), sol_split_scale(w, blk), (int)(k % 256), out);
    }
}

/* Elements k..k+31 of row r of a quantized w (k a multiple of 32: one block of the 32-element
 * types, one sub-block of the K-quants), sol_dequant16's bits for both halves, with the block's
 * scales loaded and decoded once (the compiler does not merge two sol_dequant16 calls' loads):
 * the GEMM tile loader's 64-column stages (k_mma.cu). The types without a case here take two
 * sol_dequant16 calls. */
__device__ __forceinline__ void sol_dequant32(const sol_cuda_wt &w, int r, int col, float out[32]) {
    const unsigned char *row = (const unsigned char *)w.data + (size_t)r * w.row_bytes;
    unsigned k = (unsigned)col;
    size_t blk = (size_t)r * (size_t)(w.cols / sol_cuda_block_elems(w.type)) +
                 (size_t)(k / (unsigned)sol_cuda_block_elems(w.type));
    uint32_t q[8], v[8];
    switch (w.type) {
    case SOL_CUDA_Q8_0: { /* signed bytes: b ^ 0x80 is b + 128 */
        float d = sol_split_scale(w, blk);
        sol_ld128(q, sol_split_quants(w, blk));
        sol_ld128(q + 4, sol_split_quants(w, blk) + 16);
        SOL_UNROLL
        for (int i = 0; i < 8; i++)
            v[i] = q[i] ^ 0x80808080u;
        SOL_UNROLL
        for (int i = 0; i < 32; i++)
            out[i] = d * sol_byte_f(v, i, 128.0f);
        return;
    }
    case SOL_CUDA_Q4_0: { /* elements 0..15: the low nibbles of the 16 bytes, 16..31: the high */
        float d = sol_split_scale(w, blk);
        sol_ld128(q, sol_split_quants(w, blk));
        sol_nibbles(q, 0, v);
        sol_nibbles(q, 1, v + 4);
        SOL_UNROLL
        for (int i = 0; i < 32; i++)
            out[i] = d * sol_byte_f(v, i, 8.0f);
        return;
    }
    case SOL_CUDA_Q4_K:
    case SOL_CUDA_Q5_K: {
        int q5 = w.type == SOL_CUDA_Q5_K;
        kq45_run<32>(row + (size_t)(k / 256) * (q5 ? 176 : 144), q5, (int)(k % 256), out);
        return;
    }
    case SOL_CUDA_Q6_K:
        kq6_run<32>(sol_split_quants(w, blk), sol_split_scale(w, blk), (int)(k % 256), out);
        return;
    default:
        sol_dequant16(w, r, col, out);
        sol_dequant16(w, r, col + 16, out + 16);
    }
}

__host__ __device__ __forceinline__ bool sol_cuda_type_known(int type) {
    return type == SOL_CUDA_F32 || type == SOL_CUDA_F16 || type == SOL_CUDA_BF16 ||
           type == SOL_CUDA_Q8_0 || type == SOL_CUDA_Q4_0 || type == SOL_CUDA_Q5_0 ||
           type == SOL_CUDA_Q5_1 || type == SOL_CUDA_Q4_K || type == SOL_CUDA_Q5_K ||
           type == SOL_CUDA_Q6_K || type == SOL_CUDA_MXFP4;
}

/* The layout the kernels expect for type: split (1) or ggml rows (0). */
__host__ __device__ __forceinline__ int sol_cuda_wants_split(int type) {
    return sol_cuda_split_part(type) != 0;
}

/* Four 5-bit high bits (bits 0..3 of h) moved to bit 4 of four bytes. */
__device__ __forceinline__ int spread4(uint32_t h) {
    return (int)(((h & 1) << 4) | ((h & 2) << 11) | ((h & 4) << 18) | ((h & 8) << 25));
}

/* A Q4_0/Q5_0/Q5_1/Q8_0 block's 32 quants as 8 words of signed or unsigned bytes in the order
 * of the activation quants (word i: elements 4i..4i+3), and the block's scales. */
struct qblock {
    int v[8];
    float d, m;
};

__device__ __forceinline__ qblock q_load(const sol_cuda_wt &w, int row, int b, int nb) {
    qblock r;
    size_t blk = (size_t)row * nb + b;
    r.m = 0.0f;
    if (w.type == SOL_CUDA_Q5_1) { /* ggml's 24-byte block, 8-byte aligned: d, m, qh, qs */
        const unsigned char *p =
            (const unsigned char *)w.data + (size_t)row * w.row_bytes + (size_t)b * 24;
        uint32_t dm = sol_ld32(p), qh = sol_ld32(p + 4), qs[4];
        sol_ld64(qs, p + 8);
        sol_ld64(qs + 2, p + 16);
        for (int i = 0; i < 4; i++) {
            r.v[i] = (int)(qs[i] & 0x0F0F0F0F) | spread4(qh >> (4 * i));
            r.v[4 + i] = (int)((qs[i] >> 4) & 0x0F0F0F0F) | spread4(qh >> (16 + 4 * i));
        }
        r.d = sol_f16_to_f32((uint16_t)dm), r.m = sol_f16_to_f32((uint16_t)(dm >> 16));
        return r;
    }
    const unsigned char *q = sol_split_quants(w, blk);
    r.d = sol_split_scale(w, blk);
    uint32_t a[4], c[4];
    if (w.type == SOL_CUDA_Q8_0) {
        sol_ld128(a, q);
        sol_ld128(c, q + 16);
        for (int i = 0; i < 4; i++)
            r.v[i] = (int)a[i], r.v[4 + i] = (int)c[i];
        return r;
    }
    if (w.type == SOL_CUDA_MXFP4) { /* Q4_0's 16 bytes of nibbles, each through the table */
        sol_ld128(a, q);
        for (int i = 0; i < 4; i++) {
            r.v[i] = sol_mxfp4_bytes(a[i] & 0x0F0F0F0Fu);
            r.v[4 + i] = sol_mxfp4_bytes((a[i] >> 4) & 0x0F0F0F0Fu);
        }
        return r;
    }
    uint32_t qh = 0;
    if (w.type == SOL_CUDA_Q5_0) { /* 20 bytes, 4-byte aligned: qh, qs */
        qh = sol_ld32(q);
        for (int i = 0; i < 4; i++)
            a[i] = sol_ld32(q + 4 + 4 * i);
    } else {
        sol_ld128(a, q); /* Q4_0: 16 bytes, 16-byte aligned */
    }
    for (int i = 0; i < 4; i++) { /* low nibbles: elements 0..15, high nibbles: 16..31 */
        r.v[i] = (int)(a[i] & 0x0F0F0F0F);
        r.v[4 + i] = (int)((a[i] >> 4) & 0x0F0F0F0F);
        if (w.type == SOL_CUDA_Q5_0) {
            r.v[i] |= spread4(qh >> (4 * i));
            r.v[4 + i] |= spread4(qh >> (16 + 4 * i));
        }
    }
    return r;
}

/* Q6_K group grp (32 elements: half h = grp / 4, part grp % 4) of block blk in the split layout:
 * the six-bit quants 0..63 as 8 words of bytes in element order (two 128-bit words of low
 * nibbles, two of high bits), the group's two signed 16-element scales, the block's d. */
__device__ __forceinline__ void q6k_group(const sol_cuda_wt &w, size_t blk, int grp, uint32_t v[8],
                                          int *sc0, int *sc1, float *d) {
    int h = grp / 4, part = grp % 4;
    const unsigned char *q = sol_split_quants(w, blk);
    uint32_t ql[8], qh[8];
    sol_ld128(ql, q + 64 * h + 32 * (part & 1));
    sol_ld128(ql + 4, q + 64 * h + 32 * (part & 1) + 16);
    sol_ld128(qh, q + 128 + 32 * h);
    sol_ld128(qh + 4, q + 128 + 32 * h + 16);
    uint32_t sw = sol_ld32(q + 192 + 8 * h + 4 * (part >> 1)) >> (16 * (part & 1));
    *sc0 = (int8_t)(sw & 0xFF), *sc1 = (int8_t)((sw >> 8) & 0xFF);
    *d = sol_split_scale(w, blk);
    SOL_UNROLL
    for (int i = 0; i < 8; i++)
        v[i] = ((part < 2 ? ql[i] : ql[i] >> 4) & 0x0F0F0F0Fu) |
               ((qh[i] >> (2 * part)) & 0x03030303u) << 4;
}

#endif
