/* broker: the router's actor that owns the ZeroMQ ROUTER socket to every worker — registration,
 * heartbeats, dispatch (least loaded + prefix affinity), bounded queues, failover with resume,
 * drain. */
#ifndef SOL_BROKER_H
#define SOL_BROKER_H

#include <stdbool.h>

#include "classify.h"
#include "config.h"
#include "err.h"
#include "http.h"
#include "metrics.h"

/* A failed-over request is given up (HTTP 503 / a stream error) after this many attempts. */
#define BROKER_MAX_ATTEMPTS 4

typedef struct broker_config {
    const char *bind;    /* ZeroMQ endpoint for workers, e.g. "tcp://127.0.0.1:5555" */
    bool allow_insecure; /* a non-loopback bind without CURVE (anyone may register) */
    /* CURVE (router.workers.curve): both set, or neither */
    const char *curve_secret_key_file; /* the router's pair (sol-keygen) */
    const char *curve_authorized_dir;  /* workers' .pub files */
    const char *const *pools;
    size_t n_pools;
    const char *fallback_pool; /* NULL: none */
    int heartbeat_ms;
    int dead_after_ms;
    int max_queue_per_pool;     /* 0: no queue, 429 when every worker is full */
    double rebalance_hot_ratio; /* router.workers.rebalance_hot_ratio (0: off) */
    int affinity_prefix_chars;  /* 0: off */
    sol_routing_policy policy;  /* router.routing.policy (route_policy.h) */
    int reply_tokens_mib;       /* router.routing.reply_tokens_mib (reply_ids.h); 0: off */
    int request_timeout_ms;     /* 0: none */
    const sol_pool_slo *slo;    /* router.slo: per-pool default latency targets (n_slo of them) */
    size_t n_slo;
    metrics *metrics; /* may be NULL */
} broker_config;

typedef struct broker broker;

/* Bind the socket and start the actor thread; returns once it is serving. Borrowed pointers in
 * cfg must outlive the broker. */
int broker_new(const broker_config *cfg, broker **out, sol_err *e);
/* Stop the thread (open requests end with a 503 error), close the socket, free. NULL: no-op. */
void broker_free(broker *b);

/* The endpoint actually bound (useful with "tcp://127.0.0.1:*"). */
const char *broker_endpoint(const broker *b);

/* The http_backend callbacks, with ctx = the broker. Safe from any thread; they never block on
 * the broker thread (they enqueue, or read a snapshot it publishes). */
http_backend broker_http_backend(broker *b);

#endif
