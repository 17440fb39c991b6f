/* k_rope: rotary position embedding in place, one thread per (token, head, pair). Angles in
 * double from the CPU backend's own frequencies (rope_freq.h: llama-3 bands, linear scaling,
 * YaRN), so both backends agree to float rounding. The sine and cosine are rope_sincos's, not the
 * CUDA library's: its double cos and sin carry a large-argument path (Payne-Hanek) with a table in
 * local memory, which the SASS check forbids in a decode kernel even where it never runs. */
#include "cuda_kernels.h"
#include "rope_kv.cuh"
#include "sol_cuda_kernel.h"

enum { ROPE_THREADS = 128 };

static __global__ void k_rope(float *x, const int32_t *pos, int n, int heads, int head_dim,
                              sol_cuda_rope_args p) {
    sol_grid_dependency();
    int half = head_dim / 2, o0, o1;
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (int64_t)n * heads * half) return;
    int64_t th = id / half; /* token * heads + head */
    rope_pair(x + th * head_dim, pos[th / heads], (int)(id % half), head_dim, p, &o0, &o1);
}

/* rope(q), rope(k) and the K/V write of one token per block (blockIdx.x), as one launch: the
 * thread that rotates a pair of k stores both values in the pool too, so k is not read back.
 * pos_slots: n positions, then n cache slots. Each element's arithmetic is k_rope's and
 * k_kv_write's: the same bits as the three launches. */
static __global__ void k_rope_kv(float *q, float *k, const float *v, const int32_t *pos_slots,
                                 int n, int heads, int kv_heads, int head_dim, sol_cuda_rope_args p,
                                 unsigned char *k_pool, unsigned char *v_pool, int f16) {
    sol_grid_dependency();
    int t = blockIdx.x, half = head_dim / 2, row = kv_heads * head_dim;
    int32_t at = pos_slots[t];
    size_t dst = (size_t)pos_slots[n + t] * row;
    int qp = heads * half, kp = kv_heads * half;
    for (int id = threadIdx.x; id < qp + kp + row; id += blockDim.x) {
        int o0, o1;
        if (id < qp) {
            rope_pair(q + ((size_t)t * heads + id / half) * head_dim, at, id % half, head_dim, p,
                      &o0, &o1);
        } else if (id < qp + kp) {
            int h = (id - qp) / half;
            float *kr = k + (size_t)t * row + (size_t)h * head_dim;
            rope_pair(kr, at, (id - qp) % half, head_dim, p, &o0, &o1);
            kv_put(k_pool, f16, dst + (size_t)h * head_dim + o0, kr[o0]);
            kv_put(k_pool, f16, dst + (size_t)h * head_dim + o1, kr[o1]);
        } else {
            int e = id - qp - kp;
            kv_put(v_pool, f16, dst + e, v[(size_t)t * row + e]);
        }
    }
}

extern "C" void SOL_CUDA_FN(rope)(float *x, const int32_t *pos, int n, int heads, int head_dim,
                                  sol_cuda_rope_args p, void *stream) {
    int64_t total = (int64_t)n * heads * (head_dim / 2);
    if (total > 0)
        SOL_LAUNCH(k_rope, dim3((unsigned)((total + ROPE_THREADS - 1) / ROPE_THREADS)),
                   dim3(ROPE_THREADS), 0, stream, x, pos, n, heads, head_dim, p);
}

extern "C" void SOL_CUDA_FN(rope_kv)(float *q, float *k, const float *v, const int32_t *pos_slots,
                                     int n, int heads, int kv_heads, int head_dim,
                                     sol_cuda_rope_args p, void *k_pool, void *v_pool, int f16,
                                     void *stream) {
    if (n > 0)
        SOL_LAUNCH(k_rope_kv, dim3((unsigned)n), dim3(ROPE_THREADS), 0, stream, q, k, v, pos_slots,
                   n, heads, kv_heads, head_dim, p, (unsigned char *)k_pool,
                   (unsigned char *)v_pool, f16);
}
