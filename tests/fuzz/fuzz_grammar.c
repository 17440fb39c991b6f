/* fuzz_grammar: arbitrary bytes as a structured-output constraint must compile or fail with a
 * message - never crash, hang or leak. The input is a JSON Schema when it parses as JSON (compiled
 * to GBNF by the router, then by the worker's parser and matcher, and walked a few bytes), else a
 * regex (the same path) and a GBNF grammar itself. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gbnf.h"
#include "grammar.h"
#include "grammar_gen.h"
#include "strbuf.h"

/* Compile GBNF text with a byte vocabulary and take a few steps through the allowed tokens. */
static void run(const char *gbnf_text, size_t len) {
    static const grammar_vocab *v; /* built once per process: 256 bytes + end of generation */
    if (!v) {
        static char bytes[256];
        static const char *piece[257];
        static size_t plen[257];
        static uint8_t kind[257];
        for (int i = 0; i < 256; i++)
            bytes[i] = (char)i, piece[i] = &bytes[i], plen[i] = 1;
        piece[256] = "", kind[256] = 1;
        sol_err e = {0};
        v = grammar_vocab_new(257, piece, plen, kind, &e);
        if (!v) return;
    }
    sol_err e = {0};
    grammar *g = grammar_new(gbnf_text, len, v, &e);
    if (!g) return;
    float logits[257];
    for (int step = 0; step < 8; step++) {
        memset(logits, 0, sizeof logits);
        if (grammar_apply(g, logits, &e)) break;
        int32_t t = -1;
        for (int i = 0; i < 257 && t < 0; i++)
            if (logits[(i * 97 + step) % 257] == 0) t = (i * 97 + step) % 257;
        if (t < 0 || t == 256 || grammar_accept(g, t, &e)) break;
    }
    grammar_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    strbuf out;
    strbuf_init(&out);
    sol_err e = {0};
    json_error_t je;
    json_t *schema = json_loadb(text, size, 0, &je);
    if (schema && gg_json_schema(schema, &out, &e) == 0) run(out.data, out.len);
    json_decref(schema);
    strbuf_reset(&out);
    if (gg_regex(text, &out, &e) == 0) run(out.data, out.len);
    run(text, size);
    strbuf_free(&out);
    free(text);
    return 0;
}
