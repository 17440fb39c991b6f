/* k_flash: prefill attention on tensor cores, FlashAttention-2's loop over a paged F16 cache:
 * a block holds up to 64 query rows of one KV head (a tile of consecutive tokens of one
 * sequence times the query heads that share the KV head), walks their positions in chunks of
 * FL_KC, and keeps the softmax online in registers.
 *
 * Per chunk: the block copies the chunk's K and V rows (through the block table, 128-bit
 * loads) into shared memory; each warp, for its 16 query rows,
 *  - S = Q K^T with mma.m16n8k16 (Q's fragments, rounded to F16 once, stay in registers; K's
 *    rows are the B operand as stored: a column's k run is a K row);
 *  - masks positions outside each row's window (its token's context, a sliding window), scales,
 *    and updates the row's max and sum (the 4 lanes of a quad hold a row: two shuffles);
 *  - O += P V with P's F16 fragments taken straight from S's accumulators (FA2's register
 *    reuse: an m16n8 accumulator pair is an m16k16 A fragment) and V's B fragments gathered
 *    from two shared rows (V is position-major; ldmatrix.trans would do it in one instruction).
 * Precision: Q and P are rounded to F16 as every tensor-core attention does (about 1e-3
 * relative); the decode path (k_attention.cu) stays in float and is used whenever bits must not
 * depend on the batch (batch-invariant mode). Shapes: head_dim 64 or 128, F16 caches; the
 * backend takes k_attention.cu for the rest (flash_tile_tokens). */
#include <errno.h>
#include <math.h>

#include "dequant.cuh"
#include "mma.cuh"

enum {
    FL_ROWS = 64, /* query rows of a block: 4 warps of 16 */
    FL_KC = 32,   /* positions per chunk */
    FL_THREADS = 128
};

/* Halves a and b (a in the low 16 bits), as the fragments hold them. */
static __device__ __forceinline__ uint32_t fl_pack(float a, float b) {
    return sol_f16x2(a, b);
}

/* Query row r of the block: its token (or -1 past the tile) and head. */
struct fl_row {
    int tok, head, lo, hi; /* positions [lo, hi) */
};

static __device__ __forceinline__ fl_row fl_row_of(int r, int first, int cnt, int group, int kvh,
                                                   const int32_t *n_ctx, int window) {
    fl_row x = {-1, 0, 0, 0};
    int ti = r / group;
    if (ti >= cnt) return x;
    x.tok = first + ti, x.head = kvh * group + r % group;
    x.hi = n_ctx[x.tok];
    x.lo = window > 0 && x.hi > window ? x.hi - window : 0;
    return x;
}

/* The chunk's K and V rows [c0, c0 + FL_KC) into shared memory (zeros past p1). */
template <int HD>
static __device__ __forceinline__ void
fl_load(const unsigned char *kp, const unsigned char *vp, uint16_t *ks, uint16_t *vs, int c0,
        int p1, const int32_t *table, int block_size, int kv_heads, int kvh) {
    constexpr int LD = HD + 8, VEC = HD / 8; /* 16-byte pieces per row */
    for (int i = threadIdx.x; i < FL_KC * VEC; i += FL_THREADS) {
        int pr = i / VEC, piece = i % VEC, p = c0 + pr;
        uint32_t kv4[4] = {0, 0, 0, 0}, vv4[4] = {0, 0, 0, 0};
        if (p < p1) {
            size_t slot = (size_t)table[p / block_size] * block_size + p % block_size;
            size_t off = ((slot * kv_heads + kvh) * HD + piece * 8) * 2;
            sol_ld128(kv4, kp + off);
            sol_ld128(vv4, vp + off);
        }
        uint32_t *kd = (uint32_t *)(ks + pr * LD + piece * 8),
                 *vd = (uint32_t *)(vs + pr * LD + piece * 8);
        SOL_UNROLL
        for (int j = 0; j < 4; j++)
            kd[j] = kv4[j], vd[j] = vv4[j];
    }
}

template <int HD>
static __global__ void __launch_bounds__(FL_THREADS)
    k_flash_attention(const unsigned char *kp, const unsigned char *vp, int block_size,
                      const float *q, float *out, const int32_t *tiles, int heads, int kv_heads,
                      float scale, int window, const int32_t *tables, int table_stride,
                      const int32_t *n_ctx) {
    sol_grid_dependency();
    constexpr int LD = HD + 8, KT = HD / 16, NT = HD / 8;
    SOL_SHARED(uint16_t, ks, [FL_KC * LD]);
    SOL_SHARED(uint16_t, vs, [FL_KC * LD]);
    int kvh = (int)blockIdx.x % kv_heads, tile = (int)blockIdx.x / kv_heads;
    int first = tiles[tile], cnt = tiles[tile + 1] - first, group = heads / kv_heads;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    /* the block's span: the union of its tokens' windows */
    int P0 = 1 << 30, P1 = 0;
    for (int i = 0; i < cnt; i++) {
        int hi = n_ctx[first + i], lo = window > 0 && hi > window ? hi - window : 0;
        P0 = lo < P0 ? lo : P0, P1 = hi > P1 ? hi : P1;
    }
    fl_row rw[2];
    rw[0] = fl_row_of(16 * warp + g, first, cnt, group, kvh, n_ctx, window);
    rw[1] = fl_row_of(16 * warp + g + 8, first, cnt, group, kvh, n_ctx, window);
    /* Q's A fragments: rows g and g + 8, columns 16 kt + 2t (+1) and + 8 */
    uint32_t qa[KT][4];
    SOL_UNROLL
    for (int kt = 0; kt < KT; kt++)
        SOL_UNROLL
    for (int j = 0; j < 4; j++) {
        const fl_row &x = rw[j % 2];
        int col = 16 * kt + 2 * t + (j >= 2 ? 8 : 0);
        uint32_t v[2] = {0, 0};
        if (x.tok >= 0) sol_ld64(v, q + ((size_t)x.tok * heads + x.head) * HD + col);
        qa[kt][j] = fl_pack(sol_bits_f32(v[0]), sol_bits_f32(v[1]));
    }
    float o[NT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    SOL_UNROLL
    for (int i = 0; i < NT; i++)
        SOL_UNROLL
    for (int e = 0; e < 4; e++)
        o[i][e] = 0.0f;
    const int32_t *table = tables + (size_t)first * table_stride;
    for (int c0 = P0; c0 < P1; c0 += FL_KC) {
        fl_load<HD>(kp, vp, ks, vs, c0, P1, table, block_size, kv_heads, kvh);
        __syncthreads(); /* the chunk is whole */
        float s[FL_KC / 8][4];
        SOL_UNROLL
        for (int nt = 0; nt < FL_KC / 8; nt++) {
            SOL_UNROLL
            for (int e = 0; e < 4; e++)
                s[nt][e] = 0.0f;
            SOL_UNROLL
            for (int kt = 0; kt < KT; kt++) {
                const uint16_t *kr = ks + (8 * nt + g) * LD + 16 * kt + 2 * t;
                uint32_t b[2] = {*(const uint32_t *)kr, *(const uint32_t *)(kr + 8)};
                sol_mma_16816(s[nt], qa[kt], b);
            }
        }
        /* mask and scale; the rows' new max over the quad */
        float mx[2] = {-INFINITY, -INFINITY};
        SOL_UNROLL
        for (int nt = 0; nt < FL_KC / 8; nt++)
            SOL_UNROLL
        for (int e = 0; e < 4; e++) {
            const fl_row &x = rw[e / 2];
            int p = c0 + 8 * nt + 2 * t + e % 2;
            float v = x.tok >= 0 && p >= x.lo && p < x.hi ? s[nt][e] * scale : -INFINITY;
            s[nt][e] = v;
            mx[e / 2] = fmaxf(mx[e / 2], v);
        }
        float corr[2];
        SOL_UNROLL
        for (int i = 0; i < 2; i++) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
            float mn = fmaxf(m[i], mx[i]);
            corr[i] = mn == -INFINITY ? 1.0f : __expf(m[i] - mn);
            m[i] = mn;
        }
        float sum[2] = {0.0f, 0.0f};
        SOL_UNROLL
        for (int nt = 0; nt < FL_KC / 8; nt++)
            SOL_UNROLL
        for (int e = 0; e < 4; e++) {
            float mi = m[e / 2];
            float pv = s[nt][e] == -INFINITY ? 0.0f : __expf(s[nt][e] - mi);
            s[nt][e] = pv;
            sum[e / 2] += pv;
        }
        SOL_UNROLL
        for (int i = 0; i < 2; i++) {
            sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
            sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
            l[i] = l[i] * corr[i] + sum[i];
        }
        SOL_UNROLL
        for (int i = 0; i < NT; i++)
            SOL_UNROLL
        for (int e = 0; e < 4; e++)
            o[i][e] *= corr[e / 2];
        /* O += P V: P's k chunk kc is S's n-tiles 2 kc and 2 kc + 1 */
        SOL_UNROLL
        for (int kc = 0; kc < FL_KC / 16; kc++) {
            uint32_t pa[4] = {fl_pack(s[2 * kc][0], s[2 * kc][1]),
                              fl_pack(s[2 * kc][2], s[2 * kc][3]),
                              fl_pack(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                              fl_pack(s[2 * kc + 1][2], s[2 * kc + 1][3])};
            const uint16_t *v0 = vs + (16 * kc + 2 * t) * LD + g;
            SOL_UNROLL
            for (int nt = 0; nt < NT; nt++) {
                const uint16_t *v = v0 + 8 * nt;
                uint32_t b[2] = {(uint32_t)v[0] | (uint32_t)v[LD] << 16,
                                 (uint32_t)v[8 * LD] | (uint32_t)v[9 * LD] << 16};
                sol_mma_16816(o[nt], pa, b);
            }
        }
        __syncthreads(); /* every warp has read the chunk before the next overwrites it */
    }
    SOL_UNROLL
    for (int i = 0; i < 2; i++) {
        const fl_row &x = rw[i];
        if (x.tok < 0) continue;
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        float *dst = out + ((size_t)x.tok * heads + x.head) * HD + 2 * t;
        SOL_UNROLL
        for (int nt = 0; nt < NT; nt++) {
            dst[8 * nt] = o[nt][2 * i] * inv;
            dst[8 * nt + 1] = o[nt][2 * i + 1] * inv;
        }
    }
}

extern "C" int SOL_CUDA_FN(flash_tile_tokens)(int heads, int kv_heads, int head_dim) {
    if (kv_heads <= 0 || heads % kv_heads || (head_dim != 64 && head_dim != 128)) return 0;
    int group = heads / kv_heads;
    return group <= FL_ROWS ? FL_ROWS / group : 0;
}

extern "C" int SOL_CUDA_FN(flash_attention)(const void *k_pool, const void *v_pool, int block_size,
                                            const float *q, float *out, int n_tiles,
                                            const int32_t *tiles, int heads, int kv_heads,
                                            int head_dim, float scale, int window,
                                            const int32_t *tables, int table_stride,
                                            const int32_t *n_ctx, void *stream) {
    if (!SOL_CUDA_FN(flash_tile_tokens)(heads, kv_heads, head_dim)) return -ENOTSUP;
    if (n_tiles <= 0) return 0;
    const unsigned char *kp = (const unsigned char *)k_pool, *vp = (const unsigned char *)v_pool;
    dim3 grid((unsigned)(n_tiles * kv_heads));
    if (head_dim == 64)
        SOL_LAUNCH(k_flash_attention<64>, grid, dim3(FL_THREADS), 0, stream, kp, vp, block_size, q,
                   out, tiles, heads, kv_heads, scale, window, tables, table_stride, n_ctx);
    else
        SOL_LAUNCH(k_flash_attention<128>, grid, dim3(FL_THREADS), 0, stream, kp, vp, block_size, q,
                   out, tiles, heads, kv_heads, scale, window, tables, table_stride, n_ctx);
    return 0;
}
