/* ratelimit: token buckets in an open-addressing table behind one mutex.
 * Tokens are refilled lazily on each take from the elapsed time, so idle keys cost nothing. */
#include "ratelimit.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "hash.h"
#include "log.h"

typedef struct bucket {
    char key[RATELIMIT_KEY_MAX];
    uint64_t hash; /* 0 = empty slot */
    double tokens;
    uint64_t last_ns;
} bucket;

struct ratelimit {
    pthread_mutex_t mu;
    double rate, burst;
    ratelimit_clock_fn clock;
    void *clock_ctx;
    bucket *slots; /* capacity 2 * RATELIMIT_MAX_KEYS keeps probe chains short */
    size_t cap, used;
};

static uint64_t default_clock(void *ctx) {
    (void)ctx;
    return sol_now_ns();
}

ratelimit *ratelimit_new(double rate, double burst, ratelimit_clock_fn clock, void *clock_ctx) {
    ratelimit *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->rate = rate;
    r->burst = burst < 1 ? 1 : burst;
    r->clock = clock ? clock : default_clock;
    r->clock_ctx = clock_ctx;
    if (rate > 0) {
        r->cap = 1024; /* grows on demand up to 2 * RATELIMIT_MAX_KEYS */
        r->slots = calloc(r->cap, sizeof *r->slots);
        if (!r->slots) {
            free(r);
            return NULL;
        }
    }
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

void ratelimit_free(ratelimit *r) {
    if (!r) return;
    pthread_mutex_destroy(&r->mu);
    free(r->slots);
    free(r);
}

static uint64_t hash_key(const char *k) {
    uint64_t h = sol_fnv64(SOL_FNV64_INIT, k, strnlen(k, RATELIMIT_KEY_MAX - 1));
    return h ? h : 1;
}

static void refill(const ratelimit *r, bucket *b, uint64_t now) {
    if (now > b->last_ns) {
        b->tokens += (double)(now - b->last_ns) * 1e-9 * r->rate;
        if (b->tokens > r->burst) b->tokens = r->burst;
    }
    b->last_ns = now;
}

static bucket *probe(bucket *slots, size_t cap, uint64_t h, const char *key) {
    size_t i = h & (cap - 1);
    while (slots[i].hash &&
           (slots[i].hash != h || strncmp(slots[i].key, key, RATELIMIT_KEY_MAX - 1)))
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static int grow(ratelimit *r) {
    size_t cap = r->cap * 2;
    bucket *s = calloc(cap, sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < r->cap; i++)
        if (r->slots[i].hash) *probe(s, cap, r->slots[i].hash, r->slots[i].key) = r->slots[i];
    free(r->slots);
    r->slots = s;
    r->cap = cap;
    return 0;
}

/* Drop every bucket that has refilled completely: it is indistinguishable from a new one. */
static void sweep(ratelimit *r, uint64_t now) {
    bucket *old = r->slots;
    bucket *s = calloc(r->cap, sizeof *s);
    if (!s) return;
    r->used = 0;
    for (size_t i = 0; i < r->cap; i++) {
        if (!old[i].hash) continue;
        refill(r, &old[i], now);
        if (old[i].tokens >= r->burst) continue;
        *probe(s, r->cap, old[i].hash, old[i].key) = old[i];
        r->used++;
    }
    free(old);
    r->slots = s;
}

int ratelimit_take(ratelimit *r, const char *key, int *retry_after_s) {
    if (!r || r->rate <= 0) return 1;
    if (!key) key = "";
    pthread_mutex_lock(&r->mu);
    uint64_t now = r->clock(r->clock_ctx);
    uint64_t h = hash_key(key);
    bucket *b = probe(r->slots, r->cap, h, key);
    if (!b->hash) {
        if (r->used >= RATELIMIT_MAX_KEYS) sweep(r, now);
        if (r->used * 2 >= r->cap && (r->cap >= 2 * RATELIMIT_MAX_KEYS || grow(r))) {
            pthread_mutex_unlock(&r->mu);
            LOG_WARN("ratelimit", "bucket table full (%zu keys); allowing untracked key", r->used);
            return 1; /* fail open: the limiter must never take the service down */
        }
        b = probe(r->slots, r->cap, h, key);
        b->hash = h;
        strncpy(b->key, key, RATELIMIT_KEY_MAX - 1);
        b->tokens = r->burst;
        b->last_ns = now;
        r->used++;
    }
    refill(r, b, now);
    int ok = b->tokens >= 1.0;
    if (ok)
        b->tokens -= 1.0;
    else if (retry_after_s) {
        double wait = (1.0 - b->tokens) / r->rate;
        int s = (int)ceil(wait);
        *retry_after_s = s < 1 ? 1 : s;
    }
    pthread_mutex_unlock(&r->mu);
    return ok;
}
