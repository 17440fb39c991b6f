/* block_hash: the 64-bit chained hash of a KV block's token ids and the open-addressing table
 * that maps a full block's hash to the physical block holding it (prefix caching). */
#ifndef SOL_BLOCK_HASH_H
#define SOL_BLOCK_HASH_H

#include <stdint.h>

/* Hash 0 is reserved for "no hash"; these functions never return it. */

/* Seed of a sequence's hash chain. A NULL or empty salt gives the shared public seed; any other
 * salt gives a seed of its own, so tenants with different salts never produce equal chains. */
uint64_t block_hash_seed(const char *cache_salt);

/* Hash of one block: chains the parent hash (the previous block's hash, or the seed) with the
 * block's `n` token ids. Order-sensitive and position-sensitive through the chain. */
uint64_t block_hash_tokens(uint64_t parent, const int32_t *tokens, int32_t n);

/* Open addressing with linear probing and backward-shift deletion (no tombstones, so lookups
 * never degrade however many inserts and removes happen). Sized once for `max_entries` at a
 * load factor <= 1/2; inserting more than max_entries is a caller bug and is refused. */
typedef struct block_table {
    uint64_t *keys; /* 0 = empty slot */
    int32_t *vals;
    uint32_t mask; /* capacity - 1, capacity a power of two */
    int32_t count;
    int32_t max_entries;
} block_table;

/* Returns 0, or -ENOMEM / -EINVAL (max_entries < 1). */
int block_table_init(block_table *t, int32_t max_entries);
void block_table_destroy(block_table *t);

/* The value stored under `key`, or -1. */
int32_t block_table_find(const block_table *t, uint64_t key);

/* Inserts a key that must not be present. Returns 0, -EEXIST, or -ENOSPC when full. */
int block_table_insert(block_table *t, uint64_t key, int32_t val);

/* Removes `key`; returns 0, or -ENOENT when absent. */
int block_table_remove(block_table *t, uint64_t key);

#endif
