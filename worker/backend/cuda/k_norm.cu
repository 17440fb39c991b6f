/* k_norm: RMSNorm, one block of NORM_THREADS threads per row; the sum of squares is a fixed-order
 * block sum (reduce.cuh), so a row's result never depends on the batch. */
#include "cuda_kernels.h"
#include "reduce.cuh"

enum { NORM_THREADS = 256 };

static __global__ void k_rmsnorm(const float *x, const float *w, float *out, int dim, float eps) {
    SOL_SHARED(float, scratch, [32]);
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *o = out + (size_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        ss += xr[i] * xr[i];
    float scale = 1.0f / sqrtf(sol_block_sum(ss, scratch) / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        o[i] = xr[i] * scale * w[i];
}

extern "C" void SOL_CUDA_FN(rmsnorm)(const float *x, const float *w, float *out, int n, int dim,
                                     float eps, void *stream) {
    if (n > 0)
        SOL_LAUNCH(k_rmsnorm, dim3((unsigned)n), dim3(NORM_THREADS), 0, stream, x, w, out, dim,
                   eps);
}
