/* Promise: quantizer blocks match ggml's layouts byte for byte, the mixed-precision policy and
 * --keep rules pick the documented types, and metadata copies exactly. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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

/* The K mixes: llama.cpp's type choices for q4_k_m / q5_k_m, and their fallbacks. */
static void test_k_mix_policy(void **state) {
    (void)state;
    sol_err e = {0};
    quant_policy p;
    assert_int_equal(quant_policy_parse(&p, "q4_k_s", &e), -EINVAL);
    assert_non_null(strstr(e.msg, "q4_0, q8_0, q4_k_m, q5_k_m, q6_k or mxfp4_moe"));
    assert_int_equal(quant_policy_parse(&p, "q4_k_m", &e), 0);
    assert_int_equal(p.base, SOL_DT_Q4_K);
    assert_int_equal(p.file_type, 15u);
    p.n_layers = 16; /* more bits: layers 0-1, 14-15, and 4, 7, 10, 13 */
    const int more[] = {0, 1, 4, 7, 10, 13, 14, 15};
    for (int l = 0; l < 16; l++) {
        char name[64];
        int m = 0;
        for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
            m |= more[i] == l;
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
        gguf_tensor t = tensor(name, 2, 512, 128);
        assert_int_equal(quant_choose(&p, &t), m ? SOL_DT_Q6_K : SOL_DT_Q4_K);
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
        t = tensor(name, 2, 512, 128);
        assert_int_equal(quant_choose(&p, &t), m ? SOL_DT_Q6_K : SOL_DT_Q4_K);
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
        t = tensor(name, 2, 512, 512);
        assert_int_equal(quant_choose(&p, &t), SOL_DT_Q4_K);
    }
    gguf_tensor t = tensor("output.weight", 2, 512, 1000);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q6_K);
    t = tensor("token_embd.weight", 2, 512, 1000);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q4_K);
    p.tied = 1; /* the embeddings are also the head */
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q6_K);
    t = tensor("blk.3.ffn_up.weight", 2, 96, 64); /* 96 % 256 != 0: q8_0 */
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q8_0);
    assert_int_equal(quant_policy_parse(&p, "q5_k_m", &e), 0);
    assert_int_equal(p.base, SOL_DT_Q5_K);
    assert_int_equal(p.file_type, 17u);
    assert_int_equal(quant_policy_parse(&p, "q6_k", &e), 0);
    t = tensor("blk.0.attn_q.weight", 2, 512, 512);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q6_K);
    assert_int_equal(p.file_type, 18u);
}

/* Mixtures of experts: the router stays F32 under every policy; the K mixes give ffn_down_exps
 * the more-bits layers' Q6_K and an 8-expert model Q8_0 attn_k/attn_v and (Q4_K_M) Q5_K
 * attn_output, as llama.cpp; mxfp4_moe gives the 3-D experts MXFP4 and the rest Q8_0. */
static void test_expert_policies(void **state) {
    (void)state;
    sol_err e = {0};
    quant_policy p;
    assert_int_equal(quant_policy_parse(&p, "q4_k_m", &e), 0);
    p.n_layers = 2, p.n_expert = 8;
    gguf_tensor t = tensor("blk.1.ffn_gate_inp.weight", 2, 512, 8);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_F32);
    t = tensor("blk.1.ffn_down_exps.weight", 3, 512, 512);
    t.ne[2] = 8;
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q6_K); /* layer 1 of 2: more bits */
    t.name = "blk.0.ffn_down_exps.weight";
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q4_K);
    t = tensor("blk.0.attn_k.weight", 2, 512, 128);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q8_0);
    t = tensor("blk.0.attn_output.weight", 2, 512, 512);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q5_K);
    p.n_expert = 16; /* the 8-expert rules only */
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q4_K);
    assert_int_equal(quant_policy_parse(&p, "mxfp4_moe", &e), 0);
    assert_int_equal(p.file_type, 38u);
    t = tensor("blk.0.ffn_up_exps.weight", 3, 512, 256);
    t.ne[2] = 16;
    assert_int_equal(quant_choose(&p, &t), SOL_DT_MXFP4);
    t = tensor("blk.0.attn_q.weight", 2, 512, 512);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q8_0);
    t = tensor("output.weight", 2, 512, 1000);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_Q8_0);
    t = tensor("blk.0.ffn_gate_inp.weight", 2, 512, 16);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_F32);
    /* gpt-oss's expert biases are 2-D: a bias stays F32 (llama.cpp quantizes *weight only) */
    t = tensor("blk.0.ffn_gate_exps.bias", 2, 512, 16);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_F32);
    t = tensor("blk.0.ffn_down_exps.bias", 2, 512, 16);
    assert_int_equal(quant_choose(&p, &t), SOL_DT_F32);
}

/* Sol's K-quant writers: the blocks decode to the input within each type's precision, for
 * large and tiny magnitudes (fp16 subnormal super-block scales) and for constant rows. */
static void test_kquant_writers(void **state) {
    (void)state;
    const sol_dtype types[3] = {SOL_DT_Q4_K, SOL_DT_Q5_K, SOL_DT_Q6_K};
    const double limit[3] = {0.08, 0.04, 0.025}; /* relative RMS error */
    float x[512], y[512];
    uint8_t buf[512];
    for (int ti = 0; ti < 3; ti++)
        for (int mag = 0; mag < 2; mag++) {
            float scale = mag ? 1e-3f : 2.0f;
            for (int i = 0; i < 512; i++)
                x[i] = scale * (sinf((float)i * 1.7f) + 0.3f * cosf((float)i * 0.31f));
            assert_int_equal(sol_quantize_row(types[ti], x, buf, 512), 0);
            sol_dequantize_row(types[ti], buf, y, 512);
            double err = 0, norm = 0;
            for (int i = 0; i < 512; i++)
                err += (double)(x[i] - y[i]) * (x[i] - y[i]), norm += (double)x[i] * x[i];
            if (!(sqrt(err / norm) < limit[ti]))
                fail_msg("%s scale %g: relative error %g", sol_dtype_name(types[ti]), scale,
                         sqrt(err / norm));
        }
    for (int i = 0; i < 256; i++)
        x[i] = 0.5f; /* a constant row needs the min (Q4_K) or the scale alone (Q6_K) */
    for (int ti = 0; ti < 3; ti++) {
        assert_int_equal(sol_quantize_row(types[ti], x, buf, 256), 0);
        sol_dequantize_row(types[ti], buf, y, 256);
        for (int i = 0; i < 256; i++)
            assert_true(fabsf(y[i] - 0.5f) < 0.02f);
    }
    assert_int_equal(sol_quantize_row(SOL_DT_Q4_K, x, buf, 100), -EINVAL); /* not whole blocks */
}

static void test_convert_and_copy(void **state) {
    (void)state;
    sol_err e = {0};
    enum { NE0 = 64, ROWS = 3 };
    uint16_t src[NE0 * ROWS];
    for (int i = 0; i < NE0 * ROWS; i++)
        src[i] = sol_f32_to_f16(sinf((float)i) * 0.1f);
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
        cmocka_unit_test(test_known_blocks),   cmocka_unit_test(test_policy),
        cmocka_unit_test(test_k_mix_policy),   cmocka_unit_test(test_expert_policies),
        cmocka_unit_test(test_kquant_writers), cmocka_unit_test(test_convert_and_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
