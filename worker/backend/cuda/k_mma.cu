/* k_mma: the batch GEMM of quantized weights on tensor cores, y (+)= x W^T for batches past the
 * GEMV kernels: each block dequantizes a tile of weight rows to F16 in shared memory and
 * multiplies it with mma.sync, so no F16 copy of a matrix is ever written to memory.
 *
 * A block owns B weight rows x B tokens: 64 x 64 (4 warps) up to 64 tokens, so a decode batch
 * still fills the SMs, and 128 x 128 (8 warps) past them, where each dequantized weight feeds
 * twice the MMAs and x is read from L2 half as often. Per stage of BK columns (mma_bk: 64 on
 * the 64-token tile where K allows, else 32)
 *  - each thread dequantizes BK / 2 elements of one weight row (sol_dequant32, a whole block with
 *    its scales decoded once; sol_dequant16 at BK = 32), rounds them to F16 with cvt.rn.f16x2
 *    (sol_f16x2) and loads as many of the tokens' F16 activations (128-bit loads): the next
 *    stage's, into registers, while the warps multiply the current stage from shared memory;
 *  - each warp multiplies its 32 x B / 2 part: 2 x B / 16 mma.m16n8k16 per 16 columns, sums in
 *    f32 registers;
 *  - then the registers go to the other of two shared buffers: one __syncthreads a stage.
 * Shared rows are padded by 8 halves (BK / 2 + 4 words): the fragment loads of a warp fall on 32
 * different banks. bench/gemm_issue.py counts the stage loop's instructions per HMMA from the
 * SASS (docs/backend.md, "Matmul"; gpu_model.py's MMA_ISSUE, checked equal by
 * integration/gemm_issue).
 *
 * Up to 64 tokens a launch whose tiles make fewer than two blocks an SM splits each tile's K
 * (mma_splits: at 8B a decode batch's down projection, 64 row tiles over 224 stages, runs 5
 * splits of 45): the splits' partial tiles go to a workspace and the block completing a tile sums
 * them in split order, so the result is deterministic (mma_split_end). */
#include <errno.h>
#include <string.h>

#include "dequant.cuh"
#include "mma.cuh"
#include "pick.cuh"
#include "reduce.cuh"

enum {
    MMA_SMALL = 64, /* the tile's side B up to this many tokens; twice past it (mma_gemm) */
    MMA_BK = 32,    /* the narrow stage (mma_bk: it or twice it): a block of every 32-element run */
    /* split-K (n <= MMA_SMALL only): blocks per SM a launch is split to fill, the fewest
     * columns a split runs (its partial tile's 16 KiB written and read back stay below the
     * weights and x it streams), and the most splits */
    MMA_SPLIT_WAVES = 2,
    MMA_SPLIT_MIN_COLS = 256,
    MMA_MAX_SPLITS = SOL_CUDA_MMA_MAX_SPLITS,
};

/* Blocks an SM holds (__launch_bounds__): 128 registers a thread for the 128 x 128 tile on sm_90
 * (two blocks, no spill), up to 255 on sm_80, where 128 spill 48 bytes (cuda_spills); the 64 x 64
 * tile of 64-column stages holds twice the staged elements: three blocks (170 registers). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define MMA_BLOCKS_SM(B, BK) ((B) > MMA_SMALL ? 1 : (BK) > MMA_BK ? 3 : 4)
#else
#define MMA_BLOCKS_SM(B, BK) ((B) > MMA_SMALL ? 2 : (BK) > MMA_BK ? 3 : 4)
#endif

/* The stage width for n tokens and K columns: 64 columns for the 64-token tile where K allows,
 * so each thread dequantizes a whole 32-block of one row (a K-quant sub-block: its scale and min
 * decoded once for 32 elements, not twice for 16 each); 32 otherwise (the 128-row tile has no
 * registers for twice the staged elements). */
static __host__ __device__ int mma_bk(int n, int K) {
    return n <= MMA_SMALL && K % (2 * MMA_BK) == 0 ? 2 * MMA_BK : MMA_BK;
}

/* One stage of a B x B tile of BK columns in shared memory; rows padded by 8 halves (BK / 2 + 4
 * words: the 8 rows of a fragment load fall on 8 different groups of 4 banks). */
template <int B, int BK> struct alignas(16) mma_tiles { /* ldmatrix: 16-byte rows */
    enum { LD = BK + 8 };
    uint16_t w[B * LD];
    uint16_t x[B * LD];
};

/* A thread's share of a stage (2 threads a row, of weights and of tokens alike), in registers
 * between its loads and its shared stores: weight row tid / 2 and token tid / 2, columns
 * (tid % 2) * BK / 2 .. + BK / 2, as BK / 4 words of F16 pairs each. */
template <int BK> struct mma_regs { uint32_t w[BK / 4], x[BK / 4]; };

template <int BK>
static __device__ __forceinline__ void mma_load(const sol_cuda_wt &w, const uint16_t *xh,
                                                mma_regs<BK> &r, int m0, int t0, int k0, int M,
                                                int n, int K) {
    /* Rows past M and tokens past n load the last row's or token's values instead of zeros: an
     * MMA output (row, token) reads only that row and that token, and those outputs are never
     * stored; no zeroing, no branch (a tenth of the loop's instructions). */
    enum { E = BK / 2 }; /* elements a thread stages: 16, or a whole 32-block at BK = 64 */
    int row = m0 + (int)threadIdx.x / 2, tok = t0 + (int)threadIdx.x / 2;
    int c = (threadIdx.x % 2) * E;
    row = row < M ? row : M - 1;
    tok = tok < n ? tok : n - 1;
    float f[32];
    if (E == 32)
        sol_dequant32(w, row, k0 + c, f); /* a whole block: its scales decoded once */
    else
        sol_dequant16(w, row, k0 + c, f);
    SOL_UNROLL
    for (int j = 0; j < E / 2; j++)
        r.w[j] = sol_f16x2(f[2 * j], f[2 * j + 1]);
    const uint16_t *src = xh + (size_t)tok * K + k0 + c;
    SOL_UNROLL
    for (int h = 0; h < E; h += 8)
        sol_ld128(r.x + h / 2, src + h);
}

template <int B, int BK>
static __device__ __forceinline__ void mma_store_tiles(const mma_regs<BK> &r, mma_tiles<B, BK> &s) {
    enum { LD = mma_tiles<B, BK>::LD };
    int at = (int)threadIdx.x / 2 * LD + (threadIdx.x % 2) * (BK / 2);
    uint32_t *wd = (uint32_t *)(s.w + at), *xd = (uint32_t *)(s.x + at);
    SOL_UNROLL
    for (int j = 0; j < BK / 4; j++)
        wd[j] = r.w[j], xd[j] = r.x[j];
}

/* Warp w's 32 x NJ * 8 part over the BK columns in shared memory, its fragments loaded by
 * ldmatrix.x4 (mma.cuh): per 16 columns one for each 16 weight rows (matrices: rows 0-7 and 8-15
 * at columns 0-7, then at 8-15: a[0..3]) and one for each 16 tokens (tokens 0-7 at columns 0-7
 * and 8-15, then tokens 8-15: b[j] and b[j + 1]). */
template <int B, int BK, int NJ = B / 16>
static __device__ __forceinline__ void mma_tile(const mma_tiles<B, BK> &s, float acc[2][NJ][4],
                                                int wm, int wn) {
    enum { MMA_LD = mma_tiles<B, BK>::LD };
    int lane = threadIdx.x % 32, r16 = lane % 16, hi = lane / 16;
    int bt = lane % 8 + 8 * (lane / 16), bk = 8 * ((lane / 8) % 2);
    SOL_UNROLL
    for (int kk = 0; kk < BK; kk += 16) {
        uint32_t a[2][4], b[NJ][2];
        SOL_UNROLL
        for (int i = 0; i < 2; i++)
            sol_ldmatrix_x4(a[i], s.w + (wm + 16 * i + r16) * MMA_LD + kk + 8 * hi);
        SOL_UNROLL
        for (int j = 0; j < NJ; j += 2) {
            uint32_t q[4];
            sol_ldmatrix_x4(q, s.x + (wn + 8 * j + bt) * MMA_LD + kk + bk);
            b[j][0] = q[0], b[j][1] = q[1], b[j + 1][0] = q[2], b[j + 1][1] = q[3];
        }
        SOL_UNROLL
        for (int i = 0; i < 2; i++)
            SOL_UNROLL
        for (int j = 0; j < NJ; j++)
            sol_mma_16816(acc[i][j], a[i], b[j]);
    }
}

/* y[t * ldy + m] (+)= the sum for weight row m and token t, inside M x n. */
static __device__ __forceinline__ void mma_store(float *y, int ldy, int M, int n, int m, int t,
                                                 float v, int add) {
    if (m < M && t < n) {
        float *p = y + (size_t)t * ldy + m;
        *p = add ? *p + v : v;
    }
}

/* Up to three matrices that read the same F16 x, in one launch (matmul_many's q/k/v and
 * gate/up): blocks [0, first1) along x compute m0's row tiles, [first1, first2) m1's, the rest
 * m2's, so a small matrix's tiles share the wave with the others' instead of leaving most SMs
 * idle in a launch of their own (k and v: 16 tiles each at 8B). The pick depends on blockIdx
 * only (uniform over the block) and is made with compares, never by indexing the parameter. */
struct mma_mat {
    sol_cuda_wt w;
    float *y;
    int ldy;
};
struct mma_set {
    mma_mat m0, m1, m2;
    unsigned first1, first2; /* in blocks: a matrix's row tiles x splits */
    int splits;              /* blocks each tile's K is cut into (1: none; the 64-row tile only) */
    float *part;             /* splits > 1: a B x B partial tile per block */
    int *cnt;                /* splits > 1: a zeroed int per (row tile, token tile), left zeroed */
};

/* Split-K's end (the 64-row tile's small grids: a decode batch's o and down projections are 64
 * row tiles on 132 SMs): every block of a tile stores its partial sums (element e of thread tid
 * at e x 2B + tid: coalesced) and counts itself at the tile's counter once it fenced them
 * (sol_last_of: every lane); the warp that completes the count flags its block (last,
 * zeroed before the main loop), which after a barrier sums the splits' partials in split order,
 * 0 first, whichever block finished last: the bits depend on the split count only, never on the
 * blocks' timing. True in that block, with the sums in acc. */
template <int B, int NJ = B / 16>
static __device__ __forceinline__ bool mma_split_end(const mma_set &set, float acc[2][NJ][4],
                                                     int split, int *last) {
    enum { E = 2 * NJ * 4, T = 2 * B };
    int tid = threadIdx.x;
    size_t tile = (size_t)blockIdx.y * gridDim.x + blockIdx.x;
    float *mine = set.part + tile * (size_t)(E * T);
    SOL_UNROLL
    for (int i = 0; i < 2; i++)
        SOL_UNROLL
    for (int j = 0; j < NJ; j++)
        SOL_UNROLL
    for (int e = 0; e < 4; e++)
        mine[((i * NJ + j) * 4 + e) * T + tid] = acc[i][j][e];
    int *c = set.cnt + blockIdx.y * (gridDim.x / set.splits) + blockIdx.x / set.splits;
    if (sol_last_of(c, set.splits * T, tid % 32) && tid % 32 == 0) last[0] = 1;
    __syncthreads(); /* the flag is in before any thread of the block reads it */
    if (!last[0]) return false;
    __threadfence(); /* every thread's acquire side: the other warps' partials are visible */
    const float *first = mine - (size_t)split * (E * T);
    SOL_UNROLL
    for (int i = 0; i < 2; i++)
        SOL_UNROLL
    for (int j = 0; j < NJ; j++)
        SOL_UNROLL
    for (int e = 0; e < 4; e++) {
        const float *p = first + ((i * NJ + j) * 4 + e) * T + tid;
        float v = __ldcg(p);
        /* a runtime count: one load a split, no copies of the body */
        SOL_NO_UNROLL
        for (int s = 1; s < set.splits; s++) {
            v += __ldcg(p + (size_t)s * (E * T));
        }
        acc[i][j][e] = v;
    }
    return true;
}

/* B x B tiles, 2 B threads: warps B / 32 (rows) x 2 (tokens), each 32 x B / 2; stages of BK
 * columns (mma_bk). */
template <int B, int BK>
static __global__ void __launch_bounds__(2 * B, MMA_BLOCKS_SM(B, BK))
    k_mma_gemm(mma_set set, const uint16_t *xh, int n, int K, int add) {
    sol_grid_dependency();
    typedef mma_tiles<B, BK> tiles;
    SOL_SHARED(tiles, st, [2]);
    /* the 128-row tile holds 128 registers a thread on sm_90 with none to spare: its launches
     * take one matrix (mma_gemm_many), read from the parameters as before */
    unsigned bx = blockIdx.x;
    const mma_mat mm = B > MMA_SMALL ? set.m0 : sol_pick3(set, bx);
    const sol_cuda_wt &w = mm.w;
    float *y = mm.y;
    int M = (int)w.rows, ldy = mm.ldy;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    /* split-K: the block's tile and its run of stages (the 128-row tile never splits) */
    const int splits = B > MMA_SMALL ? 1 : set.splits;
    int split = (int)(bx % (unsigned)splits), per = (K / BK + splits - 1) / splits;
    int kb = split * per * BK, ke = K < kb + per * BK ? K : kb + per * BK;
    int m0 = (int)(bx / (unsigned)splits) * B, t0 = blockIdx.y * B;
    int wm = (warp % (B / 32)) * 32, wn = (warp / (B / 32)) * (B / 2);
    float acc[2][B / 16][4];
    SOL_UNROLL
    for (int i = 0; i < 2; i++)
        SOL_UNROLL
    for (int j = 0; j < B / 16; j++)
        SOL_UNROLL
    for (int e = 0; e < 4; e++)
        acc[i][j][e] = 0.0f;
    SOL_SHARED(int, split_last, [1]);
    if (threadIdx.x == 0) split_last[0] = 0; /* before the loop's barriers: mma_split_end */
    mma_regs<BK> r;
    mma_load(w, xh, r, m0, t0, kb, M, n, K);
    mma_store_tiles(r, st[0]);
    __syncthreads(); /* stage 0 is whole */
    for (int k0 = kb, b = 0; k0 < ke; k0 += BK, b ^= 1) {
        bool more = k0 + BK < ke;
        if (more) mma_load(w, xh, r, m0, t0, k0 + BK, M, n, K); /* in flight over the MMAs */
        mma_tile(st[b], acc, wm, wn);
        if (more) mma_store_tiles(r, st[b ^ 1]);
        /* the next stage is whole, and every warp is done with this one before the stage after
         * overwrites it */
        __syncthreads();
    }
    if (splits > 1 && !mma_split_end<B>(set, acc, split, split_last)) return;
    int g = lane / 4, t = lane % 4;
    SOL_UNROLL
    for (int i = 0; i < 2; i++)
        SOL_UNROLL
    for (int j = 0; j < B / 16; j++) {
        int m = m0 + wm + 16 * i + g, c = t0 + wn + 8 * j + 2 * t;
        mma_store(y, ldy, M, n, m, c, acc[i][j][0], add);
        mma_store(y, ldy, M, n, m, c + 1, acc[i][j][1], add);
        mma_store(y, ldy, M, n, m + 8, c, acc[i][j][2], add);
        mma_store(y, ldy, M, n, m + 8, c + 1, acc[i][j][3], add);
    }
}

/* The tile side for n tokens: 128 x 128 past 64 tokens, where each dequantized weight feeds
 * twice the MMAs (the kernel's issue slots go mostly to the dequantization); up to 64, 64 x 64
 * wastes less and makes twice the blocks of a decode batch's small grid. */
static int mma_side(int n) {
    return n > MMA_SMALL ? 2 * MMA_SMALL : MMA_SMALL;
}

static int mma_check(const sol_cuda_wt &w, int K, int n, int ldy) {
    if (!sol_cuda_type_known(w.type) || w.type == SOL_CUDA_F32 || w.type == SOL_CUDA_F16 ||
        w.type == SOL_CUDA_BF16)
        return -ENOTSUP;
    if (w.split != sol_cuda_wants_split(w.type) || w.cols % MMA_BK || w.cols != K || n < 1 ||
        ldy < w.rows)
        return -EINVAL;
    return 0;
}

/* The 64-row tiles of a launch's matrices: split-K's blocks are these times the split count. */
static long long split_tiles(const sol_cuda_wt *ws, int count) {
    long long tiles = 0;
    for (int i = 0; i < count; i++)
        tiles += (ws[i].rows + MMA_SMALL - 1) / MMA_SMALL;
    return tiles;
}

/* Split-K's count for a launch of these matrices at n tokens: none past 64 tokens (the 128-row
 * tile has no registers for it, and a prompt's token tiles fill the GPU) or when the launch's
 * tiles already make MMA_SPLIT_WAVES blocks an SM; else enough to reach that, each split at
 * least MMA_SPLIT_MIN_STAGES stages and none empty. From the shapes and the SM count only: a
 * token's sums depend on them, never on timing. */
extern "C" int SOL_CUDA_FN(mma_splits)(const sol_cuda_wt *ws, int count, int n, int sms) {
    if (n > MMA_SMALL || count < 1) return 1;
    long long tiles = split_tiles(ws, count),
              target = (long long)MMA_SPLIT_WAVES * (sms > 0 ? sms : 1);
    int bk = mma_bk(n, ws[0].cols), stages = ws[0].cols / bk, least = MMA_SPLIT_MIN_COLS / bk;
    if (tiles >= target || stages < 2 * least) return 1;
    long long s = (target + tiles - 1) / tiles;
    if (s > stages / least) s = stages / least;
    if (s > MMA_MAX_SPLITS) s = MMA_MAX_SPLITS;
    int per = (stages + (int)s - 1) / (int)s;
    return (stages + per - 1) / per; /* the splits of `per` stages that cover K: none empty */
}

/* The partial tiles and counters any mma_splits choice for this SM count needs: fewer than
 * 2 x MMA_SPLIT_WAVES x sms blocks split (tiles < the target, splits < target / tiles + 1). */
extern "C" size_t SOL_CUDA_FN(mma_split_floats)(int sms) {
    return (size_t)2 * MMA_SPLIT_WAVES * (size_t)(sms > 0 ? sms : 1) * MMA_SMALL * MMA_SMALL;
}
extern "C" int SOL_CUDA_FN(mma_split_counters)(int sms) {
    return MMA_SPLIT_WAVES * (sms > 0 ? sms : 1);
}

/* Columns each split runs at n tokens (mma_bk's stages, whole; the last split may run fewer). */
extern "C" int SOL_CUDA_FN(mma_split_cols)(int n, int K, int splits) {
    int bk = mma_bk(n, K), stages = K / bk;
    return splits > 0 ? (stages + splits - 1) / splits * bk : 0;
}

/* A split the kernel can take for these matrices at n tokens: 1, or 2..MMA_MAX_SPLITS up to 64
 * tokens with no split empty, and a workspace and counters as large as the launch's tiles need. */
static int split_ok(const sol_cuda_mma_split *sp, const sol_cuda_wt *ws, int count, int n) {
    if (!sp || sp->splits == 1) return 1;
    int K = ws[0].cols, bk = mma_bk(n, K), stages = K / bk, s = sp->splits;
    int per = s > 0 ? (stages + s - 1) / s : 0;
    long long tiles = split_tiles(ws, count);
    return s > 1 && s <= MMA_MAX_SPLITS && n <= MMA_SMALL && (s - 1) * per < stages && sp->part &&
           sp->cnt && tiles * s * MMA_SMALL * MMA_SMALL <= (long long)sp->floats &&
           tiles <= sp->counters;
}

/* ys[i] (ldy[i] floats a token) (+)= the F16 activations xh (n x K) times W_i^T for count (1..3)
 * quantized matrices of K columns: one launch up to 64 tokens (a decode batch's small grids
 * share the wave), one a matrix past them (the 128-row tile has no registers for the pick, and
 * a prompt's token tiles fill the GPU anyway); sp (NULL: none) splits each tile's K. Returns the
 * launches made, or -errno. */
extern "C" int SOL_CUDA_FN(mma_gemm_many)(const sol_cuda_wt *ws, float *const *ys, const int *ldy,
                                          int count, const void *xh, int n, int add,
                                          const sol_cuda_mma_split *sp, void *stream) {
    if (count < 1 || count > 3) return -EINVAL;
    for (int i = 0; i < count; i++) {
        int rc = mma_check(ws[i], (int)ws[0].cols, n, ldy[i]);
        if (rc) return rc;
    }
    if (!split_ok(sp, ws, count, n)) return -EINVAL;
    int side = mma_side(n), splits = sp ? sp->splits : 1;
    if (side > MMA_SMALL && count > 1) {
        for (int i = 0; i < count; i++) {
            int rc = SOL_CUDA_FN(mma_gemm_many)(ws + i, ys + i, ldy + i, 1, xh, n, add, sp, stream);
            if (rc < 0) return rc;
        }
        return count;
    }
    mma_set s;
    memset(&s, 0, sizeof s); /* every byte defined: the graph signature compares them */
    mma_mat *slot[3] = {&s.m0, &s.m1, &s.m2};
    unsigned *first[3] = {nullptr, &s.first1, &s.first2}, blocks = 0;
    for (int i = 0; i < count; i++) {
        slot[i]->w = ws[i]; /* field by field: a struct copy may carry padding bytes */
        slot[i]->y = ys[i];
        slot[i]->ldy = ldy[i];
        if (first[i]) *first[i] = blocks;
        blocks += (unsigned)((ws[i].rows + side - 1) / side) * (unsigned)splits;
    }
    if (count < 2) s.first1 = blocks; /* no block reaches an empty slot */
    if (count < 3) s.first2 = blocks;
    s.splits = splits;
    s.part = splits > 1 ? sp->part : nullptr;
    s.cnt = splits > 1 ? sp->cnt : nullptr;
    dim3 grid(blocks, (unsigned)((n + side - 1) / side));
    const uint16_t *x = (const uint16_t *)xh;
    int K = (int)ws[0].cols;
    if (side > MMA_SMALL) {
        enum { B = 2 * MMA_SMALL };
        SOL_LAUNCH((k_mma_gemm<B, MMA_BK>), grid, dim3(2 * B), 0, stream, s, x, n, K, add);
    } else if (mma_bk(n, K) > MMA_BK) {
        enum { B = MMA_SMALL };
        SOL_LAUNCH((k_mma_gemm<B, 2 * MMA_BK>), grid, dim3(2 * B), 0, stream, s, x, n, K, add);
    } else {
        enum { B = MMA_SMALL };
        SOL_LAUNCH((k_mma_gemm<B, MMA_BK>), grid, dim3(2 * B), 0, stream, s, x, n, K, add);
    }
    return 1;
}

/* y (ldy floats a token) (+)= the F16 activations xh (n x K) times W^T, W quantized (any known
 * type but the float ones, in the layout weight_prepare made); K a multiple of 32; no split. */
extern "C" int SOL_CUDA_FN(mma_gemm)(sol_cuda_wt w, const void *xh, float *y, int n, int ldy,
                                     int add, void *stream) {
    int rc = SOL_CUDA_FN(mma_gemm_many)(&w, &y, &ldy, 1, xh, n, add, nullptr, stream);
    return rc < 0 ? rc : 0;
}
