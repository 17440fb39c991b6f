/* worker_table: dispatch policy over the registered workers.
 *
 * Why rendezvous hashing for affinity: every (prefix, worker) pair gets a pseudo-random score and
 * the highest score wins, so a worker joining or leaving moves only the prefixes it wins or held
 * (the consistent-hashing property) without maintaining a ring. Why a bound relative to the least
 * loaded worker: pure affinity sends every request sharing a system prompt to one worker, and a
 * cap at (1 + epsilon) times the average (Mirrokni et al., "Consistent Hashing with Bounded Loads")
 * still lets hashing starve a worker (three at 1.25x leave the fourth at 0.25x). Keeping the
 * affinity worker only while it stays within epsilon x its fair share (at least one request) of
 * the least loaded worker keeps the spread max - min within that slack at every moment, so a burst
 * of distinct prompts ends up within +-epsilon of even, while a lightly loaded pool (slack 1)
 * still keeps a repeated prefix on its warm worker. */
#include "worker_table.h"

#include <stdlib.h>
#include <string.h>

#include "hash.h"

void wt_init(worker_table *t) {
    memset(t, 0, sizeof *t);
}

void wt_free(worker_table *t) {
    for (size_t i = 0; i < t->n; i++)
        free(t->w[i]);
    free(t->w);
    memset(t, 0, sizeof *t);
}

bk_worker *wt_add(worker_table *t, const bk_worker *tmpl) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 8;
        bk_worker **w = realloc(t->w, cap * sizeof *w);
        if (!w) return NULL;
        t->w = w;
        t->cap = cap;
    }
    bk_worker *w = malloc(sizeof *w);
    if (!w) return NULL;
    *w = *tmpl;
    t->w[t->n++] = w;
    return w;
}

void wt_remove(worker_table *t, bk_worker *w) {
    for (size_t i = 0; i < t->n; i++) {
        if (t->w[i] != w) continue;
        memmove(&t->w[i], &t->w[i + 1], (t->n - i - 1) * sizeof *t->w);
        t->n--;
        free(w);
        return;
    }
}

bk_worker *wt_find_ident(const worker_table *t, const zmq_util_identity *id) {
    for (size_t i = 0; i < t->n; i++)
        if (t->w[i]->ident.len == id->len && !memcmp(t->w[i]->ident.bytes, id->bytes, id->len))
            return t->w[i];
    return NULL;
}

bk_worker *wt_find_id(const worker_table *t, const char *id) {
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->w[i]->id, id)) return t->w[i];
    return NULL;
}

bool wt_in_scope(const bk_worker *w, wt_scope s) {
    return !strcmp(w->pool, s.pool) && (!s.model || !*s.model || !strcmp(w->model, s.model));
}

size_t wt_live_in_pool(const worker_table *t, wt_scope s) {
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        n += !t->w[i]->draining && !t->w[i]->unhealthy && wt_in_scope(t->w[i], s);
    return n;
}

double wt_tpot(const bk_worker *w) {
    return w->tokens_per_s > 0 && w->hb_running > 0 ? w->hb_running / w->tokens_per_s : 0;
}

double wt_load(const bk_worker *w) {
    uint32_t reported = w->hb_running + w->hb_waiting;
    reported = reported > w->finished_since_hb ? reported - w->finished_since_hb : 0;
    uint32_t busy = w->inflight > reported ? w->inflight : reported;
    return (double)busy / (double)(w->capacity ? w->capacity : 1);
}

uint64_t wt_prefix_hash(const char *s, size_t len, size_t max_chars) {
    if (!max_chars || !s) return 0;
    size_t i = 0, chars = 0;
    while (i < len && chars < max_chars) {
        i++; /* count a character at each non-continuation byte */
        while (i < len && ((unsigned char)s[i] & 0xC0) == 0x80)
            i++;
        chars++;
    }
    return sol_fmix64(sol_fnv64(SOL_FNV64_INIT, s, i));
}

static bool eligible(const bk_worker *w, wt_scope s) {
    return !w->draining && !w->unhealthy && w->inflight < w->capacity && wt_in_scope(w, s);
}

bool wt_can_take(const bk_worker *w, wt_scope s) {
    return eligible(w, s);
}

static bk_worker *least_loaded(worker_table *t, wt_scope pool, const bk_worker *avoid) {
    bk_worker *best = NULL;
    double best_load = 0;
    size_t start = t->n ? (size_t)(t->rr++ % t->n) : 0;
    for (size_t k = 0; k < t->n; k++) {
        bk_worker *w = t->w[(start + k) % t->n];
        if (!eligible(w, pool) || w == avoid) continue;
        double l = wt_load(w);
        if (!best || l < best_load) {
            best = w;
            best_load = l;
        }
    }
    return best;
}

/* Affinity candidate by rendezvous hashing; also the pool's total load and capacity and the least
 * normalised load among eligible workers, which the bound needs. */
typedef struct pool_view {
    double busy, cap, min_load;
    bool any;
} pool_view;

static bk_worker *affinity_worker(const worker_table *t, wt_scope pool, uint64_t h,
                                  const bk_worker *avoid, pool_view *v) {
    bk_worker *best = NULL;
    uint64_t best_score = 0;
    memset(v, 0, sizeof *v);
    for (size_t i = 0; i < t->n; i++) {
        bk_worker *w = t->w[i];
        if (w->draining || w->unhealthy || !wt_in_scope(w, pool)) continue;
        double l = wt_load(w);
        v->busy += l * w->capacity;
        v->cap += w->capacity;
        if (!eligible(w, pool) || w == avoid) continue;
        if (!v->any || l < v->min_load) v->min_load = l;
        v->any = true;
        uint64_t score = sol_fmix64(sol_fnv64(h, w->id, strlen(w->id)));
        if (!best || score > best_score) {
            best = w;
            best_score = score;
        }
    }
    return best;
}

bool wt_affinity_keeps(const bk_worker *a, double pool_busy, double pool_cap, double min_load) {
    if (!a->capacity || pool_cap <= 0) return false;
    double share = (pool_busy + 1) * a->capacity / pool_cap; /* a's fair part, this one included */
    double slack = WT_AFFINITY_EPSILON * share;
    if (slack < 1) slack = 1;
    /* in requests of a's capacity: a after taking it vs the least loaded worker now */
    return wt_load(a) * a->capacity + 1 <= min_load * a->capacity + slack + 1e-9;
}

bk_worker *wt_pick(worker_table *t, wt_scope pool, uint64_t prefix_hash, bool use_affinity,
                   const bk_worker *avoid) {
    if (use_affinity) {
        pool_view v;
        bk_worker *a = affinity_worker(t, pool, prefix_hash, avoid, &v);
        if (a && wt_affinity_keeps(a, v.busy, v.cap, v.min_load)) return a;
    }
    bk_worker *w = least_loaded(t, pool, avoid);
    if (!w && avoid && eligible(avoid, pool)) w = (bk_worker *)avoid;
    return w;
}
