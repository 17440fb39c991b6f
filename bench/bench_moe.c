/* bench_moe: the grouped expert GEMM of a mixture of experts against this CPU's FMA peak. One
 * A3B-shaped layer scaled to this machine (48 experts of 1024 -> 512 -> 1024, top-8, Q4_K as in
 * a Q4_K_M file): n tokens routed to 8 distinct experts each (seeded), gathered per expert, one
 * gate/up matmul and one down matmul per active expert, SiLU, the weighted combine - the model's
 * moe_feed_forward, op for op - timed at n = 1 (decode: a GEMV over 8 experts) and n = 128
 * (prefill). The peaks are measured: independent FMA chains in every thread (AVX-512 where the
 * CPU has it, else AVX2), and the int8 dot (VNNI) the Q4_K kernels multiply with, where the CPU
 * has it - a Q4_K "FLOP" is an integer multiply-add, so the float peak alone can be exceeded.
 * Usage: bench_moe [threads=2] [reps=7] */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "clock.h"
#include "cpu_features.h"
#include "moe_route.h"

enum { N_EXPERT = 48, TOP_K = 8, DIM = 1024, FFN = 512, FMA_CHAINS = 12 };

typedef struct {
    long iters;
    float out;
} fma_job;

__attribute__((target("avx512f"))) static void *fma512(void *arg) {
    fma_job *j = arg;
    __m512 acc[FMA_CHAINS], m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
    for (int c = 0; c < FMA_CHAINS; c++)
        acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < j->iters; i++)
        for (int c = 0; c < FMA_CHAINS; c++)
            acc[c] = _mm512_fmadd_ps(acc[c], m, a);
    float s = 0;
    for (int c = 0; c < FMA_CHAINS; c++)
        s += _mm512_reduce_add_ps(acc[c]);
    j->out = s;
    return NULL;
}

__attribute__((target("avx2,fma"))) static void *fma256(void *arg) {
    fma_job *j = arg;
    __m256 acc[FMA_CHAINS], m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
    for (int c = 0; c < FMA_CHAINS; c++)
        acc[c] = _mm256_set1_ps((float)c);
    for (long i = 0; i < j->iters; i++)
        for (int c = 0; c < FMA_CHAINS; c++)
            acc[c] = _mm256_fmadd_ps(acc[c], m, a);
    float s = 0, v[8];
    for (int c = 0; c < FMA_CHAINS; c++) {
        _mm256_storeu_ps(v, acc[c]);
        for (int i = 0; i < 8; i++)
            s += v[i];
    }
    j->out = s;
    return NULL;
}

/* The integer dot the K-quant kernels run on an AVX-512 VNNI CPU: 16 lanes x 4 byte products
 * per instruction, counted as 128 operations (a multiply and an add each, as a float FMA). */
__attribute__((target("avx512f,avx512vnni"))) static void *vnni512(void *arg) {
    fma_job *j = arg;
    __m512i acc[FMA_CHAINS], a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5);
    for (int c = 0; c < FMA_CHAINS; c++)
        acc[c] = _mm512_set1_epi32(c);
    for (long i = 0; i < j->iters; i++)
        for (int c = 0; c < FMA_CHAINS; c++)
            acc[c] = _mm512_dpbusd_epi32(acc[c], a, b);
    int s = 0;
    for (int c = 0; c < FMA_CHAINS; c++)
        s += _mm512_reduce_add_epi32(acc[c]);
    j->out = (float)s;
    return NULL;
}

/* G operations/s of `threads` threads running `fn`'s chains of `ops` operations per instruction
 * (best of five runs). */
static double peak(int threads, void *(*fn)(void *), int ops) {
    double best = 0;
    for (int run = 0; run < 5; run++) {
        pthread_t th[64];
        fma_job jobs[64];
        long iters = 20000000;
        uint64_t t0 = sol_now_ns();
        for (int t = 0; t < threads; t++) {
            jobs[t].iters = iters;
            pthread_create(&th[t], NULL, fn, &jobs[t]);
        }
        for (int t = 0; t < threads; t++)
            pthread_join(th[t], NULL);
        double s = (double)(sol_now_ns() - t0) * 1e-9;
        double g = (double)threads * iters * FMA_CHAINS * ops / s * 1e-9;
        if (g > best) best = g;
    }
    return best;
}

static void fill(float *p, size_t n, unsigned *s) {
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((*s = *s * 1103515245u + 12345u) >> 8) / 8388608.0f - 1.0f;
}

/* One expert matrix of rows x cols in Q4_K. */
static sol_weight q4k(sol_backend *be, int64_t rows, int64_t cols, unsigned *seed) {
    size_t rb = sol_dtype_row_bytes(SOL_DT_Q4_K, cols);
    char *data = aligned_alloc(64, (rb * (size_t)rows + 63) / 64 * 64);
    float *row = malloc(sizeof(float) * (size_t)cols);
    for (int64_t r = 0; r < rows; r++) {
        fill(row, (size_t)cols, seed);
        sol_quantize_row(SOL_DT_Q4_K, row, data + (size_t)r * rb, cols);
    }
    free(row);
    sol_weight w = {SOL_DT_Q4_K, rows, cols, data, rb, 0, SOL_WEIGHT_EXPERT};
    if (sol_weight_prepare(be, &w)) fprintf(stderr, "bench_moe: %s\n", be->err.msg);
    return w;
}

typedef struct {
    sol_backend *be;
    sol_weight gate[N_EXPERT], up[N_EXPERT], down[N_EXPERT];
    float *xb, *ex, *eh, *eh2, *ey, *out, *w;
    int32_t *pos, *rows, end[N_EXPERT];
} layer;

/* The model's expert block for n tokens already routed (pos: each token's 8 experts): the
 * gather, moe_experts (the model's own), the combine. */
static int experts(layer *L, int n) {
    sol_backend *be = L->be;
    moe_ffn x = {L->gate, L->up, L->down, NULL, NULL, NULL, 0};
    int rc;
    if ((rc = sol_get_rows(be, L->xb, DIM, L->rows, n * TOP_K, n, L->ex)) ||
        (rc = moe_experts(be, &x, N_EXPERT, L->end, DIM, FFN, L->ex, L->eh, L->eh2, L->ey)))
        return rc;
    return sol_moe_combine(be, L->ey, DIM, L->pos, L->w, n, TOP_K, (int64_t)n * TOP_K, L->out);
}

/* Routes n tokens to 8 distinct experts each (uniform, seeded), grouped as the model does. */
static void route(layer *L, int n, unsigned *seed) {
    for (int t = 0; t < n; t++)
        for (int j = 0; j < TOP_K; j++) {
            int e, dup;
            do {
                e = (int)((*seed = *seed * 1103515245u + 12345u) >> 8) % N_EXPERT;
                dup = 0;
                for (int i = 0; i < j; i++)
                    dup |= L->pos[t * TOP_K + i] == e;
            } while (dup);
            L->pos[t * TOP_K + j] = e;
            L->w[t * TOP_K + j] = 1.0f / TOP_K;
        }
    moe_group(L->pos, n, TOP_K, N_EXPERT, L->rows, L->end);
}

static double time_experts(layer *L, int n, int reps, unsigned *seed) {
    double ms[64];
    route(L, n, seed);
    experts(L, n); /* warm-up */
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = sol_now_ns();
        if (experts(L, n)) fprintf(stderr, "bench_moe: %s\n", L->be->err.msg);
        ms[r] = (double)(sol_now_ns() - t0) * 1e-6;
    }
    for (int i = 0; i < reps; i++) /* median */
        for (int j = i + 1; j < reps; j++)
            if (ms[j] < ms[i]) {
                double x = ms[i];
                ms[i] = ms[j], ms[j] = x;
            }
    return ms[reps / 2];
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: bench_moe [threads=2] [reps=7]\n"
               "Times the grouped expert GEMM of an A3B-shaped layer (48 experts, top-8, dim\n"
               "1024, expert width 512, Q4_K) at n = 1 and 128 tokens on the CPU backend, and\n"
               "this CPU's FMA and int8 dot peaks (independent chains per thread); prints\n"
               "GFLOP/s and the fraction of each peak.\n");
        return 0;
    }
    int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 7;
    if (threads < 1 || threads > 64 || reps < 1 || reps > 64) {
        fprintf(stderr, "bench_moe: threads 1..64, reps 1..64\n");
        return 2;
    }
    int w512 = sol_cpu_isa_supported(SOL_ISA_AVX512);
    double fpeak = peak(threads, w512 ? fma512 : fma256, w512 ? 32 : 16), ipeak = 0;
    printf("FMA peak, %d threads, %d-bit: %.1f GFLOP/s\n", threads, w512 ? 512 : 256, fpeak);
    if (w512 && __builtin_cpu_supports("avx512vnni")) {
        ipeak = peak(threads, vnni512, 128);
        printf("int8 dot peak (AVX-512 VNNI), %d threads: %.1f GOP/s\n", threads, ipeak);
    }
    sol_err err = {0};
    sol_backend_opts o = {.threads = threads};
    layer L = {.be = sol_backend_new("cpu", &o, &err)};
    if (!L.be) {
        fprintf(stderr, "bench_moe: %s\n", err.msg);
        return 1;
    }
    unsigned seed = 7;
    for (int e = 0; e < N_EXPERT; e++) {
        L.gate[e] = q4k(L.be, FFN, DIM, &seed);
        L.up[e] = q4k(L.be, FFN, DIM, &seed);
        L.down[e] = q4k(L.be, DIM, FFN, &seed);
    }
    enum { NMAX = 128 };
    size_t nk = (size_t)NMAX * TOP_K;
    L.xb = malloc(sizeof(float) * NMAX * DIM), L.out = malloc(sizeof(float) * NMAX * DIM);
    L.ex = malloc(sizeof(float) * nk * DIM), L.ey = malloc(sizeof(float) * nk * DIM);
    L.eh = malloc(sizeof(float) * nk * FFN), L.eh2 = malloc(sizeof(float) * nk * FFN);
    L.w = malloc(sizeof(float) * nk), L.pos = malloc(sizeof(int32_t) * nk);
    L.rows = malloc(sizeof(int32_t) * nk);
    fill(L.xb, (size_t)NMAX * DIM, &seed);
    sol_reserve(L.be, NMAX, DIM);
    const int ns[2] = {1, NMAX};
    for (int i = 0; i < 2; i++) {
        int n = ns[i];
        double ms = time_experts(&L, n, reps, &seed);
        double flop = 2.0 * n * TOP_K * 3.0 * DIM * FFN;
        double bytes = 0; /* the active experts' weights, read once per call */
        for (int e = 0, at = 0; e < N_EXPERT; at = L.end[e++])
            if (L.end[e] > at) bytes += 3.0 * (double)L.gate[e].row_bytes * FFN;
        double g = flop / ms * 1e-6;
        printf("n=%-4d %8.3f ms  %7.1f GFLOP/s = %5.1f%% of the FMA peak", n, ms, g,
               100.0 * g / fpeak);
        if (ipeak > 0) printf(", %4.1f%% of the int8 dot peak", 100.0 * g / ipeak);
        printf("  %6.1f GB/s of expert weights (%d of %d experts active)\n", bytes / ms * 1e-6,
               (int)(bytes / (3.0 * (double)L.gate[0].row_bytes * FFN) + 0.5), N_EXPERT);
    }
    sol_backend_free(L.be);
    return 0;
}
