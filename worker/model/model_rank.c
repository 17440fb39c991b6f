/* model_rank: one rank of a model - the whole GGUF decoder, or one tensor-parallel rank's shard
 * of it: its weights bound from the file and activation scratch (sized up front). Its
 * hyperparameters are model_hparams.c's, the forward pass model_forward.c's; the public model
 * over its ranks is model.c. */
#include "model_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arch.h"
#include "log.h"
#include "moe_route.h"

#define MODEL_WEIGHT_TYPES                                                                         \
    (GGUF_TYPE_BIT(SOL_DT_F32) | GGUF_TYPE_BIT(SOL_DT_F16) | GGUF_TYPE_BIT(SOL_DT_BF16) |          \
     GGUF_TYPE_BIT(SOL_DT_Q8_0) | GGUF_TYPE_BIT(SOL_DT_Q4_0) | GGUF_TYPE_BIT(SOL_DT_Q5_0) |        \
     GGUF_TYPE_BIT(SOL_DT_Q5_1) | GGUF_TYPE_BIT(SOL_DT_Q4_K) | GGUF_TYPE_BIT(SOL_DT_Q5_K) |        \
     GGUF_TYPE_BIT(SOL_DT_Q6_K) | GGUF_TYPE_BIT(SOL_DT_MXFP4))

/* Rank `rank` of `n`: which heads, FFN columns and vocabulary rows it holds. The shapes must
 * divide; else the key and the numbers. */
static int plan_shard(model_rank *m, int rank, int n, sol_tp_comm *comm, sol_err *err) {
    const model_hparams *hp = &m->hp;
    model_shard *sh = &m->sh;
    const char *f = gguf_path(m->gguf), *a = hp->arch->name;
    if (hp->n_heads % n)
        return sol_err_set(err, -EINVAL,
                           "%s: worker.tensor_parallel %d does not divide %s.attention.head_count "
                           "%d",
                           f, n, a, hp->n_heads);
    if (hp->n_kv_heads % n && n % hp->n_kv_heads)
        return sol_err_set(err, -EINVAL,
                           "%s: worker.tensor_parallel %d neither divides "
                           "%s.attention.head_count_kv %d nor is a multiple of it",
                           f, n, a, hp->n_kv_heads);
    if (hp->n_expert && hp->ffn_exp % n)
        return sol_err_set(err, -EINVAL,
                           "%s: worker.tensor_parallel %d does not divide "
                           "%s.expert_feed_forward_length %d (each expert is split as the dense "
                           "FFN)",
                           f, n, a, hp->ffn_exp);
    if (!hp->n_expert && hp->ffn % n)
        return sol_err_set(
            err, -EINVAL, "%s: worker.tensor_parallel %d does not divide %s.feed_forward_length %d",
            f, n, a, hp->ffn);
    *sh = (model_shard){.rank = rank, .n = n, .comm = n > 1 ? comm : NULL};
    sh->heads = hp->n_heads / n;
    sh->head0 = rank * sh->heads;
    /* Fewer KV heads than ranks: each rank keeps the one KV head its query heads read. */
    sh->kv_heads = hp->n_kv_heads % n == 0 ? hp->n_kv_heads / n : 1;
    sh->kv_head0 =
        hp->n_kv_heads % n == 0 ? rank * sh->kv_heads : sh->head0 / (hp->n_heads / hp->n_kv_heads);
    sh->q_dim = sh->heads * hp->head_dim;
    sh->kv_dim = sh->kv_heads * hp->head_dim;
    sh->ffn = hp->ffn / n;
    sh->ffn0 = rank * sh->ffn;
    sh->ffn_exp = hp->ffn_exp / n;
    sh->ffn_exp0 = rank * sh->ffn_exp;
    sh->vocab0 = (int)((int64_t)hp->n_vocab * rank / n);
    sh->vocab = (int)((int64_t)hp->n_vocab * (rank + 1) / n) - sh->vocab0;
    return 0;
}

/* A part of a weight: rows [row0, row0 + nrows) and columns [col0, col0 + ncols). */
typedef struct slice {
    int64_t row0, nrows, col0, ncols;
    int copy; /* 1: copy even a whole-column slice (the tied head: the embedding is repacked) */
} slice;

/* Columns of a row-major block layout are not contiguous: the slice is copied out, row by row,
 * into memory the model owns. */
static int copy_slice(model_rank *m, const char *name, sol_weight *w, const slice *sl,
                      sol_err *err) {
    size_t rb = sol_dtype_row_bytes(w->type, sl->ncols);
    size_t off = sol_dtype_row_bytes(w->type, sl->col0);
    if (rb == 0 || (sl->col0 && off == 0))
        return sol_err_set(err, -EINVAL,
                           "%s: tensor %s: worker.tensor_parallel %d splits its %lld columns into "
                           "parts of %lld, not a multiple of the %s block of %zu",
                           gguf_path(m->gguf), name, m->sh.n, (long long)w->cols,
                           (long long)sl->ncols, sol_dtype_name(w->type),
                           sol_dtype_block_elems(w->type));
    void **grown = realloc(m->owned, sizeof *grown * (size_t)(m->n_owned + 1));
    if (!grown) return sol_err_set(err, -ENOMEM, "out of memory for %s", name);
    m->owned = grown;
    size_t bytes = (rb * (size_t)sl->nrows + 63) / 64 * 64;
    char *dst = aligned_alloc(64, bytes ? bytes : 64);
    if (!dst) return sol_err_set(err, -ENOMEM, "out of memory for a shard of %s", name);
    m->owned[m->n_owned++] = dst;
    for (int64_t r = 0; r < sl->nrows; r++)
        memcpy(dst + (size_t)r * rb, (const char *)w->data + (size_t)r * w->row_bytes + off, rb);
    w->data = dst;
    w->cols = sl->ncols;
    w->row_bytes = rb;
    return 0;
}

/* The matrix of `rows` x `cols` at `data` (of tensor t; one expert's part of a 3-D one);
 * sl: the part this rank holds (NULL: all of it). Row slices point into the file; column slices
 * are copied. */
static int bind_view(model_rank *m, const gguf_tensor *t, const void *data, int64_t cols,
                     int64_t rows, const slice *sl, sol_weight *w, sol_err *err) {
    int rc;
    w->type = t->type;
    w->rows = rows;
    w->cols = cols;
    w->data = data;
    w->row_bytes = sol_dtype_row_bytes(t->type, cols);
    if (w->row_bytes == 0)
        return sol_err_set(err, -EINVAL,
                           "%s: tensor %s: row of %lld elements is not a whole number of %s "
                           "blocks",
                           gguf_path(m->gguf), t->name, (long long)cols, sol_dtype_name(t->type));
    if (sl) {
        w->data = (const char *)w->data + (size_t)sl->row0 * w->row_bytes;
        w->rows = sl->nrows;
        if ((sl->ncols < cols || sl->copy) && (rc = copy_slice(m, t->name, w, sl, err))) return rc;
    }
    if ((rc = sol_weight_prepare(m->be, w)))
        return sol_err_set(err, rc, "%s: tensor %s: %s", gguf_path(m->gguf), t->name,
                           m->be->err.msg);
    return 0;
}

/* A 2-D weight [cols, rows] in GGUF terms (ne0 = cols); sl as bind_view's. */
static int bind_weight(model_rank *m, const char *name, int64_t cols, int64_t rows, const slice *sl,
                       sol_weight *w, sol_err *err) {
    int rc;
    if ((rc = gguf_expect_tensor(m->gguf, name, 2, cols, rows, err))) return rc;
    if ((rc = gguf_expect_type(m->gguf, name, MODEL_WEIGHT_TYPES, err))) return rc;
    const gguf_tensor *t = gguf_tensor_find(m->gguf, name);
    return bind_view(m, t, t->data, cols, rows, sl, w, err);
}

/* A 3-D [cols, rows, n_expert] tensor as one weight per expert (ws[e]: expert e's rows x cols
 * matrix, this rank's slice sl of it). */
static int bind_experts(model_rank *m, const char *name, int64_t cols, int64_t rows,
                        const slice *sl, sol_weight **ws, sol_err *err) {
    int64_t ne = m->hp.n_expert;
    int rc;
    if ((rc = gguf_expect_shape(m->gguf, name, 3, (const int64_t[]){cols, rows, ne}, err)) ||
        (rc = gguf_expect_type(m->gguf, name, MODEL_WEIGHT_TYPES, err)))
        return rc;
    const gguf_tensor *t = gguf_tensor_find(m->gguf, name);
    if (!(*ws = calloc((size_t)ne, sizeof **ws)))
        return sol_err_set(err, -ENOMEM, "out of memory for %s", name);
    size_t per = sol_dtype_row_bytes(t->type, cols) * (size_t)rows;
    for (int64_t e = 0; e < ne; e++) {
        (*ws)[e].flags = SOL_WEIGHT_EXPERT;
        if ((rc = bind_view(m, t, (const char *)t->data + (size_t)e * per, cols, rows, sl,
                            &(*ws)[e], err)))
            return rc;
    }
    return 0;
}

/* An F32 vector of `dim`, elements [off, off + len) of it (a bias shard; else off 0, len dim). */
/* len floats at data (of tensor `name`) as a 1 x len weight, so a device backend uploads it
 * like the matrices (the CPU backend leaves F32 where it lies). */
static int prepare_vec(model_rank *m, const char *name, const float *data, int64_t len,
                       const float **out, sol_err *err) {
    sol_weight w = {SOL_DT_F32, 1, len, data, (size_t)len * sizeof(float), 0, 0};
    int rc = sol_weight_prepare(m->be, &w);
    if (rc)
        return sol_err_set(err, rc, "%s: tensor %s: %s", gguf_path(m->gguf), name, m->be->err.msg);
    *out = w.data;
    return 0;
}

static int bind_vec(model_rank *m, const char *name, int64_t dim, int64_t off, int64_t len,
                    const float **out, sol_err *err) {
    int rc;
    if ((rc = gguf_expect_tensor(m->gguf, name, 1, dim, 1, err))) return rc;
    if ((rc = gguf_expect_type(m->gguf, name, GGUF_TYPE_BIT(SOL_DT_F32), err))) return rc;
    return prepare_vec(m, name, (const float *)gguf_tensor_find(m->gguf, name)->data + off, len,
                       out, err);
}

/* A 2-D F32 [width, n_expert] tensor (gpt-oss's expert biases) as one vector per expert:
 * elements [off, off + len) of each row (this rank's slice). */
static int bind_expert_vecs(model_rank *m, const char *name, int64_t width, int64_t off,
                            int64_t len, const float ***out, sol_err *err) {
    int64_t ne = m->hp.n_expert;
    int rc;
    if ((rc = gguf_expect_shape(m->gguf, name, 2, (const int64_t[]){width, ne}, err)) ||
        (rc = gguf_expect_type(m->gguf, name, GGUF_TYPE_BIT(SOL_DT_F32), err)))
        return rc;
    if (!(*out = calloc((size_t)ne, sizeof **out)))
        return sol_err_set(err, -ENOMEM, "out of memory for %s", name);
    const float *data = gguf_tensor_find(m->gguf, name)->data;
    for (int64_t e = 0; e < ne; e++)
        if ((rc = prepare_vec(m, name, data + e * width + off, len, &(*out)[e], err))) return rc;
    return 0;
}

static int bind_norm(model_rank *m, const char *name, int64_t dim, const float **out,
                     sol_err *err) {
    return bind_vec(m, name, dim, 0, dim, out, err);
}

/* Layer l's mixture of experts: the router (whole on every rank: each picks the same experts)
 * and this rank's columns of every expert (gate/up rows, down columns), as the dense FFN. */
static int bind_moe(model_rank *m, int l, sol_err *err) {
    const model_hparams *hp = &m->hp;
    const model_shard *sh = &m->sh;
    layer_weights *L = &m->layers[l];
    slice up = {sh->ffn_exp0, sh->ffn_exp, 0, hp->dim, 0};
    slice down = {0, hp->dim, sh->ffn_exp0, sh->ffn_exp, 0};
    char n[GGUF_MAX_NAME + 1];
    int rc;
    snprintf(n, sizeof n, "blk.%d.ffn_gate_inp.weight", l);
    if ((rc = bind_weight(m, n, hp->dim, hp->n_expert, NULL, &L->w_router, err))) return rc;
    snprintf(n, sizeof n, "blk.%d.ffn_gate_exps.weight", l);
    if ((rc = bind_experts(m, n, hp->dim, hp->ffn_exp, &up, &L->e_gate, err))) return rc;
    snprintf(n, sizeof n, "blk.%d.ffn_up_exps.weight", l);
    if ((rc = bind_experts(m, n, hp->dim, hp->ffn_exp, &up, &L->e_up, err))) return rc;
    snprintf(n, sizeof n, "blk.%d.ffn_down_exps.weight", l);
    if ((rc = bind_experts(m, n, hp->ffn_exp, hp->dim, &down, &L->e_down, err))) return rc;
    if (!(hp->arch->flags & ARCH_MOE_OAI)) return 0;
    snprintf(n, sizeof n, "blk.%d.ffn_gate_inp.bias", l);
    if ((rc = bind_vec(m, n, hp->n_expert, 0, hp->n_expert, &L->router_b, err))) return rc;
    snprintf(n, sizeof n, "blk.%d.ffn_gate_exps.bias", l);
    if ((rc = bind_expert_vecs(m, n, hp->ffn_exp, sh->ffn_exp0, sh->ffn_exp, &L->eb_gate, err)))
        return rc;
    snprintf(n, sizeof n, "blk.%d.ffn_up_exps.bias", l);
    if ((rc = bind_expert_vecs(m, n, hp->ffn_exp, sh->ffn_exp0, sh->ffn_exp, &L->eb_up, err)))
        return rc;
    snprintf(n, sizeof n, "blk.%d.ffn_down_exps.bias", l); /* summed once: rank 0's */
    return sh->rank ? 0 : bind_expert_vecs(m, n, hp->dim, 0, hp->dim, &L->eb_down, err);
}

static int bind_layer(model_rank *m, int l, sol_err *err) {
    const model_hparams *hp = &m->hp;
    const model_shard *sh = &m->sh;
    layer_weights *L = &m->layers[l];
    int64_t kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim, hd = hp->head_dim;
    /* Rows: this rank's heads and FFN columns; columns: the same ranges as inputs. */
    slice q = {sh->head0 * hd, sh->q_dim, 0, hp->dim, 0};
    slice kv = {sh->kv_head0 * hd, sh->kv_dim, 0, hp->dim, 0};
    slice o = {0, hp->dim, sh->head0 * hd, sh->q_dim, 0};
    slice up = {sh->ffn0, sh->ffn, 0, hp->dim, 0}, down = {0, hp->dim, sh->ffn0, sh->ffn, 0};
    char n[GGUF_MAX_NAME + 1];
    int rc;
#define W(suffix, cols, rows, sl, dst)                                                             \
    do {                                                                                           \
        snprintf(n, sizeof n, "blk.%d." suffix ".weight", l);                                      \
        if ((rc = bind_weight(m, n, cols, rows, sl, dst, err))) return rc;                         \
    } while (0)
    W("attn_q", hp->dim, hp->q_dim, &q, &L->wq);
    W("attn_k", hp->dim, kv_dim, &kv, &L->wk);
    W("attn_v", hp->dim, kv_dim, &kv, &L->wv);
    W("attn_output", hp->q_dim, hp->dim, &o, &L->wo);
    if (hp->n_expert) {
        if ((rc = bind_moe(m, l, err))) return rc;
    } else {
        W("ffn_gate", hp->dim, hp->ffn, &up, &L->w_gate);
        W("ffn_up", hp->dim, hp->ffn, &up, &L->w_up);
        W("ffn_down", hp->ffn, hp->dim, &down, &L->w_down);
    }
#undef W
#define V(suffix, len, off, part, dst)                                                             \
    do {                                                                                           \
        snprintf(n, sizeof n, "blk.%d." suffix, l);                                                \
        if ((rc = bind_vec(m, n, len, off, part, dst, err))) return rc;                            \
    } while (0)
    V("attn_norm.weight", hp->dim, 0, hp->dim, &L->attn_norm);
    snprintf(n, sizeof n, "blk.%d.%s.weight", l, hp->arch->ffn_norm);
    if ((rc = bind_vec(m, n, hp->dim, 0, hp->dim, &L->ffn_norm, err))) return rc;
    if (hp->arch->flags & ARCH_ATTN_SINKS)
        V("attn_sinks.weight", hp->n_heads, sh->head0, sh->heads, &L->sinks);
    if ((hp->arch->flags & ARCH_OUT_BIAS) && sh->rank == 0) /* summed once: rank 0's */
        V("attn_output.bias", hp->dim, 0, hp->dim, &L->bo);
    if (hp->arch->flags & ARCH_QKV_BIAS) {
        V("attn_q.bias", hp->q_dim, q.row0, q.nrows, &L->bq);
        V("attn_k.bias", kv_dim, kv.row0, kv.nrows, &L->bk);
        V("attn_v.bias", kv_dim, kv.row0, kv.nrows, &L->bv);
    }
    if (hp->arch->flags & ARCH_QK_NORM) {
        V("attn_q_norm.weight", hd, 0, hd, &L->q_norm);
        V("attn_k_norm.weight", hd, 0, hd, &L->k_norm);
    }
    if (hp->arch->flags & ARCH_POST_NORMS) {
        V("post_attention_norm.weight", hp->dim, 0, hp->dim, &L->attn_post_norm);
        V("post_ffw_norm.weight", hp->dim, 0, hp->dim, &L->ffn_post_norm);
    }
#undef V
    return 0;
}

static void set_name(model_rank *m, const char *path) {
    const char *gname = NULL;
    sol_err ignore = {0};
    if (gguf_get_kv(m->gguf, "general.name") &&
        gguf_get_str(m->gguf, "general.name", &gname, &ignore) == 0 && gname[0]) {
        snprintf(m->name, sizeof m->name, "%s", gname);
        return;
    }
    const char *base = strrchr(path, '/');
    snprintf(m->name, sizeof m->name, "%s", base ? base + 1 : path);
    char *dot = strrchr(m->name, '.');
    if (dot) *dot = '\0';
}

/* The head: this rank's vocabulary rows of output.weight, or of the embedding when tied (copied
 * out before the embedding is prepared when sharded: a backend may repack it in place). */
static int bind_head(model_rank *m, sol_err *err) {
    const model_hparams *hp = &m->hp;
    const model_shard *sh = &m->sh;
    slice v = {sh->vocab0, sh->vocab, 0, hp->dim, 0};
    if (gguf_tensor_find(m->gguf, "output.weight"))
        return bind_weight(m, "output.weight", hp->dim, hp->n_vocab, &v, &m->output, err);
    m->hp.tied_output = 1;
    if (sh->n == 1) return 0; /* the embedding itself, once it is bound */
    v.copy = 1;
    return bind_weight(m, "token_embd.weight", hp->dim, hp->n_vocab, &v, &m->output, err);
}

static int bind_all(model_rank *m, sol_err *err) {
    const model_hparams *hp = &m->hp;
    int rc;
    if ((rc = bind_head(m, err)) ||
        (rc = bind_weight(m, "token_embd.weight", hp->dim, hp->n_vocab, NULL, &m->tok_embd, err)))
        return rc;
    if (m->hp.tied_output && m->sh.n == 1) m->output = m->tok_embd;
    m->hp.weight_type = m->tok_embd.type;
    if ((rc = bind_norm(m, "output_norm.weight", hp->dim, &m->output_norm, err))) return rc;
    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    if (!m->layers) return sol_err_set(err, -ENOMEM, "out of memory for layer table");
    for (int l = 0; l < hp->n_layers; l++)
        if ((rc = bind_layer(m, l, err))) return rc;
    if (hp->n_layers > 0) m->hp.weight_type = m->layers[0].wq.type;
    return 0;
}

model_rank *rank_load(const char *path, int gguf_flags, sol_backend *be, int rank, int n,
                      sol_tp_comm *comm, sol_err *err) {
    model_rank *m = calloc(1, sizeof *m);
    if (!m) {
        sol_err_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    m->be = be;
    m->gguf = gguf_open(path, gguf_flags, err);
    if (!m->gguf || rank_load_hparams(m, err) || plan_shard(m, rank, n, comm, err) ||
        bind_all(m, err)) {
        rank_free(m);
        return NULL;
    }
    set_name(m, path);
    return m;
}

static void scratch_free(model_rank *m) {
    model_scratch *s = &m->s;
    float **bufs[] = {&s->x,   &s->xb, &s->xb2,    &s->q,        &s->att, &s->k,  &s->v,   &s->hb,
                      &s->hb2, &s->xl, &s->logits, &s->r_logits, &s->ex,  &s->eh, &s->eh2, &s->ey};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (*bufs[i]) sol_buf_free(m->be, *bufs[i]);
        *bufs[i] = NULL;
    }
    if (s->amax) sol_buf_free(m->be, s->amax);
    s->amax = NULL;
    free(s->h_amax);
    s->h_amax = NULL;
    free(s->h_logits);
    free(s->h_w);
    free(s->h_rows);
    free(s->h_pos);
    free(s->h_count);
    s->h_logits = s->h_w = NULL;
    s->h_rows = s->h_pos = s->h_count = NULL;
    s->cap_tokens = s->cap_logits = 0;
}

/* A mixture of experts' scratch for n tokens (none for a dense model): the router's logits on
 * the backend and the host, and the n*k rows each token's chosen experts read and write. */
static int moe_scratch(model_rank *m, size_t n) {
    const model_hparams *hp = &m->hp;
    model_scratch *s = &m->s;
    if (!hp->n_expert) return 0;
    size_t nk = n * (size_t)hp->n_expert_used, f = sizeof(float), ne = (size_t)hp->n_expert;
    s->r_logits = sol_buf_alloc(m->be, n * ne * f);
    s->ex = sol_buf_alloc(m->be, nk * (size_t)hp->dim * f);
    s->ey = sol_buf_alloc(m->be, nk * (size_t)hp->dim * f);
    s->eh = sol_buf_alloc(m->be, nk * (size_t)m->sh.ffn_exp * f);
    s->eh2 = sol_buf_alloc(m->be, nk * (size_t)m->sh.ffn_exp * f);
    s->h_logits = malloc(n * ne * f);
    s->h_w = malloc(nk * f);
    s->h_rows = malloc(nk * sizeof(int32_t));
    s->h_pos = malloc(nk * sizeof(int32_t));
    s->h_count = malloc(ne * sizeof(int32_t));
    return s->r_logits && s->ex && s->ey && s->eh && s->eh2 && s->h_logits && s->h_w && s->h_rows &&
                   s->h_pos && s->h_count
               ? 0
               : -ENOMEM;
}

int rank_reserve(model_rank *m, int max_tokens, int max_logits, sol_err *err) {
    if (max_tokens <= m->s.cap_tokens && max_logits <= m->s.cap_logits) return 0;
    if (max_tokens < m->s.cap_tokens) max_tokens = m->s.cap_tokens;
    if (max_logits < m->s.cap_logits) max_logits = m->s.cap_logits;
    if (max_tokens < 1 || max_logits < 1)
        return sol_err_set(err, -EINVAL, "model_reserve: bad sizes %d/%d", max_tokens, max_logits);
    scratch_free(m);
    const model_hparams *hp = &m->hp;
    const model_shard *sh = &m->sh;
    size_t n = (size_t)max_tokens, f = sizeof(float), kv_dim = (size_t)sh->kv_dim;
    sol_backend *be = m->be;
    model_scratch *s = &m->s;
    s->x = sol_buf_alloc(be, n * hp->dim * f);
    s->xb = sol_buf_alloc(be, n * hp->dim * f);
    s->xb2 = sol_buf_alloc(be, n * hp->dim * f);
    s->q = sol_buf_alloc(be, n * sh->q_dim * f);
    s->att = sol_buf_alloc(be, n * sh->q_dim * f);
    s->k = sol_buf_alloc(be, n * kv_dim * f);
    s->v = sol_buf_alloc(be, n * kv_dim * f);
    size_t ffn = sh->ffn > 0 ? (size_t)sh->ffn : 1; /* a mixture may have no dense width */
    s->hb = sol_buf_alloc(be, n * ffn * f);
    s->hb2 = sol_buf_alloc(be, n * ffn * f);
    s->xl = sol_buf_alloc(be, (size_t)max_logits * hp->dim * f);
    s->logits = sol_buf_alloc(be, (size_t)max_logits * sh->vocab * f);
    s->amax = sol_buf_alloc(be, 2 * sizeof(int32_t) * (size_t)max_logits);
    s->h_amax = malloc(2 * sizeof(int32_t) * (size_t)max_logits);
    if (!s->x || !s->xb || !s->xb2 || !s->q || !s->att || !s->k || !s->v || !s->hb || !s->hb2 ||
        !s->xl || !s->logits || !s->amax || !s->h_amax || moe_scratch(m, n)) {
        scratch_free(m);
        return sol_err_set(err, -ENOMEM,
                           "out of %s memory for activations of %d tokens (%.1f MiB): lower "
                           "worker.scheduler.max_batched_tokens",
                           sol_backend_name(be), max_tokens,
                           (double)(n * (3 * hp->dim + 2 * sh->q_dim + 2 * kv_dim + 2 * sh->ffn) +
                                    (size_t)max_logits * (hp->dim + sh->vocab)) *
                               f / 1048576.0);
    }
    s->cap_tokens = max_tokens;
    s->cap_logits = max_logits;
    int64_t max_dim = sh->ffn > sh->vocab ? sh->ffn : sh->vocab;
    if (max_dim < sh->ffn_exp) max_dim = sh->ffn_exp;
    if (max_dim < hp->n_expert) max_dim = hp->n_expert;
    if (max_dim < hp->dim) max_dim = hp->dim;
    if (max_dim < sh->q_dim) max_dim = sh->q_dim;
    if (sol_reserve(be, max_tokens, max_dim))
        return sol_err_set(err, -ENOMEM, "backend scratch: %s", be->err.msg);
    return 0;
}

void rank_free(model_rank *m) {
    if (!m) return;
    if (m->be) scratch_free(m);
    for (int i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    for (int l = 0; m->layers && l < m->hp.n_layers; l++) {
        free(m->layers[l].e_gate);
        free(m->layers[l].e_up);
        free(m->layers[l].e_down);
        free(m->layers[l].eb_gate);
        free(m->layers[l].eb_up);
        free(m->layers[l].eb_down);
    }
    free(m->layers);
    free(m->swa);
    gguf_close(m->gguf);
    free(m);
}
