/* kv_report: KV events per heartbeat (kv_report.h). */
#include "kv_report.h"

#include <stdlib.h>

typedef struct ordered_event {
    uint64_t link;
    uint32_t at; /* its place in the round: the last one per link wins */
    kv_place where;
} ordered_event;

/* One round's links by their last state: removed, in the pool, in the second tier (indexed by
 * kv_place, the one table the three heartbeat lists follow). */
enum { N_PLACES = 3 };

struct kv_report {
    kv_link_event *ev; /* KV_LINK_EVENTS_MAX */
    ordered_event *ord;
    uint64_t *list[N_PLACES]; /* this round's changes */
    size_t n[N_PLACES];
    kv_link_event *held_ev; /* the snapshot: KV_LINKS_MAX */
    uint64_t *held[N_PLACES];
    size_t n_held[N_PLACES];
    bool held_taken; /* this round's snapshot is in held */
};

kv_report *kv_report_new(void) {
    kv_report *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->ev = malloc(sizeof *k->ev * KV_LINK_EVENTS_MAX);
    k->ord = malloc(sizeof *k->ord * KV_LINK_EVENTS_MAX);
    k->held_ev = malloc(sizeof *k->held_ev * KV_LINKS_MAX);
    bool ok = k->ev && k->ord && k->held_ev;
    for (int p = 0; p < N_PLACES; p++) {
        k->list[p] = malloc(sizeof *k->list[p] * KV_LINK_EVENTS_MAX);
        k->held[p] = malloc(sizeof *k->held[p] * KV_LINKS_MAX);
        ok = ok && k->list[p] && k->held[p];
    }
    if (!ok) {
        kv_report_free(k);
        return NULL;
    }
    return k;
}

void kv_report_free(kv_report *k) {
    if (!k) return;
    free(k->ev);
    free(k->ord);
    free(k->held_ev);
    for (int p = 0; p < N_PLACES; p++) {
        free(k->list[p]);
        free(k->held[p]);
    }
    free(k);
}

static int by_link_then_order(const void *a, const void *b) {
    const ordered_event *x = a, *y = b;
    if (x->link != y->link) return x->link < y->link ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

bool kv_report_collect(kv_report *k, executor *x) {
    bool lost = false;
    size_t n = exec_kv_events(x, k->ev, KV_LINK_EVENTS_MAX, &lost);
    for (size_t i = 0; i < n; i++)
        k->ord[i] = (ordered_event){k->ev[i].link, (uint32_t)i, k->ev[i].where};
    qsort(k->ord, n, sizeof *k->ord, by_link_then_order);
    for (int p = 0; p < N_PLACES; p++)
        k->n[p] = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n && k->ord[i + 1].link == k->ord[i].link) continue; /* not its last */
        int p = k->ord[i].where;
        k->list[p][k->n[p]++] = k->ord[i].link;
    }
    k->held_taken = false;
    return lost;
}

static void set_lists(Sol__Heartbeat *hb, uint64_t *const *list, const size_t *n) {
    hb->kv_stored = list[KV_IN_POOL];
    hb->n_kv_stored = n[KV_IN_POOL];
    hb->kv_tier2 = list[KV_IN_TIER2];
    hb->n_kv_tier2 = n[KV_IN_TIER2];
    hb->kv_removed = list[KV_GONE];
    hb->n_kv_removed = n[KV_GONE];
}

void kv_report_fill(kv_report *k, executor *x, bool snapshot, Sol__Heartbeat *hb) {
    hb->kv_snapshot = snapshot;
    if (!snapshot) {
        set_lists(hb, k->list, k->n);
        return;
    }
    if (!k->held_taken) {
        size_t n = exec_kv_held(x, k->held_ev, KV_LINKS_MAX);
        for (int p = 0; p < N_PLACES; p++)
            k->n_held[p] = 0;
        for (size_t i = 0; i < n; i++) {
            int p = k->held_ev[i].where;
            k->held[p][k->n_held[p]++] = k->held_ev[i].link;
        }
        k->held_taken = true;
    }
    set_lists(hb, k->held, k->n_held);
}
