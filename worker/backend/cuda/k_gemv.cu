/* k_gemv: matmul for decode and verify sizes (n <= 16 tokens), a warp per output row. F16/BF16
 * weights: each lane takes 8 consecutive elements per 128-bit load, every 256th group; F32 (and
 * unaligned rows): every 32nd element; fused multiply-adds, a warp sum per token.
 * Q8_0/Q4_0: x is first quantized to Q8_0 exactly as the CPU backend does; each lane takes every
 * 32nd block and its integer dot, scaled by the two block scales. */
#include <errno.h>

#include "dequant.cuh"
#include "kq_dot.h"
#include "reduce.cuh"

enum { GEMV_WARPS = 4, QUANT_WARPS = 8 };

/* One warp per 32-element block of x (n x K, K a multiple of 32): the CPU backend's Q8_0
 * activations (cpu_matmul.c quantize_x, llama.cpp's x86 rounding: multiplier 127 / amax, halves
 * to even, the scale amax / 127 stored as F16) and the block's sum of quants. */
static __global__ void k_quantize_q8_0(const float *x, int n_blocks, int8_t *xq, float *xd,
                                       int32_t *xs) {
    int blk = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (blk >= n_blocks) return; /* whole warps: blk depends on the warp only */
    float v = x[(size_t)blk * 32 + lane], amax = fabsf(v);
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float dd = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int q = (int)rintf(v * id), s = q;
    xq[(size_t)blk * 32 + lane] = (int8_t)q;
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) {
        xd[blk] = sol_f16_to_f32(sol_f32_to_f16(dd));
        xs[blk] = s;
    }
}

/* Each token's row sum: the warp's lanes reduced, written by lane 0. */
__device__ __forceinline__ void gemv_store(const float *acc, int n, float *y, int rows, int row,
                                           int lane) {
    for (int t = 0; t < n; t++) {
        float s = sol_warp_sum(acc[t]);
        if (lane == 0) y[(size_t)t * rows + row] = s;
    }
}

static __global__ void k_gemv_float(int type, const unsigned char *w, size_t row_bytes, int rows,
                                    int K, const float *x, float *y, int n) {
    int row = (int)(blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)), lane = threadIdx.x & 31;
    if (row >= rows) return;
    const unsigned char *wr = w + (size_t)row * row_bytes;
    float acc[SOL_CUDA_GEMV_MAX_TOKENS] = {};
    for (int k = lane; k < K; k += 32) {
        float wv = sol_dequant_elem(type, wr, k);
        for (int t = 0; t < n; t++)
            acc[t] = fmaf(wv, x[(size_t)t * K + k], acc[t]);
    }
    gemv_store(acc, n, y, rows, row, lane);
}

/* 16 bytes from a 16-byte aligned address: one 128-bit load on the GPU. */
__device__ __forceinline__ void load16(void *dst, const void *src) {
#ifdef __CUDACC__
    *(uint4 *)dst = __ldg((const uint4 *)src);
#else
    memcpy(dst, src, 16);
#endif
}

/* F16/BF16 rows with 128-bit loads: lane l takes elements 8(l + 32i) .. +7 of the row and of
 * each token's x (two 128-bit loads of floats), converted in registers. Needs K % 8 == 0 and
 * 16-byte aligned rows and x (the launcher checks, else k_gemv_float). */
static __global__ void k_gemv_h16(int type, const unsigned char *w, size_t row_bytes, int rows,
                                  int K, const float *x, float *y, int n) {
    int row = (int)(blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)), lane = threadIdx.x & 31;
    if (row >= rows) return;
    const unsigned char *wr = w + (size_t)row * row_bytes;
    float acc[SOL_CUDA_GEMV_MAX_TOKENS] = {};
    for (int g = lane; g < K / 8; g += 32) {
        alignas(16) uint16_t h[8];
        float wv[8];
        load16(h, wr + (size_t)g * 16);
        for (int j = 0; j < 8; j++)
            wv[j] = type == SOL_CUDA_F16 ? sol_f16_to_f32(h[j]) : sol_bf16_to_f32(h[j]);
        for (int t = 0; t < n; t++) {
            alignas(16) float xv[8];
            load16(xv, x + (size_t)t * K + (size_t)g * 8);
            load16(xv + 4, x + (size_t)t * K + (size_t)g * 8 + 4);
            float a = acc[t];
            for (int j = 0; j < 8; j++)
                a = fmaf(wv[j], xv[j], a);
            acc[t] = a;
        }
    }
    gemv_store(acc, n, y, rows, row, lane);
}

/* Integer dot of one Q8_0/Q4_0/Q5_0/Q5_1 weight block with a token's Q8_0 block; the offsets
 * of Q4_0 (8) and Q5_0 (16) are removed through the block's sum of quants (xs). */
/* Four weight bytes at an even address (blocks are 18 or 34 bytes: their quants start 2-byte
 * aligned) as one word, from two 16-bit loads. */
__device__ __forceinline__ int load_q4(const unsigned char *p) {
    return (int)((uint32_t)sol_load_u16(p) | (uint32_t)sol_load_u16(p + 2) << 16);
}

/* Four activation quants: xq blocks are 32 bytes, 4-byte aligned. */
__device__ __forceinline__ int load_x4(const int8_t *p) {
    int v;
    memcpy(&v, p, 4);
    return v;
}

__device__ __forceinline__ int32_t q_block_dot(int type, const unsigned char *b, const int8_t *xq,
                                               int32_t xs) {
    int32_t dot = 0;
    switch (type) {
    case SOL_CUDA_Q8_0: /* 8 words of signed quants against 8 words of x: dp4a */
        for (int i = 0; i < 8; i++)
            dot = __dp4a(load_q4(b + 2 + 4 * i), load_x4(xq + 4 * i), dot);
        return dot;
    case SOL_CUDA_Q4_0: /* low nibbles meet x[0..16), high nibbles x[16..32) */
        for (int i = 0; i < 4; i++) {
            int v = load_q4(b + 2 + 4 * i);
            dot = __dp4a(v & 0x0F0F0F0F, load_x4(xq + 4 * i), dot);
            dot = __dp4a((v >> 4) & 0x0F0F0F0F, load_x4(xq + 16 + 4 * i), dot);
        }
        return dot - 8 * xs;
    case SOL_CUDA_Q5_0:
        for (int j = 0; j < 32; j++)
            dot += q5_quant(b + 2, b + 6, j) * xq[j];
        return dot - 16 * xs;
    default: /* Q5_1: its min is added by the caller */
        for (int j = 0; j < 32; j++)
            dot += q5_quant(b + 4, b + 8, j) * xq[j];
        return dot;
    }
}

__device__ __forceinline__ size_t q_block_bytes(int type) {
    return type == SOL_CUDA_Q8_0   ? 34
           : type == SOL_CUDA_Q4_0 ? 18
           : type == SOL_CUDA_Q5_0 ? 22
                                   : 24;
}

/* The CPU backend's float steps per block: dot * (d * dx), and Q5_1's m * dx * sum. */
static __global__ void k_gemv_q(int type, const unsigned char *w, size_t row_bytes, int rows, int K,
                                const int8_t *xq, const float *xd, const int32_t *xs, float *y,
                                int n) {
    int row = (int)(blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)), lane = threadIdx.x & 31;
    if (row >= rows) return;
    int nb = K / 32;
    size_t bb = q_block_bytes(type);
    const unsigned char *wr = w + (size_t)row * row_bytes;
    float acc[SOL_CUDA_GEMV_MAX_TOKENS] = {};
    for (int b = lane; b < nb; b += 32) {
        const unsigned char *blk = wr + (size_t)b * bb;
        float dw = sol_f16_to_f32(sol_load_u16(blk));
        float mw = type == SOL_CUDA_Q5_1 ? sol_f16_to_f32(sol_load_u16(blk + 2)) : 0.0f;
        for (int t = 0; t < n; t++) {
            size_t tb = (size_t)t * nb + b;
            acc[t] += (float)q_block_dot(type, blk, xq + tb * 32, xs[tb]) * (dw * xd[tb]);
            if (type == SOL_CUDA_Q5_1) acc[t] += mw * xd[tb] * (float)xs[tb];
        }
    }
    gemv_store(acc, n, y, rows, row, lane);
}

/* ---- K-quants against Q8_K activations ---- */

/* One warp per 256-element block: ggml's Q8_K (iscale = -127 / the first element of largest
 * magnitude, sign kept; quants rounded half to even, capped at 127; d = 1 / iscale; sums per 16).
 * Lane i holds elements 8i..8i+7. */
static __global__ void k_quantize_q8_k(const float *x, int n_blocks, int8_t *kq, float *kd,
                                       int16_t *ks) {
    int blk = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (blk >= n_blocks) return;
    const float *xb = x + (size_t)blk * 256 + lane * 8;
    float amax = 0.0f, mx = 0.0f;
    int at = 1 << 30;
    for (int j = 0; j < 8; j++)
        if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), mx = xb[j], at = lane * 8 + j;
    for (int o = 16; o > 0; o >>= 1) { /* the largest magnitude, the first one on ties */
        float a = __shfl_xor_sync(0xffffffffu, amax, o), m = __shfl_xor_sync(0xffffffffu, mx, o);
        int i = __shfl_xor_sync(0xffffffffu, at, o);
        if (a > amax || (a == amax && i < at)) amax = a, mx = m, at = i;
    }
    float iscale = amax != 0.0f ? -127.0f / mx : 0.0f;
    int sum = 0;
    for (int j = 0; j < 8; j++) {
        int v = (int)rintf(xb[j] * iscale);
        v = v > 127 ? 127 : v;
        kq[(size_t)blk * 256 + lane * 8 + j] = (int8_t)v;
        sum += v;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1); /* two lanes make a group of 16 */
    if ((lane & 1) == 0) ks[(size_t)blk * 16 + lane / 2] = (int16_t)sum;
    if (lane == 0) kd[blk] = amax != 0.0f ? 1.0f / iscale : 0.0f;
}

/* Q4_K/Q5_K: a lane per (super-block, pair of 32-element sub-blocks), so a row of K = 2048
 * (8 super-blocks) keeps all 32 lanes busy; quants dotted as 32-bit words through __dp4a (the
 * 128 quant bytes start 16 bytes into a 144/176-byte block: 4-byte aligned). The integers are
 * kq_dot.h's, split per pair and added back per super-block across four lanes. */
__device__ __forceinline__ int load_w4(const unsigned char *p) {
    int v;
    memcpy(&v, p, 4);
    return v;
}

static __global__ void k_gemv_kq45(int type, const unsigned char *w, size_t row_bytes, int rows,
                                   int K, const int8_t *kq, const float *kd, const int16_t *ks,
                                   float *y, int n) {
    int row = (int)(blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)), lane = threadIdx.x & 31;
    if (row >= rows) return; /* whole warps: row depends on the warp only */
    int nb = K / 256, q5 = type == SOL_CUDA_Q5_K;
    size_t bb = q5 ? 176 : 144;
    const unsigned char *wr = w + (size_t)row * row_bytes;
    float acc[SOL_CUDA_GEMV_MAX_TOKENS] = {};
    for (int base = 0; base < nb * 4; base += 32) { /* every lane runs each round: shuffles */
        int it = base + lane, on = it < nb * 4, b = it / 4, c = it % 4, sc1 = 0, m1 = 0, sc2 = 0,
            m2 = 0;
        const unsigned char *blk = wr + (size_t)b * bb;
        int lo[8] = {0}, hi[8] = {0};
        float d = 0.0f, dmin = 0.0f;
        if (on) {
            const unsigned char *qs = blk + (q5 ? 48 : 16) + 32 * c, *qh = blk + 16;
            sol_kq_scale_min(2 * c, blk + 4, &sc1, &m1);
            sol_kq_scale_min(2 * c + 1, blk + 4, &sc2, &m2);
            d = sol_f16_to_f32(sol_load_u16(blk));
            dmin = sol_f16_to_f32(sol_load_u16(blk + 2));
            for (int i = 0; i < 8; i++) {
                int v = load_w4(qs + 4 * i);
                lo[i] = v & 0x0F0F0F0F;
                hi[i] = (v >> 4) & 0x0F0F0F0F;
                if (q5) { /* bits 2c (low nibbles) and 2c + 1 (high) of each qh byte, to bit 4 */
                    int h = load_w4(qh + 4 * i);
                    lo[i] |= ((h >> (2 * c)) & 0x01010101) << 4;
                    hi[i] |= ((h >> (2 * c + 1)) & 0x01010101) << 4;
                }
            }
        }
        for (int t = 0; t < n; t++) {
            size_t tb = (size_t)t * nb + b;
            int is = 0, ms = 0;
            if (on) {
                const int8_t *q = kq + tb * 256 + 64 * c;
                const int16_t *bs = ks + tb * 16 + 4 * c;
                int s1 = 0, s2 = 0;
                for (int i = 0; i < 8; i++) {
                    s1 = __dp4a(lo[i], load_x4(q + 4 * i), s1);
                    s2 = __dp4a(hi[i], load_x4(q + 32 + 4 * i), s2);
                }
                is = sc1 * s1 + sc2 * s2;
                ms = m1 * (bs[0] + bs[1]) + m2 * (bs[2] + bs[3]);
            }
            /* the four pairs of a super-block sit in four neighbouring lanes: exact integer
             * sums, then the super-block's one float term, as the CPU's cpu_kq_term */
            for (int o = 1; o < 4; o <<= 1) {
                is += __shfl_xor_sync(0xffffffffu, is, o);
                ms += __shfl_xor_sync(0xffffffffu, ms, o);
            }
            if (on && c == 0) acc[t] += kd[tb] * (d * (float)is - dmin * (float)ms);
        }
    }
    gemv_store(acc, n, y, rows, row, lane);
}

/* Q6_K: a lane per super-block; one float term per super-block as the CPU's cpu_kq_term. */
static __global__ void k_gemv_kq(int type, const unsigned char *w, size_t row_bytes, int rows,
                                 int K, const int8_t *kq, const float *kd, const int16_t *ks,
                                 float *y, int n) {
    int row = (int)(blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)), lane = threadIdx.x & 31;
    if (row >= rows) return;
    int nb = K / 256;
    size_t bb = type == SOL_CUDA_Q4_K ? 144 : type == SOL_CUDA_Q5_K ? 176 : 210;
    const unsigned char *wr = w + (size_t)row * row_bytes;
    float acc[SOL_CUDA_GEMV_MAX_TOKENS] = {};
    for (int b = lane; b < nb; b += 32) {
        const unsigned char *blk = wr + (size_t)b * bb;
        for (int t = 0; t < n; t++) {
            size_t tb = (size_t)t * nb + b;
            const int8_t *q = kq + tb * 256;
            const int16_t *bs = ks + tb * 16;
            int32_t isum = 0, msum = 0;
            float d, dmin = 0.0f;
            if (type == SOL_CUDA_Q6_K) {
                isum = sol_kq6_sum(blk, blk + 128, (const int8_t *)(blk + 192), q, bs);
                d = sol_f16_to_f32(sol_load_u16(blk + 208));
            } else {
                d = sol_f16_to_f32(sol_load_u16(blk));
                dmin = sol_f16_to_f32(sol_load_u16(blk + 2));
                sol_kq45_sums(blk + 4, blk + (type == SOL_CUDA_Q5_K ? 48 : 16),
                              type == SOL_CUDA_Q5_K ? blk + 16 : nullptr, q, bs, &isum, &msum);
            }
            acc[t] += kd[tb] * (d * (float)isum - dmin * (float)msum);
        }
    }
    gemv_store(acc, n, y, rows, row, lane);
}

static bool is_kquant(int type) {
    return type == SOL_CUDA_Q4_K || type == SOL_CUDA_Q5_K || type == SOL_CUDA_Q6_K;
}

/* Quantized activations in the scratch: n x K quants, then a float scale per block, then the
 * sums (int32 per Q8_0 block, or int16 per 16 elements of a Q8_K block). */
struct qx {
    int8_t *q;
    float *d;
    void *s;
    int n_blocks;
};

static qx split_scratch(void *scratch, int n, int K, int block_elems) {
    qx r;
    r.n_blocks = n * (K / block_elems);
    r.q = (int8_t *)scratch;
    r.d = (float *)(r.q + (size_t)n * K);
    r.s = r.d + r.n_blocks;
    return r;
}

extern "C" size_t SOL_CUDA_FN(gemv_scratch_bytes)(int n, int K) {
    size_t nb = (size_t)n * (size_t)(K / 32); /* Q8_0's layout is the larger of the two */
    return (size_t)n * (size_t)K + nb * sizeof(float) + nb * sizeof(int32_t);
}

extern "C" int SOL_CUDA_FN(gemv)(int type, const void *w, size_t row_bytes, int rows, int K,
                                 const float *x, float *y, int n, void *scratch, void *stream) {
    if (!sol_cuda_type_known(type) || n < 1 || n > SOL_CUDA_GEMV_MAX_TOKENS) return -ENOTSUP;
    if (K % (is_kquant(type) ? 256 : 32) || rows < 1) return -EINVAL;
    cudaStream_t st = (cudaStream_t)stream;
    dim3 grid((unsigned)((rows + GEMV_WARPS - 1) / GEMV_WARPS)), block(32 * GEMV_WARPS);
    const unsigned char *wb = (const unsigned char *)w;
    int aligned =
        K % 8 == 0 && row_bytes % 16 == 0 && (uintptr_t)w % 16 == 0 && (uintptr_t)x % 16 == 0;
    if ((type == SOL_CUDA_F16 || type == SOL_CUDA_BF16) && aligned) {
        SOL_LAUNCH(k_gemv_h16, grid, block, 0, st, type, wb, row_bytes, rows, K, x, y, n);
        return 0;
    }
    if (type == SOL_CUDA_F32 || type == SOL_CUDA_F16 || type == SOL_CUDA_BF16) {
        SOL_LAUNCH(k_gemv_float, grid, block, 0, st, type, wb, row_bytes, rows, K, x, y, n);
        return 0;
    }
    qx a = split_scratch(scratch, n, K, is_kquant(type) ? 256 : 32);
    dim3 qgrid((unsigned)((a.n_blocks + QUANT_WARPS - 1) / QUANT_WARPS)), qblock(32 * QUANT_WARPS);
    if (is_kquant(type)) {
        SOL_LAUNCH(k_quantize_q8_k, qgrid, qblock, 0, st, x, a.n_blocks, a.q, a.d, (int16_t *)a.s);
        if (type == SOL_CUDA_Q6_K)
            SOL_LAUNCH(k_gemv_kq, grid, block, 0, st, type, wb, row_bytes, rows, K, a.q, a.d,
                       (const int16_t *)a.s, y, n);
        else
            SOL_LAUNCH(k_gemv_kq45, grid, block, 0, st, type, wb, row_bytes, rows, K, a.q, a.d,
                       (const int16_t *)a.s, y, n);
    } else {
        SOL_LAUNCH(k_quantize_q8_0, qgrid, qblock, 0, st, x, a.n_blocks, a.q, a.d, (int32_t *)a.s);
        SOL_LAUNCH(k_gemv_q, grid, block, 0, st, type, wb, row_bytes, rows, K, a.q, a.d,
                   (const int32_t *)a.s, y, n);
    }
    return 0;
}
