/* engine: the serving engine actor - a thread that owns the model's KV pool, the scheduler and
 * the sampler, runs the step loop (schedule, forward, sample) and streams per-request events.
 *
 * Threads: engine_submit / engine_cancel / engine_get_stats may be called from any thread; they
 * talk to the engine thread through an inbox (a mutex + condition variable guarding a command list;
 * the engine sleeps on the condvar when it has no work). Events are delivered by calling
 * cfg->on_event on the engine thread, in order per request; the callback must not block for
 * long and must not call engine_free (it may call engine_submit / engine_cancel).
 * See docs/serving.md for the step loop, scheduling policy and the event stream. */
#ifndef SOL_ENGINE_H
#define SOL_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat_template.h"
#include "dtype.h"
#include "err.h"
#include "grammar.h"
#include "kv_links.h"
#include "model.h"
#include "prompt_chain.h"
#include "sampler.h"
#include "spec.h"
#include "tokenizer.h"

typedef enum engine_finish_reason {
    ENGINE_FINISH_NONE = 0, /* still running (token events) */
    ENGINE_FINISH_STOP,     /* end-of-generation token or a stop string */
    ENGINE_FINISH_LENGTH,   /* max_tokens or max_model_len reached */
    ENGINE_FINISH_CANCELLED,
    ENGINE_FINISH_ERROR, /* deadline passed, or an internal error (see event.error) */
} engine_finish_reason;

const char *engine_finish_name(engine_finish_reason r); /* "stop", "length", ... */

typedef struct engine_usage {
    int32_t prompt_tokens;
    int32_t completion_tokens;
    int32_t cached_tokens; /* prompt tokens served by the prefix cache */
} engine_usage;

typedef enum engine_event_kind {
    ENGINE_EV_TOKEN = 0, /* one generated token (text may be empty: held back) */
    ENGINE_EV_FINISH,    /* last event of a request; text carries what was still held back */
} engine_event_kind;

/* Everything borrowed, valid only during the callback. */
typedef struct engine_event {
    uint64_t id;
    engine_event_kind kind;
    void *user; /* engine_request.user */
    const char *text;
    size_t text_len; /* text delta: whole UTF-8 characters, stop strings never included */
    int32_t token;   /* ENGINE_EV_TOKEN: the id; -1 on finish */
    const sampler_result *sample; /* token, logprob and top alternatives (when asked) */
    engine_finish_reason finish;  /* ENGINE_EV_FINISH */
    const char *error;            /* ENGINE_FINISH_ERROR: why */
    engine_usage usage;           /* ENGINE_EV_FINISH */
    const float *embedding;       /* ENGINE_EV_FINISH of an embed request: dim floats, L2 = 1 */
    int32_t embedding_dim;
} engine_event;

typedef void (*engine_event_fn)(void *ctx, const engine_event *ev);

typedef enum engine_spec_method {
    ENGINE_SPEC_OFF = 0,
    ENGINE_SPEC_DRAFT, /* a smaller model with the same vocabulary proposes the drafts */
    ENGINE_SPEC_NGRAM, /* prompt lookup: what followed the latest match of the last n tokens */
} engine_spec_method;

/* How an embedding request's final hidden states become one vector (worker.embedding_pooling). */
typedef enum {
    ENGINE_POOL_AUTO = 0, /* the GGUF's <arch>.pooling_type (mean, cls, last); else last */
    ENGINE_POOL_LAST,     /* the last prompt token's (decoder embedding models) */
    ENGINE_POOL_MEAN,     /* the mean over every prompt token (sentence-transformers style) */
    ENGINE_POOL_CLS,      /* the first token's (BERT-style [CLS]) */
} engine_pooling;

typedef struct engine_config {
    /* worker.kv */
    int32_t block_size;     /* tokens per KV block */
    int32_t num_blocks;     /* 0: memory_fraction of MemAvailable */
    double memory_fraction; /* (0, 1] */
    int32_t max_model_len;  /* prompt + max_tokens at most (clamped to the model's context) */
    sol_dtype kv_dtype;     /* SOL_DT_F16 or SOL_DT_F32 */
    int32_t tier2_blocks;  /* worker.kv.tier2_blocks: a second tier of this many blocks (0: none) */
    const char *tier2_dir; /* worker.kv.tier2_dir: where its file goes (NULL: TMPDIR or /var/tmp) */
    /* worker.scheduler */
    int32_t max_num_seqs;
    int32_t max_batched_tokens;
    bool prefix_caching;
    const char *chat_template; /* worker.chat_template: a family name overriding the GGUF's
                                * template ("" / NULL: detect it) */
    engine_pooling pooling;    /* worker.embedding_pooling */
    /* worker.speculative (docs/speculative.md, "In the engine") */
    engine_spec_method spec_method;
    model *draft_model;     /* ENGINE_SPEC_DRAFT: borrowed, same vocabulary, same backend */
    int32_t spec_k;         /* drafts per verify step, 1..SPEC_MAX_K (the most, when adaptive) */
    bool spec_adaptive;     /* per-sequence k and pause, no speculation in large batches */
    int32_t spec_max_batch; /* sequences speculating per step at most; adaptive: none when
                             * more than this many decode (0: 2) */
    double spec_min_acceptance; /* adaptive: pause a sequence below this over its window (0.3) */
    engine_event_fn on_event;
    void *event_ctx;
} engine_config;

/* Defaults matching common/config.c (block 16, 0.9, 4096, F16, 64 seqs, 2048 tokens, caching,
 * no speculation; k 4, adaptive, 4 sequences, acceptance 0.3 when it is switched on). */
engine_config engine_config_default(void);

typedef struct engine_request {
    /* The prompt: exactly one of token ids, text, or chat messages. */
    const int32_t *prompt_tokens; /* used verbatim (add_bos still applies) */
    int32_t n_prompt_tokens;
    const char *prompt_text;
    const chat_message *messages; /* rendered with the GGUF's tokenizer.chat_template */
    size_t n_messages;
    const char *const *tools; /* chat: functions offered (JSON texts), rendered by the template */
    size_t n_tools;
    int add_bos; /* -1: the vocabulary's default, 0/1: force (for text and messages) */
    sampler_params sampling;
    int32_t max_tokens;      /* <= 0: up to max_model_len */
    const char *const *stop; /* stop strings (copied), detected on the text */
    size_t n_stop;
    bool ignore_eos;        /* keep generating past end-of-generation tokens */
    bool no_speculation;    /* never draft for this request (logprobs requests never do) */
    int32_t priority;       /* lower = more important */
    uint64_t deadline_ns;   /* sol_now_ns() clock; 0 = none */
    uint64_t first_due_ns;  /* the first token's deadline, same clock; 0 = none: waiting requests
                               of one priority are admitted earliest deadline first */
    uint32_t tpot_ms;       /* time per output token it expects (0: none): caps the prompt tokens
                               a step takes while it decodes (scheduler.h, sched_step_budget) */
    const char *cache_salt; /* copied; NULL/"" = shared prefix cache */
    bool embed; /* an embedding: prefill only, the last prompt token's final hidden state
                 * (L2-normalized) on the finish event; nothing is generated */
    const int32_t *bias_tokens; /* logit_bias: added to these tokens' logits before sampling */
    const float *bias_values;
    int32_t n_bias;
    const char *grammar;            /* GBNF the output must match (structured outputs); NULL =
                                       none. Needs a tokenizer; the request never speculates */
    const char *const *text_tokens; /* control tokens that belong to the output's text (a tool
                                     * format's opening such as [TOOL_CALLS]): streamed as their
                                     * text, taken by the grammar where it fits; a text that is
                                     * no control token changes nothing. At most
                                     * SOL_FRAME_MAX_TEXT_TOKENS (the wire's bound) */
    int32_t n_text_tokens;
    const int32_t *resume_tokens; /* failover: ids already generated elsewhere */
    int32_t n_resume_tokens;
    float *prompt_logits; /* when set: n_vocab floats, filled with the last prompt position's raw
                           * logits (before logit_bias, grammar and sampling) when the first token
                           * is sampled; valid once the request finished (sol-generate --logits) */
    void *user;           /* handed back in every event */
    /* The prompt's chain (common/prompt_chain.h) as the router computed it: the links whose KV
     * blocks the engine reports held (engine_kv_events). NULL or empty: none. Text prompts only */
    const prefix_chain *chain;
} engine_request;

typedef struct engine_stats {
    int32_t running, waiting, preempted;
    int32_t free_blocks, total_blocks, block_size;
    double prefix_hit_rate; /* hit / query prompt tokens since start */
    /* prompt tokens served from cache since start, by tier, and the second tier's fill */
    uint64_t tier1_hit_tokens, tier2_hit_tokens;
    int32_t tier2_blocks, tier2_used;
    /* quoted replies (chat_message.content_ids) since start: spliced in, and left to the
     * tokenizer because their ids did not spell the content or the chat did not hold it */
    uint64_t quotes_used, quotes_declined;
    double tokens_per_s; /* generated + prefilled tokens per second of step time, last ~1 s */
    uint64_t steps, preemptions;
    uint64_t greedy_steps; /* steps whose every row was plain greedy: ids came, not logits */
    uint64_t prompt_tokens, generated_tokens;
    uint64_t step_ns, sched_ns; /* totals: the whole step loop, and its scheduling part */
    int32_t max_model_len;
    /* speculative decoding since start: verify steps (one per sequence per step), drafts made
     * and accepted, tokens emitted by verify steps, drafter time (one batched call per engine
     * step) and verify time (target probabilities + rejection sampling; the target's forward
     * pass is shared with the batch and counted in step_ns only) */
    spec_stats spec;
    double spec_acceptance;      /* accepted / drafted */
    double spec_tokens_per_step; /* emitted / verify steps */
    bool speculative;            /* a drafter is configured */
    /* "" while healthy; else why the engine stopped stepping (the model's rank group is stuck:
     * model_health). Its requests stay where they are for the router to fail over. */
    char unhealthy[256];
} engine_stats;

typedef struct engine engine;

/* Sizes the KV pool, starts the engine thread. m and tok are borrowed (tok may be NULL: token-id
 * prompts only, no text). Fails with a clear error when one max_model_len sequence cannot fit. */
engine *engine_new(const engine_config *cfg, model *m, tokenizer *tok, sol_err *err);

/* Stops the thread (running requests are finished as cancelled) and frees everything. NULL no-op */
void engine_free(engine *e);

/* The vocabulary as grammar-constrained decoding sees it (grammar.h): every token's bytes;
 * end-of-generation tokens may end a complete text; control, unknown and unused tokens never
 * appear in one. Caller owns the result (grammar_vocab_free). */
grammar_vocab *engine_grammar_vocab_new(const tokenizer *tok, sol_err *err);

/* Validates and queues a request; returns its id (> 0) or a negative error with err filled
 * (prompt + max_tokens beyond worker.kv.max_model_len, bad sampling params, empty prompt, ...).
 * Tokenization and templating run on the caller's thread. */
int64_t engine_submit(engine *e, const engine_request *req, sol_err *err);

/* Asks the engine to finish request id as cancelled at its next step (its blocks are freed
 * then). Returns 0, or -ENOENT when the id is not live. */
int engine_cancel(engine *e, uint64_t id);

/* A consistent snapshot, updated after every step. (engine_stats is the type's name, hence
 * engine_get_stats for the function.) */
void engine_get_stats(engine *e, engine_stats *out);

/* KV events, thread-safe: the prompt-chain links the prefix cache began (stored) or ceased to
 * hold since the last call, oldest first, up to cap; *lost: some were dropped at the bound since
 * (resynchronise from engine_kv_held). 0 without prefix caching. */
size_t engine_kv_events(engine *e, kv_link_event *out, size_t cap, bool *lost);
/* Every link held now, up to cap (KV_LINKS_MAX covers them all). */
size_t engine_kv_held(engine *e, kv_link_event *out, size_t cap);

/* Blocks until the engine has no request left (tests and benchmarks). */
void engine_wait_idle(engine *e);

#endif
