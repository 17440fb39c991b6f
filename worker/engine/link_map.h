/* link_map: where a prompt's chain links (common/prompt_chain.h) end among its tokens, as the full
 * KV block each ends in - what the worker reports held (kv_links) in the router's own terms. */
#ifndef SOL_LINK_MAP_H
#define SOL_LINK_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "chat_template.h"
#include "prompt_chain.h"
#include "tokenizer.h"

typedef struct link_block {
    uint64_t link;  /* the chain's link hash */
    uint64_t block; /* the KV chain hash of the last full block before the link's end */
} link_block;

/* The prompt as the engine tokenized it: the text (the rendered chat, or the completion prompt),
 * the chat messages it was rendered from (NULL for a completion) and the ids the KV cache will
 * hold (a BOS at ids[0] counts as no text). */
typedef struct link_prompt {
    const char *text;
    size_t text_len;
    const chat_message *msgs;
    size_t n_msgs;
    const int32_t *ids;
    int32_t n_ids;
} link_prompt;

/* For each link of `c`, in order, whose end is found in the prompt and lies past its first full
 * block: the pair (link, block), written to out (PC_MAX_LINKS at most); returns how many. A chat
 * message's content is found in the rendered text by search, in order, from the previous one's
 * end (verbatim, else with its surrounding whitespace trimmed); the first that is not found ends
 * the mapping, so a template that rewrites content reports fewer links, never a wrong one. Token
 * ends come from the tokens' pieces, rounded down: a link maps to the block its whole text has
 * reached, or an earlier one. */
size_t link_map(const tokenizer *tok, const link_prompt *p, const prefix_chain *c,
                int32_t block_size, const char *cache_salt, link_block *out);

#endif
