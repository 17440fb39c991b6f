/* Promise: admission by latency targets (slo_admit.h). A request is admitted when a worker with
 * room predicts its first token within X-Sol-TTFT-Ms (its uncached prompt and the work queued
 * ahead over its measured prefill rate) and streams within X-Sol-TPOT-Ms; refused for now (429,
 * slo_not_met_now, Retry-After when the work ahead should have cleared) when only the queue ahead
 * is in the way; refused outright (503, slo_unattainable) when the prompt alone takes longer on
 * every worker; queued when every worker is full and the pool's slot wait is unknown or short;
 * and always admitted without targets or before any rate is measured. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "slo_admit.h"

#define P ((wt_scope){"p", NULL})

static bk_worker *add(worker_table *t, const char *id, double rate, uint64_t backlog) {
    bk_worker w = {0};
    snprintf(w.id, sizeof w.id, "%s", id);
    snprintf(w.pool, sizeof w.pool, "p");
    w.ident.len = strlen(id);
    memcpy(w.ident.bytes, id, w.ident.len);
    w.capacity = 2;
    w.prefill_bps = rate;
    w.backlog_bytes = backlog;
    return wt_add(t, &w);
}

static slo_decision decide(worker_table *t, uint32_t prompt_bytes, int ttft, int tpot,
                           double wait_s) {
    prefix_chain c = {.total = prompt_bytes};
    sol_slo s = {{0}};
    s.ms[SOL_SLO_TTFT] = ttft;
    s.ms[SOL_SLO_TPOT] = tpot;
    slo_decision d;
    slo_admit(t, P, NULL, &c, &s, wait_s, &d);
    return d;
}

static void test_ttft(void **st) {
    (void)st;
    worker_table t;
    wt_init(&t);
    /* 10,000 bytes/s: a 1,000-byte prompt takes 100 ms; 2,000 bytes queued ahead add 200 ms */
    bk_worker *a = add(&t, "a", 10000, 2000), *b = add(&t, "b", 10000, 4000);
    assert_int_equal(decide(&t, 1000, 0, 0, 0).verdict, SLO_ADMIT);   /* no target */
    assert_int_equal(decide(&t, 1000, 400, 0, 0).verdict, SLO_ADMIT); /* a: 300 ms */
    slo_decision d = decide(&t, 1000, 250, 0, 0);
    assert_int_equal(d.verdict, SLO_NOT_NOW);
    assert_string_equal(d.code, "slo_not_met_now");
    assert_true(d.predicted_s > 0.299 && d.predicted_s < 0.301);
    assert_int_equal(d.retry_after_s, 1);
    assert_non_null(strstr(d.why, "300 ms"));
    a->backlog_bytes = 40000; /* 4.1 s on a, 3.5 s on b; 0.45 s allowed (SLO_TTFT_SAFETY) */
    b->backlog_bytes = 34000;
    assert_int_equal(decide(&t, 1000, 500, 0, 0).retry_after_s, 4);
    b->backlog_bytes = 2500; /* 350 ms: within 90% of 400 ms, not of 380 */
    assert_int_equal(decide(&t, 1000, 400, 0, 0).verdict, SLO_ADMIT);
    assert_int_equal(decide(&t, 1000, 380, 0, 0).verdict, SLO_NOT_NOW);
    d = decide(&t, 1000, 50, 0, 0); /* the prompt alone takes 100 ms anywhere */
    assert_int_equal(d.verdict, SLO_NEVER);
    assert_string_equal(d.code, "slo_unattainable");
    assert_non_null(strstr(d.why, "100 ms"));
    /* every worker full: queued while the slot wait is unknown or short enough */
    a->inflight = b->inflight = 2;
    a->backlog_bytes = b->backlog_bytes = 0;
    assert_int_equal(decide(&t, 1000, 400, 0, 0).verdict, SLO_ADMIT);
    assert_int_equal(decide(&t, 1000, 400, 0, 0.2).verdict, SLO_ADMIT); /* 200 + 100 ms */
    d = decide(&t, 1000, 400, 0, 2.0);
    assert_int_equal(d.verdict, SLO_NOT_NOW);
    assert_int_equal(d.retry_after_s, 2); /* 2.1 s predicted, 0.4 allowed */
    /* no rate measured: no prediction, admitted (the queue's deadline decides) */
    a->inflight = b->inflight = 0;
    a->prefill_bps = b->prefill_bps = 0;
    assert_int_equal(decide(&t, 1000, 1, 0, 0).verdict, SLO_ADMIT);
    wt_free(&t);
}

static void test_tpot(void **st) {
    (void)st;
    worker_table t;
    wt_init(&t);
    bk_worker *a = add(&t, "a", 10000, 0), *b = add(&t, "b", 10000, 0);
    a->hb_running = b->hb_running = 4;
    a->tokens_per_s = 40; /* 100 ms per token per stream */
    b->tokens_per_s = 80; /* 50 ms */
    assert_int_equal(decide(&t, 100, 0, 60, 0).verdict, SLO_ADMIT); /* b */
    b->inflight = 2;                                                /* b full: a too slow */
    slo_decision d = decide(&t, 100, 0, 60, 0);
    assert_int_equal(d.verdict, SLO_NOT_NOW);
    assert_non_null(strstr(d.why, "X-Sol-TPOT-Ms"));
    assert_int_equal(decide(&t, 100, 0, 100, 0).verdict, SLO_ADMIT); /* a meets 100 ms */
    wt_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ttft),
        cmocka_unit_test(test_tpot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
