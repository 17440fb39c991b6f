/* bench_grammar: what structured outputs cost. Compiles a typical tool-call schema (router side:
 * JSON Schema -> GBNF; worker side: GBNF -> matcher) and times it; then walks the schema's
 * grammar through the model's real vocabulary, choosing uniformly among allowed tokens (a random
 * model's worst case: strings wander), and times the mask + accept per token, separating masks
 * computed from masks served by the cache. With --batch, the engine itself: decode time per token
 * of B sequences sampling at temperature 1, without and with the grammar (an array of tool
 * calls, so it never has to end), interleaved over --rounds: the overhead as the engine sees it. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "backend.h"
#include "clock.h"
#include "engine.h"
#include "log.h"
#include "model.h"
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

/* Pattern-heavy: regexes on most fields (issue 31's cost table). */
static const char k_pattern_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"sku\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]{4}(-[a-z]{2})?$\"},"
    "\"phone\":{\"type\":\"string\",\"pattern\":\"^\\\\+?[0-9]{1,3}( [0-9]{2,4}){2,4}$\"},"
    "\"slug\":{\"type\":\"string\",\"pattern\":\"^[a-z0-9]+(-[a-z0-9]+){0,5}$\"},"
    "\"hex\":{\"type\":\"string\",\"pattern\":\"^#[0-9a-fA-F]{6}$\"},"
    "\"note\":{\"type\":\"string\",\"maxLength\":40}},"
    "\"required\":[\"sku\",\"phone\",\"slug\",\"hex\",\"note\"],"
    "\"additionalProperties\":false}";

/* Format-heavy: what zod's helpers write for uuid, email, date-time, bounded numbers. */
static const char k_format_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
    "\"email\":{\"type\":\"string\",\"format\":\"email\"},"
    "\"at\":{\"type\":\"string\",\"format\":\"date-time\"},"
    "\"ip\":{\"type\":\"string\",\"format\":\"ipv4\"},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"score\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1},"
    "\"count\":{\"type\":\"integer\"}},"
    "\"required\":[\"id\",\"email\",\"at\",\"ip\",\"age\",\"score\",\"count\"],"
    "\"additionalProperties\":false}";

/* --schema's choices, one table. */
static const struct {
    const char *name, *text;
} k_schemas[] = {
    {"tool", k_tool_schema}, {"pattern", k_pattern_schema}, {"format", k_format_schema}};

typedef struct walk_stats {
    double ms_per_token;
    int docs, masks;
    uint64_t computed; /* masks walked over the trie (the rest came from a cache) */
} walk_stats;

static uint64_t xorshift(uint64_t *r) {
    *r ^= *r << 13, *r ^= *r >> 7, *r ^= *r << 17;
    return *r;
}

/* Walks `tokens` tokens of documents of the grammar as a random model at temperature 1 would
 * (uniform over the vocabulary): mask first, or a uniform draw tried first and the mask only when
 * the grammar refuses it. Times the grammar work only. */
static walk_stats walk(const strbuf *gb, const grammar_vocab *v, const tokenizer *tok, int tokens,
                       int sample_first, grammar_cache *shared, uint64_t seed) {
    int32_t n = tokenizer_n_vocab(tok);
    float *logits = malloc(sizeof(float) * (size_t)n);
    int32_t *allowed = malloc(sizeof(int32_t) * (size_t)n);
    uint64_t rng = seed, ns = 0;
    walk_stats w = {0};
    sol_err e = {0};
    grammar *gr = grammar_new(gb->data, gb->len, v, &e);
    if (gr && shared) grammar_use_cache(gr, shared);
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
        if (tokenizer_is_eog(tok, t) || walked + 1 == tokens) { /* a document ended */
            uint64_t computed, cached;
            grammar_counters(gr, &computed, &cached);
            w.computed += computed;
            if (walked + 1 == tokens) break;
            grammar_free(gr);
            gr = grammar_new(gb->data, gb->len, v, &e);
            if (gr && shared) grammar_use_cache(gr, shared);
            w.docs++;
        }
    }
    grammar_free(gr);
    free(logits), free(allowed);
    w.ms_per_token = ns / 1e6 / tokens;
    return w;
}

/* ---- through the engine ---- */

typedef struct erec {
    uint64_t t_first, t_last;
    int n_out, done;
} erec;

static void on_event(void *ctx, const engine_event *ev) {
    (void)ctx;
    erec *r = ev->user;
    if (ev->kind == ENGINE_EV_TOKEN) {
        r->t_last = sol_now_ns();
        if (!r->n_out++) r->t_first = r->t_last;
    } else {
        if (ev->finish == ENGINE_FINISH_ERROR) fprintf(stderr, "request failed: %s\n", ev->error);
        r->done = 1;
    }
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median ms per token after the first over `batch` sequences decoding together. */
static double engine_tpot(model *m, tokenizer *tok, int batch, int steps, const char *gbnf) {
    engine_config c = engine_config_default();
    c.max_num_seqs = batch;
    c.num_blocks = 1024;
    c.max_model_len = 512;
    c.prefix_caching = false;
    c.on_event = on_event;
    sol_err e = {0};
    engine *eng = engine_new(&c, m, tok, &e);
    if (!eng) return fprintf(stderr, "engine_new: %s\n", e.msg), -1;
    erec *r = calloc((size_t)batch, sizeof *r);
    double *tpot = calloc((size_t)batch, sizeof *tpot);
    int32_t prompt[32];
    for (int i = 0; i < batch; i++) {
        for (int j = 0; j < 32; j++)
            prompt[j] = 3 + (i * 131 + j * 7) % 1000;
        engine_request q = {0};
        q.prompt_tokens = prompt;
        q.n_prompt_tokens = 32;
        q.sampling = sampler_params_default();
        q.sampling.temperature = 1.0f;
        q.sampling.seed = 100 + (uint64_t)i, q.sampling.has_seed = true;
        q.max_tokens = steps;
        q.ignore_eos = true;
        q.grammar = gbnf;
        q.user = &r[i];
        if (engine_submit(eng, &q, &e) < 0) return fprintf(stderr, "submit: %s\n", e.msg), -1;
    }
    engine_wait_idle(eng);
    int n = 0;
    for (int i = 0; i < batch; i++)
        if (r[i].n_out > 1) tpot[n++] = (r[i].t_last - r[i].t_first) / 1e6 / (r[i].n_out - 1);
    qsort(tpot, (size_t)n, sizeof *tpot, cmp_d);
    double med = n ? tpot[n / 2] : -1;
    engine_free(eng);
    free(r), free(tpot);
    return med;
}

static int run_engine(const char *path, int threads, const char *batches, int steps, int rounds,
                      const char *gbnf) {
    sol_err e = {0};
    sol_backend *be = sol_backend_new(NULL, &(sol_backend_opts){.threads = threads}, &e);
    model *m = be ? model_load(path, 0, be, &e) : NULL;
    tokenizer *tok = m ? tokenizer_from_gguf(model_gguf(m), &e) : NULL;
    if (!tok) return fprintf(stderr, "bench_grammar: %s\n", e.msg), 1;
    for (const char *b = batches; *b;) {
        int batch = atoi(b);
        double plain[64], constrained[64], ratio[64];
        if (rounds > 64) rounds = 64;
        for (int r = 0; r < rounds; r++) { /* interleaved: noise hits both alike */
            plain[r] = engine_tpot(m, tok, batch, steps, NULL);
            constrained[r] = engine_tpot(m, tok, batch, steps, gbnf);
            ratio[r] = constrained[r] / plain[r];
        }
        qsort(plain, (size_t)rounds, sizeof *plain, cmp_d);
        qsort(constrained, (size_t)rounds, sizeof *constrained, cmp_d);
        qsort(ratio, (size_t)rounds, sizeof *ratio, cmp_d);
        printf("engine, batch %d, medians of %d interleaved rounds: %.3f ms per token plain, "
               "%.3f ms with the grammar; per-round ratio %+.1f%% (min %+.1f%%, max %+.1f%%)\n",
               batch, rounds, plain[rounds / 2], constrained[rounds / 2],
               100 * (ratio[rounds / 2] - 1), 100 * (ratio[0] - 1), 100 * (ratio[rounds - 1] - 1));
        while (*b && *b != ',')
            b++;
        if (*b == ',') b++;
    }
    tokenizer_free(tok);
    model_free(m);
    sol_backend_free(be);
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: bench_grammar -m MODEL.gguf [-n|--tokens N] [--schema tool|pattern|format]\n"
               "                     [--batch B,B.. [--steps N] [--rounds R] [--threads T]]\n"
               "Times compiling a schema (--schema: the typical tool call, default; regexes on "
               "most fields; uuid/email/date-time/ipv4 formats and bounded numbers) and the "
               "grammar mask per token over the model's vocabulary (tokens: how many to walk, "
               "default 2000). --batch: decode ms per token through the engine at each batch "
               "size, without and with the grammar (steps per sequence, default 48; rounds "
               "interleaved, default 2).\n");
}

/* --schema NAME: one of k_schemas. */
static int pick_schema(const char *v, void *ctx, sol_err *err) {
    for (size_t i = 0; i < sizeof k_schemas / sizeof k_schemas[0]; i++)
        if (!strcmp(v, k_schemas[i].name)) return *(const char **)ctx = k_schemas[i].text, 0;
    return sol_err_set(err, -EINVAL, "--schema: tool, pattern or format, not '%s'", v);
}

int main(int argc, char **argv) {
    const char *model = NULL, *batches = NULL, *schema_text = NULL;
    int tokens = 2000, steps = 48, rounds = 2, threads = 0, help = 0;
    const sol_arg args[] = {
        {"--model", 'm', SOL_ARG_STR, &model, 0, 0, 0, NULL, NULL, NULL},
        {"--tokens", 'n', SOL_ARG_INT, &tokens, 1, 1 << 24, 0, NULL, NULL, NULL},
        {"--batch", 'b', SOL_ARG_STR, &batches, 0, 0, 0, NULL, NULL, NULL},
        {"--steps", 's', SOL_ARG_INT, &steps, 1, 1 << 20, 0, NULL, NULL, NULL},
        {"--rounds", 'r', SOL_ARG_INT, &rounds, 1, 64, 0, NULL, NULL, NULL},
        {"--threads", 't', SOL_ARG_INT, &threads, 0, 4096, 0, NULL, NULL, NULL},
        {"--schema", 'S', SOL_ARG_FN, NULL, 0, 0, 0, pick_schema, &schema_text, NULL},
        {"--help", 'h', SOL_ARG_SWITCH, &help, 0, 0, 0, NULL, NULL, NULL},
    };
    sol_err ae = {0};
    int npos = sol_args_parse(args, sizeof args / sizeof args[0], argc, argv, &ae);
    if (npos < 0) return fprintf(stderr, "bench_grammar: %s\n", ae.msg), 2;
    if (help) return usage(stdout), 0;
    if (npos > 0) return fprintf(stderr, "bench_grammar: unexpected argument '%s'\n", argv[1]), 2;
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
    json_t *schema = json_loads(schema_text ? schema_text : k_tool_schema, 0, NULL);
    if (!schema) return fprintf(stderr, "bench_grammar: the built-in schema does not parse\n"), 1;
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
    printf("schema -> GBNF -> matcher: %.3f ms (best of 20), %zu bytes of GBNF\n", best, gb.len);
    for (int sample_first = 0; sample_first < 2; sample_first++) {
        walk_stats w = walk(&gb, v, tok, tokens, sample_first, NULL, 12345);
        printf("%s: %.3f ms per token over %d tokens (%d documents finished, %d masks, %llu "
               "walked)\n",
               sample_first ? "sample first, masks cached per request (cold)"
                            : "mask first (every token), masks cached per request",
               w.ms_per_token, tokens, w.docs, w.masks, (unsigned long long)w.computed);
    }
    /* The engine's way: sample first, masks shared by every request of the schema. The worker
     * has served the schema before (one walk of other documents), as a server does. */
    grammar_cache *shared = grammar_cache_new(v, (size_t)32 << 20, &e);
    if (!shared) return fprintf(stderr, "bench_grammar: %s\n", e.msg), 1;
    walk(&gb, v, tok, tokens, 1, shared, 777);
    walk_stats w = walk(&gb, v, tok, tokens, 1, shared, 12345);
    printf("sample first, masks shared across requests (warm; the engine's way): %.3f ms per "
           "token over %d tokens (%d documents finished, %d masks, %llu walked)\n",
           w.ms_per_token, tokens, w.docs, w.masks, (unsigned long long)w.computed);
    grammar_cache_free(shared);
    if (batches) { /* the engine: an array of tool calls, so the grammar never has to end */
        json_t *arr = json_pack("{s:s, s:O}", "type", "array", "items", schema);
        strbuf ab;
        strbuf_init(&ab);
        if (gg_json_schema(arr, &ab, &e)) return fprintf(stderr, "bench_grammar: %s\n", e.msg), 1;
        sol_log_setup(SOL_LOG_WARN, 0, "bench");
        int rc = run_engine(model, threads, batches, steps, rounds, ab.data);
        strbuf_free(&ab);
        json_decref(arr);
        if (rc) return rc;
    }
    strbuf_free(&gb);
    json_decref(schema);
    grammar_vocab_free(v);
    tokenizer_free(tok);
    gguf_close(g);
    return 0;
}
