/* Promise: the tools' flag table parses every form (--name VALUE, --name=VALUE, -s VALUE,
 * switches, repeatable callbacks), holds each value to its bounds with a message naming the flag
 * and the bounds, and refuses what it does not know - never a silently ignored flag. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "args.h"

typedef struct vals {
    const char *out;
    int n, sw, seen_n, calls;
    float f;
    unsigned long long u;
    const char *last;
} vals;

static int collect(const char *v, void *ctx, sol_err *err) {
    vals *x = ctx;
    if (!strcmp(v, "bad")) return sol_err_set(err, -EINVAL, "--item: 'bad' is refused");
    x->calls++, x->last = v;
    return 0;
}

static int parse(vals *x, int argc, char **argv, sol_err *e) {
    const sol_arg args[] = {
        {"--out", 'o', SOL_ARG_STR, &x->out, 0, 0, 0, NULL, NULL, NULL},
        {"--n", 'n', SOL_ARG_INT, &x->n, 1, 8, 0, NULL, NULL, &x->seen_n},
        {"--f", 0, SOL_ARG_FLOAT, &x->f, 0, 1, 1, NULL, NULL, NULL},
        {"--g", 0, SOL_ARG_FLOAT, &x->f, 0, INFINITY, 1, NULL, NULL, NULL},
        {"--u", 0, SOL_ARG_U64, &x->u, 0, 0, 0, NULL, NULL, NULL},
        {"--sw", 0, SOL_ARG_SWITCH, &x->sw, 0, 0, 0, NULL, NULL, NULL},
        {"--item", 0, SOL_ARG_FN, NULL, 0, 0, 0, collect, x, NULL},
    };
    memset(x, 0, sizeof *x);
    return sol_args_parse(args, sizeof args / sizeof args[0], argc, argv, e);
}

static void test_forms(void **state) {
    (void)state;
    vals x;
    sol_err e = {0};
    char *argv[] = {"t",    "in",   "-o",     "a.gguf", "--n=3",  "--f",    "0.5",  "--u",
                    "0x10", "--sw", "--item", "first",  "--item", "second", "rest", NULL};
    assert_int_equal(parse(&x, 15, argv, &e), 2); /* positionals anywhere, moved down */
    assert_string_equal(argv[1], "in");
    assert_string_equal(argv[2], "rest");
    assert_string_equal(x.out, "a.gguf");
    assert_int_equal(x.n, 3);
    assert_int_equal(x.seen_n, 1);
    assert_true(x.f == 0.5f);
    assert_true(x.u == 16);
    assert_int_equal(x.sw, 1);
    assert_int_equal(x.calls, 2);
    assert_string_equal(x.last, "second");
    char *dash[] = {"t", "--", "--n", NULL};
    assert_int_equal(parse(&x, 3, dash, &e), 1);
    assert_string_equal(dash[1], "--n");
    assert_int_equal(x.seen_n, 0);
}

static void refused(int argc, char **argv, const char *needle) {
    vals x;
    sol_err e = {0};
    assert_int_equal(parse(&x, argc, argv, &e), -EINVAL);
    if (!strstr(e.msg, needle)) fail_msg("'%s' lacks '%s'", e.msg, needle);
}

static void test_refusals(void **state) {
    (void)state;
    refused(3, (char *[]){"t", "--n", "9", NULL}, "--n: expected an integer in [1, 8], found '9'");
    refused(3, (char *[]){"t", "--n", "2x", NULL}, "--n: expected an integer");
    refused(3, (char *[]){"t", "--f", "0", NULL}, "--f: expected a number in (0, 1], found '0'");
    refused(3, (char *[]){"t", "--g", "nan", NULL}, "--g: expected a number > 0, found 'nan'");
    refused(3, (char *[]){"t", "--u", "-1", NULL}, "--u: expected an integer, found '-1'");
    refused(2, (char *[]){"t", "--sw=1", NULL}, "--sw: takes no value");
    refused(2, (char *[]){"t", "--n", NULL}, "--n: needs a value");
    refused(2, (char *[]){"t", "--nope", NULL}, "unknown option '--nope'");
    refused(2, (char *[]){"t", "-x", NULL}, "unknown option '-x'");
    refused(3, (char *[]){"t", "--item", "bad", NULL}, "'bad' is refused");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forms),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
