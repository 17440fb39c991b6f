/* k_gemv: matmul for decode and verify sizes (n <= 16 tokens), a warp per output row, written to
 * stream weights at the bandwidth roofline (docs/backend.md, "GEMV memory access"):
 * - every weight load is an aligned 32-, 64- or 128-bit word (dequant.cuh; Q4_0/Q5_0/Q8_0/Q6_K
 *   in cuda_layout.h's split layout, repacked once at upload), consecutive lanes on consecutive
 *   blocks, so a warp instruction reads whole cache lines;
 * - each token's partial sum is a register: the kernels are templates over NT, the token count
 *   rounded up to 1, 2, 4, 8 or 16, with every loop over tokens unrolled (no local memory);
 * - Q4_K/Q5_K spread a super-block over 4 lanes (pairs of sub-blocks), Q6_K over 8 (its 16-byte
 *   groups), so a row of K = 2048 keeps every lane busy; shorter rows (Q4_0/Q5_x/Q8_0 rows of
 *   fewer than 32 blocks, float rows of fewer than 32 loads) share a warp, a power of two of
 *   lanes each (gemv_q_span);
 * - the activations are quantized by a separate launch into a scratch that several matrices
 *   share (matmul_many: q/k/v, gate/up), as the CPU backend does (same rounding), and the
 *   quantized types take integer dots through __dp4a with the CPU's float steps per block. */
#include <errno.h>
#include <string.h>

#include "dequant.cuh"
#include "pick.cuh"
#include "prologue.cuh"
#include "q8.cuh"
#include "rope_kv.cuh"

enum { GEMV_WARPS = 4, QUANT_WARPS = 8 };

/* At most 128 registers a thread, so 4 GEMV blocks (16 warps) fit an SM: the 16-token kernels
 * would take ~170 otherwise (every token's loads in flight) and hold a third fewer warps. The
 * SASS check's budget (tests/gpu/sass_check.py) and its no-local-memory rule hold them to it. */
#define GEMV_BOUNDS __launch_bounds__(32 * GEMV_WARPS, 4)

/* Where a quantize kernel reads element i of its (n x K) input: x as it is, or the gated
 * product act(g) * u made there (glu_matmul_add: the product is never written). */
struct src_x {
    const float *x;
    __device__ float operator()(size_t i) const {
        return x[i];
    }
};
struct src_glu {
    const float *g, *u;
    int gelu;
    __device__ float operator()(size_t i) const {
        return gelu ? sol_gelu_mul1(g[i], u[i]) : sol_silu_mul1(g[i], u[i]);
    }
};

template <class S>
static __global__ void k_quantize_q8_0(S src, int n_blocks, int8_t *xq, float *xd, int32_t *xs) {
    sol_grid_dependency();
    int blk = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (blk >= n_blocks) return; /* whole warps: blk depends on the warp only */
    q8_0_block(src((size_t)blk * 32 + lane), blk, lane, xq, xd, xs);
}

template <class S>
static __global__ void k_quantize_q8_k(S src, int n_blocks, int8_t *kq, float *kd, int16_t *ks) {
    sol_grid_dependency();
    int blk = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (blk >= n_blocks) return;
    float xb[8];
    for (int j = 0; j < 8; j++)
        xb[j] = src((size_t)blk * 256 + lane * 8 + j);
    q8_k_block(xb, blk, lane, kq, kd, ks);
}

/* RMSNorm and quantization in one launch, NORMQ_SLICE elements of a row a block (grid: slices x
 * tokens), so a decode step's single row still spreads over many SMs: each block sums the whole
 * row's squares (sol_rmsnorm_scale: the same order, so the same scale, in every block and in
 * k_rmsnorm; the row is re-read from L2), normalizes its slice as k_rmsnorm does (its bits) into
 * xn and shared memory, then quantizes it as k_quantize_* does: a Q8_K block by warp 0, or a
 * Q8_0 block a warp. xn must not be x (another block may still be summing the row). act:
 * SOL_CUDA_ACT_Q8_0 or _Q8_K. */
enum { NORMQ_THREADS = SOL_CUDA_NORM_THREADS, NORMQ_SLICE = 256 };
static __global__ void k_rmsnorm_quantize(const float *x, const float *w, float *xn, int dim,
                                          float eps, int act, int8_t *q, float *d, void *s) {
    sol_grid_dependency();
    SOL_SHARED(float, scratch, [32]);
    SOL_SHARED(float, sl, [NORMQ_SLICE]);
    size_t row = (size_t)blockIdx.y * dim;
    float scale = sol_rmsnorm_scale(x + row, dim, eps, scratch);
    int i0 = (int)blockIdx.x * NORMQ_SLICE, n = dim - i0 < NORMQ_SLICE ? dim - i0 : NORMQ_SLICE;
    if ((int)threadIdx.x < n) {
        int i = i0 + (int)threadIdx.x;
        sl[threadIdx.x] = xn[row + i] = x[row + i] * scale * w[i];
    }
    __syncthreads(); /* the slice is whole in sl before any warp quantizes it */
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (act == SOL_CUDA_ACT_Q8_K) {
        if (warp > 0) return; /* n is NORMQ_SLICE: dim % 256 == 0 for Q8_K */
        float xb[8];
        for (int j = 0; j < 8; j++)
            xb[j] = sl[lane * 8 + j];
        q8_k_block(xb, (int)blockIdx.y * (dim / 256) + (int)blockIdx.x, lane, q, d, (int16_t *)s);
    } else if (warp < n / 32) {
        q8_0_block(sl[warp * 32 + lane], (int)blockIdx.y * (dim / 32) + i0 / 32 + warp, lane, q, d,
                   (int32_t *)s);
    }
}

/* Lanes per row of a GEMV whose lanes take blocks (or loads) of a row: a row of nb < 32 blocks
 * takes the power of two
 * >= nb, so 32 / span rows share a warp instead of leaving lanes idle (K = 512: 2 rows a warp);
 * its sum over span lanes has the bits of the 32-lane sum (the lanes past the row held zeros,
 * and x + 0 is x). */
__host__ __device__ __forceinline__ int gemv_q_span(int nb) {
    int s = 1;
    while (s < nb && s < 32)
        s <<= 1;
    return s;
}

/* Up to three matrices of one kernel that read the same x, in one launch (matmul_many's q/k/v
 * and gate/up: one launch where there were three, and their blocks share the wave): blocks
 * [0, first1) compute m0's rows, [first1, first2) m1's, the rest m2's. The choice depends on
 * blockIdx only, so it is uniform over the block, and it is made with compares, never by indexing
 * the parameter (which would copy the set to local memory). */
struct gemv_mat {
    sol_cuda_wt w;
    float *y;
    const float *bias; /* NULL, or w.rows floats added to each token's sum */
    int role;          /* SOL_CUDA_EPI_*: the store's epilogue (gemv_run_epi) */
};
/* gemv_run_tail's norm tail (cnt NULL: none): the normalized rows, their quantization's blocks
 * (split_scratch of n x m0's rows), the counter. */
struct gemv_tail_args {
    const float *norm;
    float *xn;
    int8_t *q;
    float *d;
    void *s;
    int *cnt;
    float eps;
    int act;
};
/* gemv_run_glu's gated-product blocks (cnt NULL: none): act's blocks of act(m0) * m1 into q/d/s
 * (split_scratch of n x the rows), a counter per chunk (act's block) of rows, `need` counts a
 * chunk's warps make (every lane of every warp of gate and up that holds its rows). */
struct gemv_glu_args {
    int8_t *q;
    float *d;
    void *s;
    int *cnt;
    int need, chunk, gelu;
};
struct gemv_set {
    gemv_mat m0, m1, m2;
    unsigned first1, first2;
    sol_cuda_rope_epi epi; /* zeros unless a matrix has an epilogue */
    gemv_tail_args tail;   /* zeros unless the launch has a norm tail (one matrix) */
    gemv_glu_args glu;     /* zeros unless the launch makes the gated product's blocks */
};

/* A GEMV kernel's first line: its matrix m_ (weights w, output, bias, epilogue) and block index
 * bx within w. */
#define GEMV_PICK(set)                                                                             \
    unsigned bx;                                                                                   \
    const gemv_mat m_ = sol_pick3(set, bx);                                                        \
    const sol_cuda_wt w = m_.w

static __device__ __forceinline__ bool gemv_roped(const gemv_mat &m) {
    return m.role == SOL_CUDA_EPI_ROPE || m.role == SOL_CUDA_EPI_ROPE_KV;
}

/* The row that slot j of a matrix computes (slots: block by block, warp by warp, span lanes
 * each): j itself, or in a matrix roped with NEOX pairs the two rows of pair j / 2 in turn (i and
 * i + head_dim / 2 of its head), so both rows of a pair are summed in one block (a block holds an
 * even number of slots) and its epilogue rotates them together. NORM pairs (2i, 2i + 1) are
 * neighbours already. A slot past the matrix maps past its rows (rows: heads x head_dim). */
__device__ __forceinline__ int gemv_pair_row(const sol_cuda_rope_epi &e, int j) {
    if (!e.p.neox) return j;
    int half = e.head_dim / 2, pr = j >> 1;
    return pr / half * e.head_dim + pr % half + (j & 1) * half;
}

__device__ __forceinline__ int gemv_row(const gemv_set &s, const gemv_mat &m, unsigned bx, int span,
                                        int lane) {
    int j = (int)(bx * GEMV_WARPS + (threadIdx.x >> 5)) * (32 / span) + lane / span;
    return gemv_roped(m) ? gemv_pair_row(s.epi, j) : j;
}

/* A roped matrix's store: each slot's sums (bias added, as gemv_store adds it) into shared
 * memory, then a thread per (pair of the block, token) rotates the pair as k_rope_kv does and
 * stores both rows, and k's into the K pool at the token's slot: the bits of the plain store
 * followed by rope_kv. Every thread of the block reaches the barrier (the role is the block's). */
template <int NT>
__device__ __forceinline__ void gemv_store_rope(const float (&acc)[NT], int n, const gemv_set &s,
                                                const gemv_mat &m, unsigned bx, int row, int lane,
                                                int span) {
    SOL_SHARED(float, sums, [GEMV_WARPS * 32][NT]);
    const sol_cuda_rope_epi &e = s.epi;
    int per = GEMV_WARPS * (32 / span), j = (int)(threadIdx.x >> 5) * (32 / span) + lane / span;
    SOL_UNROLL
    for (int t = 0; t < NT; t++) {
        float v = sol_span_sum(acc[t], span);
        if (t < n && lane % span == 0) sums[j][t] = m.bias && row < m.w.rows ? v + m.bias[row] : v;
    }
    __syncthreads(); /* every slot's sums are in before a pair reads its partner's */
    int hd = e.head_dim, rows = m.w.rows;
    for (int id = (int)threadIdx.x; id < per / 2 * n; id += (int)blockDim.x) {
        int pl = id / n, t = id - pl * n, j0 = (int)bx * per + 2 * pl;
        int r0 = gemv_pair_row(e, j0), r1 = gemv_pair_row(e, j0 + 1);
        if (r0 >= rows) continue;
        float c, sn, y0, y1;
        rope_cs(e.pos_slots[t], e.p.neox ? r0 % hd : r0 % hd / 2, e.p, &c, &sn);
        rope_apply(sums[2 * pl][t], sums[2 * pl + 1][t], c, sn, &y0, &y1);
        m.y[(size_t)t * rows + r0] = y0;
        m.y[(size_t)t * rows + r1] = y1;
        if (m.role == SOL_CUDA_EPI_ROPE_KV) {
            size_t at = (size_t)e.pos_slots[n + t] * rows;
            kv_put((unsigned char *)e.k_pool, e.f16, at + r0, y0);
            kv_put((unsigned char *)e.k_pool, e.f16, at + r1, y1);
        }
    }
}

/* Each token's row sum: the warp's lanes reduced, written by lane 0, or added to what y holds
 * (add: the residual add of matmul_add, the same float sum as a separate add kernel's), and v's
 * also into the V pool (SOL_CUDA_EPI_KV); a roped matrix's through gemv_store_rope. */
template <int NT>
__device__ __forceinline__ void gemv_store(const float (&acc)[NT], int n, const gemv_set &s,
                                           const gemv_mat &m, unsigned bx, int row, int lane,
                                           int add, int span) {
    if (gemv_roped(m)) {
        gemv_store_rope<NT>(acc, n, s, m, bx, row, lane, span);
        return;
    }
    SOL_UNROLL
    for (int t = 0; t < NT; t++) {
        float v = sol_span_sum(acc[t], span);
        if (t < n && lane % span == 0 && row < m.w.rows) {
            float *o = m.y + (size_t)t * m.w.rows + row;
            if (m.bias) v += m.bias[row]; /* after the sum: the bits of a separate add */
            *o = add ? *o + v : v;
            if (m.role == SOL_CUDA_EPI_KV)
                kv_put((unsigned char *)s.epi.v_pool, s.epi.f16,
                       (size_t)s.epi.pos_slots[n + t] * m.w.rows + row, v);
        }
    }
}

/* Row t of y (dim floats) normalized and quantized by the whole block, as k_rmsnorm_quantize's
 * blocks do it: the scale in its 256-thread sum order (sol_rmsnorm_scale_as: two sums a thread
 * of the GEMV's 128), the same products into xn, a Q8_K block (or a Q8_0 block) a warp; float
 * weights (ACT_FLOAT) take xn only, k_rmsnorm's bits; xn NULL: not written (quantized weights
 * of one kind never read it). y is read through L2: other blocks wrote it in this launch. */
__device__ __forceinline__ void gemv_tail_row(const gemv_tail_args &a, const float *y, int t,
                                              int dim, float *scratch) {
    float scale = sol_rmsnorm_scale_as<SOL_CUDA_NORM_THREADS / (32 * GEMV_WARPS), true>(
        y, dim, a.eps, scratch);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *xn = a.xn ? a.xn + (size_t)t * dim : nullptr;
    if (a.act == SOL_CUDA_ACT_Q8_K) {
        for (int c = warp; c < dim / 256; c += GEMV_WARPS) {
            float xb[8];
            SOL_UNROLL
            for (int j = 0; j < 8; j++) {
                int i = c * 256 + lane * 8 + j;
                xb[j] = __ldcg(y + i) * scale * a.norm[i];
                if (xn) xn[i] = xb[j];
            }
            q8_k_block(xb, t * (dim / 256) + c, lane, a.q, a.d, (int16_t *)a.s);
        }
    } else if (a.act == SOL_CUDA_ACT_Q8_0) {
        for (int b = warp; b < dim / 32; b += GEMV_WARPS) {
            int i = b * 32 + lane;
            float v = __ldcg(y + i) * scale * a.norm[i];
            if (xn) xn[i] = v;
            q8_0_block(v, t * (dim / 32) + b, lane, a.q, a.d, (int32_t *)a.s);
        }
    } else {
        for (int i = (int)threadIdx.x; i < dim; i += (int)blockDim.x)
            xn[i] = __ldcg(y + i) * scale * a.norm[i];
    }
}

/* gemv_run_glu: each warp that stored rows of gate (m0) or up (m1) counts its lanes at its
 * chunk's counter (its rows lie in one chunk: a power of two of them, at most 32, and the chunk a
 * multiple), and the warp that completes a chunk (every gate and up row of it stored) quantizes
 * act(gate) * up there for the n tokens, as k_quantize_q8_k / _q8_0 reading src_glu do
 * (gemv_glu_quantize's bits): the down projection's activations with no launch of their own. */
__device__ __forceinline__ void gemv_glu_end(const gemv_set &s, int span, int n) {
    const gemv_glu_args &a = s.glu;
    unsigned bx;
    const gemv_mat m = sol_pick3(s, bx);
    int lane = threadIdx.x & 31, rows = (int)m.w.rows;
    int first = ((int)bx * GEMV_WARPS + (int)(threadIdx.x >> 5)) * (32 / span);
    if (first >= rows) return; /* a warp past the matrix stored nothing (uniform) */
    int c = first / a.chunk;
    if (!sol_last_of(a.cnt + c, a.need, lane)) return;
    for (int t = 0; t < n; t++) {
        const float *g = s.m0.y + (size_t)t * rows, *u = s.m1.y + (size_t)t * rows;
        if (a.chunk == 256) {
            float xb[8];
            for (int j = 0; j < 8; j++) {
                int i = c * 256 + lane * 8 + j;
                xb[j] = a.gelu ? sol_gelu_mul1(__ldcg(g + i), __ldcg(u + i))
                               : sol_silu_mul1(__ldcg(g + i), __ldcg(u + i));
            }
            q8_k_block(xb, t * (rows / 256) + c, lane, a.q, a.d, (int16_t *)a.s);
        } else {
            int i = c * 32 + lane;
            float v = a.gelu ? sol_gelu_mul1(__ldcg(g + i), __ldcg(u + i))
                             : sol_silu_mul1(__ldcg(g + i), __ldcg(u + i));
            q8_0_block(v, t * (rows / 32) + c, lane, a.q, a.d, (int32_t *)a.s);
        }
    }
}

/* The end of every GEMV kernel: with a norm tail, each warp notes the rows it stored, thread 0
 * adds its block's to the counter, and the block whose rows complete the matrix (the last to
 * finish: every other block has stored and fenced) normalizes and quantizes all n rows, then
 * sets the counter back to 0 for the next launch. Counting rows, not blocks, makes the counter
 * follow what was written (a block past the matrix's end adds what it stored). Every thread of
 * the block reaches the barriers (the tail is the launch's). */
__device__ __forceinline__ void gemv_tail(const gemv_set &s, int span, int n) {
    if (s.glu.cnt) gemv_glu_end(s, span, n);
    const gemv_tail_args &a = s.tail;
    if (!a.cnt) return;
    SOL_SHARED(int, stored, [GEMV_WARPS]);
    SOL_SHARED(int, last, [1]);
    SOL_SHARED(float, scratch, [32]);
    int warp = threadIdx.x >> 5, per = 32 / span, rows = s.m0.w.rows;
    int first = ((int)blockIdx.x * GEMV_WARPS + warp) * per, left = rows - first;
    __threadfence(); /* this thread's stores are visible before its block is counted */
    if ((threadIdx.x & 31) == 0) stored[warp] = left < 0 ? 0 : left < per ? left : per;
    __syncthreads(); /* every warp has stored and noted its rows before thread 0 counts them */
    if (threadIdx.x == 0) {
        int mine = 0;
        for (int w = 0; w < GEMV_WARPS; w++)
            mine += stored[w];
        last[0] = atomicAdd(a.cnt, mine) + mine == rows;
    }
    __syncthreads(); /* the verdict is in before any thread reads it */
    if (last[0] != 1) return;
    __threadfence(); /* the acquire side: every other block's rows are visible */
    for (int t = 0; t < n; t++)
        gemv_tail_row(a, s.m0.y + (size_t)t * rows, t, rows, scratch);
    if (threadIdx.x == 0) atomicExch(a.cnt, 0);
}

/* F32 weights, and F16/BF16 rows the 128-bit kernel cannot take: an element per lane per step,
 * each a 32-bit load (a half through the aligned word that holds it). */
template <int NT>
static __global__ void GEMV_BOUNDS k_gemv_float(gemv_set set, const float *x, int n, int add) {
    sol_grid_dependency();
    GEMV_PICK(set);
    /* rows of fewer than 32 elements share a warp: span lanes a row (gemv_q_span) */
    int K = w.cols, span = gemv_q_span(K), lane = threadIdx.x & 31;
    int row = gemv_row(set, m_, bx, span, lane);
    const unsigned char *wr = (const unsigned char *)w.data + (size_t)row * w.row_bytes;
    float acc[NT] = {};
    for (int k = lane % span; k < K && row < w.rows; k += span) {
        float wv = w.type == SOL_CUDA_F32   ? sol_bits_f32(sol_ld32(wr + 4 * (size_t)k))
                   : w.type == SOL_CUDA_F16 ? sol_f16_to_f32(sol_ld16w(wr + 2 * (size_t)k))
                                            : sol_bf16_to_f32(sol_ld16w(wr + 2 * (size_t)k));
        SOL_UNROLL
        for (int t = 0; t < NT; t++)
            if (t < n) acc[t] = fmaf(wv, x[(size_t)t * K + k], acc[t]);
    }
    gemv_store(acc, n, set, m_, bx, row, lane, add, span);
    gemv_tail(set, span, n);
}

/* F16/BF16 rows with 128-bit loads: lane l takes elements 8(l + 32i) .. +7 of the row and of
 * each token's x (two 128-bit loads of floats), converted in registers. Needs K % 8 == 0 and
 * 16-byte aligned rows and x (the launcher checks, else k_gemv_float). */
template <int NT>
static __global__ void GEMV_BOUNDS k_gemv_h16(gemv_set set, const float *x, int n, int add) {
    sol_grid_dependency();
    GEMV_PICK(set);
    /* rows of fewer than 256 elements share a warp: span lanes a row (gemv_q_span) */
    int K = w.cols, span = gemv_q_span(K / 8), lane = threadIdx.x & 31;
    int row = gemv_row(set, m_, bx, span, lane);
    const unsigned char *wr = (const unsigned char *)w.data + (size_t)row * w.row_bytes;
    float acc[NT] = {};
    for (int g = lane % span; g < K / 8 && row < w.rows; g += span) {
        uint32_t h[4];
        float wv[8];
        sol_ld128(h, wr + (size_t)g * 16);
        SOL_UNROLL
        for (int j = 0; j < 8; j++) {
            uint16_t b = (uint16_t)(h[j / 2] >> (16 * (j % 2)));
            wv[j] = w.type == SOL_CUDA_F16 ? sol_f16_to_f32(b) : sol_bf16_to_f32(b);
        }
        SOL_UNROLL
        for (int t = 0; t < NT; t++) {
            if (t >= n) continue;
            uint32_t xa[4], xb[4];
            sol_ld128(xa, x + (size_t)t * K + (size_t)g * 8);
            sol_ld128(xb, x + (size_t)t * K + (size_t)g * 8 + 4);
            float a = acc[t];
            SOL_UNROLL
            for (int j = 0; j < 4; j++)
                a = fmaf(wv[j], sol_bits_f32(xa[j]), a);
            SOL_UNROLL
            for (int j = 0; j < 4; j++)
                a = fmaf(wv[4 + j], sol_bits_f32(xb[j]), a);
            acc[t] = a;
        }
    }
    gemv_store(acc, n, set, m_, bx, row, lane, add, span);
    gemv_tail(set, span, n);
}

/* Q4_0/Q5_0/Q5_1/Q8_0: a lane per block, every 32nd; the integer dot against the token's Q8_0
 * block (32 quants: two 128-bit loads), offsets (8, 16) removed through the block's sum of
 * quants, then the CPU's float steps: dot * (d * dx), and Q5_1's m * dx * sum. */
template <int NT>
static __global__ void GEMV_BOUNDS k_gemv_q(gemv_set set, const int8_t *xq, const float *xd,
                                            const int32_t *xs, int n, int add) {
    sol_grid_dependency();
    GEMV_PICK(set);
    /* rows of fewer than 32 blocks share a warp: span lanes a row (gemv_q_span) */
    int nb = w.cols / 32, span = gemv_q_span(nb), lane = threadIdx.x & 31;
    int row = gemv_row(set, m_, bx, span, lane);
    int off = w.type == SOL_CUDA_Q4_0 ? 8 : w.type == SOL_CUDA_Q5_0 ? 16 : 0;
    float acc[NT] = {};
    for (int b = lane % span; b < nb && row < w.rows; b += span) {
        qblock q = q_load(w, row, b, nb);
        SOL_UNROLL
        for (int t = 0; t < NT; t++) {
            if (t >= n) continue;
            size_t tb = (size_t)t * nb + b;
            uint32_t x0[4], x1[4];
            sol_ld128(x0, xq + tb * 32);
            sol_ld128(x1, xq + tb * 32 + 16);
            int dot = 0;
            SOL_UNROLL
            for (int i = 0; i < 4; i++) {
                dot = __dp4a(q.v[i], (int)x0[i], dot);
                dot = __dp4a(q.v[4 + i], (int)x1[i], dot);
            }
            float dx = xd[tb];
            int32_t sx = xs[tb];
            acc[t] += (float)(dot - off * sx) * (q.d * dx);
            if (w.type == SOL_CUDA_Q5_1) acc[t] += q.m * dx * (float)sx;
        }
    }
    gemv_store(acc, n, set, m_, bx, row, lane, add, span);
    gemv_tail(set, span, n);
}

/* Q4_K/Q5_K: a lane per (super-block, pair of 32-element sub-blocks), so a row of K = 2048
 * (8 super-blocks) keeps all 32 lanes busy. Loads: d/dmin one word, the scales three, the pair's
 * 32 quant bytes (and Q5_K's 32 high-bit bytes) two 128-bit loads each, the token's 64 quants
 * four and its four 16-sums one 64-bit load. The integers are kq_dot.h's, split per pair and
 * added back per super-block across four lanes; then the CPU's one float term per super-block. */
template <int NT>
__device__ __forceinline__ void gemv_kq45(const gemv_set &set, const gemv_mat &m_, unsigned bx,
                                          const int8_t *kq, const float *kd, const int16_t *ks,
                                          int n, int add) {
    const sol_cuda_wt w = m_.w;
    /* rows of fewer than 8 super-blocks share a warp: span lanes a row (gemv_q_span) */
    int nb = w.cols / 256, q5 = w.type == SOL_CUDA_Q5_K, span = gemv_q_span(nb * 4);
    int lane = threadIdx.x & 31, l = lane % span;
    int row = gemv_row(set, m_, bx, span, lane);
    size_t bb = q5 ? 176 : 144;
    const unsigned char *wr = (const unsigned char *)w.data + (size_t)row * w.row_bytes;
    float acc[NT] = {};
    for (int base = 0; base < nb * 4; base += span) { /* every lane runs each round: shuffles */
        int it = base + l, on = it < nb * 4 && row < w.rows, b = it / 4, c = it % 4, sc1 = 0,
            m1 = 0, sc2 = 0, m2 = 0;
        int lo[8] = {0}, hi[8] = {0};
        float d = 0.0f, dmin = 0.0f;
        if (on) {
            const unsigned char *blk = wr + (size_t)b * bb, *qs = blk + (q5 ? 48 : 16) + 32 * c;
            uint32_t s0 = sol_ld32(blk + 4), s1 = sol_ld32(blk + 8), s2 = sol_ld32(blk + 12);
            kq_scale_min_w(2 * c, s0, s1, s2, &sc1, &m1);
            kq_scale_min_w(2 * c + 1, s0, s1, s2, &sc2, &m2);
            uint32_t dm = sol_ld32(blk), v[8], h[8] = {0};
            d = sol_f16_to_f32((uint16_t)dm);
            dmin = sol_f16_to_f32((uint16_t)(dm >> 16));
            sol_ld128(v, qs);
            sol_ld128(v + 4, qs + 16);
            if (q5) {
                sol_ld128(h, blk + 16);
                sol_ld128(h + 4, blk + 32);
            }
            SOL_UNROLL
            for (int i = 0; i < 8; i++) {
                lo[i] = (int)(v[i] & 0x0F0F0F0F);
                hi[i] = (int)((v[i] >> 4) & 0x0F0F0F0F);
                /* Q5_K: bits 2c (low nibbles) and 2c + 1 (high) of each qh byte, to bit 4 */
                lo[i] |= (int)(((h[i] >> (2 * c)) & 0x01010101) << 4);
                hi[i] |= (int)(((h[i] >> (2 * c + 1)) & 0x01010101) << 4);
            }
        }
        SOL_UNROLL
        for (int t = 0; t < NT; t++) {
            if (t >= n) continue;
            size_t tb = (size_t)t * nb + b;
            int is = 0, ms = 0;
            if (on) {
                const int8_t *q = kq + tb * 256 + 64 * c;
                uint32_t x[16], bs[2];
                SOL_UNROLL
                for (int i = 0; i < 4; i++)
                    sol_ld128(x + 4 * i, q + 16 * i);
                sol_ld64(bs, ks + tb * 16 + 4 * c);
                int s1 = 0, s2 = 0;
                SOL_UNROLL
                for (int i = 0; i < 8; i++) {
                    s1 = __dp4a(lo[i], (int)x[i], s1);
                    s2 = __dp4a(hi[i], (int)x[8 + i], s2);
                }
                int b0 = (int16_t)bs[0], b1 = (int16_t)(bs[0] >> 16), b2 = (int16_t)bs[1],
                    b3 = (int16_t)(bs[1] >> 16);
                is = sc1 * s1 + sc2 * s2;
                ms = m1 * (b0 + b1) + m2 * (b2 + b3);
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
    gemv_store(acc, n, set, m_, bx, row, lane, add, span);
    gemv_tail(set, span, n);
}

/* Q6_K: a lane per (super-block, 32-element group g = 4h + part): its 32 low-nibble bytes and 32
 * high-bit bytes (two 128-bit loads each, split layout), two signed scales (one word), the
 * token's 32 quants (two 128-bit loads) and two 16-sums (one word). Each 16-element half:
 * sc * (dot - 32 * bsum), kq_dot.h's integers; eight lanes add them per super-block, then the
 * CPU's float term d * isum. */
template <int NT>
__device__ __forceinline__ void gemv_kq6(const gemv_set &set, const gemv_mat &m_, unsigned bx,
                                         const int8_t *kq, const float *kd, const int16_t *ks,
                                         int n, int add) {
    const sol_cuda_wt w = m_.w;
    /* rows of fewer than 4 super-blocks share a warp: span lanes a row (gemv_q_span) */
    int nb = w.cols / 256, span = gemv_q_span(nb * 8), lane = threadIdx.x & 31, l = lane % span;
    int row = gemv_row(set, m_, bx, span, lane);
    float acc[NT] = {};
    for (int base = 0; base < nb * 8; base += span) {
        int it = base + l, on = it < nb * 8 && row < w.rows, b = it / 8, g = it % 8, h = g / 4,
            part = g % 4;
        uint32_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int sc0 = 0, sc1 = 0;
        float d = 0.0f;
        if (on) q6k_group(w, (size_t)row * nb + b, g, v, &sc0, &sc1, &d);
        SOL_UNROLL
        for (int t = 0; t < NT; t++) {
            if (t >= n) continue;
            size_t tb = (size_t)t * nb + b;
            int is = 0;
            if (on) {
                uint32_t x[8];
                const int8_t *q = kq + tb * 256 + 128 * h + 32 * part;
                sol_ld128(x, q);
                sol_ld128(x + 4, q + 16);
                uint32_t bs = sol_ld32(ks + tb * 16 + 8 * h + 2 * part);
                int s0 = 0, s1 = 0;
                SOL_UNROLL
                for (int i = 0; i < 4; i++) {
                    s0 = __dp4a((int)v[i], (int)x[i], s0);
                    s1 = __dp4a((int)v[4 + i], (int)x[4 + i], s1);
                }
                is = sc0 * (s0 - 32 * (int16_t)bs) + sc1 * (s1 - 32 * (int16_t)(bs >> 16));
            }
            for (int o = 1; o < 8; o <<= 1)
                is += __shfl_xor_sync(0xffffffffu, is, o);
            if (on && g == 0) acc[t] += kd[tb] * (d * (float)is); /* the CPU's, dmin = 0 */
        }
    }
    gemv_store(acc, n, set, m_, bx, row, lane, add, span);
    gemv_tail(set, span, n);
}

/* Quantized activations in the scratch, each part 16-byte aligned: n x K quants, a float scale
 * per block, then the sums (int32 per Q8_0 block, or int16 per 16 elements of a Q8_K block). */
extern "C" int SOL_CUDA_FN(gemv_act)(int type) {
    switch (type) {
    case SOL_CUDA_Q4_K:
    case SOL_CUDA_Q5_K:
    case SOL_CUDA_Q6_K:
        return SOL_CUDA_ACT_Q8_K;
    case SOL_CUDA_Q8_0:
    case SOL_CUDA_Q4_0:
    case SOL_CUDA_Q5_0:
    case SOL_CUDA_Q5_1:
    case SOL_CUDA_MXFP4:
        return SOL_CUDA_ACT_Q8_0;
    default:
        return SOL_CUDA_ACT_FLOAT;
    }
}

/* The K-quant GEMV: Q4_K/Q5_K (gemv_kq45) or Q6_K (gemv_kq6) by the block's matrix, so a set
 * that mixes them (Q4_K_M's q/k in Q4_K and v in Q6_K) is still one launch; the branch is
 * uniform over the block. */
template <int NT>
static __global__ void GEMV_BOUNDS k_gemv_kq(gemv_set set, const int8_t *kq, const float *kd,
                                             const int16_t *ks, int n, int add) {
    sol_grid_dependency();
    GEMV_PICK(set);
    if (w.type == SOL_CUDA_Q6_K)
        gemv_kq6<NT>(set, m_, bx, kq, kd, ks, n, add);
    else
        gemv_kq45<NT>(set, m_, bx, kq, kd, ks, n, add);
}

extern "C" size_t SOL_CUDA_FN(gemv_scratch_bytes)(int n, int K) {
    size_t nb = (size_t)n * (size_t)(K / 32); /* Q8_0's layout is the larger of the two */
    return align16((size_t)n * (size_t)K) + align16(nb * sizeof(float)) + nb * sizeof(int32_t);
}

/* The quantize kernel of act over n x K elements read through src. */
template <class S>
static int quantize_launch(int act, S src, int n, int K, void *scratch, void *stream) {
    if (n < 1) return -EINVAL; /* any count: the int8 GEMM (k_mmq.cu) reads a whole prompt's */
    if (act == SOL_CUDA_ACT_FLOAT) return 0;
    if (K % (act == SOL_CUDA_ACT_Q8_K ? 256 : 32)) return -EINVAL;
    qx a = split_scratch(scratch, n, K, act == SOL_CUDA_ACT_Q8_K ? 256 : 32);
    /* 256 elements a block, as k_rmsnorm_quantize's slices: a Q8_K block is one warp's, eight
     * Q8_0 blocks are eight warps' (a decode step's row spreads over K / 256 SMs) */
    int warps = act == SOL_CUDA_ACT_Q8_K ? 1 : QUANT_WARPS;
    dim3 qgrid((unsigned)((a.n_blocks + warps - 1) / warps)), qblock(32 * (unsigned)warps);
    if (act == SOL_CUDA_ACT_Q8_K)
        SOL_LAUNCH(k_quantize_q8_k<S>, qgrid, qblock, 0, stream, src, a.n_blocks, a.q, a.d,
                   (int16_t *)a.s);
    else
        SOL_LAUNCH(k_quantize_q8_0<S>, qgrid, qblock, 0, stream, src, a.n_blocks, a.q, a.d,
                   (int32_t *)a.s);
    return 0;
}

extern "C" int SOL_CUDA_FN(gemv_quantize)(int act, const float *x, int n, int K, void *scratch,
                                          void *stream) {
    return quantize_launch(act, src_x{x}, n, K, scratch, stream);
}

extern "C" int SOL_CUDA_FN(gemv_glu_quantize)(int act, int gelu, const float *gate, const float *up,
                                              int n, int K, void *scratch, void *stream) {
    if (act == SOL_CUDA_ACT_FLOAT) return -ENOTSUP; /* float weights read the product itself */
    return quantize_launch(act, src_glu{gate, up, gelu}, n, K, scratch, stream);
}

extern "C" int SOL_CUDA_FN(gemv_norm_quantize)(int act, const float *x, const float *w, float eps,
                                               float *xn, int n, int K, void *scratch,
                                               void *stream) {
    if (n < 1 || n > SOL_CUDA_GEMV_MAX_TOKENS) return -ENOTSUP;
    if (act == SOL_CUDA_ACT_FLOAT || K % (act == SOL_CUDA_ACT_Q8_K ? 256 : 32)) return -EINVAL;
    if (xn == x) return -EINVAL; /* the blocks of a row read it whole while others write xn */
    qx a = split_scratch(scratch, n, K, act == SOL_CUDA_ACT_Q8_K ? 256 : 32);
    SOL_LAUNCH(k_rmsnorm_quantize,
               dim3((unsigned)((K + NORMQ_SLICE - 1) / NORMQ_SLICE), (unsigned)n),
               dim3(NORMQ_THREADS), 0, stream, x, w, xn, K, eps, act, a.q, a.d, a.s);
    return 0;
}

/* The kernel a weight takes; one launch holds matrices of one kernel. */
enum { GEMV_FLOAT, GEMV_H16, GEMV_Q, GEMV_KQ };
static int gemv_kernel(const sol_cuda_wt &w, const float *x) {
    int act = SOL_CUDA_FN(gemv_act)(w.type);
    if (act == SOL_CUDA_ACT_FLOAT) {
        bool h16 = (w.type == SOL_CUDA_F16 || w.type == SOL_CUDA_BF16) && w.cols % 8 == 0 &&
                   w.row_bytes % 16 == 0 && (uintptr_t)w.data % 16 == 0 && (uintptr_t)x % 16 == 0;
        return h16 ? GEMV_H16 : GEMV_FLOAT;
    }
    return act == SOL_CUDA_ACT_Q8_K ? GEMV_KQ : GEMV_Q;
}

/* Lanes per row (gemv_q_span over what a lane takes: elements, 128-bit loads, blocks, or the
 * K-quants' 4 or 8 lanes a super-block). */
static int gemv_lanes(const sol_cuda_wt &w, int kernel) {
    switch (kernel) {
    case GEMV_FLOAT:
        return gemv_q_span(w.cols);
    case GEMV_H16:
        return gemv_q_span(w.cols / 8);
    case GEMV_Q:
        return gemv_q_span(w.cols / 32);
    default: /* K-quants: 8 lanes a super-block in Q6_K, 4 in Q4_K/Q5_K */
        return gemv_q_span(w.cols / 256 * (w.type == SOL_CUDA_Q6_K ? 8 : 4));
    }
}

/* The blocks of one matrix: GEMV_WARPS warps a block, 32 / span rows a warp. */
static unsigned gemv_blocks(const sol_cuda_wt &w, int kernel) {
    int per = GEMV_WARPS * (32 / gemv_lanes(w, kernel));
    return (unsigned)((w.rows + per - 1) / per);
}

/* One launch of `kernel` for NT tokens (1, 2, 4, 8 or 16) over the set's `blocks`. */
template <int NT>
static void gemv_launch(const gemv_set &s, unsigned blocks, int kernel, const float *x, int n,
                        const void *scratch, int add, void *stream) {
    dim3 grid(blocks), block(32 * GEMV_WARPS);
    if (kernel == GEMV_H16) {
        SOL_LAUNCH(k_gemv_h16<NT>, grid, block, 0, stream, s, x, n, add);
        return;
    }
    if (kernel == GEMV_FLOAT) {
        SOL_LAUNCH(k_gemv_float<NT>, grid, block, 0, stream, s, x, n, add);
        return;
    }
    qx a = split_scratch(scratch, n, s.m0.w.cols, kernel == GEMV_Q ? 32 : 256);
    if (kernel == GEMV_KQ)
        SOL_LAUNCH(k_gemv_kq<NT>, grid, block, 0, stream, s, a.q, a.d, (const int16_t *)a.s, n,
                   add);
    else
        SOL_LAUNCH(k_gemv_q<NT>, grid, block, 0, stream, s, a.q, a.d, (const int32_t *)a.s, n, add);
}

static void gemv_launch_n(const gemv_set &s, unsigned blocks, int kernel, const float *x, int n,
                          const void *scratch, int add, void *stream) {
    if (n == 1)
        gemv_launch<1>(s, blocks, kernel, x, n, scratch, add, stream);
    else if (n == 2)
        gemv_launch<2>(s, blocks, kernel, x, n, scratch, add, stream);
    else if (n <= 4)
        gemv_launch<4>(s, blocks, kernel, x, n, scratch, add, stream);
    else if (n <= 8)
        gemv_launch<8>(s, blocks, kernel, x, n, scratch, add, stream);
    else
        gemv_launch<16>(s, blocks, kernel, x, n, scratch, add, stream);
}

static int gemv_check(const sol_cuda_wt &w, int K, int n) {
    if (!sol_cuda_type_known(w.type) || n < 1 || n > SOL_CUDA_GEMV_MAX_TOKENS) return -ENOTSUP;
    if (w.cols != K || w.cols % sol_cuda_block_elems(w.type) || w.rows < 1 ||
        w.split != sol_cuda_wants_split(w.type))
        return -EINVAL;
    return 0;
}

/* An epilogue's operands: roped rows a whole number of heads of an even head_dim, a pool for
 * each KV store, and no residual add beside it. */
static int epi_check(const sol_cuda_wt &w, int role, const sol_cuda_rope_epi *e, int add) {
    if (role == SOL_CUDA_EPI_NONE) return 0;
    if (role < SOL_CUDA_EPI_NONE || role > SOL_CUDA_EPI_KV || !e || add) return -EINVAL;
    bool roped = role != SOL_CUDA_EPI_KV;
    if (roped && (e->head_dim < 2 || e->head_dim % 2 || w.rows % e->head_dim)) return -EINVAL;
    if (!e->pos_slots || (role == SOL_CUDA_EPI_ROPE_KV && !e->k_pool) ||
        (role == SOL_CUDA_EPI_KV && !e->v_pool))
        return -EINVAL;
    return 0;
}

extern "C" int SOL_CUDA_FN(gemv_run_epi)(const sol_cuda_wt *ws, float *const *ys,
                                         const float *const *bs, const int *roles, int count,
                                         const float *x, int n, const void *scratch, int add,
                                         const sol_cuda_rope_epi *epi, void *stream) {
    for (int i = 0; i < count; i++) {
        int rc = gemv_check(ws[i], ws[0].cols, n);
        if (!rc && roles) rc = epi_check(ws[i], roles[i], epi, add);
        if (rc) return rc;
    }
    for (int i = 0; i < count;) {
        gemv_set s;
        memset(&s, 0, sizeof s); /* every byte defined: the graph signature compares them */
        if (roles) s.epi = *epi;
        gemv_mat *slot[3] = {&s.m0, &s.m1, &s.m2};
        unsigned *first[3] = {nullptr, &s.first1, &s.first2}, blocks = 0;
        int kernel = gemv_kernel(ws[i], x), k = 0;
        for (; k < 3 && i + k < count && gemv_kernel(ws[i + k], x) == kernel; k++) {
            slot[k]->w = ws[i + k]; /* field by field: a struct copy may carry padding bytes */
            slot[k]->y = ys[i + k];
            slot[k]->bias = bs ? bs[i + k] : nullptr;
            slot[k]->role = roles ? roles[i + k] : SOL_CUDA_EPI_NONE;
            if (first[k]) *first[k] = blocks;
            blocks += gemv_blocks(ws[i + k], kernel);
        }
        if (k < 2) s.first1 = blocks; /* no block reaches an empty slot */
        if (k < 3) s.first2 = blocks;
        gemv_launch_n(s, blocks, kernel, x, n, scratch, add, stream);
        i += k;
    }
    return 0;
}

extern "C" int SOL_CUDA_FN(gemv_run_tail)(sol_cuda_wt w, const float *x, float *y, int n,
                                          const void *scratch, int add, const sol_cuda_norm_tail *t,
                                          void *stream) {
    int rc = gemv_check(w, w.cols, n);
    if (rc) return rc;
    int dim = (int)w.rows, blk = t ? (t->act == SOL_CUDA_ACT_Q8_K   ? 256
                                      : t->act == SOL_CUDA_ACT_Q8_0 ? 32
                                                                    : 1)
                                   : 0;
    if (!t || !t->norm || (!t->xn && blk == 1) || !t->cnt || !y || t->xn == y || dim % blk ||
        (blk > 1 && !t->scratch))
        return -EINVAL;
    gemv_set s;
    memset(&s, 0, sizeof s); /* every byte defined: the graph signature compares them */
    int kernel = gemv_kernel(w, x);
    unsigned blocks = gemv_blocks(w, kernel);
    s.m0.w = w;
    s.m0.y = y;
    s.first1 = s.first2 = blocks;
    gemv_tail_args &a = s.tail;
    a.norm = t->norm, a.xn = t->xn, a.cnt = t->cnt, a.eps = t->eps, a.act = t->act;
    if (blk > 1) {
        qx q = split_scratch(t->scratch, n, dim, blk);
        a.q = q.q, a.d = q.d, a.s = q.s;
    }
    gemv_launch_n(s, blocks, kernel, x, n, scratch, add, stream);
    return 0;
}

extern "C" int SOL_CUDA_FN(gemv_run_glu)(const sol_cuda_wt *ws, float *const *ys,
                                         const float *const *bs, const float *x, int n,
                                         const void *scratch, const sol_cuda_glu_tail *t,
                                         void *stream) {
    int chunk = t ? (t->act == SOL_CUDA_ACT_Q8_K ? 256 : t->act == SOL_CUDA_ACT_Q8_0 ? 32 : 0) : 0;
    int kernel = gemv_kernel(ws[0], x), rows = (int)ws[0].rows;
    for (int i = 0; i < 2; i++) {
        int rc = gemv_check(ws[i], ws[0].cols, n);
        if (rc) return rc;
    }
    if (!chunk || !t->scratch || !t->cnt || gemv_kernel(ws[1], x) != kernel || ws[1].rows != rows ||
        rows % chunk)
        return -EINVAL;
    gemv_set s;
    memset(&s, 0, sizeof s); /* every byte defined: the graph signature compares them */
    gemv_mat *slot[2] = {&s.m0, &s.m1};
    unsigned blocks = 0;
    int need = 0;
    for (int i = 0; i < 2; i++) {
        slot[i]->w = ws[i];
        slot[i]->y = ys[i];
        slot[i]->bias = bs ? bs[i] : nullptr;
        if (i == 1) s.first1 = blocks;
        blocks += gemv_blocks(ws[i], kernel);
        need += 32 * (chunk / (32 / gemv_lanes(ws[i], kernel))); /* lanes of the chunk's warps */
    }
    s.first2 = blocks;
    qx q = split_scratch(t->scratch, n, rows, chunk);
    gemv_glu_args &a = s.glu;
    a.q = q.q, a.d = q.d, a.s = q.s, a.cnt = t->cnt, a.need = need, a.chunk = chunk;
    a.gelu = t->gelu;
    gemv_launch_n(s, blocks, kernel, x, n, scratch, 0, stream);
    return 0;
}

extern "C" int SOL_CUDA_FN(gemv_run_many)(const sol_cuda_wt *ws, float *const *ys,
                                          const float *const *bs, int count, const float *x, int n,
                                          const void *scratch, int add, void *stream) {
    return SOL_CUDA_FN(gemv_run_epi)(ws, ys, bs, nullptr, count, x, n, scratch, add, nullptr,
                                     stream);
}

extern "C" int SOL_CUDA_FN(gemv_run)(sol_cuda_wt w, const float *x, float *y, int n,
                                     const void *scratch, int add, const float *bias,
                                     void *stream) {
    return SOL_CUDA_FN(gemv_run_many)(&w, &y, &bias, 1, x, n, scratch, add, stream);
}

extern "C" int SOL_CUDA_FN(gemv)(sol_cuda_wt w, const float *x, float *y, int n, void *scratch,
                                 int add, void *stream) {
    if (!sol_cuda_type_known(w.type) || n < 1 || n > SOL_CUDA_GEMV_MAX_TOKENS) return -ENOTSUP;
    int rc =
        SOL_CUDA_FN(gemv_quantize)(SOL_CUDA_FN(gemv_act)(w.type), x, n, w.cols, scratch, stream);
    return rc ? rc : SOL_CUDA_FN(gemv_run)(w, x, y, n, scratch, add, nullptr, stream);
}
