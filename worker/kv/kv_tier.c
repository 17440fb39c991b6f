/* kv_tier: the second KV tier's bookkeeping (kv_tier.h). Slots in an LRU list (idx_list.h, head =
 * least recently spilled), a block_table from hash to slot, a free stack; a slot awaiting a
 * restore is pinned: out of the list and the table, back on the free stack at kv_tier_done. */
#include "kv_tier.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "block_hash.h"
#include "idx_list.h"

typedef struct slot {
    uint64_t hash, parent; /* hash 0: not holding a block */
    bool pinned;
} slot;

struct kv_tier {
    int32_t n, bs;
    slot *s;
    int32_t *tok; /* n x bs */
    int32_t *free_ids;
    int32_t n_free;
    idx_list lru; /* the slots holding a block, least recently spilled first */
    int32_t used;
    block_table table;
    kv_tier_op *ops;
    int32_t n_ops, cap_ops;
    uint64_t spills, restores, drops;
};

kv_tier *kv_tier_new(int32_t slots, int32_t block_size, sol_err *err) {
    if (slots < 1 || block_size < 1 || (int64_t)slots * block_size > INT32_MAX) {
        sol_err_set(err, -EINVAL, "kv_tier: expected >= 1 slots of >= 1 tokens, got %d of %d",
                    slots, block_size);
        return NULL;
    }
    kv_tier *t = calloc(1, sizeof *t);
    if (t) {
        t->s = calloc((size_t)slots, sizeof *t->s);
        t->tok = malloc(sizeof *t->tok * (size_t)slots * (size_t)block_size);
        t->free_ids = malloc(sizeof *t->free_ids * (size_t)slots);
        t->cap_ops = 2 * slots; /* at most one spill and one restore per slot between two dones */
        t->ops = malloc(sizeof *t->ops * (size_t)t->cap_ops);
    }
    if (!t || !t->s || !t->tok || !t->free_ids || !t->ops || block_table_init(&t->table, slots) ||
        idx_list_init(&t->lru, slots)) {
        kv_tier_free(t);
        sol_err_set(err, -ENOMEM, "kv_tier: out of memory for %d slots", slots);
        return NULL;
    }
    t->n = slots;
    t->bs = block_size;
    for (int32_t i = 0; i < slots; i++)
        t->free_ids[i] = slots - 1 - i;
    t->n_free = slots;
    return t;
}

void kv_tier_free(kv_tier *t) {
    if (!t) return;
    free(t->s);
    free(t->tok);
    free(t->free_ids);
    free(t->ops);
    block_table_destroy(&t->table);
    idx_list_destroy(&t->lru);
    free(t);
}

/* Room for one more op (a step that evicts more blocks than there are slots queues one spill per
 * block: the slots are recycled within the step). 0, or -ENOMEM. */
static int room_for_op(kv_tier *t) {
    if (t->n_ops < t->cap_ops) return 0;
    kv_tier_op *p = realloc(t->ops, sizeof *p * (size_t)t->cap_ops * 2);
    if (!p) return -ENOMEM;
    t->ops = p;
    t->cap_ops *= 2;
    return 0;
}

int32_t kv_tier_spill(kv_tier *t, int32_t block, uint64_t hash, uint64_t parent,
                      const int32_t *tokens, uint64_t *dropped) {
    *dropped = 0;
    if (block_table_find(&t->table, hash) >= 0) return -1; /* an equal block is kept already */
    if (room_for_op(t)) return -1;
    int32_t i;
    if (t->n_free > 0) {
        i = t->free_ids[--t->n_free];
    } else if (t->lru.head >= 0) { /* the least recently spilled; pinned slots are not in it */
        i = t->lru.head;
        idx_list_unlink(&t->lru, i);
        block_table_remove(&t->table, t->s[i].hash);
        *dropped = t->s[i].hash;
        t->used--;
        t->drops++;
    } else {
        return -1;
    }
    t->s[i].hash = hash;
    t->s[i].parent = parent;
    memcpy(&t->tok[(size_t)i * (size_t)t->bs], tokens, sizeof *tokens * (size_t)t->bs);
    block_table_insert(&t->table, hash, i);
    idx_list_push_tail(&t->lru, i);
    t->used++;
    t->spills++;
    t->ops[t->n_ops++] = (kv_tier_op){block, i, true};
    return i;
}

int32_t kv_tier_find(const kv_tier *t, uint64_t hash, uint64_t parent, const int32_t *tokens) {
    int32_t i = block_table_find(&t->table, hash);
    if (i < 0 || t->s[i].parent != parent ||
        memcmp(&t->tok[(size_t)i * (size_t)t->bs], tokens, sizeof *tokens * (size_t)t->bs))
        return -1;
    return i;
}

int kv_tier_restore(kv_tier *t, int32_t i, int32_t block) {
    if (room_for_op(t)) return -ENOMEM;
    idx_list_unlink(&t->lru, i);
    block_table_remove(&t->table, t->s[i].hash);
    t->s[i].hash = 0;
    t->s[i].pinned = true;
    t->used--;
    t->restores++;
    t->ops[t->n_ops++] = (kv_tier_op){block, i, false};
    return 0;
}

const kv_tier_op *kv_tier_ops(const kv_tier *t, int32_t *n) {
    *n = t->n_ops;
    return t->ops;
}

void kv_tier_done(kv_tier *t) {
    for (int32_t k = 0; k < t->n_ops; k++) {
        int32_t i = t->ops[k].slot;
        if (!t->ops[k].to_tier && t->s[i].pinned) {
            t->s[i].pinned = false;
            t->free_ids[t->n_free++] = i;
        }
    }
    t->n_ops = 0;
}

void kv_tier_get_stats(const kv_tier *t, kv_tier_stats *out) {
    out->slots = t->n;
    out->used = t->used;
    out->spills = t->spills;
    out->restores = t->restores;
    out->drops = t->drops;
}
