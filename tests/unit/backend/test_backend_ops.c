/* Promise: every op of every backend this build registers (each variant the machine runs: the
 * CPU's ISA paths, the CUDA backend's code as cuda-emu:host) matches a double-precision
 * reference, and each token's matmul/attention result is bit-identical whatever the batch, tiling
 * or thread count. A new backend joins these cases by registering (worker/backend/registry.c), as
 * in ggml's test-backend-ops. Inputs are host pointers, so a GPU backend is left to
 * test_cuda_backend (which moves data as a GPU needs); its code runs here as cuda-emu:host. */
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

#include "backend.h"
#include "cpu_features.h"
#include "dtype.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rnd_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static float rnd_f(void) { /* uniform in [-1, 1) */
    return (float)((double)rnd_u32() / 4294967296.0 * 2.0 - 1.0);
}

static void fill(float *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = rnd_f();
}

static void poison(float *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
}

/* Normalized mean squared error, as llama.cpp's test-backend-ops; NaN anywhere fails. */
static double nmse(const float *got, const double *ref, size_t n) {
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i])) return INFINITY;
        err += (got[i] - ref[i]) * (got[i] - ref[i]);
        norm += ref[i] * ref[i];
    }
    return err / (norm > 0 ? norm : 1);
}

/* spec: a registry spec ("cpu:avx2", "cuda:0"). */
static sol_backend *backend_for(const char *spec, int threads) {
    sol_err e = {0};
    /* batch_invariant: the GEMV kernels for every n, which the exact cases below expect; the
     * CUDA prefill GEMM has its own test (test_cuda_backend). */
    sol_backend *be =
        sol_backend_new(spec, &(sol_backend_opts){.threads = threads, .batch_invariant = 1}, &e);
    if (!be) fail_msg("backend %s: %s", spec, e.msg);
    return be;
}

enum { MAX_TARGETS = 16, SPEC_MAX = 64 };

/* Runs fn once per (registered backend, variant this machine runs). */
static void for_each_target(void (*fn)(const char *spec)) {
    const sol_backend_entry *list;
    int n = sol_backend_registry(&list), ran = 0;
    for (int i = 0; i < n; i++) {
        /* The GPU takes device buffers only; test_cuda_backend covers it (and cuda-emu) that way.
         * cuda-emu:host runs here: the same kernels, host arrays accepted. */
        if (strcmp(list[i].name, "cuda") == 0) continue;
        char vars[MAX_TARGETS][SOL_BACKEND_VARIANT_MAX];
        int nv = list[i].variants(vars, MAX_TARGETS);
        for (int v = 0; v < nv; v++, ran++) {
            char spec[SPEC_MAX];
            snprintf(spec, sizeof spec, "%.31s:%.23s", list[i].name, vars[v]);
            print_message("  on %s\n", spec);
            fn(spec);
        }
    }
    assert_true(ran > 0); /* the CPU's scalar path runs everywhere */
}

/* The best CPU path (what a worker gets by default): for the CPU-specific cases below. */
static sol_backend *cpu_best(int threads) {
    char spec[SPEC_MAX];
    snprintf(spec, sizeof spec, "cpu:%s", sol_cpu_isa_name(sol_cpu_isa_best()));
    return backend_for(spec, threads);
}

/* ---- weights ---- */

typedef struct {
    sol_weight w;
    float *deq;  /* rows x cols, the exact values the weight stands for */
    void *owned; /* the host bytes (a device backend's weight_prepare repoints w.data) */
} test_weight;

/* Random bytes for the types sol_quantize_row does not write, with small positive scales so the
 * values stay in a sane range (every quant pattern is then exercised). */
static int random_block_type(sol_dtype t) {
    return t == SOL_DT_Q4_K || t == SOL_DT_Q5_K || t == SOL_DT_Q6_K || t == SOL_DT_Q5_0 ||
           t == SOL_DT_Q5_1;
}

static void random_block(sol_dtype t, void *blk) {
    size_t bytes = sol_dtype_block_bytes(t);
    for (size_t i = 0; i < bytes; i++)
        ((uint8_t *)blk)[i] = (uint8_t)rnd_u32();
    uint16_t d = sol_f32_to_f16(0.01f + 0.01f * fabsf(rnd_f())),
             m = sol_f32_to_f16(0.01f * rnd_f());
    if (t == SOL_DT_Q4_K) {
        ((sol_block_q4_k *)blk)->d = d;
        ((sol_block_q4_k *)blk)->dmin = sol_f32_to_f16(0.01f * fabsf(rnd_f()));
    } else if (t == SOL_DT_Q5_K) {
        ((sol_block_q5_k *)blk)->d = d;
        ((sol_block_q5_k *)blk)->dmin = sol_f32_to_f16(0.01f * fabsf(rnd_f()));
    } else if (t == SOL_DT_Q6_K) {
        ((sol_block_q6_k *)blk)->d = sol_f32_to_f16(0.001f + 0.001f * fabsf(rnd_f()));
    } else if (t == SOL_DT_Q5_0) {
        ((sol_block_q5_0 *)blk)->d = d;
    } else {
        ((sol_block_q5_1 *)blk)->d = d;
        ((sol_block_q5_1 *)blk)->m = m;
    }
}

static test_weight make_weight(sol_dtype t, int64_t rows, int64_t cols) {
    test_weight tw = {0};
    size_t rb = sol_dtype_row_bytes(t, cols);
    assert_true(rb > 0);
    void *data = malloc(rb * (size_t)rows);
    float *src = malloc(sizeof(float) * (size_t)cols);
    tw.deq = malloc(sizeof(float) * (size_t)(rows * cols));
    for (int64_t r = 0; r < rows; r++) {
        char *row = (char *)data + (size_t)r * rb;
        if (random_block_type(t)) {
            for (int64_t b = 0; b < cols / (int64_t)sol_dtype_block_elems(t); b++)
                random_block(t, row + b * sol_dtype_block_bytes(t));
        } else {
            fill(src, (size_t)cols);
            assert_int_equal(sol_quantize_row(t, src, row, cols), 0);
        }
        sol_dequantize_row(t, row, tw.deq + r * cols, cols);
    }
    free(src);
    tw.w = (sol_weight){t, rows, cols, data, rb, 0, 0};
    tw.owned = data;
    return tw;
}

static void free_weight(test_weight *tw) {
    free(tw->owned);
    free(tw->deq);
}

/* x as the kernel sees it: Q8_0/Q4_0 weights multiply x rounded through Q8_0 (as ggml does). */
/* The backend's Q8_K activations (ggml's reference): iscale = -127 / the signed element of
 * largest magnitude, quants rounded half to even and capped at 127, d = 1 / iscale. */
static void q8k_round_trip(const float *x, float *xe, int64_t K) {
    for (int64_t b = 0; b < K / 256; b++) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 256; j++)
            if (fabsf(x[b * 256 + j]) > amax) {
                amax = fabsf(x[b * 256 + j]);
                max = x[b * 256 + j];
            }
        float iscale = amax != 0.0f ? -127.0f / max : 0.0f, d = amax != 0.0f ? 1.0f / iscale : 0;
        for (int j = 0; j < 256; j++)
            xe[b * 256 + j] = fminf(127.0f, rintf(x[b * 256 + j] * iscale)) * d;
    }
}

/* What the kernels multiply: Q8_0-rounded x for Q8_0/Q4_0/Q5_0/Q5_1, Q8_K-rounded x for the
 * K-quants, x itself for float weights. */
static void effective_x(sol_dtype t, const float *x, float *xe, int n, int64_t K) {
    if (t == SOL_DT_Q4_K || t == SOL_DT_Q5_K || t == SOL_DT_Q6_K) {
        for (int i = 0; i < n; i++)
            q8k_round_trip(x + i * K, xe + i * K, K);
        return;
    }
    if (t != SOL_DT_Q8_0 && t != SOL_DT_Q4_0 && t != SOL_DT_Q5_0 && t != SOL_DT_Q5_1 &&
        t != SOL_DT_MXFP4) {
        memcpy(xe, x, sizeof(float) * (size_t)(n * K));
        return;
    }
    void *tmp = malloc(sol_dtype_row_bytes(SOL_DT_Q8_0, K));
    for (int i = 0; i < n; i++) {
        assert_int_equal(sol_quantize_row(SOL_DT_Q8_0, x + i * K, tmp, K), 0);
        sol_dequantize_row(SOL_DT_Q8_0, tmp, xe + i * K, K);
    }
    free(tmp);
}

static const sol_dtype all_types[] = {SOL_DT_F32,  SOL_DT_F16,  SOL_DT_BF16, SOL_DT_Q8_0,
                                      SOL_DT_Q4_0, SOL_DT_Q5_0, SOL_DT_Q5_1, SOL_DT_Q4_K,
                                      SOL_DT_Q5_K, SOL_DT_Q6_K, SOL_DT_MXFP4};

/* prep: run the weight through weight_prepare first, as a loaded model's (Q4_0 and Q8_0 get
 * repacked). */
static void check_matmul(sol_backend *be, sol_dtype t, int64_t M, int64_t K, int n, int prep) {
    test_weight tw = make_weight(t, M, K);
    if (prep) assert_int_equal(sol_weight_prepare(be, &tw.w), 0);
    float *x = malloc(sizeof(float) * (size_t)(n * K)),
          *xe = malloc(sizeof(float) * (size_t)(n * K));
    float *y = malloc(sizeof(float) * (size_t)(n * M));
    double *ref = malloc(sizeof(double) * (size_t)(n * M));
    fill(x, (size_t)(n * K));
    effective_x(t, x, xe, n, K);
    for (int i = 0; i < n; i++)
        for (int64_t m = 0; m < M; m++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)tw.deq[m * K + k] * xe[i * K + k];
            ref[i * M + m] = s;
        }
    poison(y, (size_t)(n * M));
    int rc = sol_matmul(be, &tw.w, x, y, n);
    if (!prep && rc == -EINVAL && strstr(be->err.msg, "must go through weight_prepare")) {
        /* the CUDA backend keeps these types in its split layout only (cuda_layout.h) */
        assert_true(t == SOL_DT_Q4_0 || t == SOL_DT_Q5_0 || t == SOL_DT_Q8_0 || t == SOL_DT_Q6_K ||
                    t == SOL_DT_MXFP4);
        free(x), free(xe), free(y), free(ref);
        free_weight(&tw);
        return;
    }
    if (rc) fail_msg("matmul %s on %s: %s", sol_dtype_name(t), sol_backend_name(be), be->err.msg);
    double e = nmse(y, ref, (size_t)(n * M));
    if (!(e < 1e-9))
        fail_msg("matmul %s M=%lld K=%lld n=%d prep=%d: nmse %g", sol_dtype_name(t), (long long)M,
                 (long long)K, n, prep, e);
    free(x), free(xe), free(y), free(ref);
    free_weight(&tw);
}

static void matmul_vs_reference(const char *spec) {
    sol_backend *be = backend_for(spec, 2);
    for (size_t i = 0; i < sizeof(all_types) / sizeof(all_types[0]); i++) {
        sol_dtype t = all_types[i];
        int kq = sol_dtype_block_elems(t) == 256;
        for (int prep = 0; prep < 2; prep++) {
            check_matmul(be, t, 37, kq ? 256 : 96, 1, prep);
            check_matmul(be, t, 37, kq ? 256 : 96, 5, prep);
            check_matmul(be, t, 64, kq ? 512 : 256, 17, prep);
            check_matmul(be, t, 5, kq ? 256 : 32, 3, prep);
            check_matmul(be, t, 72, kq ? 256 : 64, 8, prep);
        }
    }
    sol_backend_free(be);
}

static void test_matmul_vs_reference(void **state) {
    (void)state;
    for_each_target(matmul_vs_reference);
}

/* Row t of a batch equals the same token computed alone, for every batch size and thread count:
 * every few-token tile shape (n = 2..9, speculative verify) and the GEMM tiles. */
static void matmul_batch_invariance(const char *spec) {
    const int64_t M = 37, K = 256;
    const int ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 17};
    {
        sol_backend *be1 = backend_for(spec, 1), *be2 = backend_for(spec, 2);
        for (size_t ti = 0; ti < sizeof(all_types) / sizeof(all_types[0]); ti++) {
            test_weight tw = make_weight(all_types[ti], M, K);
            assert_int_equal(sol_weight_prepare(be1, &tw.w), 0);
            float x[17 * 256], alone[17 * 37], y[17 * 37];
            fill(x, 17 * K);
            for (int t = 0; t < 17; t++)
                assert_int_equal(sol_matmul(be1, &tw.w, x + t * K, alone + t * M, 1), 0);
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                for (int th = 0; th < 2; th++) {
                    poison(y, 17 * M);
                    assert_int_equal(sol_matmul(th ? be2 : be1, &tw.w, x, y, ns[ni]), 0);
                    if (memcmp(y, alone, sizeof(float) * (size_t)(ns[ni] * M)) != 0)
                        fail_msg("%s %s: batch n=%d threads=%d differs from n=1", spec,
                                 sol_dtype_name(all_types[ti]), ns[ni], th + 1);
                }
            free_weight(&tw);
        }
        sol_backend_free(be1);
        sol_backend_free(be2);
    }
}

static void test_matmul_batch_invariance(void **state) {
    (void)state;
    for_each_target(matmul_batch_invariance);
}

/* matmul_many (one dispatch for q/k/v or gate/up) gives the bits of separate matmul calls, for
 * mixed types and row counts (large and small weights in one call), every ISA and thread count;
 * weights with different K are refused. */
static void matmul_many(const char *spec) {
    const int64_t K = 256;
    const sol_dtype types[3] = {SOL_DT_Q4_0, SOL_DT_Q8_0, SOL_DT_F16};
    const int64_t rows[3] = {64, 37, 40};
    const int ns[] = {1, 4, 17};
    {
        for (int th = 1; th <= 2; th++) {
            sol_backend *be = backend_for(spec, th);
            test_weight tw[3];
            const sol_weight *ws[3];
            float x[17 * 256], sep[3][17 * 64], many[3][17 * 64];
            float *ys[3] = {many[0], many[1], many[2]};
            fill(x, 17 * K);
            for (int i = 0; i < 3; i++) {
                tw[i] = make_weight(types[i], rows[i], K);
                assert_int_equal(sol_weight_prepare(be, &tw[i].w), 0);
                ws[i] = &tw[i].w;
            }
            for (size_t ni = 0; ni < 3; ni++) {
                for (int i = 0; i < 3; i++) {
                    assert_int_equal(sol_matmul(be, ws[i], x, sep[i], ns[ni]), 0);
                    poison(many[i], 17 * 64);
                }
                assert_int_equal(sol_matmul_many(be, ws, ys, 3, x, ns[ni]), 0);
                for (int i = 0; i < 3; i++)
                    if (memcmp(sep[i], many[i], sizeof(float) * (size_t)(ns[ni] * rows[i])))
                        fail_msg("%s threads=%d n=%d: matmul_many weight %d (%s) differs", spec, th,
                                 ns[ni], i, sol_dtype_name(types[i]));
                /* matmul_add: y += the product, the bits of matmul then add (a backend's fused
                 * epilogue or sol_matmul_add's fallback through tmp) */
                for (int i = 0; i < 3; i++) {
                    float y[17 * 64], tmp[17 * 64];
                    size_t ny = (size_t)(ns[ni] * rows[i]);
                    fill(y, ny);
                    for (size_t j = 0; j < ny; j++)
                        many[i][j] = y[j] + sep[i][j];
                    assert_int_equal(sol_matmul_add(be, ws[i], x, y, tmp, ns[ni]), 0);
                    if (memcmp(y, many[i], sizeof(float) * ny))
                        fail_msg("%s threads=%d n=%d: matmul_add weight %d (%s) differs", spec, th,
                                 ns[ni], i, sol_dtype_name(types[i]));
                }
            }
            test_weight odd = make_weight(SOL_DT_F32, 8, 128);
            const sol_weight *bad[2] = {ws[0], &odd.w};
            assert_int_equal(sol_matmul_many(be, bad, ys, 2, x, 1), -EINVAL);
            assert_non_null(strstr(be->err.msg, "columns"));
            free_weight(&odd);
            for (int i = 0; i < 3; i++)
                free_weight(&tw[i]);
            sol_backend_free(be);
        }
    }
}

static void test_matmul_many(void **state) {
    (void)state;
    for_each_target(matmul_many);
}

/* ---- the CPU backend's own layouts and modes ---- */

/* weight_prepare repacks Q4_0 and Q8_0 in place (rows past the last group of 8 stay ggml rows);
 * on the scalar path the repacked weight gives the same bits as the original rows, and embedding
 * a repacked row gives the original row's values. */
static void check_repack(sol_dtype t) {
    const int64_t M = 37, K = 128;
    sol_backend *be = backend_for("cpu:scalar", 2);
    test_weight a = make_weight(t, M, K);
    sol_weight b = a.w;
    size_t bytes = a.w.row_bytes * (size_t)M;
    b.data = malloc(bytes);
    memcpy((void *)b.data, a.w.data, bytes);
    assert_int_equal(sol_weight_prepare(be, &b), 0);
    assert_int_not_equal(b.layout, 0);
    assert_memory_not_equal(a.w.data, b.data, a.w.row_bytes * 32);
    assert_memory_equal((const char *)a.w.data + a.w.row_bytes * 32,
                        (const char *)b.data + a.w.row_bytes * 32, a.w.row_bytes * 5);
    float x[5 * 128], ya[5 * 37], yb[5 * 37];
    fill(x, 5 * K);
    assert_int_equal(sol_matmul(be, &a.w, x, ya, 5), 0);
    assert_int_equal(sol_matmul(be, &b, x, yb, 5), 0);
    assert_memory_equal(ya, yb, sizeof(ya));
    const int32_t ids[4] = {0, 13, 31, 36};
    float ea[4 * 128], eb[4 * 128];
    assert_int_equal(sol_embed(be, &a.w, ids, 4, ea), 0);
    assert_int_equal(sol_embed(be, &b, ids, 4, eb), 0);
    assert_memory_equal(ea, eb, sizeof(ea));
    /* A layout that does not belong to the type is refused, not misread. */
    sol_weight wrong = b;
    wrong.type = t == SOL_DT_Q4_0 ? SOL_DT_Q8_0 : SOL_DT_Q4_0;
    wrong.row_bytes = sol_dtype_row_bytes(wrong.type, K);
    assert_int_equal(sol_matmul(be, &wrong, x, ya, 1), -EINVAL);
    assert_non_null(strstr(be->err.msg, "layout"));
    free((void *)b.data);
    free_weight(&a);
    sol_backend_free(be);
}

static void test_q4_0_repack(void **state) {
    (void)state;
    check_repack(SOL_DT_Q4_0);
}

static void test_q8_0_repack(void **state) {
    (void)state;
    check_repack(SOL_DT_Q8_0);
    /* The llama.cpp reference mode keeps Q8_0 rows (and their llama.cpp summation order); chosen
     * as the backend variant cpu:llamacpp, or by SOL_CPU_ATTN, its alias. */
    for (int alias = 0; alias < 2; alias++) {
        if (alias) setenv("SOL_CPU_ATTN", "llamacpp", 1);
        sol_backend *be = alias ? cpu_best(1) : backend_for("cpu:llamacpp", 1);
        unsetenv("SOL_CPU_ATTN");
        test_weight q8 = make_weight(SOL_DT_Q8_0, 16, 64);
        assert_int_equal(sol_weight_prepare(be, &q8.w), 0);
        assert_int_equal(q8.w.layout, 0);
        free_weight(&q8);
        sol_backend_free(be);
    }
    sol_err e = {0};
    assert_null(sol_backend_new("cpu:avx2+exact+llamacpp", NULL, &e));
    assert_non_null(strstr(e.msg, "a mode (exact, llamacpp) given twice"));
    assert_null(sol_backend_new("cpu:fast", NULL, &e));
    assert_non_null(strstr(e.msg, "'fast' is neither a kernel ISA"));
    sol_backend *be = backend_for("cpu:scalar+llamacpp", 1);
    test_weight q8 = make_weight(SOL_DT_Q8_0, 16, 64), q4 = make_weight(SOL_DT_Q4_0, 16, 64);
    assert_int_equal(sol_weight_prepare(be, &q8.w), 0);
    assert_int_equal(sol_weight_prepare(be, &q4.w), 0);
    assert_int_equal(q8.w.layout, 0);
    assert_int_not_equal(q4.w.layout, 0);
    free_weight(&q8);
    free_weight(&q4);
    sol_backend_free(be);
}

/* The scalar and AVX2 K-quant kernels turn exact integer sums into float by one shared
 * expression, so AVX2 gives the scalar path's bits (a stronger promise than the reference
 * tolerance; the AVX-512 kernels sum in 16 float lanes and are held to the reference). */
static void test_kquant_paths_agree(void **state) {
    (void)state;
    const sol_dtype types[] = {SOL_DT_Q4_K, SOL_DT_Q5_K, SOL_DT_Q6_K, SOL_DT_Q5_0, SOL_DT_Q5_1};
    const int64_t M = 29, K = 512;
    enum { N = 6 };
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        test_weight tw = make_weight(types[ti], M, K);
        float x[N * 512], ref[N * 29], y[N * 29];
        fill(x, N * K);
        sol_backend *scalar = backend_for("cpu:scalar", 1);
        assert_int_equal(sol_matmul(scalar, &tw.w, x, ref, N), 0);
        sol_backend_free(scalar);
        if (sol_cpu_isa_supported(SOL_ISA_AVX2)) {
            const char *spec = "cpu:avx2";
            sol_backend *be = backend_for(spec, 2);
            poison(y, N * M);
            assert_int_equal(sol_matmul(be, &tw.w, x, y, N), 0);
            if (memcmp(y, ref, sizeof y) != 0)
                fail_msg("%s %s differs from cpu:scalar", spec, sol_dtype_name(types[ti]));
            sol_backend_free(be);
        }
        free_weight(&tw);
    }
}

/* The llama.cpp-compatible mode's K-quant kernels (llama.cpp's float order: repacked Q4_K for
 * rows % 8 == 0 with GEMM and GEMV tokens in one batch, vec_dot lanes otherwise) against the
 * double reference, like every other kernel. */
static void test_kquant_llamacpp_order(void **state) {
    (void)state;
    sol_backend *be = backend_for("cpu:scalar+llamacpp", 2);
    const sol_dtype types[] = {SOL_DT_Q4_K, SOL_DT_Q5_K, SOL_DT_Q6_K};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        check_matmul(be, types[ti], 16, 512, 5, 1); /* rows % 8 == 0: Q4_K repacked order */
        check_matmul(be, types[ti], 13, 256, 5, 1); /* vec_dot lanes */
        check_matmul(be, types[ti], 13, 256, 1, 1);
    }
    sol_backend_free(be);
}

/* ---- element-wise ops ---- */

static void rmsnorm_silu_add(const char *spec) {
    sol_backend *be = backend_for(spec, 2);
    enum { N = 3, D = 67 };
    float x[N * D], w[D], out[N * D], b[N * D];
    double ref[N * D];
    fill(x, N * D), fill(w, D), fill(b, N * D);
    poison(out, N * D);
    assert_int_equal(sol_rmsnorm(be, x, w, out, N, D, 1e-5f), 0);
    for (int t = 0; t < N; t++) {
        double ss = 0;
        for (int i = 0; i < D; i++)
            ss += (double)x[t * D + i] * x[t * D + i];
        double s = 1.0 / sqrt(ss / D + 1e-5);
        for (int i = 0; i < D; i++)
            ref[t * D + i] = x[t * D + i] * s * w[i];
    }
    assert_true(nmse(out, ref, N * D) < 1e-12);
    poison(out, N * D);
    assert_int_equal(sol_silu_mul(be, x, b, out, N * D), 0);
    for (int i = 0; i < N * D; i++)
        ref[i] = x[i] / (1.0 + exp(-(double)x[i])) * b[i];
    assert_true(nmse(out, ref, N * D) < 1e-12);
    poison(out, N * D);
    assert_int_equal(sol_gelu_mul(be, x, b, out, N * D), 0);
    for (int i = 0; i < N * D; i++) {
        double v = x[i];
        ref[i] = 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))) * b[i];
    }
    assert_true(nmse(out, ref, N * D) < 1e-12);
    /* gpt-oss's gate over inputs to +-10: both clamps (gate <= 7, |up| <= 7) are reached */
    float g[N * D], u[N * D];
    for (int i = 0; i < N * D; i++)
        g[i] = 10.0f * x[i], u[i] = 10.0f * b[i];
    poison(out, N * D);
    assert_int_equal(sol_swiglu_oai(be, g, u, out, N * D, 1.702f, 7.0f), 0);
    int clamped = 0;
    for (int i = 0; i < N * D; i++) {
        double v = g[i] < 7.0f ? g[i] : 7.0, y = u[i] < -7.0f ? -7.0 : u[i] > 7.0f ? 7.0 : u[i];
        clamped += g[i] > 7.0f || fabsf(u[i]) > 7.0f;
        ref[i] = v / (1.0 + exp(-1.702 * v)) * (y + 1.0);
    }
    assert_true(clamped > 0);
    assert_true(nmse(out, ref, N * D) < 1e-12);
    poison(out, N * D);
    assert_int_equal(sol_scale(be, x, 33.9411f, out, N * D), 0);
    for (int i = 0; i < N * D; i++)
        ref[i] = (double)x[i] * 33.9411f;
    assert_true(nmse(out, ref, N * D) < 1e-14);
    poison(out, N * D);
    assert_int_equal(sol_add(be, x, b, out, N * D), 0);
    for (int i = 0; i < N * D; i++)
        ref[i] = (double)x[i] + b[i];
    assert_true(nmse(out, ref, N * D) < 1e-14);
    sol_backend_free(be);
}

static void test_rmsnorm_silu_add(void **state) {
    (void)state;
    for_each_target(rmsnorm_silu_add);
}

/* moe_combine: each token's k rows weighted and summed in rank order (the reference in the same
 * float order: exact), and a row outside the source refused. */
static void moe_combine(const char *spec) {
    sol_backend *be = backend_for(spec, 1);
    enum { N = 3, K = 3, D = 40, SRC = N * K };
    float src[SRC * D], out[N * D], w[N * K];
    fill(src, SRC * D), fill(w, N * K);
    const int32_t rows[N * K] = {4, 0, 8, 2, 7, 1, 6, 3, 5};
    assert_int_equal(sol_moe_combine(be, src, D, rows, w, N, K, SRC, out), 0);
    for (int t = 0; t < N; t++)
        for (int c = 0; c < D; c++) {
            float want = w[t * K] * src[rows[t * K] * D + c];
            for (int j = 1; j < K; j++) {
                float p = w[t * K + j] * src[rows[t * K + j] * D + c];
                want += p;
            }
            if (out[t * D + c] != want)
                fail_msg("%s moe_combine token %d col %d: %g, want %g", spec, t, c, out[t * D + c],
                         want);
        }
    assert_int_equal(sol_moe_combine(be, src, D, rows, w, N, K, SRC - 1, out), -EINVAL);
    assert_non_null(strstr(be->err.msg, "outside"));
    sol_backend_free(be);
}

static void test_moe_combine(void **state) {
    (void)state;
    for_each_target(moe_combine);
}

/* argmax_rows: each row's largest value and its id as the greedy sampler takes it (ties to the
 * lowest id, NaN never wins), bit for bit against sol_argmax_f32's scan: a tie between the first
 * and the last id (different blocks of the device's reduction: the first wins), NaN everywhere
 * but one id, a row all -inf (id 0, -inf), +inf (its id), -0 before +0 (equal: the first),
 * widths of one value, one 4096-value chunk and several (the device merges them: 4097, 128256).
 * Random rows (fill) tie nowhere, so the ids check the reduction itself. */
static void argmax_rows(const char *spec) {
    sol_backend *be = backend_for(spec, 1);
    const int64_t widths[] = {1, 7, 4096, 4097, 128256};
    enum { N = 6 };
    for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++) {
        int64_t w = widths[wi];
        float *x = malloc(sizeof(float) * (size_t)(N * w));
        fill(x, (int)(N * w));
        float *r = x + w; /* row 1: a tie between the last and the first id, the first wins */
        r[w - 1] = 50.0f, r[0] = 50.0f;
        r = x + 2 * w; /* row 2: NaN everywhere but one id */
        for (int64_t j = 0; j < w; j++)
            r[j] = NAN;
        r[w / 2] = -3.0f;
        r = x + 3 * w; /* row 3: all -inf */
        for (int64_t j = 0; j < w; j++)
            r[j] = -INFINITY;
        r = x + 4 * w; /* row 4: +inf */
        r[w - 1] = INFINITY;
        r = x + 5 * w; /* row 5: -0 before +0 at the top: the first */
        for (int64_t j = 0; j < w; j++)
            r[j] = -1.0f;
        r[w > 3 ? 3 : 0] = -0.0f, r[w - 1] = 0.0f;
        int32_t ids[N];
        float vals[N];
        assert_int_equal(sol_argmax_rows(be, x, N, w, ids, vals), 0);
        for (int i = 0; i < N; i++) {
            float want_v;
            int32_t want = sol_argmax_f32(x + (size_t)i * w, w, &want_v);
            if (ids[i] != want || memcmp(&vals[i], &want_v, sizeof want_v))
                fail_msg("%s argmax_rows width %lld row %d: id %d value %g, want %d %g", spec,
                         (long long)w, i, ids[i], vals[i], want, want_v);
        }
        free(x);
    }
    assert_int_equal(sol_argmax_rows(be, NULL, 1, 0, NULL, NULL), -EINVAL);
    sol_backend_free(be);
}

static void test_argmax_rows(void **state) {
    (void)state;
    for_each_target(argmax_rows);
}

static double ref_inv_freq(const sol_rope_params *p, int i, int hd) {
    double f = 1.0 / pow(p->freq_base, 2.0 * i / hd);
    if (p->ext_factor != 0) { /* YaRN: the ramp between interpolated and original */
        double y = (i - p->yarn_low) / (p->yarn_high - p->yarn_low);
        double mix = (1 - (y < 0 ? 0 : y > 1 ? 1 : y)) * p->ext_factor;
        return f * p->freq_scale * (1 - mix) + f * mix;
    }
    if (p->freq_scale > 0) f *= p->freq_scale;
    if (p->scaling_factor <= 0) return f;
    double wl = 2 * M_PI / f, lo = p->orig_ctx / p->low_freq_factor,
           hi = p->orig_ctx / p->high_freq_factor;
    if (wl < hi) return f;
    if (wl > lo) return f / p->scaling_factor;
    double sm =
        (p->orig_ctx / wl - p->low_freq_factor) / (p->high_freq_factor - p->low_freq_factor);
    return (1 - sm) * f / p->scaling_factor + sm * f;
}

static void rope(const char *spec) {
    sol_backend *be = backend_for(spec, 1);
    enum { N = 3, H = 4, HD = 64 };
    const sol_rope_params ps[5] = {
        {10000.0f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {500000.0f, 8.0f, 1.0f, 4.0f, 8192, 0, 0, 0, 0, 0, 0},
        {1000000.0f, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},       /* NEOX pairs */
        {1000000.0f, 0, 0, 0, 0, 1, 0.125f, 0, 0, 0, 0},  /* linear x8 */
        {150000.0f, 0, 0, 0, 0, 1, 0.25f, 1, 5, 23, 1.2f} /* YaRN x4, dims 5..23, mscale */
    };
    const int32_t pos[N] = {0, 17, 4000};
    for (int pi = 0; pi < 5; pi++) {
        float x[N * H * HD], orig[N * H * HD];
        double ref[N * H * HD];
        fill(orig, N * H * HD);
        memcpy(x, orig, sizeof(x));
        assert_int_equal(sol_rope(be, x, pos, N, H, HD, &ps[pi]), 0);
        for (int t = 0; t < N; t++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < HD / 2; i++) {
                    double th = pos[t] * ref_inv_freq(&ps[pi], i, HD);
                    const float *v = orig + (t * H + h) * HD;
                    double *r = ref + (t * H + h) * HD;
                    int a = ps[pi].neox ? i : 2 * i, b = ps[pi].neox ? i + HD / 2 : 2 * i + 1;
                    double ms = ps[pi].mscale > 0 ? ps[pi].mscale : 1.0;
                    r[a] = (v[a] * cos(th) - v[b] * sin(th)) * ms;
                    r[b] = (v[a] * sin(th) + v[b] * cos(th)) * ms;
                }
        double e = nmse(x, ref, N * H * HD);
        if (!(e < 1e-12)) fail_msg("%s rope params %d: nmse %g", spec, pi, e);
    }
    sol_backend_free(be);
}

static void test_rope(void **state) {
    (void)state;
    for_each_target(rope);
}

static void embed(const char *spec) {
    sol_backend *be = backend_for(spec, 1);
    for (size_t ti = 0; ti < sizeof(all_types) / sizeof(all_types[0]); ti++) {
        test_weight tw = make_weight(all_types[ti], 9, 256);
        assert_int_equal(sol_weight_prepare(be, &tw.w), 0);
        assert_int_equal(sol_weight_prepare(be, &tw.w), 0); /* idempotent */
        const int32_t ids[3] = {8, 0, 5};
        float out[3 * 256];
        double ref[3 * 256];
        poison(out, 3 * 256);
        assert_int_equal(sol_embed(be, &tw.w, ids, 3, out), 0);
        for (int t = 0; t < 3; t++)
            for (int k = 0; k < 256; k++)
                ref[t * 256 + k] = tw.deq[ids[t] * 256 + k];
        if (!(nmse(out, ref, 3 * 256) < 1e-12))
            fail_msg("%s embed %s: nmse %g", spec, sol_dtype_name(all_types[ti]),
                     nmse(out, ref, 3 * 256));
        const int32_t bad = 9;
        assert_int_equal(sol_embed(be, &tw.w, &bad, 1, out), -EINVAL);
        assert_non_null(strstr(be->err.msg, "outside"));
        free_weight(&tw);
    }
    sol_backend_free(be);
}

static void test_embed(void **state) {
    (void)state;
    for_each_target(embed);
}

/* ---- KV cache and attention ---- */

typedef struct {
    int heads, kv_heads, hd;
    sol_dtype kv_type;
} attn_case;

enum { BS = 4, NBLK = 30, SEQS = 3, MAXCTX = 37 };

/* Writes SEQS sequences of random K/V into the cache through the given block tables and returns
 * the values as stored (fp16-rounded for an f16 cache) for the reference. */
static void fill_cache(sol_backend *be, sol_kv *kv, const attn_case *c, int32_t tables[SEQS][10],
                       const int lens[SEQS], float *kref, float *vref) {
    int row = c->kv_heads * c->hd;
    for (int s = 0; s < SEQS; s++)
        for (int p = 0; p < lens[s]; p++) {
            float *k = kref + ((size_t)s * MAXCTX + p) * row,
                  *v = vref + ((size_t)s * MAXCTX + p) * row;
            fill(k, (size_t)row), fill(v, (size_t)row);
            if (c->kv_type == SOL_DT_F16)
                for (int i = 0; i < row; i++) {
                    k[i] = sol_f16_to_f32(sol_f32_to_f16(k[i]));
                    v[i] = sol_f16_to_f32(sol_f32_to_f16(v[i]));
                }
            int32_t slot = tables[s][p / BS] * BS + p % BS;
            assert_int_equal(sol_kv_write(be, kv, 1, k, v, &slot, 1), 0);
        }
}

/* Attention of one token of sequence s over positions [lo, n_ctx), in double; sinks (NULL: none)
 * join each head's softmax with no value. */
static void ref_attention_sinks(const attn_case *c, const float *q, const float *kref,
                                const float *vref, int s, int lo, int n_ctx, const float *sinks,
                                double *out) {
    int row = c->kv_heads * c->hd, g = c->heads / c->kv_heads;
    double scale = 1.0 / sqrt(c->hd);
    for (int h = 0; h < c->heads; h++) {
        double sc[MAXCTX], mx = -INFINITY, sum = 0;
        for (int p = lo; p < n_ctx; p++) {
            const float *k = kref + ((size_t)s * MAXCTX + p) * row + (h / g) * c->hd;
            double d = 0;
            for (int i = 0; i < c->hd; i++)
                d += (double)q[h * c->hd + i] * k[i];
            sc[p] = d * scale;
            mx = fmax(mx, sc[p]);
        }
        if (sinks) mx = fmax(mx, sinks[h]);
        for (int p = lo; p < n_ctx; p++)
            sum += (sc[p] = exp(sc[p] - mx));
        if (sinks) sum += exp(sinks[h] - mx);
        for (int i = 0; i < c->hd; i++) {
            double o = 0;
            for (int p = lo; p < n_ctx; p++)
                o += sc[p] * vref[((size_t)s * MAXCTX + p) * row + (h / g) * c->hd + i];
            out[h * c->hd + i] = o / sum;
        }
    }
}

static void ref_attention(const attn_case *c, const float *q, const float *kref, const float *vref,
                          int s, int lo, int n_ctx, double *out) {
    ref_attention_sinks(c, q, kref, vref, s, lo, n_ctx, NULL, out);
}

/* Attention sinks (gpt-oss): one logit per query head in each softmax's denominator, alone and
 * with a sliding window; one sink far above the scores (its head's output shrinks towards 0),
 * one far below (no effect). Batch invariant. Every backend (CPU, cuda-emu) has them. */
static void attention_sinks(sol_backend *be, sol_kv *kv, const attn_case *c,
                            int32_t tables[SEQS][10], const float *kref, const float *vref,
                            const float *q, float *one) {
    enum { N = 3, W = 7 };
    const int tok_seq[N] = {0, 1, 2}, tok_ctx[N] = {37, 5, 16};
    float sinks[8];
    for (int h = 0; h < c->heads; h++)
        sinks[h] = h == 0 ? 9.0f : h == 1 ? -30.0f : 0.3f * (float)h - 0.5f;
    void *sd = sol_buf_alloc(be, sizeof sinks);
    assert_int_equal(sol_upload(be, sd, sinks, sizeof sinks), 0);
    sol_attn_seq per[N];
    int qrow = c->heads * c->hd;
    float *out = malloc(sizeof(float) * N * qrow);
    double *ref = malloc(sizeof(double) * N * qrow);
    float scale = 1.0f / sqrtf((float)c->hd);
    for (int w = 0; w <= W; w += W) {
        for (int t = 0; t < N; t++) {
            per[t] = (sol_attn_seq){tables[tok_seq[t]], tok_ctx[t]};
            int lo = w && tok_ctx[t] > w ? tok_ctx[t] - w : 0;
            ref_attention_sinks(c, q + t * qrow, kref, vref, tok_seq[t], lo, tok_ctx[t], sinks,
                                ref + t * qrow);
        }
        int rc = sol_paged_attention_sinks(be, kv, 1, q, out, N, c->heads, c->kv_heads, c->hd,
                                           scale, w, sd, per);
        assert_int_equal(rc, 0);
        double e = nmse(out, ref, (size_t)N * qrow);
        if (!(e < 1e-10)) fail_msg("sinks, window %d, hd=%d: nmse %g", w, c->hd, e);
        for (int t = 0; t < N; t++) {
            assert_int_equal(sol_paged_attention_sinks(be, kv, 1, q + t * qrow, one, 1, c->heads,
                                                       c->kv_heads, c->hd, scale, w, sd, &per[t]),
                             0);
            assert_memory_equal(one, out + t * qrow, sizeof(float) * qrow);
        }
    }
    sol_buf_free(be, sd);
    free(out), free(ref);
}

/* Sliding window: each token sees its last W positions only, and the block-table entries before
 * the window are never read (they are set to -1 here, as if freed). Batch invariant. */
static void attention_window(sol_backend *be, sol_kv *kv, const attn_case *c,
                             int32_t tables[SEQS][10], const float *kref, const float *vref,
                             const float *q, float *one) {
    enum { N = 4, W = 7 };
    const int tok_seq[N] = {0, 1, 0, 2}, tok_ctx[N] = {37, 5, 22, 16};
    int32_t freed[N][10];
    sol_attn_seq per[N];
    int qrow = c->heads * c->hd;
    float *out = malloc(sizeof(float) * N * qrow);
    double *ref = malloc(sizeof(double) * N * qrow);
    for (int t = 0; t < N; t++) {
        int lo = tok_ctx[t] > W ? tok_ctx[t] - W : 0;
        for (int i = 0; i < 10; i++)
            freed[t][i] = i < lo / BS ? -1 : tables[tok_seq[t]][i];
        per[t] = (sol_attn_seq){freed[t], tok_ctx[t]};
        ref_attention(c, q + t * qrow, kref, vref, tok_seq[t], lo, tok_ctx[t], ref + t * qrow);
    }
    float scale = 1.0f / sqrtf((float)c->hd);
    assert_int_equal(
        sol_paged_attention_swa(be, kv, 1, q, out, N, c->heads, c->kv_heads, c->hd, scale, W, per),
        0);
    double e = nmse(out, ref, (size_t)N * qrow);
    if (!(e < 1e-10)) fail_msg("window %d, hd=%d: nmse %g", W, c->hd, e);
    for (int t = 0; t < N; t++) {
        assert_int_equal(sol_paged_attention_swa(be, kv, 1, q + t * qrow, one, 1, c->heads,
                                                 c->kv_heads, c->hd, scale, W, &per[t]),
                         0);
        assert_memory_equal(one, out + t * qrow, sizeof(float) * qrow);
    }
    assert_int_equal(
        sol_paged_attention_swa(be, kv, 1, q, out, 1, c->heads, c->kv_heads, c->hd, scale, -1, per),
        -EINVAL);
    free(out), free(ref);
}

static void run_attention_case(const char *spec, const attn_case *c) {
    sol_backend *be = backend_for(spec, 2);
    sol_kv *kv = sol_kv_alloc(be, 2, NBLK, BS, c->kv_heads, c->hd, c->kv_type);
    assert_non_null(kv);
    /* Shuffled, interleaved physical blocks: sequence s owns blocks 27+s, 24+s, ..., s. */
    int32_t tables[SEQS][10];
    const int lens[SEQS] = {37, 5, 16};
    for (int s = 0; s < SEQS; s++)
        for (int i = 0; i < 10; i++)
            tables[s][i] = (int32_t)(27 - 3 * i + s);
    int row = c->kv_heads * c->hd, qrow = c->heads * c->hd;
    float *kref = malloc(sizeof(float) * SEQS * MAXCTX * row);
    float *vref = malloc(sizeof(float) * SEQS * MAXCTX * row);
    fill_cache(be, kv, c, tables, lens, kref, vref);
    /* A batch of 5 tokens from different sequences and positions. */
    enum { N = 5 };
    const int tok_seq[N] = {0, 1, 0, 2, 0}, tok_ctx[N] = {37, 5, 1, 16, 33};
    sol_attn_seq per[N];
    for (int t = 0; t < N; t++)
        per[t] = (sol_attn_seq){tables[tok_seq[t]], tok_ctx[t]};
    float *q = malloc(sizeof(float) * N * qrow), *out = malloc(sizeof(float) * N * qrow);
    double *ref = malloc(sizeof(double) * N * qrow);
    fill(q, (size_t)N * qrow);
    poison(out, (size_t)N * qrow);
    float scale = 1.0f / sqrtf((float)c->hd);
    assert_int_equal(
        sol_paged_attention(be, kv, 1, q, out, N, c->heads, c->kv_heads, c->hd, scale, per), 0);
    for (int t = 0; t < N; t++)
        ref_attention(c, q + t * qrow, kref, vref, tok_seq[t], 0, tok_ctx[t], ref + t * qrow);
    double e = nmse(out, ref, (size_t)N * qrow);
    if (!(e < 1e-10))
        fail_msg("%s attention h=%d kvh=%d hd=%d: nmse %g", spec, c->heads, c->kv_heads, c->hd, e);
    /* Each token alone gives the same bits as inside the batch. */
    float *one = malloc(sizeof(float) * qrow);
    for (int t = 0; t < N; t++) {
        assert_int_equal(sol_paged_attention(be, kv, 1, q + t * qrow, one, 1, c->heads, c->kv_heads,
                                             c->hd, scale, &per[t]),
                         0);
        assert_memory_equal(one, out + t * qrow, sizeof(float) * qrow);
    }
    /* Sequence 0 written to contiguous blocks 0..9 of another cache attends to the same bits. */
    int32_t contiguous[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    sol_kv *kv2 = sol_kv_alloc(be, 2, NBLK, BS, c->kv_heads, c->hd, c->kv_type);
    assert_non_null(kv2);
    int32_t slot_of[37];
    for (int p = 0; p < 37; p++)
        slot_of[p] = contiguous[p / BS] * BS + p % BS;
    assert_int_equal(sol_kv_write(be, kv2, 1, kref, vref, slot_of, 37), 0);
    sol_attn_seq c0 = {contiguous, 37};
    assert_int_equal(
        sol_paged_attention(be, kv2, 1, q, one, 1, c->heads, c->kv_heads, c->hd, scale, &c0), 0);
    assert_memory_equal(one, out, sizeof(float) * qrow);
    attention_window(be, kv, c, tables, kref, vref, q, one);
    attention_sinks(be, kv, c, tables, kref, vref, q, one);
    free(one), free(q), free(out), free(ref), free(kref), free(vref);
    sol_backend_free(be); /* frees both caches */
}

static void paged_attention(const char *spec) {
    const attn_case cases[] = {{4, 2, 64, SOL_DT_F32},
                               {8, 1, 128, SOL_DT_F16},
                               {4, 4, 64, SOL_DT_F16},
                               {2, 2, 36, SOL_DT_F32}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_attention_case(spec, &cases[i]);
}

static void test_paged_attention(void **state) {
    (void)state;
    for_each_target(paged_attention);
}

/* The llama.cpp-compatible mode's attention with sinks: within its F16 roundings of the query and
 * the probabilities of the double reference (a dominant sink on head 0, a negligible one on head
 * 1), and far from the reference without sinks, so the sink's term cannot be missing. */
static void test_sinks_llamacpp(void **state) {
    (void)state;
    sol_backend *be = backend_for("cpu:scalar+llamacpp", 1);
    const attn_case c = {4, 2, 64, SOL_DT_F16};
    sol_kv *kv = sol_kv_alloc(be, 2, NBLK, BS, c.kv_heads, c.hd, c.kv_type);
    int32_t tables[SEQS][10];
    const int lens[SEQS] = {37, 5, 16};
    for (int s = 0; s < SEQS; s++)
        for (int i = 0; i < 10; i++)
            tables[s][i] = (int32_t)(27 - 3 * i + s);
    int row = c.kv_heads * c.hd, qrow = c.heads * c.hd;
    float *kref = malloc(sizeof(float) * SEQS * MAXCTX * row);
    float *vref = malloc(sizeof(float) * SEQS * MAXCTX * row);
    fill_cache(be, kv, &c, tables, lens, kref, vref);
    float q[4 * 64], out[4 * 64], sinks[4] = {9.0f, -30.0f, -0.2f, 0.1f};
    double ref[4 * 64], plain[4 * 64];
    fill(q, (size_t)qrow);
    sol_attn_seq per = {tables[0], 37};
    assert_int_equal(sol_paged_attention_sinks(be, kv, 1, q, out, 1, c.heads, c.kv_heads, c.hd,
                                               1.0f / sqrtf((float)c.hd), 0, sinks, &per),
                     0);
    ref_attention_sinks(&c, q, kref, vref, 0, 0, 37, sinks, ref);
    ref_attention(&c, q, kref, vref, 0, 0, 37, plain);
    double e = nmse(out, ref, (size_t)qrow), e0 = nmse(out, plain, (size_t)qrow);
    if (!(e < 1e-5) || !(e0 > 1e-2)) fail_msg("llamacpp sinks: nmse %g, without sinks %g", e, e0);
    free(kref), free(vref);
    sol_backend_free(be);
}

/* Two layers of a 4-block cache of 2-token blocks (1 head of 8) with block 3 written. */
static sol_kv *kv_with_block3(sol_backend *be, sol_dtype dt) {
    sol_kv *kv = sol_kv_alloc(be, 2, 4, 2, 1, 8, dt);
    assert_non_null(kv);
    float k[2 * 8], v[2 * 8];
    fill(k, 16), fill(v, 16);
    const int32_t slots[2] = {6, 7}; /* block 3 */
    for (int l = 0; l < 2; l++)
        assert_int_equal(sol_kv_write(be, kv, l, k, v, slots, 2), 0);
    return kv;
}

/* Attention over block `x` alone reads the same bits as over block `y`, in both layers. */
static void same_block(sol_backend *be, sol_kv *kv, int32_t x, int32_t y) {
    float q[8], a[8], b[8];
    fill(q, 8);
    sol_attn_seq sx = {&x, 2}, sy = {&y, 2};
    for (int l = 0; l < 2; l++) {
        assert_int_equal(sol_paged_attention(be, kv, l, q, a, 1, 1, 1, 8, 0.3f, &sx), 0);
        assert_int_equal(sol_paged_attention(be, kv, l, q, b, 1, 1, 1, 8, 0.3f, &sy), 0);
        assert_memory_equal(a, b, sizeof(a));
    }
}

static void kv_copy_blocks(const char *spec) {
    sol_backend *be = backend_for(spec, 1);
    sol_kv *kv = kv_with_block3(be, SOL_DT_F32);
    const int32_t src = 3, dst = 1;
    assert_int_equal(sol_kv_copy_blocks(be, kv, &src, &dst, 1), 0);
    same_block(be, kv, src, dst);
    sol_backend_free(be);
}

static void test_kv_copy_blocks(void **state) {
    (void)state;
    for_each_target(kv_copy_blocks);
}

/* The second KV tier's copies: a block out to host memory (the backend's own where it has some)
 * and back into another block reads as the original; host bytes are every layer's K and V. */
static void kv_host_io(const char *spec) {
    sol_backend *be = backend_for(spec, 1);
    if (!be->ops->kv_host_io) {
        sol_backend_free(be);
        return;
    }
    sol_kv *kv = kv_with_block3(be, SOL_DT_F16);
    size_t bytes = be->ops->kv_host_bytes(be, kv);
    assert_int_equal(bytes, 2 * 2 * 2 * 8 * 2); /* layers x (K, V) x slots x head_dim x f16 */
    void *host = be->ops->kv_host_alloc ? be->ops->kv_host_alloc(be, bytes) : malloc(bytes);
    assert_non_null(host);
    assert_int_equal(sol_kv_host_io(be, kv, 3, host, 1), 0);
    assert_int_equal(sol_kv_host_io(be, kv, 0, host, 0), 0);
    same_block(be, kv, 3, 0);
    assert_int_equal(sol_kv_host_io(be, kv, 4, host, 1), -EINVAL);
    assert_non_null(strstr(be->err.msg, "block 4"));
    if (be->ops->kv_host_alloc)
        be->ops->kv_host_free(be, host);
    else
        free(host);
    sol_backend_free(be);
}

static void test_kv_host_io(void **state) {
    (void)state;
    for_each_target(kv_host_io);
}

static void bad_inputs(const char *spec) {
    sol_backend *be = backend_for(spec, 1);
    sol_kv *kv = sol_kv_alloc(be, 1, 2, 4, 1, 8, SOL_DT_F16);
    assert_non_null(kv);
    float k[8] = {0}, out[8];
    int32_t slot = 8;
    assert_int_equal(sol_kv_write(be, kv, 0, k, k, &slot, 1), -EINVAL);
    assert_non_null(strstr(be->err.msg, "slot 8"));
    int32_t table[2] = {0, 5};
    sol_attn_seq s = {table, 6};
    assert_int_equal(sol_paged_attention(be, kv, 0, k, out, 1, 1, 1, 8, 1.0f, &s), -EINVAL);
    assert_non_null(strstr(be->err.msg, "block_table[1]=5"));
    assert_int_equal(sol_paged_attention(be, kv, 0, k, out, 1, 3, 2, 8, 1.0f, &s), -EINVAL);
    assert_null(sol_kv_alloc(be, 1, 2, 4, 1, 8, SOL_DT_Q4_0));
    float w[64];
    sol_weight bad = {SOL_DT_Q4_0, 2, 33, w, 18, 0, 0};
    assert_int_equal(sol_matmul(be, &bad, k, out, 1), -EINVAL);
    assert_non_null(strstr(be->err.msg, "multiple of 32"));
    bad = (sol_weight){(sol_dtype)99, 2, 32, w, 18, 0, 0};
    assert_int_equal(sol_matmul(be, &bad, k, out, 1), -ENOTSUP);
    sol_backend_free(be);
}

static void test_bad_inputs(void **state) {
    (void)state;
    for_each_target(bad_inputs);
}

/* ---- the registry ---- */

static sol_backend *try_new(const char *spec, sol_err *e) {
    sol_err_clear(e);
    return sol_backend_new(spec, NULL, e);
}

static void test_registry(void **state) {
    (void)state;
    const sol_backend_entry *list;
    int n = sol_backend_registry(&list);
    char names[128] = "";
    for (int i = 0; i < n; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                 list[i].name);
    char listed[128];
    sol_backend_names(listed, sizeof listed);
    assert_string_equal(names, listed); /* the message list is the table's */
    assert_string_equal(list[0].name, "cpu");
    char vars[MAX_TARGETS][SOL_BACKEND_VARIANT_MAX];
    assert_true(list[0].variants(vars, MAX_TARGETS) >= 1);
    assert_string_equal(vars[0], "scalar");
    /* The default and a named path both build; the backend reports its name. */
    sol_err e = {0};
    sol_backend *be = try_new("cpu", &e);
    assert_non_null(be);
    assert_string_equal(sol_backend_name(be), "cpu");
    sol_backend_free(be);
    assert_non_null(be = try_new(NULL, &e)); /* NULL: cpu */
    sol_backend_free(be);
    /* Unknown names, variants and ISAs are refused with the reason. */
    assert_null(try_new("tpu", &e));
    assert_int_equal(e.code, -EINVAL);
    assert_non_null(strstr(e.msg, "unknown backend 'tpu': this build has cpu, cuda"));
    assert_null(try_new("cpu:neon", &e));
    assert_non_null(strstr(e.msg, "backend cpu:neon: cpu:neon: 'neon' is neither a kernel ISA "
                                  "(scalar, avx2, avx512) nor a mode"));
    setenv("SOL_CPU_ISA", "neon", 1);
    assert_null(try_new("cpu", &e));
    assert_non_null(strstr(e.msg, "SOL_CPU_ISA=neon: expected scalar, avx2 or avx512"));
    unsetenv("SOL_CPU_ISA");
    assert_null(sol_backend_new("cpu", &(sol_backend_opts){.threads = -1}, &e));
    assert_non_null(strstr(e.msg, "n_threads must be >= 0"));
    /* cuda is always listed; without a device (or without the toolkit) it says why. */
    for (int i = 0; i < n; i++) {
        if (strcmp(list[i].name, "cuda") != 0) continue;
        if (list[i].variants(vars, MAX_TARGETS) > 0) continue; /* a GPU: the op cases run it */
        assert_null(try_new("cuda", &e));
        /* cuda_loader.c: no driver, a missing library, no device, or a build without CUDA */
        assert_true(strstr(e.msg, "no NVIDIA driver") || strstr(e.msg, "was not found") ||
                    strstr(e.msg, "no CUDA device") || strstr(e.msg, "no CUDA backend"));
        assert_non_null(strstr(e.msg, "backend cuda: "));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_vs_reference),
        cmocka_unit_test(test_matmul_batch_invariance),
        cmocka_unit_test(test_matmul_many),
        cmocka_unit_test(test_q4_0_repack),
        cmocka_unit_test(test_q8_0_repack),
        cmocka_unit_test(test_kquant_paths_agree),
        cmocka_unit_test(test_kquant_llamacpp_order),
        cmocka_unit_test(test_rmsnorm_silu_add),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_moe_combine),
        cmocka_unit_test(test_argmax_rows),
        cmocka_unit_test(test_embed),
        cmocka_unit_test(test_paged_attention),
        cmocka_unit_test(test_sinks_llamacpp),
        cmocka_unit_test(test_kv_copy_blocks),
        cmocka_unit_test(test_kv_host_io),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_registry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
