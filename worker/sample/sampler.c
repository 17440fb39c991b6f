/* sampler: one logits row -> one token.
 *
 * Why it is shaped this way:
 * - Speed without sorting the vocabulary: top-k keeps a k-entry heap; top-p finds the crossing
 *   point on a mass histogram and sorts only the tokens of the crossing bin; min-p is a
 *   threshold; with no truncation the distribution stays dense. Exponentials run 8 lanes wide.
 * - Exactness: every truncation works on a strict total order (logit descending, id ascending),
 *   so ties never depend on qsort's instability, and top-p's threshold trick keeps exactly the set
 *   a full sort would keep (falling back to a full sort if rounding disagrees).
 * - One draw path: every kept set ends in id order with float probabilities, and both
 *   sampler_sample and sampler_sample_from_probs walk the same inverse CDF in id order, so the
 *   dense and sparse paths pick the same token for the same uniform.
 * - Scratch invariant: `counts` and `seen` are all zero between calls (each call clears what it
 *   set), so penalties cost O(history), not O(vocab). */
#include "sampler.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

/* Fused multiply-adds would round differently from machine to machine (clang contracts by
 * default; GCC does not under -std=c11): keep every product and sum separately rounded. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

typedef struct cand {
    float s; /* penalized, max-subtracted, temperature-scaled logit (<= 0) */
    int32_t id;
    float p; /* weight, then probability once normalized */
} cand;

struct sampler {
    int32_t n_vocab;
    cand *cands;
    uint32_t *counts;
    uint8_t *seen;
    float *raw; /* raw logits kept for logprobs, since the row is modified in place */
    float *w;   /* exp weights, then the dense distribution when nothing was truncated */
    /* the last sampler_sample, for sampler_resample_allowed and sampler_redraw */
    enum { LAST_NONE, LAST_GREEDY, LAST_DENSE } last;
    float *last_logits; /* its row after the transforms (penalized; scaled when dense) */
    /* sampler_redraw's view of that row, REDRAW_BLOCK ids a block: the weight left in each
     * block (dense) or its highest logit left (greedy); built by the row's first redraw */
    double *blk;
    int32_t n_blk;
    bool blk_built;
};

#define REDRAW_BLOCK 256

/* The kept set: sparse (c[0, n) in id order) or dense (dense[0, n_vocab), zeros removed). */
typedef struct kept {
    const cand *c;
    const float *dense;
    int32_t n;
} kept;

/* The truncation order: higher logit first, lower id on ties. */
static int better(float sa, int32_t ia, float sb, int32_t ib) {
    return sa > sb || (sa == sb && ia < ib);
}

static int cmp_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (better(x->s, x->id, y->s, y->id)) return -1;
    return better(y->s, y->id, x->s, x->id) ? 1 : 0;
}

static int cmp_id(const void *a, const void *b) {
    const cand *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* exp(x) for x <= 0 (-inf gives exactly 0) to within a few ulp, from plain float arithmetic:
 * the same bits on every machine and libc (expf's may change between glibc versions, which
 * would break determinism across replicas), and it runs 8 lanes at a time through GCC/Clang
 * vector extensions (no FMA contraction under -std=c11, so every lane rounds alike).
 * x = n ln2 + r with |r| <= ln2/2 (ln2 split in an exact head and a tail), then a degree-7
 * Taylor series for e^r (truncation error < 3e-9), scaled by 2^n through the exponent bits. */
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

#define V8(x)                                                                                      \
    { x, x, x, x, x, x, x, x }

/* out[0, 8) = exp(in[0, 8)); through memory, since passing 32-byte vectors by value would
 * depend on whether AVX is enabled (GCC's -Wpsabi). */
static inline __attribute__((always_inline)) void exp_nonpos8(const float *in, float *out) {
    v8f x;
    memcpy(&x, in, sizeof x);
    const v8f lo = V8(-87.0f); /* keeps 2^n a normal number */
    v8i small = x < lo;
    v8f xc = (v8f)(((v8i)x & ~small) | ((v8i)lo & small));
    const v8f magic = V8(12582912.0f); /* 1.5 * 2^23: adding it rounds to an integer */
    v8f n = (xc * 1.44269504f + magic) - magic;
    v8f r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    v8f e = V8(1.0f / 5040);
    e = e * r + 1.0f / 720;
    e = e * r + 1.0f / 120;
    e = e * r + 1.0f / 24;
    e = e * r + 1.0f / 6;
    e = e * r + 0.5f;
    e = e * r + 1.0f;
    e = e * r + 1.0f;
    v8i bits = (__builtin_convertvector(n, v8i) + 127) << 23;
    x = (v8f)((v8i)(e * (v8f)bits) & ~small);
    memcpy(out, &x, sizeof x);
}

#define CHUNK 8

/* One value through the same lanes, so scalar and bulk results are bit-identical. */
static float exp_nonpos(float x) {
    float b[CHUNK] = {x, 0, 0, 0, 0, 0, 0, 0};
    exp_nonpos8(b, b);
    return b[0];
}

static void exp_all(const float *s, float *w, int32_t n) {
    int32_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK)
        exp_nonpos8(s + i, w + i);
    for (; i < n; i++)
        w[i] = exp_nonpos(s[i]);
}

/* l[i] = (l[i] - mx) / t, eight at a time. */
static void shift_scale(float *l, int32_t n, float mx, float t) {
    int32_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK) {
        v8f x;
        memcpy(&x, l + i, sizeof x);
        x = (x - mx) / t;
        memcpy(l + i, &x, sizeof x);
    }
    for (; i < n; i++)
        l[i] = (l[i] - mx) / t;
}

static void scale_all(float *w, int32_t n, float k) {
    int32_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK) {
        v8f x;
        memcpy(&x, w + i, sizeof x);
        x = x * k;
        memcpy(w + i, &x, sizeof x);
    }
    for (; i < n; i++)
        w[i] *= k;
}

/* Sum in CHUNK double lanes keyed by index mod CHUNK, so that a sparse list keyed by token id
 * (see lane_sum_sparse) gives bit-identical totals: adding the dense path's zeros is exact. */
static double lane_sum(const float *w, int32_t n) {
    double acc[CHUNK] = {0};
    int32_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK)
        for (int j = 0; j < CHUNK; j++)
            acc[j] += w[i + j];
    for (; i < n; i++)
        acc[i % CHUNK] += w[i];
    double z = 0.0;
    for (int j = 0; j < CHUNK; j++)
        z += acc[j];
    return z;
}

static double lane_sum_sparse(const cand *c, int32_t n) {
    double acc[CHUNK] = {0};
    for (int32_t i = 0; i < n; i++)
        acc[c[i].id % CHUNK] += c[i].p;
    double z = 0.0;
    for (int j = 0; j < CHUNK; j++)
        z += acc[j];
    return z;
}

/* Lowest id holding the maximum; the max itself by a chunked reduction (no NaNs by now). */
static int32_t argmax(const float *l, int32_t n) {
    float m[CHUNK];
    for (int j = 0; j < CHUNK; j++)
        m[j] = -INFINITY;
    int32_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK)
        for (int j = 0; j < CHUNK; j++)
            m[j] = l[i + j] > m[j] ? l[i + j] : m[j];
    float mx = -INFINITY;
    for (int j = 0; j < CHUNK; j++)
        mx = m[j] > mx ? m[j] : mx;
    for (; i < n; i++)
        mx = l[i] > mx ? l[i] : mx;
    for (i = 0; i < n - 1; i++)
        if (l[i] == mx) break;
    return i;
}

sampler_params sampler_params_default(void) {
    return sol_sampling_default();
}

int sampler_params_check(const sampler_params *p, sol_err *err) {
    if (!p) return sol_err_set(err, -EINVAL, "sampling: params is NULL");
    int rc = sol_sampling_check(p, err); /* the table's bounds (common/sampling.c) */
    if (rc) return sol_err_wrap(err, "sampling: "), rc;
    if (p->penalty_last_n < -1)
        return sol_err_set(err, -EINVAL,
                           "sampling: penalty_last_n must be -1 (all) or >= 0, got %d",
                           (int)p->penalty_last_n);
    if (p->n_logprobs < 0 || p->n_logprobs > SAMPLER_MAX_LOGPROBS)
        return sol_err_set(err, -EINVAL, "sampling: logprobs must be in [0, %d], got %d",
                           SAMPLER_MAX_LOGPROBS, (int)p->n_logprobs);
    return 0;
}

int sampler_seq_init(sampler_seq *seq, const sampler_params *params, int32_t n_prompt,
                     sol_err *err) {
    int rc = sampler_params_check(params, err);
    if (rc) return rc;
    if (n_prompt < 0)
        return sol_err_set(err, -EINVAL, "sampling: n_prompt must be >= 0, got %d", (int)n_prompt);
    seq->params = *params;
    seq->n_prompt = n_prompt;
    seq->pos = 0;
    return 0;
}

void sampler_seq_set_position(sampler_seq *seq, uint64_t i) {
    seq->pos = i;
}

double sampler_seq_uniform(const sampler_seq *seq, uint64_t offset, uint32_t lane) {
    return sol_rng_uniform(seq->params.seed, seq->pos + offset, lane);
}

sampler *sampler_new(int32_t n_vocab, sol_err *err) {
    if (n_vocab <= 0)
        return sol_err_set(err, -EINVAL, "sampler: n_vocab must be > 0, got %d", (int)n_vocab),
               NULL;
    sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->n_vocab = n_vocab;
        s->cands = malloc((size_t)n_vocab * sizeof *s->cands);
        s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
        s->seen = calloc((size_t)n_vocab, sizeof *s->seen);
        s->raw = malloc((size_t)n_vocab * sizeof *s->raw);
        s->w = malloc((size_t)n_vocab * sizeof *s->w);
        s->n_blk = (n_vocab + REDRAW_BLOCK - 1) / REDRAW_BLOCK;
        s->blk = malloc((size_t)s->n_blk * sizeof *s->blk);
    }
    if (!s || !s->cands || !s->counts || !s->seen || !s->raw || !s->w || !s->blk) {
        sampler_free(s);
        sol_err_set(err, -ENOMEM, "sampler: out of memory for a %d-token vocabulary", (int)n_vocab);
        return NULL;
    }
    return s;
}

void sampler_free(sampler *s) {
    if (!s) return;
    free(s->cands);
    free(s->counts);
    free(s->seen);
    free(s->raw);
    free(s->w);
    free(s->blk);
    free(s);
}

int32_t sampler_n_vocab(const sampler *s) {
    return s->n_vocab;
}

/* NaN -> -inf (never chosen); +inf is a model fault we refuse to guess around. */
static int sanitize(float *logits, int32_t n, sol_err *err) {
    int32_t n_finite = 0;
    for (int32_t i = 0; i < n; i++) {
        float v = logits[i];
        if (isnan(v)) {
            logits[i] = -INFINITY;
        } else if (isinf(v)) {
            if (v > 0)
                return sol_err_set(err, -ERANGE, "sampler: logit of token %d is +inf", (int)i);
        } else {
            n_finite++;
        }
    }
    if (n_finite == 0)
        return sol_err_set(err, -ERANGE, "sampler: no finite logit among %d tokens", (int)n);
    return 0;
}

static int check_history(const sampler *s, const int32_t *hist, int32_t n, sol_err *err) {
    if (n < 0 || (n > 0 && !hist))
        return sol_err_set(err, -EINVAL, "sampler: bad history (%d tokens, pointer %s)", (int)n,
                           hist ? "set" : "NULL");
    for (int32_t i = 0; i < n; i++)
        if (hist[i] < 0 || hist[i] >= s->n_vocab)
            return sol_err_set(err, -EINVAL,
                               "sampler: history[%d] = %d is outside the vocabulary [0, %d)",
                               (int)i, (int)hist[i], (int)s->n_vocab);
    return 0;
}

/* A penalty pushed a logit to +inf; keep it the largest finite value so later math stays real. */
static float clamp_finite(float v) {
    return v > FLT_MAX ? FLT_MAX : v;
}

static void repetition_penalty(sampler *s, const sampler_params *p, float *logits,
                               const int32_t *hist, int32_t n_hist) {
    if (p->repetition_penalty == 1.0f || p->penalty_last_n == 0) return;
    int32_t start = 0;
    if (p->penalty_last_n > 0 && n_hist > p->penalty_last_n) start = n_hist - p->penalty_last_n;
    for (int32_t i = start; i < n_hist; i++) {
        int32_t t = hist[i];
        if (s->seen[t]) continue;
        s->seen[t] = 1;
        float v = logits[t];
        logits[t] = clamp_finite(v > 0 ? v / p->repetition_penalty : v * p->repetition_penalty);
    }
    for (int32_t i = start; i < n_hist; i++)
        s->seen[hist[i]] = 0;
}

static void count_penalties(sampler *s, const sampler_params *p, float *logits, const int32_t *gen,
                            int32_t n_gen) {
    if (p->frequency_penalty == 0.0f && p->presence_penalty == 0.0f) return;
    for (int32_t i = 0; i < n_gen; i++)
        s->counts[gen[i]]++;
    for (int32_t i = 0; i < n_gen; i++) {
        int32_t t = gen[i];
        uint32_t c = s->counts[t];
        if (!c) continue; /* already applied for an earlier occurrence */
        float pen = p->frequency_penalty * (float)c + p->presence_penalty;
        logits[t] = clamp_finite(logits[t] - pen);
        s->counts[t] = 0;
    }
}

/* Raw log-softmax: the chosen token's logprob later, and the top-n alternatives now. */
static double raw_logprobs(const float *raw, float *w, int32_t n, int32_t n_top,
                           sampler_result *out) {
    float m = raw[argmax(raw, n)];
    memcpy(w, raw, (size_t)n * sizeof *w);
    shift_scale(w, n, m, 1.0f);
    exp_all(w, w, n);
    double lse = (double)m + log(lane_sum(w, n));
    int32_t k = 0;
    for (int32_t i = 0; i < n && n_top > 0; i++) {
        float v = raw[i];
        if (v == -INFINITY) continue;
        if (k == n_top && !(v > out->top[k - 1].logprob)) continue; /* ids rise: ties stay out */
        int32_t j = k < n_top ? k++ : k - 1;
        while (j > 0 && v > out->top[j - 1].logprob) {
            out->top[j] = out->top[j - 1];
            j--;
        }
        out->top[j].token = i;
        out->top[j].logprob = v;
    }
    out->n_top = k;
    for (int32_t j = 0; j < k; j++)
        out->top[j].logprob = (float)(out->top[j].logprob - lse);
    return lse;
}

/* Min-heap on `better`: the root is the worst of the kept k. */
static void heap_sift_down(cand *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(h[w].s, h[w].id, h[l].s, h[l].id)) w = l;
        if (r < n && better(h[w].s, h[w].id, h[r].s, h[r].id)) w = r;
        if (w == i) return;
        cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static void heap_sift_up(cand *h, int32_t i) {
    while (i > 0) {
        int32_t parent = (i - 1) / 2;
        if (!better(h[parent].s, h[parent].id, h[i].s, h[i].id)) return;
        cand t = h[i];
        h[i] = h[parent];
        h[parent] = t;
        i = parent;
    }
}

/* The k best tokens, sorted descending. */
static int32_t select_top_k(cand *c, const float *s, int32_t n, int32_t k) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (s[i] == -INFINITY) continue;
        if (m < k) {
            c[m] = (cand){s[i], i, 0.0f};
            heap_sift_up(c, m++);
        } else if (better(s[i], i, c[0].s, c[0].id)) {
            c[0] = (cand){s[i], i, 0.0f};
            heap_sift_down(c, m, 0);
        }
    }
    qsort(c, (size_t)m, sizeof *c, cmp_desc);
    return m;
}

/* Tokens with s >= lo in id order (lo = -inf: every finite token). */
static int32_t gather(cand *c, const float *s, int32_t n, float lo) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (s[i] != -INFINITY && s[i] >= lo) c[m++] = (cand){s[i], i, 0.0f};
    return m;
}

/* Length of the shortest descending prefix whose mass, added to `cum`, reaches `target`;
 * 0 if none does. */
static int32_t top_p_prefix(const cand *c, int32_t m, double cum, double target) {
    for (int32_t i = 0; i < m; i++) {
        cum += exp_nonpos(c[i].s);
        if (cum >= target) return i + 1;
    }
    return 0;
}

/* Top-p over the whole (finite) vocabulary without sorting it: a mass histogram over s
 * (TOP_P_BINS_PER_UNIT bins per nat) finds the bin where the cumulative mass crosses the target.
 * Every token in a higher bin is kept unsorted; only the crossing bin is sorted and walked. If
 * rounding puts the crossing elsewhere than the histogram said, fall back to sorting every finite
 * token, which is always exact. The kept set comes back in no particular order. */
#define TOP_P_BINS_PER_UNIT 8
#define TOP_P_BINS 256 /* covers s in (-32, 0]; the last bin takes everything below */

static int top_p_bin(float s) {
    float b = -s * TOP_P_BINS_PER_UNIT;
    return b < (float)(TOP_P_BINS - 1) ? (int)b : TOP_P_BINS - 1;
}

static int32_t top_p_by_full_sort(cand *c, const float *s, int32_t n, double target) {
    int32_t m = gather(c, s, n, -INFINITY);
    qsort(c, (size_t)m, sizeof *c, cmp_desc);
    int32_t k = top_p_prefix(c, m, 0.0, target);
    return k > 0 ? k : m; /* rounding kept the sum under target: keep everything */
}

static int32_t select_top_p(cand *c, const float *s, float *w, int32_t n, float top_p) {
    double mass[TOP_P_BINS] = {0};
    exp_all(s, w, n);
    for (int32_t i = 0; i < n; i++)
        if (w[i] > 0.0f) mass[top_p_bin(s[i])] += w[i];
    double z = lane_sum(w, n);
    double target = (double)top_p * z, cum = 0.0;
    int cross = 0;
    while (cross < TOP_P_BINS - 1 && cum + mass[cross] < target)
        cum += mass[cross++];
    /* kept whole: bins before `cross`, at the front; the crossing bin goes after them */
    int32_t m = 0;
    double above = 0.0;
    for (int32_t i = 0; i < n; i++)
        if (s[i] != -INFINITY && top_p_bin(s[i]) < cross) {
            c[m++] = (cand){s[i], i, 0.0f};
            above += w[i];
        }
    if (above >= target) return top_p_by_full_sort(c, s, n, target);
    int32_t b = m;
    for (int32_t i = 0; i < n; i++)
        if (s[i] != -INFINITY && top_p_bin(s[i]) == cross) c[b++] = (cand){s[i], i, 0.0f};
    qsort(c + m, (size_t)(b - m), sizeof *c, cmp_desc);
    int32_t k = top_p_prefix(c + m, b - m, above, target);
    if (k == 0) return top_p_by_full_sort(c, s, n, target);
    return m + k;
}

/* Scale to s = (l - max) / T in place, then build the kept set with probabilities: dense when
 * nothing truncates (the default parameters), else sparse in id order. */
static kept truncate_and_normalize(sampler *s, const sampler_params *p, float *l) {
    int32_t n = s->n_vocab;
    float mx = l[argmax(l, n)];
    shift_scale(l, n, mx, p->temperature);
    if ((p->top_k <= 0 || p->top_k >= n) && p->top_p >= 1.0f && p->min_p <= 0.0f) {
        exp_all(l, s->w, n);
        scale_all(s->w, n, (float)(1.0 / lane_sum(s->w, n)));
        return (kept){NULL, s->w, n};
    }
    cand *c = s->cands;
    int32_t m;
    int filtered = 0; /* top-k or top-p ran: min-p still to apply, and id order to restore */
    if (p->top_k > 0 && p->top_k < n) {
        m = select_top_k(c, l, n, p->top_k);
        filtered = 1;
        if (p->top_p < 1.0f) {
            double z = 0.0;
            for (int32_t i = 0; i < m; i++)
                z += exp_nonpos(c[i].s);
            int32_t k = top_p_prefix(c, m, 0.0, (double)p->top_p * z);
            if (k > 0) m = k;
        }
    } else if (p->top_p < 1.0f) {
        m = select_top_p(c, l, s->w, n, p->top_p);
        filtered = 1;
    } else {
        m = gather(c, l, n, p->min_p > 0.0f ? logf(p->min_p) : -INFINITY);
    }
    if (filtered) {
        if (p->min_p > 0.0f) { /* the maximum (s = 0) always survives */
            float lo = logf(p->min_p);
            int32_t k = 0;
            for (int32_t i = 0; i < m; i++)
                if (c[i].s >= lo) c[k++] = c[i];
            m = k;
        }
        qsort(c, (size_t)m, sizeof *c, cmp_id);
    }
    for (int32_t i = 0; i < m; i++)
        c[i].p = exp_nonpos(c[i].s);
    float inv = (float)(1.0 / lane_sum_sparse(c, m));
    for (int32_t i = 0; i < m; i++)
        c[i].p *= inv;
    return (kept){c, NULL, m};
}

/* Shared by sample and probs: validation, logprobs, penalties, then greedy or truncation. */
static int prepare(sampler *s, const sampler_seq *seq, float *logits, const int32_t *hist,
                   int32_t n_hist, sampler_result *lp, double *lse, kept *out, sol_err *err) {
    const sampler_params *p = &seq->params;
    int rc;
    if (!logits) return sol_err_set(err, -EINVAL, "sampler: logits is NULL");
    if ((rc = sanitize(logits, s->n_vocab, err)) || (rc = check_history(s, hist, n_hist, err)))
        return rc;
    if (lp) {
        memcpy(s->raw, logits, (size_t)s->n_vocab * sizeof *logits);
        *lse = raw_logprobs(s->raw, s->w, s->n_vocab, p->n_logprobs, lp);
    }
    repetition_penalty(s, p, logits, hist, n_hist);
    if (n_hist > seq->n_prompt)
        count_penalties(s, p, logits, hist + seq->n_prompt, n_hist - seq->n_prompt);
    if (p->temperature == 0.0f) {
        s->cands[0] = (cand){0.0f, argmax(logits, s->n_vocab), 1.0f};
        *out = (kept){s->cands, NULL, 1};
        return 0;
    }
    *out = truncate_and_normalize(s, p, logits);
    return 0;
}

/* Inverse CDF in id order. Zero weights are never picked and the totals agree bit for bit
 * (lane sums keyed by id), so the sparse and dense walks pick the same token for the same u. */
static int32_t cdf_pick(kept k, double u) {
    const cand *c = k.c;
    const float *dense = k.dense;
    int32_t n = k.n;
    double total = c ? lane_sum_sparse(c, n) : lane_sum(dense, n);
    double target = u * total, cum = 0.0;
    int32_t last = -1;
    for (int32_t i = 0; i < n; i++) {
        float w = c ? c[i].p : dense[i];
        if (w <= 0.0f) continue;
        last = i;
        cum += w;
        if (cum > target) break;
    }
    if (last < 0) return -1;
    return c ? c[last].id : last;
}

int32_t sampler_sample(sampler *s, sampler_seq *seq, float *logits, const int32_t *history,
                       int32_t n_history, sampler_result *out, sol_err *err) {
    sampler_result local;
    sampler_result *r = out ? out : &local;
    int want = seq->params.want_logprobs;
    double lse = 0.0;
    kept k;
    r->logprob = 0.0f;
    r->n_top = 0;
    s->last = LAST_NONE;
    int rc = prepare(s, seq, logits, history, n_history, want ? r : NULL, &lse, &k, err);
    if (rc) return rc;
    s->last = seq->params.temperature == 0.0f ? LAST_GREEDY : k.dense ? LAST_DENSE : LAST_NONE;
    s->last_logits = logits;
    s->blk_built = false;
    double u = sol_rng_uniform(seq->params.seed, seq->pos, SOL_RNG_LANE_SAMPLE);
    seq->pos++;
    int32_t tok = cdf_pick(k, u);
    if (tok < 0) /* every weight underflowed: impossible while the maximum has weight 1 */
        tok = k.c ? k.c[0].id : argmax(logits, s->n_vocab);
    r->token = tok;
    if (want) r->logprob = (float)((double)s->raw[tok] - lse);
    return tok;
}

void sampler_take(sampler_seq *seq, int32_t token, sampler_result *out) {
    out->token = token;
    out->logprob = 0.0f;
    out->n_top = 0;
    seq->pos++;
}

/* The allowed ids in increasing order, a 64-bit word at a time (a grammar state's allowed set is
 * often a few tokens: the loops cost a word test per 64 ids, not a bit test per id). The bits of
 * ids >= n are never set (the mask has n bits). */
#define FOR_ALLOWED(allowed, n, i)                                                                 \
    for (int32_t base_ = 0; base_ < (n); base_ += 64)                                              \
        for (uint64_t w_ = (allowed)[base_ >> 6]; w_; w_ &= w_ - 1)                                \
            for (int32_t i = base_ + __builtin_ctzll(w_), once_ = 1; once_; once_ = 0)

/* The allowed token with the highest value of l (ties: the lowest id, as argmax), or -1. */
static int32_t allowed_argmax(const float *l, const uint64_t *allowed, int32_t n) {
    int32_t best = -1;
    FOR_ALLOWED(allowed, n, i) {
        if (best < 0 || l[i] > l[best]) best = i;
    }
    return best;
}

/* Inverse CDF over the allowed tokens in id order with weights w (or, when those all underflowed,
 * exp(l - max over allowed), the same distribution computed afresh). */
static int32_t allowed_pick(sampler *s, const uint64_t *allowed, double u) {
    int32_t n = s->n_vocab;
    float *w = s->w;
    double total = 0.0;
    FOR_ALLOWED(allowed, n, i) {
        total += w[i];
    }
    if (!(total > 0.0)) {
        int32_t best = allowed_argmax(s->last_logits, allowed, n);
        if (best < 0) return -1;
        float mx = s->last_logits[best];
        FOR_ALLOWED(allowed, n, i) {
            w[i] = exp_nonpos(s->last_logits[i] - mx);
            total += w[i];
        }
    }
    double target = u * total, cum = 0.0;
    int32_t last = -1;
    FOR_ALLOWED(allowed, n, i) {
        if (w[i] <= 0.0f) continue;
        last = i;
        cum += w[i];
        if (cum > target) return last;
    }
    return last;
}

int32_t sampler_resample_allowed(sampler *s, sampler_seq *seq, const uint64_t *allowed,
                                 sol_err *err) {
    if (!allowed) return sol_err_set(err, -EINVAL, "sampler: allowed is NULL");
    if (s->last == LAST_NONE)
        return sol_err_set(err, -EAGAIN, "sampler: the last draw truncated; sample masked logits");
    double u = sol_rng_uniform(seq->params.seed, seq->pos, SOL_RNG_LANE_SAMPLE);
    seq->pos++;
    int32_t tok = s->last == LAST_GREEDY ? allowed_argmax(s->last_logits, allowed, s->n_vocab)
                                         : allowed_pick(s, allowed, u);
    if (tok < 0) return sol_err_set(err, -ENOENT, "sampler: no allowed token");
    return tok;
}

int sampler_probs(sampler *s, const sampler_seq *seq, float *logits, const int32_t *history,
                  int32_t n_history, float *probs, sol_err *err) {
    if (!probs) return sol_err_set(err, -EINVAL, "sampler: probs is NULL");
    s->last = LAST_NONE;
    kept k;
    int rc = prepare(s, seq, logits, history, n_history, NULL, NULL, &k, err);
    if (rc) return rc;
    if (k.dense) {
        memcpy(probs, k.dense, (size_t)s->n_vocab * sizeof *probs);
        return 0;
    }
    memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
    for (int32_t i = 0; i < k.n; i++)
        probs[k.c[i].id] = k.c[i].p;
    return 0;
}

int32_t sampler_sample_from_probs(sampler_seq *seq, const float *probs, int32_t n, sol_err *err) {
    if (!probs || n <= 0)
        return sol_err_set(err, -EINVAL, "sampler: need probs[n] with n > 0, got n = %d", (int)n);
    for (int32_t i = 0; i < n; i++)
        if (!(probs[i] >= 0.0f) || isinf(probs[i]))
            return sol_err_set(err, -EINVAL,
                               "sampler: probs[%d] = %g; expected a finite weight >= 0", (int)i,
                               (double)probs[i]);
    double u = sol_rng_uniform(seq->params.seed, seq->pos, SOL_RNG_LANE_SAMPLE);
    int32_t tok = cdf_pick((kept){NULL, probs, n}, u);
    if (tok < 0) return sol_err_set(err, -EINVAL, "sampler: all %d probabilities are zero", (int)n);
    seq->pos++;
    return tok;
}

/* ---- redraws ------------------------------------------------------------------------------ */

/* Block b's value in sampler_redraw's table: the weight left (dense) or the highest logit left
 * (greedy). Four running sums in a fixed order: the same bits on every machine. */
static double block_value(const sampler *s, int32_t b) {
    int32_t lo = b * REDRAW_BLOCK,
            hi = lo + REDRAW_BLOCK < s->n_vocab ? lo + REDRAW_BLOCK : s->n_vocab;
    if (s->last == LAST_GREEDY) {
        float mx = -INFINITY;
        for (int32_t i = lo; i < hi; i++)
            mx = s->last_logits[i] > mx ? s->last_logits[i] : mx;
        return mx;
    }
    double a[4] = {0, 0, 0, 0};
    int32_t i = lo;
    for (; i + 4 <= hi; i += 4)
        for (int j = 0; j < 4; j++)
            a[j] += s->w[i + j];
    for (; i < hi; i++)
        a[0] += s->w[i];
    return (a[0] + a[1]) + (a[2] + a[3]);
}

/* Greedy: the highest logit left, the lowest id on ties (as argmax). */
static int32_t redraw_greedy(const sampler *s) {
    int32_t best = -1;
    for (int32_t b = 0; b < s->n_blk; b++)
        if (s->blk[b] > -INFINITY && (best < 0 || s->blk[b] > s->blk[best])) best = b;
    if (best < 0) return -1;
    int32_t i = best * REDRAW_BLOCK;
    while ((double)s->last_logits[i] != s->blk[best])
        i++;
    return i;
}

/* Dense: the inverse CDF over the weights left, a block at a time, then within the block. */
static int32_t redraw_dense(const sampler *s, double u) {
    double total = 0.0;
    int32_t last = -1;
    for (int32_t b = 0; b < s->n_blk; b++)
        if (s->blk[b] > 0.0) total += s->blk[b], last = b;
    if (last < 0) return -1;
    double target = u * total, cum = 0.0;
    int32_t b = 0;
    for (; b < last; b++) {
        if (s->blk[b] <= 0.0) continue;
        if (cum + s->blk[b] > target) break;
        cum += s->blk[b];
    }
    int32_t lo = b * REDRAW_BLOCK,
            hi = lo + REDRAW_BLOCK < s->n_vocab ? lo + REDRAW_BLOCK : s->n_vocab;
    int32_t pick = -1;
    for (int32_t i = lo; i < hi; i++) {
        if (s->w[i] <= 0.0f) continue;
        pick = i;
        cum += s->w[i];
        if (cum > target) break;
    }
    return pick;
}

int32_t sampler_redraw(sampler *s, sampler_seq *seq, int32_t refused, sol_err *err) {
    if (s->last == LAST_NONE)
        return sol_err_set(err, -EAGAIN, "sampler: the last draw truncated; sample masked logits");
    if (refused < 0 || refused >= s->n_vocab)
        return sol_err_set(err, -EINVAL, "sampler: refused id %d is outside the vocabulary",
                           (int)refused);
    if (s->last == LAST_GREEDY)
        s->last_logits[refused] = -INFINITY;
    else
        s->w[refused] = 0.0f;
    if (!s->blk_built) {
        for (int32_t b = 0; b < s->n_blk; b++)
            s->blk[b] = block_value(s, b);
        s->blk_built = true;
    } else {
        s->blk[refused / REDRAW_BLOCK] = block_value(s, refused / REDRAW_BLOCK);
    }
    double u = sol_rng_uniform(seq->params.seed, seq->pos, SOL_RNG_LANE_SAMPLE);
    seq->pos++;
    int32_t tok = s->last == LAST_GREEDY ? redraw_greedy(s) : redraw_dense(s, u);
    if (tok < 0) return sol_err_set(err, -ENOENT, "sampler: every token was refused");
    return tok;
}
