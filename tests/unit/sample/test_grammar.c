/* Promise: GBNF grammars compile (or fail naming the line, column and reason: syntax, undefined
 * and left-recursive rules, repetition bombs); the mask allows exactly the tokens whose bytes
 * continue a valid text (checked against replaying every token from scratch, over random walks);
 * end of generation is allowed exactly when the text is complete; negated classes and `.` accept
 * well-formed UTF-8 only, also split across tokens; repeated states are served from the cache. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "grammar.h"

/* A toy vocabulary: every printable ASCII byte, some multi-byte pieces, UTF-8 fragments, an
 * end-of-generation token and a control token. */
static const char *k_pieces[] = {
    "{\"",  "\":",          "\",",      "\"}", "true", "false",    "null", "12",
    "345",  "ab",           "yes",      "es",  "no",   "\xc3\xa9", "\xc3", "\xa9",
    "\x80", "\xe2\x82\xac", "\xe2\x82", "[1",  ",2",   "]",        "\n",   "  ",
};
#define N_EXTRA (int)(sizeof k_pieces / sizeof k_pieces[0])
#define N_VOCAB (95 + N_EXTRA + 2)
#define EOS (N_VOCAB - 2)
#define CTRL (N_VOCAB - 1)

static char g_piece[N_VOCAB][8];
static const char *g_ptr[N_VOCAB];
static size_t g_len[N_VOCAB];
static uint8_t g_kind[N_VOCAB];
static grammar_vocab *g_vocab;

static int setup(void **state) {
    (void)state;
    for (int i = 0; i < 95; i++)
        g_piece[i][0] = (char)(32 + i), g_len[i] = 1;
    for (int i = 0; i < N_EXTRA; i++)
        g_len[95 + i] = strlen(k_pieces[i]), memcpy(g_piece[95 + i], k_pieces[i], g_len[95 + i]);
    g_kind[EOS] = 1, g_kind[CTRL] = 2;
    g_len[CTRL] = 3, memcpy(g_piece[CTRL], "[T]", 3); /* a control token with text */
    for (int i = 0; i < N_VOCAB; i++)
        g_ptr[i] = g_piece[i];
    sol_err e = {0};
    g_vocab = grammar_vocab_new(N_VOCAB, g_ptr, g_len, g_kind, &e);
    return g_vocab ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    grammar_vocab_free(g_vocab);
    return 0;
}

static int32_t tok(const char *s) {
    for (int i = 0; i < N_VOCAB - 2; i++)
        if (g_len[i] == strlen(s) && !memcmp(g_piece[i], s, g_len[i])) return i;
    fail_msg("no token '%s'", s);
    return -1;
}

static grammar *compile(const char *text) {
    sol_err e = {0};
    grammar *g = grammar_new(text, strlen(text), g_vocab, &e);
    if (!g) fail_msg("%s", e.msg);
    return g;
}

static void expect_error(const char *text, const char *needle) {
    sol_err e = {0};
    grammar *g = grammar_new(text, strlen(text), g_vocab, &e);
    if (g) fail_msg("'%s' compiled", text);
    printf("refused: %s\n", e.msg);
    if (!strstr(e.msg, needle)) fail_msg("'%s' not in '%s'", needle, e.msg);
}

static void test_errors(void **state) {
    (void)state;
    expect_error("root ::= foo", "rule 'foo' is never defined");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", "line 2 column 1: rule 'root' is defined twice");
    expect_error("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", "left-recursive");
    expect_error("root ::= \"a\"{2000}", "repetition count above 1000");
    expect_error("root ::= \"a", "unterminated string");
    expect_error("start ::= \"a\"", "no rule named 'root'");
    expect_error("root ::= [^é]", "non-ASCII characters in a negated class");
    expect_error("root ::= ( \"a\" ", "expected )");
    expect_error("root ::= \"a\" @", "line 1 column 14: unexpected character '@'");
}

/* The allowed tokens as the mask says, and as replaying history + each token from scratch says. */
static void check_mask(const char *text, grammar *g, const int32_t *hist, int n_hist) {
    static float logits[N_VOCAB];
    for (int i = 0; i < N_VOCAB; i++)
        logits[i] = 0;
    sol_err e = {0};
    int rc = grammar_apply(g, logits, &e);
    for (int t = 0; t < N_VOCAB; t++) {
        grammar *fresh = compile(text);
        bool ok = true;
        for (int i = 0; i < n_hist && ok; i++)
            ok = grammar_accept(fresh, hist[i], &e) == 0;
        assert_true(ok);
        bool want = grammar_accept(fresh, t, &e) == 0;
        grammar_free(fresh);
        if (want != (logits[t] == 0.0f))
            fail_msg("token %d '%.*s' after %d tokens: mask %d, replay %d", t, (int)g_len[t],
                     g_piece[t], n_hist, logits[t] == 0.0f, want);
        assert_int_equal(grammar_allows(g, t), want);
    }
    assert_int_equal(rc, 0);
}

static uint64_t g_rng = 88172645463325252ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)g_rng;
}

/* Random walks through the allowed tokens; every step's mask checked; returns the text. */
static void walk(const char *text, int steps, char *out, size_t cap, int *ended) {
    grammar *g = compile(text);
    int32_t hist[64];
    int n = 0;
    size_t used = 0;
    *ended = 0;
    static float logits[N_VOCAB];
    while (n < steps && n < 64) {
        check_mask(text, g, hist, n);
        for (int i = 0; i < N_VOCAB; i++)
            logits[i] = 0;
        sol_err e = {0};
        assert_int_equal(grammar_apply(g, logits, &e), 0);
        int allowed[N_VOCAB], k = 0;
        for (int i = 0; i < N_VOCAB; i++)
            if (logits[i] == 0) allowed[k++] = i;
        int32_t t = allowed[rnd() % (uint32_t)k];
        assert_int_equal(grammar_accept(g, t, &e), 0);
        if (t == EOS) {
            *ended = 1;
            break;
        }
        hist[n++] = t;
        if (used + g_len[t] < cap) memcpy(out + used, g_piece[t], g_len[t]), used += g_len[t];
    }
    out[used] = 0;
    grammar_free(g);
}

static void test_choice(void **state) {
    (void)state;
    const char *text = "root ::= \"yes\" | \"no\"";
    grammar *g = compile(text);
    check_mask(text, g, NULL, 0);
    assert_true(grammar_allows(g, tok("yes")) && grammar_allows(g, tok("y")));
    assert_true(grammar_allows(g, tok("no")) && !grammar_allows(g, tok("es")));
    assert_false(grammar_allows(g, EOS));
    sol_err e = {0};
    assert_int_equal(grammar_accept(g, tok("y"), &e), 0);
    assert_true(grammar_allows(g, tok("es")) && !grammar_allows(g, tok("yes")));
    assert_int_equal(grammar_accept(g, tok("x"), &e), -EINVAL);
    assert_int_equal(grammar_accept(g, tok("es"), &e), 0);
    assert_true(grammar_complete(g));
    float logits[N_VOCAB] = {0};
    assert_int_equal(grammar_apply(g, logits, &e), 0);
    for (int i = 0; i < N_VOCAB; i++) /* complete, nothing may follow: only the end */
        assert_true(i == EOS ? logits[i] == 0 : isinf(logits[i]));
    assert_false(grammar_allows(g, CTRL));
    grammar_free(g);
    /* A token failing at its second byte leaves the state where it was. */
    g = compile("root ::= \"a\" \"z\"");
    assert_int_equal(grammar_accept(g, tok("ab"), &e), -EINVAL);
    assert_true(grammar_allows(g, tok("a")) && !grammar_allows(g, tok("z")));
    assert_int_equal(grammar_accept(g, tok("a"), &e), 0);
    assert_true(grammar_allows(g, tok("z")));
    grammar_free(g);
}

/* A JSON-like list of numbers; the walks' texts are checked by hand. */
static void test_random_walks(void **state) {
    (void)state;
    const char *text = "root ::= \"[\" ( num (\",\" num)* )? \"]\"\n"
                       "num ::= [1-9] [0-9]{0,3} # at most four digits\n";
    int ended_count = 0;
    for (int w = 0; w < 40; w++) {
        char out[512];
        int ended;
        walk(text, 30, out, sizeof out, &ended);
        ended_count += ended;
        size_t n = strlen(out);
        assert_true(n >= 1 && out[0] == '[');
        if (ended) assert_true(out[n - 1] == ']');
        for (size_t i = 1, digits = 0; i < n; i++) {
            char c = out[i];
            if (c >= '0' && c <= '9') {
                assert_true(digits > 0 || c != '0');
                assert_true(++digits <= 4);
            } else {
                assert_true(c == ',' || c == ']');
                assert_true(digits > 0 || (c == ']' && i == 1));
                digits = 0;
            }
        }
    }
    printf("%d of 40 walks ended\n", ended_count);
    assert_true(ended_count > 0);
}

static void test_utf8(void **state) {
    (void)state;
    const char *text = "root ::= \"\\\"\" [^\"\\\\]* \"\\\"\"";
    grammar *g = compile(text);
    sol_err e = {0};
    assert_int_equal(grammar_accept(g, tok("\""), &e), 0);
    check_mask(text, g, (int32_t[]){tok("\"")}, 1);
    assert_true(grammar_allows(g, tok("\xc3\xa9")) && grammar_allows(g, tok("\xe2\x82\xac")));
    assert_true(grammar_allows(g, tok("\xc3")) && grammar_allows(g, tok("\xe2\x82")));
    assert_false(grammar_allows(g, tok("\x80")) || grammar_allows(g, tok("\xa9")));
    assert_int_equal(grammar_accept(g, tok("\xc3"), &e), 0);
    assert_true(grammar_allows(g, tok("\xa9")) && grammar_allows(g, tok("\x80")));
    assert_false(grammar_allows(g, tok("a")) || grammar_allows(g, tok("\"")));
    check_mask(text, g, (int32_t[]){tok("\""), tok("\xc3")}, 2);
    assert_int_equal(grammar_accept(g, tok("\xa9"), &e), 0);
    assert_int_equal(grammar_accept(g, tok("\""), &e), 0);
    assert_true(grammar_complete(g));
    grammar_free(g);
    /* A class of non-ASCII ranges: é (U+00E9) to € (U+20AC) spans two encoded lengths. */
    const char *wide = "root ::= [é-€]+";
    g = compile(wide);
    check_mask(wide, g, NULL, 0);
    assert_true(grammar_allows(g, tok("\xc3\xa9")) && grammar_allows(g, tok("\xe2\x82\xac")));
    assert_false(grammar_allows(g, tok("a")));
    grammar_free(g);
}

/* A state is wide when at least 1/16 of the vocabulary (here 8 of 121 tokens) starts with a
 * byte it admits: inside a free string, not at a quote or a small class. The answer follows
 * the state as tokens are accepted. */
static void test_wide(void **state) {
    (void)state;
    grammar *g = compile("root ::= \"\\\"\" [^\"]{0,20} \"\\\"\" [!#] \"a\"");
    sol_err e = {0};
    assert_false(grammar_wide(g)); /* the opening quote: 4 tokens start with it */
    assert_int_equal(grammar_accept(g, tok("\""), &e), 0);
    assert_true(grammar_wide(g)); /* inside the string: all but 4 */
    assert_int_equal(grammar_accept(g, tok("yes"), &e), 0);
    assert_true(grammar_wide(g));
    assert_int_equal(grammar_accept(g, tok("\""), &e), 0);
    assert_false(grammar_wide(g)); /* ! or #: 2 tokens */
    assert_int_equal(grammar_accept(g, tok("#"), &e), 0);
    assert_false(grammar_wide(g));
    grammar_free(g);
}

/* A control token is refused even where its text fits, unless the grammar is told it may take
 * it (a tool format's opening); then it is allowed exactly where its text fits, and a shared
 * cache never hands one grammar's masks to the other. */
static void test_control_tokens(void **state) {
    (void)state;
    const char *text = "root ::= [a-z]* \"[T]\" \"1\" | \"x\" [^a]*";
    sol_err e = {0};
    grammar_cache *c = grammar_cache_new(g_vocab, 1 << 20, &e);
    grammar *plain = compile(text), *g = compile(text);
    grammar_use_cache(plain, c), grammar_use_cache(g, c);
    int32_t id = CTRL, ab = tok("ab");
    assert_int_equal(grammar_allow_control(g, &ab, 1, &e), -EINVAL);
    assert_int_equal(grammar_allow_control(g, &id, 1, &e), 0);
    assert_int_equal(grammar_accept(g, ab, &e), 0);
    assert_int_equal(grammar_accept(plain, ab, &e), 0);
    assert_true(grammar_allows(g, CTRL)); /* computed first: the plain one must not reuse it */
    assert_false(grammar_allows(plain, CTRL));
    assert_int_equal(grammar_accept(plain, CTRL, &e), -EINVAL);
    assert_int_equal(grammar_accept(g, CTRL, &e), 0);
    assert_false(grammar_allows(g, CTRL)); /* "1" must follow */
    assert_int_equal(grammar_accept(g, CTRL, &e), -EINVAL);
    assert_int_equal(grammar_accept(g, tok("1"), &e), 0);
    assert_true(grammar_complete(g));
    assert_int_equal(grammar_accept(plain, tok("["), &e), 0); /* spelled: still possible */
    grammar_free(plain), grammar_free(g);
    g = compile(text); /* in the class [^a], whose text it fits, it is refused */
    assert_int_equal(grammar_allow_control(g, &id, 1, &e), 0);
    assert_int_equal(grammar_accept(g, tok("x"), &e), 0);
    assert_int_equal(grammar_accept(g, tok("["), &e), 0);
    assert_false(grammar_allows(g, CTRL));
    assert_int_equal(grammar_accept(g, CTRL, &e), -EINVAL);
    grammar_free(g);
    grammar_cache_free(c);
}

static void test_cache(void **state) {
    (void)state;
    const char *text = "root ::= \"ab\"* \"!\"";
    grammar *g = compile(text);
    sol_err e = {0};
    float logits[N_VOCAB];
    for (int i = 0; i < 20; i++) {
        memset(logits, 0, sizeof logits);
        assert_int_equal(grammar_apply(g, logits, &e), 0);
        assert_int_equal(grammar_accept(g, tok("ab"), &e), 0);
    }
    uint64_t computed, cached;
    grammar_counters(g, &computed, &cached);
    printf("masks: %llu computed, %llu cached\n", (unsigned long long)computed,
           (unsigned long long)cached);
    assert_true(computed <= 2 && cached >= 18);
    grammar_free(g);
}

/* The worker's shared cache: a second request of the same grammar text finds every mask the
 * first computed; a grammar of another text never gets the first one's masks (the same state
 * words mean something else there), and its masks are its own and right. */
static void test_shared_cache(void **state) {
    (void)state;
    sol_err e = {0};
    grammar_cache *c = grammar_cache_new(g_vocab, 1 << 20, &e);
    assert_non_null(c);
    const char *a = "root ::= \"ab\"* \"!\"", *b = "root ::= \"!\"* \"ab\"";
    uint64_t computed, cached;
    for (int req = 0; req < 2; req++) {
        grammar *g = compile(a);
        grammar_use_cache(g, c);
        for (int i = 0; i < 3; i++) {
            assert_non_null(grammar_allowed(g, &e));
            assert_int_equal(grammar_accept(g, tok("ab"), &e), 0);
        }
        grammar_counters(g, &computed, &cached);
        assert_int_equal(computed, req == 0 ? 1 : 0); /* "ab"* returns to the start state */
        assert_int_equal(cached, req == 0 ? 2 : 3);
        grammar_free(g);
    }
    grammar *g = compile(b);
    grammar_use_cache(g, c);
    const uint64_t *m = grammar_allowed(g, &e);
    assert_non_null(m);
    grammar_counters(g, &computed, &cached);
    assert_int_equal(computed, 1);
    int32_t bang = tok("!"), ab = tok("ab");
    assert_true(m[bang >> 6] >> (bang & 63) & 1);
    assert_true(m[ab >> 6] >> (ab & 63) & 1);
    check_mask(b, g, NULL, 0);
    grammar_free(g);
    grammar_cache_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),       cmocka_unit_test(test_choice),
        cmocka_unit_test(test_random_walks), cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_wide),         cmocka_unit_test(test_control_tokens),
        cmocka_unit_test(test_cache),        cmocka_unit_test(test_shared_cache),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
