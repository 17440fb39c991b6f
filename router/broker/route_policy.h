/* route_policy: which worker of a pool takes a request, under router.routing.policy: cache_aware
 * (least predicted time to first token: uncached prompt + work queued ahead + decode load, bounded
 * load), affinity, least_loaded or round_robin (docs/broker.md, "Dispatch"). */
#ifndef SOL_ROUTE_POLICY_H
#define SOL_ROUTE_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "prefix_index.h"
#include "worker_table.h"

/* One table: cache_aware's cost terms, in bytes of prompt text still to prefill. Every request a
 * worker holds decodes there, now or after its prefill, and a decoding stream slows each of its
 * engine steps, a new request's prefill included: weighed as RP_DECODE_BYTES (about 128 tokens)
 * of prefill per request held. Counting the ones still in prefill too matters: a burst of one
 * cached prompt costs nothing to prefill on its holder, and would pile onto it otherwise. An
 * assumption of the model, not a measurement; bench/multiturn.sh is where it is judged. */
enum { RP_DECODE_BYTES = 512 };
/* A prompt byte a worker holds only in its second KV tier costs a copy back into its pool, not a
 * prefill: weighed as 1/RP_TIER2_SPEEDUP of one. Also an assumption (a CPU worker's block comes
 * back by memcpy, ~100x faster than computing it; a GPU worker's over PCIe, ~40x for an 8B model's
 * 128 KiB of K/V per token at 50 GB/s against ~10k tokens/s of prefill): the lower bound, since
 * copies queue with the step that needs them. */
enum { RP_TIER2_SPEEDUP = 16 };
/* The load bound of cache_aware: a worker competes only while, counting the request, it holds at
 * most RP_BOUND_FACTOR times its fair share of the pool's requests plus RP_BOUND_SLACK. Looser
 * than affinity's bound to the least loaded worker (max(1, 0.25 x share) above it): with a few
 * requests per worker that one sends a conversation away from its history whenever its worker
 * holds two more than the idlest (bench/multiturn.sh: 70% of prompt tokens reused against 77%
 * without a bound); twice the share still stops a hot prefix at about twice its part. */
#define RP_BOUND_FACTOR 2.0
#define RP_BOUND_SLACK 2.0
/* The measured prefill rate (rp_first_token): a request's first token samples (its uncached bytes
 * + the bytes queued ahead of it when sent) / (time from sending to the first token) when that
 * work is at least RP_RATE_MIN_BYTES (below it the step and network overheads dominate), folded
 * in with weight RP_RATE_WEIGHT (about the last four samples). Costs divide by it, so a worker
 * twice as fast at prefill clears a given backlog in half the time. */
enum { RP_RATE_MIN_BYTES = 1024 };
/* ... and only when that time is at least RP_RATE_MIN_NS: a first token sooner than that is
 * overhead and noise (a simulated worker answers in a millisecond whatever the prompt), and two
 * equal workers measured apart by noise would share unevenly (cluster_cache_aware's 64 distinct
 * streams: one of three took 31 when every sample counted). */
#define RP_RATE_MIN_NS 50000000ull
#define RP_RATE_WEIGHT 0.25

/* What a request brings to the choice. */
typedef struct rp_request {
    const prefix_chain *chain; /* cache_aware; NULL or empty: nothing cached to look for */
    uint64_t prefix_hash;      /* affinity */
    bool affinity_on;          /* affinity: router.routing.affinity_prefix_chars > 0 */
    const bk_worker *avoid;    /* a failed attempt's worker: another first */
} rp_request;

/* A worker of scope `pool` (worker_table.h) for r under `policy` (x: cache_aware's index, may be
 * NULL for the others); NULL when every worker is full. */
bk_worker *rp_pick(worker_table *t, sol_routing_policy policy, wt_scope pool, const rp_request *r,
                   prefix_index *x);

/* Whether w may take one more request under cache_aware's load bound, given the pool's busy total
 * and capacity (requests). */
bool rp_within_bound(const bk_worker *w, double pool_busy, double pool_cap);

/* The prefill work, in bytes, of a prompt of `total` bytes of which a worker holds `cached`, the
 * first `pool` of them in its KV pool and the rest only in its second tier (RP_TIER2_SPEEDUP). */
double rp_uncached(uint32_t total, uint32_t cached, uint32_t pool);

/* The cost cache_aware gives w for that prompt: its predicted time to first token,
 * (rp_uncached + queued ahead + decode load) bytes / `rate` (w's measured prefill bytes per
 * second; cheapest() gives a worker not yet measured the mean of those that are, and 1 when none
 * is: then costs are bytes, and compare alike). */
double rp_cost(const bk_worker *w, uint32_t total, uint32_t cached, uint32_t pool, double rate);

/* Bookkeeping of the work queued ahead: a request's uncached bytes charged to w when it is sent
 * there (c records them; the chain's links are noted as w's: x may be NULL), released at its
 * first token or when it leaves w, whichever comes first. */
void rp_charge(prefix_index *x, const prefix_chain *chain, bk_worker *w, bk_charge *c);
void rp_release(bk_worker *w, bk_charge *c);
/* The request's first token came at now_ns: samples w's prefill rate (RP_RATE_MIN_BYTES,
 * RP_RATE_MIN_NS), then releases the charge. */
void rp_first_token(bk_worker *w, bk_charge *c, uint64_t now_ns);

#endif
