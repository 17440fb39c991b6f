/* sampling: one request's sampling settings, defined once for the router's parsed request, the
 * wire message (sol.proto SamplingParams) and the worker's sampler (sampler_params is this type).
 *
 * A new setting touches three files: this struct and its default, sol.proto, and the two copies
 * in sampling.c; then the router parses it (openai.c) and the sampler applies it (sampler.c). */
#ifndef SOL_SAMPLING_H
#define SOL_SAMPLING_H

#include <stdbool.h>
#include <stdint.h>

#include "sol.pb-c.h"

typedef struct sol_sampling {
    float temperature;        /* >= 0; 0 = greedy. Default 1 */
    int32_t top_k;            /* <= 0 = off (OpenAI's -1). Default 0 */
    float top_p;              /* (0, 1]; 1 = off. Default 1 */
    float min_p;              /* [0, 1]; 0 = off. Default 0 */
    float repetition_penalty; /* > 0; 1 = off. Default 1 */
    int32_t penalty_last_n;   /* window of the repetition penalty, prompt included; -1 = all. 64.
                               * Not on the wire: workers use the default */
    float frequency_penalty;  /* [-2, 2]; over generated tokens only. Default 0 */
    float presence_penalty;   /* [-2, 2]; over generated tokens only. Default 0 */
    uint64_t seed;            /* meaningful when has_seed; the worker picks one otherwise */
    bool has_seed;
    bool want_logprobs; /* return the chosen token's logprob */
    int32_t n_logprobs; /* top alternatives, 0..20; needs want_logprobs */
} sol_sampling;

sol_sampling sol_sampling_default(void);

/* Into the wire message (which borrows nothing). */
void sol_sampling_to_msg(const sol_sampling *s, Sol__SamplingParams *m);

/* From the wire message; NULL gives the defaults, and a zero top_p or repetition_penalty (a field
 * the sender left out) its default. The range checks are the sampler's (sampler_params_check). */
sol_sampling sol_sampling_from_msg(const Sol__SamplingParams *m);

#endif
