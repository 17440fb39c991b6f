/* metrics: the router's Prometheus registry — latency histograms by pool, request counters by
 * pool and status, per-worker load gauges — rendered as text format 0.0.4 for GET /metrics. */
#ifndef SOL_METRICS_H
#define SOL_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "strbuf.h"

typedef struct metrics metrics;

/* Which latency histogram an observation goes to. */
typedef enum {
    METRIC_TTFT = 0, /* request received → first token sent */
    METRIC_ITL,      /* gap between consecutive streamed chunks */
    METRIC_E2E,      /* request received → last byte */
    METRIC_QUEUE,    /* request received → dispatched to a worker */
    METRIC_HIST_COUNT
} metric_hist;

/* One worker's load, from its latest heartbeat. */
typedef struct metrics_worker_load {
    uint32_t running;
    uint32_t waiting;
    double kv_usage;        /* 0..1: used / total KV blocks */
    double prefix_hit_rate; /* 0..1 */
    double spec_acceptance; /* 0..1, 0 when not speculative */
    /* speculative decoding counters, cumulative on the worker (rendered as counters) */
    uint64_t spec_steps;    /* verify steps */
    uint64_t spec_drafted;  /* draft tokens proposed */
    uint64_t spec_accepted; /* of those, accepted */
    uint64_t spec_emitted;  /* tokens emitted by verify steps */
    double spec_draft_seconds, spec_verify_seconds;
    uint32_t unhealthy; /* 1: the worker reports it cannot step (watchdog, stuck TP rank) */
    uint64_t tier1_hit_tokens, tier2_hit_tokens; /* prompt tokens served per KV tier (counters) */
    uint32_t tier2_used;                         /* blocks in the second tier */
    uint64_t quotes_used,
        quotes_declined; /* replies sent back as their ids: used, not (counters) */
} metrics_worker_load;

/* `model_name` labels the vllm:* series (vLLM's `model_name` label). Thread-safe throughout. */
metrics *metrics_new(const char *model_name);
void metrics_free(metrics *m);

void metrics_observe(metrics *m, metric_hist h, const char *pool, double seconds);
void metrics_count_request(metrics *m, const char *pool, int http_status);
/* A request moved to another worker (its worker died, left or refused it). */
void metrics_count_failover(metrics *m, const char *pool);
/* A request a draining worker handed back (sol_migrations_total{pool}). */
void metrics_count_migration(metrics *m, const char *pool);
/* A stream live rebalancing moved (sol_rebalanced_total{pool}). */
void metrics_count_rebalance(metrics *m, const char *pool);
/* A request refused at arrival by its latency targets (refused), or ended when a deadline passed
 * (sol_slo_refused_total, sol_slo_deadline_missed_total{pool}). */
/* n assistant messages sent as the ids they were generated as (reply_ids.h) */
void metrics_count_quoted(metrics *m, const char *pool, uint64_t n);
void metrics_count_slo(metrics *m, const char *pool, bool refused);
void metrics_set_worker(metrics *m, const char *worker, const char *pool,
                        const metrics_worker_load *load);
void metrics_remove_worker(metrics *m, const char *worker);
/* Prefix-cache counters in tokens (usage.cached_tokens / usage.prompt_tokens of a request). */
void metrics_add_prefix_cache(metrics *m, const char *pool, uint64_t hit_tokens,
                              uint64_t query_tokens);

/* Prompt and generated tokens of one finished choice (its usage), for throughput. */
void metrics_add_tokens(metrics *m, const char *pool, uint64_t prompt, uint64_t generated);

/* Append the whole exposition to out; 0 or -ENOMEM. */
int metrics_render(metrics *m, strbuf *out);

#endif
