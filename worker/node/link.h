/* link: the worker's network actor. One thread holds a DEALER socket per router, registers,
 * heartbeats, turns Generate/Cancel/Drain into executor calls and forwards token chunks back. */
#ifndef SOL_LINK_H
#define SOL_LINK_H

#include <stdbool.h>
#include <stddef.h>

#include "curve_keys.h"
#include "err.h"
#include "executor.h"

/* Liveness (Paranoid Pirate): once a router has sent a Heartbeat, it is dead after this many
 * heartbeat intervals without any message from it; the link then reconnects with a backoff
 * doubling from SOL_ZMQ_RECONNECT_MS to SOL_ZMQ_RECONNECT_MAX_MS. */
#define LINK_DEAD_AFTER_BEATS 3

typedef struct link_config {
    const char *const *routers; /* endpoints, at least one */
    size_t n_routers;
    const char *worker_id; /* printable ASCII; see link_default_id */
    const char *pool;
    int heartbeat_ms;      /* > 0 */
    int stall_after_ms;    /* engine watchdog: work but no step for this long = unhealthy; 0 off */
    unsigned max_inflight; /* requests accepted at once (running + waiting); 0: 4 * capacity */
    int router_resolve_ms; /* > 0: tcp://NAME:PORT routers are resolved to every address this
                            * often, one connection each (worker.router_resolve_ms) */
    const char *health_file; /* rewritten each heartbeat while healthy; NULL: none (copied) */
    bool drain_migrate;      /* worker.drain = migrate: a drain cancels running requests at once and
                              * the router moves them (a CANCELLED from a draining worker) */
    const curve_pair *curve; /* worker.curve: its pair (copied); NULL = plain ZMTP */
    const curve_key *curve_server; /* the routers' public key (copied), with curve */
} link_config;

typedef struct worker_link worker_link;

/* Start the link thread on `zctx`. `exec` and `events` are borrowed; the link is the only
 * thread that calls `exec` and reads `events` until link_free returns. */
int link_new(void *zctx, const link_config *cfg, executor *exec, exec_events *events,
             worker_link **out, sol_err *e);

/* Begin a drain (as SIGTERM does): a Heartbeat with draining=true goes to every router, new
 * Generates are answered with Error 503 so the router re-routes them, running requests are handed
 * back (drain_migrate: cancelled now, and the router, which knows the worker is draining, moves
 * each with what it streamed) or finish, then the link ends with status 0. A router's Drain
 * (POST /admin/workers/ID/drain) does the same but leaves the link idle, connected and taking no
 * work, until it is stopped. Call from the owner's thread. */
int link_drain(worker_link *l);

/* The owner's end of the actor pipe: poll it for ZMQ_POLLIN to learn that the link ended. */
void *link_socket(worker_link *l);

/* Wait up to timeout_ms (-1: forever) for the link to end. Returns its exit status (0: drained
 * or stopped; 1: a router refused this worker, e.g. protocol version mismatch) or -EAGAIN. */
int link_wait(worker_link *l, int timeout_ms);

/* Stop now (requests still running are dropped), join the thread, free. NULL is a no-op. */
void link_free(worker_link *l);

/* "HOST-PID-RAND" with the host name reduced to [A-Za-z0-9._-]; `cap` >= 32. */
void link_default_id(char *buf, size_t cap);

#endif
