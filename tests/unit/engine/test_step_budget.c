/* Promise: the TPOT step cap (step_budget.h) learns a step's base cost from decode-only steps and
 * the per-prompt-token cost from mixed ones, and caps a step so it lasts at most the target -
 * never below the decode rows plus STEP_BUDGET_MIN_PREFILL, and not at all without a target or
 * before both terms are measured. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "step_budget.h"

static void test_cap_from_measured_steps(void **state) {
    (void)state;
    step_cost c = {0};
    assert_int_equal(step_cost_cap(&c, 20000000, 4), 0); /* nothing measured */
    step_cost_observe(&c, 4, 0, 10000000);               /* 10 ms to decode 4 rows */
    assert_int_equal(step_cost_cap(&c, 20000000, 4), 0); /* no per-token cost yet */
    step_cost_observe(&c, 4, 100, 20000000);             /* +100 tokens: +10 ms */
    assert_true(c.base_ns == 10000000 && c.per_token_ns == 100000);
    assert_int_equal(step_cost_cap(&c, 20000000, 4), 4 + 100); /* 20 ms: 100 prompt tokens */
    assert_int_equal(step_cost_cap(&c, 15000000, 4), 4 + 50);
    assert_int_equal(step_cost_cap(&c, 5000000, 4), 4 + STEP_BUDGET_MIN_PREFILL); /* unmeetable */
    assert_int_equal(step_cost_cap(&c, 0, 4), 0);                                 /* no target */
    for (int i = 0; i < 64; i++) /* slower steps move the model toward them */
        step_cost_observe(&c, 4, 100, 30000000);
    assert_true(c.per_token_ns > 190000 && c.per_token_ns <= 200000);
    assert_int_equal(step_cost_cap(&c, 20000000, 4), 4 + 50);
    step_cost_observe(&c, 0, 0, 99); /* an empty step teaches nothing */
    assert_true(c.base_ns == 10000000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cap_from_measured_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
