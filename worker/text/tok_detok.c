/* tok_detok: token ids -> text. Every token's rendering is computed once at load (as llama.cpp's
 * piece cache does), so decoding and streaming are copies. The stream holds back the bytes of a
 * UTF-8 character split across tokens (byte tokens, byte-level BPE) until it is complete. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"
#include "utf8.h"

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* "<0xAB>" -> 0xAB, or -1 */
static int byte_token_value(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

#define TOK_BYTE_ALPHABET_END 0x144 /* GPT-2's byte alphabet lies below U+0144 */

/* Render one token into dst (never longer than its text); returns the byte count. rev maps a
 * byte-alphabet code point back to its byte (-1: not in the alphabet). */
static size_t render(const tokenizer *t, int32_t id, const int16_t *rev, uint8_t *dst) {
    const char *s = t->text + t->text_off[id];
    size_t n = t->text_len[id], o = 0;
    uint8_t ty = t->types[id];
    if (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN || ty == TOK_TYPE_USER_DEFINED) {
        memcpy(dst, s, n);
        return n;
    }
    if (ty == TOK_TYPE_BYTE) {
        int v = byte_token_value(s, n);
        if (v >= 0) {
            dst[0] = (uint8_t)v;
            return 1;
        }
    }
    if (ty != TOK_TYPE_NORMAL && ty != TOK_TYPE_BYTE) return 0;
    if (t->is_spm) {
        for (size_t i = 0; i < n; i++) {
            if (i + 2 < n && (uint8_t)s[i] == 0xE2 && (uint8_t)s[i + 1] == 0x96 &&
                (uint8_t)s[i + 2] == 0x81) {
                dst[o++] = ' ';
                i += 2;
            } else {
                dst[o++] = (uint8_t)s[i];
            }
        }
        return o;
    }
    for (size_t pos = 0; pos < n;) {
        size_t start = pos;
        uint32_t c = utf8_decode((const uint8_t *)s, n, &pos);
        int b = c < TOK_BYTE_ALPHABET_END ? rev[c] : -1;
        if (b >= 0) {
            dst[o++] = (uint8_t)b;
        } else { /* not in the byte alphabet: keep the character as written */
            memcpy(dst + o, s + start, pos - start);
            o += pos - start;
        }
    }
    return o;
}

int tok_build_pieces(tokenizer *t) {
    size_t total = 0;
    for (int32_t i = 0; i < t->n; i++)
        total += t->text_len[i];
    uint8_t *buf = malloc(total + 8);
    t->piece_off = malloc(sizeof *t->piece_off * (size_t)t->n);
    t->piece_len = malloc(sizeof *t->piece_len * (size_t)t->n);
    if (!buf || !t->piece_off || !t->piece_len) {
        free(buf);
        return -ENOMEM;
    }
    /* a rendering is never longer than the token text, so one arena of the same size fits */
    int16_t rev[TOK_BYTE_ALPHABET_END];
    memset(rev, 0xFF, sizeof rev);
    for (int b = 0; b < 256; b++) {
        size_t p = 0;
        uint32_t c = utf8_decode(t->byte_utf8[b], t->byte_utf8_len[b], &p);
        if (c < TOK_BYTE_ALPHABET_END) rev[c] = (int16_t)b;
    }
    size_t o = 0;
    t->max_piece = 0;
    for (int32_t i = 0; i < t->n; i++) {
        size_t n = render(t, i, rev, buf + o);
        t->piece_off[i] = (uint32_t)o;
        t->piece_len[i] = (uint32_t)n;
        if (n > t->max_piece) t->max_piece = n;
        o += n;
    }
    t->piece = (char *)buf;
    return 0;
}

const char *tokenizer_token_piece(const tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->piece_len[id];
    return t->piece + t->piece_off[id];
}

/* The bytes id contributes under flags; *strip is the pending "drop the dummy-prefix space". */
static const char *visible_piece(const tokenizer *t, int32_t id, unsigned flags, int *strip,
                                 size_t *len) {
    const char *p = t->piece + t->piece_off[id];
    *len = t->piece_len[id];
    if ((t->flags[id] & TOKF_SPECIAL) && !(flags & TOK_DECODE_SPECIAL)) {
        *len = 0;
        if (id != t->bos) *strip = 0;
        return p;
    }
    if (id == t->bos && (t->flags[id] & TOKF_SPECIAL)) return p; /* rendered BOS keeps strip */
    if (*strip && *len > 0) {
        if (p[0] == ' ') {
            p++;
            (*len)--;
        }
        *strip = 0;
    }
    return p;
}

int tokenizer_decode(const tokenizer *t, const int32_t *ids, int n, unsigned flags, char *out,
                     size_t cap) {
    size_t total = 0;
    if (!t || n < 0 || (n > 0 && !ids) || (!out && cap > 0)) return -EINVAL;
    int strip = (flags & TOK_DECODE_FROM_START) && t->add_space_prefix;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->n) return -EINVAL;
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *p = visible_piece(t, ids[i], flags, &strip, &len);
        if (total + len < cap)
            memcpy(out + total, p, len);
        else if (total < cap)
            memcpy(out + total, p, cap - total);
        total += len;
    }
    if (cap > 0) out[total < cap ? total : cap - 1] = '\0';
    return total > (size_t)INT32_MAX ? -EOVERFLOW : (int)total;
}

struct tok_stream {
    const tokenizer *tok;
    unsigned flags;
    int strip;
    uint8_t held[4]; /* start of a character whose remaining bytes have not arrived yet */
    size_t n_held;
    uint8_t *work, *out; /* held + piece, and what is ready (each bad byte may become 3) */
    int32_t shown[TOK_STREAM_MAX_SHOWN]; /* control tokens rendered as their text */
    int n_shown;
};

int tok_stream_show(tok_stream *s, int32_t id) {
    if (id < 0 || id >= s->tok->n) return -EINVAL;
    if (s->n_shown == TOK_STREAM_MAX_SHOWN) return -E2BIG;
    s->shown[s->n_shown++] = id;
    return 0;
}

static unsigned stream_flags(const tok_stream *s, int32_t id) {
    for (int i = 0; i < s->n_shown; i++)
        if (s->shown[i] == id) return s->flags | TOK_DECODE_SPECIAL;
    return s->flags;
}

tok_stream *tok_stream_new(const tokenizer *tok, unsigned flags) {
    tok_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->tok = tok;
    s->flags = flags;
    s->strip = (flags & TOK_DECODE_FROM_START) && tok->add_space_prefix;
    s->work = malloc(tok->max_piece + 8);
    s->out = malloc(3 * (tok->max_piece + 8));
    if (!s->work || !s->out) {
        tok_stream_free(s);
        return NULL;
    }
    return s;
}

void tok_stream_free(tok_stream *s) {
    if (!s) return;
    free(s->work);
    free(s->out);
    free(s);
}

static const uint8_t k_replacement[3] = {0xEF, 0xBF, 0xBD};

int tok_stream_push(tok_stream *s, int32_t id, const char **text, size_t *len) {
    *text = (const char *)s->out;
    *len = 0;
    if (id < 0 || id >= s->tok->n) return -EINVAL;
    size_t pl, n = s->n_held, o = 0;
    const char *p = visible_piece(s->tok, id, stream_flags(s, id), &s->strip, &pl);
    memcpy(s->work, s->held, n);
    memcpy(s->work + n, p, pl);
    n += pl;
    s->n_held = 0;
    for (size_t i = 0; i < n;) {
        int k = utf8_check(s->work + i, n - i);
        if (k > 0) {
            memcpy(s->out + o, s->work + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else if (k == 0) { /* a character cut at the end of this token: wait for the rest */
            memcpy(s->held, s->work + i, n - i);
            s->n_held = n - i;
            break;
        } else {
            memcpy(s->out + o, k_replacement, 3);
            o += 3;
            i++;
        }
    }
    *len = o;
    return 0;
}

void tok_stream_flush(tok_stream *s, const char **text, size_t *len) {
    *text = (const char *)s->out;
    *len = 0;
    if (s->n_held > 0) {
        memcpy(s->out, k_replacement, 3);
        *len = 3;
        s->n_held = 0;
    }
}
