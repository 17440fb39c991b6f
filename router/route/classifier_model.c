/* classifier_model: hashed character n-gram logistic regression.
 * Why this shape: it needs no tokenizer and no vocabulary file, so the router stays tokenizer-free;
 * signed hashing keeps collisions unbiased; the feature vector is L2-normalized so prompt length
 * enters only through an explicit log-length bucket, not by inflating every weight's sum. */
#include "classifier_model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

#define LINE_MAX_LEN 512

clf_model *clf_model_new(const char *positive, const char *negative) {
    clf_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->w = calloc(CLF_BUCKETS, sizeof *m->w);
    if (!m->w) {
        free(m);
        return NULL;
    }
    snprintf(m->positive, sizeof m->positive, "%s", positive ? positive : "precise");
    snprintf(m->negative, sizeof m->negative, "%s", negative ? negative : "fast");
    return m;
}

void clf_model_free(clf_model *m) {
    if (!m) return;
    free(m->w);
    free(m);
}

/* ---- features -------------------------------------------------------------------------------- */

/* Avalanche so the sign bit and the low bucket bits are independent. */
static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

typedef void (*feature_fn)(void *ctx, uint32_t bucket, float value);

/* Byte length of the UTF-8 character at p (invalid bytes count as one character). */
static size_t char_len(const unsigned char *p, size_t left) {
    size_t l = *p < 0x80 ? 1 : *p >= 0xF0 ? 4 : *p >= 0xE0 ? 3 : *p >= 0xC0 ? 2 : 1;
    return l > left ? left : l;
}

/* Calls fn for every feature of text: n-grams (n=1..4 characters, lower-cased) plus one
 * log2-length bucket. Values are scaled so the vector has unit L2 norm (up to collisions). */
static void for_each_feature(const char *text, size_t len, feature_fn fn, void *ctx) {
    const unsigned char *u = (const unsigned char *)text;
    size_t starts[CLF_NGRAM_MAX + 1]; /* byte offsets of the last few characters, ring buffer */
    size_t nchars = 0, total_chars = 0, pos = 0;
    for (size_t i = 0; i < len; i += char_len(u + i, len - i))
        total_chars++;
    size_t L = total_chars < CLF_MAX_CODEPOINTS ? total_chars : CLF_MAX_CODEPOINTS;
    size_t count = 1;
    for (size_t n = CLF_NGRAM_MIN; n <= CLF_NGRAM_MAX; n++)
        count += L >= n ? L - n + 1 : 0;
    float value = (float)(1.0 / sqrt((double)count));

    unsigned lenbucket = 0;
    while ((1ull << lenbucket) < total_chars + 1)
        lenbucket++;
    uint64_t lh = mix(sol_fnv64_lower(SOL_FNV64_INIT ^ 0x4c454eull, &lenbucket, sizeof lenbucket));
    fn(ctx, (uint32_t)(lh & (CLF_BUCKETS - 1)), (lh >> 63) ? -value : value);

    while (pos < len && nchars < L) {
        size_t cl = char_len(u + pos, len - pos);
        starts[nchars % (CLF_NGRAM_MAX + 1)] = pos;
        nchars++;
        size_t end = pos + cl;
        for (size_t n = CLF_NGRAM_MIN; n <= CLF_NGRAM_MAX && n <= nchars; n++) {
            size_t s = starts[(nchars - n) % (CLF_NGRAM_MAX + 1)];
            uint64_t h = mix(sol_fnv64_lower(SOL_FNV64_INIT ^ n, u + s, end - s));
            fn(ctx, (uint32_t)(h & (CLF_BUCKETS - 1)), (h >> 63) ? -value : value);
        }
        pos = end;
    }
}

struct dot_ctx {
    const float *w;
    double sum;
};

static void dot_cb(void *ctx, uint32_t b, float v) {
    struct dot_ctx *d = ctx;
    d->sum += (double)d->w[b] * v;
}

static double sigmoid(double z) {
    return z >= 0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z));
}

double clf_model_predict(const clf_model *m, const char *text, size_t len) {
    struct dot_ctx d = {m->w, m->bias};
    for_each_feature(text, len, dot_cb, &d);
    return sigmoid(d.sum);
}

/* ---- training -------------------------------------------------------------------------------- */

struct step_ctx {
    float *w;
    float g; /* lr * (label - p) */
};

static void step_cb(void *ctx, uint32_t b, float v) {
    struct step_ctx *s = ctx;
    s->w[b] += s->g * v;
}

static uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

int clf_model_train(clf_model *m, const clf_example *ex, size_t n, const clf_train_opts *opts,
                    sol_err *e) {
    clf_train_opts o = {30, 0.5f, 1e-6f, 42};
    if (opts) o = *opts;
    if (!o.epochs) o.epochs = 30;
    if (o.lr <= 0) o.lr = 0.5f;
    if (!n) return sol_err_set(e, -EINVAL, "no training examples");
    size_t *order = malloc(n * sizeof *order);
    if (!order) return sol_err_set(e, -ENOMEM, "out of memory for %zu examples", n);
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    uint64_t rng = o.seed ? o.seed : 0x9e3779b97f4a7c15ull;
    for (unsigned ep = 0; ep < o.epochs; ep++) {
        for (size_t i = n; i > 1; i--) { /* Fisher-Yates with the fixed seed */
            size_t j = (size_t)(xorshift(&rng) % i);
            size_t t = order[i - 1];
            order[i - 1] = order[j];
            order[j] = t;
        }
        float lr = o.lr / (1.0f + 0.1f * (float)ep);
        for (size_t k = 0; k < n; k++) {
            const clf_example *x = &ex[order[k]];
            size_t len = strlen(x->text);
            double p = clf_model_predict(m, x->text, len);
            struct step_ctx s = {m->w, lr * (float)((x->label ? 1.0 : 0.0) - p)};
            for_each_feature(x->text, len, step_cb, &s);
            m->bias += s.g;
        }
        if (o.l2 > 0) /* weight decay once per epoch: cheap, and enough for ~1k examples */
            for (size_t b = 0; b < CLF_BUCKETS; b++)
                m->w[b] *= 1.0f - o.l2;
    }
    free(order);
    return 0;
}

double clf_model_accuracy(const clf_model *m, const clf_example *ex, size_t n) {
    if (!n) return 0;
    size_t right = 0;
    for (size_t i = 0; i < n; i++) {
        double p = clf_model_predict(m, ex[i].text, strlen(ex[i].text));
        right += (p >= 0.5) == (ex[i].label != 0);
    }
    return (double)right / (double)n;
}

/* ---- file format ----------------------------------------------------------------------------- */

int clf_model_save(const clf_model *m, const char *path, float prune, sol_err *e) {
    FILE *f = fopen(path, "w");
    if (!f) return sol_err_set(e, -errno, "%s: cannot open for writing: %s", path, strerror(errno));
    size_t nnz = 0;
    for (size_t b = 0; b < CLF_BUCKETS; b++)
        nnz += m->w[b] != 0 && fabsf(m->w[b]) >= prune;
    fprintf(f,
            "%s %d\nbuckets %u\nngrams %d %d\npositive %s\nnegative %s\nbias %.9g\nweights %zu\n",
            CLF_MAGIC, CLF_VERSION, CLF_BUCKETS, CLF_NGRAM_MIN, CLF_NGRAM_MAX, m->positive,
            m->negative, (double)m->bias, nnz);
    for (size_t b = 0; b < CLF_BUCKETS; b++)
        if (m->w[b] != 0 && fabsf(m->w[b]) >= prune) fprintf(f, "%zu %.6g\n", b, (double)m->w[b]);
    int bad = ferror(f);
    if (fclose(f) || bad) return sol_err_set(e, -EIO, "%s: write failed", path);
    return 0;
}

/* Read one line into buf (without newline); 0 ok, 1 EOF, -1 too long. */
static int read_line(FILE *f, char *buf, size_t cap, unsigned *lineno) {
    if (!fgets(buf, (int)cap, f)) return 1;
    (*lineno)++;
    size_t n = strlen(buf);
    if (n && buf[n - 1] == '\n')
        buf[--n] = '\0';
    else if (!feof(f))
        return -1;
    return 0;
}

static int expect_line(FILE *f, const char *path, unsigned *ln, char *buf, const char *what,
                       sol_err *e) {
    int rc = read_line(f, buf, LINE_MAX_LEN, ln);
    if (rc == 1)
        return sol_err_set(e, -EINVAL, "%s: truncated: expected '%s' at line %u", path, what,
                           *ln + 1);
    if (rc < 0) return sol_err_set(e, -EINVAL, "%s:%u: line too long", path, *ln);
    return 0;
}

static int parse_header(FILE *f, const char *path, clf_model *m, size_t *nnz, unsigned *ln,
                        sol_err *e) {
    char buf[LINE_MAX_LEN], word[CLF_POOL_MAX];
    int a = 0, b = 0;
    unsigned buckets = 0;
    if (expect_line(f, path, ln, buf, CLF_MAGIC, e)) return -EINVAL;
    if (sscanf(buf, "sol-classifier %d", &a) != 1)
        return sol_err_set(e, -EINVAL,
                           "%s:1: not a Sol classifier file (expected '%s %d', found '%.40s')",
                           path, CLF_MAGIC, CLF_VERSION, buf);
    if (a != CLF_VERSION)
        return sol_err_set(e, -EINVAL, "%s:1: unsupported version %d (this build reads %d)", path,
                           a, CLF_VERSION);
    if (expect_line(f, path, ln, buf, "buckets", e)) return -EINVAL;
    if (sscanf(buf, "buckets %u", &buckets) != 1 || buckets != CLF_BUCKETS)
        return sol_err_set(e, -EINVAL, "%s:%u: expected 'buckets %u', found '%.40s'", path, *ln,
                           CLF_BUCKETS, buf);
    if (expect_line(f, path, ln, buf, "ngrams", e)) return -EINVAL;
    if (sscanf(buf, "ngrams %d %d", &a, &b) != 2 || a != CLF_NGRAM_MIN || b != CLF_NGRAM_MAX)
        return sol_err_set(e, -EINVAL, "%s:%u: expected 'ngrams %d %d', found '%.40s'", path, *ln,
                           CLF_NGRAM_MIN, CLF_NGRAM_MAX, buf);
    if (expect_line(f, path, ln, buf, "positive", e)) return -EINVAL;
    if (sscanf(buf, "positive %63s", word) != 1)
        return sol_err_set(e, -EINVAL, "%s:%u: expected 'positive POOL'", path, *ln);
    snprintf(m->positive, sizeof m->positive, "%s", word);
    if (expect_line(f, path, ln, buf, "negative", e)) return -EINVAL;
    if (sscanf(buf, "negative %63s", word) != 1)
        return sol_err_set(e, -EINVAL, "%s:%u: expected 'negative POOL'", path, *ln);
    snprintf(m->negative, sizeof m->negative, "%s", word);
    if (expect_line(f, path, ln, buf, "bias", e)) return -EINVAL;
    if (sscanf(buf, "bias %f", &m->bias) != 1 || !isfinite(m->bias))
        return sol_err_set(e, -EINVAL, "%s:%u: expected 'bias NUMBER'", path, *ln);
    if (expect_line(f, path, ln, buf, "weights", e)) return -EINVAL;
    if (sscanf(buf, "weights %zu", nnz) != 1 || *nnz > CLF_BUCKETS)
        return sol_err_set(e, -EINVAL, "%s:%u: expected 'weights N' with N <= %u", path, *ln,
                           CLF_BUCKETS);
    return 0;
}

int clf_model_load(const char *path, clf_model **out, sol_err *e) {
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (!f)
        return sol_err_set(e, -errno, "%s: cannot open classifier weights: %s", path,
                           strerror(errno));
    clf_model *m = clf_model_new(NULL, NULL);
    if (!m) {
        fclose(f);
        return sol_err_set(e, -ENOMEM, "out of memory");
    }
    unsigned ln = 0;
    size_t nnz = 0;
    int rc = parse_header(f, path, m, &nnz, &ln, e);
    char buf[LINE_MAX_LEN];
    for (size_t i = 0; !rc && i < nnz; i++) {
        unsigned long idx;
        float w;
        char extra;
        if ((rc = expect_line(f, path, &ln, buf, "INDEX WEIGHT", e))) break;
        if (sscanf(buf, "%lu %f %c", &idx, &w, &extra) != 2 || idx >= CLF_BUCKETS || !isfinite(w))
            rc = sol_err_set(e, -EINVAL,
                             "%s:%u: expected 'INDEX WEIGHT' with INDEX < %u, found '%.40s'", path,
                             ln, CLF_BUCKETS, buf);
        else
            m->w[idx] = w;
    }
    if (!rc && read_line(f, buf, sizeof buf, &ln) == 0)
        rc = sol_err_set(e, -EINVAL, "%s:%u: trailing data after %zu weights", path, ln, nnz);
    fclose(f);
    if (rc) {
        clf_model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}
