/* Promise: a request's sampling settings cross the wire unchanged (router -> worker), with the
 * wire's conventions: every "off" top_k is 0, logprobs travel only when asked, and fields a sender
 * left out take their defaults. The table of numeric settings holds each bound once: setting and
 * checking obey it at its edges, and docs/api.md's rows say the same bounds. */
#include <errno.h>
#include <stdio.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sampling.h"

/* Each field's bounds, open and closed edges, and integer-ness, through set and check. */
static void test_field_table(void **state) {
    (void)state;
    assert_true(sol_sampling_n_fields >= 7);
    assert_null(sol_sampling_field_find("seed"));
    for (size_t i = 0; i < sol_sampling_n_fields; i++) {
        const sol_sampling_field *f = &sol_sampling_fields[i];
        assert_ptr_equal(sol_sampling_field_find(f->name), f);
        sol_sampling s = sol_sampling_default();
        assert_int_equal(sol_sampling_check(&s, NULL), 0); /* the defaults lie inside */
        sol_err e = {0};
        assert_int_equal(sol_sampling_field_set(&s, f, f->lo, &e), f->lo_open ? -EINVAL : 0);
        assert_int_equal(sol_sampling_field_set(&s, f, f->lo - 1, &e), -EINVAL);
        char want[96];
        snprintf(want, sizeof want, "'%s' must be", f->name);
        assert_non_null(strstr(e.msg, want));
        if (f->hi < 1e9) {
            assert_int_equal(sol_sampling_field_set(&s, f, f->hi, &e), 0);
            assert_int_equal(sol_sampling_field_set(&s, f, f->hi * 1.5 + 1, &e), -EINVAL);
        }
        if (f->integer) assert_int_equal(sol_sampling_field_set(&s, f, 0.5, &e), -EINVAL);
    }
    const sol_sampling_field *rp = sol_sampling_field_find("repetition_penalty");
    sol_sampling s = sol_sampling_default();
    sol_err e = {0};
    assert_int_equal(sol_sampling_field_set(&s, rp, 500, &e), -EINVAL);
    assert_string_equal(e.msg, "'repetition_penalty' must be in (0, 100], got 500");
    s.repetition_penalty = 500.0f; /* set behind the table's back: check finds it */
    assert_int_equal(sol_sampling_check(&s, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "repetition_penalty"));
}

/* docs/api.md's request-field rows state each table field's bounds as the table writes them. */
static void test_docs_state_the_bounds(void **state) {
    (void)state;
    FILE *f = fopen(SOL_SOURCE_DIR "/docs/api.md", "r");
    assert_non_null(f);
    static char doc[1 << 20];
    size_t n = fread(doc, 1, sizeof doc - 1, f);
    fclose(f);
    doc[n] = 0;
    for (size_t i = 0; i < sol_sampling_n_fields; i++) {
        const sol_sampling_field *fl = &sol_sampling_fields[i];
        char cell[64], bounds[48];
        snprintf(cell, sizeof cell, "`%s`", fl->name);
        sol_sampling_field_bounds(fl, bounds, sizeof bounds);
        int rows = 0;
        for (char *line = doc; line && *line;
             line = strchr(line, '\n'), line = line ? line + 1 : 0) {
            char *end = strchr(line, '\n');
            size_t len = end ? (size_t)(end - line) : strlen(line);
            char row[1024];
            snprintf(row, sizeof row, "%.*s", (int)(len < sizeof row ? len : sizeof row - 1), line);
            char *first = strstr(row, " | "); /* the first cell: the field's name */
            if (row[0] != '|' || !first || !strstr(row, cell) || strstr(row, cell) > first)
                continue;
            rows++;
            if (!strstr(row, bounds)) fail_msg("docs/api.md: %s lacks %s", row, bounds);
        }
        if (!rows) fail_msg("docs/api.md: no row for %s", cell);
    }
}

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
        cmocka_unit_test(test_field_table),
        cmocka_unit_test(test_docs_state_the_bounds),
        cmocka_unit_test(test_wire_conventions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
