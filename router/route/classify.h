/* classify: pick the pool ("fast" or "precise") for a request and say why.
 * Decision order: explicit pool as model → tags → rules in order → classifier → default pool. */
#ifndef SOL_CLASSIFY_H
#define SOL_CLASSIFY_H

#include <stddef.h>
#include <stdint.h>

#include "classifier_model.h"
#include "err.h"

#define CLASSIFY_REASON_MAX 32

/* One rule; every condition that is set must hold (AND), `keywords` match if any one does.
 * 0 / NULL means "condition not set". Strings are copied by classify_new. */
typedef struct classify_rule {
    const char *tag;             /* request carries this tag */
    size_t prompt_chars_below;   /* prompt length in characters (code points) < N */
    size_t prompt_chars_above;   /* > N */
    uint32_t max_tokens_below;   /* max_tokens < N (an unset chat max_tokens never matches) */
    uint32_t max_tokens_above;   /* max_tokens > N (an unset chat max_tokens always matches) */
    const char *const *keywords; /* case-insensitive substrings of the prompt text */
    size_t n_keywords;
    const char *model; /* request's "model" equals this */
    const char *pool;  /* where a match sends the request (required) */
} classify_rule;

typedef struct classify_config {
    const char *const *pools; /* known pool names, e.g. {"fast", "precise"} */
    size_t n_pools;
    const char *default_pool; /* must be one of pools */
    const classify_rule *rules;
    size_t n_rules;
    const char *classifier_path; /* weights file, NULL: no classifier */
    double classifier_threshold; /* p(positive) >= t → positive pool; 0 → 0.5 */
} classify_config;

typedef struct classify classify;

/* What the router knows about a request when it routes it; all borrowed. */
typedef struct classify_input {
    const char *model;
    const char *text; /* whole prompt text (rules: length, keywords) */
    size_t text_len;
    const char *user_text; /* last user message or prompt (classifier); NULL → text */
    size_t user_text_len;
    uint32_t max_tokens;
    int max_tokens_set;
    const char *const *tags; /* body tags and X-Sol-Tags header tags together */
    size_t n_tags;
} classify_input;

typedef struct classify_result {
    const char *pool;                 /* borrowed from the classify object */
    char reason[CLASSIFY_REASON_MAX]; /* model | tag | rule:N | classifier:0.83 | default */
} classify_result;

/* Validates and deep-copies cfg (rules naming unknown pools, a bad default or an unreadable
 * classifier file are errors). */
int classify_new(const classify_config *cfg, classify **out, sol_err *e);
void classify_free(classify *c);

/* The pool for `in`. A model name that is not a pool is not judged here: the HTTP layer checks
 * it against the served models (http.c, resolve_model). Returns 0. */
int classify_route(const classify *c, const classify_input *in, classify_result *out);

/* Is `name` one of the pools? Returns the pool's stored name or NULL. */
const char *classify_pool(const classify *c, const char *name);
size_t classify_n_pools(const classify *c);
const char *classify_pool_at(const classify *c, size_t i);

/* Split "a, b,c" (an X-Sol-Tags header) into at most `max` tags written into `store` (cap
 * bytes); returns how many tags were found. Pointers in tags[] point into store. */
size_t classify_split_tags(const char *header, char *store, size_t cap, const char **tags,
                           size_t max);

#endif
