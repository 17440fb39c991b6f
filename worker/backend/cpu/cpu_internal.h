/* cpu_internal: what the CPU backend's files share (backend_cpu.c, cpu_matmul.c,
 * cpu_attention.c and the per-ISA kernel files); nothing outside the CPU backend includes it. */
#ifndef SOL_CPU_INTERNAL_H
#define SOL_CPU_INTERNAL_H

#include <stdint.h>
#include <math.h>
#include <string.h>

#include "backend.h"
#include "ggml_float.h"
#include "half.h"
#include "cpu_features.h"
#include "threadpool.h"

/* Activations are quantized once per call, in the form the weight type's kernel reads:
 * - Q8_0 for Q8_0, Q4_0, Q5_0, Q5_1 weights: per 32-block scale d (rounded through fp16 as ggml
 *   stores it) and the block's sum of quants (removes the weights' offset or adds their min);
 * - Q8_K for the K-quants (Q4_K, Q5_K, Q6_K): one float scale per 256-block and the sum of quants
 *   of every 16 elements, so a super-block's integer dot, its sub-block scales and its mins all
 *   stay in integers and only one float step per 256 elements remains (as llama.cpp's Q8_K).
 * Both are computed by one scalar routine for every ISA path. */
typedef struct cpu_mm_args {
    const sol_weight *w;
    const float *x;    /* n x K */
    const int8_t *xq;  /* n x K: Q8_0 quants */
    const float *xd;   /* n x K/32 */
    const int32_t *xs; /* n x K/32 */
    const int8_t *kq;  /* n x K: Q8_K quants */
    const float *kd;   /* n x K/256 */
    const int16_t *ks; /* n x K/16 */
    float *y;          /* n x M */
    int n;
    int lanes; /* the llama.cpp-compatible kernels: the build's register width (ggml_lanes) */
} cpu_mm_args;

typedef enum { CPU_ACT_FLOAT = 0, CPU_ACT_Q8_0, CPU_ACT_Q8_K } cpu_act_kind;

/* The activation form the kernels of weight type t read. */
static inline cpu_act_kind cpu_act_of(sol_dtype t) {
    switch (t) {
    case SOL_DT_Q8_0:
    case SOL_DT_Q4_0:
    case SOL_DT_Q5_0:
    case SOL_DT_Q5_1:
    case SOL_DT_MXFP4:
        return CPU_ACT_Q8_0;
    case SOL_DT_Q4_K:
    case SOL_DT_Q5_K:
    case SOL_DT_Q6_K:
        return CPU_ACT_Q8_K;
    default:
        return CPU_ACT_FLOAT;
    }
}

/* The 12 scale bytes of a Q4_K/Q5_K block as sc[0..7] and m[0..7] (6 bits each), by whole words
 * (the layout of sol_q4k_scale_min, 8 pairs at once). */
static inline void cpu_q4k_scales(const uint8_t *scales, uint8_t sc[8], uint8_t m[8]) {
    uint32_t u0, u1, u2;
    memcpy(&u0, scales, 4);
    memcpy(&u1, scales + 4, 4);
    memcpy(&u2, scales + 8, 4);
    uint32_t s03 = u0 & 0x3F3F3F3Fu, m03 = u1 & 0x3F3F3F3Fu;
    uint32_t s47 = (u2 & 0x0F0F0F0Fu) | ((u0 >> 6) & 0x03030303u) << 4;
    uint32_t m47 = ((u2 >> 4) & 0x0F0F0F0Fu) | ((u1 >> 6) & 0x03030303u) << 4;
    memcpy(sc, &s03, 4);
    memcpy(sc + 4, &s47, 4);
    memcpy(m, &m03, 4);
    memcpy(m + 4, &m47, 4);
}

/* Q5_0 / Q5_1 against Q8_0 activations, rows [r0, r1) x every token, one output at a time. DOT(qs,
 * qh, x) is the exact integer sum of the block's 32 five-bit quants (without Q5_0's offset) times
 * the token's 32 quants x; the float steps are written here once, so every ISA's kernel has the
 * scalar kernel's bits. Q5_0 removes its offset 16 with the block's sum of quants, Q5_1 adds its
 * min through the same sum. Expects `a`, `r0`, `r1` in scope. */
#define CPU_Q5_WALK(DOT)                                                                           \
    do {                                                                                           \
        const sol_weight *w = a->w;                                                                \
        int64_t K = w->cols, M = w->rows, nb = K / 32;                                             \
        int q5_1 = w->type == SOL_DT_Q5_1;                                                         \
        size_t bb = sol_dtype_block_bytes(w->type);                                                \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;              \
            for (int t = 0; t < a->n; t++) {                                                       \
                const int8_t *xq = a->xq + (size_t)t * K;                                          \
                const float *xd = a->xd + (size_t)t * nb;                                          \
                const int32_t *xs = a->xs + (size_t)t * nb;                                        \
                float acc = 0.0f;                                                                  \
                for (int64_t b = 0; b < nb; b++) {                                                 \
                    const uint8_t *blk = row + b * bb;                                             \
                    uint16_t dh, mh = 0;                                                           \
                    memcpy(&dh, blk, 2);                                                           \
                    if (q5_1) memcpy(&mh, blk + 2, 2);                                             \
                    const uint8_t *qh = blk + (q5_1 ? 4 : 2);                                      \
                    int32_t dot = DOT(qh + 4, qh, xq + b * 32) - (q5_1 ? 0 : 16 * xs[b]);          \
                    acc += (float)dot * (sol_f16_to_f32(dh) * xd[b]);                              \
                    if (q5_1) acc += sol_f16_to_f32(mh) * xd[b] * (float)xs[b];                    \
                }                                                                                  \
                a->y[(size_t)t * M + r] = acc;                                                     \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* llama.cpp's F32 x F32 walk: every output one DOT(w row, x row, K, tiny, lanes), tiny when
 * llama.cpp takes tinyBLAS (a prompt of 2 tokens or more, K a multiple of its register's lanes,
 * not an expert's matrix: its MUL_MAT_ID never does), else its ggml_vec_dot_f32 order. */
#define CPU_F32_LC_WALK(DOT)                                                                       \
    do {                                                                                           \
        const sol_weight *w = a->w;                                                                \
        int64_t K = w->cols, M = w->rows;                                                          \
        int tiny = a->n >= 2 && K % a->lanes == 0 && !(w->flags & SOL_WEIGHT_EXPERT);              \
        for (int64_t r = r0; r < r1; r++)                                                          \
            for (int t = 0; t < a->n; t++)                                                         \
                a->y[(size_t)t * M + r] =                                                          \
                    DOT((const float *)((const char *)w->data + (size_t)r * w->row_bytes),         \
                        a->x + (size_t)t * K, K, tiny, a->lanes);                                  \
    } while (0)

/* MXFP4 against Q8_0 activations: each block's integer dot (DOT(qs, x quants, their sum): the
 * 32 values of sol_mxfp4_values times the token's quants, exact) then one float term with the
 * E8M0 scale, in block order: written once, so the scalar and SIMD kernels give the same bits. */
#define CPU_MXFP4_WALK(DOT)                                                                        \
    do {                                                                                           \
        const sol_weight *w = a->w;                                                                \
        int64_t K = w->cols, M = w->rows, nb = K / 32;                                             \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            const sol_block_mxfp4 *wb =                                                            \
                (const sol_block_mxfp4 *)((const uint8_t *)w->data + (size_t)r * w->row_bytes);    \
            for (int t = 0; t < a->n; t++) {                                                       \
                const int8_t *xq = a->xq + (size_t)t * K;                                          \
                const float *xd = a->xd + (size_t)t * nb;                                          \
                const int32_t *xs = a->xs + (size_t)t * nb;                                        \
                float acc = 0.0f;                                                                  \
                for (int64_t b = 0; b < nb; b++)                                                   \
                    acc += (float)DOT(wb[b].qs, xq + b * 32, xs[b]) *                              \
                           (sol_e8m0_half(wb[b].e) * xd[b]);                                       \
                a->y[(size_t)t * M + r] = acc;                                                     \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* One K-quant super-block's share of an output: exact integer sums (the scaled dot and the
 * scaled mins) become float in this one expression, written once for every ISA path, so the
 * scalar and SIMD kernels give the same bits and an output never depends on the batch. */
static inline float cpu_kq_term(float dx, float d, int32_t isum, float dmin, int32_t msum) {
    return dx * (d * (float)isum - dmin * (float)msum);
}

/* Computes y for weight rows [r0, r1) and every token. `scratch` holds K floats (K-quants). Each
 * output's reduction order depends only on the ISA path, never on n, tiles or the row range. */
typedef void (*cpu_mm_fn)(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch);

/* Per-ISA helpers for attention over a K or V row of head_dim elements stored as F32 or F16. */
typedef struct cpu_attn_fns {
    float (*dot)(const float *q, const void *k, int hd, int f16);
    void (*axpy)(float *acc, float a, const void *v, int hd, int f16); /* acc += a * v */
    void (*scale)(float *acc, float a, int hd);                        /* acc *= a */
} cpu_attn_fns;

/* K-quants and F32 in llama.cpp's float order (reference mode SOL_CPU_ATTN=llamacpp); NULL
 * otherwise. */
cpu_mm_fn cpu_mm_kq_llamacpp(sol_dtype t);
cpu_mm_fn cpu_mm_llamacpp_avx512(sol_dtype t); /* the same bits at SIMD speed (F32); NULL else */
cpu_mm_fn cpu_mm_scalar(sol_dtype t);
cpu_mm_fn cpu_mm_avx2(sol_dtype t);      /* NULL where the scalar kernel is used */
cpu_mm_fn cpu_mm_kq_avx2(sol_dtype t);   /* K-quants (Q4_K, Q5_K, Q6_K) on AVX2 */
cpu_mm_fn cpu_mm_kq_avx512(sol_dtype t); /* the same on AVX-512 (BW, VNNI) */
cpu_mm_fn cpu_mm_avx512(sol_dtype t);    /* NULL where the AVX2 or scalar kernel is used */
extern const cpu_attn_fns cpu_attn_scalar;
extern const cpu_attn_fns cpu_attn_avx2;
extern const cpu_attn_fns cpu_attn_avx512;

/* One (token, head) of the default attention (online softmax over 32-position chunks from
 * position 0): K and V rows of position p are at k/v + slot(p) * slot_bytes. */
typedef struct cpu_attend_args {
    const float *q;
    const unsigned char *k, *v;
    size_t slot_bytes;
    const int32_t *table;
    int block_size, lo, n_ctx, hd, f16; /* positions [lo, n_ctx) */
    float scale;
    float *out;
} cpu_attend_args;
#define CPU_ATTEND_AVX512_MAX_HD 128
/* AVX-512 path keeping q and the accumulator in registers; returns 0 (and does nothing) unless
 * hd is a multiple of 16 and <= CPU_ATTEND_AVX512_MAX_HD. */
int cpu_attend_avx512(const cpu_attend_args *a);

/* The row-interleaved Q4_0 layout (cpu_repack.c): groups of 8 rows, 144-byte group blocks. */
#define CPU_LAYOUT_Q4_0X8 1u
#define CPU_Q4X8_ROWS 8
#define CPU_Q4X8_BLOCK 144

/* Repacks a Q4_0 weight in place into CPU_LAYOUT_Q4_0X8 (rows past the last full group stay
 * ggml rows) and sets w->layout; leaves other weights, padded rows and repacked ones alone. */
int cpu_repack_q4_0(sol_backend *be, sol_weight *w);
/* Row r (< rows rounded down to 8) of a repacked weight, dequantized like sol_dequantize_row. */
void cpu_q4x8_dequant_row(const sol_weight *w, int64_t r, float *dst);
/* Kernels for the repacked rows [r0, r1) (r0 a multiple of 8, r1 <= rows rounded down to 8). */
cpu_mm_fn cpu_mm_q4x8(sol_cpu_isa isa);
void cpu_mm_q4x8_avx2(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch);
void cpu_mm_q4x8_avx512(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch);

/* The row-interleaved Q8_0 layout (cpu_repack.c): groups of 8 rows, 272-byte group blocks whose
 * quants are stored offset by 128 as unsigned bytes. */
#define CPU_LAYOUT_Q8_0X8 2u
#define CPU_Q8X8_ROWS 8
#define CPU_Q8X8_BLOCK 272

/* As cpu_repack_q4_0, for Q8_0 weights (CPU_LAYOUT_Q8_0X8). */
int cpu_repack_q8_0(sol_backend *be, sol_weight *w);
/* Row r (< rows rounded down to 8) of a repacked Q8_0 weight, dequantized like
 * sol_dequantize_row. */
void cpu_q8x8_dequant_row(const sol_weight *w, int64_t r, float *dst);
/* Kernels for the repacked Q8_0 rows [r0, r1) (same bounds as the Q4_0 ones). */
cpu_mm_fn cpu_mm_q8x8(sol_cpu_isa isa);
void cpu_mm_q8x8_avx2(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch);
void cpu_mm_q8x8_avx512(const cpu_mm_args *a, int64_t r0, int64_t r1, float *scratch);

/* Whether w->layout is 0 or the interleaved layout of w's type. */
static inline int cpu_layout_valid(const sol_weight *w) {
    return w->layout == 0 || (w->layout == CPU_LAYOUT_Q4_0X8 && w->type == SOL_DT_Q4_0) ||
           (w->layout == CPU_LAYOUT_Q8_0X8 && w->type == SOL_DT_Q8_0);
}
/* Rows [0, m8) of w are in an interleaved layout (0 when w is in ggml layout). */
static inline int64_t cpu_interleaved_rows(const sol_weight *w) {
    return w->layout ? w->rows / 8 * 8 : 0;
}

static inline int32_t cpu_load4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The group of 8 interleaved rows starting at row r (a multiple of 8). */
static inline const unsigned char *cpu_group_of(const sol_weight *w, int64_t r) {
    return (const unsigned char *)w->data + (size_t)r * w->row_bytes;
}

/* Walks shared by the row-interleaved kernels (cpu_kernels_x8_avx512.c, cpu_kernels_q?x8_avx2.c);
 * they expect `a`, `r0` and `r1` in scope and a tile(a, r, t, G, T) for G groups x T tokens. */
#define CPU_X8_TCHUNK 64 /* tokens whose quantized rows stay in L2 while every row tile passes */
/* Decode (n = 1) uses GD-group tiles for memory-level parallelism; prefill uses GM groups x TM
 * tokens over chunks of CPU_X8_TCHUNK tokens. The tile shape never changes an output's bits. */
#define CPU_X8_WALK(tile, GD, GM, TM)                                                              \
    do {                                                                                           \
        for (int tc = 0; tc < a->n; tc += CPU_X8_TCHUNK) {                                         \
            int tend = a->n - tc < CPU_X8_TCHUNK ? a->n : tc + CPU_X8_TCHUNK;                      \
            int64_t r = r0;                                                                        \
            if (tend - tc < TM) {                                                                  \
                for (; r + 8 * GD <= r1; r += 8 * GD)                                              \
                    for (int t = tc; t < tend; t++)                                                \
                        tile(a, r, t, GD, 1);                                                      \
            } else {                                                                               \
                for (; r + 8 * GM <= r1; r += 8 * GM) {                                            \
                    int t = tc;                                                                    \
                    for (; t + TM <= tend; t += TM)                                                \
                        tile(a, r, t, GM, TM);                                                     \
                    for (; t < tend; t++)                                                          \
                        tile(a, r, t, GM, 1);                                                      \
                }                                                                                  \
            }                                                                                      \
            for (; r < r1; r += 8) {                                                               \
                int t = tc;                                                                        \
                for (; t + TM <= tend; t += TM)                                                    \
                    tile(a, r, t, 1, TM);                                                          \
                for (; t < tend; t++)                                                              \
                    tile(a, r, t, 1, 1);                                                           \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* 2..9 tokens (batched decode, speculative verify): G groups of rows x every token, as up to
 * three tiles (T1, T2, T3 tokens) run back to back on the same rows, so each weight block comes
 * from DRAM once per pass and the later tiles find it in L2. Tiles of <= 4 tokens keep G x T
 * float and integer accumulators in the 32 vector registers at G = 3..4, and 3..4 groups keep
 * enough independent memory streams in flight, which is what these passes are bound by (one
 * 9-token tile of 1 group ran ~1.6x slower). */
#define CPU_X8_FEW(tile, G, T1, T2, T3)                                                            \
    do {                                                                                           \
        int64_t r = r0;                                                                            \
        for (; r + 8 * (G) <= r1; r += 8 * (G)) {                                                  \
            tile(a, r, 0, G, T1);                                                                  \
            if (T2) tile(a, r, T1, G, T2);                                                         \
            if (T3) tile(a, r, T1 + T2, G, T3);                                                    \
        }                                                                                          \
        for (; r < r1; r += 8) {                                                                   \
            tile(a, r, 0, 1, T1);                                                                  \
            if (T2) tile(a, r, T1, 1, T2);                                                         \
            if (T3) tile(a, r, T1 + T2, 1, T3);                                                    \
        }                                                                                          \
    } while (0)

struct sol_kv {
    struct sol_kv *next; /* the backend's list, so sol_backend_free releases every cache */
    int n_layers, num_blocks, block_size, kv_heads, head_dim;
    sol_dtype dtype;
    size_t elem_bytes;
    size_t pool_bytes;   /* one layer's K (or V) pool */
    unsigned char *base; /* n_layers x {K, V} pools, one mapping */
    size_t map_bytes;
};

typedef struct cpu_backend {
    sol_backend base;
    sol_threadpool *tp;
    int n_threads;
    sol_cpu_isa isa;
    const cpu_attn_fns *attn;
    int attn_llamacpp; /* SOL_CPU_ATTN=llamacpp: reproduce llama.cpp's F16 rounding in attention */
    /* matmul scratch, grown on first use or by reserve() */
    unsigned char *xq_buf;
    size_t xq_cap;
    float *deq; /* n_threads x deq_stride floats */
    int64_t deq_stride;
    sol_kv *kvs;
} cpu_backend;

int cpu_matmul(sol_backend *be, const sol_weight *w, const float *x, float *y, int n);
int cpu_matmul_many(sol_backend *be, const sol_weight *const *ws, float *const *ys, int count,
                    const float *x, int n);
int cpu_scratch_reserve(cpu_backend *cb, int max_tokens, int64_t max_dim);
int cpu_weight_check(sol_backend *be, const sol_weight *w, const char *op);

sol_kv *cpu_kv_alloc(sol_backend *be, int n_layers, int num_blocks, int block_size, int n_kv_heads,
                     int head_dim, sol_dtype dtype);
void cpu_kv_free(sol_backend *be, sol_kv *kv);
int cpu_kv_write(sol_backend *be, sol_kv *kv, int layer, const float *k, const float *v,
                 const int32_t *slots, int n);
int cpu_kv_host_io(sol_backend *be, sol_kv *kv, int32_t block, void *host, int to_host);
size_t cpu_kv_host_bytes(sol_backend *be, const sol_kv *kv);
int cpu_kv_copy_blocks(sol_backend *be, sol_kv *kv, const int32_t *src, const int32_t *dst,
                       int count);
int cpu_paged_attention(sol_backend *be, sol_kv *kv, int layer, const float *q, float *out, int n,
                        int heads, int kv_heads, int head_dim, float scale, int window,
                        const float *sinks, const sol_attn_seq *per_token);

#endif
