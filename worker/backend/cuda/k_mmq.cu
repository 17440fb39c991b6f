/* k_mmq: the batch GEMMs on int8 tensor cores, y (+)= x W^T past the GEMV sizes, as llama.cpp's
 * MMQ, on the decode GEMV's activations (SOL_CUDA_GEMM=int8; the F16 tiles of k_mma.cu are the
 * default while the performance model predicts them faster: docs/backend.md, "Matmul").
 * k_mmq_gemm takes the weights whose GEMV reads Q8_0 (Q4_0, Q5_0, Q5_1, Q8_0, MXFP4); k_mmq_kq the
 * K-quants (further down).
 *
 * x is quantized once (gemv_quantize: the GEMV's and the CPU's Q8_0), so a 32-block's dot is
 * an exact int32 from mma.sync m16n8k32 (s8 x s8: the GEMV's __dp4a sum, the same integer),
 * followed by the GEMV's float step for the block: (dot - off * sum) * (d * dx), Q5_1's
 * m * dx * sum, blocks in k order (the offset taken off the quants in shared memory, so the
 * MMA's integer is dot - off * sum itself). No F16 rounding of weights or activations (k_mma.cu's
 * path): the prompt's sums are the decode GEMV's up to the order of the float
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

/* A warp's sums (2 x NT tiles of 16 x 8) to y (tokens t0 + wn.., rows m0 + wm..): stored, or
 * added for matmul_add. */
template <int NT>
static __device__ __forceinline__ void mmq_store_y(const float acc[2][NT][4], float *y, int m0,
                                                   int t0, int wm, int wn, int M, int n, int ldy,
                                                   int add) {
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    SOL_UNROLL
    for (int i = 0; i < 2; i++)
        SOL_UNROLL
    for (int j = 0; j < NT; j++)
        SOL_UNROLL
    for (int e = 0; e < 4; e++) {
        int m = m0 + wm + 16 * i + g + 8 * (e / 2), tok = t0 + wn + 8 * j + 2 * t + e % 2;
        if (m < M && tok < n) {
            float *p = y + (size_t)tok * ldy + m;
            *p = add ? *p + acc[i][j][e] : acc[i][j][e];
        }
    }
}

static __global__ void __launch_bounds__(MMQ_THREADS, 4)
    k_mmq_gemm(sol_cuda_wt w, mmq_in in, float *y, int M, int n, int K, int ldy, int add) {
    sol_grid_dependency();
    SOL_SHARED(mmq_tiles, tiles, [2]);
    int warp = threadIdx.x / 32;
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
    mmq_store_y<4>(acc, y, m0, t0, wm, wn, M, n, ldy, add);
}

/* ---- Q4_K and Q5_K against Q8_K activations ----
 * A stage is one 256-column super-block (single-buffered: its tiles take 40 KB; the blocks an
 * SM holds hide each other's loads). Per sub-block j of 32 columns one MMA gives the exact dot,
 * which its 6-bit scale multiplies into the super-block's integer is (kq_dot.h's, exact); a
 * second MMA, of the same activations against the row's min m_j in every byte, accumulates
 * ms = sum_j m_j * (the sum of j's quants): the GEMV's integer from the 16-sums, made on the
 * tensor cores instead of 8 multiply-adds a sum on the CUDA cores. Then the GEMV's one float
 * term a super-block, x_d * (d * is - dmin * ms). 8 warps of 32 rows x 16 tokens: the two
 * integers a sum would spill at 4 warps' 32 x 32. */
enum {
    MMQK_LD = 256 / 4 + 4, /* words of a shared row: 68, rows 4 banks apart as MMQ_LDQ */
    MMQK_THREADS = 256,    /* 8 warps, each 32 rows x 16 tokens: half of k_mmq_gemm's sums a */
    MMQK_NT = 2            /* thread, as the super-block's integers double them (no spills) */
};

struct kq45 {
    uint32_t wq[MMQ_BM * MMQK_LD], xq[MMQ_BN * MMQK_LD];
    int sc[MMQ_BM * 8], mn[MMQ_BM * 8];
    float d[MMQ_BM], dmin[MMQ_BM], xd[MMQ_BN];
};

struct mmqk_in {
    const int8_t *kq;
    const float *kd;
};

/* Super-block b of tokens t0.. (Q8_K) into shared memory: 16-byte chunks (128-bit loads) and
 * the tokens' scales; zeros past n. */
static __device__ __forceinline__ void mmqk_load_x(const mmqk_in &in, uint32_t *xq, float *xd,
                                                   int t0, int b, int n, int nb) {
    SOL_UNROLL
    for (int it = 0; it < MMQ_BN * 16 / MMQK_THREADS; it++) { /* 64 tokens x 16 chunks of 16 B */
        int i = (int)threadIdx.x + it * MMQK_THREADS, tk = i / 16, ch = i % 16;
        uint32_t v[4] = {0, 0, 0, 0};
        size_t tb = (size_t)(t0 + tk) * nb + b;
        if (t0 + tk < n) sol_ld128(v, in.kq + tb * 256 + 16 * ch);
        SOL_UNROLL
        for (int k = 0; k < 4; k++)
            xq[tk * MMQK_LD + 4 * ch + k] = v[k];
    }
    if (threadIdx.x < MMQ_BN) { /* the tokens' scales */
        int tk = (int)threadIdx.x;
        xd[tk] = t0 + tk < n ? in.kd[(size_t)(t0 + tk) * nb + b] : 0.0f;
    }
}

/* Super-block b of rows m0.. and tokens t0.. into shared memory: each thread unpacks two pairs
 * of sub-blocks of one row (the GEMV's loads: 128-bit quants, Q5_K's high bits, the scale words)
 * and copies a token's 16-byte chunks (128-bit loads) and 16-sums. Outside M or n: zeros. */
static __device__ __forceinline__ void sb_load(const sol_cuda_wt &w, const mmqk_in &in, kq45 &s,
                                               int m0, int t0, int b, int M, int n, int nb) {
    int q5 = w.type == SOL_CUDA_Q5_K;
    SOL_UNROLL
    for (int it = 0; it < MMQ_BM * 4 / MMQK_THREADS; it++) {
        int i = (int)threadIdx.x + it * MMQK_THREADS, r = i % MMQ_BM, c = i / MMQ_BM; /* pair c */
        uint32_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0}, h[8] = {0, 0, 0, 0, 0, 0, 0, 0}, dm = 0;
        int sc1 = 0, m1 = 0, sc2 = 0, m2 = 0;
        if (m0 + r < M) {
            const unsigned char *blk = (const unsigned char *)w.data +
                                       (size_t)(m0 + r) * w.row_bytes +
                                       (size_t)b * (q5 ? 176 : 144);
            uint32_t s0 = sol_ld32(blk + 4), s1 = sol_ld32(blk + 8), s2 = sol_ld32(blk + 12);
            kq_scale_min_w(2 * c, s0, s1, s2, &sc1, &m1);
            kq_scale_min_w(2 * c + 1, s0, s1, s2, &sc2, &m2);
            dm = sol_ld32(blk);
            const unsigned char *qs = blk + (q5 ? 48 : 16) + 32 * c;
            sol_ld128(v, qs);
            sol_ld128(v + 4, qs + 16);
            if (q5) {
                sol_ld128(h, blk + 16);
                sol_ld128(h + 4, blk + 32);
            }
        }
        uint32_t *lo = s.wq + r * MMQK_LD + 16 * c, *hi = lo + 8;
        SOL_UNROLL
        for (int k = 0; k < 8; k++) { /* as gemv_kq45: nibbles, Q5_K's bit 2c / 2c + 1 to bit 4 */
            lo[k] = (v[k] & 0x0F0F0F0Fu) | ((h[k] >> (2 * c)) & 0x01010101u) << 4;
            hi[k] = ((v[k] >> 4) & 0x0F0F0F0Fu) | ((h[k] >> (2 * c + 1)) & 0x01010101u) << 4;
        }
        s.sc[r * 8 + 2 * c] = sc1, s.mn[r * 8 + 2 * c] = m1;
        s.sc[r * 8 + 2 * c + 1] = sc2, s.mn[r * 8 + 2 * c + 1] = m2;
        if (c == 0) {
            s.d[r] = sol_f16_to_f32((uint16_t)dm);
            s.dmin[r] = sol_f16_to_f32((uint16_t)(dm >> 16));
        }
    }
    mmqk_load_x(in, s.xq, s.xd, t0, b, n, nb);
}

/* The super-block's float term, the GEMV's: acc += x_d * (d * is - dmin * ms) for each of the
 * lane's sums (rows wm.., tokens wn.. of the tile). */
static __device__ __forceinline__ void sb_term(float acc[2][MMQK_NT][4],
                                               const int is[2][MMQK_NT][4],
                                               const int ms[2][MMQK_NT][4], const float *xd,
                                               const float *d, const float *dmin, int wm, int wn) {
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    SOL_UNROLL
    for (int i = 0; i < 2; i++)
        SOL_UNROLL
    for (int jt = 0; jt < MMQK_NT; jt++)
        SOL_UNROLL
    for (int e = 0; e < 4; e++) {
        int row = wm + 16 * i + g + 8 * (e / 2), tok = wn + 8 * jt + 2 * t + e % 2;
        acc[i][jt][e] += xd[tok] * (d[row] * (float)is[i][jt][e] - dmin[row] * (float)ms[i][jt][e]);
    }
}

/* Warp (wm, wn)'s share of the super-block in s: is per sum from the MMAs and the scales,
 * ms from the mins' MMAs, then the float term into acc. */
static __device__ __forceinline__ void sb_block(const kq45 &s, float acc[2][MMQK_NT][4], int wm,
                                                int wn) {
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int is[2][MMQK_NT][4] = {}, ms[2][MMQK_NT][4] = {};
    SOL_NO_UNROLL
    for (int j = 0; j < 8; j++) {
        uint32_t bq[MMQK_NT][2];
        SOL_UNROLL
        for (int jt = 0; jt < MMQK_NT; jt++) {
            const uint32_t *p = s.xq + (wn + 8 * jt + g) * MMQK_LD + 8 * j + t;
            bq[jt][0] = p[0], bq[jt][1] = p[4];
        }
        SOL_UNROLL
        for (int i = 0; i < 2; i++) { /* one row tile's fragments live at a time (sm_80 spilled) */
            int row = wm + 16 * i + g;
            const uint32_t *p = s.wq + row * MMQK_LD + 8 * j + t;
            uint32_t a[4] = {p[0], p[8 * MMQK_LD], p[4], p[8 * MMQK_LD + 4]}, am[4];
            int sc[2] = {s.sc[row * 8 + j], s.sc[(row + 8) * 8 + j]};
            /* the min of j in every byte of the row: its MMA adds m_j * (the sum of j's quants) */
            am[0] = am[2] = (uint32_t)s.mn[row * 8 + j] * 0x01010101u;
            am[1] = am[3] = (uint32_t)s.mn[(row + 8) * 8 + j] * 0x01010101u;
            SOL_UNROLL
            for (int jt = 0; jt < MMQK_NT; jt++) {
                int d[4] = {0, 0, 0, 0};
                sol_mma_16832_s8(d, a, bq[jt]);
                sol_mma_16832_s8(ms[i][jt], am, bq[jt]);
                SOL_UNROLL
                for (int e = 0; e < 4; e++)
                    is[i][jt][e] += sc[e / 2] * d[e];
            }
        }
    }
    sb_term(acc, is, ms, s.xd, s.d, s.dmin, wm, wn);
}

/* ---- Q6_K against Q8_K activations ----
 * As kq45, but a scale every 16 columns: per 32-column group j two m16n8k16 MMAs, one a
 * half, each scaled into the super-block's integer; the quants' offset 32 is taken off each byte
 * as it is stored (so the MMA's integer is kq_dot.h's dot - 32 * sum); then the GEMV's float
 * term x_d * d * is. */
struct q6k {
    uint32_t wq[MMQ_BM * MMQK_LD], xq[MMQ_BN * MMQK_LD];
    int sc[MMQ_BM * 16];
    float d[MMQ_BM], xd[MMQ_BN];
};

/* Each thread unpacks two 32-element groups of a row (q6k_group: the GEMV's loads) less 32 per
 * byte: (b | 0x80) - 32 cannot borrow (b <= 63) and ^ 0x80 makes 128 + (b - 32) the signed byte
 * b - 32. */
static __device__ __forceinline__ void sb_load(const sol_cuda_wt &w, const mmqk_in &in, q6k &s,
                                               int m0, int t0, int b, int M, int n, int nb) {
    SOL_UNROLL
    for (int it = 0; it < MMQ_BM * 8 / MMQK_THREADS; it++) {
        int i = (int)threadIdx.x + it * MMQK_THREADS, r = i % MMQ_BM, grp = i / MMQ_BM;
        int sc0 = 0, sc1 = 0;
        uint32_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        float d = 0.0f;
        if (m0 + r < M) q6k_group(w, (size_t)(m0 + r) * nb + b, grp, v, &sc0, &sc1, &d);
        SOL_UNROLL
        for (int k = 0; k < 8; k++)
            s.wq[r * MMQK_LD + 8 * grp + k] = ((v[k] | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
        s.sc[r * 16 + 2 * grp] = sc0, s.sc[r * 16 + 2 * grp + 1] = sc1;
        if (grp == 0) s.d[r] = d;
    }
    mmqk_load_x(in, s.xq, s.xd, t0, b, n, nb);
}

static __device__ __forceinline__ void sb_block(const q6k &s, float acc[2][MMQK_NT][4], int wm,
                                                int wn) {
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int is[2][MMQK_NT][4] = {};
    for (int j = 0; j < 8; j++)
        SOL_UNROLL
    for (int hf = 0; hf < 2; hf++) { /* 16 columns, one scale */
        uint32_t a[2][2], bq[MMQK_NT][1];
        int sc[2][2];
        SOL_UNROLL
        for (int i = 0; i < 2; i++) {
            int row = wm + 16 * i + g;
            const uint32_t *p = s.wq + row * MMQK_LD + 8 * j + 4 * hf + t;
            a[i][0] = p[0], a[i][1] = p[8 * MMQK_LD];
            sc[i][0] = s.sc[row * 16 + 2 * j + hf], sc[i][1] = s.sc[(row + 8) * 16 + 2 * j + hf];
        }
        SOL_UNROLL
        for (int jt = 0; jt < MMQK_NT; jt++)
            bq[jt][0] = s.xq[(wn + 8 * jt + g) * MMQK_LD + 8 * j + 4 * hf + t];
        SOL_UNROLL
        for (int i = 0; i < 2; i++)
            SOL_UNROLL
        for (int jt = 0; jt < MMQK_NT; jt++) {
            int d[4] = {0, 0, 0, 0};
            sol_mma_16816_s8(d, a[i], bq[jt]);
            SOL_UNROLL
            for (int e = 0; e < 4; e++)
                is[i][jt][e] += sc[i][e / 2] * d[e];
        }
    }
    const int none[2][MMQK_NT][4] = {}; /* no mins: d * is - d * 0 is d * is, bit for bit */
    sb_term(acc, is, none, s.xd, s.d, s.d, wm, wn);
}

/* The K-quant GEMM: a super-block a stage, T (kq45 or q6k) saying how it is loaded (sb_load) and
 * multiplied (sb_block). */
template <class T>
static __global__ void __launch_bounds__(MMQK_THREADS, 2)
    k_mmq_kq(sol_cuda_wt w, mmqk_in in, float *y, int M, int n, int K, int ldy, int add) {
    sol_grid_dependency();
    SOL_SHARED(T, tiles, );
    int warp = threadIdx.x / 32;
    int m0 = blockIdx.x * MMQ_BM, t0 = blockIdx.y * MMQ_BN, nb = K / 256;
    int wm = (warp % 2) * 32, wn = (warp / 2) * 8 * MMQK_NT;
    float acc[2][MMQK_NT][4] = {};
    for (int b = 0; b < nb; b++) {
        sb_load(w, in, tiles, m0, t0, b, M, n, nb);
        __syncthreads(); /* the super-block's tiles are whole */
        sb_block(tiles, acc, wm, wn);
        __syncthreads(); /* every warp has read them before the next super-block's loads */
    }
    mmq_store_y<MMQK_NT>(acc, y, m0, t0, wm, wn, M, n, ldy, add);
}

/* The activation kind the int8 GEMM takes for type: its GEMV's (SOL_CUDA_ACT_FLOAT for the
 * float types, which it does not take). */
extern "C" int SOL_CUDA_FN(mmq_act)(int type) {
    return SOL_CUDA_FN(gemv_act)(type);
}

/* y (ldy floats a token) (+)= x W^T, x given as gemv_quantize's quantization (of kind
 * mmq_act(type)) of n x cols in scratch (sol_cuda_gemv_scratch_bytes(n, cols)). */
extern "C" int SOL_CUDA_FN(mmq_gemm)(sol_cuda_wt w, const void *scratch, float *y, int n, int ldy,
                                     int add, void *stream) {
    int act = SOL_CUDA_FN(mmq_act)(w.type), be = act == SOL_CUDA_ACT_Q8_K ? 256 : 32;
    if (act == SOL_CUDA_ACT_FLOAT) return -ENOTSUP;
    if (w.split != sol_cuda_wants_split(w.type) || w.cols % be || n < 1 || ldy < w.rows)
        return -EINVAL;
    qx a = split_scratch(scratch, n, w.cols, be);
    dim3 grid((unsigned)((w.rows + MMQ_BM - 1) / MMQ_BM), (unsigned)((n + MMQ_BN - 1) / MMQ_BN));
    if (act == SOL_CUDA_ACT_Q8_K) {
        mmqk_in in = {a.q, a.d}; /* the 16-sums are not read: the MMAs make them */
        if (w.type == SOL_CUDA_Q6_K)
            SOL_LAUNCH(k_mmq_kq<q6k>, grid, dim3(MMQK_THREADS), 0, stream, w, in, y, (int)w.rows, n,
                       (int)w.cols, ldy, add);
        else
            SOL_LAUNCH(k_mmq_kq<kq45>, grid, dim3(MMQK_THREADS), 0, stream, w, in, y, (int)w.rows,
                       n, (int)w.cols, ldy, add);
        return 0;
    }
    mmq_in in = {a.q, a.d, (const int32_t *)a.s};
    SOL_LAUNCH(k_mmq_gemm, grid, dim3(MMQ_THREADS), 0, stream, w, in, y, (int)w.rows, n,
               (int)w.cols, ldy, add);
    return 0;
}
