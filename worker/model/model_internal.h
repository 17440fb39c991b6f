/* model_internal: the model's private structures. A model (model.c, the public API) is rank 0 and
 * the group of the other ranks (model_tp.c: one thread per rank in lock-step); a rank
 * (model_rank.c: loading, sharding, scratch; model_forward.c: its forward pass) knows nothing of
 * the group, so the calls only go down: model -> group -> rank. Nothing outside worker/model
 * includes it. */
#ifndef SOL_MODEL_INTERNAL_H
#define SOL_MODEL_INTERNAL_H

#include "model.h"
#include "tp_comm.h"

typedef struct layer_weights {
    const float *attn_norm, *ffn_norm;
    const float *attn_post_norm, *ffn_post_norm; /* ARCH_POST_NORMS */
    const float *bq, *bk, *bv;                   /* ARCH_QKV_BIAS */
    const float *q_norm, *k_norm;                /* ARCH_QK_NORM: head_dim each */
    sol_weight wq, wk, wv, wo;
    sol_weight w_gate, w_up, w_down;
    /* Mixture of experts: the router (n_expert x dim, F32 in files as llama.cpp writes them)
     * and each expert's slice of the 3-D ffn_{gate,up,down}_exps tensors (NULL: dense). */
    sol_weight w_router;
    sol_weight *e_gate, *e_up, *e_down;
    /* gpt-oss: attention sinks (this rank's heads), the attention output's bias (rank 0 only:
     * the all-reduce would add it once per rank), the router's bias, and each expert's biases
     * (its slice of gate/up; down's on rank 0 only), one vector per expert, NULL when absent. */
    const float *sinks, *bo, *router_b;
    const float **eb_gate, **eb_up, **eb_down;
} layer_weights;

typedef struct model_scratch {
    int cap_tokens, cap_logits;
    float *x, *xb, *xb2; /* n x dim */
    float *q, *att;      /* n x q_dim (this rank's heads x head_dim) */
    float *k, *v;        /* n x kv_dim (this rank's KV heads) */
    float *hb, *hb2;     /* n x ffn (this rank's slice) */
    float *xl;           /* n_logits x dim: rows that want logits */
    /* Mixture of experts: the router's logits (n x n_expert), each token's k rows grouped by
     * expert (n*k x dim in, n*k x ffn_exp gated, n*k x dim out), and their host tables. */
    float *r_logits, *ex, *eh, *eh2, *ey;
    float *h_logits, *h_w;   /* host: n x n_expert, n x k weights in each token's rank order */
    int32_t *h_rows, *h_pos; /* host: the n*k token rows grouped by expert; where each of a
                                token's k choices landed among them */
    int32_t *h_count;        /* host: tokens per expert this step */
    float *logits;           /* n_logits x vocab (this rank's slice), on the backend */
    int32_t *amax;           /* on the backend: n_logits argmax ids, then their values' bits */
    int32_t *h_amax;         /* host: the same, downloaded */
} model_scratch;

/* This rank's part of the model (Megatron-style). With n = 1 it is the whole model. q/k/v and
 * gate/up are split by output rows (whole heads; KV heads replicated when kv_heads < n),
 * attn_output and ffn_down by input columns (followed by the all-reduce), the head by vocabulary
 * rows; embeddings and norms are replicated. */
typedef struct model_shard {
    int rank, n;
    int heads, kv_heads, head0, kv_head0;
    int q_dim, kv_dim, ffn, ffn0;
    int ffn_exp, ffn_exp0; /* each expert's FFN columns, split as the dense FFN's */
    int vocab, vocab0;
    sol_tp_comm *comm; /* borrowed from the group; NULL when n = 1 */
} model_shard;

typedef struct model_group model_group; /* model_tp.c */

typedef struct model_rank model_rank;

/* One rank: the whole model when n = 1. */
struct model_rank {
    gguf_file *gguf;
    sol_backend *be;
    model_hparams hp; /* the whole model's sizes; the shard says what this rank holds */
    model_shard sh;
    char name[128];
    sol_weight tok_embd, output;
    const float *output_norm;
    layer_weights *layers;
    uint8_t *swa; /* per layer: 1 = sliding-window attention (ARCH_SWA), NULL = none */
    model_scratch s;
    void **owned; /* column slices copied out of the file (attn_output, ffn_down) */
    int n_owned;
    FILE *expert_log; /* model_log_experts (borrowed; NULL: none) */
};

/* The public model: rank 0 on the caller's thread, and with tensor parallelism the group of the
 * other ranks. */
struct model {
    model_rank *r0;
    model_group *grp; /* NULL without tensor parallelism */
};

/* One rank's KV caches: per rank the heads it holds, one block table for all. */
struct model_kv {
    int n;
    sol_kv *r[SOL_TP_MAX];
};

/* model_rank.c: rank `rank` of `n` (rank 0 of 1: the whole model) on `be`, sharing nothing. */
model_rank *rank_load(const char *path, int gguf_flags, sol_backend *be, int rank, int n,
                      sol_tp_comm *comm, sol_err *err);
void rank_free(model_rank *m);
/* model_hparams.c: the sizes and graph options from the file's keys into m->hp (m->swa too). */
int rank_load_hparams(model_rank *m, sol_err *err);
int rank_reserve(model_rank *m, int max_tokens, int max_logits, sol_err *err);

/* model_forward.c: a batch the model can run (ids, positions, rows), and this rank's forward
 * pass; its logits columns [vocab0, vocab0 + vocab) of each row go to `logits` (n_logits x
 * n_vocab, host). */
int rank_check_batch(const model_rank *m, const model_batch *b, sol_err *err);
int rank_forward(model_rank *m, sol_kv *kv, const model_batch *b, float *logits, sol_err *err);
/* Whether rank_forward fills b->argmax_ids itself (on the backend: one rank holds the whole
 * vocabulary and no softcap follows the head); else model_forward takes them from the logits. */
int rank_device_argmax(const model_rank *m, const model_batch *b);

/* model_tp.c: ranks 1..n-1 of a group (each its own backend and thread), stepped with rank 0. */
model_group *tp_group_new(const char *path, int gguf_flags, const model_tp_config *tp,
                          sol_tp_comm *comm, sol_err *err);
void tp_group_free(model_group *g);
model_rank *tp_rank(model_group *g, int r); /* r in 1..n-1 */
int tp_forward(model_group *g, model_rank *r0, model_kv *kv, const model_batch *b, float *logits,
               sol_err *err);
int tp_health(const model_group *g, char *why, size_t cap);

#endif
