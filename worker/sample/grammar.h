/* grammar: grammar-constrained decoding. A request's GBNF grammar (gbnf.h: what JSON schemas,
 * regexes and choice lists are compiled to) is matched over the bytes of the tokens it emits;
 * before each draw the tokens that cannot continue a valid text get -inf logits.
 *
 * The matcher's state is a set of stacks of grammar positions (a pushdown automaton run on all
 * alternatives at once, as llama.cpp's grammar sampler does). The mask walks a trie of the
 * vocabulary's byte strings (grammar_vocab, built once per model) with the state, pruning every
 * subtree no stack can enter; masks are cached per state, so the steps of a long string or a
 * number, whose states repeat, cost a lookup. End-of-generation tokens are allowed exactly when
 * the grammar is complete, and are the only choice once nothing may follow. */
#ifndef SOL_GRAMMAR_H
#define SOL_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* The vocabulary as bytes: piece[i] (len[i] bytes) is what token i prints; kind[i]: 0 a text
 * token, 1 end of generation (allowed when the grammar is complete), 2 never allowed (control
 * tokens, empty pieces). Copied; caller owns the result. */
typedef struct grammar_vocab grammar_vocab;
grammar_vocab *grammar_vocab_new(int32_t n_vocab, const char *const *piece, const size_t *len,
                                 const uint8_t *kind, sol_err *err);
void grammar_vocab_free(grammar_vocab *v);

typedef struct grammar grammar;

/* The most control tokens one grammar takes as text. */
#define GRAMMAR_MAX_CONTROL 8

/* Compiles GBNF text for one request; v is borrowed (it must outlive the grammar). */
grammar *grammar_new(const char *gbnf_text, size_t len, const grammar_vocab *v, sol_err *err);
void grammar_free(grammar *g);

/* Control tokens are never allowed, since their text is no text the model writes (it would
 * match a free string); these ids (control tokens of v) are, where the grammar spells their
 * text as a literal (one-byte sets all along, never a string's or a class's characters): a tool
 * format's opening such as Mistral's [TOOL_CALLS], which the model writes as one control token.
 * Call before the first mask; -EINVAL for an id that is no control token. */
int grammar_allow_control(grammar *g, const int32_t *ids, int n, sol_err *err);

/* logits[i] = -inf for every token the grammar does not allow next. -ENOENT when no token is
 * allowed (the grammar cannot continue with this vocabulary). */
int grammar_apply(grammar *g, float *logits, sol_err *err);
/* The mask itself: n_vocab bits (token i allowed when bit i % 64 of word i / 64 is set), valid
 * until the next call on g; NULL with err set on failure (-ENOENT: no token allowed). */
const uint64_t *grammar_allowed(grammar *g, sol_err *err);
/* Whether token may come next (the same answer as the mask). */
bool grammar_allows(grammar *g, int32_t token);
/* Advances over token (an end-of-generation token leaves the state as it is). -EINVAL when the
 * grammar does not allow it. */
int grammar_accept(grammar *g, int32_t token, sol_err *err);
/* Remember the current state, and go back to it (speculative verification walks the drafts
 * through the grammar to mask each verify row, then rewinds). One mark at a time. */
int grammar_mark(grammar *g);
void grammar_reset_to_mark(grammar *g);

/* Whether many tokens may continue the current state: at least 1/16 of the vocabulary starts
 * with a byte it admits (inside a string, free text, a wide class). A refused draw is then best
 * drawn again (sampler_redraw): a mask walk here visits much of the vocabulary's trie,
 * milliseconds at 150k tokens, and the state often differs at every step (a bounded length
 * counts down). A narrow state (structure, digits, a small class) has a small mask, cheap to
 * walk and soon cached. Computed from the state alone, so every replica decides alike. */
bool grammar_wide(const grammar *g);

/* The text so far is a complete match (end of generation is allowed). */
bool grammar_complete(const grammar *g);

/* Masks shared by every grammar of one vocabulary whose GBNF text is the same (the requests of
 * one tool schema or response format): a state's mask is walked once per worker, not once per
 * request. Bounded to about max_bytes (least recently used entries go); one thread at a time
 * (the engine's). */
typedef struct grammar_cache grammar_cache;
grammar_cache *grammar_cache_new(const grammar_vocab *v, size_t max_bytes, sol_err *err);
void grammar_cache_free(grammar_cache *c);
/* g looks its masks up in c (borrowed: it must outlive g) instead of its own few slots. */
void grammar_use_cache(grammar *g, grammar_cache *c);

/* Counters for tests and benchmarks: masks computed and masks served from the cache. */
void grammar_counters(const grammar *g, uint64_t *computed, uint64_t *cached);

#endif
