/* kv_cache: the paged KV cache block manager - which physical blocks each sequence uses, with
 * reference counts, copy-on-write forks and hash-chained prefix caching. No tensors here. */
#ifndef SOL_KV_CACHE_H
#define SOL_KV_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "err.h"
#include "kv_tier.h"

/* The backend stores K/V as [block][slot][kv_head][head_dim] per layer; a token at position p of
 * a sequence lives at physical slot table[p / block_size] * block_size + p % block_size.
 *
 * Protocol per engine step for one sequence (see docs/kv_cache.md):
 *   kv_seq_reserve(seq, n)          make room for n more tokens (may ask for block copies)
 *   kv_seq_slots(seq, len, n, ...)  where the forward pass writes their K/V
 *   ... forward pass ...
 *   kv_seq_append(seq, tokens, n)   these tokens' K/V are now written: record them, commit
 *                                   blocks that became full to the prefix cache.
 * Append only tokens whose K/V has been written, or another sequence could reuse a block from the
 * prefix cache before its contents exist.
 *
 * Not thread-safe: one owner (the engine actor) calls everything. */

typedef struct kv_cache kv_cache;
typedef struct kv_seq kv_seq;

/* A block copy the caller must perform with the backend's kv_copy_blocks before the next forward
 * pass writes into dst_block (copy-on-write of a shared partially filled block). */
typedef struct kv_copy {
    int32_t src_block;
    int32_t dst_block;
} kv_copy;

/* kv_seq_reserve writes at most this many copies. */
#define KV_MAX_COPIES 1

typedef struct kv_cache_stats {
    int32_t total_blocks;
    int32_t free_blocks;   /* never used, or their cached contents dropped */
    int32_t cached_blocks; /* ref count 0 but still holding a prefix-cache hash (evictable) */
    int32_t used_blocks;   /* ref count > 0 */
    int32_t live_seqs;
    uint64_t prefix_query_tokens; /* prompt tokens offered to kv_seq_match_prefix */
    uint64_t prefix_hit_tokens;   /* of those, served from cache; hit rate = hit / query */
    uint64_t evictions;           /* cached blocks whose hash was dropped to reuse the block */
    /* the second tier (kv_cache_tier2): its slots, those holding a block, the prompt tokens it
     * served (part of prefix_hit_tokens) and the blocks it took in */
    int32_t tier2_slots, tier2_used;
    uint64_t tier2_hit_tokens, tier2_spills;
} kv_cache_stats;

/* Creates a pool of num_blocks block ids of block_size token slots each (num_blocks * block_size
 * must fit in int32). Returns NULL and fills err on bad sizes or out of memory. */
kv_cache *kv_cache_new(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching,
                       sol_err *err);

/* Frees the manager and every sequence still alive (their kv_seq pointers become invalid).
 * NULL is a no-op. */
void kv_cache_free(kv_cache *kv);

int32_t kv_cache_block_size(const kv_cache *kv);

/* True when n_blocks fresh blocks could be handed out now (free + evictable cached). */
bool kv_cache_can_allocate(const kv_cache *kv, int32_t n_blocks);
/* Whether full blocks are kept for reuse (enable_prefix_caching). */
bool kv_cache_prefix_caching(const kv_cache *kv);

void kv_cache_get_stats(const kv_cache *kv, kv_cache_stats *out);

/* A second tier of `slots` blocks (0: none; needs prefix caching): a cached block evicted from the
 * pool is kept there instead of forgotten, and a prompt whose next full block is there gets it back
 * in a fresh block rather than recomputing it (kv_seq_match_prefix). The bytes move through copies
 * queued here, which the caller performs in order (spills out of a block before anything writes
 * it, restores before the forward pass reads them), then acknowledges. A block in the second tier
 * counts as held for the observer. Returns 0 or a negative error. */
int kv_cache_tier2(kv_cache *kv, int32_t slots, sol_err *err);
const kv_tier_op *kv_cache_tier_ops(const kv_cache *kv, int32_t *n);
void kv_cache_tier_done(kv_cache *kv);

/* Told each time a full block's hash enters the prefix cache (KV_IN_POOL), moves to the second
 * tier on eviction (KV_IN_TIER2) or leaves both (KV_GONE: evicted, truncated, dropped by the tier;
 * freed with the manager not counted): what the worker reports as KV events. */
typedef void (*kv_hash_observer)(void *ctx, uint64_t hash, kv_place where);
void kv_cache_observe(kv_cache *kv, kv_hash_observer fn, void *ctx);
/* Whether the prefix cache holds a block of this chain hash now. */
bool kv_cache_holds(const kv_cache *kv, uint64_t hash);

/* Side-effect-free prefix lookup for admission decisions: how many prompt tokens
 * kv_seq_match_prefix would serve from cache for this salt, and (if non-NULL) how many of the
 * blocks involved are currently cached-evictable (matching takes them out of the free pool). */
int32_t kv_cache_peek_prefix(const kv_cache *kv, const char *cache_salt, const int32_t *prompt,
                             int32_t prompt_len, int32_t *n_evictable_blocks);

/* Verifies every invariant (block states, ref counts against block tables, hash table, LRU, free
 * list, hash chains). O(total blocks + total tokens): for tests and debug builds. Returns 0 or
 * -EFAULT with the first violation described in err. */
int kv_cache_check(const kv_cache *kv, sol_err *err);

/* A new empty sequence. cache_salt (NULL or "" for none) is mixed into the first block's hash so
 * sequences with different salts never share cached blocks; it is not kept. NULL on OOM. */
kv_seq *kv_seq_new(kv_cache *kv, const char *cache_salt, sol_err *err);

/* Releases the sequence's blocks (full hashed blocks become cached, others free). NULL no-op. */
void kv_seq_free(kv_seq *seq);

/* On an empty sequence: reuses cached blocks for the longest run of full prompt blocks found in
 * the prefix cache, at most (prompt_len - 1) rounded down to a block boundary so the last prompt
 * token is always recomputed (its logits are needed). Returns the number of cached tokens (a
 * multiple of block_size, the new kv_seq_len), or a negative error. Needs no free blocks. */
int32_t kv_seq_match_prefix(kv_seq *seq, const int32_t *prompt, int32_t prompt_len, sol_err *err);

/* Fresh blocks kv_seq_reserve(seq, n_new) would take (growth plus any copy-on-write). */
int32_t kv_seq_blocks_needed(const kv_seq *seq, int32_t n_new);

/* Ensures blocks for positions [len, len + n_new). If the block that the next token goes into is
 * shared (after a fork) or holds a cached full-block hash (after a truncate), it is replaced by a
 * private copy and the pair is written to copies[0] (*n_copies = 1): the caller must copy
 * src -> dst on the backend before writing. Returns 0, or -ENOSPC with no side effect when the
 * pool cannot supply the blocks now (the scheduler then preempts), -E2BIG when the whole pool
 * could never hold len + n_new tokens, -EINVAL, -ENOMEM. Reserved but
 * unwritten blocks stay with the sequence until truncate or free. */
int kv_seq_reserve(kv_seq *seq, int32_t n_new, kv_copy copies[KV_MAX_COPIES], int32_t *n_copies,
                   sol_err *err);

/* Records n tokens at positions [len, len + n) whose K/V has been written, and commits blocks
 * that became full to the prefix cache. The positions must be reserved. Returns 0 or -EINVAL
 * (nothing recorded). */
int kv_seq_append(kv_seq *seq, const int32_t *tokens, int32_t n, sol_err *err);

/* Physical slots of positions [start, start + n), which must lie within reserved blocks. */
int kv_seq_slots(const kv_seq *seq, int32_t start, int32_t n, int32_t *slots_out, sol_err *err);

/* The block table (borrowed, valid until the next call that changes this sequence). Its length,
 * written to *n_blocks, includes reserved blocks beyond kv_seq_len. */
const int32_t *kv_seq_block_table(const kv_seq *seq, int32_t *n_blocks);

/* Rolls back to new_len tokens (speculative decoding rejections): releases every block past the
 * one holding position new_len - 1 (reserved ones included) and un-commits that block from the
 * prefix cache if it is no longer full and this sequence holds it alone. Returns 0 or -EINVAL. */
int kv_seq_truncate(kv_seq *seq, int32_t new_len, sol_err *err);

/* Sliding-window attention: releases the sequence's blocks that lie wholly before position pos
 * (indices < pos / block_size), which no later token will read. Their block-table entries become
 * KV_BLOCK_DROPPED; kv_seq_token_at returns -1 there, kv_seq_slots refuses them, and truncating
 * into them is refused. Only full, written blocks are dropped (pos is clamped to kv_seq_len).
 * Returns the number of blocks released by this call. */
#define KV_BLOCK_DROPPED (-1)
int32_t kv_seq_drop_before(kv_seq *seq, int32_t pos);
/* Leading blocks already dropped. */
int32_t kv_seq_dropped(const kv_seq *seq);

/* A new sequence sharing all of src's written blocks (ref++) and its salt; neither copies K/V
 * until one of them writes into a shared block (see kv_seq_reserve). NULL on OOM. */
kv_seq *kv_seq_fork(kv_seq *src, sol_err *err);

int32_t kv_seq_len(const kv_seq *seq);

/* The token recorded at position pos, or -1 when pos is out of [0, len). */
int32_t kv_seq_token_at(const kv_seq *seq, int32_t pos);

#endif
