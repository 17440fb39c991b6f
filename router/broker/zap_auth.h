/* zap_auth: the router's ZAP handler (ZeroMQ RFC 27) - admits a worker's CURVE handshake only
 * when its public key is listed in the authorized-keys directory (.pub files, read per handshake).
 */
#ifndef SOL_ZAP_AUTH_H
#define SOL_ZAP_AUTH_H

#include <stdint.h>

#include "err.h"

typedef struct zap_auth zap_auth;

/* Starts the handler thread on `zctx` (the context of the socket it guards, which must be
 * created after this and closed before zap_auth_free). `authorized_dir` is copied. */
int zap_auth_new(void *zctx, const char *authorized_dir, zap_auth **out, sol_err *e);
void zap_auth_free(zap_auth *z);

/* Handshakes admitted and refused so far. */
void zap_auth_counts(zap_auth *z, uint64_t *admitted, uint64_t *refused);

#endif
