/* tok_spm: SentencePiece-style BPE as llama.cpp runs it for tokenizer.ggml.model = "llama".
 * Spaces become U+2581 ("▁"), a dummy "▁" is prepended to the first fragment, then adjacent
 * symbols merge by the score of the merged piece (highest first, leftmost on ties). A character
 * no token covers is spelled with <0xXX> byte tokens, one per UTF-8 byte. */
#include <errno.h>
#include <string.h>

#include "tok_internal.h"
#include "utf8.h"

static const char k_space_mark[3] = {(char)0xE2, (char)0x96, (char)0x81};

/* Copy text with ' ' -> "▁" (and the optional leading "▁") into the scratch bytes. */
static int escape_spaces(const char *text, size_t len, int space_prefix, tok_scratch *sc,
                         size_t *out_len) {
    if (tok_scratch_bytes(sc, 3 * len + 3) != 0) return -ENOMEM;
    size_t o = 0;
    if (space_prefix) {
        memcpy(sc->bytes, k_space_mark, 3);
        o = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(sc->bytes + o, k_space_mark, 3);
            o += 3;
        } else {
            sc->bytes[o++] = text[i];
        }
    }
    *out_len = o;
    return 0;
}

static int try_bigram(const tokenizer *t, tok_scratch *sc, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    const tok_symbol *l = &sc->sym[left], *r = &sc->sym[right];
    int32_t id = tok_map_find2(&t->tokens, sc->bytes + l->off, l->n + r->n, 0, "", 0);
    if (id < 0) return 0;
    tok_bigram b = {t->scores ? t->scores[id] : 0.0f, left, right, l->n + r->n};
    return tok_heap_push(sc, b);
}

static void emit_symbol(const tokenizer *t, const char *s, size_t n, tok_sink *sink) {
    int32_t id = tok_map_find2(&t->tokens, s, n, 0, "", 0);
    if (id >= 0) {
        tok_sink_push(sink, id);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        int32_t b = t->byte_tok[(uint8_t)s[i]];
        if (b >= 0) tok_sink_push(sink, b);
    }
}

int tok_spm_encode(const tokenizer *t, const char *text, size_t len, int space_prefix,
                   tok_scratch *sc, tok_sink *sink) {
    size_t n;
    if (escape_spaces(text, len, space_prefix, sc, &n) != 0) return -ENOMEM;
    if (n == 0) return 0;
    if (tok_scratch_sym(sc, n) != 0) return -ENOMEM;
    int32_t count = 0;
    for (size_t off = 0; off < n; count++) {
        size_t cl = utf8_lead_len((uint8_t)sc->bytes[off]);
        if (cl > n - off) cl = n - off;
        sc->sym[count] =
            (tok_symbol){count - 1, off + cl == n ? -1 : count + 1, (uint32_t)off, (uint32_t)cl};
        off += cl;
    }
    sc->n_heap = 0;
    for (int32_t i = 1; i < count; i++)
        if (try_bigram(t, sc, i - 1, i) != 0) return -ENOMEM;
    tok_bigram b;
    while (tok_heap_pop(sc, &b)) {
        const tok_symbol *l = &sc->sym[b.left], *r = &sc->sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        tok_symbols_merge(sc->sym, &b);
        if (try_bigram(t, sc, sc->sym[b.left].prev, b.left) != 0 ||
            try_bigram(t, sc, b.left, sc->sym[b.left].next) != 0)
            return -ENOMEM;
    }
    for (int32_t i = 0; i != -1; i = sc->sym[i].next)
        emit_symbol(t, sc->bytes + sc->sym[i].off, sc->sym[i].n, sink);
    return 0;
}
