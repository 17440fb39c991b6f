/* Promise: speculative verify reproduces the target distribution (chi-square), a wrong accept rule
 * is caught, greedy accepts while argmaxes agree, and KV rollback never leaks blocks. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "backend.h"
#include "drafter.h"
#include "kv_cache.h"
#include "model.h"
#include "rng.h"
#include "sampler.h"
#include "spec.h"

#define V 8
#define K 3
#define RUNS 20000

static const float k_target_logits[V] = {2.0f, 1.5f, 0.2f, -0.5f, 1.0f, 0.0f, -1.0f, 0.7f};
static const float k_draft_logits[V] = {0.1f, 2.2f, 1.4f, 0.3f, -0.7f, 1.1f, 0.5f, -0.2f};

static int accept_always(double u, float p, float q) {
    (void)u, (void)p, (void)q;
    return 1;
}

/* sampler_probs of logits under params (same transforms for target and draft). */
static void probs_of(sampler *s, const sampler_seq *seq, const float *logits, float *out) {
    float tmp[V];
    int32_t hist[1] = {0};
    sol_err e = {0};
    memcpy(tmp, logits, sizeof tmp);
    assert_int_equal(sampler_probs(s, seq, tmp, hist, 1, out, &e), 0);
}

static int32_t draw_u(const float *q, double u) {
    double sum = 0, acc = 0;
    for (int t = 0; t < V; t++)
        sum += q[t];
    for (int t = 0; t < V; t++) {
        acc += q[t];
        if (q[t] > 0 && acc > u * sum) return t;
    }
    return V - 1;
}

/* Chi-square statistic of the first emitted token over RUNS seeded verify steps, against p;
 * a token with p = 0 that is ever emitted gives +inf. Also returns the critical value at
 * p = 0.001 for the degrees of freedom (Wilson-Hilferty). */
static double first_token_chi2(sampler_params params, spec_accept_fn rule, double *crit) {
    sol_err e = {0};
    sampler *s = sampler_new(V, &e);
    sampler_seq seq;
    assert_int_equal(sampler_seq_init(&seq, &params, 1, &e), 0);
    float p[(K + 1) * V], q[K * V], pt[V], qd[V], scratch[V];
    probs_of(s, &seq, k_target_logits, pt);
    probs_of(s, &seq, k_draft_logits, qd);
    for (int i = 0; i <= K; i++)
        memcpy(p + i * V, pt, sizeof pt);
    for (int i = 0; i < K; i++)
        memcpy(q + i * V, qd, sizeof qd);
    long counts[V] = {0};
    for (int run = 0; run < RUNS; run++) {
        params.seed = 1000 + (uint64_t)run;
        assert_int_equal(sampler_seq_init(&seq, &params, 1, &e), 0);
        int32_t draft[K], out[K + 1];
        for (int i = 0; i < K; i++)
            draft[i] = draw_u(qd, sampler_seq_uniform(&seq, i, SPEC_RNG_LANE_DRAFT));
        int n_acc = -1;
        int n = spec_verify(&seq, p, draft, q, K, V, rule, scratch, out, &n_acc, &e);
        assert_true(n >= 1 && n == n_acc + 1);
        assert_int_equal(seq.pos, (uint64_t)n);
        counts[out[0]]++;
    }
    double chi2 = 0;
    int df = -1;
    for (int t = 0; t < V; t++) {
        if (pt[t] <= 0) {
            if (counts[t]) chi2 = INFINITY;
            continue;
        }
        double expct = pt[t] * RUNS, d = counts[t] - expct;
        chi2 += d * d / expct;
        df++;
    }
    double a = 2.0 / (9.0 * df), z = 3.0902; /* upper 0.001 quantile of N(0,1) */
    *crit = df * pow(1 - a + z * sqrt(a), 3);
    sampler_free(s);
    return chi2;
}

static void test_distribution_temperature_1(void **state) {
    (void)state;
    sampler_params p = sampler_params_default();
    double crit, chi2 = first_token_chi2(p, spec_accept_exact, &crit);
    assert_true(chi2 < crit);
    /* The negative check: accepting everything yields the draft's distribution and must fail. */
    assert_true(first_token_chi2(p, accept_always, &crit) > crit);
}

static void test_distribution_top_p(void **state) {
    (void)state;
    sampler_params p = sampler_params_default();
    p.top_p = 0.9f;
    double crit, chi2 = first_token_chi2(p, spec_accept_exact, &crit);
    assert_true(chi2 < crit);
    assert_true(first_token_chi2(p, accept_always, &crit) > crit);
}

static void test_greedy_accepts_while_argmax_agrees(void **state) {
    (void)state;
    sol_err e = {0};
    float p[4 * V] = {0}, scratch[V];
    int32_t target[4] = {3, 5, 1, 6}, draft[3] = {3, 5, 2}, out[4];
    for (int i = 0; i < 4; i++)
        p[i * V + target[i]] = 1.0f; /* one-hot, as sampler_probs */
    sampler_params sp = sampler_params_default();
    sp.temperature = 0;
    sampler_seq seq;
    assert_int_equal(sampler_seq_init(&seq, &sp, 1, &e), 0);
    int n_acc = -1;
    assert_int_equal(
        spec_verify(&seq, p, draft, NULL, 3, V, spec_accept_exact, scratch, out, &n_acc, &e), 3);
    assert_int_equal(n_acc, 2);
    assert_int_equal(out[0], 3);
    assert_int_equal(out[1], 5);
    assert_int_equal(out[2], 1); /* the target's token at the first disagreement */
    draft[2] = 1;                /* all agree: bonus token from the last row */
    assert_int_equal(
        spec_verify(&seq, p, draft, NULL, 3, V, spec_accept_exact, scratch, out, &n_acc, &e), 4);
    assert_int_equal(out[3], 6);
    assert_int_equal(seq.pos, 7u);
    assert_int_equal(spec_verify(&seq, p, draft, NULL, SPEC_MAX_K + 1, V, spec_accept_exact,
                                 scratch, out, &n_acc, &e),
                     -EINVAL);
}

/* The engine's verify protocol on the block manager: reserve k+1, append the accepted j+1,
 * truncate away the rest; free counts come back exactly. */
static void test_kv_rollback_no_leak(void **state) {
    (void)state;
    sol_err e = {0};
    kv_cache *kv = kv_cache_new(64, 4, true, &e);
    assert_non_null(kv);
    kv_cache_stats before, after;
    kv_cache_get_stats(kv, &before);
    kv_seq *s = kv_seq_new(kv, NULL, &e);
    int32_t toks[SPEC_MAX_K + 1] = {0};
    for (int step = 0; step < 60; step++) {
        int k = 1 + step % 8, j = (int)(sol_rng_u64(7, (uint64_t)step, 0) % (uint64_t)(k + 1));
        kv_copy cp[KV_MAX_COPIES];
        int32_t ncp, len = kv_seq_len(s);
        assert_int_equal(kv_seq_reserve(s, k + 1, cp, &ncp, &e), 0);
        for (int i = 0; i <= k; i++)
            toks[i] = (step * 31 + i) % 100;
        assert_int_equal(kv_seq_append(s, toks, k + 1, &e), 0);
        assert_int_equal(kv_seq_truncate(s, len + j + 1, &e), 0);
        assert_int_equal(kv_cache_check(kv, &e), 0);
    }
    kv_seq_free(s);
    kv_cache_get_stats(kv, &after);
    assert_int_equal(after.used_blocks, 0);
    assert_int_equal(after.free_blocks + after.cached_blocks, before.free_blocks);
    kv_cache_free(kv);
}

/* The draft model's own cache: proposals on diverging histories roll back; release frees all. */
static void test_draft_model_rollback(void **state) {
    (void)state;
    char dir[] = "/tmp/sol_test_spec_XXXXXX", cmd[512], path[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/t.gguf", dir);
    snprintf(cmd, sizeof cmd, SOL_BUILD_DIR "/tools/sol-mkmodel -o %s --seed 3 2>/dev/null", path);
    if (system(cmd) != 0) skip();
    sol_err e = {0};
    sol_backend *be = sol_backend_new("cpu", &(sol_backend_opts){.threads = 1}, &e);
    model *m = model_load(path, 0, be, &e);
    assert_non_null(m);
    drafter *d = drafter_model_new(m, 2, 128, &e);
    assert_non_null(d);
    int32_t nv = model_get_hparams(m)->n_vocab, hist[2][64], toks[2][4];
    float *q = malloc(sizeof(float) * 2 * 4 * (size_t)nv);
    sampler_params sp = sampler_params_default();
    sampler_seq seq[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(sampler_seq_init(&seq[i], &sp, 5, &e), 0);
    for (int i = 0; i < 64; i++)
        hist[0][i] = (i * 7 + 1) % nv, hist[1][i] = (i * 13 + 2) % nv;
    for (int step = 0; step < 12; step++) {
        drafter_req r[2];
        for (int i = 0; i < 2; i++)
            r[i] = (drafter_req){i, &seq[i], hist[i], 5 + step * 3, 4, toks[i], q + i * 4 * nv, 0};
        hist[0][5 + step] ^= 1; /* diverge from what the drafter cached */
        assert_int_equal(drafter_propose(d, r, 2, &e), 0);
        assert_int_equal(r[0].n_draft, 4);
        assert_int_equal(r[1].n_draft, 4);
        assert_true(drafter_model_used_blocks(d) > 0);
    }
    drafter_release(d, 0);
    drafter_release(d, 1);
    assert_int_equal(drafter_model_used_blocks(d), 0);
    free(q);
    drafter_free(d);
    model_free(m);
    sol_backend_free(be);
    unlink(path);
    rmdir(dir);
}

static void test_ngram_and_adapt(void **state) {
    (void)state;
    sol_err e = {0};
    drafter *d = drafter_ngram_new(1, 3, &e);
    int32_t h[] = {5, 6, 7, 8, 9, 1, 5, 6, 7}, toks[4];
    sampler_params sp = sampler_params_default();
    sampler_seq seq;
    assert_int_equal(sampler_seq_init(&seq, &sp, 9, &e), 0);
    drafter_req r = {0, &seq, h, 9, 4, toks, NULL, 0};
    assert_int_equal(drafter_propose(d, &r, 1, &e), 0);
    assert_int_equal(r.n_draft, 4);
    assert_int_equal(toks[0], 8);
    assert_int_equal(toks[3], 5);
    assert_true(drafter_one_hot(d));
    int32_t none[] = {1, 2, 3};
    r = (drafter_req){0, &seq, none, 3, 4, toks, NULL, 0};
    assert_int_equal(drafter_propose(d, &r, 1, &e), 0);
    assert_int_equal(r.n_draft, 0);
    drafter_free(d);
    assert_int_equal(spec_adapt_k(4, 4, 4, 1, 8), 5);
    assert_int_equal(spec_adapt_k(4, 4, 1, 1, 8), 3);
    assert_int_equal(spec_adapt_k(8, 8, 8, 1, 8), 8);
    assert_int_equal(spec_adapt_k(1, 1, 0, 1, 8), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distribution_temperature_1),
        cmocka_unit_test(test_distribution_top_p),
        cmocka_unit_test(test_greedy_accepts_while_argmax_agrees),
        cmocka_unit_test(test_kv_rollback_no_leak),
        cmocka_unit_test(test_draft_model_rollback),
        cmocka_unit_test(test_ngram_and_adapt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
