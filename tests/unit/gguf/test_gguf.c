/* Promise: what gguf_writer writes gguf reads back exactly, and corrupt files get an error naming
 * the file (and key/tensor), never a crash. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "gguf.h"
#include "gguf_writer.h"

/* ---- a tiny encoder for hand-made (and deliberately broken) files ---- */

typedef struct {
    uint8_t p[4096];
    size_t n;
} bb;

static void put(bb *b, const void *p, size_t n) {
    assert_true(b->n + n <= sizeof b->p);
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void u32(bb *b, uint32_t v) {
    put(b, &v, 4);
}
static void u64(bb *b, uint64_t v) {
    put(b, &v, 8);
}
static void str(bb *b, const char *s) {
    u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void header(bb *b, uint64_t n_tensors, uint64_t n_kv) {
    put(b, "GGUF", 4);
    u32(b, 3);
    u64(b, n_tensors);
    u64(b, n_kv);
}
static void kv_u32(bb *b, const char *key, uint32_t v) {
    str(b, key);
    u32(b, GGUF_T_U32);
    u32(b, v);
}
static void tinfo(bb *b, const char *name, uint64_t ne0, uint64_t ne1, uint32_t type,
                  uint64_t off) {
    str(b, name);
    u32(b, ne1 ? 2 : 1);
    u64(b, ne0);
    if (ne1) u64(b, ne1);
    u32(b, type);
    u64(b, off);
}
static void pad_data(bb *b, size_t data_bytes) {
    while (b->n % 32)
        b->p[b->n++] = 0;
    for (size_t i = 0; i < data_bytes; i++)
        b->p[b->n++] = (uint8_t)i;
}

/* Opens a heap copy of exactly n bytes, so the sanitizers see any read past the end.
 * Returns whether the open succeeded. */
static int opens(const void *p, size_t n, sol_err *e) {
    void *copy = malloc(n ? n : 1);
    memcpy(copy, p, n);
    gguf_file *g = gguf_open_memory(copy, n, "bad.gguf", e);
    gguf_close(g);
    free(copy);
    return g != NULL;
}

static void expect_fail(const bb *b, const char *needle1, const char *needle2) {
    sol_err e = {0};
    if (opens(b->p, b->n, &e)) fail_msg("expected failure containing '%s'", needle1);
    assert_true(e.code < 0);
    if (strncmp(e.msg, "bad.gguf: ", 10) != 0 || !strstr(e.msg, needle1) ||
        (needle2 && !strstr(e.msg, needle2)))
        fail_msg("message '%s' lacks '%s' / '%s'", e.msg, needle1, needle2 ? needle2 : "");
}

static void test_corrupt_table(void **state) {
    (void)state;
    bb b = {0};
    put(&b, "GGML", 4), u32(&b, 3), u64(&b, 0), u64(&b, 0);
    expect_fail(&b, "magic", NULL);
    b.n = 0, put(&b, "GGUF", 4), u32(&b, 4), u64(&b, 0), u64(&b, 0);
    expect_fail(&b, "version 4", NULL);
    b.n = 0, put(&b, "GGUF", 4), u32(&b, 1), u64(&b, 0), u64(&b, 0);
    expect_fail(&b, "version 1", NULL);
    b.n = 0, header(&b, 0, UINT64_MAX / 2);
    expect_fail(&b, "metadata count", NULL);
    b.n = 0, header(&b, 1ull << 40, 0);
    expect_fail(&b, "tensor count", NULL);
    b.n = 0, header(&b, 0, 1), u64(&b, 1000), put(&b, "general.name", 12), u32(&b, 0);
    expect_fail(&b, "runs past the end", NULL);
    b.n = 0, header(&b, 0, 1), str(&b, "general.name"), u32(&b, GGUF_T_STR), u64(&b, 99);
    expect_fail(&b, "runs past the end", "general.name");
    b.n = 0, header(&b, 0, 1), str(&b, "k.weird"), u32(&b, 77), u32(&b, 0);
    expect_fail(&b, "unknown value type 77", "k.weird");
    b.n = 0, header(&b, 0, 1), str(&b, "tok.list"), u32(&b, GGUF_T_ARR), u32(&b, GGUF_T_STR),
    u64(&b, 1ull << 60);
    expect_fail(&b, "cannot fit", "tok.list");
    b.n = 0, header(&b, 0, 1), str(&b, "deep");
    u32(&b, GGUF_T_ARR);
    for (int i = 0; i < 10; i++)
        u32(&b, GGUF_T_ARR), u64(&b, 1);
    u32(&b, GGUF_T_U8), u64(&b, 0);
    expect_fail(&b, "nested deeper", "deep");
    b.n = 0, header(&b, 0, 2), kv_u32(&b, "a.b", 1), kv_u32(&b, "a.b", 2);
    expect_fail(&b, "duplicate key", "a.b");
    b.n = 0, header(&b, 0, 1), kv_u32(&b, "general.alignment", 24);
    expect_fail(&b, "power of two", "general.alignment");
    b.n = 0, header(&b, 1, 0), tinfo(&b, "t.weight", 32, 0, SOL_DT_F32, 1024), pad_data(&b, 128);
    expect_fail(&b, "outside the file", "t.weight");
    b.n = 0, header(&b, 2, 0), tinfo(&b, "a.weight", 32, 0, SOL_DT_F32, 0);
    tinfo(&b, "b.weight", 32, 0, SOL_DT_F32, 64), pad_data(&b, 256);
    expect_fail(&b, "overlap", "a.weight");
    b.n = 0, header(&b, 1, 0), tinfo(&b, "m.weight", 32, 0, SOL_DT_F32, 4), pad_data(&b, 256);
    expect_fail(&b, "not a multiple of the alignment", "m.weight");
    b.n = 0, header(&b, 1, 0), tinfo(&b, "u.weight", 32, 0, 99, 0), pad_data(&b, 256);
    expect_fail(&b, "unknown tensor type 99", "u.weight");
    b.n = 0, header(&b, 1, 0), tinfo(&b, "o.weight", 1ull << 40, 1ull << 40, SOL_DT_F32, 0);
    pad_data(&b, 64);
    expect_fail(&b, "overflows", "o.weight");
    b.n = 0, header(&b, 1, 0), tinfo(&b, "q.weight", 48, 0, SOL_DT_Q4_0, 0), pad_data(&b, 64);
    expect_fail(&b, "block size", "q.weight");
    b.n = 0, header(&b, 2, 0), tinfo(&b, "d.weight", 8, 0, SOL_DT_F32, 0);
    tinfo(&b, "d.weight", 8, 0, SOL_DT_F32, 32), pad_data(&b, 64);
    expect_fail(&b, "duplicate tensor", "d.weight");
    b.n = 0, header(&b, 1, 0), str(&b, "five.dims"), u32(&b, 5);
    for (int i = 0; i < 5; i++)
        u64(&b, 1);
    u32(&b, 0), u64(&b, 0), pad_data(&b, 32);
    expect_fail(&b, "n_dims is 5", "five.dims");
    b.n = 0;
    expect_fail(&b, "too short", NULL);
}

/* ---- writer -> reader round trip ---- */

static int fill_ramp(void *ctx, int index, int64_t row0, int64_t n_rows, void *dst, sol_err *e) {
    (void)ctx, (void)index, (void)e;
    float *f = dst;
    for (int64_t r = 0; r < n_rows; r++)
        for (int c = 0; c < 64; c++)
            f[r * 64 + c] = (float)((row0 + r) * 1000 + c);
    return 0;
}

static float g_f32[2 * 32];
static uint16_t g_f16[96];
static uint8_t g_q8[34 * 3], g_q4[18 * 2];

static gguf_writer *make_writer(void) {
    sol_err e = {0};
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(gguf_writer_add_u8(w, "t.u8", 200, &e), 0);
    assert_int_equal(gguf_writer_add_i8(w, "t.i8", -5, &e), 0);
    assert_int_equal(gguf_writer_add_u16(w, "t.u16", 60000, &e), 0);
    assert_int_equal(gguf_writer_add_i16(w, "t.i16", -30000, &e), 0);
    assert_int_equal(gguf_writer_add_u32(w, "t.u32", 4000000000u, &e), 0);
    assert_int_equal(gguf_writer_add_i32(w, "t.i32", -7, &e), 0);
    assert_int_equal(gguf_writer_add_u64(w, "t.u64", 1ull << 40, &e), 0);
    assert_int_equal(gguf_writer_add_i64(w, "t.i64", -(1ll << 40), &e), 0);
    assert_int_equal(gguf_writer_add_f32(w, "t.f32", 1.5f, &e), 0);
    assert_int_equal(gguf_writer_add_f64(w, "t.f64", 0.25, &e), 0);
    assert_int_equal(gguf_writer_add_bool(w, "t.bool", 1, &e), 0);
    assert_int_equal(gguf_writer_add_str(w, "general.name", "tést ▁model", &e), 0);
    const char *strs[] = {"<unk>", "", "▁the"};
    assert_int_equal(gguf_writer_add_str_arr(w, "t.strs", strs, 3, &e), 0);
    const int32_t ints[] = {1, -2, 3};
    assert_int_equal(gguf_writer_add_arr(w, "t.ints", GGUF_T_I32, ints, 3, &e), 0);
    bb nested = {0}; /* [[7, 8], []] as u16 arrays */
    u32(&nested, GGUF_T_ARR), u64(&nested, 2);
    u32(&nested, GGUF_T_U16), u64(&nested, 2), put(&nested, (uint16_t[]){7, 8}, 4);
    u32(&nested, GGUF_T_U16), u64(&nested, 0);
    assert_int_equal(gguf_writer_add_raw(w, "t.nested", GGUF_T_ARR, nested.p, nested.n, &e), 0);
    assert_int_equal(gguf_writer_add_u32(w, "t.u32", 1, &e), -EEXIST);

    for (int i = 0; i < 64; i++)
        g_f32[i] = (float)i * 0.5f;
    for (int i = 0; i < 96; i++)
        g_f16[i] = sol_f32_to_f16((float)i);
    for (size_t i = 0; i < sizeof g_q8; i++)
        g_q8[i] = (uint8_t)(i * 7);
    for (size_t i = 0; i < sizeof g_q4; i++)
        g_q4[i] = (uint8_t)(i * 13);
    assert_int_equal(
        gguf_writer_add_tensor(w, "a.f32", 2, (int64_t[]){32, 2}, SOL_DT_F32, g_f32, &e), 0);
    assert_int_equal(
        gguf_writer_add_tensor(w, "b.f16", 3, (int64_t[]){4, 8, 3}, SOL_DT_F16, g_f16, &e), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "c.q8", 1, (int64_t[]){96}, SOL_DT_Q8_0, g_q8, &e),
                     0);
    assert_int_equal(
        gguf_writer_add_tensor(w, "d.q4", 4, (int64_t[]){32, 1, 2, 1}, SOL_DT_Q4_0, g_q4, &e), 0);
    assert_int_equal(gguf_writer_add_tensor_fill(w, "e.fill", 2, (int64_t[]){64, 5}, SOL_DT_F32,
                                                 fill_ramp, NULL, &e),
                     0);
    assert_int_equal(gguf_writer_add_tensor(w, "bad", 1, (int64_t[]){33}, SOL_DT_Q4_0, g_q4, &e),
                     -EINVAL);
    assert_int_equal(gguf_writer_add_tensor(w, "a.f32", 1, (int64_t[]){1}, SOL_DT_F32, g_f32, &e),
                     -EEXIST);
    return w;
}

static void check_contents(const gguf_file *g) {
    sol_err e = {0};
    uint32_t u;
    int32_t i;
    uint64_t u64v;
    float f;
    int b;
    const char *s;
    const gguf_arr *a;
    assert_int_equal(gguf_version(g), 3);
    assert_int_equal(gguf_n_kv(g), 15);
    assert_int_equal(gguf_get_u32(g, "t.u8", &u, &e), 0), assert_int_equal(u, 200);
    assert_int_equal(gguf_get_i32(g, "t.i8", &i, &e), 0), assert_int_equal(i, -5);
    assert_int_equal(gguf_get_u32(g, "t.u16", &u, &e), 0), assert_int_equal(u, 60000);
    assert_int_equal(gguf_get_i32(g, "t.i16", &i, &e), 0), assert_int_equal(i, -30000);
    assert_int_equal(gguf_get_u32(g, "t.u32", &u, &e), 0), assert_int_equal(u, 4000000000u);
    assert_int_equal(gguf_get_i32(g, "t.u32", &i, &e), -EINVAL); /* does not fit */
    assert_non_null(strstr(e.msg, "does not fit i32"));
    assert_int_equal(gguf_get_u32(g, "t.i32", &u, &e), -EINVAL); /* negative */
    assert_int_equal(gguf_get_u64(g, "t.u64", &u64v, &e), 0), assert_true(u64v == 1ull << 40);
    assert_int_equal(gguf_get_kv(g, "t.i64")->i, -(1ll << 40));
    assert_int_equal(gguf_get_f32(g, "t.f32", &f, &e), 0), assert_true(f == 1.5f);
    assert_int_equal(gguf_get_f32(g, "t.f64", &f, &e), 0), assert_true(f == 0.25f);
    assert_int_equal(gguf_get_f32(g, "t.i32", &f, &e), 0), assert_true(f == -7.0f);
    assert_int_equal(gguf_get_bool(g, "t.bool", &b, &e), 0), assert_int_equal(b, 1);
    assert_int_equal(gguf_get_str(g, "general.name", &s, &e), 0);
    assert_string_equal(s, "tést ▁model");
    assert_int_equal(gguf_get_str(g, "t.u32", &s, &e), -EINVAL);
    assert_non_null(strstr(e.msg, ": key 't.u32': expected string, found u32"));
    assert_int_equal(gguf_get_u32(g, "nope", &u, &e), -ENOENT);
    assert_non_null(strstr(e.msg, "key 'nope' not found"));
    assert_int_equal(gguf_get_u32_def(g, "nope", 9, &u, &e), 0), assert_int_equal(u, 9);
    assert_int_equal(gguf_get_f32_def(g, "t.f32", 9, &f, &e), 0), assert_true(f == 1.5f);
    assert_int_equal(gguf_get_arr(g, "t.strs", GGUF_T_STR, &a, &e), 0);
    assert_int_equal(a->n, 3);
    assert_string_equal(a->strs[0], "<unk>"), assert_string_equal(a->strs[1], "");
    assert_string_equal(a->strs[2], "▁the"), assert_int_equal(a->lens[2], 6);
    assert_int_equal(gguf_get_arr(g, "t.strs", GGUF_T_I32, &a, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "expected an array of i32, found an array of string"));
    assert_int_equal(gguf_get_arr(g, "t.ints", GGUF_T_I32, &a, &e), 0);
    assert_int_equal(((const int32_t *)a->data)[1], -2);
    assert_int_equal(gguf_get_arr(g, "t.nested", -1, &a, &e), 0);
    assert_int_equal(a->type, GGUF_T_ARR), assert_int_equal(a->n, 2);
    assert_int_equal(a->arrs[0].n, 2), assert_int_equal(((const uint16_t *)a->arrs[0].data)[1], 8);
    assert_int_equal(a->arrs[1].n, 0);
    assert_int_equal(gguf_find_key(g, "t.bool"), 10);

    assert_int_equal(gguf_n_tensors(g), 5);
    const gguf_tensor *t = gguf_tensor_find(g, "a.f32");
    assert_non_null(t);
    assert_memory_equal(t->data, g_f32, sizeof g_f32);
    assert_int_equal((gguf_data_offset(g) + t->offset) % 32, 0);
    t = gguf_tensor_find(g, "b.f16");
    assert_int_equal(t->n_dims, 3), assert_int_equal(t->ne[2], 3), assert_int_equal(t->ne[3], 1);
    assert_memory_equal(t->data, g_f16, sizeof g_f16);
    assert_memory_equal(gguf_tensor_find(g, "c.q8")->data, g_q8, sizeof g_q8);
    t = gguf_tensor_find(g, "d.q4");
    assert_int_equal(t->type, SOL_DT_Q4_0), assert_int_equal(t->nbytes, 36);
    assert_memory_equal(t->data, g_q4, sizeof g_q4);
    t = gguf_tensor_find(g, "e.fill");
    assert_true(((const float *)t->data)[4 * 64 + 3] == 4003.0f);
    assert_null(gguf_tensor_find(g, "zzz"));
    assert_int_equal(gguf_expect_tensor(g, "e.fill", 2, 64, 5, &e), 0);
    assert_int_equal(gguf_expect_tensor(g, "e.fill", 2, 64, 6, &e), -EINVAL);
    assert_non_null(strstr(e.msg, ": tensor e.fill: expected shape [64, 6], found [64, 5]"));
    assert_int_equal(gguf_expect_tensor(g, "c.q8", 2, 96, 1, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "expected shape [96, 1], found [96]"));
    assert_int_equal(gguf_expect_tensor(g, "nope", 1, 1, 1, &e), -ENOENT);
    assert_int_equal(gguf_expect_type(g, "d.q4", GGUF_TYPE_BIT(SOL_DT_Q4_0), &e), 0);
    assert_int_equal(
        gguf_expect_type(g, "d.q4", GGUF_TYPE_BIT(SOL_DT_F32) | GGUF_TYPE_BIT(SOL_DT_F16), &e),
        -EINVAL);
    assert_non_null(strstr(e.msg, "tensor d.q4: expected type f32, f16, found q4_0"));
}

static void test_roundtrip(void **state) {
    (void)state;
    sol_err e = {0};
    gguf_writer *w = make_writer();
    void *mem;
    size_t len;
    assert_int_equal(gguf_writer_write_mem(w, &mem, &len, &e), 0);
    gguf_file *g = gguf_open_memory(mem, len, "mem.gguf", &e);
    if (!g) fail_msg("%s", e.msg);
    check_contents(g);
    gguf_close(g);

    char path[] = "/tmp/sol-test-gguf-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(gguf_writer_write_file(w, path, &e), 0);
    const int flags[] = {0, GGUF_OPEN_NO_MMAP, GGUF_OPEN_MLOCK};
    for (int k = 0; k < 3; k++) {
        g = gguf_open(path, flags[k], &e);
        if (!g) fail_msg("%s", e.msg);
        assert_int_equal(gguf_file_size(g), len);
        assert_int_equal((uintptr_t)gguf_tensor_at(g, 1)->data % 32, 0); /* mmap/heap keep it */
        check_contents(g);
        gguf_close(g);
    }
    unlink(path);
    assert_null(gguf_open(path, 0, &e));
    assert_non_null(strstr(e.msg, path));
    gguf_writer_free(w);
    free(mem);
}

static void test_alignment_key(void **state) {
    (void)state;
    sol_err e = {0};
    gguf_writer *w = gguf_writer_new();
    assert_int_equal(gguf_writer_set_alignment(w, 3, &e), -EINVAL);
    assert_int_equal(gguf_writer_set_alignment(w, 64, &e), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "x", 1, (int64_t[]){3}, SOL_DT_F32, g_f32, &e), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "y", 1, (int64_t[]){3}, SOL_DT_F32, g_f32, &e), 0);
    void *mem;
    size_t len;
    assert_int_equal(gguf_writer_write_mem(w, &mem, &len, &e), 0);
    gguf_file *g = gguf_open_memory(mem, len, "a.gguf", &e);
    assert_non_null(g);
    assert_int_equal(gguf_alignment(g), 64);
    assert_int_equal(gguf_tensor_find(g, "y")->offset, 64);
    assert_int_equal(gguf_data_offset(g) % 64, 0);
    gguf_close(g);
    gguf_writer_free(w);
    free(mem);
}

/* Every prefix shorter than the end of the last tensor must fail cleanly. */
static void test_truncation(void **state) {
    (void)state;
    sol_err e = {0};
    gguf_writer *w = make_writer();
    void *mem;
    size_t len;
    assert_int_equal(gguf_writer_write_mem(w, &mem, &len, &e), 0);
    gguf_file *full = gguf_open_memory(mem, len, "full.gguf", &e);
    assert_non_null(full);
    uint64_t end = 0;
    for (int i = 0; i < gguf_n_tensors(full); i++) {
        const gguf_tensor *t = gguf_tensor_at(full, i);
        uint64_t te = gguf_data_offset(full) + t->offset + t->nbytes;
        if (te > end) end = te;
    }
    gguf_close(full);
    for (size_t n = 0; n < len; n++) {
        int ok = opens(mem, n, &e);
        if (n < end && ok) fail_msg("prefix of %zu bytes (of %zu) was accepted", n, len);
        if (n < end) assert_int_equal(strncmp(e.msg, "bad.gguf: ", 10), 0);
        if (n >= end && !ok) fail_msg("prefix of %zu bytes (end %" PRIu64 "): %s", n, end, e.msg);
    }
    gguf_writer_free(w);
    free(mem);
}

/* sol-mkmodel writes the llama metadata and ggml tensor shapes llama.cpp expects. */
static void test_mkmodel_output(void **state) {
    (void)state;
    const char *bin = SOL_BUILD_DIR "/tools/sol-mkmodel";
    if (access(bin, X_OK) != 0) skip(); /* built with the tools target */
    char path[] = "/tmp/sol-test-mkmodel-XXXXXX", cmd[512];
    int fd = mkstemp(path);
    close(fd);
    snprintf(cmd, sizeof cmd, "%s -o %s --vocab 1001 --type q8_0 --layers 3 2>/dev/null", bin,
             path);
    assert_int_equal(system(cmd), 0);
    sol_err e = {0};
    gguf_file *g = gguf_open(path, 0, &e);
    if (!g) fail_msg("%s", e.msg);
    const char *s;
    uint32_t u;
    float f;
    const gguf_arr *a;
    assert_int_equal(gguf_get_str(g, "general.architecture", &s, &e), 0);
    assert_string_equal(s, "llama");
    assert_int_equal(gguf_get_u32(g, "llama.block_count", &u, &e), 0), assert_int_equal(u, 3);
    assert_int_equal(gguf_get_u32(g, "llama.rope.dimension_count", &u, &e), 0);
    assert_int_equal(u, 16);
    assert_int_equal(gguf_get_u32(g, "general.file_type", &u, &e), 0), assert_int_equal(u, 7);
    assert_int_equal(gguf_get_f32(g, "llama.rope.freq_base", &f, &e), 0);
    assert_true(f == 10000.0f);
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_T_STR, &a, &e), 0);
    assert_int_equal(a->n, 1001);
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.scores", GGUF_T_F32, &a, &e), 0);
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_T_I32, &a, &e), 0);
    assert_int_equal(gguf_get_str(g, "tokenizer.chat_template", &s, &e), 0);
    assert_int_equal(gguf_expect_tensor(g, "token_embd.weight", 2, 64, 1001, &e), 0);
    assert_int_equal(gguf_expect_tensor(g, "output.weight", 2, 64, 1001, &e), 0);
    assert_int_equal(gguf_expect_tensor(g, "blk.2.attn_k.weight", 2, 64, 32, &e), 0);
    assert_int_equal(gguf_expect_tensor(g, "blk.2.ffn_down.weight", 2, 192, 64, &e), 0);
    assert_int_equal(gguf_expect_tensor(g, "blk.0.ffn_norm.weight", 1, 64, 1, &e), 0);
    assert_int_equal(gguf_expect_type(g, "blk.0.ffn_norm.weight", GGUF_TYPE_BIT(SOL_DT_F32), &e),
                     0);
    assert_int_equal(gguf_expect_type(g, "blk.1.attn_q.weight", GGUF_TYPE_BIT(SOL_DT_Q8_0), &e), 0);
    /* weights have a real, zero-centred spread */
    const gguf_tensor *t = gguf_tensor_find(g, "blk.1.ffn_up.weight");
    float row[64], sum = 0, sq = 0;
    for (int r = 0; r < 192; r++) {
        sol_dequantize_row(t->type, (const uint8_t *)t->data + r * sol_dtype_row_bytes(t->type, 64),
                           row, 64);
        for (int c = 0; c < 64; c++)
            sum += row[c], sq += row[c] * row[c];
    }
    float mean = sum / (192 * 64), sd = sqrtf(sq / (192 * 64) - mean * mean);
    assert_true(fabsf(mean) < 0.01f);
    assert_true(sd > 0.1f && sd < 0.15f); /* 1/sqrt(64) = 0.125 */
    gguf_close(g);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corrupt_table),  cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_alignment_key),  cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_mkmodel_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
