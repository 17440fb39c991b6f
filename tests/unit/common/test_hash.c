/* Promise: the shared hashes give the published FNV-1a, SplitMix64 and MurmurHash3 values, so
 * what was saved with them (classifier buckets, seeds, prefix-cache keys) keeps its meaning. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "hash.h"

static void test_fnv(void **state) {
    (void)state;
    /* The reference vectors of the FNV authors' test suite. */
    assert_true(sol_fnv64(SOL_FNV64_INIT, "", 0) == 0xcbf29ce484222325ull);
    assert_true(sol_fnv64(SOL_FNV64_INIT, "a", 1) == 0xaf63dc4c8601ec8cull);
    assert_true(sol_fnv64(SOL_FNV64_INIT, "foobar", 6) == 0x85944171f73967e8ull);
    assert_true(sol_fnv32(SOL_FNV32_INIT, "a", 1) == 0xe40c292cu);
    assert_true(sol_fnv32(SOL_FNV32_INIT, "foobar", 6) == 0xbf9cf968u);
    /* Strings and chained calls equal one pass over the bytes; NULL folds nothing. */
    assert_true(sol_fnv64_str(SOL_FNV64_INIT, "foobar") == 0x85944171f73967e8ull);
    assert_true(sol_fnv64(sol_fnv64(SOL_FNV64_INIT, "foo", 3), "bar", 3) == 0x85944171f73967e8ull);
    assert_true(sol_fnv64_str(42, NULL) == 42);
    /* Case folding touches ASCII letters only. */
    assert_true(sol_fnv64_lower(SOL_FNV64_INIT, "FooBar", 6) == 0x85944171f73967e8ull);
    assert_true(sol_fnv64_lower(SOL_FNV64_INIT, "\xc3\x84", 2) ==
                sol_fnv64(SOL_FNV64_INIT, "\xc3\x84", 2));
    assert_true(sol_fnv64_lower(SOL_FNV64_INIT, "[@", 2) == sol_fnv64(SOL_FNV64_INIT, "[@", 2));
}

static void test_mixers(void **state) {
    (void)state;
    /* SplitMix64 seeded with 0: its first outputs are mix64(k * golden). */
    assert_true(sol_mix64(SOL_GOLDEN64) == 0xe220a8397b1dcdafull);
    assert_true(sol_mix64(2 * SOL_GOLDEN64) == 0x6e789e6aa1b965f4ull);
    assert_true(sol_mix64(0) == 0 && sol_fmix64(0) == 0);
    /* MurmurHash3 fmix64 of 1 (from the reference implementation). */
    assert_true(sol_fmix64(1) == 0xb456bcfc34c2cb2cull);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fnv),
        cmocka_unit_test(test_mixers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
