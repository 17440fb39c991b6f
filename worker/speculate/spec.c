/* spec: exact rejection sampling for speculative decoding (see spec.h). */
#include "spec.h"

#include <errno.h>
#include <string.h>

#include "rng.h"

int spec_accept_exact(double u, float p, float q) {
    /* u * q < p is u < p / q without dividing; q == 0 with p > 0 accepts (ratio is infinite). */
    return u * (double)q < (double)p;
}

void spec_fill_rows(int32_t last_token, const int32_t *draft, int k, int32_t pos0, int32_t *tokens,
                    int32_t *pos) {
    tokens[0] = last_token;
    for (int i = 0; i < k; i++)
        tokens[i + 1] = draft[i];
    for (int i = 0; i <= k; i++)
        pos[i] = pos0 + i;
}

int spec_target_probs(sampler *s, const sampler_seq *seq, float *logits, int k,
                      const int32_t *history, int32_t n_hist, float *probs, sol_err *err) {
    int32_t nv = sampler_n_vocab(s);
    for (int i = 0; i <= k; i++) {
        int rc = sampler_probs(s, seq, logits + (size_t)i * nv, history, n_hist + i,
                               probs + (size_t)i * nv, err);
        if (rc) return rc;
    }
    return 0;
}

static float q_at(const float *q, const int32_t *draft, int i, int32_t nv, int32_t tok) {
    if (q) return q[(size_t)i * nv + tok];
    return tok == draft[i] ? 1.0f : 0.0f;
}

/* max(0, p - q) into r; falls back to p when that is all zero (p == q, only reachable through
 * rounding), so the draw never fails. */
static void residual(const float *p, const float *q, const int32_t *draft, int i, int32_t nv,
                     float *r) {
    double sum = 0;
    for (int32_t t = 0; t < nv; t++) {
        float d = p[t] - q_at(q, draft, i, nv, t);
        r[t] = d > 0 ? d : 0;
        sum += r[t];
    }
    if (!(sum > 0)) memcpy(r, p, sizeof(float) * (size_t)nv);
}

int spec_verify(sampler_seq *seq, const float *p, const int32_t *draft, const float *q, int k,
                int32_t n_vocab, spec_accept_fn rule, float *scratch, int32_t *out, int *n_accepted,
                sol_err *err) {
    if (k < 0 || k > SPEC_MAX_K)
        return sol_err_set(err, -EINVAL, "spec_verify: k must be 0..%d, got %d", SPEC_MAX_K, k);
    uint64_t pos = seq->pos;
    int j = 0;
    for (; j < k; j++) {
        int32_t x = draft[j];
        if (x < 0 || x >= n_vocab)
            return sol_err_set(err, -EINVAL, "spec_verify: draft token %d outside vocab %d", (int)x,
                               (int)n_vocab);
        double u = sampler_seq_uniform(seq, (uint64_t)j, SOL_RNG_LANE_ACCEPT);
        if (!rule(u, p[(size_t)j * n_vocab + x], q_at(q, draft, j, n_vocab, x))) break;
        out[j] = x;
    }
    sampler_seq_set_position(seq, pos + (uint64_t)j);
    const float *row = p + (size_t)j * n_vocab;
    if (j < k) {
        residual(row, q, draft, j, n_vocab, scratch);
        row = scratch;
    }
    int32_t t = sampler_sample_from_probs(seq, row, n_vocab, err);
    if (t < 0) return t;
    out[j] = t;
    *n_accepted = j;
    return j + 1;
}

int spec_adapt_k(int k, int k_drafted, int n_accepted, int k_min, int k_max) {
    if (k_drafted > 0 && n_accepted >= k_drafted)
        k++;
    else if (2 * n_accepted < k_drafted)
        k--;
    return k < k_min ? k_min : k > k_max ? k_max : k;
}

void spec_stats_add(spec_stats *s, int k_drafted, int n_accepted, uint64_t draft_ns,
                    uint64_t verify_ns) {
    s->steps++;
    s->drafted += (uint64_t)k_drafted;
    s->accepted += (uint64_t)n_accepted;
    s->emitted += (uint64_t)n_accepted + 1;
    s->draft_ns += draft_ns;
    s->verify_ns += verify_ns;
}

double spec_stats_acceptance(const spec_stats *s) {
    return s->drafted ? (double)s->accepted / (double)s->drafted : 0.0;
}

double spec_stats_tokens_per_step(const spec_stats *s) {
    return s->steps ? (double)s->emitted / (double)s->steps : 0.0;
}
