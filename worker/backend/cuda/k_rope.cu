/* k_rope: rotary position embedding in place, one thread per (token, head, pair). Angles in
 * double from the CPU backend's own frequencies (rope_freq.h: llama-3 bands, linear scaling,
 * YaRN), so both backends agree to float rounding. The sine and cosine are rope_sincos's, not the
 * CUDA library's: its double cos and sin carry a large-argument path (Payne-Hanek) with a table in
 * local memory, which the SASS check forbids in a decode kernel even where it never runs. */
#include "cuda_kernels.h"
#include "prologue.cuh"
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

/* Per-head RMSNorm of q and k (Qwen3, Gemma-3), then rope(q), rope(k) and the K/V write, one
 * launch where there were three (two k_rmsnorm, k_rope_kv): a block of SOL_CUDA_NORM_THREADS per
 * (token, head of q or of k), so each head's sum of squares is k_rmsnorm's block sum in its order
 * (the same scale), normalized as it does into shared memory, then a thread per pair rotates it as
 * k_rope_kv does and stores both values (k's into the K pool too); a k head's block also stores
 * that head's v row. The same bits as rmsnorm, rmsnorm, rope_kv. pos_slots: as k_rope_kv's. */
enum { QKN_MAX_HD = 2 * SOL_CUDA_ROPE_MAX_PAIRS };
static __global__ void k_qk_norm_rope_kv(float *q, float *k, const float *v,
                                         const int32_t *pos_slots, int n, int heads, int kv_heads,
                                         int head_dim, sol_cuda_rope_args p, const float *q_norm,
                                         const float *k_norm, float eps, unsigned char *k_pool,
                                         unsigned char *v_pool, int f16) {
    sol_grid_dependency();
    SOL_SHARED(float, scratch, [32]);
    SOL_SHARED(float, nv, [QKN_MAX_HD]);
    int t = (int)blockIdx.x / (heads + kv_heads), h = (int)blockIdx.x % (heads + kv_heads);
    bool is_k = h >= heads;
    int kh = h - heads, row = kv_heads * head_dim;
    float *x =
        is_k ? k + (size_t)t * row + (size_t)kh * head_dim : q + ((size_t)t * heads + h) * head_dim;
    const float *w = is_k ? k_norm : q_norm;
    float scale = sol_rmsnorm_scale(x, head_dim, eps, scratch);
    for (int i = (int)threadIdx.x; i < head_dim; i += (int)blockDim.x)
        nv[i] = x[i] * scale * w[i];
    __syncthreads(); /* the head is normalized whole before a pair reads its partner */
    size_t dst = (size_t)pos_slots[n + t] * row + (size_t)(is_k ? kh : 0) * head_dim;
    for (int i = (int)threadIdx.x; i < head_dim / 2; i += (int)blockDim.x) {
        int o0, o1;
        float c, sn, y0, y1;
        rope_cs(pos_slots[t], i, p, &c, &sn);
        rope_offsets(p, i, head_dim, &o0, &o1);
        rope_apply(nv[o0], nv[o1], c, sn, &y0, &y1);
        x[o0] = y0, x[o1] = y1;
        if (is_k) kv_put(k_pool, f16, dst + o0, y0), kv_put(k_pool, f16, dst + o1, y1);
    }
    if (is_k)
        for (int i = (int)threadIdx.x; i < head_dim; i += (int)blockDim.x)
            kv_put(v_pool, f16, dst + i, v[(size_t)t * row + (size_t)kh * head_dim + i]);
}

extern "C" void SOL_CUDA_FN(qk_norm_rope_kv)(float *q, float *k, const float *v,
                                             const int32_t *pos_slots, int n, int heads,
                                             int kv_heads, int head_dim, sol_cuda_rope_args p,
                                             const float *q_norm, const float *k_norm, float eps,
                                             void *k_pool, void *v_pool, int f16, void *stream) {
    if (n > 0)
        SOL_LAUNCH(k_qk_norm_rope_kv, dim3((unsigned)(n * (heads + kv_heads))),
                   dim3(SOL_CUDA_NORM_THREADS), 0, stream, q, k, v, pos_slots, n, heads, kv_heads,
                   head_dim, p, q_norm, k_norm, eps, (unsigned char *)k_pool,
                   (unsigned char *)v_pool, f16);
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
