/* link_map: prompt-chain links to KV blocks (link_map.h). */
#include "link_map.h"

#include <string.h>

#include "block_hash.h"

/* memmem within [from, len). */
static const char *find(const char *s, size_t len, size_t from, const char *needle, size_t n) {
    if (from > len || n > len - from) return NULL;
    for (const char *p = s + from; (size_t)(p - s) + n <= len; p++) {
        p = memchr(p, needle[0], len - n + 1 - (size_t)(p - s));
        if (!p) return NULL;
        if (!memcmp(p, needle, n)) return p;
    }
    return NULL;
}

static int is_space(char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

/* Where message content `s` sits in the text, from *cursor: *pos its first byte there, *lead the
 * bytes of s trimmed before it, *shown the bytes found. 0, or -1 when it is not there. */
static int place(const link_prompt *p, const char *s, size_t *cursor, size_t *pos, size_t *lead,
                 size_t *shown) {
    size_t len = s ? strlen(s) : 0, a = 0, b = len;
    const char *at = len ? find(p->text, p->text_len, *cursor, s, len) : p->text + *cursor;
    if (!at) {
        while (a < b && is_space(s[a]))
            a++;
        while (b > a && is_space(s[b - 1]))
            b--;
        at = b > a ? find(p->text, p->text_len, *cursor, s + a, b - a) : p->text + *cursor;
        if (!at) return -1;
    }
    *pos = (size_t)(at - p->text);
    *lead = a;
    *shown = b - a;
    *cursor = *pos + *shown;
    return 0;
}

/* Link i's end as a byte offset of the text; -1 when its message cannot be placed (and nothing
 * after it can). st carries the message being placed across calls. */
typedef struct place_state {
    size_t cursor, pos, lead, shown;
    int64_t msg; /* placed message, -1 none */
    int failed;
} place_state;

static int64_t link_end(const link_prompt *p, const prefix_chain *c, size_t i, place_state *st) {
    if (!p->msgs) return c->off[i] <= p->text_len ? (int64_t)c->off[i] : -1;
    if (st->failed || c->msg[i] >= p->n_msgs) return -1;
    while (st->msg < (int64_t)c->msg[i]) {
        st->msg++;
        if (place(p, p->msgs[st->msg].content, &st->cursor, &st->pos, &st->lead, &st->shown)) {
            st->failed = 1;
            return -1;
        }
    }
    size_t off = c->off[i] > st->lead ? c->off[i] - st->lead : 0;
    return (int64_t)(st->pos + (off < st->shown ? off : st->shown));
}

size_t link_map(const tokenizer *tok, const link_prompt *p, const prefix_chain *c,
                int32_t block_size, const char *cache_salt, link_block *out) {
    size_t n_out = 0, k = 0, bytes = 0; /* tokens [0, k) end within `bytes` of text */
    int32_t bos = tokenizer_bos(tok), hashed = 0;
    uint64_t h = block_hash_seed(cache_salt);
    place_state st = {.msg = -1};
    for (size_t i = 0; i < c->n && i < PC_MAX_LINKS; i++) {
        int64_t end = link_end(p, c, i, &st);
        if (end < 0) break;
        for (;;) { /* the tokens whose pieces end by `end` */
            if (k >= (size_t)p->n_ids) break;
            size_t len = 0;
            if (!(k == 0 && p->ids[0] == bos)) tokenizer_token_piece(tok, p->ids[k], &len);
            if (bytes + len > (size_t)end) break;
            bytes += len;
            k++;
        }
        int32_t blocks = (int32_t)(k / (size_t)block_size);
        if (blocks < 1) continue;
        for (; hashed < blocks; hashed++)
            h = block_hash_tokens(h, p->ids + (size_t)hashed * (size_t)block_size, block_size);
        out[n_out++] = (link_block){c->hash[i], h};
    }
    return n_out;
}
