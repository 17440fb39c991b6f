/* k_elementwise: the element-wise ops (gated activations, add, scale), one thread an element. */
#include "cuda_kernels.h"
#include "prologue.cuh"

enum { EW_THREADS = 256 };

static unsigned ew_blocks(int64_t n) {
    return (unsigned)((n + EW_THREADS - 1) / EW_THREADS);
}

static __global__ void k_silu_mul(const float *g, const float *u, float *o, int64_t n) {
    sol_grid_dependency();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = sol_silu_mul1(g[i], u[i]);
}

static __global__ void k_gelu_mul(const float *g, const float *u, float *o, int64_t n) {
    sol_grid_dependency();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = sol_gelu_mul1(g[i], u[i]);
}

static __global__ void k_swiglu_oai(const float *g, const float *u, float *o, int64_t n,
                                    float alpha, float limit) {
    sol_grid_dependency();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = sol_swiglu_oai1(g[i], u[i], alpha, limit);
}

static __global__ void k_add(const float *a, const float *b, float *o, int64_t n) {
    sol_grid_dependency();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = a[i] + b[i];
}

/* y[t] += bias for n rows of len: a per-row bias as one launch. */
static __global__ void k_add_rows(float *y, const float *bias, int64_t n, int len) {
    sol_grid_dependency();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] + bias[i % len];
}

static __global__ void k_scale(const float *x, float s, float *o, int64_t n) {
    sol_grid_dependency();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = x[i] * s;
}

extern "C" void SOL_CUDA_FN(silu_mul)(const float *gate, const float *up, float *out, int64_t n,
                                      void *stream) {
    if (n > 0)
        SOL_LAUNCH(k_silu_mul, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, stream, gate, up, out, n);
}

extern "C" void SOL_CUDA_FN(gelu_mul)(const float *gate, const float *up, float *out, int64_t n,
                                      void *stream) {
    if (n > 0)
        SOL_LAUNCH(k_gelu_mul, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, stream, gate, up, out, n);
}

extern "C" void SOL_CUDA_FN(swiglu_oai)(const float *gate, const float *up, float *out, int64_t n,
                                        float alpha, float limit, void *stream) {
    if (n > 0)
        SOL_LAUNCH(k_swiglu_oai, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, stream, gate, up, out, n,
                   alpha, limit);
}

extern "C" void SOL_CUDA_FN(add)(const float *a, const float *b, float *out, int64_t n,
                                 void *stream) {
    if (n > 0) SOL_LAUNCH(k_add, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, stream, a, b, out, n);
}

extern "C" void SOL_CUDA_FN(scale)(const float *x, float s, float *out, int64_t n, void *stream) {
    if (n > 0) SOL_LAUNCH(k_scale, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, stream, x, s, out, n);
}

extern "C" void SOL_CUDA_FN(add_rows)(float *y, const float *bias, int n, int len, void *stream) {
    int64_t m = (int64_t)n * len;
    if (m > 0)
        SOL_LAUNCH(k_add_rows, dim3(ew_blocks(m)), dim3(EW_THREADS), 0, stream, y, bias, m, len);
}
