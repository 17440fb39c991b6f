/* prefix_chain: a request's prompt as a chain of hashes, one link per message (a long message, or
 * a completion prompt, one link per PC_PIECE_BYTES piece), for cache-aware routing.
 * Two requests share link i exactly when their text up to link i's end is the same (same salt,
 * same tools, same roles and contents): the router can tell how much of a new request a worker
 * has already prefilled without the worker's tokenizer or chat template (docs/broker.md). */
#ifndef SOL_PREFIX_CHAIN_H
#define SOL_PREFIX_CHAIN_H

#include <stddef.h>
#include <stdint.h>

#include "oai_request.h"

/* One table: the chain's bounds. 64 links cover a conversation of 64 messages, or 64 KiB of a
 * completion prompt; the links past them are not hashed (a longer prompt still matches on its
 * first 64). 1 KiB pieces let a shared long document match before its first difference. */
enum { PC_MAX_LINKS = 64, PC_PIECE_BYTES = 1024 };

typedef struct prefix_chain {
    size_t n;                     /* links hashed (0: nothing to route on, e.g. embeddings) */
    uint64_t hash[PC_MAX_LINKS];  /* link i: every byte of the prompt text up to its end */
    uint32_t bytes[PC_MAX_LINKS]; /* prompt text bytes up to link i's end */
    uint32_t total;               /* the whole prompt text's bytes, links past the last included */
} prefix_chain;

/* The chain of req's prompt: the seed hashes cache_salt (tenants never share a link) and the
 * tools' JSON; chat links hash a message's role, content and tool calls; a completion prompt's
 * links its pieces. Embeddings and empty prompts: n = 0. */
void prefix_chain_of(const oai_request *req, prefix_chain *out);

#endif
