/* sampling: one request's sampling settings, defined once for the router's parsed request, the
 * wire message (sol.proto SamplingParams) and the worker's sampler (sampler_params is this type).
 *
 * The numeric settings' names and bounds are one table (sol_sampling_fields in sampling.c): the
 * router's parser sets fields through it, the wire validation and the sampler check with it, and
 * docs/api.md's rows are tested against it. A new numeric setting: this struct and its default,
 * a row of the table, sol.proto and the two wire copies in sampling.c; then the sampler applies
 * it (sampler.c). */
#ifndef SOL_SAMPLING_H
#define SOL_SAMPLING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "sol.pb-c.h"

/* Alternatives a token's logprobs may list (OpenAI's top_logprobs limit): the API, the wire and
 * the sampler all bound them by this. */
#define SOL_SAMPLING_MAX_LOGPROBS 20

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

/* A numeric setting the API takes: its request field name (the wire field has the same name),
 * the value's kind and bounds, and where it lives in sol_sampling. */
typedef struct sol_sampling_field {
    const char *name;
    bool integer;  /* an int32_t field, else a float */
    double lo, hi; /* [lo, hi], or (lo, hi] when lo_open */
    bool lo_open;
    size_t offset; /* in sol_sampling */
} sol_sampling_field;

extern const sol_sampling_field sol_sampling_fields[];
extern const size_t sol_sampling_n_fields;

/* The field called name, or NULL. */
const sol_sampling_field *sol_sampling_field_find(const char *name);
/* The bounds as docs/api.md writes them: "[0, 2]", "(0, 1]", ">= -1" spelled "≥ -1". */
void sol_sampling_field_bounds(const sol_sampling_field *f, char *out, size_t cap);
/* s's field f = v after checking v against the bounds (and that an integer field's v is whole):
 * -EINVAL with "'NAME' must be in [lo, hi], got v" otherwise. */
int sol_sampling_field_set(sol_sampling *s, const sol_sampling_field *f, double v, sol_err *err);
/* Every field of the table within its bounds (the first one that is not, as above). */
int sol_sampling_check(const sol_sampling *s, sol_err *err);

/* Into the wire message (which borrows nothing). */
void sol_sampling_to_msg(const sol_sampling *s, Sol__SamplingParams *m);

/* From the wire message; NULL gives the defaults, and a zero top_p or repetition_penalty (a field
 * the sender left out) its default. The range checks are the sampler's (sampler_params_check). */
sol_sampling sol_sampling_from_msg(const Sol__SamplingParams *m);

#endif
