/* resolver: the routers behind a DNS name - resolves `tcp://NAME:PORT` endpoints to every
 * address they have, again and again, so a worker connects to each replica of a router Service. */
#ifndef SOL_RESOLVER_H
#define SOL_RESOLVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define RESOLVER_MAX 16           /* addresses kept (as the link's routers) */
#define RESOLVER_ENDPOINT_MAX 256 /* bytes of one endpoint */

typedef struct router_resolver router_resolver;

/* Whether the endpoint names a host to resolve: tcp:// with a host that is not an IP literal. */
bool resolver_is_name(const char *endpoint);

/* Starts a thread resolving each name endpoint of endpoints[0, n) (the others are ignored) now
 * and then every interval_ms (a failed lookup is retried after a second and logged once per
 * change). Copies what it needs. */
int router_resolver_new(const char *const *endpoints, size_t n, int interval_ms,
                        router_resolver **out, sol_err *e);
void router_resolver_free(router_resolver *r);

/* When the set of resolved endpoints ("tcp://ADDRESS:PORT", sorted, deduplicated) changed since
 * *gen: copies it into eps (at most RESOLVER_MAX), sets *n, updates *gen and returns true. */
bool router_resolver_take(router_resolver *r, uint64_t *gen, char (*eps)[RESOLVER_ENDPOINT_MAX],
                          size_t *n);

/* Resolves one endpoint's name into out (sorted, deduplicated); the count, or negative with the
 * lookup's error. What the thread does each round, for tests. */
int resolver_lookup(const char *endpoint, char (*out)[RESOLVER_ENDPOINT_MAX], size_t cap,
                    sol_err *e);

#endif
