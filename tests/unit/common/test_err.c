/* Promise: sol_err_set/wrap keep the code and compose messages with context. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "err.h"

static int fails(sol_err *e) {
    return sol_err_set(e, -EINVAL, "bad value %d", 7);
}

static void test_set_and_wrap(void **state) {
    (void)state;
    sol_err e = {0};
    assert_int_equal(fails(&e), -EINVAL);
    assert_string_equal(e.msg, "bad value 7");
    assert_int_equal(sol_err_wrap(&e, "%s: ", "cfg.yaml"), -EINVAL);
    assert_string_equal(e.msg, "cfg.yaml: bad value 7");
    sol_err_clear(&e);
    assert_int_equal(e.code, 0);
    assert_string_equal(e.msg, "");
    assert_int_equal(fails(NULL), -EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_set_and_wrap)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
