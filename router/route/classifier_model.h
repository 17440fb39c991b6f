/* classifier_model: a tiny logistic regression over hashed character n-grams that guesses whether
 * a prompt needs the "precise" pool; it loads from a small text weights file and trains by SGD. */
#ifndef SOL_CLASSIFIER_MODEL_H
#define SOL_CLASSIFIER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define CLF_BUCKETS_LOG2 18
#define CLF_BUCKETS (1u << CLF_BUCKETS_LOG2)
#define CLF_NGRAM_MIN 1
#define CLF_NGRAM_MAX 4
#define CLF_MAX_CODEPOINTS 8192 /* n-grams are taken from the first 8192 characters only */
#define CLF_MAGIC "sol-classifier"
#define CLF_VERSION 1
#define CLF_POOL_MAX 64

typedef struct clf_model {
    float *w; /* CLF_BUCKETS weights, dense in memory; the file stores only non-zero ones */
    float bias;
    char positive[CLF_POOL_MAX]; /* pool chosen when p >= threshold */
    char negative[CLF_POOL_MAX];
} clf_model;

/* New all-zero model; caller frees with clf_model_free. NULL on allocation failure. */
clf_model *clf_model_new(const char *positive, const char *negative);
void clf_model_free(clf_model *m);

/* Load a weights file (format in docs/routing.md); any deviation is an error naming the line. */
int clf_model_load(const char *path, clf_model **out, sol_err *e);
/* Write weights with |w| >= prune (0 keeps every non-zero weight). */
int clf_model_save(const clf_model *m, const char *path, float prune, sol_err *e);

/* Probability that `text` belongs to the positive pool. Allocation-free. */
double clf_model_predict(const clf_model *m, const char *text, size_t len);

typedef struct clf_example {
    const char *text;
    int label; /* 1 = positive pool, 0 = negative */
} clf_example;

typedef struct clf_train_opts {
    unsigned epochs; /* default 30 */
    float lr;        /* default 0.5 */
    float l2;        /* default 1e-6 */
    uint64_t seed;   /* shuffling order; same seed → same weights */
} clf_train_opts;

/* Plain SGD on logistic loss over `n` examples (modifies m in place). */
int clf_model_train(clf_model *m, const clf_example *ex, size_t n, const clf_train_opts *opts,
                    sol_err *e);
/* Fraction of examples classified right at threshold 0.5. */
double clf_model_accuracy(const clf_model *m, const clf_example *ex, size_t n);

#endif
