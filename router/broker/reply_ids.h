/* reply_ids: the ids each reply was generated as, by model and exact text, in bounded memory, so a
 * later turn that sends the reply back prompts its worker with them instead of a re-tokenization.
 *
 * Why: a reply's text re-tokenizes to other ids often enough (always, for random weights) that the
 * KV blocks its generation left cached stop matching inside it, and every later turn recomputes
 * the previous reply. Keyed by the model a worker registered, since ids mean nothing to another
 * vocabulary, and by the request's cache_salt, so that no tenant learns from the prompt's length
 * what another was answered; the worker checks that the ids decode to the text before it uses
 * them. */
#ifndef SOL_REPLY_IDS_H
#define SOL_REPLY_IDS_H

#include <stddef.h>
#include <stdint.h>

typedef struct reply_ids reply_ids;

/* A store of at most max_bytes (texts, ids and bookkeeping; the least recently used replies go
 * first). NULL when out of memory or max_bytes is 0 (the feature off: every call takes NULL). */
reply_ids *reply_ids_new(size_t max_bytes);
void reply_ids_free(reply_ids *s);

/* A reply's key: the model that wrote it and the request's cache_salt ("" none). */
typedef struct reply_key {
    const char *model, *salt;
} reply_key;

/* Remember that k's model generated text[0..len) as ids[0..n) under k's salt. A reply larger
 * than an eighth of the store is not kept. 0, or -ENOMEM (nothing changed). */
int reply_ids_put(reply_ids *s, reply_key k, const char *text, size_t len, const uint32_t *ids,
                  size_t n);

/* The ids k's model generated for exactly text[0..len) under k's salt (borrowed until the next
 * put), or NULL. */
const uint32_t *reply_ids_get(reply_ids *s, reply_key k, const char *text, size_t len, size_t *n);

/* Replies and bytes held now (for tests and /admin). */
size_t reply_ids_count(const reply_ids *s);
size_t reply_ids_bytes(const reply_ids *s);

#endif
