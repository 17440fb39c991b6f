/* sampler: turns one row of logits into a token (penalties, temperature, top-k, top-p, min-p),
 * reproducibly: draw i of a sequence depends only on (seed, i), whatever else is in the batch.
 *
 * Order of application (as llama.cpp's default chain and vLLM):
 *   repetition penalty -> frequency/presence penalties -> temperature -> top-k -> top-p -> min-p
 *   -> draw. temperature == 0 means greedy (argmax of the penalized logits, ties to the lowest id).
 * Logprobs describe the RAW model distribution (log-softmax of the logits as passed in, before
 * penalties, temperature or truncation), as vLLM's default and OpenAI's API do.
 * The inverse-CDF draw walks kept tokens in id order, so sampler_sample(x) and
 * sampler_sample_from_probs(sampler_probs(x)) return the same token for the same (seed, position).
 * See docs/sampling.md for ranges, defaults and the determinism promise. */
#ifndef SOL_SAMPLER_H
#define SOL_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "sampling.h"

#define SAMPLER_MAX_LOGPROBS SOL_SAMPLING_MAX_LOGPROBS

/* The settings are common/sampling.h's, defined once for the router, the wire and the sampler.
 * The sampler draws with `seed` whatever has_seed says: the caller picks one when the client
 * gave none (rng.h). want_logprobs fills sampler_result.logprob. */
typedef sol_sampling sampler_params;

/* Per-sequence state: plain data, embed it anywhere; no free needed. To resume a sequence
 * elsewhere, carry params (seed included), n_prompt and pos. */
typedef struct sampler_seq {
    sampler_params params;
    int32_t n_prompt; /* history[0, n_prompt) is the prompt, the rest was generated */
    uint64_t pos;     /* index of the next draw = number of tokens this sequence has sampled */
} sampler_seq;

typedef struct sampler_logprob {
    int32_t token;
    float logprob;
} sampler_logprob;

typedef struct sampler_result {
    int32_t token;
    float logprob; /* raw log-softmax of `token`; 0 unless params.want_logprobs */
    int32_t n_top; /* entries in top, = min(n_logprobs, tokens with finite logits) */
    sampler_logprob top[SAMPLER_MAX_LOGPROBS]; /* raw, descending, ties to the lower id */
} sampler_result;

/* Scratch for one thread's sampling; sized once for the vocabulary. Not thread-safe: use one
 * sampler per thread (sequences are independent of which sampler serves them). */
typedef struct sampler sampler;

sampler_params sampler_params_default(void);

/* 0, or -EINVAL naming the first out-of-range field and its value. */
int sampler_params_check(const sampler_params *p, sol_err *err);

/* Validates params; starts at draw 0. */
int sampler_seq_init(sampler_seq *seq, const sampler_params *params, int32_t n_prompt,
                     sol_err *err);

/* Resume at draw i (token-exact failover: i = tokens already generated). */
void sampler_seq_set_position(sampler_seq *seq, uint64_t i);

sampler *sampler_new(int32_t n_vocab, sol_err *err);
void sampler_free(sampler *s);
int32_t sampler_n_vocab(const sampler *s);

/* Sample one token from logits[n_vocab] (overwritten: do not reuse them), given the sequence's
 * tokens so far history[0, n_history) (prompt first). NaN logits count as -inf; a +inf logit,
 * no finite logit, or a history id outside the vocabulary is an error. Consumes one draw
 * (also when greedy). Returns the token id (>= 0) or a negative error; fills *out when given. */
int32_t sampler_sample(sampler *s, sampler_seq *seq, float *logits, const int32_t *history,
                       int32_t n_history, sampler_result *out, sol_err *err);

/* A greedy draw made elsewhere: `token` is the argmax of the row's logits (ties to the lowest
 * id), taken where no penalty, logprob or truncation applies (temperature 0, penalties off, no
 * logprobs) - e.g. on the device, so the row never came to the host. What sampler_sample
 * returns for that row: the token, logprob 0, no alternatives; consumes one draw as it does. */
void sampler_take(sampler_seq *seq, int32_t token, sampler_result *out);

/* Right after sampler_sample drew a token the caller cannot use (a grammar refused it): draw
 * again with the sequence's stream from the same distribution restricted to the tokens set in
 * allowed (n_vocab bits, bit i of word i / 64) - exactly what masking the other logits to -inf
 * and sampling again would give, without a second pass over the vocabulary: the argmax over the
 * allowed tokens when greedy, the renormalized probabilities with plain temperature sampling.
 * -EAGAIN when that draw truncated (top-k, top-p, min-p: those apply after the mask, so mask the
 * logits and call sampler_sample), -ENOENT when no token is allowed. Consumes one draw. */
int32_t sampler_resample_allowed(sampler *s, sampler_seq *seq, const uint64_t *allowed,
                                 sol_err *err);

/* Right after sampler_sample (or an earlier redraw of the same row) drew `refused`, which the
 * caller cannot use: draw again from the same distribution without it and without every token
 * refused before on this row (sampling without replacement: the first token a grammar takes in
 * such a series is distributed exactly as sampler_resample_allowed's draw would be, without the
 * mask). The first redraw of a row costs one pass over the vocabulary, later ones a scan of
 * 256-id blocks. Greedy: the next best logit (lowest id on ties). -EAGAIN after a truncated
 * draw, -ENOENT when every token has been refused. Consumes one draw. */
int32_t sampler_redraw(sampler *s, sampler_seq *seq, int32_t refused, sol_err *err);

/* The final distribution after every transform, as a dense probs[n_vocab] (zeros for removed
 * tokens; one-hot when greedy). Overwrites logits. Consumes no draw. Same errors as above. */
int sampler_probs(sampler *s, const sampler_seq *seq, float *logits, const int32_t *history,
                  int32_t n_history, float *probs, sol_err *err);

/* Draw from probs[n] (non-negative weights, need not sum to 1) with the sequence's stream;
 * consumes one draw. Returns the token or -EINVAL (negative/NaN weight, or all zero). */
int32_t sampler_sample_from_probs(sampler_seq *seq, const float *probs, int32_t n, sol_err *err);

/* The uniform draw at position pos + offset on `lane` (e.g. SOL_RNG_LANE_ACCEPT for the accept
 * test of the offset-th draft token in speculative decoding); does not advance the position.
 * A verifier that accepts j draft tokens then calls sampler_seq_set_position(seq, pos + j) and
 * draws the correction token with sampler_sample_from_probs. */
double sampler_seq_uniform(const sampler_seq *seq, uint64_t offset, uint32_t lane);

#endif
