/* k_convert: the half-precision activations of the prefill GEMM: rounded to F16 or BF16 once per
 * matrix group, then read by cuBLASLt (F16/BF16 weights) or the tensor-core kernel (k_mma.cu);
 * the RMSNorm or the gated product that comes before a group is made where x is read. */
#include <errno.h>

#include "dequant.cuh"
#include "prologue.cuh"

enum { CONVERT_THREADS = 256 };

static __global__ void k_to_half(const float *x, uint16_t *out, int64_t n, int bf16) {
    sol_grid_dependency();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = bf16 ? sol_f32_to_bf16(x[i]) : sol_f32_to_f16(x[i]);
}

/* RMSNorm of row blockIdx.x (k_rmsnorm's block sum and arithmetic: the same f32 values) rounded
 * to half: the normalized f32 rows are never written. */
static __global__ void k_to_half_norm(const float *x, const float *w, uint16_t *out, int dim,
                                      float eps, int bf16) {
    sol_grid_dependency();
    SOL_SHARED(float, scratch, [32]);
    const float *xr = x + (size_t)blockIdx.x * dim;
    uint16_t *o = out + (size_t)blockIdx.x * dim;
    float scale = sol_rmsnorm_scale(xr, dim, eps, scratch);
    for (int i = (int)threadIdx.x; i < dim; i += (int)blockDim.x) {
        float v = xr[i] * scale * w[i];
        o[i] = bf16 ? sol_f32_to_bf16(v) : sol_f32_to_f16(v);
    }
}

/* act(g) * u (silu_mul's or gelu_mul's float steps: prologue.cuh) rounded to half. */
static __global__ void k_to_half_glu(const float *g, const float *u, uint16_t *out, int64_t n,
                                     int gelu, int bf16) {
    sol_grid_dependency();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = gelu ? sol_gelu_mul1(g[i], u[i]) : sol_silu_mul1(g[i], u[i]);
    out[i] = bf16 ? sol_f32_to_bf16(v) : sol_f32_to_f16(v);
}

extern "C" void SOL_CUDA_FN(to_half_norm)(const float *x, const float *w, void *out, int n, int dim,
                                          float eps, int bf16, void *stream) {
    if (n > 0)
        SOL_LAUNCH(k_to_half_norm, dim3((unsigned)n), dim3(SOL_CUDA_NORM_THREADS), 0, stream, x, w,
                   (uint16_t *)out, dim, eps, bf16);
}

extern "C" void SOL_CUDA_FN(to_half_glu)(const float *g, const float *u, void *out, int64_t n,
                                         int gelu, int bf16, void *stream) {
    if (n > 0)
        SOL_LAUNCH(k_to_half_glu, dim3((unsigned)((n + CONVERT_THREADS - 1) / CONVERT_THREADS)),
                   dim3(CONVERT_THREADS), 0, stream, g, u, (uint16_t *)out, n, gelu, bf16);
}

extern "C" void SOL_CUDA_FN(to_half)(const float *x, void *out, int64_t n, int bf16, void *stream) {
    if (n > 0)
        SOL_LAUNCH(k_to_half, dim3((unsigned)((n + CONVERT_THREADS - 1) / CONVERT_THREADS)),
                   dim3(CONVERT_THREADS), 0, stream, x, (uint16_t *)out, n, bf16);
}
