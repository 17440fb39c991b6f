/* broker: the actor. One thread, one zmq_poll over the ROUTER socket (workers) and an inproc PULL
 * socket fed by the HTTP threads. HTTP callbacks never wait for this thread: dispatch/cancel/drain
 * are enqueued (a PUSH socket behind a mutex, since several HTTP threads share it), and /ready,
 * /admin/workers and the drain 404 check read a snapshot this thread publishes after each batch of
 * events. Everything that can refuse a request (no worker: 503, full queue: 429) is decided here
 * and delivered through the request's stream, which turns it into an HTTP status when no byte has
 * been sent yet. */
#include "broker_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "clock.h"
#include "generate_msg.h"
#include "log.h"

#define MOD "broker"
#define PIPE_HWM 100000 /* commands in flight HTTP → broker before dispatch answers 503 */

static int pool_index(const broker *b, const char *pool) {
    for (size_t i = 0; i < b->cfg.n_pools; i++)
        if (!strcmp(b->cfg.pools[i], pool)) return (int)i;
    return -1;
}

/* ---- snapshot for HTTP threads ------------------------------------------------------------- */

static void render_worker(strbuf *o, const bk_worker *w, uint64_t now) {
    strbuf_puts(o, "{\"id\":");
    strbuf_json_str(o, w->id, strlen(w->id));
    strbuf_puts(o, ",\"pool\":");
    strbuf_json_str(o, w->pool, strlen(w->pool));
    strbuf_puts(o, ",\"model\":");
    strbuf_json_str(o, w->model, strlen(w->model));
    strbuf_puts(o, ",\"backend\":");
    strbuf_json_str(o, w->backend, strlen(w->backend));
    strbuf_puts(o, ",\"chat_template\":");
    strbuf_json_str(o, w->chat_template, strlen(w->chat_template));
    strbuf_printf(o,
                  ",\"state\":\"%s\",\"capacity\":%u,\"max_context\":%u,\"inflight\":%u,"
                  "\"running\":%u,\"waiting\":%u,\"load\":%.4f,\"kv_usage\":%.4f,"
                  "\"prefix_hit_rate\":%.4f,\"spec_acceptance\":%.4f,\"tokens_per_s\":%.1f,"
                  "\"engine_steps\":%llu,"
                  "\"served\":%llu,\"failed_over\":%llu,\"migrated\":%llu,\"rebalanced\":%llu,"
                  "\"kv_links\":%llu,\"kv_tier2_links\":%llu,\"kv_snapshots\":%llu,\"prefill_bytes_"
                  "per_s\":%.0f,"
                  "\"kv_tier1_hit_tokens\":%llu,\"kv_tier2_hit_tokens\":%llu,"
                  "\"kv_tier2_blocks\":%u,\"kv_tier2_used\":%u,"
                  "\"quotes_used\":%llu,\"quotes_declined\":%llu,"
                  "\"last_heartbeat_ms_ago\":%llu",
                  w->unhealthy  ? "unhealthy"
                  : w->draining ? "draining"
                                : "ready",
                  w->capacity, w->max_context, w->inflight, w->hb_running, w->hb_waiting,
                  wt_load(w), w->kv_usage, w->prefix_hit_rate, w->spec_acceptance, w->tokens_per_s,
                  (unsigned long long)w->engine_steps, (unsigned long long)w->served,
                  (unsigned long long)w->failed_over, (unsigned long long)w->migrated,
                  (unsigned long long)w->rebalanced, (unsigned long long)w->kv_links,
                  (unsigned long long)w->kv_tier2_links, (unsigned long long)w->kv_snapshots,
                  w->prefill_bps, (unsigned long long)w->tier1_hit_tokens,
                  (unsigned long long)w->tier2_hit_tokens, w->tier2_blocks, w->tier2_used,
                  (unsigned long long)w->quotes_used, (unsigned long long)w->quotes_declined,
                  (unsigned long long)(now > w->last_seen_ms ? now - w->last_seen_ms : 0));
    if (w->unhealthy) {
        strbuf_puts(o, ",\"unhealthy_reason\":");
        strbuf_json_str(o, w->unhealthy_why, strlen(w->unhealthy_why));
    }
    strbuf_putc(o, '}');
}

/* One row per (pool, model) with a live worker: the first such worker's template and tool format.
 * Under snap_mu. A row that cannot be stored (no memory) is left out: its requests bind no tools
 * format, as before any worker registered. */
static void publish_tools(broker *b) {
    b->snap_n_tools = 0;
    for (size_t i = 0; i < b->wt.n; i++) {
        const bk_worker *w = b->wt.w[i];
        if (w->draining || w->unhealthy) continue;
        size_t k = 0;
        while (k < b->snap_n_tools &&
               (strcmp(b->snap_tools[k].pool, w->pool) || strcmp(b->snap_tools[k].model, w->model)))
            k++;
        if (k < b->snap_n_tools) continue;
        if (k == b->snap_cap_tools) {
            size_t cap = b->snap_cap_tools ? 2 * b->snap_cap_tools : 8;
            bk_pool_tools *p = realloc(b->snap_tools, cap * sizeof *p);
            if (!p) return;
            b->snap_tools = p;
            b->snap_cap_tools = cap;
        }
        bk_pool_tools *t = &b->snap_tools[b->snap_n_tools++];
        snprintf(t->pool, sizeof t->pool, "%s", w->pool);
        snprintf(t->model, sizeof t->model, "%s", w->model);
        snprintf(t->chat_template, sizeof t->chat_template, "%s", w->chat_template);
        snprintf(t->tool_format, sizeof t->tool_format, "%s", w->tool_format);
    }
}

static void publish(broker *b) {
    uint64_t now = sol_now_ms();
    strbuf json, ids;
    strbuf_init(&json);
    strbuf_init(&ids);
    strbuf_puts(&json, "{\"workers\":[");
    strbuf_putc(&ids, '\n');
    for (size_t i = 0; i < b->wt.n; i++) {
        if (i) strbuf_putc(&json, ',');
        render_worker(&json, b->wt.w[i], now);
        strbuf_puts(&ids, b->wt.w[i]->id);
        strbuf_putc(&ids, '\n');
    }
    strbuf_puts(&json, "],\"pools\":[");
    bool ready = true;
    for (size_t p = 0; p < b->cfg.n_pools; p++) {
        size_t live = wt_live_in_pool(&b->wt, bw_scope(b, (int)p, NULL));
        ready = ready && live > 0;
        strbuf_puts(&json, p ? ",{\"name\":" : "{\"name\":");
        strbuf_json_str(&json, b->cfg.pools[p], strlen(b->cfg.pools[p]));
        strbuf_printf(&json, ",\"live\":%zu,\"queued\":%zu}", live, b->queues[p].n);
    }
    strbuf_printf(&json, "],\"inflight\":%zu}", b->inf.live);
    pthread_mutex_lock(&b->snap_mu);
    publish_tools(b);
    strbuf_free(&b->snap_models);
    strbuf_init(&b->snap_models);
    strbuf_append(&b->snap_models, b->models.data ? b->models.data : "", b->models.len);
    strbuf_free(&b->snap_json);
    strbuf_free(&b->snap_ids);
    b->snap_json = json;
    b->snap_ids = ids;
    b->snap_ready = ready;
    pthread_mutex_unlock(&b->snap_mu);
    b->dirty = false;
}

/* ---- the actor loop ------------------------------------------------------------------------ */

static void on_pipe(broker *b) {
    for (int n = 0; n < 1024; n++) {
        bk_cmd c;
        int rc = zmq_recv(b->pull, &c, sizeof c, ZMQ_DONTWAIT);
        if (rc < 0) return;
        if (rc != (int)sizeof c) continue;
        b->dirty = true;
        switch (c.type) {
        case BK_DISPATCH:
            bw_on_dispatch(b, &c);
            break;
        case BK_CANCEL:
            bw_on_cancel(b, c.id);
            break;
        case BK_DRAIN:
            bw_on_drain(b, c.id);
            break;
        case BK_TERM:
            b->running = false;
            return;
        }
    }
}

static void *broker_main(void *arg) {
    broker *b = arg;
    uint64_t next_tick = sol_now_ms();
    while (b->running) {
        uint64_t now = sol_now_ms();
        long timeout = next_tick > now ? (long)(next_tick - now) : 0;
        zmq_pollitem_t items[2] = {{b->pull, 0, ZMQ_POLLIN, 0}, {b->sock, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, 2, timeout) < 0 && zmq_errno() != EINTR) {
            LOG_ERROR(MOD, "zmq_poll failed: %s", zmq_strerror(zmq_errno()));
            break;
        }
        if (items[0].revents & ZMQ_POLLIN) on_pipe(b);
        if (!b->running) break;
        if (items[1].revents & ZMQ_POLLIN) bw_on_worker_message(b);
        now = sol_now_ms();
        if (now >= next_tick) {
            bw_tick(b, now);
            next_tick = now + BROKER_TICK_MS;
        }
        if (b->dirty) publish(b);
    }
    bw_shutdown(b);
    publish(b);
    return NULL;
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

/* CURVE: the router's pair and, before the socket exists, the handler that admits workers. */
static int start_curve(broker *b, curve_pair *pair, sol_err *e) {
    const char *key = b->cfg.curve_secret_key_file, *dir = b->cfg.curve_authorized_dir;
    if (!key && !dir) return 0;
    if (!key || !dir)
        return sol_err_set(e, -EINVAL,
                           "router.workers.curve needs both secret_key_file and "
                           "authorized_keys_dir");
    int rc = curve_load_pair(key, pair, e);
    if (rc) return sol_err_wrap(e, "router.workers.curve.secret_key_file: "), rc;
    rc = zap_auth_new(b->zctx, dir, &b->zap, e);
    if (rc) return sol_err_wrap(e, "router.workers.curve.authorized_keys_dir: "), rc;
    LOG_INFO(MOD, "CURVE on: router public key %s", pair->public_key.z85);
    return 0;
}

static int open_sockets(broker *b, sol_err *e) {
    curve_pair pair;
    int rc = start_curve(b, &pair, e);
    if (rc) return rc;
    if (!b->zap && b->cfg.allow_insecure && !zmq_util_endpoint_is_local(b->cfg.bind))
        LOG_WARN(MOD,
                 "INSECURE: %s is reachable from other machines without CURVE "
                 "(router.workers.allow_insecure): anyone who reaches it can register as a "
                 "worker and read users' prompts",
                 b->cfg.bind);
    rc = zmq_util_router_bind(b->zctx, b->cfg.bind, b->cfg.allow_insecure, b->zap ? &pair : NULL,
                              &b->sock, e);
    memset(&pair, 0, sizeof pair); /* the secret key stays in libzmq only */
    if (rc) return rc;
    rc = zmq_util_last_endpoint(b->sock, b->endpoint, sizeof b->endpoint, e);
    if (rc) return rc;
    char pipe[64];
    snprintf(pipe, sizeof pipe, "inproc://sol-broker-%p", (void *)b);
    int hwm = PIPE_HWM, zero = 0;
    b->pull = zmq_socket(b->zctx, ZMQ_PULL);
    b->push = zmq_socket(b->zctx, ZMQ_PUSH);
    if (!b->pull || !b->push) return sol_err_set(e, -ENOMEM, "broker: cannot create its pipe");
    zmq_setsockopt(b->pull, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(b->push, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(b->pull, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(b->push, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(b->pull, pipe) || zmq_connect(b->push, pipe))
        return sol_err_set(e, -EIO, "broker: cannot open its pipe: %s", zmq_strerror(zmq_errno()));
    return 0;
}

void broker_free(broker *b) {
    if (!b) return;
    if (b->running) {
        bk_cmd c = {.type = BK_TERM};
        pthread_mutex_lock(&b->push_mu);
        zmq_send(b->push, &c, sizeof c, 0);
        pthread_mutex_unlock(&b->push_mu);
        pthread_join(b->thread, NULL);
    }
    /* commands still in the pipe hold stream references and messages */
    bk_cmd c;
    while (b->pull && zmq_recv(b->pull, &c, sizeof c, ZMQ_DONTWAIT) == (int)sizeof c) {
        genmsg_free(c.msg);
        free(c.chain);
        if (c.type == BK_DISPATCH) http_stream_unref(c.stream);
    }
    inflight_free(&b->inf);
    wt_free(&b->wt);
    pidx_free(b->pidx);
    reply_ids_free(b->replies);
    free(b->queues);
    free(b->enc);
    free(b->lp);
    free(b->top);
    zmq_util_close(b->sock);
    zap_auth_free(b->zap); /* after the socket: libzmq admits every key when no handler answers */
    if (b->pull) zmq_close(b->pull);
    if (b->push) zmq_close(b->push);
    if (b->zctx) zmq_ctx_term(b->zctx);
    strbuf_free(&b->snap_json);
    strbuf_free(&b->snap_ids);
    strbuf_free(&b->snap_models);
    strbuf_free(&b->models);
    free(b->snap_tools);
    pthread_mutex_destroy(&b->snap_mu);
    pthread_mutex_destroy(&b->push_mu);
    free(b);
}

int broker_new(const broker_config *cfg, broker **out, sol_err *e) {
    *out = NULL;
    if (!cfg->n_pools || cfg->heartbeat_ms <= 0 || cfg->dead_after_ms <= cfg->heartbeat_ms)
        return sol_err_set(e, -EINVAL,
                           "broker: needs pools and 0 < heartbeat_ms (%d) < dead_after_ms (%d)",
                           cfg->heartbeat_ms, cfg->dead_after_ms);
    broker *b = calloc(1, sizeof *b);
    if (!b) return sol_err_set(e, -ENOMEM, "out of memory");
    b->cfg = *cfg;
    pthread_mutex_init(&b->push_mu, NULL);
    pthread_mutex_init(&b->snap_mu, NULL);
    strbuf_init(&b->snap_json);
    strbuf_init(&b->snap_ids);
    strbuf_init(&b->snap_models);
    strbuf_init(&b->models);
    wt_init(&b->wt);
    inflight_init(&b->inf);
    b->queues = calloc(cfg->n_pools, sizeof *b->queues);
    b->zctx = zmq_ctx_new();
    if (cfg->policy == SOL_ROUTE_CACHE_AWARE) b->pidx = pidx_new(PIDX_DEFAULT_LINKS);
    if (cfg->reply_tokens_mib > 0) b->replies = reply_ids_new((size_t)cfg->reply_tokens_mib << 20);
    int rc = !b->queues || !b->zctx || (cfg->policy == SOL_ROUTE_CACHE_AWARE && !b->pidx) ||
                     (cfg->reply_tokens_mib > 0 && !b->replies)
                 ? sol_err_set(e, -ENOMEM, "out of memory")
                 : 0;
    if (!rc) rc = open_sockets(b, e);
    if (rc) {
        broker_free(b);
        return rc;
    }
    publish(b);
    b->running = true;
    if (pthread_create(&b->thread, NULL, broker_main, b)) {
        b->running = false;
        broker_free(b);
        return sol_err_set(e, -EAGAIN, "broker: cannot start its thread");
    }
    LOG_INFO(MOD, "workers connect to %s", b->endpoint);
    *out = b;
    return 0;
}

const char *broker_endpoint(const broker *b) {
    return b->endpoint;
}

/* ---- http_backend callbacks (HTTP threads) -------------------------------------------------- */

static int send_cmd(broker *b, const bk_cmd *c) {
    pthread_mutex_lock(&b->push_mu);
    int rc = zmq_send(b->push, c, sizeof *c, ZMQ_DONTWAIT);
    pthread_mutex_unlock(&b->push_mu);
    return rc == (int)sizeof *c ? 0 : -EAGAIN;
}

/* The request's latency targets: each header given, else the pool's router.slo default. */
static sol_slo pool_slo(const broker *b, const char *pool, const oai_request *req) {
    sol_slo s = {{0}};
    for (size_t i = 0; i < b->cfg.n_slo; i++)
        if (!strcmp(b->cfg.slo[i].pool, pool)) s = b->cfg.slo[i].slo;
    for (int f = 0; f < SOL_SLO_FIELDS; f++)
        if (req->slo_given & (1u << f)) s.ms[f] = req->slo.ms[f];
    return s;
}

static int cb_dispatch(void *ctx, const http_dispatch_info *info, http_stream *stream,
                       oai_error *err) {
    broker *b = ctx;
    bk_cmd c = {.type = BK_DISPATCH, .received_ns = info->received_ns, .stream = stream};
    c.pool = pool_index(b, info->pool);
    if (c.pool < 0) {
        oai_error_status(err, 503, "no workers are configured for this pool");
        err->retry_after_s = 1;
        return -1;
    }
    snprintf(c.id, sizeof c.id, "%s", info->request_id);
    c.choice = info->choice;
    c.slo = pool_slo(b, info->pool, info->req);
    if (info->model) snprintf(c.model, sizeof c.model, "%s", info->model);
    sol_err e = {0};
    if (genmsg_new(info->req, info->request_id, info->choice, &c.msg, &e)) {
        oai_error_set(err, e.code == -ENOMEM ? 500 : 400, "invalid_request_error", NULL, NULL, "%s",
                      e.msg);
        return -1;
    }
    if (b->cfg.affinity_prefix_chars > 0) {
        strbuf text;
        strbuf_init(&text);
        oai_request_text(info->req, &text);
        c.prefix_hash = wt_prefix_hash(text.data, text.len, (size_t)b->cfg.affinity_prefix_chars);
        strbuf_free(&text);
    }
    /* the prompt's chain, hashed here on the HTTP thread as the Generate is built */
    if (b->cfg.policy == SOL_ROUTE_CACHE_AWARE && (c.chain = malloc(sizeof *c.chain)))
        pc_of_generate(genmsg_envelope(c.msg)->generate, c.chain);
    http_stream_ref(stream);
    if (send_cmd(b, &c)) {
        genmsg_free(c.msg);
        free(c.chain);
        http_stream_unref(stream);
        oai_error_status(err, 503, "the router is overloaded; retry later");
        err->retry_after_s = 1;
        return -1;
    }
    return 0;
}

static void cb_cancel(void *ctx, const char *request_id) {
    bk_cmd c = {.type = BK_CANCEL};
    snprintf(c.id, sizeof c.id, "%s", request_id);
    if (send_cmd(ctx, &c)) LOG_WARN(MOD, "cancel of %s lost: broker pipe full", request_id);
}

static int cb_ready(void *ctx) {
    broker *b = ctx;
    pthread_mutex_lock(&b->snap_mu);
    int r = b->snap_ready;
    pthread_mutex_unlock(&b->snap_mu);
    return r;
}

static int cb_workers_json(void *ctx, strbuf *out) {
    broker *b = ctx;
    pthread_mutex_lock(&b->snap_mu);
    int rc = strbuf_append(out, b->snap_json.data ? b->snap_json.data : "{}", b->snap_json.len);
    pthread_mutex_unlock(&b->snap_mu);
    return rc;
}

static int cb_drain(void *ctx, const char *worker_id, oai_error *err) {
    broker *b = ctx;
    char needle[SOL_FRAME_MAX_ID_BYTES + 3];
    snprintf(needle, sizeof needle, "\n%s\n", worker_id);
    pthread_mutex_lock(&b->snap_mu);
    int known = b->snap_ids.data && strstr(b->snap_ids.data, needle);
    pthread_mutex_unlock(&b->snap_mu);
    if (!known) {
        oai_error_set(err, 404, "not_found_error", "worker_not_found", NULL,
                      "no worker with id '%.100s' is registered", worker_id);
        return -1;
    }
    bk_cmd c = {.type = BK_DRAIN};
    snprintf(c.id, sizeof c.id, "%s", worker_id);
    if (send_cmd(b, &c)) {
        oai_error_status(err, 503, "the router is overloaded; retry later");
        return -1;
    }
    return 0;
}

static int cb_pool_tools(void *ctx, const char *pool, const char *model, char *chat_template,
                         size_t tmpl_cap, char *tool_format, size_t fmt_cap) {
    broker *b = ctx;
    int known = 0;
    pthread_mutex_lock(&b->snap_mu);
    for (size_t k = 0; k < b->snap_n_tools && !known; k++) {
        const bk_pool_tools *t = &b->snap_tools[k];
        if (strcmp(t->pool, pool) || (model && *model && strcmp(t->model, model))) continue;
        known = 1;
        snprintf(chat_template, tmpl_cap, "%s", t->chat_template);
        snprintf(tool_format, fmt_cap, "%s", t->tool_format);
    }
    pthread_mutex_unlock(&b->snap_mu);
    return known;
}

static int cb_models(void *ctx, strbuf *out) {
    broker *b = ctx;
    pthread_mutex_lock(&b->snap_mu);
    const char *m = b->snap_models.data ? b->snap_models.data : "";
    int rc = strbuf_append(out, m, strlen(m));
    pthread_mutex_unlock(&b->snap_mu);
    return rc;
}

http_backend broker_http_backend(broker *b) {
    http_backend be = {b,        cb_dispatch,   cb_cancel, cb_ready, cb_workers_json,
                       cb_drain, cb_pool_tools, cb_models};
    return be;
}
