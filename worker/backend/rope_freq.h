/* rope_freq: RoPE's per-pair frequencies (theta_i) from sol_rope_params, the one rule that the
 * CPU backend's rope and the CUDA kernels' angles (a table the CUDA backend stages) both read. */
#ifndef SOL_ROPE_FREQ_H
#define SOL_ROPE_FREQ_H

#include <math.h>

#include "backend.h"

/* Pairs of a head at most: rope refuses head_dim > 1024 on every backend. */
#define SOL_ROPE_MAX_PAIRS 512

/* YaRN's mix for pair i: the ramp 1 - clamp((i - low) / max(0.001, high - low), 0, 1) times
 * ext_factor (backend.h, sol_rope_params). */
static inline double sol_rope_yarn_mix(const sol_rope_params *p, int i) {
    double y = (i - (double)p->yarn_low) / fmax(0.001, (double)p->yarn_high - p->yarn_low);
    return (1.0 - fmin(1.0, fmax(0.0, y))) * p->ext_factor;
}

/* theta_i of pair i, in double: base^(-2i/d), with linear scaling (freq_scale), Llama-3
 * frequency bands (smooth between the two wavelengths) or YaRN's mix of the interpolated and the
 * original frequency. */
static inline double sol_rope_inv_freq(const sol_rope_params *p, int i, int head_dim) {
    double f = pow((double)p->freq_base, -2.0 * i / head_dim);
    if (p->ext_factor != 0.0f) {
        double mix = sol_rope_yarn_mix(p, i);
        return f * p->freq_scale * (1.0 - mix) + f * mix;
    }
    if (p->freq_scale > 0.0f) f *= p->freq_scale;
    if (p->scaling_factor <= 0.0f || p->orig_ctx <= 0) return f;
    const double two_pi = 6.283185307179586476925;
    double wavelen = two_pi / f;
    double low_wl = p->orig_ctx / (double)p->low_freq_factor;
    double high_wl = p->orig_ctx / (double)p->high_freq_factor;
    if (wavelen < high_wl) return f;
    if (wavelen > low_wl) return f / p->scaling_factor;
    double smooth = (p->orig_ctx / wavelen - p->low_freq_factor) /
                    ((double)p->high_freq_factor - p->low_freq_factor);
    return (1.0 - smooth) * f / p->scaling_factor + smooth * f;
}

/* out[i] = theta_i for the head_dim / 2 pairs (head_dim even, <= 2 SOL_ROPE_MAX_PAIRS). */
static inline void sol_rope_inv_freqs(const sol_rope_params *p, int head_dim, double *out) {
    for (int i = 0; i < head_dim / 2; i++)
        out[i] = sol_rope_inv_freq(p, i, head_dim);
}

#endif
