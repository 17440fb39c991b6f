/* moe_route: see moe_route.h. The float order is llama.cpp's build_moe_ffn for the
 * softmax-gated architectures (Mixtral, Qwen3-MoE) and gpt-oss on its CPU build, to the bit: the
 * probabilities from ggml's soft_max, the selected ones summed in double (ggml_sum_rows) and
 * divided by that sum. A weight a ulp off
 * would pass through the next layer's quantized activations as a different rounding now and
 * then, and leave llama.cpp's greedy path (docs/models.md, "Mixtures of experts"). */
#include "moe_route.h"

#include "ggml_float.h"

#include <math.h>
#include <stddef.h>

/* F16's smallest normal: llama.cpp's floor for the renormalizing sum. */
static const float k_min_sum = 6.103515625e-5f;

/* ggml's soft_max of a row as llama.cpp's CPU build runs it for the router (lanes: the build's
 * register width, ggml_float.h): the max subtracted; each run of `lanes` through its vectorized
 * expf, summed in its register order into a double; the rest through libm's expf, each added to
 * the double; the row scaled by the sum's inverse. */
static void softmax(const float *lg, int n, int lanes, float *p) {
    lanes = lanes ? lanes : SOL_GGML_AVX512; /* sol_backend.ggml_lanes: 0 = AVX-512 */
    float mx = lg[0];
    for (int e = 1; e < n; e++)
        if (lg[e] > mx) mx = lg[e];
    double sum = 0.0;
    int e = 0;
    for (; e + lanes <= n; e += lanes) {
        for (int i = 0; i < lanes; i++)
            p[e + i] = sol_ggml_expf(lg[e + i] - mx, lanes);
        sum += (double)sol_ggml_hsum(p + e, lanes);
    }
    for (; e < n; e++) {
        p[e] = expf(lg[e] - mx);
        sum += p[e];
    }
    float inv = (float)(1.0 / sum);
    for (e = 0; e < n; e++)
        p[e] *= inv;
}

/* The k largest of p (sel, highest first; ties to the lower index) and their values (w), by
 * selection: k is small (2..8 in the models served). */
static void top_k(const float *p, int n_expert, int k, float *w, int32_t *sel) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n_expert; e++) {
            int taken = 0;
            for (int i = 0; i < j && !taken; i++)
                taken = sel[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[j] = best;
        w[j] = p[best];
    }
}

static void scale_w(float *w, int k, float scale) {
    for (int j = 0; scale != 0.0f && scale != 1.0f && j < k; j++)
        w[j] *= scale;
}

static void route_one(const float *lg, int n_expert, int k, float scale, int lanes, float *w,
                      int32_t *sel) {
    float p[MOE_MAX_EXPERTS];
    softmax(lg, n_expert, lanes, p);
    top_k(p, n_expert, k, w, sel);
    double sd = 0.0; /* ggml_sum_rows adds in double */
    for (int j = 0; j < k; j++)
        sd += w[j];
    float s = (float)sd;
    if (s < k_min_sum) s = k_min_sum;
    for (int j = 0; j < k; j++)
        w[j] /= s;
    scale_w(w, k, scale);
}

void moe_route(const float *logits, int n, int n_expert, int k, float scale, int lanes, float *w,
               int32_t *sel) {
    for (int t = 0; t < n; t++)
        route_one(logits + (size_t)t * n_expert, n_expert, k, scale, lanes, w + (size_t)t * k,
                  sel + (size_t)t * k);
}

void moe_route_topk_softmax(const float *logits, int n, int n_expert, int k, float scale, int lanes,
                            float *w, int32_t *sel) {
    for (int t = 0; t < n; t++) {
        float lk[MOE_MAX_EXPERTS];
        float *wt = w + (size_t)t * k;
        top_k(logits + (size_t)t * n_expert, n_expert, k, lk, sel + (size_t)t * k);
        softmax(lk, k, lanes, wt);
        scale_w(wt, k, scale);
    }
}

/* gpt-oss's gate constants (llama.cpp's LLM_FFN_SWIGLU_OAI_MOE) */
static const float k_oai_alpha = 1.702f, k_oai_limit = 7.0f;

int moe_experts(sol_backend *be, const moe_ffn *x, int n_expert, const int32_t *end, int64_t dim,
                int64_t f, const float *ex, float *eh, float *eh2, float *ey) {
    int rc;
    for (int e = 0, at = 0; e < n_expert; at = end[e++]) {
        int c = end[e] - at;
        const float *const *b = x->gate_b ? (const float *[]){x->gate_b[e], x->up_b[e]} : NULL;
        if (c && (rc = sol_norm_matmul_many(be, ex + (size_t)at * dim, NULL, 0.0f, NULL,
                                            (const sol_weight *[]){&x->gate[e], &x->up[e]}, b,
                                            (float *[]){eh + (size_t)at * f, eh2 + (size_t)at * f},
                                            2, c)))
            return rc;
    }
    int64_t elems = (int64_t)(n_expert ? end[n_expert - 1] : 0) * f;
    if ((rc = x->oai ? sol_swiglu_oai(be, eh, eh2, eh, elems, k_oai_alpha, k_oai_limit)
                     : sol_silu_mul(be, eh, eh2, eh, elems)))
        return rc;
    for (int e = 0, at = 0; e < n_expert; at = end[e++]) {
        int c = end[e] - at;
        const float *b = x->down_b ? x->down_b[e] : NULL;
        if (c && (rc = sol_norm_matmul_many(be, eh + (size_t)at * f, NULL, 0.0f, NULL,
                                            (const sol_weight *[]){&x->down[e]},
                                            b ? (const float *[]){b} : NULL,
                                            (float *[]){ey + (size_t)at * dim}, 1, c)))
            return rc;
    }
    return 0;
}

void moe_group(int32_t *sel, int n, int k, int n_expert, int32_t *rows, int32_t *end) {
    int nk = n * k;
    for (int e = 0; e < n_expert; e++)
        end[e] = 0;
    for (int i = 0; i < nk; i++)
        end[sel[i]]++;
    /* end[e] becomes expert e's first row, and advances to one past its last as it fills */
    int at = 0;
    for (int e = 0; e < n_expert; e++) {
        int c = end[e];
        end[e] = at;
        at += c;
    }
    for (int i = 0; i < nk; i++) {
        int slot = end[sel[i]]++;
        rows[slot] = i / k;
        sel[i] = slot;
    }
}
