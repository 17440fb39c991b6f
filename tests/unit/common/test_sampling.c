/* Promise: a request's sampling settings cross the wire unchanged (router -> worker), with the
 * wire's conventions: every "off" top_k is 0, logprobs travel only when asked, and fields a sender
 * left out take their defaults. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sampling.h"

/* Field by field: the struct has padding. */
static void assert_same(const sol_sampling *a, const sol_sampling *b) {
    assert_true(a->temperature == b->temperature && a->top_k == b->top_k && a->top_p == b->top_p &&
                a->min_p == b->min_p && a->repetition_penalty == b->repetition_penalty &&
                a->penalty_last_n == b->penalty_last_n &&
                a->frequency_penalty == b->frequency_penalty &&
                a->presence_penalty == b->presence_penalty);
    assert_true(a->seed == b->seed && a->has_seed == b->has_seed);
    assert_true(a->want_logprobs == b->want_logprobs && a->n_logprobs == b->n_logprobs);
}

static void test_round_trip(void **state) {
    (void)state;
    sol_sampling s = {
        .temperature = 0.7f,
        .top_k = 40,
        .top_p = 0.9f,
        .min_p = 0.05f,
        .repetition_penalty = 1.1f,
        .penalty_last_n = 64,
        .frequency_penalty = -0.5f,
        .presence_penalty = 1.5f,
        .seed = 0xfeedfacecafebeefull,
        .has_seed = true,
        .want_logprobs = true,
        .n_logprobs = 5,
    };
    Sol__SamplingParams m = SOL__SAMPLING_PARAMS__INIT;
    sol_sampling_to_msg(&s, &m);
    /* Through the encoder too, as the router sends it. */
    size_t n = sol__sampling_params__get_packed_size(&m);
    uint8_t *buf = malloc(n);
    sol__sampling_params__pack(&m, buf);
    Sol__SamplingParams *back = sol__sampling_params__unpack(NULL, n, buf);
    assert_non_null(back);
    sol_sampling t = sol_sampling_from_msg(back);
    assert_same(&s, &t);
    sol__sampling_params__free_unpacked(back, NULL);
    free(buf);
}

static void test_wire_conventions(void **state) {
    (void)state;
    sol_sampling s = sol_sampling_default();
    s.top_k = -1;     /* OpenAI's off */
    s.n_logprobs = 3; /* without want_logprobs: not sent */
    Sol__SamplingParams m = SOL__SAMPLING_PARAMS__INIT;
    sol_sampling_to_msg(&s, &m);
    assert_int_equal(m.top_k, 0);
    assert_int_equal(m.logprobs, 0);
    /* No message, or one with top_p and repetition_penalty left at 0: the defaults. */
    sol_sampling d = sol_sampling_default(), got = sol_sampling_from_msg(NULL);
    assert_same(&d, &got);
    Sol__SamplingParams empty = SOL__SAMPLING_PARAMS__INIT;
    got = sol_sampling_from_msg(&empty);
    assert_true(got.top_p == 1.0f && got.repetition_penalty == 1.0f && !got.has_seed);
    assert_true(got.temperature == 0.0f); /* an explicit 0 is greedy, not "left out" */
    empty.logprobs = 4000000000u;
    assert_true(sol_sampling_from_msg(&empty).n_logprobs > 0); /* no wrap to negative */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_wire_conventions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
