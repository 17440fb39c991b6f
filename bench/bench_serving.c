/* bench_serving: offline serving benchmark through the engine API - throughput, TTFT, TPOT, KV
 * use, preemptions and scheduler overhead - with modes for the three serving claims:
 *   load       N requests, prompt/output lengths uniform in ranges, Poisson arrivals (--rate)
 *   batch      aggregate decode tok/s at --concurrency sequences vs one sequence (ratio)
 *   prefix     1,024-token shared system prompt: TTFT of later requests / first, cache on vs off
 *   overhead   scheduler time per step as % of step time at --concurrency (64) sequences
 *   spec       decode tok/s at --concurrency sequences without and with speculative decoding
 *              (--draft-model FILE or --spec ngram, --spec-k K, --spec-adaptive), interleaved
 *              over --rounds rounds; acceptance and tokens per verify step
 * The speculative options also apply to the other modes. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "backend.h"
#include "clock.h"
#include "engine.h"
#include "gguf.h"
#include "log.h"
#include "model.h"
#include "strbuf.h"
#include "tokenizer.h"

typedef struct opts {
    const char *model, *mode;
    const char *backend; /* registry spec; NULL = cpu */
    int n, pmin, pmax, omin, omax, threads, conc, max_seqs, max_tokens, num_blocks;
    double rate;
    engine_spec_method spec;
    model *draft;
    const char *draft_path;
    int spec_k, spec_adaptive, rounds, no_mmap;
    const char *prompt_file; /* batch/spec prompts: windows of this text (a real model's) */
    int32_t *text_ids;
    int n_text_ids;
} opts;

typedef struct rec {
    uint64_t t_submit, t_first, t_last;
    int n_out, done;
} rec;

static void on_event(void *ctx, const engine_event *ev) {
    (void)ctx;
    rec *r = ev->user;
    uint64_t now = sol_now_ns();
    if (ev->kind == ENGINE_EV_TOKEN) {
        if (!r->n_out) r->t_first = now;
        r->t_last = now;
        r->n_out++;
    } else {
        if (ev->finish == ENGINE_FINISH_ERROR) fprintf(stderr, "request failed: %s\n", ev->error);
        r->done = 1;
    }
}

static engine *start(const opts *o, model *m, bool cache, int max_seqs) {
    engine_config c = engine_config_default();
    c.max_num_seqs = max_seqs;
    c.max_batched_tokens = o->max_tokens > max_seqs ? o->max_tokens : max_seqs;
    c.num_blocks = o->num_blocks;
    c.max_model_len = model_get_hparams(m)->ctx_len;
    c.prefix_caching = cache;
    c.spec_method = o->spec;
    c.draft_model = o->draft;
    c.spec_k = o->spec_k;
    c.spec_adaptive = o->spec_adaptive;
    /* Fixed k: every sequence speculates. Adaptive: the engine's policy (and its default). */
    if (!o->spec_adaptive) c.spec_max_batch = max_seqs;
    c.on_event = on_event;
    sol_err e = {0};
    engine *eng = engine_new(&c, m, NULL, &e);
    if (!eng) fprintf(stderr, "engine_new: %s\n", e.msg);
    return eng;
}

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void submit(engine *eng, const int32_t *prompt, int n_prompt, int max_out, rec *r) {
    engine_request q = {0};
    q.prompt_tokens = prompt;
    q.n_prompt_tokens = n_prompt;
    q.sampling = sampler_params_default();
    q.sampling.temperature = 0;
    q.max_tokens = max_out;
    q.ignore_eos = true;
    q.user = r;
    r->t_submit = sol_now_ns();
    sol_err e = {0};
    if (engine_submit(eng, &q, &e) < 0) {
        fprintf(stderr, "submit: %s\n", e.msg);
        r->done = 1;
    }
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p) {
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int i = (int)ceil(p / 100.0 * n) - 1;
    return v[i < 0 ? 0 : i];
}

static void report(const char *label, engine *eng, rec *r, int n, double wall_s) {
    double *ttft = calloc((size_t)n, sizeof *ttft), *tpot = calloc((size_t)n, sizeof *tpot);
    long tokens = 0;
    int nt = 0;
    for (int i = 0; i < n; i++) {
        tokens += r[i].n_out;
        ttft[i] = (r[i].t_first - r[i].t_submit) / 1e6;
        if (r[i].n_out > 1) tpot[nt++] = (r[i].t_last - r[i].t_first) / 1e6 / (r[i].n_out - 1);
    }
    engine_stats st;
    engine_get_stats(eng, &st);
    printf("%s: %d requests, %ld tokens in %.2f s = %.1f tok/s\n", label, n, tokens, wall_s,
           tokens / wall_s);
    printf("  TTFT ms p50 %.1f p90 %.1f p99 %.1f | ", pct(ttft, n, 50), pct(ttft, n, 90),
           pct(ttft, n, 99));
    printf("TPOT ms p50 %.2f p90 %.2f p99 %.2f\n", pct(tpot, nt, 50), pct(tpot, nt, 90),
           pct(tpot, nt, 99));
    printf("  steps %llu, preemptions %llu, KV blocks %d (free now %d), prefix hit %.1f%%, "
           "scheduler %.3f%% of step time\n",
           (unsigned long long)st.steps, (unsigned long long)st.preemptions, st.total_blocks,
           st.free_blocks, 100 * st.prefix_hit_rate,
           st.step_ns ? 100.0 * st.sched_ns / st.step_ns : 0.0);
    if (st.speculative)
        printf("  speculative: %llu verify steps, acceptance %.1f%%, %.2f tokens/step, draft %.3f "
               "s, verify %.3f s\n",
               (unsigned long long)st.spec.steps, 100 * st.spec_acceptance, st.spec_tokens_per_step,
               st.spec.draft_ns / 1e9, st.spec.verify_ns / 1e9);
    free(ttft);
    free(tpot);
}

static void wait_all(rec *r, int n) {
    for (int i = 0; i < n; i++)
        while (!r[i].done)
            usleep(200);
}

/* Random prompts and Poisson arrivals at o->rate requests/s (0 = all at once). */
static void run_load(const opts *o, model *m) {
    engine *eng = start(o, m, true, o->max_seqs);
    if (!eng) return;
    rec *r = calloc((size_t)o->n, sizeof *r);
    int32_t *prompt = malloc(sizeof *prompt * (size_t)o->pmax);
    uint64_t seed = 42;
    int32_t nv = model_get_hparams(m)->n_vocab;
    double t0 = sol_now_s();
    for (int i = 0; i < o->n; i++) {
        int np = o->pmin + (int)(rng_next(&seed) % (uint64_t)(o->pmax - o->pmin + 1));
        int no = o->omin + (int)(rng_next(&seed) % (uint64_t)(o->omax - o->omin + 1));
        for (int j = 0; j < np; j++)
            prompt[j] = 3 + (int32_t)(rng_next(&seed) % (uint64_t)(nv - 3));
        submit(eng, prompt, np, no, &r[i]);
        if (o->rate > 0) {
            double u = (rng_next(&seed) + 1.0) / 2147483649.0;
            usleep((useconds_t)(-log(u) / o->rate * 1e6));
        }
    }
    wait_all(r, o->n);
    report("load", eng, r, o->n, sol_now_s() - t0);
    engine_free(eng);
    free(r);
    free(prompt);
}

/* Decode tok/s of `conc` sequences decoding together (time from the last first token on). */
static double decode_rate(const opts *o, model *m, int conc) {
    engine *eng = start(o, m, false, conc);
    rec *r = calloc((size_t)conc, sizeof *r);
    int32_t prompt[32];
    for (int i = 0; i < conc; i++) {
        /* --prompt-file: sequence i reads 32 tokens of the text from its own offset */
        int at = o->n_text_ids > 64 ? (i * 211) % (o->n_text_ids - 32) : 0;
        for (int j = 0; j < 32; j++)
            prompt[j] = o->n_text_ids > 64 ? o->text_ids[at + j] : 3 + (i * 131 + j * 7) % 1000;
        submit(eng, prompt, 32, o->omax, &r[i]);
    }
    wait_all(r, conc);
    uint64_t start_ns = 0, end_ns = 0;
    long toks = 0;
    for (int i = 0; i < conc; i++) {
        if (r[i].t_first > start_ns) start_ns = r[i].t_first;
        if (r[i].t_last > end_ns) end_ns = r[i].t_last;
    }
    for (int i = 0; i < conc; i++)
        toks += r[i].n_out - 1;
    double rate = toks / ((end_ns - start_ns) / 1e9);
    char label[64];
    snprintf(label, sizeof label, "batch %d", conc);
    report(label, eng, r, conc, (end_ns - r[0].t_submit) / 1e9);
    engine_free(eng);
    free(r);
    return rate;
}

static void run_batch(const opts *o, model *m) {
    double one = decode_rate(o, m, 1), many = decode_rate(o, m, o->conc);
    printf("RESULT batch: decode %.1f tok/s at %d sequences vs %.1f tok/s at 1 = %.2fx\n", many,
           o->conc, one, many / one);
}

/* First request pays the 1,024-token system prompt; later ones (sequential, so TTFT is pure
 * prefill) should find it in the prefix cache. */
static double prefix_ratio(const opts *o, model *m, bool cache) {
    engine *eng = start(o, m, cache, 8);
    enum { SYS = 1024, USER = 32, LATER = 8 };
    int32_t *prompt = malloc(sizeof *prompt * (SYS + USER));
    for (int j = 0; j < SYS; j++)
        prompt[j] = 3 + (j * 37) % 1000;
    rec r[1 + LATER] = {0};
    for (int i = 0; i <= LATER; i++) {
        for (int j = 0; j < USER; j++)
            prompt[SYS + j] = 3 + (i * 101 + j * 13) % 1000;
        submit(eng, prompt, SYS + USER, 4, &r[i]);
        wait_all(&r[i], 1);
    }
    double first = (r[0].t_first - r[0].t_submit) / 1e6, later = 0;
    for (int i = 1; i <= LATER; i++)
        later += (r[i].t_first - r[i].t_submit) / 1e6 / LATER;
    printf("prefix caching %s: TTFT first %.1f ms, later mean %.1f ms, ratio %.3f\n",
           cache ? "on " : "off", first, later, later / first);
    engine_free(eng);
    free(prompt);
    return later / first;
}

static void run_prefix(const opts *o, model *m) {
    double on = prefix_ratio(o, m, true), off = prefix_ratio(o, m, false);
    printf("RESULT prefix: TTFT later/first %.3f with caching, %.3f without\n", on, off);
}

static void run_overhead(const opts *o, model *m) {
    engine *eng = start(o, m, false, o->conc);
    rec *r = calloc((size_t)o->conc, sizeof *r);
    int32_t prompt[16];
    for (int i = 0; i < o->conc; i++) {
        for (int j = 0; j < 16; j++)
            prompt[j] = 3 + (i * 53 + j) % 1000;
        submit(eng, prompt, 16, o->omax, &r[i]);
    }
    wait_all(r, o->conc);
    engine_stats st;
    engine_get_stats(eng, &st);
    report("overhead", eng, r, o->conc, (sol_now_ns() - r[0].t_submit) / 1e9);
    printf("RESULT overhead: scheduler %.1f us/step of %.1f us/step = %.3f%% at %d sequences\n",
           st.sched_ns / 1e3 / st.steps, st.step_ns / 1e3 / st.steps,
           100.0 * st.sched_ns / st.step_ns, o->conc);
    engine_free(eng);
    free(r);
}

/* Baseline and speculative decode rates at the same concurrency, alternating so machine noise
 * hits both alike; the speculative engine's stats give acceptance. */
static void run_spec(const opts *o, model *m) {
    opts base = *o, sp = *o;
    base.spec = ENGINE_SPEC_OFF;
    double b = 0, s = 0;
    for (int i = 0; i < o->rounds; i++) {
        b += decode_rate(&base, m, o->conc) / o->rounds;
        s += decode_rate(&sp, m, o->conc) / o->rounds;
    }
    printf("RESULT spec: %d sequences, k %d%s: %.1f tok/s without, %.1f tok/s with = %.2fx\n",
           o->conc, o->spec_k, o->spec_adaptive ? " adaptive" : "", b, s, s / b);
}

/* --prompt-file: the text in the model's own tokens (batch and spec prompts read from it). */
static int load_text_ids(opts *o, model *m, sol_err *e) {
    strbuf text;
    strbuf_init(&text);
    int rc = strbuf_read_file(&text, o->prompt_file);
    if (rc) return sol_err_set(e, rc, "%s: %s", o->prompt_file, strerror(-rc));
    tokenizer *tok = tokenizer_from_gguf(model_gguf(m), e);
    int n = tok ? tokenizer_encode(tok, text.data, text.len, 0, 0, NULL, 0) : -1;
    if (tok && n > 64 && (o->text_ids = malloc(sizeof *o->text_ids * (size_t)n)))
        o->n_text_ids = tokenizer_encode(tok, text.data, text.len, 0, 0, o->text_ids, n);
    tokenizer_free(tok);
    strbuf_free(&text);
    if (!tok) return -EINVAL;
    if (o->n_text_ids <= 64)
        return sol_err_set(e, -EINVAL, "%s: fewer than 65 tokens of text", o->prompt_file);
    return 0;
}

static void usage(void) {
    fprintf(stderr,
            "usage: bench_serving -m MODEL.gguf [--mode load|batch|prefix|overhead] [-t THREADS]\n"
            "  load:  [-n 64] [--prompt MIN:MAX (32:256)] [--output MIN:MAX (32:128)]\n"
            "         [--rate REQ_PER_S (0 = all at once)] [--max-seqs 64]\n"
            "  batch: [--concurrency 16] [--output :N (64)]   overhead: [--concurrency 64]\n"
            "  spec:  [--concurrency 16] [--output :N (64)] [--rounds 2]\n"
            "  common: [--max-batched-tokens 2048] [--num-blocks N (2048; 0 = memory_fraction)]\n"
            "          [--draft-model FILE | --spec ngram] [--spec-k 4] [--spec-adaptive]\n"
            "          [--no-mmap] (read weights into memory instead of mapping the files)\n"
            "          [--prompt-file TEXT] batch/spec: prompts are 32-token windows of this\n"
            "          text in the model's tokens (default: synthetic ids)\n"
            "          [--backend cpu|cpu:ISA|cuda] (default cpu)\n");
}

/* "MIN:MAX", or ":N" for exactly N. */
static int range(const char *s, int *lo, int *hi) {
    if (sscanf(s, "%d:%d", lo, hi) == 2) return 0;
    if (sscanf(s, ":%d", hi) != 1) return -1;
    *lo = *hi;
    return 0;
}

/* --prompt / --output "MIN:MAX" or ":N". */
typedef struct range_flag {
    const char *flag;
    int *lo, *hi;
} range_flag;

static int set_range(const char *v, void *ctx, sol_err *err) {
    const range_flag *f = ctx;
    if (range(v, f->lo, f->hi) || *f->lo < 1 || *f->hi < *f->lo)
        return sol_err_set(err, -EINVAL, "%s: expected MIN:MAX or :N (1 <= MIN <= MAX), found '%s'",
                           f->flag, v);
    return 0;
}

/* --spec ngram (a draft model is --draft-model). */
static int set_spec(const char *v, void *ctx, sol_err *err) {
    if (strcmp(v, "ngram") != 0)
        return sol_err_set(err, -EINVAL, "--spec: expected ngram (or --draft-model), found '%s'",
                           v);
    *(engine_spec_method *)ctx = ENGINE_SPEC_NGRAM;
    return 0;
}

int main(int argc, char **argv) {
    opts o = {.mode = "load",
              .n = 64,
              .pmin = 32,
              .pmax = 256,
              .omin = 32,
              .omax = 128,
              .conc = 0,
              .max_seqs = 64,
              .max_tokens = 2048,
              .num_blocks = 2048,
              .spec_k = 4,
              .rounds = 2};
    int help = 0, draft_given = 0;
    range_flag prompt = {"--prompt", &o.pmin, &o.pmax}, output = {"--output", &o.omin, &o.omax};
    const sol_arg args[] = {
        {"--model", 'm', SOL_ARG_STR, &o.model, 0, 0, 0, NULL, NULL, NULL},
        {"--requests", 'n', SOL_ARG_INT, &o.n, 1, 1 << 20, 0, NULL, NULL, NULL},
        {"--threads", 't', SOL_ARG_INT, &o.threads, 0, 4096, 0, NULL, NULL, NULL},
        {"--mode", 0, SOL_ARG_STR, &o.mode, 0, 0, 0, NULL, NULL, NULL},
        {"--prompt", 0, SOL_ARG_FN, NULL, 0, 0, 0, set_range, &prompt, NULL},
        {"--output", 0, SOL_ARG_FN, NULL, 0, 0, 0, set_range, &output, NULL},
        {"--rate", 0, SOL_ARG_DOUBLE, &o.rate, 0, 1e9, 0, NULL, NULL, NULL},
        {"--concurrency", 0, SOL_ARG_INT, &o.conc, 1, 1 << 16, 0, NULL, NULL, NULL},
        {"--max-seqs", 0, SOL_ARG_INT, &o.max_seqs, 1, 1 << 16, 0, NULL, NULL, NULL},
        {"--max-batched-tokens", 0, SOL_ARG_INT, &o.max_tokens, 1, 1 << 24, 0, NULL, NULL, NULL},
        {"--num-blocks", 0, SOL_ARG_INT, &o.num_blocks, 1, 1 << 24, 0, NULL, NULL, NULL},
        {"--draft-model", 0, SOL_ARG_STR, &o.draft_path, 0, 0, 0, NULL, NULL, &draft_given},
        {"--spec", 0, SOL_ARG_FN, NULL, 0, 0, 0, set_spec, &o.spec, NULL},
        {"--spec-k", 0, SOL_ARG_INT, &o.spec_k, 1, 16, 0, NULL, NULL, NULL},
        {"--spec-adaptive", 0, SOL_ARG_SWITCH, &o.spec_adaptive, 0, 0, 0, NULL, NULL, NULL},
        {"--rounds", 0, SOL_ARG_INT, &o.rounds, 1, 1000, 0, NULL, NULL, NULL},
        {"--no-mmap", 0, SOL_ARG_SWITCH, &o.no_mmap, 0, 0, 0, NULL, NULL, NULL},
        {"--prompt-file", 0, SOL_ARG_STR, &o.prompt_file, 0, 0, 0, NULL, NULL, NULL},
        {"--backend", 0, SOL_ARG_STR, &o.backend, 0, 0, 0, NULL, NULL, NULL},
        {"--help", 'h', SOL_ARG_SWITCH, &help, 0, 0, 0, NULL, NULL, NULL},
    };
    sol_err ae = {0};
    int npos = sol_args_parse(args, sizeof args / sizeof args[0], argc, argv, &ae);
    if (npos < 0) return fprintf(stderr, "bench_serving: %s\n", ae.msg), 2;
    if (help) {
        printf("usage: see below (also printed on stderr)\n");
        usage();
        return 0;
    }
    if (npos > 0) return fprintf(stderr, "bench_serving: unexpected argument %s\n", argv[1]), 2;
    if (draft_given) o.spec = ENGINE_SPEC_DRAFT;
    if (!o.model || o.pmin < 1 || o.pmax < o.pmin || o.omin < 1 || o.omax < o.omin) {
        usage();
        return 2;
    }
    if (o.prompt_file && strcmp(o.mode, "batch") != 0 && strcmp(o.mode, "spec") != 0) {
        fprintf(stderr, "bench_serving: --prompt-file applies to --mode batch and spec only\n");
        return 2;
    }
    if (!o.conc) o.conc = strcmp(o.mode, "overhead") == 0 ? 64 : 16;
    sol_log_setup(SOL_LOG_WARN, 0, "bench");
    sol_err e = {0};
    sol_backend *be = sol_backend_new(o.backend, &(sol_backend_opts){.threads = o.threads}, &e);
    int flags = o.no_mmap ? GGUF_OPEN_NO_MMAP : 0;
    model *m = be ? model_load(o.model, flags, be, &e) : NULL;
    if (m && o.draft_path && !(o.draft = model_load(o.draft_path, flags, be, &e))) {
        model_free(m);
        m = NULL;
    }
    if (m && o.prompt_file && load_text_ids(&o, m, &e)) {
        model_free(m);
        model_free(o.draft);
        m = NULL;
    }
    if (!m) {
        fprintf(stderr, "bench_serving: %s\n", e.msg);
        return 1;
    }
    if (strcmp(o.mode, "load") == 0)
        run_load(&o, m);
    else if (strcmp(o.mode, "batch") == 0)
        run_batch(&o, m);
    else if (strcmp(o.mode, "prefix") == 0)
        run_prefix(&o, m);
    else if (strcmp(o.mode, "overhead") == 0)
        run_overhead(&o, m);
    else if (strcmp(o.mode, "spec") == 0)
        run_spec(&o, m);
    else
        usage();
    model_free(m);
    model_free(o.draft);
    free(o.text_ids);
    sol_backend_free(be);
    return 0;
}
