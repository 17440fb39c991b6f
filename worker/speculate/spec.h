/* spec: the verify half of speculative decoding - exact rejection sampling of draft tokens
 * against the target model's distributions (Leviathan et al. / Chen et al. 2023), plus metrics.
 *
 * One step for one sequence whose accepted history is H[0, L) (H[L-1] not yet in the target KV):
 *   1. a drafter proposes d[0, k) with draft distributions q (drafter.h);
 *   2. the target scores rows H[L-1], d[0], ..., d[k-1] at positions L-1 .. L-1+k in one forward
 *      pass (spec_fill_rows writes them into a shared model_batch), logits for all k+1 rows;
 *   3. spec_target_probs turns those logits into p[0, k+1) under the sequence's sampler params;
 *   4. spec_verify accepts a prefix of j drafts and emits j+1 tokens (the correction or bonus);
 *   5. the caller keeps KV up to position L+j-1 (L+j tokens) and drops the rest
 *      (kv_seq_truncate, or just a length for a contiguous cache).
 * The output distribution equals the target's, token by token; greedy equals greedy. */
#ifndef SOL_SPEC_H
#define SOL_SPEC_H

#include <stdint.h>

#include "err.h"
#include "sampler.h"

#define SPEC_MAX_K 16
/* Lane of the draft model's own token draws: independent of the accept test and of the
 * correction draw (sharing a lane with either would bias the output). */
#define SPEC_RNG_LANE_DRAFT 2

/* Accept draft token x given uniform u in [0,1), target p(x) and draft q(x): non-zero to accept.
 * A function pointer so tests can prove a wrong rule is caught. */
typedef int (*spec_accept_fn)(double u, float p, float q);

/* The exact rule: accept with probability min(1, p/q). */
int spec_accept_exact(double u, float p, float q);

/* Writes the k+1 verify rows (last accepted token, then the drafts) at positions pos0 .. pos0+k.
 * The caller adds slots, attention and logit rows from its own KV bookkeeping. */
void spec_fill_rows(int32_t last_token, const int32_t *draft, int k, int32_t pos0, int32_t *tokens,
                    int32_t *pos);

/* p rows from the target's k+1 logit rows (n_vocab floats each, overwritten). `history` holds the
 * accepted tokens then the drafts: history[0, n_hist + k); row i sees history[0, n_hist + i),
 * exactly what non-speculative decoding would have seen. */
int spec_target_probs(sampler *s, const sampler_seq *seq, float *logits, int k,
                      const int32_t *history, int32_t n_hist, float *probs, sol_err *err);

/* Rejection sampling. p: (k+1) x n_vocab target rows; q: k x n_vocab draft rows, or NULL when
 * the draft is one-hot at draft[i] (n-gram lookup). Draft i's accept test uses
 * sampler_seq_uniform(seq, i, SOL_RNG_LANE_ACCEPT); the first rejected position j draws from
 * normalize(max(0, p_j - q_j)) at draw pos + j; if all k pass, a bonus token is drawn from p_k.
 * Writes the j+1 emitted tokens to out (room for k+1) and j to *n_accepted, advances seq->pos by
 * j+1, and returns j+1 or a negative error. scratch holds n_vocab floats. */
int spec_verify(sampler_seq *seq, const float *p, const int32_t *draft, const float *q, int k,
                int32_t n_vocab, spec_accept_fn rule, float *scratch, int32_t *out, int *n_accepted,
                sol_err *err);

/* Adaptive k: one more after a step that accepted everything, one less after one that accepted
 * under half, within [k_min, k_max]. */
int spec_adapt_k(int k, int k_drafted, int n_accepted, int k_min, int k_max);

typedef struct spec_stats {
    uint64_t steps;    /* verify steps */
    uint64_t drafted;  /* draft tokens proposed */
    uint64_t accepted; /* of those, accepted */
    uint64_t emitted;  /* tokens emitted by verify steps (accepted + one per step) */
    uint64_t draft_ns, verify_ns;
} spec_stats;

void spec_stats_add(spec_stats *s, int k_drafted, int n_accepted, uint64_t draft_ns,
                    uint64_t verify_ns);
double spec_stats_acceptance(const spec_stats *s);      /* accepted / drafted */
double spec_stats_tokens_per_step(const spec_stats *s); /* emitted / steps */

#endif
