/* step_budget: the TPOT-keeping token cap of a step (step_budget.h). */
#include "step_budget.h"

static void fold(double *avg, double sample) {
    *avg = *avg > 0 ? (1 - STEP_BUDGET_WEIGHT) * *avg + STEP_BUDGET_WEIGHT * sample : sample;
}

void step_cost_observe(step_cost *c, int32_t n_decode, int32_t n_prefill, uint64_t ns) {
    if (n_prefill <= 0) {
        if (n_decode > 0) fold(&c->base_ns, (double)ns);
        return;
    }
    double beyond = (double)ns - (n_decode > 0 ? c->base_ns : 0);
    if (beyond > 0) fold(&c->per_token_ns, beyond / n_prefill);
}

int32_t step_cost_cap(const step_cost *c, uint64_t tpot_ns, int32_t n_decode) {
    if (!tpot_ns || c->base_ns <= 0 || c->per_token_ns <= 0) return 0;
    double room = ((double)tpot_ns - c->base_ns) / c->per_token_ns;
    int32_t extra = room > (double)STEP_BUDGET_MIN_PREFILL
                        ? (room < 1e9 ? (int32_t)room : 1000000000)
                        : STEP_BUDGET_MIN_PREFILL;
    return n_decode + extra;
}
