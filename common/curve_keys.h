/* curve_keys: CURVE key pairs between router and workers - Z85 key files as sol-keygen writes
 * them, reading a router's directory of authorized worker keys, and the checks on both. */
#ifndef SOL_CURVE_KEYS_H
#define SOL_CURVE_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

/* A key in ZeroMQ's Z85 text: 40 characters (32 bytes), NUL-terminated. */
#define CURVE_KEY_LEN 40
typedef struct curve_key {
    char z85[CURVE_KEY_LEN + 1];
} curve_key;

/* A key pair as the secret-key file holds it. */
typedef struct curve_pair {
    curve_key public_key, secret_key;
} curve_pair;

/* File layout (both kinds; '#' comments and blank lines allowed):
 *     public-key = <40 Z85 characters>
 *     secret-key = <40 Z85 characters>      (the .key file only)
 * Errors name the file and line. */

/* A new random pair written to DIR/NAME.key (mode 0600: public and secret) and DIR/NAME.pub
 * (public only); refuses to overwrite an existing file. */
int curve_keygen(const char *dir, const char *name, curve_pair *out, sol_err *e);

/* The pair in a .key file; its public key must be the one the secret key derives. */
int curve_load_pair(const char *path, curve_pair *out, sol_err *e);

/* A public key given as 40 Z85 characters, or the path of a .pub / .key file holding one. */
int curve_load_public(const char *key_or_path, curve_key *out, sol_err *e);

/* Whether `key` is listed in `dir`: some DIR/<name>.pub holds it; *name (cap bytes) gets the
 * file's stem. Files that do not parse are skipped (and named in *bad when it is given, for a
 * warning). -ENOENT when not listed, or the directory's error. Read at every call, so adding or
 * removing a .pub takes effect for the next connection (key rotation without a restart). */
int curve_authorized(const char *dir, const curve_key *key, char *name, size_t cap, char *bad,
                     size_t bad_cap, sol_err *e);

/* Keys in `dir` that parse (for the start-up log); negative on a directory error. */
int curve_count_authorized(const char *dir, sol_err *e);

#endif
