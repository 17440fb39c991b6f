/* apikeys: the set of accepted API keys, loaded from a file (one key per line, # comments),
 * checked in constant time so response timing does not reveal how much of a key was right. */
#ifndef SOL_APIKEYS_H
#define SOL_APIKEYS_H

#include <stddef.h>

#include "err.h"

#define APIKEYS_MIN_LEN 8
#define APIKEYS_MAX_LEN 256

typedef struct apikeys apikeys;

/* Errors name the line: keys shorter than APIKEYS_MIN_LEN, longer than APIKEYS_MAX_LEN, with
 * inner whitespace, or a file with no keys at all. */
int apikeys_load(const char *path, apikeys **out, sol_err *e);
/* Build from a list (tests, or keys given on the command line). */
int apikeys_from_list(const char *const *keys, size_t n, apikeys **out, sol_err *e);
void apikeys_free(apikeys *k);
size_t apikeys_count(const apikeys *k);

/* 1 when `key` (len bytes) is one of the keys. Time depends only on the number of keys. */
int apikeys_check(const apikeys *k, const char *key, size_t len);
/* Check an Authorization header value "Bearer <key>"; NULL/malformed → 0. On success *key_out
 * (if non-NULL) points at the key inside `header` (useful as a rate-limit key). */
int apikeys_check_bearer(const apikeys *k, const char *header, const char **key_out);

#endif
