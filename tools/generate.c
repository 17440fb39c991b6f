/* sol-generate: run one prompt through the engine on the CPU and stream the continuation.
 * Its flags are a fixed interface (equivalence checks against llama.cpp use them). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "clock.h"
#include "gguf.h"
#include "log.h"
#include "model.h"
#include "sampler.h"
#include "tokenizer.h"

#define GEN_BLOCK 16 /* KV block size of the single-sequence cache */

typedef struct gen_opts {
    const char *model, *prompt, *prompt_tokens, *logits_file;
    int n_predict, threads, chunk, ctx;
    int print_tokens, tokenize_only, no_mmap, mlock, eos_mode; /* eos_mode: -1 auto, 0, 1 */
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
          "      --batch N           prompt tokens per forward pass (default 512)\n"
          "      --ctx N             context size (default: prompt + n-predict)\n"
          "      --tokens            print generated ids, one per line, instead of text\n"
          "      --logits FILE       write the last prompt position's logits as a JSON array\n"
          "      --tokenize          print the ids of -p, one per line, and exit\n"
          "      --stop-at-eos       stop at end-of-generation tokens (default in text mode)\n"
          "      --ignore-eos        always generate N tokens (default with --tokens)\n"
          "      --no-mmap           read weights into memory instead of mapping the file\n"
          "      --mlock             lock the weights in memory\n"
          "  -h, --help              this text\n"
          "\n"
          "Text goes to stdout as it is generated; timings (prompt and generation tokens/s) go\n"
          "to stderr.\n",
          f);
}

static int parse_args(int argc, char **argv, gen_opts *o) {
    enum { O_PT = 256, O_TEMP, O_TOPK, O_TOPP, O_MINP, O_REP, O_SEED, O_BATCH, O_CTX, O_TOKENS,
           O_LOGITS, O_TOKENIZE, O_STOP, O_IGN, O_NOMMAP, O_MLOCK };
    static const struct option longs[] = {
        {"model", 1, 0, 'm'},       {"prompt", 1, 0, 'p'},       {"n-predict", 1, 0, 'n'},
        {"threads", 1, 0, 't'},     {"help", 0, 0, 'h'},         {"prompt-tokens", 1, 0, O_PT},
        {"temp", 1, 0, O_TEMP},     {"top-k", 1, 0, O_TOPK},     {"top-p", 1, 0, O_TOPP},
        {"min-p", 1, 0, O_MINP},    {"repeat-penalty", 1, 0, O_REP},
        {"seed", 1, 0, O_SEED},     {"batch", 1, 0, O_BATCH},    {"ctx", 1, 0, O_CTX},
        {"tokens", 0, 0, O_TOKENS}, {"logits", 1, 0, O_LOGITS},  {"tokenize", 0, 0, O_TOKENIZE},
        {"stop-at-eos", 0, 0, O_STOP}, {"ignore-eos", 0, 0, O_IGN},
        {"no-mmap", 0, 0, O_NOMMAP}, {"mlock", 0, 0, O_MLOCK},  {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "m:p:n:t:h", longs, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'n': o->n_predict = atoi(optarg); break;
        case 't': o->threads = atoi(optarg); break;
        case 'h': usage(stdout); exit(0);
        case O_PT: o->prompt_tokens = optarg; break;
        case O_TEMP: o->sp.temperature = strtof(optarg, NULL); break;
        case O_TOPK: o->sp.top_k = atoi(optarg); break;
        case O_TOPP: o->sp.top_p = strtof(optarg, NULL); break;
        case O_MINP: o->sp.min_p = strtof(optarg, NULL); break;
        case O_REP: o->sp.repetition_penalty = strtof(optarg, NULL); break;
        case O_SEED: o->sp.seed = strtoull(optarg, NULL, 10); break;
        case O_BATCH: o->chunk = atoi(optarg); break;
        case O_CTX: o->ctx = atoi(optarg); break;
        case O_TOKENS: o->print_tokens = 1; break;
        case O_LOGITS: o->logits_file = optarg; break;
        case O_TOKENIZE: o->tokenize_only = 1; break;
        case O_STOP: o->eos_mode = 1; break;
        case O_IGN: o->eos_mode = 0; break;
        case O_NOMMAP: o->no_mmap = 1; break;
        case O_MLOCK: o->mlock = 1; break;
        default: usage(stderr); return -EINVAL;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sol-generate: unexpected argument '%s' (try --help)\n", argv[optind]);
        return -EINVAL;
    }
    if (!o->model || (!o->prompt && !o->prompt_tokens)) {
        fprintf(stderr, "sol-generate: need -m MODEL and -p TEXT or --prompt-tokens (try --help)\n");
        return -EINVAL;
    }
    if (o->n_predict < 0 || o->chunk < 1 || o->threads < 0 || o->ctx < 0) {
        fprintf(stderr, "sol-generate: -n, --batch, --threads and --ctx must be positive\n");
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
    for (int i = 0; i < n; i++) fprintf(f, "%s%.9g", i ? "," : "", logits[i]);
    fputs("]\n", f);
    if (fclose(f) != 0) return sol_err_set(err, -EIO, "%s: write failed", path);
    return 0;
}

/* The single-sequence run: a contiguous KV cache is a block table of consecutive blocks. */
typedef struct gen_run {
    model *m;
    sol_kv *kv;
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
        model_batch b = {k, tokens + done, pos, slots, attn, done + k == n ? 1 : 0, &last};
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

static int generate(gen_run *r, const gen_opts *o, const tokenizer *tok, int n_prompt,
                    sol_err *err) {
    sampler *s = sampler_new(model_get_hparams(r->m)->n_vocab, err);
    sampler_seq seq;
    tok_stream *ts = tok ? tok_stream_new(tok, 0) : NULL;
    int rc = s ? sampler_seq_init(&seq, &o->sp, n_prompt, err) : -ENOMEM;
    int stop_eos = o->eos_mode >= 0 ? o->eos_mode : !o->print_tokens;
    int n_gen = 0;
    double t0 = sol_now_s();
    for (; !rc && n_gen < o->n_predict; n_gen++) {
        int32_t id = sampler_sample(s, &seq, r->logits, r->hist, r->n_hist, NULL, err);
        if (id < 0) {
            rc = id;
            break;
        }
        if (stop_eos && tok && tokenizer_is_eog(tok, id)) break;
        emit(o, ts, id);
        if (n_gen + 1 < o->n_predict) rc = feed(r, &id, 1, 1, err);
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
    tok_stream_free(ts);
    sampler_free(s);
    return rc;
}

static int run(const gen_opts *o, sol_err *err) {
    sol_backend *be = sol_backend_cpu_new(o->threads, err);
    if (!be) return err->code ? err->code : -ENOMEM;
    int flags = (o->no_mmap ? GGUF_OPEN_NO_MMAP : 0) | (o->mlock ? GGUF_OPEN_MLOCK : 0);
    gen_run r = {0};
    tokenizer *tok = NULL;
    int32_t *prompt = NULL;
    int n_prompt = 0, rc = 0;
    double t0 = sol_now_s();
    r.m = model_load(o->model, flags, be, err);
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
        for (int i = 0; i < n_prompt; i++) printf("%d\n", prompt[i]);
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
    r.logits = malloc(sizeof(float) * hp->n_vocab);
    if (!r.table || !r.hist || !r.logits) {
        rc = sol_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < nblocks; i++) r.table[i] = i;
    int chunk = o->chunk < n_prompt ? o->chunk : n_prompt;
    if (!(r.kv = model_kv_new(r.m, nblocks, GEN_BLOCK, SOL_DT_F16, err)) ||
        (rc = model_reserve(r.m, chunk, 1, err))) {
        rc = rc ? rc : -ENOMEM;
        goto out;
    }
    t0 = sol_now_s();
    if ((rc = feed(&r, prompt, n_prompt, chunk, err))) goto out;
    double dt = sol_now_s() - t0;
    fprintf(stderr, "prompt: %d tokens in %.3f s, %.2f tok/s\n", n_prompt, dt,
            dt > 0 ? n_prompt / dt : 0.0);
    if (o->logits_file && (rc = write_logits(o->logits_file, r.logits, hp->n_vocab, err)))
        goto out;
    rc = generate(&r, o, tok, n_prompt, err);
out:
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
    gen_opts o = {.n_predict = 128, .chunk = 512, .eos_mode = -1};
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
