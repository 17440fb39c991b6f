/* Promise: routing follows model → tag → rules (tag rules first) → classifier → default, reports
 * the reason, rejects unknown models, and the classifier trains, saves, loads and rejects garbage.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "classify.h"

static const char *pools[] = {"fast", "precise"};
static const char *kw[] = {"prove", "step by step"};

static classify *make(const char *clf_path) {
    classify_rule rules[] = {
        {.keywords = kw, .n_keywords = 2, .pool = "precise"},
        {.prompt_chars_below = 20, .max_tokens_below = 100, .pool = "fast"},
        {.tag = "batch", .pool = "precise"},
    };
    classify_config cfg = {pools, 2, "precise", rules, 3, clf_path, 0};
    classify *c = NULL;
    sol_err e = {0};
    if (classify_new(&cfg, &c, &e)) fail_msg("classify_new: %s", e.msg);
    return c;
}

static classify_result route(classify *c, const char *model, const char *text, uint32_t max_tokens,
                             const char *tag) {
    const char *tags[1] = {tag};
    classify_input in = {model,           text, strlen(text), NULL, 0, max_tokens,
                         max_tokens != 0, tags, tag ? 1u : 0u};
    classify_result r;
    assert_int_equal(classify_route(c, &in, &r), 0);
    return r;
}

static void test_order(void **st) {
    (void)st;
    classify *c = make(NULL);
    classify_result r = route(c, "fast", "Prove Fermat step by step", 10, NULL);
    assert_string_equal(r.pool, "fast");
    assert_string_equal(r.reason, "model");
    r = route(c, "llama", "hi", 10, "precise");
    assert_string_equal(r.pool, "precise");
    assert_string_equal(r.reason, "tag");
    r = route(c, "llama", "hi", 10, "batch"); /* tag rule beats the earlier short-prompt rule */
    assert_string_equal(r.pool, "precise");
    assert_string_equal(r.reason, "rule:2");
    r = route(c, "llama", "Please PROVE it", 10, NULL);
    assert_string_equal(r.reason, "rule:0");
    r = route(c, "llama", "hi there", 10, NULL);
    assert_string_equal(r.pool, "fast");
    assert_string_equal(r.reason, "rule:1");
    r = route(c, "llama", "hi there", 500, NULL); /* max_tokens too big for rule 1 */
    assert_string_equal(r.pool, "precise");
    assert_string_equal(r.reason, "default");
    r = route(c, "llama",
              "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3"
              "\xa9\xc3\xa9",
              10, NULL);
    assert_string_equal(r.reason, "rule:1"); /* 12 characters, 24 bytes: counts characters */
    classify_input in = {"gpt-4", "x", 1, NULL, 0, 1, 1, NULL, 0};
    classify_result rr; /* a name that is no pool is judged by the HTTP layer, not here */
    assert_int_equal(classify_route(c, &in, &rr), 0);
    assert_string_equal(rr.reason, "rule:1");
    classify_free(c);
}

static void test_bad_config(void **st) {
    (void)st;
    classify_rule rules[] = {{.tag = "x", .pool = "medium"}};
    classify_config cfg = {pools, 2, "precise", rules, 1, NULL, 0};
    classify *c = NULL;
    sol_err e = {0};
    assert_int_equal(classify_new(&cfg, &c, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "medium"));
    classify_rule empty[] = {{.pool = "fast"}};
    cfg.rules = empty;
    assert_int_equal(classify_new(&cfg, &c, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "no condition"));
    cfg.n_rules = 0;
    cfg.default_pool = "nope";
    assert_int_equal(classify_new(&cfg, &c, &e), -EINVAL);
}

static void test_tags_header(void **st) {
    (void)st;
    char store[64];
    const char *tags[4];
    assert_int_equal(classify_split_tags(" a, b ,,c", store, sizeof store, tags, 4), 3);
    assert_string_equal(tags[0], "a");
    assert_string_equal(tags[1], "b");
    assert_string_equal(tags[2], "c");
}

static void test_classifier_train_save_load(void **st) {
    (void)st;
    clf_example ex[] = {
        {"hi, how are you?", 0},
        {"what's the capital of France?", 0},
        {"tell me a joke", 0},
        {"translate hello to Spanish", 0},
        {"Prove that sqrt 2 is irrational, step by step.", 1},
        {"Write a C function implementing a red-black tree with deletion and proofs.", 1},
        {"Derive the backpropagation equations for a two-layer network.", 1},
        {"Analyze the time complexity of quicksort rigorously.", 1},
    };
    clf_model *m = clf_model_new("precise", "fast");
    clf_train_opts o = {40, 0.5f, 0, 7};
    assert_int_equal(clf_model_train(m, ex, 8, &o, NULL), 0);
    assert_true(clf_model_accuracy(m, ex, 8) == 1.0);
    char path[] = "/tmp/sol_clf_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    sol_err e = {0};
    assert_int_equal(clf_model_save(m, path, 0, &e), 0);
    clf_model *l = NULL;
    assert_int_equal(clf_model_load(path, &l, &e), 0);
    const char *t = "Prove the theorem step by step.";
    double a = clf_model_predict(m, t, strlen(t)), b = clf_model_predict(l, t, strlen(t));
    assert_true(a > 0.5 && b > a - 1e-4 && b < a + 1e-4);
    clf_model_free(l);

    classify *c = make(path);
    classify_result r =
        route(c, "llama", "Derive the closed form of the recurrence carefully", 500, NULL);
    assert_string_equal(r.pool, "precise");
    assert_true(!strncmp(r.reason, "classifier:", 11));
    classify_free(c);

    FILE *f = fopen(path, "w");
    fputs("sol-classifier 1\nbuckets 12\n", f);
    fclose(f);
    assert_int_equal(clf_model_load(path, &l, &e) < 0 ? -1 : 0, -1);
    assert_non_null(strstr(e.msg, "buckets"));
    f = fopen(path, "w");
    fputs("\x7f"
          "ELF garbage",
          f);
    fclose(f);
    assert_true(clf_model_load("/nonexistent/w", &l, &e) < 0);
    assert_int_equal(clf_model_load(path, &l, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "not a Sol classifier file"));
    unlink(path);
    clf_model_free(m);
}

static void test_shipped_weights(void **st) {
    (void)st;
    clf_model *m = NULL;
    sol_err e = {0};
    if (clf_model_load(SOL_SOURCE_DIR "/deploy/classifier/weights.txt", &m, &e))
        fail_msg("%s", e.msg);
    const char *easy = "what's the capital of Italy?";
    const char *hard = "Prove by induction that the sum of the first n cubes is a square.";
    assert_true(clf_model_predict(m, easy, strlen(easy)) < 0.5);
    assert_true(clf_model_predict(m, hard, strlen(hard)) > 0.5);
    clf_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order),           cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_tags_header),     cmocka_unit_test(test_classifier_train_save_load),
        cmocka_unit_test(test_shipped_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
