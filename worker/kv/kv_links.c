/* kv_links: the prompt-chain links the KV cache holds (kv_links.h). Pairs (link, block) live in a
 * fixed array, chained per block (the block table maps a block hash to its first pair) and kept
 * in a FIFO by age; two more tables count each link's held pairs and those of them in the pool, so
 * a link mapped to two blocks (two tokenizations of one text) is reported removed only when neither
 * is held, and in the second tier only when neither is in the pool. */
#include "kv_links.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "block_hash.h"
#include "idx_list.h"

typedef struct pair {
    uint64_t link, block;
    int32_t next;  /* next pair of the same block, -1 at the end */
    kv_place held; /* KV_GONE: not held */
} pair;

struct kv_links {
    pair *p;
    int32_t cap, n;
    int32_t *free_ids;
    int32_t n_free;
    idx_list age;         /* the pairs in use, oldest first */
    block_table by_block; /* block hash -> its first pair */
    block_table count;    /* link -> pairs of it held (> 0) */
    block_table pool;     /* link -> pairs of it held in the pool (> 0) */
    kv_link_event *ev;    /* ring of KV_LINK_EVENTS_MAX */
    size_t ev_head, n_ev;
    bool lost;
};

kv_links *kv_links_new(int32_t max_pairs, sol_err *err) {
    if (max_pairs < 1 || max_pairs > KV_LINKS_MAX) {
        sol_err_set(err, -EINVAL, "kv_links: expected 1..%d pairs, got %d", KV_LINKS_MAX,
                    max_pairs);
        return NULL;
    }
    kv_links *x = calloc(1, sizeof *x);
    if (x) {
        x->p = calloc((size_t)max_pairs, sizeof *x->p);
        x->free_ids = malloc(sizeof *x->free_ids * (size_t)max_pairs);
        x->ev = malloc(sizeof *x->ev * KV_LINK_EVENTS_MAX);
    }
    if (!x || !x->p || !x->free_ids || !x->ev || block_table_init(&x->by_block, max_pairs) ||
        block_table_init(&x->count, max_pairs) || block_table_init(&x->pool, max_pairs) ||
        idx_list_init(&x->age, max_pairs)) {
        kv_links_free(x);
        sol_err_set(err, -ENOMEM, "kv_links: out of memory for %d pairs", max_pairs);
        return NULL;
    }
    x->cap = max_pairs;
    for (int32_t i = 0; i < max_pairs; i++)
        x->free_ids[i] = max_pairs - 1 - i;
    x->n_free = max_pairs;
    return x;
}

void kv_links_free(kv_links *x) {
    if (!x) return;
    free(x->p);
    free(x->free_ids);
    free(x->ev);
    block_table_destroy(&x->by_block);
    block_table_destroy(&x->count);
    block_table_destroy(&x->pool);
    idx_list_destroy(&x->age);
    free(x);
}

static void emit(kv_links *x, uint64_t link, kv_place where) {
    if (x->n_ev == KV_LINK_EVENTS_MAX) {
        x->lost = true;
        return;
    }
    x->ev[(x->ev_head + x->n_ev++) % KV_LINK_EVENTS_MAX] = (kv_link_event){link, where};
}

/* Adds delta to a table's count for key (the table has no update: remove and insert; a count
 * that reaches 0 leaves). */
static void add_count(block_table *t, uint64_t key, int32_t delta) {
    int32_t v = block_table_find(t, key);
    v = (v < 0 ? 0 : v) + delta;
    block_table_remove(t, key);
    if (v > 0) block_table_insert(t, key, v);
}

static kv_place link_place(const kv_links *x, uint64_t link) {
    if (block_table_find(&x->count, link) < 0) return KV_GONE;
    return block_table_find(&x->pool, link) > 0 ? KV_IN_POOL : KV_IN_TIER2;
}

/* Pair p's block is now `where`; the link's event when its own place changes. */
static void set_pair(kv_links *x, pair *p, kv_place where) {
    if (p->held == where) return;
    kv_place before = link_place(x, p->link);
    add_count(&x->count, p->link, (where != KV_GONE) - (p->held != KV_GONE));
    add_count(&x->pool, p->link, (where == KV_IN_POOL) - (p->held == KV_IN_POOL));
    p->held = where;
    kv_place after = link_place(x, p->link);
    if (after != before) emit(x, p->link, after);
}

static void release(kv_links *x, int32_t i) {
    set_pair(x, &x->p[i], KV_GONE);
    idx_list_unlink(&x->age, i);
    x->free_ids[x->n_free++] = i;
    x->n--;
}

/* Removes pair i (the oldest) from its block's chain, then releases it. */
static void drop_pair(kv_links *x, int32_t i) {
    uint64_t b = x->p[i].block;
    int32_t head = block_table_find(&x->by_block, b);
    if (head == i) {
        block_table_remove(&x->by_block, b);
        if (x->p[i].next >= 0) block_table_insert(&x->by_block, b, x->p[i].next);
    } else {
        int32_t k = head;
        while (k >= 0 && x->p[k].next != i)
            k = x->p[k].next;
        if (k >= 0) x->p[k].next = x->p[i].next;
    }
    release(x, i);
}

void kv_links_add(kv_links *x, uint64_t link, uint64_t block, bool held_now) {
    int32_t head = block_table_find(&x->by_block, block);
    for (int32_t k = head; k >= 0; k = x->p[k].next)
        if (x->p[k].link == link) { /* known: younger now */
            idx_list_unlink(&x->age, k);
            idx_list_push_tail(&x->age, k);
            if (held_now) set_pair(x, &x->p[k], KV_IN_POOL);
            return;
        }
    if (x->n == x->cap) {
        drop_pair(x, x->age.head);
        head = block_table_find(&x->by_block, block); /* the dropped one may have been it */
    }
    int32_t i = x->free_ids[--x->n_free];
    x->n++;
    x->p[i] = (pair){.link = link, .block = block, .next = head};
    block_table_remove(&x->by_block, block);
    block_table_insert(&x->by_block, block, i);
    idx_list_push_tail(&x->age, i);
    if (held_now) set_pair(x, &x->p[i], KV_IN_POOL);
}

void kv_links_block(kv_links *x, uint64_t block, kv_place where) {
    int32_t k = block_table_find(&x->by_block, block);
    if (k < 0) return;
    if (where != KV_GONE) {
        for (; k >= 0; k = x->p[k].next)
            set_pair(x, &x->p[k], where);
        return;
    }
    /* dropped: its pairs go (a later request with the same text maps them again) */
    block_table_remove(&x->by_block, block);
    while (k >= 0) {
        int32_t next = x->p[k].next;
        release(x, k);
        k = next;
    }
}

size_t kv_links_drain(kv_links *x, kv_link_event *out, size_t cap, bool *lost) {
    size_t n = x->n_ev < cap ? x->n_ev : cap;
    for (size_t i = 0; i < n; i++)
        out[i] = x->ev[(x->ev_head + i) % KV_LINK_EVENTS_MAX];
    x->ev_head = (x->ev_head + n) % KV_LINK_EVENTS_MAX;
    x->n_ev -= n;
    *lost = x->lost;
    x->lost = false;
    return n;
}

size_t kv_links_held(const kv_links *x, kv_link_event *out, size_t cap) {
    size_t n = 0;
    for (uint32_t i = 0; i <= x->count.mask && n < cap; i++)
        if (x->count.keys[i])
            out[n++] = (kv_link_event){x->count.keys[i], link_place(x, x->count.keys[i])};
    return n;
}

size_t kv_links_pairs(const kv_links *x) {
    return (size_t)x->n;
}

size_t kv_links_n_held(const kv_links *x) {
    return (size_t)x->count.count;
}
