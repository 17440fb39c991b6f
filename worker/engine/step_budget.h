/* step_budget: how many tokens an engine step may take so the streams it decodes keep their time
 * per output token (X-Sol-TPOT-Ms): a two-term cost model fitted to the steps the engine times. */
#ifndef SOL_STEP_BUDGET_H
#define SOL_STEP_BUDGET_H

#include <stdint.h>

/* One table: a prompt chunk still gets this many tokens a step however tight a target (a target
 * below one decode step cannot be met anyway, and prefills must progress); the weight of a new
 * measurement (about the last eight steps). */
enum { STEP_BUDGET_MIN_PREFILL = 16 };
#define STEP_BUDGET_WEIGHT 0.125

/* A step's forward pass costs base_ns (its decode rows) + per_token_ns per prompt token. */
typedef struct step_cost {
    double base_ns, per_token_ns; /* 0: not measured yet */
} step_cost;

/* A step of n_decode decode rows and n_prefill prompt tokens took ns: decode-only steps teach
 * the base, mixed ones the per-token cost beyond it. */
void step_cost_observe(step_cost *c, int32_t n_decode, int32_t n_prefill, uint64_t ns);

/* The most tokens a step with n_decode decode rows may take so it lasts at most tpot_ns: 0 (no
 * cap) without a target or before the model has both terms; never below n_decode +
 * STEP_BUDGET_MIN_PREFILL. */
int32_t step_cost_cap(const step_cost *c, uint64_t tpot_ns, int32_t n_decode);

#endif
