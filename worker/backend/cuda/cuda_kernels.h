/* cuda_kernels: the C-callable launchers of the CUDA kernels (one .cu file per kernel family);
 * the same sources run on a GPU (nvcc) and on the CPU under cuda_emu.h (tests). Pointers are
 * device buffers; `stream` is the backend's sol_cuda_queue (graph_sig.h: the stream and the graph
 * signature its launches are written to) or NULL: the default stream. */
#ifndef SOL_CUDA_KERNELS_H
#define SOL_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_layout.h"

/* The same sources are built twice in one binary: by nvcc for the GPU backend (sol_cuda_*) and
 * as host C++ for the cuda-emu backend (sol_emu_*, with SOL_CUDA_EMU defined). */
#ifdef SOL_CUDA_EMU
#define SOL_CUDA_FN(name) sol_emu_##name
#else
#define SOL_CUDA_FN(name) sol_cuda_##name
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* k_elementwise.cu: out = silu(gate) * up, gelu(gate) * up (tanh form), a + b, x * s. */
void SOL_CUDA_FN(silu_mul)(const float *gate, const float *up, float *out, int64_t n, void *stream);
void SOL_CUDA_FN(gelu_mul)(const float *gate, const float *up, float *out, int64_t n, void *stream);
void SOL_CUDA_FN(swiglu_oai)(const float *gate, const float *up, float *out, int64_t n, float alpha,
                             float limit, void *stream);
void SOL_CUDA_FN(add)(const float *a, const float *b, float *out, int64_t n, void *stream);
void SOL_CUDA_FN(scale)(const float *x, float s, float *out, int64_t n, void *stream);
/* y[t][i] += bias[i] for n rows of len (the same float add as `add`, one launch). */
void SOL_CUDA_FN(add_rows)(float *y, const float *bias, int n, int len, void *stream);

/* k_norm.cu: out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w for n rows of dim (a block per row of
 * SOL_CUDA_NORM_THREADS: the block sum's order, which every kernel that normalizes a row by
 * itself keeps, so all give k_rmsnorm's bits). */
#define SOL_CUDA_NORM_THREADS 256
void SOL_CUDA_FN(rmsnorm)(const float *x, const float *w, float *out, int n, int dim, float eps,
                          void *stream);

/* k_rope.cu: in place on x (n x heads x head_dim), token t at pos[t]; NORM pairs (2i, 2i+1) or
 * NEOX pairs (i, i + d/2); pair i's angle pos * inv_freq[i] in double (the frequencies are
 * rope_freq.h's, computed on the host as the CPU backend computes them and staged with the
 * positions), its cosine and sine scaled by mscale (YaRN; 1 = none). */
typedef struct sol_cuda_rope_args {
    const double *inv_freq; /* head_dim / 2 frequencies, device memory */
    float mscale;
    int32_t neox;
} sol_cuda_rope_args;
void SOL_CUDA_FN(rope)(float *x, const int32_t *pos, int n, int heads, int head_dim,
                       sol_cuda_rope_args p, void *stream);
/* rope on q (n x heads x head_dim) and k (n x kv_heads x head_dim) in place, and k, v written to
 * the pools' F16 or F32 rows at the slots: one launch, the same bits as rope, rope, kv_write.
 * pos_slots: n positions, then n slots. */
void SOL_CUDA_FN(rope_kv)(float *q, float *k, const float *v, const int32_t *pos_slots, int n,
                          int heads, int kv_heads, int head_dim, sol_cuda_rope_args p, void *k_pool,
                          void *v_pool, int f16, void *stream);

/* k_argmax.cu: ids[i], vals[i] = the id of row i's largest value (ties to the lowest id, NaN as
 * -inf) and that value, for n rows of width floats. ws_v, ws_id: n x argmax_chunks(width)
 * partials; cnt: n ints, zero before the first launch and left zero by each. */
int SOL_CUDA_FN(argmax_chunks)(long long width);
void SOL_CUDA_FN(argmax_rows)(const float *x, int n, long long width, float *ws_v, int *ws_id,
                              int *cnt, int32_t *ids, float *vals, void *stream);

/* Per-head RMSNorm of q and of k (q_norm, k_norm: head_dim weights each, eps), then rope_kv,
 * in one launch: the same bits as rmsnorm(q), rmsnorm(k), rope_kv. head_dim <= 2 x
 * SOL_CUDA_ROPE_MAX_PAIRS. */
#define SOL_CUDA_ROPE_MAX_PAIRS 512
void SOL_CUDA_FN(qk_norm_rope_kv)(float *q, float *k, const float *v, const int32_t *pos_slots,
                                  int n, int heads, int kv_heads, int head_dim,
                                  sol_cuda_rope_args p, const float *q_norm, const float *k_norm,
                                  float eps, void *k_pool, void *v_pool, int f16, void *stream);

/* Weight types by their ggml ids (sol_dtype). */
enum {
    SOL_CUDA_F32 = 0,
    SOL_CUDA_F16 = 1,
    SOL_CUDA_Q4_0 = 2,
    SOL_CUDA_Q5_0 = 6,
    SOL_CUDA_Q5_1 = 7,
    SOL_CUDA_Q8_0 = 8,
    SOL_CUDA_Q4_K = 12,
    SOL_CUDA_Q5_K = 13,
    SOL_CUDA_Q6_K = 14,
    SOL_CUDA_BF16 = 30,
    SOL_CUDA_MXFP4 = 39
};

/* k_moe.cu: out[t] = sum over j < k of w[t*k + j] * src[rows[t*k + j]] (width floats a row),
 * summed in j order without FMA contraction (the CPU backend's bits); rw holds the n*k rows then
 * the n*k weights' bits (one staged array). */
int SOL_CUDA_FN(moe_combine)(const float *src, int64_t width, const int32_t *rw, int n, int k,
                             float *out, void *stream);
/* k_embed.cu: out[t] = row ids[t] of the table, dequantized (n x cols floats) with the CPU
 * backend's float steps. -ENOTSUP for a type it does not read. */
int SOL_CUDA_FN(embed)(sol_cuda_wt table, const int32_t *ids, int n, float *out, void *stream);

/* k_gemv.cu: y[t][r] = sum_k x[t][k] W[r][k] for n <= SOL_CUDA_GEMV_MAX_TOKENS tokens (decode and
 * verify): a warp per row. Q8_0/Q4_0/Q5_0/Q5_1 take x quantized to Q8_0 per 32-block, K-quants
 * to Q8_K per 256-block, as the CPU backend does (same rounding), in `scratch`
 * (sol_cuda_gemv_scratch_bytes): gemv_quantize fills it for an activation kind (gemv_act of the
 * weight's type), and gemv_run reads it, so matrices of one kind share one quantization of x;
 * gemv does both. add: y += the product (matmul_add's epilogue). -ENOTSUP for another type or a
 * larger n (gemv_quantize and gemv_glu_quantize take any n >= 1: the int8 GEMM, k_mmq.cu, reads a
 * whole prompt's), -EINVAL for K not a multiple of the type's block or a weight not in the layout
 * its type needs (cuda_layout.h). */
#define SOL_CUDA_GEMV_MAX_TOKENS 16
enum { SOL_CUDA_ACT_FLOAT = 0, SOL_CUDA_ACT_Q8_0 = 1, SOL_CUDA_ACT_Q8_K = 2 };
int SOL_CUDA_FN(gemv_act)(int type);
size_t SOL_CUDA_FN(gemv_scratch_bytes)(int n, int K);
int SOL_CUDA_FN(gemv_quantize)(int act, const float *x, int n, int K, void *scratch, void *stream);
/* The prologues fused into the quantization: act(gate) * up made where it is read (SiLU, or GELU
 * when gelu; -ENOTSUP for ACT_FLOAT: float weights read the product itself), or the RMSNorm of x
 * by w (eps) written to xn (n x K) and quantized in the same launch (a block per token). The
 * same bits as silu_mul/gelu_mul or rmsnorm, then gemv_quantize. */
int SOL_CUDA_FN(gemv_glu_quantize)(int act, int gelu, const float *gate, const float *up, int n,
                                   int K, void *scratch, void *stream);
int SOL_CUDA_FN(gemv_norm_quantize)(int act, const float *x, const float *w, float eps, float *xn,
                                    int n, int K, void *scratch, void *stream);
/* bias: NULL, or w.rows floats added to each token's sum before the store (and before add). */
int SOL_CUDA_FN(gemv_run)(sol_cuda_wt w, const float *x, float *y, int n, const void *scratch,
                          int add, const float *bias, void *stream);
/* count matrices of K = ws[0].cols columns that read the same x (one activation kind, quantized
 * once in scratch), y_i = x W_i^T (+ bs[i] when bs; += with add): up to three of one kernel in each
 * launch (q/k/v, gate/up), so a list of one type is one launch. */
int SOL_CUDA_FN(gemv_run_many)(const sol_cuda_wt *ws, float *const *ys, const float *const *bs,
                               int count, const float *x, int n, const void *scratch, int add,
                               void *stream);
/* gemv_run_many with an epilogue per matrix (roles[i]): the q/k/v projection's rope and KV
 * write. SOL_CUDA_EPI_ROPE (q) and _ROPE_KV (k): the rows rotated in the store, a pair's two
 * rows summed in one block and rotated together (rows: a multiple of head_dim); _ROPE_KV and
 * _KV (v) also stored to k_pool or v_pool's row at each token's slot (rows: the pool's row);
 * _NONE: as gemv_run_many. The same bits as gemv_run_many, then rope_kv. pos_slots: n
 * positions, then n slots (device). -EINVAL for add with an epilogue. */
enum {
    SOL_CUDA_EPI_NONE = 0,
    SOL_CUDA_EPI_ROPE = 1,
    SOL_CUDA_EPI_ROPE_KV = 2,
    SOL_CUDA_EPI_KV = 3
};
typedef struct sol_cuda_rope_epi {
    const int32_t *pos_slots;
    void *k_pool, *v_pool;
    int head_dim, f16;
    sol_cuda_rope_args p;
} sol_cuda_rope_epi;
int SOL_CUDA_FN(gemv_run_epi)(const sol_cuda_wt *ws, float *const *ys, const float *const *bs,
                              const int *roles, int count, const float *x, int n,
                              const void *scratch, int add, const sol_cuda_rope_epi *epi,
                              void *stream);
/* gemv_run of one matrix (y: n x w.rows), then the RMSNorm of y's rows by norm (eps) into xn and
 * their quantization for act into scratch (ACT_FLOAT: xn only), in the launch's last block (the
 * one whose rows complete y, counted at cnt: a zeroed int, left zeroed): the bits of gemv_run,
 * then gemv_norm_quantize (rmsnorm for ACT_FLOAT), one launch fewer. scratch may be the one x
 * was read from (every block has read it when the last one starts). xn may be NULL for a
 * quantized act (the rows are then not written). -EINVAL: xn == y, rows not a multiple of act's
 * block. */
/* The backend gives a matmul_add its norm tail up to this many tokens: the tail is one block's
 * work, so its time grows with the rows where the launch it replaces spreads them over blocks
 * (bench/gpu_model.py's `tail_tokens`: at 2 tokens the launch is already faster). */
#define SOL_CUDA_NORM_TAIL_MAX_TOKENS 1
typedef struct sol_cuda_norm_tail {
    const float *norm;
    float eps;
    float *xn;
    int act;
    void *scratch;
    int *cnt;
} sol_cuda_norm_tail;
int SOL_CUDA_FN(gemv_run_tail)(sol_cuda_wt w, const float *x, float *y, int n, const void *scratch,
                               int add, const sol_cuda_norm_tail *tail, void *stream);
/* gemv_run_many of gate (ws[0]) and up (ws[1]: the same kernel, the same rows) in one launch,
 * y_i = x W_i^T (+ bs[i]), that also makes the down projection's activations: act(gate) * up
 * (SiLU, or GELU when gelu) quantized for act into scratch (gemv_scratch_bytes(n, rows); not
 * the scratch x is read from), each block of act by the warp that completes its rows (cnt: a
 * zeroed int per block of a token's row, left zeroed): the bits of gemv_run_many, then
 * gemv_glu_quantize, one launch fewer. -EINVAL: act FLOAT, rows not a multiple of act's block,
 * matrices of two kernels or two row counts. */
typedef struct sol_cuda_glu_tail {
    int act, gelu;
    void *scratch;
    int *cnt;
} sol_cuda_glu_tail;
int SOL_CUDA_FN(gemv_run_glu)(const sol_cuda_wt *ws, float *const *ys, const float *const *bs,
                              const float *x, int n, const void *scratch,
                              const sol_cuda_glu_tail *tail, void *stream);
int SOL_CUDA_FN(gemv)(sol_cuda_wt w, const float *x, float *y, int n, void *scratch, int add,
                      void *stream);

/* k_convert.cu: the prefill GEMM's half activations: out = x rounded to F16, or to BF16 when
 * bf16 (n floats). */
void SOL_CUDA_FN(to_half)(const float *x, void *out, int64_t n, int bf16, void *stream);
/* The same of rmsnorm(x; w, eps) (n rows of dim, a block per row, k_rmsnorm's sum and steps), or
 * of act(g) * u (SiLU, or GELU when gelu: silu_mul's and gelu_mul's steps): the bits of rmsnorm,
 * silu_mul or gelu_mul, then to_half, without the f32 rows in between. */
void SOL_CUDA_FN(to_half_norm)(const float *x, const float *w, void *out, int n, int dim, float eps,
                               int bf16, void *stream);
void SOL_CUDA_FN(to_half_glu)(const float *g, const float *u, void *out, int64_t n, int gelu,
                              int bf16, void *stream);

/* k_mma.cu: y (ldy floats per token) = (or += when add) the F16 activations xh (n x cols) times
 * W^T on tensor cores, W quantized (not F32/F16/BF16: -ENOTSUP), dequantized tile by tile in
 * shared memory; -EINVAL for a layout weight_prepare did not make or cols not a multiple of 32. */
int SOL_CUDA_FN(mma_gemm)(sol_cuda_wt w, const void *xh, float *y, int n, int ldy, int add,
                          void *stream);
/* Split-K for decode batches (up to 64 tokens): each tile's K cut into `splits` runs of stages
 * whose partial tiles the last block to finish sums in split order (deterministic: the bits
 * depend on the split count, not on timing). part: `floats` floats (mma_split_floats(sms) hold
 * any split mma_splits picks); cnt: `counters` ints (mma_split_counters(sms)), zeroed before the
 * first call and left zeroed by every launch. A launch whose tiles need more is refused. */
#define SOL_CUDA_MMA_MAX_SPLITS 16
typedef struct sol_cuda_mma_split {
    int splits;
    float *part;
    int *cnt;
    size_t floats;
    int counters;
} sol_cuda_mma_split;
/* The split count for a launch of these count matrices at n tokens on sms SMs (1: none). */
int SOL_CUDA_FN(mma_splits)(const sol_cuda_wt *ws, int count, int n, int sms);
size_t SOL_CUDA_FN(mma_split_floats)(int sms);
/* The columns each of `splits` splits runs at n tokens (whole stages; the last may run fewer). */
int SOL_CUDA_FN(mma_split_cols)(int n, int K, int splits);
int SOL_CUDA_FN(mma_split_counters)(int sms);
/* mma_gemm of count (1..3) quantized matrices of one K that read the same xh (q/k/v, gate/up):
 * one launch up to 64 tokens, one per matrix past them; ys[i] with ldy[i] floats a token; the
 * bits of one mma_gemm per matrix with the same split (sp; NULL: none; -EINVAL for a count
 * mma_splits could not give: past 64 tokens, an empty split, no workspace). Returns the
 * launches made (1..count) or -errno. */
int SOL_CUDA_FN(mma_gemm_many)(const sol_cuda_wt *ws, float *const *ys, const int *ldy, int count,
                               const void *xh, int n, int add, const sol_cuda_mma_split *sp,
                               void *stream);

/* k_mmq.cu: y (ldy floats per token) = (or += when add) x W^T on int8 tensor cores, x given as
 * gemv_quantize's activations of kind mmq_act(W's type) for n x cols in scratch
 * (sol_cuda_gemv_scratch_bytes(n, cols)): Q8_0 for Q4_0, Q5_0, Q5_1, Q8_0 and MXFP4, Q8_K for
 * Q4_K, Q5_K and Q6_K; mmq_act is SOL_CUDA_ACT_FLOAT (and mmq_gemm -ENOTSUP) for the float types.
 * Exact integer dots per block, then the GEMV's float steps in k order; -EINVAL as mma_gemm. */
int SOL_CUDA_FN(mmq_act)(int type);
int SOL_CUDA_FN(mmq_gemm)(sol_cuda_wt w, const void *scratch, float *y, int n, int ldy, int add,
                          void *stream);

/* k_kv.cu: one layer's K and V pools laid out as the CPU backend's: [block][slot][kv_head][hd]
 * in F16 (f16 = 1) or F32. Token t's K/V rows (row = kv_heads * hd floats) go to slot slots[t]
 * (block * block_size + offset), converted with round-to-nearest-even. */
void SOL_CUDA_FN(kv_write)(void *k_pool, void *v_pool, int f16, int row, const float *k,
                           const float *v, const int32_t *slots, int n, void *stream);
/* Copies whole blocks (block_bytes each) of every pool in `pools` (count_pools pointers):
 * dst[i] <- src[i]; copy-on-write forks. */
void SOL_CUDA_FN(kv_copy_blocks)(void *const *pools, int count_pools, size_t block_bytes,
                                 const int32_t *src, const int32_t *dst, int count, void *stream);

/* k_attention.cu: paged attention through block tables: out[t][h] = softmax(scale * q . K[lo..
 * n_ctx)) V with lo = 0 or, for a sliding window, max(0, n_ctx - window); query head h reads KV
 * head h / (heads / kv_heads), and the query heads of one KV head share its K/V loads. tables
 * holds token t's block table at tables + t * table_stride; head_dim <= 256. The call covers
 * tokens [t_base, t_base + n) (q, out, tables, n_ctx indexed by absolute token). tiles: NULL (a
 * block per token), or the starts of n_tiles tiles of up to SOL_CUDA_ATT_TILE consecutive tokens
 * that share a block table, plus one end entry: a tile's queries may share each K/V load
 * (prefill chunks). max_len: the longest window of these tokens, or more (a graph step passes
 * SPLIT_MIN x MAX_SPLITS, so its grid is the split cap whatever the contexts: each token still
 * takes its own split count and the blocks past it return); sms: the device's SM count.
 * A window is split along the context (flash-decoding) into sol_cuda_attention_splits(len, sms,
 * heads, kv_heads, head_dim) parts, at least SOL_CUDA_ATT_SPLIT_MIN positions each, through ws
 * (sol_cuda_attention_ws_floats(n, heads, head_dim, splits of max_len) floats; NULL: never
 * split) and cnt (n x heads ints, zero before the call and left zero: the last split of each
 * (token, head) to finish merges it, in the same launch). A token's result depends on its own
 * context only, not on the tiles, splits or other
 * tokens of the call. Pools whose rows are not 4-byte aligned (F16 with an odd head_dim) are
 * read in whole 32-bit words: they need 16 bytes of slack after their end. */
#define SOL_CUDA_ATT_SPLIT_MIN 64
#define SOL_CUDA_ATT_MAX_SPLITS 32
#define SOL_CUDA_ATT_TILE 4
#define SOL_CUDA_ATT_POOL_SLACK 16
int SOL_CUDA_FN(attention_splits)(int len, int sms, int heads, int kv_heads, int head_dim);
size_t SOL_CUDA_FN(attention_ws_floats)(int n, int heads, int head_dim, int splits);
/* q8 (NULL: none): a gemv_scratch_bytes(q8_n, heads * head_dim) scratch; when the call splits
 * and head_dim is a multiple of 32, the merge also quantizes rows [t_base, t_base + n) of out
 * for q8_act into it, as gemv_quantize would: SOL_CUDA_ACT_Q8_0, or SOL_CUDA_ACT_Q8_K when 256
 * is a whole number of heads (head_dim 32..256) and q8_cnt holds a zeroed int per Q8_K block of
 * the n rows (left zeroed: the warp that merges a block's last head quantizes it); the call then
 * returns 1 (else 0, and the scratch is untouched). sinks (NULL: none): one logit per query head
 * that joins each softmax with no value (gpt-oss). */
int SOL_CUDA_FN(paged_attention)(const void *k_pool, const void *v_pool, int f16, int block_size,
                                 const float *q, float *out, int n_tiles, const int32_t *tiles,
                                 int t_base, int n, int heads, int kv_heads, int head_dim,
                                 float scale, int window, const int32_t *tables, int table_stride,
                                 const int32_t *n_ctx, int max_len, int sms, float *ws, int *cnt,
                                 void *q8, int q8_n, int q8_act, int *q8_cnt, const float *sinks,
                                 void *stream);

/* k_flash.cu: prefill attention on tensor cores over an F16 cache, as paged_attention computes
 * it (same arguments) but with q and the softmax weights rounded to F16 (~1e-3 relative): a block
 * per (tile, KV head), tiles of up to flash_tile_tokens(...) consecutive tokens sharing a block
 * table, whose first token's row of tables holds the union of the tile's windows. No split.
 * flash_tile_tokens: 0 for a shape it does not take (head_dim other than 64 or 128, heads not a
 * multiple of kv_heads, groups of more than 64 query heads); flash_attention then -ENOTSUP. */
int SOL_CUDA_FN(flash_tile_tokens)(int heads, int kv_heads, int head_dim);
int SOL_CUDA_FN(flash_attention)(const void *k_pool, const void *v_pool, int block_size,
                                 const float *q, float *out, int n_tiles, const int32_t *tiles,
                                 int heads, int kv_heads, int head_dim, float scale, int window,
                                 const int32_t *tables, int table_stride, const int32_t *n_ctx,
                                 void *stream);

#ifdef __cplusplus
}
#endif

#endif
