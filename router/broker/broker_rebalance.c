/* broker_rebalance: live rebalancing (broker_internal.h, bw_rebalance). Once per tick, each
 * worker that is behind - its streams get a token less often than the tightest X-Sol-TPOT-Ms among
 * them - or, with router.workers.rebalance_hot_ratio, far hotter than the least loaded peer of its
 * scope, hands one streaming request to a worker with room that does better; the request resumes
 * there token-exactly (the failover path: what was streamed goes as resume_tokens, with the
 * sampler's seed and the grammar). At most one move per worker per two heartbeats - its figures
 * come with heartbeats, and a move must show in them before the next - and a moved request stays
 * put for RB_SETTLE_MS, so nothing moves back and forth. */
#include <stdio.h>
#include <string.h>

#include "broker_internal.h"

/* One table: a worker is behind when its time per token exceeds a target by this factor (its
 * figure is a heartbeat's average); a moved request stays RB_SETTLE_MS before it may move again. */
#define RB_TPOT_MARGIN 1.2
enum { RB_SETTLE_MS = 3000 };

static bool movable(const bk_req *r, const bk_worker *w, uint64_t now_ms) {
    return r && r->worker == w && (r->n_toks || r->text.len) &&
           (!r->moved_ms || now_ms > r->moved_ms + RB_SETTLE_MS);
}

/* The streaming request on w with the tightest TPOT target it misses (NULL: none). */
static bk_req *behind_on(broker *b, const bk_worker *w, uint64_t now_ms) {
    double per_tok = wt_tpot(w);
    bk_req *pick = NULL;
    for (size_t i = 0; per_tok > 0 && i < b->inf.cap; i++) {
        bk_req *r = b->inf.slots[i];
        int t = r ? r->slo.ms[SOL_SLO_TPOT] : 0;
        if (!t || !movable(r, w, now_ms) || per_tok * 1e3 <= t * RB_TPOT_MARGIN) continue;
        if (!pick || t < pick->slo.ms[SOL_SLO_TPOT]) pick = r;
    }
    return pick;
}

/* The most recent streaming request on w (the least streamed: the cheapest to re-prefill). */
static bk_req *newest_on(broker *b, const bk_worker *w, uint64_t now_ms) {
    bk_req *pick = NULL;
    for (size_t i = 0; i < b->inf.cap; i++) {
        bk_req *r = b->inf.slots[i];
        if (movable(r, w, now_ms) && (!pick || r->n_toks < pick->n_toks)) pick = r;
    }
    return pick;
}

/* A worker of r's scope, other than w, with room, that serves r better: for a TPOT move one
 * whose streams get tokens within the target (or not measured yet), for a load move one holding
 * fewer requests than w would after the move; the least loaded such. */
static bk_worker *better_than(broker *b, const bk_worker *w, const bk_req *r, bool for_tpot) {
    wt_scope s = bw_scope(b, r->pool, r->model);
    bk_worker *best = NULL;
    for (size_t i = 0; i < b->wt.n; i++) {
        bk_worker *o = b->wt.w[i];
        if (o == w || !wt_can_take(o, s)) continue;
        if (for_tpot && wt_tpot(o) * 1e3 > r->slo.ms[SOL_SLO_TPOT]) continue;
        if (!for_tpot && o->inflight + 1 >= w->inflight) continue;
        if (!best || wt_load(o) < wt_load(best)) best = o;
    }
    return best;
}

/* The least requests a peer of w's pool holds (w's own when it has none). */
static uint32_t least_peer(const broker *b, const bk_worker *w) {
    uint32_t least = w->inflight;
    for (size_t i = 0; i < b->wt.n; i++) {
        const bk_worker *o = b->wt.w[i];
        if (o != w && !o->draining && !o->unhealthy && !strcmp(o->pool, w->pool) &&
            o->inflight < least)
            least = o->inflight;
    }
    return least;
}

static void rebalance_worker(broker *b, bk_worker *w, uint64_t now_ms) {
    char why[480];
    bk_req *r = b->tpot_streams ? behind_on(b, w, now_ms) : NULL;
    bool for_tpot = r != NULL;
    double ratio = b->cfg.rebalance_hot_ratio;
    if (!r && ratio > 0 && w->inflight > ratio * (least_peer(b, w) + 1))
        r = newest_on(b, w, now_ms);
    bk_worker *to = r ? better_than(b, w, r, for_tpot) : NULL;
    if (!to) return;
    if (for_tpot)
        snprintf(why, sizeof why,
                 "rebalanced: worker %.128s gives a token every %.0f ms, its X-Sol-TPOT-Ms is %d; "
                 "to %.128s",
                 w->id, wt_tpot(w) * 1e3, r->slo.ms[SOL_SLO_TPOT], to->id);
    else
        snprintf(why, sizeof why, "rebalanced: worker %.128s holds %u requests, %.128s %u", w->id,
                 w->inflight, to->id, to->inflight);
    w->last_rebalance_ms = now_ms;
    r->moved_ms = now_ms;
    int pool = r->pool;
    bw_move(b, r, why);
    bw_pump(b, pool);
}

void bw_rebalance(broker *b, uint64_t now_ms) {
    if (!b->tpot_streams && b->cfg.rebalance_hot_ratio <= 0) return;
    uint64_t gap = 2 * (uint64_t)b->cfg.heartbeat_ms;
    for (size_t i = 0; i < b->wt.n; i++) {
        bk_worker *w = b->wt.w[i];
        if (w->draining || w->unhealthy || !w->inflight || now_ms < w->last_rebalance_ms + gap)
            continue;
        rebalance_worker(b, w, now_ms);
    }
}
