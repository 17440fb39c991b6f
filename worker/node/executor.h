/* executor: the interface the link actor drives to run requests (the simulation backend, or an
 * adapter over the serving engine), and the event queue that carries token chunks back to it. */
#ifndef SOL_EXECUTOR_H
#define SOL_EXECUTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "kv_links.h"
#include "err.h"
#include "model.h"
#include "sol.pb-c.h"

/* What a worker announces in Register; filled by the executor because only it knows the model. */
typedef struct exec_info {
    char model[256];        /* model name served */
    char backend[16];       /* cpu | cuda | sim */
    char chat_template[64]; /* template family applied to chat messages ("" when none) */
    char tool_format[16];   /* how that family's models write tool calls ("" when none) */
    uint32_t max_context;   /* tokens */
    uint32_t capacity;      /* concurrent sequences */
    bool speculative;
} exec_info;

/* Load figures for Heartbeat. */
typedef struct exec_stats {
    uint32_t running, waiting, preempted;
    uint32_t free_blocks, total_blocks;
    double prefix_hit_rate, tokens_per_s, spec_acceptance; /* rates in [0, 1] except tokens_per_s */
    uint64_t tier1_hit_tokens, tier2_hit_tokens; /* prompt tokens served from each KV tier */
    uint32_t tier2_blocks, tier2_used;           /* the second tier's size and fill */
    uint64_t quotes_used, quotes_declined;       /* replies sent back as their ids (engine.h) */
    uint64_t engine_steps;                       /* moves while work is queued */
    /* speculative decoding since start (all 0 without a drafter): verify steps, draft tokens
     * proposed and accepted, tokens emitted by verify steps, drafter and verify time */
    uint64_t spec_steps, spec_drafted, spec_accepted, spec_emitted;
    double spec_draft_seconds, spec_verify_seconds;
    char unhealthy[256]; /* "": healthy; else why the executor cannot step (engine_stats) */
} exec_stats;

/* The operations, all called from ONE thread (the link's). They only hand work to the
 * executor's own thread; results come back as events on the exec_events queue.
 *  - submit: copy what it needs from `g` (the caller frees it right after). Every accepted
 *    request ends with exactly one event whose chunk has finish_reason != FINISH_NONE. A
 *    refusal (bad parameters for this model) may come back either as a negative return or as
 *    a FINISH_ERROR chunk.
 *  - cancel: the request ends soon with FINISH_CANCELLED (or its natural end); unknown ids are
 *    ignored.
 *  - stats: current load figures (may lag the executor's thread slightly).
 *  - idle: true when every submitted request has emitted its final event.
 *  - free: stop the executor's thread (requests still running are dropped without events). */
typedef struct executor_ops {
    int (*submit)(void *self, const Sol__Generate *g, sol_err *e);
    void (*cancel)(void *self, const char *request_id);
    void (*info)(void *self, exec_info *out);
    void (*stats)(void *self, exec_stats *out);
    bool (*idle)(void *self);
    void (*free)(void *self);
    /* KV events (may be NULL: the executor reports none): engine_kv_events / engine_kv_held */
    size_t (*kv_events)(void *self, kv_link_event *out, size_t cap, bool *lost);
    size_t (*kv_held)(void *self, kv_link_event *out, size_t cap);
} executor_ops;

typedef struct executor {
    const executor_ops *ops;
    void *self;
} executor;

static inline int exec_submit(executor *x, const Sol__Generate *g, sol_err *e) {
    return x->ops->submit(x->self, g, e);
}
static inline void exec_cancel(executor *x, const char *request_id) {
    x->ops->cancel(x->self, request_id);
}
static inline void exec_info_get(executor *x, exec_info *out) {
    x->ops->info(x->self, out);
}
static inline void exec_stats_get(executor *x, exec_stats *out) {
    x->ops->stats(x->self, out);
}
static inline bool exec_idle(executor *x) {
    return x->ops->idle(x->self);
}
/* The prompt-chain links its KV cache began or ceased to hold since the last call (none without
 * the op); *lost: some were dropped (take exec_kv_held). */
static inline size_t exec_kv_events(executor *x, kv_link_event *out, size_t cap, bool *lost) {
    *lost = false;
    return x->ops->kv_events ? x->ops->kv_events(x->self, out, cap, lost) : 0;
}
static inline size_t exec_kv_held(executor *x, kv_link_event *out, size_t cap) {
    return x->ops->kv_held ? x->ops->kv_held(x->self, out, cap) : 0;
}
/* Frees the executor; NULL is a no-op. */
static inline void exec_free(executor *x) {
    if (x) x->ops->free(x->self);
}

/* The serving engine behind this interface (executor_engine.c): loads the model on the backend
 * it is given, logs load progress and figures, and streams one chunk per token. */
typedef struct exec_engine_config {
    sol_backend *be;   /* borrowed: made by sol_backend_new from worker.backend, outlives this */
    const char *model; /* GGUF path */
    const char *served_model_name; /* registered instead of the model's own name; NULL: none */
    bool mmap, mlock;
    int block_size, num_blocks, max_model_len;
    double memory_fraction;
    bool kv_f32;
    int tier2_blocks;      /* worker.kv.tier2_blocks (0: none) */
    const char *tier2_dir; /* worker.kv.tier2_dir (NULL: default) */
    int max_num_seqs, max_batched_tokens;
    bool prefix_caching;
    const char *chat_template; /* worker.chat_template: a family name, "" = the GGUF's */
    int embedding_pooling;     /* worker.embedding_pooling (engine_pooling's order) */
    /* worker.speculative: spec_method 0 off, 1 draft (draft_model, loaded on the same backend),
     * 2 ngram - the values of engine_spec_method and sol_spec_method */
    int spec_method;
    const char *draft_model;
    int spec_k;
    bool spec_adaptive;
    /* worker.tensor_parallel: be is rank 0; tp.backend/tp.opts make ranks 1..n-1. The draft
     * model runs unsharded on rank 0's backend. */
    model_tp_config tp;
} exec_engine_config;

typedef struct exec_events exec_events;
int exec_engine_new(const exec_engine_config *w, exec_events *events, executor **out, sol_err *e);

/* ---- the event queue: executor thread -> link thread ---------------------------------------
 * Two ends of a ZeroMQ inproc PAIR pair. The writer end belongs to the executor's thread, the
 * reader end to the link's, which polls it in the same zmq_poll as its router sockets, so a new
 * chunk wakes the link at once and nothing is shared but messages. The queue has no high-water
 * mark: the executor never blocks on a slow link (which could otherwise deadlock against the
 * link blocking on the executor); its size is bounded by the number of admitted requests and
 * their token rate. Each message is one already-encoded Envelope{token_chunk} plus a small
 * header, so the link forwards it to the router without re-encoding. */
typedef struct exec_events exec_events;

/* Both ends on `zctx`. The caller owns *out (exec_events_free). Create it before the threads
 * that use it: thread creation is the memory barrier ZeroMQ needs to hand a socket over. */
int exec_events_new(void *zctx, exec_events **out, sol_err *e);
void exec_events_free(exec_events *q);

/* Writer (executor thread): encode and queue one chunk. Fails only on an invalid chunk
 * (frame_validate) or a closed context. */
int exec_events_push(exec_events *q, const Sol__TokenChunk *chunk, sol_err *e);

/* Reader (link thread): the socket to poll for ZMQ_POLLIN. */
void *exec_events_socket(exec_events *q);

/* One received event; valid until exec_event_release. */
typedef struct exec_event {
    char request_id[129];
    bool final; /* finish_reason != FINISH_NONE */
    const uint8_t *frame;
    size_t frame_len;
    _Alignas(8) uint8_t msg[64]; /* a zmq_msg_t (opaque here so this header needs no zmq.h) */
} exec_event;

/* Take the next event without blocking: 0, -EAGAIN when none is queued, -EBADMSG on a
 * malformed message (dropped). Release each 0-returned event with exec_event_release. */
int exec_events_pop(exec_events *q, exec_event *ev, sol_err *e);
void exec_event_release(exec_event *ev);

#endif
