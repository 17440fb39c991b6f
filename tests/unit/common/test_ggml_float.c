/* Promise: ggml_float.h's one-lane expf and lane sums give, bit for bit, what llama.cpp's x86
 * registers give: the 8-lane (AVX2 build) and 16-lane (AVX-512 build) vectorized expf over the
 * whole range (its second path past |n| > 126, the flush past 192), and the register sums. The
 * references below are the instruction sequences run on this CPU (the AVX-512 half where the CPU
 * has it; every CI host has AVX2). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include <immintrin.h>

#include "ggml_float.h"

#define AVX2 __attribute__((target("avx2,fma")))
#define AVX512 __attribute__((target("avx512f,avx512dq")))

/* The AVX2 build's expf: k = 2^n from the exponent bits, k + k * j, the scaled path past 126. */
static AVX2 __m256 ref_expf8(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f), ab = _mm256_set1_ps(-0.0f);
    __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r), n = _mm256_sub_ps(z, r);
    __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_set1_epi32(0x3f800000)));
    __m256 an = _mm256_andnot_ps(ab, n), u = _mm256_mul_ps(b, b);
    __m256 p = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f)));
    __m256 j = _mm256_fmadd_ps(p, u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
    __m256 fast = _mm256_fmadd_ps(k, j, k);
    __m256 c = _mm256_cmp_ps(an, _mm256_set1_ps(126), _CMP_GT_OQ);
    __m256 d = _mm256_cmp_ps(an, _mm256_set1_ps(192), _CMP_GT_OQ);
    __m256i g =
        _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                         _mm256_set1_epi32((int)0x82000000u));
    __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    __m256 slow = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
    return _mm256_blendv_ps(_mm256_blendv_ps(fast, slow, c), _mm256_mul_ps(s1, s1), d);
}

/* The AVX-512 build's expf: the 1 inside the polynomial, vscalefps by n, 0 or inf past 192. */
static AVX512 __m512 ref_expf16(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r), n = _mm512_sub_ps(z, r);
    __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    __m512 u = _mm512_mul_ps(b, b);
    __m512 p = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f)));
    __m512 j = _mm512_fmadd_ps(
        p, u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1)));
    __m512 res = _mm512_scalef_ps(j, n);
    __mmask16 far = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
    __mmask16 neg = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
    __m512 flush = _mm512_mask_blend_ps(neg, _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
    return _mm512_mask_blend_ps(far, res, flush);
}

static AVX2 float ref_hsum8(__m256 v) { /* hsum(__m256): halves, then movehl, then movehdup */
    __m128 h = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

static AVX2 float ref_reduce8(__m256 v) { /* GGML_F32x8_REDUCE's tail: halves, two hadds */
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    t = _mm_hadd_ps(t, t);
    return _mm_cvtss_f32(_mm_hadd_ps(t, t));
}

static AVX512 float ref_reduce16(__m512 v) {
    return _mm512_reduce_add_ps(v);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float uniform(float lo, float hi) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)(rng_state >> 40) / (float)(1 << 24);
}

/* Inputs over softmax's and SiLU's range, and past both of the AVX2 build's thresholds. */
static void inputs(float *x, int n, int round) {
    float lo = round % 3 == 0 ? -200.0f : -30.0f, hi = round % 3 == 0 ? 100.0f : 12.0f;
    for (int i = 0; i < n; i++)
        x[i] = uniform(lo, hi);
}

static AVX2 void check_expf8(int rounds) {
    long bad = 0, slow = 0;
    for (int it = 0; it < rounds; it++) {
        float x[8], want[8];
        inputs(x, 8, it);
        _mm256_storeu_ps(want, ref_expf8(_mm256_loadu_ps(x)));
        for (int l = 0; l < 8; l++) {
            float got = sol_ggml_expf(x[l], SOL_GGML_AVX2);
            bad += memcmp(&got, &want[l], sizeof got) != 0;
            slow += x[l] < -87.5f || x[l] > 87.5f;
        }
    }
    if (bad)
        fail_msg("8-lane expf: %ld of %d lanes differ from the AVX2 sequence", bad, 8 * rounds);
    assert_true(slow > 1000); /* the second path was exercised */
}

static AVX512 void check_expf16(int rounds) {
    long bad = 0;
    for (int it = 0; it < rounds; it++) {
        float x[16], want[16];
        inputs(x, 16, it);
        _mm512_storeu_ps(want, ref_expf16(_mm512_loadu_ps(x)));
        for (int l = 0; l < 16; l++) {
            float got = sol_ggml_expf(x[l], SOL_GGML_AVX512);
            bad += memcmp(&got, &want[l], sizeof got) != 0;
        }
    }
    if (bad) fail_msg("16-lane expf: %ld lanes differ from the AVX-512 sequence", bad);
}

static void test_expf(void **state) {
    (void)state;
    check_expf8(200000);
    /* the two builds do differ: a test that holds both to one formula would pass neither */
    long differ = 0;
    for (int i = 0; i < 100000; i++) {
        float x = uniform(-30.0f, 12.0f);
        differ += sol_ggml_expf(x, SOL_GGML_AVX2) != sol_ggml_expf(x, SOL_GGML_AVX512);
    }
    assert_true(differ > 0);
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
        check_expf16(100000);
    else
        printf("note: no AVX-512 here: the 16-lane expf is held to its sequence elsewhere\n");
}

static AVX2 void check_sums8(void) {
    for (int it = 0; it < 100000; it++) {
        float v[8];
        for (int l = 0; l < 8; l++)
            v[l] = uniform(-1.0f, 1.0f) * (float)(1 << (it % 20));
        __m256 r = _mm256_loadu_ps(v);
        float h = sol_ggml_hsum(v, SOL_GGML_AVX2), want_h = ref_hsum8(r);
        float d = sol_ggml_vec_reduce(v, SOL_GGML_AVX2), want_d = ref_reduce8(r);
        assert_memory_equal(&h, &want_h, sizeof h);
        assert_memory_equal(&d, &want_d, sizeof d);
    }
}

static AVX512 void check_sums16(void) {
    for (int it = 0; it < 100000; it++) {
        float v[16];
        for (int l = 0; l < 16; l++)
            v[l] = uniform(-1.0f, 1.0f) * (float)(1 << (it % 20));
        float want = ref_reduce16(_mm512_loadu_ps(v));
        float h = sol_ggml_hsum(v, SOL_GGML_AVX512), d = sol_ggml_vec_reduce(v, SOL_GGML_AVX512);
        assert_memory_equal(&h, &want, sizeof h);
        assert_memory_equal(&d, &want, sizeof d);
    }
}

static void test_sums(void **state) {
    (void)state;
    check_sums8();
    /* the 8-lane builds' two sums are different trees: some inputs tell them apart */
    int apart = 0;
    for (int it = 0; it < 10000 && !apart; it++) {
        float v[8];
        for (int l = 0; l < 8; l++)
            v[l] = uniform(-1.0f, 1.0f) * (float)(1 << (l * 3));
        apart = sol_ggml_hsum(v, SOL_GGML_AVX2) != sol_ggml_vec_reduce(v, SOL_GGML_AVX2);
    }
    assert_true(apart);
    if (__builtin_cpu_supports("avx512f")) check_sums16();
}

int main(void) {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        printf("SKIP: this CPU has no AVX2/FMA to run the references on\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expf),
        cmocka_unit_test(test_sums),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
