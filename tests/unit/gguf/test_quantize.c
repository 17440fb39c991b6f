/* Promise: quantizer blocks match ggml's layouts byte for byte, the mixed-precision policy and
 * --keep rules pick the documented types, and metadata copies exactly. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gguf.h"
#include "gguf_writer.h"
#include "quantize.h"

static void test_known_blocks(void **state) {
    (void)state;
    float x[32], back[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16) * 0.5f; /* -8 .. 7.5 */
    sol_block_q4_0 b4;
    assert_int_equal(sol_quantize_row(SOL_DT_Q4_0, x, &b4, 32), 0);
    assert_int_equal(b4.d, 0x3C00);       /* d = max / -8 = 1.0 */
    assert_int_equal(b4.qs[0], 0x80);     /* x0 = -8 -> 0, x16 = 0 -> 8 */
    assert_int_equal(b4.qs[15] >> 4, 15); /* x31 = 7.5 -> 16, clamped to 15 */
    sol_dequantize_row(SOL_DT_Q4_0, &b4, back, 32);
    for (int j = 0; j < 32; j++)
        assert_true(fabsf(back[j] - x[j]) <= 0.5f + 1e-6f);
    sol_block_q8_0 b8;
    assert_int_equal(sol_quantize_row(SOL_DT_Q8_0, x, &b8, 32), 0);
    assert_int_equal(b8.qs[0], -127);
    assert_int_equal(b8.qs[16], 0);
    sol_dequantize_row(SOL_DT_Q8_0, &b8, back, 32);
    for (int j = 0; j < 32; j++)
        assert_true(fabsf(back[j] - x[j]) <= 8.0f / 127 / 2 + 1e-3f);
}

static gguf_tensor tensor(const char *name, int n_dims, int64_t ne0, int64_t ne1) {
    gguf_tensor t = {0};
    t.name = name;
    t.n_dims = (uint32_t)n_dims;
    t.ne[0] = ne0, t.ne[1] = ne1, t.ne[2] = t.ne[3] = 1;
    t.type = SOL_DT_F16;
    return t;
}

static void test_policy(void **state) {
    (void)state;
    sol_err e = {0};
    quant_policy p;
    assert_int_equal(quant_policy_init(&p, SOL_DT_F16, &e), -EINVAL);
    assert_int_equal(quant_policy_init(&p, SOL_DT_Q4_0, &e), 0);
    assert_int_equal(quant_policy_add_keep(&p, "attn_output=q8_0", &e), 0);
    assert_int_equal(quant_policy_add_keep(&p, "blk.1?.ffn_down*=f16", &e), 0);
    assert_int_equal(quant_policy_add_keep(&p, "ffn=q5_1", &e), -EINVAL);
    assert_int_equal(quant_policy_add_keep(&p, "=q8_0", &e), -EINVAL);
    gguf_tensor t = tensor("token_embd.weight", 2, 64, 512);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q8_0);
    t = tensor("output.weight", 2, 64, 512);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q8_0);
    t = tensor("blk.0.attn_norm.weight", 1, 64, 1);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_F32);
    t = tensor("blk.3.attn_q.weight", 2, 64, 64);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q4_0);
    t = tensor("blk.3.attn_output.weight", 2, 64, 64);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q8_0);
    t = tensor("blk.12.ffn_down.weight", 2, 64, 64);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_F16);
    t = tensor("blk.2.ffn_down.weight", 2, 64, 64);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q4_0); /* glob is anchored: no match */
    t = tensor("blk.2.ffn_up.weight", 2, 48, 64);        /* 48 % 32 != 0 */
    assert_int_equal(quant_choose(&p, &t), SOL_DT_F16);
    assert_int_equal(p.keep[0].hits, 1);
    assert_int_equal(p.keep[1].hits, 1);
    p.mixed = 0;
    t = tensor("output.weight", 2, 64, 512);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q4_0);
    assert_int_equal(quant_file_type(SOL_DT_Q4_0), 2u);
    assert_int_equal(quant_file_type(SOL_DT_Q8_0), 7u);
}

static void test_convert_and_copy(void **state) {
    (void)state;
    sol_err e = {0};
    enum { NE0 = 64, ROWS = 3 };
    uint16_t src[NE0 * ROWS];
    for (int i = 0; i < NE0 * ROWS; i++)
        src[i] = sol_fp32_to_fp16(sinf((float)i) * 0.1f);
    gguf_tensor t = tensor("w", 2, NE0, ROWS);
    t.data = src;
    sol_block_q8_0 out[2 * ROWS];
    float tmp[2 * NE0];
    double sq = 0;
    assert_int_equal(quant_convert_rows(&t, SOL_DT_Q8_0, 0, ROWS, out, tmp, &sq, &e), 0);
    double rmse = sqrt(sq / (NE0 * ROWS));
    assert_true(rmse > 0 && rmse < 0.1 / 127);
    /* metadata survives a copy, strings with inner bytes and arrays included */
    gguf_writer *w = gguf_writer_new();
    const char *strs[] = {"a", "bc"};
    int32_t nums[] = {1, -2, 3};
    assert_int_equal(gguf_writer_add_str(w, "s", "hello", &e), 0);
    assert_int_equal(gguf_writer_add_str_arr(w, "sa", strs, 2, &e), 0);
    assert_int_equal(gguf_writer_add_arr(w, "na", GGUF_T_I32, nums, 3, &e), 0);
    assert_int_equal(gguf_writer_add_f32(w, "f", 0.25f, &e), 0);
    void *buf;
    size_t len;
    assert_int_equal(gguf_writer_write_mem(w, &buf, &len, &e), 0);
    gguf_writer_free(w);
    gguf_file *g = gguf_open_memory(buf, len, "a.gguf", &e);
    assert_non_null(g);
    w = gguf_writer_new();
    for (int i = 0; i < gguf_n_kv(g); i++)
        assert_int_equal(quant_copy_kv(w, gguf_kv_at(g, i), &e), 0);
    void *buf2;
    size_t len2;
    assert_int_equal(gguf_writer_write_mem(w, &buf2, &len2, &e), 0);
    assert_int_equal(len, len2);
    assert_memory_equal(buf, buf2, len);
    gguf_writer_free(w);
    gguf_close(g);
    free(buf);
    free(buf2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_blocks),
        cmocka_unit_test(test_policy),
        cmocka_unit_test(test_convert_and_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
