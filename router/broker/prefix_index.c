/* prefix_index: prefix-chain links to the workers that hold them (prefix_index.h). An open
 * addressing table (linear probing, backward-shift deletion) over a fixed pool of links kept in
 * least-recently-used order; the least recently used link goes when the pool is full. */
#include "prefix_index.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX

typedef struct holder {
    uint32_t uid;
    bool tier2;    /* only in its second tier */
    bool reported; /* by its KV events (else a send-time note: a guess) */
} holder;

typedef struct link {
    uint64_t hash;
    holder h[PIDX_WAYS]; /* oldest first */
    uint32_t n_uid;
    uint32_t prev, next; /* LRU list: head most recent */
} link;

struct prefix_index {
    link *links;
    uint32_t *slots; /* link index + 1, 0 = empty */
    size_t mask, max, used;
    uint32_t head, tail;
};

prefix_index *pidx_new(size_t max_links) {
    if (max_links < 1 || max_links > (size_t)UINT32_MAX / 4) return NULL;
    prefix_index *x = calloc(1, sizeof *x);
    size_t cap = 2;
    while (cap < 2 * max_links)
        cap <<= 1;
    if (x) {
        x->links = calloc(max_links, sizeof *x->links);
        x->slots = calloc(cap, sizeof *x->slots);
    }
    if (!x || !x->links || !x->slots) {
        pidx_free(x);
        return NULL;
    }
    x->mask = cap - 1, x->max = max_links, x->head = x->tail = NONE;
    return x;
}

void pidx_free(prefix_index *x) {
    if (!x) return;
    free(x->links);
    free(x->slots);
    free(x);
}

size_t pidx_size(const prefix_index *x) {
    return x->used;
}

static size_t slot_of(const prefix_index *x, uint64_t hash) {
    size_t i = (size_t)hash & x->mask;
    while (x->slots[i] && x->links[x->slots[i] - 1].hash != hash)
        i = (i + 1) & x->mask;
    return i;
}

static void lru_unlink(prefix_index *x, uint32_t e) {
    link *l = &x->links[e];
    if (l->prev != NONE)
        x->links[l->prev].next = l->next;
    else
        x->head = l->next;
    if (l->next != NONE)
        x->links[l->next].prev = l->prev;
    else
        x->tail = l->prev;
}

static void lru_front(prefix_index *x, uint32_t e) {
    link *l = &x->links[e];
    l->prev = NONE, l->next = x->head;
    if (x->head != NONE) x->links[x->head].prev = e;
    x->head = e;
    if (x->tail == NONE) x->tail = e;
}

static void touch(prefix_index *x, uint32_t e) {
    if (x->head == e) return;
    lru_unlink(x, e);
    lru_front(x, e);
}

/* Removes the link in slot i, shifting later links of its probe run back over the hole. */
static void drop_slot(prefix_index *x, size_t i) {
    for (size_t j = i;;) {
        j = (j + 1) & x->mask;
        if (!x->slots[j]) break;
        size_t k = (size_t)x->links[x->slots[j] - 1].hash & x->mask; /* its home slot */
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) x->slots[i] = x->slots[j], i = j;
    }
    x->slots[i] = 0;
}

/* The link for hash, made (the least recently used one recycled when the pool is full). */
static uint32_t get_or_add(prefix_index *x, uint64_t hash) {
    size_t i = slot_of(x, hash);
    if (x->slots[i]) return x->slots[i] - 1;
    uint32_t e;
    if (x->used < x->max) {
        e = (uint32_t)x->used++;
    } else {
        e = x->tail;
        lru_unlink(x, e);
        drop_slot(x, slot_of(x, x->links[e].hash));
        i = slot_of(x, hash); /* the shift may have moved the run */
    }
    x->links[e] = (link){.hash = hash};
    x->slots[i] = e + 1;
    lru_front(x, e);
    return e;
}

/* What the worker's own events said of it (a note alone: nothing). */
static pidx_state state_of(const holder *h) {
    return !h->reported ? PIDX_NONE : h->tier2 ? PIDX_TIER2 : PIDX_POOL;
}

/* Returns the holder's state before. A note (reported false) leaves a reported holder as it is. */
static pidx_state add_holder(link *l, uint32_t uid, bool tier2, bool reported) {
    for (uint32_t k = 0; k < l->n_uid; k++)
        if (l->h[k].uid == uid) {
            pidx_state was = state_of(&l->h[k]);
            if (reported) l->h[k].tier2 = tier2, l->h[k].reported = true;
            return was;
        }
    if (l->n_uid == PIDX_WAYS) {
        memmove(l->h, l->h + 1, sizeof l->h[0] * (PIDX_WAYS - 1));
        l->n_uid--;
    }
    l->h[l->n_uid++] = (holder){uid, tier2, reported};
    return PIDX_NONE;
}

void pidx_note(prefix_index *x, const prefix_chain *c, uint32_t uid) {
    /* deepest first, so a chain's shallower links end more recent than its deeper ones: the pool
     * recycles a conversation's tail before the system prompt every conversation shares, and a
     * link never outlives the links before it (a worker's cache, evicting by LRU, keeps a prefix
     * whole too) */
    for (size_t i = c->n; i-- > 0;) {
        uint32_t e = get_or_add(x, c->hash[i]);
        add_holder(&x->links[e], uid, false, false); /* it computes what it lacks into its pool */
        touch(x, e);
    }
}

void pidx_match(prefix_index *x, const prefix_chain *c, const uint32_t *uids, size_t n,
                uint32_t *bytes, uint32_t *pool) {
    memset(bytes, 0, sizeof *bytes * n);
    if (pool) memset(pool, 0, sizeof *pool * n);
    size_t left = pool ? 2 * n : n; /* answers still to find */
    /* deepest first: a worker's first hit is its longest cached prefix, its first hit in the pool
     * the longest part it need not copy back */
    for (size_t i = c->n; i-- > 0 && left;) {
        size_t s = slot_of(x, c->hash[i]);
        if (!x->slots[s]) continue;
        uint32_t e = x->slots[s] - 1;
        touch(x, e);
        const link *l = &x->links[e];
        uint32_t at = c->bytes[i] ? c->bytes[i] : 1;
        for (uint32_t k = 0; k < l->n_uid; k++)
            for (size_t w = 0; w < n; w++) {
                if (uids[w] != l->h[k].uid) continue;
                if (!bytes[w]) bytes[w] = at, left--;
                if (pool && !l->h[k].tier2 && !pool[w]) pool[w] = at, left--;
            }
    }
}

pidx_state pidx_hold(prefix_index *x, uint64_t hash, uint32_t uid, bool tier2) {
    uint32_t e = get_or_add(x, hash);
    touch(x, e);
    return add_holder(&x->links[e], uid, tier2, true);
}

static pidx_state remove_holder(link *l, uint32_t uid) {
    for (uint32_t k = 0; k < l->n_uid; k++)
        if (l->h[k].uid == uid) {
            pidx_state was = state_of(&l->h[k]);
            memmove(l->h + k, l->h + k + 1, sizeof l->h[0] * (l->n_uid - k - 1));
            l->n_uid--;
            return was;
        }
    return PIDX_NONE;
}

pidx_state pidx_drop(prefix_index *x, uint64_t hash, uint32_t uid) {
    size_t s = slot_of(x, hash);
    return x->slots[s] ? remove_holder(&x->links[x->slots[s] - 1], uid) : PIDX_NONE;
}

void pidx_drop_uid(prefix_index *x, uint32_t uid) {
    for (size_t e = 0; e < x->used; e++)
        remove_holder(&x->links[e], uid);
}
