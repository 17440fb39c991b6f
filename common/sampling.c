/* sampling: see sampling.h. The two copies between the struct and the wire live here only. */
#include "sampling.h"

sol_sampling sol_sampling_default(void) {
    return (sol_sampling){
        .temperature = 1.0f,
        .top_k = 0,
        .top_p = 1.0f,
        .min_p = 0.0f,
        .repetition_penalty = 1.0f,
        .penalty_last_n = 64,
        .frequency_penalty = 0.0f,
        .presence_penalty = 0.0f,
        .seed = 0,
        .has_seed = false,
        .want_logprobs = false,
        .n_logprobs = 0,
    };
}

void sol_sampling_to_msg(const sol_sampling *s, Sol__SamplingParams *m) {
    m->temperature = s->temperature;
    m->top_p = s->top_p;
    m->top_k = s->top_k > 0 ? s->top_k : 0; /* every "off" is 0 on the wire */
    m->min_p = s->min_p;
    m->repetition_penalty = s->repetition_penalty;
    m->frequency_penalty = s->frequency_penalty;
    m->presence_penalty = s->presence_penalty;
    m->seed = s->seed;
    m->has_seed = s->has_seed;
    m->want_logprobs = s->want_logprobs;
    m->logprobs = s->want_logprobs && s->n_logprobs > 0 ? (uint32_t)s->n_logprobs : 0;
}

sol_sampling sol_sampling_from_msg(const Sol__SamplingParams *m) {
    sol_sampling s = sol_sampling_default();
    if (!m) return s;
    s.temperature = m->temperature;
    s.top_k = m->top_k;
    if (m->top_p > 0) s.top_p = m->top_p;
    s.min_p = m->min_p;
    if (m->repetition_penalty > 0) s.repetition_penalty = m->repetition_penalty;
    s.frequency_penalty = m->frequency_penalty;
    s.presence_penalty = m->presence_penalty;
    s.seed = m->seed;
    s.has_seed = m->has_seed;
    s.want_logprobs = m->want_logprobs;
    /* Clamped so a huge wire value cannot wrap negative; the sampler refuses > 20. */
    s.n_logprobs = m->logprobs > INT32_MAX ? INT32_MAX : (int32_t)m->logprobs;
    return s;
}
