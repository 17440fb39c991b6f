/* kv_links: which prompt-chain links (common/prompt_chain.h) the KV cache holds, and in which tier,
 * as KV events for the router: a link is held while the full block its text ends in is cached.
 * Not thread-safe: one owner (the engine) serializes calls. */
#ifndef SOL_KV_LINKS_H
#define SOL_KV_LINKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "frame.h"   /* the wire's bound on a heartbeat's links is the one rule */
#include "kv_tier.h" /* kv_place */

/* One table: the most (link, block) pairs remembered (the oldest goes first: a held one is
 * reported removed, so the router never believes more than is known) and the most events kept
 * between two drains (past it the consumer is told to take a snapshot instead). */
enum { KV_LINKS_MAX = SOL_FRAME_MAX_KV_LINKS, KV_LINK_EVENTS_MAX = SOL_FRAME_MAX_KV_LINKS };

/* A link's state: where its block is (KV_IN_POOL when one of its blocks is in the pool, else
 * KV_IN_TIER2 when one is in the second tier, else KV_GONE: no longer held). */
typedef struct kv_link_event {
    uint64_t link;
    kv_place where;
} kv_link_event;

typedef struct kv_links kv_links;

/* max_pairs in [1, KV_LINKS_MAX]. NULL and err set on bad size or out of memory. */
kv_links *kv_links_new(int32_t max_pairs, sol_err *err);
void kv_links_free(kv_links *x);

/* Link `link`'s text ends in the full KV block of chain hash `block`; `held_now`: the prefix cache
 * holds that block already (else it is held once kv_links_block says so). */
void kv_links_add(kv_links *x, uint64_t link, uint64_t block, bool held_now);

/* The block of this hash is now `where` (kv_cache_observe). */
void kv_links_block(kv_links *x, uint64_t block, kv_place where);

/* Moves up to cap events, oldest first, into out; returns how many. *lost: events were dropped
 * at the bound since the last drain (the consumer must resynchronise from kv_links_held). */
size_t kv_links_drain(kv_links *x, kv_link_event *out, size_t cap, bool *lost);

/* Every link held now (each once, with its tier), up to cap; returns how many were written. */
size_t kv_links_held(const kv_links *x, kv_link_event *out, size_t cap);

/* Pairs remembered and links held (tests, stats). */
size_t kv_links_pairs(const kv_links *x);
size_t kv_links_n_held(const kv_links *x);

#endif
