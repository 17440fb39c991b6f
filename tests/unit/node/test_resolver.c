/* Promise: only tcp://NAME:PORT endpoints are names to resolve (IP literals, wildcards, ipc and
 * inproc are not); a name resolves to every address as tcp://ADDRESS:PORT (IPv6 bracketed),
 * sorted and deduplicated; the resolver thread publishes a new set only when it changed. */
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

#include "clock.h"
#include "resolver.h"

static void test_is_name(void **state) {
    (void)state;
    assert_true(resolver_is_name("tcp://localhost:5555"));
    assert_true(resolver_is_name("tcp://sol-router-workers.sol.svc:5555"));
    assert_false(resolver_is_name("tcp://127.0.0.1:5555"));
    assert_false(resolver_is_name("tcp://[::1]:5555"));
    assert_false(resolver_is_name("tcp://*:5555"));
    assert_false(resolver_is_name("ipc:///tmp/x"));
    assert_false(resolver_is_name("tcp://nohostport"));
}

static void test_lookup_and_thread(void **state) {
    (void)state;
    char eps[RESOLVER_MAX][RESOLVER_ENDPOINT_MAX];
    sol_err e = {0};
    int n = resolver_lookup("tcp://localhost:7001", eps, RESOLVER_MAX, &e);
    assert_true(n >= 1);
    bool v4 = false;
    for (int i = 0; i < n; i++)
        v4 |= !strcmp(eps[i], "tcp://127.0.0.1:7001");
    assert_true(v4);
    /* the test hook: a file answers for a name, re-read at every lookup */
    char path[] = "/tmp/sol_test_resolve_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "replicas.test 127.0.0.2 127.0.0.1 127.0.0.2\n");
    fclose(f);
    setenv("SOL_TEST_RESOLVE_FILE", path, 1);
    n = resolver_lookup("tcp://replicas.test:9", eps, RESOLVER_MAX, &e);
    assert_int_equal(n, 2); /* sorted, deduplicated */
    assert_string_equal(eps[0], "tcp://127.0.0.1:9");
    const char *eplist[] = {"tcp://replicas.test:9", "tcp://127.0.0.1:1"};
    router_resolver *r = NULL;
    assert_int_equal(router_resolver_new(eplist, 2, 50, &r, &e), 0);
    uint64_t gen = 0;
    size_t got = 0;
    for (int i = 0; i < 100 && !router_resolver_take(r, &gen, eps, &got); i++)
        sol_sleep_ms(10);
    assert_int_equal(got, 2);
    assert_false(router_resolver_take(r, &gen, eps, &got)); /* unchanged: nothing new */
    router_resolver_free(r);
    unsetenv("SOL_TEST_RESOLVE_FILE");
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_is_name),
        cmocka_unit_test(test_lookup_and_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
