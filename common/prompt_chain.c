/* prompt_chain: a prompt as a chain of hashes (prompt_chain.h). */
#include "prompt_chain.h"

#include <string.h>

#include "hash.h"

/* A string folded in with its length first, so that ("ab", "c") and ("a", "bc") differ. */
static uint64_t fold_str(uint64_t h, const char *s) {
    uint64_t n = s ? strlen(s) : 0;
    h = sol_fnv64(h, &n, sizeof n);
    return n ? sol_fnv64(h, s, n) : h;
}

/* Closes a link: the chain's hash so far, mixed so that each link is a new 64-bit value. */
static void add_link(prefix_chain *c, uint64_t h, uint32_t msg, size_t off) {
    if (c->n == PC_MAX_LINKS) return;
    c->hash[c->n] = sol_fmix64(h);
    c->bytes[c->n] = c->at > UINT32_MAX ? UINT32_MAX : (uint32_t)c->at;
    c->msg[c->n] = msg;
    c->off[c->n] = off > UINT32_MAX ? UINT32_MAX : (uint32_t)off;
    c->n++;
}

/* Text folded into c->h piece by piece, a link after each full piece (and after the last when
 * `close`). */
static void fold_pieces(prefix_chain *c, const char *s, uint32_t msg, int close) {
    size_t len = s ? strlen(s) : 0;
    for (size_t i = 0; i < len; i += PC_PIECE_BYTES) {
        size_t k = len - i < PC_PIECE_BYTES ? len - i : PC_PIECE_BYTES;
        c->h = sol_fnv64(c->h, s + i, k);
        c->at += k;
        if (k == PC_PIECE_BYTES && (i + k < len || !close)) add_link(c, c->h, msg, i + k);
    }
    if (close) add_link(c, sol_fnv64(c->h, "\0", 1), msg, len); /* the end: "ab" and "abc" differ */
}

void pc_begin(prefix_chain *c, const char *cache_salt, int chat, const char *const *tools,
              size_t n_tools) {
    memset(c, 0, sizeof *c);
    uint64_t h = fold_str(SOL_FNV64_INIT, cache_salt);
    uint64_t kind = chat ? 1 : 0, nt = n_tools;
    h = sol_fnv64(h, &kind, sizeof kind);
    h = sol_fnv64(h, &nt, sizeof nt);
    for (size_t i = 0; i < n_tools; i++)
        h = fold_str(h, tools[i]);
    c->h = h;
}

void pc_prompt(prefix_chain *c, const char *prompt) {
    if (prompt && *prompt) fold_pieces(c, prompt, 0, 1);
}

void pc_message(prefix_chain *c, const char *role, const char *content) {
    c->n_msgs++;
    c->h = fold_str(c->h, role);
    fold_pieces(c, content, c->n_msgs - 1, 0);
    size_t len = content ? strlen(content) : 0;
    c->content_len = len > UINT32_MAX ? UINT32_MAX : (uint32_t)len;
}

void pc_call(prefix_chain *c, const char *name, const char *arguments) {
    c->h = fold_str(fold_str(c->h, name), arguments);
    c->at += strlen(arguments ? arguments : "");
}

void pc_message_end(prefix_chain *c, const char *tool_call_id) {
    c->h = fold_str(c->h, tool_call_id);
    add_link(c, c->h, c->n_msgs - 1, c->content_len); /* a message's end */
}

void pc_end(prefix_chain *c) {
    c->total = c->at > UINT32_MAX ? UINT32_MAX : (uint32_t)c->at;
}

void pc_of_generate(const Sol__Generate *g, prefix_chain *c) {
    pc_begin(c, g->cache_salt, g->n_messages > 0, (const char *const *)g->tools, g->n_tools);
    if (!g->embed) {
        if (!g->n_messages) pc_prompt(c, g->prompt);
        for (size_t i = 0; i < g->n_messages; i++) {
            const Sol__ChatMessage *m = g->messages[i];
            pc_message(c, m->role, m->content);
            for (size_t k = 0; k < m->n_tool_calls; k++)
                pc_call(c, m->tool_calls[k]->name, m->tool_calls[k]->arguments);
            pc_message_end(c, m->tool_call_id);
        }
    }
    pc_end(c);
}
