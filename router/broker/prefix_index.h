/* prefix_index: which workers hold each prefix-chain link - noted when the router sends a request,
 * corrected by the workers' KV events - bounded (least recently used links go first), for
 * cache-aware routing (route_policy.h).
 * A link's holders are worker uids (never reused), so a worker that left simply never matches. */
#ifndef SOL_PREFIX_INDEX_H
#define SOL_PREFIX_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "prompt_chain.h"

/* One table: a link remembers its last PIDX_WAYS holders (a prefix hot enough for more workers
 * than that is everywhere anyway); PIDX_DEFAULT_LINKS links in all (~3 MiB). */
enum { PIDX_WAYS = 4, PIDX_DEFAULT_LINKS = 1 << 16 };

typedef struct prefix_index prefix_index;

/* max_links >= 1. NULL on allocation failure. */
prefix_index *pidx_new(size_t max_links);
void pidx_free(prefix_index *x);

/* Worker `uid` now holds every link of c (it was sent the request); touches them. */
void pidx_note(prefix_index *x, const prefix_chain *c, uint32_t uid);

/* For each of the n workers uids[i]: bytes[i] = the prompt bytes up to the deepest link of c it
 * holds in either tier (0: none), and (pool may be NULL) pool[i] = those up to the deepest it holds
 * in its KV pool (tier 1); bytes[i] - pool[i] come from its second tier. Touches the links found.
 */
void pidx_match(prefix_index *x, const prefix_chain *c, const uint32_t *uids, size_t n,
                uint32_t *bytes, uint32_t *pool);

/* KV events (docs/broker.md): worker uid reports it holds the link (touched) in its pool or, with
 * tier2, only in its second tier; that it no longer holds it; or (a snapshot follows) that
 * everything said of it before is void. A link without holders stays until the least recently used
 * ones are recycled. */
typedef enum pidx_state { PIDX_NONE, PIDX_POOL, PIDX_TIER2 } pidx_state;
/* Both return what uid's own events said of the link before (a send-time note: PIDX_NONE). */
pidx_state pidx_hold(prefix_index *x, uint64_t hash, uint32_t uid, bool tier2);
pidx_state pidx_drop(prefix_index *x, uint64_t hash, uint32_t uid);
void pidx_drop_uid(prefix_index *x, uint32_t uid);

/* Links stored now (for tests and /admin). */
size_t pidx_size(const prefix_index *x);

#endif
