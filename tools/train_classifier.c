/* sol-train_classifier: train the router's prompt classifier from labelled JSONL.
 * Input lines are {"text": "...", "pool": "fast"}; output is the weights file classify loads. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "args.h"
#include "classifier_model.h"
#include "err.h"

typedef struct dataset {
    clf_example *ex;
    char **texts;
    size_t n, cap;
} dataset;

static void usage(void) {
    fputs("usage: sol-train_classifier --data FILE.jsonl --out WEIGHTS [--positive precise]\n"
          "         [--negative fast] [--epochs 30] [--lr 0.5] [--seed 42] [--holdout 0.2]\n"
          "         [--prune 0.001]\n"
          "Trains a hashed char n-gram logistic regression (p = P(positive pool)) with SGD and\n"
          "prints train and held-out accuracy. Same data + seed = same weights file.\n",
          stderr);
}

static int add_example(dataset *d, const char *text, int label) {
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 256;
        clf_example *ex = realloc(d->ex, cap * sizeof *ex);
        if (!ex) return -ENOMEM;
        d->ex = ex;
        char **t = realloc(d->texts, cap * sizeof *t);
        if (!t) return -ENOMEM;
        d->texts = t;
        d->cap = cap;
    }
    if (!(d->texts[d->n] = strdup(text))) return -ENOMEM;
    d->ex[d->n].text = d->texts[d->n];
    d->ex[d->n].label = label;
    d->n++;
    return 0;
}

static int load_jsonl(const char *path, const char *pos, const char *neg, dataset *d, sol_err *e) {
    FILE *f = fopen(path, "r");
    if (!f) return sol_err_set(e, -errno, "%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    unsigned ln = 0;
    int rc = 0;
    while (!rc && getline(&line, &cap, f) > 0) {
        ln++;
        if (line[strspn(line, " \t\r\n")] == '\0') continue;
        json_error_t jerr;
        json_t *o = json_loads(line, 0, &jerr);
        const char *text = json_string_value(json_object_get(o, "text"));
        const char *pool = json_string_value(json_object_get(o, "pool"));
        if (!o)
            rc = sol_err_set(e, -EINVAL, "%s:%u:%d: invalid JSON: %s", path, ln, jerr.column,
                             jerr.text);
        else if (!text || !pool)
            rc = sol_err_set(e, -EINVAL, "%s:%u: expected {\"text\": string, \"pool\": string}",
                             path, ln);
        else if (strcmp(pool, pos) && strcmp(pool, neg))
            rc = sol_err_set(e, -EINVAL, "%s:%u: pool '%s' is neither '%s' nor '%s'", path, ln,
                             pool, pos, neg);
        else if (add_example(d, text, !strcmp(pool, pos)) < 0)
            rc = sol_err_set(e, -ENOMEM, "out of memory");
        json_decref(o);
    }
    free(line);
    fclose(f);
    return rc;
}

int main(int argc, char **argv) {
    const char *data = NULL, *out = NULL, *pos = "precise", *neg = "fast";
    clf_train_opts o = {30, 0.5f, 1e-6f, 42};
    double holdout = 0.2;
    float prune = 1e-3f;
    int help = 0;
    unsigned long long seed = o.seed;
    int epochs = (int)o.epochs;
    const sol_arg args[] = {
        {"--data", 0, SOL_ARG_STR, &data, 0, 0, 0, NULL, NULL, NULL},
        {"--out", 0, SOL_ARG_STR, &out, 0, 0, 0, NULL, NULL, NULL},
        {"--positive", 0, SOL_ARG_STR, &pos, 0, 0, 0, NULL, NULL, NULL},
        {"--negative", 0, SOL_ARG_STR, &neg, 0, 0, 0, NULL, NULL, NULL},
        {"--epochs", 0, SOL_ARG_INT, &epochs, 1, 100000, 0, NULL, NULL, NULL},
        {"--lr", 0, SOL_ARG_FLOAT, &o.lr, 0, 100, 1, NULL, NULL, NULL},
        {"--seed", 0, SOL_ARG_U64, &seed, 0, 0, 0, NULL, NULL, NULL},
        {"--holdout", 0, SOL_ARG_DOUBLE, &holdout, 0, 0.9, 0, NULL, NULL, NULL},
        {"--prune", 0, SOL_ARG_FLOAT, &prune, 0, 1, 0, NULL, NULL, NULL},
        {"--help", 'h', SOL_ARG_SWITCH, &help, 0, 0, 0, NULL, NULL, NULL},
    };
    sol_err ae = {0};
    int npos = sol_args_parse(args, sizeof args / sizeof args[0], argc, argv, &ae);
    if (npos < 0) return fprintf(stderr, "sol-train_classifier: %s\n", ae.msg), 2;
    if (help) return usage(), 0;
    if (npos > 0) {
        fprintf(stderr, "sol-train_classifier: unexpected argument %s\n", argv[1]);
        return 2;
    }
    o.seed = seed;
    o.epochs = (unsigned)epochs;
    if (!data || !out || holdout < 0 || holdout >= 1) {
        usage();
        return 2;
    }
    sol_err e = {0};
    dataset d = {0};
    clf_model *m = clf_model_new(pos, neg);
    int rc = m ? load_jsonl(data, pos, neg, &d, &e) : sol_err_set(&e, -ENOMEM, "out of memory");
    /* Deterministic split: every k-th example is held out, so classes stay mixed in both. */
    size_t k = holdout > 0 ? (size_t)(1.0 / holdout + 0.5) : 0;
    clf_example *train = calloc(d.n + 1, sizeof *train), *test = calloc(d.n + 1, sizeof *test);
    size_t ntrain = 0, ntest = 0;
    for (size_t i = 0; !rc && train && test && i < d.n; i++) {
        if (k && i % k == k - 1)
            test[ntest++] = d.ex[i];
        else
            train[ntrain++] = d.ex[i];
    }
    if (!rc) rc = clf_model_train(m, train, ntrain, &o, &e);
    if (!rc) {
        printf("examples: %zu train, %zu held out\n", ntrain, ntest);
        printf("train accuracy:    %.3f\n", clf_model_accuracy(m, train, ntrain));
        if (ntest) printf("held-out accuracy: %.3f\n", clf_model_accuracy(m, test, ntest));
        rc = clf_model_save(m, out, prune, &e);
    }
    if (!rc)
        printf("wrote %s (positive=%s negative=%s)\n", out, pos, neg);
    else
        fprintf(stderr, "sol-train_classifier: %s\n", e.msg);
    for (size_t i = 0; i < d.n; i++)
        free(d.texts[i]);
    free(d.texts);
    free(d.ex);
    free(train);
    free(test);
    clf_model_free(m);
    return rc ? 1 : 0;
}
