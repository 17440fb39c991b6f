/* worker_table: the broker's view of every registered worker (identity, pool, capacity, load from
 * heartbeats, requests it holds) and the dispatch policy: least loaded with bounded prefix
 * affinity. */
#ifndef SOL_WORKER_TABLE_H
#define SOL_WORKER_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zmq_util.h"

/* Bounded-load affinity: the affinity worker keeps a request only while its in-flight after taking
 * it stays within max(1, epsilon x its fair share) of the least loaded worker (docs/broker.md). */
#define WT_AFFINITY_EPSILON 0.25

/* A request's share of its worker's prefill backlog (route_policy.h): its uncached prompt bytes,
 * from when it is sent until its first token; with what was queued ahead of it then and when, from
 * which its first token measures the worker's prefill rate. */
typedef struct bk_charge {
    uint32_t bytes;
    bool on;
    uint64_t ahead;   /* the worker's backlog_bytes before this request's */
    uint64_t sent_ns; /* sol_now_ns() when it was sent */
} bk_charge;

typedef struct bk_worker {
    zmq_util_identity ident;
    char id[SOL_FRAME_MAX_ID_BYTES + 1];
    char pool[SOL_FRAME_MAX_NAME_BYTES + 1];
    char model[SOL_FRAME_MAX_NAME_BYTES + 1];
    char backend[32];
    char chat_template[32]; /* the family the worker renders chat with */
    char tool_format[16];   /* its models' tool-call format, "" = none */
    uint32_t capacity;      /* most requests the router keeps on it at once */
    uint32_t max_context;
    uint64_t last_seen_ms; /* any message counts */
    uint64_t registered_ms;
    uint64_t session;  /* Register.session of its connection (0 = unknown) */
    uint32_t inflight; /* requests the router has assigned to it and not yet finished */
    /* figures from the latest heartbeat */
    uint32_t hb_running, hb_waiting;
    uint32_t finished_since_hb; /* our requests that left it after that heartbeat was sent */
    double kv_usage, prefix_hit_rate, spec_acceptance, tokens_per_s;
    uint64_t engine_steps;
    /* speculative decoding, cumulative on the worker (heartbeat spec_*) */
    uint64_t spec_steps, spec_drafted, spec_accepted, spec_emitted;
    double spec_draft_seconds, spec_verify_seconds;
    uint64_t served; /* requests finished here (any finish reason except failover) */
    uint64_t failed_over;
    uint64_t migrated;   /* requests it handed back while draining (worker.drain = migrate) */
    uint64_t rebalanced; /* streams live rebalancing moved off it */
    uint64_t last_rebalance_ms; /* when one last was */
    /* cache_aware (route_policy.h): never reused, a new one when the worker comes back without
     * its cache (a new session), so what the prefix index holds for the old one never matches */
    uint32_t uid;
    uint64_t backlog_bytes;  /* uncached prompt bytes of its requests not yet streaming */
    uint64_t kv_links;       /* prompt-chain links its KV events say it holds (either tier) */
    uint64_t kv_tier2_links; /* of those, the ones held only in its second tier */
    double prefill_bps;      /* measured prompt bytes prefilled per second (0: not yet) */
    uint64_t tier1_hit_tokens, tier2_hit_tokens; /* heartbeat: prompt tokens served per KV tier */
    uint32_t tier2_blocks, tier2_used;           /* its second KV tier */
    uint64_t quotes_used, quotes_declined;       /* heartbeat: replies sent back as their ids */
    uint64_t kv_snapshots; /* KV snapshots it sent (one per registration, or after a loss) */
    bool draining;
    bool unhealthy;          /* its heartbeat says the engine cannot step: no new work */
    char unhealthy_why[256]; /* the worker's reason, for /admin/workers */
} bk_worker;

/* Owns its workers. */
typedef struct worker_table {
    bk_worker **w;
    size_t n, cap;
    uint64_t rr; /* rotates the start of least-loaded ties so equal workers share evenly */
} worker_table;

void wt_init(worker_table *t);
void wt_free(worker_table *t);

/* Add a copy of `tmpl`; returns the stored worker or NULL on allocation failure. */
bk_worker *wt_add(worker_table *t, const bk_worker *tmpl);
/* Remove and free `w`. */
void wt_remove(worker_table *t, bk_worker *w);
bk_worker *wt_find_ident(const worker_table *t, const zmq_util_identity *id);
bk_worker *wt_find_id(const worker_table *t, const char *id);

/* The workers a request may go to: those of `pool` serving `model` (NULL or "": any model; a
 * request that named a model a worker registered is kept to that model's workers). */
typedef struct wt_scope {
    const char *pool;
    const char *model;
} wt_scope;

/* Whether w is of the scope's pool and model (whatever its state). */
bool wt_in_scope(const bk_worker *w, wt_scope s);

/* Whether w may take one more request of scope `s` now (in it, healthy, not draining, below
 * capacity). */
bool wt_can_take(const bk_worker *w, wt_scope s);

/* Workers of scope `s` that may receive new work (healthy, not draining). */
size_t wt_live_in_pool(const worker_table *t, wt_scope s);

/* Load as a fraction of capacity: the larger of what the router has assigned and what the worker
 * last reported running + waiting (a worker may hold work from another router), less the requests
 * of ours that finished since that report (else a finished request looks running until the next
 * heartbeat, and a repeated prefix would spill off its warm worker). */
/* Seconds per output token a stream gets on w now, from its last heartbeat: its running streams
 * over its tokens per second (0: not reported). */
double wt_tpot(const bk_worker *w);
double wt_load(const bk_worker *w);

/* Choose a worker of scope `pool` for one request: not draining, below capacity, not `avoid`
 * (unless it is the only choice). With `use_affinity`, the worker that rendezvous-hashing picks for
 * `prefix_hash` wins unless that would push it over the bounded-load limit; otherwise the least
 * loaded. NULL when every worker is full (the request waits in the pool's queue). */
bk_worker *wt_pick(worker_table *t, wt_scope pool, uint64_t prefix_hash, bool use_affinity,
                   const bk_worker *avoid);

/* The bound above: `a` (the rendezvous pick) keeps one more request given the pool's busy total and
 * capacity (requests) and the least load (fraction of capacity) among eligible workers. */
bool wt_affinity_keeps(const bk_worker *a, double pool_busy, double pool_cap, double min_load);

/* FNV-1a over at most `max_chars` UTF-8 characters of `s` (0: nothing, returns 0). */
uint64_t wt_prefix_hash(const char *s, size_t len, size_t max_chars);

#endif
