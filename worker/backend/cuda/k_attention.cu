/* k_attention: paged attention. A block of ATT_WARPS warps per (token, query head, context
 * split); warp w takes positions p0 + w, p0 + w + ATT_WARPS, ... of its split with its lanes
 * across the head dimension (head_dim / 32 elements each), keeping an online softmax (running
 * max m, sum l, weighted V); the warps' states are merged through shared memory.
 *
 * Long contexts are split across blocks, as flash-decoding does: a token whose window holds
 * more than ATT_SPLIT_MIN positions gets sol_att_splits(len) blocks per head, each writing its
 * (m, l, unnormalised V sum) to a workspace that k_attention_combine merges. The split count
 * depends on the token's own context only, and one split gives the unsplit kernel's bits, so a
 * token's output never depends on the batch around it. */
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

/* Splits for a window of len positions: 1 up to ATT_SPLIT_MIN, then one per ATT_SPLIT_MIN
 * positions, at most SOL_CUDA_ATT_MAX_SPLITS. */
__host__ __device__ __forceinline__ int sol_att_splits(int len) {
    int s = (len + SOL_CUDA_ATT_SPLIT_MIN - 1) / SOL_CUDA_ATT_SPLIT_MIN;
    return s < 1 ? 1 : s > SOL_CUDA_ATT_MAX_SPLITS ? SOL_CUDA_ATT_MAX_SPLITS : s;
}

/* SPLIT = false: out = softmax(...) V over the whole window. SPLIT = true: blockIdx.y is the
 * split; it writes (m, l, sum) of its positions to ws (SOL_CUDA_ATT_MAX_SPLITS slots of
 * head_dim + 2 floats per (token, head)). */
template <bool SPLIT>
static __global__ void k_paged_attention(const unsigned char *k_pool, const unsigned char *v_pool,
                                         int f16, int block_size, const float *q, float *out,
                                         int heads, int kv_heads, int head_dim, float scale,
                                         int window, const int32_t *tables, int table_stride,
                                         const int32_t *n_ctx, float *ws) {
    __shared__ float s_m[ATT_WARPS], s_l[ATT_WARPS], s_acc[ATT_WARPS][256];
    int t = (int)blockIdx.x / heads, h = (int)blockIdx.x % heads;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, per = (head_dim + 31) / 32;
    int kvh = h / (heads / kv_heads), ctx = n_ctx[t];
    int lo = window > 0 && ctx > window ? ctx - window : 0, p0 = lo, p1 = ctx;
    if (SPLIT) {
        int splits = sol_att_splits(ctx - lo), chunk = (ctx - lo + splits - 1) / splits;
        if ((int)blockIdx.y >= splits) return; /* whole block: no barrier is skipped */
        p0 = lo + (int)blockIdx.y * chunk;
        p1 = p0 + chunk < ctx ? p0 + chunk : ctx;
    }
    size_t row = (size_t)kv_heads * head_dim;
    const int32_t *table = tables + (size_t)t * table_stride;
    const float *qh = q + ((size_t)t * heads + h) * head_dim;
    float qv[ATT_MAX_PER_LANE], acc[ATT_MAX_PER_LANE], m = -INFINITY, l = 0.0f;
    for (int j = 0; j < per; j++) { /* lanes past head_dim hold zeros */
        int i = lane + 32 * j;
        qv[j] = i < head_dim ? qh[i] : 0.0f;
        acc[j] = 0.0f;
    }
    for (int p = p0 + warp; p < p1; p += ATT_WARPS) {
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
    float *o = SPLIT ? ws + (((size_t)t * heads + h) * SOL_CUDA_ATT_MAX_SPLITS + blockIdx.y) *
                                (size_t)(head_dim + 2)
                     : out + ((size_t)t * heads + h) * head_dim;
    for (int j = 0; j < per && lane + 32 * j < head_dim; j++) {
        float a = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++)
            if (s_l[w] > 0.0f) a += s_acc[w][lane + 32 * j] * expf(s_m[w] - M);
        o[lane + 32 * j] = SPLIT ? a : a / L;
    }
    if (SPLIT && lane == 0) {
        o[head_dim] = M;
        o[head_dim + 1] = L;
    }
}

/* One warp per (token, head): the splits' states merged as the warps' are above (for one split
 * that is the unsplit kernel's a / L, bit for bit). */
static __global__ void k_attention_combine(const float *ws, float *out, int heads, int head_dim,
                                           int window, const int32_t *n_ctx) {
    int t = (int)blockIdx.x / heads, h = (int)blockIdx.x % heads, lane = threadIdx.x;
    int ctx = n_ctx[t], lo = window > 0 && ctx > window ? ctx - window : 0;
    int splits = sol_att_splits(ctx - lo);
    const float *base = ws + ((size_t)t * heads + h) * SOL_CUDA_ATT_MAX_SPLITS * (head_dim + 2);
    float M = -INFINITY, L = 0.0f;
    for (int s = 0; s < splits; s++)
        M = fmaxf(M, base[(size_t)s * (head_dim + 2) + head_dim]);
    for (int s = 0; s < splits; s++) {
        float l = base[(size_t)s * (head_dim + 2) + head_dim + 1];
        if (l > 0.0f) L += l * expf(base[(size_t)s * (head_dim + 2) + head_dim] - M);
    }
    float *o = out + ((size_t)t * heads + h) * head_dim;
    for (int i = lane; i < head_dim; i += 32) {
        float a = 0.0f;
        for (int s = 0; s < splits; s++) {
            const float *st = base + (size_t)s * (head_dim + 2);
            if (st[head_dim + 1] > 0.0f) a += st[i] * expf(st[head_dim] - M);
        }
        o[i] = a / L;
    }
}

extern "C" size_t SOL_CUDA_FN(attention_ws_floats)(int n, int heads, int head_dim) {
    return (size_t)n * heads * SOL_CUDA_ATT_MAX_SPLITS * (size_t)(head_dim + 2);
}

extern "C" void SOL_CUDA_FN(paged_attention)(const void *k_pool, const void *v_pool, int f16,
                                             int block_size, const float *q, float *out, int n,
                                             int heads, int kv_heads, int head_dim, float scale,
                                             int window, const int32_t *tables, int table_stride,
                                             const int32_t *n_ctx, int max_len, float *ws,
                                             void *stream) {
    if (n <= 0) return;
    const unsigned char *kp = (const unsigned char *)k_pool, *vp = (const unsigned char *)v_pool;
    int splits = sol_att_splits(max_len);
    if (splits == 1 || !ws) {
        SOL_LAUNCH(k_paged_attention<false>, dim3((unsigned)(n * heads)), dim3(32 * ATT_WARPS), 0,
                   (cudaStream_t)stream, kp, vp, f16, block_size, q, out, heads, kv_heads, head_dim,
                   scale, window, tables, table_stride, n_ctx, ws);
        return;
    }
    SOL_LAUNCH(k_paged_attention<true>, dim3((unsigned)(n * heads), (unsigned)splits),
               dim3(32 * ATT_WARPS), 0, (cudaStream_t)stream, kp, vp, f16, block_size, q, out,
               heads, kv_heads, head_dim, scale, window, tables, table_stride, n_ctx, ws);
    SOL_LAUNCH(k_attention_combine, dim3((unsigned)(n * heads)), dim3(32), 0, (cudaStream_t)stream,
               ws, out, heads, head_dim, window, n_ctx);
}
