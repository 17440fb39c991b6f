/* slo_admit: admission by latency targets (slo_admit.h). */
#include "slo_admit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "route_policy.h"

/* The mean measured prefill rate of the scope's workers (0: none measured). */
static double mean_rate(const worker_table *t, wt_scope scope) {
    double sum = 0;
    int n = 0;
    for (size_t i = 0; i < t->n; i++)
        if (wt_in_scope(t->w[i], scope) && t->w[i]->prefill_bps > 0)
            sum += t->w[i]->prefill_bps, n++;
    return n ? sum / n : 0;
}

/* w's predicted seconds to the first token of c, and (*floor) with nothing queued ahead; 0 both
 * without a rate (fallback: the scope's mean, for a worker not measured yet). */
static double predict(const bk_worker *w, prefix_index *x, const prefix_chain *c, double fallback,
                      double *floor) {
    double rate = w->prefill_bps > 0 ? w->prefill_bps : fallback;
    *floor = 0;
    if (rate <= 0) return 0;
    uint32_t cached = 0, pool = 0, total = c ? c->total : 0;
    if (x && c && c->n) pidx_match(x, c, &w->uid, 1, &cached, &pool);
    *floor = rp_uncached(total, cached, pool) / rate;
    return *floor + (double)w->backlog_bytes / rate;
}

typedef struct best {
    double pred_s, floor_s; /* the least over workers (INFINITY: none) */
    bool any_room, tpot_met, rate_known;
} best;

/* Walks the scope's workers; returns true when one takes the request within every target now. */
static bool scan(worker_table *t, wt_scope scope, prefix_index *x, const prefix_chain *c,
                 const sol_slo *slo, best *b) {
    double ttft = slo->ms[SOL_SLO_TTFT] / 1e3 * SLO_TTFT_SAFETY, tpot = slo->ms[SOL_SLO_TPOT] / 1e3;
    double fallback = mean_rate(t, scope);
    *b = (best){INFINITY, INFINITY, false, false, fallback > 0};
    for (size_t i = 0; i < t->n; i++) {
        bk_worker *w = t->w[i];
        if (w->draining || w->unhealthy || !wt_in_scope(w, scope)) continue;
        bool room = wt_can_take(w, scope), tpot_ok = !tpot || wt_tpot(w) <= tpot;
        b->tpot_met |= room && tpot_ok;
        b->any_room |= room;
        double floor, pred = predict(w, x, c, fallback, &floor);
        if (floor < b->floor_s) b->floor_s = floor;
        if (!room || !tpot_ok) continue;
        if (pred < b->pred_s) b->pred_s = pred;
        if (!ttft || pred <= ttft) return true;
    }
    return false;
}

double slo_worker_ttft(worker_table *t, wt_scope scope, const bk_worker *w, prefix_index *x,
                       const prefix_chain *c) {
    double floor;
    return predict(w, x, c, w->prefill_bps > 0 ? 0 : mean_rate(t, scope), &floor);
}

static void refuse(slo_decision *d, slo_verdict v, const char *code, double retry_s) {
    d->verdict = v;
    d->code = code;
    d->retry_after_s = v == SLO_NOT_NOW ? (int)fmax(1, ceil(retry_s)) : 0;
}

void slo_admit(worker_table *t, wt_scope scope, prefix_index *x, const prefix_chain *c,
               const sol_slo *slo, double slot_wait_s, slo_decision *d) {
    *d = (slo_decision){.verdict = SLO_ADMIT};
    int ttft_ms = slo->ms[SOL_SLO_TTFT], tpot_ms = slo->ms[SOL_SLO_TPOT];
    if (!ttft_ms && !tpot_ms) return;
    best b;
    bool ok = scan(t, scope, x, c, slo, &b);
    if (b.pred_s < INFINITY) d->predicted_s = b.pred_s;
    if (ok) return;
    double ttft = ttft_ms / 1e3 * SLO_TTFT_SAFETY;
    if (ttft_ms && b.rate_known && b.floor_s > ttft) {
        snprintf(d->why, sizeof d->why,
                 "no worker of pool '%s' can return this prompt's first token within %d ms "
                 "(X-Sol-TTFT-Ms): prefilling it alone takes about %.0f ms at the measured rate",
                 scope.pool, ttft_ms, b.floor_s * 1e3);
        refuse(d, SLO_NEVER, "slo_unattainable", 0);
        return;
    }
    if (tpot_ms && b.any_room && !b.tpot_met) {
        snprintf(d->why, sizeof d->why,
                 "every worker of pool '%s' streams slower than %d ms per token now "
                 "(X-Sol-TPOT-Ms); retry later",
                 scope.pool, tpot_ms);
        refuse(d, SLO_NOT_NOW, "slo_not_met_now", 1);
        return;
    }
    if (b.any_room) { /* a worker has room and streams fast enough, but its work ahead is long */
        snprintf(d->why, sizeof d->why,
                 "no worker of pool '%s' can return the first token within %d ms now "
                 "(X-Sol-TTFT-Ms): the soonest is predicted at %.0f ms; retry later",
                 scope.pool, ttft_ms, b.pred_s * 1e3);
        refuse(d, SLO_NOT_NOW, "slo_not_met_now", b.pred_s - ttft);
        return;
    }
    /* every worker is full: a slot must free first */
    double wait = slot_wait_s;
    double pred = wait + (b.floor_s < INFINITY ? b.floor_s : 0);
    if (!ttft_ms || !wait || pred <= ttft) return; /* queued; its deadline ends it if need be */
    d->predicted_s = pred;
    snprintf(d->why, sizeof d->why,
             "every worker of pool '%s' is full and the first token could not come within %d ms "
             "(X-Sol-TTFT-Ms): a slot is predicted to free in %.0f ms; retry later",
             scope.pool, ttft_ms, wait * 1e3);
    refuse(d, SLO_NOT_NOW, "slo_not_met_now", pred - ttft);
}
