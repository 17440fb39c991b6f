/* slo_admit: whether a request with latency targets (docs/api.md, "Latency targets") is taken now,
 * from each worker's predicted time to first token and its current time per output token:
 * admitted, refused for now (429 with Retry-After) or refused outright (503: no worker could). */
#ifndef SOL_SLO_ADMIT_H
#define SOL_SLO_ADMIT_H

#include "config.h"
#include "prefix_index.h"
#include "worker_table.h"

/* A predicted first token must come within this share of X-Sol-TTFT-Ms: the prefill rate is an
 * average over recent requests, a first token waits for its engine step, and the figures lag a
 * heartbeat (bench/slo.sh: at 1.0 the served requests' TTFT p99 was 1,036 ms for a 1,000 ms
 * target). */
#define SLO_TTFT_SAFETY 0.9

typedef enum { SLO_ADMIT, SLO_NOT_NOW, SLO_NEVER } slo_verdict;

typedef struct slo_decision {
    slo_verdict verdict;
    double predicted_s; /* the best prediction of the first token (0: none could be made) */
    int retry_after_s;  /* SLO_NOT_NOW: when the work ahead should have cleared */
    const char *code;   /* the OpenAI-style error code of a refusal */
    char why[320];      /* the refusal's message */
} slo_decision;

/* The decision for a prompt of chain c (may be NULL) with targets slo, among t's workers of
 * `scope` (x: the prefix index, may be NULL). A worker's predicted TTFT is its uncached prompt
 * and the work queued ahead of it, in bytes, over its measured prefill rate (route_policy.h; a
 * worker not measured yet gets the mean of those that are; none measured: no prediction, and
 * the TTFT target is left to the queue's deadline). Its time per output token is its running
 * streams over its tokens per second (heartbeat). When every worker is full, slot_wait_s is the
 * predicted wait for a free slot (the pool's queue: seconds; 0 when not measured yet, and the
 * request queues until its TTFT passes). */
void slo_admit(worker_table *t, wt_scope scope, prefix_index *x, const prefix_chain *c,
               const sol_slo *slo, double slot_wait_s, slo_decision *out);

/* w's predicted seconds to the first token of chain c (0: no rate measured in scope), as above. */
double slo_worker_ttft(worker_table *t, wt_scope scope, const bk_worker *w, prefix_index *x,
                       const prefix_chain *c);

#endif
