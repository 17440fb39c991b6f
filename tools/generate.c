/* sol-generate: run one prompt through the serving engine (one request) and stream the
 * continuation. Its flags are a fixed interface (equivalence checks against llama.cpp use them). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "clock.h"
#include "engine.h"
#include "gguf.h"
#include "log.h"
#include "model.h"
#include "args.h"
#include "sampler.h"
#include "spec.h"
#include "tokenizer.h"

#define GEN_BLOCK 16 /* KV block size of the single-sequence cache */

typedef struct gen_opts {
    const char *model, *prompt, *prompt_tokens, *logits_file, *experts_file;
    const char *backend; /* a registry spec: "cpu", "cpu:avx2", "cuda", ... */
    int n_predict, threads, chunk, ctx;
    int print_tokens, tokenize_only, no_mmap, mlock, eos_mode; /* eos_mode: -1 auto, 0, 1 */
    const char *draft_model, *spec; /* spec: NULL (none), "ngram" or "draft" */
    int spec_k, spec_adaptive, enforce_eager;
    int tp; /* --tensor-parallel-size */
    sampler_params sp;
} gen_opts;

static void usage(FILE *f) {
    fputs("usage: sol-generate -m MODEL.gguf (-p TEXT | --prompt-tokens IDS) [options]\n"
          "\n"
          "  -m, --model FILE        GGUF model (llama architecture)\n"
          "  -p, --prompt TEXT       prompt text (tokenized; BOS added when the vocab asks)\n"
          "      --prompt-tokens IDS comma-separated ids used verbatim (no BOS added)\n"
          "  -n, --n-predict N       tokens to generate (default 128)\n"
          "      --temp T            temperature, 0 = greedy (default 0.8)\n"
          "      --top-k K           (default 40, 0 = off)   --top-p P (default 0.95)\n"
          "      --min-p P           (default 0.05)          --repeat-penalty R (default 1)\n"
          "      --seed N            sampling seed (default 1)\n"
          "  -t, --threads N         CPU threads (default: all cores)\n"
          "      --backend NAME      compute backend: cpu (default), cpu:scalar|avx2|avx512,\n"
          "                          cpu:llamacpp (llama.cpp's float order; + joins an ISA),\n"
          "                          cuda, cuda:DEVICE, cuda-emu\n"
          "      --enforce-eager     cuda: never replay decode steps as CUDA graphs\n"
          "      --tensor-parallel-size N  shard the model over N ranks (1..8), one thread\n"
          "                          each (cpu: the threads divided; cuda: devices 0..N-1)\n"
          "      --batch N           prompt tokens per forward pass (default 512)\n"
          "      --ctx N             context size (default: prompt + n-predict)\n"
          "      --tokens            print generated ids, one per line, instead of text\n"
          "      --logits FILE       write the last prompt position's logits as a JSON array\n"
          "      --log-experts FILE  a mixture of experts: write the router's choices, a line\n"
          "                          LAYER POS E0 E1 ... per layer and token of every pass\n"
          "      --tokenize          print the ids of -p, one per line, and exit\n"
          "      --stop-at-eos       stop at end-of-generation tokens (default in text mode)\n"
          "      --ignore-eos        always generate N tokens (default with --tokens)\n"
          "      --no-mmap           read weights into memory instead of mapping the file\n"
          "      --mlock             lock the weights in memory\n"
          "      --draft-model FILE  speculative decoding with this draft model (same vocab)\n"
          "      --spec ngram        speculative decoding with n-gram prompt lookup\n"
          "      --spec-k K          draft tokens per step, 1..16 (default 4)\n"
          "      --spec-adaptive     adapt k to the acceptance rate (k-max = --spec-k)\n"
          "  -h, --help              this text\n"
          "\n"
          "Text goes to stdout as it is generated; timings (prompt and generation tokens/s) go\n"
          "to stderr.\n",
          f);
}

/* A sampling flag: the setting it names in the request's table of bounds (common/sampling.c),
 * so --temp 5 is refused with the API's own message. */
typedef struct sampling_flag {
    sampler_params *sp;
    const char *flag, *field;
} sampling_flag;

static int set_sampling(const char *v, void *ctx, sol_err *err) {
    const sampling_flag *f = ctx;
    char *end;
    double x = strtod(v, &end);
    if (*end || end == v)
        return sol_err_set(err, -EINVAL, "%s: expected a number, found '%s'", f->flag, v);
    int rc = sol_sampling_field_set(f->sp, sol_sampling_field_find(f->field), x, err);
    return rc ? sol_err_wrap(err, "%s: ", f->flag), rc : 0;
}

static int parse_args(int argc, char **argv, gen_opts *o) {
    int help = 0, no_eos = 0, eos = 0;
    unsigned long long seed = o->sp.seed;
    sampling_flag temp = {&o->sp, "--temp", "temperature"}, top_k = {&o->sp, "--top-k", "top_k"},
                  top_p = {&o->sp, "--top-p", "top_p"}, min_p = {&o->sp, "--min-p", "min_p"},
                  rep = {&o->sp, "--repeat-penalty", "repetition_penalty"};
    /* The flags, one table (common/args.h). */
    const sol_arg args[] = {
        {"--model", 'm', SOL_ARG_STR, &o->model, 0, 0, 0, NULL, NULL, NULL},
        {"--prompt", 'p', SOL_ARG_STR, &o->prompt, 0, 0, 0, NULL, NULL, NULL},
        {"--n-predict", 'n', SOL_ARG_INT, &o->n_predict, 0, 1 << 30, 0, NULL, NULL, NULL},
        {"--threads", 't', SOL_ARG_INT, &o->threads, 0, 4096, 0, NULL, NULL, NULL},
        {"--help", 'h', SOL_ARG_SWITCH, &help, 0, 0, 0, NULL, NULL, NULL},
        {"--prompt-tokens", 0, SOL_ARG_STR, &o->prompt_tokens, 0, 0, 0, NULL, NULL, NULL},
        {"--temp", 0, SOL_ARG_FN, NULL, 0, 0, 0, set_sampling, &temp, NULL},
        {"--top-k", 0, SOL_ARG_FN, NULL, 0, 0, 0, set_sampling, &top_k, NULL},
        {"--top-p", 0, SOL_ARG_FN, NULL, 0, 0, 0, set_sampling, &top_p, NULL},
        {"--min-p", 0, SOL_ARG_FN, NULL, 0, 0, 0, set_sampling, &min_p, NULL},
        {"--repeat-penalty", 0, SOL_ARG_FN, NULL, 0, 0, 0, set_sampling, &rep, NULL},
        {"--seed", 0, SOL_ARG_U64, &seed, 0, 0, 0, NULL, NULL, NULL},
        {"--batch", 0, SOL_ARG_INT, &o->chunk, 1, 1 << 20, 0, NULL, NULL, NULL},
        {"--ctx", 0, SOL_ARG_INT, &o->ctx, 0, 1 << 24, 0, NULL, NULL, NULL},
        {"--tokens", 0, SOL_ARG_SWITCH, &o->print_tokens, 0, 0, 0, NULL, NULL, NULL},
        {"--logits", 0, SOL_ARG_STR, &o->logits_file, 0, 0, 0, NULL, NULL, NULL},
        {"--log-experts", 0, SOL_ARG_STR, &o->experts_file, 0, 0, 0, NULL, NULL, NULL},
        {"--tokenize", 0, SOL_ARG_SWITCH, &o->tokenize_only, 0, 0, 0, NULL, NULL, NULL},
        {"--stop-at-eos", 0, SOL_ARG_SWITCH, &eos, 0, 0, 0, NULL, NULL, NULL},
        {"--ignore-eos", 0, SOL_ARG_SWITCH, &no_eos, 0, 0, 0, NULL, NULL, NULL},
        {"--no-mmap", 0, SOL_ARG_SWITCH, &o->no_mmap, 0, 0, 0, NULL, NULL, NULL},
        {"--mlock", 0, SOL_ARG_SWITCH, &o->mlock, 0, 0, 0, NULL, NULL, NULL},
        {"--draft-model", 0, SOL_ARG_STR, &o->draft_model, 0, 0, 0, NULL, NULL, NULL},
        {"--spec", 0, SOL_ARG_STR, &o->spec, 0, 0, 0, NULL, NULL, NULL},
        {"--spec-k", 0, SOL_ARG_INT, &o->spec_k, 1, SPEC_MAX_K, 0, NULL, NULL, NULL},
        {"--spec-adaptive", 0, SOL_ARG_SWITCH, &o->spec_adaptive, 0, 0, 0, NULL, NULL, NULL},
        {"--backend", 0, SOL_ARG_STR, &o->backend, 0, 0, 0, NULL, NULL, NULL},
        {"--enforce-eager", 0, SOL_ARG_SWITCH, &o->enforce_eager, 0, 0, 0, NULL, NULL, NULL},
        {"--tensor-parallel-size", 0, SOL_ARG_INT, &o->tp, 1, 8, 0, NULL, NULL, NULL},
    };
    sol_err e = {0};
    int npos = sol_args_parse(args, sizeof args / sizeof args[0], argc, argv, &e);
    if (npos < 0) {
        fprintf(stderr, "sol-generate: %s\n", e.msg);
        return -EINVAL;
    }
    if (help) usage(stdout), exit(0);
    o->sp.seed = seed;
    if (eos && no_eos) {
        fprintf(stderr, "sol-generate: --stop-at-eos and --ignore-eos contradict each other\n");
        return -EINVAL;
    }
    if (eos || no_eos) o->eos_mode = eos;
    if (npos > 0) {
        fprintf(stderr, "sol-generate: unexpected argument '%s' (try --help)\n", argv[1]);
        return -EINVAL;
    }
    if (!o->model || (!o->prompt && !o->prompt_tokens)) {
        fprintf(stderr,
                "sol-generate: need -m MODEL and -p TEXT or --prompt-tokens (try --help)\n");
        return -EINVAL;
    }
    if (o->threads > 0 && o->backend && strncmp(o->backend, "cuda-emu", 8) == 0) {
        fprintf(stderr, "sol-generate: --threads applies to the cpu backend; cuda-emu runs each "
                        "kernel launch on the calling thread\n");
        return 2;
    }
    if (o->tp < 1 || o->tp > 8) {
        fprintf(stderr, "sol-generate: --tensor-parallel-size must be 1..8, got %d\n", o->tp);
        return 2;
    }
    if (o->tp > 1 && o->backend && strchr(o->backend, ':') && strncmp(o->backend, "cpu", 3)) {
        fprintf(stderr,
                "sol-generate: --tensor-parallel-size with --backend %s: name no device "
                "(ranks take devices 0..N-1)\n",
                o->backend);
        return 2;
    }
    if (o->n_predict < 0 || o->chunk < 1 || o->threads < 0 || o->ctx < 0) {
        fprintf(stderr, "sol-generate: -n, --batch, --threads and --ctx must be positive\n");
        return -EINVAL;
    }
    if (o->draft_model && !o->spec) o->spec = "draft";
    if (o->spec && strcmp(o->spec, "ngram") != 0 && strcmp(o->spec, "draft") != 0) {
        fprintf(stderr, "sol-generate: --spec: expected ngram or draft, found '%s'\n", o->spec);
        return -EINVAL;
    }
    if (o->spec && strcmp(o->spec, "draft") == 0 && !o->draft_model) {
        fprintf(stderr, "sol-generate: --spec draft needs --draft-model FILE\n");
        return -EINVAL;
    }
    if (o->spec_k < 1 || o->spec_k > SPEC_MAX_K) {
        fprintf(stderr, "sol-generate: --spec-k: expected 1..%d, found %d\n", SPEC_MAX_K,
                o->spec_k);
        return -EINVAL;
    }
    return 0;
}

/* "1,5,9" -> ids; every entry must be a whole non-negative number. */
static int parse_ids(const char *s, int32_t **out, int *n, sol_err *err) {
    int cap = 16, k = 0;
    int32_t *ids = malloc(sizeof *ids * cap);
    const char *p = s;
    while (ids && *p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(ids);
            return sol_err_set(err, -EINVAL, "--prompt-tokens: bad id list at \"%s\"", p);
        }
        if (k == cap) {
            int32_t *grown = realloc(ids, sizeof *ids * (cap *= 2));
            if (!grown) break;
            ids = grown;
        }
        ids[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (!ids || k == 0) {
        free(ids);
        return sol_err_set(err, -EINVAL, "--prompt-tokens: no ids given");
    }
    *out = ids;
    *n = k;
    return 0;
}

static int tokenize_prompt(const tokenizer *tok, const char *text, int32_t **out, int *n,
                           sol_err *err) {
    size_t len = strlen(text);
    int need = tokenizer_encode(tok, text, len, 1, 0, NULL, 0);
    if (need < 0) return sol_err_set(err, need, "cannot tokenize the prompt");
    *out = malloc(sizeof(int32_t) * (size_t)(need > 0 ? need : 1));
    if (!*out) return sol_err_set(err, -ENOMEM, "out of memory");
    *n = tokenizer_encode(tok, text, len, 1, 0, *out, need);
    if (*n == 0) return sol_err_set(err, -EINVAL, "the prompt produced no tokens");
    return 0;
}

static int write_logits(const char *path, const float *logits, int n, sol_err *err) {
    FILE *f = fopen(path, "w");
    if (!f) return sol_err_set(err, -errno, "%s: %s", path, strerror(errno));
    fputc('[', f);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%.9g", i ? "," : "", logits[i]);
    fputs("]\n", f);
    if (fclose(f) != 0) return sol_err_set(err, -EIO, "%s: write failed", path);
    return 0;
}

/* What the engine's events tell the one request's caller (filled on the engine thread, read
 * after engine_wait_idle). */
typedef struct gen_sink {
    const gen_opts *o;
    int quiet; /* -n 0: the prompt's pass alone (one token is sampled, not shown) */
    double t_submit, t_first, t_end;
    int n_gen;
    engine_finish_reason finish;
    char error[256];
} gen_sink;

static void on_event(void *ctx, const engine_event *ev) {
    gen_sink *g = ctx;
    if (g->quiet) {
        g->t_first = g->t_end = sol_now_s();
        if (ev->kind == ENGINE_EV_FINISH) g->finish = ev->finish;
        return;
    }
    if (ev->kind == ENGINE_EV_TOKEN) {
        if (!g->n_gen++) g->t_first = sol_now_s();
        if (g->o->print_tokens)
            printf("%d\n", ev->token);
        else
            fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
        return;
    }
    g->t_end = sol_now_s();
    g->finish = ev->finish;
    if (ev->error) snprintf(g->error, sizeof g->error, "%s", ev->error);
    if (!g->o->print_tokens) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        putchar('\n');
    }
    fflush(stdout);
}

/* One request through the serving engine: the same scheduler, sampler, speculative decoding
 * (draft or n-gram, fixed or adaptive k with its pausing policy) and CUDA graph steps as a worker,
 * with room for exactly this sequence. */
static engine_config engine_config_for(const gen_opts *o, int ctx, model *draft, gen_sink *sink) {
    engine_config c = engine_config_default();
    int k = o->spec ? o->spec_k : 0;
    c.max_model_len = ctx;
    c.num_blocks = (ctx + k + 2 * GEN_BLOCK - 1) / GEN_BLOCK + 1; /* + the drafts' rows */
    c.block_size = GEN_BLOCK;
    c.kv_dtype = SOL_DT_F16;
    c.max_num_seqs = 1;
    c.max_batched_tokens = o->chunk > k + 1 ? o->chunk : k + 1;
    c.prefix_caching = false;
    c.spec_method = !o->spec                        ? ENGINE_SPEC_OFF
                    : strcmp(o->spec, "ngram") == 0 ? ENGINE_SPEC_NGRAM
                                                    : ENGINE_SPEC_DRAFT;
    c.draft_model = draft;
    c.spec_k = o->spec_k;
    c.spec_adaptive = o->spec_adaptive;
    c.spec_max_batch = 1;
    c.on_event = on_event;
    c.event_ctx = sink;
    return c;
}

static void report(const gen_opts *o, const gen_sink *g, engine *e, int n_prompt) {
    double tp = g->t_first > 0 ? g->t_first - g->t_submit : 0;
    double dt = g->t_first > 0 ? g->t_end - g->t_first : 0;
    /* the first token comes out of the prompt's pass; generation is timed from it */
    fprintf(stderr, "prompt: %d tokens in %.3f s, %.2f tok/s\n", n_prompt, tp,
            tp > 0 ? n_prompt / tp : 0.0);
    fprintf(stderr, "generation: %d tokens in %.3f s, %.2f tok/s\n", g->n_gen, dt,
            dt > 0 ? g->n_gen / dt : 0.0);
    if (!o->spec) return;
    engine_stats st;
    engine_get_stats(e, &st);
    fprintf(stderr,
            "speculative (%s, k %d%s): %llu steps, %llu drafted, %llu accepted, acceptance "
            "%.1f%%, %.2f tokens/step, draft %.3f s, verify %.3f s\n",
            o->spec, o->spec_k, o->spec_adaptive ? " at most, adaptive" : "",
            (unsigned long long)st.spec.steps, (unsigned long long)st.spec.drafted,
            (unsigned long long)st.spec.accepted, 100.0 * st.spec_acceptance,
            st.spec_tokens_per_step, st.spec.draft_ns / 1e9, st.spec.verify_ns / 1e9);
}

/* Runs the prompt to completion on a fresh engine; the logits of the last prompt position go to
 * o->logits_file when asked. */
static int serve_one(const gen_opts *o, model *m, model *draft, tokenizer *tok,
                     const int32_t *prompt, int n_prompt, int ctx, sol_err *err) {
    int32_t nv = model_get_hparams(m)->n_vocab;
    gen_sink sink = {.o = o, .quiet = o->n_predict == 0};
    engine_config c = engine_config_for(o, ctx, draft, &sink);
    float *logits = o->logits_file ? malloc(sizeof(float) * (size_t)nv) : NULL;
    if (o->logits_file && !logits) return sol_err_set(err, -ENOMEM, "out of memory");
    engine *e = engine_new(&c, m, tok, err);
    if (!e) {
        free(logits);
        return err->code ? err->code : -ENOMEM;
    }
    int stop_eos = o->eos_mode >= 0 ? o->eos_mode : !o->print_tokens;
    engine_request req = {.prompt_tokens = prompt,
                          .n_prompt_tokens = n_prompt,
                          .add_bos = 0, /* the ids are final: tokenize_prompt added BOS */
                          .sampling = o->sp,
                          .max_tokens = o->n_predict ? o->n_predict : 1, /* 0: unlimited */
                          .ignore_eos = !stop_eos,
                          .prompt_logits = logits};
    int rc = 0;
    sink.t_submit = sol_now_s();
    int64_t id = engine_submit(e, &req, err);
    if (id < 0) rc = (int)id;
    if (!rc) engine_wait_idle(e);
    if (!rc && sink.finish == ENGINE_FINISH_ERROR)
        rc = sol_err_set(err, -EIO, "generation failed: %s", sink.error);
    if (!rc) report(o, &sink, e, n_prompt);
    if (!rc && logits) rc = write_logits(o->logits_file, logits, nv, err);
    engine_free(e);
    free(logits);
    return rc;
}

/* --log-experts FILE: the router's choices of every pass, for a mixture of experts only. */
static FILE *open_experts_log(const char *path, const char *model_path, model *m, sol_err *err) {
    if (!model_get_hparams(m)->n_expert) {
        sol_err_set(err, -EINVAL, "--log-experts: %s is not a mixture of experts", model_path);
        return NULL;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        sol_err_set(err, -errno, "--log-experts %s: %s", path, strerror(errno));
        return NULL;
    }
    model_log_experts(m, f);
    return f;
}

/* *no_backend: set when the asked-for backend cannot run here (exit 2, as sol-worker). */
static int run(const gen_opts *o, int *no_backend, sol_err *err) {
    sol_backend_opts bo = {.threads = model_tp_rank_threads(o->threads, o->tp),
                           .enforce_eager = o->enforce_eager};
    if (o->tp == 1) bo.threads = o->threads;
    sol_backend *be = sol_backend_new(o->backend, &bo, err);
    model_tp_config tp = {o->tp, 60000, o->backend ? o->backend : "cpu", bo};
    if (!be) {
        *no_backend = 1;
        return err->code ? err->code : -ENOMEM;
    }
    int flags = (o->no_mmap ? GGUF_OPEN_NO_MMAP : 0) | (o->mlock ? GGUF_OPEN_MLOCK : 0);
    model *m = NULL, *draft = NULL;
    tokenizer *tok = NULL;
    FILE *experts = NULL;
    int32_t *prompt = NULL;
    int n_prompt = 0, rc = 0;
    double t0 = sol_now_s();
    m = model_load_tp(o->model, flags, be, &tp, err);
    if (!m) {
        rc = err->code ? err->code : -EINVAL;
        goto out;
    }
    fprintf(stderr, "loaded %s in %.2f s (%s); %.1f MiB of weights read per decoded token\n",
            o->model, sol_now_s() - t0, o->no_mmap ? "read into memory" : "mmap",
            (double)model_bytes_per_token(m) / 1048576.0);
    if (o->experts_file && !(experts = open_experts_log(o->experts_file, o->model, m, err))) {
        rc = err->code;
        goto out;
    }
    tok = tokenizer_from_gguf(model_gguf(m), err);
    if (!tok && (o->prompt || !o->print_tokens)) {
        rc = err->code ? err->code : -EINVAL;
        goto out;
    }
    rc = o->prompt_tokens ? parse_ids(o->prompt_tokens, &prompt, &n_prompt, err)
                          : tokenize_prompt(tok, o->prompt, &prompt, &n_prompt, err);
    if (rc) goto out;
    if (o->tokenize_only) {
        for (int i = 0; i < n_prompt; i++)
            printf("%d\n", prompt[i]);
        goto out;
    }
    /* -n 0 still samples one (unshown) token: the prompt's pass ends with a sample */
    int ctx = o->ctx ? o->ctx : n_prompt + (o->n_predict ? o->n_predict : 1);
    if (n_prompt + o->n_predict > ctx) {
        rc = sol_err_set(err, -EINVAL, "prompt (%d) + n-predict (%d) exceeds --ctx %d", n_prompt,
                         o->n_predict, ctx);
        goto out;
    }
    if (o->spec && strcmp(o->spec, "draft") == 0 &&
        !(draft = model_load(o->draft_model, flags, be, err))) {
        rc = err->code ? err->code : -EINVAL;
        goto out;
    }
    rc = serve_one(o, m, draft, tok, prompt, n_prompt, ctx, err);
    char stats[1024];
    if (!rc && sol_backend_stats(be, stats, sizeof stats) == 0) fprintf(stderr, "%s\n", stats);
out:
    free(prompt);
    tokenizer_free(tok);
    model_free(draft);
    model_free(m);
    if (experts && fclose(experts) && !rc)
        rc = sol_err_set(err, -EIO, "--log-experts %s: write failed", o->experts_file);
    sol_backend_free(be);
    return rc;
}

int main(int argc, char **argv) {
    gen_opts o = {.n_predict = 128, .chunk = 512, .eos_mode = -1, .spec_k = 4, .tp = 1};
    o.sp = sampler_params_default();
    o.sp.temperature = 0.8f;
    o.sp.top_k = 40;
    o.sp.top_p = 0.95f;
    o.sp.min_p = 0.05f;
    o.sp.seed = 1;
    if (parse_args(argc, argv, &o)) return 2;
    sol_log_setup(SOL_LOG_WARN, 0, "generate");
    sol_err err = {0};
    int no_backend = 0;
    int rc = run(&o, &no_backend, &err);
    if (rc) {
        fprintf(stderr, "sol-generate: %s\n", err.msg[0] ? err.msg : strerror(-rc));
        return no_backend ? 2 : 1;
    }
    return 0;
}
