/* prefix_chain: a request's prompt as a chain of hashes (prefix_chain.h). */
#include "prefix_chain.h"

#include <string.h>

#include "hash.h"

/* A string folded in with its length first, so that ("ab", "c") and ("a", "bc") differ. */
static uint64_t fold_str(uint64_t h, const char *s) {
    uint64_t n = s ? strlen(s) : 0;
    h = sol_fnv64(h, &n, sizeof n);
    return n ? sol_fnv64(h, s, n) : h;
}

/* Closes a link: the chain's hash so far, mixed so that each link is a new 64-bit value. */
static void add_link(prefix_chain *c, uint64_t h, uint64_t bytes) {
    if (c->n == PC_MAX_LINKS) return;
    c->hash[c->n] = sol_fmix64(h);
    c->bytes[c->n] = bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)bytes;
    c->n++;
}

/* Text folded into h piece by piece, a link after each full piece (and after the last when
 * `close`); *at counts the prompt's bytes. Returns h. */
static uint64_t fold_pieces(prefix_chain *c, uint64_t h, const char *s, uint64_t *at, int close) {
    size_t len = s ? strlen(s) : 0;
    for (size_t i = 0; i < len; i += PC_PIECE_BYTES) {
        size_t k = len - i < PC_PIECE_BYTES ? len - i : PC_PIECE_BYTES;
        h = sol_fnv64(h, s + i, k);
        *at += k;
        if (k == PC_PIECE_BYTES && (i + k < len || !close)) add_link(c, h, *at);
    }
    if (close) add_link(c, sol_fnv64(h, "\0", 1), *at); /* the end: "ab" and "abc" differ */
    return h;
}

static uint64_t seed(const oai_request *req) {
    uint64_t h = fold_str(SOL_FNV64_INIT, req->cache_salt);
    uint64_t kind = (uint64_t)req->kind, n_tools = req->tools.n;
    h = sol_fnv64(h, &kind, sizeof kind);
    h = sol_fnv64(h, &n_tools, sizeof n_tools);
    for (size_t i = 0; i < req->tools.n; i++)
        h = fold_str(h, req->tools.json[i]);
    return h;
}

void prefix_chain_of(const oai_request *req, prefix_chain *out) {
    memset(out, 0, sizeof *out);
    uint64_t h = seed(req), at = 0;
    if (req->kind == OAI_COMPLETION) {
        if (req->prompt && *req->prompt) fold_pieces(out, h, req->prompt, &at, 1);
    } else if (req->kind == OAI_CHAT) {
        for (size_t m = 0; m < req->n_messages; m++) {
            const oai_message *msg = &req->messages[m];
            h = fold_str(h, msg->role);
            h = fold_pieces(out, h, msg->content, &at, 0);
            for (size_t k = 0; k < msg->n_calls; k++) {
                h = fold_str(fold_str(h, msg->calls[k].name), msg->calls[k].arguments);
                at += strlen(msg->calls[k].arguments ? msg->calls[k].arguments : "");
            }
            h = fold_str(h, msg->tool_call_id);
            add_link(out, h, at); /* a message's end */
        }
    }
    out->total = at > UINT32_MAX ? UINT32_MAX : (uint32_t)at;
}
