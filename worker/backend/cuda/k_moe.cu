/* k_moe: a mixture of experts' combine - each token's k expert outputs weighted and summed in
 * rank order, a block per token, its threads across the row. */
#include <errno.h>

#include "cuda_kernels.h"
#include "prologue.cuh"

enum { MOE_THREADS = 256 };

/* rw: the n*k rows (int32), then the n*k weights (float bits). The products and sums are
 * rounded one at a time (__fmul_rn / __fadd_rn: no FMA contraction), so the sum is the CPU
 * backend's bit for bit. */
static __global__ void k_moe_combine(const float *src, int64_t width, const int32_t *rw, int n,
                                     int k, float *out) {
    sol_grid_dependency();
    const int32_t *rows = rw + (size_t)blockIdx.x * k;
    const float *w = (const float *)(rw + (size_t)n * k) + (size_t)blockIdx.x * k;
    float *o = out + (size_t)blockIdx.x * width;
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
        float acc = __fmul_rn(w[0], src[(size_t)rows[0] * width + c]);
        for (int j = 1; j < k; j++)
            acc = __fadd_rn(acc, __fmul_rn(w[j], src[(size_t)rows[j] * width + c]));
        o[c] = acc;
    }
}

extern "C" int SOL_CUDA_FN(moe_combine)(const float *src, int64_t width, const int32_t *rw, int n,
                                        int k, float *out, void *stream) {
    if (width <= 0 || n < 0 || k < 1) return -EINVAL;
    if (n > 0)
        SOL_LAUNCH(k_moe_combine, dim3((unsigned)n), dim3(MOE_THREADS), 0, stream, src, width, rw,
                   n, k, out);
    return 0;
}
