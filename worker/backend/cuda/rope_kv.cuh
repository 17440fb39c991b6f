/* rope_kv: rotary position embedding of one pair and the K/V element store, shared by k_rope.cu
 * (the rope and rope_kv launches) and the q/k/v GEMV's epilogue (k_gemv.cu): one source, so the
 * fused epilogue has the separate launches' bits. The frequencies come as a table (rope_freq.h,
 * made on the host): no pow() on the device, so an angle is one multiply and the series below. */
#ifndef SOL_CUDA_ROPE_KV_CUH
#define SOL_CUDA_ROPE_KV_CUH

#include "cuda_kernels.h"
#include "half_bits.cuh"

/* sin and cos of a in double: a reduced by pi/2 (k = nearest integer of a 2/pi) with pi/2 in
 * three parts of which the first two have 33 significant bits, so k times them is exact for
 * |k| < 2^20 (|a| < 1.6e6, a position of 1.6 million at the fastest frequency); then Taylor series
 * to degree 19 and 20 on |r| <= pi/4, whose remainder (< 2e-22) is far below double's rounding.
 * Rounded to float, the values are the CPU's (float)cos(a) and (float)sin(a) unless the two
 * doubles straddle a float rounding boundary, which a difference of an ulp or two of double
 * makes happen about once in 2^28 values. */
static __device__ inline void rope_sincos(double a, double *sn, double *cs) {
    const double p1 = 1.57079632673412561417e+00, p2 = 6.07710050630396597660e-11,
                 p3 = 2.02226624879595063154e-21;
    double k = rint(a * 0.636619772367581343076);
    double r = ((a - k * p1) - k * p2) - k * p3, r2 = r * r;
    /* sin r = r (1 - r2/(2 3) (1 - r2/(4 5) (1 - ...))), cos r = 1 - r2/(1 2) (1 - r2/(3 4) (...)),
     * innermost first; the reciprocals are constants once the loops are unrolled */
    double ts = 0.0, tc = 0.0;
    SOL_UNROLL
    for (int i = 19; i >= 3; i -= 2)
        ts = r2 * (1.0 / ((double)i * (double)(i - 1))) * (1.0 - ts);
    SOL_UNROLL
    for (int i = 20; i >= 2; i -= 2)
        tc = r2 * (1.0 / ((double)i * (double)(i - 1))) * (1.0 - tc);
    double s = r * (1.0 - ts), c = 1.0 - tc;
    long q = (long)k & 3;
    *sn = q == 0 ? s : q == 1 ? c : q == 2 ? -s : -c;
    *cs = q == 0 ? c : q == 1 ? -s : q == 2 ? -c : s;
}

/* Pair i's two offsets in a head: NORM pairs (2i, 2i + 1), NEOX pairs (i, i + head_dim / 2). */
static __device__ inline void rope_offsets(const sol_cuda_rope_args &p, int i, int head_dim,
                                           int *o0, int *o1) {
    *o0 = p.neox ? i : 2 * i;
    *o1 = p.neox ? i + head_dim / 2 : 2 * i + 1;
}

/* The cosine and sine that rotate pair i of a head at position pos (YaRN's magnitude scale in). */
static __device__ inline void rope_cs(int32_t pos, int i, const sol_cuda_rope_args &p, float *c,
                                      float *s) {
    double a = pos * p.inv_freq[i], sd, cd;
    rope_sincos(a, &sd, &cd);
    /* YaRN's magnitude scale as the CPU applies it: one float multiply (1: exact) */
    *c = __fmul_rn((float)cd, p.mscale), *s = __fmul_rn((float)sd, p.mscale);
}

/* (x0, x1) rotated by (c, s) into (*y0, *y1), in the CPU's three roundings each (not nvcc's
 * contraction into an FMA): the same bits. */
static __device__ inline void rope_apply(float x0, float x1, float c, float s, float *y0,
                                         float *y1) {
    *y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    *y1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

/* Rotates pair i of the head at v (position pos) in place; returns the pair's two offsets. The
 * angle first, then the loads: the pair is not held across the double-precision sine. */
static __device__ inline void rope_pair(float *v, int32_t pos, int i, int head_dim,
                                        const sol_cuda_rope_args &p, int *o0, int *o1) {
    float c, s, y0, y1;
    rope_cs(pos, i, p, &c, &s);
    rope_offsets(p, i, head_dim, o0, o1);
    rope_apply(v[*o0], v[*o1], c, s, &y0, &y1);
    v[*o0] = y0, v[*o1] = y1;
}

/* One element of a K or V row into its pool (F16 or F32), at the token's slot. */
static __device__ inline void kv_put(unsigned char *pool, int f16, size_t at, float x) {
    if (f16)
        ((uint16_t *)pool)[at] = sol_f32_to_f16(x);
    else
        ((float *)pool)[at] = x;
}

#endif
