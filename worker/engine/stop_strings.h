/* stop_strings: finds stop strings in a request's streamed text, holding back the tail that could
 * still become one, so the client never sees a stop string or any part of it. */
#ifndef SOL_STOP_STRINGS_H
#define SOL_STOP_STRINGS_H

#include <stddef.h>

#include "err.h"

/* Plain data; zero-initialised means "no stop strings" (everything passes straight through). */
typedef struct stop_text {
    char **stops; /* owned copies */
    size_t *stop_lens;
    size_t n_stops, max_len;
    char *held; /* text not yet released: [emitted, len) */
    size_t len, cap, emitted;
    int matched;
} stop_text;

/* Copies the stop strings (each non-empty). Returns 0, -EINVAL naming an empty one, -ENOMEM. */
int stop_text_init(stop_text *st, const char *const *stops, size_t n, sol_err *err);
void stop_text_free(
    stop_text *st); /* frees what init allocated; the struct itself is the caller's */

/* Feeds a text delta. *out and *out_len: the text that may be released now (borrowed, valid until
 * the next call). Returns 1 when a stop string completed (out ends just before it; later feeds
 * release nothing), 0 otherwise, -ENOMEM. Holding back only a tail that is a prefix of a stop
 * string keeps UTF-8 whole: such a tail starts where a stop string starts, at a character boundary.
 */
int stop_text_feed(stop_text *st, const char *delta, size_t len, const char **out, size_t *out_len);

/* End of the stream: everything still held (nothing after a match). */
void stop_text_flush(stop_text *st, const char **out, size_t *out_len);

#endif
