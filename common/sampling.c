/* sampling: see sampling.h. The table of numeric settings and the two copies between the struct
 * and the wire live here only. */
#include "sampling.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

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

#define FIELD(name, integer, lo, hi, lo_open)                                                      \
    { #name, integer, lo, hi, lo_open, offsetof(sol_sampling, name) }

/* The bounds OpenAI documents where it has the field (temperature 0..2, the penalties -2..2),
 * vLLM's for its extras; repetition_penalty above 100 divides every logit by more than 100, which
 * no use needs. top_k: -1 (OpenAI-style) and 0 both mean off. */
const sol_sampling_field sol_sampling_fields[] = {
    FIELD(temperature, false, 0.0, 2.0, false),
    FIELD(top_p, false, 0.0, 1.0, true),
    FIELD(top_k, true, -1.0, 2147483647.0, false),
    FIELD(min_p, false, 0.0, 1.0, false),
    FIELD(repetition_penalty, false, 0.0, 100.0, true),
    FIELD(frequency_penalty, false, -2.0, 2.0, false),
    FIELD(presence_penalty, false, -2.0, 2.0, false),
};
const size_t sol_sampling_n_fields = sizeof sol_sampling_fields / sizeof sol_sampling_fields[0];

const sol_sampling_field *sol_sampling_field_find(const char *name) {
    for (size_t i = 0; name && i < sol_sampling_n_fields; i++)
        if (!strcmp(sol_sampling_fields[i].name, name)) return &sol_sampling_fields[i];
    return NULL;
}

void sol_sampling_field_bounds(const sol_sampling_field *f, char *out, size_t cap) {
    if (f->integer && f->hi >= 2147483647.0)
        snprintf(out, cap, "\xe2\x89\xa5 %g", f->lo);
    else
        snprintf(out, cap, "%c%g, %g]", f->lo_open ? '(' : '[', f->lo, f->hi);
}

static double get(const sol_sampling *s, const sol_sampling_field *f) {
    const char *p = (const char *)s + f->offset;
    return f->integer ? (double)*(const int32_t *)p : (double)*(const float *)p;
}

static int out_of_range(const sol_sampling_field *f, double v, sol_err *err) {
    char b[48];
    sol_sampling_field_bounds(f, b, sizeof b);
    return sol_err_set(err, -EINVAL, "'%s' must be %s%s%s, got %g", f->name,
                       f->integer ? "an integer " : "", b[0] == '(' || b[0] == '[' ? "in " : "", b,
                       v);
}

static bool fits(const sol_sampling_field *f, double v) {
    return isfinite(v) && v <= f->hi && (f->lo_open ? v > f->lo : v >= f->lo) &&
           (!f->integer || v == floor(v));
}

int sol_sampling_field_set(sol_sampling *s, const sol_sampling_field *f, double v, sol_err *err) {
    if (!fits(f, v)) return out_of_range(f, v, err);
    char *p = (char *)s + f->offset;
    if (f->integer)
        *(int32_t *)p = (int32_t)v;
    else
        *(float *)p = (float)v;
    return 0;
}

int sol_sampling_check(const sol_sampling *s, sol_err *err) {
    for (size_t i = 0; i < sol_sampling_n_fields; i++) {
        double v = get(s, &sol_sampling_fields[i]);
        if (!fits(&sol_sampling_fields[i], v)) return out_of_range(&sol_sampling_fields[i], v, err);
    }
    return 0;
}
