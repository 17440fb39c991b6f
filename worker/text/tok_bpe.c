/* tok_bpe: byte-level BPE as llama.cpp runs it for tokenizer.ggml.model = "gpt2". The text is
 * split into words by the pre-tokenizer regex, each word's bytes are mapped to GPT-2's printable
 * byte alphabet, then adjacent symbols merge by merge rank (lowest first, leftmost on ties). */
#include <errno.h>
#include <string.h>

#include "tok_internal.h"
#include "utf8.h"

static int try_bigram(const tokenizer *t, tok_scratch *sc, const char *w, int32_t left,
                      int32_t right) {
    if (left < 0 || right < 0) return 0;
    const tok_symbol *l = &sc->sym[left], *r = &sc->sym[right];
    int32_t rank = tok_map_find2(&t->merges, w + l->off, l->n, ' ', w + r->off, r->n);
    if (rank < 0) return 0;
    tok_bigram b = {-(float)rank, left, right, l->n + r->n};
    return tok_heap_push(sc, b);
}

static void emit_symbol(const tokenizer *t, const char *s, size_t n, tok_sink *sink) {
    int32_t id = tok_map_find2(&t->tokens, s, n, 0, "", 0);
    if (id >= 0) {
        tok_sink_push(sink, id);
        return;
    }
    /* No token for the merged text (a vocab without every byte): llama.cpp then tries each
     * single byte of it as a token and drops the ones that are not. */
    for (size_t i = 0; i < n; i++) {
        id = tok_map_find2(&t->tokens, s + i, 1, 0, "", 0);
        if (id >= 0) tok_sink_push(sink, id);
    }
}

/* Merge one byte-encoded word w[0..n) and emit its tokens. */
static int encode_word(const tokenizer *t, const char *w, size_t n, tok_scratch *sc,
                       tok_sink *sink) {
    if (t->ignore_merges) {
        int32_t id = tok_map_find2(&t->tokens, w, n, 0, "", 0);
        if (id >= 0) {
            tok_sink_push(sink, id);
            return 0;
        }
    }
    int32_t count = 0;
    for (size_t off = 0; off < n; count++) {
        size_t cl = utf8_lead_len((uint8_t)w[off]);
        if (cl > n - off) cl = n - off;
        sc->sym[count] =
            (tok_symbol){count - 1, off + cl == n ? -1 : count + 1, (uint32_t)off, (uint32_t)cl};
        off += cl;
    }
    sc->n_heap = 0;
    for (int32_t i = 1; i < count; i++)
        if (try_bigram(t, sc, w, i - 1, i) != 0) return -ENOMEM;
    tok_bigram b;
    while (tok_heap_pop(sc, &b)) {
        const tok_symbol *l = &sc->sym[b.left], *r = &sc->sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        tok_symbols_merge(sc->sym, &b);
        if (try_bigram(t, sc, w, sc->sym[b.left].prev, b.left) != 0 ||
            try_bigram(t, sc, w, b.left, sc->sym[b.left].next) != 0)
            return -ENOMEM;
    }
    for (int32_t i = 0; i != -1; i = sc->sym[i].next)
        emit_symbol(t, w + sc->sym[i].off, sc->sym[i].n, sink);
    return 0;
}

int tok_bpe_encode(const tokenizer *t, const char *text, size_t len, tok_scratch *sc,
                   tok_sink *sink) {
    const uint8_t *s = (const uint8_t *)text;
    size_t n = 0;
    if (len == 0) return 0;
    if (tok_scratch_cpts(sc, len) != 0) return -ENOMEM;
    for (size_t pos = 0; pos < len;)
        sc->cpts[n++] = utf8_decode(s, len, &pos);
    size_t n_words = pretok_split(t->pre, sc->cpts, n, sc->ends);
    size_t start = 0, longest = 0;
    for (size_t w = 0; w < n_words; w++) {
        if (sc->ends[w] - start > longest) longest = sc->ends[w] - start;
        start = sc->ends[w];
    }
    /* each code point is at most 4 bytes, each byte at most 2 bytes once mapped */
    if (tok_scratch_bytes(sc, 8 * longest) != 0 || tok_scratch_sym(sc, 8 * longest) != 0)
        return -ENOMEM;
    start = 0;
    for (size_t w = 0; w < n_words; w++) {
        size_t o = 0;
        for (size_t i = start; i < sc->ends[w]; i++) {
            uint8_t raw[4];
            size_t k = utf8_encode(sc->cpts[i], raw);
            for (size_t j = 0; j < k; j++) {
                memcpy(sc->bytes + o, t->byte_utf8[raw[j]], t->byte_utf8_len[raw[j]]);
                o += t->byte_utf8_len[raw[j]];
            }
        }
        start = sc->ends[w];
        if (encode_word(t, sc->bytes, o, sc, sink) != 0) return -ENOMEM;
    }
    return 0;
}
