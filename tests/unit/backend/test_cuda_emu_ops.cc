/* Promise: the CUDA kernels written so far (element-wise, RMSNorm, RoPE, embed, decode GEMV, KV
 * writes and copies, paged attention, the fused quantize launches, the tensor-core batch GEMMs
 * (F16 and int8) and prefill attention;
 * worker/backend/cuda/k_*.cu),
 * run through the host emulation, compute what the CPU backend computes for the same inputs,
 * within float rounding (the GPU sums in other orders): every case the op test gives the CPU. */
#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <vector>
extern "C" {
#include <cmocka.h>
/* backend.h is C11; its layout checks use C's spelling of static_assert. */
#define _Static_assert static_assert
#include "backend.h"
#include "rope_freq.h"
#undef _Static_assert
}

/* The kernel sources compiled as host C++ (libsol_backend_cuda_emu: kernels_emu.cc), their
 * launchers named sol_emu_*. */
#define SOL_CUDA_EMU 1
#include "cuda_kernels.h"
#include "cuda_rt.h"

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

/* Tolerances: add and scale are one correctly rounded IEEE operation with no product to fuse,
 * the same bits on any device: exact. silu/gelu go through expf (CUDA's is within 2 ulp, the
 * host's within 1) and nvcc fuses gelu's 1 + c x^2 into an FMA: a few ulp, 2^-23 * 4 < 1e-6
 * relative. */
static void test_elementwise(void **state) {
    (void)state;
    enum { N = 1000 };
    static float a[N], b[N], want[N], got[N];
    fill(a, N, 1);
    fill(b, N, 7);
    sol_backend *be = cpu();
    assert_int_equal(sol_silu_mul(be, a, b, want, N), 0);
    sol_emu_silu_mul(a, b, got, N, nullptr);
    assert_true(rel_err(got, want, N) < 1e-6);
    assert_int_equal(sol_gelu_mul(be, a, b, want, N), 0);
    sol_emu_gelu_mul(a, b, got, N, nullptr);
    assert_true(rel_err(got, want, N) < 1e-6);
    assert_int_equal(sol_add(be, a, b, want, N), 0);
    sol_emu_add(a, b, got, N, nullptr);
    assert_memory_equal(got, want, sizeof want);
    assert_int_equal(sol_scale(be, a, 45.25f, want, N), 0);
    sol_emu_scale(a, 45.25f, got, N, nullptr);
    assert_memory_equal(got, want, sizeof want);
    sol_backend_free(be);
}

/* Tolerance 1e-6: the sum of squares runs in another order (256 threads, then a tree) and nvcc
 * fuses ss += x x; positive terms, so the sum is within ~log2(n) 2^-24 < 1e-6 relative of the
 * CPU's, and the scale (its inverse square root) within half that. */
static void test_rmsnorm(void **state) {
    (void)state;
    const int dims[] = {67, 256, 1000};
    static float x[3 * 1000], w[1000], want[3 * 1000], got[3 * 1000];
    sol_backend *be = cpu();
    for (int d : dims) {
        fill(x, 3 * d, 3);
        fill(w, d, 5);
        assert_int_equal(sol_rmsnorm(be, x, w, want, 3, d, 1e-5f), 0);
        sol_emu_rmsnorm(x, w, got, 3, d, 1e-5f, nullptr);
        if (!(rel_err(got, want, 3 * d) < 1e-6))
            fail_msg("rmsnorm dim %d: %g", d, rel_err(got, want, 3 * d));
    }
    sol_backend_free(be);
}

/* Exact: the rotation is written with __fmul_rn/__fsub_rn/__fadd_rn (three roundings, as the CPU,
 * never an FMA) and the angles in double are the CPU's here (the host's cos/sin). On a GPU,
 * CUDA's double cos/sin (within 2 ulp of double) can flip a float rounding: test_cuda_backend
 * allows 1e-5 there. */
static void test_rope(void **state) {
    (void)state;
    enum { N = 3, H = 4, HD = 64 };
    const int32_t pos[N] = {0, 17, 4000};
    sol_rope_params ps[5] = {};
    ps[0].freq_base = 10000.0f;
    ps[1].freq_base = 500000.0f, ps[1].scaling_factor = 8.0f, ps[1].low_freq_factor = 1.0f,
    ps[1].high_freq_factor = 4.0f, ps[1].orig_ctx = 8192;
    ps[2].freq_base = 1000000.0f, ps[2].neox = 1;
    ps[3].freq_base = 1000000.0f, ps[3].neox = 1, ps[3].freq_scale = 0.125f;
    ps[4].freq_base = 150000.0f, ps[4].neox = 1, ps[4].freq_scale = 0.25f; /* YaRN x4 */
    ps[4].ext_factor = 1.0f, ps[4].yarn_low = 5.0f, ps[4].yarn_high = 23.0f, ps[4].mscale = 1.2f;
    sol_backend *be = cpu();
    for (const sol_rope_params &p : ps) {
        static float want[N * H * HD], got[N * H * HD];
        fill(want, N * H * HD, 11);
        fill(got, N * H * HD, 11);
        assert_int_equal(sol_rope(be, want, pos, N, H, HD, &p), 0);
        double freqs[HD / 2]; /* the backend stages rope_freq.h's table with the positions */
        sol_rope_inv_freqs(&p, HD, freqs);
        sol_cuda_rope_args a = {freqs, p.mscale > 0.0f ? p.mscale : 1.0f, p.neox};
        sol_emu_rope(got, pos, N, H, HD, a, nullptr);
        assert_memory_equal(got, want, sizeof want);
    }
    sol_backend_free(be);
}

/* A weight of `type` (rows x K) quantized from smooth floats: the bytes for the CUDA kernels and
 * a prepared copy for the CPU backend (which repacks Q4_0/Q8_0 in place). */
typedef struct {
    sol_weight cpu;
    std::vector<unsigned char> raw, copy;
} weight_pair;

static weight_pair make_weight(sol_backend *be, sol_dtype type, int rows, int K) {
    weight_pair p;
    size_t rb = sol_dtype_row_bytes(type, K);
    p.raw.resize(rb * rows);
    std::vector<float> row(K);
    for (int r = 0; r < rows; r++) {
        fill(row.data(), K, 31 * r + 1);
        for (float &v : row)
            v *= 0.05f;
        if (type == SOL_DT_Q5_0 ||
            type == SOL_DT_Q5_1) { /* no writer: random quants, small scales */
            unsigned char *b = p.raw.data() + rb * r;
            for (size_t i = 0; i < rb; i++)
                b[i] = (unsigned char)((i * 131 + (size_t)r * 71 + 17) % 251);
            size_t bb = sol_dtype_block_bytes(type);
            for (size_t o = 0; o < rb; o += bb) {
                uint16_t d = sol_f32_to_f16(0.004f + 0.001f * (float)(o % 7)),
                         m = sol_f32_to_f16(-0.03f);
                memcpy(b + o, &d, 2);
                if (type == SOL_DT_Q5_1) memcpy(b + o + 2, &m, 2);
            }
            continue;
        }
        assert_int_equal(sol_quantize_row(type, row.data(), p.raw.data() + rb * r, K), 0);
    }
    p.copy = p.raw;
    p.cpu = sol_weight{};
    p.cpu.type = type;
    p.cpu.rows = rows;
    p.cpu.cols = K;
    p.cpu.data = p.copy.data();
    p.cpu.row_bytes = rb;
    assert_int_equal(sol_weight_prepare(be, &p.cpu), 0);
    return p;
}

/* The weight as the CUDA backend keeps it on the device (cuda_layout.h): split-packed or ggml's
 * rows, with the slack past the end; `dev` owns the bytes. */
static sol_cuda_wt device_view(const weight_pair &p, std::vector<unsigned char> &dev) {
    int type = (int)p.cpu.type, rows = (int)p.cpu.rows, cols = (int)p.cpu.cols;
    dev.assign(sol_cuda_weight_bytes(type, rows, cols, p.cpu.row_bytes), 0);
    int split = sol_cuda_split_part(type) != 0;
    if (split)
        assert_int_equal(
            sol_cuda_split_pack(type, p.raw.data(), p.cpu.row_bytes, rows, cols, dev.data()), 0);
    else
        memcpy(dev.data(), p.raw.data(), p.raw.size());
    return sol_cuda_wt{dev.data(), p.cpu.row_bytes, type, split, rows, cols};
}

static const sol_dtype kTypes[] = {SOL_DT_F32,  SOL_DT_F16,  SOL_DT_BF16, SOL_DT_Q8_0,
                                   SOL_DT_Q4_0, SOL_DT_Q5_0, SOL_DT_Q5_1, SOL_DT_Q4_K,
                                   SOL_DT_Q5_K, SOL_DT_Q6_K, SOL_DT_MXFP4};

/* Exact: dequantization is a product and at most one sum per element, written with
 * __fmul_rn/__fsub_rn/__fadd_rn (dequant.cuh) so that nvcc cannot fuse them: the CPU's bits. */
static void test_embed(void **state) {
    (void)state;
    sol_backend *be = cpu();
    const int32_t ids[3] = {7, 0, 12};
    for (sol_dtype t : kTypes) {
        weight_pair w = make_weight(be, t, 13, 512);
        std::vector<unsigned char> dev;
        sol_cuda_wt wt = device_view(w, dev);
        float want[3 * 512], got[3 * 512];
        assert_int_equal(sol_embed(be, &w.cpu, ids, 3, want), 0);
        assert_int_equal(sol_emu_embed(wt, ids, 3, got, nullptr), 0);
        if (wt.split) { /* a split type in ggml's rows is refused, never misread */
            wt.split = 0;
            assert_int_equal(sol_emu_embed(wt, ids, 3, got, nullptr), -EINVAL);
            continue;
        }
        for (int i = 0; i < 3 * 512; i++)
            if (got[i] != want[i])
                fail_msg("embed %s differs at %d: %g vs %g", sol_dtype_name(t), i, got[i], want[i]);
    }
    sol_cuda_wt unknown{nullptr, 0, 99, 0, 1, 256};
    assert_int_equal(sol_emu_embed(unknown, ids, 1, nullptr, nullptr), -ENOTSUP);
    sol_backend_free(be);
}

/* Decode/verify matmuls: the integer dots and the activation quantization are the CPU's own;
 * the float terms (one per block: K / 32 = 16 here) are summed over 32 lanes and a warp tree
 * instead of in order, and nvcc fuses acc += a b: each sum is within ~16 * 2^-24 of its terms'
 * magnitudes, 1e-6 relative for these rows; 1e-5 leaves room for cancellation. */
/* One weight of type t, M x K, against the CPU at 1 and 5 tokens (rows of other lengths than
 * test_gemv's K: how many lanes a row takes, and how many rounds). */
static void gemv_shape(sol_backend *be, sol_dtype t, int M, int K) {
    std::vector<float> x(5 * K), want(5 * M), got(5 * M);
    fill(x.data(), 5 * K, 4);
    std::vector<unsigned char> scratch(sol_emu_gemv_scratch_bytes(5, K)), dev;
    weight_pair w = make_weight(be, t, M, K);
    sol_cuda_wt wt = device_view(w, dev);
    for (int n : {1, 5}) {
        assert_int_equal(sol_matmul(be, &w.cpu, x.data(), want.data(), n), 0);
        assert_int_equal(sol_emu_gemv(wt, x.data(), got.data(), n, scratch.data(), 0, nullptr), 0);
        double e = rel_err(got.data(), want.data(), n * M);
        if (!(e < 1e-5)) fail_msg("gemv %s K=%d n=%d: %g", sol_dtype_name(t), K, n, e);
    }
}

static void test_gemv(void **state) {
    (void)state;
    sol_backend *be = cpu();
    enum { M = 37, K = 512 };
    std::vector<float> x(16 * K), want(16 * M), got(16 * M);
    fill(x.data(), 16 * K, 9);
    std::vector<unsigned char> scratch(sol_emu_gemv_scratch_bytes(16, K));
    for (sol_dtype t : kTypes) {
        weight_pair w = make_weight(be, t, M, K);
        std::vector<unsigned char> dev;
        sol_cuda_wt wt = device_view(w, dev);
        /* every token-count template (1, 2, 4, 8, 16) and counts that round up to one */
        for (int n : {1, 2, 3, 4, 5, 8, 9, 16}) {
            assert_int_equal(sol_matmul(be, &w.cpu, x.data(), want.data(), n), 0);
            std::fill(got.begin(), got.end(), NAN);
            assert_int_equal(sol_emu_gemv(wt, x.data(), got.data(), n, scratch.data(), 0, nullptr),
                             0);
            double e = rel_err(got.data(), want.data(), n * M);
            if (!(e < 1e-5)) fail_msg("gemv %s n=%d: %g", sol_dtype_name(t), n, e);
            for (int i = n * M; i < 16 * M; i++) /* rows of tokens past n are not written */
                if (!std::isnan(got[i]))
                    fail_msg("gemv %s n=%d wrote past n", sol_dtype_name(t), n);
            /* add = 1: y += the product, the product's bits then one float add */
            std::vector<float> acc(16 * M), base(16 * M);
            fill(base.data(), n * M, 5);
            acc = base;
            assert_int_equal(sol_emu_gemv(wt, x.data(), acc.data(), n, scratch.data(), 1, nullptr),
                             0);
            for (int i = 0; i < n * M; i++)
                if (acc[i] != base[i] + got[i])
                    fail_msg("gemv %s n=%d add: %g != %g + %g", sol_dtype_name(t), n, acc[i],
                             base[i], got[i]);
        }
        wt.split = !wt.split; /* the other layout is refused, never misread */
        assert_int_equal(sol_emu_gemv(wt, x.data(), got.data(), 1, scratch.data(), 0, nullptr),
                         -EINVAL);
    }
    /* K-quant rows of several lane rounds and of a partial one (K = 512 above: 8 or 16 lanes a
     * row, rows sharing a warp): 5 and 9 super-blocks, Q4_K/Q5_K 20 and 36 lanes, Q6_K 40, 72 */
    for (int k : {1280, 2304})
        for (sol_dtype t : {SOL_DT_Q4_K, SOL_DT_Q5_K, SOL_DT_Q6_K})
            gemv_shape(be, t, M, k);
    /* float rows short enough to share a warp: 16 elements (F32: 16 lanes a row; F16/BF16's
     * 128-bit kernel: 2), 64 (8) and 200 (25 loads: one partial round of 32 lanes) */
    for (int k : {16, 64, 200})
        for (sol_dtype t : {SOL_DT_F32, SOL_DT_F16, SOL_DT_BF16})
            gemv_shape(be, t, M, k);
    weight_pair w = make_weight(be, SOL_DT_F32, M, K);
    std::vector<unsigned char> dev;
    sol_cuda_wt wt = device_view(w, dev);
    assert_int_equal(sol_emu_gemv(wt, x.data(), got.data(), 17, scratch.data(), 0, nullptr),
                     -ENOTSUP);
    sol_backend_free(be);
}

/* gemv_run_many: matrices that read one quantized x launched up to three at a time (q/k/v,
 * gate/up), each block picking its matrix by its index: the bits of one gemv_run per matrix, with
 * each matrix's bias, for lists that mix types of one kernel (k_gemv_kq's Q4_K/Q5_K and Q6_K
 * bodies: Q4_K_M's q, k and v) and of one activation kind (Q4_0, Q8_0, Q5_1; F16 rows of the
 * 128-bit kernel beside an F32 one: two launches), row counts that end mid-block, runs of 1..3 and
 * a list of 4. */
static void test_gemv_many(void **state) {
    (void)state;
    sol_backend *be = cpu();
    enum { K = 512 };
    struct list {
        std::vector<sol_dtype> types;
        std::vector<int> rows;
    } lists[] = {
        {{SOL_DT_Q4_K, SOL_DT_Q4_K, SOL_DT_Q6_K}, {64, 16, 40}},
        {{SOL_DT_Q4_K, SOL_DT_Q5_K, SOL_DT_Q4_K, SOL_DT_Q4_K}, {37, 5, 64, 9}},
        {{SOL_DT_Q4_0, SOL_DT_Q8_0, SOL_DT_Q5_1}, {33, 70, 1}},
        {{SOL_DT_F16, SOL_DT_F32, SOL_DT_F16}, {24, 24, 50}},
    };
    std::vector<float> x(16 * K);
    fill(x.data(), 16 * K, 3);
    std::vector<unsigned char> scratch(sol_emu_gemv_scratch_bytes(16, K));
    for (const list &l : lists) {
        size_t m = l.types.size();
        std::vector<weight_pair> w;
        std::vector<std::vector<unsigned char>> dev(m);
        std::vector<sol_cuda_wt> wt(m);
        std::vector<std::vector<float>> bias(m), want(m), got(m);
        std::vector<float *> ys(m);
        std::vector<const float *> bs(m);
        for (size_t i = 0; i < m; i++)
            w.push_back(make_weight(be, l.types[i], l.rows[i], K));
        for (size_t i = 0; i < m; i++) {
            wt[i] = device_view(w[i], dev[i]);
            bias[i].resize((size_t)l.rows[i]);
            fill(bias[i].data(), l.rows[i], 11 + (int)i);
            bs[i] = i == 1 ? nullptr : bias[i].data(); /* a matrix without a bias among them */
        }
        int act = sol_emu_gemv_act(wt[0].type);
        for (int n : {1, 3, 16}) {
            assert_int_equal(sol_emu_gemv_quantize(act, x.data(), n, K, scratch.data(), nullptr),
                             0);
            for (size_t i = 0; i < m; i++) {
                want[i].assign((size_t)(n * l.rows[i]), 0.0f);
                got[i].assign((size_t)(n * l.rows[i]), NAN);
                ys[i] = got[i].data();
                assert_int_equal(sol_emu_gemv_run(wt[i], x.data(), want[i].data(), n,
                                                  scratch.data(), 0, bs[i], nullptr),
                                 0);
            }
            assert_int_equal(sol_emu_gemv_run_many(wt.data(), ys.data(), bs.data(), (int)m,
                                                   x.data(), n, scratch.data(), 0, nullptr),
                             0);
            for (size_t i = 0; i < m; i++)
                if (memcmp(got[i].data(), want[i].data(), want[i].size() * sizeof(float)))
                    fail_msg("gemv_run_many: matrix %zu (%s, %d rows) of %zu, n=%d differs", i,
                             sol_dtype_name(l.types[i]), l.rows[i], m, n);
        }
    }
    /* a list whose columns differ is refused, not misread */
    weight_pair a = make_weight(be, SOL_DT_Q8_0, 8, K), b = make_weight(be, SOL_DT_Q8_0, 8, 256);
    std::vector<unsigned char> da, db;
    sol_cuda_wt two[2] = {device_view(a, da), device_view(b, db)};
    std::vector<float> y0(8), y1(8);
    float *ys2[2] = {y0.data(), y1.data()};
    assert_int_equal(
        sol_emu_gemv_run_many(two, ys2, nullptr, 2, x.data(), 1, scratch.data(), 0, nullptr),
        -EINVAL);
    sol_backend_free(be);
}

/* gemv_run_tail: a matmul_add's GEMV whose last block normalizes and quantizes the output for
 * the next matrix (the o and down projections' norm tails) against gemv_run then
 * gemv_norm_quantize (rmsnorm for float weights next), bit for bit: y, xn and the activations'
 * bytes, for every GEMV kernel (float, 128-bit F16, Q8_0-activation, K-quant), every next kind,
 * rows that end mid-block (544 rows at K = 64: 64 a block) and whole-warp rows (K = 2048), 1, 3
 * and 16 tokens; the counter back at 0 (a second call, without xn for a quantized kind, gives
 * the same activations). The activations go to the scratch the GEMV read x from (as the backend
 * does). xn == y is refused. */
static void test_gemv_norm_tail(void **state) {
    (void)state;
    sol_backend *be = cpu();
    struct tc {
        sol_dtype t;
        int rows, K, act;
    } cases[] = {
        {SOL_DT_Q4_0, 544, 64, SOL_CUDA_ACT_Q8_0},   {SOL_DT_Q8_0, 512, 2048, SOL_CUDA_ACT_Q8_K},
        {SOL_DT_Q4_K, 512, 2048, SOL_CUDA_ACT_Q8_K}, {SOL_DT_Q6_K, 256, 512, SOL_CUDA_ACT_Q8_0},
        {SOL_DT_F16, 544, 64, SOL_CUDA_ACT_FLOAT},   {SOL_DT_F32, 100, 8, SOL_CUDA_ACT_FLOAT},
        {SOL_DT_Q4_K, 768, 256, SOL_CUDA_ACT_FLOAT},
    };
    for (const tc &c : cases) {
        weight_pair w = make_weight(be, c.t, c.rows, c.K);
        std::vector<unsigned char> dev;
        sol_cuda_wt wt = device_view(w, dev);
        int xact = sol_emu_gemv_act(wt.type), R = c.rows;
        size_t sb = sol_emu_gemv_scratch_bytes(16, c.K > R ? c.K : R);
        std::vector<unsigned char> sa(sb), sf(sb);
        std::vector<float> x(16 * c.K), y0(16 * R), ya(16 * R), yf(16 * R), g(R), xa(16 * R),
            xf(16 * R);
        fill(x.data(), 16 * c.K, 5);
        fill(y0.data(), 16 * R, 9);
        fill(g.data(), R, 13);
        int cnt = 0;
        for (int n : {1, 3, 16})
            for (int rep = 0; rep < 2; rep++) {
                ya = y0, yf = y0;
                std::fill(sa.begin(), sa.end(), 0xAB), std::fill(sf.begin(), sf.end(), 0xAB);
                std::fill(xa.begin(), xa.end(), NAN), std::fill(xf.begin(), xf.end(), NAN);
                assert_int_equal(sol_emu_gemv_quantize(xact, x.data(), n, c.K, sa.data(), nullptr),
                                 0);
                assert_int_equal(sol_emu_gemv_quantize(xact, x.data(), n, c.K, sf.data(), nullptr),
                                 0);
                assert_int_equal(
                    sol_emu_gemv_run(wt, x.data(), ya.data(), n, sa.data(), 1, nullptr, nullptr),
                    0);
                if (c.act == SOL_CUDA_ACT_FLOAT)
                    sol_emu_rmsnorm(ya.data(), g.data(), xa.data(), n, R, 1e-5f, nullptr);
                else
                    assert_int_equal(sol_emu_gemv_norm_quantize(c.act, ya.data(), g.data(), 1e-5f,
                                                                xa.data(), n, R, sa.data(),
                                                                nullptr),
                                     0);
                /* the second call of a quantized kind without xn: the same activations */
                bool no_xn = rep == 1 && c.act != SOL_CUDA_ACT_FLOAT;
                sol_cuda_norm_tail t = {g.data(), 1e-5f,     no_xn ? nullptr : xf.data(),
                                        c.act,    sf.data(), &cnt};
                assert_int_equal(
                    sol_emu_gemv_run_tail(wt, x.data(), yf.data(), n, sf.data(), 1, &t, nullptr),
                    0);
                if (memcmp(ya.data(), yf.data(), sizeof(float) * n * R))
                    fail_msg("norm tail %s act %d n=%d: y differs", sol_dtype_name(c.t), c.act, n);
                if (!no_xn && memcmp(xa.data(), xf.data(), sizeof(float) * n * R))
                    fail_msg("norm tail %s act %d n=%d: xn differs from the norm's",
                             sol_dtype_name(c.t), c.act, n);
                /* the next kind's activations: the bytes the norm+quantize launch made */
                size_t used = c.act == SOL_CUDA_ACT_FLOAT ? 0 : sol_emu_gemv_scratch_bytes(n, R);
                if (memcmp(sa.data(), sf.data(), used))
                    fail_msg("norm tail %s act %d n=%d: the activations differ",
                             sol_dtype_name(c.t), c.act, n);
                if (cnt) fail_msg("norm tail: the counter was left at %d", cnt);
            }
        sol_cuda_norm_tail bad = {g.data(), 1e-5f, yf.data(), c.act, sf.data(), &cnt};
        assert_int_equal(
            sol_emu_gemv_run_tail(wt, x.data(), yf.data(), 1, sf.data(), 1, &bad, nullptr),
            -EINVAL);
    }
    sol_backend_free(be);
}

/* gemv_run_glu: gate and up in one launch whose warps that complete a block of rows quantize
 * act(gate) * up there (the down projection's activations) against gemv_run_many then
 * gemv_glu_quantize, bit for bit: both outputs and the activations' bytes, for Q8_K (Q4_K gate
 * and up, and Q4_K beside Q6_K: 4 and 8 lanes a super-block, other warps a chunk) and Q8_0
 * (Q4_0, and F16 rows of the 128-bit kernel), rows a whole warp's and rows sharing a warp, SiLU
 * and GELU, 1, 3 and 16 tokens, biases; the counters back at 0. Refused: a float act, rows not a
 * multiple of its block, matrices of two kernels. */
static void test_gemv_glu_end(void **state) {
    (void)state;
    sol_backend *be = cpu();
    struct gc {
        sol_dtype g, u;
        int rows, K, act;
    } cases[] = {
        {SOL_DT_Q4_K, SOL_DT_Q4_K, 512, 2048, SOL_CUDA_ACT_Q8_K},
        {SOL_DT_Q4_K, SOL_DT_Q6_K, 256, 512, SOL_CUDA_ACT_Q8_K},
        {SOL_DT_Q4_0, SOL_DT_Q4_0, 96, 256, SOL_CUDA_ACT_Q8_0},
        {SOL_DT_F16, SOL_DT_F16, 64, 2048, SOL_CUDA_ACT_Q8_0},
    };
    for (const gc &c : cases) {
        weight_pair wg = make_weight(be, c.g, c.rows, c.K), wu = make_weight(be, c.u, c.rows, c.K);
        std::vector<unsigned char> dg, du;
        sol_cuda_wt wt[2] = {device_view(wg, dg), device_view(wu, du)};
        int xact = sol_emu_gemv_act(wt[0].type), R = c.rows;
        std::vector<unsigned char> sx(sol_emu_gemv_scratch_bytes(16, c.K));
        size_t qb = sol_emu_gemv_scratch_bytes(16, R);
        std::vector<unsigned char> qa(qb), qf(qb);
        std::vector<float> x(16 * c.K), ga(16 * R), ua(16 * R), gf(16 * R), uf(16 * R), b0(R),
            b1(R);
        fill(x.data(), 16 * c.K, 7);
        fill(b0.data(), R, 3), fill(b1.data(), R, 5);
        const float *bs[2] = {b0.data(), b1.data()};
        std::vector<int> cnt(R / 32, 0);
        for (int n : {1, 3, 16})
            for (int gelu : {0, 1}) {
                std::fill(qa.begin(), qa.end(), 0xAB), std::fill(qf.begin(), qf.end(), 0xAB);
                float *ya[2] = {ga.data(), ua.data()}, *yf[2] = {gf.data(), uf.data()};
                assert_int_equal(sol_emu_gemv_quantize(xact, x.data(), n, c.K, sx.data(), nullptr),
                                 0);
                assert_int_equal(
                    sol_emu_gemv_run_many(wt, ya, bs, 2, x.data(), n, sx.data(), 0, nullptr), 0);
                assert_int_equal(sol_emu_gemv_glu_quantize(c.act, gelu, ga.data(), ua.data(), n, R,
                                                           qa.data(), nullptr),
                                 0);
                sol_cuda_glu_tail t = {c.act, gelu, qf.data(), cnt.data()};
                assert_int_equal(
                    sol_emu_gemv_run_glu(wt, yf, bs, x.data(), n, sx.data(), &t, nullptr), 0);
                if (memcmp(ga.data(), gf.data(), sizeof(float) * n * R) ||
                    memcmp(ua.data(), uf.data(), sizeof(float) * n * R))
                    fail_msg("glu end %s/%s n=%d: gate or up differs", sol_dtype_name(c.g),
                             sol_dtype_name(c.u), n);
                if (memcmp(qa.data(), qf.data(), sol_emu_gemv_scratch_bytes(n, R)))
                    fail_msg("glu end %s/%s act %d n=%d gelu %d: the activations differ from "
                             "gemv_glu_quantize's",
                             sol_dtype_name(c.g), sol_dtype_name(c.u), c.act, n, gelu);
                for (int v : cnt)
                    if (v) fail_msg("glu end: a counter was left at %d", v);
            }
        float *yf[2] = {gf.data(), uf.data()};
        sol_cuda_glu_tail flt = {SOL_CUDA_ACT_FLOAT, 0, qf.data(), cnt.data()};
        assert_int_equal(sol_emu_gemv_run_glu(wt, yf, bs, x.data(), 1, sx.data(), &flt, nullptr),
                         -EINVAL);
    }
    /* rows not a multiple of Q8_K's 256, and a Q4_0 gate beside a Q4_K up (two kernels) */
    weight_pair a = make_weight(be, SOL_DT_Q4_K, 288, 256),
                b = make_weight(be, SOL_DT_Q4_0, 256, 256),
                k = make_weight(be, SOL_DT_Q4_K, 256, 256);
    std::vector<unsigned char> da, db, dk;
    sol_cuda_wt two[2] = {device_view(a, da), device_view(a, da)};
    sol_cuda_wt mix[2] = {device_view(b, db), device_view(k, dk)};
    std::vector<float> x(256), y0(288), y1(288);
    std::vector<unsigned char> sx(sol_emu_gemv_scratch_bytes(16, 288)), q(sx.size());
    std::vector<int> cnt(16, 0);
    float *ys[2] = {y0.data(), y1.data()};
    sol_cuda_glu_tail t = {SOL_CUDA_ACT_Q8_K, 0, q.data(), cnt.data()};
    assert_int_equal(sol_emu_gemv_run_glu(two, ys, nullptr, x.data(), 1, sx.data(), &t, nullptr),
                     -EINVAL);
    assert_int_equal(sol_emu_gemv_run_glu(mix, ys, nullptr, x.data(), 1, sx.data(), &t, nullptr),
                     -EINVAL);
    sol_backend_free(be);
}

/* gemv_run_epi: the q/k/v projections with rope and the KV write in their store (the pairs'
 * rows summed in one block, NEOX's interleaved) against gemv_run_many then rope_kv, bit for bit:
 * q, k and v as left in memory and both pools whole (rows of other slots untouched), for every
 * GEMV kernel (float, 128-bit F16, Q8_0-activation and K-quant ones; Q4_K_M's Q6_K v in the
 * K-quant launch), rows that share a warp (K = 256: 1 to 8 lanes a row) and rows of a whole warp
 * (K = 2048), NORM and NEOX pairs, F16 and F32 pools, 1, 3 and 16 tokens, a bias on q and v. An
 * epilogue beside add, or roped rows that are not whole heads, are refused. */
static void test_gemv_rope_kv(void **state) {
    (void)state;
    sol_backend *be = cpu();
    enum { H = 4, KVH = 2, HD = 64, SLOTS = 24 };
    struct qkv_case {
        sol_dtype q, k, v;
        int K;
    } cases[] = {
        {SOL_DT_F32, SOL_DT_F32, SOL_DT_F32, 256},
        {SOL_DT_F16, SOL_DT_F16, SOL_DT_F16, 256},
        {SOL_DT_Q8_0, SOL_DT_Q8_0, SOL_DT_Q8_0, 256},
        {SOL_DT_Q4_0, SOL_DT_Q4_0, SOL_DT_Q4_0, 256},
        {SOL_DT_Q4_K, SOL_DT_Q4_K, SOL_DT_Q6_K, 256},
        {SOL_DT_Q5_K, SOL_DT_Q5_K, SOL_DT_Q5_K, 256},
        {SOL_DT_Q8_0, SOL_DT_Q8_0, SOL_DT_Q8_0, 2048},
        {SOL_DT_Q4_K, SOL_DT_Q4_K, SOL_DT_Q6_K, 2048},
    };
    const int rows[3] = {H * HD, KVH * HD, KVH * HD};
    const int32_t pos_slots[2 * 16] = {0, 1, 2,  3, 4, 9000, 6, 7, 8, 9, 10, 11, 12, 13, 14, 4095,
                                       5, 0, 23, 7, 1, 2,    3, 4, 6, 8, 9,  10, 11, 12, 13, 14};
    int ci = 0;
    for (const qkv_case &c : cases) {
        const sol_dtype types[3] = {c.q, c.k, c.v};
        std::vector<weight_pair> w;
        std::vector<std::vector<unsigned char>> dev(3);
        sol_cuda_wt wt[3];
        std::vector<float> bias[3], x(16 * c.K);
        fill(x.data(), 16 * c.K, 7);
        for (int i = 0; i < 3; i++) {
            w.push_back(make_weight(be, types[i], rows[i], c.K));
            bias[i].resize(rows[i]);
            fill(bias[i].data(), rows[i], 3 + i);
        }
        for (int i = 0; i < 3; i++)
            wt[i] = device_view(w[i], dev[i]);
        const float *bs[3] = {bias[0].data(), nullptr, bias[2].data()};
        std::vector<unsigned char> scratch(sol_emu_gemv_scratch_bytes(16, c.K));
        int act = sol_emu_gemv_act(wt[0].type);
        for (int n : {1, 3, 16}) {
            int neox = (ci + n) & 1, f16 = n != 3;
            sol_rope_params rp = {500000.0f, 8.0f, 1.0f, 4.0f, 8192, neox, 1.0f, 0, 0, 0, 0};
            double freqs[HD / 2];
            sol_rope_inv_freqs(&rp, HD, freqs);
            sol_cuda_rope_args a = {freqs, 1.0f, neox};
            assert_int_equal(sol_emu_gemv_quantize(act, x.data(), n, c.K, scratch.data(), nullptr),
                             0);
            std::vector<float> want[3], got[3];
            size_t pool = (size_t)SLOTS * KVH * HD * (f16 ? 2 : 4);
            std::vector<unsigned char> pw[2], pg[2];
            for (int j = 0; j < 2; j++) {
                pw[j].resize(pool);
                for (size_t b = 0; b < pool; b++)
                    pw[j][b] = (unsigned char)(b * 7 + j);
                pg[j] = pw[j];
            }
            float *yw[3], *yg[3];
            for (int i = 0; i < 3; i++) {
                want[i].assign((size_t)n * rows[i], 0.0f);
                got[i].assign((size_t)n * rows[i], NAN);
                yw[i] = want[i].data(), yg[i] = got[i].data();
            }
            assert_int_equal(
                sol_emu_gemv_run_many(wt, yw, bs, 3, x.data(), n, scratch.data(), 0, nullptr), 0);
            /* rope_kv reads pos_slots as n positions then n slots */
            std::vector<int32_t> ps(pos_slots, pos_slots + n);
            ps.insert(ps.end(), pos_slots + 16, pos_slots + 16 + n);
            sol_emu_rope_kv(yw[0], yw[1], yw[2], ps.data(), n, H, KVH, HD, a, pw[0].data(),
                            pw[1].data(), f16, nullptr);
            sol_cuda_rope_epi e = {ps.data(), pg[0].data(), pg[1].data(), HD, f16, a};
            const int roles[3] = {SOL_CUDA_EPI_ROPE, SOL_CUDA_EPI_ROPE_KV, SOL_CUDA_EPI_KV};
            assert_int_equal(sol_emu_gemv_run_epi(wt, yg, bs, roles, 3, x.data(), n, scratch.data(),
                                                  0, &e, nullptr),
                             0);
            for (int i = 0; i < 3; i++)
                if (memcmp(got[i].data(), want[i].data(), want[i].size() * sizeof(float)))
                    fail_msg("gemv_run_epi %s K=%d n=%d neox=%d: %s differs from the GEMV then "
                             "rope_kv",
                             sol_dtype_name(types[i]), c.K, n, neox, &"q\0k\0v"[2 * i]);
            for (int j = 0; j < 2; j++)
                if (pg[j] != pw[j])
                    fail_msg("gemv_run_epi %s K=%d n=%d f16=%d: the %s pool differs",
                             sol_dtype_name(types[j + 1]), c.K, n, f16, j ? "V" : "K");
            if (n == 3 && ci == 0) {
                const int bad[3] = {SOL_CUDA_EPI_ROPE, SOL_CUDA_EPI_ROPE_KV, 7};
                assert_int_equal(sol_emu_gemv_run_epi(wt, yg, bs, roles, 3, x.data(), n,
                                                      scratch.data(), 1, &e, nullptr),
                                 -EINVAL); /* add beside an epilogue */
                assert_int_equal(sol_emu_gemv_run_epi(wt, yg, bs, bad, 3, x.data(), n,
                                                      scratch.data(), 0, &e, nullptr),
                                 -EINVAL);
                sol_cuda_rope_epi odd = e;
                odd.head_dim = 96; /* 256 q rows are not whole heads of 96 */
                assert_int_equal(sol_emu_gemv_run_epi(wt, yg, bs, roles, 3, x.data(), n,
                                                      scratch.data(), 0, &odd, nullptr),
                                 -EINVAL);
            }
        }
        ci++;
    }
    sol_backend_free(be);
}

/* k_qk_norm_rope_kv: per-head RMSNorm of q and k, rope and the K/V write in one launch against
 * k_rmsnorm twice then k_rope_kv, bit for bit: q, k and both pools whole, NORM and NEOX pairs,
 * F16 and F32 pools, 1 and 3 tokens, head_dim 64 and 128. */
static void test_qk_norm_rope(void **state) {
    (void)state;
    enum { H = 4, KVH = 2, SLOTS = 8, N = 3 };
    const int32_t ps[2 * N] = {0, 4095, 17, 5, 0, 7};
    for (int hd : {64, 128})
        for (int neox = 0; neox < 2; neox++)
            for (int n : {1, 3}) {
                int f16 = neox ^ (n == 1), row = KVH * hd;
                std::vector<float> q(N * H * hd), k(N * row), v(N * row), w(2 * hd);
                fill(q.data(), (int)q.size(), 1), fill(k.data(), (int)k.size(), 2);
                fill(v.data(), (int)v.size(), 3), fill(w.data(), (int)w.size(), 4);
                std::vector<float> q2 = q, k2 = k;
                size_t pool = (size_t)SLOTS * row * (f16 ? 2 : 4);
                std::vector<unsigned char> kp(pool, 7), vp(pool, 9), kp2 = kp, vp2 = vp;
                sol_rope_params rp = {10000.0f, 0, 0, 0, 0, neox, 0, 0, 0, 0, 0};
                std::vector<double> freqs((size_t)hd / 2);
                sol_rope_inv_freqs(&rp, hd, freqs.data());
                sol_cuda_rope_args a = {freqs.data(), 1.0f, neox};
                std::vector<int32_t> pos_slots(ps, ps + n);
                pos_slots.insert(pos_slots.end(), ps + N, ps + N + n);
                sol_emu_rmsnorm(q.data(), w.data(), q.data(), n * H, hd, 1e-6f, nullptr);
                sol_emu_rmsnorm(k.data(), w.data() + hd, k.data(), n * KVH, hd, 1e-6f, nullptr);
                sol_emu_rope_kv(q.data(), k.data(), v.data(), pos_slots.data(), n, H, KVH, hd, a,
                                kp.data(), vp.data(), f16, nullptr);
                sol_emu_qk_norm_rope_kv(q2.data(), k2.data(), v.data(), pos_slots.data(), n, H, KVH,
                                        hd, a, w.data(), w.data() + hd, 1e-6f, kp2.data(),
                                        vp2.data(), f16, nullptr);
                if (q != q2 || k != k2 || kp != kp2 || vp != vp2)
                    fail_msg("qk_norm_rope_kv hd %d neox %d n %d f16 %d: %s differs", hd, neox, n,
                             f16,
                             q != q2     ? "q"
                             : k != k2   ? "k"
                             : kp != kp2 ? "K pool"
                                         : "V pool");
            }
}

/* k_argmax: each row's greedy token (largest value, lowest id of equals, NaN never) against
 * sol_argmax_f32's scan, bit for bit: one chunk and several (the last block of a row merges
 * the partials), the maximum placed in each chunk in turn and tied across chunks, twice through
 * the same workspace (the counters are left at zero for the next launch). */
static void test_argmax(void **state) {
    (void)state;
    enum { N = 3 };
    for (long long w : {4096LL, 9000LL, 128256LL}) {
        int chunks = sol_emu_argmax_chunks(w);
        std::vector<float> x((size_t)(N * w)), ws_v((size_t)(N * chunks));
        std::vector<int> ws_id((size_t)(N * chunks)), cnt(N, 0);
        for (size_t i = 0; i < x.size(); i++) /* distinct values: one maximum a row */
            x[i] = (float)((i * 2654435761u) % 1000003u) / 1000003.0f;
        /* planted at block threads 200 and 100, not in the first warp: row 0's maximum in the
         * last chunk, row 1 a tie in every chunk (the first wins) */
        for (int c = 0; c < chunks; c++) {
            x[(size_t)(c * 4096 + 200) % (size_t)w] = 100.0f + (float)c;
            x[(size_t)w + (size_t)(c * 4096 + 100) % (size_t)w] = 100.0f;
        }
        x[2 * (size_t)w + (size_t)w - 1] = NAN; /* row 2: NaN at the end, never the max */
        for (int pass = 0; pass < 2; pass++) {
            int32_t ids[N];
            float vals[N];
            sol_emu_argmax_rows(x.data(), N, w, ws_v.data(), ws_id.data(), cnt.data(), ids, vals,
                                nullptr);
            for (int i = 0; i < N; i++) {
                float want_v;
                int32_t want = sol_argmax_f32(x.data() + (size_t)i * w, w, &want_v);
                if (ids[i] != want || vals[i] != want_v)
                    fail_msg("argmax width %lld row %d pass %d: %d (%g), want %d (%g)", w, i, pass,
                             ids[i], vals[i], want, want_v);
            }
            for (int i = 0; i < N; i++)
                assert_int_equal(cnt[i], 0);
        }
    }
}

/* The quantize launches that make their own input (k_gemv.cu): k_rmsnorm_quantize against
 * k_rmsnorm then k_quantize_*, and the gated-product quantize against silu_mul/gelu_mul then
 * k_quantize_*: the same quantized activations and normalized rows, bit for bit, for both
 * activation kinds and token counts that fill and do not fill a group. */
static void fused_quantize(int K);
static void test_fused_quantize(void **state) {
    (void)state;
    for (int K : {512, 352}) /* 2 slices of k_rmsnorm_quantize; 352: a last slice of 96 (Q8_0) */
        fused_quantize(K);
}

static void fused_quantize(int K) {
    std::vector<float> x(16 * K), g(16 * K), w(K), xn(16 * K), ref(16 * K);
    fill(x.data(), 16 * K, 3);
    fill(g.data(), 16 * K, 11);
    fill(w.data(), K, 7);
    size_t bytes = sol_emu_gemv_scratch_bytes(16, K);
    std::vector<unsigned char> a(bytes), b(bytes);
    for (int act : {SOL_CUDA_ACT_Q8_0, SOL_CUDA_ACT_Q8_K})
        for (int n : {1, 3, 16}) {
            if (act == SOL_CUDA_ACT_Q8_K && K % 256) continue;
            std::fill(a.begin(), a.end(), 0xAB), std::fill(b.begin(), b.end(), 0xAB);
            sol_emu_rmsnorm(x.data(), w.data(), ref.data(), n, K, 1e-5f, nullptr);
            assert_int_equal(sol_emu_gemv_quantize(act, ref.data(), n, K, a.data(), nullptr), 0);
            assert_int_equal(sol_emu_gemv_norm_quantize(act, x.data(), w.data(), 1e-5f, xn.data(),
                                                        n, K, b.data(), nullptr),
                             0);
            if (memcmp(xn.data(), ref.data(), sizeof(float) * n * K) || a != b)
                fail_msg("norm+quantize act %d n=%d: not rmsnorm then quantize", act, n);
            for (int gelu : {0, 1}) {
                std::fill(a.begin(), a.end(), 0xAB), std::fill(b.begin(), b.end(), 0xAB);
                if (gelu)
                    sol_emu_gelu_mul(g.data(), x.data(), ref.data(), (int64_t)n * K, nullptr);
                else
                    sol_emu_silu_mul(g.data(), x.data(), ref.data(), (int64_t)n * K, nullptr);
                assert_int_equal(sol_emu_gemv_quantize(act, ref.data(), n, K, a.data(), nullptr),
                                 0);
                assert_int_equal(sol_emu_gemv_glu_quantize(act, gelu, g.data(), x.data(), n, K,
                                                           b.data(), nullptr),
                                 0);
                if (a != b) fail_msg("glu+quantize act %d gelu %d n=%d differs", act, gelu, n);
            }
        }
    assert_int_equal(sol_emu_gemv_glu_quantize(SOL_CUDA_ACT_FLOAT, 0, g.data(), x.data(), 1, K,
                                               b.data(), nullptr),
                     -ENOTSUP);
    /* in place is refused: a row's blocks read all of it while the others write their slices */
    assert_int_equal(sol_emu_gemv_norm_quantize(SOL_CUDA_ACT_Q8_0, x.data(), w.data(), 1e-5f,
                                                x.data(), 1, K, b.data(), nullptr),
                     -EINVAL);
}

/* The grouped GEMM tests' three matrices: Q4_K beside Q6_K beside Q4_0 (each tile dequantizes its
 * own type), row counts that end mid-tile, an ldy of their own; x for nmax tokens in F16. */
struct mma_trio {
    const int K;
    static constexpr sol_dtype types[3] = {SOL_DT_Q4_K, SOL_DT_Q6_K, SOL_DT_Q4_0};
    static constexpr int rows[3] = {100, 40, 70}, ldy[3] = {103, 40, 75};
    std::vector<uint16_t> xh;
    std::vector<weight_pair> w;
    std::vector<std::vector<unsigned char>> dev{3};
    sol_cuda_wt wt[3];
    mma_trio(sol_backend *be, int nmax, int salt, int k) : K(k), xh((size_t)nmax * k) {
        std::vector<float> x((size_t)nmax * K);
        fill(x.data(), nmax * K, salt);
        for (int i = 0; i < nmax * K; i++)
            xh[i] = sol_f32_to_f16(x[i]);
        for (int i = 0; i < 3; i++)
            w.push_back(make_weight(be, types[i], rows[i], K));
        for (int i = 0; i < 3; i++)
            wt[i] = device_view(w[i], dev[i]);
    }
};

/* mma_gemm_many: up to three quantized matrices that read one F16 x in one k_mma_gemm launch
 * (the blocks pick their matrix by index, as the GEMV set does): each matrix's y bit for bit
 * one mma_gemm's, for Q4_K beside Q6_K beside Q4_0 (each tile dequantizes its own type), row
 * counts that end mid-tile, add = 1, its own ldy each, in one launch at 17 tokens and one a
 * matrix at 70 (the 128-row tile takes no set); a fourth matrix, or two K, refused. */
static void test_mma_gemm_many(void **state) {
    (void)state;
    sol_backend *be = cpu();
    enum { K = 512, NMAX = 70 };
    mma_trio m(be, NMAX, 13, K);
    const sol_dtype *types = mma_trio::types;
    const int *ldy = mma_trio::ldy;
    std::vector<uint16_t> &xh = m.xh;
    sol_cuda_wt *wt = m.wt;
    for (int count = 1; count <= 3; count++)
        for (int n : {17, 70})
            for (int add = 0; add < 2; add++) {
                std::vector<std::vector<float>> ya(3), yb(3);
                float *ys[3];
                for (int i = 0; i < count; i++) {
                    ya[i].resize((size_t)NMAX * ldy[i]);
                    fill(ya[i].data(), NMAX * ldy[i], 3 + i);
                    yb[i] = ya[i];
                    ys[i] = yb[i].data();
                    assert_int_equal(
                        sol_emu_mma_gemm(wt[i], xh.data(), ya[i].data(), n, ldy[i], add, nullptr),
                        0);
                }
                /* one launch up to 64 tokens, one a matrix past them (the 128-row tile) */
                assert_int_equal(
                    sol_emu_mma_gemm_many(wt, ys, ldy, count, xh.data(), n, add, nullptr, nullptr),
                    n <= 64 ? 1 : count);
                for (int i = 0; i < count; i++)
                    if (ya[i] != yb[i])
                        fail_msg("mma_gemm_many: matrix %d (%s) of %d, n=%d add=%d differs from "
                                 "its own launch",
                                 i, sol_dtype_name(types[i]), count, n, add);
            }
    sol_cuda_wt four[4] = {wt[0], wt[1], wt[2], wt[0]};
    std::vector<float> y0(NMAX * 103), y1(NMAX * 103), y2(NMAX * 103), y3(NMAX * 103);
    float *ys4[4] = {y0.data(), y1.data(), y2.data(), y3.data()};
    const int ld4[4] = {103, 103, 103, 103};
    assert_int_equal(sol_emu_mma_gemm_many(four, ys4, ld4, 4, xh.data(), 17, 0, nullptr, nullptr),
                     -EINVAL);
    weight_pair other = make_weight(be, SOL_DT_Q4_K, 40, 256);
    std::vector<unsigned char> od;
    sol_cuda_wt two[2] = {wt[0], device_view(other, od)};
    assert_int_equal(sol_emu_mma_gemm_many(two, ys4, ld4, 2, xh.data(), 17, 0, nullptr, nullptr),
                     -EINVAL);
    sol_backend_free(be);
}

/* Split-K (mma_gemm_many with a split): each tile's K cut into s runs of stages whose partial
 * tiles the block completing the tile sums in split order. Against that definition, bit for bit:
 * split j's partial is mma_gemm over x with the columns outside its run zeroed (zero products
 * add exact zeros to the f32 sums: the runs are whole stages, mma_split_cols), y the f32 sum p_0 +
 * p_1 + ... in that order (+ y with add) — for Q4_K, Q6_K and Q4_0 matrices in one launch (rows
 * ending mid-tile, gaps in ldy untouched), 17 and 64 tokens, s = 3 and 8 of K = 512's 8 stages
 * of 64 columns; a
 * second call gives the same bits (the emulation draws another block order, so another block
 * completes each tile) and the counters are left zeroed. mma_splits on the 8B shapes at 132 SMs,
 * and the splits the kernel refuses: an empty split, too many, past 64 tokens, no workspace, or
 * one short of the launch's tiles. */
static void test_mma_split(void **state) {
    (void)state;
    sol_backend *be = cpu();
    enum { K = 512, NMAX = 64, SMS = 132 };
    mma_trio m(be, NMAX, 29, K);
    const sol_dtype *types = mma_trio::types;
    const int *rows = mma_trio::rows, *ldy = mma_trio::ldy;
    const std::vector<uint16_t> &xh = m.xh;
    sol_cuda_wt *wt = m.wt;
    std::vector<float> part(sol_emu_mma_split_floats(SMS));
    std::vector<int> cnt((size_t)sol_emu_mma_split_counters(SMS), 0), zero = cnt;
    for (int s : {3, 8}) /* 3, 3, 2 stages (a shorter last split) and one each */
        for (int n : {17, 64}) {
            /* the partials summed in split order, for both values of add */
            std::vector<std::vector<float>> sum(3);
            for (int i = 0; i < 3; i++)
                sum[i].assign((size_t)NMAX * ldy[i], 0.0f);
            int per = sol_emu_mma_split_cols(n, K, s);
            for (int j = 0; j < s; j++) {
                std::vector<uint16_t> xm(xh);
                for (int t = 0; t < NMAX; t++)
                    for (int k = 0; k < K; k++)
                        if (k < j * per || k >= (j + 1) * per) xm[t * K + k] = 0;
                for (int i = 0; i < 3; i++) {
                    std::vector<float> p((size_t)NMAX * ldy[i], 0.0f);
                    assert_int_equal(
                        sol_emu_mma_gemm(wt[i], xm.data(), p.data(), n, ldy[i], 0, nullptr), 0);
                    for (int t = 0; t < n; t++)
                        for (int r = 0; r < rows[i]; r++) {
                            float &v = sum[i][(size_t)t * ldy[i] + r];
                            v = j ? v + p[(size_t)t * ldy[i] + r] : p[(size_t)t * ldy[i] + r];
                        }
                }
            }
            for (int add = 0; add < 2; add++) {
                std::vector<std::vector<float>> want(3), got(3);
                float *ys[3];
                for (int i = 0; i < 3; i++) {
                    want[i].resize((size_t)NMAX * ldy[i]);
                    fill(want[i].data(), NMAX * ldy[i], 5 + i);
                    got[i] = want[i];
                    ys[i] = got[i].data();
                    for (int t = 0; t < n; t++)
                        for (int r = 0; r < rows[i]; r++) {
                            float &v = want[i][(size_t)t * ldy[i] + r];
                            v = add ? v + sum[i][(size_t)t * ldy[i] + r]
                                    : sum[i][(size_t)t * ldy[i] + r];
                        }
                }
                sol_cuda_mma_split sp = {s, part.data(), cnt.data(), part.size(), (int)cnt.size()};
                for (int again = 0; again < 2; again++) {
                    std::vector<std::vector<float>> before = got;
                    assert_int_equal(
                        sol_emu_mma_gemm_many(wt, ys, ldy, 3, xh.data(), n, add, &sp, nullptr), 1);
                    for (int i = 0; i < 3; i++)
                        if (memcmp(got[i].data(), want[i].data(), sizeof(float) * got[i].size()))
                            fail_msg("split-K s=%d n=%d add=%d call %d: matrix %d (%s) is not the "
                                     "partials summed in split order",
                                     s, n, add, again, i, sol_dtype_name(types[i]));
                    if (cnt != zero) fail_msg("split-K s=%d n=%d: counters left set", s, n);
                    got = before; /* the same y again: add reads it */
                }
            }
        }
    /* the counts mma_splits picks for the 8B shapes: 2 blocks an SM, >= 8 stages a split */
    auto shape = [](int r, int c) {
        sol_cuda_wt v = {};
        v.type = SOL_CUDA_Q4_K, v.rows = r, v.cols = c;
        return v;
    };
    const sol_cuda_wt down = shape(4096, 14336),
                      qkv[3] = {shape(4096, 4096), shape(1024, 4096), shape(1024, 4096)};
    const sol_cuda_wt gu[2] = {shape(14336, 4096), shape(14336, 4096)};
    assert_int_equal(sol_emu_mma_splits(&down, 1, 64, SMS), 5); /* 64 tiles: 320 blocks */
    assert_int_equal(sol_emu_mma_splits(qkv, 3, 64, SMS), 3);   /* 96 tiles: 288 */
    assert_int_equal(sol_emu_mma_splits(qkv, 3, 17, SMS), 3);   /* a token tile as at 64 */
    assert_int_equal(sol_emu_mma_splits(gu, 2, 64, SMS), 1);    /* 448 tiles: enough */
    assert_int_equal(sol_emu_mma_splits(&down, 1, 65, SMS), 1); /* the 128-row tile: never */
    assert_int_equal(sol_emu_mma_splits(wt, 1, 64, SMS), 2);    /* 8 stages: 2 of 4 */
    const sol_cuda_wt small = shape(100, 256);
    assert_int_equal(sol_emu_mma_splits(&small, 1, 64, SMS), 1); /* 4 stages: too few */
    assert_int_equal(sol_emu_mma_split_cols(64, 1024, 3), 384);  /* 6 stages of 64 columns */
    assert_int_equal(sol_emu_mma_split_cols(64, 1056, 3), 352);  /* K % 64: 11 stages of 32 */
    /* refused: an empty split (5 of 8 stages: 2, 2, 2, 2, 0), 17, past 64 tokens, no buffers */
    std::vector<float> y1((size_t)NMAX * ldy[0]);
    float *ys1[1] = {y1.data()};
    /* ... and a workspace or counters short of the launch's tiles (wt[0]: 2 row tiles, so 2
     * splits need 2 x 2 partial tiles of 64 x 64 floats and 2 counters: exactly that passes) */
    const size_t all = part.size(), need = 2 * 2 * 64 * 64;
    const int nc = (int)cnt.size();
    const sol_cuda_mma_split bad[] = {
        {5, part.data(), cnt.data(), all, nc}, {17, part.data(), cnt.data(), all, nc},
        {0, part.data(), cnt.data(), all, nc}, {2, nullptr, cnt.data(), all, nc},
        {2, part.data(), nullptr, all, nc},    {2, part.data(), cnt.data(), need - 1, nc},
        {2, part.data(), cnt.data(), all, 1}};
    for (const sol_cuda_mma_split &b : bad)
        assert_int_equal(sol_emu_mma_gemm_many(wt, ys1, ldy, 1, xh.data(), 17, 0, &b, nullptr),
                         -EINVAL);
    const sol_cuda_mma_split exact = {2, part.data(), cnt.data(), need, 2};
    assert_int_equal(sol_emu_mma_gemm_many(wt, ys1, ldy, 1, xh.data(), 17, 0, &exact, nullptr), 1);
    const sol_cuda_mma_split two = {2, part.data(), cnt.data(), all, nc};
    assert_int_equal(sol_emu_mma_gemm_many(wt, ys1, ldy, 1, xh.data(), 65, 0, &two, nullptr),
                     -EINVAL);
    sol_backend_free(be);
}

/* The int8 batch GEMM (k_mmq.cu, mma.sync m16n8k32 emulated from the PTX ISA's fragment
 * formulas) for the types it takes (mmq_act: Q8_0, Q4_0, Q5_x and MXFP4 against Q8_0; Q4_K and
 * Q5_K against Q8_K): x quantized once by gemv_quantize (70 tokens: more than a GEMV group),
 * exact integer dots, the GEMV's float steps in k order. Against the
 * CPU (the same activation quantization and integers; its float steps summed in another order
 * here and there): 1e-5 relative, as the GEMV. Exact: a token's sums do not depend on the
 * batch (its 17 first tokens run alone give the same bits); one-hot tokens (one block's single
 * term per sum) give the GEMV's bits; add = 1 is the product's bits then one float add; the gap
 * past M and the tokens past n are not written. Other types (float, Q6_K) are refused
 * (-ENOTSUP), the other layout too (-EINVAL). */
static void test_mmq_gemm(void **state) {
    (void)state;
    sol_backend *be = cpu();
    enum { M = 100, K = 512, LDY = M + 3, NMAX = 70 };
    std::vector<float> x(NMAX * K), hot(NMAX * K, 0.0f);
    fill(x.data(), NMAX * K, 9);
    for (int tk = 0; tk < 16; tk++) /* token t: column 33 t + t % 5, across blocks and lanes */
        hot[tk * K + 33 * tk + tk % 5] = 1.0f + 0.25f * (float)tk;
    /* per activation kind: x at 70 and 17 tokens, the one-hot tokens */
    std::vector<unsigned char> q[3], q17[3], qh[3];
    for (int act : {SOL_CUDA_ACT_Q8_0, SOL_CUDA_ACT_Q8_K}) {
        q[act].resize(sol_emu_gemv_scratch_bytes(NMAX, K));
        q17[act].resize(sol_emu_gemv_scratch_bytes(17, K));
        qh[act].resize(sol_emu_gemv_scratch_bytes(16, K));
        assert_int_equal(sol_emu_gemv_quantize(act, x.data(), NMAX, K, q[act].data(), nullptr), 0);
        assert_int_equal(sol_emu_gemv_quantize(act, x.data(), 17, K, q17[act].data(), nullptr), 0);
        assert_int_equal(sol_emu_gemv_quantize(act, hot.data(), 16, K, qh[act].data(), nullptr), 0);
    }
    for (sol_dtype t : kTypes) {
        weight_pair w = make_weight(be, t, M, K);
        std::vector<unsigned char> dev;
        sol_cuda_wt wt = device_view(w, dev);
        std::vector<float> got(NMAX * LDY, NAN), want(NMAX * M);
        int act = sol_emu_mmq_act(wt.type);
        if (act == SOL_CUDA_ACT_FLOAT) {
            assert_int_equal(sol_emu_mmq_gemm(wt, q[1].data(), got.data(), 17, LDY, 0, nullptr),
                             -ENOTSUP);
            continue;
        }
        assert_int_equal(act, sol_emu_gemv_act(wt.type)); /* the GEMV's activations */
        assert_int_equal(sol_matmul(be, &w.cpu, x.data(), want.data(), NMAX), 0);
        assert_int_equal(sol_emu_mmq_gemm(wt, q[act].data(), got.data(), NMAX, LDY, 0, nullptr), 0);
        std::vector<float> dense(NMAX * M);
        for (int tk = 0; tk < NMAX; tk++)
            for (int r = 0; r < LDY; r++) {
                float v = got[tk * LDY + r];
                if (r >= M && !std::isnan(v))
                    fail_msg("mmq %s wrote the gap at token %d", sol_dtype_name(t), tk);
                if (r < M) dense[tk * M + r] = v;
            }
        double e = rel_err(dense.data(), want.data(), NMAX * M);
        if (!(e < 1e-5)) fail_msg("mmq %s: %g from the CPU", sol_dtype_name(t), e);
        std::vector<float> few(NMAX * LDY, NAN);
        assert_int_equal(sol_emu_mmq_gemm(wt, q17[act].data(), few.data(), 17, LDY, 0, nullptr), 0);
        for (int i = 0; i < NMAX * LDY; i++) {
            bool in = i < 17 * LDY && i % LDY < M;
            if (in ? memcmp(&few[i], &got[i], sizeof(float)) : !std::isnan(few[i]))
                fail_msg("mmq %s: 17 tokens alone differ from the batch's at %d (token %d)",
                         sol_dtype_name(t), i, i / LDY);
        }
        /* add = 1: y += the product */
        std::vector<float> acc(NMAX * LDY), base(NMAX * LDY);
        fill(base.data(), NMAX * LDY, 5);
        acc = base;
        assert_int_equal(sol_emu_mmq_gemm(wt, q[act].data(), acc.data(), NMAX, LDY, 1, nullptr), 0);
        for (int tk = 0; tk < NMAX; tk++)
            for (int r = 0; r < M; r++) {
                int i = tk * LDY + r;
                if (acc[i] != base[i] + got[i])
                    fail_msg("mmq %s add: %g != %g + %g", sol_dtype_name(t), acc[i], base[i],
                             got[i]);
            }
        /* one-hot tokens: the GEMV's bits (one nonzero term a sum, in either order) */
        std::vector<float> gv(16 * M), mq(16 * M);
        assert_int_equal(
            sol_emu_gemv_run(wt, hot.data(), gv.data(), 16, qh[act].data(), 0, nullptr, nullptr),
            0);
        assert_int_equal(sol_emu_mmq_gemm(wt, qh[act].data(), mq.data(), 16, M, 0, nullptr), 0);
        for (int i = 0; i < 16 * M; i++)
            if (memcmp(&gv[i], &mq[i], sizeof(float)))
                fail_msg("mmq %s one-hot token %d row %d: %a, the GEMV's %a", sol_dtype_name(t),
                         i / M, i % M, mq[i], gv[i]);
        wt.split = !wt.split; /* the other layout is refused, never misread */
        assert_int_equal(sol_emu_mmq_gemm(wt, q[act].data(), got.data(), 17, LDY, 0, nullptr),
                         -EINVAL);
    }
    sol_backend_free(be);
}

/* The batch GEMM on tensor cores (k_mma.cu, mma.sync emulated from the PTX ISA's fragment
 * formulas): against the same sums in double over the weights rounded to F16 (the rows the CPU's
 * embed dequantizes, exact) and x rounded to F16. Products of halves are exact; the kernel sums
 * K of them in f32 (k order within 16, tiles in order): ~K * 2^-24 of the terms' magnitude, under
 * 1e-5 relative. M = 100 and n = 70 leave partial tiles on both axes; ldy = M + 3 leaves a gap the
 * kernel must not write. K = 512 (64-column stages up to 64 tokens) and 544 (32-column ones: the
 * 32-element block types only). */
static void test_mma_gemm_k(sol_backend *be, int M, int K, int LDY, int NMAX) {
    std::vector<float> x(NMAX * K), xr(NMAX * K), wr(M * K);
    fill(x.data(), NMAX * K, 9);
    for (int i = 0; i < NMAX * K; i++)
        xr[i] = sol_f16_to_f32(sol_f32_to_f16(x[i]));
    std::vector<uint16_t> xh(NMAX * K);
    for (int i = 0; i < NMAX * K; i++)
        xh[i] = sol_f32_to_f16(x[i]);
    std::vector<int32_t> ids(M);
    for (int r = 0; r < M; r++)
        ids[r] = r;
    for (sol_dtype t : kTypes) {
        if (K % (int)sol_dtype_block_elems(t)) continue; /* K-quants: 256-element blocks */
        weight_pair w = make_weight(be, t, M, K);
        std::vector<unsigned char> dev;
        sol_cuda_wt wt = device_view(w, dev);
        std::vector<float> got(NMAX * LDY);
        if (t == SOL_DT_F32 || t == SOL_DT_F16 || t == SOL_DT_BF16) { /* cuBLASLt's */
            assert_int_equal(sol_emu_mma_gemm(wt, xh.data(), got.data(), 1, LDY, 0, nullptr),
                             -ENOTSUP);
            continue;
        }
        assert_int_equal(sol_embed(be, &w.cpu, ids.data(), M, wr.data()), 0);
        for (float &v : wr)
            v = sol_f16_to_f32(sol_f32_to_f16(v));
        for (int n : {17, 64, 70}) {
            if (K % 64 && n > 64) continue; /* the 128-row tile's stages are 32 at any K */
            std::vector<float> want(n * M);
            for (int tk = 0; tk < n; tk++)
                for (int r = 0; r < M; r++) {
                    double s = 0;
                    for (int k = 0; k < K; k++)
                        s += (double)wr[r * K + k] * xr[tk * K + k];
                    want[tk * M + r] = (float)s;
                }
            std::fill(got.begin(), got.end(), NAN);
            assert_int_equal(sol_emu_mma_gemm(wt, xh.data(), got.data(), n, LDY, 0, nullptr), 0);
            std::vector<float> dense(n * M);
            for (int tk = 0; tk < n; tk++)
                for (int r = 0; r < LDY; r++) {
                    float v = got[tk * LDY + r];
                    if (r >= M && !std::isnan(v))
                        fail_msg("mma %s n=%d wrote the gap at token %d", sol_dtype_name(t), n, tk);
                    if (r < M) dense[tk * M + r] = v;
                }
            for (int i = n * LDY; i < NMAX * LDY; i++)
                if (!std::isnan(got[i])) fail_msg("mma %s n=%d wrote past n", sol_dtype_name(t), n);
            double e = rel_err(dense.data(), want.data(), n * M);
            if (!(e < 1e-5)) fail_msg("mma %s n=%d: %g", sol_dtype_name(t), n, e);
            /* add = 1: y += the product, the product's bits then one float add */
            std::vector<float> acc(NMAX * LDY), base(NMAX * LDY);
            fill(base.data(), NMAX * LDY, 5);
            acc = base;
            assert_int_equal(sol_emu_mma_gemm(wt, xh.data(), acc.data(), n, LDY, 1, nullptr), 0);
            for (int tk = 0; tk < n; tk++)
                for (int r = 0; r < M; r++) {
                    int i = tk * LDY + r;
                    if (acc[i] != base[i] + got[i])
                        fail_msg("mma %s n=%d add: %g != %g + %g", sol_dtype_name(t), n, acc[i],
                                 base[i], got[i]);
                }
        }
        /* One-hot tokens (token t is column 8 t + t % 8: every offset of a 16-run, both halves
         * of a 32-block, every sub-block of a super-block): each sum is one exact product, so y
         * holds the F16-rounded weights themselves, bit for bit. */
        std::vector<uint16_t> hot(64 * K, 0);
        for (int tk = 0; tk < 64; tk++)
            hot[tk * K + 8 * tk + tk % 8] = sol_f32_to_f16(1.0f);
        assert_int_equal(sol_emu_mma_gemm(wt, hot.data(), got.data(), 64, LDY, 0, nullptr), 0);
        for (int tk = 0; tk < 64; tk++)
            for (int r = 0; r < M; r++)
                if (got[tk * LDY + r] != wr[r * K + 8 * tk + tk % 8])
                    fail_msg("mma %s: row %d column %d is %g, the weight is %g", sol_dtype_name(t),
                             r, 8 * tk + tk % 8, got[tk * LDY + r], wr[r * K + 8 * tk + tk % 8]);
        wt.split = !wt.split; /* the other layout is refused, never misread */
        assert_int_equal(sol_emu_mma_gemm(wt, xh.data(), got.data(), 17, LDY, 0, nullptr), -EINVAL);
    }
}

static void test_mma_gemm(void **state) {
    (void)state;
    sol_backend *be = cpu();
    enum { M = 100, LDY = M + 3, NMAX = 70 };
    for (int K : {512, 544}) /* 64-column stages up to 64 tokens; K % 64 != 0: 32 (mma_bk) */
        test_mma_gemm_k(be, M, K, LDY, NMAX);
    sol_backend_free(be);
}

/* K/V written to both backends' pools at the same shuffled slots, then attention of a batch of
 * tokens from three sequences (whole context and a sliding window of 7, GQA), and again after a
 * copy-on-write block copy. Tolerance 1e-5: the online softmax splits positions over four warps
 * and merges them (another summation order, each rescale one more rounding), expf differs by an
 * ulp or two and nvcc fuses l c + e: a few 2^-24 per term over <= 37 positions. */
static void test_kv_and_attention(void **state) {
    (void)state;
    enum { NBLK = 32, BS = 4, KVH = 2, HEADS = 4, HD = 64, ROW = KVH * HD, SEQS = 3, MAXB = 10 };
    sol_backend *be = cpu();
    sol_kv *kv = sol_kv_alloc(be, 1, NBLK, BS, KVH, HD, SOL_DT_F16);
    assert_non_null(kv);
    std::vector<uint16_t> kp(NBLK * BS * ROW), vp(NBLK * BS * ROW);
    int32_t tables[SEQS][MAXB];
    const int lens[SEQS] = {37, 5, 16};
    for (int s = 0; s < SEQS; s++)
        for (int i = 0; i < MAXB; i++)
            tables[s][i] = 27 - 3 * i + s;
    for (int s = 0; s < SEQS; s++)
        for (int p = 0; p < lens[s]; p++) {
            float k[ROW], v[ROW];
            fill(k, ROW, 100 * s + p);
            fill(v, ROW, 1000 + 100 * s + p);
            int32_t slot = tables[s][p / BS] * BS + p % BS;
            assert_int_equal(sol_kv_write(be, kv, 0, k, v, &slot, 1), 0);
            sol_emu_kv_write(kp.data(), vp.data(), 1, ROW, k, v, &slot, 1, nullptr);
        }
    enum { N = 5 };
    const int tok_seq[N] = {0, 1, 0, 2, 0};
    int32_t n_ctx[N] = {37, 5, 1, 16, 33};
    std::vector<float> q(N * HEADS * HD), want(N * HEADS * HD), got(N * HEADS * HD);
    fill(q.data(), N * HEADS * HD, 77);
    for (float &x : q)
        x *= 0.3f;
    sol_attn_seq per[N];
    int32_t flat[N][MAXB];
    for (int t = 0; t < N; t++) {
        per[t] = sol_attn_seq{tables[tok_seq[t]], n_ctx[t]};
        memcpy(flat[t], tables[tok_seq[t]], sizeof flat[t]);
    }
    for (int window : {0, 7}) {
        assert_int_equal(sol_paged_attention_swa(be, kv, 0, q.data(), want.data(), N, HEADS, KVH,
                                                 HD, 0.125f, window, per),
                         0);
        sol_emu_paged_attention(kp.data(), vp.data(), 1, BS, q.data(), got.data(), N, nullptr, 0, N,
                                HEADS, KVH, HD, 0.125f, window, &flat[0][0], MAXB, n_ctx, 37, 132,
                                nullptr, nullptr, nullptr, 0, 0, nullptr, nullptr, nullptr);
        double e = rel_err(got.data(), want.data(), N * HEADS * HD);
        if (!(e < 1e-5)) fail_msg("attention window %d: %g", window, e);
    }
    /* Copy sequence 0's first block to block 31 and attend through the copy. */
    int32_t src = tables[0][0], dst = 31;
    assert_int_equal(sol_kv_copy_blocks(be, kv, &src, &dst, 1), 0);
    void *pools[2] = {kp.data(), vp.data()};
    sol_emu_kv_copy_blocks(pools, 2, (size_t)BS * ROW * 2, &src, &dst, 1, nullptr);
    flat[0][0] = dst;
    per[0].block_table = flat[0];
    assert_int_equal(
        sol_paged_attention(be, kv, 0, q.data(), want.data(), 1, HEADS, KVH, HD, 0.125f, per), 0);
    sol_emu_paged_attention(kp.data(), vp.data(), 1, BS, q.data(), got.data(), 1, nullptr, 0, 1,
                            HEADS, KVH, HD, 0.125f, 0, &flat[0][0], MAXB, n_ctx, 37, 132, nullptr,
                            nullptr, nullptr, 0, 0, nullptr, nullptr, nullptr);
    assert_true(rel_err(got.data(), want.data(), HEADS * HD) < 1e-5);
    sol_backend_free(be);
}

/* The same K/V rows into the CPU backend's cache and the emulated pools kp/vp, for two
 * sequences of lens[0] and lens[1] positions through the block tables t0 and t1. */
static void write_two_seqs(sol_backend *be, sol_kv *kv, std::vector<unsigned char> &kp,
                           std::vector<unsigned char> &vp, int f16, int row, int bs,
                           const int32_t *t0, const int32_t *t1, const int lens[2]) {
    std::vector<float> k(row), v(row);
    const int32_t *tabs[2] = {t0, t1};
    for (int s = 0; s < 2; s++)
        for (int p = 0; p < lens[s]; p++) {
            fill(k.data(), row, 100 * s + p);
            fill(v.data(), row, 5000 + 100 * s + p);
            int blk = p / bs, in_blk = p - blk * bs;
            int32_t slot = tabs[s][blk] * bs + in_blk;
            assert_int_equal(sol_kv_write(be, kv, 0, k.data(), v.data(), &slot, 1), 0);
            sol_emu_kv_write(kp.data(), vp.data(), f16, row, k.data(), v.data(), &slot, 1, nullptr);
        }
}

/* The attention kernel's paths (k_attention.cu): GQA groups of 1, 2, 3, 4 and 8 query heads per
 * KV head (one block, or slices of it), head_dim 36, 64, 75, 80, 90, 96, 128 and 256, F16 and
 * F32 caches (vector loads; 32-bit words for rows that are not aligned for them), contexts long
 * enough to split (two SM counts), sliding windows and prefill tiles. Each against the CPU
 * backend within 1e-5, and each token's bits alone equal to its bits in the batch or tile. */
struct att_case {
    int heads, kvh, hd;
    sol_dtype dt;
};

/* Attention sinks (gpt-oss) against the CPU's within 1e-5: the batch (its long contexts split,
 * the sink joining the splits' merge) and token 3 alone (context 1: one split, the sink joining
 * the unsplit kernel's merge of its warps). */
static void attention_sinks_case(sol_backend *be, sol_kv *kv, const att_case &c,
                                 std::vector<unsigned char> &kp, std::vector<unsigned char> &vp,
                                 const std::vector<float> &q, const sol_attn_seq *per,
                                 std::vector<int32_t> &flat, const int32_t *n_ctx) {
    enum { BS = 16, MAXB = 20, N = 14, SMS = 132 };
    const int qrow = c.heads * c.hd, f16 = c.dt == SOL_DT_F16;
    const float scale = 1.0f / sqrtf((float)c.hd);
    std::vector<float> sinks(c.heads), want(N * qrow), got(N * qrow), none(N * qrow);
    fill(sinks.data(), c.heads, 91);
    for (float &x : sinks) /* near the scores' largest, so each takes a visible share */
        x += 6.0f;
    assert_int_equal(sol_paged_attention_sinks(be, kv, 0, q.data(), want.data(), N, c.heads, c.kvh,
                                               c.hd, scale, 0, sinks.data(), per),
                     0);
    assert_int_equal(
        sol_paged_attention(be, kv, 0, q.data(), none.data(), N, c.heads, c.kvh, c.hd, scale, per),
        0);
    if (!(rel_err(none.data(), want.data(), N * qrow) > 1e-3)) /* 100x the tolerance below */
        fail_msg("heads %d/%d hd %d: the sinks hardly change the output (%g)", c.heads, c.kvh, c.hd,
                 rel_err(none.data(), want.data(), N * qrow));
    int max_len = 200, splits = sol_emu_attention_splits(max_len, SMS, c.heads, c.kvh, c.hd);
    std::vector<float> ws(sol_emu_attention_ws_floats(N, c.heads, c.hd, splits));
    std::vector<int> cnt(N * c.heads, 0);
    sol_emu_paged_attention(kp.data(), vp.data(), f16, BS, q.data(), got.data(), 0, nullptr, 0, N,
                            c.heads, c.kvh, c.hd, scale, 0, flat.data(), MAXB, n_ctx, max_len, SMS,
                            ws.data(), cnt.data(), nullptr, 0, 0, nullptr, sinks.data(), nullptr);
    double e = rel_err(got.data(), want.data(), N * qrow);
    if (!(e < 1e-5)) fail_msg("sinks heads %d/%d hd %d: %g", c.heads, c.kvh, c.hd, e);
    sol_emu_paged_attention(kp.data(), vp.data(), f16, BS, q.data(), got.data(), 0, nullptr, 3, 1,
                            c.heads, c.kvh, c.hd, scale, 0, flat.data(), MAXB, n_ctx, 1, SMS,
                            ws.data(), cnt.data(), nullptr, 0, 0, nullptr, sinks.data(), nullptr);
    e = rel_err(&got[3 * qrow], &want[3 * qrow], qrow);
    if (!(e < 1e-5)) fail_msg("sinks heads %d/%d hd %d, one split: %g", c.heads, c.kvh, c.hd, e);
}

static void attention_case(sol_backend *be, const att_case &c, int sms) {
    enum { BS = 16, NBLK = 40, MAXB = 20, N = 14 };
    const int row = c.kvh * c.hd, f16 = c.dt == SOL_DT_F16, qrow = c.heads * c.hd;
    const size_t pool = (size_t)NBLK * BS * row * (f16 ? 2 : 4) + SOL_CUDA_ATT_POOL_SLACK;
    std::vector<unsigned char> kp(pool), vp(pool);
    sol_kv *kv = sol_kv_alloc(be, 1, NBLK, BS, c.kvh, c.hd, c.dt);
    assert_non_null(kv);
    /* Two sequences over a permutation of the blocks (17 and 40 are coprime): 200 and 70 */
    int32_t tables[2][MAXB] = {};
    const int lens[2] = {200, 70};
    for (int i = 0; i < NBLK; i++)
        tables[i / MAXB][i % MAXB] = (i * 17) % NBLK;
    write_two_seqs(be, kv, kp, vp, f16, row, BS, tables[0], tables[1], lens);
    /* Decode-like tokens, then two prefill chunks of 4 tokens (6..9, 10..13) */
    const int tok_seq[N] = {0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1};
    int32_t n_ctx[N] = {200, 150, 70, 1, 5, 131, 147, 148, 149, 150, 67, 68, 69, 70};
    int32_t tiles[3] = {6, 10, 14};
    std::vector<float> q(N * qrow), want(N * qrow), got(N * qrow), alone(qrow);
    fill(q.data(), N * qrow, 77);
    for (float &x : q)
        x *= 0.3f;
    sol_attn_seq per[N];
    std::vector<int32_t> flat(N * MAXB);
    for (int t = 0; t < N; t++) {
        per[t] = sol_attn_seq{tables[tok_seq[t]], n_ctx[t]};
        memcpy(&flat[t * MAXB], tables[tok_seq[t]], sizeof tables[0]);
    }
    const float scale = 1.0f / sqrtf((float)c.hd);
    for (int window : {0, 130}) {        /* 130: windows that split, and differ in a tile */
        if (window && sms != 132) break; /* the emulation is slow: one SM count for windows */
        assert_int_equal(sol_paged_attention_swa(be, kv, 0, q.data(), want.data(), N, c.heads,
                                                 c.kvh, c.hd, scale, window, per),
                         0);
        int max_len = 1;
        for (int t = 0; t < N; t++) {
            int len = window && n_ctx[t] > window ? window : n_ctx[t];
            max_len = len > max_len ? len : max_len;
        }
        int splits = sol_emu_attention_splits(max_len, sms, c.heads, c.kvh, c.hd);
        std::vector<float> ws(sol_emu_attention_ws_floats(N, c.heads, c.hd, splits));
        std::vector<int> cnt(N * c.heads, 0); /* the merge's counters: left zero by every call */
        /* and the merge's Q8_0 or Q8_K epilogue: the bytes gemv_quantize makes of the output
         * (Q8_K: 256 / hd heads a block, whose last merge quantizes it; its counters too) */
        size_t qb = sol_emu_gemv_scratch_bytes(N, qrow);
        for (int act : {SOL_CUDA_ACT_Q8_0, SOL_CUDA_ACT_Q8_K}) {
            std::vector<unsigned char> q8(qb, 0xAB), q8_want(qb, 0xAB);
            std::vector<int> bcnt(N * c.heads, 0);
            int quant = sol_emu_paged_attention(
                kp.data(), vp.data(), f16, BS, q.data(), got.data(), 0, nullptr, 0, N, c.heads,
                c.kvh, c.hd, scale, window, flat.data(), MAXB, n_ctx, max_len, sms, ws.data(),
                cnt.data(), q8.data(), N, act, bcnt.data(), nullptr, nullptr);
            int k = act == SOL_CUDA_ACT_Q8_K;
            assert_int_equal(quant, splits > 1 && c.hd % 32 == 0 &&
                                        (!k || (256 % c.hd == 0 && qrow % 256 == 0)));
            if (!quant) continue;
            assert_int_equal(
                sol_emu_gemv_quantize(act, got.data(), N, qrow, q8_want.data(), nullptr), 0);
            if (memcmp(q8.data(), q8_want.data(), qb))
                fail_msg("heads %d/%d hd %d window %d: the merge's %s differs from "
                         "gemv_quantize's",
                         c.heads, c.kvh, c.hd, window, k ? "Q8_K" : "Q8_0");
            for (int x : bcnt)
                if (x) fail_msg("a Q8_K block counter was left at %d", x);
        }
        double e = rel_err(got.data(), want.data(), N * qrow);
        if (!(e < 1e-5))
            fail_msg("attention heads %d/%d hd %d %s window %d sms %d: %g", c.heads, c.kvh, c.hd,
                     sol_dtype_name(c.dt), window, sms, e);
        std::vector<float> one(N * qrow);
        /* alone: a split token, a short one, a tile's member (the emulation is slow: a few) */
        for (int t : {0, 3, 7}) {
            if (sms != 132) break;
            int len = window && n_ctx[t] > window ? window : n_ctx[t];
            sol_emu_paged_attention(kp.data(), vp.data(), f16, BS, q.data(), one.data(), 0, nullptr,
                                    t, 1, c.heads, c.kvh, c.hd, scale, window, flat.data(), MAXB,
                                    n_ctx, len, sms, ws.data(), cnt.data(), nullptr, 0, 0, nullptr,
                                    nullptr, nullptr);
            if (memcmp(&one[t * qrow], &got[t * qrow], sizeof(float) * qrow))
                fail_msg("heads %d/%d hd %d %s window %d sms %d: token %d (context %d) alone "
                         "differs from its batch row",
                         c.heads, c.kvh, c.hd, sol_dtype_name(c.dt), window, sms, t, n_ctx[t]);
        }
        if (sms == 132 && !window) attention_sinks_case(be, kv, c, kp, vp, q, per, flat, n_ctx);
        /* tokens 6..13 as two tiles of a prefill chunk each: the same bits (tiles are taken at
         * head_dim <= 128 only) */
        if (c.hd > 128) continue;
        sol_emu_paged_attention(kp.data(), vp.data(), f16, BS, q.data(), one.data(), 2, tiles, 6, 8,
                                c.heads, c.kvh, c.hd, scale, window, flat.data(), MAXB, n_ctx,
                                max_len, sms, ws.data(), cnt.data(), nullptr, 0, 0, nullptr,
                                nullptr, nullptr);
        if (memcmp(&one[6 * qrow], &got[6 * qrow], sizeof(float) * 8 * qrow))
            fail_msg("heads %d/%d hd %d %s window %d sms %d: tiled tokens differ from untiled",
                     c.heads, c.kvh, c.hd, sol_dtype_name(c.dt), window, sms);
        for (int x : cnt)
            if (x) fail_msg("a split counter was left at %d (the next launch would miscount)", x);
    }
    sol_kv_free(be, kv);
}

static void test_attention_paths(void **state) {
    (void)state;
    sol_backend *be = cpu();
    const att_case cases[] = {
        {4, 4, 64, SOL_DT_F16},   /* MHA: one query per block, 4-byte rows of 2 halves */
        {8, 2, 128, SOL_DT_F16},  /* GQA 4: the group in one block, 64-bit loads */
        {16, 2, 128, SOL_DT_F32}, /* GQA 8: two blocks of 4 heads, 128-bit loads */
        {8, 1, 256, SOL_DT_F16},  /* GQA 8 at 256: four blocks of 2, 128-bit loads */
        {4, 2, 256, SOL_DT_F32},  /* 2 x 128-bit per row, 2 rows per iteration */
        {6, 2, 96, SOL_DT_F16},   /* GQA 3: a block of 4 query slots, one idle */
        {4, 1, 80, SOL_DT_F32},   /* lanes past head_dim idle */
        {2, 1, 75, SOL_DT_F16},   /* odd: rows not 4-byte aligned, 32-bit words */
        {2, 2, 90, SOL_DT_F32},   /* 360-byte rows: 32-bit loads */
        {8, 4, 36, SOL_DT_F32},   /* GQA 2 at 36 */
    };
    for (const att_case &c :
         cases) /* another SM count for the first three (the emulation is slow) */
        for (int sms : {132, 3})
            if (sms == 132 || &c - cases < 3) attention_case(be, c, sms);
    /* The split counts: from the SM count and the token's own window, 64 positions each at
     * least; none below 128 positions; a larger model shape needs fewer. */
    assert_int_equal(sol_emu_attention_splits(127, 132, 32, 8, 128), 1);
    assert_int_equal(sol_emu_attention_splits(520, 132, 32, 8, 128), 8);
    assert_int_equal(sol_emu_attention_splits(100000, 132, 32, 8, 128), 32);
    assert_int_equal(sol_emu_attention_splits(100000, 132, 64, 64, 128), 5);
    assert_int_equal(sol_emu_attention_splits(100000, 1, 64, 64, 128), 1);
    sol_backend_free(be);
}

/* Prefill attention on tensor cores (k_flash.cu) against the CPU backend: two prefill chunks (40
 * tokens of a 150-position sequence, 20 of a 70-position one) and a decode token, tiled as the
 * backend tiles them (flash_tile_tokens, each tile's first table row holding the tile's union),
 * MHA, GQA 2 and GQA 4 at head_dim 64 and 128, whole contexts and a sliding window of 30. q and
 * the softmax weights are rounded to F16 (2^-11 relative each) where the CPU keeps float: the
 * outputs measure ~6e-5 relative here; 5e-4 is the bound. A kernel that misplaced one fragment
 * would be wrong by O(1). */
static void flash_case(sol_backend *be, int heads, int kvh, int hd) {
    enum { BS = 16, NBLK = 16, MAXB = 10, N = 61 };
    const int row = kvh * hd, qrow = heads * hd;
    const size_t pool = (size_t)NBLK * BS * row * 2 + SOL_CUDA_ATT_POOL_SLACK;
    std::vector<unsigned char> kp(pool), vp(pool);
    sol_kv *kv = sol_kv_alloc(be, 1, NBLK, BS, kvh, hd, SOL_DT_F16);
    assert_non_null(kv);
    int32_t tables[2][MAXB] = {};
    const int lens[2] = {150, 70};
    for (int i = 0; i < NBLK; i++) /* a permutation of the blocks */
        tables[i / MAXB][i % MAXB] = (i * 7) % NBLK;
    write_two_seqs(be, kv, kp, vp, 1, row, BS, tables[0], tables[1], lens);
    /* tokens 0..39: sequence 0 at contexts 111..150; 40: a decode token of sequence 1 at 33;
     * 41..60: sequence 1 at 51..70 */
    std::vector<int32_t> n_ctx(N), flat(N * MAXB), seq_of(N);
    for (int t = 0; t < N; t++) {
        seq_of[t] = t < 40 ? 0 : 1;
        n_ctx[t] = t < 40 ? 111 + t : t == 40 ? 33 : 51 + (t - 41);
        memcpy(&flat[t * MAXB], tables[seq_of[t]], sizeof tables[0]);
    }
    int most = sol_emu_flash_tile_tokens(heads, kvh, hd);
    assert_int_equal(most, 64 / (heads / kvh));
    std::vector<int32_t> tiles;
    for (int t = 0; t < N; t++)
        if (t == 0 || t - tiles.back() == most || seq_of[t] != seq_of[t - 1] || t == 40 || t == 41)
            tiles.push_back(t);
    int n_tiles = (int)tiles.size();
    tiles.push_back(N);
    std::vector<float> q(N * qrow), want(N * qrow), got(N * qrow);
    fill(q.data(), N * qrow, 77);
    for (float &x : q)
        x *= 0.3f;
    sol_attn_seq per[N];
    for (int t = 0; t < N; t++)
        per[t] = sol_attn_seq{tables[seq_of[t]], n_ctx[t]};
    const float scale = 1.0f / sqrtf((float)hd);
    for (int window : {0, 30}) {
        assert_int_equal(sol_paged_attention_swa(be, kv, 0, q.data(), want.data(), N, heads, kvh,
                                                 hd, scale, window, per),
                         0);
        std::fill(got.begin(), got.end(), NAN);
        assert_int_equal(sol_emu_flash_attention(kp.data(), vp.data(), BS, q.data(), got.data(),
                                                 n_tiles, tiles.data(), heads, kvh, hd, scale,
                                                 window, flat.data(), MAXB, n_ctx.data(), nullptr),
                         0);
        double e = rel_err(got.data(), want.data(), N * qrow);
        if (getenv("SOL_TEST_VERBOSE"))
            print_message("flash heads %d/%d hd %d window %d: %g\n", heads, kvh, hd, window, e);
        if (!(e < 5e-4))
            fail_msg("flash heads %d/%d hd %d window %d: %g", heads, kvh, hd, window, e);
    }
    sol_kv_free(be, kv);
}

static void test_flash_attention(void **state) {
    (void)state;
    sol_backend *be = cpu();
    flash_case(be, 2, 2, 64);  /* MHA: 64 tokens a tile */
    flash_case(be, 4, 2, 64);  /* GQA 2 */
    flash_case(be, 8, 2, 128); /* GQA 4 at 128 */
    /* shapes it does not take go to k_attention.cu */
    assert_int_equal(sol_emu_flash_tile_tokens(8, 2, 96), 0);
    assert_int_equal(sol_emu_flash_tile_tokens(8, 3, 64), 0);
    assert_int_equal(sol_emu_flash_tile_tokens(128, 1, 64), 0);
    assert_int_equal(sol_emu_flash_attention(nullptr, nullptr, 16, nullptr, nullptr, 1, nullptr, 8,
                                             2, 96, 1.0f, 0, nullptr, 1, nullptr, nullptr),
                     -ENOTSUP);
    sol_backend_free(be);
}

/* Graph updates follow cudaGraphExecUpdate's rules (cuda_rt_emu.cc): a capture of the same node
 * types in the same order updates the executable graph in place (how 1) even with new kernel
 * arguments, grid sizes, functions, copy addresses and sizes, memset values; another node count,
 * a node of another type, a copy between other memory types or a memset of another size makes a
 * new one (how 2). */
static void test_graph_update_rules(void **state) {
    (void)state;
    sol_cuda_dev *d = nullptr;
    char why[256] = "";
    assert_int_equal(sol_emu_dev_open(0, 1 << 20, &d, why, sizeof why), 0);
    void *st = sol_emu_dev_stream(d);
    enum { N = 300 };
    float *a = (float *)sol_emu_dev_malloc(d, N * sizeof(float)),
          *b = (float *)sol_emu_dev_malloc(d, N * sizeof(float));
    static float host[N], back[N];
    fill(host, N, 1);
    void *exec = nullptr;
    struct shape {
        int kernel, copy_kind, memset_bytes, extra, up;
    };
    /* kernel: 0 add, 1 scale; copy_kind: H2D or D2D (0: none); memset_bytes: 0 none */
    auto capture = [&](shape sh, int n) {
        assert_int_equal(sol_emu_dev_capture_begin(d, why, sizeof why), 0);
        if (sh.copy_kind == SOL_CUDA_H2D)
            assert_int_equal(sol_emu_dev_copy(d, a, host, n * sizeof(float), SOL_CUDA_H2D), 0);
        if (sh.copy_kind == SOL_CUDA_D2D)
            assert_int_equal(sol_emu_dev_copy(d, a, b, n * sizeof(float), SOL_CUDA_D2D), 0);
        if (sh.memset_bytes) assert_int_equal(sol_emu_dev_memset(d, b, n, sh.memset_bytes), 0);
        if (sh.kernel == 0)
            sol_emu_add(a, a, b, n, st);
        else
            sol_emu_scale(a, 0.5f, b, n, st);
        if (sh.extra) sol_emu_scale(b, 2.0f, b, n, st);
        int how = 0;
        assert_int_equal(sol_emu_dev_capture_end_launch(d, sh.up ? b : nullptr, host,
                                                        sh.up ? 16 : 0, &exec, &how, why,
                                                        sizeof why),
                         0);
        return how;
    };
    const shape base = {0, SOL_CUDA_H2D, 64, 0, 0};
    assert_int_equal(capture(base, N), 2);     /* nothing to update yet */
    assert_int_equal(capture(base, N / 2), 1); /* other sizes, grid, copy size: updated */
    assert_int_equal(sol_emu_dev_copy(d, back, b, N / 2 * sizeof(float), SOL_CUDA_D2H), 0);
    for (int i = 0; i < N / 2; i++)
        assert_true(back[i] == host[i] + host[i]); /* the updated graph ran: b = a + a */
    shape s = base;
    s.kernel = 1;
    assert_int_equal(capture(s, N), 1); /* another function, same context: updated */
    s.copy_kind = SOL_CUDA_D2D;
    assert_int_equal(capture(s, N), 2); /* the copy's source turned from host to device */
    assert_int_equal(capture(s, N), 1);
    s.memset_bytes = 128;
    assert_int_equal(capture(s, N), 2); /* a memset of another width */
    s.extra = 1;
    assert_int_equal(capture(s, N), 2); /* one node more */
    s.extra = 0, s.memset_bytes = 0, s.copy_kind = 0, s.up = 0;
    assert_int_equal(capture(s, N), 2);
    s.up = 1;
    assert_int_equal(capture(s, N), 2); /* the staged copy is a node too */
    shape t = s;
    t.up = 0, t.copy_kind = SOL_CUDA_H2D, t.memset_bytes = 0;
    assert_int_equal(capture(t, N), 1); /* staged copy vs a host-to-device copy: same node */
    t.copy_kind = 0, t.memset_bytes = 128, t.up = 0;
    assert_int_equal(capture(t, N), 2); /* a memset where a copy was: another node type */
    sol_emu_dev_graph_free(d, exec);
    sol_emu_dev_close(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        /* cheapest first: barrier_mutation.sh runs this binary once per removed barrier */
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_embed),
        cmocka_unit_test(test_gemv),
        cmocka_unit_test(test_gemv_many),
        cmocka_unit_test(test_gemv_rope_kv),
        cmocka_unit_test(test_gemv_norm_tail),
        cmocka_unit_test(test_gemv_glu_end),
        cmocka_unit_test(test_argmax),
        cmocka_unit_test(test_qk_norm_rope),
        cmocka_unit_test(test_fused_quantize),
        cmocka_unit_test(test_mma_gemm),
        cmocka_unit_test(test_mma_gemm_many),
        cmocka_unit_test(test_mma_split),
        cmocka_unit_test(test_mmq_gemm),
        cmocka_unit_test(test_flash_attention),
        cmocka_unit_test(test_kv_and_attention),
        cmocka_unit_test(test_attention_paths),
        cmocka_unit_test(test_graph_update_rules),
    };
    /* SOL_TEST_FILTER=test_flash*: one test alone (the sanitized emulation is slow) */
    if (getenv("SOL_TEST_FILTER")) cmocka_set_test_filter(getenv("SOL_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
