/* cuda_kernels: the C-callable launchers of the CUDA kernels (one .cu file per kernel family);
 * the same sources run on a GPU (nvcc) and on the CPU under cuda_emu.h (tests). Pointers are
 * device buffers; `stream` is a cudaStream_t (NULL: the default stream). */
#ifndef SOL_CUDA_KERNELS_H
#define SOL_CUDA_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* k_elementwise.cu: out = silu(gate) * up, gelu(gate) * up (tanh form), a + b, x * s. */
void sol_cuda_silu_mul(const float *gate, const float *up, float *out, int64_t n, void *stream);
void sol_cuda_gelu_mul(const float *gate, const float *up, float *out, int64_t n, void *stream);
void sol_cuda_add(const float *a, const float *b, float *out, int64_t n, void *stream);
void sol_cuda_scale(const float *x, float s, float *out, int64_t n, void *stream);

/* k_norm.cu: out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w for n rows of dim (a block per row). */
void sol_cuda_rmsnorm(const float *x, const float *w, float *out, int n, int dim, float eps,
                      void *stream);

/* k_rope.cu: in place on x (n x heads x head_dim), token t at pos[t]; NORM pairs (2i, 2i+1) or
 * NEOX pairs (i, i + d/2); angles pos * base^(-2i/d) * freq_scale, with llama-3 bands when
 * scaling_factor > 0 and orig_ctx > 0 (the CPU backend's rules, in double). */
typedef struct sol_cuda_rope_args {
    float freq_base, scaling_factor, low_freq_factor, high_freq_factor, freq_scale;
    int32_t orig_ctx, neox;
} sol_cuda_rope_args;
void sol_cuda_rope(float *x, const int32_t *pos, int n, int heads, int head_dim,
                   sol_cuda_rope_args p, void *stream);

#ifdef __cplusplus
}
#endif

#endif
