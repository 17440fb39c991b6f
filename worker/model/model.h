/* model: a decoder-only transformer (the architectures of arch.h) loaded from GGUF and its forward
 * pass over a flattened batch of tokens from many sequences (prefill and decode share one path).
 *
 * The model borrows the GGUF mapping for its weights (zero copy) and a backend for compute; it
 * owns only its activation scratch, sized once by model_reserve so the hot path never allocates.
 * K/V go to a backend KV cache addressed by physical slots, so a contiguous cache (one sequence,
 * consecutive blocks) and the paged cache of the serving engine are the same thing to the model. */
#ifndef SOL_MODEL_H
#define SOL_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "arch.h"
#include "backend.h"
#include "err.h"
#include "gguf.h"

typedef struct model_hparams {
    const model_arch *arch;
    int32_t n_vocab;
    int32_t dim;              /* embedding_length */
    int32_t n_layers;         /* block_count */
    int32_t n_heads;          /* attention.head_count */
    int32_t n_kv_heads;       /* attention.head_count_kv (GQA when < n_heads) */
    int32_t head_dim;         /* attention.key_length, else dim / n_heads */
    int32_t q_dim;            /* n_heads * head_dim (differs from dim in e.g. Qwen3) */
    int32_t ffn;              /* feed_forward_length */
    int32_t ctx_len;          /* context_length the model was trained for */
    float eps;                /* attention.layer_norm_rms_epsilon */
    sol_rope_params rope;     /* global layers */
    sol_rope_params rope_swa; /* sliding-window layers (ARCH_SWA): rope.freq_base_swa, no scaling */
    int32_t swa_window;       /* attention.sliding_window; 0 = every layer sees the whole context */
    int32_t kv_window;        /* swa_window when every layer is a sliding-window one, else 0:
                                 KV blocks older than this many positions are never read again */
    float attn_scale;         /* softmax scale: 1/sqrt(head_dim) unless the architecture says */
    float softcap;            /* final_logit_softcapping (ARCH_SOFTCAP); 0 = none */
    int tied_output;          /* output head shares token_embd.weight */
    int32_t pooling_type;     /* <arch>.pooling_type as llama.cpp numbers it (0 none, 1 mean,
                                 2 cls, 3 last, 4 rank); -1 when the file does not say */
    sol_dtype weight_type;
    /* Mixture of experts (expert_count > 0): every layer's FFN is n_expert experts of width
     * ffn_exp (expert_feed_forward_length), n_expert_used of them per token, chosen by the
     * router ffn_gate_inp: softmax, top-k, weights renormalized to sum 1, then times
     * expert_w_scale (expert_weights_scale; 0 = 1). 0 experts: the dense FFN of width ffn. */
    int32_t n_expert, n_expert_used, ffn_exp;
    float expert_w_scale;
} model_hparams;

typedef struct model model;

/* The KV cache of a model: one backend cache per tensor-parallel rank, one block table. */
typedef struct model_kv model_kv;

/* Tensor parallelism (worker.tensor_parallel): the model sharded over n ranks, one backend and
 * one thread each, in lock-step with an all-reduce after attn_output and ffn_down. */
typedef struct model_tp_config {
    int n;               /* ranks, 1..8; 1 = not sharded */
    int timeout_ms;      /* a rank or collective slower than this fails the step (tp_timeout_ms) */
    const char *backend; /* backend spec for ranks 1..n-1 ("cpu", "cuda", "cuda-emu") */
    sol_backend_opts opts; /* their options; rank r gets device opts.device + r */
} model_tp_config;

/* Opens `path` (gguf_flags: GGUF_OPEN_NO_MMAP / GGUF_OPEN_MLOCK), checks every key and tensor the
 * architecture needs ("m.gguf: tensor blk.3.attn_q.weight: expected shape ..."), and prepares the
 * weights on `be` (borrowed: it must outlive the model). Caller owns the result. */
model *model_load(const char *path, int gguf_flags, sol_backend *be, sol_err *err);
void model_free(model *m); /* NULL is a no-op */
/* A mixture of experts: every forward pass from now on writes the experts its router chose, a
 * line "LAYER POS E0 E1 ..." per layer and token in rank order, to f (borrowed; NULL: stop) -
 * what tests/peer/llamacpp_experts prints for llama.cpp's. */
void model_log_experts(model *m, FILE *f);

/* model_load sharded over tp->n ranks: rank 0 on `be` (borrowed), ranks 1..n-1 on backends the
 * model creates and owns. The shapes must divide: head_count, head_count_kv (or n by it), the
 * FFN width and the quantization blocks of the split columns; else an error naming the key and
 * the numbers. tp->n = 1 is model_load. */
model *model_load_tp(const char *path, int gguf_flags, sol_backend *be, const model_tp_config *tp,
                     sol_err *err);
/* CPU threads for each of n ranks when the worker has `threads` (0: all online cores): the
 * cores divided between the ranks, at least one each. */
int model_tp_rank_threads(int threads, int n);
/* Rank 0's all-reduces since load and the time in them (waits for the other ranks included);
 * 0 and 0 when not sharded. */
void model_tp_time(const model *m, uint64_t *calls, uint64_t *ns);
/* Ranks the model is sharded over (1 when not). */
int model_tp_size(const model *m);
/* The backend of rank r in [0, model_tp_size) (rank 0's is model_backend's); NULL outside. For
 * the tests and counters of every rank (sol_backend_stats). */
sol_backend *model_tp_backend(const model *m, int r);
/* 0, or (after a rank or collective missed tp_timeout_ms: the group is stuck and every later
 * forward fails at once) a negative code with the reason in why. */
int model_health(const model *m, char *why, size_t cap);

const model_hparams *model_get_hparams(const model *m);
const gguf_file *model_gguf(const model *m);
sol_backend *model_backend(const model *m);
/* The file's general.name, or the file name without its folder and extension. */
const char *model_name(const model *m);

/* One line for the load log: "qwen3, 0.60 B parameters, weights q4_k x 154 + q6_k x 29 + f32 x 57"
 * (every tensor of the file counted by type; M instead of B below 0.1 B). */
void model_describe(const model *m, char *buf, size_t cap);

/* The weight bytes one decoded token reads: every matrix but the embedding table (one row), a
 * mixture's experts at k / n_expert of theirs (the roofline's bytes, docs/benchmarks.md). */
uint64_t model_bytes_per_token(const model *m);

/* Size activation scratch for batches of up to max_tokens tokens, max_logits of which want
 * logits. Called once at start-up (model_forward grows scratch itself if it was not). */
int model_reserve(model *m, int max_tokens, int max_logits, sol_err *err);

/* A KV cache for this model's shape on its backend(s) (num_blocks blocks of block_size tokens;
 * each rank holds its KV heads). */
model_kv *model_kv_new(model *m, int num_blocks, int block_size, sol_dtype dtype, sol_err *err);
void model_kv_free(model *m, model_kv *kv);
/* Copy whole blocks dst[i] <- src[i] on every rank (copy-on-write forks). */
int model_kv_copy_blocks(model *m, model_kv *kv, const int32_t *src, const int32_t *dst, int count,
                         sol_err *err);

/* Bytes one token of context takes in a KV cache of `dtype` (all layers, K and V) in the memory
 * the pool is sized from: one device's (a rank's heads) when the backend has device memory, else
 * host memory (all ranks' heads). */
size_t model_kv_bytes_per_token(const model *m, sol_dtype dtype);
/* The second KV tier: one block's bytes in host memory (every rank's shard; 0 when a rank's
 * backend keeps no second tier), and its copy to (to_host) or from host memory. */
size_t model_kv_host_bytes(model *m, const model_kv *kv);
int model_kv_host_io(model *m, model_kv *kv, int32_t block, unsigned char *host, int to_host,
                     sol_err *err);
/* The tier's store from the backend (page-locked on a GPU: backend.h kv_host_alloc), or NULL:
 * with *err unset the backend has no such memory (the caller maps a file), else it failed. Freed
 * with model_kv_host_free once every rank's queued copies ran. */
void *model_kv_host_alloc(model *m, size_t bytes, sol_err *err);
void model_kv_host_free(model *m, void *host);

/* Weight bytes one decode step reads: every tensor of the file, less the embedding table when a
 * separate output head exists (a step reads one row of it). Decode is memory-bound, so the ratio
 * of two models' figures is the ratio of their step costs (speculative decoding's draft cost). */
uint64_t model_step_bytes(const model *m);

/* One forward step. Token t is tokens[t] at position pos[t] of its sequence; its K/V are written
 * at physical slot slots[t] and it attends through attn[t] (block table, n_ctx = pos[t] + 1 for
 * causal decoding). Tokens of one sequence must appear in position order within a batch.
 * Logits (n_vocab floats each) are computed only for the rows listed in logit_rows. */
typedef struct model_batch {
    int n;
    const int32_t *tokens;
    const int32_t *pos;
    const int32_t *slots;
    const sol_attn_seq *attn;
    int n_logits;
    const int32_t *logit_rows;
    /* Optional host memory for n_hidden x dim floats: the final-normed hidden states (what the
     * head would multiply) of rows hidden_rows[0, n_hidden), for embeddings. NULL: not wanted. */
    float *hidden;
    int n_hidden;
    const int32_t *hidden_rows;
    /* Optional host memory for n_logits ids: each row's greedy token (the argmax of its logits,
     * ties to the lowest id, NaN as -inf), taken on the device where the backend can, so only
     * the ids leave it. A row whose largest logit is not finite gets -1 and its logits in the
     * logits rows (the sampler's checks decide); the other rows' logits are not written. NULL:
     * every row's logits. */
    int32_t *argmax_ids;
} model_batch;

/* Writes n_logits x n_vocab floats to `logits` (host memory). Returns 0 or a negative code. */
int model_forward(model *m, model_kv *kv, const model_batch *b, float *logits, sol_err *err);

#endif
