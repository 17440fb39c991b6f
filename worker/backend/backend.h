/* backend: the one ops table the model's forward pass is written against, and the registry that
 * constructs backends by name; cpu/ and cuda/ implement it, so the model never sees a device.
 *
 * Conventions shared by every op:
 * - Activations are float32, row-major, one row per token of a flattened batch (`n` tokens that
 *   may come from many sequences). Activation pointers passed to ops are backend buffers: on the
 *   CPU any host pointer; on a device backend, memory from buf_alloc (upload/download move
 *   data), and weights and norm vectors as weight_prepare rewrote them. Index arrays (token ids,
 *   positions, slots, block tables, rows) are host memory: a device backend stages them.
 * - Ops may run asynchronously on a device backend; synchronize() waits and reports errors.
 *   The CPU backend is synchronous.
 * - Ops return 0, or a negative errno-style code with the message in be->err (bad shapes or
 *   types are reported, never a crash).
 * - Batch invariance: the value computed for one token never depends on which other tokens are
 *   in the batch, on n, on tiling or on the thread count (bit-identical). See docs/backend.md.
 */
#ifndef SOL_BACKEND_H
#define SOL_BACKEND_H

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "err.h"
#include "tp_comm.h"

/* A 2-D weight matrix, borrowed (mmap'd GGUF data or anonymous memory); never freed by the
 * backend. Row r (an output feature) starts at (const char *)data + r * row_bytes and holds
 * `cols` elements of `type` in ggml's block layout. In GGUF terms rows = ne1, cols = ne0. */
typedef struct sol_weight {
    sol_dtype type;
    int64_t rows; /* M: output features */
    int64_t cols; /* K: input features (a multiple of the type's block size) */
    const void *data;
    size_t row_bytes; /* sol_dtype_row_bytes(type, cols) for a packed GGUF tensor */
    /* 0: ggml rows as above. Nonzero: a backend-private layout that weight_prepare chose (the
     * CPU backend interleaves Q4_0 rows in groups of 8, in place); only that backend's ops may
     * read the data then, and every copy of the struct carries the flag. */
    uint32_t layout;
    /* SOL_WEIGHT_EXPERT: one expert's matrix of a mixture (a slice of a 3-D tensor). Only the
     * CPU backend's llama.cpp-compatible mode reads it: llama.cpp's MUL_MAT_ID runs its repacked
     * Q4_K experts one token at a time (GEMV), never through the four-token GEMM. */
    uint32_t flags;
} sol_weight;

enum { SOL_WEIGHT_EXPERT = 1u << 0 };

/* RoPE settings. NORM mode (llama.cpp's for general.architecture=llama): pairs
 * (x[2i], x[2i+1]) are rotated by pos * theta_i, theta_i = freq_base^(-2i/head_dim). NEOX mode
 * (qwen2, qwen3, gemma3): pairs (x[i], x[i + head_dim/2]) with the same angles.
 * Llama-3 scaling is applied when scaling_factor > 0 and orig_ctx > 0 (rope.scaling.* keys:
 * factor, low_freq_factor, high_freq_factor, original_context_length); linear scaling
 * (rope.scaling.type = linear, Gemma 3's global layers) multiplies every angle by freq_scale. */
typedef struct sol_rope_params {
    float freq_base;        /* rope.freq_base, 10000 for Llama-2 */
    float scaling_factor;   /* 0 = no llama-3 scaling */
    float low_freq_factor;  /* 1 in Llama-3.1 */
    float high_freq_factor; /* 4 in Llama-3.1 */
    int32_t orig_ctx;       /* 8192 in Llama-3.1; 0 = no llama-3 scaling */
    int32_t neox;           /* 0: NORM pairs, 1: NEOX pairs */
    float freq_scale;       /* 1 / rope.scaling.factor for linear scaling; 0 or 1 = none */
    /* YaRN (rope.scaling.type = yarn, with freq_scale = 1 / factor): pair i's angle mixes the
     * interpolated (freq_scale x) and the original frequency by ramp_i x ext_factor, where
     * ramp_i = 1 - clamp((i - yarn_low) / max(0.001, yarn_high - yarn_low), 0, 1) (the
     * correction dims, ggml_rope_yarn_corr_dims), and cos/sin are multiplied by mscale.
     * ext_factor 0: no YaRN; mscale 0 or 1: none. */
    float ext_factor, yarn_low, yarn_high, mscale;
} sol_rope_params;

/* Where one token's sequence keeps its KV: block_table[i] is the physical block holding
 * positions [i*block_size, (i+1)*block_size). The token attends to positions [0, n_ctx) of its
 * sequence (causal: n_ctx = pos + 1, after this token's K/V were written). */
typedef struct sol_attn_seq {
    const int32_t *block_table;
    int32_t n_ctx;
} sol_attn_seq;

/* A KV cache owned by the backend: per layer one K pool and one V pool, each laid out
 * [block][slot in block][kv_head][head_dim] in `dtype` (F16 or F32). Several caches may live on
 * one backend (a target model and its draft model). Freed by kv_free or with the backend. */
typedef struct sol_kv sol_kv;

typedef struct sol_backend sol_backend;

/* Where qkv_rope_kv's q/k/v rows go after the projection: rope_kv_write's operands, and the
 * per-head RMSNorm of q and k that comes first in some architectures (Qwen3, Gemma-3). */
typedef struct sol_qkv_rope {
    sol_kv *kv;
    int layer;
    const int32_t *pos, *slots; /* host: n each */
    int heads, kv_heads, head_dim;
    const sol_rope_params *rope;
    const float *q_norm, *k_norm; /* NULL: none; else head_dim weights each (both or neither) */
    float eps;
} sol_qkv_rope;

/* How the rows the next op writes will be read (next_input): by weight w, through an RMSNorm by
 * norm (eps; the normalized rows into xn) when norm is set, as norm_matmul_many(rows, norm, eps,
 * xn, {w, ...}) or matmul(w, rows) will read them; or (glu) its first two outputs as the gated
 * product act(y0) * y1, as glu_matmul_add(w, y0, y1, ...) will read them. */
typedef struct sol_next_input {
    const sol_weight *w;
    const float *norm; /* NULL: the rows as they are */
    float eps;
    float *xn;
    int glu; /* 0: none; 1: SiLU(y0) * y1; 2: GELU(y0) * y1 (with norm NULL) */
} sol_next_in;

/* synchronize's answer for a graph step that ran nothing (a dry step whose launches differed
 * from its cached graph's): run the step again, once; that run is recorded and never answers it. */
enum { SOL_STEP_RERUN = 1 };

typedef struct sol_backend_ops {
    const char *name; /* "cpu", "cuda" */
    void (*free)(sol_backend *be);

    /* Pre-size scratch for up to max_tokens tokens and max_dim features (the largest K or M of
     * any matmul), so the hot path never allocates. Optional: ops grow scratch on first use. */
    int (*reserve)(sol_backend *be, int max_tokens, int64_t max_dim);
    /* Check a weight (type supported, shape, row_bytes) and make it usable by this backend
     * (a device backend copies it and rewrites w->data; the CPU backend repacks Q4_0 weights in
     * place, so their memory must be writable, and sets w->layout). Idempotent on one struct. */
    int (*weight_prepare)(sol_backend *be, sol_weight *w);

    /* Buffers for activations. CPU: 64-byte aligned host memory, memcpy transfers. */
    void *(*buf_alloc)(sol_backend *be, size_t bytes);
    void (*buf_free)(sol_backend *be, void *buf);
    int (*upload)(sol_backend *be, void *dst_buf, const void *src_host, size_t bytes);
    int (*download)(sol_backend *be, void *dst_host, const void *src_buf, size_t bytes);

    /* y[t][m] = sum_k x[t][k] * W[m][k]: x is n x K, y is n x M (y = x W^T).
     * F32/F16/BF16 in float; Q8_0/Q4_0 quantize x to Q8_0 per 32-block and use integer dots;
     * Q5_0/Q5_1 likewise; Q4_K/Q5_K/Q6_K quantize x to Q8_K per 256-block. Never splits K across
     * threads (batch invariance). */
    int (*matmul)(sol_backend *be, const sol_weight *w, const float *x, float *y, int n);
    /* Optional: ys[i] = x ws[i]^T for `count` weights with the same K, as one dispatch (x
     * quantized once, one wake-up of the threads instead of `count`); the same bits as `count`
     * matmul calls. NULL: sol_matmul_many calls matmul per weight. */
    int (*matmul_many)(sol_backend *be, const sol_weight *const *ws, float *const *ys, int count,
                       const float *x, int n);
    /* Optional: y[t] += x[t] W^T, the residual add done in the matmul's epilogue (one launch
     * fewer per block output on a device); the same bits as matmul into a temporary, then add.
     * NULL: sol_matmul_add does exactly that. */
    int (*matmul_add)(sol_backend *be, const sol_weight *w, const float *x, float *y, int n);
    /* Optional: ys[i] = rmsnorm(x; norm, eps) ws[i]^T + bs[i] for `count` weights of the same K
     * (norm NULL: x as it is; bs NULL, or bs[i] NULL: no bias; a bias is ws[i]->rows floats
     * added to every token's row). xn (n x K floats) receives the normalized x where the
     * backend needs it in memory and may be left unwritten. A device normalizes and quantizes
     * x in one launch and adds the biases in the matmuls' store. The same bits as rmsnorm into
     * xn, matmul_many, then one add per row. NULL: sol_norm_matmul_many does exactly that. */
    int (*norm_matmul_many)(sol_backend *be, const float *x, const float *norm, float eps,
                            float *xn, const sol_weight *const *ws, const float *const *bs,
                            float *const *ys, int count, int n);
    /* Optional: y[t] += (act(gate[t]) * up[t]) W^T with act SiLU (gelu 0) or GELU (gelu 1), the
     * gated product made where the matmul reads its input (a device quantizes it there: the
     * f32 product is not written and read back). glu (n x K floats) may receive the product;
     * tmp (n x M floats) is the matmul_add fallback's. The same bits as silu_mul/gelu_mul into
     * glu, then matmul_add. NULL: sol_glu_matmul_add does exactly that. */
    int (*glu_matmul_add)(sol_backend *be, const sol_weight *w, const float *gate, const float *up,
                          int gelu, float *glu, float *y, int n);
    /* out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, for n rows of dim; out may alias x. */
    int (*rmsnorm)(sol_backend *be, const float *x, const float *w, float *out, int n, int dim,
                   float eps);
    /* In place on x (n x heads x head_dim), token t at position pos[t]. */
    int (*rope)(sol_backend *be, float *x, const int32_t *pos, int n, int heads, int head_dim,
                const sol_rope_params *p);
    /* Optional: rope on q (n x heads x head_dim) and k (n x kv_heads x head_dim) in place, then
     * k and v written to layer's cache at slots: one launch on a device instead of three. The
     * same bits as rope(q), rope(k), kv_write. NULL: sol_rope_kv_write does exactly that. */
    int (*rope_kv_write)(sol_backend *be, sol_kv *kv, int layer, float *q, float *k, const float *v,
                         const int32_t *pos, const int32_t *slots, int n, int heads, int kv_heads,
                         int head_dim, const sol_rope_params *p);
    /* Optional: norm_matmul_many of x with ws = (wq, wk, wv) into ys = (q, k, v) (biases bs as
     * there), with r->q_norm the RMSNorm of each head of q and of k (r->eps) in place, then
     * rope_kv_write of them per r: one dispatch, where a device rotates q and k and writes k
     * and v to the cache in the projection's store (decode sizes, no per-head norm) or in one
     * launch after it, q, k and v still written. The same bits as those ops. NULL:
     * sol_qkv_rope_kv does exactly that. */
    int (*qkv_rope_kv)(sol_backend *be, const float *x, const float *norm, float eps, float *xn,
                       const sol_weight *const *ws, const float *const *bs, float *const *ys, int n,
                       const struct sol_qkv_rope *r);
    /* out = silu(gate) * up elementwise; out may alias gate or up. */
    int (*silu_mul)(sol_backend *be, const float *gate, const float *up, float *out,
                    int64_t n_elems);
    /* out = gelu(gate) * up with GELU's tanh approximation (Gemma's FFN); out may alias. */
    int (*gelu_mul)(sol_backend *be, const float *gate, const float *up, float *out,
                    int64_t n_elems);
    /* Optional (gpt-oss's experts): out = x * sigmoid(alpha x) * (y + 1) with x = min(gate,
     * limit) and y = clamp(up, -limit, limit), elementwise, in llama.cpp's float steps
     * (x / (1 + e^(-alpha x))); out may alias. NULL: refused by name. */
    int (*swiglu_oai)(sol_backend *be, const float *gate, const float *up, float *out,
                      int64_t n_elems, float alpha, float limit);
    /* out = x * s elementwise; out may alias x (Gemma's embeddings are scaled by sqrt(dim)). */
    int (*scale)(sol_backend *be, const float *x, float s, float *out, int64_t n_elems);
    /* out = a + b elementwise; out may alias a or b. */
    int (*add)(sol_backend *be, const float *a, const float *b, float *out, int64_t n_elems);
    /* out[t] = row ids[t] of table, dequantized to float (n x table->cols). ids are checked. */
    int (*embed)(sol_backend *be, const sol_weight *table, const int32_t *ids, int n, float *out);
    /* dst[i] = src[rows[i]] for rows of `width` floats (src has src_rows rows): the rows that
     * sample, gathered before the LM head. rows is host memory and checked. */
    int (*get_rows)(sol_backend *be, const float *src, int64_t width, const int32_t *rows, int n,
                    int64_t src_rows, float *dst);

    /* Optional: ids[i] = the id of row i's largest value and vals[i] that value, for n rows of
     * width floats (x, ids and vals backend memory): the argmax a greedy sampler takes (ties to
     * the lowest id, NaN as -inf), so a greedy token needs only these 8 bytes a row off the
     * device instead of the row. NULL: the model downloads the rows and takes it on the host. */
    int (*argmax_rows)(sol_backend *be, const float *x, int n, int64_t width, int32_t *ids,
                       float *vals);

    /* Optional, a hint that never changes a result: the op called next (that one only) writes
     * rows that will be read as `ni` says, so a backend may prepare that input where the rows are
     * made (the CUDA backend: the RMSNorm and w's quantized activations in the last block of a
     * matmul_add's or glu_matmul_add's GEMV, w's activations in the attention's merge, the
     * gated product's in the gate/up GEMV), and the reading op then finds them made. NULL, or a
     * call that does not apply: nothing happens. */
    int (*next_input)(sol_backend *be, const sol_next_in *ni);

    /* Optional (mixtures of experts): out[t] = sum over j < k of w[t*k + j] * src[rows[t*k + j]]
     * for n tokens of `width` floats, summed in j order starting from the j = 0 term (llama.cpp's
     * order: the selected experts' weighted outputs, highest-ranked first); src has src_rows
     * rows. rows and w are host memory (n * k each) and rows are checked. A token's sum reads
     * only its own rows, so it never depends on the batch. NULL: the backend cannot run a
     * mixture of experts, and the model refuses such a file by name. */
    int (*moe_combine)(sol_backend *be, const float *src, int64_t width, const int32_t *rows,
                       const float *w, int n, int k, int64_t src_rows, float *out);

    /* KV cache. dtype is SOL_DT_F16 or SOL_DT_F32. Returns NULL with be->err set on failure. */
    sol_kv *(*kv_alloc)(sol_backend *be, int n_layers, int num_blocks, int block_size,
                        int n_kv_heads, int head_dim, sol_dtype dtype);
    void (*kv_free)(sol_backend *be, sol_kv *kv);
    /* Store k and v (n x kv_heads x head_dim) of `layer` at physical slots
     * slots[t] = block_id * block_size + offset. Slots are checked against the pool. */
    int (*kv_write)(sol_backend *be, sol_kv *kv, int layer, const float *k, const float *v,
                    const int32_t *slots, int n);
    /* Copy whole blocks (every layer, K and V): dst[i] <- src[i]; for copy-on-write forks. */
    int (*kv_copy_blocks)(sol_backend *be, sol_kv *kv, const int32_t *src_block_ids,
                          const int32_t *dst_block_ids, int count);
    /* The second KV tier: one whole block between the pool and host memory (to_host: host <-
     * block, else block <- host), laid out as [layer][K, V] of sol_kv_host_bytes / (2 layers)
     * each. NULL: the backend keeps no second tier (worker.kv.tier2_blocks is refused). */
    int (*kv_host_io)(sol_backend *be, sol_kv *kv, int32_t block, void *host, int to_host);
    size_t (*kv_host_bytes)(sol_backend *be, const sol_kv *kv); /* one block's bytes */
    /* The second tier's host memory where a device backend needs its own kind (page-locked, so
     * kv_host_io's copies run asynchronously in stream order, and any of the ranks' devices
     * reads it): NULL with be->err set when it cannot; free waits for queued copies first.
     * NULL ops: the engine maps a file (worker.kv.tier2_dir). */
    void *(*kv_host_alloc)(sol_backend *be, size_t bytes);
    void (*kv_host_free)(sol_backend *be, void *host);
    /* out[t][h] = softmax(scale * q[t][h] . K[lo..n_ctx)) V for token t's sequence, with query
     * head h reading KV head h / (heads / kv_heads) (grouped-query attention).
     * q and out are n x heads x head_dim; per_token[t] gives token t's block table and n_ctx.
     * lo = 0, or with a sliding window (window > 0) max(0, n_ctx - window): the token sees its
     * last `window` positions, itself included (llama.cpp's standard SWA), and block-table
     * entries before lo are never read (they may have been freed). sinks: NULL, or one float per
     * query head (a backend buffer): a learned logit that joins every softmax of that head with
     * no value, so out = sum_p e^(s_p - m) V_p / (e^(sink - m) + sum_p e^(s_p - m)) (gpt-oss's
     * attention sinks); a backend without them answers -ENOTSUP naming them. */
    int (*paged_attention)(sol_backend *be, sol_kv *kv, int layer, const float *q, float *out,
                           int n, int heads, int kv_heads, int head_dim, float scale, int window,
                           const float *sinks, const sol_attn_seq *per_token);

    /* Sum x (n_elems floats) in place across the ranks of `comm` (this backend is rank `rank`),
     * in stream order on a device backend: CPU ranks through the communicator's shared memory,
     * CUDA ranks through NCCL. The model calls it only when it is sharded. */
    int (*allreduce)(sol_backend *be, sol_tp_comm *comm, int rank, float *x, int64_t n_elems);
    /* Wait for queued work; returns the first error since the last call, or SOL_STEP_RERUN (> 0,
     * not an error) when the step begun with a graph key ran nothing and must be run again from
     * its step_begin (its outputs are not written; the backend records the second run). */
    int (*synchronize)(sol_backend *be);
    /* Optional, device backends: free and total device memory, for sizing the KV pool. NULL:
     * the backend computes in host memory (the engine reads MemAvailable). */
    int (*mem_info)(sol_backend *be, size_t *free_bytes, size_t *total_bytes);
    /* Optional: a forward pass starts; it ends with synchronize. graph_key > 0 (the model passes
     * the token count of a decode or verify step) lets a device backend record the pass as a
     * CUDA graph and replay it for later passes of the same key, recording nothing when they
     * launch what the graph holds (synchronize may then answer SOL_STEP_RERUN); 0: eagerly. */
    int (*step_begin)(sol_backend *be, int graph_key);
    /* Optional: one line of counters for logs and benchmarks ("cuda graphs: ..."); 0 or
     * -ENOTSUP. */
    int (*stats)(sol_backend *be, char *buf, size_t cap);
    /* Optional, device backends: 0, or a negative code with the reason when the device stopped
     * answering (a wait missed the tensor-parallel deadline and the stream did not drain after
     * the communicator was aborted): nothing queued will run, so the caller must stop using it
     * (the model marks its rank group broken). NULL: always healthy. */
    int (*health)(sol_backend *be, char *why, size_t cap);
} sol_backend_ops;

/* The common head of every backend; implementations embed it first in their own struct. */
struct sol_backend {
    const sol_backend_ops *ops;
    sol_err err; /* message of the last failed op */
    /* The llama.cpp x86 build whose float order the host-side steps around this backend follow
     * (the MoE router's softmax): SOL_GGML_AVX2 or SOL_GGML_AVX512 (ggml_float.h); 0 = AVX-512. */
    int ggml_lanes;
};

/* ---- the registry (registry.c): which backends this build holds, and the one constructor ----
 * A backend is named by a spec "NAME" or "NAME:VARIANT": "cpu" (best SIMD path, or the one env
 * SOL_CPU_ISA forces), "cpu:scalar" | "cpu:avx2" | "cpu:avx512", "cuda", "cuda:1" (device index).
 * Every build registers "cpu" and "cuda"; a build without the CUDA toolchain still lists "cuda"
 * so that asking for it gives the reason instead of "unknown backend". */
typedef struct sol_backend_opts {
    int threads; /* cpu: worker threads, 0 = all online cores */
    int device;  /* cuda: device index when the spec names none (--device) */
    /* cuda: 1 = matmul never changes kernels with the token count (GEMV tiles for prefill too),
     * so a token's logits do not depend on its batch; 0 = prefill through the F16 GEMM. The CPU
     * backend is always batch-invariant. */
    int batch_invariant;
    /* cuda: 1 = never record CUDA graphs (vLLM's --enforce-eager); 0 = decode steps replay
     * graphs. */
    int enforce_eager;
} sol_backend_opts;

#define SOL_BACKEND_VARIANT_MAX 24

typedef struct sol_backend_entry {
    const char *name;  /* "cpu" */
    const char *about; /* one line, for --help and `sol-generate --list-backends` */
    /* The variants this build and machine can run now (cpu: each ISA the CPU supports; cuda:
     * each visible device), into out[0..cap); returns how many. 0: the backend is registered
     * but cannot run here (sol_backend_new then says why). The op tests run every variant. */
    int (*variants)(char out[][SOL_BACKEND_VARIANT_MAX], int cap);
    /* variant: NULL or "" for the default. Caller owns the result (sol_backend_free). */
    sol_backend *(*create)(const char *variant, const sol_backend_opts *o, sol_err *err);
} sol_backend_entry;

/* The registered backends, in a fixed order (cpu first); returns their count. */
int sol_backend_registry(const sol_backend_entry **out);

/* The backend a spec names, created with opts (NULL: defaults). On failure NULL with err set to
 * a message that names the spec and the reason (unknown name with the list of known ones,
 * unsupported variant, no device and the driver's error). Caller owns the result. */
sol_backend *sol_backend_new(const char *spec, const sol_backend_opts *opts, sol_err *err);

/* "cpu, cuda, cuda-emu": the registry's names in its order, for messages (into out, cap bytes). */
void sol_backend_names(char *out, size_t cap);

/* Frees the backend, its scratch and every KV cache it still holds. NULL is a no-op. */
void sol_backend_free(sol_backend *be);

/* Thin wrappers so callers read like the math; nothing outside a backend calls be->ops directly. */
static inline int sol_reserve(sol_backend *be, int max_tokens, int64_t max_dim) {
    return be->ops->reserve ? be->ops->reserve(be, max_tokens, max_dim) : 0;
}
static inline int sol_weight_prepare(sol_backend *be, sol_weight *w) {
    return be->ops->weight_prepare(be, w);
}
static inline void *sol_buf_alloc(sol_backend *be, size_t bytes) {
    return be->ops->buf_alloc(be, bytes);
}
static inline void sol_buf_free(sol_backend *be, void *buf) {
    if (buf) be->ops->buf_free(be, buf);
}
static inline int sol_upload(sol_backend *be, void *dst_buf, const void *src_host, size_t bytes) {
    return be->ops->upload(be, dst_buf, src_host, bytes);
}
static inline int sol_download(sol_backend *be, void *dst_host, const void *src_buf, size_t bytes) {
    return be->ops->download(be, dst_host, src_buf, bytes);
}
static inline sol_kv *sol_kv_alloc(sol_backend *be, int n_layers, int num_blocks, int block_size,
                                   int n_kv_heads, int head_dim, sol_dtype dtype) {
    return be->ops->kv_alloc(be, n_layers, num_blocks, block_size, n_kv_heads, head_dim, dtype);
}
static inline void sol_kv_free(sol_backend *be, sol_kv *kv) {
    if (kv) be->ops->kv_free(be, kv);
}
static inline int sol_kv_copy_blocks(sol_backend *be, sol_kv *kv, const int32_t *src_block_ids,
                                     const int32_t *dst_block_ids, int count) {
    return be->ops->kv_copy_blocks(be, kv, src_block_ids, dst_block_ids, count);
}
static inline int sol_kv_host_io(sol_backend *be, sol_kv *kv, int32_t block, void *host,
                                 int to_host) {
    return be->ops->kv_host_io(be, kv, block, host, to_host);
}
static inline int sol_allreduce(sol_backend *be, sol_tp_comm *comm, int rank, float *x,
                                int64_t n_elems) {
    return be->ops->allreduce(be, comm, rank, x, n_elems);
}
static inline int sol_synchronize(sol_backend *be) {
    return be->ops->synchronize(be);
}
static inline const char *sol_backend_name(const sol_backend *be) {
    return be->ops->name;
}
static inline int sol_matmul(sol_backend *be, const sol_weight *w, const float *x, float *y,
                             int n) {
    return be->ops->matmul(be, w, x, y, n);
}
static inline int sol_matmul_many(sol_backend *be, const sol_weight *const *ws, float *const *ys,
                                  int count, const float *x, int n) {
    if (be->ops->matmul_many) return be->ops->matmul_many(be, ws, ys, count, x, n);
    for (int i = 0; i < count; i++) {
        int rc = be->ops->matmul(be, ws[i], x, ys[i], n);
        if (rc) return rc;
    }
    return 0;
}
static inline int sol_rmsnorm(sol_backend *be, const float *x, const float *w, float *out, int n,
                              int dim, float eps) {
    return be->ops->rmsnorm(be, x, w, out, n, dim, eps);
}
static inline int sol_rope(sol_backend *be, float *x, const int32_t *pos, int n, int heads,
                           int head_dim, const sol_rope_params *p) {
    return be->ops->rope(be, x, pos, n, heads, head_dim, p);
}
static inline int sol_silu_mul(sol_backend *be, const float *gate, const float *up, float *out,
                               int64_t n_elems) {
    return be->ops->silu_mul(be, gate, up, out, n_elems);
}
static inline int sol_gelu_mul(sol_backend *be, const float *gate, const float *up, float *out,
                               int64_t n_elems) {
    return be->ops->gelu_mul(be, gate, up, out, n_elems);
}
static inline int sol_swiglu_oai(sol_backend *be, const float *gate, const float *up, float *out,
                                 int64_t n_elems, float alpha, float limit) {
    if (!be->ops->swiglu_oai)
        return sol_err_set(&be->err, -ENOTSUP, "backend %s has no swiglu_oai (gpt-oss's gate)",
                           be->ops->name);
    return be->ops->swiglu_oai(be, gate, up, out, n_elems, alpha, limit);
}
static inline int sol_scale(sol_backend *be, const float *x, float s, float *out, int64_t n_elems) {
    return be->ops->scale(be, x, s, out, n_elems);
}
static inline int sol_add(sol_backend *be, const float *a, const float *b, float *out,
                          int64_t n_elems) {
    return be->ops->add(be, a, b, out, n_elems);
}
static inline int sol_embed(sol_backend *be, const sol_weight *table, const int32_t *ids, int n,
                            float *out) {
    return be->ops->embed(be, table, ids, n, out);
}
static inline int sol_get_rows(sol_backend *be, const float *src, int64_t width,
                               const int32_t *rows, int n, int64_t src_rows, float *dst) {
    return be->ops->get_rows(be, src, width, rows, n, src_rows, dst);
}
/* Free/total device memory; -ENOTSUP for a host backend. */
/* y += x W^T (n x M); tmp (n x M floats, a backend buffer) is used only by a backend without
 * matmul_add. */
static inline int sol_moe_combine(sol_backend *be, const float *src, int64_t width,
                                  const int32_t *rows, const float *w, int n, int k,
                                  int64_t src_rows, float *out) {
    if (!be->ops->moe_combine)
        return sol_err_set(&be->err, -ENOTSUP, "backend %s has no moe_combine", be->ops->name);
    return be->ops->moe_combine(be, src, width, rows, w, n, k, src_rows, out);
}
static inline int sol_matmul_add(sol_backend *be, const sol_weight *w, const float *x, float *y,
                                 float *tmp, int n) {
    if (be->ops->matmul_add) return be->ops->matmul_add(be, w, x, y, n);
    int rc = be->ops->matmul(be, w, x, tmp, n);
    return rc ? rc : be->ops->add(be, y, tmp, y, (int64_t)n * w->rows);
}

/* See norm_matmul_many. */
static inline int sol_norm_matmul_many(sol_backend *be, const float *x, const float *norm,
                                       float eps, float *xn, const sol_weight *const *ws,
                                       const float *const *bs, float *const *ys, int count, int n) {
    if (be->ops->norm_matmul_many)
        return be->ops->norm_matmul_many(be, x, norm, eps, xn, ws, bs, ys, count, n);
    int rc = norm ? be->ops->rmsnorm(be, x, norm, xn, n, (int)ws[0]->cols, eps) : 0;
    if (!rc) rc = sol_matmul_many(be, ws, ys, count, norm ? xn : x, n);
    for (int i = 0; i < count && bs && !rc; i++)
        for (int t = 0; bs[i] && t < n && !rc; t++) {
            float *y = ys[i] + (size_t)t * (size_t)ws[i]->rows;
            rc = be->ops->add(be, y, bs[i], y, ws[i]->rows);
        }
    return rc;
}

/* See glu_matmul_add; tmp (n x M floats) is used only by a backend without matmul_add. */
static inline int sol_glu_matmul_add(sol_backend *be, const sol_weight *w, const float *gate,
                                     const float *up, int gelu, float *glu, float *y, float *tmp,
                                     int n) {
    if (be->ops->glu_matmul_add) return be->ops->glu_matmul_add(be, w, gate, up, gelu, glu, y, n);
    int64_t elems = (int64_t)n * w->cols;
    int rc = gelu ? be->ops->gelu_mul(be, gate, up, glu, elems)
                  : be->ops->silu_mul(be, gate, up, glu, elems);
    return rc ? rc : sol_matmul_add(be, w, glu, y, tmp, n);
}

static inline int sol_mem_info(sol_backend *be, size_t *free_bytes, size_t *total_bytes) {
    if (!be->ops->mem_info) return -ENOTSUP;
    return be->ops->mem_info(be, free_bytes, total_bytes);
}
static inline int sol_step_begin(sol_backend *be, int graph_key) {
    return be->ops->step_begin ? be->ops->step_begin(be, graph_key) : 0;
}
static inline int sol_backend_stats(sol_backend *be, char *buf, size_t cap) {
    return be->ops->stats ? be->ops->stats(be, buf, cap) : -ENOTSUP;
}
static inline int sol_backend_health(sol_backend *be, char *why, size_t cap) {
    return be->ops->health ? be->ops->health(be, why, cap) : 0;
}
static inline int sol_kv_write(sol_backend *be, sol_kv *kv, int layer, const float *k,
                               const float *v, const int32_t *slots, int n) {
    return be->ops->kv_write(be, kv, layer, k, v, slots, n);
}
static inline int sol_rope_kv_write(sol_backend *be, sol_kv *kv, int layer, float *q, float *k,
                                    const float *v, const int32_t *pos, const int32_t *slots, int n,
                                    int heads, int kv_heads, int head_dim,
                                    const sol_rope_params *p) {
    if (be->ops->rope_kv_write)
        return be->ops->rope_kv_write(be, kv, layer, q, k, v, pos, slots, n, heads, kv_heads,
                                      head_dim, p);
    int rc = sol_rope(be, q, pos, n, heads, head_dim, p);
    if (!rc) rc = sol_rope(be, k, pos, n, kv_heads, head_dim, p);
    return rc ? rc : sol_kv_write(be, kv, layer, k, v, slots, n);
}
/* argmax_rows' rule on a host row of n floats: the id of the largest value, the first of
 * equals (the lowest id), NaN never (an all-NaN or all -inf row: id 0, *val -inf). */
static inline int32_t sol_argmax_f32(const float *row, int64_t n, float *val) {
    float best = -INFINITY;
    int32_t id = 0;
    for (int64_t j = 0; j < n; j++)
        if (row[j] > best) best = row[j], id = (int32_t)j;
    *val = best;
    return id;
}

/* See argmax_rows; -ENOTSUP without it. */
static inline int sol_argmax_rows(sol_backend *be, const float *x, int n, int64_t width,
                                  int32_t *ids, float *vals) {
    if (!be->ops->argmax_rows)
        return sol_err_set(&be->err, -ENOTSUP, "backend %s has no argmax_rows", be->ops->name);
    return be->ops->argmax_rows(be, x, n, width, ids, vals);
}

/* See next_input: 0 and nothing done without it. */
static inline int sol_next_input(sol_backend *be, const sol_next_in *ni) {
    return be->ops->next_input ? be->ops->next_input(be, ni) : 0;
}

/* See qkv_rope_kv. */
static inline int sol_qkv_rope_kv(sol_backend *be, const float *x, const float *norm, float eps,
                                  float *xn, const sol_weight *const *ws, const float *const *bs,
                                  float *const *ys, int n, const sol_qkv_rope *r) {
    if (be->ops->qkv_rope_kv) return be->ops->qkv_rope_kv(be, x, norm, eps, xn, ws, bs, ys, n, r);
    int rc = sol_norm_matmul_many(be, x, norm, eps, xn, ws, bs, ys, 3, n);
    if (!rc && r->q_norm &&
        ((rc = be->ops->rmsnorm(be, ys[0], r->q_norm, ys[0], n * r->heads, r->head_dim, r->eps)) ||
         (rc =
              be->ops->rmsnorm(be, ys[1], r->k_norm, ys[1], n * r->kv_heads, r->head_dim, r->eps))))
        return rc;
    return rc ? rc
              : sol_rope_kv_write(be, r->kv, r->layer, ys[0], ys[1], ys[2], r->pos, r->slots, n,
                                  r->heads, r->kv_heads, r->head_dim, r->rope);
}
static inline int sol_paged_attention(sol_backend *be, sol_kv *kv, int layer, const float *q,
                                      float *out, int n, int heads, int kv_heads, int head_dim,
                                      float scale, const sol_attn_seq *per_token) {
    return be->ops->paged_attention(be, kv, layer, q, out, n, heads, kv_heads, head_dim, scale, 0,
                                    NULL, per_token);
}
/* The same over the last `window` positions only (sliding-window layers); 0 = all. */
static inline int sol_paged_attention_swa(sol_backend *be, sol_kv *kv, int layer, const float *q,
                                          float *out, int n, int heads, int kv_heads, int head_dim,
                                          float scale, int window, const sol_attn_seq *per_token) {
    return be->ops->paged_attention(be, kv, layer, q, out, n, heads, kv_heads, head_dim, scale,
                                    window, NULL, per_token);
}
/* The same with attention sinks (one logit per query head; NULL: none). */
static inline int sol_paged_attention_sinks(sol_backend *be, sol_kv *kv, int layer, const float *q,
                                            float *out, int n, int heads, int kv_heads,
                                            int head_dim, float scale, int window,
                                            const float *sinks, const sol_attn_seq *per_token) {
    return be->ops->paged_attention(be, kv, layer, q, out, n, heads, kv_heads, head_dim, scale,
                                    window, sinks, per_token);
}

#endif
