/* sim: a SIMULATED executor (`--backend sim`) that runs no model: it streams deterministic words
 * at a configured TTFT and rate, to measure the router and to simulate large clusters cheaply. */
#ifndef SOL_SIM_H
#define SOL_SIM_H

#include <stdint.h>

#include "err.h"
#include "executor.h"
#include "sol.pb-c.h"

typedef struct sim_config {
    const char *model;     /* name announced in Register ("sim" when NULL or empty) */
    int ttft_ms;           /* from admission to the first token */
    double tokens_per_s;   /* per sequence, after the first token */
    uint32_t capacity;     /* sequences advanced at once; later ones wait (FIFO) */
    uint32_t max_context;  /* prompt + completion tokens */
    uint32_t block_size;   /* pretend KV block size, for the heartbeat's block figures */
    uint32_t total_blocks; /* 0: capacity * ceil(max_context / block_size) */
} sim_config;

/* Start the simulation thread. Events go to `events` (borrowed; it must outlive the executor).
 * The caller owns *out and releases it with exec_free. */
int sim_new(void *zctx, const sim_config *cfg, exec_events *events, executor **out, sol_err *e);

/* The determinism contract, exposed for tests and for docs/worker.md:
 * completion token k (0-based, counting tokens a failed worker already streamed) is
 * sim_token_id(sim_prompt_hash(g), seed, k), where seed is sampling.seed when has_seed, else 0;
 * its text is " " + sim_token_text(id). A resumed request (resume_tokens, or else the number of
 * whitespace-separated words in resume_text) therefore continues exactly where it stopped. */
uint64_t sim_prompt_hash(const Sol__Generate *g);
uint32_t sim_token_id(uint64_t prompt_hash, uint64_t seed, uint32_t k);
/* The word for an id from sim_token_id; "?" for any other id. */
const char *sim_token_text(uint32_t id);
/* Usage.prompt_tokens: whitespace-separated words of the prompt, or of every chat message. */
uint32_t sim_prompt_tokens(const Sol__Generate *g);

#endif
