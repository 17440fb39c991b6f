/* Promise: the reply ids' store (reply_ids.h) gives back exactly the ids put for a model, a
 * cache_salt and a text - never another model's or another salt's, never for a text that differs
 * by a byte - holds no more than its
 * bound by dropping the least recently used, keeps the latest ids for a text put twice, and off
 * (0 bytes) is a NULL store every call accepts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "reply_ids.h"

#define K(model) ((reply_key){model, ""})

static void put(reply_ids *s, reply_key k, const char *text, uint32_t first, size_t n) {
    uint32_t ids[64];
    for (size_t i = 0; i < n; i++)
        ids[i] = first + (uint32_t)i;
    assert_int_equal(reply_ids_put(s, k, text, strlen(text), ids, n), 0);
}

/* the first id got for (model, text), or -1 with none; *n its count */
static long first_of(reply_ids *s, reply_key k, const char *text, size_t *n) {
    const uint32_t *ids = reply_ids_get(s, k, text, strlen(text), n);
    return ids ? (long)ids[0] : -1;
}

static void test_exact_keys(void **state) {
    (void)state;
    reply_ids *s = reply_ids_new(1 << 20);
    assert_non_null(s);
    put(s, K("m1"), "Hello there.", 100, 5);
    put(s, K("m2"), "Hello there.", 200, 4);
    put(s, K("m"), "1Hello there.", 300, 3); /* "m" + "1Hello" must not meet "m1" + "Hello" */
    size_t n = 0;
    assert_int_equal(first_of(s, K("m1"), "Hello there.", &n), 100);
    assert_int_equal(n, 5);
    assert_int_equal(first_of(s, K("m2"), "Hello there.", &n), 200);
    assert_int_equal(n, 4);
    assert_int_equal(first_of(s, K("m"), "1Hello there.", &n), 300);
    assert_int_equal(first_of(s, K("m1"), "Hello there", &n), -1);
    assert_int_equal(n, 0);
    assert_int_equal(first_of(s, K("m1"), "Hello there!", &n), -1);
    assert_int_equal(first_of(s, K("m3"), "Hello there.", &n), -1);
    put(s, K("m1"), "Hello there.", 400, 6); /* generated again as other ids: the latest wins */
    assert_int_equal(first_of(s, K("m1"), "Hello there.", &n), 400);
    assert_int_equal(n, 6);
    assert_int_equal(reply_ids_count(s), 3);
    put(s, K("m1"), "", 1, 1); /* nothing to quote: not kept */
    assert_int_equal(reply_ids_count(s), 3);
    /* a tenant's salt: only the same salt finds the reply (NULL and "" are the same: none) */
    put(s, ((reply_key){"m1", "tenant-a"}), "Secret.", 500, 2);
    assert_int_equal(first_of(s, ((reply_key){"m1", "tenant-a"}), "Secret.", &n), 500);
    assert_int_equal(first_of(s, ((reply_key){"m1", "tenant-b"}), "Secret.", &n), -1);
    assert_int_equal(first_of(s, K("m1"), "Secret.", &n), -1);
    assert_int_equal(first_of(s, ((reply_key){"m1", NULL}), "Hello there.", &n), 400);
    put(s, ((reply_key){"m", "1"}), "Hi.", 600, 1); /* "m" salt "1" is not "m1" salt "" */
    assert_int_equal(first_of(s, K("m1"), "Hi.", &n), -1);
    assert_int_equal(first_of(s, ((reply_key){"m", "1"}), "Hi.", &n), 600);
    reply_ids_free(s);
}

static void test_bound_and_lru(void **state) {
    (void)state;
    const size_t bound = 16 << 10;
    reply_ids *s = reply_ids_new(bound);
    char text[32];
    for (int i = 0; i < 2000; i++) {
        snprintf(text, sizeof text, "reply number %d", i);
        put(s, K("m"), text, (uint32_t)i, 32);
        if (i % 25 == 0) { /* reply 0 kept in use: it must outlive the others of its age */
            size_t n;
            assert_int_equal(first_of(s, K("m"), "reply number 0", &n), 0);
        }
        assert_true(reply_ids_bytes(s) <= bound);
    }
    size_t n = 0, held = reply_ids_count(s);
    assert_true(held > 20 && held < 2000);
    assert_int_equal(first_of(s, K("m"), "reply number 1999", &n), 1999);
    assert_int_equal(first_of(s, K("m"), "reply number 0", &n), 0);
    assert_int_equal(first_of(s, K("m"), "reply number 1", &n), -1); /* the oldest unused: gone */
    /* a reply over an eighth of the store is not kept */
    uint32_t big[1024] = {0};
    assert_int_equal(reply_ids_put(s, K("m"), "big", 3, big, 1024), 0);
    assert_null(reply_ids_get(s, K("m"), "big", 3, &n));
    reply_ids_free(s);
}

static void test_off(void **state) {
    (void)state;
    reply_ids *s = reply_ids_new(0);
    assert_null(s);
    uint32_t id = 7;
    size_t n = 9;
    assert_int_equal(reply_ids_put(s, K("m"), "x", 1, &id, 1), 0);
    assert_null(reply_ids_get(s, K("m"), "x", 1, &n));
    assert_int_equal(n, 0);
    assert_int_equal(reply_ids_count(s), 0);
    reply_ids_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_keys),
        cmocka_unit_test(test_bound_and_lru),
        cmocka_unit_test(test_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
