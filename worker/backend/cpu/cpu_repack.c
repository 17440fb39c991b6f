/* cpu_repack: the CPU backend's row-interleaved Q4_0 and Q8_0 layouts (CPU_LAYOUT_Q4_0X8,
 * CPU_LAYOUT_Q8_0X8). Weights are rewritten in place, one group of 8 rows at a time, so a model
 * needs no second copy of them.
 *
 * Group g (rows 8g..8g+7) keeps the memory of its 8 ggml rows. Q4_0: block b of the group is 144
 * bytes at offset b * 144: the 8 rows' fp16 scales, then 4 slices of 32 bytes, slice s holding
 * qs[4s..4s+3] of row r at bytes 4r..4r+3. One 32-byte load thus feeds one dot-product
 * instruction whose int32 lane r belongs to row r: low nibbles are elements 4s..4s+3, high
 * nibbles elements 16+4s..16+4s+3. Q8_0: block b is 272 bytes at offset b * 272, the 8 scales
 * then 8 slices of 32 bytes laid out the same way (elements 4s..4s+3), each quant stored as
 * q + 128 (q ^ 0x80) so it is the unsigned operand of vpdpbusd; kernels subtract
 * 128 * (sum of the activation block's quants). Rows past the last full group stay in ggml
 * layout. */
#include <errno.h>
#include <stdlib.h>

#include "cpu_internal.h"

_Static_assert(CPU_Q4X8_BLOCK == 8 * sizeof(sol_block_q4_0), "Q4_0 group block: 8 ggml blocks");
_Static_assert(CPU_Q8X8_BLOCK == 8 * sizeof(sol_block_q8_0), "Q8_0 group block: 8 ggml blocks");

/* Writes row r's ggml block `src` (fp16 d, then quants) into group block `o`. */
typedef void (*put_fn)(unsigned char *o, const unsigned char *src, int r);

static void put_q4(unsigned char *o, const unsigned char *src, int r) {
    memcpy(o + 2 * r, src, 2);
    for (int s = 0; s < 4; s++)
        memcpy(o + 16 + 32 * s + 4 * r, src + 2 + 4 * s, 4);
}

static void put_q8(unsigned char *o, const unsigned char *src, int r) {
    memcpy(o + 2 * r, src, 2);
    for (int s = 0; s < 8; s++)
        for (int i = 0; i < 4; i++)
            o[16 + 32 * s + 4 * r + i] = src[2 + 4 * s + i] ^ 0x80;
}

/* Rewrites each full group of 8 ggml rows in place as group blocks of 8 x src_block bytes. */
static int repack(sol_backend *be, sol_weight *w, size_t src_block, put_fn put, unsigned layout) {
    int64_t nb = w->cols / 32, groups = w->rows / 8;
    size_t rb = (size_t)nb * src_block;
    if (w->layout || w->row_bytes != rb || groups == 0) return 0; /* padded rows: keep ggml */
    size_t gbytes = rb * 8;
    unsigned char *tmp = malloc(gbytes);
    if (!tmp)
        return sol_err_set(&be->err, -ENOMEM, "cpu weight_prepare: out of memory for %zu bytes",
                           gbytes);
    for (int64_t g = 0; g < groups; g++) {
        unsigned char *dst = (unsigned char *)w->data + (size_t)g * gbytes;
        memcpy(tmp, dst, gbytes);
        for (int64_t b = 0; b < nb; b++)
            for (int r = 0; r < 8; r++)
                put(dst + (size_t)b * 8 * src_block,
                    tmp + ((size_t)r * (size_t)nb + (size_t)b) * src_block, r);
    }
    free(tmp);
    w->layout = layout;
    return 0;
}

int cpu_repack_q4_0(sol_backend *be, sol_weight *w) {
    return repack(be, w, sizeof(sol_block_q4_0), put_q4, CPU_LAYOUT_Q4_0X8);
}

int cpu_repack_q8_0(sol_backend *be, sol_weight *w) {
    return repack(be, w, sizeof(sol_block_q8_0), put_q8, CPU_LAYOUT_Q8_0X8);
}

/* A repacked block read back per row: lane r's 32 quants in element order, still offset (Q4_0
 * by 8, Q8_0 by 128), and the offset to remove. */
typedef struct x8_format {
    size_t block; /* bytes of one group block */
    int32_t offset;
    void (*lane)(const unsigned char *blk, int lane, int32_t q[32]);
} x8_format;

static void lane_q4(const unsigned char *blk, int lane, int32_t q[32]) {
    for (int s = 0; s < 4; s++)
        for (int i = 0; i < 4; i++) {
            uint8_t v = blk[16 + 32 * s + 4 * lane + i];
            q[4 * s + i] = v & 0xF;
            q[16 + 4 * s + i] = v >> 4;
        }
}

static void lane_q8(const unsigned char *blk, int lane, int32_t q[32]) {
    for (int s = 0; s < 8; s++)
        for (int i = 0; i < 4; i++)
            q[4 * s + i] = blk[16 + 32 * s + 4 * lane + i];
}

static const x8_format k_q4x8 = {CPU_Q4X8_BLOCK, 8, lane_q4};
static const x8_format k_q8x8 = {CPU_Q8X8_BLOCK, 128, lane_q8};

static float lane_scale(const unsigned char *blk, int lane) {
    uint16_t dh;
    memcpy(&dh, blk + 2 * lane, 2);
    return sol_f16_to_f32(dh);
}

static void dequant_row(const x8_format *f, const sol_weight *w, int64_t r, float *dst) {
    const unsigned char *grp = cpu_group_of(w, r & ~(int64_t)7);
    int32_t q[32];
    for (int64_t b = 0; b < w->cols / 32; b++) {
        const unsigned char *blk = grp + (size_t)b * f->block;
        float d = lane_scale(blk, (int)(r & 7));
        f->lane(blk, (int)(r & 7), q);
        for (int i = 0; i < 32; i++)
            dst[b * 32 + i] = (float)(q[i] - f->offset) * d;
    }
}

void cpu_q4x8_dequant_row(const sol_weight *w, int64_t r, float *dst) {
    dequant_row(&k_q4x8, w, r, dst);
}

void cpu_q8x8_dequant_row(const sol_weight *w, int64_t r, float *dst) {
    dequant_row(&k_q8x8, w, r, dst);
}

/* The scalar kernel for repacked rows: the same integer dot (exact, so element order is free)
 * and float accumulation as the ggml layout's scalar kernels, so both layouts give the same bits
 * on this path. */
static void mm_scalar(const x8_format *f, const cpu_mm_args *a, int64_t r0, int64_t r1) {
    const sol_weight *w = a->w;
    int64_t K = w->cols, M = w->rows, nb = K / 32;
    int32_t q[32];
    for (int64_t r = r0; r < r1; r++) {
        const unsigned char *grp = cpu_group_of(w, r & ~(int64_t)7);
        int lane = (int)(r & 7);
        for (int t = 0; t < a->n; t++) {
            const int8_t *xq = a->xq + (size_t)t * K;
            const float *xd = a->xd + (size_t)t * nb;
            const int32_t *xs = a->xs + (size_t)t * nb;
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const unsigned char *blk = grp + (size_t)b * f->block;
                int32_t dot = -f->offset * xs[b];
                f->lane(blk, lane, q);
                for (int i = 0; i < 32; i++)
                    dot += q[i] * xq[b * 32 + i];
                acc += (float)dot * (lane_scale(blk, lane) * xd[b]);
            }
            a->y[(size_t)t * M + r] = acc;
        }
    }
}

static void mm_q4x8_scalar(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    mm_scalar(&k_q4x8, a, r0, r1);
}

static void mm_q8x8_scalar(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch) {
    (void)scratch;
    mm_scalar(&k_q8x8, a, r0, r1);
}

cpu_mm_fn cpu_mm_q4x8(sol_cpu_isa isa) {
    if (isa >= SOL_ISA_AVX512) return cpu_mm_q4x8_avx512;
    if (isa >= SOL_ISA_AVX2) return cpu_mm_q4x8_avx2;
    return mm_q4x8_scalar;
}

cpu_mm_fn cpu_mm_q8x8(sol_cpu_isa isa) {
    if (isa >= SOL_ISA_AVX512) return cpu_mm_q8x8_avx512;
    if (isa >= SOL_ISA_AVX2) return cpu_mm_q8x8_avx2;
    return mm_q8x8_scalar;
}
