/* sol-generate: run one prompt through the engine on the CPU and stream the continuation.
 * Its flags are a fixed interface (equivalence checks against llama.cpp use them). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "clock.h"
#include "drafter.h"
#include "gguf.h"
#include "log.h"
#include "model.h"
#include "sampler.h"
#include "spec.h"
#include "tokenizer.h"

#define GEN_BLOCK 16 /* KV block size of the single-sequence cache */

typedef struct gen_opts {
    const char *model, *prompt, *prompt_tokens, *logits_file;
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
          "                          cuda, cuda:DEVICE, cuda-emu\n"
          "      --enforce-eager     cuda: never replay decode steps as CUDA graphs\n"
          "      --tensor-parallel-size N  shard the model over N ranks (1..8), one thread\n"
          "                          each (cpu: the threads divided; cuda: devices 0..N-1)\n"
          "      --batch N           prompt tokens per forward pass (default 512)\n"
          "      --ctx N             context size (default: prompt + n-predict)\n"
          "      --tokens            print generated ids, one per line, instead of text\n"
          "      --logits FILE       write the last prompt position's logits as a JSON array\n"
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

static int parse_args(int argc, char **argv, gen_opts *o) {
    enum {
        O_PT = 256,
        O_TEMP,
        O_TOPK,
        O_TOPP,
        O_MINP,
        O_REP,
        O_SEED,
        O_BATCH,
        O_CTX,
        O_TOKENS,
        O_LOGITS,
        O_TOKENIZE,
        O_STOP,
        O_IGN,
        O_NOMMAP,
        O_MLOCK,
        O_DRAFT,
        O_SPEC,
        O_SPECK,
        O_SPECA,
        O_BACKEND,
        O_EAGER,
        O_TP
    };
    static const struct option longs[] = {{"model", 1, 0, 'm'},
                                          {"prompt", 1, 0, 'p'},
                                          {"n-predict", 1, 0, 'n'},
                                          {"threads", 1, 0, 't'},
                                          {"help", 0, 0, 'h'},
                                          {"prompt-tokens", 1, 0, O_PT},
                                          {"temp", 1, 0, O_TEMP},
                                          {"top-k", 1, 0, O_TOPK},
                                          {"top-p", 1, 0, O_TOPP},
                                          {"min-p", 1, 0, O_MINP},
                                          {"repeat-penalty", 1, 0, O_REP},
                                          {"seed", 1, 0, O_SEED},
                                          {"batch", 1, 0, O_BATCH},
                                          {"ctx", 1, 0, O_CTX},
                                          {"tokens", 0, 0, O_TOKENS},
                                          {"logits", 1, 0, O_LOGITS},
                                          {"tokenize", 0, 0, O_TOKENIZE},
                                          {"stop-at-eos", 0, 0, O_STOP},
                                          {"ignore-eos", 0, 0, O_IGN},
                                          {"no-mmap", 0, 0, O_NOMMAP},
                                          {"mlock", 0, 0, O_MLOCK},
                                          {"draft-model", 1, 0, O_DRAFT},
                                          {"spec", 1, 0, O_SPEC},
                                          {"spec-k", 1, 0, O_SPECK},
                                          {"spec-adaptive", 0, 0, O_SPECA},
                                          {"backend", 1, 0, O_BACKEND},
                                          {"enforce-eager", 0, 0, O_EAGER},
                                          {"tensor-parallel-size", 1, 0, O_TP},
                                          {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "m:p:n:t:h", longs, NULL)) != -1) {
        switch (c) {
        case 'm':
            o->model = optarg;
            break;
        case 'p':
            o->prompt = optarg;
            break;
        case 'n':
            o->n_predict = atoi(optarg);
            break;
        case 't':
            o->threads = atoi(optarg);
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case O_BACKEND:
            o->backend = optarg;
            break;
        case O_EAGER:
            o->enforce_eager = 1;
            break;
        case O_TP: {
            char *end = NULL;
            long v = strtol(optarg, &end, 10);
            o->tp = end != optarg && !*end && v >= 1 && v <= 8 ? (int)v : -1;
            if (o->tp < 0) {
                fprintf(stderr, "sol-generate: --tensor-parallel-size %s: expected 1..8\n", optarg);
                exit(2);
            }
            break;
        }
        case O_PT:
            o->prompt_tokens = optarg;
            break;
        case O_TEMP:
            o->sp.temperature = strtof(optarg, NULL);
            break;
        case O_TOPK:
            o->sp.top_k = atoi(optarg);
            break;
        case O_TOPP:
            o->sp.top_p = strtof(optarg, NULL);
            break;
        case O_MINP:
            o->sp.min_p = strtof(optarg, NULL);
            break;
        case O_REP:
            o->sp.repetition_penalty = strtof(optarg, NULL);
            break;
        case O_SEED:
            o->sp.seed = strtoull(optarg, NULL, 10);
            break;
        case O_BATCH:
            o->chunk = atoi(optarg);
            break;
        case O_CTX:
            o->ctx = atoi(optarg);
            break;
        case O_TOKENS:
            o->print_tokens = 1;
            break;
        case O_LOGITS:
            o->logits_file = optarg;
            break;
        case O_TOKENIZE:
            o->tokenize_only = 1;
            break;
        case O_STOP:
            o->eos_mode = 1;
            break;
        case O_IGN:
            o->eos_mode = 0;
            break;
        case O_NOMMAP:
            o->no_mmap = 1;
            break;
        case O_MLOCK:
            o->mlock = 1;
            break;
        case O_DRAFT:
            o->draft_model = optarg;
            break;
        case O_SPEC:
            o->spec = optarg;
            break;
        case O_SPECK:
            o->spec_k = atoi(optarg);
            break;
        case O_SPECA:
            o->spec_adaptive = 1;
            break;
        default:
            usage(stderr);
            return -EINVAL;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sol-generate: unexpected argument '%s' (try --help)\n", argv[optind]);
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

/* The single-sequence run: a contiguous KV cache is a block table of consecutive blocks. */
typedef struct gen_run {
    model *m;
    model_kv *kv;
    int32_t *table, *hist;
    int n_hist, ctx;
    float *logits;
} gen_run;

/* Feed tokens[0..n) at positions n_hist.. in chunks; logits of the last one land in r->logits. */
static int feed(gen_run *r, const int32_t *tokens, int n, int chunk, sol_err *err) {
    int32_t *pos = malloc(sizeof *pos * chunk), *slots = malloc(sizeof *slots * chunk);
    sol_attn_seq *attn = malloc(sizeof *attn * chunk);
    int rc = (pos && slots && attn) ? 0 : sol_err_set(err, -ENOMEM, "out of memory");
    for (int done = 0; !rc && done < n; done += chunk) {
        int k = n - done < chunk ? n - done : chunk;
        for (int i = 0; i < k; i++) {
            pos[i] = r->n_hist + i;
            slots[i] = pos[i]; /* consecutive blocks: slot == position */
            attn[i] = (sol_attn_seq){r->table, pos[i] + 1};
        }
        int32_t last = k - 1;
        model_batch b = {k, tokens + done, pos, slots, attn, done + k == n ? 1 : 0, &last, NULL, 0, NULL};
        rc = model_forward(r->m, r->kv, &b, r->logits, err);
        memcpy(r->hist + r->n_hist, tokens + done, sizeof(int32_t) * k);
        r->n_hist += k;
    }
    free(pos);
    free(slots);
    free(attn);
    return rc;
}

static void emit(const gen_opts *o, tok_stream *ts, int32_t id) {
    if (o->print_tokens) {
        printf("%d\n", id);
    } else {
        const char *text;
        size_t len;
        if (tok_stream_push(ts, id, &text, &len) == 0 && len) fwrite(text, 1, len, stdout);
    }
    fflush(stdout);
}

/* Speculation state of the single sequence (slot 0 of the drafter). */
typedef struct spec_run {
    drafter *d;
    model *draft_model;
    int k, k_max, adaptive;
    float *p, *q, *scratch;
    spec_stats st;
} spec_run;

/* Target scores the last accepted token and k drafts in one pass; logits for all k+1 rows. */
static int verify_forward(gen_run *r, const int32_t *draft, int k, sol_err *err) {
    int32_t tok[SPEC_MAX_K + 1], pos[SPEC_MAX_K + 1], rows[SPEC_MAX_K + 1];
    sol_attn_seq attn[SPEC_MAX_K + 1];
    spec_fill_rows(r->hist[r->n_hist], draft, k, r->n_hist, tok, pos);
    for (int i = 0; i <= k; i++) {
        attn[i] = (sol_attn_seq){r->table, pos[i] + 1};
        rows[i] = i;
    }
    model_batch b = {k + 1, tok, pos, pos, attn, k + 1, rows, NULL, 0, NULL}; /* slot == position */
    return model_forward(r->m, r->kv, &b, r->logits, err);
}

/* One draft + verify step: emits 1..k+1 tokens into hist[n_hist + 1 ..]; returns how many. */
static int spec_step(gen_run *r, spec_run *sp, sampler *s, sampler_seq *seq, int k_cap,
                     int32_t *out, sol_err *err) {
    int32_t nv = model_get_hparams(r->m)->n_vocab, L = r->n_hist + 1;
    int32_t draft[SPEC_MAX_K];
    int k = sp->k < k_cap ? sp->k : k_cap, n_acc = 0, rc = 0;
    uint64_t t0 = sol_now_ns();
    drafter_req req = {0, seq, r->hist, L, k, draft, sp->q, 0};
    if (k > 0 && (rc = drafter_propose(sp->d, &req, 1, err))) return rc;
    uint64_t t1 = sol_now_ns();
    k = req.n_draft;
    memcpy(r->hist + L, draft, sizeof(int32_t) * (size_t)k);
    if ((rc = verify_forward(r, draft, k, err))) return rc;
    if ((rc = spec_target_probs(s, seq, r->logits, k, r->hist, L, sp->p, err))) return rc;
    int n = spec_verify(seq, sp->p, draft, drafter_one_hot(sp->d) ? NULL : sp->q, k, nv,
                        spec_accept_exact, sp->scratch, out, &n_acc, err);
    if (n < 0) return n;
    spec_stats_add(&sp->st, k, n_acc, t1 - t0, sol_now_ns() - t1);
    if (sp->adaptive && k > 0) sp->k = spec_adapt_k(sp->k, k, n_acc, 1, sp->k_max);
    memcpy(r->hist + L, out, sizeof(int32_t) * (size_t)n);
    r->n_hist = L + n_acc; /* KV keeps the accepted drafts; rejected rows are dropped */
    return n;
}

static void spec_report(const spec_run *sp, int adaptive) {
    const spec_stats *st = &sp->st;
    fprintf(stderr,
            "speculative (%s, k %d%s): %llu steps, %llu drafted, %llu accepted, acceptance "
            "%.1f%%, %.2f tokens/step, draft %.3f s, verify %.3f s\n",
            drafter_name(sp->d), sp->k, adaptive ? " at the end, adaptive" : "",
            (unsigned long long)st->steps, (unsigned long long)st->drafted,
            (unsigned long long)st->accepted, 100.0 * spec_stats_acceptance(st),
            spec_stats_tokens_per_step(st), st->draft_ns / 1e9, st->verify_ns / 1e9);
}

static int generate(gen_run *r, const gen_opts *o, spec_run *sp, const tokenizer *tok, int n_prompt,
                    sol_err *err) {
    sampler *s = sampler_new(model_get_hparams(r->m)->n_vocab, err);
    sampler_seq seq;
    tok_stream *ts = tok ? tok_stream_new(tok, 0) : NULL;
    int rc = s ? sampler_seq_init(&seq, &o->sp, n_prompt, err) : -ENOMEM;
    int stop_eos = o->eos_mode >= 0 ? o->eos_mode : !o->print_tokens, stop = 0;
    int n_gen = 0;
    double t0 = sol_now_s();
    while (!rc && !stop && n_gen < o->n_predict) {
        int32_t out[SPEC_MAX_K + 1];
        int n = 1;
        if (sp && n_gen > 0) {
            n = spec_step(r, sp, s, &seq, o->n_predict - n_gen - 1, out, err);
            if (n < 0) rc = n;
        } else {
            out[0] = sampler_sample(s, &seq, r->logits, r->hist, r->n_hist, NULL, err);
            if (out[0] < 0) rc = out[0];
            if (!rc && sp) r->hist[r->n_hist] = out[0]; /* pending: not yet in the KV */
        }
        for (int i = 0; !rc && i < n && !stop; i++) {
            if (stop_eos && tok && tokenizer_is_eog(tok, out[i])) {
                stop = 1;
                break;
            }
            emit(o, ts, out[i]);
            n_gen++;
        }
        if (!rc && !stop && !sp && n_gen < o->n_predict) rc = feed(r, &out[0], 1, 1, err);
    }
    double dt = sol_now_s() - t0;
    if (ts && !o->print_tokens) {
        const char *text;
        size_t len;
        tok_stream_flush(ts, &text, &len);
        fwrite(text, 1, len, stdout);
        putchar('\n');
    }
    fprintf(stderr, "generation: %d tokens in %.3f s, %.2f tok/s\n", n_gen, dt,
            dt > 0 ? n_gen / dt : 0.0);
    if (sp) spec_report(sp, o->spec_adaptive);
    tok_stream_free(ts);
    sampler_free(s);
    return rc;
}

/* Loads the drafter and the verify buffers for up to k_max drafts per step. */
static int spec_setup(spec_run *sp, const gen_opts *o, gen_run *r, sol_backend *be, int flags,
                      sol_err *err) {
    int32_t nv = model_get_hparams(r->m)->n_vocab;
    sp->k = sp->k_max = o->spec_k;
    sp->adaptive = o->spec_adaptive;
    if (strcmp(o->spec, "ngram") == 0) {
        sp->d = drafter_ngram_new(1, 4, err);
    } else {
        if (!(sp->draft_model = model_load(o->draft_model, flags, be, err)))
            return err->code ? err->code : -EINVAL;
        int32_t dv = model_get_hparams(sp->draft_model)->n_vocab;
        if (dv != nv)
            return sol_err_set(err, -EINVAL, "%s: vocabulary of %d tokens, the target has %d",
                               o->draft_model, (int)dv, (int)nv);
        sp->d = drafter_model_new(sp->draft_model, 1, r->ctx + SPEC_MAX_K, err);
    }
    if (!sp->d) return err->code ? err->code : -ENOMEM;
    sp->p = malloc(sizeof(float) * (size_t)nv * (SPEC_MAX_K + 1));
    sp->q = malloc(sizeof(float) * (size_t)nv * SPEC_MAX_K);
    sp->scratch = malloc(sizeof(float) * (size_t)nv);
    if (!sp->p || !sp->q || !sp->scratch) return sol_err_set(err, -ENOMEM, "out of memory");
    return 0;
}

static void spec_free(spec_run *sp) {
    drafter_free(sp->d);
    model_free(sp->draft_model);
    free(sp->p), free(sp->q), free(sp->scratch);
}

static int run(const gen_opts *o, sol_err *err) {
    sol_backend_opts bo = {.threads = model_tp_rank_threads(o->threads, o->tp),
                           .enforce_eager = o->enforce_eager};
    if (o->tp == 1) bo.threads = o->threads;
    sol_backend *be = sol_backend_new(o->backend, &bo, err);
    model_tp_config tp = {o->tp, 60000, o->backend ? o->backend : "cpu", bo};
    if (!be) return err->code ? err->code : -ENOMEM;
    int flags = (o->no_mmap ? GGUF_OPEN_NO_MMAP : 0) | (o->mlock ? GGUF_OPEN_MLOCK : 0);
    gen_run r = {0};
    spec_run sp = {0};
    tokenizer *tok = NULL;
    int32_t *prompt = NULL;
    int n_prompt = 0, rc = 0;
    double t0 = sol_now_s();
    r.m = model_load_tp(o->model, flags, be, &tp, err);
    if (!r.m) {
        rc = err->code ? err->code : -EINVAL;
        goto out;
    }
    fprintf(stderr, "loaded %s in %.2f s (%s)\n", o->model, sol_now_s() - t0,
            o->no_mmap ? "read into memory" : "mmap");
    tok = tokenizer_from_gguf(model_gguf(r.m), err);
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
    const model_hparams *hp = model_get_hparams(r.m);
    r.ctx = o->ctx ? o->ctx : n_prompt + o->n_predict;
    if (n_prompt + o->n_predict > r.ctx) {
        rc = sol_err_set(err, -EINVAL, "prompt (%d) + n-predict (%d) exceeds --ctx %d", n_prompt,
                         o->n_predict, r.ctx);
        goto out;
    }
    int nblocks = (r.ctx + GEN_BLOCK - 1) / GEN_BLOCK;
    r.table = malloc(sizeof(int32_t) * nblocks);
    r.hist = malloc(sizeof(int32_t) * (size_t)(r.ctx + 1));
    int rows = o->spec ? o->spec_k + 1 : 1;
    r.logits = malloc(sizeof(float) * hp->n_vocab * (size_t)rows);
    if (!r.table || !r.hist || !r.logits) {
        rc = sol_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < nblocks; i++)
        r.table[i] = i;
    int chunk = o->chunk < n_prompt ? o->chunk : n_prompt;
    if (o->spec && (rc = spec_setup(&sp, o, &r, be, flags, err))) goto out;
    if (!(r.kv = model_kv_new(r.m, nblocks, GEN_BLOCK, SOL_DT_F16, err)) ||
        (rc = model_reserve(r.m, chunk > rows ? chunk : rows, rows, err))) {
        rc = rc ? rc : -ENOMEM;
        goto out;
    }
    t0 = sol_now_s();
    if ((rc = feed(&r, prompt, n_prompt, chunk, err))) goto out;
    double dt = sol_now_s() - t0;
    fprintf(stderr, "prompt: %d tokens in %.3f s, %.2f tok/s\n", n_prompt, dt,
            dt > 0 ? n_prompt / dt : 0.0);
    if (o->logits_file && (rc = write_logits(o->logits_file, r.logits, hp->n_vocab, err))) goto out;
    rc = generate(&r, o, o->spec ? &sp : NULL, tok, n_prompt, err);
    char stats[256];
    if (!rc && sol_backend_stats(be, stats, sizeof stats) == 0) fprintf(stderr, "%s\n", stats);
out:
    spec_free(&sp);
    free(prompt);
    free(r.table);
    free(r.hist);
    free(r.logits);
    tokenizer_free(tok);
    if (r.m) model_kv_free(r.m, r.kv);
    model_free(r.m);
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
    int rc = run(&o, &err);
    if (rc) {
        fprintf(stderr, "sol-generate: %s\n", err.msg[0] ? err.msg : strerror(-rc));
        return 1;
    }
    return 0;
}
