/* Promise: the token bucket allows `burst` requests, refills at `rate`, keeps keys apart and
 * reports Retry-After; API keys load from a file and check in constant time (right answers). */
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

#include "apikeys.h"
#include "ratelimit.h"

static uint64_t fake_clock(void *ctx) {
    return *(uint64_t *)ctx;
}

static void test_bucket(void **st) {
    (void)st;
    uint64_t now = 1000;
    ratelimit *r = ratelimit_new(2.0, 3.0, fake_clock, &now);
    int retry = 0;
    for (int i = 0; i < 3; i++)
        assert_int_equal(ratelimit_take(r, "a", &retry), 1);
    assert_int_equal(ratelimit_take(r, "a", &retry), 0);
    assert_int_equal(retry, 1);
    assert_int_equal(ratelimit_take(r, "b", &retry), 1); /* other keys unaffected */
    now += 500000000;                                    /* 0.5 s at 2/s = 1 token */
    assert_int_equal(ratelimit_take(r, "a", &retry), 1);
    assert_int_equal(ratelimit_take(r, "a", &retry), 0);
    now += 100ull * 1000000000; /* long idle: capped at burst */
    for (int i = 0; i < 3; i++)
        assert_int_equal(ratelimit_take(r, "a", NULL), 1);
    assert_int_equal(ratelimit_take(r, "a", NULL), 0);
    ratelimit_free(r);

    ratelimit *slow = ratelimit_new(0.1, 1, fake_clock, &now);
    assert_int_equal(ratelimit_take(slow, "k", &retry), 1);
    assert_int_equal(ratelimit_take(slow, "k", &retry), 0);
    assert_int_equal(retry, 10);
    ratelimit_free(slow);

    ratelimit *off = ratelimit_new(0, 0, NULL, NULL);
    for (int i = 0; i < 100; i++)
        assert_int_equal(ratelimit_take(off, "x", NULL), 1);
    ratelimit_free(off);
}

static void test_many_keys(void **st) {
    (void)st;
    uint64_t now = 0;
    ratelimit *r = ratelimit_new(1.0, 1.0, fake_clock, &now);
    char key[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof key, "key-%d", i);
        assert_int_equal(ratelimit_take(r, key, NULL), 1);
    }
    for (int i = 0; i < 5000; i += 97) {
        snprintf(key, sizeof key, "key-%d", i);
        assert_int_equal(ratelimit_take(r, key, NULL), 0);
    }
    ratelimit_free(r);
}

static void test_apikeys(void **st) {
    (void)st;
    char path[] = "/tmp/sol_keys_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "# team keys\n  sk-alpha-123456  \n\nsk-beta-abcdefgh\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    apikeys *k = NULL;
    sol_err e = {0};
    assert_int_equal(apikeys_load(path, &k, &e), 0);
    assert_int_equal(apikeys_count(k), 2);
    assert_int_equal(apikeys_check(k, "sk-alpha-123456", 15), 1);
    assert_int_equal(apikeys_check(k, "sk-alpha-12345", 14), 0);
    assert_int_equal(apikeys_check(k, "sk-alpha-1234567", 16), 0);
    const char *got = NULL;
    assert_int_equal(apikeys_check_bearer(k, "Bearer sk-beta-abcdefgh", &got), 1);
    assert_string_equal(got, "sk-beta-abcdefgh");
    assert_int_equal(apikeys_check_bearer(k, "Basic sk-beta-abcdefgh", NULL), 0);
    assert_int_equal(apikeys_check_bearer(k, NULL, NULL), 0);
    apikeys_free(k);

    FILE *f = fopen(path, "w");
    fputs("# only a comment\n", f);
    fclose(f);
    assert_int_equal(apikeys_load(path, &k, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "no API keys"));
    f = fopen(path, "w");
    fputs("goodkey-123\nshort\n", f);
    fclose(f);
    assert_int_equal(apikeys_load(path, &k, &e), -EINVAL);
    assert_non_null(strstr(e.msg, ":2:"));
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket),
        cmocka_unit_test(test_many_keys),
        cmocka_unit_test(test_apikeys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
