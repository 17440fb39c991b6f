/* route_policy: a pool's worker for one request under router.routing.policy (route_policy.h). */
#include "route_policy.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"

static bool eligible(const bk_worker *w, wt_scope pool, const bk_worker *avoid) {
    return w != avoid && wt_can_take(w, pool);
}

double rp_uncached(uint32_t total, uint32_t cached, uint32_t pool) {
    cached = cached < total ? cached : total;
    pool = pool < cached ? pool : cached;
    return (double)(total - cached) + (double)(cached - pool) / RP_TIER2_SPEEDUP;
}

double rp_cost(const bk_worker *w, uint32_t total, uint32_t cached, uint32_t pool, double rate) {
    double busy = wt_load(w) * (w->capacity ? w->capacity : 1);
    double bytes =
        rp_uncached(total, cached, pool) + (double)w->backlog_bytes + RP_DECODE_BYTES * busy;
    return bytes / (rate > 0 ? rate : 1);
}

/* The rate a worker not yet measured is given: the mean of the candidates' that are, else 1. */
static double fallback_rate(bk_worker *const *cand, size_t n) {
    double sum = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (cand[i]->prefill_bps > 0) sum += cand[i]->prefill_bps, k++;
    return k ? sum / (double)k : 1;
}

/* round_robin: the next eligible worker after the last one chosen, in table order. */
static bk_worker *round_robin(worker_table *t, wt_scope pool, const bk_worker *avoid) {
    for (size_t k = 0; k < t->n; k++) {
        bk_worker *w = t->w[(size_t)(t->rr++ % t->n)];
        if (eligible(w, pool, avoid)) return w;
    }
    return NULL;
}

bool rp_within_bound(const bk_worker *w, double pool_busy, double pool_cap) {
    if (!w->capacity || pool_cap <= 0) return false;
    double share = (pool_busy + 1) * w->capacity / pool_cap; /* its fair part, this one included */
    return wt_load(w) * w->capacity + 1 <= RP_BOUND_FACTOR * share + RP_BOUND_SLACK + 1e-9;
}

/* cache_aware: among the eligible workers within the load bound (rp_within_bound: a hot prefix
 * cannot pile onto one worker), the least cost; ties go to the less loaded, then to the rotation.
 * The least loaded worker is always within it (its load is at most the mean). */
static bk_worker *cheapest(worker_table *t, wt_scope pool, const rp_request *r, prefix_index *x) {
    size_t n = 0;
    bk_worker **cand = malloc(sizeof *cand * (t->n ? t->n : 1));
    uint32_t *uids = malloc(sizeof *uids * (t->n ? t->n : 1));
    uint32_t *cached = calloc(t->n ? t->n : 1, sizeof *cached);
    uint32_t *pool_held = calloc(t->n ? t->n : 1, sizeof *pool_held);
    bk_worker *best = NULL;
    if (!cand || !uids || !cached || !pool_held) goto out;
    double busy = 0, cap = 0;
    size_t start = t->n ? (size_t)(t->rr++ % t->n) : 0;
    for (size_t k = 0; k < t->n; k++) {
        bk_worker *w = t->w[(start + k) % t->n];
        if (w->draining || w->unhealthy || !wt_in_scope(w, pool)) continue;
        busy += wt_load(w) * w->capacity;
        cap += w->capacity;
        if (!eligible(w, pool, r->avoid)) continue;
        uids[n] = w->uid;
        cand[n++] = w;
    }
    if (!n) goto out;
    if (x && r->chain && r->chain->n) pidx_match(x, r->chain, uids, n, cached, pool_held);
    uint32_t total = r->chain ? r->chain->total : 0;
    double best_cost = 0, fallback = fallback_rate(cand, n);
    for (size_t i = 0; i < n; i++) {
        if (!rp_within_bound(cand[i], busy, cap)) continue;
        double rate = cand[i]->prefill_bps > 0 ? cand[i]->prefill_bps : fallback;
        double c = rp_cost(cand[i], total, cached[i], pool_held[i], rate);
        if (!best || c < best_cost || (c == best_cost && wt_load(cand[i]) < wt_load(best)))
            best = cand[i], best_cost = c;
    }
out:
    free(cand);
    free(uids);
    free(cached);
    free(pool_held);
    return best;
}

bk_worker *rp_pick(worker_table *t, sol_routing_policy policy, wt_scope pool, const rp_request *r,
                   prefix_index *x) {
    bk_worker *w = NULL;
    switch (policy) {
    case SOL_ROUTE_CACHE_AWARE:
        w = cheapest(t, pool, r, x);
        break;
    case SOL_ROUTE_ROUND_ROBIN:
        w = round_robin(t, pool, r->avoid);
        break;
    case SOL_ROUTE_AFFINITY:
    case SOL_ROUTE_LEAST_LOADED:
        return wt_pick(t, pool, r->prefix_hash, policy == SOL_ROUTE_AFFINITY && r->affinity_on,
                       r->avoid);
    }
    /* the avoided worker when it is the only choice, as wt_pick does */
    if (!w && r->avoid && wt_can_take(r->avoid, pool)) w = (bk_worker *)r->avoid;
    return w;
}

void rp_charge(prefix_index *x, const prefix_chain *chain, bk_worker *w, bk_charge *c) {
    uint32_t cached = 0, pool = 0, total = chain ? chain->total : 0;
    if (x && chain && chain->n) {
        pidx_match(x, chain, &w->uid, 1, &cached, &pool);
        pidx_note(x, chain, w->uid);
    }
    c->bytes = (uint32_t)(rp_uncached(total, cached, pool) + 0.5);
    c->on = true;
    c->ahead = w->backlog_bytes;
    c->sent_ns = sol_now_ns();
    w->backlog_bytes += c->bytes;
}

void rp_first_token(bk_worker *w, bk_charge *c, uint64_t now_ns) {
    if (c->on && w && now_ns >= c->sent_ns + RP_RATE_MIN_NS &&
        c->bytes + c->ahead >= RP_RATE_MIN_BYTES) {
        double sample = (double)(c->bytes + c->ahead) / ((double)(now_ns - c->sent_ns) * 1e-9);
        w->prefill_bps = w->prefill_bps > 0
                             ? (1 - RP_RATE_WEIGHT) * w->prefill_bps + RP_RATE_WEIGHT * sample
                             : sample;
    }
    rp_release(w, c);
}

void rp_release(bk_worker *w, bk_charge *c) {
    if (!c->on || !w) return;
    w->backlog_bytes -= c->bytes <= w->backlog_bytes ? c->bytes : w->backlog_bytes;
    c->on = false;
}
