/* kv_report: KV events per heartbeat (kv_report.h). */
#include "kv_report.h"

#include <stdlib.h>

typedef struct ordered_event {
    uint64_t link;
    uint32_t at; /* its place in the round: the last one per link wins */
    bool stored;
} ordered_event;

struct kv_report {
    kv_link_event *ev; /* KV_LINK_EVENTS_MAX */
    ordered_event *ord;
    uint64_t *stored, *removed, *held; /* held: KV_LINKS_MAX */
    size_t n_stored, n_removed, n_held;
    bool held_taken; /* this round's snapshot is in held */
};

kv_report *kv_report_new(void) {
    kv_report *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->ev = malloc(sizeof *k->ev * KV_LINK_EVENTS_MAX);
    k->ord = malloc(sizeof *k->ord * KV_LINK_EVENTS_MAX);
    k->stored = malloc(sizeof *k->stored * KV_LINK_EVENTS_MAX);
    k->removed = malloc(sizeof *k->removed * KV_LINK_EVENTS_MAX);
    k->held = malloc(sizeof *k->held * KV_LINKS_MAX);
    if (!k->ev || !k->ord || !k->stored || !k->removed || !k->held) {
        kv_report_free(k);
        return NULL;
    }
    return k;
}

void kv_report_free(kv_report *k) {
    if (!k) return;
    free(k->ev);
    free(k->ord);
    free(k->stored);
    free(k->removed);
    free(k->held);
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
        k->ord[i] = (ordered_event){k->ev[i].link, (uint32_t)i, k->ev[i].stored};
    qsort(k->ord, n, sizeof *k->ord, by_link_then_order);
    k->n_stored = k->n_removed = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n && k->ord[i + 1].link == k->ord[i].link) continue; /* not its last */
        if (k->ord[i].stored)
            k->stored[k->n_stored++] = k->ord[i].link;
        else
            k->removed[k->n_removed++] = k->ord[i].link;
    }
    k->held_taken = false;
    return lost;
}

void kv_report_fill(kv_report *k, executor *x, bool snapshot, Sol__Heartbeat *hb) {
    hb->kv_snapshot = snapshot;
    if (!snapshot) {
        hb->kv_stored = k->stored;
        hb->n_kv_stored = k->n_stored;
        hb->kv_removed = k->removed;
        hb->n_kv_removed = k->n_removed;
        return;
    }
    if (!k->held_taken) {
        k->n_held = exec_kv_held(x, k->held, KV_LINKS_MAX);
        k->held_taken = true;
    }
    hb->kv_stored = k->held;
    hb->n_kv_stored = k->n_held;
    hb->kv_removed = NULL;
    hb->n_kv_removed = 0;
}
