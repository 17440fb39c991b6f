/* moe_route: see moe_route.h. The float order follows llama.cpp's build_moe_ffn for the
 * softmax-gated architectures (Mixtral, Qwen3-MoE): the probabilities come from a softmax of all
 * logits (max subtracted, the sum in double as ggml's soft_max), the selected ones are summed
 * in rank order and divided by that sum. */
#include "moe_route.h"

#include <math.h>
#include <stddef.h>

/* F16's smallest normal: llama.cpp's floor for the renormalizing sum. */
static const float k_min_sum = 6.103515625e-5f;

static void route_one(const float *lg, int n_expert, int k, float scale, float *w, int32_t *sel) {
    float mx = lg[0];
    for (int e = 1; e < n_expert; e++)
        if (lg[e] > mx) mx = lg[e];
    double sum = 0.0;
    float p[MOE_MAX_EXPERTS];
    for (int e = 0; e < n_expert; e++) {
        p[e] = expf(lg[e] - mx);
        sum += p[e];
    }
    float inv = (float)(1.0 / sum);
    for (int e = 0; e < n_expert; e++)
        p[e] *= inv;
    /* top-k by selection: k is small (2..8 in the models served) */
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
    float s = 0.0f;
    for (int j = 0; j < k; j++)
        s += w[j];
    if (s < k_min_sum) s = k_min_sum;
    for (int j = 0; j < k; j++) {
        w[j] /= s;
        if (scale != 0.0f && scale != 1.0f) w[j] *= scale;
    }
}

void moe_route(const float *logits, int n, int n_expert, int k, float scale, float *w,
               int32_t *sel) {
    for (int t = 0; t < n; t++)
        route_one(logits + (size_t)t * n_expert, n_expert, k, scale, w + (size_t)t * k,
                  sel + (size_t)t * k);
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
