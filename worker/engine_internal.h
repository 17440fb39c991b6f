/* engine_internal: the engine's private state, shared by engine.c (actor, step loop) and
 * engine_request.c (building and validating requests on the submitting thread). */
#ifndef SOL_ENGINE_INTERNAL_H
#define SOL_ENGINE_INTERNAL_H

#include <pthread.h>

#include "engine.h"
#include "kv_cache.h"
#include "scheduler.h"
#include "stop_strings.h"

/* One request, from engine_submit to its finish event. Owned by the engine. */
typedef struct ereq {
    sched_seq seq; /* tokens: prompt (+ resume tokens), then generated */
    uint64_t id;
    void *user;
    int32_t n_prompt;    /* the client's prompt (resume tokens not included) */
    int32_t n_generated; /* resume tokens included */
    int32_t max_tokens;  /* total generated tokens allowed (resume tokens included) */
    sampler_seq sseq;
    bool ignore_eos;
    bool cancel_requested; /* guarded by engine.mu */
    uint64_t deadline_ns;
    char *salt;
    stop_text stop;
    tok_stream *ts;
    struct ereq *inbox_next;            /* submitted, not yet seen by the engine thread */
    struct ereq *live_prev, *live_next; /* every request not yet finished (guarded by mu) */
} ereq;

struct engine {
    engine_config cfg;
    model *m;
    tokenizer *tok;
    chat_template_family chat_family;
    int32_t n_vocab;
    kv_cache *kv;
    sol_kv *kv_data;
    sched *sched;
    sampler *smp;
    float *logits; /* max_num_seqs x n_vocab */
    pthread_t thread;
    bool thread_started;
    /* guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t wake, idle;
    bool stop;
    ereq *inbox_head, *inbox_tail;
    ereq *live;
    int32_t n_live, n_cancels, n_deadlines;
    uint64_t next_id;
    engine_stats stats;
    /* engine thread only */
    uint64_t win_start_ns, win_tokens;
};

/* Builds a request (tokenize / template, validate, copy). Caller's thread; no engine state
 * touched but read-only configuration. */
int ereq_build(const engine *e, const engine_request *req, ereq **out, sol_err *err);
void ereq_free(ereq *r);

#endif
