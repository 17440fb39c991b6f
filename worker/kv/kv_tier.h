/* kv_tier: the second KV tier's bookkeeping - which evicted full blocks (hash, parent, token ids)
 * sit in which slot of a host-memory store, least recently used first out, and the copies the
 * engine must make (pool block -> slot on eviction, slot -> pool block on a hit) before its next
 * forward pass. No tensors here: the engine moves the bytes (model_kv_host_io). */
#ifndef SOL_KV_TIER_H
#define SOL_KV_TIER_H

#include <stdbool.h>
#include <stdint.h>

#include "err.h"

/* Where a full block of a chain hash is, as the KV cache's observer and the KV events tell it: in
 * the pool (tier 1: attention reads it there), only in the second tier (a copy brings it back), or
 * nowhere. */
typedef enum kv_place { KV_GONE = 0, KV_IN_POOL = 1, KV_IN_TIER2 = 2 } kv_place;

/* One pending copy, in the order they must run (an eviction's copy out of a block comes before
 * a later copy into it). */
typedef struct kv_tier_op {
    int32_t block, slot;
    bool to_tier; /* true: block -> slot (spill); false: slot -> block (restore) */
} kv_tier_op;

typedef struct kv_tier_stats {
    int32_t slots, used;
    uint64_t spills, restores, drops; /* blocks kept, brought back, and dropped for room */
} kv_tier_stats;

typedef struct kv_tier kv_tier;

/* slots >= 1 blocks of block_size tokens. NULL and err set on bad sizes or out of memory. */
kv_tier *kv_tier_new(int32_t slots, int32_t block_size, sol_err *err);
void kv_tier_free(kv_tier *t);

/* A full block leaves the pool: keep it (hash, parent, its tokens) in a slot and queue its copy
 * out. The least recently used slot not awaiting a restore makes room: *dropped = the hash that
 * was there (0: none). Returns the slot, or -1 when no slot is free of pending restores (the block
 * is not kept). */
int32_t kv_tier_spill(kv_tier *t, int32_t block, uint64_t hash, uint64_t parent,
                      const int32_t *tokens, uint64_t *dropped);

/* The slot that holds a block of this hash, parent and tokens (a hash collision is a miss), or
 * -1. */
int32_t kv_tier_find(const kv_tier *t, uint64_t hash, uint64_t parent, const int32_t *tokens);

/* A hit: the slot's block goes back into pool block `block` - queued; the slot no longer holds
 * the hash and is reused once kv_tier_done says the copies ran. 0, or -ENOMEM (nothing done). */
int kv_tier_restore(kv_tier *t, int32_t slot, int32_t block);

/* The copies queued since the last kv_tier_done, in order. */
const kv_tier_op *kv_tier_ops(const kv_tier *t, int32_t *n);
/* They ran: restored slots become free. */
void kv_tier_done(kv_tier *t);

void kv_tier_get_stats(const kv_tier *t, kv_tier_stats *out);

#endif
