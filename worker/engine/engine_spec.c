/* engine_spec: speculative decoding inside the engine's step - one batched drafter call for the
 * decoding sequences that speculate, their drafts verified in the same flattened batch as every
 * other sequence's rows, and the policy that decides who speculates and with how many drafts.
 *
 * Policy (docs/speculative.md "In the engine"): at most spec_max_batch sequences speculate per
 * step (they hold one drafter slot each, so the draft model's KV is sized for that many), the
 * first decodes in scheduling order. With spec_adaptive: nobody speculates while more than
 * spec_max_batch sequences decode (a wide batch already keeps the matmuls busy, so verify rows
 * cost nearly their full price), each sequence's k moves by spec_adapt_k in [1, k_cap], and its
 * drafts are judged after a probe of SPEC_PROBE drafts, then every SPEC_WINDOW: speculation goes
 * on only while it pays - the expected tokens per verify step at the window's acceptance over
 * the step's cost in plain decode steps, 1 + k x spec_row_cost, is at least 1 for some k (which
 * then becomes k_cap) - and while acceptance stays above spec_min_acceptance. The probe's
 * acceptance counts two more accepted drafts (its few drafts only stop a draft that could not pay
 * even so), a full window's one more accepted and one more refused. Otherwise the sequence
 * pauses (its slot goes back) and retries from k = 1 later, each pause that follows a failed
 * judgement 8 times the last (SPEC_PAUSE up to SPEC_PAUSE_MAX: a retry also re-prefills the
 * draft's KV over the tokens it missed). The cost comes from the models' sizes, not from clocks,
 * so a seeded request speculates the same way on every run: a draft that costs as much as it
 * saves (a 2-of-12-layer draft with a 32k-vocabulary head costs half a target step) is dropped
 * after the probe even at 80% acceptance if k = 1 cannot pay. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "engine_internal.h"
#include "log.h"

#define SPEC_WINDOW 32      /* drafts per acceptance window */
#define SPEC_PROBE 4        /* drafts of the first window after a (re)start: judged early */
#define SPEC_PAUSE 256      /* tokens a paused sequence decodes plainly, the first time */
#define SPEC_PAUSE_MAX 4096 /* growing after each failed window stops here */
/* A verify row and its sampling (target probabilities over the vocabulary, the draft's q row),
 * in plain decode steps: measured on the CPU backend with the `small` preset at batch 1
 * (bench/spec_adaptive.sh: k = 1 with a useless draft costs 1.66-1.83 steps, of which the draft
 * model's pass is ~0.5). On a GPU a row is cheaper; the figure errs on the side of pausing. */
#define SPEC_ROW_COST 0.25

int32_t espec_max_logit_rows(const engine *e) {
    int64_t rows = e->cfg.max_num_seqs;
    if (e->drafter) rows += (int64_t)e->spec_max * e->cfg.spec_k;
    return rows < e->cfg.max_batched_tokens ? (int32_t)rows : e->cfg.max_batched_tokens;
}

static int make_drafter(engine *e, sol_err *err) {
    const engine_config *c = &e->cfg;
    if (c->spec_method == ENGINE_SPEC_NGRAM) {
        e->drafter = drafter_ngram_new(1, 4, err);
        return e->drafter ? 0 : err->code;
    }
    if (!c->draft_model)
        return sol_err_set(err, -EINVAL,
                           "worker.speculative.method is draft but no draft model is loaded "
                           "(worker.speculative.draft_model / --draft-model)");
    int32_t dv = model_get_hparams(c->draft_model)->n_vocab;
    if (dv != e->n_vocab)
        return sol_err_set(err, -EINVAL,
                           "draft model: vocabulary of %d tokens, the target has %d; a draft "
                           "must share the target's vocabulary",
                           dv, e->n_vocab);
    e->drafter = drafter_model_new(c->draft_model, e->spec_max, c->max_model_len + SPEC_MAX_K, err);
    return e->drafter ? 0 : err->code;
}

int espec_init(engine *e, sol_err *err) {
    engine_config *c = &e->cfg;
    if (c->spec_method == ENGINE_SPEC_OFF) return 0;
    if (c->spec_method != ENGINE_SPEC_DRAFT && c->spec_method != ENGINE_SPEC_NGRAM)
        return sol_err_set(err, -EINVAL, "worker.speculative.method: expected off, draft or ngram");
    if (c->spec_k < 1 || c->spec_k > SPEC_MAX_K)
        return sol_err_set(err, -EINVAL, "worker.speculative.k: expected 1..%d, found %d",
                           SPEC_MAX_K, c->spec_k);
    if (c->spec_max_batch <= 0) c->spec_max_batch = 2;
    if (!(c->spec_min_acceptance >= 0 && c->spec_min_acceptance <= 1)) c->spec_min_acceptance = 0.3;
    e->spec_max = c->spec_max_batch < c->max_num_seqs ? c->spec_max_batch : c->max_num_seqs;
    e->spec_row_cost = SPEC_ROW_COST;
    if (c->spec_method == ENGINE_SPEC_DRAFT && c->draft_model) {
        uint64_t target = model_step_bytes(e->m), draft = model_step_bytes(c->draft_model);
        e->spec_row_cost += target ? (double)draft / (double)target : 1.0;
    }
    int rc = make_drafter(e, err);
    if (rc) return rc ? rc : -ENOMEM;
    size_t nv = (size_t)e->n_vocab, n = (size_t)e->spec_max;
    e->spec_slots = malloc(sizeof *e->spec_slots * n);
    e->spec_reqs = calloc(n, sizeof *e->spec_reqs);
    e->spec_cands = calloc(n, sizeof *e->spec_cands);
    /* The n-gram drafter writes no q: one row is enough to hand it a valid pointer. */
    size_t q_rows = drafter_one_hot(e->drafter) ? 1 : n * (size_t)c->spec_k;
    e->spec_q = malloc(sizeof(float) * nv * q_rows);
    e->spec_p = malloc(sizeof(float) * nv * (size_t)(c->spec_k + 1));
    e->spec_scratch = malloc(sizeof(float) * nv);
    if (!e->spec_slots || !e->spec_reqs || !e->spec_cands || !e->spec_q || !e->spec_p ||
        !e->spec_scratch)
        return sol_err_set(err, -ENOMEM, "out of memory for speculative decoding buffers");
    for (int32_t i = 0; i < e->spec_max; i++)
        e->spec_slots[i] = e->spec_max - 1 - i;
    e->n_spec_slots = e->spec_max;
    LOG_INFO("engine",
             "speculative decoding: %s, k %d%s, up to %d sequences per step; a draft costs %.2f "
             "of a decode step",
             drafter_name(e->drafter), c->spec_k, c->spec_adaptive ? " (adaptive)" : "",
             e->spec_max, e->spec_row_cost);
    return 0;
}

void espec_free(engine *e) {
    drafter_free(e->drafter);
    free(e->spec_slots);
    free(e->spec_reqs);
    free(e->spec_cands);
    free(e->spec_q);
    free(e->spec_p);
    free(e->spec_scratch);
}

void espec_release(engine *e, ereq *r) {
    if (!e->drafter || r->spec_slot < 0) return;
    drafter_release(e->drafter, r->spec_slot);
    e->spec_slots[e->n_spec_slots++] = r->spec_slot;
    r->spec_slot = -1;
}

static bool is_decode(const sched_seq *s) {
    return s->state == SCHED_RUNNING && s->n_tokens - s->n_computed == 1;
}

static ereq *req_of(sched_seq *seq) {
    return (ereq *)seq; /* seq is the first member */
}

/* Drafts this request may ask for now (0: none), within max_tokens and the row budget. */
static int32_t wanted(engine *e, ereq *r, int32_t rows_left) {
    if (r->no_spec || r->n_generated < r->spec_resume_at) return 0;
    if (r->spec_k < 1) r->spec_k = e->cfg.spec_adaptive ? 1 : e->cfg.spec_k;
    int32_t k = r->spec_k, room = r->max_tokens - r->n_generated - 1;
    if (k > room) k = room; /* every emitted token counts; drafts past max_tokens are waste */
    if (k > rows_left) k = rows_left;
    if (k < 1) return 0;
    if (r->spec_slot < 0) {
        if (!e->n_spec_slots) return 0;
        r->spec_slot = e->spec_slots[--e->n_spec_slots];
    }
    return k;
}

void espec_propose(engine *e) {
    e->n_spec_cands = 0;
    if (!e->drafter) return;
    int32_t n_run, n_dec = 0;
    sched_seq *const *run = sched_running(e->sched, &n_run);
    for (int32_t i = 0; i < n_run; i++)
        n_dec += is_decode(run[i]);
    if (n_dec == 0 || (e->cfg.spec_adaptive && n_dec > e->spec_max)) return;
    int32_t rows_left = e->cfg.max_batched_tokens - n_dec, n = 0;
    size_t qstride = drafter_one_hot(e->drafter) ? 0 : (size_t)e->cfg.spec_k * e->n_vocab;
    for (int32_t i = 0; i < n_run && n < e->spec_max && rows_left > 0; i++) {
        ereq *r = req_of(run[i]);
        if (!is_decode(&r->seq)) continue;
        int32_t k = wanted(e, r, rows_left);
        if (!k) continue;
        e->spec_reqs[n] = (drafter_req){.slot = r->spec_slot,
                                        .seq = &r->sseq,
                                        .history = r->seq.tokens,
                                        .n_history = r->seq.n_tokens,
                                        .k = k,
                                        .tokens = r->seq.tokens + r->seq.n_tokens,
                                        .q = e->spec_q + qstride * (size_t)n};
        e->spec_cands[n++] = r;
        rows_left -= k;
    }
    if (!n) return;
    uint64_t t0 = sol_now_ns();
    sol_err err = {0};
    int rc = drafter_propose(e->drafter, e->spec_reqs, n, &err);
    e->spec.draft_ns += sol_now_ns() - t0;
    if (rc) { /* plain decoding this step; the request itself is fine */
        LOG_WARN("engine", "drafter failed, decoding without drafts: %s", err.msg);
        return;
    }
    for (int32_t i = 0; i < n; i++) {
        sched_seq *s = &e->spec_cands[i]->seq;
        s->n_spec = e->spec_reqs[i].n_draft;
        s->n_tokens += s->n_spec;
    }
    e->n_spec_cands = n;
}

void espec_after_schedule(engine *e, bool failed) {
    e->step_verifies = false;
    for (int32_t i = 0; i < e->n_spec_cands; i++) {
        sched_seq *s = &e->spec_cands[i]->seq;
        if (failed || !s->spec_step)
            sched_spec_drop(s);
        else
            e->step_verifies = true;
    }
}

/* The k in [1, k_max] with the most tokens per plain-step cost at acceptance a (each draft
 * accepted with probability a, independently: 1 + a + ... + a^k tokens per verify step, which
 * costs 1 + k x row_cost plain steps); *gain receives that ratio (>= 1: speculation pays). */
static int best_k(double a, int k_max, double row_cost, double *gain) {
    double tokens = 1.0, p = 1.0;
    int best = 1;
    *gain = 0.0;
    for (int k = 1; k <= k_max; k++) {
        p *= a;
        tokens += p;
        double g = tokens / (1.0 + k * row_cost);
        if (g > *gain) *gain = g, best = k;
    }
    return best;
}

/* Adaptive k and the acceptance window after one verify step. */
static void adapt(engine *e, ereq *r, int k, int j) {
    if (!e->cfg.spec_adaptive) return;
    int cap = r->spec_k_cap > 0 ? r->spec_k_cap : e->cfg.spec_k;
    r->spec_k = spec_adapt_k(r->spec_k, k, j, 1, cap);
    r->win_drafted += k;
    r->win_accepted += j;
    if (r->win_drafted < (r->spec_judged ? SPEC_WINDOW : SPEC_PROBE)) return;
    /* the probe's few drafts are read optimistically (two more accepted): only a draft that
     * cannot pay even then stops there; a full window is read with one of each */
    double gain, a = r->spec_judged ? (r->win_accepted + 1.0) / (r->win_drafted + 2.0)
                                    : (r->win_accepted + 2.0) / (r->win_drafted + 2.0);
    int kb = best_k(a, e->cfg.spec_k, e->spec_row_cost, &gain);
    if (gain < 1.0 || r->win_accepted < e->cfg.spec_min_acceptance * r->win_drafted) {
        int32_t pause = r->spec_pause ? r->spec_pause : SPEC_PAUSE;
        r->spec_resume_at = r->n_generated + pause;
        r->spec_pause = pause * 8 < SPEC_PAUSE_MAX ? pause * 8 : SPEC_PAUSE_MAX;
        r->spec_k = 1;
        r->spec_k_cap = 0;
        r->spec_judged = false; /* the retry is probed again */
        espec_release(e, r);
    } else {
        r->spec_pause = 0; /* it pays again: the next failure pauses briefly */
        r->spec_k_cap = kb;
        if (r->spec_k > kb) r->spec_k = kb;
        r->spec_judged = true;
    }
    r->win_drafted = r->win_accepted = 0;
}

/* The request's constraints on its k + 1 verify rows: logit_bias on each; the grammar's mask on
 * row j at the state after drafts 0..j-1, so a draft the grammar refuses has target probability 0
 * and is never accepted, and the resampled or bonus token is always allowed. Rows after a refused
 * draft are never reached. The grammar is walked through the drafts, then rewound. */
static int constrain_rows(engine *e, ereq *r, float *logits, const int32_t *draft, int k,
                          sol_err *err) {
    for (int j = 0; j <= k; j++)
        for (int32_t b = 0; b < r->n_bias; b++)
            logits[(size_t)j * e->n_vocab + r->bias_tokens[b]] += r->bias_values[b];
    if (!r->gram) return 0;
    int rc = grammar_mark(r->gram);
    if (rc) return sol_err_set(err, rc, "out of memory for the grammar");
    for (int j = 0; j <= k && !rc; j++) {
        rc = grammar_apply(r->gram, logits + (size_t)j * e->n_vocab, err);
        sol_err ignore = {0};
        if (!rc && j < k && grammar_accept(r->gram, draft[j], &ignore)) break;
    }
    grammar_reset_to_mark(r->gram);
    return rc;
}

int espec_verify(engine *e, ereq *r, float *logits, int32_t *out, sol_err *err) {
    uint64_t t0 = sol_now_ns();
    sched_seq *s = &r->seq;
    int k = s->n_spec, j = 0;
    int32_t n_hist = s->n_tokens - k;
    const int32_t *draft = s->tokens + n_hist;
    int rc = constrain_rows(e, r, logits, draft, k, err);
    if (rc) return rc;
    rc = spec_target_probs(e->smp, &r->sseq, logits, k, s->tokens, n_hist, e->spec_p, err);
    if (rc) return rc;
    const float *q = drafter_one_hot(e->drafter) ? NULL : e->spec_q;
    if (q) /* this request's q rows: its index among this step's candidates */
        for (int32_t i = 0; i < e->n_spec_cands; i++)
            if (e->spec_cands[i] == r) q = e->spec_q + (size_t)i * e->cfg.spec_k * e->n_vocab;
    int n = spec_verify(&r->sseq, e->spec_p, draft, q, k, e->n_vocab, spec_accept_exact,
                        e->spec_scratch, out, &j, err);
    if (n < 0) return n;
    for (int t = 0; r->gram && t < n; t++) /* what was emitted, into the grammar */
        if ((rc = grammar_accept(r->gram, out[t], err))) return rc;
    if ((rc = sched_spec_resolve(s, j, err))) return rc;
    spec_stats_add(&e->spec, k, j, 0, sol_now_ns() - t0);
    adapt(e, r, k, j);
    return n;
}
