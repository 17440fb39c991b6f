/* k_rope: rotary position embedding in place, one thread per (token, head, pair). Angles in
 * double with the CPU backend's rules (llama-3 bands, linear scaling), so both backends agree to
 * float rounding. The sine and cosine are rope_sincos's, not the CUDA library's: its double cos
 * and sin carry a large-argument path (Payne-Hanek) with a table in local memory, which the SASS
 * check forbids in a decode kernel even where it never runs. */
#include "cuda_kernels.h"
#include "half_bits.cuh"
#include "sol_cuda_kernel.h"

enum { ROPE_THREADS = 128 };

static __device__ double rope_inv_freq(const sol_cuda_rope_args &p, int i, int head_dim) {
    double f = pow((double)p.freq_base, -2.0 * i / head_dim);
    if (p.ext_factor != 0.0f) { /* YaRN: the CPU backend's mix, in double */
        double y = (i - (double)p.yarn_low) / fmax(0.001, (double)p.yarn_high - p.yarn_low);
        double mix = (1.0 - fmin(1.0, fmax(0.0, y))) * p.ext_factor;
        return f * p.freq_scale * (1.0 - mix) + f * mix;
    }
    if (p.freq_scale > 0.0f) f *= p.freq_scale;
    if (p.scaling_factor <= 0.0f || p.orig_ctx <= 0) return f;
    const double two_pi = 6.283185307179586476925;
    double wavelen = two_pi / f, low_wl = p.orig_ctx / (double)p.low_freq_factor,
           high_wl = p.orig_ctx / (double)p.high_freq_factor;
    if (wavelen < high_wl) return f;
    if (wavelen > low_wl) return f / p.scaling_factor;
    double smooth = (p.orig_ctx / wavelen - p.low_freq_factor) /
                    ((double)p.high_freq_factor - p.low_freq_factor);
    return (1.0 - smooth) * f / p.scaling_factor + smooth * f;
}

/* sin and cos of a in double: a reduced by pi/2 (k = nearest integer of a 2/pi) with pi/2 in
 * three parts of which the first two have 33 significant bits, so k times them is exact for
 * |k| < 2^20 (|a| < 1.6e6, a position of 1.6 million at the fastest frequency); then Taylor series
 * to degree 19 and 20 on |r| <= pi/4, whose remainder (< 2e-22) is far below double's rounding.
 * Rounded to float, the values are the CPU's (float)cos(a) and (float)sin(a) unless the two
 * doubles straddle a float rounding boundary, which a difference of an ulp or two of double
 * makes happen about once in 2^28 values. */
static __device__ void rope_sincos(double a, double *sn, double *cs) {
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

/* Rotates pair i of the head at v (position pos) in place; returns the pair's two offsets. */
static __device__ void rope_pair(float *v, int32_t pos, int i, int head_dim,
                                 const sol_cuda_rope_args &p, int *o0, int *o1) {
    int half = head_dim / 2;
    double a = pos * rope_inv_freq(p, i, head_dim), sd, cd;
    rope_sincos(a, &sd, &cd);
    /* YaRN's magnitude scale as the CPU applies it: one float multiply (1: exact) */
    float c = __fmul_rn((float)cd, p.mscale), s = __fmul_rn((float)sd, p.mscale);
    int step = p.neox ? 1 : 2, off = p.neox ? half : 1;
    *o0 = i * step, *o1 = i * step + off;
    float x0 = v[*o0], x1 = v[*o1];
    /* the CPU's three roundings each, not nvcc's contraction into an FMA: the same bits */
    v[*o0] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    v[*o1] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

static __global__ void k_rope(float *x, const int32_t *pos, int n, int heads, int head_dim,
                              sol_cuda_rope_args p) {
    sol_grid_dependency();
    int half = head_dim / 2, o0, o1;
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (int64_t)n * heads * half) return;
    int64_t th = id / half; /* token * heads + head */
    rope_pair(x + th * head_dim, pos[th / heads], (int)(id % half), head_dim, p, &o0, &o1);
}

/* One element of a K or V row into its pool (F16 or F32), at the token's slot. */
static __device__ void kv_put(unsigned char *pool, int f16, size_t at, float x) {
    if (f16)
        ((uint16_t *)pool)[at] = sol_f32_to_f16(x);
    else
        ((float *)pool)[at] = x;
}

/* rope(q), rope(k) and the K/V write of one token per block (blockIdx.x), as one launch: the
 * thread that rotates a pair of k stores both values in the pool too, so k is not read back.
 * pos_slots: n positions, then n cache slots. Each element's arithmetic is k_rope's and
 * k_kv_write's: the same bits as the three launches. */
static __global__ void k_rope_kv(float *q, float *k, const float *v, const int32_t *pos_slots,
                                 int n, int heads, int kv_heads, int head_dim, sol_cuda_rope_args p,
                                 unsigned char *k_pool, unsigned char *v_pool, int f16) {
    sol_grid_dependency();
    int t = blockIdx.x, half = head_dim / 2, row = kv_heads * head_dim;
    int32_t at = pos_slots[t];
    size_t dst = (size_t)pos_slots[n + t] * row;
    int qp = heads * half, kp = kv_heads * half;
    for (int id = threadIdx.x; id < qp + kp + row; id += blockDim.x) {
        int o0, o1;
        if (id < qp) {
            rope_pair(q + ((size_t)t * heads + id / half) * head_dim, at, id % half, head_dim, p,
                      &o0, &o1);
        } else if (id < qp + kp) {
            int h = (id - qp) / half;
            float *kr = k + (size_t)t * row + (size_t)h * head_dim;
            rope_pair(kr, at, (id - qp) % half, head_dim, p, &o0, &o1);
            kv_put(k_pool, f16, dst + (size_t)h * head_dim + o0, kr[o0]);
            kv_put(k_pool, f16, dst + (size_t)h * head_dim + o1, kr[o1]);
        } else {
            int e = id - qp - kp;
            kv_put(v_pool, f16, dst + e, v[(size_t)t * row + e]);
        }
    }
}

extern "C" void SOL_CUDA_FN(rope)(float *x, const int32_t *pos, int n, int heads, int head_dim,
                                  sol_cuda_rope_args p, void *stream) {
    int64_t total = (int64_t)n * heads * (head_dim / 2);
    if (total > 0)
        SOL_LAUNCH(k_rope, dim3((unsigned)((total + ROPE_THREADS - 1) / ROPE_THREADS)),
                   dim3(ROPE_THREADS), 0, stream, x, pos, n, heads, head_dim, p);
}

extern "C" void SOL_CUDA_FN(rope_kv)(float *q, float *k, const float *v, const int32_t *pos_slots,
                                     int n, int heads, int kv_heads, int head_dim,
                                     sol_cuda_rope_args p, void *k_pool, void *v_pool, int f16,
                                     void *stream) {
    if (n > 0)
        SOL_LAUNCH(k_rope_kv, dim3((unsigned)n), dim3(ROPE_THREADS), 0, stream, q, k, v, pos_slots,
                   n, heads, kv_heads, head_dim, p, (unsigned char *)k_pool,
                   (unsigned char *)v_pool, f16);
}
