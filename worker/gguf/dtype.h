/* dtype: tensor element types with ggml's exact ids and block layouts (fp16/bf16 conversion is
 * common/half.h's), and reference (scalar) quantize/dequantize of one row. SIMD kernels live in the
 * backend. */
#ifndef SOL_DTYPE_H
#define SOL_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "half.h" /* sol_f16_to_f32 and the other half conversions */

/* Values are ggml's `enum ggml_type` ids, as stored in GGUF tensor infos. */
typedef enum {
    SOL_DT_F32 = 0,
    SOL_DT_F16 = 1,
    SOL_DT_Q4_0 = 2,
    SOL_DT_Q5_0 = 6,
    SOL_DT_Q5_1 = 7,
    SOL_DT_Q8_0 = 8,
    SOL_DT_Q4_K = 12,
    SOL_DT_Q5_K = 13,
    SOL_DT_Q6_K = 14,
    SOL_DT_BF16 = 30,
    SOL_DT_MXFP4 = 39,
} sol_dtype;

#define SOL_QK4_0 32
#define SOL_QK8_0 32
#define SOL_QK_K 256

/* ggml block_q4_0: element j is (qs[j] & 0xF) - 8, element j+16 is (qs[j] >> 4) - 8, times d. */
typedef struct {
    uint16_t d; /* fp16 scale */
    uint8_t qs[SOL_QK4_0 / 2];
} sol_block_q4_0;

/* ggml block_q5_0: 5-bit quants; bit j of the little-endian qh word is the high bit of element
 * j. Element j is ((qs[j] & 0xF) | hb(j) << 4) - 16, element j+16 is ((qs[j] >> 4) | hb(j+16) <<
 * 4) - 16, times d. */
typedef struct {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[SOL_QK4_0 / 2];
} sol_block_q5_0;

/* ggml block_q5_1: as q5_0 without the -16, value = q * d + m. */
typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[SOL_QK4_0 / 2];
} sol_block_q5_1;

/* ggml block_mxfp4 (OCP microscaling FP4): element j is kv[qs[j] & 0xF], element j+16 is
 * kv[qs[j] >> 4], times the E8M0 scale 2^(e - 127) / 2, where kv = sol_mxfp4_values: the E2M1
 * values doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives become small integers, so a
 * dot product with Q8_0 activations stays in integers until the one float scale). */
typedef struct {
    uint8_t e;
    uint8_t qs[SOL_QK4_0 / 2];
} sol_block_mxfp4;

extern const int8_t sol_mxfp4_values[16];

/* 2^(e - 128): the E8M0 exponent e as a float, halved to match sol_mxfp4_values (e < 2: the
 * subnormals 2^-128, 2^-127). */
static inline float sol_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    __builtin_memcpy(&f, &bits, sizeof f);
    return f;
}

/* ggml block_q8_0: element j is qs[j] * d. */
typedef struct {
    uint16_t d; /* fp16 scale */
    int8_t qs[SOL_QK8_0];
} sol_block_q8_0;

/* ggml block_q4_K (256 elements, 8 sub-blocks of 32 with 6-bit scales and mins). */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[SOL_QK_K / 2];
} sol_block_q4_k;

/* ggml block_q5_K: q4_K plus a fifth bit: in 64-element chunk c, bit 2c of qh[l] is the high bit
 * of element l (low nibble of qs[32c + l]) and bit 2c+1 that of element l+32 (high nibble). */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[SOL_QK_K / 8];
    uint8_t qs[SOL_QK_K / 2];
} sol_block_q5_k;

/* ggml block_q6_K (256 elements, 16 sub-blocks of 16 with 8-bit scales). */
typedef struct {
    uint8_t ql[SOL_QK_K / 2];
    uint8_t qh[SOL_QK_K / 4];
    int8_t scales[SOL_QK_K / 16];
    uint16_t d;
} sol_block_q6_k;

_Static_assert(sizeof(sol_block_q4_0) == 18, "ggml block_q4_0 is 18 bytes");
_Static_assert(sizeof(sol_block_q8_0) == 34, "ggml block_q8_0 is 34 bytes");
_Static_assert(sizeof(sol_block_q5_0) == 22, "ggml block_q5_0 is 22 bytes");
_Static_assert(sizeof(sol_block_q5_1) == 24, "ggml block_q5_1 is 24 bytes");
_Static_assert(sizeof(sol_block_q5_k) == 176, "ggml block_q5_K is 176 bytes");
_Static_assert(sizeof(sol_block_q4_k) == 144, "ggml block_q4_K is 144 bytes");
_Static_assert(sizeof(sol_block_q6_k) == 210, "ggml block_q6_K is 210 bytes");

/* 1 for known types, 0 otherwise (an unknown id read from a file is not a sol_dtype). */
int sol_dtype_known(uint32_t id);
const char *sol_dtype_name(sol_dtype t); /* "f32", "q4_0", ... */
int sol_dtype_parse(const char *name);   /* name -> id, or -1 */
size_t sol_dtype_block_elems(sol_dtype t);
size_t sol_dtype_block_bytes(sol_dtype t);
/* Bytes of a row of n elements; 0 when n is not a multiple of the block size. */
size_t sol_dtype_row_bytes(sol_dtype t, int64_t n);

/* The 5-bit quant j (0..31) of a q5_0 / q5_1 block (qs, qh as stored), before q5_0's -16. */
int sol_q5_quant(const uint8_t *qs, const uint8_t *qh, int j);

/* Scale and min (6 bits each) of sub-block j (0..7) of a q4_K / q5_K block's 12 scale bytes. */
void sol_q4k_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *m);

/* Reference conversions of one row of n elements (n a multiple of the block size). */
void sol_dequantize_row(sol_dtype t, const void *src, float *dst, int64_t n);
/* Quantizes F32 to t: F32, F16, BF16, Q8_0, Q4_0 bit-identical to ggml's reference quantizer;
 * Q4_K, Q5_K, Q6_K with Sol's own search (kquant.c). Returns 0, or -EINVAL for a type it cannot
 * produce or a bad n. */
int sol_quantize_row(sol_dtype t, const float *src, void *dst, int64_t n);

#endif
