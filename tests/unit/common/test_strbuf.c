/* strbuf_has_line: a name is on a "\nname\n" list only as a whole line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "strbuf.h"

static void test_has_line(void **st) {
    (void)st;
    strbuf b;
    strbuf_init(&b);
    assert_false(strbuf_has_line(&b, "qwen")); /* empty: nothing */
    strbuf_puts(&b, "\n");
    assert_false(strbuf_has_line(&b, "qwen"));
    strbuf_puts(&b, "qwen-7b\nllama\n");
    assert_true(strbuf_has_line(&b, "llama"));
    assert_true(strbuf_has_line(&b, "qwen-7b"));
    assert_false(strbuf_has_line(&b, "qwen")); /* a prefix of a line is not the line */
    assert_false(strbuf_has_line(&b, "7b"));   /* nor a suffix */
    assert_false(strbuf_has_line(&b, "lla"));
    assert_false(strbuf_has_line(&b, ""));
    strbuf_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_has_line)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
