/* k_convert: the half-precision activations of the prefill GEMM: rounded to F16 or BF16 once per
 * matrix, then read by cuBLASLt (F16/BF16 weights) or the tensor-core kernel (k_mma.cu). */
#include <errno.h>

#include "dequant.cuh"

enum { CONVERT_THREADS = 256 };

static __global__ void k_to_half(const float *x, uint16_t *out, int64_t n, int bf16) {
    sol_grid_dependency();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = bf16 ? sol_f32_to_bf16(x[i]) : sol_f32_to_f16(x[i]);
}

extern "C" void SOL_CUDA_FN(to_half)(const float *x, void *out, int64_t n, int bf16, void *stream) {
    if (n > 0)
        SOL_LAUNCH(k_to_half, dim3((unsigned)((n + CONVERT_THREADS - 1) / CONVERT_THREADS)),
                   dim3(CONVERT_THREADS), 0, stream, x, (uint16_t *)out, n, bf16);
}
