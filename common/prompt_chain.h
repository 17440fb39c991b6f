/* prompt_chain: a prompt as a chain of hashes over its text, one link per message (a long message,
 * or a completion prompt, one link per PC_PIECE_BYTES piece), built from the Generate message by
 * the router (as it dispatches) and the worker (as it runs it) with this one function, so that
 * they name prefixes alike.
 * Two prompts share link i exactly when their text up to link i's end is the same (same salt, same
 * tools, same roles and contents): the router routes on the links workers hold, and workers
 * report the links their KV cache holds, without the router knowing tokens (docs/broker.md). */
#ifndef SOL_PROMPT_CHAIN_H
#define SOL_PROMPT_CHAIN_H

#include <stddef.h>
#include <stdint.h>

#include "sol.pb-c.h"

/* One table: the chain's bounds. 64 links cover a conversation of 64 messages, or 64 KiB of a
 * completion prompt; the links past them are not hashed (a longer prompt still matches on its
 * first 64). 1 KiB pieces let a shared long document match before its first difference. */
enum { PC_MAX_LINKS = 64, PC_PIECE_BYTES = 1024 };

typedef struct prefix_chain {
    size_t n;                     /* links hashed (0: nothing to route on, e.g. embeddings) */
    uint64_t hash[PC_MAX_LINKS];  /* link i: every byte of the prompt text up to its end */
    uint32_t bytes[PC_MAX_LINKS]; /* prompt text bytes up to link i's end */
    /* where link i ends: in message msg[i] (0 for a completion prompt) after its content's first
     * off[i] bytes (a message's own end: off = its content's length) */
    uint32_t msg[PC_MAX_LINKS];
    uint32_t off[PC_MAX_LINKS];
    uint32_t total; /* the whole prompt text's bytes, links past the last included */
    /* building state */
    uint64_t h, at;
    uint32_t n_msgs, content_len;
} prefix_chain;

/* Starts a chain: the seed hashes cache_salt (NULL or "": none; tenants never share a link), the
 * kind (chat or a completion prompt) and the tools' JSON offered. */
void pc_begin(prefix_chain *c, const char *cache_salt, int chat, const char *const *tools,
              size_t n_tools);
/* A completion prompt (once). */
void pc_prompt(prefix_chain *c, const char *prompt);
/* The next chat message: its role and content, then each of its tool calls, then its end with the
 * call it answers (NULL or "": none). */
void pc_message(prefix_chain *c, const char *role, const char *content);
void pc_call(prefix_chain *c, const char *name, const char *arguments);
void pc_message_end(prefix_chain *c, const char *tool_call_id);
/* Sets total. */
void pc_end(prefix_chain *c);

/* The chain of g's prompt: the seed hashes cache_salt (tenants never share a link) and the tools'
 * JSON; chat links hash a message's role, content and tool calls; a completion prompt's links its
 * pieces. Embeddings and empty prompts: n = 0. */
void pc_of_generate(const Sol__Generate *g, prefix_chain *out);

#endif
