/* broker_inbox: messages from workers (Register, Heartbeat, TokenChunk, Error) and the
 * periodic tick. Split from broker_dispatch.c, which holds dispatch and failover; the shared
 * helpers below are small wrappers so each file reads top to bottom. */
#include "broker_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "clock.h"
#include "log.h"

#define MOD "broker"

static void reply_error(broker *b, const zmq_util_identity *to, int code, const char *msg) {
    Sol__Error er;
    frame_error_init(&er, code, msg, NULL);
    Sol__Envelope env;
    frame_wrap_error(&env, &er);
    sol_err e = {0};
    zmq_util_router_send(b->sock, to, &env, &e);
}

/* ---- Register / Heartbeat ------------------------------------------------------------------ */

/* Adds the worker's model to the names requests may use (docs/api.md, "Models"). 0; -1 when it is
 * new and BROKER_MAX_MODELS are known already; -2 when it holds a control character (the list is
 * one name per line, and no client could type it). */
static int note_model(broker *b, const char *model) {
    for (const char *c = model; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) return -2;
    if (!b->models.len) strbuf_putc(&b->models, '\n');
    if (strbuf_has_line(&b->models, model)) return 0;
    if (b->n_models >= BROKER_MAX_MODELS) return -1;
    strbuf_puts(&b->models, model);
    strbuf_putc(&b->models, '\n');
    b->n_models++;
    LOG_INFO(MOD, "model '%s' is served (requests may name it)", model);
    return 0;
}

static void on_register(broker *b, const zmq_util_identity *from, const Sol__Register *reg) {
    sol_err e = {0};
    char who[64];
    if (frame_check_version(reg, &e)) {
        LOG_ERROR(MOD, "refusing worker %s: %s", zmq_util_identity_str(from, who, sizeof who),
                  e.msg);
        reply_error(b, from, SOL_ERROR_VERSION_MISMATCH, e.msg);
        return;
    }
    int noted = note_model(b, reg->model);
    if (noted) {
        char msg[400];
        if (noted == -2)
            snprintf(msg, sizeof msg, "model name '%.100s' has a control character: refused",
                     reg->model);
        else
            snprintf(msg, sizeof msg,
                     "this router serves %d models already (its bound): model '%.100s' is refused",
                     BROKER_MAX_MODELS, reg->model);
        LOG_ERROR(MOD, "refusing worker %s: %s", reg->worker_id, msg);
        reply_error(b, from, SOL_ERROR_BAD_REQUEST, msg);
        return;
    }
    bk_worker *w = wt_find_ident(&b->wt, from);
    if (w && reg->session && reg->session == w->session) {
        /* The same connection registering again (a worker sends Register when it connects and
         * when ZeroMQ reports the connection up): nothing was lost, nothing fails over. */
        LOG_DEBUG(MOD, "worker %s registered again in the same session", w->id);
    } else if (w) {
        /* A worker registers again after it lost us (or restarted under the same id): whatever
         * it was running for us is gone on its side. */
        LOG_INFO(MOD, "worker %s registered again; failing over its %u requests", w->id,
                 w->inflight);
        for (size_t i = 0; i < b->inf.cap; i++) {
            bk_req *r = b->inf.slots[i];
            if (r && r->worker == w) bw_failover(b, r, "its worker re-registered");
        }
        w->uid = ++b->next_uid; /* its cache is not the one the prefix index knows */
    } else {
        bk_worker t = {0};
        t.ident = *from;
        t.registered_ms = sol_now_ms();
        t.uid = ++b->next_uid;
        if (!(w = wt_add(&b->wt, &t))) return;
    }
    w->session = reg->session;
    snprintf(w->id, sizeof w->id, "%s", reg->worker_id);
    snprintf(w->pool, sizeof w->pool, "%s", reg->pool);
    snprintf(w->model, sizeof w->model, "%s", reg->model);
    snprintf(w->backend, sizeof w->backend, "%s", reg->backend);
    snprintf(w->chat_template, sizeof w->chat_template, "%s", reg->chat_template);
    snprintf(w->tool_format, sizeof w->tool_format, "%s", reg->tool_format);
    w->capacity = reg->capacity;
    w->max_context = reg->max_context;
    w->draining = false;
    w->last_seen_ms = sol_now_ms();
    int known = 0;
    for (size_t p = 0; p < b->cfg.n_pools; p++)
        known |= !strcmp(b->cfg.pools[p], w->pool);
    LOG_INFO(MOD, "worker %s joined pool %s%s (model %s, backend %s, capacity %u, context %u)",
             w->id, w->pool, known ? "" : " (not a configured pool: it gets no work)", w->model,
             w->backend, w->capacity, w->max_context);
    /* say hello at once, so the worker's liveness check starts now */
    Sol__Heartbeat hb = SOL__HEARTBEAT__INIT;
    hb.worker_id = w->id;
    Sol__Envelope env;
    frame_wrap_heartbeat(&env, &hb);
    zmq_util_router_send(b->sock, &w->ident, &env, &e);
    b->dirty = true;
    for (size_t p = 0; p < b->cfg.n_pools; p++)
        bw_pump(b, (int)p);
}

/* A worker whose engine cannot step keeps heartbeating (its link thread is fine): take it out of
 * dispatch and fail its requests over at once, token-exactly, as if it had died; it stays
 * listed, unhealthy with its reason, and comes back if it reports healthy again. */
static void note_health(broker *b, bk_worker *w, const Sol__Heartbeat *hb) {
    bool was = w->unhealthy;
    w->unhealthy = hb->unhealthy;
    snprintf(w->unhealthy_why, sizeof w->unhealthy_why, "%s",
             hb->unhealthy && hb->unhealthy_reason ? hb->unhealthy_reason : "");
    if (!w->unhealthy || was) return;
    char why[320];
    snprintf(why, sizeof why, "the worker is unhealthy: %s", w->unhealthy_why);
    LOG_WARN(MOD, "worker %s (pool %s): %s; failing over %u requests", w->id, w->pool, why,
             w->inflight);
    for (size_t i = 0; i < b->inf.cap; i++) {
        bk_req *r = b->inf.slots[i];
        if (r && r->worker == w) bw_failover(b, r, why);
    }
}

/* w's counts of links held (either tier) and held in its second tier, as a link went from one
 * state to another in the index (a holder the index recycled at PIDX_WAYS is not counted out). */
static void count_link(bk_worker *w, pidx_state was, pidx_state now) {
    w->kv_links += (uint64_t)(now != PIDX_NONE) - (uint64_t)(was != PIDX_NONE);
    w->kv_tier2_links += (uint64_t)(now == PIDX_TIER2) - (uint64_t)(was == PIDX_TIER2);
}

/* KV events: what w's prefix cache holds, into the index cache_aware routes on. */
static void on_kv_events(broker *b, bk_worker *w, const Sol__Heartbeat *hb) {
    if (hb->kv_snapshot) {
        if (b->pidx) pidx_drop_uid(b->pidx, w->uid);
        w->kv_links = w->kv_tier2_links = 0;
        w->kv_snapshots++;
    }
    if (!b->pidx) return;
    for (size_t i = 0; i < hb->n_kv_removed; i++)
        count_link(w, pidx_drop(b->pidx, hb->kv_removed[i], w->uid), PIDX_NONE);
    for (size_t i = 0; i < hb->n_kv_stored; i++)
        count_link(w, pidx_hold(b->pidx, hb->kv_stored[i], w->uid, false), PIDX_POOL);
    for (size_t i = 0; i < hb->n_kv_tier2; i++)
        count_link(w, pidx_hold(b->pidx, hb->kv_tier2[i], w->uid, true), PIDX_TIER2);
}

static void on_heartbeat(broker *b, bk_worker *w, const Sol__Heartbeat *hb) {
    on_kv_events(b, w, hb);
    w->hb_running = hb->running;
    w->hb_waiting = hb->waiting;
    w->finished_since_hb = 0;
    w->kv_usage = hb->total_blocks ? 1.0 - (double)hb->free_blocks / hb->total_blocks : 0;
    w->prefix_hit_rate = hb->prefix_hit_rate;
    w->spec_acceptance = hb->spec_acceptance;
    w->tokens_per_s = hb->tokens_per_s;
    w->engine_steps = hb->engine_steps;
    w->tier1_hit_tokens = hb->tier1_hit_tokens;
    w->tier2_hit_tokens = hb->tier2_hit_tokens;
    w->tier2_blocks = hb->tier2_blocks;
    w->tier2_used = hb->tier2_used;
    w->quotes_used = hb->quotes_used;
    w->quotes_declined = hb->quotes_declined;
    w->spec_steps = hb->spec_steps;
    w->spec_drafted = hb->spec_drafted;
    w->spec_accepted = hb->spec_accepted;
    w->spec_emitted = hb->spec_emitted;
    w->spec_draft_seconds = hb->spec_draft_seconds;
    w->spec_verify_seconds = hb->spec_verify_seconds;
    if (hb->draining && !w->draining)
        LOG_INFO(MOD, "worker %s is draining: no new work goes to it", w->id);
    w->draining = w->draining || hb->draining;
    note_health(b, w, hb);
    metrics_worker_load load = {
        .running = hb->running,
        .waiting = hb->waiting,
        .kv_usage = w->kv_usage,
        .prefix_hit_rate = hb->prefix_hit_rate,
        .spec_acceptance = hb->spec_acceptance,
        .spec_steps = hb->spec_steps,
        .spec_drafted = hb->spec_drafted,
        .spec_accepted = hb->spec_accepted,
        .spec_emitted = hb->spec_emitted,
        .spec_draft_seconds = hb->spec_draft_seconds,
        .spec_verify_seconds = hb->spec_verify_seconds,
        .unhealthy = w->unhealthy,
        .tier1_hit_tokens = hb->tier1_hit_tokens,
        .tier2_hit_tokens = hb->tier2_hit_tokens,
        .tier2_used = hb->tier2_used,
        .quotes_used = hb->quotes_used,
        .quotes_declined = hb->quotes_declined,
    };
    metrics_set_worker(b->cfg.metrics, w->id, w->pool, &load);
    b->dirty = true;
}

/* ---- TokenChunk ---------------------------------------------------------------------------- */

static int convert_logprobs(broker *b, const Sol__TokenChunk *c) {
    size_t n_top = 0;
    for (size_t i = 0; i < c->n_logprobs; i++)
        n_top += c->logprobs[i]->n_top;
    if (c->n_logprobs > b->lp_cap) {
        oai_token_logprob *p = realloc(b->lp, c->n_logprobs * sizeof *p);
        if (!p) return -ENOMEM;
        b->lp = p;
        b->lp_cap = c->n_logprobs;
    }
    if (n_top > b->top_cap) {
        oai_top_logprob *p = realloc(b->top, n_top * sizeof *p);
        if (!p) return -ENOMEM;
        b->top = p;
        b->top_cap = n_top;
    }
    size_t k = 0;
    for (size_t i = 0; i < c->n_logprobs; i++) {
        const Sol__TokenLogprob *t = c->logprobs[i];
        b->lp[i] = (oai_token_logprob){t->text, t->logprob, b->top + k, t->n_top};
        for (size_t j = 0; j < t->n_top; j++)
            b->top[k++] = (oai_top_logprob){t->top[j]->text, t->top[j]->logprob};
    }
    return 0;
}

/* A chat reply that ended as its model chose is remembered with its ids (reply_ids.h), for the
 * turn that sends it back. */
static void remember_reply(broker *b, const bk_req *r, const bk_worker *w) {
    const Sol__Generate *g = genmsg_envelope(r->msg)->generate;
    if (!b->replies || !r->n_toks || !g->n_messages) return;
    reply_key k = {w->model, g->cache_salt};
    if (reply_ids_put(b->replies, k, r->text.data, r->text.len, r->toks, r->n_toks))
        LOG_WARN(MOD, "request %s: out of memory to keep its reply's ids", r->http_id);
}

static void finish_ok(broker *b, bk_req *r, const Sol__TokenChunk *c, http_chunk *hc) {
    remember_reply(b, r, r->worker);
    oai_usage u = {0};
    if (c->usage) {
        u.prompt_tokens = c->usage->prompt_tokens;
        u.completion_tokens = c->usage->completion_tokens;
        u.cached_tokens = c->usage->cached_tokens;
        metrics_add_prefix_cache(b->cfg.metrics, b->cfg.pools[r->metric_pool], u.cached_tokens,
                                 u.prompt_tokens);
        metrics_add_tokens(b->cfg.metrics, b->cfg.pools[r->metric_pool], u.prompt_tokens,
                           u.completion_tokens);
    }
    hc->finish =
        c->finish_reason == SOL__FINISH_REASON__FINISH_LENGTH ? OAI_FINISH_LENGTH : OAI_FINISH_STOP;
    hc->usage = &u;
    hc->embedding = c->embedding;
    hc->n_embedding = c->n_embedding;
    http_stream_push(r->stream, hc);
    bk_worker *w = r->worker;
    w->served++;
    w->inflight--;
    w->finished_since_hb++;
    r->worker = NULL;
    int pool = r->pool;
    inflight_release(&b->inf, r);
    b->dirty = true;
    bw_pump(b, pool);
}

/* Latency targets (docs/api.md): a request still queued when its first token is due, or past its
 * whole deadline, never runs; one running past its whole deadline is stopped. True when r ended. */
static bool expire_by_slo(broker *b, bk_req *r, uint64_t now_ns) {
    int ttft = r->slo.ms[SOL_SLO_TTFT], dl = r->slo.ms[SOL_SLO_DEADLINE];
    /* in nanoseconds, and reached at equality: the worker's copy of the deadline (what was left
     * at send, rounded up) fires no earlier than this one, so its FINISH_ERROR must find it
     * reached here even when it lands within the same millisecond */
    uint64_t age_ns = now_ns - r->received_ns, age_ms = age_ns / 1000000ull;
    bool streamed = r->n_toks || r->text.len;
    const char *hdr = NULL, *code = NULL;
    int limit = 0;
    if (dl && age_ns >= (uint64_t)dl * 1000000ull)
        hdr = "X-Sol-Deadline-Ms", code = "deadline_exceeded", limit = dl;
    else if (ttft && !r->worker && !streamed && age_ns >= (uint64_t)ttft * 1000000ull)
        hdr = "X-Sol-TTFT-Ms", code = "ttft_deadline_exceeded", limit = ttft;
    if (!hdr) return false;
    oai_error err;
    char msg[256];
    if (r->worker)
        snprintf(msg, sizeof msg, "the request ran past its deadline of %d ms (%s); stopped", limit,
                 hdr);
    else
        snprintf(msg, sizeof msg,
                 "the request waited %llu ms in the queue, past its %d ms (%s); it never ran",
                 (unsigned long long)age_ms, limit, hdr);
    oai_error_status(&err, r->worker ? 504 : 429, msg);
    snprintf(err.code, sizeof err.code, "%s", code);
    err.retry_after_s = r->worker ? 0 : 1;
    LOG_INFO(MOD, "request %s: %s", r->wire_id, msg);
    metrics_count_slo(b->cfg.metrics, b->cfg.pools[r->metric_pool], false);
    if (r->worker) bw_send_cancel(b, r->worker, r->wire_id);
    bw_fail_err(b, r, &err);
    return true;
}

static void on_chunk(broker *b, bk_worker *w, const Sol__TokenChunk *c) {
    bk_req *r = inflight_find(&b->inf, c->request_id);
    if (!r || r->worker != w) {
        /* finished, cancelled or failed over: tell the worker to stop if it is still going */
        if (c->finish_reason == SOL__FINISH_REASON__FINISH_NONE)
            bw_send_cancel(b, w, c->request_id);
        return;
    }
    if ((int64_t)c->seq <= r->last_seq) return; /* a duplicate */
    r->last_seq = c->seq;
    int pool = r->pool;
    switch (c->finish_reason) {
    case SOL__FINISH_REASON__FINISH_CANCELLED: /* unasked: the worker gives it back */
        if (w->draining)
            bw_migrate(b, r); /* worker.drain = migrate: its draining Heartbeat came first */
        else
            bw_failover(b, r, "the worker cancelled it");
        bw_pump(b, pool);
        return;
    case SOL__FINISH_REASON__FINISH_ERROR: {
        /* the worker enforces the whole deadline too (Generate.deadline_ms), often first */
        if (expire_by_slo(b, r, sol_now_ns())) {
            bw_pump(b, pool);
            return;
        }
        char msg[512];
        /* Before any token the worker is refusing the input (prompt over its context, ...):
         * the client's fault, so 400 with the worker's words. After, the generation broke. */
        bool refused = !r->n_toks && !r->text.len;
        snprintf(msg, sizeof msg, "%s%.250s",
                 refused ? "" : "generation failed on the worker: ", c->error ? c->error : "");
        bw_fail(b, r, refused ? 400 : 500, msg, 0);
        bw_pump(b, pool);
        return;
    }
    default:
        break;
    }
    rp_first_token(w, &r->charge, sol_now_ns()); /* streaming: its prefill is done */
    http_chunk hc = {.text = c->text ? c->text : "",
                     .text_len = c->text ? strlen(c->text) : 0,
                     .index = r->choice};
    if (c->n_logprobs && !convert_logprobs(b, c)) {
        hc.logprobs = b->lp;
        hc.n_logprobs = c->n_logprobs;
    }
    strbuf_append(&r->text, hc.text, hc.text_len);
    inflight_add_tokens(r, c->token_ids, c->n_token_ids);
    if (c->finish_reason != SOL__FINISH_REASON__FINISH_NONE) {
        finish_ok(b, r, c, &hc);
        return;
    }
    if (http_stream_push(r->stream, &hc) == -EPIPE) bw_drop(b, r);
}

/* ---- Error from a worker ----------------------------------------------------------------- */

static void on_worker_error(broker *b, bk_worker *w, const Sol__Error *er) {
    bk_req *r = er->request_id && er->request_id[0] ? inflight_find(&b->inf, er->request_id) : NULL;
    if (!r || r->worker != w) {
        LOG_WARN(MOD, "worker %s: error %d: %s", w->id, er->code, er->message);
        return;
    }
    int pool = r->pool;
    if (er->code == SOL_ERROR_OVERLOADED) {
        r->attempts--; /* a refusal is not a failed attempt: nothing ran */
        bw_failover(b, r, "the worker refused it (busy or draining)");
    } else if (er->code >= 400 && er->code < 500) {
        bw_fail(b, r, 400, er->message, 0);
    } else {
        char msg[512];
        snprintf(msg, sizeof msg, "worker %s failed the request: %.250s", w->id, er->message);
        bw_fail(b, r, 500, msg, 0);
    }
    bw_pump(b, pool);
}

/* ---- dispatch of one worker message -------------------------------------------------------- */

static void on_message(broker *b, const zmq_util_identity *from, const Sol__Envelope *env) {
    if (env->body_case == SOL__ENVELOPE__BODY_REGISTER) {
        on_register(b, from, env->register_);
        return;
    }
    bk_worker *w = wt_find_ident(&b->wt, from);
    if (!w) {
        /* e.g. after a router restart: the worker must register before anything else */
        reply_error(b, from, SOL_ERROR_NOT_REGISTERED,
                    "this router does not know you (it may have restarted): send Register");
        return;
    }
    w->last_seen_ms = sol_now_ms();
    switch (env->body_case) {
    case SOL__ENVELOPE__BODY_HEARTBEAT:
        on_heartbeat(b, w, env->heartbeat);
        break;
    case SOL__ENVELOPE__BODY_TOKEN_CHUNK:
        on_chunk(b, w, env->token_chunk);
        break;
    case SOL__ENVELOPE__BODY_ERROR:
        on_worker_error(b, w, env->error);
        break;
    default:
        LOG_WARN(MOD, "worker %s sent a %s, which a router does not expect; ignored", w->id,
                 frame_body_name(env->body_case));
    }
}

void bw_on_worker_message(broker *b) {
    for (int n = 0; n < 4096; n++) { /* bounded: let the pipe have a turn */
        zmq_util_identity from = {0};
        Sol__Envelope *env = NULL;
        sol_err e = {0};
        int rc = zmq_util_router_recv(b->sock, ZMQ_DONTWAIT, &from, &env, &e);
        if (rc == -EAGAIN) return;
        if (rc < 0) {
            char who[64];
            LOG_WARN(MOD, "dropped a bad frame from %s: %s",
                     from.len ? zmq_util_identity_str(&from, who, sizeof who) : "?", e.msg);
            if (from.len) reply_error(b, &from, SOL_ERROR_BAD_REQUEST, e.msg);
            continue;
        }
        on_message(b, &from, env);
        frame_free_envelope(env);
    }
}

/* ---- the tick ------------------------------------------------------------------------------ */

static void send_heartbeats(broker *b) {
    for (size_t i = 0; i < b->wt.n;) {
        bk_worker *w = b->wt.w[i];
        Sol__Heartbeat hb = SOL__HEARTBEAT__INIT;
        hb.worker_id = w->id;
        Sol__Envelope env;
        frame_wrap_heartbeat(&env, &hb);
        sol_err e = {0};
        if (zmq_util_router_send(b->sock, &w->ident, &env, &e) == -EHOSTUNREACH) {
            bw_worker_dead(b, w, "its connection is gone");
            continue; /* the table shifted down */
        }
        i++;
    }
}

static void expire_requests(broker *b, uint64_t now_ms) {
    uint64_t now_ns = now_ms * 1000000ull;
    uint64_t limit_ns = (uint64_t)b->cfg.request_timeout_ms * 1000000ull;
    b->tpot_streams = 0;
    for (size_t i = 0; i < b->inf.cap; i++) {
        bk_req *r = b->inf.slots[i];
        if (!r) continue;
        if (r->worker && r->slo.ms[SOL_SLO_TPOT]) b->tpot_streams++;
        if (limit_ns && now_ns > r->received_ns + limit_ns) {
            LOG_WARN(MOD, "request %s timed out after %d ms", r->wire_id,
                     b->cfg.request_timeout_ms);
            if (r->worker) bw_send_cancel(b, r->worker, r->wire_id);
            bw_fail(b, r, 503, "the request timed out (router.http.request_timeout_ms)", 1);
            continue;
        }
        if (expire_by_slo(b, r, now_ns)) continue;
        /* queued in a pool that lost all its workers: a replacement gets dead_after_ms */
        if (!r->worker && !wt_live_in_pool(&b->wt, bw_scope(b, r->pool, r->model)) &&
            now_ms > r->queued_ms + (uint64_t)b->cfg.dead_after_ms) {
            char msg[400];
            if (r->model[0])
                snprintf(msg, sizeof msg,
                         "no worker serving model '%.100s' is available; retry later", r->model);
            else
                snprintf(msg, sizeof msg, "no worker of pool '%s' is available; retry later",
                         b->cfg.pools[r->pool]);
            bw_fail(b, r, 503, msg, (b->cfg.dead_after_ms + 999) / 1000);
        }
    }
}

void bw_tick(broker *b, uint64_t now_ms) {
    if (now_ms >= b->next_beat_ms) {
        send_heartbeats(b);
        b->next_beat_ms = now_ms + (uint64_t)b->cfg.heartbeat_ms;
        b->dirty = true; /* refresh "last_heartbeat_ms_ago" */
    }
    for (size_t i = 0; i < b->wt.n;) {
        bk_worker *w = b->wt.w[i];
        if (now_ms > w->last_seen_ms + (uint64_t)b->cfg.dead_after_ms) {
            char why[96];
            snprintf(why, sizeof why, "no message for %llu ms",
                     (unsigned long long)(now_ms - w->last_seen_ms));
            bw_worker_dead(b, w, why);
            continue;
        }
        i++;
    }
    expire_requests(b, now_ms);
    bw_rebalance(b, now_ms);
    for (size_t p = 0; p < b->cfg.n_pools; p++)
        bw_pump(b, (int)p);
}

void bw_shutdown(broker *b) {
    for (size_t i = 0; i < b->inf.cap; i++) {
        bk_req *r = b->inf.slots[i];
        if (!r) continue;
        if (r->worker) bw_send_cancel(b, r->worker, r->wire_id);
        bw_fail(b, r, 503, "the router is shutting down", 1);
    }
}
