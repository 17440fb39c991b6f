/* k_rope: rotary position embedding in place, one thread per (token, head, pair). Angles in
 * double with the CPU backend's rules (llama-3 bands, linear scaling), so both backends agree to
 * float rounding. */
#include "cuda_kernels.h"
#include "sol_cuda_kernel.h"

enum { ROPE_THREADS = 128 };

static __device__ double rope_inv_freq(const sol_cuda_rope_args &p, int i, int head_dim) {
    double f = pow((double)p.freq_base, -2.0 * i / head_dim);
    if (p.freq_scale > 0.0f) f *= p.freq_scale;
    if (p.scaling_factor <= 0.0f || p.orig_ctx <= 0) return f;
    const double two_pi = 6.283185307179586476925;
    double wavelen = two_pi / f, low_wl = p.orig_ctx / (double)p.low_freq_factor,
           high_wl = p.orig_ctx / (double)p.high_freq_factor;
    if (wavelen < high_wl) return f;
    if (wavelen > low_wl) return f / p.scaling_factor;
    double smooth = (p.orig_ctx / wavelen - p.low_freq_factor) /
                    ((double)p.high_freq_factor - p.low_freq_factor);
    return (1.0 - smooth) * f / p.scaling_factor + smooth * f;
}

static __global__ void k_rope(float *x, const int32_t *pos, int n, int heads, int head_dim,
                              sol_cuda_rope_args p) {
    int half = head_dim / 2;
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (int64_t)n * heads * half) return;
    int i = (int)(id % half);
    int64_t th = id / half; /* token * heads + head */
    int t = (int)(th / heads);
    double a = pos[t] * rope_inv_freq(p, i, head_dim);
    float c = (float)cos(a), s = (float)sin(a);
    float *v = x + th * head_dim;
    int step = p.neox ? 1 : 2, off = p.neox ? half : 1;
    float x0 = v[i * step], x1 = v[i * step + off];
    /* the CPU's three roundings each, not nvcc's contraction into an FMA: the same bits */
    v[i * step] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    v[i * step + off] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

extern "C" void SOL_CUDA_FN(rope)(float *x, const int32_t *pos, int n, int heads, int head_dim,
                                  sol_cuda_rope_args p, void *stream) {
    int64_t total = (int64_t)n * heads * (head_dim / 2);
    if (total > 0)
        SOL_LAUNCH(k_rope, dim3((unsigned)((total + ROPE_THREADS - 1) / ROPE_THREADS)),
                   dim3(ROPE_THREADS), 0, (cudaStream_t)stream, x, pos, n, heads, head_dim, p);
}
