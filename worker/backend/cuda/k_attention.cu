/* k_attention: paged decode/verify attention, written for bandwidth: each K/V row is read once per
 * block with vector loads, several rows per warp in flight, and shared by every query head of its
 * KV head (GQA) and, for prefill chunks, by up to four consecutive tokens.
 *
 * Layout. A block of ATT_WARPS warps per (token or tile of tokens, KV head, slice of its query
 * heads[, context split]). Its NQ "queries" are (token, query head) pairs; they all read the same
 * K/V rows. A warp reads R whole rows per iteration (R consecutive positions, an "R-group"): lane l
 * owns the E contiguous elements [E l, E l + E) of every row (E = 2, 4, 8 for head_dim <= 64, 128,
 * 256), one 16-byte load for 8 halves or 4 floats, 8 bytes for 4 halves, ... (unaligned caches:
 * 32-bit words), so 2R independent K/V loads are in flight per lane before the first is used,
 * and the block table entries of the next R-group are fetched while this one computes.
 *
 * Scores. Each lane holds NQ x R partial dot products. Reducing them one by one would take 5
 * shuffles each (NQ R = 16 of them: 80 shuffles per R-group, and every lane would then run the
 * softmax's exponentials for all 16 scores). Instead a transposing butterfly (att_tsum) halves
 * the set at each step, sending one half to the partner and keeping the other: 8 + 4 + 2 + 1 + 1
 * shuffles for 16 scores, after which lane l holds the full sum of score l >> (5 - log2(NQ R)),
 * computed by the same tree (offsets 16, 8, .., 1) as the plain butterfly, so its bits do not
 * depend on NQ. The online softmax then runs with one score per lane (one exp per lane for the
 * whole R-group), per query over its R rows (a max and a sum over two lane bits), and the R row
 * weights and the query's rescale factor are broadcast for the P.V update (NQ (R + 1) shuffles).
 * Estimated per position for head_dim 128 in F16 with NQ = 4: ~90 warp instructions (~22 issue
 * clocks of an SM) against ~28 clocks of an SM's share of HBM time on an H200: memory bound.
 * NQ is at most 4 (2 at E = 8): q and the V sums live in registers, within the 128-register
 * budget (att_max_nq); a larger group takes several blocks, the later ones reading from L2.
 *
 * Order and batch invariance. Positions are assigned to warps by absolute R-group: group
 * g = p / R goes to warp g mod ATT_WARPS, walked in increasing order, and each warp keeps an
 * online softmax (max m, sum l, unnormalised V sum) per query; the merge reads the warps in
 * order 0..3. A query's positions outside its own window (a tile walks the union of its tokens'
 * windows) score -inf: a group with none of its positions is skipped, and a row it does not own
 * never reaches its sums (a zero weight skips the update), so its bits are those of the token
 * alone, whatever its tile, head slice or NQ. Nothing else depends on the batch either.
 *
 * Long contexts are split across blocks, as flash-decoding does: a token's window of len
 * positions gets att_splits(len) blocks per head slice, each writing its (m, l, unnormalised V
 * sum) to a workspace, and the last split of a (token, head) to finish merges them (att_split_end:
 * a counter per pair, no second launch); one split gives the unsplit kernel's bits.
 * The split count depends on the token's own window, the device's SM count and the model's
 * shape, never on the batch (SOL_CUDA_FN(attention_splits) below has the formula). */
#include "cuda_kernels.h"
#include "half_bits.cuh"
#include "q8.cuh"
#include "reduce.cuh"

enum {
    ATT_WARPS = 4,
    ATT_WAVES = 2, /* blocks per SM that the splits of one token aim for */
};

/* Queries per block at most: 4, and 2 with 8 elements per lane. Within sm_90's register budget
 * of 128 (tests/gpu/sass_check.py): q and the V sums take 2 NQ E registers, K and V in flight
 * 2 R E (halves: R E), the scores NQ R; NQ = 8 took 151 registers at E = 2. */
static inline int att_max_nq(int e) {
    return e == 8 ? 2 : 4;
}

/* Rows per warp iteration: 4, or 2 where 4 rows of K and V would not fit the registers (F32 with
 * 8 elements per lane: 64 words of K and V). Both depend on the cache and head_dim only. */
__host__ __device__ constexpr int att_rows(bool f16, int e) {
    return !f16 && e == 8 ? 2 : 4;
}

/* Elements per lane for a head_dim. */
static inline int att_elems(int head_dim) {
    return head_dim <= 64 ? 2 : head_dim <= 128 ? 4 : 8;
}

/* Splits for a window of len positions: enough blocks for ATT_WAVES per SM for one token
 * (target = ceil(ATT_WAVES x SMs / blocks per split), a launch constant), at least
 * SOL_CUDA_ATT_SPLIT_MIN positions each, at most SOL_CUDA_ATT_MAX_SPLITS. With
 * len >= SPLIT_MIN x splits and splits <= 32, no split is empty. */
__host__ __device__ __forceinline__ int att_splits(int len, int target) {
    int s = len / SOL_CUDA_ATT_SPLIT_MIN;
    s = s < target ? s : target;
    return s < 1 ? 1 : s > SOL_CUDA_ATT_MAX_SPLITS ? SOL_CUDA_ATT_MAX_SPLITS : s;
}

/* F16 bits to float: exact either way (the hardware conversion keeps subnormals). */
__device__ __forceinline__ float att_h2f(uint32_t h) {
#ifdef __CUDACC__
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
    return f;
#else
    return sol_f16_to_f32((uint16_t)h);
#endif
}

/* B bytes (4, 8 or 16, aligned) into words: typed loads, so nvcc emits one LDG of that width
 * (the cache is read-only during the kernel: the non-coherent path). */
template <int B> __device__ __forceinline__ void att_load(uint32_t *w, const unsigned char *p) {
#ifdef __CUDACC__
    if constexpr (B == 16) {
        uint4 v = __ldg((const uint4 *)p);
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    } else if constexpr (B == 8) {
        uint2 v = __ldg((const uint2 *)p);
        w[0] = v.x, w[1] = v.y;
    } else {
        w[0] = __ldg((const unsigned int *)p);
    }
#else
    memcpy(w, p, B);
#endif
}

/* One lane's E elements of a row (element offset x in the pool) as floats, 0 past head_dim (hd:
 * the lane's first element is E l). B >= 4: units of B bytes, aligned (the launcher checked).
 * B == 2 (F16 with unaligned rows, e.g. an odd head_dim): 32-bit words from the even element at
 * or before x, shifted by the row's parity; the last word may reach 2 bytes past the row, so
 * such pools need a few bytes of slack after their end (cuda_kv.c allocates 16). */
template <bool F16, int E, int B>
__device__ __forceinline__ void att_row(const unsigned char *pool, size_t x, int e0, int hd,
                                        float *out) {
    constexpr int ESZ = F16 ? 2 : 4;
    if constexpr (B == 2) {
        uint32_t w[E / 2 + 1];
        int odd = (int)(x & 1);
        const unsigned char *p = pool + (x - (size_t)odd) * 2;
        SOL_UNROLL
        for (int k = 0; k <= E / 2; k++) { /* word k: our elements 2k - odd and 2k - odd + 1 */
            int j = 2 * k - odd < 0 ? 0 : 2 * k - odd;
            w[k] = 0;
            if (j < E && e0 + j < hd) att_load<4>(&w[k], p + 4 * k);
        }
        SOL_UNROLL
        for (int j = 0; j < E; j++) {
            /* element j is half (j + odd) & 1 of word (j + odd) / 2 */
            uint32_t a = (j & 1) ? w[j / 2] >> 16 : w[j / 2] & 0xFFFFu;
            uint32_t b = (j & 1) ? w[(j + 1) / 2] & 0xFFFFu : w[j / 2] >> 16;
            out[j] = e0 + j < hd ? att_h2f(odd ? b : a) : 0.0f;
        }
    } else {
        constexpr int U = B / ESZ; /* elements per load */
        uint32_t w[E * ESZ / 4];
        SOL_UNROLL
        for (int u = 0; u < E / U; u++) {
            SOL_UNROLL
            for (int k = 0; k < B / 4; k++)
                w[u * (B / 4) + k] = 0;
            if (e0 + U * u < hd) att_load<B>(&w[u * (B / 4)], pool + (x + (size_t)(U * u)) * ESZ);
        }
        SOL_UNROLL
        for (int j = 0; j < E; j++)
            out[j] =
                F16 ? att_h2f((j & 1) ? w[j / 2] >> 16 : w[j / 2] & 0xFFFFu) : sol_bits_f32(w[j]);
    }
}

/* The transposing butterfly over N values per lane with offsets O, O/2, .., 1: afterwards
 * d[0] of lane l holds the warp's sum of value (l >> log2(32 / N)) (see the file comment). */
template <int N, int O> __device__ __forceinline__ void att_tsum(float *d, int lane) {
    if constexpr (N > 1) {
        bool up = (lane & O) != 0;
        SOL_UNROLL
        for (int j = 0; j < N / 2; j++) {
            float send = up ? d[j] : d[j + N / 2], keep = up ? d[j + N / 2] : d[j];
            d[j] = keep + __shfl_xor_sync(0xffffffffu, send, O);
        }
        att_tsum<N / 2, O / 2>(d, lane);
    } else if constexpr (O > 0) {
        d[0] += __shfl_xor_sync(0xffffffffu, d[0], O);
        att_tsum<1, O / 2>(d, lane);
    }
}

/* The splits' states of one (token, head) merged by one warp, as the warps' are above (for one
 * split that is the unsplit kernel's a / L, bit for bit). base: the pair's first split slot
 * (splits slots of head_dim + 2 floats), read through L2 (__ldcg: other SMs wrote them in this
 * launch). xq (head_dim a multiple of 32): the output is also quantized to Q8_0 (blocks counted
 * from `qrow` elements in), as k_quantize_q8_0 would quantize out, for the o projection's GEMV,
 * which then needs no quantize launch of its own. */
__device__ __forceinline__ void att_merge(const float *base, int splits, int head_dim, float *o,
                                          size_t qrow, int lane, int8_t *xq, float *xd, int32_t *xs,
                                          const float *sink) {
    float M = -INFINITY, L = 0.0f;
    for (int s = 0; s < splits; s++)
        M = fmaxf(M, __ldcg(base + (size_t)s * (head_dim + 2) + head_dim));
    if (sink) M = fmaxf(M, *sink); /* the sink joins the max and the sum, with no value */
    for (int s = 0; s < splits; s++) {
        float l = __ldcg(base + (size_t)s * (head_dim + 2) + head_dim + 1);
        if (l > 0.0f) L += l * expf(__ldcg(base + (size_t)s * (head_dim + 2) + head_dim) - M);
    }
    if (sink) L += expf(*sink - M);
    for (int i = lane; i < head_dim; i += 32) {
        float a = 0.0f;
        for (int s = 0; s < splits; s++) {
            const float *st = base + (size_t)s * (head_dim + 2);
            float ls = __ldcg(st + head_dim + 1);
            if (ls > 0.0f) a += __ldcg(st + i) * expf(__ldcg(st + head_dim) - M);
        }
        float r = a / L;
        o[i] = r;
        if (xq) /* whole warps: head_dim is a multiple of 32, so every lane is here */
            q8_0_block(r, (int)((qrow + i) / 32), lane, xq, xd, xs);
    }
}

/* Q8_K activations for the o projection (K-quant weights): a 256-element block spans 256 /
 * head_dim heads (Llama's 128: two), so the warp that merges the last of them quantizes the
 * block (bcnt: a zeroed int per block of the call's rows, left zeroed), as k_quantize_q8_k would:
 * its lanes read the block's outputs through L2 (other warps wrote them) 8 each. */
__device__ __forceinline__ void att_q8k_end(int *bcnt, int head_dim, const float *o, size_t qrow,
                                            int lane, int8_t *kq, float *kd, int16_t *ks) {
    int blk = (int)(qrow / 256);
    if (!sol_last_of(bcnt + blk, 32 * (256 / head_dim), lane)) return;
    const float *b = o - qrow % 256;
    float xb[8];
    for (int j = 0; j < 8; j++)
        xb[j] = __ldcg(b + lane * 8 + j);
    q8_k_block(xb, blk, lane, kq, kd, ks);
}

/* bcnt NULL: xq/xd/xs take Q8_0 blocks in the merge; else Q8_K blocks (att_q8k_end). */
__device__ __forceinline__ void att_split_end(int *cnt, int splits, const float *pair_ws,
                                              int head_dim, float *o, size_t qrow, int lane,
                                              int8_t *xq, float *xd, void *xs, int *bcnt,
                                              const float *sink) {
    if (!sol_last_of(cnt, 32 * splits, lane)) return;
    att_merge(pair_ws, splits, head_dim, o, qrow, lane, bcnt ? nullptr : xq, xd, (int32_t *)xs,
              sink);
    if (bcnt && xq) att_q8k_end(bcnt, head_dim, o, qrow, lane, xq, xd, (int16_t *)xs);
}

/* A block per (unit, KV head, slice of hs query heads[, split]); unit = a tile of up to
 * NQ / hs tokens that share a block table (tiles[unit] .. tiles[unit + 1]) or, tiles NULL, the
 * token t_base + unit with hs <= NQ. Query slot i is token i / hs of the unit, head
 * kvh (heads / kv_heads) + slice hs + i % hs. ws NULL: out = softmax(...) V over the window;
 * else blockIdx.y is the split, and (unnormalised sum, m, l) go to ws (gridDim.y slots of
 * head_dim + 2 floats per (token - t_base, head)), and the last split to finish a (token, head)
 * merges it into out (att_split_end; counters: a zeroed int per (token - t_base, head), left
 * zeroed; xq, xd, xs: NULL, or out's Q8_0 blocks from row t_base). split_target: see att_splits.
 * sinks: NULL, or one logit per query head that joins the final softmax (with no value) where
 * the warps' states, or the splits', are merged. */
template <bool F16, int E, int B, int NQ>
static __global__ void
k_paged_attention(const unsigned char *k_pool, const unsigned char *v_pool, int block_size,
                  const float *q, float *out, const int32_t *tiles, int t_base, int heads,
                  int kv_heads, int head_dim, int hs, int slices, float scale, int window,
                  const int32_t *tables, int table_stride, const int32_t *n_ctx, float *ws,
                  int split_target, int *counters, int8_t *xq, float *xd, void *xs, int *bcnt,
                  const float *sinks) {
    sol_grid_dependency();
    constexpr int R = att_rows(F16, E), V = NQ * R;
    constexpr int SH = V == 32 ? 0 : V == 16 ? 1 : V == 8 ? 2 : V == 4 ? 3 : 4; /* 5 - log2 V */
    constexpr int LR = R == 4 ? 2 : 1;                                          /* log2 R */
    static_assert(V <= 32 && (V & (V - 1)) == 0, "NQ x R must be a power of two <= 32");
    SOL_SHARED(float, s_m, [ATT_WARPS][NQ]);
    SOL_SHARED(float, s_l, [ATT_WARPS][NQ]);
    SOL_SHARED(float, s_acc, [ATT_WARPS][NQ][32 * E]);
    int bx = (int)blockIdx.x, slice = bx % slices;
    bx /= slices;
    int kvh = bx % kv_heads, unit = bx / kv_heads;
    int first = tiles ? tiles[unit] : t_base + unit, cnt = tiles ? tiles[unit + 1] - first : 1;
    int group = heads / kv_heads, h0 = kvh * group + slice * hs;
    int h_cnt = group - slice * hs < hs ? group - slice * hs : hs;
    int warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31, e0 = E * lane;
    int p0[NQ], p1[NQ], P0 = 1 << 30, P1 = 0;
    SOL_UNROLL
    for (int i = 0; i < NQ; i++) {
        int ti = i / hs, hh = i - ti * hs;
        int ctx = ti < cnt && hh < h_cnt ? n_ctx[first + ti] : 0;
        int lo = window > 0 && ctx > window ? ctx - window : 0;
        p0[i] = lo, p1[i] = ctx;
        if (ws && ctx > 0) {
            int splits = att_splits(ctx - lo, split_target);
            int chunk = (ctx - lo + splits - 1) / splits;
            p0[i] = (int)blockIdx.y < splits ? lo + (int)blockIdx.y * chunk : ctx;
            p1[i] = p0[i] + chunk < ctx ? p0[i] + chunk : ctx;
        }
        if (p0[i] < p1[i]) P0 = p0[i] < P0 ? p0[i] : P0, P1 = p1[i] > P1 ? p1[i] : P1;
    }
    if (P1 == 0) return; /* no query of the block has positions in this split: the whole block */
    /* The score this lane ends up with (att_tsum): query my_i, row my_r of the R-group. */
    int my_v = lane >> SH, my_i = my_v >> LR, my_r = my_v & (R - 1), my_p0 = 0, my_p1 = 0;
    SOL_UNROLL
    for (int i = 0; i < NQ; i++)
        if (i == my_i) my_p0 = p0[i], my_p1 = p1[i];
    float qv[NQ][E], acc[NQ][E], m = -INFINITY, l = 0.0f;
    SOL_UNROLL
    for (int i = 0; i < NQ; i++) {
        int ti = i / hs, hh = i - ti * hs;
        bool act = p0[i] < p1[i];
        const float *qh = q + ((size_t)(first + ti) * heads + h0 + hh) * head_dim;
        SOL_UNROLL
        for (int e = 0; e < E; e++) { /* lanes past head_dim hold zeros */
            qv[i][e] = act && e0 + e < head_dim ? qh[e0 + e] : 0.0f;
            acc[i][e] = 0.0f;
        }
    }
    size_t slot_elems = (size_t)kv_heads * head_dim, col = (size_t)kvh * head_dim + (size_t)e0;
    const int32_t *table = tables + (size_t)first * table_stride;
    /* Block table entries (-1: row outside [P0, P1), not read) and in-block slots of the rows of
     * R-group g: one division per group. */
    int tb[R], sl[R];
    auto fetch = [&](int g) {
        int base = g * R, bi = base / block_size, s = base - bi * block_size;
        SOL_UNROLL
        for (int r = 0; r < R; r++) {
            tb[r] = base + r >= P0 && base + r < P1 ? table[bi] : -1;
            sl[r] = s;
            if (++s == block_size) s = 0, bi++;
        }
    };
    int g = ((P0 / R) & ~(ATT_WARPS - 1)) + warp;
    fetch(g);
    for (; g * R < P1; g += ATT_WARPS) {
        float kf[R][E], vf[R][E];
        SOL_UNROLL
        for (int r = 0; r < R; r++) {
            size_t x = ((size_t)(tb[r] < 0 ? 0 : tb[r]) * block_size + sl[r]) * slot_elems + col;
            int hd = tb[r] < 0 ? 0 : head_dim; /* a row not read: zeros */
            att_row<F16, E, B>(k_pool, x, e0, hd, kf[r]);
            att_row<F16, E, B>(v_pool, x, e0, hd, vf[r]);
        }
        fetch(g + ATT_WARPS); /* the next group's table entries load while this one computes */
        float d[V];
        SOL_UNROLL
        for (int i = 0; i < NQ; i++)
            SOL_UNROLL
        for (int r = 0; r < R; r++) {
            float x = 0.0f;
            SOL_UNROLL
            for (int e = 0; e < E; e++)
                x = fmaf(qv[i][e], kf[r][e], x);
            d[i * R + r] = x;
        }
        att_tsum<V, 16>(d, lane);
        int pos = g * R + my_r;
        float sc = pos >= my_p0 && pos < my_p1 ? d[0] * scale : -INFINITY;
        float mx = fmaxf(sc, __shfl_xor_sync(0xffffffffu, sc, 1 << SH));
        if constexpr (R == 4) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2 << SH));
        /* A query with no position in this group keeps its state: c = 1, p = 0. */
        bool any = mx > -INFINITY;
        float mn = fmaxf(m, mx), c = any ? expf(m - mn) : 1.0f, p = any ? expf(sc - mn) : 0.0f;
        float ps = p + __shfl_xor_sync(0xffffffffu, p, 1 << SH);
        if constexpr (R == 4) ps += __shfl_xor_sync(0xffffffffu, ps, 2 << SH);
        l = fmaf(l, c, ps);
        m = mn;
        SOL_UNROLL
        for (int i = 0; i < NQ; i++) {
            float ci = __shfl_sync(0xffffffffu, c, (i * R) << SH);
            SOL_UNROLL
            for (int e = 0; e < E; e++)
                acc[i][e] *= ci;
            SOL_UNROLL
            for (int r = 0; r < R; r++) {
                float pr = __shfl_sync(0xffffffffu, p, (i * R + r) << SH);
                if (pr != 0.0f) { /* the whole warp agrees: a row outside the query's window */
                    SOL_UNROLL
                    for (int e = 0; e < E; e++)
                        acc[i][e] = fmaf(pr, vf[r][e], acc[i][e]);
                }
            }
        }
    }
    SOL_UNROLL
    for (int i = 0; i < NQ; i++)
        SOL_UNROLL
    for (int e = 0; e < E; e++)
        s_acc[warp][i][e0 + e] = acc[i][e];
    if ((lane & ((1 << (SH + LR)) - 1)) == 0) { /* the first lane of query my_i's scores */
        s_m[warp][my_i] = m;
        s_l[warp][my_i] = l;
    }
    __syncthreads();
    SOL_UNROLL
    for (int i = 0; i < NQ; i++) {
        if (i % ATT_WARPS != warp || p0[i] >= p1[i]) continue; /* another warp's, or empty */
        int ti = i / hs, t = first + ti, h = h0 + (i - ti * hs);
        float M = -INFINITY, L = 0.0f, a[E], f[ATT_WARPS];
        SOL_UNROLL
        for (int w = 0; w < ATT_WARPS; w++)
            M = fmaxf(M, s_m[w][i]);
        bool sink = sinks && !ws; /* a split's state is plain; the merge adds the sink */
        if (sink) M = fmaxf(M, sinks[h]);
        SOL_UNROLL
        for (int w = 0; w < ATT_WARPS; w++) {
            f[w] = s_l[w][i] > 0.0f ? expf(s_m[w][i] - M) : 0.0f;
            if (s_l[w][i] > 0.0f) L += s_l[w][i] * f[w];
        }
        if (sink) L += expf(sinks[h] - M);
        SOL_UNROLL
        for (int e = 0; e < E; e++) {
            a[e] = 0.0f;
            SOL_UNROLL
            for (int w = 0; w < ATT_WARPS; w++)
                if (s_l[w][i] > 0.0f) a[e] += s_acc[w][i][e0 + e] * f[w];
        }
        float *o = ws ? ws + (((size_t)(t - t_base) * heads + h) * gridDim.y + blockIdx.y) *
                                 (size_t)(head_dim + 2)
                      : out + ((size_t)t * heads + h) * head_dim;
        SOL_UNROLL
        for (int e = 0; e < E; e++)
            if (e0 + e < head_dim) o[e0 + e] = ws ? a[e] : a[e] / L;
        if (ws && lane == 0) {
            o[head_dim] = M;
            o[head_dim + 1] = L;
        }
        if (ws) {
            int ctx = n_ctx[t], lo = window > 0 && ctx > window ? ctx - window : 0;
            size_t pair = (size_t)(t - t_base) * heads + h;
            att_split_end(counters + pair, att_splits(ctx - lo, split_target),
                          ws + pair * gridDim.y * (size_t)(head_dim + 2), head_dim,
                          out + ((size_t)t * heads + h) * head_dim, pair * head_dim, lane, xq, xd,
                          xs, bcnt, sinks ? sinks + h : nullptr);
        }
    }
}

/* Query heads per block for a decode token: all of a KV head's group up to att_max_nq, so the
 * group's K/V rows are read once, or by ceil(group / hs) blocks (the others from L2). */
static int att_heads_per_block(int heads, int kv_heads, int head_dim) {
    int group = heads / kv_heads, cap = att_max_nq(att_elems(head_dim));
    return group < cap ? group : cap;
}

/* The split target: blocks per split for one token = kv_heads x slices (model constants), and
 * ATT_WAVES blocks per SM wanted: target = ceil(ATT_WAVES sms / (kv_heads slices)). */
static int att_split_target(int sms, int heads, int kv_heads, int head_dim) {
    int hs = att_heads_per_block(heads, kv_heads, head_dim);
    int per_split = kv_heads * ((heads / kv_heads + hs - 1) / hs);
    int t = (ATT_WAVES * (sms > 0 ? sms : 1) + per_split - 1) / per_split;
    return t < 1 ? 1 : t;
}

extern "C" int SOL_CUDA_FN(attention_splits)(int len, int sms, int heads, int kv_heads,
                                             int head_dim) {
    return att_splits(len, att_split_target(sms, heads, kv_heads, head_dim));
}

extern "C" size_t SOL_CUDA_FN(attention_ws_floats)(int n, int heads, int head_dim, int splits) {
    return (size_t)n * heads * (size_t)splits * (size_t)(head_dim + 2);
}

struct att_launch_args {
    const unsigned char *kp, *vp;
    int block_size;
    const float *q;
    float *out;
    const int32_t *tiles;
    int t_base, heads, kv_heads, head_dim, hs, slices;
    float scale;
    int window;
    const int32_t *tables;
    int table_stride;
    const int32_t *n_ctx;
    float *ws;
    int split_target;
    int *cnt;
    int8_t *xq;
    float *xd;
    void *xs;
    int *bcnt;
    const float *sinks;
};

template <bool F16, int E, int B, int NQ>
static void att_launch(const att_launch_args &a, dim3 grid, void *stream) {
#define k_paged_attention_T k_paged_attention<F16, E, B, NQ>
    SOL_LAUNCH(k_paged_attention_T, grid, dim3(32 * ATT_WARPS), 0, stream, a.kp, a.vp, a.block_size,
               a.q, a.out, a.tiles, a.t_base, a.heads, a.kv_heads, a.head_dim, a.hs, a.slices,
               a.scale, a.window, a.tables, a.table_stride, a.n_ctx, a.ws, a.split_target, a.cnt,
               a.xq, a.xd, a.xs, a.bcnt, a.sinks);
#undef k_paged_attention_T
}

/* NQ: the power of two >= nq (nq <= att_max_nq(E)). */
template <bool F16, int E, int B>
static void att_launch_nq(int nq, const att_launch_args &a, dim3 grid, void *stream) {
    if (nq <= 1)
        att_launch<F16, E, B, 1>(a, grid, stream);
    else if (nq <= 2 || E == 8)
        att_launch<F16, E, B, 2>(a, grid, stream);
    else
        att_launch<F16, E, B, (E == 8 ? 2 : 4)>(a, grid, stream);
}

extern "C" int SOL_CUDA_FN(paged_attention)(const void *k_pool, const void *v_pool, int f16,
                                            int block_size, const float *q, float *out, int n_tiles,
                                            const int32_t *tiles, int t_base, int n, int heads,
                                            int kv_heads, int head_dim, float scale, int window,
                                            const int32_t *tables, int table_stride,
                                            const int32_t *n_ctx, int max_len, int sms, float *ws,
                                            int *cnt, void *q8, int q8_n, int q8_act, int *q8_cnt,
                                            const float *sinks, void *stream) {
    if (n <= 0 || (tiles && n_tiles <= 0)) return 0;
    int esz = f16 ? 2 : 4, E = att_elems(head_dim), group = heads / kv_heads;
    int target = att_split_target(sms, heads, kv_heads, head_dim);
    int splits = ws ? att_splits(max_len, target) : 1;
    /* The widest load the rows' alignment allows: E elements (at most 16 bytes) at once, else
     * 32-bit words (B = 2 for F16: any alignment, see att_row). */
    int vec = E * esz < 16 ? E * esz : 16;
    uintptr_t al = (uintptr_t)k_pool | (uintptr_t)v_pool;
    bool wide = (size_t)head_dim * esz % vec == 0 && al % vec == 0;
    /* Heads per block: the decode rule (att_heads_per_block), or for tiles that hold two tokens
     * or more on average (prefill chunks) 4 tokens x hs heads within the same budget. The
     * 32-bit fallback keeps one query per block (rare head_dims: kept small). */
    int cap = att_max_nq(E), hs = att_heads_per_block(heads, kv_heads, head_dim), tq = 1;
    bool tiled = tiles && wide && cap >= SOL_CUDA_ATT_TILE && n >= 2 * n_tiles;
    if (tiled) tq = SOL_CUDA_ATT_TILE, hs = cap / tq < group ? cap / tq : group;
    if (!wide) hs = 1;
    const unsigned char *kp = (const unsigned char *)k_pool, *vp = (const unsigned char *)v_pool;
    int slices = (group + hs - 1) / hs;
    const int32_t *tl = tiled ? tiles : nullptr;
    float *w = splits > 1 ? ws : nullptr;
    int8_t *xq = nullptr;
    float *xd = nullptr;
    void *xs = nullptr;
    int *bcnt = nullptr;
    /* Q8_K: blocks of 256 elements made of whole heads (head_dim 32..256, a power of two) */
    bool q8k = q8_act == SOL_CUDA_ACT_Q8_K;
    bool quant = w && q8 && head_dim % 32 == 0 && t_base + n <= q8_n &&
                 (q8_act == SOL_CUDA_ACT_Q8_0 ||
                  (q8k && q8_cnt && 256 % head_dim == 0 && heads * head_dim % 256 == 0));
    if (quant) { /* the blocks of rows [t_base, t_base + n) of the q8_n rows' scratch */
        int be = q8k ? 256 : 32;
        qx s = split_scratch(q8, q8_n, heads * head_dim, be);
        size_t first = (size_t)t_base * heads * head_dim;
        xq = s.q + first, xd = s.d + first / be;
        xs = q8k ? (void *)((int16_t *)s.s + first / be * 16)
                 : (void *)((int32_t *)s.s + first / be);
        bcnt = q8k ? q8_cnt : nullptr;
    }
    att_launch_args a = {kp,     vp,           block_size, q,    out,    tl,    t_base,
                         heads,  kv_heads,     head_dim,   hs,   slices, scale, window,
                         tables, table_stride, n_ctx,      w,    target, cnt,   xq,
                         xd,     xs,           bcnt,       sinks};
    dim3 grid((unsigned)((tiled ? n_tiles : n) * kv_heads * slices), (unsigned)splits);
    int nq = tq * hs;
    if (!wide) {
        if (f16)
            att_launch<true, 8, 2, 1>(a, grid, stream);
        else
            att_launch<false, 8, 4, 1>(a, grid, stream);
    } else if (f16) {
        if (E == 2)
            att_launch_nq<true, 2, 4>(nq, a, grid, stream);
        else if (E == 4)
            att_launch_nq<true, 4, 8>(nq, a, grid, stream);
        else
            att_launch_nq<true, 8, 16>(nq, a, grid, stream);
    } else {
        if (E == 2)
            att_launch_nq<false, 2, 8>(nq, a, grid, stream);
        else if (E == 4)
            att_launch_nq<false, 4, 16>(nq, a, grid, stream);
        else
            att_launch_nq<false, 8, 16>(nq, a, grid, stream);
    }
    return quant;
}
