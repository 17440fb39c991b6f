/* link: the worker's side of the router protocol (docs/worker.md, docs/protocol.md).
 *
 * One thread, one zmq_poll over: the owner's pipe (DRAIN / TERM), the executor's event queue,
 * and per router a DEALER socket plus its socket monitor. Nothing is shared with other threads
 * except through those sockets, so the link's state needs no locks.
 *
 * Why a monitor: a restarted router knows nothing of this worker and cannot address it (ROUTER
 * sockets route by identity), so the worker must speak first. The monitor's CONNECTED event is
 * the moment to (re-)send Register; an Error "unknown worker" from the router does the same in
 * case a Register was lost. Why liveness only after a router Heartbeat: a router that never
 * heartbeats would otherwise be declared dead every few seconds; one that does is held to it.
 *
 * The in-flight table maps request_id -> the router it came from. It bounds admission (beyond
 * max_inflight new work is refused with 503), routes chunks back, and tells when a drain is
 * done. When a router is declared dead its requests are cancelled and marked orphaned (the
 * router fails them over elsewhere), and their remaining chunks are dropped. */
#include "link.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "clock.h"
#include "frame.h"
#include "hash.h"
#include "kv_report.h"
#include "log.h"
#include "resolver.h"
#include "zmq_util.h"

#define LINK_MAX_ROUTERS 16
#define LINK_MONITOR_EVENTS (ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED)

typedef struct link_router {
    char endpoint[256];
    void *sock, *mon;
    uint64_t last_rx_ms, reconnect_at_ms, last_register_ms;
    int backoff_ms;
    bool heard_beat;  /* liveness is enforced once the router has sent a Heartbeat */
    bool dynamic;     /* an address a router name resolved to (resolver.h) */
    bool inactive;    /* a dynamic slot whose address left the name: closed, reusable */
    unsigned mon_gen; /* a fresh monitor endpoint per connection: inproc names free lazily */
    uint64_t session; /* Register.session: new at each router_open (requests were orphaned) */
    bool kv_sync;     /* its next heartbeat carries a KV snapshot (it just registered us) */
} link_router;

typedef struct link_entry {
    char id[SOL_FRAME_MAX_ID_BYTES + 1];
    uint16_t router;
    bool used, orphaned;
    bool handed_back; /* cancelled by a migrating drain: the router moves it */
} link_entry;

struct worker_link {
    void *zctx;
    void *pipe_owner, *pipe_actor;
    pthread_t thread;
    bool started;
    int status; /* owner side: -EAGAIN until the DONE message arrived */
    /* link thread only */
    char worker_id[SOL_FRAME_MAX_ID_BYTES + 1];
    char pool[SOL_FRAME_MAX_NAME_BYTES + 1];
    int heartbeat_ms;
    unsigned max_inflight;
    bool curve; /* connect with CURVE: curve_pair to the router with curve_server */
    curve_pair curve_pair;
    curve_key curve_server;
    executor *exec;
    exec_events *events;
    link_router routers[LINK_MAX_ROUTERS];
    size_t n_routers;
    router_resolver *resolver; /* NULL unless router_resolve_ms and a router is a name */
    uint64_t resolver_gen;
    link_entry *table;
    size_t table_cap, n_inflight;
    bool draining;
    bool drain_migrate;     /* link_config.drain_migrate */
    bool exit_when_drained; /* a signal's drain ends the link; a router's leaves it idle */
    bool idle_logged;
    int exit_status; /* >= 0: leave the loop with it */
    uint64_t next_beat_ms;
    int stall_after_ms;   /* the engine watchdog (link_config) */
    uint64_t seen_steps;  /* engine_steps at the last heartbeat that saw it move */
    uint64_t still_since; /* when the engine, with work, was last seen stepping; 0 = moving */
    char *health_file;    /* link_config.health_file, owned; NULL: none */
    kv_report *kv;        /* KV events (an executor that reports them), else NULL */
    bool health_failed;   /* the last write failed (logged once until one succeeds) */
};

/* ---- in-flight table: open addressing, linear probing, backward-shift deletion ------------ */

static size_t id_hash(const char *s) {
    return (size_t)sol_fnv64_str(SOL_FNV64_INIT, s);
}

static link_entry *table_find(worker_link *l, const char *id) {
    size_t mask = l->table_cap - 1;
    for (size_t i = id_hash(id) & mask;; i = (i + 1) & mask) {
        if (!l->table[i].used) return NULL;
        if (strcmp(l->table[i].id, id) == 0) return &l->table[i];
    }
}

/* The caller checked that `id` is absent and n_inflight < max_inflight (< table_cap / 2). */
static link_entry *table_insert(worker_link *l, const char *id, uint16_t router) {
    size_t mask = l->table_cap - 1, i = id_hash(id) & mask;
    while (l->table[i].used)
        i = (i + 1) & mask;
    link_entry *en = &l->table[i];
    snprintf(en->id, sizeof en->id, "%s", id);
    en->router = router;
    en->used = true;
    en->orphaned = false;
    en->handed_back = false;
    l->n_inflight++;
    return en;
}

static void table_remove(worker_link *l, link_entry *en) {
    size_t mask = l->table_cap - 1, i = (size_t)(en - l->table), j = i;
    l->table[i].used = false;
    l->n_inflight--;
    for (;;) {
        j = (j + 1) & mask;
        if (!l->table[j].used) return;
        size_t home = id_hash(l->table[j].id) & mask;
        /* Move j into the hole at i unless its home lies cyclically in (i, j]. */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays) continue;
        l->table[i] = l->table[j];
        l->table[j].used = false;
        i = j;
    }
}

/* ---- sending ---------------------------------------------------------------------------- */

static void send_env(worker_link *l, link_router *r, const Sol__Envelope *env) {
    if (!r->sock) return;
    sol_err err = {0};
    if (zmq_util_dealer_send(r->sock, env, &err) < 0)
        LOG_WARN("link", "router %s: %s not sent: %s", r->endpoint, frame_body_name(env->body_case),
                 err.msg);
    (void)l;
}

static void send_register(worker_link *l, link_router *r) {
    exec_info info;
    exec_info_get(l->exec, &info);
    Sol__Register reg;
    frame_register_init(&reg, l->worker_id, l->pool, info.model);
    reg.max_context = info.max_context;
    reg.capacity = info.capacity;
    reg.backend = info.backend;
    reg.speculative = info.speculative;
    reg.chat_template = info.chat_template;
    reg.tool_format = info.tool_format;
    reg.session = r->session;
    Sol__Envelope env;
    frame_wrap_register(&env, &reg);
    send_env(l, r, &env);
    r->last_register_ms = sol_now_ms();
    r->kv_sync = true; /* a new session on its side: it knows nothing of our cache */
    LOG_INFO("link", "registering with %s as %s (pool %s, model %s, capacity %u, context %u)",
             r->endpoint, l->worker_id, l->pool, info.model, info.capacity, info.max_context);
}

/* The engine watchdog: work waiting or running but the step counter not moving for
 * stall_after_ms (a hung GPU, a deadlock) makes the heartbeat say unhealthy, so the router fails
 * the requests over; the link thread itself keeps beating, which is why it must check. */
static void watch_engine(worker_link *l, exec_stats *st) {
    uint64_t now = sol_now_ms();
    if (l->stall_after_ms <= 0 || st->engine_steps != l->seen_steps ||
        st->running + st->waiting == 0) {
        l->seen_steps = st->engine_steps;
        l->still_since = 0;
        return;
    }
    if (!l->still_since) l->still_since = now;
    uint64_t still = now - l->still_since;
    if (still < (uint64_t)l->stall_after_ms || st->unhealthy[0]) return;
    snprintf(st->unhealthy, sizeof st->unhealthy,
             "the engine has not stepped for %llu ms with %u requests running and %u waiting "
             "(worker.stall_after_ms %d)",
             (unsigned long long)still, st->running, st->waiting, l->stall_after_ms);
    if (still < (uint64_t)l->stall_after_ms + (uint64_t)l->heartbeat_ms) /* once */
        LOG_ERROR("link", "%s", st->unhealthy);
}

/* Liveness for the container runtime: the file's age is the time since the worker last knew itself
 * healthy (an engine stalled past stall_after_ms stops renewing it, and so does a wedged link
 * thread). Written whole and renamed into place so a probe never reads half a file. */
static void touch_health(worker_link *l) {
    if (!l->health_file) return;
    char tmp[PATH_MAX], text[64];
    snprintf(tmp, sizeof tmp, "%s.tmp", l->health_file);
    int n = snprintf(text, sizeof text, "healthy %llu\n", (unsigned long long)time(NULL));
    FILE *f = fopen(tmp, "w");
    int ok = f && fwrite(text, 1, (size_t)n, f) == (size_t)n;
    if (f && fclose(f)) ok = 0;
    if (ok && rename(tmp, l->health_file) == 0) {
        l->health_failed = false;
        return;
    }
    if (!l->health_failed)
        LOG_ERROR("link", "cannot write the health file %s: %s", l->health_file, strerror(errno));
    l->health_failed = true;
}

static void send_heartbeats(worker_link *l) {
    exec_stats st;
    exec_stats_get(l->exec, &st);
    Sol__Heartbeat hb = SOL__HEARTBEAT__INIT;
    hb.worker_id = l->worker_id;
    hb.running = st.running;
    hb.waiting = st.waiting;
    hb.preempted = st.preempted;
    hb.free_blocks = st.free_blocks;
    hb.total_blocks = st.total_blocks;
    hb.prefix_hit_rate = st.prefix_hit_rate;
    hb.tokens_per_s = st.tokens_per_s;
    hb.spec_acceptance = st.spec_acceptance;
    hb.engine_steps = st.engine_steps;
    hb.tier1_hit_tokens = st.tier1_hit_tokens;
    hb.tier2_hit_tokens = st.tier2_hit_tokens;
    hb.tier2_blocks = st.tier2_blocks;
    hb.tier2_used = st.tier2_used;
    hb.quotes_used = st.quotes_used;
    hb.quotes_declined = st.quotes_declined;
    hb.spec_steps = st.spec_steps;
    hb.spec_drafted = st.spec_drafted;
    hb.spec_accepted = st.spec_accepted;
    hb.spec_emitted = st.spec_emitted;
    hb.spec_draft_seconds = st.spec_draft_seconds;
    hb.spec_verify_seconds = st.spec_verify_seconds;
    hb.draining = l->draining;
    watch_engine(l, &st);
    if (!st.unhealthy[0]) touch_health(l);
    hb.unhealthy = st.unhealthy[0] != '\0';
    hb.unhealthy_reason = st.unhealthy;
    bool lost = l->kv && kv_report_collect(l->kv, l->exec);
    if (lost) LOG_WARN("link", "KV events lost at the engine's bound: sending snapshots");
    for (size_t i = 0; i < l->n_routers; i++) {
        link_router *r = &l->routers[i];
        if (l->kv) kv_report_fill(l->kv, l->exec, r->kv_sync || lost, &hb);
        r->kv_sync = false;
        Sol__Envelope env;
        frame_wrap_heartbeat(&env, &hb);
        send_env(l, r, &env);
    }
    l->next_beat_ms = sol_now_ms() + (uint64_t)l->heartbeat_ms;
}

static void send_error(worker_link *l, link_router *r, int code, const char *msg, const char *id) {
    Sol__Error er;
    frame_error_init(&er, code, msg, id);
    Sol__Envelope env;
    frame_wrap_error(&env, &er);
    send_env(l, r, &env);
}

/* ---- router connections ----------------------------------------------------------------- */

static void router_close(link_router *r) {
    if (r->sock) zmq_socket_monitor(r->sock, NULL, 0);
    zmq_util_close(r->mon);
    zmq_util_close(r->sock);
    r->mon = r->sock = NULL;
}

static void router_open(worker_link *l, link_router *r) {
    sol_err err = {0};
    uint64_t now = sol_now_ms();
    r->last_rx_ms = now;
    r->heard_beat = false;
    /* Unique per process and connection; never 0 ("unknown" to the router). */
    r->session = sol_splitmix64(sol_now_ns() ^ ((uint64_t)getpid() << 40) ^ (uintptr_t)r) | 1;
    if (zmq_util_dealer_connect(l->zctx, r->endpoint, l->worker_id,
                                l->curve ? &l->curve_pair : NULL,
                                l->curve ? &l->curve_server : NULL, &r->sock, &err) < 0) {
        LOG_ERROR("link", "router %s: %s; retrying in %d ms", r->endpoint, err.msg, r->backoff_ms);
        r->sock = NULL;
        r->reconnect_at_ms = now + (uint64_t)r->backoff_ms;
        return;
    }
    char ep[96];
    snprintf(ep, sizeof ep, "inproc://sol-link-mon-%p-%u", (void *)r, r->mon_gen++);
    if (zmq_socket_monitor(r->sock, ep, LINK_MONITOR_EVENTS) == 0 &&
        (r->mon = zmq_socket(l->zctx, ZMQ_PAIR)) != NULL && zmq_connect(r->mon, ep) != 0) {
        zmq_close(r->mon);
        r->mon = NULL;
    }
    if (!r->mon) LOG_WARN("link", "router %s: no socket monitor; registering once", r->endpoint);
    /* Register now as well: it waits in the socket's queue until the connection is up, and the
     * first CONNECTED event may fire before the monitor exists (or never: inproc, no monitor).
     * A router may therefore see Register twice for one connection; it is idempotent. */
    send_register(l, r);
    LOG_INFO("link", "connecting to router %s", r->endpoint);
}

/* Cancels what r asked for: nobody is left to take the chunks (the router fails them over). */
static size_t orphan_requests(worker_link *l, link_router *r) {
    uint16_t idx = (uint16_t)(r - l->routers);
    size_t orphaned = 0;
    for (size_t i = 0; i < l->table_cap; i++) {
        link_entry *en = &l->table[i];
        if (!en->used || en->router != idx || en->orphaned) continue;
        en->orphaned = true;
        exec_cancel(l->exec, en->id);
        orphaned++;
    }
    return orphaned;
}

/* Paranoid Pirate: the router went silent; its requests are failed over by the router. */
static void router_dead(worker_link *l, link_router *r, uint64_t now) {
    size_t orphaned = orphan_requests(l, r);
    LOG_WARN("link",
             "router %s silent for %" PRIu64 " ms: cancelled %zu requests, reconnecting "
             "in %d ms",
             r->endpoint, now - r->last_rx_ms, orphaned, r->backoff_ms);
    router_close(r);
    r->reconnect_at_ms = now + (uint64_t)r->backoff_ms;
    r->backoff_ms =
        r->backoff_ms * 2 > SOL_ZMQ_RECONNECT_MAX_MS ? SOL_ZMQ_RECONNECT_MAX_MS : r->backoff_ms * 2;
}

static void on_monitor(worker_link *l, link_router *r) {
    for (int n = 0; n < 64; n++) {
        zmq_msg_t ev, addr;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, r->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        uint16_t event = 0;
        if (zmq_msg_size(&ev) >= sizeof event) memcpy(&event, zmq_msg_data(&ev), sizeof event);
        if (zmq_msg_more(&ev)) { /* the endpoint frame follows */
            zmq_msg_init(&addr);
            zmq_msg_recv(&addr, r->mon, 0);
            zmq_msg_close(&addr);
        }
        zmq_msg_close(&ev);
        if (event == ZMQ_EVENT_CONNECTED) {
            send_register(l, r);
            r->last_rx_ms = sol_now_ms();
        } else if (event == ZMQ_EVENT_DISCONNECTED) {
            LOG_WARN("link", "router %s disconnected; ZeroMQ reconnects", r->endpoint);
        }
    }
}

/* ---- messages from a router ------------------------------------------------------------- */

static void on_generate(worker_link *l, link_router *r, const Sol__Generate *g) {
    char msg[SOL_ERR_MSG_MAX + 64];
    if (l->draining) {
        snprintf(msg, sizeof msg, "worker %s is draining; send the request elsewhere",
                 l->worker_id);
        send_error(l, r, SOL_ERROR_OVERLOADED, msg, g->request_id);
        return;
    }
    if (table_find(l, g->request_id)) {
        send_error(l, r, SOL_ERROR_BAD_REQUEST, "request_id is already running on this worker",
                   g->request_id);
        return;
    }
    if (l->n_inflight >= l->max_inflight) {
        snprintf(msg, sizeof msg, "worker %s has %zu requests in flight (limit %u)", l->worker_id,
                 l->n_inflight, l->max_inflight);
        send_error(l, r, SOL_ERROR_OVERLOADED, msg, g->request_id);
        return;
    }
    sol_err err = {0};
    int rc = exec_submit(l->exec, g, &err);
    if (rc < 0) {
        LOG_WARN("link", "request %s refused: %s", g->request_id, err.msg);
        /* Only a lack of room is worth another worker; anything else (a bad parameter, a
         * feature this worker's model lacks) would be refused everywhere: the client's 400. */
        bool busy = rc == -EAGAIN || rc == -EBUSY || rc == -ENOMEM || rc == -ENOSPC;
        send_error(l, r, busy ? SOL_ERROR_OVERLOADED : SOL_ERROR_BAD_REQUEST, err.msg,
                   g->request_id);
        return;
    }
    table_insert(l, g->request_id, (uint16_t)(r - l->routers));
    if (g->traceparent && g->traceparent[0])
        LOG_INFO("link", "request %s traceparent %s accepted from %s", g->request_id,
                 g->traceparent, r->endpoint);
    LOG_DEBUG("link", "request %s accepted from %s", g->request_id, r->endpoint);
}

/* A migrating drain: every running request is cancelled now. The draining Heartbeat went out
 * first on each router's socket, so the router reads the CANCELLED final chunk that follows the
 * request's last tokens as a hand-back and moves the request (docs/protocol.md, "Drain"). */
static void hand_back(worker_link *l) {
    size_t n = 0;
    for (size_t i = 0; i < l->table_cap; i++) {
        link_entry *en = &l->table[i];
        if (!en->used || en->orphaned || en->handed_back) continue;
        en->handed_back = true;
        exec_cancel(l->exec, en->id);
        n++;
    }
    if (n) LOG_INFO("link", "drain: handed %zu running requests back to the router", n);
}

static void start_drain(worker_link *l, const char *why, bool exit_when_drained) {
    if (exit_when_drained) l->exit_when_drained = true;
    if (l->draining) return;
    l->draining = true;
    LOG_INFO("link", "draining (%s): %zu requests running; %s, no new work accepted", why,
             l->n_inflight,
             l->drain_migrate ? "they move to other workers" : "they run to their end");
    send_heartbeats(l);
    if (l->drain_migrate) hand_back(l);
}

static void on_error(worker_link *l, link_router *r, const Sol__Error *er) {
    if (er->request_id && er->request_id[0]) {
        link_entry *en = table_find(l, er->request_id);
        LOG_WARN("link", "router %s: error %d about request %s: %s", r->endpoint, er->code,
                 er->request_id, er->message);
        if (en && !en->orphaned) {
            en->orphaned = true; /* the router no longer wants its chunks */
            exec_cancel(l->exec, en->id);
        }
        return;
    }
    if (er->code == SOL_ERROR_VERSION_MISMATCH) {
        LOG_ERROR("link", "router %s refused this worker: %s (worker protocol version %d)",
                  r->endpoint, er->message, SOL_PROTOCOL_VERSION);
        l->exit_status = 1;
        return;
    }
    LOG_WARN("link", "router %s: error %d: %s", r->endpoint, er->code, er->message);
    /* "unknown worker" and the like: the router lost our Register. Once per heartbeat. */
    if (sol_now_ms() >= r->last_register_ms + (uint64_t)l->heartbeat_ms) send_register(l, r);
}

static void on_envelope(worker_link *l, link_router *r, const Sol__Envelope *env) {
    switch (env->body_case) {
    case SOL__ENVELOPE__BODY_GENERATE:
        on_generate(l, r, env->generate);
        break;
    case SOL__ENVELOPE__BODY_CANCEL: {
        link_entry *en = table_find(l, env->cancel->request_id);
        if (en) exec_cancel(l->exec, en->id);
        break;
    }
    case SOL__ENVELOPE__BODY_DRAIN:
        start_drain(l, "router asked", false);
        break;
    case SOL__ENVELOPE__BODY_ERROR:
        on_error(l, r, env->error);
        break;
    case SOL__ENVELOPE__BODY_HEARTBEAT:
        r->heard_beat = true;
        break;
    default:
        LOG_WARN("link", "router %s sent a %s, which a worker does not expect; ignored",
                 r->endpoint, frame_body_name(env->body_case));
    }
}

static void on_router(worker_link *l, link_router *r) {
    for (int n = 0; n < 256 && r->sock; n++) { /* bounded: let the other sockets have a turn */
        Sol__Envelope *env = NULL;
        sol_err err = {0};
        int rc = zmq_util_dealer_recv(r->sock, ZMQ_DONTWAIT, &env, &err);
        if (rc == -EAGAIN) return;
        r->last_rx_ms = sol_now_ms();
        r->backoff_ms = SOL_ZMQ_RECONNECT_MS;
        if (rc < 0) {
            LOG_WARN("link", "router %s: dropped a bad frame: %s", r->endpoint, err.msg);
            continue;
        }
        on_envelope(l, r, env);
        frame_free_envelope(env);
    }
}

/* ---- events from the executor ------------------------------------------------------------ */

static void on_events(worker_link *l) {
    for (int n = 0; n < 1024; n++) {
        exec_event ev;
        sol_err err = {0};
        int rc = exec_events_pop(l->events, &ev, &err);
        if (rc == -EAGAIN) return;
        if (rc < 0) {
            LOG_ERROR("link", "%s", err.msg);
            continue;
        }
        link_entry *en = table_find(l, ev.request_id);
        link_router *r = en ? &l->routers[en->router] : NULL;
        if (en && !en->orphaned && r->sock &&
            zmq_send(r->sock, ev.frame, ev.frame_len, ZMQ_DONTWAIT) < 0)
            LOG_WARN("link", "request %s: chunk to %s dropped: %s", ev.request_id, r->endpoint,
                     zmq_strerror(zmq_errno()));
        if (!en) LOG_DEBUG("link", "chunk for unknown request %s dropped", ev.request_id);
        if (en && ev.final) table_remove(l, en);
        exec_event_release(&ev);
    }
}

/* ---- the loop ---------------------------------------------------------------------------- */

static void on_pipe(worker_link *l) {
    char cmd[16];
    int n;
    while ((n = zmq_recv(l->pipe_actor, cmd, sizeof cmd - 1, ZMQ_DONTWAIT)) >= 0) {
        cmd[n < (int)sizeof cmd - 1 ? n : (int)sizeof cmd - 1] = '\0';
        if (strcmp(cmd, "DRAIN") == 0) start_drain(l, "signal", true);
        if (strcmp(cmd, "TERM") == 0 && l->exit_status < 0) l->exit_status = 0;
    }
}

/* ---- routers behind a name ------------------------------------------------------------- */

static bool listed(char (*eps)[RESOLVER_ENDPOINT_MAX], size_t n, const char *ep) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(eps[i], ep)) return true;
    return false;
}

static link_router *free_slot(worker_link *l) {
    for (size_t i = 0; i < l->n_routers; i++)
        if (l->routers[i].dynamic && l->routers[i].inactive) return &l->routers[i];
    return l->n_routers < LINK_MAX_ROUTERS ? &l->routers[l->n_routers++] : NULL;
}

/* The resolver's latest addresses: a connection to each new one, none to those that left. */
static void reconcile(worker_link *l) {
    char eps[RESOLVER_MAX][RESOLVER_ENDPOINT_MAX];
    size_t n = 0;
    if (!l->resolver || !router_resolver_take(l->resolver, &l->resolver_gen, eps, &n)) return;
    for (size_t i = 0; i < l->n_routers; i++) {
        link_router *r = &l->routers[i];
        if (!r->dynamic || r->inactive || listed(eps, n, r->endpoint)) continue;
        size_t orphaned = orphan_requests(l, r);
        LOG_INFO("link", "router %s left its name: disconnecting (%zu requests cancelled)",
                 r->endpoint, orphaned);
        router_close(r);
        r->inactive = true;
    }
    for (size_t k = 0; k < n; k++) {
        bool have = false;
        for (size_t i = 0; i < l->n_routers && !have; i++)
            have = l->routers[i].dynamic && !l->routers[i].inactive &&
                   !strcmp(l->routers[i].endpoint, eps[k]);
        link_router *r = have ? NULL : free_slot(l);
        if (have) continue;
        if (!r) {
            LOG_WARN("link", "router %s: already %d routers; not connecting", eps[k],
                     LINK_MAX_ROUTERS);
            continue;
        }
        *r = (link_router){.dynamic = true, .backoff_ms = SOL_ZMQ_RECONNECT_MS};
        snprintf(r->endpoint, sizeof r->endpoint, "%s", eps[k]);
        LOG_INFO("link", "router %s joined its name", r->endpoint);
        router_open(l, r);
    }
}

static void on_timers(worker_link *l) {
    uint64_t now = sol_now_ms();
    uint64_t dead_ms = (uint64_t)l->heartbeat_ms * LINK_DEAD_AFTER_BEATS;
    reconcile(l);
    for (size_t i = 0; i < l->n_routers; i++) {
        link_router *r = &l->routers[i];
        if (r->inactive) continue;
        if (r->sock && r->heard_beat && now > r->last_rx_ms + dead_ms) router_dead(l, r, now);
        if (!r->sock && now >= r->reconnect_at_ms) router_open(l, r);
    }
    if (now >= l->next_beat_ms) send_heartbeats(l);
}

static long poll_timeout(const worker_link *l) {
    uint64_t now = sol_now_ms(), next = l->next_beat_ms;
    if (l->resolver && next > now + 500) next = now + 500; /* pick up new addresses soon */
    for (size_t i = 0; i < l->n_routers; i++) {
        const link_router *r = &l->routers[i];
        if (r->inactive) continue;
        uint64_t t =
            r->sock ? (r->heard_beat
                           ? r->last_rx_ms + (uint64_t)l->heartbeat_ms * LINK_DEAD_AFTER_BEATS + 1
                           : next)
                    : r->reconnect_at_ms;
        if (t < next) next = t;
    }
    return next <= now ? 0 : (long)(next - now);
}

static void *link_main(void *arg) {
    worker_link *l = arg;
    for (size_t i = 0; i < l->n_routers; i++)
        router_open(l, &l->routers[i]);
    send_heartbeats(l);
    zmq_pollitem_t items[2 + 2 * LINK_MAX_ROUTERS];
    while (l->exit_status < 0) {
        size_t n = 0;
        items[n++] = (zmq_pollitem_t){l->pipe_actor, 0, ZMQ_POLLIN, 0};
        items[n++] = (zmq_pollitem_t){exec_events_socket(l->events), 0, ZMQ_POLLIN, 0};
        for (size_t i = 0; i < l->n_routers; i++) {
            items[n++] =
                (zmq_pollitem_t){l->routers[i].sock, 0, l->routers[i].sock ? ZMQ_POLLIN : 0, 0};
            items[n++] =
                (zmq_pollitem_t){l->routers[i].mon, 0, l->routers[i].mon ? ZMQ_POLLIN : 0, 0};
        }
        if (zmq_poll(items, (int)n, poll_timeout(l)) < 0 && zmq_errno() != EINTR) {
            LOG_ERROR("link", "zmq_poll: %s", zmq_strerror(zmq_errno()));
            l->exit_status = 1;
            break;
        }
        on_pipe(l);
        on_events(l);
        for (size_t i = 0; i < l->n_routers; i++) {
            if (items[2 + 2 * i].revents & ZMQ_POLLIN) on_router(l, &l->routers[i]);
            if (l->routers[i].mon && (items[3 + 2 * i].revents & ZMQ_POLLIN))
                on_monitor(l, &l->routers[i]);
        }
        on_timers(l);
        if (l->draining && l->n_inflight == 0 && exec_idle(l->exec) && l->exit_status < 0) {
            if (l->exit_when_drained) {
                LOG_INFO("link", "drained: this worker holds no request");
                l->exit_status = 0;
            } else if (!l->idle_logged) {
                LOG_INFO("link",
                         "drained: holding no request; idle (taking no work) until stopped");
                l->idle_logged = true;
            }
        }
    }
    for (size_t i = 0; i < l->n_routers; i++)
        router_close(&l->routers[i]);
    char done[8];
    int len = snprintf(done, sizeof done, "DONE%d", l->exit_status);
    zmq_send(l->pipe_actor, done, (size_t)len, 0);
    return NULL;
}

/* ---- owner side -------------------------------------------------------------------------- */

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

static int link_setup(worker_link *l, const link_config *cfg, sol_err *e) {
    if (cfg->n_routers == 0 || cfg->n_routers > LINK_MAX_ROUTERS)
        return sol_err_set(e, -EINVAL, "worker.router lists %zu routers; expected 1..%d",
                           cfg->n_routers, LINK_MAX_ROUTERS);
    if (cfg->heartbeat_ms <= 0)
        return sol_err_set(e, -EINVAL, "heartbeat_ms is %d; expected > 0", cfg->heartbeat_ms);
    size_t idl = cfg->worker_id ? strlen(cfg->worker_id) : 0;
    if (idl == 0 || idl > SOL_FRAME_MAX_ID_BYTES)
        return sol_err_set(e, -EINVAL, "worker id is %zu bytes; expected 1..%d", idl,
                           SOL_FRAME_MAX_ID_BYTES);
    snprintf(l->worker_id, sizeof l->worker_id, "%s", cfg->worker_id);
    snprintf(l->pool, sizeof l->pool, "%s", cfg->pool ? cfg->pool : "");
    l->heartbeat_ms = cfg->heartbeat_ms;
    l->stall_after_ms = cfg->stall_after_ms;
    l->drain_migrate = cfg->drain_migrate;
    if (cfg->health_file && !(l->health_file = strdup(cfg->health_file)))
        return sol_err_set(e, -ENOMEM, "out of memory");
    if (cfg->curve && cfg->curve_server) {
        l->curve = true;
        l->curve_pair = *cfg->curve;
        l->curve_server = *cfg->curve_server;
    }
    exec_info info;
    exec_info_get(l->exec, &info);
    l->max_inflight = cfg->max_inflight ? cfg->max_inflight : 4 * info.capacity + 16;
    l->table_cap = pow2_at_least(2 * (size_t)l->max_inflight + 1);
    if (!(l->table = calloc(l->table_cap, sizeof *l->table)))
        return sol_err_set(e, -ENOMEM, "out of memory for %zu in-flight slots", l->table_cap);
    bool names = false;
    for (size_t i = 0; i < cfg->n_routers; i++) {
        if (strlen(cfg->routers[i]) >= sizeof l->routers[0].endpoint)
            return sol_err_set(e, -EINVAL, "router endpoint \"%.40s...\" is too long",
                               cfg->routers[i]);
        if (cfg->router_resolve_ms > 0 && resolver_is_name(cfg->routers[i])) {
            names = true; /* its addresses come from the resolver */
            continue;
        }
        link_router *r = &l->routers[l->n_routers++];
        snprintf(r->endpoint, sizeof r->endpoint, "%s", cfg->routers[i]);
        r->backoff_ms = SOL_ZMQ_RECONNECT_MS;
    }
    if (names)
        return router_resolver_new(cfg->routers, cfg->n_routers, cfg->router_resolve_ms,
                                   &l->resolver, e);
    return 0;
}

int link_new(void *zctx, const link_config *cfg, executor *exec, exec_events *events,
             worker_link **out, sol_err *e) {
    *out = NULL;
    worker_link *l = calloc(1, sizeof *l);
    if (!l) return sol_err_set(e, -ENOMEM, "out of memory for the link");
    l->zctx = zctx;
    l->exec = exec;
    l->events = events;
    l->exit_status = -1;
    l->status = -EAGAIN;
    int rc = link_setup(l, cfg, e);
    if (!rc && exec->ops->kv_events && !(l->kv = kv_report_new()))
        rc = sol_err_set(e, -ENOMEM, "out of memory for KV events");
    if (rc < 0) {
        link_free(l);
        return rc;
    }
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://sol-link-pipe-%p", (void *)l);
    l->pipe_owner = zmq_socket(zctx, ZMQ_PAIR);
    l->pipe_actor = zmq_socket(zctx, ZMQ_PAIR);
    if (!l->pipe_owner || !l->pipe_actor || zmq_bind(l->pipe_actor, ep) != 0 ||
        zmq_connect(l->pipe_owner, ep) != 0) {
        rc = sol_err_set(e, -zmq_errno(), "link pipe: %s", zmq_strerror(zmq_errno()));
        link_free(l);
        return rc;
    }
    if (pthread_create(&l->thread, NULL, link_main, l) != 0) {
        link_free(l);
        return sol_err_set(e, -EAGAIN, "cannot start the link thread");
    }
    l->started = true;
    *out = l;
    return 0;
}

int link_drain(worker_link *l) {
    return zmq_send(l->pipe_owner, "DRAIN", 5, 0) < 0 ? -EIO : 0;
}

void *link_socket(worker_link *l) {
    return l->pipe_owner;
}

int link_wait(worker_link *l, int timeout_ms) {
    if (l->status != -EAGAIN) return l->status;
    zmq_pollitem_t it = {l->pipe_owner, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, timeout_ms) <= 0) return -EAGAIN;
    char buf[16];
    int n = zmq_recv(l->pipe_owner, buf, sizeof buf - 1, ZMQ_DONTWAIT);
    if (n < 4 || memcmp(buf, "DONE", 4) != 0) return -EAGAIN;
    buf[n < (int)sizeof buf - 1 ? n : (int)sizeof buf - 1] = '\0';
    l->status = atoi(buf + 4);
    return l->status;
}

void link_free(worker_link *l) {
    if (!l) return;
    if (l->started) {
        if (l->status == -EAGAIN) zmq_send(l->pipe_owner, "TERM", 4, 0);
        pthread_join(l->thread, NULL);
    }
    router_resolver_free(l->resolver);
    zmq_util_close(l->pipe_owner);
    zmq_util_close(l->pipe_actor);
    free(l->table);
    free(l->health_file);
    kv_report_free(l->kv);
    free(l);
}

void link_default_id(char *buf, size_t cap) {
    char host[64] = "worker";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "worker");
    host[sizeof host - 1] = '\0';
    for (char *p = host; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok) *p = '_';
    }
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd)
        rnd = (uint32_t)sol_now_ns() ^ (uint32_t)getpid();
    snprintf(buf, cap, "%.40s-%ld-%08x", host[0] ? host : "worker", (long)getpid(), rnd);
}
