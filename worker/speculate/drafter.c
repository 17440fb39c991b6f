/* drafter: dispatch to the drafter kinds, and n-gram prompt lookup (it is a few lines). */
#include "drafter.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "drafter_internal.h"
#include "spec.h"

int drafter_propose(drafter *d, drafter_req *reqs, int n, sol_err *err) {
    for (int i = 0; i < n; i++) {
        reqs[i].n_draft = 0;
        if (reqs[i].k < 1 || reqs[i].k > SPEC_MAX_K || reqs[i].n_history < 1)
            return sol_err_set(err, -EINVAL,
                               "drafter: request %d wants k=%d (1..%d) with %d history tokens (>0)",
                               i, reqs[i].k, SPEC_MAX_K, (int)reqs[i].n_history);
    }
    return d->ops->propose(d, reqs, n, err);
}

void drafter_release(drafter *d, int32_t slot) {
    if (d->ops->release) d->ops->release(d, slot);
}

int drafter_one_hot(const drafter *d) {
    return d->ops->one_hot;
}

const char *drafter_name(const drafter *d) {
    return d->ops->name;
}

void drafter_free(drafter *d) {
    if (d) d->ops->free(d);
}

typedef struct {
    drafter base;
    int n_min, n_max;
} ngram;

/* The latest start s < n_history - n where history[s, s+n) equals the last n tokens, or -1. */
static int32_t ngram_match(const int32_t *h, int32_t len, int n) {
    const int32_t *tail = h + len - n;
    for (int32_t s = len - n - 1; s >= 0; s--)
        if (h[s] == tail[0] && memcmp(h + s, tail, sizeof(int32_t) * (size_t)n) == 0) return s;
    return -1;
}

static int ngram_propose(drafter *d, drafter_req *reqs, int n, sol_err *err) {
    (void)err;
    const ngram *g = (const ngram *)d;
    for (int i = 0; i < n; i++) {
        drafter_req *r = &reqs[i];
        for (int len = g->n_max; len >= g->n_min; len--) {
            if (len >= r->n_history) continue;
            int32_t s = ngram_match(r->history, r->n_history, len);
            if (s < 0) continue;
            int32_t from = s + len, avail = r->n_history - from;
            int take = avail < r->k ? (int)avail : r->k;
            memcpy(r->tokens, r->history + from, sizeof(int32_t) * (size_t)take);
            r->n_draft = take;
            break;
        }
    }
    return 0;
}

static void ngram_free(drafter *d) {
    free(d);
}

static const drafter_ops k_ngram_ops = {"ngram", 1, ngram_propose, NULL, ngram_free};

drafter *drafter_ngram_new(int n_min, int n_max, sol_err *err) {
    if (n_min < 1 || n_max < n_min)
        return sol_err_set(err, -EINVAL, "ngram drafter: need 1 <= n_min (%d) <= n_max (%d)", n_min,
                           n_max),
               NULL;
    ngram *g = calloc(1, sizeof *g);
    if (!g) return sol_err_set(err, -ENOMEM, "out of memory"), NULL;
    g->base.ops = &k_ngram_ops;
    g->n_min = n_min;
    g->n_max = n_max;
    return &g->base;
}
