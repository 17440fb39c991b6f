/* model_forward: one rank's decoder forward pass. Reads like the math (llama2.c's shape): embed,
 * then per layer attention and the gated FFN with pre-RMSNorm and residuals, then the final norm
 * and the head; the architecture (arch.h) adds q/k/v biases, q/k norms and the RoPE pairing. A
 * sharded rank computes its heads and FFN slice and all-reduces after attn_output and ffn_down;
 * every rank then holds the whole residual stream. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "arch.h"
#include "model_internal.h"
#include "moe_route.h"

/* Largest decode/verify step recorded as a CUDA graph (vLLM captures up to 512 by default; Sol's
 * steps are smaller: max_num_seqs x (1 + speculative k)). */
enum { MODEL_GRAPH_MAX_TOKENS = 256 };

/* q, k and v of the batch, roped, with k and v in layer l's cache: the attention norm, the
 * projections with the architecture's biases (x normalized and quantized once, biases in the
 * store), the per-head q/k norms where the architecture has them (Qwen3, Gemma-3), rope and the
 * cache write, as one dispatch (qkv_rope_kv: a device ropes and writes the cache in the
 * projections' store, or with the norms in one launch after them). */
static int qkv_rope_kv(model_rank *m, sol_kv *kv, int l, const model_batch *b,
                       const sol_rope_params *rope) {
    const model_hparams *hp = &m->hp;
    const model_shard *sh = &m->sh;
    const layer_weights *L = &m->layers[l];
    model_scratch *s = &m->s;
    const sol_weight *ws[3] = {&L->wq, &L->wk, &L->wv};
    const float *const *bs = L->bq ? (const float *[]){L->bq, L->bk, L->bv} : NULL;
    float *ys[3] = {s->q, s->k, s->v};
    sol_qkv_rope r = {kv,           l,    b->pos,    b->slots,  sh->heads, sh->kv_heads,
                      hp->head_dim, rope, L->q_norm, L->k_norm, hp->eps};
    return sol_qkv_rope_kv(m->be, s->x, L->attn_norm, hp->eps, s->xb, ws, bs, ys, b->n, &r);
}

/* A sharded rank's partial sums of attn_output / ffn_down become the whole on every rank. */
static int allreduce(model_rank *m, float *x, int64_t n) {
    return m->sh.n > 1 ? sol_allreduce(m->be, m->sh.comm, m->sh.rank, x, n) : 0;
}

/* x += post_norm(xb2) (ARCH_POST_NORMS), else x += xb2: a block's output joins the stream. */
static int residual(model_rank *m, const float *post_norm, int n) {
    const model_hparams *hp = &m->hp;
    model_scratch *s = &m->s;
    int rc;
    if (post_norm && (rc = sol_rmsnorm(m->be, s->xb2, post_norm, s->xb2, n, hp->dim, hp->eps)))
        return rc;
    return sol_add(m->be, s->x, s->xb2, s->x, (int64_t)n * hp->dim);
}

/* How x is read after layer l's attention (ffn 0) or its feed-forward block (ffn 1): the next
 * RMSNorm and the first weight it feeds, with the xn that op passes (the FFN's gate, the next
 * layer's q, the head after the last layer; a mixture of experts normalizes on its own: none).
 * Told to the backend just before the op that adds to x (sol_next_input, a hint: a device may
 * make that norm and the weight's activations in the same launch). */
static sol_next_in next_norm(const model_rank *m, int l, int ffn) {
    const model_hparams *hp = &m->hp;
    const model_scratch *s = &m->s;
    if (!ffn && hp->n_expert) return (sol_next_in){0};
    const layer_weights *L = ffn && l + 1 < hp->n_layers ? &m->layers[l + 1] : &m->layers[l];
    if (!ffn)
        return (sol_next_in){.w = &L->w_gate, .norm = L->ffn_norm, .eps = hp->eps, .xn = s->xb};
    if (l + 1 < hp->n_layers)
        return (sol_next_in){.w = &L->wq, .norm = L->attn_norm, .eps = hp->eps, .xn = s->xb};
    return (sol_next_in){.w = &m->output, .norm = m->output_norm, .eps = hp->eps, .xn = s->xb2};
}

/* x += W in + bias (n rows): a block's output projection joining the residual stream. With one
 * rank, no bias and no post-norm the add happens in the matmul's epilogue (sol_matmul_add; the
 * same bits; `then`: how x is read next, next_norm), else into xb2 (the bias in the matmul's
 * store), all-reduced across ranks, post-normed, then added. */
static int project_residual(model_rank *m, const sol_weight *w, const float *bias, const float *in,
                            const float *post_norm, int n, const sol_next_in *then) {
    model_scratch *s = &m->s;
    int rc;
    if (m->sh.n == 1 && !post_norm && !bias)
        return (rc = sol_next_input(m->be, then)) ? rc
                                                  : sol_matmul_add(m->be, w, in, s->x, s->xb2, n);
    if ((rc = bias ? sol_norm_matmul_many(m->be, in, NULL, 0.0f, NULL, (const sol_weight *[]){w},
                                          (const float *[]){bias}, (float *[]){s->xb2}, 1, n)
                   : sol_matmul(m->be, w, in, s->xb2, n)) ||
        (rc = allreduce(m, s->xb2, (int64_t)n * m->hp.dim)))
        return rc;
    return residual(m, post_norm, n);
}

/* Attention block of layer l: x += Wo · attn(rope(Wq·norm(x)), rope(Wk·norm(x)), Wv·norm(x)). */
static int attention(model_rank *m, sol_kv *kv, int l, const model_batch *b) {
    const model_hparams *hp = &m->hp;
    const model_shard *sh = &m->sh;
    const layer_weights *L = &m->layers[l];
    model_scratch *s = &m->s;
    sol_backend *be = m->be;
    int n = b->n, rc, slides = m->swa && m->swa[l];
    const sol_rope_params *rope = slides ? &hp->rope_swa : &hp->rope;
    if ((rc = qkv_rope_kv(m, kv, l, b, rope))) return rc;
    float scale = hp->attn_scale;
    if (hp->arch->flags & ARCH_Q_PRESCALE) {
        int64_t nq = (int64_t)n * sh->heads * hp->head_dim;
        if ((rc = sol_scale(be, s->q, scale, s->q, nq))) return rc;
        scale = 1.0f;
    }
    /* the output is read by the o projection as it is: a device may quantize it for wo there */
    if ((rc = sol_next_input(be, &(sol_next_in){.w = &L->wo})) ||
        (rc = sol_paged_attention_sinks(be, kv, l, s->q, s->att, n, sh->heads, sh->kv_heads,
                                        hp->head_dim, scale, slides ? hp->swa_window : 0, L->sinks,
                                        b->attn)))
        return rc;
    sol_next_in then = next_norm(m, l, 0);
    return project_residual(m, &L->wo, L->bo, s->att, L->attn_post_norm, n, &then);
}

/* Gated FFN: x += W_down · (act(W_gate·norm(x)) * W_up·norm(x)), act = SiLU or GELU (Gemma):
 * the norm with the gate/up projections (x normalized and quantized once), and, with one rank
 * and no post-norm, the gated product made where the down projection reads it, the residual
 * added in its store. */
static int feed_forward(model_rank *m, int l, int n) {
    const model_hparams *hp = &m->hp;
    const layer_weights *L = &m->layers[l];
    model_scratch *s = &m->s;
    sol_backend *be = m->be;
    int64_t width = (int64_t)n * m->sh.ffn;
    int gelu = (hp->arch->flags & ARCH_GELU) != 0, rc;
    /* with one rank and no post-norm the down projection reads act(gate) * up (glu_matmul_add):
     * a device may quantize that product where gate and up are made */
    int glu = m->sh.n == 1 && !L->ffn_post_norm;
    if ((glu && (rc = sol_next_input(be, &(sol_next_in){.w = &L->w_down, .glu = 1 + gelu}))) ||
        (rc = sol_norm_matmul_many(be, s->x, L->ffn_norm, hp->eps, s->xb,
                                   (const sol_weight *[]){&L->w_gate, &L->w_up}, NULL,
                                   (float *[]){s->hb, s->hb2}, 2, n)))
        return rc;
    sol_next_in then = next_norm(m, l, 1);
    if (glu)
        return (rc = sol_next_input(be, &then)) ? rc
                                                : sol_glu_matmul_add(be, &L->w_down, s->hb, s->hb2,
                                                                     gelu, s->hb, s->x, s->xb2, n);
    if ((rc = gelu ? sol_gelu_mul(be, s->hb, s->hb2, s->hb, width)
                   : sol_silu_mul(be, s->hb, s->hb2, s->hb, width)))
        return rc;
    return project_residual(m, &L->w_down, NULL, s->hb, L->ffn_post_norm, n, &then);
}

/* Mixture of experts: x += sum over each token's k experts of weight * W_down_e ·
 * (SiLU(W_gate_e·norm(x)) * W_up_e·norm(x)) (gpt-oss: biases on the router and every
 * projection, its own gate and weights). The router's logits come to the host (moe_route.c
 * picks and weighs the experts there), the tokens are gathered by expert so each active expert
 * runs one matmul over just its tokens (decode: a GEMV over the chosen experts' rows only), and
 * moe_combine sums each token's k outputs in rank order. A sharded rank holds every expert's
 * slice of columns, so its sums are partial and join in the one all-reduce. */
/* The choices of layer l for the batch's tokens (model_log_experts), before grouping. */
static void log_experts(const model_rank *m, int l, const model_batch *b) {
    int k = m->hp.n_expert_used;
    for (int t = 0; t < b->n; t++) {
        fprintf(m->expert_log, "%d %d", l, b->pos[t]);
        for (int j = 0; j < k; j++)
            fprintf(m->expert_log, " %d", m->s.h_pos[(size_t)t * k + j]);
        fputc('\n', m->expert_log);
    }
}

static int moe_feed_forward(model_rank *m, int l, const model_batch *b) {
    const model_hparams *hp = &m->hp;
    const layer_weights *L = &m->layers[l];
    model_scratch *s = &m->s;
    sol_backend *be = m->be;
    int k = hp->n_expert_used, ne = hp->n_expert, f = m->sh.ffn_exp, n = b->n, rc;
    int64_t dim = hp->dim;
    int oai = (hp->arch->flags & ARCH_MOE_OAI) != 0;
    if ((rc = sol_rmsnorm(be, s->x, L->ffn_norm, s->xb, n, hp->dim, hp->eps)) ||
        (rc =
             sol_norm_matmul_many(be, s->xb, NULL, 0.0f, NULL, (const sol_weight *[]){&L->w_router},
                                  L->router_b ? (const float *[]){L->router_b} : NULL,
                                  (float *[]){s->r_logits}, 1, n)) ||
        (rc = sol_download(be, s->h_logits, s->r_logits, (size_t)n * ne * sizeof(float))))
        return rc;
    (oai ? moe_route_topk_softmax : moe_route)(s->h_logits, n, ne, k, hp->expert_w_scale,
                                               be->ggml_lanes, s->h_w, s->h_pos);
    if (m->expert_log) log_experts(m, l, b);
    moe_group(s->h_pos, n, k, ne, s->h_rows, s->h_count);
    moe_ffn x = {L->e_gate, L->e_up, L->e_down, L->eb_gate, L->eb_up, L->eb_down, oai};
    if ((rc = sol_get_rows(be, s->xb, dim, s->h_rows, n * k, n, s->ex)) ||
        (rc = moe_experts(be, &x, ne, s->h_count, dim, f, s->ex, s->eh, s->eh2, s->ey)) ||
        (rc = sol_moe_combine(be, s->ey, dim, s->h_pos, s->h_w, n, k, (int64_t)n * k, s->xb2)) ||
        (rc = allreduce(m, s->xb2, (int64_t)n * dim)))
        return rc;
    return residual(m, L->ffn_post_norm, n);
}

int rank_check_batch(const model_rank *m, const model_batch *b, sol_err *err) {
    if (b->n < 1 || !b->tokens || !b->pos || !b->slots || !b->attn)
        return sol_err_set(err, -EINVAL, "model_forward: empty or incomplete batch");
    if (b->n_logits < 0 || b->n_logits > b->n || (b->n_logits && !b->logit_rows))
        return sol_err_set(err, -EINVAL, "model_forward: bad logit rows (%d of %d)", b->n_logits,
                           b->n);
    for (int t = 0; t < b->n; t++) {
        if (b->tokens[t] < 0 || b->tokens[t] >= m->hp.n_vocab)
            return sol_err_set(err, -EINVAL, "token id %d is outside the vocabulary (0..%d)",
                               b->tokens[t], m->hp.n_vocab - 1);
        if (b->pos[t] < 0 || b->attn[t].n_ctx < 1 || b->attn[t].n_ctx > b->pos[t] + 1)
            return sol_err_set(err, -EINVAL, "token %d: position %d with n_ctx %d", t, b->pos[t],
                               b->attn[t].n_ctx);
    }
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n)
            return sol_err_set(err, -EINVAL, "logit row %d is outside the batch of %d",
                               b->logit_rows[i], b->n);
    if (b->n_hidden < 0 || b->n_hidden > b->n || (b->n_hidden && (!b->hidden_rows || !b->hidden)))
        return sol_err_set(err, -EINVAL, "model_forward: bad hidden rows (%d of %d)", b->n_hidden,
                           b->n);
    for (int i = 0; i < b->n_hidden; i++)
        if (b->hidden_rows[i] < 0 || b->hidden_rows[i] >= b->n)
            return sol_err_set(err, -EINVAL, "hidden row %d is outside the batch of %d",
                               b->hidden_rows[i], b->n);
    return 0;
}

/* Embeddings: the final-normed hidden states of the asked rows, into xb (free after the last
 * layer; n_hidden <= n rows fit). Downloaded once the step is synchronized. */
static int hidden_states(model_rank *m, const model_batch *b) {
    sol_backend *be = m->be;
    model_scratch *s = &m->s;
    int rc = sol_get_rows(be, s->x, m->hp.dim, b->hidden_rows, b->n_hidden, b->n, s->xb);
    return rc ? rc
              : sol_rmsnorm(be, s->xb, m->output_norm, s->xb, b->n_hidden, m->hp.dim, m->hp.eps);
}

int rank_device_argmax(const model_rank *m, const model_batch *b) {
    return b->argmax_ids && m->sh.n == 1 && m->hp.softcap <= 0.0f && m->be->ops->argmax_rows;
}

/* The greedy tokens of the sampling rows on the backend: only ids and values are downloaded,
 * and the logits of a row whose largest value is not finite (-1: the sampler's checks). */
static int head_argmax(model_rank *m, const model_batch *b, float *logits) {
    sol_backend *be = m->be;
    model_scratch *s = &m->s;
    int n = b->n_logits, rc;
    size_t v = (size_t)m->sh.vocab;
    if ((rc =
             be->ops->argmax_rows(be, s->logits, n, (int64_t)v, s->amax, (float *)(s->amax + n))) ||
        (rc = sol_synchronize(be)) ||
        (rc = sol_download(be, s->h_amax, s->amax, 2 * sizeof(int32_t) * (size_t)n)))
        return rc;
    for (int i = 0; i < n && !rc; i++) {
        float val;
        memcpy(&val, s->h_amax + n + i, sizeof val);
        b->argmax_ids[i] = isfinite(val) ? s->h_amax[i] : -1;
        if (b->argmax_ids[i] < 0)
            rc = sol_download(be, logits + (size_t)i * v, s->logits + (size_t)i * v,
                              v * sizeof(float));
    }
    return rc;
}

/* This rank's vocabulary columns of the sampling rows, straight into the host rows (the gather
 * of a vocabulary-split head is the download itself), or their greedy tokens (rank_device_argmax).
 */
static int head(model_rank *m, const model_batch *b, float *logits) {
    const model_hparams *hp = &m->hp;
    const model_shard *sh = &m->sh;
    model_scratch *s = &m->s;
    sol_backend *be = m->be;
    /* Gather first: the head is the biggest matmul, and only the rows that sample need it; a
     * decode step samples every row in order, read where they are. The final norm and the head
     * are one dispatch (a device normalizes and quantizes in one launch; xn: xb2, free here). */
    int rc, in_place = b->n_logits == b->n;
    for (int i = 0; in_place && i < b->n; i++)
        in_place = b->logit_rows[i] == i;
    if (!in_place &&
        (rc = sol_get_rows(be, s->x, hp->dim, b->logit_rows, b->n_logits, b->n, s->xl)))
        return rc;
    if ((rc = sol_norm_matmul_many(be, in_place ? s->x : s->xl, m->output_norm, hp->eps, s->xb2,
                                   (const sol_weight *[]){&m->output}, NULL, (float *[]){s->logits},
                                   1, b->n_logits)))
        return rc;
    if (rank_device_argmax(m, b)) return head_argmax(m, b, logits);
    if ((rc = sol_synchronize(be))) return rc;
    size_t v = (size_t)sh->vocab;
    if (sh->n == 1) {
        rc = sol_download(be, logits, s->logits, (size_t)b->n_logits * v * sizeof(float));
    } else {
        for (int i = 0; i < b->n_logits && !rc; i++)
            rc = sol_download(be, logits + (size_t)i * hp->n_vocab + sh->vocab0,
                              s->logits + (size_t)i * v, v * sizeof(float));
    }
    if (rc) return rc;
    if (hp->softcap > 0.0f) /* on the host: a few vocab rows, after the download */
        for (int i = 0; i < b->n_logits; i++) {
            float *row = logits + (size_t)i * hp->n_vocab + sh->vocab0;
            for (size_t j = 0; j < v; j++)
                row[j] = hp->softcap * tanhf(row[j] / hp->softcap);
        }
    return 0;
}

/* One run of the step; SOL_STEP_RERUN when the backend ran nothing of it (backend.h). */
static int forward_pass(model_rank *m, sol_kv *kv, const model_batch *b, float *logits) {
    sol_backend *be = m->be;
    /* Decode and verify steps (every row samples, few rows) may be replayed as a CUDA graph
     * keyed by their size; prefill chunks run eagerly. */
    /* A mixture of experts reads its routing on the host mid-step: never a graph. */
    int key =
            b->n_logits == b->n && b->n <= MODEL_GRAPH_MAX_TOKENS && !b->n_hidden && !m->hp.n_expert
                ? b->n
                : 0,
        rc;
    if ((rc = sol_step_begin(be, key))) return rc;
    if ((rc = sol_embed(be, &m->tok_embd, b->tokens, b->n, m->s.x))) return rc;
    if ((m->hp.arch->flags & ARCH_EMBD_SCALE) &&
        (rc = sol_scale(be, m->s.x, sqrtf((float)m->hp.dim), m->s.x, (int64_t)b->n * m->hp.dim)))
        return rc;
    for (int l = 0; l < m->hp.n_layers; l++)
        if ((rc = attention(m, kv, l, b)) ||
            (rc = m->hp.n_expert ? moe_feed_forward(m, l, b) : feed_forward(m, l, b->n)))
            return rc;
    if (b->n_hidden > 0 && (rc = hidden_states(m, b))) return rc;
    if (b->n_logits > 0 && (rc = head(m, b, logits))) return rc;
    if (b->n_logits == 0 && (rc = sol_synchronize(be))) return rc;
    if (b->n_hidden > 0 && m->sh.rank == 0) /* every rank holds the same hidden state */
        rc = sol_download(be, b->hidden, m->s.xb, (size_t)b->n_hidden * m->hp.dim * sizeof(float));
    return rc;
}

int rank_forward(model_rank *m, sol_kv *kv, const model_batch *b, float *logits, sol_err *err) {
    sol_backend *be = m->be;
    int rc = forward_pass(m, kv, b, logits);
    /* A graph step that launched nothing (its launches differed from the cached graph's) is run
     * again: nothing of it ran, not even a KV write, so the second run starts from the same
     * state, and it is recorded, so it cannot ask again. A tensor-parallel rank that runs twice
     * makes its collectives once, as the others do: the first run queued none. */
    if (rc == SOL_STEP_RERUN) rc = forward_pass(m, kv, b, logits);
    if (!rc) return 0;
    if (rc == SOL_STEP_RERUN)
        sol_err_set(err, -EPROTO,
                    "forward pass: the backend asked again to run a step it had just recorded");
    else
        sol_err_set(err, rc, "forward pass: %s", be->err.msg);
    sol_synchronize(be); /* closes a graph capture the step left open */
    return err->code;
}
