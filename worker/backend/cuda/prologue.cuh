/* prologue: what the GEMVs' activation prologues compute, written once for the element-wise
 * kernels, k_rmsnorm and the fused quantize kernels (k_gemv.cu), so fused and unfused give the
 * same bits: the gated activations and an RMSNorm row. */
#ifndef SOL_CUDA_PROLOGUE_CUH
#define SOL_CUDA_PROLOGUE_CUH

#include "reduce.cuh"

/* SiLU(g) * u. */
__device__ __forceinline__ float sol_silu_mul1(float g, float u) {
    return g / (1.0f + expf(-g)) * u;
}

/* GELU's tanh form as x * sigmoid(2u) (the CPU backend's formula), times u. */
__device__ __forceinline__ float sol_gelu_mul1(float x, float u) {
    float k = 0.79788456080286535588f;
    return x / (1.0f + expf(-2.0f * k * x * (1.0f + 0.044715f * x * x))) * u;
}

/* gpt-oss's gate: x * sigmoid(alpha x) * (y + 1), x = min(g, limit), y = clamp(u, +-limit), in
 * the CPU backend's steps. */
__device__ __forceinline__ float sol_swiglu_oai1(float g, float u, float alpha, float limit) {
    float x = limit < g ? limit : g;
    float y = u < -limit ? -limit : limit < u ? limit : u;
    float glu = x / (1.0f + expf(alpha * -x));
    return glu * (y + 1.0f);
}

/* The RMSNorm scale 1 / sqrt(mean(x^2) + eps) of row xr as a block of R x blockDim.x threads
 * sums it (sol_block_sum_as: thread i takes elements i, i + R blockDim.x, ...), in a fixed order
 * (a row's result never depends on the batch, nor on which block of a multi-block launch asks).
 * CG: the row is read through L2 (__ldcg: other blocks of this launch wrote it). scratch: 32
 * shared floats. */
template <int R, bool CG>
__device__ __forceinline__ float sol_rmsnorm_scale_as(const float *xr, int dim, float eps,
                                                      float *scratch) {
    float ss[R];
    int stride = R * (int)blockDim.x;
    SOL_UNROLL
    for (int r = 0; r < R; r++) {
        ss[r] = 0.0f;
        for (int i = (int)threadIdx.x + r * (int)blockDim.x; i < dim; i += stride) {
            float v = CG ? __ldcg(xr + i) : xr[i];
            ss[r] += v * v;
        }
    }
    return 1.0f / sqrtf(sol_block_sum_as<R>(ss, scratch) / (float)dim + eps);
}

/* The scale summed by the block as it is (SOL_CUDA_NORM_THREADS threads in every row kernel). */
__device__ __forceinline__ float sol_rmsnorm_scale(const float *xr, int dim, float eps,
                                                   float *scratch) {
    return sol_rmsnorm_scale_as<1, false>(xr, dim, eps, scratch);
}

/* Row blockIdx.x of x (rows of dim) normalized by the whole block into the same row of out:
 * x / sqrt(mean(x^2) + eps) * w. */
__device__ __forceinline__ void sol_rmsnorm_row(const float *x, const float *w, float *out, int dim,
                                                float eps, float *scratch) {
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *o = out + (size_t)blockIdx.x * dim, scale = sol_rmsnorm_scale(xr, dim, eps, scratch);
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        o[i] = xr[i] * scale * w[i];
}

#endif
