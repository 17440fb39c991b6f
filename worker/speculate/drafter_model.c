/* drafter_model: a small draft model proposing tokens for many sequences per forward pass, with
 * its own paged KV cache that rolls back to whatever prefix the caller's history still shares. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "drafter_internal.h"
#include "kv_cache.h"
#include "spec.h"

#define DM_BLOCK 16

typedef struct {
    drafter base;
    model *m;
    kv_cache *mgr;
    model_kv *kv;
    sampler *smp;
    int max_seqs, max_ctx;
    int32_t n_vocab;
    kv_seq **seqs;   /* per slot; NULL when unused */
    int32_t *hist;   /* per slot: history + drafts, max_ctx + SPEC_MAX_K each */
    float *logits;   /* max_seqs x n_vocab */
    int32_t *row_of; /* per request: its logit row in the last batch */
    int cap;         /* rows the batch arrays hold */
    int32_t *tok, *pos, *slots, *lrows;
    sol_attn_seq *attn;
} dmodel;

static int grow_batch(dmodel *d, int n, sol_err *err) {
    if (n <= d->cap) return 0;
    int cap = n > 2 * d->cap ? n : 2 * d->cap;
    int32_t *arr[4];
    for (int i = 0; i < 4; i++)
        arr[i] = malloc(sizeof(int32_t) * (size_t)cap);
    sol_attn_seq *attn = malloc(sizeof *attn * (size_t)cap);
    if (!arr[0] || !arr[1] || !arr[2] || !arr[3] || !attn) {
        for (int i = 0; i < 4; i++)
            free(arr[i]);
        free(attn);
        return sol_err_set(err, -ENOMEM, "draft model: out of memory for a %d-row batch", n);
    }
    free(d->tok), free(d->pos), free(d->slots), free(d->lrows), free(d->attn);
    d->tok = arr[0], d->pos = arr[1], d->slots = arr[2], d->lrows = arr[3], d->attn = attn;
    d->cap = cap;
    return 0;
}

/* Rolls the slot's KV back to the longest prefix shared with history (keeping at least the last
 * history token to recompute, for its logits) and reserves room for the new rows. Returns the
 * number of history tokens to feed. */
static int sync_slot(dmodel *d, const drafter_req *r, sol_err *err) {
    kv_seq **ps = &d->seqs[r->slot];
    if (!*ps && !(*ps = kv_seq_new(d->mgr, NULL, err))) return err->code ? err->code : -ENOMEM;
    kv_seq *s = *ps;
    int32_t len = kv_seq_len(s), c = 0, lim = r->n_history - 1;
    while (c < len && c < lim && kv_seq_token_at(s, c) == r->history[c])
        c++;
    int rc = c < len ? kv_seq_truncate(s, c, err) : 0;
    kv_copy cp[KV_MAX_COPIES];
    int32_t n_cp = 0;
    if (!rc) rc = kv_seq_reserve(s, r->n_history - c + r->k - 1, cp, &n_cp, err);
    if (!rc && n_cp)
        rc = model_kv_copy_blocks(d->m, d->kv, &cp[0].src_block, &cp[0].dst_block, 1, err);
    memcpy(d->hist + (size_t)r->slot * (d->max_ctx + SPEC_MAX_K), r->history,
           sizeof(int32_t) * (size_t)r->n_history);
    return rc ? rc : r->n_history - c;
}

/* Appends rows for `n` tokens of slot's sequence starting at its current length. */
static int add_rows(dmodel *d, kv_seq *s, const int32_t *toks, int n, int *row, sol_err *err) {
    int32_t start = kv_seq_len(s), nb;
    int rc = kv_seq_slots(s, start, n, d->slots + *row, err);
    const int32_t *table = kv_seq_block_table(s, &nb);
    for (int i = 0; !rc && i < n; i++) {
        d->tok[*row + i] = toks[i];
        d->pos[*row + i] = start + i;
        d->attn[*row + i] = (sol_attn_seq){table, start + i + 1};
    }
    *row += n;
    return rc;
}

/* One forward pass over the rows built for reqs (each contributing its `cnt` tokens), logits
 * for each request's last row; then records the tokens in the KV manager. */
static int run_batch(dmodel *d, drafter_req *reqs, const int *cnt, int n, sol_err *err) {
    int rows = 0, nl = 0, rc = 0;
    for (int i = 0; i < n; i++)
        rows += cnt[i];
    if ((rc = grow_batch(d, rows, err))) return rc;
    rows = 0;
    for (int i = 0; !rc && i < n; i++) {
        if (!cnt[i]) continue;
        kv_seq *s = d->seqs[reqs[i].slot];
        const int32_t *h = d->hist + (size_t)reqs[i].slot * (d->max_ctx + SPEC_MAX_K);
        rc = add_rows(d, s, h + kv_seq_len(s), cnt[i], &rows, err);
        d->row_of[i] = nl;
        d->lrows[nl++] = rows - 1;
    }
    if (rc) return rc;
    model_batch b = {rows, d->tok, d->pos, d->slots, d->attn, nl, d->lrows, NULL, 0, NULL, NULL};
    if ((rc = model_forward(d->m, d->kv, &b, d->logits, err))) return rc;
    for (int i = 0, r = 0; !rc && i < n; i++) {
        if (!cnt[i]) continue;
        rc = kv_seq_append(d->seqs[reqs[i].slot], d->tok + r, cnt[i], err);
        r += cnt[i];
    }
    return rc;
}

/* Inverse-CDF draw in id order with the draft lane's uniform; argmax (one-hot) when greedy. */
static int32_t draw(const float *q, int32_t n, double u) {
    double sum = 0, acc = 0;
    for (int32_t t = 0; t < n; t++)
        sum += q[t];
    double target = u * sum;
    int32_t last = 0;
    for (int32_t t = 0; t < n; t++) {
        if (q[t] <= 0) continue;
        acc += q[t];
        last = t;
        if (acc > target) return t;
    }
    return last;
}

/* Turns each active request's logits into q_i and draft token i. */
static int sample_step(dmodel *d, drafter_req *reqs, const int *active, int n, int i,
                       sol_err *err) {
    for (int r = 0; r < n; r++) {
        if (!active[r]) continue;
        drafter_req *q = &reqs[r];
        int32_t *h = d->hist + (size_t)q->slot * (d->max_ctx + SPEC_MAX_K);
        float *qi = q->q + (size_t)i * d->n_vocab;
        int rc = sampler_probs(d->smp, q->seq, d->logits + (size_t)d->row_of[r] * d->n_vocab, h,
                               q->n_history + i, qi, err);
        if (rc) return rc;
        int32_t t = draw(qi, d->n_vocab, sampler_seq_uniform(q->seq, i, SPEC_RNG_LANE_DRAFT));
        q->tokens[i] = t;
        h[q->n_history + i] = t;
        q->n_draft = i + 1;
    }
    return 0;
}

static int dm_propose(drafter *base, drafter_req *reqs, int n, sol_err *err) {
    dmodel *d = (dmodel *)base;
    if (n > d->max_seqs)
        return sol_err_set(err, -EINVAL, "draft model: %d requests, at most %d", n, d->max_seqs);
    int *cnt = calloc((size_t)n * 2, sizeof(int)), *active = cnt + n, k_max = 0, rc = 0;
    if (!cnt) return sol_err_set(err, -ENOMEM, "out of memory");
    for (int i = 0; !rc && i < n; i++) {
        drafter_req *r = &reqs[i];
        if (r->slot < 0 || r->slot >= d->max_seqs || !r->q) {
            rc = sol_err_set(err, -EINVAL, "draft model: slot %d outside 0..%d or no q buffer",
                             (int)r->slot, d->max_seqs - 1);
            break;
        }
        if (r->n_history + r->k > d->max_ctx) continue; /* no room: no drafts, plain decoding */
        rc = sync_slot(d, r, err);
        if (rc > 0) cnt[i] = rc, active[i] = 1, rc = 0;
        if (active[i] && r->k > k_max) k_max = r->k;
    }
    for (int i = 0; !rc && i < k_max; i++) {
        if (i > 0)
            for (int r = 0; r < n; r++)
                cnt[r] = active[r] && reqs[r].k > i;
        for (int r = 0; r < n; r++)
            active[r] = active[r] && reqs[r].k > i;
        rc = run_batch(d, reqs, cnt, n, err);
        if (!rc) rc = sample_step(d, reqs, active, n, i, err);
        if (i + 1 == k_max) break;
    }
    free(cnt);
    return rc;
}

static void dm_release(drafter *base, int32_t slot) {
    dmodel *d = (dmodel *)base;
    if (slot < 0 || slot >= d->max_seqs) return;
    kv_seq_free(d->seqs[slot]);
    d->seqs[slot] = NULL;
}

static void dm_free(drafter *base) {
    dmodel *d = (dmodel *)base;
    kv_cache_free(d->mgr); /* frees the sequences too */
    if (d->kv) model_kv_free(d->m, d->kv);
    sampler_free(d->smp);
    free(d->seqs), free(d->hist), free(d->logits), free(d->row_of);
    free(d->tok), free(d->pos), free(d->slots), free(d->lrows), free(d->attn);
    free(d);
}

static const drafter_ops k_model_ops = {"draft-model", 0, dm_propose, dm_release, dm_free};

drafter *drafter_model_new(model *m, int max_seqs, int max_ctx, sol_err *err) {
    if (!m || max_seqs < 1 || max_ctx < 2)
        return sol_err_set(err, -EINVAL, "draft model: need a model, max_seqs >= 1, max_ctx >= 2"),
               NULL;
    dmodel *d = calloc(1, sizeof *d);
    if (!d) return sol_err_set(err, -ENOMEM, "out of memory"), NULL;
    d->base.ops = &k_model_ops;
    d->m = m;
    d->max_seqs = max_seqs;
    d->max_ctx = max_ctx;
    d->n_vocab = model_get_hparams(m)->n_vocab;
    int per_seq = (max_ctx + SPEC_MAX_K + DM_BLOCK - 1) / DM_BLOCK + 1;
    d->seqs = calloc((size_t)max_seqs, sizeof *d->seqs);
    d->hist = malloc(sizeof(int32_t) * (size_t)max_seqs * (size_t)(max_ctx + SPEC_MAX_K));
    d->logits = malloc(sizeof(float) * (size_t)max_seqs * (size_t)d->n_vocab);
    d->row_of = malloc(sizeof(int32_t) * (size_t)max_seqs);
    if (!d->seqs || !d->hist || !d->logits || !d->row_of) {
        sol_err_set(err, -ENOMEM, "out of memory");
        dm_free(&d->base);
        return NULL;
    }
    if (!(d->smp = sampler_new(d->n_vocab, err)) ||
        !(d->mgr = kv_cache_new(per_seq * max_seqs, DM_BLOCK, false, err)) ||
        !(d->kv = model_kv_new(m, per_seq * max_seqs, DM_BLOCK, SOL_DT_F16, err))) {
        dm_free(&d->base);
        return NULL;
    }
    return &d->base;
}

int32_t drafter_model_used_blocks(const drafter *base) {
    if (base->ops != &k_model_ops) return 0;
    kv_cache_stats st;
    kv_cache_get_stats(((const dmodel *)base)->mgr, &st);
    return st.used_blocks;
}
