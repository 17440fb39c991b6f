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

/* A block per (tile of up to QT queries that share a block table, head[, split]). The tile's
 * warps walk the union of its queries' ranges once, each K/V row loaded once for all of them
 * (prefill chunks: QT = 4). Each query sees exactly the positions, in the order, that a block of
 * its own would give it: warp w holds its positions p with (p - p0_q) % 4 == (w - d_q) % 4, d_q
 * the query's offset from the tile's start, and the merge reads the warps in that rotated order.
 * So a token's bits never depend on its tile (PER: head_dim / 32 elements per lane, at most).
 * SPLIT = false: out = softmax(...) V over the window. SPLIT = true: blockIdx.y is the split; it
 * writes (m, l, sum) of its positions to ws (SOL_CUDA_ATT_MAX_SPLITS slots of head_dim + 2 floats
 * per (token - t_base, head)). tiles: QT = 1 with NULL (tile i = token t_base + i), else token
 * starts of the tiles, one more entry than tiles. */
template <bool SPLIT, int QT, int PER>
static __global__ void
k_paged_attention(const unsigned char *k_pool, const unsigned char *v_pool, int f16, int block_size,
                  const float *q, float *out, const int32_t *tiles, int t_base, int heads,
                  int kv_heads, int head_dim, float scale, int window, const int32_t *tables,
                  int table_stride, const int32_t *n_ctx, float *ws) {
    SOL_SHARED(float, s_m, [ATT_WARPS][QT]);
    SOL_SHARED(float, s_l, [ATT_WARPS][QT]);
    SOL_SHARED(float, s_acc, [ATT_WARPS][QT][32 * PER]);
    int tile = (int)blockIdx.x / heads, h = (int)blockIdx.x % heads;
    int first = tiles ? tiles[tile] : t_base + tile, cnt = tiles ? tiles[tile + 1] - first : 1;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, per = (head_dim + 31) / 32;
    int kvh = h / (heads / kv_heads), P0 = 1 << 30, P1 = 0;
    int p0[QT], p1[QT];
    for (int i = 0; i < QT; i++) {
        int ctx = i < cnt ? n_ctx[first + i] : 0,
            lo = window > 0 && ctx > window ? ctx - window : 0;
        p0[i] = lo, p1[i] = ctx;
        if (SPLIT && i < cnt) {
            int splits = sol_att_splits(ctx - lo), chunk = (ctx - lo + splits - 1) / splits;
            p0[i] = (int)blockIdx.y < splits ? lo + (int)blockIdx.y * chunk : ctx;
            p1[i] = p0[i] + chunk < ctx ? p0[i] + chunk : ctx;
        }
        if (p0[i] < p1[i]) P0 = p0[i] < P0 ? p0[i] : P0, P1 = p1[i] > P1 ? p1[i] : P1;
    }
    if (P1 == 0) return; /* no query of the tile has positions in this split: the whole block */
    size_t row = (size_t)kv_heads * head_dim;
    const int32_t *table = tables + (size_t)first * table_stride;
    float qv[QT][PER], acc[QT][PER], m[QT], l[QT];
    for (int i = 0; i < QT; i++) {
        const float *qh = q + ((size_t)(first + (i < cnt ? i : 0)) * heads + h) * head_dim;
        m[i] = -INFINITY, l[i] = 0.0f;
        for (int j = 0; j < PER; j++) { /* lanes past head_dim hold zeros */
            int e = lane + 32 * j;
            qv[i][j] = j < per && e < head_dim ? qh[e] : 0.0f;
            acc[i][j] = 0.0f;
        }
    }
    for (int p = P0 + warp; p < P1; p += ATT_WARPS) {
        size_t base = ((size_t)table[p / block_size] * block_size + p % block_size) * row +
                      (size_t)kvh * head_dim;
        float kx[PER], vx[PER];
        for (int j = 0; j < PER; j++) {
            int e = lane + 32 * j, ok = j < per && e < head_dim;
            kx[j] = ok ? kv_elem(k_pool, f16, base + e) : 0.0f;
            vx[j] = ok ? kv_elem(v_pool, f16, base + e) : 0.0f;
        }
        for (int i = 0; i < QT; i++) {
            if (p < p0[i] || p >= p1[i]) continue; /* the same for the whole warp */
            float d = 0.0f;
            for (int j = 0; j < PER; j++)
                if (j < per && lane + 32 * j < head_dim) d = fmaf(qv[i][j], kx[j], d);
            float sc = sol_warp_sum(d) * scale, mn = fmaxf(m[i], sc);
            float c = expf(m[i] - mn), e = expf(sc - mn); /* c = 0 first: m = -inf */
            l[i] = l[i] * c + e;
            for (int j = 0; j < PER; j++)
                if (j < per && lane + 32 * j < head_dim) acc[i][j] = acc[i][j] * c + e * vx[j];
            m[i] = mn;
        }
    }
    for (int i = 0; i < QT; i++) {
        if (lane == 0) {
            s_m[warp][i] = m[i];
            s_l[warp][i] = l[i];
        }
        for (int j = 0; j < PER; j++)
            if (j < per && lane + 32 * j < head_dim) s_acc[warp][i][lane + 32 * j] = acc[i][j];
    }
    __syncthreads();
    if (warp != 0) return;
    for (int i = 0; i < cnt; i++) {
        if (SPLIT && p0[i] >= p1[i]) continue; /* this split is past the query's window */
        int rot = (p0[i] - P0) & (ATT_WARPS - 1), t = first + i;
        float M = -INFINITY;
        for (int w = 0; w < ATT_WARPS; w++)
            M = fmaxf(M, s_m[(w + rot) & (ATT_WARPS - 1)][i]);
        float L = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) {
            int x = (w + rot) & (ATT_WARPS - 1);
            if (s_l[x][i] > 0.0f) L += s_l[x][i] * expf(s_m[x][i] - M);
        }
        float *o =
            SPLIT
                ? ws + (((size_t)(t - t_base) * heads + h) * SOL_CUDA_ATT_MAX_SPLITS + blockIdx.y) *
                           (size_t)(head_dim + 2)
                : out + ((size_t)t * heads + h) * head_dim;
        for (int j = 0; j < per && lane + 32 * j < head_dim; j++) {
            float a = 0.0f;
            for (int w = 0; w < ATT_WARPS; w++) {
                int x = (w + rot) & (ATT_WARPS - 1);
                if (s_l[x][i] > 0.0f) a += s_acc[x][i][lane + 32 * j] * expf(s_m[x][i] - M);
            }
            o[lane + 32 * j] = SPLIT ? a : a / L;
        }
        if (SPLIT && lane == 0) {
            o[head_dim] = M;
            o[head_dim + 1] = L;
        }
    }
}

/* One warp per (token, head): the splits' states merged as the warps' are above (for one split
 * that is the unsplit kernel's a / L, bit for bit). */
static __global__ void k_attention_combine(const float *ws, float *out, int heads, int head_dim,
                                           int window, const int32_t *n_ctx) {
    /* t counts from the group's first token: out and n_ctx are passed offset to it */
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

#define ATT_KERNEL(split, qt, per) k_paged_attention<split, qt, per>

extern "C" void SOL_CUDA_FN(paged_attention)(const void *k_pool, const void *v_pool, int f16,
                                             int block_size, const float *q, float *out,
                                             int n_tiles, const int32_t *tiles, int t_base, int n,
                                             int heads, int kv_heads, int head_dim, float scale,
                                             int window, const int32_t *tables, int table_stride,
                                             const int32_t *n_ctx, int max_len, float *ws,
                                             void *stream) {
    if (n <= 0 || n_tiles <= 0) return;
    const unsigned char *kp = (const unsigned char *)k_pool, *vp = (const unsigned char *)v_pool;
    int splits = ws ? sol_att_splits(max_len) : 1, quad = tiles && head_dim <= 128;
    dim3 grid((unsigned)((quad ? n_tiles : n) * heads), (unsigned)splits), block(32 * ATT_WARPS);
    cudaStream_t st = (cudaStream_t)stream;
    if (splits == 1 && quad)
        SOL_LAUNCH(ATT_KERNEL(false, 4, 4), grid, block, 0, st, kp, vp, f16, block_size, q, out,
                   tiles, t_base, heads, kv_heads, head_dim, scale, window, tables, table_stride,
                   n_ctx, ws);
    else if (splits == 1)
        SOL_LAUNCH(ATT_KERNEL(false, 1, 8), grid, block, 0, st, kp, vp, f16, block_size, q, out,
                   (const int32_t *)nullptr, t_base, heads, kv_heads, head_dim, scale, window,
                   tables, table_stride, n_ctx, ws);
    else if (quad)
        SOL_LAUNCH(ATT_KERNEL(true, 4, 4), grid, block, 0, st, kp, vp, f16, block_size, q, out,
                   tiles, t_base, heads, kv_heads, head_dim, scale, window, tables, table_stride,
                   n_ctx, ws);
    else
        SOL_LAUNCH(ATT_KERNEL(true, 1, 8), grid, block, 0, st, kp, vp, f16, block_size, q, out,
                   (const int32_t *)nullptr, t_base, heads, kv_heads, head_dim, scale, window,
                   tables, table_stride, n_ctx, ws);
    if (splits > 1)
        SOL_LAUNCH(k_attention_combine, dim3((unsigned)(n * heads)), dim3(32), 0, st, ws,
                   out + (size_t)t_base * heads * head_dim, heads, head_dim, window,
                   n_ctx + t_base);
}
