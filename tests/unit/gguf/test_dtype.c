/* Promise: fp16/bf16 conversions round to nearest even and quantizers match ggml's reference bits.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "dtype.h"
#include "hash.h"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_fp16_known(void **state) {
    (void)state;
    assert_int_equal(sol_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(sol_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(sol_f32_to_f16(0.1f), 0x2e66);
    assert_int_equal(sol_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(sol_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(sol_f32_to_f16(65520.0f), 0x7c00); /* halfway, odd mantissa: up to inf */
    assert_int_equal(sol_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(sol_f32_to_f16(-INFINITY), 0xfc00);
    uint16_t n = sol_f32_to_f16(NAN);
    assert_true((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0);
    assert_int_equal(sol_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(sol_f32_to_f16(ldexpf(1, -14)), 0x0400);        /* smallest normal */
    assert_int_equal(sol_f32_to_f16(ldexpf(1, -24)), 0x0001);        /* smallest subnormal */
    assert_int_equal(sol_f32_to_f16(ldexpf(1, -25)), 0x0000);        /* tie to even: zero */
    assert_int_equal(sol_f32_to_f16(ldexpf(3, -25)), 0x0002);        /* 1.5 ulp ties to 2 */
    assert_int_equal(sol_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00); /* tie, even stays */
    assert_int_equal(sol_f32_to_f16(1.0f + ldexpf(3, -11)), 0x3c02); /* tie, odd rounds up */
    assert_int_equal(sol_f32_to_f16(ldexpf(1023, -24) + ldexpf(1, -25)), 0x0400); /* carry */
    assert_true(sol_f16_to_f32(0x0001) == ldexpf(1, -24));
    assert_true(sol_f16_to_f32(0x7bff) == 65504.0f);
    assert_true(isinf(sol_f16_to_f32(0xfc00)) && sol_f16_to_f32(0xfc00) < 0);
    assert_true(isnan(sol_f16_to_f32(0x7e00)));
}

static void test_fp16_roundtrip_all(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN payloads are not kept */
        assert_int_equal(sol_f32_to_f16(sol_f16_to_f32((uint16_t)h)), h);
    }
}

static void test_bf16(void **state) {
    (void)state;
    assert_int_equal(sol_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(sol_f32_to_bf16(from_bits(0x3f808000)), 0x3f80); /* tie, even */
    assert_int_equal(sol_f32_to_bf16(from_bits(0x3f818000)), 0x3f82); /* tie, odd up */
    assert_int_equal(sol_f32_to_bf16(from_bits(0x3f808001)), 0x3f81);
    assert_true(isnan(sol_bf16_to_f32(sol_f32_to_bf16(from_bits(0x7f800001)))));
    assert_int_equal(sol_f32_to_bf16(INFINITY), 0x7f80);
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) continue;
        assert_int_equal(sol_f32_to_bf16(sol_bf16_to_f32((uint16_t)h)), h);
    }
}

/* Q5_0 / Q5_1 / Q5_K blocks written by hand: the fifth bit comes from qh as ggml lays it out. */
static void test_q5_known(void **state) {
    (void)state;
    sol_block_q5_0 b0 = {.d = 0x3C00 /* 1.0 */, .qh = {0x01, 0x00, 0x01, 0x80}};
    for (int j = 0; j < 16; j++)
        b0.qs[j] = (uint8_t)(j | (15 - j) << 4);
    float y[32];
    sol_dequantize_row(SOL_DT_Q5_0, &b0, y, 32);
    /* element j < 16: low nibble j, high bit = bit j of qh; element j + 16: high nibble, bit j+16
     */
    assert_true(y[0] == 0 + 16 - 16 && y[1] == 1 - 16 && y[15] == 15 - 16);
    assert_true(y[16] == 15 + 16 - 16 && y[17] == 14 - 16 && y[31] == 0 + 16 - 16);
    sol_block_q5_1 b1 = {.d = 0x4000 /* 2.0 */, .m = 0xBC00 /* -1.0 */, .qh = {0x02}};
    b1.qs[1] = 0x03;
    sol_dequantize_row(SOL_DT_Q5_1, &b1, y, 32);
    assert_true(y[0] == -1.0f && y[1] == 2.0f * (3 + 16) - 1.0f && y[17] == -1.0f);
    sol_block_q5_k k = {.d = 0x3C00, .dmin = 0x3C00};
    k.scales[0] = 2; /* sub-block 0: scale 2 */
    k.scales[4] = 1; /* sub-block 0: min 1 */
    k.scales[1] = 3; /* sub-block 1: scale 3, min 0 */
    k.qs[0] = 0x45;  /* element 0: 5, element 32: 4 */
    k.qh[0] = 0x03;  /* bits 0 and 1: +16 for elements 0 and 32 */
    float z[256];
    sol_dequantize_row(SOL_DT_Q5_K, &k, z, 256);
    assert_true(z[0] == 2.0f * 21 - 1.0f && z[32] == 3.0f * 20 && z[1] == -1.0f && z[64] == 0.0f);
}

static void test_type_table(void **state) {
    (void)state;
    assert_int_equal(sol_dtype_row_bytes(SOL_DT_Q4_0, 64), 36);
    assert_int_equal(sol_dtype_row_bytes(SOL_DT_Q4_0, 48), 0);
    assert_int_equal(sol_dtype_row_bytes(SOL_DT_Q6_K, 512), 420);
    assert_int_equal(sol_dtype_row_bytes(SOL_DT_BF16, 3), 6);
    assert_int_equal(sol_dtype_parse("Q8_0"), SOL_DT_Q8_0);
    assert_int_equal(sol_dtype_parse("q5_1"), SOL_DT_Q5_1);
    assert_int_equal(sol_dtype_parse("q4_1"), -1); /* not supported: ggml type 3 */
    assert_int_equal(sol_dtype_row_bytes(SOL_DT_Q5_0, 64), 44);
    assert_int_equal(sol_dtype_row_bytes(SOL_DT_Q5_1, 32), 24);
    assert_int_equal(sol_dtype_row_bytes(SOL_DT_Q5_K, 512), 352);
    assert_string_equal(sol_dtype_name(SOL_DT_BF16), "bf16");
    assert_false(sol_dtype_known(3));
    assert_true(sol_dtype_known(30));
    float x[32] = {0};
    sol_block_q4_k k;
    assert_int_equal(sol_quantize_row(SOL_DT_Q5_0, x, &k, 32), -EINVAL); /* no Q5_0 writer */
    assert_int_equal(sol_quantize_row(SOL_DT_Q4_K, x, &k, 32), -EINVAL); /* not whole blocks */
    assert_int_equal(sol_quantize_row(SOL_DT_Q8_0, x, &k, 16), -EINVAL);
}

static void test_q8_0_known(void **state) {
    (void)state;
    float x[32], y[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16);
    sol_block_q8_0 b;
    assert_int_equal(sol_quantize_row(SOL_DT_Q8_0, x, &b, 32), 0);
    assert_int_equal(b.d, sol_f32_to_f16(16.0f / 127));
    assert_int_equal(b.qs[0], -127);
    assert_int_equal(b.qs[17], 8);   /* 1 * 127/16 = 7.94 */
    assert_int_equal(b.qs[31], 119); /* 15 * 127/16 = 119.06 */
    sol_dequantize_row(SOL_DT_Q8_0, &b, y, 32);
    assert_true(y[17] == 8 * sol_f16_to_f32(b.d));
}

static void test_q4_0_known(void **state) {
    (void)state;
    float x[32], y[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 8); /* -8..23: largest magnitude is +23 */
    sol_block_q4_0 b;
    assert_int_equal(sol_quantize_row(SOL_DT_Q4_0, x, &b, 32), 0);
    assert_int_equal(b.d, sol_f32_to_f16(-23.0f / 8));
    assert_int_equal(b.qs[15] >> 4, 0);  /* x = 23 maps to -8 */
    assert_int_equal(b.qs[0] & 0xf, 11); /* x = -8: -8 / -2.875 + 8.5 = 11.28 */
    assert_int_equal(b.qs[8] & 0xf, 8);  /* x = 0 */
    sol_dequantize_row(SOL_DT_Q4_0, &b, y, 32);
    assert_true(y[31] == 23.0f);
    /* Negative extreme: d > 0, and the far positive side clamps at 15. */
    for (int j = 0; j < 32; j++)
        x[j] = (float)(8 - j); /* extreme is -23 */
    x[0] = 22.9f;              /* 22.9 / 2.875 + 8.5 = 16.47 */
    assert_int_equal(sol_quantize_row(SOL_DT_Q4_0, x, &b, 32), 0);
    assert_true(sol_f16_to_f32(b.d) > 0);
    assert_int_equal(b.qs[0] & 0xf, 15);
}

static uint64_t rng(uint64_t *s) {
    uint64_t x = sol_splitmix64(*s);
    *s += SOL_GOLDEN64;
    return x;
}

static void test_roundtrip_bounds(void **state) {
    (void)state;
    enum { N = 256 };
    float x[N], y[N];
    uint8_t buf[N * 4];
    uint64_t s = 7;
    for (int i = 0; i < N; i++)
        x[i] = ((float)(rng(&s) >> 40) / (float)(1 << 24) - 0.5f) * 6.0f;
    const sol_dtype types[] = {SOL_DT_F32, SOL_DT_F16, SOL_DT_BF16, SOL_DT_Q8_0, SOL_DT_Q4_0};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        assert_int_equal(sol_quantize_row(types[t], x, buf, N), 0);
        sol_dequantize_row(types[t], buf, y, N);
        for (int i = 0; i < N; i++) {
            float amax = 0;
            for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++)
                amax = fmaxf(amax, fabsf(x[j]));
            float err = fabsf(x[i] - y[i]), bound;
            switch (types[t]) {
            case SOL_DT_F32:
                bound = 0;
                break;
            case SOL_DT_F16:
                bound = fabsf(x[i]) * 0x1p-11f + 0x1p-24f;
                break;
            case SOL_DT_BF16:
                bound = fabsf(x[i]) * 0x1p-8f;
                break;
            case SOL_DT_Q8_0:
                bound = amax / 127 * 0.51f + amax * 1e-3f;
                break;
            default:
                bound = amax / 8 * 1.01f;
                break; /* clamp at 15 can cost a full step */
            }
            assert_true(err <= bound);
        }
    }
}

static void test_q4_k_q6_k_known(void **state) {
    (void)state;
    sol_block_q4_k k;
    memset(&k, 0, sizeof k);
    k.d = sol_f32_to_f16(1.0f);
    k.dmin = sol_f32_to_f16(0.5f);
    k.scales[0] = 2 | (1 << 6); /* sub-block 0 scale 2; its top bits feed sub-block 4's scale */
    k.scales[4] = 1;            /* sub-block 0 min 1 */
    k.scales[1] = 3;
    k.scales[5] = 2;
    k.scales[8] = 0x21; /* sub-block 4: scale low 1 (+16 from scales[0]), min 2 */
    k.qs[0] = 0x53;
    k.qs[64] = 0x07;
    float y[256];
    sol_dequantize_row(SOL_DT_Q4_K, &k, y, 256);
    assert_true(y[0] == 2 * 3 - 0.5f);
    assert_true(y[32] == 3 * 5 - 1.0f);
    assert_true(y[1] == -0.5f);
    assert_true(y[128] == 17 * 7 - 1.0f);

    sol_block_q6_k q;
    memset(&q, 0, sizeof q);
    q.d = sol_f32_to_f16(0.5f);
    q.ql[0] = 0x21;
    q.ql[32] = 0x05;
    q.qh[0] = 0xe4; /* 2-bit highs 0, 1, 2, 3 for the four quarter-blocks */
    q.scales[0] = 2;
    q.scales[2] = 4;
    q.scales[4] = -3;
    q.scales[6] = 1;
    q.scales[8] = 1;
    sol_dequantize_row(SOL_DT_Q6_K, &q, y, 256);
    assert_true(y[0] == 0.5f * 2 * -31);
    assert_true(y[32] == 0.5f * 4 * -11);
    assert_true(y[64] == 0.5f * -3 * 2);
    assert_true(y[96] == 0.5f * 1 * 16);
    assert_true(y[128] == 0.5f * 1 * -32);
}

/* MXFP4: id 39, 17-byte blocks of 32; the E8M0 scale halved; a block whose largest magnitude
 * is 6 gets exponent floor(log2 6) - 2 + 127 = 127 (scale 1/2 on the doubled values), each
 * element its nearest value (a tie goes to the first index, as ggml's reference). */
static void test_mxfp4_known(void **state) {
    (void)state;
    assert_int_equal(SOL_DT_MXFP4, 39);
    assert_int_equal(sol_dtype_row_bytes(SOL_DT_MXFP4, 64), 34);
    assert_int_equal(sol_dtype_parse("mxfp4"), SOL_DT_MXFP4);
    assert_true(sol_e8m0_half(127) == 0.5f && sol_e8m0_half(130) == 4.0f);
    assert_true(sol_e8m0_half(0) == ldexpf(1.0f, -128) && sol_e8m0_half(1) == ldexpf(1.0f, -127));
    float x[32] = {0}, y[32];
    x[0] = 6.0f, x[1] = -0.5f, x[2] = 1.25f, x[16] = -3.0f, x[17] = 2.2f;
    sol_block_mxfp4 b;
    assert_int_equal(sol_quantize_row(SOL_DT_MXFP4, x, &b, 32), 0);
    assert_int_equal(b.e, 127);
    sol_dequantize_row(SOL_DT_MXFP4, &b, y, 32);
    /* 1.25 lies between 1 and 1.5: equally far, the first (1) wins; 2.2 rounds to 2 */
    const float want[6] = {6.0f, -0.5f, 1.0f, -3.0f, 2.0f, 0.0f};
    const int at[6] = {0, 1, 2, 16, 17, 5};
    for (int i = 0; i < 6; i++)
        assert_true(y[at[i]] == want[i]);
    /* all zero: exponent 0, every value 0 */
    memset(x, 0, sizeof x);
    assert_int_equal(sol_quantize_row(SOL_DT_MXFP4, x, &b, 32), 0);
    assert_int_equal(b.e, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_known),
        cmocka_unit_test(test_fp16_roundtrip_all),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_q5_known),
        cmocka_unit_test(test_q8_0_known),
        cmocka_unit_test(test_q4_0_known),
        cmocka_unit_test(test_roundtrip_bounds),
        cmocka_unit_test(test_q4_k_q6_k_known),
        cmocka_unit_test(test_mxfp4_known),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
