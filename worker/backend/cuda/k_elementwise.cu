/* k_elementwise: the element-wise ops (gated activations, add, scale), one thread an element. */
#include "cuda_kernels.h"
#include "sol_cuda_kernel.h"

enum { EW_THREADS = 256 };

static unsigned ew_blocks(int64_t n) {
    return (unsigned)((n + EW_THREADS - 1) / EW_THREADS);
}

static __global__ void k_silu_mul(const float *g, const float *u, float *o, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* GELU's tanh form as x * sigmoid(2u) (the CPU backend's formula). */
static __global__ void k_gelu_mul(const float *g, const float *u, float *o, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = g[i], k = 0.79788456080286535588f;
    o[i] = x / (1.0f + expf(-2.0f * k * x * (1.0f + 0.044715f * x * x))) * u[i];
}

static __global__ void k_add(const float *a, const float *b, float *o, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = a[i] + b[i];
}

static __global__ void k_scale(const float *x, float s, float *o, int64_t n) {
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

extern "C" void SOL_CUDA_FN(add)(const float *a, const float *b, float *out, int64_t n,
                                 void *stream) {
    if (n > 0) SOL_LAUNCH(k_add, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, stream, a, b, out, n);
}

extern "C" void SOL_CUDA_FN(scale)(const float *x, float s, float *out, int64_t n, void *stream) {
    if (n > 0) SOL_LAUNCH(k_scale, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, stream, x, s, out, n);
}
