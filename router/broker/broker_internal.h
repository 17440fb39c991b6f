/* broker_internal: state shared by broker.c (the actor, its pipe and the HTTP-facing callbacks),
 * broker_dispatch.c (dispatch, cancel, drain, failover) and broker_inbox.c (worker messages, the
 * tick). Only the broker thread touches it, except `snap` (snap_mu) and `push` (push_mu). */
#ifndef SOL_BROKER_INTERNAL_H
#define SOL_BROKER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "broker.h"
#include "inflight.h"
#include "prompt_chain.h"
#include "prefix_index.h"
#include "reply_ids.h"
#include "route_policy.h"
#include "worker_table.h"
#include "zap_auth.h"

#define BROKER_TICK_MS 100

enum bk_cmd_type { BK_DISPATCH = 1, BK_CANCEL, BK_DRAIN, BK_TERM };

/* Most distinct model names the router takes from workers' registrations: a worker registering
 * one more is refused (its Register answered with an error naming the bound). */
#define BROKER_MAX_MODELS 64

/* A (pool, model)'s chat template and tool-call format, as its first live worker registered
 * them: one row per pair with a live worker. */
typedef struct bk_pool_tools {
    char pool[SOL_FRAME_MAX_NAME_BYTES + 1];
    char model[SOL_FRAME_MAX_NAME_BYTES + 1];
    char chat_template[32];
    char tool_format[16];
} bk_pool_tools;

/* What travels through the inproc pipe from HTTP threads (copied by zmq_send). */
typedef struct bk_cmd {
    int type;
    int pool; /* BK_DISPATCH: index into cfg.pools */
    uint64_t received_ns;
    uint64_t prefix_hash;
    prefix_chain *chain; /* BK_DISPATCH under cache_aware: the prompt's chain (owned), else NULL */
    http_stream *stream; /* BK_DISPATCH: one reference, now the broker's */
    genmsg *msg;         /* BK_DISPATCH: the Generate message (owned), built on the HTTP thread */
    char id[SOL_FRAME_MAX_ID_BYTES + 1]; /* request id (DISPATCH, CANCEL) or worker id (DRAIN) */
    uint32_t choice;                     /* BK_DISPATCH: which of the request's n samples */
    char model[SOL_FRAME_MAX_NAME_BYTES + 1]; /* BK_DISPATCH: only workers of this model ("" any) */
    sol_slo slo; /* BK_DISPATCH: the headers' targets, the pool's defaults where they gave none */
} bk_cmd;

struct broker {
    broker_config cfg;
    char endpoint[256];
    void *zctx, *sock, *pull, *push;
    zap_auth *zap; /* CURVE's handler; NULL without CURVE */
    pthread_mutex_t push_mu;
    pthread_t thread;
    bool running;
    /* broker thread only */
    worker_table wt;
    inflight inf;
    prefix_index *pidx; /* cache_aware: which workers were sent which prefixes; else NULL */
    reply_ids *replies; /* the ids replies were generated as (NULL: off) */
    uint32_t next_uid;  /* bk_worker.uid of the next worker (or worker session) to register */
    bk_queue *queues;   /* one per pool */
    strbuf models;      /* "\nm1\nm2\n": every model a worker registered since the router started */
    size_t n_models;
    uint64_t next_beat_ms;
    size_t tpot_streams; /* requests on a worker with X-Sol-TPOT-Ms, counted each tick: none, and
                            rebalancing skips its per-worker scans */
    uint8_t *enc;        /* encode scratch */
    size_t enc_cap;
    oai_token_logprob *lp; /* chunk conversion scratch */
    oai_top_logprob *top;
    size_t lp_cap, top_cap;
    bool dirty; /* the snapshot is stale */
    /* published for HTTP threads */
    pthread_mutex_t snap_mu;
    strbuf snap_json;
    strbuf snap_ids;           /* "\nid1\nid2\n" */
    bk_pool_tools *snap_tools; /* per (pool, model) with a live worker: its template and tools */
    size_t snap_n_tools, snap_cap_tools;
    strbuf snap_models; /* a copy of models */
    bool snap_ready;
};

/* broker_inbox.c: the worker socket's messages, the periodic tick, shutdown. */
void bw_on_worker_message(broker *b);
void bw_tick(broker *b, uint64_t now_ms);
void bw_shutdown(broker *b);

/* broker_dispatch.c: requests. */
void bw_on_dispatch(broker *b, bk_cmd *c);
void bw_on_cancel(broker *b, const char *http_id);
void bw_on_drain(broker *b, const char *worker_id);
/* The scope (worker_table.h) a request of pool index `pool` and model `model` may go to. */
wt_scope bw_scope(const broker *b, int pool, const char *model);
/* Assign queued requests of `pool` to its free workers. */
void bw_pump(broker *b, int pool);
/* Put r back at the front of its queue for another worker (or give up past the attempt cap). */
void bw_failover(broker *b, bk_req *r, const char *why);
/* A draining worker handed r back (a CANCELLED it was not asked for): moved as a failover is,
 * without counting an attempt (sol_migrations_total). */
void bw_migrate(broker *b, bk_req *r);
/* Live rebalancing (broker_rebalance.c): moves a stream off a worker that falls behind its
 * streams' TPOT targets, or (router.workers.rebalance_hot_ratio) holds far more than a peer. */
void bw_rebalance(broker *b, uint64_t now_ms);
/* r leaves its worker now (cancelled there) and goes back to the front of its queue, a planned
 * move like a drain's, counted as a rebalance; `why` is logged. */
void bw_move(broker *b, bk_req *r, const char *why);
/* Fail over everything on w and remove it from the table (w is freed). */
void bw_worker_dead(broker *b, bk_worker *w, const char *why);
/* Tell w to stop work on wire_id (best effort: a gone worker has nothing to stop). */
void bw_send_cancel(broker *b, bk_worker *w, const char *wire_id);
/* Cancel r on its worker and forget it. */
void bw_drop(broker *b, bk_req *r);
/* End a request with an error (before the first byte: an HTTP status) and release it. */
void bw_fail(broker *b, bk_req *r, int status, const char *msg, int retry_after_s);
/* The same with a full error (its code, param). */
void bw_fail_err(broker *b, bk_req *r, const oai_error *err);

#endif
