/* Promise: the synthetic vocab has exactly n unique pieces, llama token types, and every piece is
 * reachable by BPE merges of earlier pieces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vocab_gen.h"

/* A normal piece of more than one character must split into two earlier normal pieces. */
static int reachable(const vocab_gen *v, uint32_t id) {
    const char *p = v->pieces[id];
    size_t len = strlen(p);
    for (size_t cut = 1; cut < len; cut++) {
        if (((uint8_t)p[cut] & 0xc0) == 0x80) continue;
        char left[64];
        memcpy(left, p, cut);
        left[cut] = '\0';
        int32_t a = vocab_gen_find(v, left), b = vocab_gen_find(v, p + cut);
        if (a >= 0 && b >= 0 && (uint32_t)a < id && (uint32_t)b < id &&
            v->types[a] == VOCAB_TOK_NORMAL && v->types[b] == VOCAB_TOK_NORMAL)
            return 1;
    }
    return 0;
}

static int n_chars(const char *p) {
    int n = 0;
    for (; *p; p++)
        n += ((uint8_t)*p & 0xc0) != 0x80;
    return n;
}

static int strcmp_ptr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void check_vocab(uint32_t n, int check_merges) {
    sol_err e = {0};
    vocab_gen *v = vocab_gen_new(n, &e);
    if (!v) fail_msg("%s", e.msg);
    assert_int_equal(v->n, n);
    assert_string_equal(v->pieces[0], "<unk>"), assert_int_equal(v->types[0], VOCAB_TOK_UNKNOWN);
    assert_string_equal(v->pieces[1], "<s>"), assert_int_equal(v->types[1], VOCAB_TOK_CONTROL);
    assert_string_equal(v->pieces[2], "</s>"), assert_int_equal(v->types[2], VOCAB_TOK_CONTROL);
    assert_string_equal(v->pieces[VOCAB_GEN_BYTE0 + 0x0A], "<0x0A>");
    assert_int_equal(v->types[VOCAB_GEN_BYTE0 + 255], VOCAB_TOK_BYTE);
    assert_string_equal(v->pieces[259], "\xe2\x96\x81");
    for (uint32_t i = 259; i < n; i++) {
        assert_int_equal(v->types[i], VOCAB_TOK_NORMAL);
        if (i > 259) assert_true(v->scores[i] < v->scores[i - 1]);
        if (check_merges && n_chars(v->pieces[i]) > 1 && !reachable(v, i))
            fail_msg("piece %u '%s' cannot be merged from earlier pieces", i, v->pieces[i]);
    }
    /* uniqueness: sort a copy of the pointers */
    char **sorted = malloc(n * sizeof *sorted);
    memcpy(sorted, v->pieces, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, strcmp_ptr);
    for (uint32_t i = 1; i < n; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) fail_msg("duplicate piece '%s'", sorted[i]);
    free(sorted);
    vocab_gen_free(v);
}

static void test_small_sizes(void **state) {
    (void)state;
    check_vocab(VOCAB_GEN_MIN, 1);
    check_vocab(512, 1);
    check_vocab(1001, 1);
}

static void test_llama_size_deterministic(void **state) {
    (void)state;
    check_vocab(32000, 0);
    sol_err e = {0};
    vocab_gen *a = vocab_gen_new(32000, &e), *b = vocab_gen_new(32000, &e);
    for (uint32_t i = 0; i < 32000; i++)
        assert_string_equal(a->pieces[i], b->pieces[i]);
    assert_true(vocab_gen_find(a, "\xe2\x96\x81the") > 259);
    vocab_gen_free(a);
    vocab_gen_free(b);
}

static void test_bad_size(void **state) {
    (void)state;
    sol_err e = {0};
    assert_null(vocab_gen_new(100, &e));
    assert_non_null(strstr(e.msg, "vocab size 100 out of range"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_sizes),
        cmocka_unit_test(test_llama_size_deterministic),
        cmocka_unit_test(test_bad_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
