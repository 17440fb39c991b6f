/* k_mmq: the batch GEMM on int8 tensor cores for the weights whose GEMV reads Q8_0 activations
 * (Q4_0, Q5_0, Q5_1, Q8_0, MXFP4), y (+)= x W^T past the GEMV sizes, as llama.cpp's MMQ.
 *
 * x is quantized once (gemv_quantize: the GEMV's and the CPU's Q8_0), so a 32-block's dot is
 * an exact int32 from mma.sync m16n8k32 (s8 x s8: the GEMV's __dp4a sum, the same integer),
 * followed by the GEMV's float step for the block: (dot - off * sum) * (d * dx), Q5_1's
 * m * dx * sum, blocks in k order (the offset taken off the quants in shared memory, so the
 * MMA's integer is dot - off * sum itself). No F16 rounding of weights or activations (k_mma.cu's
 * path, which K-quants keep): the prompt's sums are the decode GEMV's up to the order of the float
 * steps.
 *
 * A block is 4 warps and owns MMQ_BM weight rows x MMQ_BN tokens, MMQ_KB 32-blocks a stage:
 *  - each thread loads one weight block (q_load: aligned 128-bit words in the split layout) and
 *    one activation block (two 128-bit loads, the scale and the sum) of the next stage into
 *    registers while the warps multiply the current stage from shared memory (double buffer:
 *    one __syncthreads a stage; four blocks a stage spilled registers to local memory);
 *  - each warp multiplies its 32 x 32 quarter: 2 x 4 mma.m16n8k32 per 32-block, every one from
 *    a zero accumulator (the block's own integer), then 4 float steps a lane.
 * Shared rows are MMQ_LDQ = 20 words: the fragment loads of a warp (rows g, words t) fall on
 * banks 20g + t (mod 32), all 32 different. */
#include <errno.h>

#include "dequant.cuh"
#include "mma.cuh"
#include "q8.cuh"

enum {
    MMQ_BM = 64,                              /* weight rows of a block */
    MMQ_BN = 64,                              /* tokens of a block */
    MMQ_KB = 2,                               /* 32-element blocks a stage */
    MMQ_LDQ = MMQ_KB * 8 + 4,                 /* words of a shared row of quants */
    MMQ_THREADS = 128,                        /* 4 warps */
    MMQ_ITEMS = MMQ_BM * MMQ_KB / MMQ_THREADS /* blocks of each operand a thread loads */
};

/* One stage in shared memory: quants, and per (row or token, block) the scales and sums. */
struct mmq_tiles {
    uint32_t wq[MMQ_BM * MMQ_LDQ];
    float wd[MMQ_BM * MMQ_KB], wm[MMQ_BM * MMQ_KB];
    uint32_t xq[MMQ_BN * MMQ_LDQ];
    float xd[MMQ_BN * MMQ_KB];
    int xs[MMQ_BN * MMQ_KB];
};

/* A thread's share of a stage, held in registers while the previous stage is multiplied. */
struct mmq_regs {
    qblock w[MMQ_ITEMS];
    uint32_t x[MMQ_ITEMS][8];
    float xd[MMQ_ITEMS];
    int xs[MMQ_ITEMS];
};

/* The activations of the stage starting at block b0: token t0 + (i % 64), block b0 + i / 64. */
struct mmq_in {
    const int8_t *xq;
    const float *xd;
    const int32_t *xs;
};

/* Item it of this thread: row (or token) i % 64 of the tile, block i / 64 of the stage. */
static __device__ __forceinline__ void mmq_load(const sol_cuda_wt &w, const mmq_in &in, mmq_regs &r,
                                                int m0, int t0, int b0, int M, int n, int nb) {
    SOL_UNROLL
    for (int it = 0; it < MMQ_ITEMS; it++) {
        int i = (int)threadIdx.x + it * MMQ_THREADS, at = i % MMQ_BM, b = b0 + i / MMQ_BM;
        qblock z = {{0, 0, 0, 0, 0, 0, 0, 0}, 0.0f, 0.0f};
        r.w[it] = m0 + at < M && b < nb ? q_load(w, m0 + at, b, nb) : z;
        uint32_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        float d = 0.0f;
        int s = 0;
        if (t0 + at < n && b < nb) {
            size_t tb = (size_t)(t0 + at) * nb + b;
            sol_ld128(v, in.xq + tb * 32);
            sol_ld128(v + 4, in.xq + tb * 32 + 16);
            d = in.xd[tb], s = in.xs[tb];
        }
        SOL_UNROLL
        for (int j = 0; j < 8; j++)
            r.x[it][j] = v[j];
        r.xd[it] = d, r.xs[it] = s;
    }
}

/* The offset (Q4_0: 8, Q5_0: 16) is taken off each quant byte here, once a stage, so the MMA's
 * integer is the GEMV's dot - off * sum itself: (b | 0x80) - off cannot borrow from the next
 * byte (b <= 31, off <= 16), and ^ 0x80 turns 128 + (b - off) into b - off as a signed byte. */
static __device__ __forceinline__ void mmq_store(const mmq_regs &r, mmq_tiles &s, uint32_t off4) {
    SOL_UNROLL
    for (int it = 0; it < MMQ_ITEMS; it++) {
        int i = (int)threadIdx.x + it * MMQ_THREADS, at = i % MMQ_BM, kb = i / MMQ_BM;
        SOL_UNROLL
        for (int j = 0; j < 8; j++) {
            uint32_t v = (uint32_t)r.w[it].v[j];
            s.wq[at * MMQ_LDQ + kb * 8 + j] = off4 ? ((v | 0x80808080u) - off4) ^ 0x80808080u : v;
            s.xq[at * MMQ_LDQ + kb * 8 + j] = r.x[it][j];
        }
        s.wd[at * MMQ_KB + kb] = r.w[it].d, s.wm[at * MMQ_KB + kb] = r.w[it].m;
        s.xd[at * MMQ_KB + kb] = r.xd[it], s.xs[at * MMQ_KB + kb] = r.xs[it];
    }
}

/* Warp (wm, wn)'s 32 x 32 quarter over block kb of the stage in s: the MMAs, then the float
 * steps of the GEMV (k_gemv_q) for each of the lane's 32 sums: the integer already less the
 * offset's term (mmq_store), times d * dx; Q5_1's m * dx * sum (the sums and mins read only
 * then: a branch uniform over the grid). */
static __device__ __forceinline__ void mmq_block(const mmq_tiles &s, int kb, float acc[2][4][4],
                                                 int wm, int wn, int q51) {
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    uint32_t a[2][4], bq[4][2];
    float wd[2][2], wmn[2][2], xd[4][2];
    int xs[4][2];
    SOL_UNROLL
    for (int i = 0; i < 2; i++) {
        int row = wm + 16 * i + g;
        const uint32_t *p = s.wq + row * MMQ_LDQ + kb * 8 + t;
        a[i][0] = p[0], a[i][1] = p[8 * MMQ_LDQ], a[i][2] = p[4], a[i][3] = p[8 * MMQ_LDQ + 4];
        SOL_UNROLL
        for (int h = 0; h < 2; h++) {
            wd[i][h] = s.wd[(row + 8 * h) * MMQ_KB + kb];
            wmn[i][h] = q51 ? s.wm[(row + 8 * h) * MMQ_KB + kb] : 0.0f;
        }
    }
    SOL_UNROLL
    for (int j = 0; j < 4; j++) {
        const uint32_t *p = s.xq + (wn + 8 * j + g) * MMQ_LDQ + kb * 8 + t;
        bq[j][0] = p[0], bq[j][1] = p[4];
        SOL_UNROLL
        for (int c = 0; c < 2; c++) {
            int tok = wn + 8 * j + 2 * t + c;
            xd[j][c] = s.xd[tok * MMQ_KB + kb], xs[j][c] = q51 ? s.xs[tok * MMQ_KB + kb] : 0;
        }
    }
    SOL_UNROLL
    for (int i = 0; i < 2; i++)
        SOL_UNROLL
    for (int j = 0; j < 4; j++) {
        int d[4] = {0, 0, 0, 0};
        sol_mma_16832_s8(d, a[i], bq[j]);
        SOL_UNROLL
        for (int e = 0; e < 4; e++) { /* e: row g + 8 (e / 2), token 2t + e % 2 */
            int h = e / 2, c = e % 2;
            acc[i][j][e] += (float)d[e] * (wd[i][h] * xd[j][c]);
            if (q51) acc[i][j][e] += wmn[i][h] * xd[j][c] * (float)xs[j][c];
        }
    }
}

static __global__ void __launch_bounds__(MMQ_THREADS, 4)
    k_mmq_gemm(sol_cuda_wt w, mmq_in in, float *y, int M, int n, int K, int ldy, int add) {
    sol_grid_dependency();
    SOL_SHARED(mmq_tiles, tiles, [2]);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int m0 = blockIdx.x * MMQ_BM, t0 = blockIdx.y * MMQ_BN, nb = K / 32;
    int wm = (warp % 2) * 32, wn = (warp / 2) * 32;
    uint32_t off4 = w.type == SOL_CUDA_Q4_0   ? 0x08080808u
                    : w.type == SOL_CUDA_Q5_0 ? 0x10101010u
                                              : 0;
    int q51 = w.type == SOL_CUDA_Q5_1;
    float acc[2][4][4] = {}; /* registers: every index is a constant */
    mmq_regs r;
    mmq_load(w, in, r, m0, t0, 0, M, n, nb);
    mmq_store(r, tiles[0], off4);
    __syncthreads(); /* the first stage is whole */
    for (int b0 = 0, st = 0; b0 < nb; b0 += MMQ_KB, st ^= 1) {
        int more = b0 + MMQ_KB < nb;
        if (more) mmq_load(w, in, r, m0, t0, b0 + MMQ_KB, M, n, nb); /* in flight meanwhile */
        for (int kb = 0; kb < MMQ_KB && b0 + kb < nb; kb++)
            mmq_block(tiles[st], kb, acc, wm, wn, q51);
        /* the other buffer was last read before the previous barrier: free to overwrite */
        if (more) mmq_store(r, tiles[st ^ 1], off4);
        __syncthreads(); /* the next stage is whole, and this one read by every warp */
    }
    int g = lane / 4, t = lane % 4;
    SOL_UNROLL
    for (int i = 0; i < 2; i++)
        SOL_UNROLL
    for (int j = 0; j < 4; j++)
        SOL_UNROLL
    for (int e = 0; e < 4; e++) {
        int m = m0 + wm + 16 * i + g + 8 * (e / 2), tok = t0 + wn + 8 * j + 2 * t + e % 2;
        if (m < M && tok < n) {
            float *p = y + (size_t)tok * ldy + m;
            *p = add ? *p + acc[i][j][e] : acc[i][j][e];
        }
    }
}

/* y (ldy floats a token) (+)= x W^T, x given as gemv_quantize's Q8_0 of n x cols in scratch
 * (sol_cuda_gemv_scratch_bytes(n, cols)), W of a type whose GEMV reads Q8_0 (gemv_act). */
extern "C" int SOL_CUDA_FN(mmq_gemm)(sol_cuda_wt w, const void *scratch, float *y, int n, int ldy,
                                     int add, void *stream) {
    if (SOL_CUDA_FN(gemv_act)(w.type) != SOL_CUDA_ACT_Q8_0) return -ENOTSUP;
    if (w.split != sol_cuda_wants_split(w.type) || w.cols % 32 || n < 1 || ldy < w.rows)
        return -EINVAL;
    qx a = split_scratch(scratch, n, w.cols, 32);
    mmq_in in = {a.q, a.d, (const int32_t *)a.s};
    dim3 grid((unsigned)((w.rows + MMQ_BM - 1) / MMQ_BM), (unsigned)((n + MMQ_BN - 1) / MMQ_BN));
    SOL_LAUNCH(k_mmq_gemm, grid, dim3(MMQ_THREADS), 0, stream, w, in, y, (int)w.rows, n,
               (int)w.cols, ldy, add);
    return 0;
}
