/* ratelimit: a token bucket per API key (or client address), so one caller cannot starve others.
 * The clock is injectable so tests step time by hand instead of sleeping. */
#ifndef SOL_RATELIMIT_H
#define SOL_RATELIMIT_H

#include <stdint.h>

#define RATELIMIT_MAX_KEYS 65536 /* bounded memory: past this, refilled buckets are reused */
#define RATELIMIT_KEY_MAX 128    /* longer keys are truncated (keys are compared, not stored) */

typedef uint64_t (*ratelimit_clock_fn)(void *ctx); /* monotonic nanoseconds */

typedef struct ratelimit ratelimit;

/* `rate` requests per second refill, up to `burst` tokens. clock NULL → sol_now_ns.
 * rate <= 0 disables limiting (every take succeeds). NULL on allocation failure. */
ratelimit *ratelimit_new(double rate, double burst, ratelimit_clock_fn clock, void *clock_ctx);
void ratelimit_free(ratelimit *r);

/* Take one token for `key`. Returns 1 when allowed, 0 when limited; on 0, *retry_after_s
 * (if non-NULL) is the whole seconds until a token is available (>= 1). Thread-safe. */
int ratelimit_take(ratelimit *r, const char *key, int *retry_after_s);

#endif
