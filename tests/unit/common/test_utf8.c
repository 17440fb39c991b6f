/* Promise: the one strict UTF-8 validator answers the same for wire frames (frame.c), HTTP
 * bodies (utf8_valid_prefix) and JSON output (strbuf_json_str), and strbuf holds binary data
 * and reads whole files (strbuf_read_file: byte for byte, past its 64 KiB read size). */
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

#include "frame.h"
#include "strbuf.h"
#include "utf8.h"

typedef struct {
    const char *s;
    size_t len;
    size_t valid; /* longest valid prefix */
} utf8_case;

static const utf8_case k_cases[] = {
    {"plain ascii", 11, 11},
    {"caf\xc3\xa9", 5, 5},
    {"\xe2\x82\xac euro", 8, 8},
    {"\xf0\x9f\x98\x80!", 5, 5},
    {"ab\xc3", 3, 2},           /* cut off */
    {"\xc0\xaf", 2, 0},         /* overlong */
    {"x\xe0\x80\xaf", 4, 1},    /* overlong 3-byte */
    {"\xed\xa0\x80", 3, 0},     /* UTF-16 surrogate */
    {"\xf4\x90\x80\x80", 4, 0}, /* above U+10FFFF */
    {"ok\xff", 3, 2},           /* never a UTF-8 byte */
    {"\xe2\x28\xa1", 3, 0},     /* bad continuation */
};

static void test_valid_prefix_and_frames(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        const utf8_case *c = &k_cases[i];
        assert_int_equal(utf8_valid_prefix(c->s, c->len), c->valid);
        size_t bad = frame_utf8_invalid_at((const uint8_t *)c->s, c->len);
        assert_int_equal(bad, c->valid == c->len ? (size_t)-1 : c->valid);
    }
    /* Frames also refuse NUL, which C strings cannot carry. */
    assert_int_equal(frame_utf8_invalid_at((const uint8_t *)"ab\0c", 4), 2);
    assert_int_equal(utf8_valid_prefix("ab\0c", 4), 4);
}

static void test_json_escapes_invalid(void **state) {
    (void)state;
    strbuf b;
    strbuf_init(&b);
    assert_int_equal(strbuf_json_str(&b, "caf\xc3\xa9\xff\xc3", 7), 0);
    assert_string_equal(b.data, "\"caf\xc3\xa9\\ufffd\\ufffd\"");
    strbuf_free(&b);
}

static void test_binary_append(void **state) {
    (void)state;
    strbuf b;
    strbuf_init(&b);
    const uint32_t v = 0x00475546; /* contains NUL bytes */
    for (int i = 0; i < 1000; i++)
        assert_int_equal(strbuf_append(&b, &v, sizeof v), 0);
    assert_int_equal(b.len, 4000);
    assert_memory_equal(b.data + 3996, &v, sizeof v);
    size_t len = 0;
    char *p = strbuf_take(&b, &len);
    assert_int_equal(len, 4000);
    assert_int_equal(b.len, 0);
    free(p);
    p = strbuf_take(&b, &len); /* empty: still a valid "" */
    assert_non_null(p);
    assert_int_equal(len, 0);
    assert_string_equal(p, "");
    free(p);
}

static void test_read_file(void **state) {
    (void)state;
    char path[] = "/tmp/sol-test-strbuf-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "wb");
    for (int i = 0; i < 200000; i++)
        fputc((i * 7) & 0xff, f);
    fclose(f);
    strbuf b;
    strbuf_init(&b);
    assert_int_equal(strbuf_puts(&b, "head:"), 0);
    assert_int_equal(strbuf_read_file(&b, path), 0);
    assert_int_equal(b.len, 5 + 200000);
    for (int i = 0; i < 200000; i++)
        assert_int_equal((unsigned char)b.data[5 + i], (i * 7) & 0xff);
    assert_int_equal(b.data[b.len], 0);
    unlink(path);
    assert_int_equal(strbuf_read_file(&b, path), -ENOENT);
    assert_int_equal(b.len, 5 + 200000); /* untouched on failure */
    strbuf_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_prefix_and_frames),
        cmocka_unit_test(test_json_escapes_invalid),
        cmocka_unit_test(test_binary_append),
        cmocka_unit_test(test_read_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
