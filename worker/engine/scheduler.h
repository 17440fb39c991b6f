/* scheduler: continuous batching over the paged KV cache - which sequences run each step, how many
 * of their tokens, and which sequence gives up its blocks (preemption) when the pool runs dry.
 *
 * One step: decodes first (one token for every running sequence whose tokens are all computed but
 * the last sampled one; 1 + n_spec rows, each with logits, for one that carries speculative draft
 * tokens - the drafts are dropped rather than preempting anyone or overrunning the budget), then
 * unfinished prefills of running sequences, then admission of preempted and waiting sequences
 * (chunked prefill) within the remaining token budget (max_batched_tokens) and sequence cap
 * (max_num_seqs). A sequence is admitted only when the pool can hold the rest of its known tokens
 * after its prefix-cache hit. When a running decode cannot get a block, the lowest-priority, most
 * recently admitted running sequence is preempted: its blocks are freed and it is recomputed later
 * from prompt + generated tokens (its own full blocks usually come straight back from the prefix
 * cache).
 *
 * The scheduler owns no sequence memory: the engine embeds a sched_seq in each request and keeps
 * its token array (capacity max_model_len). The step writes into arrays sized at sched_new, so it
 * never allocates; its cost is O(running + admitted + batch tokens), never O(num_blocks).
 * Not thread-safe: one owner (the engine actor). */
#ifndef SOL_SCHEDULER_H
#define SOL_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "err.h"
#include "kv_cache.h"

typedef enum sched_state {
    SCHED_NEW = 0,   /* not yet added */
    SCHED_WAITING,   /* never admitted */
    SCHED_RUNNING,   /* holds blocks (prefilling or decoding) */
    SCHED_PREEMPTED, /* blocks taken away; recomputes prompt + generated on readmission */
    SCHED_DONE,      /* removed */
} sched_state;

/* Embedded by the caller, which owns it and its token array. Fields above the line are the
 * caller's to set before sched_add; the rest belong to the scheduler. */
typedef struct sched_seq {
    uint64_t id;
    int32_t priority;       /* lower = more important (as vLLM) */
    uint64_t due_ns;        /* its first token's deadline (0: none): earliest first among the
                               waiting sequences of one priority (docs/serving.md, "Deadlines") */
    uint64_t tpot_ns;       /* time per output token it expects while decoding (0: none) */
    const char *cache_salt; /* NULL or "" = shared prefix cache; borrowed while queued */
    int32_t *tokens;        /* prompt followed by generated tokens */
    int32_t n_tokens;       /* valid entries in tokens; grow it with sched_seq_push */
    int32_t cap_tokens;     /* capacity of tokens (max_model_len) */
    bool no_prefix_hit;     /* compute every token (an embedding pooled over them) */
    /* ---- scheduler state ---- */
    sched_state state;
    kv_seq *kv;           /* NULL unless RUNNING */
    int32_t n_computed;   /* tokens whose K/V are written (== kv_seq_len while RUNNING) */
    int32_t n_cached;     /* tokens served by the prefix cache at first admission */
    int32_t n_preempted;  /* times this sequence lost its blocks */
    bool admitted_once;   /* n_cached is final */
    uint64_t arrival;     /* order of sched_add, breaks priority ties in the queues */
    uint64_t admit_stamp; /* order of the latest admission: the preemption victim is the max */
    int32_t step_n;       /* tokens of this sequence in the current batch */
    int32_t n_spec;       /* draft tokens at the end of tokens (speculative decoding; set by the
                           * caller before sched_step, cleared by the scheduler when it cannot
                           * place them: preemption, no blocks, no token budget) */
    bool spec_step;       /* placed this step as a verify decode: 1 + n_spec rows, all logits */
    struct sched_seq *prev, *next; /* queue links (waiting / preempted) */
} sched_seq;

typedef struct sched_config {
    int32_t max_num_seqs;       /* running sequences at most */
    int32_t max_batched_tokens; /* tokens per forward pass at most (>= max_num_seqs) */
    int32_t kv_window; /* > 0: every layer attends to its last kv_window positions only, so a
                          sequence's blocks that fall wholly behind that are freed each step */
} sched_config;

/* One step's work: the flattened batch for model_forward plus bookkeeping for the engine.
 * Arrays belong to the scheduler and stay valid until the next sched_step. */
typedef struct sched_batch {
    int32_t n_tokens;
    int32_t *tokens, *pos, *slots;
    sol_attn_seq *attn; /* per token: its sequence's block table and n_ctx = pos + 1 */
    int32_t n_logits;
    int32_t *logit_rows;    /* rows of the batch whose logits are sampled */
    sched_seq **logit_seqs; /* the sequence each logit row samples for (a verify decode's
                             * 1 + n_spec rows are consecutive) */
    int32_t n_seqs;
    sched_seq **seqs; /* every sequence with tokens in the batch (seq->step_n of them) */
    int32_t n_copies;
    kv_copy *copies;     /* copy-on-write block copies to do before the forward pass */
    int32_t n_preempted; /* preemptions during this step */
    int32_t n_decode;    /* sequences decoding one token */
    int32_t n_prefill_tokens;
} sched_batch;

typedef struct sched sched;

/* kv is borrowed (must outlive the scheduler). Preallocates every per-step array. */
sched *sched_new(const sched_config *cfg, kv_cache *kv, sol_err *err);
/* Frees the scheduler; sequences still held are released from the KV cache. NULL no-op. */
void sched_free(sched *s);

/* Queues seq as waiting (n_tokens >= 1, tokens fit cap_tokens). Returns 0 or -EINVAL. */
int sched_add(sched *s, sched_seq *seq, sol_err *err);

/* Takes seq out of whatever queue holds it and frees its blocks (finish, cancel, deadline).
 * Safe on a sequence that was never added or is already removed. */
void sched_remove(sched *s, sched_seq *seq);

/* Appends a sampled token (it is computed at a later step). Returns 0 or -ENOSPC when
 * cap_tokens is full. */
int sched_seq_push(sched_seq *seq, int32_t token);

/* Plans the next forward pass into *out (borrowed arrays). Returns 0 (out->n_tokens == 0 when
 * there is nothing to run) or a negative error from the KV cache. */
int sched_step(sched *s, sched_batch *out, sol_err *err);

/* After the forward pass wrote the batch's K/V: records the tokens in the KV cache (commits full
 * blocks to the prefix cache) and advances n_computed. Returns 0 or a negative error. */
int sched_commit(sched *s, const sched_batch *b, sol_err *err);

/* After a verify decode: keeps n_keep of seq's n_spec draft tokens (their K/V is kept, the rest
 * is rolled back with kv_seq_truncate), drops the others from tokens, and clears n_spec. The
 * caller then pushes the emitted tokens (the kept drafts again, and the correction). */
int sched_spec_resolve(sched_seq *seq, int32_t n_keep, sol_err *err);

/* Drops seq's draft tokens (not placed, or the step failed). */
void sched_spec_drop(sched_seq *seq);

typedef struct sched_counts {
    int32_t running, waiting, preempted;
    uint64_t total_preemptions;
} sched_counts;
void sched_get_counts(const sched *s, sched_counts *out);

/* Caps the next steps' tokens at `cap` (0: max_batched_tokens alone): the engine keeps its
 * decoding streams' time per output token (step_budget.h). */
void sched_set_step_cap(sched *s, int32_t cap);

/* The running sequences in scheduling order (priority, then admission); borrowed. */
sched_seq *const *sched_running(const sched *s, int32_t *n);

#endif
