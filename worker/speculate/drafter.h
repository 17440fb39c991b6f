/* drafter: proposes draft tokens for speculative decoding, for many sequences at once.
 * Two kinds: a smaller draft model with its own paged KV cache, and n-gram prompt lookup. */
#ifndef SOL_DRAFTER_H
#define SOL_DRAFTER_H

#include <stdint.h>

#include "err.h"
#include "model.h"
#include "sampler.h"

/* One sequence's request. The drafter keeps per-slot state keyed by `slot` and re-synchronises
 * itself with `history` on every call (it finds the common prefix with what it has cached and
 * rolls its KV back to it), so callers never report rejections separately. */
typedef struct drafter_req {
    int32_t slot;           /* the caller's sequence id, 0 .. max_seqs-1 */
    const sampler_seq *seq; /* params (temperature, top-p, ...) and the next draw position */
    const int32_t *history; /* prompt + accepted tokens, the last one not yet verified */
    int32_t n_history;
    int k;           /* drafts wanted, 1 .. SPEC_MAX_K */
    int32_t *tokens; /* out: room for k */
    float *q;        /* out: k x n_vocab draft distributions; unused when one-hot */
    int n_draft;     /* out: drafts made, 0 .. k (n-gram may find no match) */
} drafter_req;

typedef struct drafter drafter;

/* Fills tokens/q/n_draft of reqs[0, n) (distinct slots). Returns 0 or a negative code. */
int drafter_propose(drafter *d, drafter_req *reqs, int n, sol_err *err);
/* The sequence in `slot` is finished: release what the drafter holds for it. */
void drafter_release(drafter *d, int32_t slot);
/* 1 when drafts are one-hot (q is not written: pass q = NULL to spec_verify). */
int drafter_one_hot(const drafter *d);
const char *drafter_name(const drafter *d);
void drafter_free(drafter *d); /* NULL is a no-op */

/* N-gram prompt lookup: matches the last n tokens (n_max down to n_min) against earlier history
 * and proposes what followed the most recent match. */
drafter *drafter_ngram_new(int n_min, int n_max, sol_err *err);

/* A draft model (borrowed; same vocabulary as the target) with its own KV cache of
 * max_seqs x max_ctx tokens on the model's backend. */
drafter *drafter_model_new(model *m, int max_seqs, int max_ctx, sol_err *err);

/* Blocks the draft model's KV manager has in use (0 once every slot is released); for tests. */
int32_t drafter_model_used_blocks(const drafter *d);

#endif
