/* k_convert: the half-precision operands of the prefill GEMM: activations rounded to F16 or BF16
 * and weight rows dequantized to F16 (a tile of rows at a time, so the scratch stays small). */
#include <errno.h>

#include "dequant.cuh"

enum { CONVERT_THREADS = 256 };

static __global__ void k_to_half(const float *x, uint16_t *out, int64_t n, int bf16) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = bf16 ? sol_f32_to_bf16(x[i]) : sol_f32_to_f16(x[i]);
}

static __global__ void k_dequant_f16(sol_cuda_wt w, int m0, uint16_t *out) {
    int K = w.cols;
    for (int k = threadIdx.x; k < K; k += blockDim.x)
        out[(size_t)blockIdx.x * K + k] =
            sol_f32_to_f16(sol_dequant_elem(w, m0 + (int)blockIdx.x, k));
}

extern "C" void SOL_CUDA_FN(to_half)(const float *x, void *out, int64_t n, int bf16, void *stream) {
    if (n > 0)
        SOL_LAUNCH(k_to_half, dim3((unsigned)((n + CONVERT_THREADS - 1) / CONVERT_THREADS)),
                   dim3(CONVERT_THREADS), 0, stream, x, (uint16_t *)out, n, bf16);
}

extern "C" int SOL_CUDA_FN(dequant_f16)(sol_cuda_wt w, int m0, int rows, void *out, void *stream) {
    if (!sol_cuda_type_known(w.type)) return -ENOTSUP;
    if (w.split != sol_cuda_wants_split(w.type)) return -EINVAL;
    if (rows > 0)
        SOL_LAUNCH(k_dequant_f16, dim3((unsigned)rows), dim3(CONVERT_THREADS), 0, stream, w, m0,
                   (uint16_t *)out);
    return 0;
}
