/* Unit tests for moe_route: top-k choice and weights (softmax, renormalized, scaled), ties,
 * and the grouping of a batch's choices by expert. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "moe_route.h"

/* Softmax then top-2 of 4, renormalized: the weights are the two probabilities over their sum,
 * which is the softmax of the two logits alone. */
static void test_top_k_weights(void **state) {
    (void)state;
    const float lg[4] = {0.5f, 2.0f, -1.0f, 1.0f};
    float w[2];
    int32_t sel[2];
    moe_route(lg, 1, 4, 2, 0.0f, 0, w, sel);
    assert_int_equal(sel[0], 1);
    assert_int_equal(sel[1], 3);
    double e = exp(-1.0); /* e^(1 - 2) */
    assert_true(fabs(w[0] - 1.0 / (1.0 + e)) < 1e-6);
    assert_true(fabs(w[1] - e / (1.0 + e)) < 1e-6);
    moe_route(lg, 1, 4, 2, 2.5f, 0, w, sel); /* expert_weights_scale multiplies after */
    assert_true(fabs(w[0] - 2.5 / (1.0 + e)) < 1e-6);
    moe_route(lg, 1, 4, 2, 1.0f, 0, w, sel); /* 1: as none */
    assert_true(fabs(w[0] + w[1] - 1.0) < 1e-6);
}

/* Equal logits: the lower expert index first, never the same expert twice; k = n_expert takes
 * every expert. */
static void test_ties_and_all(void **state) {
    (void)state;
    const float lg[3] = {1.0f, 1.0f, 1.0f};
    float w[3];
    int32_t sel[3];
    moe_route(lg, 1, 3, 3, 0.0f, 0, w, sel);
    for (int j = 0; j < 3; j++) {
        assert_int_equal(sel[j], j);
        assert_true(fabs(w[j] - 1.0 / 3.0) < 1e-6);
    }
    /* logits that underflow every probability but the top one's still give weights summing 1 */
    const float far[3] = {0.0f, -200.0f, -300.0f};
    moe_route(far, 1, 3, 2, 0.0f, 0, w, sel);
    assert_int_equal(sel[0], 0);
    assert_true(fabs(w[0] - 1.0f) < 1e-6 && w[1] == 0.0f);
}

/* Three tokens, top-2 of 4: rows come out grouped by expert, tokens ascending within one; each
 * choice points at its row. */
/* gpt-oss's gating: the top 2 of the raw logits, weighed by the softmax of those two alone (not
 * of all four), in a ranking that the softmax over all would keep too; scaled after. */
static void test_topk_softmax(void **state) {
    (void)state;
    const float lg[8] = {0.5f, 2.0f, -1.0f, 1.0f, /* token 2: */ 3.0f, 3.0f, -2.0f, 0.0f};
    float w[4];
    int32_t sel[4];
    moe_route_topk_softmax(lg, 2, 4, 2, 0.0f, 0, w, sel);
    assert_int_equal(sel[0], 1);
    assert_int_equal(sel[1], 3);
    double e = exp(-1.0);
    assert_true(fabs(w[0] - 1.0 / (1.0 + e)) < 1e-6);
    assert_true(fabs(w[1] - e / (1.0 + e)) < 1e-6);
    assert_int_equal(sel[2], 0); /* a tie: the lower index first */
    assert_int_equal(sel[3], 1);
    assert_true(fabs(w[2] - 0.5) < 1e-7 && fabs(w[3] - 0.5) < 1e-7);
    moe_route_topk_softmax(lg, 1, 4, 3, 2.0f, 0, w, sel); /* k = 3, scale 2: sums to 2 */
    assert_int_equal(sel[2], 0);
    assert_true(fabs(w[0] + w[1] + w[2] - 2.0) < 1e-6);
}

static void test_group(void **state) {
    (void)state;
    int32_t sel[6] = {2, 0, 0, 3, 2, 0}; /* token 0: 2, 0; token 1: 0, 3; token 2: 2, 0 */
    const int32_t want_sel[6] = {3, 0, 1, 5, 4, 2};
    int32_t rows[6], end[4];
    moe_group(sel, 3, 2, 4, rows, end);
    const int32_t want_rows[6] = {0, 1, 2, 0, 2, 1}, want_end[4] = {3, 3, 5, 6};
    assert_memory_equal(rows, want_rows, sizeof rows);
    assert_memory_equal(end, want_end, sizeof end);
    assert_memory_equal(sel, want_sel, sizeof sel);
    for (int i = 0; i < 6; i++) /* choice i's row is its token */
        assert_int_equal(rows[sel[i]], i / 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_top_k_weights),
        cmocka_unit_test(test_ties_and_all),
        cmocka_unit_test(test_topk_softmax),
        cmocka_unit_test(test_group),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
