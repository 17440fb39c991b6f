/* mma.cuh: the warp-level tensor-core multiply the GEMM kernels use (sm_80+), one spelling for
 * the GPU (inline PTX) and for the host emulation (the PTX ISA's fragment placement, computed).
 *
 * sol_mma_16816(d, a, b): d (16x8, f32) += a (16x16, f16, row-major) times b (16x8, f16,
 * "col": each column's k contiguous), as mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32.
 * Every lane of a full warp calls it together. Fragments, with g = lane / 4, t = lane % 4 and
 * each 32-bit word holding two halves (the lower index in the low 16 bits):
 *   a[0]: row g, cols 2t, 2t+1      a[1]: row g+8, cols 2t, 2t+1
 *   a[2]: row g, cols 2t+8, 2t+9    a[3]: row g+8, cols 2t+8, 2t+9
 *   b[0]: k 2t, 2t+1 of column g    b[1]: k 2t+8, 2t+9 of column g
 *   d[0], d[1]: row g, cols 2t, 2t+1    d[2], d[3]: row g+8, cols 2t, 2t+1
 * sol_mma_16832_s8(d, a, b): d (16x8, s32) += a (16x32, s8) times b (32x8, s8), as
 * mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32; each word holds four bytes, lower k low:
 *   a[0]: row g, k 4t..4t+3     a[1]: row g+8, k 4t..4t+3
 *   a[2]: row g, k 16+4t..      a[3]: row g+8, k 16+4t..
 *   b[0]: k 4t..4t+3 of column g    b[1]: k 16+4t.. of column g;  d as above (int32).
 * sol_mma_16816_s8(d, a, b): the same with k = 16 (m16n8k16.row.col.s32.s8.s8.s32):
 *   a[0]: row g, k 4t..4t+3    a[1]: row g+8, k 4t..4t+3    b[0]: k 4t..4t+3 of column g.
 * sol_ldmatrix_x4(r, p): four 8 x 8 matrices of 16-bit elements from shared memory, as
 * ldmatrix.sync.aligned.m8n8.x4.shared.b16: lanes 8j..8j+7 give the addresses of rows 0..7 of
 * matrix j (16 bytes each, 16-byte aligned); lane l receives in r[j] the two elements at row
 * l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 of matrix j (the lower column in the low 16 bits):
 * exactly an mma fragment's word, so one instruction loads what four 32-bit loads did. */
#ifndef SOL_CUDA_MMA_CUH
#define SOL_CUDA_MMA_CUH

#include "half_bits.cuh"

#ifdef __CUDACC__
__device__ __forceinline__ void sol_mma_16816(float d[4], const uint32_t a[4],
                                              const uint32_t b[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)d, (void)a, (void)b;
    __trap(); /* the module is built for sm_80 and sm_90 only (CUDA_ARCHITECTURES) */
#endif
}

__device__ __forceinline__ void sol_mma_16832_s8(int d[4], const uint32_t a[4],
                                                 const uint32_t b[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)d, (void)a, (void)b;
    __trap();
#endif
}

__device__ __forceinline__ void sol_mma_16816_s8(int d[4], const uint32_t a[2],
                                                 const uint32_t b[1]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
                 "{%4, %5}, {%6}, {%0, %1, %2, %3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b[0]));
#else
    (void)d, (void)a, (void)b;
    __trap();
#endif
}

__device__ __forceinline__ void sol_ldmatrix_x4(uint32_t r[4], const void *p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    /* memory: it reads what the block stored before its barrier, so it may not move above it */
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
#else
    (void)r, (void)p;
    __trap();
#endif
}
#else
/* The emulation of ldmatrix.x4 from the ISA's description: every lane's row address, then each
 * lane's four words read from the rows the instruction assigns it. A misaligned row aborts, as
 * the instruction requires 16-byte rows. */
inline void sol_ldmatrix_x4(uint32_t r[4], const void *p) {
    const void *all[32];
    if ((uintptr_t)p % 16) SOL_EMU_DIE("ldmatrix: row address %p not 16-byte aligned", p);
    sol_emu::warp_meet("ldmatrix", p, all);
    int lane = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32;
    for (int j = 0; j < 4; j++) {
        const uint16_t *row = (const uint16_t *)all[8 * j + lane / 4];
        r[j] = (uint32_t)row[2 * (lane % 4)] | (uint32_t)row[2 * (lane % 4) + 1] << 16;
    }
    sol_emu::warp_leave("ldmatrix");
}

/* Half i (low to high) of the words w, as float. */
inline float sol_mma_half(const uint32_t *w, int i) {
    return sol_f16_to_f32((uint16_t)(w[i / 2] >> (16 * (i % 2))));
}

/* The emulation: the PTX ISA's formulas from fragment element to (row, col) ("Matrix Fragments
 * for mma.m16n8k16 with floating point type"), written apart from any kernel's loads, so a
 * kernel that fills its registers wrongly gets wrong sums here as on a GPU. Products of halves
 * are exact in float; the sum runs in k order. */
inline void sol_mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    const uint32_t *mine[2] = {a, b};
    const void *all[32];
    sol_emu::warp_meet("mma.sync", mine, all);
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        const uint32_t *const *f = (const uint32_t *const *)all[l];
        int g = l >> 2, t = l % 4;
        for (int i = 0; i < 8; i++) { /* a0..a7 */
            int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
            A[row][t * 2 + (i & 1) + (i >= 4 ? 8 : 0)] = sol_mma_half(f[0], i);
        }
        for (int i = 0; i < 4; i++) /* b0..b3 */
            B[t * 2 + (i & 1) + (i >= 2 ? 8 : 0)][g] = sol_mma_half(f[1], i);
    }
    int lane = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32;
    int g = lane >> 2, t = lane % 4;
    for (int i = 0; i < 4; i++) { /* c0..c3 */
        int row = i < 2 ? g : g + 8, col = t * 2 + (i & 1);
        float s = d[i];
        for (int k = 0; k < 16; k++)
            s += A[row][k] * B[k][col];
        d[i] = s;
    }
    sol_emu::warp_leave("mma.sync");
}

/* The int8 MMA, from the ISA's formulas ("Matrix Fragments for mma.m16n8k32", integer types):
 * register r of A holds the bytes of row g (r even) or g + 8 (r odd), k 4t..4t+3 (r < 2) or
 * 16 + 4t.. (r >= 2); B's b[0] k 4t..4t+3 of column g, b[1] k 16 + 4t..; C as m16n8k16's.
 * Low bytes hold the lower k. Exact: int32 sums of products of bytes. */
inline void sol_mma_16832_s8(int d[4], const uint32_t a[4], const uint32_t b[2]) {
    const uint32_t *mine[2] = {a, b};
    const void *all[32];
    sol_emu::warp_meet("mma.sync.s8", mine, all);
    int A[16][32], B[32][8];
    for (int l = 0; l < 32; l++) {
        const uint32_t *const *f = (const uint32_t *const *)all[l];
        int g = l >> 2, t = l % 4;
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 4; j++)
                A[g + 8 * (r & 1)][4 * t + 16 * (r >> 1) + j] = (int8_t)(f[0][r] >> (8 * j));
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < 4; j++)
                B[4 * t + 16 * r + j][g] = (int8_t)(f[1][r] >> (8 * j));
    }
    int lane = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32;
    int g = lane >> 2, t = lane % 4;
    for (int i = 0; i < 4; i++) {
        int row = i < 2 ? g : g + 8, col = t * 2 + (i & 1), s = d[i];
        for (int k = 0; k < 32; k++)
            s += A[row][k] * B[k][col];
        d[i] = s;
    }
    sol_emu::warp_leave("mma.sync.s8");
}

/* m16n8k16 with s8 ("Matrix Fragments for mma.m16n8k16 with integer type"): a[0] row g, a[1]
 * row g + 8, each k 4t..4t+3; b[0] k 4t..4t+3 of column g; C as above. */
inline void sol_mma_16816_s8(int d[4], const uint32_t a[2], const uint32_t b[1]) {
    const uint32_t *mine[2] = {a, b};
    const void *all[32];
    sol_emu::warp_meet("mma.sync.s8.k16", mine, all);
    int A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        const uint32_t *const *f = (const uint32_t *const *)all[l];
        int g = l >> 2, t = l % 4;
        for (int j = 0; j < 4; j++) {
            A[g][4 * t + j] = (int8_t)(f[0][0] >> (8 * j));
            A[g + 8][4 * t + j] = (int8_t)(f[0][1] >> (8 * j));
            B[4 * t + j][g] = (int8_t)(f[1][0] >> (8 * j));
        }
    }
    int lane = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32;
    int g = lane >> 2, t = lane % 4;
    for (int i = 0; i < 4; i++) {
        int row = i < 2 ? g : g + 8, col = t * 2 + (i & 1), s = d[i];
        for (int k = 0; k < 16; k++)
            s += A[row][k] * B[k][col];
        d[i] = s;
    }
    sol_emu::warp_leave("mma.sync.s8.k16");
}
#endif

#endif
