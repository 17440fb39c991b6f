/* Promise: the CUDA backend, used as a GPU must be used (activations in buf_alloc buffers that
 * upload/download fill and read, weights through weight_prepare, index arrays from the host),
 * computes every op as the CPU backend does, its prefill GEMM within F16 rounding (or, with
 * SOL_CUDA_GEMM=int8, within the CPU's own float rounding), its fused ops
 * (norm_matmul_many, glu_matmul_add) as the unfused sequence, bit for bit, and refuses a
 * host pointer where a device buffer belongs. CI runs it on "cuda-emu" (this very backend code
 * on the emulated runtime); tests/gpu/run.sh runs it on a GPU with SOL_TEST_CUDA_SPEC=cuda. */
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
#include "dtype.h"

static uint64_t rng = 0x243F6A8885A308D3ull;

static float rnd_f(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(uint32_t)(rng >> 16) / 4294967296.0 * 2.0 - 1.0);
}

static float *rnd_vec(size_t n) {
    float *p = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        p[i] = rnd_f();
    return p;
}

static const char *spec(void) {
    const char *s = getenv("SOL_TEST_CUDA_SPEC");
    return s && *s ? s : "cuda-emu";
}

static sol_backend *open_be(const char *name, int batch_invariant) {
    sol_err e = {0};
    sol_backend *be =
        sol_backend_new(name, &(sol_backend_opts){.batch_invariant = batch_invariant}, &e);
    if (!be) fail_msg("backend %s: %s", name, e.msg);
    return be;
}

/* A device buffer holding a copy of host (bytes), or uninitialised when host is NULL. */
static void *put(sol_backend *be, const void *host, size_t bytes) {
    void *d = sol_buf_alloc(be, bytes);
    assert_non_null(d);
    if (host) assert_int_equal(sol_upload(be, d, host, bytes), 0);
    return d;
}

static float *get(sol_backend *be, const void *dev, size_t n) {
    float *h = malloc(sizeof(float) * n);
    assert_int_equal(sol_synchronize(be), 0);
    assert_int_equal(sol_download(be, h, dev, sizeof(float) * n), 0);
    return h;
}

static double rel_l2(const float *a, const float *b, size_t n) {
    double e = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return sqrt(e / (r > 0 ? r : 1));
}

static void expect_close(const char *what, const float *got, const float *want, size_t n,
                         double tol) {
    double d = rel_l2(got, want, n);
    print_message("  %-34s relative L2 %.2e (limit %.0e)\n", what, d, tol);
    if (!(d <= tol)) fail_msg("%s on %s: relative L2 %g (limit %g)", what, spec(), d, tol);
}

static const sol_dtype k_types[] = {SOL_DT_F32,  SOL_DT_F16,  SOL_DT_BF16, SOL_DT_Q8_0,
                                    SOL_DT_Q4_0, SOL_DT_Q5_0, SOL_DT_Q5_1, SOL_DT_Q4_K,
                                    SOL_DT_Q5_K, SOL_DT_Q6_K, SOL_DT_MXFP4};

/* Rows quantized from random floats (the K-quant quantizers included); Q5_0/Q5_1, which Sol
 * does not write, as random quants under small scales. Host memory. */
static void *make_rows(sol_dtype t, int64_t rows, int64_t cols) {
    size_t rb = sol_dtype_row_bytes(t, cols);
    unsigned char *w = malloc(rb * (size_t)rows);
    if (t == SOL_DT_Q5_0 || t == SOL_DT_Q5_1) {
        size_t bb = sol_dtype_block_bytes(t);
        for (size_t i = 0; i < rb * (size_t)rows; i++)
            w[i] = (unsigned char)(rnd_f() * 128.0f + 128.0f);
        for (size_t b = 0; b < rb * (size_t)rows / bb; b++) {
            uint16_t d = sol_f32_to_f16(0.01f + 0.005f * rnd_f()),
                     m = sol_f32_to_f16(0.01f * rnd_f());
            memcpy(w + b * bb, &d, 2);
            if (t == SOL_DT_Q5_1) memcpy(w + b * bb + 2, &m, 2);
        }
        return w;
    }
    for (int64_t r = 0; r < rows; r++) {
        float *src = rnd_vec((size_t)cols);
        assert_int_equal(sol_quantize_row(t, src, w + (size_t)r * rb, cols), 0);
        free(src);
    }
    return w;
}

/* y = x W^T in double from the dequantized rows: what the F16 GEMM approximates. */
static void exact_matmul(sol_dtype t, const void *rows, int64_t M, int64_t K, const float *x, int n,
                         float *y) {
    size_t rb = sol_dtype_row_bytes(t, K);
    float *wr = malloc(sizeof(float) * (size_t)K);
    for (int64_t m = 0; m < M; m++) {
        sol_dequantize_row(t, (const char *)rows + (size_t)m * rb, wr, K);
        for (int i = 0; i < n; i++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc += (double)wr[k] * x[(size_t)i * K + k];
            y[(size_t)i * M + m] = (float)acc;
        }
    }
    free(wr);
}

/* The types whose batches take the int8 GEMMs (k_mmq.cu) under SOL_CUDA_GEMM=int8: every
 * quantized type, against the GEMV's activations (the backend asks mmq_act; this is the test's
 * expectation). */
static int int8_gemm_type(sol_dtype t) {
    return t != SOL_DT_F32 && t != SOL_DT_F16 && t != SOL_DT_BF16;
}

/* Matmul of one type and n on the device (int8: a backend opened with SOL_CUDA_GEMM=int8). GEMV
 * sizes (n <= 16) quantize x as the CPU backend does: within 1e-5 of it, and so do the int8
 * GEMMs (n > 16, int8_gemm_type). The F16 GEMM (n > 16, the other types but F32, and every
 * quantized one by default) rounds x and the weights to F16 and is checked against the exact
 * product: 1e-3 (measured ~2e-4; the CPU's Q8 activations are ~4e-3 from it); BF16 weights take
 * x rounded to BF16 (8 significant bits, not 11): 4e-3. */
static void check_matmul(sol_backend *cpu, sol_backend *be, int int8, sol_dtype t, int64_t M,
                         int64_t K, int n) {
    void *rows = make_rows(t, M, K);
    size_t rb = sol_dtype_row_bytes(t, K), bytes = rb * (size_t)M;
    void *copy = malloc(bytes);
    memcpy(copy, rows, bytes);
    sol_weight wc = {t, M, K, rows, rb, 0, 0}, wd = {t, M, K, copy, rb, 0, 0};
    float *x = rnd_vec((size_t)n * K), *want = malloc(sizeof(float) * (size_t)n * M);
    int gemm = n > 16 && t != SOL_DT_F32 && !(int8 && int8_gemm_type(t));
    if (gemm) {
        exact_matmul(t, rows, M, K, x, n, want);
    } else {
        assert_int_equal(sol_weight_prepare(cpu, &wc), 0);
        assert_int_equal(sol_matmul(cpu, &wc, x, want, n), 0);
    }
    assert_int_equal(sol_weight_prepare(be, &wd), 0);
    float *xd = put(be, x, sizeof(float) * (size_t)n * K);
    float *yd = put(be, NULL, sizeof(float) * (size_t)n * M);
    assert_int_equal(sol_matmul(be, &wd, xd, yd, n), 0);
    float *got = get(be, yd, (size_t)n * M);
    char what[96];
    snprintf(what, sizeof what, "matmul %s %lldx%lld n=%d", sol_dtype_name(t), (long long)M,
             (long long)K, n);
    double tol = !gemm ? 1e-5 : t == SOL_DT_BF16 ? 4e-3 : 1e-3;
    expect_close(what, got, want, (size_t)n * M, tol);
    sol_buf_free(be, xd), sol_buf_free(be, yd);
    free(x), free(want), free(got), free(rows), free(copy);
}

static void test_matmul(void **state) {
    (void)state;
    sol_backend *cpu = open_be("cpu", 0), *be = open_be(spec(), 0);
    setenv("SOL_CUDA_GEMM", "int8", 1); /* read when a backend opens */
    sol_backend *b8 = open_be(spec(), 0);
    unsetenv("SOL_CUDA_GEMM");
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++) {
        int64_t K = sol_dtype_block_elems(k_types[i]) == 256 ? 512 : 128;
        check_matmul(cpu, be, 0, k_types[i], 37, K, 1);
        check_matmul(cpu, be, 0, k_types[i], 37, K, 16);
        check_matmul(cpu, be, 0, k_types[i], 300, K, 40); /* the GEMM, several weight tiles */
        check_matmul(cpu, b8, 1, k_types[i], 300, K, 40);
    }
    sol_backend_free(b8);
    sol_backend_free(cpu);
    sol_backend_free(be);
}

/* "fused prologues: N norm+quantize, M glu+quantize, A attention+quantize" from the backend's
 * stats line (att: NULL when not wanted). */
static void fused_counts3(sol_backend *be, unsigned long *normq, unsigned long *glu,
                          unsigned long *att) {
    char buf[1024];
    unsigned long a;
    assert_int_equal(sol_backend_stats(be, buf, sizeof buf), 0);
    const char *p = strstr(buf, "fused prologues: ");
    if (!p ||
        sscanf(p, "fused prologues: %lu norm+quantize, %lu glu+quantize, %lu attention+quantize",
               normq, glu, att ? att : &a) != 3)
        fail_msg("unexpected stats line: %s", buf);
}

static void fused_counts(sol_backend *be, unsigned long *normq, unsigned long *glu) {
    fused_counts3(be, normq, glu, NULL);
}

/* The fused ops give the unfused sequence's bits on the device: norm_matmul_many (the RMSNorm
 * made by the first quantize launch, a second activation kind requantized from xn, biases in
 * the GEMVs' store) against rmsnorm + matmul_many + add per row, and glu_matmul_add (the gated
 * product made where it is quantized) against silu_mul/gelu_mul + matmul_add. GEMV sizes (1, 5
 * tokens) and the GEMM's (40: the norm or the gated product made where x is rounded to half,
 * once per group; one broadcast add per bias; int8: the gated product made where it is quantized,
 * the norm a launch of its own); F32 weights take the unfused path inside the op. The fused
 * launches are counted where they must happen. */
static void fused_case(sol_backend *be, sol_dtype t, int n, int int8) {
    enum { M = 40, M2 = 24, K = 512 };
    void *rows[3] = {make_rows(t, M, K), make_rows(t, M, K), make_rows(SOL_DT_Q8_0, M2, K)};
    sol_weight w[3] = {{t, M, K, rows[0], sol_dtype_row_bytes(t, K), 0, 0},
                       {t, M, K, rows[1], sol_dtype_row_bytes(t, K), 0, 0},
                       {SOL_DT_Q8_0, M2, K, rows[2], sol_dtype_row_bytes(SOL_DT_Q8_0, K), 0, 0}};
    for (int i = 0; i < 3; i++)
        assert_int_equal(sol_weight_prepare(be, &w[i]), 0);
    const sol_weight *ws[3] = {&w[0], &w[1], &w[2]};
    float *x = rnd_vec((size_t)n * K), *g = rnd_vec((size_t)n * K), *u = rnd_vec((size_t)n * K);
    float *nw = rnd_vec(K), *b0 = rnd_vec(M), *b2 = rnd_vec(M2), *y0 = rnd_vec((size_t)n * M);
    float *xd = put(be, x, sizeof(float) * n * K), *nd = put(be, nw, sizeof(float) * K);
    float *gd = put(be, g, sizeof(float) * n * K), *ud = put(be, u, sizeof(float) * n * K);
    float *bd[3] = {put(be, b0, sizeof(float) * M), NULL, put(be, b2, sizeof(float) * M2)};
    float *xn = put(be, NULL, sizeof(float) * n * K), *tmp = put(be, NULL, sizeof(float) * n * K);
    float *ya[3], *yb[3];
    for (int i = 0; i < 3; i++) {
        ya[i] = put(be, NULL, sizeof(float) * n * w[i].rows);
        yb[i] = put(be, NULL, sizeof(float) * n * w[i].rows);
    }
    unsigned long nq0, gl0, nq1, gl1;
    fused_counts(be, &nq0, &gl0);
    /* unfused */
    assert_int_equal(sol_rmsnorm(be, xd, nd, tmp, n, K, 1e-5f), 0);
    assert_int_equal(sol_matmul_many(be, ws, ya, 3, tmp, n), 0);
    for (int i = 0; i < 3; i++)
        for (int r = 0; bd[i] && r < n; r++) {
            float *y = ya[i] + (size_t)r * w[i].rows;
            assert_int_equal(sol_add(be, y, bd[i], y, w[i].rows), 0);
        }
    /* fused */
    assert_int_equal(
        sol_norm_matmul_many(be, xd, nd, 1e-5f, xn, ws, (const float *const *)bd, yb, 3, n), 0);
    char what[96];
    for (int i = 0; i < 3; i++) {
        float *a = get(be, ya[i], (size_t)n * w[i].rows),
              *b = get(be, yb[i], (size_t)n * w[i].rows);
        if (memcmp(a, b, sizeof(float) * n * w[i].rows))
            fail_msg("norm_matmul_many %s n=%d weight %d: not the unfused bits (%g apart)",
                     sol_dtype_name(t), n, i, rel_l2(b, a, (size_t)n * w[i].rows));
        free(a), free(b);
    }
    for (int gelu = 0; gelu < 2; gelu++) {
        assert_int_equal(sol_upload(be, ya[0], y0, sizeof(float) * n * M), 0);
        assert_int_equal(sol_upload(be, yb[0], y0, sizeof(float) * n * M), 0);
        assert_int_equal(gelu ? sol_gelu_mul(be, gd, ud, tmp, (int64_t)n * K)
                              : sol_silu_mul(be, gd, ud, tmp, (int64_t)n * K),
                         0);
        assert_int_equal(sol_matmul_add(be, &w[0], tmp, ya[0], xn, n), 0);
        assert_int_equal(sol_glu_matmul_add(be, &w[0], gd, ud, gelu, tmp, yb[0], xn, n), 0);
        float *a = get(be, ya[0], (size_t)n * M), *b = get(be, yb[0], (size_t)n * M);
        snprintf(what, sizeof what, "glu_matmul_add %s n=%d gelu=%d", sol_dtype_name(t), n, gelu);
        if (memcmp(a, b, sizeof(float) * n * M))
            fail_msg("%s: not the unfused bits (%g apart)", what, rel_l2(b, a, (size_t)n * M));
        free(a), free(b);
    }
    fused_counts(be, &nq1, &gl1);
    int quant = t != SOL_DT_F32 && t != SOL_DT_F16, gemv = n <= 16;
    print_message("  fused %s n=%d%s: %lu norm+quantize, %lu glu+quantize launches\n",
                  sol_dtype_name(t), n, int8 ? " (int8)" : "", nq1 - nq0, gl1 - gl0);
    /* GEMV (<= 16 tokens): the norm and the gated product made by the quantize launch, once per
     * call when weight 0 is quantized (float: plain rmsnorm); GEMM: made by the half conversion
     * (F16 and quantized weights; F32 stays on the GEMV kernels, unfused) */
    unsigned long made = gemv ? (unsigned long)quant : (unsigned long)(t != SOL_DT_F32);
    assert_int_equal(nq1 - nq0, int8 && !gemv ? 0 : made);
    assert_int_equal(gl1 - gl0, made * 2);
    for (int i = 0; i < 3; i++) {
        sol_buf_free(be, ya[i]), sol_buf_free(be, yb[i]);
        if (bd[i]) sol_buf_free(be, bd[i]);
        free(rows[i]);
    }
    sol_buf_free(be, xd), sol_buf_free(be, nd), sol_buf_free(be, gd), sol_buf_free(be, ud);
    sol_buf_free(be, xn), sol_buf_free(be, tmp);
    free(x), free(g), free(u), free(nw), free(b0), free(b2), free(y0);
}

/* "norm tails: N GEMVs normalized and quantized their output, M reads of it". */
static void tail_counts(sol_backend *be, unsigned long *made, unsigned long *read) {
    char buf[1024];
    assert_int_equal(sol_backend_stats(be, buf, sizeof buf), 0);
    const char *p = strstr(buf, "norm tails: ");
    if (!p || sscanf(p, "norm tails: %lu GEMVs normalized and quantized their output, %lu reads",
                     made, read) != 2)
        fail_msg("unexpected stats line: %s", buf);
}

/* next_input's norm tail (the o and down projections): a matmul_add (glu: glu_matmul_add) told
 * that its output is next read by norm_matmul_many(y, norm, eps, xn, {wn[, a Q8_0 weight]})
 * makes that norm and wn's activations in its GEMV's last block, and that norm_matmul_many reads
 * them: the same bits (y, both outputs; xn where float weights read it) as with no hint. The tail
 * writes xn only for float weights, so a list of two quantized kinds (two: the Q8_0 weight beside
 * a K-quant) makes its own norm: made, not read. Modes: 0 the hint as used; 1 an op between the
 * hint and the matmul (the hint is the next op's only: no tail); 2 the reading op with another
 * eps than the hint's (made, not read). Counted where they happen; made for one token only (5
 * tokens: the launch, which spreads the rows over blocks; 40: the GEMM): none. */
static void tail_case(sol_backend *be, sol_dtype wt, sol_dtype nt, int n, int glu, int two,
                      int mode) {
    enum { D = 512, K = 256, MN = 64, M2 = 32 };
    void *rows[3] = {make_rows(wt, D, K), make_rows(nt, MN, D), make_rows(SOL_DT_Q8_0, M2, D)};
    sol_weight w = {wt, D, K, rows[0], sol_dtype_row_bytes(wt, K), 0, 0};
    sol_weight wn[2] = {{nt, MN, D, rows[1], sol_dtype_row_bytes(nt, D), 0, 0},
                        {SOL_DT_Q8_0, M2, D, rows[2], sol_dtype_row_bytes(SOL_DT_Q8_0, D), 0, 0}};
    assert_int_equal(sol_weight_prepare(be, &w), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(sol_weight_prepare(be, &wn[i]), 0);
    const sol_weight *ws[2] = {&wn[0], &wn[1]};
    float *x = rnd_vec((size_t)n * K), *u = rnd_vec((size_t)n * K), *y0 = rnd_vec((size_t)n * D);
    float *g = rnd_vec(D), *xd = put(be, x, sizeof(float) * n * K);
    float *ud = put(be, u, sizeof(float) * n * K), *gd = put(be, g, sizeof(float) * D);
    float *tmp = put(be, NULL, sizeof(float) * n * K), *y[2], *xn[2], *z[2][2];
    unsigned long m0, r0, m1, r1;
    tail_counts(be, &m0, &r0);
    for (int pass = 0; pass < 2; pass++) { /* pass 0: no hint, the reference */
        y[pass] = put(be, y0, sizeof(float) * n * D);
        xn[pass] = put(be, NULL, sizeof(float) * n * D);
        for (int i = 0; i < 2; i++)
            z[pass][i] = put(be, NULL, sizeof(float) * n * ws[i]->rows);
        if (pass)
            assert_int_equal(
                sol_next_input(be,
                               &(sol_next_in){.w = &wn[0], .norm = gd, .eps = 1e-5f, .xn = xn[1]}),
                0);
        if (pass && mode == 1) assert_int_equal(sol_add(be, tmp, tmp, tmp, (int64_t)n * K), 0);
        assert_int_equal(glu ? sol_glu_matmul_add(be, &w, xd, ud, 0, tmp, y[pass], NULL, n)
                             : sol_matmul_add(be, &w, xd, y[pass], NULL, n),
                         0);
        float eps = mode == 2 ? 1e-6f : 1e-5f;
        assert_int_equal(
            sol_norm_matmul_many(be, y[pass], gd, eps, xn[pass], ws, NULL, z[pass], 1 + two, n), 0);
    }
    tail_counts(be, &m1, &r1);
    int flt = nt == SOL_DT_F16 || nt == SOL_DT_F32;
    int one_kind = !two || nt == SOL_DT_Q4_0 || nt == SOL_DT_Q8_0;
    /* the tail is one block's work: taken for a single token only (SOL_CUDA_NORM_TAIL_MAX_TOKENS)
     */
    int gemv = n <= 16, made = n == 1 && mode != 1, read = made && mode == 0 && (one_kind || flt);
    assert_int_equal(m1 - m0, made);
    assert_int_equal(r1 - r0, read);
    const float *pairs[4][2] = {
        {y[0], y[1]}, {xn[0], xn[1]}, {z[0][0], z[1][0]}, {z[0][1], z[1][1]}};
    const size_t lens[4] = {(size_t)n * D, (size_t)n * D, (size_t)n * MN, (size_t)n * M2};
    static const char *names[4] = {"y", "xn", "the next weight's output", "the Q8_0 one's"};
    for (int i = 0; i < 3 + two; i++) {
        if (i == 1 && (!gemv || !flt)) continue; /* xn: scratch, unless float weights read it */
        float *a = get(be, pairs[i][0], lens[i]), *b = get(be, pairs[i][1], lens[i]);
        if (memcmp(a, b, sizeof(float) * lens[i]))
            fail_msg("norm tail %s -> %s n=%d glu=%d mode %d: %s differs (%g apart)",
                     sol_dtype_name(wt), sol_dtype_name(nt), n, glu, mode, names[i],
                     rel_l2(b, a, lens[i]));
        free(a), free(b);
    }
    for (int pass = 0; pass < 2; pass++) {
        sol_buf_free(be, y[pass]), sol_buf_free(be, xn[pass]);
        sol_buf_free(be, z[pass][0]), sol_buf_free(be, z[pass][1]);
    }
    sol_buf_free(be, xd), sol_buf_free(be, ud), sol_buf_free(be, gd), sol_buf_free(be, tmp);
    for (int i = 0; i < 3; i++)
        free(rows[i]);
    free(x), free(u), free(y0), free(g);
}

/* "gated-product blocks: N gate/up GEMVs made them, M reads". */
static void glu_end_counts(sol_backend *be, unsigned long *made, unsigned long *read) {
    char buf[1024];
    assert_int_equal(sol_backend_stats(be, buf, sizeof buf), 0);
    const char *p = strstr(buf, "gated-product blocks: ");
    if (!p ||
        sscanf(p, "gated-product blocks: %lu gate/up GEMVs made them, %lu reads", made, read) != 2)
        fail_msg("unexpected stats line: %s", buf);
}

/* next_input's glu hint: the gate/up norm_matmul_many told that its outputs are next read as
 * act(gate) * up by the down weight makes those activations in its GEMV (the warp completing
 * each block of rows), and the glu_matmul_add right after reads them: the same bits (gate, up,
 * the down's sum added to y) as with no hint, SiLU and GELU; made and read counted where they
 * happen: not for a float down weight, nor at 40 tokens. Modes: 1 an op between the two; 2 the
 * hint names the other activation (SiLU for GELU): made, not read, the bits stay. */
static void glu_end_case(sol_backend *be, sol_dtype gt, sol_dtype dt, int n, int gelu, int mode) {
    enum { D = 256, F = 512 };
    void *rows[3] = {make_rows(gt, F, D), make_rows(gt, F, D), make_rows(dt, D, F)};
    sol_weight wg = {gt, F, D, rows[0], sol_dtype_row_bytes(gt, D), 0, 0};
    sol_weight wu = {gt, F, D, rows[1], sol_dtype_row_bytes(gt, D), 0, 0};
    sol_weight wd = {dt, D, F, rows[2], sol_dtype_row_bytes(dt, F), 0, 0};
    assert_int_equal(sol_weight_prepare(be, &wg), 0);
    assert_int_equal(sol_weight_prepare(be, &wu), 0);
    assert_int_equal(sol_weight_prepare(be, &wd), 0);
    const sol_weight *ws[2] = {&wg, &wu};
    float *x = rnd_vec((size_t)n * D), *g = rnd_vec(D), *y0 = rnd_vec((size_t)n * D);
    float *xd = put(be, x, sizeof(float) * n * D), *gd = put(be, g, sizeof(float) * D);
    float *xn = put(be, NULL, sizeof(float) * n * D), *tmp = put(be, NULL, sizeof(float) * n * F);
    float *gate[2], *up[2], *y[2];
    unsigned long m0, r0, m1, r1;
    glu_end_counts(be, &m0, &r0);
    for (int pass = 0; pass < 2; pass++) { /* pass 0: no hint, the reference */
        gate[pass] = put(be, NULL, sizeof(float) * n * F);
        up[pass] = put(be, NULL, sizeof(float) * n * F);
        y[pass] = put(be, y0, sizeof(float) * n * D);
        if (pass)
            assert_int_equal(
                sol_next_input(be,
                               &(sol_next_in){.w = &wd, .glu = mode == 2 ? 2 - gelu : 1 + gelu}),
                0);
        assert_int_equal(sol_norm_matmul_many(be, xd, gd, 1e-5f, xn, ws, NULL,
                                              (float *[]){gate[pass], up[pass]}, 2, n),
                         0);
        if (pass && mode == 1) assert_int_equal(sol_add(be, xn, xn, xn, (int64_t)n * D), 0);
        assert_int_equal(
            sol_glu_matmul_add(be, &wd, gate[pass], up[pass], gelu, tmp, y[pass], NULL, n), 0);
    }
    glu_end_counts(be, &m1, &r1);
    int made = n <= 16 && dt != SOL_DT_F16 && dt != SOL_DT_F32, read = made && !mode;
    assert_int_equal(m1 - m0, made);
    assert_int_equal(r1 - r0, read);
    const float *pairs[3][2] = {{gate[0], gate[1]}, {up[0], up[1]}, {y[0], y[1]}};
    const size_t lens[3] = {(size_t)n * F, (size_t)n * F, (size_t)n * D};
    for (int i = 0; i < 3; i++) {
        float *a = get(be, pairs[i][0], lens[i]), *b = get(be, pairs[i][1], lens[i]);
        if (memcmp(a, b, sizeof(float) * lens[i]))
            fail_msg("glu end %s -> %s n=%d gelu=%d: %s differs (%g apart)", sol_dtype_name(gt),
                     sol_dtype_name(dt), n, gelu,
                     i == 2 ? "y"
                     : i    ? "up"
                            : "gate",
                     rel_l2(b, a, lens[i]));
        free(a), free(b);
    }
    for (int pass = 0; pass < 2; pass++)
        sol_buf_free(be, gate[pass]), sol_buf_free(be, up[pass]), sol_buf_free(be, y[pass]);
    sol_buf_free(be, xd), sol_buf_free(be, gd), sol_buf_free(be, xn), sol_buf_free(be, tmp);
    for (int i = 0; i < 3; i++)
        free(rows[i]);
    free(x), free(g), free(y0);
}

static void test_glu_ends(void **state) {
    (void)state;
    sol_backend *be = open_be(spec(), 0);
    for (int gelu = 0; gelu < 2; gelu++) {
        glu_end_case(be, SOL_DT_Q4_K, SOL_DT_Q6_K, 1, gelu, 0); /* Q4_K_M: Q8_K */
        glu_end_case(be, SOL_DT_Q4_0, SOL_DT_Q4_0, 5, gelu, 0); /* Q8_0 */
    }
    glu_end_case(be, SOL_DT_Q4_K, SOL_DT_Q4_K, 3, 0, 1);
    glu_end_case(be, SOL_DT_Q4_K, SOL_DT_Q4_K, 3, 1, 2);
    glu_end_case(be, SOL_DT_Q4_K, SOL_DT_F16, 3, 0, 0);
    glu_end_case(be, SOL_DT_Q4_K, SOL_DT_Q4_K, 40, 0, 0);
    sol_backend_free(be);
}

static void test_norm_tails(void **state) {
    (void)state;
    sol_backend *be = open_be(spec(), 0);
    /* Q4_K_M's o (Q4_K) -> gate (Q4_K: Q8_K), Q4_0 down -> q (Q4_0: Q8_0), Q6_K down -> the
     * head (Q6_K: Q8_K), F16 -> F16 (the norm only: xn) */
    const sol_dtype pairs[][2] = {{SOL_DT_Q4_K, SOL_DT_Q4_K},
                                  {SOL_DT_Q4_0, SOL_DT_Q4_0},
                                  {SOL_DT_Q6_K, SOL_DT_Q6_K},
                                  {SOL_DT_F16, SOL_DT_F16}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        for (int n = 1; n <= 5; n += 4)
            for (int glu = 0; glu < 2; glu++)
                tail_case(be, pairs[i][0], pairs[i][1], n, glu, glu, 0);
    tail_case(be, SOL_DT_Q4_K, SOL_DT_Q4_K, 1, 0, 0, 1);
    tail_case(be, SOL_DT_Q4_K, SOL_DT_Q4_K, 1, 1, 0, 2);
    tail_case(be, SOL_DT_Q4_0, SOL_DT_Q4_K, 40, 0, 1, 0);
    sol_backend_free(be);
}

static void test_fused_prologues(void **state) {
    (void)state;
    sol_backend *be = open_be(spec(), 0);
    const sol_dtype types[] = {SOL_DT_F32,  SOL_DT_F16,  SOL_DT_Q8_0,
                               SOL_DT_Q4_0, SOL_DT_Q4_K, SOL_DT_Q6_K};
    const int ns[] = {1, 5, 40};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++)
            fused_case(be, types[i], ns[j], 0);
    sol_backend_free(be);
    setenv("SOL_CUDA_GEMM", "int8", 1); /* read when a backend opens */
    be = open_be(spec(), 0);
    unsetenv("SOL_CUDA_GEMM");
    for (size_t i = 2; i < sizeof types / sizeof types[0]; i++) /* the quantized ones */
        fused_case(be, types[i], 40, 1);
    sol_backend_free(be);
}

/* The count that follows `key` in the backend's stats line. */
static unsigned long stat_after(sol_backend *be, const char *key) {
    char buf[1024];
    assert_int_equal(sol_backend_stats(be, buf, sizeof buf), 0);
    const char *p = strstr(buf, key);
    char *end = NULL;
    unsigned long n = p ? strtoul(p + strlen(key), &end, 10) : 0;
    if (!p || end == p + strlen(key))
        fail_msg("no count after '%s' in the stats line: %s", key, buf);
    return n;
}

/* The "N on a shared x" count: batch GEMMs that read the x converted for the previous weight of
 * the same matmul_many. */
static unsigned long shared_x_count(sol_backend *be) {
    return stat_after(be, "int8 GEMMs, ");
}

/* "tensor-core GEMM launches: N" (k_mma_gemm launches). */
static unsigned long mma_launch_count(sol_backend *be) {
    return stat_after(be, "tensor-core GEMM launches: ");
}

/* Of those, the launches with split-K. */
static unsigned long mma_split_count(sol_backend *be) {
    return stat_after(be, "(split-K: ");
}

/* A batch matmul_many converts x once for each run of weights of one input kind (F16 half for
 * F16 and quantized weights, BF16 half for BF16 ones; under SOL_CUDA_GEMM=int8 Q8_0 or Q8_K
 * activations by the weight's type), and a run of quantized weights on the F16 tiles is one
 * k_mma_gemm launch (mma_gemm_many): the bits of one matmul per weight, 40 tokens, for lists
 * whose kinds run on and change (F16, BF16, F16: no sharing; Q4_0/Q8_0 then Q4_K under int8),
 * the shared conversions and the launches counted. */
static void test_gemm_shared_x(void **state) {
    (void)state;
    enum { N = 40, K = 512, M = 48 };
    struct {
        int int8;
        sol_dtype t[3];
        unsigned long shared, mma_launches;
    } lists[] = {
        {0, {SOL_DT_Q4_K, SOL_DT_Q4_K, SOL_DT_Q6_K}, 2, 1}, /* one k_mma_gemm launch of three */
        {0, {SOL_DT_F16, SOL_DT_BF16, SOL_DT_F16}, 0, 0},
        {0, {SOL_DT_Q8_0, SOL_DT_F16, SOL_DT_BF16}, 1, 1},
        {1, {SOL_DT_Q4_0, SOL_DT_Q8_0, SOL_DT_Q4_K}, 1, 0},
        {1, {SOL_DT_Q4_K, SOL_DT_Q6_K, SOL_DT_F16}, 1, 0},
    }; /* K = 512 on 132 emulated SMs: every k_mma_gemm launch splits K in 2 (mma_splits) */
    float *x = rnd_vec((size_t)N * K);
    for (size_t l = 0; l < sizeof lists / sizeof *lists; l++) {
        if (lists[l].int8) setenv("SOL_CUDA_GEMM", "int8", 1); /* read when a backend opens */
        sol_backend *be = open_be(spec(), 0);
        unsetenv("SOL_CUDA_GEMM");
        void *rows[3];
        sol_weight w[3];
        float *ya[3], *yb[3], *xd = put(be, x, sizeof(float) * N * K);
        for (int i = 0; i < 3; i++) {
            sol_dtype t = lists[l].t[i];
            rows[i] = make_rows(t, M, K);
            w[i] = (sol_weight){t, M, K, rows[i], sol_dtype_row_bytes(t, K), 0, 0};
            assert_int_equal(sol_weight_prepare(be, &w[i]), 0);
            ya[i] = put(be, NULL, sizeof(float) * N * M),
            yb[i] = put(be, NULL, sizeof(float) * N * M);
        }
        const sol_weight *ws[3] = {&w[0], &w[1], &w[2]};
        for (int i = 0; i < 3; i++)
            assert_int_equal(sol_matmul(be, &w[i], xd, ya[i], N), 0);
        unsigned long before = shared_x_count(be), l0 = mma_launch_count(be);
        unsigned long s0 = mma_split_count(be);
        assert_int_equal(sol_matmul_many(be, ws, yb, 3, xd, N), 0);
        unsigned long shared = shared_x_count(be) - before, launches = mma_launch_count(be) - l0;
        assert_int_equal(mma_split_count(be) - s0, launches);
        for (int i = 0; i < 3; i++) {
            float *a = get(be, ya[i], (size_t)N * M), *b = get(be, yb[i], (size_t)N * M);
            if (memcmp(a, b, sizeof(float) * N * M))
                fail_msg("matmul_many list %zu weight %d (%s%s): not one matmul's bits", l, i,
                         sol_dtype_name(lists[l].t[i]), lists[l].int8 ? ", int8" : "");
            free(a), free(b);
            sol_buf_free(be, ya[i]), sol_buf_free(be, yb[i]);
            free(rows[i]);
        }
        print_message("  list %zu%s: %lu of 2 GEMMs on a shared x\n", l,
                      lists[l].int8 ? " (int8)" : "", shared);
        assert_int_equal(shared, lists[l].shared);
        assert_int_equal(launches, lists[l].mma_launches);
        sol_buf_free(be, xd);
        sol_backend_free(be);
    }
    free(x);
}

/* rmsnorm, the activations, add, scale, rope and embed/get_rows against the CPU backend. */
static void test_elementwise(void **state) {
    (void)state;
    sol_backend *cpu = open_be("cpu", 0), *be = open_be(spec(), 0);
    enum { N = 5, D = 256, H = 4, HD = 64 };
    float *a = rnd_vec(N * D), *b = rnd_vec(N * D), *w = rnd_vec(D), want[N * D];
    float *ad = put(be, a, sizeof a[0] * N * D), *bd = put(be, b, sizeof b[0] * N * D);
    float *od = put(be, NULL, sizeof(float) * N * D);
    sol_weight wv = {SOL_DT_F32, 1, D, w, sizeof(float) * D, 0, 0};
    assert_int_equal(sol_weight_prepare(be, &wv), 0);
    const float *wd = wv.data;
    /* each op on the CPU into want, on the device into od, then compared within 2e-6 relative:
     * rmsnorm's sum of squares in another order (within ~log2(D) 2^-24), expf within 2 ulp and
     * nvcc's fused multiply-adds in silu/gelu (a few ulp); add and scale are exact but share
     * the macro */
#define OP(name, cpu_call, dev_call)                                                               \
    do {                                                                                           \
        assert_int_equal(cpu_call, 0);                                                             \
        assert_int_equal(dev_call, 0);                                                             \
        float *got = get(be, od, N * D);                                                           \
        expect_close(name, got, want, N *D, 2e-6);                                                 \
        free(got);                                                                                 \
    } while (0)
    OP("rmsnorm", sol_rmsnorm(cpu, a, w, want, N, D, 1e-5f),
       sol_rmsnorm(be, ad, wd, od, N, D, 1e-5f));
    OP("silu_mul", sol_silu_mul(cpu, a, b, want, N * D), sol_silu_mul(be, ad, bd, od, N * D));
    OP("gelu_mul", sol_gelu_mul(cpu, a, b, want, N * D), sol_gelu_mul(be, ad, bd, od, N * D));
    OP("swiglu_oai", sol_swiglu_oai(cpu, a, b, want, N * D, 1.702f, 0.5f),
       sol_swiglu_oai(be, ad, bd, od, N * D, 1.702f, 0.5f)); /* limit 0.5: both clamps reached */
    OP("add", sol_add(cpu, a, b, want, N * D), sol_add(be, ad, bd, od, N * D));
    OP("scale", sol_scale(cpu, a, 1.7f, want, N * D), sol_scale(be, ad, 1.7f, od, N * D));
#undef OP
    /* rope: llama-3 scaling, NORM then NEOX pairs, then YaRN (x4, correction dims 5..23, its
     * magnitude scale), two position arrays in one step (staging must keep them apart) */
    const int32_t pos1[N] = {0, 7, 300, 4000, 9000}, pos2[N] = {1, 2, 3, 4, 5};
    sol_rope_params p = {500000.0f, 8.0f, 1.0f, 4.0f, 8192, 0, 0, 0, 0, 0, 0};
    const sol_rope_params yarn = {150000.0f, 0, 0, 0, 0, 1, 0.25f, 1, 5, 23, 1.2f};
    memcpy(want, a, sizeof want);
    assert_int_equal(sol_upload(be, od, a, sizeof want), 0);
    for (int pass = 0; pass < 3; pass++) {
        p.neox = pass & 1;
        if (pass == 2) p = yarn;
        assert_int_equal(sol_rope(cpu, want, pos1, N, H, HD, &p), 0);
        assert_int_equal(sol_rope(cpu, want, pos2, N, H, HD, &p), 0);
        assert_int_equal(sol_rope(be, od, pos1, N, H, HD, &p), 0);
        assert_int_equal(sol_rope(be, od, pos2, N, H, HD, &p), 0);
    }
    float *got = get(be, od, N * D);
    /* rope: the rotation rounds as the CPU does (__fmul_rn/__fadd_rn), but CUDA's double cos/sin
     * (2 ulp of double) may flip a float rounding of the angle's cosine: an ulp per element,
     * twice (two position arrays), well inside 1e-5 */
    expect_close("rope", got, want, N * D, 1e-5);
    free(got);
    /* embed, then get_rows of the embedded rows */
    const int32_t ids[N] = {36, 0, 5, 5, 20}, rows[3] = {4, 0, 2};
    void *tbl = make_rows(SOL_DT_Q4_K, 37, D),
         *tbl2 = malloc(sol_dtype_row_bytes(SOL_DT_Q4_K, D) * 37);
    memcpy(tbl2, tbl, sol_dtype_row_bytes(SOL_DT_Q4_K, D) * 37);
    sol_weight tc = {SOL_DT_Q4_K, 37, D, tbl, sol_dtype_row_bytes(SOL_DT_Q4_K, D), 0, 0}, td = tc;
    td.data = tbl2;
    assert_int_equal(sol_weight_prepare(be, &td), 0);
    assert_int_equal(sol_embed(cpu, &tc, ids, N, want), 0);
    assert_int_equal(sol_embed(be, &td, ids, N, od), 0);
    got = get(be, od, N * D);
    /* exact: dequant.cuh writes d q - m with __fmul_rn/__fsub_rn, which nvcc never fuses */
    expect_close("embed", got, want, N * D, 0);
    free(got);
    float rows_want[3 * D];
    assert_int_equal(sol_get_rows(cpu, want, D, rows, 3, N, rows_want), 0);
    assert_int_equal(sol_get_rows(be, od, D, rows, 3, N, ad), 0);
    got = get(be, ad, 3 * D);
    expect_close("get_rows", got, rows_want, 3 * D, 0); /* copies: exact */
    free(got);
    const int32_t bad_row = N;
    assert_int_equal(sol_get_rows(be, od, D, &bad_row, 1, N, ad), -EINVAL);
    assert_non_null(strstr(be->err.msg, "outside"));
    /* moe_combine of the embedded rows, two tokens of three choices: the CPU's bits (products
     * and sums rounded one at a time on both) */
    const int32_t mrows[6] = {4, 0, 2, 1, 1, 3};
    const float mw[6] = {0.5f, 0.3f, 0.2f, 0.7f, 0.1f, 0.2f};
    assert_int_equal(sol_moe_combine(cpu, want, D, mrows, mw, 2, 3, N, rows_want), 0);
    assert_int_equal(sol_moe_combine(be, od, D, mrows, mw, 2, 3, N, ad), 0);
    got = get(be, ad, 2 * D);
    expect_close("moe_combine", got, rows_want, 2 * D, 0);
    free(got);
    assert_int_equal(sol_moe_combine(be, od, D, mrows, mw, 2, 3, 4, ad), -EINVAL);
    sol_buf_free(be, ad), sol_buf_free(be, bd), sol_buf_free(be, od);
    free(a), free(b), free(w), free(tbl), free(tbl2);
    sol_backend_free(cpu);
    sol_backend_free(be);
}

/* KV writes, a copy-on-write block copy and paged attention (GQA, a sliding window) through
 * block tables, against the CPU backend. */
static void test_attention(void **state) {
    (void)state;
    sol_backend *cpu = open_be("cpu", 0), *be = open_be(spec(), 0);
    enum { L = 2, BLOCKS = 12, BS = 4, KVH = 2, H = 4, HD = 64, CTX = 19 };
    sol_kv *kc = sol_kv_alloc(cpu, L, BLOCKS, BS, KVH, HD, SOL_DT_F16);
    sol_kv *kd = sol_kv_alloc(be, L, BLOCKS, BS, KVH, HD, SOL_DT_F16);
    assert_non_null(kc);
    assert_non_null(kd);
    const int32_t table[5] = {7, 2, 9, 0, 4};
    int32_t slots[CTX];
    for (int t = 0; t < CTX; t++)
        slots[t] = table[t / BS] * BS + t % BS;
    float *k = rnd_vec(CTX * KVH * HD), *v = rnd_vec(CTX * KVH * HD);
    float *kdv = put(be, k, sizeof(float) * CTX * KVH * HD);
    float *vdv = put(be, v, sizeof(float) * CTX * KVH * HD);
    for (int l = 0; l < L; l++) {
        assert_int_equal(sol_kv_write(cpu, kc, l, k, v, slots, CTX), 0);
        assert_int_equal(sol_kv_write(be, kd, l, kdv, vdv, slots, CTX), 0);
    }
    /* fork block 9 into 11 and let the last sequence read the copy */
    const int32_t src = 9, dst = 11, forked[5] = {7, 2, 11, 0, 4};
    assert_int_equal(sol_kv_copy_blocks(cpu, kc, &src, &dst, 1), 0);
    assert_int_equal(sol_kv_copy_blocks(be, kd, &src, &dst, 1), 0);
    enum { N = 3 };
    sol_attn_seq seqs[N] = {{table, 1}, {table, 11}, {forked, CTX}};
    float *q = rnd_vec(N * H * HD), want[N * H * HD];
    float *qd = put(be, q, sizeof(float) * N * H * HD), *od = put(be, NULL, sizeof want);
    for (int window = 0; window <= 6; window += 6) {
        assert_int_equal(
            sol_paged_attention_swa(cpu, kc, 1, q, want, N, H, KVH, HD, 0.125f, window, seqs), 0);
        assert_int_equal(
            sol_paged_attention_swa(be, kd, 1, qd, od, N, H, KVH, HD, 0.125f, window, seqs), 0);
        float *got = get(be, od, N * H * HD);
        /* the online softmax over four warps (another order, a rounding per rescale), expf within
         * 2 ulp, fused l c + e: a few 2^-24 per term over <= 19 positions, inside 1e-5 */
        expect_close(window ? "paged_attention window 6" : "paged_attention", got, want, N * H * HD,
                     1e-5);
        free(got);
    }
    sol_buf_free(be, kdv), sol_buf_free(be, vdv), sol_buf_free(be, qd), sol_buf_free(be, od);
    free(k), free(v), free(q);
    sol_kv_free(cpu, kc);
    sol_kv_free(be, kd); /* the other cache stays for sol_backend_free to release */
    assert_non_null(sol_kv_alloc(be, 1, 2, 4, 1, 8, SOL_DT_F32));
    sol_backend_free(cpu);
    sol_backend_free(be);
}

/* rope_kv_write (one launch) is rope(q), rope(k) and kv_write bit for bit: q and k as left in
 * place, and the cache as attention reads it, for NORM and NEOX pairs, F16 and F32 caches; a
 * cache of another row shape, or a slot outside it, is refused by name. */
static void test_rope_kv_write(void **state) {
    (void)state;
    sol_backend *be = open_be(spec(), 0);
    enum { N = 5, H = 4, KVH = 2, HD = 64, BLOCKS = 4, BS = 4 };
    const int32_t pos[N] = {0, 1, 2, 300, 9000}, slots[N] = {5, 6, 7, 12, 0};
    const int32_t table[BLOCKS] = {1, 3, 0, 2};
    sol_attn_seq seqs[N];
    for (int t = 0; t < N; t++)
        seqs[t] = (sol_attn_seq){table, t + 1};
    float *q = rnd_vec(N * H * HD), *k = rnd_vec(N * KVH * HD), *v = rnd_vec(N * KVH * HD);
    size_t qb = sizeof(float) * N * H * HD, kb = sizeof(float) * N * KVH * HD;
    for (int pass = 0; pass < 4; pass++) {
        sol_rope_params p = {500000.0f, 8.0f, 1.0f, 4.0f, 8192, pass & 1, 0, 0, 0, 0, 0};
        sol_dtype dt = pass & 2 ? SOL_DT_F32 : SOL_DT_F16;
        sol_kv *kv[2];
        float *qd[2], *kd[2], *vd = put(be, v, kb), *od[2], *want, *got;
        for (int i = 0; i < 2; i++) {
            kv[i] = sol_kv_alloc(be, 2, BLOCKS, BS, KVH, HD, dt);
            assert_non_null(kv[i]);
            qd[i] = put(be, q, qb), kd[i] = put(be, k, kb), od[i] = put(be, NULL, qb);
        }
        assert_int_equal(sol_rope(be, qd[0], pos, N, H, HD, &p), 0);
        assert_int_equal(sol_rope(be, kd[0], pos, N, KVH, HD, &p), 0);
        assert_int_equal(sol_kv_write(be, kv[0], 1, kd[0], vd, slots, N), 0);
        assert_non_null(be->ops->rope_kv_write);
        assert_int_equal(
            sol_rope_kv_write(be, kv[1], 1, qd[1], kd[1], vd, pos, slots, N, H, KVH, HD, &p), 0);
        for (int i = 0; i < 2; i++)
            assert_int_equal(
                sol_paged_attention(be, kv[i], 1, qd[0], od[i], N, H, KVH, HD, 0.125f, seqs), 0);
        const struct {
            const char *what;
            float *a, *b;
            size_t n;
        } same[] = {{"q", qd[0], qd[1], N * H * HD},
                    {"k", kd[0], kd[1], N * KVH * HD},
                    {"attention over the cache", od[0], od[1], N * H * HD}};
        for (size_t c = 0; c < sizeof same / sizeof *same; c++) {
            want = get(be, same[c].a, same[c].n), got = get(be, same[c].b, same[c].n);
            if (memcmp(want, got, sizeof(float) * same[c].n))
                fail_msg("rope_kv_write pass %d: %s differs from the three ops", pass,
                         same[c].what);
            free(want), free(got);
        }
        if (pass == 3) {
            assert_int_equal(
                sol_rope_kv_write(be, kv[1], 1, qd[1], kd[1], vd, pos, slots, N, H, 1, HD, &p),
                -EINVAL);
            assert_non_null(strstr(be->err.msg, "the cache's are 2 x 64"));
            const int32_t far[N] = {0, 1, 2, 3, BLOCKS * BS};
            assert_int_equal(
                sol_rope_kv_write(be, kv[1], 1, qd[1], kd[1], vd, pos, far, N, H, KVH, HD, &p),
                -EINVAL);
            assert_non_null(strstr(be->err.msg, "token 4 slot 16 outside [0, 16)"));
        }
        for (int i = 0; i < 2; i++) {
            sol_buf_free(be, qd[i]), sol_buf_free(be, kd[i]), sol_buf_free(be, od[i]);
            sol_kv_free(be, kv[i]);
        }
        sol_buf_free(be, vd);
    }
    free(q), free(k), free(v);
    sol_backend_free(be);
}

/* The "N rope+KV, M q/k norm+rope+KV" counts of the backend's stats line: q/k/v projections
 * that roped and wrote the cache in their store, and per-head norms + rope + the cache write
 * launched as one (qn: NULL when not wanted). */
static unsigned long rope_kv_count(sol_backend *be, unsigned long *qn) {
    char buf[1024];
    unsigned long n = 0, q = 0;
    assert_int_equal(sol_backend_stats(be, buf, sizeof buf), 0);
    const char *p = strstr(buf, "attention+quantize, ");
    if (!p || sscanf(p, "attention+quantize, %lu rope+KV, %lu q/k norm+rope+KV", &n, &q) != 2)
        fail_msg("unexpected stats line: %s", buf);
    if (qn) *qn = q;
    return n;
}

/* qkv_rope_kv (the rope and the cache write in the q/k/v GEMVs' store) is norm_matmul_many then
 * rope_kv_write bit for bit: q, k and v as left in memory and the cache as attention reads it;
 * Q4_K_M's mix (Q6_K v in the same launch), a v of another activation kind (its own launch),
 * F16 rows, NORM and NEOX pairs, F16 and F32 caches, biases; 40 tokens take the GEMM and the two
 * ops (not counted). With per-head q/k norms (norms: Qwen3's) against norm_matmul_many, two
 * rmsnorms and rope_kv_write, the norms, rope and cache in one launch at any size (counted as
 * such). Weights that are not the heads it is told of, or a norm for q alone, are refused by
 * name. */
static void qkv_rope_case(sol_backend *be, const sol_dtype t[3], int n, int neox, sol_dtype cache,
                          int norms) {
    enum { H = 4, KVH = 2, HD = 64, K = 512, BLOCKS = 12, BS = 4 };
    const int M[3] = {H * HD, KVH * HD, KVH * HD};
    const int32_t table[BLOCKS] = {5, 1, 11, 3, 0, 7, 2, 9, 4, 10, 6, 8};
    void *rows[3];
    sol_weight w[3];
    for (int i = 0; i < 3; i++) {
        rows[i] = make_rows(t[i], M[i], K);
        w[i] = (sol_weight){t[i], M[i], K, rows[i], sol_dtype_row_bytes(t[i], K), 0, 0};
        assert_int_equal(sol_weight_prepare(be, &w[i]), 0);
    }
    const sol_weight *ws[3] = {&w[0], &w[1], &w[2]};
    int32_t pos[40], slots[40];
    sol_attn_seq seqs[40];
    for (int i = 0; i < n; i++) {
        pos[i] = 37 * i + (i % 3) * 4000;
        slots[i] = table[i / BS] * BS + i % BS;
        seqs[i] = (sol_attn_seq){table, i + 1};
    }
    sol_rope_params p = {500000.0f, 8.0f, 1.0f, 4.0f, 8192, neox, 0, 0, 0, 0, 0};
    float *x = rnd_vec((size_t)n * K), *nw = rnd_vec(K), *b0 = rnd_vec(M[0]), *b2 = rnd_vec(M[2]);
    float *xd = put(be, x, sizeof(float) * n * K), *nd = put(be, nw, sizeof(float) * K);
    float *bd[3] = {put(be, b0, sizeof(float) * M[0]), NULL, put(be, b2, sizeof(float) * M[2])};
    float *xn = put(be, NULL, sizeof(float) * n * K), *y[2][3], *od[2];
    sol_kv *kv[2];
    for (int c = 0; c < 2; c++) {
        for (int i = 0; i < 3; i++)
            y[c][i] = put(be, NULL, sizeof(float) * n * M[i]);
        od[c] = put(be, NULL, sizeof(float) * n * M[0]);
        kv[c] = sol_kv_alloc(be, 2, BLOCKS, BS, KVH, HD, cache);
        assert_non_null(kv[c]);
    }
    const float *const *bs = (const float *const *)bd;
    float *qk = rnd_vec(2 * HD), *qkd = put(be, qk, sizeof(float) * 2 * HD);
    sol_qkv_rope r = {
        kv[1], 1, pos, slots, H, KVH, HD, &p, norms ? qkd : NULL, norms ? qkd + HD : NULL, 1e-6f};
    unsigned long qn0, qn1, before = rope_kv_count(be, &qn0);
    assert_int_equal(sol_norm_matmul_many(be, xd, nd, 1e-5f, xn, ws, bs, y[0], 3, n), 0);
    if (norms) {
        assert_int_equal(sol_rmsnorm(be, y[0][0], qkd, y[0][0], n * H, HD, 1e-6f), 0);
        assert_int_equal(sol_rmsnorm(be, y[0][1], qkd + HD, y[0][1], n * KVH, HD, 1e-6f), 0);
    }
    assert_int_equal(
        sol_rope_kv_write(be, kv[0], 1, y[0][0], y[0][1], y[0][2], pos, slots, n, H, KVH, HD, &p),
        0);
    assert_non_null(be->ops->qkv_rope_kv);
    assert_int_equal(sol_qkv_rope_kv(be, xd, nd, 1e-5f, xn, ws, bs, y[1], n, &r), 0);
    unsigned long fused = rope_kv_count(be, &qn1) - before;
    for (int c = 0; c < 2; c++)
        assert_int_equal(
            sol_paged_attention(be, kv[c], 1, y[0][0], od[c], n, H, KVH, HD, 0.125f, seqs), 0);
    const char *names[4] = {"q", "k", "v", "attention over the cache"};
    for (int i = 0; i < 4; i++) {
        size_t cnt = (size_t)n * M[i < 3 ? i : 0];
        float *a = get(be, i < 3 ? y[0][i] : od[0], cnt),
              *b = get(be, i < 3 ? y[1][i] : od[1], cnt);
        if (memcmp(a, b, sizeof(float) * cnt))
            fail_msg("qkv_rope_kv %s/%s/%s n=%d neox=%d %s cache%s: %s differs from the ops",
                     sol_dtype_name(t[0]), sol_dtype_name(t[1]), sol_dtype_name(t[2]), n, neox,
                     sol_dtype_name(cache), norms ? ", q/k norms" : "", names[i]);
        free(a), free(b);
    }
    print_message(
        "  qkv_rope_kv %s/%s/%s n=%d neox=%d %s cache%s: the ops' bits, %lu + %lu fused\n",
        sol_dtype_name(t[0]), sol_dtype_name(t[1]), sol_dtype_name(t[2]), n, neox,
        sol_dtype_name(cache), norms ? ", q/k norms" : "", fused, qn1 - qn0);
    /* 40 tokens: the GEMM, then the ops; q/k norms: one launch after the projections */
    assert_int_equal(fused, (unsigned long)(n <= 16 && !norms));
    assert_int_equal(qn1 - qn0, (unsigned long)(norms != 0));
    if (norms) {
        r.k_norm = NULL;
        assert_int_equal(sol_qkv_rope_kv(be, xd, nd, 1e-5f, xn, ws, bs, y[1], n, &r), -EINVAL);
        assert_non_null(strstr(be->err.msg, "a per-head norm for q only"));
    }
    r.kv_heads = 1;
    assert_int_equal(sol_qkv_rope_kv(be, xd, nd, 1e-5f, xn, ws, bs, y[1], n, &r), -EINVAL);
    assert_non_null(strstr(be->err.msg, "q/k/v weights of 256/128/128 rows for 4 heads and 1 KV"));
    for (int c = 0; c < 2; c++) {
        for (int i = 0; i < 3; i++)
            sol_buf_free(be, y[c][i]);
        sol_buf_free(be, od[c]);
        sol_kv_free(be, kv[c]);
    }
    for (int i = 0; i < 3; i++) {
        if (bd[i]) sol_buf_free(be, bd[i]);
        free(rows[i]);
    }
    sol_buf_free(be, xd), sol_buf_free(be, nd), sol_buf_free(be, xn), sol_buf_free(be, qkd);
    free(x), free(nw), free(b0), free(b2), free(qk);
}

static void test_qkv_rope_kv(void **state) {
    (void)state;
    sol_backend *be = open_be(spec(), 0);
    const sol_dtype km[3] = {SOL_DT_Q4_K, SOL_DT_Q4_K, SOL_DT_Q6_K},
                    mixed[3] = {SOL_DT_Q4_K, SOL_DT_Q4_K, SOL_DT_Q8_0},
                    f16[3] = {SOL_DT_F16, SOL_DT_F16, SOL_DT_F16},
                    q40[3] = {SOL_DT_Q4_0, SOL_DT_Q4_0, SOL_DT_Q4_0};
    qkv_rope_case(be, km, 1, 1, SOL_DT_F16, 0);
    qkv_rope_case(be, km, 5, 0, SOL_DT_F32, 0);
    qkv_rope_case(be, mixed, 3, 1, SOL_DT_F16, 0);
    qkv_rope_case(be, f16, 2, 0, SOL_DT_F16, 0);
    qkv_rope_case(be, q40, 40, 1, SOL_DT_F16, 0);
    qkv_rope_case(be, km, 1, 1, SOL_DT_F16, 1); /* Qwen3's per-head norms */
    qkv_rope_case(be, km, 5, 0, SOL_DT_F32, 1);
    qkv_rope_case(be, q40, 40, 1, SOL_DT_F16, 1);
    sol_backend_free(be);
}

/* The split merge also writes its output as the o projection's activations, and the o
 * projection right after it (a matmul_add of that output, 5 tokens: a GEMV) reads them instead of
 * quantizing: Q8_0 by default (a Q4_0 wo), or the kind next_input names (hint: a Q4_K or Q6_K wo
 * takes Q8_K, 256 / 32 = 8 heads a block): the same bits as when any op in between makes it
 * quantize for itself, and counted only then. A K-quant wo without the hint finds Q8_0: not
 * read. */
static void attention_then_o(sol_backend *be, sol_kv *kd, const float *qd, float *od,
                             const sol_attn_seq *seqs, sol_dtype t, int H, int hint) {
    enum { N = 5, HD = 32, M = 48 };
    void *rows = make_rows(t, M, H * HD);
    sol_weight w = {t, M, H * HD, rows, sol_dtype_row_bytes(t, H * HD), 0, 0};
    assert_int_equal(sol_weight_prepare(be, &w), 0);
    float *r = rnd_vec(N * M), *y[2], *scratch = put(be, r, sizeof(float) * N * M);
    unsigned long nq, gl, att[3];
    for (int pass = 0; pass < 2; pass++) {
        y[pass] = put(be, r, sizeof(float) * N * M);
        fused_counts3(be, &nq, &gl, &att[pass]);
        if (hint) assert_int_equal(sol_next_input(be, &(sol_next_in){.w = &w}), 0);
        assert_int_equal(sol_paged_attention_swa(be, kd, 0, qd, od, N, H, 1, HD, 0.17f, 0, seqs),
                         0);
        if (pass) /* any op in between: the matmul must quantize od itself */
            assert_int_equal(sol_add(be, scratch, scratch, scratch, N * M), 0);
        assert_int_equal(sol_matmul_add(be, &w, od, y[pass], NULL, N), 0);
    }
    fused_counts3(be, &nq, &gl, &att[2]);
    int read = t == SOL_DT_Q4_0 || hint;
    assert_int_equal(att[1] - att[0], read); /* the first pass read the merge's activations */
    assert_int_equal(att[2] - att[1], 0);
    float *a = get(be, y[0], N * M), *b = get(be, y[1], N * M);
    if (memcmp(a, b, sizeof(float) * N * M))
        fail_msg("%s o projection on the merge's activations differs from its own quantization",
                 sol_dtype_name(t));
    print_message("  attention+quantize: %s o projection of %d tokens%s, the same bits\n",
                  sol_dtype_name(t), N, read ? " on the merge's activations" : "");
    free(a), free(b), free(r), free(rows);
    sol_buf_free(be, y[0]), sol_buf_free(be, y[1]), sol_buf_free(be, scratch);
}

/* Long windows are split along the context (flash-decoding): still the CPU's result, and a
 * token's bits are the same alone as in any batch (its split count follows its own context), also
 * past the 64-token groups the split scratch is used in. */
static void test_long_context_attention(void **state) {
    (void)state;
    sol_backend *cpu = open_be("cpu", 0), *be = open_be(spec(), 0);
    enum { BLOCKS = 80, BS = 16, KVH = 1, H = 2, HD = 32, CTX = 1100, N = 67 };
    sol_kv *kc = sol_kv_alloc(cpu, 1, BLOCKS, BS, KVH, HD, SOL_DT_F32);
    sol_kv *kd = sol_kv_alloc(be, 1, BLOCKS, BS, KVH, HD, SOL_DT_F32);
    int32_t table[BLOCKS], slots[CTX];
    for (int i = 0; i < BLOCKS; i++)
        table[i] = (i * 37) % BLOCKS; /* a permutation: 37 and 80 are coprime */
    for (int p = 0; p < CTX; p++)
        slots[p] = table[p / BS] * BS + p % BS;
    float *k = rnd_vec(CTX * HD), *v = rnd_vec(CTX * HD);
    float *kdv = put(be, k, sizeof(float) * CTX * HD), *vdv = put(be, v, sizeof(float) * CTX * HD);
    assert_int_equal(sol_kv_write(cpu, kc, 0, k, v, slots, CTX), 0);
    assert_int_equal(sol_kv_write(be, kd, 0, kdv, vdv, slots, CTX), 0);
    sol_attn_seq seqs[N];
    for (int t = 0; t < N; t++) /* 1100 (5 splits), then short and medium windows */
        seqs[t] = (sol_attn_seq){table, t == 0 ? CTX : t % 3 == 0 ? 300 + t : 1 + t};
    float *q = rnd_vec(N * H * HD), *want = malloc(sizeof(float) * N * H * HD);
    float *qd = put(be, q, sizeof(float) * N * H * HD);
    float *od = put(be, NULL, sizeof(float) * N * H * HD);
    for (int window = 0; window <= 700; window += 700) {
        assert_int_equal(
            sol_paged_attention_swa(cpu, kc, 0, q, want, N, H, KVH, HD, 0.17f, window, seqs), 0);
        assert_int_equal(
            sol_paged_attention_swa(be, kd, 0, qd, od, N, H, KVH, HD, 0.17f, window, seqs), 0);
        float *batch = get(be, od, N * H * HD);
        /* as above, plus the splits' merge (one more rescale per split): still ~1e-6 */
        expect_close(window ? "split attention, window 700" : "split attention", batch, want,
                     N * H * HD, 1e-5);
        for (int t = 0; t < N; t += 11) {
            assert_int_equal(sol_paged_attention_swa(be, kd, 0, qd + t * H * HD, od, 1, H, KVH, HD,
                                                     0.17f, window, seqs + t),
                             0);
            float *alone = get(be, od, H * HD);
            if (memcmp(alone, batch + t * H * HD, sizeof(float) * H * HD))
                fail_msg("token %d (context %d, window %d) alone differs from its batch row", t,
                         seqs[t].n_ctx, window);
            free(alone);
        }
        free(batch);
    }
    attention_then_o(be, kd, qd, od, seqs, SOL_DT_Q4_0, H, 0);
    attention_then_o(be, kd, qd, od, seqs, SOL_DT_Q4_K, 8, 1);
    attention_then_o(be, kd, qd, od, seqs, SOL_DT_Q4_K, 8, 0);
    attention_then_o(be, kd, qd, od, seqs, SOL_DT_Q6_K, 8, 1);
    sol_buf_free(be, kdv), sol_buf_free(be, vdv), sol_buf_free(be, qd), sol_buf_free(be, od);
    free(k), free(v), free(q), free(want);
    sol_kv_free(cpu, kc);
    sol_backend_free(cpu);
    sol_backend_free(be);
}

/* The backend's graph counters. */
enum { G_STEPS, G_NO_RECORD, G_UPDATED, G_INSTANTIATED, G_CUT, G_COPIES, G_DRY, G_RERUN, G_N };

static void graph_stats(sol_backend *be, unsigned long c[G_N]) {
    char buf[512];
    assert_int_equal(sol_backend_stats(be, buf, sizeof buf), 0);
    const char *p = strchr(buf, ':'), *q = strstr(buf, "aborted; ");
    assert_non_null(p);
    if (sscanf(p,
               ": %lu steps replayed (%lu with no record, %lu updated in place, %lu instantiated), "
               "%lu cut short by an allocation; %lu staged copies",
               &c[G_STEPS], &c[G_NO_RECORD], &c[G_UPDATED], &c[G_INSTANTIATED], &c[G_CUT],
               &c[G_COPIES]) != 6 ||
        !q ||
        sscanf(q, "aborted; %lu dry steps, %lu run again recorded", &c[G_DRY], &c[G_RERUN]) != 2)
        fail_msg("unexpected stats line: %s", buf);
}

/* The state of test_graphs' steps on one backend. */
typedef struct graph_case {
    sol_backend *be;
    sol_kv *kv;
    float *xd, *yd, *od, *big;
    sol_weight w, ws;
} graph_case;

enum { GC_N = 3, GC_H = 2, GC_HD = 32, GC_D = GC_H * GC_HD, GC_STEPS = 5 };

/* Step s of test_graphs up to its synchronize (whose answer it returns). */
static int graph_case_step(graph_case *c, int s) {
    const int32_t table[3] = {5, 2, 7};
    int32_t pos[GC_N], slots[GC_N];
    sol_attn_seq seq[GC_N];
    for (int t = 0; t < GC_N; t++) {
        pos[t] = 2 * s + t;
        slots[t] = table[pos[t] / 4] * 4 + pos[t] % 4;
        seq[t] = (sol_attn_seq){table, pos[t] + 1};
    }
    sol_backend *be = c->be;
    sol_rope_params rp = {10000.0f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    assert_int_equal(sol_step_begin(be, GC_N), 0);
    assert_int_equal(sol_rope(be, c->xd, pos, GC_N, GC_H, GC_HD, &rp), 0);
    assert_int_equal(sol_add(be, c->xd, c->yd, c->xd, GC_N * GC_D), 0);
    assert_int_equal(sol_kv_write(be, c->kv, 0, c->xd, c->yd, slots, GC_N), 0);
    assert_int_equal(
        sol_paged_attention(be, c->kv, 0, c->xd, c->od, GC_N, GC_H, GC_H, GC_HD, 0.3f, seq), 0);
    /* a small matmul queued, then (step 3) a wide one that grows the scratch the small one
     * reads: the capture must end (and run) before the old scratch is freed */
    assert_int_equal(sol_matmul(be, &c->ws, c->xd, c->od, GC_N), 0);
    if (s == 3) assert_int_equal(sol_matmul(be, &c->w, c->big, c->big, 1), 0);
    assert_int_equal(sol_add(be, c->xd, c->od, c->xd, GC_N * GC_D), 0);
    return sol_synchronize(be);
}

/* CUDA graphs: steps begun with a key are recorded once, then replayed as long as they launch
 * what the graph holds (data in the staged positions, slots and block tables may change); the
 * results are the eager backend's bits, step after step. A scratch allocation inside a recorded
 * step (a wider matmul) cuts the capture short instead of breaking it; inside a dry step it
 * makes the step run again, recorded. A recorded step sends its three index arrays up as one
 * copy; eager, as three. */
static void test_graphs(void **state) {
    (void)state;
    if (strncmp(spec(), "cuda-emu", 8) != 0) skip(); /* the counters are the emulation's */
    sol_backend *bes[2] = {open_be(spec(), 0), NULL};
    sol_err e = {0};
    bes[1] = sol_backend_new(spec(), &(sol_backend_opts){.enforce_eager = 1}, &e);
    assert_non_null(bes[1]);
    float *x0 = rnd_vec(GC_N * GC_D), *y0 = rnd_vec(GC_N * GC_D), *out[2][GC_STEPS];
    unsigned long copies[2], reruns[2] = {0, 0};
    void *wide = make_rows(SOL_DT_Q8_0, 8, 2048), *small = make_rows(SOL_DT_Q8_0, GC_D, GC_D);
    size_t ws_bytes = sol_dtype_row_bytes(SOL_DT_Q8_0, GC_D) * GC_D;
    for (int i = 0; i < 2; i++) {
        graph_case c = {.be = bes[i]};
        sol_backend *be = c.be;
        c.kv = sol_kv_alloc(be, 1, 8, 4, GC_H, GC_HD, SOL_DT_F16);
        c.xd = put(be, x0, sizeof(float) * GC_N * GC_D);
        c.yd = put(be, y0, sizeof(float) * GC_N * GC_D);
        c.od = put(be, NULL, sizeof(float) * GC_N * GC_D), c.big = put(be, NULL, 4 * 2048 * GC_N);
        c.w =
            (sol_weight){SOL_DT_Q8_0, 8, 2048, NULL, sol_dtype_row_bytes(SOL_DT_Q8_0, 2048), 0, 0};
        void *copy = malloc(c.w.row_bytes * 8);
        memcpy(copy, wide, c.w.row_bytes * 8);
        c.w.data = copy;
        assert_int_equal(sol_weight_prepare(be, &c.w), 0);
        void *scopy = malloc(ws_bytes);
        memcpy(scopy, small, ws_bytes);
        c.ws = (sol_weight){SOL_DT_Q8_0, GC_D, GC_D, scopy, sol_dtype_row_bytes(SOL_DT_Q8_0, GC_D),
                            0,           0};
        assert_int_equal(sol_weight_prepare(be, &c.ws), 0);
        unsigned long before[G_N], after[G_N];
        for (int s = 0; s < GC_STEPS; s++) {
            if (s == GC_STEPS - 1) graph_stats(be, before);
            int rc = graph_case_step(&c, s);
            if (rc == SOL_STEP_RERUN) reruns[i]++, rc = graph_case_step(&c, s);
            assert_int_equal(rc, 0);
            out[i][s] = get(be, c.xd, GC_N * GC_D);
        }
        graph_stats(be, after);
        copies[i] = after[G_COPIES] - before[G_COPIES];
        sol_buf_free(be, c.xd), sol_buf_free(be, c.yd), sol_buf_free(be, c.od);
        sol_buf_free(be, c.big);
        free(copy), free(scopy);
    }
    for (int s = 0; s < GC_STEPS; s++) {
        if (memcmp(out[0][s], out[1][s], sizeof(float) * GC_N * GC_D))
            fail_msg("step %d: the replayed graph differs from the eager run", s);
        free(out[0][s]), free(out[1][s]);
    }
    unsigned long on[G_N], off[G_N];
    graph_stats(bes[0], on);
    graph_stats(bes[1], off);
    print_message("  graphs: %lu steps, %lu with no record, %lu updated, %lu instantiated, %lu "
                  "cut short, %lu run again\n",
                  on[G_STEPS], on[G_NO_RECORD], on[G_UPDATED], on[G_INSTANTIATED], on[G_CUT],
                  on[G_RERUN]);
    assert_int_equal(on[G_STEPS], GC_STEPS);
    /* step 0 sizes the scratch (cut short), step 1 is recorded, step 2 replays it; step 3 grows
     * the scratch in its dry run and step 4 drops the wide matmul: both run again, recorded */
    assert_int_equal(on[G_CUT], 1);
    assert_int_equal(on[G_NO_RECORD], 1);
    assert_int_equal(on[G_RERUN], 2);
    assert_int_equal(reruns[0], 2);
    assert_int_equal(reruns[1], 0);
    assert_int_equal(off[G_STEPS], 0);
    print_message("  staged copies in the last step: %lu with graphs, %lu eager\n", copies[0],
                  copies[1]);
    assert_int_equal(copies[0], 1);
    assert_int_equal(copies[1], 3);
    free(x0), free(y0), free(wide), free(small);
    sol_backend_free(bes[0]);
    sol_backend_free(bes[1]);
}

/* test_graph_replay's model on one backend: q/k/v in, rope, KV write, attention, an output
 * matmul. Three sequences with their own block tables and a history written up front. */
typedef struct replay_case {
    sol_backend *be;
    sol_kv *kv;
    float *q, *k, *v, *att, *o;
    sol_weight wo;
} replay_case;

enum { RC_N = 3, RC_H = 4, RC_KVH = 2, RC_HD = 32, RC_BS = 16, RC_SEQ_BLOCKS = 15 };

static int32_t rc_table[RC_N][RC_SEQ_BLOCKS];

static void replay_case_open(replay_case *c, sol_backend *be, const void *wo_rows) {
    enum { Q = RC_N * RC_H * RC_HD, KV = RC_N * RC_KVH * RC_HD, D = RC_H * RC_HD };
    enum { HIST = RC_N * RC_SEQ_BLOCKS * RC_BS };
    c->be = be;
    c->kv = sol_kv_alloc(be, 1, RC_N * RC_SEQ_BLOCKS + 3, RC_BS, RC_KVH, RC_HD, SOL_DT_F16);
    assert_non_null(c->kv);
    c->q = put(be, NULL, sizeof(float) * Q), c->att = put(be, NULL, sizeof(float) * Q);
    c->o = put(be, NULL, sizeof(float) * Q);
    c->k = put(be, NULL, sizeof(float) * HIST * RC_KVH * RC_HD);
    c->v = put(be, NULL, sizeof(float) * HIST * RC_KVH * RC_HD);
    size_t rb = sol_dtype_row_bytes(SOL_DT_Q8_0, D);
    void *copy = malloc(rb * D);
    memcpy(copy, wo_rows, rb * D);
    c->wo = (sol_weight){SOL_DT_Q8_0, D, D, copy, rb, 0, 0};
    assert_int_equal(sol_weight_prepare(be, &c->wo), 0);
    free(copy); /* the backend holds its upload */
    /* every position of every sequence gets a K/V row, eagerly, before any step: the same rows
     * on both backends, since the generator restarts here */
    rng = 0x5eed;
    float *hk = rnd_vec((size_t)HIST * RC_KVH * RC_HD),
          *hv = rnd_vec((size_t)HIST * RC_KVH * RC_HD);
    int32_t *slots = malloc(sizeof(int32_t) * HIST);
    for (int s = 0, i = 0; s < RC_N; s++)
        for (int p = 0; p < RC_SEQ_BLOCKS * RC_BS; p++, i++)
            slots[i] = rc_table[s][p / RC_BS] * RC_BS + p % RC_BS;
    assert_int_equal(sol_upload(be, c->k, hk, sizeof(float) * HIST * RC_KVH * RC_HD), 0);
    assert_int_equal(sol_upload(be, c->v, hv, sizeof(float) * HIST * RC_KVH * RC_HD), 0);
    assert_int_equal(sol_kv_write(be, c->kv, 0, c->k, c->v, slots, HIST), 0);
    assert_int_equal(sol_synchronize(be), 0);
    free(hk), free(hv), free(slots);
}

static void replay_case_close(replay_case *c) {
    sol_buf_free(c->be, c->q), sol_buf_free(c->be, c->k), sol_buf_free(c->be, c->v);
    sol_buf_free(c->be, c->att), sol_buf_free(c->be, c->o);
}

/* One decode step of n tokens, token t of sequence t at context ctx - 5 t, up to synchronize
 * (its answer is returned). The inputs are uploaded before step_begin by the caller. */
static int replay_case_step(replay_case *c, int n, int ctx, float scale) {
    int32_t pos[RC_N], slots[RC_N];
    sol_attn_seq seq[RC_N];
    for (int t = 0; t < n; t++) {
        int p = ctx - 5 * t - 1;
        pos[t] = p;
        slots[t] = rc_table[t][p / RC_BS] * RC_BS + p % RC_BS;
        seq[t] = (sol_attn_seq){rc_table[t], p + 1};
    }
    sol_backend *be = c->be;
    sol_rope_params rp = {10000.0f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    assert_int_equal(sol_step_begin(be, n), 0);
    assert_int_equal(sol_rope(be, c->q, pos, n, RC_H, RC_HD, &rp), 0);
    assert_int_equal(sol_rope(be, c->k, pos, n, RC_KVH, RC_HD, &rp), 0);
    assert_int_equal(sol_kv_write(be, c->kv, 0, c->k, c->v, slots, n), 0);
    assert_int_equal(
        sol_paged_attention(be, c->kv, 0, c->q, c->att, n, RC_H, RC_KVH, RC_HD, scale, seq), 0);
    assert_int_equal(sol_matmul(be, &c->wo, c->att, c->o, n), 0);
    return sol_synchronize(be);
}

/* Runs a step on both backends with the same fresh inputs; the graph backend's answer to its
 * first run is returned (SOL_STEP_RERUN: it ran again, recorded), and its output must be the
 * eager backend's, bit for bit. */
static int replay_both(replay_case c[2], int n, int ctx, float scale) {
    size_t nq = (size_t)n * RC_H * RC_HD, nk = (size_t)n * RC_KVH * RC_HD;
    float *q = rnd_vec(nq), *k = rnd_vec(nk), *v = rnd_vec(nk), *got[2];
    int first = 0;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(sol_upload(c[i].be, c[i].q, q, sizeof(float) * nq), 0);
        assert_int_equal(sol_upload(c[i].be, c[i].k, k, sizeof(float) * nk), 0);
        assert_int_equal(sol_upload(c[i].be, c[i].v, v, sizeof(float) * nk), 0);
        int rc = replay_case_step(&c[i], n, ctx, scale);
        if (i == 0) first = rc;
        if (rc == SOL_STEP_RERUN) rc = replay_case_step(&c[i], n, ctx, scale);
        assert_int_equal(rc, 0);
        got[i] = get(c[i].be, c[i].o, nq);
    }
    if (memcmp(got[0], got[1], sizeof(float) * nq))
        fail_msg("%d tokens at context %d: the graph step differs from the eager one", n, ctx);
    free(q), free(k), free(v), free(got[0]), free(got[1]);
    return first;
}

/* Graph replay with no record (docs/backend.md, "CUDA graphs"): once a key's graph is recorded,
 * its decode steps launch nothing themselves and replay it, even while the contexts grow from
 * 64 to 200 positions across the attention's split boundaries (1, 2, then 3 splits per token:
 * the graph launches at the split cap and each token takes its own count); a new batch size is
 * recorded, and the old one replays again; a step that launches something else under the same
 * key (another attention scale) runs nothing, asks to be run again, and is recorded, updating
 * the graph in place. Every step gives the eager backend's bits. */
static void test_graph_replay(void **state) {
    (void)state;
    if (strncmp(spec(), "cuda-emu", 8) != 0) skip(); /* the counters are the emulation's */
    for (int s = 0; s < RC_N; s++)
        for (int i = 0; i < RC_SEQ_BLOCKS; i++)
            rc_table[s][i] = (i * RC_N + s * 7) % (RC_N * RC_SEQ_BLOCKS) + 1;
    sol_err e = {0};
    sol_backend *eager = sol_backend_new(spec(), &(sol_backend_opts){.enforce_eager = 1}, &e);
    assert_non_null(eager);
    void *wo = make_rows(SOL_DT_Q8_0, RC_H * RC_HD, RC_H * RC_HD);
    replay_case c[2];
    replay_case_open(&c[0], open_be(spec(), 0), wo);
    replay_case_open(&c[1], eager, wo);
    unsigned long a[G_N], b[G_N];
    for (int ctx = 56; ctx < 64; ctx += 4) /* sizes the scratch and records the graph */
        replay_both(c, RC_N, ctx, 0.2f);
    graph_stats(c[0].be, a);
    int steps = 0;
    for (int ctx = 64; ctx <= 200; ctx += 8, steps++)
        assert_int_equal(replay_both(c, RC_N, ctx, 0.2f), 0);
    graph_stats(c[0].be, b);
    print_message("  contexts 64..200: %lu steps, %lu with no record, %lu recorded\n",
                  b[G_STEPS] - a[G_STEPS], b[G_NO_RECORD] - a[G_NO_RECORD],
                  b[G_UPDATED] + b[G_INSTANTIATED] - a[G_UPDATED] - a[G_INSTANTIATED]);
    assert_int_equal(b[G_NO_RECORD] - a[G_NO_RECORD], steps);
    assert_int_equal(b[G_UPDATED] + b[G_INSTANTIATED], a[G_UPDATED] + a[G_INSTANTIATED]);
    /* a new batch size is recorded; the old one then replays with no record */
    assert_int_equal(replay_both(c, RC_N - 1, 120, 0.2f), 0);
    graph_stats(c[0].be, a);
    assert_int_equal(a[G_INSTANTIATED] + a[G_UPDATED], b[G_INSTANTIATED] + b[G_UPDATED] + 1);
    assert_int_equal(replay_both(c, RC_N, 200, 0.2f), 0);
    assert_int_equal(replay_both(c, RC_N - 1, 120, 0.2f), 0);
    graph_stats(c[0].be, b);
    assert_int_equal(b[G_NO_RECORD], a[G_NO_RECORD] + 2);
    /* the same key launching other arguments: nothing ran, the step runs again, recorded */
    assert_int_equal(replay_both(c, RC_N, 200, 0.3f), SOL_STEP_RERUN);
    graph_stats(c[0].be, a);
    assert_int_equal(a[G_RERUN], b[G_RERUN] + 1);
    assert_int_equal(a[G_UPDATED], b[G_UPDATED] + 1); /* same topology: updated in place */
    assert_int_equal(a[G_NO_RECORD], b[G_NO_RECORD]);
    assert_int_equal(replay_both(c, RC_N, 200, 0.3f), 0); /* and replays from then on */
    replay_case_close(&c[0]), replay_case_close(&c[1]);
    free(wo);
    sol_backend_free(c[0].be);
    sol_backend_free(eager);
}

/* The GPU's rules: a host pointer where a device buffer belongs, or a weight that skipped
 * weight_prepare, is refused with its name (only the emulation can tell; a GPU faults). */
static void test_host_pointers_refused(void **state) {
    (void)state;
    if (strncmp(spec(), "cuda-emu", 8) != 0) skip();
    sol_backend *be = open_be("cuda-emu", 0);
    float host[64] = {0}, w[64] = {0};
    float *d = put(be, host, sizeof host);
    assert_int_equal(sol_rmsnorm(be, host, d, d, 1, 64, 1e-5f), -EFAULT);
    assert_non_null(strstr(be->err.msg, "x (256 bytes) is not inside a device buffer"));
    assert_int_equal(sol_add(be, d, d, host, 64), -EFAULT);
    assert_non_null(strstr(be->err.msg, "out"));
    sol_weight raw = {SOL_DT_F32, 2, 32, w, 128, 0, 0};
    assert_int_equal(sol_matmul(be, &raw, d, d, 1), -EFAULT);
    assert_non_null(strstr(be->err.msg, "weight"));
    /* a buffer too small for the shape is caught as well (it would read past the end) */
    assert_int_equal(sol_silu_mul(be, d, d, d, 65), -EFAULT);
    sol_buf_free(be, d);
    sol_backend_free(be);
    /* the "host" variant, which the op tests use with host arrays, accepts them */
    be = open_be("cuda-emu:host", 0);
    assert_int_equal(sol_add(be, host, host, host, 64), 0);
    sol_backend_free(be);
}

/* With var=value the backend is not made, and its message holds `says`; var is unset after. */
static void expect_env_refused(const char *var, const char *value, const char *says) {
    setenv(var, value, 1);
    sol_err e = {0};
    assert_null(sol_backend_new("cuda-emu", NULL, &e));
    assert_non_null(strstr(e.msg, says));
    unsetenv(var);
}

/* Device memory is reported and runs out with a message, not a crash; the pretend device's size
 * comes from SOL_CUDA_EMU_MEMORY_MB. */
static void test_memory(void **state) {
    (void)state;
    if (strncmp(spec(), "cuda-emu", 8) != 0) skip();
    setenv("SOL_CUDA_EMU_MEMORY_MB", "8", 1);
    sol_backend *be = open_be("cuda-emu", 0);
    size_t free0 = 0, total = 0, free1 = 0;
    assert_int_equal(sol_mem_info(be, &free0, &total), 0);
    assert_int_equal(total, (size_t)8 << 20);
    void *p = sol_buf_alloc(be, 1 << 20);
    assert_non_null(p);
    assert_int_equal(sol_mem_info(be, &free1, &total), 0);
    assert_int_equal(free0 - free1, 1 << 20);
    assert_null(sol_buf_alloc(be, 16 << 20));
    assert_non_null(strstr(be->err.msg, "out of device memory"));
    assert_null(sol_kv_alloc(be, 4, 1024, 16, 8, 64, SOL_DT_F16));
    assert_non_null(strstr(be->err.msg, "kv_alloc"));
    sol_buf_free(be, p);
    sol_backend_free(be);
    expect_env_refused("SOL_CUDA_EMU_MEMORY_MB", "lots", "SOL_CUDA_EMU_MEMORY_MB=lots");
    sol_backend *cpu = open_be("cpu", 0);
    assert_int_equal(sol_mem_info(cpu, &free0, &total), -ENOTSUP);
    sol_backend_free(cpu);
}

/* SOL_CUDA_PDL: 0 turns programmatic dependent launch off, anything but 0 or 1 is refused by
 * name; the emulation pretends an sm_90, where it is on. */
static void test_pdl_switch(void **state) {
    (void)state;
    if (strncmp(spec(), "cuda-emu", 8) != 0) skip();
    char buf[2048];
    const struct {
        const char *env, *says;
    } cases[] = {{NULL, "programmatic dependent launch on"},
                 {"1", "programmatic dependent launch on"},
                 {"0", "programmatic dependent launch off"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (cases[i].env)
            setenv("SOL_CUDA_PDL", cases[i].env, 1);
        else
            unsetenv("SOL_CUDA_PDL");
        sol_backend *be = open_be("cuda-emu", 0);
        assert_int_equal(sol_backend_stats(be, buf, sizeof buf), 0);
        assert_non_null(strstr(buf, cases[i].says));
        sol_backend_free(be);
    }
    expect_env_refused("SOL_CUDA_PDL", "yes", "SOL_CUDA_PDL=yes: expected 0 or 1");
}

/* The emulated backend opened with a 0/1 switch set to 0 (off) or unset (the default). */
static sol_backend *open_switched(const char *var, int off) {
    if (off)
        setenv(var, "0", 1);
    else
        unsetenv(var);
    return open_be("cuda-emu", 0);
}

/* SOL_CUDA_NEXT_INPUT=0 ignores next_input's hints (the structure before them, for a GPU lease
 * to time both): a hinted matmul_add makes no norm tail, said in the stats line; "on" when
 * unset or 1; another value refused by name. */
static void test_next_input_switch(void **state) {
    (void)state;
    if (strncmp(spec(), "cuda-emu", 8) != 0) skip();
    for (int off = 0; off < 2; off++) {
        sol_backend *be = open_switched("SOL_CUDA_NEXT_INPUT", off);
        char buf[2048];
        assert_int_equal(sol_backend_stats(be, buf, sizeof buf), 0);
        assert_non_null(
            strstr(buf, off ? "next_input off (SOL_CUDA_NEXT_INPUT=0)" : "next_input on"));
        enum { D = 256, K = 256 };
        void *rows[2] = {make_rows(SOL_DT_Q4_0, D, K), make_rows(SOL_DT_Q4_0, 32, D)};
        sol_weight w = {SOL_DT_Q4_0, D, K, rows[0], sol_dtype_row_bytes(SOL_DT_Q4_0, K), 0, 0};
        sol_weight wn = {SOL_DT_Q4_0, 32, D, rows[1], sol_dtype_row_bytes(SOL_DT_Q4_0, D), 0, 0};
        assert_int_equal(sol_weight_prepare(be, &w), 0);
        assert_int_equal(sol_weight_prepare(be, &wn), 0);
        float *x = rnd_vec(K), *g = rnd_vec(D);
        float *xd = put(be, x, sizeof(float) * K), *gd = put(be, g, sizeof(float) * D);
        float *y = put(be, NULL, sizeof(float) * D), *xn = put(be, NULL, sizeof(float) * D);
        unsigned long m0, r0, m1, r1;
        tail_counts(be, &m0, &r0);
        assert_int_equal(
            sol_next_input(be, &(sol_next_in){.w = &wn, .norm = gd, .eps = 1e-5f, .xn = xn}), 0);
        assert_int_equal(sol_matmul_add(be, &w, xd, y, NULL, 1), 0);
        tail_counts(be, &m1, &r1);
        assert_int_equal(m1 - m0, !off); /* the hinted matmul_add made its tail, or not */
        sol_buf_free(be, xd), sol_buf_free(be, gd), sol_buf_free(be, y), sol_buf_free(be, xn);
        free(rows[0]), free(rows[1]), free(x), free(g);
        sol_backend_free(be);
    }
    unsetenv("SOL_CUDA_NEXT_INPUT");
    expect_env_refused("SOL_CUDA_NEXT_INPUT", "yes", "SOL_CUDA_NEXT_INPUT=yes: expected 0 or 1");
}

/* Split-K through the backend (k_mma.cu's mma_splits: a 48-row matrix of K = 1024 at 40 tokens
 * is one tile on 132 SMs, so 4 splits): matmul and matmul_add with and without
 * SOL_CUDA_SPLIT_K=0, the split launches counted (a switch that does nothing fails), the two
 * within 1e-5 relative (another f32 sum order, nothing more), the same bits on every call (the
 * emulation draws another block order each launch, so another split completes each tile);
 * "yes" refused by name. */
static void test_split_k(void **state) {
    (void)state;
    if (strncmp(spec(), "cuda-emu", 8) != 0) skip();
    enum { N = 40, K = 1024, M = 48 };
    void *rows = make_rows(SOL_DT_Q4_K, M, K);
    float *x = rnd_vec((size_t)N * K), *base = rnd_vec((size_t)N * M), *out[2][2];
    for (int off = 0; off < 2; off++) {
        sol_backend *be = open_switched("SOL_CUDA_SPLIT_K", off);
        char buf[2048];
        assert_int_equal(sol_backend_stats(be, buf, sizeof buf), 0);
        assert_non_null(strstr(buf, off ? "off (SOL_CUDA_SPLIT_K=0)" : "split-K: 0, on"));
        sol_weight w = {SOL_DT_Q4_K, M, K, rows, sol_dtype_row_bytes(SOL_DT_Q4_K, K), 0, 0};
        assert_int_equal(sol_weight_prepare(be, &w), 0);
        float *xd = put(be, x, sizeof(float) * N * K);
        for (int add = 0; add < 2; add++) {
            float *y = put(be, base, sizeof(float) * N * M), *first = NULL;
            for (int call = 0; call < 3; call++) {
                unsigned long s0 = mma_split_count(be);
                if (add) assert_int_equal(sol_upload(be, y, base, sizeof(float) * N * M), 0);
                assert_int_equal(
                    add ? sol_matmul_add(be, &w, xd, y, NULL, N) : sol_matmul(be, &w, xd, y, N), 0);
                assert_int_equal(mma_split_count(be) - s0, !off);
                float *got = get(be, y, (size_t)N * M);
                if (first && memcmp(first, got, sizeof(float) * N * M))
                    fail_msg("split-K %s add=%d: call %d's bits differ from call 0's",
                             off ? "off" : "on", add, call);
                if (first)
                    free(got);
                else
                    first = got;
            }
            out[off][add] = first;
            sol_buf_free(be, y);
        }
        sol_buf_free(be, xd);
        sol_backend_free(be);
    }
    unsetenv("SOL_CUDA_SPLIT_K");
    for (int add = 0; add < 2; add++) {
        double e = 0, n2 = 0;
        for (int i = 0; i < N * M; i++) {
            double d = (double)out[0][add][i] - out[1][add][i];
            e += d * d, n2 += (double)out[1][add][i] * out[1][add][i];
        }
        if (!(sqrt(e / n2) < 1e-5))
            fail_msg("split-K add=%d: %g relative from the unsplit GEMM", add, sqrt(e / n2));
        free(out[0][add]), free(out[1][add]);
    }
    free(rows), free(x), free(base);
    expect_env_refused("SOL_CUDA_SPLIT_K", "yes", "SOL_CUDA_SPLIT_K=yes: expected 0 or 1");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_fused_prologues),
        cmocka_unit_test(test_gemm_shared_x),
        cmocka_unit_test(test_norm_tails),
        cmocka_unit_test(test_glu_ends),
        cmocka_unit_test(test_next_input_switch),
        cmocka_unit_test(test_split_k),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_long_context_attention),
        cmocka_unit_test(test_graphs),
        cmocka_unit_test(test_graph_replay),
        cmocka_unit_test(test_host_pointers_refused),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_pdl_switch),
        cmocka_unit_test(test_rope_kv_write),
        cmocka_unit_test(test_qkv_rope_kv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
