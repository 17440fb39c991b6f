/* k_norm: RMSNorm, one block of SOL_CUDA_NORM_THREADS threads per row; the sum of squares is a
 * fixed-order block sum (reduce.cuh), so a row's result never depends on the batch. */
#include "cuda_kernels.h"
#include "prologue.cuh"

static __global__ void k_rmsnorm(const float *x, const float *w, float *out, int dim, float eps) {
    sol_grid_dependency();
    SOL_SHARED(float, scratch, [32]);
    sol_rmsnorm_row(x, w, out, dim, eps, scratch);
}

extern "C" void SOL_CUDA_FN(rmsnorm)(const float *x, const float *w, float *out, int n, int dim,
                                     float eps, void *stream) {
    if (n > 0)
        SOL_LAUNCH(k_rmsnorm, dim3((unsigned)n), dim3(SOL_CUDA_NORM_THREADS), 0, stream, x, w, out,
                   dim, eps);
}
