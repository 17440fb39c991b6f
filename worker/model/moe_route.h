/* moe_route: a mixture of experts' routing on the host - each token's top-k experts and their
 * weights from the router's logits, the tokens grouped by expert, one matmul each over them. */
#ifndef SOL_MOE_ROUTE_H
#define SOL_MOE_ROUTE_H

#include <stdint.h>

#include "backend.h"

enum { MOE_MAX_EXPERTS = 512 }; /* expert_count bound (Qwen3-235B and gpt-oss-120b: 128) */

/* Token t's k experts (sel[t*k + j], highest probability first; a tie goes to the lower index)
 * and weights (w[t*k + j]) from its logits (n x n_expert): softmax over every expert, top-k, the
 * k probabilities renormalized to sum 1 (the sum clamped below at F16's smallest normal, as
 * llama.cpp does), then times scale unless scale is 0 or 1. The float order is llama.cpp's x86
 * build of register width `lanes` (SOL_GGML_AVX2 or SOL_GGML_AVX512, ggml_float.h; 0 = AVX-512),
 * a backend's ggml_lanes. */
void moe_route(const float *logits, int n, int n_expert, int k, float scale, int lanes, float *w,
               int32_t *sel);

/* gpt-oss's gating (llama.cpp's SOFTMAX_WEIGHT): the k highest logits (ties to the lower
 * index), weighed by a softmax over just those k, not renormalized, times scale unless 0 or 1;
 * lanes as for moe_route. */
void moe_route_topk_softmax(const float *logits, int n, int n_expert, int k, float scale, int lanes,
                            float *w, int32_t *sel);

/* Groups the n*k choices by expert, in expert order and token order within one: rows[i] (i in
 * 0..n*k) is the token of the i-th grouped row; sel is rewritten in place to where choice
 * t*k + j landed among them; end[e] is one past expert e's last row (its rows start at
 * end[e - 1], or 0). */
void moe_group(int32_t *sel, int n, int k, int n_expert, int32_t *rows, int32_t *end);

/* The experts of one layer: n_expert weights each; the biases one vector per expert (gpt-oss),
 * or NULL for none. */
typedef struct moe_ffn {
    const sol_weight *gate, *up, *down;
    const float *const *gate_b, *const *up_b, *const *down_b;
    int oai; /* gpt-oss's clamped SwiGLU (alpha 1.702, limit 7), else SiLU */
} moe_ffn;

/* The active experts' FFN over the grouped rows (moe_group's end): for expert e with rows
 * [end[e - 1], end[e]) of ex (dim wide), one matmul_many of gate[e] and up[e] (with their
 * biases) into eh and eh2 (f wide), then the gate of all end[n_expert - 1] rows at once, then
 * one matmul of down[e] (with its bias) into ey (dim wide). An expert with no rows costs
 * nothing. */
int moe_experts(sol_backend *be, const moe_ffn *x, int n_expert, const int32_t *end, int64_t dim,
                int64_t f, const float *ex, float *eh, float *eh2, float *ey);

#endif
