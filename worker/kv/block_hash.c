/* block_hash: chained 64-bit block hashes and the hash -> block id table for prefix caching.
 *
 * The hash is a splitmix64-style finalizer applied after folding in two token ids at a time.
 * Each fold is a bijection of the running state for a fixed input word, so two blocks that differ
 * in one token differ in the state from then on; the final mix spreads that over all 64 bits.
 * It is not cryptographic: kv_cache verifies token ids and the parent hash before reusing a block,
 * so a collision costs a cache miss, never wrong K/V. */
#include "block_hash.h"

#include <errno.h>
#include <stdlib.h>

#include "hash.h"

static uint64_t nonzero(uint64_t h) {
    return h ? h : SOL_GOLDEN64;
}

uint64_t block_hash_seed(const char *cache_salt) {
    if (!cache_salt || !cache_salt[0]) return 0x5a17c0de5eed0001ull; /* the public chain */
    uint64_t h = sol_fnv64_str(SOL_FNV64_INIT, cache_salt);
    /* A different domain constant than the public seed keeps "salted" and "public" apart. */
    return nonzero(sol_mix64(h ^ 0x73616c7473616c74ull));
}

uint64_t block_hash_tokens(uint64_t parent, const int32_t *tokens, int32_t n) {
    uint64_t h = sol_mix64(parent + SOL_GOLDEN64 * (uint64_t)(n + 1));
    int32_t i = 0;
    for (; i + 1 < n; i += 2) {
        uint64_t w = (uint64_t)(uint32_t)tokens[i] | ((uint64_t)(uint32_t)tokens[i + 1] << 32);
        h = sol_mix64(h ^ w) + SOL_GOLDEN64;
    }
    if (i < n) h = sol_mix64(h ^ (uint64_t)(uint32_t)tokens[i] ^ (1ull << 63)) + SOL_GOLDEN64;
    return nonzero(sol_mix64(h));
}

static uint32_t home(const block_table *t, uint64_t key) {
    return (uint32_t)(key ^ (key >> 32)) & t->mask;
}

int block_table_init(block_table *t, int32_t max_entries) {
    *t = (block_table){0};
    if (max_entries < 1) return -EINVAL;
    uint64_t cap = 2;
    while (cap < 2 * (uint64_t)max_entries)
        cap <<= 1;
    t->keys = calloc(cap, sizeof *t->keys);
    t->vals = calloc(cap, sizeof *t->vals);
    if (!t->keys || !t->vals) {
        block_table_destroy(t);
        return -ENOMEM;
    }
    t->mask = (uint32_t)(cap - 1);
    t->max_entries = max_entries;
    return 0;
}

void block_table_destroy(block_table *t) {
    if (!t) return;
    free(t->keys);
    free(t->vals);
    *t = (block_table){0};
}

/* Index holding `key`, or the empty slot where the probe for it ends. */
static uint32_t probe(const block_table *t, uint64_t key) {
    uint32_t i = home(t, key);
    while (t->keys[i] && t->keys[i] != key)
        i = (i + 1) & t->mask;
    return i;
}

int32_t block_table_find(const block_table *t, uint64_t key) {
    if (!key) return -1;
    uint32_t i = probe(t, key);
    return t->keys[i] ? t->vals[i] : -1;
}

int block_table_insert(block_table *t, uint64_t key, int32_t val) {
    if (!key) return -EINVAL;
    uint32_t i = probe(t, key);
    if (t->keys[i]) return -EEXIST;
    if (t->count >= t->max_entries) return -ENOSPC;
    t->keys[i] = key;
    t->vals[i] = val;
    t->count++;
    return 0;
}

int block_table_remove(block_table *t, uint64_t key) {
    if (!key) return -ENOENT;
    uint32_t hole = probe(t, key);
    if (!t->keys[hole]) return -ENOENT;
    /* Backward shift: pull later entries of the cluster into the hole when the hole lies on
     * their probe path (between their home slot and where they sit), so no tombstone is needed. */
    for (uint32_t j = (hole + 1) & t->mask; t->keys[j]; j = (j + 1) & t->mask) {
        uint32_t h = home(t, t->keys[j]);
        uint32_t dist_j = (j - h) & t->mask;
        uint32_t dist_hole = (hole - h) & t->mask;
        if (dist_hole < dist_j) {
            t->keys[hole] = t->keys[j];
            t->vals[hole] = t->vals[j];
            hole = j;
        }
    }
    t->keys[hole] = 0;
    t->count--;
    return 0;
}
