/* bench_quality: how much a quantized model departs from its reference (e.g. F16) on a text
 * corpus: mean KL(ref || test) of next-token distributions, top-1 agreement, perplexity of each.
 *   bench_quality REF.gguf TEST.gguf CORPUS.txt [CTX (512)] [THREADS] */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include "strbuf.h"
#include "tokenizer.h"

typedef struct {
    double kl, nll_ref, nll_test;
    long agree, n;
} qstats;

/* log-softmax in place; returns the argmax. */
static int log_softmax(float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    double s = 0;
    for (int i = 0; i < n; i++)
        s += exp((double)x[i] - x[best]);
    float lse = x[best] + (float)log(s);
    for (int i = 0; i < n; i++)
        x[i] -= lse;
    return best;
}

/* All logits of tokens[0, n) from a fresh context (positions 0..n-1). */
static int score(model *m, model_kv *kv, const int32_t *tokens, int n, float *logits) {
    int32_t *pos = malloc(sizeof(int32_t) * 3 * (size_t)n), *rows = pos + n, *table = pos + 2 * n;
    sol_attn_seq *attn = malloc(sizeof *attn * (size_t)n);
    for (int i = 0; i < n; i++)
        pos[i] = rows[i] = table[i] = i;
    for (int i = 0; i < n; i++)
        attn[i] = (sol_attn_seq){table, i + 1};
    model_batch b = {n, tokens, pos, pos, attn, n, rows, NULL, 0, NULL, NULL};
    sol_err e = {0};
    int rc = model_forward(m, kv, &b, logits, &e);
    if (rc) fprintf(stderr, "bench_quality: %s\n", e.msg);
    free(pos), free(attn);
    return rc;
}

static void compare(float *lr, float *lt, const int32_t *tokens, int n, int nv, qstats *s) {
    for (int i = 0; i + 1 < n; i++) {
        float *a = lr + (size_t)i * nv, *b = lt + (size_t)i * nv;
        int ta = log_softmax(a, nv), tb = log_softmax(b, nv);
        double kl = 0;
        for (int v = 0; v < nv; v++)
            kl += exp(a[v]) * ((double)a[v] - b[v]);
        s->kl += kl;
        s->agree += ta == tb;
        s->nll_ref -= a[tokens[i + 1]];
        s->nll_test -= b[tokens[i + 1]];
        s->n++;
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        puts("usage: bench_quality REF.gguf TEST.gguf CORPUS.txt [CTX] [THREADS]\n"
             "Mean KL divergence, top-1 agreement and perplexity of TEST against REF on CORPUS.");
        return 0;
    }
    if (argc < 4) {
        fprintf(stderr, "usage: bench_quality REF.gguf TEST.gguf CORPUS.txt [CTX] [THREADS]\n");
        return 2;
    }
    int ctx = argc > 4 ? atoi(argv[4]) : 512, threads = argc > 5 ? atoi(argv[5]) : 0;
    if (ctx < 2 || threads < 0) {
        fprintf(stderr, "bench_quality: CTX must be a number >= 2 and THREADS >= 0 (positional)\n");
        return 2;
    }
    sol_err e = {0};
    sol_backend *be = sol_backend_new("cpu", &(sol_backend_opts){.threads = threads}, &e);
    model *ref = be ? model_load(argv[1], 0, be, &e) : NULL;
    model *test = ref ? model_load(argv[2], 0, be, &e) : NULL;
    tokenizer *tok = test ? tokenizer_from_gguf(model_gguf(ref), &e) : NULL;
    size_t len = 0;
    strbuf file;
    strbuf_init(&file);
    char *text = tok && !strbuf_read_file(&file, argv[3]) ? strbuf_take(&file, &len) : NULL;
    if (!text) {
        if (tok)
            fprintf(stderr, "bench_quality: cannot read the corpus %s\n", argv[3]);
        else
            fprintf(stderr, "bench_quality: %s\n", e.msg);
        return 1;
    }
    int nv = model_get_hparams(ref)->n_vocab,
        need = tokenizer_encode(tok, text, len, 1, 0, NULL, 0);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)need);
    int n_tok = tokenizer_encode(tok, text, len, 1, 0, ids, need);
    int nb = (ctx + 15) / 16;
    model_kv *kr = model_kv_new(ref, nb, 16, SOL_DT_F16, &e),
             *kt = model_kv_new(test, nb, 16, SOL_DT_F16, &e);
    float *lr = malloc(sizeof(float) * (size_t)ctx * nv),
          *lt = malloc(sizeof(float) * (size_t)ctx * nv);
    qstats s = {0};
    for (int off = 0; off + 2 <= n_tok; off += ctx) {
        int n = n_tok - off < ctx ? n_tok - off : ctx;
        if (score(ref, kr, ids + off, n, lr) || score(test, kt, ids + off, n, lt)) return 1;
        compare(lr, lt, ids + off, n, nv, &s);
    }
    printf("corpus %s: %d tokens, %ld predictions, windows of %d\n", argv[3], n_tok, s.n, ctx);
    printf("ref  %s: perplexity %.4f\n", argv[1], exp(s.nll_ref / s.n));
    printf("test %s: perplexity %.4f\n", argv[2], exp(s.nll_test / s.n));
    printf("mean KL(ref||test) %.6f nats, top-1 agreement %.2f%%\n", s.kl / s.n,
           100.0 * s.agree / s.n);
    free(lr), free(lt), free(ids), free(text);
    model_kv_free(ref, kr), model_kv_free(test, kt);
    tokenizer_free(tok);
    model_free(test), model_free(ref);
    sol_backend_free(be);
    return 0;
}
