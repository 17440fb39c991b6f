/* k_mma: the batch GEMM of quantized weights on tensor cores, y (+)= x W^T for batches past the
 * GEMV kernels: each block dequantizes a tile of weight rows to F16 in shared memory and
 * multiplies it with mma.sync, so no F16 copy of a matrix is ever written to memory.
 *
 * A block is 4 warps and owns MMA_BM weight rows x MMA_BN tokens; per MMA_BK columns it
 *  - dequantizes its 64 x 32 weights (a thread: half a 32-block of one row, sol_dequant16: two
 *    128-bit loads and the block's scales once; rounded to F16, as the F16 path before it)
 *    and copies the tokens' F16 activations (two 128-bit loads a thread) into shared memory;
 *  - each warp multiplies its 32 x 32 quarter: 2 x 4 mma.m16n8k16 per 16 columns, sums in f32
 *    registers (32 a thread).
 * Shared rows are padded to 40 halves (20 words): the fragment loads of a warp (rows g, words t)
 * fall on 32 different banks. The weight tile is read once per token tile: at n = 64 tokens a
 * matrix is read once, as by the GEMV, instead of dequantized to a full F16 copy and re-read. */
#include <errno.h>

#include "dequant.cuh"
#include "mma.cuh"

enum {
    MMA_BM = 64,         /* weight rows of a block */
    MMA_BN = 64,         /* tokens of a block */
    MMA_BK = 32,         /* columns per step: one block of every quantized type's 32-element runs */
    MMA_LD = MMA_BK + 8, /* shared row stride in halves (bank-conflict-free fragment loads) */
    MMA_THREADS = 128
};

/* Thread tid's share of the tiles: row tid / 2, columns (tid % 2) * 16 .. + 16. */
static __device__ __forceinline__ void mma_load_tiles(const sol_cuda_wt &w, const uint16_t *xh,
                                                      uint16_t *ws, uint16_t *xs, int m0, int t0,
                                                      int k0, int M, int n, int K) {
    int r = threadIdx.x / 2, c = (threadIdx.x % 2) * 16;
    uint32_t *wd = (uint32_t *)(ws + r * MMA_LD + c), *xd = (uint32_t *)(xs + r * MMA_LD + c);
    float f[16];
    if (m0 + r < M) sol_dequant16(w, m0 + r, k0 + c, f);
    SOL_UNROLL
    for (int j = 0; j < 8; j++)
        wd[j] = m0 + r < M ? (uint32_t)sol_f32_to_f16(f[2 * j]) |
                                 (uint32_t)sol_f32_to_f16(f[2 * j + 1]) << 16
                           : 0u;
    uint32_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (t0 + r < n) {
        const uint16_t *src = xh + (size_t)(t0 + r) * K + k0 + c;
        sol_ld128(v, src);
        sol_ld128(v + 4, src + 8);
    }
    SOL_UNROLL
    for (int j = 0; j < 8; j++)
        xd[j] = v[j];
}

/* Warp w's 32 x 32 quarter over the MMA_BK columns in shared memory. */
static __device__ __forceinline__ void mma_tile(const uint16_t *ws, const uint16_t *xs,
                                                float acc[2][4][4], int wm, int wn) {
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    SOL_UNROLL
    for (int kk = 0; kk < MMA_BK; kk += 16) {
        uint32_t a[2][4], b[4][2];
        SOL_UNROLL
        for (int i = 0; i < 2; i++) {
            const uint16_t *p = ws + (wm + 16 * i + g) * MMA_LD + kk + 2 * t;
            a[i][0] = *(const uint32_t *)p;
            a[i][1] = *(const uint32_t *)(p + 8 * MMA_LD);
            a[i][2] = *(const uint32_t *)(p + 8);
            a[i][3] = *(const uint32_t *)(p + 8 * MMA_LD + 8);
        }
        SOL_UNROLL
        for (int j = 0; j < 4; j++) {
            const uint16_t *p = xs + (wn + 8 * j + g) * MMA_LD + kk + 2 * t;
            b[j][0] = *(const uint32_t *)p;
            b[j][1] = *(const uint32_t *)(p + 8);
        }
        SOL_UNROLL
        for (int i = 0; i < 2; i++)
            SOL_UNROLL
        for (int j = 0; j < 4; j++)
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

static __global__ void __launch_bounds__(MMA_THREADS)
    k_mma_gemm(sol_cuda_wt w, const uint16_t *xh, float *y, int M, int n, int K, int ldy, int add) {
    sol_grid_dependency();
    SOL_SHARED(uint16_t, ws, [MMA_BM * MMA_LD]);
    SOL_SHARED(uint16_t, xs, [MMA_BN * MMA_LD]);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int m0 = blockIdx.x * MMA_BM, t0 = blockIdx.y * MMA_BN;
    int wm = (warp % 2) * 32, wn = (warp / 2) * 32;
    float acc[2][4][4];
    SOL_UNROLL
    for (int i = 0; i < 2; i++)
        SOL_UNROLL
    for (int j = 0; j < 4; j++)
        SOL_UNROLL
    for (int e = 0; e < 4; e++)
        acc[i][j][e] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += MMA_BK) {
        mma_load_tiles(w, xh, ws, xs, m0, t0, k0, M, n, K);
        __syncthreads(); /* the tiles are whole */
        mma_tile(ws, xs, acc, wm, wn);
        __syncthreads(); /* every warp has read them before the next step overwrites them */
    }
    int g = lane / 4, t = lane % 4;
    SOL_UNROLL
    for (int i = 0; i < 2; i++)
        SOL_UNROLL
    for (int j = 0; j < 4; j++) {
        int m = m0 + wm + 16 * i + g, c = t0 + wn + 8 * j + 2 * t;
        mma_store(y, ldy, M, n, m, c, acc[i][j][0], add);
        mma_store(y, ldy, M, n, m, c + 1, acc[i][j][1], add);
        mma_store(y, ldy, M, n, m + 8, c, acc[i][j][2], add);
        mma_store(y, ldy, M, n, m + 8, c + 1, acc[i][j][3], add);
    }
}

/* y (ldy floats a token) (+)= the F16 activations xh (n x K) times W^T, W quantized (any known
 * type but the float ones, in the layout weight_prepare made); K a multiple of 32. */
extern "C" int SOL_CUDA_FN(mma_gemm)(sol_cuda_wt w, const void *xh, float *y, int n, int ldy,
                                     int add, void *stream) {
    if (!sol_cuda_type_known(w.type) || w.type == SOL_CUDA_F32 || w.type == SOL_CUDA_F16 ||
        w.type == SOL_CUDA_BF16)
        return -ENOTSUP;
    if (w.split != sol_cuda_wants_split(w.type) || w.cols % MMA_BK || n < 1 || ldy < w.rows)
        return -EINVAL;
    dim3 grid((unsigned)((w.rows + MMA_BM - 1) / MMA_BM), (unsigned)((n + MMA_BN - 1) / MMA_BN));
    SOL_LAUNCH(k_mma_gemm, grid, dim3(MMA_THREADS), 0, stream, w, (const uint16_t *)xh, y,
               (int)w.rows, n, (int)w.cols, ldy, add);
    return 0;
}
