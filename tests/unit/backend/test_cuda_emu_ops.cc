/* Promise: the CUDA kernels of the element-wise, norm and RoPE ops (worker/backend/cuda/k_*.cu),
 * run through the host emulation, compute what the CPU backend computes for the same inputs,
 * within float rounding (the GPU sums in other orders): every case the op test gives the CPU. */
#include <cmath>
#include <csetjmp>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
extern "C" {
#include <cmocka.h>
/* backend.h is C11; its layout checks use C's spelling of static_assert. */
#define _Static_assert static_assert
#include "backend.h"
#undef _Static_assert
}

/* The kernel sources themselves, compiled here as host C++ (the point of the emulation). */
#include "k_elementwise.cu"
#include "k_norm.cu"
#include "k_rope.cu"

static void fill(float *x, int n, int salt) {
    for (int i = 0; i < n; i++)
        x[i] = (float)(((i + salt) * 37) % 101) / 13.0f - 3.5f;
}

static double rel_err(const float *a, const float *b, int n) {
    double d = 0, s = 0;
    for (int i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return sqrt(d / (s > 0 ? s : 1));
}

static sol_backend *cpu(void) {
    sol_err e = {};
    sol_backend_opts o = {};
    o.threads = 1;
    sol_backend *be = sol_backend_new("cpu:scalar", &o, &e);
    if (!be) fail_msg("cpu backend: %s", e.msg);
    return be;
}

static void test_elementwise(void **state) {
    (void)state;
    enum { N = 1000 };
    static float a[N], b[N], want[N], got[N];
    fill(a, N, 1);
    fill(b, N, 7);
    sol_backend *be = cpu();
    assert_int_equal(sol_silu_mul(be, a, b, want, N), 0);
    sol_cuda_silu_mul(a, b, got, N, nullptr);
    assert_true(rel_err(got, want, N) < 1e-6);
    assert_int_equal(sol_gelu_mul(be, a, b, want, N), 0);
    sol_cuda_gelu_mul(a, b, got, N, nullptr);
    assert_true(rel_err(got, want, N) < 1e-6);
    assert_int_equal(sol_add(be, a, b, want, N), 0);
    sol_cuda_add(a, b, got, N, nullptr);
    assert_memory_equal(got, want, sizeof want);
    assert_int_equal(sol_scale(be, a, 45.25f, want, N), 0);
    sol_cuda_scale(a, 45.25f, got, N, nullptr);
    assert_memory_equal(got, want, sizeof want);
    sol_backend_free(be);
}

static void test_rmsnorm(void **state) {
    (void)state;
    const int dims[] = {67, 256, 1000};
    static float x[3 * 1000], w[1000], want[3 * 1000], got[3 * 1000];
    sol_backend *be = cpu();
    for (int d : dims) {
        fill(x, 3 * d, 3);
        fill(w, d, 5);
        assert_int_equal(sol_rmsnorm(be, x, w, want, 3, d, 1e-5f), 0);
        sol_cuda_rmsnorm(x, w, got, 3, d, 1e-5f, nullptr);
        if (!(rel_err(got, want, 3 * d) < 1e-6))
            fail_msg("rmsnorm dim %d: %g", d, rel_err(got, want, 3 * d));
    }
    sol_backend_free(be);
}

static void test_rope(void **state) {
    (void)state;
    enum { N = 3, H = 4, HD = 64 };
    const int32_t pos[N] = {0, 17, 4000};
    sol_rope_params ps[4] = {};
    ps[0].freq_base = 10000.0f;
    ps[1].freq_base = 500000.0f, ps[1].scaling_factor = 8.0f, ps[1].low_freq_factor = 1.0f,
    ps[1].high_freq_factor = 4.0f, ps[1].orig_ctx = 8192;
    ps[2].freq_base = 1000000.0f, ps[2].neox = 1;
    ps[3].freq_base = 1000000.0f, ps[3].neox = 1, ps[3].freq_scale = 0.125f;
    sol_backend *be = cpu();
    for (const sol_rope_params &p : ps) {
        static float want[N * H * HD], got[N * H * HD];
        fill(want, N * H * HD, 11);
        fill(got, N * H * HD, 11);
        assert_int_equal(sol_rope(be, want, pos, N, H, HD, &p), 0);
        sol_cuda_rope_args a = {p.freq_base,
                                p.scaling_factor,
                                p.low_freq_factor,
                                p.high_freq_factor,
                                p.freq_scale,
                                p.orig_ctx,
                                p.neox};
        sol_cuda_rope(got, pos, N, H, HD, a, nullptr);
        assert_memory_equal(got, want, sizeof want);
    }
    sol_backend_free(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
