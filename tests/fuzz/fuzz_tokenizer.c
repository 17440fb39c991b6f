/* fuzz_tokenizer: arbitrary bytes through a SentencePiece (llama) tokenizer of a generated
 * 2,000-piece vocabulary - every id in range, never a crash or leak - and text that is valid
 * UTF-8 comes back byte for byte from its ids (byte tokens cover what no piece does), unless it
 * holds SPM's space mark U+2581 itself, which reads back as a space (as in llama.cpp). The first
 * byte of the input chooses whether control-token spellings ("<s>") are parsed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "utf8.h"
#include "vocab_gen.h"

static tokenizer *make(void) {
    sol_err e = {0};
    vocab_gen *v = vocab_gen_new(2000, &e);
    if (!v) abort();
    tok_vocab_desc d = tok_vocab_desc_init();
    d.model = "llama";
    d.n_tokens = (int32_t)v->n;
    d.tokens = (const char *const *)v->pieces;
    d.scores = v->scores;
    d.types = v->types;
    d.bos = VOCAB_GEN_BOS, d.eos = VOCAB_GEN_EOS, d.unk = VOCAB_GEN_UNK;
    tokenizer *t = tokenizer_new(&d, &e);
    vocab_gen_free(v);
    if (!t) abort();
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static tokenizer *tok; /* built once: the fuzzer calls this millions of times */
    if (!tok) tok = make();
    if (size == 0) return 0;
    int parse_special = data[0] & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t small[64];
    int n = tokenizer_encode(tok, text, len, 0, parse_special, small, 64);
    if (n < 0) abort();
    int32_t *ids = n > 64 ? malloc(sizeof *ids * (size_t)n) : small;
    if (!ids) return 0;
    if (n > 64 && tokenizer_encode(tok, text, len, 0, parse_special, ids, n) != n) abort();
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tokenizer_n_vocab(tok)) abort();
    size_t cap = len * 4 + 16;
    char *out = malloc(cap);
    int m = out ? tokenizer_decode(tok, ids, n, TOK_DECODE_FROM_START, out, cap) : 0;
    if (m < 0 || (size_t)m >= cap) abort();
    /* valid UTF-8 without control spellings parsed comes back as it went in */
    if (!parse_special && utf8_valid_prefix(text, len) == len && memchr(text, 0, len) == NULL &&
        !memmem(text, len, "\xe2\x96\x81", 3) && /* SPM's own space mark reads back as ' ' */
        ((size_t)m != len || memcmp(out, text, len))) {
        fprintf(stderr, "round trip: %zu bytes in, %d out\n", len, m);
        abort();
    }
    free(out);
    if (ids != small) free(ids);
    return 0;
}
