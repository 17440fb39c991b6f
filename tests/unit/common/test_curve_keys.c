/* Promise: sol-keygen's files round-trip (the pair loads, the public key loads from its .pub or
 * as 40 Z85 characters), a pair whose halves do not match and malformed files are refused naming
 * the file and line, and a directory of .pub files answers whether a key is authorized (by the
 * file's stem), re-read at every call. */
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

#include "curve_keys.h"

static char g_dir[64];

static void write_text(const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_round_trip_and_authorized(void **state) {
    (void)state;
    sol_err e = {0};
    curve_pair a, b, loaded;
    assert_int_equal(curve_keygen(g_dir, "a", &a, &e), 0);
    assert_int_equal(curve_keygen(g_dir, "b", &b, &e), 0);
    assert_int_equal(curve_keygen(g_dir, "a", &a, &e), -EEXIST);
    char path[256];
    snprintf(path, sizeof path, "%s/a.key", g_dir);
    assert_int_equal(curve_load_pair(path, &loaded, &e), 0);
    assert_string_equal(loaded.secret_key.z85, a.secret_key.z85);
    curve_key k;
    snprintf(path, sizeof path, "%s/b.pub", g_dir);
    assert_int_equal(curve_load_public(path, &k, &e), 0);
    assert_string_equal(k.z85, b.public_key.z85);
    assert_int_equal(curve_load_public(b.public_key.z85, &k, &e), 0);
    char name[64], bad[256];
    assert_int_equal(curve_authorized(g_dir, &a.public_key, name, sizeof name, bad, sizeof bad, &e),
                     0);
    assert_string_equal(name, "a");
    assert_int_equal(curve_count_authorized(g_dir, &e), 2);
    snprintf(path, sizeof path, "%s/a.pub", g_dir);
    unlink(path); /* revoked: the next call no longer finds it */
    assert_int_equal(curve_authorized(g_dir, &a.public_key, name, sizeof name, bad, sizeof bad, &e),
                     -ENOENT);
    assert_non_null(strstr(e.msg, a.public_key.z85));
}

static void test_bad_files(void **state) {
    (void)state;
    sol_err e = {0};
    curve_pair a, b, p;
    assert_int_equal(curve_keygen(g_dir, "x", &a, &e), 0);
    assert_int_equal(curve_keygen(g_dir, "y", &b, &e), 0);
    char text[256], path[256];
    snprintf(text, sizeof text, "public-key = %s\nsecret-key = %s\n", a.public_key.z85,
             b.secret_key.z85);
    write_text("mixed.key", text);
    snprintf(path, sizeof path, "%s/mixed.key", g_dir);
    assert_int_equal(curve_load_pair(path, &p, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "does not belong"));
    write_text("short.key", "# comment\n\npublic-key = abc\n");
    snprintf(path, sizeof path, "%s/short.key", g_dir);
    assert_int_equal(curve_load_pair(path, &p, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "short.key:3: public-key is not 40 Z85"));
    write_text("junk.pub", "hello\n");
    curve_key k;
    snprintf(path, sizeof path, "%s/junk.pub", g_dir);
    assert_int_equal(curve_load_public(path, &k, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "junk.pub:1"));
    char name[64], bad[256];
    /* junk.pub is skipped (and named), x.pub still found */
    assert_int_equal(curve_authorized(g_dir, &a.public_key, name, sizeof name, bad, sizeof bad, &e),
                     0);
    assert_string_equal(name, "x");
    assert_int_equal(curve_load_public("", &k, &e), -EINVAL);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/sol_test_curve_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_and_authorized, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_files, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
