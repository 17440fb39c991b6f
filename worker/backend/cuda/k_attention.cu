/* k_attention: paged attention for decode and verify. A block of ATT_WARPS warps per (token,
 * query head); warp w takes positions lo + w, lo + w + ATT_WARPS, ... with its lanes across the
 * head dimension (head_dim / 32 elements each), keeping an online softmax (running max m, sum l,
 * weighted V); the warps' states are then merged through shared memory. Split along the context
 * across blocks (flash-decoding) comes with long-context tuning. */
#include "cuda_kernels.h"
#include "half_bits.cuh"
#include "reduce.cuh"

enum { ATT_WARPS = 4, ATT_MAX_PER_LANE = 8 /* head_dim <= 256 */ };

__device__ __forceinline__ float kv_elem(const unsigned char *pool, int f16, size_t i) {
    if (f16) {
        uint16_t h;
        memcpy(&h, pool + 2 * i, 2);
        return sol_f16_to_f32(h);
    }
    float f;
    memcpy(&f, pool + 4 * i, 4);
    return f;
}

static __global__ void k_paged_attention(const unsigned char *k_pool, const unsigned char *v_pool,
                                         int f16, int block_size, const float *q, float *out,
                                         int heads, int kv_heads, int head_dim, float scale,
                                         int window, const int32_t *tables, int table_stride,
                                         const int32_t *n_ctx) {
    __shared__ float s_m[ATT_WARPS], s_l[ATT_WARPS], s_acc[ATT_WARPS][256];
    int t = (int)blockIdx.x / heads, h = (int)blockIdx.x % heads;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, per = (head_dim + 31) / 32;
    int kvh = h / (heads / kv_heads), ctx = n_ctx[t];
    int lo = window > 0 && ctx > window ? ctx - window : 0;
    size_t row = (size_t)kv_heads * head_dim;
    const int32_t *table = tables + (size_t)t * table_stride;
    const float *qh = q + ((size_t)t * heads + h) * head_dim;
    float qv[ATT_MAX_PER_LANE], acc[ATT_MAX_PER_LANE], m = -INFINITY, l = 0.0f;
    for (int j = 0; j < per; j++) { /* lanes past head_dim hold zeros */
        int i = lane + 32 * j;
        qv[j] = i < head_dim ? qh[i] : 0.0f;
        acc[j] = 0.0f;
    }
    for (int p = lo + warp; p < ctx; p += ATT_WARPS) {
        size_t base = ((size_t)table[p / block_size] * block_size + p % block_size) * row +
                      (size_t)kvh * head_dim;
        float d = 0.0f;
        for (int j = 0; j < per; j++)
            if (lane + 32 * j < head_dim)
                d = fmaf(qv[j], kv_elem(k_pool, f16, base + lane + 32 * j), d);
        float s = sol_warp_sum(d) * scale, mn = fmaxf(m, s);
        float c = expf(m - mn), e = expf(s - mn); /* c = 0 on the first position: m = -inf */
        l = l * c + e;
        for (int j = 0; j < per; j++)
            if (lane + 32 * j < head_dim)
                acc[j] = acc[j] * c + e * kv_elem(v_pool, f16, base + lane + 32 * j);
        m = mn;
    }
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
    for (int j = 0; j < per; j++)
        if (lane + 32 * j < head_dim) s_acc[warp][lane + 32 * j] = acc[j];
    __syncthreads();
    if (warp != 0) return;
    float M = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++)
        M = fmaxf(M, s_m[w]);
    float L = 0.0f;
    for (int w = 0; w < ATT_WARPS; w++)
        if (s_l[w] > 0.0f) L += s_l[w] * expf(s_m[w] - M);
    float *o = out + ((size_t)t * heads + h) * head_dim;
    for (int j = 0; j < per && lane + 32 * j < head_dim; j++) {
        float a = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++)
            if (s_l[w] > 0.0f) a += s_acc[w][lane + 32 * j] * expf(s_m[w] - M);
        o[lane + 32 * j] = a / L;
    }
}

extern "C" void SOL_CUDA_FN(paged_attention)(const void *k_pool, const void *v_pool, int f16,
                                             int block_size, const float *q, float *out, int n,
                                             int heads, int kv_heads, int head_dim, float scale,
                                             int window, const int32_t *tables, int table_stride,
                                             const int32_t *n_ctx, void *stream) {
    if (n > 0)
        SOL_LAUNCH(k_paged_attention, dim3((unsigned)(n * heads)), dim3(32 * ATT_WARPS), 0,
                   (cudaStream_t)stream, (const unsigned char *)k_pool,
                   (const unsigned char *)v_pool, f16, block_size, q, out, heads, kv_heads,
                   head_dim, scale, window, tables, table_stride, n_ctx);
}
