/* engine_internal: the engine's private state, shared by engine.c (actor, step loop) and
 * engine_request.c (building and validating requests on the submitting thread). */
#ifndef SOL_ENGINE_INTERNAL_H
#define SOL_ENGINE_INTERNAL_H

#include <pthread.h>

#include "engine.h"
#include "drafter.h"
#include "grammar.h"
#include "kv_cache.h"
#include "link_map.h"
#include "scheduler.h"
#include "step_budget.h"
#include "stop_strings.h"

/* Grammar masks kept per worker across requests (grammar_cache): 32 MiB holds ~8000 masks of a
 * 32k vocabulary, ~1700 of a 152k one. */
#define ENGINE_GRAMMAR_CACHE_BYTES ((size_t)32 << 20)
/* Redraws of a refused token in a wide grammar state before the mask is walked: a mask walk
 * costs about (allowed fraction f) x 60 ms at 150k tokens, and K redraws all fail with
 * probability (1 - f)^K, so the expected walk cost peaks near 60 ms / (e (K + 1)), 0.3 ms at 64;
 * a redraw costs a few microseconds (bench_grammar, docs/benchmarks.md). */
#define ENGINE_GRAMMAR_REDRAWS 64

/* One request, from engine_submit to its finish event. Owned by the engine. */
typedef struct ereq {
    sched_seq seq; /* tokens: prompt (+ resume tokens), then generated */
    uint64_t id;
    void *user;
    int32_t n_prompt;                     /* the client's prompt (resume tokens not included) */
    int32_t quotes_used, quotes_declined; /* its quoted replies (engine_stats), counted at submit */
    int32_t n_generated;                  /* resume tokens included */
    int32_t max_tokens; /* total generated tokens allowed (resume tokens included) */
    sampler_seq sseq;
    bool ignore_eos;
    float *prompt_logits; /* engine_request.prompt_logits, NULL once filled */
    /* speculative decoding (engine_spec.c) */
    bool no_spec;
    int32_t spec_slot;                 /* the drafter's slot, -1 when none is held */
    int32_t spec_k;                    /* drafts asked for next (adaptive) */
    int32_t spec_k_cap;                /* adaptive: k the last judgement found best, 0: spec_k */
    bool spec_judged;                  /* a window was judged since (re)starting: the next
                                        * judgement comes after SPEC_WINDOW drafts, not the probe */
    int32_t win_drafted, win_accepted; /* the current acceptance window */
    int32_t spec_resume_at;            /* paused until n_generated reaches this */
    int32_t spec_pause;                /* the next pause (x8 per failed window), 0: first */
    bool cancel_requested;             /* guarded by engine.mu */
    uint64_t deadline_ns;
    char *salt;
    stop_text stop;
    tok_stream *ts;
    grammar *gram;                         /* the output constraint (owned), NULL = none */
    int32_t text_ids[GRAMMAR_MAX_CONTROL]; /* engine_request.text_tokens as control ids */
    int n_text_ids;
    bool embed;             /* engine_request.embed */
    const float *embedding; /* set just before an embed request's finish (emb_out) */
    double *emb_acc;        /* embed: dim sums (mean) or the pooled row (last, cls) */
    float *emb_out;         /* embed: the answer, dim floats */
    int32_t emb_n;          /* embed, mean: rows summed into emb_acc */
    int32_t *bias_tokens;   /* logit_bias (owned), n_bias entries */
    float *bias_values;
    int32_t n_bias;
    link_block *links; /* its prompt's links and the blocks they end in (owned; NULL: none) */
    size_t n_links;
    struct ereq *inbox_next;            /* submitted, not yet seen by the engine thread */
    struct ereq *live_prev, *live_next; /* every request not yet finished (guarded by mu) */
} ereq;

struct engine {
    engine_config cfg;
    bool unhealthy;    /* the model cannot step (engine thread only; stats.unhealthy says why) */
    uint64_t stall_at; /* SOL_TEST_ENGINE_STALL: stop stepping before this step (test only) */
    step_cost cost;    /* the steps' measured cost (step_budget.h): the TPOT cap */
    model *m;
    tokenizer *tok;
    chat_template_family chat_family;
    int32_t n_vocab;
    kv_cache *kv;
    model_kv *kv_data;
    kv_links *links;      /* KV events (prefix caching on), guarded by links_mu */
    unsigned char *tier2; /* the second tier's store: tier2_blocks x tier2_bytes, a file mapping */
    bool tier2_backend;   /* ... or the backend's page-locked host memory (model_kv_host_alloc) */
    size_t tier2_bytes;   /* one block (model_kv_host_bytes) */
    pthread_mutex_t links_mu; /* the engine thread changes links, the link thread drains them */
    sched *sched;
    sampler *smp;
    grammar_vocab *gvocab;  /* the vocabulary as bytes for grammars, NULL without a tokenizer */
    grammar_cache *gcache;  /* masks shared by the requests of one grammar (engine thread) */
    float *logits;          /* max_num_seqs x n_vocab */
    engine_pooling pooling; /* resolved: never AUTO */
    float *hidden;          /* hidden_cap x dim: final hidden states of embed requests' rows */
    int32_t *hidden_rows;   /* hidden_cap: which batch rows those are */
    int32_t hidden_cap;
    float *row_copy; /* one row: a constrained request's first, unconstrained draw */
    int32_t *greedy; /* rows of logits: each row's greedy token, when the step asked for them */
    uint64_t greedy_steps; /* steps whose tokens came as ids, not logits (model_batch.argmax_ids) */
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
    uint64_t step_emitted; /* tokens emitted in the current step */
    /* speculative decoding (engine_spec.c); drafter NULL when off */
    drafter *drafter;
    int32_t spec_max;     /* sequences speculating per step at most (drafter slots) */
    double spec_row_cost; /* one draft's cost in plain decode steps: its verify row and
                           * sampling (SPEC_ROW_COST) plus a draft model's step (its weight
                           * bytes over the target's; 0 for n-gram lookup) */
    int32_t *spec_slots;  /* free drafter slots (stack) */
    int32_t n_spec_slots;
    drafter_req *spec_reqs; /* spec_max */
    ereq **spec_cands;      /* spec_max: this step's speculating requests */
    int32_t n_spec_cands;
    bool step_verifies;  /* this step's batch holds verify rows: its forward time is verify time */
    float *spec_q;       /* spec_max x spec_k x n_vocab */
    float *spec_p;       /* (spec_k + 1) x n_vocab */
    float *spec_scratch; /* n_vocab */
    spec_stats spec;
};

/* Speculative decoding in the engine (engine_spec.c). All on the engine thread. */
int espec_init(engine *e, sol_err *err); /* drafter and buffers; no-op when off */
void espec_free(engine *e);
/* Logit rows the largest step can ask for. */
int32_t espec_max_logit_rows(const engine *e);
/* Before sched_step: drafts for decoding sequences, appended to their tokens (seq.n_spec). */
void espec_propose(engine *e);
/* After sched_step (placed or not): drops drafts of candidates that are not verify decodes. */
void espec_after_schedule(engine *e, bool failed);
/* A verify decode's k+1 logit rows: accepted drafts + one token into out (room for k+1), KV
 * rolled back. Returns the number of tokens to emit or a negative error. */
int espec_verify(engine *e, ereq *r, float *logits, int32_t *out, sol_err *err);
/* The request is finishing: give its drafter slot back. */
void espec_release(engine *e, ereq *r);

/* Builds a request (tokenize / template, validate, copy). Caller's thread; no engine state
 * touched but read-only configuration. */
int ereq_build(const engine *e, const engine_request *req, ereq **out, sol_err *err);
void ereq_free(ereq *r);

#endif
