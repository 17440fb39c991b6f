/* Promise: exact penalties/truncation, draws fixed by (seed, position), raw logprobs. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "rng.h"
#include "sampler.h"

#define BIG_VOCAB 32000

static sampler_seq make_seq(sampler_params p, int32_t n_prompt) {
    sampler_seq seq;
    sol_err e = {0};
    assert_int_equal(sampler_seq_init(&seq, &p, n_prompt, &e), 0);
    return seq;
}

static int32_t sample_copy(sampler *s, sampler_seq *seq, const float *logits, int32_t n,
                           const int32_t *hist, int32_t n_hist, sampler_result *r) {
    float buf[BIG_VOCAB];
    memcpy(buf, logits, (size_t)n * sizeof *buf);
    sol_err e = {0};
    int32_t t = sampler_sample(s, seq, buf, hist, n_hist, r, &e);
    if (t < 0) fail_msg("sampler_sample: %s", e.msg);
    return t;
}

static void probs_copy(sampler *s, const sampler_seq *seq, const float *logits, int32_t n,
                       const int32_t *hist, int32_t n_hist, float *probs) {
    float buf[BIG_VOCAB];
    memcpy(buf, logits, (size_t)n * sizeof *buf);
    sol_err e = {0};
    if (sampler_probs(s, seq, buf, hist, n_hist, probs, &e)) fail_msg("sampler_probs: %s", e.msg);
}

static void random_logits(float *l, int32_t n, uint64_t seed, float scale) {
    for (int32_t i = 0; i < n; i++)
        l[i] = (float)(sol_rng_uniform(seed, i, 7) * 2.0 - 1.0) * scale;
}

static void test_greedy_ties_lowest_id(void **state) {
    (void)state;
    sampler *s = sampler_new(5, NULL);
    sampler_params p = sampler_params_default();
    p.temperature = 0.0f;
    sampler_seq seq = make_seq(p, 0);
    const float l[5] = {1.0f, 3.0f, -2.0f, 3.0f, 2.9f};
    for (int i = 0; i < 20; i++)
        assert_int_equal(sample_copy(s, &seq, l, 5, NULL, 0, NULL), 1);
    assert_int_equal(seq.pos, 20); /* greedy still consumes draws: position = tokens sampled */
    float probs[5];
    probs_copy(s, &seq, l, 5, NULL, 0, probs);
    assert_true(probs[1] == 1.0f && probs[3] == 0.0f && probs[0] == 0.0f);
    sampler_free(s);
}

static void test_temperature_to_zero_is_greedy(void **state) {
    (void)state;
    sampler *s = sampler_new(4, NULL);
    sampler_params p = sampler_params_default();
    p.temperature = 0.01f;
    p.seed = 99;
    sampler_seq seq = make_seq(p, 0);
    const float l[4] = {0.0f, 1.0f, 0.5f, 0.9f};
    for (int i = 0; i < 500; i++)
        assert_int_equal(sample_copy(s, &seq, l, 4, NULL, 0, NULL), 1);
    float probs[4];
    probs_copy(s, &seq, l, 4, NULL, 0, probs);
    assert_true(probs[1] > 0.9999f);
    /* and at T = 1 the others do get drawn */
    p.temperature = 1.0f;
    seq = make_seq(p, 0);
    int other = 0;
    for (int i = 0; i < 200; i++)
        other += sample_copy(s, &seq, l, 4, NULL, 0, NULL) != 1;
    assert_true(other > 50);
    sampler_free(s);
}

static void test_top_k_one_is_greedy(void **state) {
    (void)state;
    sampler *s = sampler_new(1000, NULL);
    static float l[1000];
    for (uint64_t k = 0; k < 30; k++) {
        random_logits(l, 1000, k, 5.0f);
        sampler_params p = sampler_params_default();
        p.top_k = 1;
        p.seed = k;
        p.temperature = 1.5f;
        sampler_seq seq = make_seq(p, 0);
        int32_t want = 0;
        for (int32_t i = 1; i < 1000; i++)
            if (l[i] > l[want]) want = i;
        assert_int_equal(sample_copy(s, &seq, l, 1000, NULL, 0, NULL), want);
    }
    sampler_free(s);
}

static void test_top_k_ties_keep_lower_ids(void **state) {
    (void)state;
    sampler *s = sampler_new(6, NULL);
    const float l[6] = {1.0f, 2.0f, 0.0f, 2.0f, 2.0f, -1.0f};
    float probs[6];
    sampler_params p = sampler_params_default();
    p.top_k = 2;
    sampler_seq seq = make_seq(p, 0);
    probs_copy(s, &seq, l, 6, NULL, 0, probs);
    assert_float_equal(probs[1], 0.5, 1e-6);
    assert_float_equal(probs[3], 0.5, 1e-6);
    assert_true(probs[4] == 0.0f && probs[0] == 0.0f);
    p.top_k = 0;
    p.top_p = 0.5f; /* mass 1/3 per tied token: two of them, again the lower ids */
    p.temperature = 0.01f;
    seq = make_seq(p, 0);
    probs_copy(s, &seq, l, 6, NULL, 0, probs);
    assert_float_equal(probs[1], 0.5, 1e-6);
    assert_float_equal(probs[3], 0.5, 1e-6);
    assert_true(probs[4] == 0.0f);
    sampler_free(s);
}

/* log of {0.5, 0.2, 0.15, 0.1, 0.05}, stored under shuffled ids to exercise the ordering */
static const int32_t SHUF[5] = {3, 0, 4, 1, 2};
static const double PROB5[5] = {0.5, 0.2, 0.15, 0.1, 0.05};

static void five_logits(float *l) {
    for (int i = 0; i < 5; i++)
        l[SHUF[i]] = (float)log(PROB5[i]) + 1.25f;
}

static void test_top_p_smallest_set(void **state) {
    (void)state;
    sampler *s = sampler_new(5, NULL);
    float l[5], probs[5];
    five_logits(l);
    const struct {
        float top_p;
        int keep;
    } cases[] = {{0.45f, 1}, {0.49f, 1}, {0.69f, 2}, {0.71f, 3}, {0.86f, 4}, {0.96f, 5}, {1.0f, 5}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sampler_params p = sampler_params_default();
        p.top_p = cases[c].top_p;
        sampler_seq seq = make_seq(p, 0);
        probs_copy(s, &seq, l, 5, NULL, 0, probs);
        double mass = 0;
        for (int i = 0; i < cases[c].keep; i++)
            mass += PROB5[i];
        for (int i = 0; i < 5; i++) {
            double want = i < cases[c].keep ? PROB5[i] / mass : 0.0;
            assert_float_equal(probs[SHUF[i]], want, 1e-5);
        }
    }
    sampler_free(s);
}

static int cmp_desc_ref(const void *a, const void *b) {
    const float *x = *(const float *const *)a, *y = *(const float *const *)b;
    if (*x != *y) return *x > *y ? -1 : 1;
    return x < y ? -1 : (x > y);
}

/* Reference truncation by a full sort, on the big vocabulary: top-k then top-p. */
static void test_truncation_matches_full_sort(void **state) {
    (void)state;
    sampler *s = sampler_new(BIG_VOCAB, NULL);
    static float l[BIG_VOCAB], probs[BIG_VOCAB];
    static const float *order[BIG_VOCAB];
    const struct {
        int32_t k;
        float p, t, scale;
    } cases[] = {{0, 0.9f, 1.0f, 8.0f},
                 {50, 0.95f, 0.8f, 4.0f},
                 {0, 0.5f, 2.0f, 1.0f},
                 {200, 1.0f, 1.0f, 3.0f},
                 {0, 0.99f, 2.0f, 25.0f}}; /* temperature at the table's bound, 2 */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        random_logits(l, BIG_VOCAB, 100 + c, cases[c].scale);
        for (int32_t i = 0; i < BIG_VOCAB; i++)
            order[i] = &l[i];
        qsort(order, BIG_VOCAB, sizeof order[0], cmp_desc_ref);
        int32_t n = cases[c].k > 0 ? cases[c].k : BIG_VOCAB;
        double mx = *order[0], z = 0, cum = 0;
        for (int32_t i = 0; i < n; i++)
            z += exp((*order[i] - mx) / cases[c].t);
        int32_t keep = n;
        if (cases[c].p < 1.0f)
            for (int32_t i = 0; i < n; i++) {
                cum += exp((*order[i] - mx) / cases[c].t);
                if (cum >= cases[c].p * z) {
                    keep = i + 1;
                    break;
                }
            }
        double zk = 0;
        for (int32_t i = 0; i < keep; i++)
            zk += exp((*order[i] - mx) / cases[c].t);
        sampler_params p = sampler_params_default();
        p.top_k = cases[c].k;
        p.top_p = cases[c].p;
        p.temperature = cases[c].t;
        sampler_seq seq = make_seq(p, 0);
        probs_copy(s, &seq, l, BIG_VOCAB, NULL, 0, probs);
        int32_t nonzero = 0;
        for (int32_t i = 0; i < BIG_VOCAB; i++)
            nonzero += probs[i] > 0.0f;
        assert_int_equal(nonzero, keep);
        for (int32_t i = 0; i < keep; i++) {
            int32_t id = (int32_t)(order[i] - l);
            assert_float_equal(probs[id], exp((*order[i] - mx) / cases[c].t) / zk, 1e-6);
        }
    }
    sampler_free(s);
}

static void test_min_p(void **state) {
    (void)state;
    sampler *s = sampler_new(5, NULL);
    float l[5], probs[5];
    five_logits(l);
    sampler_params p = sampler_params_default();
    /* min_p 0.29 keeps p >= 0.145 (three tokens), 0.31 keeps p >= 0.155 (two) */
    const struct {
        float min_p;
        int keep;
        double mass;
    } cases[] = {{0.25f, 3, 0.85}, {0.29f, 3, 0.85}, {0.31f, 2, 0.7}, {1.0f, 1, 0.5}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int32_t top_k = 0; top_k <= 4; top_k += 4) { /* unsorted and sorted paths */
            p.min_p = cases[c].min_p;
            p.top_k = top_k;
            sampler_seq seq = make_seq(p, 0);
            probs_copy(s, &seq, l, 5, NULL, 0, probs);
            for (int i = 0; i < 5; i++)
                assert_float_equal(probs[SHUF[i]],
                                   i < cases[c].keep ? PROB5[i] / cases[c].mass : 0.0, 1e-5);
        }
    sampler_free(s);
}

static void assert_softmax(const float *probs, const double *want_logits, int n) {
    double mx = want_logits[0], z = 0;
    for (int i = 1; i < n; i++)
        mx = fmax(mx, want_logits[i]);
    for (int i = 0; i < n; i++)
        z += exp(want_logits[i] - mx);
    for (int i = 0; i < n; i++)
        assert_float_equal(probs[i], exp(want_logits[i] - mx) / z, 1e-6);
}

static void test_penalties_by_hand(void **state) {
    (void)state;
    sampler *s = sampler_new(5, NULL);
    const float l[5] = {2.0f, -1.0f, 0.5f, 1.0f, 0.25f};
    const int32_t hist[4] = {0, 1, 1, 3}; /* prompt [0], generated [1, 1, 3] */
    float probs[5];

    sampler_params p = sampler_params_default();
    p.repetition_penalty = 2.0f;
    p.penalty_last_n = -1; /* positive logits halve, negative double, once per distinct token */
    sampler_seq seq = make_seq(p, 1);
    probs_copy(s, &seq, l, 5, hist, 4, probs);
    assert_softmax(probs, (const double[]){1.0, -2.0, 0.5, 0.5, 0.25}, 5);

    p.penalty_last_n = 2; /* window = the last two positions: tokens 1 and 3 */
    seq = make_seq(p, 1);
    probs_copy(s, &seq, l, 5, hist, 4, probs);
    assert_softmax(probs, (const double[]){2.0, -2.0, 0.5, 0.5, 0.25}, 5);

    p = sampler_params_default();
    p.frequency_penalty = 0.5f; /* generated only: token 1 twice, token 3 once */
    seq = make_seq(p, 1);
    probs_copy(s, &seq, l, 5, hist, 4, probs);
    assert_softmax(probs, (const double[]){2.0, -2.0, 0.5, 0.5, 0.25}, 5);

    p = sampler_params_default();
    p.presence_penalty = 0.75f;
    seq = make_seq(p, 1);
    probs_copy(s, &seq, l, 5, hist, 4, probs);
    assert_softmax(probs, (const double[]){2.0, -1.75, 0.5, 0.25, 0.25}, 5);

    p.frequency_penalty = -0.5f; /* combined, and negative values encourage */
    p.temperature = 0.5f;
    seq = make_seq(p, 1);
    probs_copy(s, &seq, l, 5, hist, 4, probs);
    assert_softmax(probs, (const double[]){4.0, -1.5, 1.0, 1.5, 0.5}, 5);

    /* the scratch is clean afterwards: no penalty leaks into a call without history */
    p = sampler_params_default();
    p.repetition_penalty = 3.0f;
    p.frequency_penalty = 1.0f;
    seq = make_seq(p, 0);
    probs_copy(s, &seq, l, 5, NULL, 0, probs);
    assert_softmax(probs, (const double[]){2.0, -1.0, 0.5, 1.0, 0.25}, 5);
    sampler_free(s);
}

static void draw_run(sampler *s, uint64_t seed, int32_t *out, int n) {
    static float l[100];
    for (int i = 0; i < 100; i++)
        l[i] = 0.0f;
    sampler_params p = sampler_params_default();
    p.seed = seed;
    sampler_seq seq = make_seq(p, 0);
    for (int i = 0; i < n; i++)
        out[i] = sample_copy(s, &seq, l, 100, NULL, 0, NULL);
}

static void test_seed_determinism(void **state) {
    (void)state;
    sampler *s = sampler_new(100, NULL);
    sampler *other = sampler_new(100, NULL);
    int32_t a[64], b[64], c[64];
    draw_run(s, 42, a, 64);
    draw_run(other, 42, b, 64); /* a different scratch (another thread, another worker) */
    draw_run(s, 43, c, 64);
    assert_memory_equal(a, b, sizeof a);
    int same = 0;
    for (int i = 0; i < 64; i++)
        same += a[i] == c[i];
    assert_true(same < 10); /* 100 equally likely tokens: ~0.64 coincidences expected */
    sampler_free(s);
    sampler_free(other);
}

static void test_set_position_resumes_exactly(void **state) {
    (void)state;
    sampler *s = sampler_new(100, NULL);
    int32_t a[40];
    draw_run(s, 7, a, 40);
    static float l[100];
    sampler_params p = sampler_params_default();
    p.seed = 7;
    for (uint64_t start = 0; start < 40; start += 13) {
        sampler_seq seq = make_seq(p, 0);
        sampler_seq_set_position(&seq, start);
        for (uint64_t i = start; i < 40; i++) {
            for (int k = 0; k < 100; k++)
                l[k] = 0.0f;
            sol_err e = {0};
            assert_int_equal(sampler_sample(s, &seq, l, NULL, 0, NULL, &e), a[i]);
        }
    }
    sampler_free(s);
}

/* 20,000 draws against {0.3, 0.25, 0.2, 0.1, 0.1, 0.05}; chi-square critical value for 5
 * degrees of freedom at p = 0.001 is 20.515. The seed is fixed, so the outcome is too. */
static void test_chi_square(void **state) {
    (void)state;
    const double want[6] = {0.3, 0.25, 0.2, 0.1, 0.1, 0.05};
    float l[6];
    for (int i = 0; i < 6; i++)
        l[i] = (float)log(want[i]) - 3.0f;
    sampler *s = sampler_new(6, NULL);
    sampler_params p = sampler_params_default();
    p.seed = 20240601;
    sampler_seq seq = make_seq(p, 0);
    int count[6] = {0};
    const int n = 20000;
    for (int i = 0; i < n; i++)
        count[sample_copy(s, &seq, l, 6, NULL, 0, NULL)]++;
    double chi = 0;
    for (int i = 0; i < 6; i++) {
        double e = n * want[i];
        chi += (count[i] - e) * (count[i] - e) / e;
    }
    print_message("chi-square = %.3f (counts %d %d %d %d %d %d)\n", chi, count[0], count[1],
                  count[2], count[3], count[4], count[5]);
    assert_true(chi < 20.515);
    sampler_free(s);
}

static void test_logprobs_are_raw(void **state) {
    (void)state;
    sampler *s = sampler_new(6, NULL);
    const float l[6] = {1.0f, 2.0f, 3.0f, 0.5f, 3.0f, -1.0f};
    const int32_t hist[2] = {2, 4};
    double z = 0;
    for (int i = 0; i < 6; i++)
        z += exp(l[i]);
    sampler_params p = sampler_params_default();
    p.repetition_penalty = 1.5f; /* penalties and temperature must not leak into logprobs */
    p.temperature = 0.7f;
    p.top_k = 3;
    p.want_logprobs = true;
    p.n_logprobs = 3;
    p.seed = 5;
    sampler_seq seq = make_seq(p, 0);
    for (int it = 0; it < 20; it++) {
        sampler_result r;
        int32_t t = sample_copy(s, &seq, l, 6, hist, 2, &r);
        assert_int_equal(r.token, t);
        assert_float_equal(r.logprob, l[t] - log(z), 1e-5);
        assert_int_equal(r.n_top, 3);
        const int32_t want_ids[3] = {2, 4, 1}; /* ties to the lower id */
        for (int j = 0; j < 3; j++) {
            assert_int_equal(r.top[j].token, want_ids[j]);
            assert_float_equal(r.top[j].logprob, l[want_ids[j]] - log(z), 1e-5);
        }
    }
    p.want_logprobs = false;
    seq = make_seq(p, 0);
    sampler_result r;
    sample_copy(s, &seq, l, 6, hist, 2, &r);
    assert_int_equal(r.n_top, 0);
    sampler_free(s);
}

static void test_nonfinite_logits(void **state) {
    (void)state;
    sampler *s = sampler_new(4, NULL);
    sampler_params p = sampler_params_default();
    p.seed = 3;
    sampler_seq seq = make_seq(p, 0);
    for (int i = 0; i < 200; i++) {
        float l[4] = {NAN, 0.0f, -INFINITY, 0.0f};
        sol_err e = {0};
        int32_t t = sampler_sample(s, &seq, l, NULL, 0, NULL, &e);
        assert_true(t == 1 || t == 3);
    }
    float inf[4] = {0.0f, INFINITY, 0.0f, 0.0f};
    sol_err e = {0};
    assert_int_equal(sampler_sample(s, &seq, inf, NULL, 0, NULL, &e), -ERANGE);
    assert_non_null(strstr(e.msg, "token 1"));
    float none[4] = {NAN, -INFINITY, NAN, NAN};
    assert_int_equal(sampler_sample(s, &seq, none, NULL, 0, NULL, &e), -ERANGE);
    float ok[4] = {0, 0, 0, 0};
    const int32_t bad_hist[2] = {1, 4};
    assert_int_equal(sampler_sample(s, &seq, ok, bad_hist, 2, NULL, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "history[1] = 4"));
    sampler_free(s);
}

static void test_param_validation(void **state) {
    (void)state;
    sol_err e = {0};
    sampler_seq seq;
    sampler_params p = sampler_params_default();
    assert_int_equal(sampler_params_check(&p, &e), 0);
    p.top_p = 0.0f;
    assert_int_equal(sampler_seq_init(&seq, &p, 0, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "top_p"));
    p = sampler_params_default();
    p.temperature = NAN;
    assert_int_equal(sampler_params_check(&p, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "temperature"));
    p = sampler_params_default();
    p.n_logprobs = 21;
    assert_int_equal(sampler_params_check(&p, &e), -EINVAL);
    p = sampler_params_default();
    p.repetition_penalty = 0.0f;
    assert_int_equal(sampler_params_check(&p, &e), -EINVAL);
    assert_null(sampler_new(0, &e));
    sampler_free(NULL);
}

/* Speculative decoding relies on this: the dense path draws the same token as the sparse one. */
static void test_probs_path_matches_sample(void **state) {
    (void)state;
    sampler *s = sampler_new(1000, NULL);
    static float l[1000], probs[1000];
    const int32_t hist[3] = {5, 17, 5};
    const struct {
        int32_t k;
        float p, m, t;
    } cases[] = {{0, 1.0f, 0.0f, 1.0f},
                 {40, 0.9f, 0.0f, 0.8f},
                 {0, 0.8f, 0.05f, 1.2f},
                 {0, 1.0f, 0.1f, 1.0f},
                 {0, 1.0f, 0.0f, 0.0f}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        random_logits(l, 1000, 500 + c, 4.0f);
        sampler_params p = sampler_params_default();
        p.top_k = cases[c].k;
        p.top_p = cases[c].p;
        p.min_p = cases[c].m;
        p.temperature = cases[c].t;
        p.repetition_penalty = 1.3f;
        p.seed = 11 + c;
        sampler_seq a = make_seq(p, 1), b = make_seq(p, 1);
        for (int i = 0; i < 50; i++) {
            int32_t ta = sample_copy(s, &a, l, 1000, hist, 3, NULL);
            probs_copy(s, &b, l, 1000, hist, 3, probs);
            sol_err e = {0};
            assert_int_equal(sampler_sample_from_probs(&b, probs, 1000, &e), ta);
        }
        assert_int_equal(a.pos, b.pos);
    }
    sol_err e = {0};
    sampler_seq z = make_seq(sampler_params_default(), 0);
    float zeros[3] = {0, 0, 0}, neg[3] = {0.5f, -0.1f, 0.6f};
    assert_int_equal(sampler_sample_from_probs(&z, zeros, 3, &e), -EINVAL);
    assert_int_equal(sampler_sample_from_probs(&z, neg, 3, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "probs[1]"));
    assert_int_equal(z.pos, 0);
    sampler_free(s);
}

/* A refused draw redrawn over the allowed tokens (grammars) equals masking the other logits and
 * sampling again at the same stream position: greedy exactly, temperature sampling the same
 * token for (nearly) every uniform (float rounding of the renormalization may move a boundary);
 * never a refused token; truncating parameters ask for the masked path instead. */
static void test_resample_allowed_matches_masking(void **state) {
    (void)state;
    enum { N = 1000 };
    sampler *s = sampler_new(N, NULL);
    static float l[N], masked[N];
    uint64_t allowed[(N + 63) / 64];
    const int32_t hist[3] = {5, 17, 5};
    float temps[] = {0.0f, 1.0f, 0.7f};
    int same = 0, total = 0;
    for (int c = 0; c < 3; c++)
        for (int trial = 0; trial < 60; trial++) {
            random_logits(l, N, 900 + (uint64_t)trial, 4.0f);
            memset(allowed, 0, sizeof allowed);
            int n_allowed = 1 + trial % 40; /* a few allowed tokens, as at a JSON structure */
            for (int k = 0; k < n_allowed; k++) {
                int32_t id = (int32_t)((trial * 7919 + k * 104729) % N);
                allowed[id >> 6] |= 1ull << (id & 63);
            }
            sampler_params p = sampler_params_default();
            p.temperature = temps[c];
            p.repetition_penalty = 1.3f;
            p.seed = 77 + (uint64_t)trial;
            sampler_seq a = make_seq(p, 1), b = make_seq(p, 1);
            sample_copy(s, &a, l, N, hist, 3, NULL); /* the refused first draw */
            sol_err e = {0};
            sampler_seq_set_position(&a, 1000 + (uint64_t)trial);
            int32_t t = sampler_resample_allowed(s, &a, allowed, &e);
            assert_true(t >= 0 && (allowed[t >> 6] >> (t & 63) & 1));
            for (int32_t i = 0; i < N; i++)
                masked[i] = allowed[i >> 6] >> (i & 63) & 1 ? l[i] : -INFINITY;
            sampler_seq_set_position(&b, 1000 + (uint64_t)trial);
            int32_t want = sample_copy(s, &b, masked, N, hist, 3, NULL);
            assert_int_equal(a.pos, b.pos);
            if (temps[c] == 0.0f) assert_int_equal(t, want);
            same += t == want, total++;
        }
    assert_true(same >= total - 2);
    /* truncation: the caller must mask and sample */
    sampler_params p = sampler_params_default();
    p.top_p = 0.9f;
    sampler_seq q = make_seq(p, 1);
    random_logits(l, N, 5, 4.0f);
    sample_copy(s, &q, l, N, hist, 3, NULL);
    sol_err e = {0};
    assert_int_equal(sampler_resample_allowed(s, &q, allowed, &e), -EAGAIN);
    sampler_free(s);
}

/* Redraws without replacement: greedy walks the logits in descending order (lowest id on ties)
 * across 256-id blocks; a refused token never comes back; -ENOENT once all are refused. */
static void test_redraw_greedy_order(void **state) {
    (void)state;
    enum { N = 700 };
    sampler *s = sampler_new(N, NULL);
    static float l[N], row[N];
    random_logits(l, N, 31, 4.0f);
    l[10] = l[650] = l[300] = 9.0f; /* a tie across blocks: ids 10, 300, 650 in that order */
    sampler_params p = sampler_params_default();
    p.temperature = 0.0f;
    sampler_seq q = make_seq(p, 0);
    memcpy(row, l, sizeof row);
    sol_err e = {0};
    int32_t t = sampler_sample(s, &q, row, NULL, 0, NULL, &e);
    assert_int_equal(t, 10);
    static int refused[N];
    memset(refused, 0, sizeof refused);
    for (int k = 1; k < N; k++) {
        refused[t] = 1;
        int32_t want = -1;
        for (int32_t i = 0; i < N; i++)
            if (!refused[i] && (want < 0 || l[i] > l[want])) want = i;
        uint64_t before = q.pos;
        t = sampler_redraw(s, &q, t, &e);
        assert_int_equal(t, want);
        assert_int_equal(q.pos, before + 1);
        if (k == 1) assert_int_equal(t, 300);
        if (k == 2) assert_int_equal(t, 650);
    }
    assert_int_equal(sampler_redraw(s, &q, t, &e), -ENOENT);
    /* after a truncated draw the caller must mask instead */
    p = sampler_params_default();
    p.top_k = 5;
    q = make_seq(p, 0);
    memcpy(row, l, sizeof row);
    t = sampler_sample(s, &q, row, NULL, 0, NULL, &e);
    assert_int_equal(sampler_redraw(s, &q, t, &e), -EAGAIN);
    assert_int_equal(sampler_redraw(s, &q, -1, &e), -EAGAIN);
    sampler_free(s);
}

/* The engine's series (draw, then redraw until an allowed token comes) is distributed as the
 * row restricted to the allowed tokens: frequencies over 20000 seeds within 5 sigma of the
 * renormalized probabilities, and never a refused token. */
static void test_redraw_series_is_the_restricted_distribution(void **state) {
    (void)state;
    enum { N = 600, RUNS = 20000 };
    sampler *s = sampler_new(N, NULL);
    static float l[N], row[N];
    static int hits[N];
    memset(hits, 0, sizeof hits);
    for (int32_t i = 0; i < N; i++) /* mass on a few ids, in several blocks */
        l[i] = i % 97 == 3 ? 4.0f + (float)(i % 5) * 0.3f : (float)(i % 7) * 0.1f - 2.0f;
    bool allowed[N];
    for (int32_t i = 0; i < N; i++)
        allowed[i] = i % 3 == 0 || i == 100; /* 100 = 97 + 3 carries much mass */
    sampler_params p = sampler_params_default();
    sol_err e = {0};
    for (int r = 0; r < RUNS; r++) {
        p.seed = 1000 + (uint64_t)r;
        sampler_seq q = make_seq(p, 0);
        memcpy(row, l, sizeof row);
        int32_t t = sampler_sample(s, &q, row, NULL, 0, NULL, &e);
        bool seen[N] = {0};
        while (t >= 0 && !allowed[t]) {
            assert_false(seen[t]);
            seen[t] = true;
            t = sampler_redraw(s, &q, t, &e);
        }
        assert_true(t >= 0 && !seen[t]);
        hits[t]++;
    }
    double z = 0.0, mx = l[0];
    for (int32_t i = 0; i < N; i++)
        mx = l[i] > mx ? l[i] : mx;
    for (int32_t i = 0; i < N; i++)
        z += allowed[i] ? exp(l[i] - mx) : 0.0;
    for (int32_t i = 0; i < N; i++) {
        double pi = allowed[i] ? exp(l[i] - mx) / z : 0.0;
        double sd = sqrt(RUNS * pi * (1.0 - pi)) + 1.0;
        if (fabs(hits[i] - RUNS * pi) > 5.0 * sd)
            fail_msg("token %d: %d hits, %.1f expected", (int)i, hits[i], RUNS * pi);
    }
    sampler_free(s);
}

static void test_rng_lanes_and_seed_from_bytes(void **state) {
    (void)state;
    assert_true(sol_rng_u64(1, 0, SOL_RNG_LANE_SAMPLE) != sol_rng_u64(1, 0, SOL_RNG_LANE_ACCEPT));
    assert_true(sol_rng_u64(1, 5, 0) == sol_rng_u64(1, 5, 0));
    assert_true(sol_rng_seed_from_bytes("req-1", 5) == sol_rng_seed_from_bytes("req-1", 5));
    assert_true(sol_rng_seed_from_bytes("req-1", 5) != sol_rng_seed_from_bytes("req-2", 5));
    sampler_params p = sampler_params_default();
    p.seed = 9;
    sampler_seq seq = make_seq(p, 0);
    sampler_seq_set_position(&seq, 3);
    assert_true(sampler_seq_uniform(&seq, 2, SOL_RNG_LANE_ACCEPT) ==
                sol_rng_uniform(9, 5, SOL_RNG_LANE_ACCEPT));
    double mean = 0;
    for (int i = 0; i < 10000; i++) {
        double u = sol_rng_uniform(123, i, 0);
        assert_true(u >= 0.0 && u < 1.0);
        mean += u / 10000;
    }
    assert_float_equal(mean, 0.5, 0.02);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_ties_lowest_id),
        cmocka_unit_test(test_resample_allowed_matches_masking),
        cmocka_unit_test(test_redraw_greedy_order),
        cmocka_unit_test(test_redraw_series_is_the_restricted_distribution),
        cmocka_unit_test(test_temperature_to_zero_is_greedy),
        cmocka_unit_test(test_top_k_one_is_greedy),
        cmocka_unit_test(test_top_k_ties_keep_lower_ids),
        cmocka_unit_test(test_top_p_smallest_set),
        cmocka_unit_test(test_truncation_matches_full_sort),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_penalties_by_hand),
        cmocka_unit_test(test_seed_determinism),
        cmocka_unit_test(test_set_position_resumes_exactly),
        cmocka_unit_test(test_chi_square),
        cmocka_unit_test(test_logprobs_are_raw),
        cmocka_unit_test(test_nonfinite_logits),
        cmocka_unit_test(test_param_validation),
        cmocka_unit_test(test_probs_path_matches_sample),
        cmocka_unit_test(test_rng_lanes_and_seed_from_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
