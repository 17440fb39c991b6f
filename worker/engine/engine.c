/* engine: the serving actor. One thread owns the KV pool, the scheduler, the sampler scratch and
 * every live request; other threads only append to its inbox (mutex + condvar: commands are rare
 * next to steps, and a condvar lets an idle engine sleep without a poll timeout) and read the
 * stats snapshot. Each step: take new requests and cancellations, expire deadlines, draft
 * (speculative decoding, engine_spec.c), schedule, copy-on-write blocks, forward, commit K/V,
 * sample one token per finished sequence (or verify its drafts), emit events.
 *
 * Batch invariance: a request's tokens depend only on its own prompt, seed and draw index - the
 * backend computes each token's row bit-identically whatever else is in the batch, attention
 * reads K/V from the cache (so prefill chunk boundaries do not matter), each sequence samples
 * from its own logits row with its own (seed, position) stream, and preemption recomputes the
 * same K/V from the same tokens. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "clock.h"
#include "engine_internal.h"
#include "gguf.h"
#include "log.h"
#include "strbuf.h"

const char *engine_finish_name(engine_finish_reason r) {
    static const char *const names[] = {"none", "stop", "length", "cancelled", "error"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "?";
}

engine_config engine_config_default(void) {
    return (engine_config){.block_size = 16,
                           .memory_fraction = 0.9,
                           .max_model_len = 4096,
                           .kv_dtype = SOL_DT_F16,
                           .max_num_seqs = 64,
                           .max_batched_tokens = 2048,
                           .prefix_caching = true,
                           .spec_k = 4,
                           .spec_adaptive = true,
                           .spec_max_batch = 2,
                           .spec_min_acceptance = 0.3};
}

/* ---- events and finishing (engine thread) ------------------------------------------------- */

static void emit(engine *e, const engine_event *ev) {
    if (e->cfg.on_event) e->cfg.on_event(e->cfg.event_ctx, ev);
}

static void live_unlink(engine *e, ereq *r) {
    if (r->live_prev)
        r->live_prev->live_next = r->live_next;
    else
        e->live = r->live_next;
    if (r->live_next) r->live_next->live_prev = r->live_prev;
    e->n_live--;
    if (r->deadline_ns) e->n_deadlines--;
    if (e->n_live == 0) pthread_cond_broadcast(&e->idle);
}

/* Queue and pool figures of the stats snapshot; called with mu held. */
static void refresh_counts_locked(engine *e) {
    sched_counts c;
    kv_cache_stats ks;
    sched_get_counts(e->sched, &c);
    kv_cache_get_stats(e->kv, &ks);
    engine_stats *s = &e->stats;
    s->running = c.running;
    s->waiting = c.waiting;
    s->preempted = c.preempted;
    s->preemptions = c.total_preemptions;
    s->free_blocks = ks.free_blocks + ks.cached_blocks;
    s->prefix_hit_rate =
        ks.prefix_query_tokens ? (double)ks.prefix_hit_tokens / ks.prefix_query_tokens : 0.0;
    s->tier2_hit_tokens = ks.tier2_hit_tokens;
    s->tier1_hit_tokens = ks.prefix_hit_tokens - ks.tier2_hit_tokens;
    s->tier2_blocks = ks.tier2_slots;
    s->tier2_used = ks.tier2_used;
}

/* Emits the finish event (with any held text) and frees the request. The held text is copied
 * whole: a stop string may be 1024 bytes, and all of what it held back belongs to the output. */
static void finish(engine *e, ereq *r, engine_finish_reason why, const char *error) {
    const char *text = "", *tail, *more;
    size_t len = 0, tail_len = 0, more_len = 0;
    strbuf held;
    strbuf_init(&held);
    if ((why == ENGINE_FINISH_STOP || why == ENGINE_FINISH_LENGTH) && r->ts) {
        tok_stream_flush(r->ts, &tail, &tail_len);
        stop_text_feed(&r->stop, tail, tail_len, &text, &len);
        strbuf_append(&held, text, len); /* before the flush reuses the matcher's buffer */
        stop_text_flush(&r->stop, &more, &more_len);
        strbuf_append(&held, more, more_len);
        text = held.len ? held.data : "";
        len = held.len;
        if (held.oom) {
            why = ENGINE_FINISH_ERROR;
            error = "out of memory releasing the text held back for stop strings";
            text = "";
            len = 0;
        }
    }
    engine_event ev = {.id = r->id,
                       .kind = ENGINE_EV_FINISH,
                       .user = r->user,
                       .text = text,
                       .text_len = len,
                       .token = -1,
                       .finish = why,
                       .error = error,
                       .usage = {r->n_prompt, r->n_generated, r->seq.n_cached},
                       .embedding = r->embedding,
                       .embedding_dim = r->embedding ? model_get_hparams(e->m)->dim : 0};
    sched_remove(e->sched, &r->seq);
    espec_release(e, r);
    emit(e, &ev);
    pthread_mutex_lock(&e->mu);
    refresh_counts_locked(e); /* so a waiter woken by the last finish sees the freed blocks */
    live_unlink(e, r);
    pthread_mutex_unlock(&e->mu);
    ereq_free(r);
    strbuf_free(&held);
}

/* A sampled token: record it, stream its text, decide whether the request is done (true: it
 * finished and r is freed). */
static bool on_token(engine *e, ereq *r, const sampler_result *res) {
    int32_t id = res->token;
    r->n_generated++;
    e->step_emitted++;
    r->seq.due_ns = 0; /* its first token is out: a preemption requeues it by priority, arrival */
    if (!r->ignore_eos && e->tok && tokenizer_is_eog(e->tok, id)) {
        finish(e, r, ENGINE_FINISH_STOP, NULL);
        return true;
    }
    sched_seq_push(&r->seq, id); /* capacity covers max_tokens (ereq_build) */
    const char *text = "", *delta;
    size_t len = 0, dlen = 0;
    int stopped = 0;
    if (r->ts && tok_stream_push(r->ts, id, &delta, &dlen) == 0)
        stopped = stop_text_feed(&r->stop, delta, dlen, &text, &len);
    engine_event ev = {.id = r->id,
                       .kind = ENGINE_EV_TOKEN,
                       .user = r->user,
                       .text = text,
                       .text_len = len,
                       .token = id,
                       .sample = res};
    emit(e, &ev);
    if (stopped == 1)
        finish(e, r, ENGINE_FINISH_STOP, NULL);
    else if (stopped < 0)
        finish(e, r, ENGINE_FINISH_ERROR, "out of memory in the stop-string matcher");
    else if (r->n_generated >= r->max_tokens || r->seq.n_tokens >= r->seq.cap_tokens)
        finish(e, r, ENGINE_FINISH_LENGTH, NULL);
    else
        return false;
    return true;
}

/* ---- the step ----------------------------------------------------------------------------- */

/* A device backend's store: its own page-locked host memory (asynchronous copies); tier2_dir is
 * the file-backed store's folder and means nothing here. 1: the backend has no such memory. */
static int tier2_from_backend(engine *e, size_t bytes, sol_err *err) {
    sol_err e2 = {0};
    void *p = model_kv_host_alloc(e->m, bytes, &e2);
    if (!p && !e2.code) return 1;
    if (!p) return sol_err_set(err, e2.code, "worker.kv.tier2_blocks: %s", e2.msg);
    e->tier2 = p;
    e->tier2_backend = true;
    if (e->cfg.tier2_dir)
        return sol_err_set(err, -EINVAL,
                           "worker.kv.tier2_dir: the %s backend keeps its second tier in "
                           "page-locked host memory, not in a file (leave it unset)",
                           sol_backend_name(model_backend(e->m)));
    return 0;
}

/* worker.kv.tier2_blocks: on a device backend the store is its page-locked host memory; else a
 * file (created and unlinked at once in tier2_dir) mapped shared, so its pages can go to disk
 * when memory is short instead of taking the KV pool's room. The bookkeeping is the KV cache's
 * (kv_tier.h). */
static int start_tier2(engine *e, sol_err *err) {
    int32_t n = e->cfg.tier2_blocks;
    if (n <= 0) return 0;
    if (!e->cfg.prefix_caching)
        return sol_err_set(err, -EINVAL,
                           "worker.kv.tier2_blocks needs worker.scheduler.prefix_caching");
    if (!(e->tier2_bytes = model_kv_host_bytes(e->m, e->kv_data)))
        return sol_err_set(err, -ENOTSUP,
                           "worker.kv.tier2_blocks: the %s backend keeps no second KV tier (cpu "
                           "and cuda do)",
                           sol_backend_name(model_backend(e->m)));
    size_t bytes = (size_t)n * e->tier2_bytes;
    int rc = tier2_from_backend(e, bytes, err);
    if (rc <= 0) {
        if (!rc && !(rc = kv_cache_tier2(e->kv, n, err)))
            LOG_INFO("engine", "KV tier 2: %d blocks (%.1f MiB of page-locked host memory)", n,
                     (double)bytes / (1 << 20));
        return rc;
    }
    const char *dir = e->cfg.tier2_dir ? e->cfg.tier2_dir : getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/sol-kv-tier2-XXXXXX", dir && *dir ? dir : "/var/tmp");
    int fd = mkstemp(path);
    if (fd < 0)
        return sol_err_set(err, -errno, "worker.kv.tier2_dir: cannot create %s: %s", path,
                           strerror(errno));
    unlink(path);
    void *p = ftruncate(fd, (off_t)bytes)
                  ? MAP_FAILED
                  : mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int saved = errno;
    close(fd);
    if (p == MAP_FAILED)
        return sol_err_set(err, -saved, "worker.kv.tier2_blocks: cannot map %zu bytes in %s: %s",
                           bytes, dir && *dir ? dir : "/var/tmp", strerror(saved));
    e->tier2 = p;
    if ((rc = kv_cache_tier2(e->kv, n, err))) return rc;
    LOG_INFO("engine", "KV tier 2: %d blocks (%.1f MiB, a file in %s)", n,
             (double)bytes / (1 << 20), dir && *dir ? dir : "/var/tmp");
    return 0;
}

/* The second tier's copies this step's scheduling queued, in order: blocks evicted out to their
 * slots before anything writes them, hits back into their blocks before the forward pass. */
static int run_tier_ops(engine *e, sol_err *err) {
    int32_t n = 0;
    const kv_tier_op *op = kv_cache_tier_ops(e->kv, &n);
    for (int32_t i = 0; i < n; i++) {
        unsigned char *host = e->tier2 + (size_t)op[i].slot * e->tier2_bytes;
        int rc = model_kv_host_io(e->m, e->kv_data, op[i].block, host, op[i].to_tier, err);
        if (rc) return rc;
    }
    kv_cache_tier_done(e->kv);
    return 0;
}

/* KV events: a block entered the pool, moved to the second tier or left (engine thread, inside
 * kv_cache calls). */
static void on_block(void *ctx, uint64_t hash, kv_place where) {
    engine *e = ctx;
    pthread_mutex_lock(&e->links_mu);
    kv_links_block(e->links, hash, where);
    pthread_mutex_unlock(&e->links_mu);
}

/* A new request's links: held at once when the cache has their blocks already. */
static void add_links(engine *e, const ereq *r) {
    if (!e->links || !r->n_links) return;
    pthread_mutex_lock(&e->links_mu);
    for (size_t i = 0; i < r->n_links; i++)
        kv_links_add(e->links, r->links[i].link, r->links[i].block,
                     kv_cache_holds(e->kv, r->links[i].block));
    pthread_mutex_unlock(&e->links_mu);
}

size_t engine_kv_events(engine *e, kv_link_event *out, size_t cap, bool *lost) {
    *lost = false;
    if (!e->links) return 0;
    pthread_mutex_lock(&e->links_mu);
    size_t n = kv_links_drain(e->links, out, cap, lost);
    pthread_mutex_unlock(&e->links_mu);
    return n;
}

size_t engine_kv_held(engine *e, kv_link_event *out, size_t cap) {
    if (!e->links) return 0;
    pthread_mutex_lock(&e->links_mu);
    size_t n = kv_links_held(e->links, out, cap);
    pthread_mutex_unlock(&e->links_mu);
    return n;
}

/* Moves new requests into the scheduler and finishes cancelled and expired ones. */
static void take_commands(engine *e) {
    pthread_mutex_lock(&e->mu);
    ereq *in = e->inbox_head;
    e->inbox_head = e->inbox_tail = NULL;
    bool scan = e->n_cancels > 0 || e->n_deadlines > 0;
    e->n_cancels = 0;
    pthread_mutex_unlock(&e->mu);
    while (in) {
        ereq *next = in->inbox_next;
        sol_err err = {0};
        add_links(e, in);
        if (in->n_generated > 0 && in->n_generated >= in->max_tokens)
            finish(e, in, ENGINE_FINISH_LENGTH, NULL); /* resumed complete (check_length) */
        else if (sched_add(e->sched, &in->seq, &err))
            finish(e, in, ENGINE_FINISH_ERROR, err.msg);
        in = next;
    }
    if (!scan) return;
    uint64_t now = sol_now_ns();
    /* The live list only loses entries on this thread, so walking it needs the lock just to
     * read links that a concurrent submit may be changing at the head. */
    pthread_mutex_lock(&e->mu);
    ereq *r = e->live;
    pthread_mutex_unlock(&e->mu);
    while (r) {
        pthread_mutex_lock(&e->mu);
        ereq *next = r->live_next;
        bool cancel = r->cancel_requested;
        pthread_mutex_unlock(&e->mu);
        if (cancel)
            finish(e, r, ENGINE_FINISH_CANCELLED, NULL);
        else if (r->deadline_ns && now > r->deadline_ns)
            finish(e, r, ENGINE_FINISH_ERROR, "deadline exceeded before the request finished");
        r = next;
    }
}

static ereq *req_of(sched_seq *seq) {
    return (ereq *)seq; /* seq is the first member */
}

static void fail_batch(engine *e, const sched_batch *b, const char *msg) {
    LOG_ERROR("engine", "step failed: %s", msg);
    for (int32_t i = 0; i < b->n_seqs; i++)
        finish(e, req_of(b->seqs[i]), ENGINE_FINISH_ERROR, msg);
}

/* A verify decode at logit rows i .. i + n_spec: emits the accepted drafts and the correction
 * (or bonus) token one by one, so EOS, stop strings and max_tokens end the run exactly where
 * they would without speculation. Returns the rows it used. */
static int32_t verify_one(engine *e, ereq *r, int32_t i) {
    int32_t rows = r->seq.n_spec + 1, out[SPEC_MAX_K + 1];
    sol_err err = {0};
    int n = espec_verify(e, r, e->logits + (size_t)i * e->n_vocab, out, &err);
    if (n < 0) {
        finish(e, r, ENGINE_FINISH_ERROR, err.msg);
        return rows;
    }
    for (int t = 0; t < n; t++) {
        sampler_result res = {.token = out[t]};
        if (on_token(e, r, &res)) break;
    }
    return rows;
}

/* A grammar-constrained draw, sample first (as llama.cpp does): the unconstrained draw is tried
 * against the grammar (microseconds). When the grammar refuses it in a wide state (inside a
 * string: most tokens fit), the draw is made again without the refused tokens, up to
 * ENGINE_GRAMMAR_REDRAWS times (sampler_redraw); otherwise, or when those are refused too, the
 * whole mask is computed (cached per state; milliseconds to walk inside a string at a 150k
 * vocabulary) and the draw made among the allowed tokens. Each retry has its own position of
 * the request's random stream, and whether to redraw depends on the state alone, so replicas
 * draw alike. For plain temperature sampling every path gives exactly the distribution
 * restricted to the allowed tokens, and the argmax over them when greedy; with
 * top-k/top-p/min-p the truncation is applied before the grammar on the first try. With
 * logprobs the mask comes first, so they describe the constrained row. */
static uint64_t retry_position(uint64_t pos, int j) {
    return pos | 1ull << 62 | (uint64_t)j << 40; /* j = 0: the masked draw's old position */
}

static int32_t redraw_or_mask(engine *e, ereq *r, int32_t refused, uint64_t pos,
                              sampler_result *res, sol_err *err) {
    int k = grammar_wide(r->gram) ? ENGINE_GRAMMAR_REDRAWS : 0, j = 0;
    int32_t id = refused;
    for (; j < k; j++) {
        sampler_seq_set_position(&r->sseq, retry_position(pos, j));
        id = sampler_redraw(e->smp, &r->sseq, id, err);
        if (id == -ENOENT) break;
        if (id < 0) return id;
        if (grammar_accept(r->gram, id, err) == 0) break;
    }
    if (j == k || id == -ENOENT) {
        sampler_seq_set_position(&r->sseq, retry_position(pos, j));
        const uint64_t *allowed = grammar_allowed(r->gram, err);
        if (!allowed) return err->code;
        id = sampler_resample_allowed(e->smp, &r->sseq, allowed, err);
        if (id >= 0 && grammar_accept(r->gram, id, err)) return -EINVAL;
    }
    sampler_seq_set_position(&r->sseq, pos + 1);
    if (id >= 0) res->token = id, res->logprob = 0.0f, res->n_top = 0;
    return id;
}

static int32_t sample_constrained(engine *e, ereq *r, float *row, sampler_result *res,
                                  sol_err *err) {
    uint64_t pos = r->sseq.pos;
    int32_t id;
    const sampler_params *p = &r->sseq.params;
    /* Greedy or plain temperature: a refused draw is redrawn from the same distribution over
     * the allowed tokens, so the row needs no copy and no second pass. With truncation the mask
     * comes before top-k/top-p/min-p on the retry: a copy. */
    bool plain = p->temperature == 0.0f || ((p->top_k <= 0 || p->top_k >= e->n_vocab) &&
                                            p->top_p >= 1.0f && p->min_p <= 0.0f);
    if (!p->want_logprobs) {
        float *first = plain ? row : e->row_copy;
        if (!plain) memcpy(e->row_copy, row, sizeof(float) * (size_t)e->n_vocab);
        id = sampler_sample(e->smp, &r->sseq, first, r->seq.tokens, r->seq.n_tokens, res, err);
        if (id < 0 || grammar_accept(r->gram, id, err) == 0) return id;
        if (plain) return redraw_or_mask(e, r, id, pos, res, err);
        sampler_seq_set_position(&r->sseq, pos | (1ull << 62)); /* an independent draw */
    }
    int rc = grammar_apply(r->gram, row, err);
    if (rc) return rc;
    id = sampler_sample(e->smp, &r->sseq, row, r->seq.tokens, r->seq.n_tokens, res, err);
    sampler_seq_set_position(&r->sseq, pos + 1);
    if (id >= 0 && grammar_accept(r->gram, id, err)) return -EINVAL;
    return id;
}

/* Whether the row at `pos` of an embedding request's prompt feeds its pooling. */
static bool pools_row(const engine *e, const sched_seq *s, int32_t pos) {
    return e->pooling == ENGINE_POOL_MEAN ||
           (e->pooling == ENGINE_POOL_CLS ? pos == 0 : pos == s->n_tokens - 1);
}

/* The batch rows whose final hidden states embedding requests need (e->hidden_rows). */
static int32_t plan_hidden(engine *e, const sched_batch *b) {
    int32_t n = 0, off = 0;
    for (int32_t i = 0; i < b->n_seqs; off += b->seqs[i]->step_n, i++)
        if (req_of(b->seqs[i])->embed)
            for (int32_t k = 0; k < b->seqs[i]->step_n && n < e->hidden_cap; k++)
                if (pools_row(e, b->seqs[i], b->pos[off + k])) e->hidden_rows[n++] = off + k;
    return n;
}

/* Folds this step's hidden states into each embedding request (same walk as plan_hidden). A
 * mean restarts at position 0: a preempted request computes its prompt again. */
static void collect_hidden(engine *e, const sched_batch *b) {
    int32_t dim = model_get_hparams(e->m)->dim, n = 0, off = 0;
    for (int32_t i = 0; i < b->n_seqs; off += b->seqs[i]->step_n, i++) {
        ereq *r = req_of(b->seqs[i]);
        for (int32_t k = 0; r->embed && k < b->seqs[i]->step_n && n < e->hidden_cap; k++) {
            int32_t pos = b->pos[off + k];
            if (!pools_row(e, b->seqs[i], pos)) continue;
            const float *h = e->hidden + (size_t)n++ * dim;
            bool add = e->pooling == ENGINE_POOL_MEAN && pos > 0;
            for (int32_t d = 0; d < dim; d++)
                r->emb_acc[d] = (add ? r->emb_acc[d] : 0.0) + h[d];
            r->emb_n = add ? r->emb_n + 1 : 1;
        }
    }
}

/* An embedding request reached its sampling row: the prompt is done. Its pooled final hidden
 * state, L2-normalized, is the answer; nothing is generated. */
static void finish_embedding(engine *e, ereq *r) {
    int32_t dim = model_get_hparams(e->m)->dim;
    double ss = 0, n = r->emb_n > 0 ? r->emb_n : 1;
    for (int32_t k = 0; k < dim; k++)
        ss += (r->emb_acc[k] / n) * (r->emb_acc[k] / n);
    double inv = ss > 0 ? 1.0 / sqrt(ss) : 0.0;
    for (int32_t k = 0; k < dim; k++)
        r->emb_out[k] = (float)(r->emb_acc[k] / n * inv);
    r->embedding = r->emb_out;
    finish(e, r, ENGINE_FINISH_STOP, NULL);
}

/* Whether row r's token is the argmax of its raw logits, so the model may hand the id over
 * instead of the row (model_batch.argmax_ids): greedy, nothing that reads or changes the row
 * first (logprobs, penalties, logit bias, a grammar, the prompt's logits, a verify step), and a
 * generating request. */
static bool plain_greedy(const ereq *r) {
    const sampler_params *p = &r->sseq.params;
    return !r->embed && !r->seq.spec_step && !r->prompt_logits && !r->gram && r->n_bias == 0 &&
           p->temperature == 0.0f && !p->want_logprobs && p->repetition_penalty == 1.0f &&
           p->frequency_penalty == 0.0f && p->presence_penalty == 0.0f;
}

/* The step's rows all plain_greedy: the greedy ids are wanted instead of the logits. */
static bool greedy_step(const sched_batch *b) {
    for (int32_t i = 0; i < b->n_logits; i++)
        if (!plain_greedy(req_of(b->logit_seqs[i]))) return false;
    return b->n_logits > 0;
}

static void sample_all(engine *e, const sched_batch *b, bool greedy) {
    for (int32_t i = 0; i < b->n_logits; i++) {
        ereq *r = req_of(b->logit_seqs[i]);
        if (greedy && e->greedy[i] >= 0) { /* the model took the argmax: the sampler's token */
            sampler_result res;
            sampler_take(&r->sseq, e->greedy[i], &res);
            on_token(e, r, &res);
            continue;
        }
        if (r->embed) {
            finish_embedding(e, r);
            continue;
        }
        if (r->seq.spec_step) {
            i += verify_one(e, r, i) - 1;
            continue;
        }
        sampler_result res;
        sol_err err = {0};
        float *row = e->logits + (size_t)i * e->n_vocab;
        if (r->prompt_logits) { /* the first sample: this row is the last prompt position's */
            memcpy(r->prompt_logits, row, sizeof(float) * (size_t)e->n_vocab);
            r->prompt_logits = NULL;
        }
        for (int32_t k = 0; k < r->n_bias; k++)
            row[r->bias_tokens[k]] += r->bias_values[k];
        int32_t id = r->gram ? sample_constrained(e, r, row, &res, &err)
                             : sampler_sample(e->smp, &r->sseq, row, r->seq.tokens, r->seq.n_tokens,
                                              &res, &err);
        if (id < 0)
            finish(e, r, ENGINE_FINISH_ERROR, err.msg);
        else
            on_token(e, r, &res);
    }
}

static void update_stats(engine *e, const sched_batch *b, uint64_t t0, uint64_t sched_ns) {
    uint64_t now = sol_now_ns();
    if (!e->win_start_ns) e->win_start_ns = t0;
    e->win_tokens += (uint64_t)b->n_tokens;
    pthread_mutex_lock(&e->mu);
    refresh_counts_locked(e);
    engine_stats *s = &e->stats;
    s->steps++;
    s->greedy_steps = e->greedy_steps;
    s->generated_tokens += e->step_emitted;
    s->spec = e->spec;
    s->spec_acceptance = spec_stats_acceptance(&e->spec);
    s->spec_tokens_per_step = spec_stats_tokens_per_step(&e->spec);
    s->prompt_tokens += (uint64_t)b->n_prefill_tokens;
    s->step_ns += now - t0;
    s->sched_ns += sched_ns;
    if (now - e->win_start_ns >= 1000000000ull) {
        s->tokens_per_s = (double)e->win_tokens * 1e9 / (double)(now - e->win_start_ns);
        e->win_start_ns = now;
        e->win_tokens = 0;
    }
    pthread_mutex_unlock(&e->mu);
}

/* The model cannot step any more (model_health): say so in the stats, which the heartbeat
 * carries, and leave every request in place for the router to fail over. */
static void mark_unhealthy(engine *e, const char *why) {
    LOG_ERROR("engine", "unhealthy, no more steps: %s", why);
    pthread_mutex_lock(&e->mu);
    snprintf(e->stats.unhealthy, sizeof e->stats.unhealthy, "%s", why);
    pthread_mutex_unlock(&e->mu);
    e->unhealthy = true;
}

/* The test-only fault SOL_TEST_ENGINE_STALL=N: the engine thread stops before its N-th step and
 * stays stopped (as a hung device would) until the engine is freed. */
static void test_stall(engine *e) {
    LOG_WARN("engine", "SOL_TEST_ENGINE_STALL: stalling before step %llu (a test-only fault)",
             (unsigned long long)e->stall_at);
    for (;;) {
        pthread_mutex_lock(&e->mu);
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop) return;
        usleep(10000);
    }
}

/* Decode rows (with draft rows) of the running sequences that are past their prompt. */
static bool decoding(const sched_seq *q) {
    return q->n_computed + 1 >= q->n_tokens - q->n_spec;
}

/* X-Sol-TPOT-Ms: the next step takes no more tokens than keeps its tightest decoding stream's
 * target (step_budget.h); prompts then advance in smaller chunks. */
static void cap_for_tpot(engine *e) {
    int32_t n = 0, rows = 0;
    uint64_t tightest = 0;
    sched_seq *const *run = sched_running(e->sched, &n);
    for (int32_t i = 0; i < n; i++) {
        if (!decoding(run[i])) continue;
        rows += 1 + run[i]->n_spec;
        if (run[i]->tpot_ns && (!tightest || run[i]->tpot_ns < tightest))
            tightest = run[i]->tpot_ns;
    }
    sched_set_step_cap(e->sched, step_cost_cap(&e->cost, tightest, rows));
}

/* The forward pass's time, as decode rows and prompt tokens, into the cost model. */
static void observe_cost(engine *e, const sched_batch *b, uint64_t ns) {
    int32_t prefill = 0;
    for (int32_t i = 0; i < b->n_seqs; i++)
        if (b->seqs[i]->step_n > 1 && !b->seqs[i]->spec_step) prefill += b->seqs[i]->step_n;
    step_cost_observe(&e->cost, b->n_tokens - prefill, prefill, ns);
}

/* One step; returns false when there was nothing to run. */
static bool step(engine *e) {
    uint64_t t0 = sol_now_ns();
    take_commands(e);
    if (e->unhealthy) return false;
    if (e->stall_at && e->stats.steps + 1 == e->stall_at) {
        test_stall(e);
        return false;
    }
    e->step_emitted = 0;
    espec_propose(e); /* drafter time is not scheduling time: taken out of sched_ns below */
    uint64_t t_draft = sol_now_ns();
    sched_batch b;
    sol_err err = {0};
    cap_for_tpot(e);
    int rc = sched_step(e->sched, &b, &err);
    espec_after_schedule(e, rc != 0);
    if (rc) {
        fail_batch(e, &b, err.msg);
        return true;
    }
    uint64_t sched_ns = sol_now_ns() - t_draft;
    if (b.n_tokens == 0) return false;
    if (run_tier_ops(e, &err)) {
        fail_batch(e, &b, err.msg);
        return true;
    }
    for (int32_t i = 0; i < b.n_copies; i++)
        if (model_kv_copy_blocks(e->m, e->kv_data, &b.copies[i].src_block, &b.copies[i].dst_block,
                                 1, &err)) {
            fail_batch(e, &b, err.msg);
            return true;
        }
    int32_t n_hidden = plan_hidden(e, &b);
    bool greedy = greedy_step(&b);
    model_batch mb = {b.n_tokens,
                      b.tokens,
                      b.pos,
                      b.slots,
                      b.attn,
                      b.n_logits,
                      b.logit_rows,
                      n_hidden ? e->hidden : NULL,
                      n_hidden,
                      e->hidden_rows,
                      greedy ? e->greedy : NULL};
    uint64_t t_fwd = sol_now_ns();
    if (model_forward(e->m, e->kv_data, &mb, e->logits, &err)) {
        char why[256];
        if (model_health(e->m, why, sizeof why)) {
            mark_unhealthy(e, why);
            return false;
        }
        fail_batch(e, &b, err.msg);
        return true;
    }
    uint64_t t1 = sol_now_ns();
    if (e->step_verifies) e->spec.verify_ns += t1 - t_fwd; /* the whole pass: rows share it */
    observe_cost(e, &b, t1 - t_fwd);
    if (n_hidden) collect_hidden(e, &b);
    if (sched_commit(e->sched, &b, &err)) {
        fail_batch(e, &b, err.msg);
        return true;
    }
    sched_ns += sol_now_ns() - t1;
    e->greedy_steps += greedy;
    sample_all(e, &b, greedy);
    update_stats(e, &b, t0, sched_ns);
    return true;
}

static void *engine_main(void *arg) {
    engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        if (step(e)) continue;
        pthread_mutex_lock(&e->mu);
        while (!e->stop && !e->inbox_head && e->n_cancels == 0) {
            if (e->n_live == 0) pthread_cond_broadcast(&e->idle);
            /* A request queued but unschedulable right now cannot exist for long: the pool holds
             * one max_model_len sequence. Deadlines still need checking, so wake periodically. */
            if (e->n_live > 0) {
                struct timespec ts = sol_deadline_ms(10);
                pthread_cond_timedwait(&e->wake, &e->mu, &ts);
                break;
            }
            pthread_cond_wait(&e->wake, &e->mu);
        }
        pthread_mutex_unlock(&e->mu);
    }
    /* Shutdown: everything still live is cancelled (inbox first, so it is in the scheduler). */
    take_commands(e);
    while (e->live)
        finish(e, e->live, ENGINE_FINISH_CANCELLED, NULL);
    return NULL;
}

/* ---- start-up ----------------------------------------------------------------------------- */

static int64_t mem_available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}

static int check_config(const engine_config *c, sol_err *err) {
    if (c->block_size < 1 || c->max_model_len < 1 || c->max_num_seqs < 1 ||
        c->max_batched_tokens < c->max_num_seqs || c->num_blocks < 0)
        return sol_err_set(err, -EINVAL,
                           "engine config: expected block_size, max_model_len, max_num_seqs >= 1 "
                           "and max_batched_tokens >= max_num_seqs; found %d, %d, %d, %d",
                           c->block_size, c->max_model_len, c->max_num_seqs, c->max_batched_tokens);
    if (c->kv_dtype != SOL_DT_F16 && c->kv_dtype != SOL_DT_F32)
        return sol_err_set(err, -EINVAL, "worker.kv.dtype: expected f16 or f32, found %s",
                           sol_dtype_name(c->kv_dtype));
    if (c->num_blocks == 0 && !(c->memory_fraction > 0 && c->memory_fraction <= 1))
        return sol_err_set(err, -EINVAL, "worker.kv.memory_fraction: expected (0, 1], found %g",
                           c->memory_fraction);
    return 0;
}

/* num_blocks from the config, else memory_fraction of MemAvailable; then the start-up check. */
/* Tokens of KV one sequence can hold at once: max_model_len, or with a sliding window on every
 * layer (older blocks freed each step) the window plus one prefill chunk and a partial block at
 * each end. */
static int32_t seq_kv_tokens(const engine *e) {
    const engine_config *c = &e->cfg;
    int64_t w = model_get_hparams(e->m)->kv_window;
    if (w <= 0) return c->max_model_len;
    w += c->max_batched_tokens + 2 * c->block_size;
    return w < c->max_model_len ? (int32_t)w : c->max_model_len;
}

static int size_pool(engine *e, sol_err *err) {
    engine_config *c = &e->cfg;
    int32_t seq_tokens = seq_kv_tokens(e);
    size_t per_token = model_kv_bytes_per_token(e->m, c->kv_dtype);
    size_t per_block = per_token * (size_t)c->block_size;
    int64_t avail = -1;
    size_t dev_free = 0, dev_total = 0;
    int device = sol_mem_info(model_backend(e->m), &dev_free, &dev_total) == 0;
    const char *what =
        device ? "free device memory (after weights and workspace)" : "available memory";
    if (c->num_blocks == 0) {
        avail = device ? (int64_t)dev_free : mem_available_bytes();
        if (avail < 0)
            return sol_err_set(err, -EIO,
                               "cannot read MemAvailable from /proc/meminfo: set "
                               "worker.kv.num_blocks explicitly");
        double blocks = c->memory_fraction * (double)avail / (double)per_block;
        double most = (double)INT32_MAX / c->block_size;
        /* Unlike a GPU, host memory is shared with other workers on the machine: take no more
         * than running sequences can ever fill, twice over (the second half keeps prefixes). */
        double useful = 2.0 * c->max_num_seqs * ((seq_tokens + c->block_size - 1) / c->block_size);
        if (!device && useful < most) most = useful;
        c->num_blocks = (int32_t)(blocks < most ? blocks : most);
        if (device)
            LOG_INFO("engine",
                     "device memory: %.1f MiB free of %.1f MiB after weights and workspace",
                     dev_free / 1048576.0, dev_total / 1048576.0);
    }
    int64_t tokens = (int64_t)c->num_blocks * c->block_size;
    int32_t need = (seq_tokens + c->block_size - 1) / c->block_size;
    if (tokens < seq_tokens) {
        if (avail >= 0)
            return sol_err_set(err, -ENOSPC,
                               "KV pool: %.2f of %.1f MiB %s (worker.kv.memory_fraction, "
                               "--gpu-memory-utilization) gives %d blocks = %lld tokens at %zu "
                               "bytes per "
                               "token, less than one sequence of worker.kv.max_model_len = %d "
                               "(needs %d blocks, %.1f MiB): raise worker.kv.memory_fraction, set "
                               "worker.kv.num_blocks, or lower worker.kv.max_model_len",
                               c->memory_fraction, avail / 1048576.0, what, c->num_blocks,
                               (long long)tokens, per_token, c->max_model_len, need,
                               need * (double)per_block / 1048576.0);
        return sol_err_set(err, -ENOSPC,
                           "KV pool: worker.kv.num_blocks = %d blocks x %d = %lld tokens is less "
                           "than one sequence of worker.kv.max_model_len = %d (needs %d blocks): "
                           "raise worker.kv.num_blocks or lower worker.kv.max_model_len",
                           c->num_blocks, c->block_size, (long long)tokens, c->max_model_len, need);
    }
    LOG_INFO("engine", "KV pool: %d blocks = %lld tokens of context (%.1f MiB, %s, block %d)",
             c->num_blocks, (long long)tokens, (double)per_block * c->num_blocks / 1048576.0,
             sol_dtype_name(c->kv_dtype), c->block_size);
    if (seq_tokens < c->max_model_len)
        LOG_INFO("engine",
                 "sliding window of %d on every layer: a sequence holds at most %d tokens of KV "
                 "(blocks behind the window are freed as it grows)",
                 model_get_hparams(e->m)->kv_window, seq_tokens);
    return 0;
}

static int detect_template(engine *e, sol_err *err) {
    if (e->cfg.chat_template && e->cfg.chat_template[0]) {
        int rc = chat_template_from_name(e->cfg.chat_template, &e->chat_family, err);
        return rc ? sol_err_wrap(err, "worker.chat_template: ") : 0;
    }
    const char *src = NULL;
    sol_err ignore = {0};
    const gguf_file *g = model_gguf(e->m);
    if (g && gguf_get_kv(g, "tokenizer.chat_template"))
        gguf_get_str(g, "tokenizer.chat_template", &src, &ignore);
    e->chat_family = chat_template_detect(src);
    return 0;
}

/* The vocabulary as bytes for grammar-constrained requests: end-of-generation tokens may end a
 * complete text; control, unknown and unused tokens never appear in one. */
grammar_vocab *engine_grammar_vocab_new(const tokenizer *tok, sol_err *err) {
    int32_t n = tokenizer_n_vocab(tok);
    grammar_vocab *v = NULL;
    const char **piece = calloc((size_t)n, sizeof *piece);
    size_t *len = calloc((size_t)n, sizeof *len);
    uint8_t *kind = calloc((size_t)n, 1);
    int rc = piece && len && kind ? 0 : sol_err_set(err, -ENOMEM, "out of memory");
    for (int32_t i = 0; i < n && !rc; i++) {
        int type = tokenizer_token_type(tok, i);
        piece[i] = tokenizer_token_piece(tok, i, &len[i]);
        kind[i] = tokenizer_is_eog(tok, i) ? 1
                  : type == TOK_TYPE_CONTROL || type == TOK_TYPE_UNKNOWN || type == TOK_TYPE_UNUSED
                      ? 2
                      : 0;
    }
    if (!rc) v = grammar_vocab_new(n, piece, len, kind, err);
    free(piece), free(len), free(kind);
    return v;
}

static const char *const POOLING_NAMES[] = {"auto", "last", "mean", "cls"};

/* worker.embedding_pooling auto: what the GGUF says (llama.cpp's pooling_type), else last. */
static void resolve_pooling(engine *e, const model_hparams *hp) {
    e->pooling = e->cfg.pooling;
    if (e->pooling == ENGINE_POOL_AUTO)
        e->pooling = hp->pooling_type == 1   ? ENGINE_POOL_MEAN
                     : hp->pooling_type == 2 ? ENGINE_POOL_CLS
                                             : ENGINE_POOL_LAST;
    if (e->cfg.pooling == ENGINE_POOL_AUTO && hp->pooling_type < 0) return; /* the default */
    LOG_INFO("engine", "embeddings: %s pooling%s", POOLING_NAMES[e->pooling],
             e->cfg.pooling == ENGINE_POOL_AUTO ? " (the model's pooling_type)"
                                                : " (worker.embedding_pooling)");
}

static int start(engine *e, sol_err *err) {
    const model_hparams *hp = model_get_hparams(e->m);
    e->n_vocab = hp->n_vocab;
    if (e->cfg.max_model_len > hp->ctx_len) {
        LOG_WARN("engine",
                 "worker.kv.max_model_len %d is beyond the model's context length %d: "
                 "using %d",
                 e->cfg.max_model_len, hp->ctx_len, hp->ctx_len);
        e->cfg.max_model_len = hp->ctx_len;
    }
    int rc;
    /* The activations first, so a device's free memory, which the pool is sized from, already
     * excludes them (speculation's extra logit rows are added below, once it is set up). */
    if ((rc = model_reserve(e->m, e->cfg.max_batched_tokens, e->cfg.max_num_seqs, err))) return rc;
    if ((rc = size_pool(e, err))) return rc;
    if (!(e->kv = kv_cache_new(e->cfg.num_blocks, e->cfg.block_size, e->cfg.prefix_caching, err)))
        return err->code ? err->code : -ENOMEM;
    if (e->cfg.prefix_caching) { /* KV events: as many pairs as blocks, at most the bound */
        int32_t pairs = e->cfg.num_blocks < KV_LINKS_MAX ? e->cfg.num_blocks : KV_LINKS_MAX;
        if (!(e->links = kv_links_new(pairs, err))) return err->code ? err->code : -ENOMEM;
        kv_cache_observe(e->kv, on_block, e);
    }
    if (!(e->kv_data =
              model_kv_new(e->m, e->cfg.num_blocks, e->cfg.block_size, e->cfg.kv_dtype, err)))
        return err->code ? err->code : -ENOMEM;
    if ((rc = start_tier2(e, err))) return rc;
    sched_config sc = {e->cfg.max_num_seqs, e->cfg.max_batched_tokens, hp->kv_window};
    if (!(e->sched = sched_new(&sc, e->kv, err))) return err->code ? err->code : -ENOMEM;
    if (!(e->smp = sampler_new(e->n_vocab, err))) return err->code ? err->code : -ENOMEM;
    if (e->tok && !(e->gvocab = engine_grammar_vocab_new(e->tok, err)))
        return err->code ? err->code : -ENOMEM;
    if (e->gvocab && !(e->gcache = grammar_cache_new(e->gvocab, ENGINE_GRAMMAR_CACHE_BYTES, err)))
        return err->code ? err->code : -ENOMEM;
    if ((rc = espec_init(e, err))) return rc;
    int32_t rows = espec_max_logit_rows(e);
    e->logits = malloc(sizeof(float) * (size_t)e->n_vocab * (size_t)rows);
    e->row_copy = malloc(sizeof(float) * (size_t)e->n_vocab);
    e->greedy = malloc(sizeof(int32_t) * (size_t)rows);
    resolve_pooling(e, hp);
    /* last and cls pool one row per sequence; mean every prompt row of a step */
    e->hidden_cap = e->pooling == ENGINE_POOL_MEAN && e->cfg.max_batched_tokens > rows
                        ? e->cfg.max_batched_tokens
                        : rows;
    e->hidden = malloc(sizeof(float) * (size_t)hp->dim * (size_t)e->hidden_cap);
    e->hidden_rows = malloc(sizeof(int32_t) * (size_t)e->hidden_cap);
    if (!e->hidden || !e->hidden_rows)
        return sol_err_set(err, -ENOMEM, "out of memory for hidden states");
    if (!e->row_copy || !e->greedy) return sol_err_set(err, -ENOMEM, "out of memory for logits");
    if (!e->logits) return sol_err_set(err, -ENOMEM, "out of memory for logits");
    if ((rc = model_reserve(e->m, e->cfg.max_batched_tokens, rows, err))) return rc;
    if ((rc = detect_template(e, err))) return rc;
    e->stats.total_blocks = e->cfg.num_blocks;
    e->stats.free_blocks = e->cfg.num_blocks;
    e->stats.block_size = e->cfg.block_size;
    e->stats.max_model_len = e->cfg.max_model_len;
    e->stats.speculative = e->drafter != NULL;
    return 0;
}

engine *engine_new(const engine_config *cfg, model *m, tokenizer *tok, sol_err *err) {
    if (!cfg || !m) {
        sol_err_set(err, -EINVAL, "engine_new: NULL config or model");
        return NULL;
    }
    if (check_config(cfg, err)) return NULL;
    engine *e = calloc(1, sizeof *e);
    if (!e) {
        sol_err_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    e->cfg = *cfg;
    e->m = m;
    e->tok = tok;
    e->next_id = 1;
    const char *stall = getenv("SOL_TEST_ENGINE_STALL");
    e->stall_at = stall ? strtoull(stall, NULL, 10) : 0;
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->links_mu, NULL);
    sol_cond_init(&e->wake);
    pthread_cond_init(&e->idle, NULL);
    if (start(e, err) || pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        if (!err || !err->code) sol_err_set(err, -EAGAIN, "cannot start the engine thread");
        engine_free(e);
        return NULL;
    }
    e->thread_started = true;
    return e;
}

void engine_free(engine *e) {
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        pthread_cond_signal(&e->wake);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    sched_free(e->sched);
    kv_cache_free(e->kv);
    kv_links_free(e->links);
    pthread_mutex_destroy(&e->links_mu);
    if (e->tier2 && e->tier2_backend)
        model_kv_host_free(e->m, e->tier2);
    else if (e->tier2)
        munmap(e->tier2, (size_t)e->cfg.tier2_blocks * e->tier2_bytes);
    if (e->kv_data) model_kv_free(e->m, e->kv_data);
    sampler_free(e->smp);
    grammar_cache_free(e->gcache);
    grammar_vocab_free(e->gvocab);
    espec_free(e);
    free(e->logits);
    free(e->greedy);
    free(e->row_copy);
    free(e->hidden);
    free(e->hidden_rows);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->wake);
    pthread_cond_destroy(&e->idle);
    free(e);
}

/* ---- API for other threads ---------------------------------------------------------------- */

int64_t engine_submit(engine *e, const engine_request *req, sol_err *err) {
    ereq *r = NULL;
    int rc = ereq_build(e, req, &r, err);
    if (rc) return rc;
    pthread_mutex_lock(&e->mu);
    if (e->stop) {
        pthread_mutex_unlock(&e->mu);
        ereq_free(r);
        return sol_err_set(err, -ESHUTDOWN, "the engine is shutting down");
    }
    r->id = r->seq.id = e->next_id++;
    e->stats.quotes_used += (uint64_t)r->quotes_used;
    e->stats.quotes_declined += (uint64_t)r->quotes_declined;
    r->live_next = e->live;
    if (e->live) e->live->live_prev = r;
    e->live = r;
    e->n_live++;
    if (r->deadline_ns) e->n_deadlines++;
    if (e->inbox_tail)
        e->inbox_tail->inbox_next = r;
    else
        e->inbox_head = r;
    e->inbox_tail = r;
    int64_t id = (int64_t)r->id; /* r may be finished and freed as soon as we unlock */
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
    return id;
}

int engine_cancel(engine *e, uint64_t id) {
    int rc = -ENOENT;
    pthread_mutex_lock(&e->mu);
    for (ereq *r = e->live; r; r = r->live_next)
        if (r->id == id) {
            if (!r->cancel_requested) e->n_cancels++;
            r->cancel_requested = true;
            rc = 0;
            break;
        }
    if (rc == 0) pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

void engine_get_stats(engine *e, engine_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    pthread_mutex_unlock(&e->mu);
}

void engine_wait_idle(engine *e) {
    pthread_mutex_lock(&e->mu);
    while (e->n_live > 0)
        pthread_cond_wait(&e->idle, &e->mu);
    pthread_mutex_unlock(&e->mu);
}
