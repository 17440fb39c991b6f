/* bench_grammar: what structured outputs cost. Compiles a typical tool-call schema (router side:
 * JSON Schema -> GBNF; worker side: GBNF -> matcher) and times it; then walks the schema's
 * grammar through the model's real vocabulary, choosing uniformly among allowed tokens (a random
 * model's worst case: strings wander), and times the mask + accept per token, separating masks
 * computed from masks served by the cache. Compare with bench_decode's ms per step on the same
 * model: the overhead at batch B is B x (mask time) / (step time). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "engine.h"
#include "gguf.h"
#include "grammar.h"
#include "grammar_gen.h"
#include "tokenizer.h"

static const char k_tool_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"const\":\"get_weather\"},"
    "\"arguments\":{\"type\":\"object\",\"properties\":{"
    "\"location\":{\"type\":\"string\",\"maxLength\":40},"
    "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]},"
    "\"days\":{\"type\":\"integer\"},"
    "\"include\":{\"type\":\"array\",\"items\":{\"enum\":[\"wind\",\"rain\",\"uv\"]},"
    "\"maxItems\":3}},\"required\":[\"location\",\"unit\"],\"additionalProperties\":false}},"
    "\"required\":[\"name\",\"arguments\"]}";

typedef struct walk_stats {
    double ms_per_token;
    int docs, masks;
} walk_stats;

static uint64_t xorshift(uint64_t *r) {
    *r ^= *r << 13, *r ^= *r >> 7, *r ^= *r << 17;
    return *r;
}

/* Walks `tokens` tokens of documents of the grammar as a random model at temperature 1 would
 * (uniform over the vocabulary): mask first, or a uniform draw tried first and the mask only when
 * the grammar refuses it. Times the grammar work only. */
static walk_stats walk(const strbuf *gb, const grammar_vocab *v, const tokenizer *tok, int tokens,
                       int sample_first) {
    int32_t n = tokenizer_n_vocab(tok);
    float *logits = malloc(sizeof(float) * (size_t)n);
    int32_t *allowed = malloc(sizeof(int32_t) * (size_t)n);
    uint64_t rng = 12345, ns = 0;
    walk_stats w = {0};
    sol_err e = {0};
    grammar *gr = grammar_new(gb->data, gb->len, v, &e);
    for (int walked = 0; walked < tokens && gr; walked++) {
        uint64_t a = sol_now_ns();
        int32_t t = (int32_t)(xorshift(&rng) % (uint64_t)n);
        if (!sample_first || grammar_accept(gr, t, &e)) {
            memset(logits, 0, sizeof(float) * (size_t)n);
            grammar_apply(gr, logits, &e);
            w.masks++;
            int k = 0;
            for (int32_t i = 0; i < n; i++)
                if (logits[i] == 0) allowed[k++] = i;
            t = allowed[xorshift(&rng) % (uint64_t)k];
            grammar_accept(gr, t, &e);
        }
        ns += sol_now_ns() - a;
        if (tokenizer_is_eog(tok, t)) { /* a document ended: start the next */
            grammar_free(gr);
            gr = grammar_new(gb->data, gb->len, v, &e);
            w.docs++;
        }
    }
    grammar_free(gr);
    free(logits), free(allowed);
    w.ms_per_token = ns / 1e6 / tokens;
    return w;
}

int main(int argc, char **argv) {
    const char *model = NULL;
    int tokens = 2000;
    static const struct option longs[] = {
        {"model", 1, 0, 'm'}, {"tokens", 1, 0, 'n'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "m:n:h", longs, NULL)) != -1;) {
        if (c == 'm')
            model = optarg;
        else if (c == 'n')
            tokens = atoi(optarg);
        else {
            printf("usage: bench_grammar -m MODEL.gguf [-n|--tokens N]\n"
                   "Times compiling a tool-call schema and the grammar mask per token over the "
                   "model's vocabulary (tokens: how many to walk, default 2000).\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (!model || tokens < 1) return fprintf(stderr, "bench_grammar: -m MODEL.gguf needed\n"), 2;
    sol_err e = {0};
    gguf_file *g = gguf_open(model, 0, &e);
    tokenizer *tok = g ? tokenizer_from_gguf(g, &e) : NULL;
    if (!tok) return fprintf(stderr, "bench_grammar: %s\n", e.msg), 1;
    double t0 = sol_now_ns() / 1e6;
    grammar_vocab *v = engine_grammar_vocab_new(tok, &e);
    if (!v) return fprintf(stderr, "bench_grammar: %s\n", e.msg), 1;
    printf("vocabulary: %d tokens, trie built in %.1f ms\n", tokenizer_n_vocab(tok),
           sol_now_ns() / 1e6 - t0);
    json_t *schema = json_loads(k_tool_schema, 0, NULL);
    double best = 1e9;
    strbuf gb;
    for (int rep = 0; rep < 20; rep++) {
        strbuf_init(&gb);
        t0 = sol_now_ns() / 1e6;
        grammar *gr = NULL;
        if (gg_json_schema(schema, &gb, &e) || !(gr = grammar_new(gb.data, gb.len, v, &e)))
            return fprintf(stderr, "bench_grammar: %s\n", e.msg), 1;
        double ms = sol_now_ns() / 1e6 - t0;
        best = ms < best ? ms : best;
        grammar_free(gr);
        if (rep < 19) strbuf_free(&gb);
    }
    printf("tool schema -> GBNF -> matcher: %.3f ms (best of 20), %zu bytes of GBNF\n", best,
           gb.len);
    for (int sample_first = 0; sample_first < 2; sample_first++) {
        walk_stats w = walk(&gb, v, tok, tokens, sample_first);
        printf("%s: %.3f ms per token over %d tokens (%d documents finished, %d full masks)\n",
               sample_first ? "sample first (the engine's way: a uniform draw tried, the mask "
                              "only when refused)"
                            : "mask first (every token)",
               w.ms_per_token, tokens, w.docs, w.masks);
    }
    strbuf_free(&gb);
    json_decref(schema);
    grammar_vocab_free(v);
    tokenizer_free(tok);
    gguf_close(g);
    return 0;
}
