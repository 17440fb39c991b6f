/* broker_dispatch: what the broker thread does with requests — dispatch to a worker of the pool,
 * cancels, drains, failover and failure. Worker messages and the periodic tick are in
 * broker_inbox.c.
 *
 * Invariants: a request is either in exactly one pool queue (worker == NULL) or on one worker
 * (worker != NULL, counted in worker->inflight). Chunks are accepted only from the worker the
 * request is on and only with a seq above the last one accepted, so a late or duplicated chunk
 * never reaches the client twice. What was accepted is kept (text + token ids) so that a failover
 * can re-send the request with resume_text/resume_tokens and the new worker continues exactly
 * after the last token the client has. */
#include "broker_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "clock.h"
#include "log.h"
#include "slo_admit.h"

#define MOD "broker"

/* ---- sending --------------------------------------------------------------------------------- */

static const char *wname(const bk_worker *w) {
    return w->id[0] ? w->id : "?";
}

/* 0, or the send error (-EHOSTUNREACH: the worker is gone; -EAGAIN: its queue is full). */
static int send_env(broker *b, const zmq_util_identity *to, const Sol__Envelope *env) {
    sol_err e = {0};
    int rc = zmq_util_router_send(b->sock, to, env, &e);
    if (rc) LOG_DEBUG(MOD, "send failed: %s", e.msg);
    return rc;
}

void bw_send_cancel(broker *b, bk_worker *w, const char *wire_id) {
    Sol__Cancel c = SOL__CANCEL__INIT;
    c.request_id = (char *)wire_id;
    Sol__Envelope env;
    frame_wrap_cancel(&env, &c);
    send_env(b, &w->ident, &env);
}

/* What is left of a target of `ms` from the request's arrival (at least 1: the expiry ends a
 * request past it; 0: no target). */
static uint32_t left_ms(const bk_req *r, int ms) {
    if (!ms) return 0;
    uint64_t spent = (sol_now_ns() - r->received_ns) / 1000000ull;
    return spent < (uint64_t)ms ? (uint32_t)(ms - (int)spent) : 1;
}

/* The ids w's model generated for each assistant reply the request quotes (reply_ids.h), set for
 * this attempt's encoding; show = false takes them off again (the message is the request's).
 * Returns how many messages have ids. */
static size_t quote_replies(broker *b, Sol__Generate *g, const bk_worker *w, bool show) {
    size_t quoted = 0;
    if (!b->replies) return 0;
    for (size_t i = 0; i < g->n_messages; i++) {
        Sol__ChatMessage *m = g->messages[i];
        size_t n = 0;
        const uint32_t *ids = NULL;
        if (show && !strcmp(m->role, "assistant") && !m->n_tool_calls && m->content)
            ids = reply_ids_get(b->replies, (reply_key){w->model, g->cache_salt}, m->content,
                                strlen(m->content), &n);
        m->content_ids = (uint32_t *)ids;
        m->n_content_ids = n;
        quoted += n > 0;
    }
    return quoted;
}

/* Encode r's Generate for this attempt on w (with what was already streamed) into b->enc. */
static int encode_attempt(broker *b, bk_req *r, const bk_worker *w, size_t *len) {
    Sol__Envelope *env = genmsg_envelope(r->msg);
    Sol__Generate *g = env->generate;
    size_t quoted = quote_replies(b, g, w, true);
    /* the latency targets, as what is left of them now (docs/api.md, "Latency targets") */
    g->deadline_ms = left_ms(r, r->slo.ms[SOL_SLO_DEADLINE]);
    g->ttft_ms = r->n_toks || r->text.len ? 0 : left_ms(r, r->slo.ms[SOL_SLO_TTFT]);
    g->tpot_ms = (uint32_t)r->slo.ms[SOL_SLO_TPOT];
    char *orig_id = g->request_id, *orig_text = g->resume_text;
    g->request_id = r->wire_id;
    g->resume_text = r->text.len ? r->text.data : "";
    g->resume_tokens = r->toks;
    g->n_resume_tokens = r->n_toks;
    sol_err e = {0};
    int rc = frame_size(env, len, &e); /* checked once when built; the resume fields are ours */
    if (!rc && *len > b->enc_cap) {
        uint8_t *p = realloc(b->enc, *len);
        if (!p)
            rc = -ENOMEM;
        else {
            b->enc = p;
            b->enc_cap = *len;
        }
    }
    if (!rc) frame_pack(env, b->enc);
    if (!rc) metrics_count_quoted(b->cfg.metrics, b->cfg.pools[r->metric_pool], quoted);
    g->request_id = orig_id;
    g->resume_text = orig_text;
    g->resume_tokens = NULL;
    g->n_resume_tokens = 0;
    quote_replies(b, g, w, false);
    if (rc) LOG_WARN(MOD, "request %s cannot be encoded: %s", r->http_id, e.msg);
    return rc;
}

/* Put r on w. Returns 0, or -1 when w could not take it (r is back at the front of its queue). */
static int assign(broker *b, bk_req *r, bk_worker *w) {
    size_t len = 0;
    if (encode_attempt(b, r, w, &len)) {
        bw_fail(b, r, 500, "internal error: the request could not be encoded", 0);
        return 0;
    }
    sol_err e = {0};
    int rc = zmq_util_router_send_bytes(b->sock, &w->ident, b->enc, len, &e);
    if (rc) {
        queue_push_front(&b->queues[r->pool], r);
        r->avoid = w;
        if (rc == -EHOSTUNREACH) bw_worker_dead(b, w, "its connection is gone");
        return -1;
    }
    r->worker = w;
    r->last_seq = -1;
    r->attempts++;
    w->inflight++;
    rp_charge(b->pidx, r->chain, w, &r->charge);
    if (!r->dispatched_once) {
        r->dispatched_once = true;
        metrics_observe(b->cfg.metrics, METRIC_QUEUE, b->cfg.pools[r->metric_pool],
                        (double)(sol_now_ns() - r->received_ns) * 1e-9);
    }
    LOG_DEBUG(MOD, "request %s → worker %s (attempt %u)", r->wire_id, wname(w), r->attempts);
    return 0;
}

/* n > 1: the worker already holding another sample of the same request, when it can take this
 * one too - there the samples share the prompt's KV (its engine holds a sample back while a
 * sibling prefills the same prompt, then serves it from the prefix cache). */
static bk_worker *sibling_worker(broker *b, const bk_req *r, wt_scope s) {
    if (r->choice == 0 || r->avoid) return NULL;
    for (size_t i = 0; i < b->inf.cap; i++) {
        const bk_req *o = b->inf.slots[i];
        if (o && o != r && o->stream == r->stream && o->worker && wt_can_take(o->worker, s))
            return o->worker;
    }
    return NULL;
}

wt_scope bw_scope(const broker *b, int pool, const char *model) {
    return (wt_scope){b->cfg.pools[pool], model};
}

static bk_worker *pick_worker(broker *b, const bk_req *r, int pool) {
    wt_scope s = bw_scope(b, pool, r->model);
    bk_worker *w = sibling_worker(b, r, s);
    if (w) return w;
    rp_request q = {.chain = r->chain,
                    .prefix_hash = r->prefix_hash,
                    .affinity_on = b->cfg.affinity_prefix_chars > 0,
                    .avoid = r->avoid};
    return rp_pick(&b->wt, b->cfg.policy, s, &q, b->pidx);
}

/* Whether any worker of the pool can take a request now, whatever its model. */
static bool pool_has_room(const broker *b, int pool) {
    for (size_t i = 0; i < b->wt.n; i++)
        if (wt_can_take(b->wt.w[i], bw_scope(b, pool, NULL))) return true;
    return false;
}

/* A queued request with X-Sol-TTFT-Ms whose first token, sent to w now, is predicted past its
 * target: it leaves the queue now (429, never run) rather than hold a slot for an answer the
 * client has given up on. True when r ended. */
static bool would_miss(broker *b, bk_req *r, bk_worker *w) {
    int ttft = r->slo.ms[SOL_SLO_TTFT];
    if (!ttft || r->n_toks || r->text.len) return false;
    double pred = slo_worker_ttft(&b->wt, bw_scope(b, r->pool, r->model), w, b->pidx, r->chain);
    double age = (double)(sol_now_ns() - r->received_ns) * 1e-9;
    if (!pred || age + pred <= ttft / 1e3 * SLO_TTFT_SAFETY) return false;
    queue_remove(&b->queues[r->pool], r);
    char msg[256];
    snprintf(msg, sizeof msg,
             "the request waited %.0f ms in the queue; its first token would come after its %d "
             "ms (X-Sol-TTFT-Ms, predicted %.0f ms more); it never ran",
             age * 1e3, ttft, pred * 1e3);
    oai_error err;
    oai_error_status(&err, 429, msg);
    snprintf(err.code, sizeof err.code, "ttft_deadline_exceeded");
    err.retry_after_s = 1;
    metrics_count_slo(b->cfg.metrics, b->cfg.pools[r->metric_pool], false);
    bw_fail_err(b, r, &err);
    return true;
}

/* In queue order, every request a free worker of its scope takes. A request no worker of its
 * model can take now stays where it is and does not hold back the ones behind it that another
 * model's workers can serve; with one model per pool this is the plain FIFO it always was (the
 * first that finds no worker ends the pass: nothing behind it would find one either). */
void bw_pump(broker *b, int pool) {
    bk_queue *q = &b->queues[pool];
    bk_req *prev = NULL;
    for (bk_req *r = q->head; r && pool_has_room(b, pool);) {
        bk_req *next = r->qnext;
        bk_worker *w = pick_worker(b, r, pool);
        if (!w) {
            if (!r->model[0]) return;
            prev = r;
            r = next;
            continue;
        }
        if (would_miss(b, r, w)) {
            r = prev ? prev->qnext : q->head;
            continue;
        }
        queue_remove(q, r);
        if (assign(b, r, w)) return; /* back at the front: w is gone or full; try again later */
        r = prev ? prev->qnext : q->head;
    }
}

/* ---- ending requests ------------------------------------------------------------------------ */

/* Weight of a new sample in a pool's gap between slots freeing (about the last eight). */
#define FREE_GAP_WEIGHT 0.125

/* A slot of r's pool frees while the pool has no room: a sample of the rate slots free at under
 * load, which a request with a TTFT target waits on when it finds every worker full. */
static void note_slot_freed(broker *b, const bk_req *r) {
    bk_queue *q = &b->queues[r->pool];
    uint64_t now = sol_now_ns();
    if (!pool_has_room(b, r->pool)) {
        if (q->last_free_ns) {
            double gap = (double)(now - q->last_free_ns) * 1e-9;
            q->free_gap_s = q->free_gap_s > 0
                                ? (1 - FREE_GAP_WEIGHT) * q->free_gap_s + FREE_GAP_WEIGHT * gap
                                : gap;
        }
        q->last_free_ns = now;
    } else {
        q->last_free_ns = 0; /* the next gap starts when the pool is full again */
    }
}

static void detach(broker *b, bk_req *r) {
    if (r->worker) {
        note_slot_freed(b, r);
        rp_release(r->worker, &r->charge);
        r->worker->inflight--;
        r->worker->finished_since_hb++;
        r->worker = NULL;
    } else {
        queue_remove(&b->queues[r->pool], r);
    }
}

void bw_fail(broker *b, bk_req *r, int status, const char *msg, int retry_after_s) {
    oai_error err;
    oai_error_status(&err, status, msg);
    err.retry_after_s = retry_after_s;
    bw_fail_err(b, r, &err);
}

void bw_fail_err(broker *b, bk_req *r, const oai_error *err) {
    http_chunk c = {.error = err, .index = r->choice};
    http_stream_push(r->stream, &c);
    detach(b, r);
    inflight_release(&b->inf, r);
    b->dirty = true;
}

/* The client is gone or the request timed out: stop the worker now, forget the request. */
void bw_drop(broker *b, bk_req *r) {
    if (r->worker) bw_send_cancel(b, r->worker, r->wire_id);
    int pool = r->pool;
    detach(b, r);
    inflight_release(&b->inf, r);
    bw_pump(b, pool);
}

/* r goes back to the front of its queue, to be sent (with what it streamed) to another worker.
 * A migration (its worker handed it back while draining) is planned, so it is not a failed
 * attempt and never exhausts BROKER_MAX_ATTEMPTS: a stream may move at every rolling restart. */
static void requeue(broker *b, bk_req *r, const char *why, bool migration) {
    bk_worker *w = r->worker;
    if (w) {
        rp_release(w, &r->charge);
        w->inflight--;
        w->finished_since_hb++;
        if (migration)
            w->migrated++;
        else
            w->failed_over++;
    }
    r->worker = NULL;
    r->avoid = w;
    if (migration && r->attempts) r->attempts--;
    if (r->attempts >= BROKER_MAX_ATTEMPTS) {
        LOG_WARN(MOD, "request %s failed after %u attempts (%s)", r->wire_id, r->attempts, why);
        bw_fail(b, r, 503, "the request failed on every worker it was sent to", 1);
        return;
    }
    LOG_INFO(MOD, "request %s %s (%s) after %zu tokens", r->wire_id,
             migration ? "migrates" : "fails over", why, r->n_toks);
    if (migration)
        metrics_count_migration(b->cfg.metrics, b->cfg.pools[r->metric_pool]);
    else
        metrics_count_failover(b->cfg.metrics, b->cfg.pools[r->metric_pool]);
    inflight_new_attempt(&b->inf, r);
    /* Queued again now: if its pool just lost its last worker, a replacement gets the whole
     * dead_after_ms grace (expire_requests) from here, not from when the request first came. */
    r->queued_ms = sol_now_ms();
    queue_push_front(&b->queues[r->pool], r);
}

void bw_failover(broker *b, bk_req *r, const char *why) {
    requeue(b, r, why, false);
}

void bw_migrate(broker *b, bk_req *r) {
    requeue(b, r, "its worker is draining and handed it back", true);
}

void bw_move(broker *b, bk_req *r, const char *why) {
    bk_worker *w = r->worker;
    if (!w) return;
    bw_send_cancel(b, w, r->wire_id); /* before requeue gives the request a new wire id */
    w->rebalanced++;
    metrics_count_rebalance(b->cfg.metrics, b->cfg.pools[r->metric_pool]);
    requeue(b, r, why, true);
}

void bw_worker_dead(broker *b, bk_worker *w, const char *why) {
    LOG_WARN(MOD, "worker %s (pool %s) is dead: %s; failing over %u requests", wname(w), w->pool,
             why, w->inflight);
    for (size_t i = 0; i < b->inf.cap; i++) {
        bk_req *r = b->inf.slots[i];
        if (r && r->worker == w) {
            bw_failover(b, r, why);
            r = b->inf.slots[i]; /* a request out of attempts was released (freed) */
        }
        if (r && r->avoid == w) r->avoid = NULL;
    }
    metrics_remove_worker(b->cfg.metrics, w->id);
    wt_remove(&b->wt, w);
    b->dirty = true;
}

/* ---- new requests, cancels, drains (from HTTP threads) --------------------------------------- */

/* The pool the request is queued in: classify's when it has a live worker of the request's model,
 * else the fallback pool when that has one, else (a request for a model) any pool that has one -
 * a model served by a precise pool only is still served when the classifier says fast. */
static int route_pool(broker *b, int pool, const char *model) {
    if (wt_live_in_pool(&b->wt, bw_scope(b, pool, model))) return pool;
    for (size_t p = 0; b->cfg.fallback_pool && p < b->cfg.n_pools; p++)
        if (!strcmp(b->cfg.pools[p], b->cfg.fallback_pool) &&
            wt_live_in_pool(&b->wt, bw_scope(b, (int)p, model)))
            return (int)p;
    for (size_t p = 0; model && *model && p < b->cfg.n_pools; p++)
        if (wt_live_in_pool(&b->wt, bw_scope(b, (int)p, model))) return (int)p;
    return -1;
}

static int retry_after_s(const broker *b) {
    return (b->cfg.dead_after_ms + 999) / 1000;
}

static uint32_t max_tokens_of(const bk_req *r) {
    return genmsg_envelope(r->msg)->generate->max_tokens;
}

/* The pool's seconds per output token per stream now: the mean over its workers that report it
 * (0: none does). */
static double pool_tpot(const broker *b, wt_scope s) {
    double sum = 0;
    int n = 0;
    for (size_t i = 0; i < b->wt.n; i++) {
        const bk_worker *w = b->wt.w[i];
        if (wt_in_scope(w, s) && wt_tpot(w) > 0) sum += wt_tpot(w), n++;
    }
    return n ? sum / n : 0;
}

/* When r, queued behind the pool's q->n others, would get a slot should every worker be full now
 * (seconds; 0: cannot be told): the pool's measured gap between slots freeing under load; else a
 * replay of the slots - each running stream ends after its remaining tokens (max_tokens less
 * those streamed), each request queued ahead takes the soonest free slot for its max_tokens -
 * at the pool's time per token. A stream or request without max_tokens makes it unknown. */
static double slot_wait(const broker *b, const bk_req *r) {
    const bk_queue *q = &b->queues[r->pool];
    if (q->free_gap_s > 0) return q->free_gap_s * (double)(q->n + 1);
    wt_scope s = bw_scope(b, r->pool, r->model);
    double tpot = pool_tpot(b, s);
    size_t n = 0;
    double *ends = tpot > 0 ? malloc(sizeof *ends * (b->inf.live ? b->inf.live : 1)) : NULL;
    for (size_t i = 0; ends && i < b->inf.cap; i++) {
        const bk_req *o = b->inf.slots[i];
        if (!o || !o->worker || !wt_in_scope(o->worker, s)) continue;
        uint32_t max = max_tokens_of(o);
        if (!max) goto unknown;
        ends[n++] = max > o->n_toks ? (double)(max - o->n_toks) * tpot : 0;
    }
    if (!n) goto unknown;
    for (const bk_req *o = q->head; o; o = o->qnext) {
        size_t soonest = 0;
        for (size_t k = 1; k < n; k++)
            if (ends[k] < ends[soonest]) soonest = k;
        if (!max_tokens_of(o)) goto unknown;
        ends[soonest] += (double)max_tokens_of(o) * tpot;
    }
    double wait = ends[0];
    for (size_t k = 1; k < n; k++)
        if (ends[k] < wait) wait = ends[k];
    free(ends);
    return wait > 0 ? wait : 1e-3;
unknown:
    free(ends);
    return 0;
}

/* Latency targets (slo_admit.h): true when r was refused at once, 429 or 503 with a code. */
static bool refused_by_slo(broker *b, bk_req *r) {
    if (!r->slo.ms[SOL_SLO_TTFT] && !r->slo.ms[SOL_SLO_TPOT]) return false;
    slo_decision d;
    slo_admit(&b->wt, bw_scope(b, r->pool, r->model), b->pidx, r->chain, &r->slo, slot_wait(b, r),
              &d);
    if (d.verdict == SLO_ADMIT) return false;
    oai_error err;
    oai_error_status(&err, d.verdict == SLO_NEVER ? 503 : 429, d.why);
    snprintf(err.code, sizeof err.code, "%s", d.code);
    err.retry_after_s = d.retry_after_s;
    LOG_INFO(MOD, "request %s refused: %s", r->wire_id, d.why);
    metrics_count_slo(b->cfg.metrics, b->cfg.pools[r->metric_pool], true);
    bw_fail_err(b, r, &err);
    return true;
}

void bw_on_dispatch(broker *b, bk_cmd *c) {
    bk_req *r = inflight_add(&b->inf, c->id);
    if (!r) {
        oai_error err;
        oai_error_status(&err, 500, "out of memory");
        http_chunk ch = {.error = &err};
        http_stream_push(c->stream, &ch);
        genmsg_free(c->msg);
        free(c->chain);
        http_stream_unref(c->stream);
        return;
    }
    r->stream = c->stream;
    r->choice = c->choice;
    r->msg = c->msg; /* built and checked on the HTTP thread: no decode here */
    r->received_ns = c->received_ns;
    r->queued_ms = sol_now_ms();
    r->prefix_hash = c->prefix_hash;
    r->chain = c->chain; /* now r's */
    r->metric_pool = c->pool;
    r->slo = c->slo;
    snprintf(r->model, sizeof r->model, "%s", c->model);
    r->pool = route_pool(b, c->pool, r->model);
    if (r->pool < 0) {
        r->pool = c->pool;
        char msg[400];
        if (r->model[0])
            snprintf(msg, sizeof msg, "no worker serving model '%.100s' is available; retry later",
                     r->model);
        else
            snprintf(msg, sizeof msg, "no worker of pool '%s' is available; retry later",
                     b->cfg.pools[c->pool]);
        bw_fail(b, r, 503, msg, retry_after_s(b));
        return;
    }
    if (refused_by_slo(b, r)) return;
    bk_queue *q = &b->queues[r->pool];
    if (!q->head) {
        bk_worker *w = pick_worker(b, r, r->pool);
        if (w && !assign(b, r, w)) return;
        if (w) queue_remove(q, r); /* assign put it back; queue it properly below */
    }
    if (q->n >= (size_t)b->cfg.max_queue_per_pool) {
        char msg[160];
        snprintf(msg, sizeof msg, "pool '%s' is at capacity (%zu requests queued); retry later",
                 b->cfg.pools[r->pool], q->n);
        bw_fail(b, r, 429, msg, 1);
        return;
    }
    queue_push_back(q, r);
    bw_pump(b, r->pool);
}

void bw_on_cancel(broker *b, const char *http_id) {
    /* Clients may reuse X-Request-Id: only requests whose client really left are dropped, which
     * an empty push tells (-EPIPE). Linear, but cancels are rare next to chunks. */
    http_chunk probe = {0};
    for (size_t i = 0; i < b->inf.cap; i++) {
        bk_req *r = b->inf.slots[i];
        if (!r || strcmp(r->http_id, http_id)) continue;
        if (http_stream_push(r->stream, &probe) != -EPIPE) continue;
        LOG_DEBUG(MOD, "request %s: client went away; cancelling", r->wire_id);
        bw_drop(b, r);
    }
}

void bw_on_drain(broker *b, const char *worker_id) {
    bk_worker *w = wt_find_id(&b->wt, worker_id);
    if (!w) return;
    Sol__Drain d = SOL__DRAIN__INIT;
    d.worker_id = w->id;
    Sol__Envelope env;
    frame_wrap_drain(&env, &d);
    send_env(b, &w->ident, &env);
    w->draining = true;
    LOG_INFO(MOD, "worker %s draining (admin request): %u requests left", wname(w), w->inflight);
}
