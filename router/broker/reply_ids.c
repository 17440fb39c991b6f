/* reply_ids: a hash table of replies (chained buckets, doubled as it fills) threaded on one
 * least-recently-used list; every entry is one allocation holding its key, text and ids. */
#include "reply_ids.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

typedef struct entry {
    struct entry *chain;         /* next in its bucket */
    struct entry *older, *newer; /* the LRU list */
    uint64_t hash;
    size_t key_len, text_len, n_ids, bytes;
    uint32_t *ids;    /* into the same allocation */
    char *key, *text; /* likewise: model NUL salt, then the text (neither NUL-terminated) */
} entry;

struct reply_ids {
    entry **buckets;
    size_t n_buckets, count, bytes, max_bytes;
    entry *oldest, *newest;
};

enum { REPLY_IDS_BUCKETS0 = 256 };

reply_ids *reply_ids_new(size_t max_bytes) {
    if (!max_bytes) return NULL;
    reply_ids *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->buckets = calloc(REPLY_IDS_BUCKETS0, sizeof *s->buckets);
    if (!s->buckets) return free(s), NULL;
    s->n_buckets = REPLY_IDS_BUCKETS0;
    s->max_bytes = max_bytes;
    return s;
}

void reply_ids_free(reply_ids *s) {
    if (!s) return;
    for (entry *e = s->oldest, *n; e; e = n)
        n = e->newer, free(e);
    free(s->buckets);
    free(s);
}

static uint64_t key_hash(reply_key k, const char *text, size_t len) {
    uint64_t h = sol_fnv64_str(SOL_FNV64_INIT, k.model);
    h = sol_fnv64(h, "", 1); /* each part's end: "ab"+"c" and "a"+"bc" differ */
    h = sol_fnv64_str(h, k.salt);
    h = sol_fnv64(h, "", 1);
    return sol_mix64(sol_fnv64(h, text, len));
}

static bool key_is(const entry *e, reply_key k, size_t ml, size_t sl) {
    return e->key_len == ml + 1 + sl && !memcmp(e->key, k.model, ml) && !e->key[ml] &&
           !memcmp(e->key + ml + 1, k.salt, sl);
}

static entry **slot_of(reply_ids *s, uint64_t h, reply_key k, const char *text, size_t len) {
    size_t ml = strlen(k.model), sl = strlen(k.salt);
    entry **p = &s->buckets[h & (s->n_buckets - 1)];
    for (; *p; p = &(*p)->chain) {
        entry *e = *p;
        if (e->hash == h && e->text_len == len && key_is(e, k, ml, sl) &&
            !memcmp(e->text, text, len))
            break;
    }
    return p;
}

static void lru_unlink(reply_ids *s, entry *e) {
    *(e->older ? &e->older->newer : &s->oldest) = e->newer;
    *(e->newer ? &e->newer->older : &s->newest) = e->older;
    e->older = e->newer = NULL;
}

static void lru_push(reply_ids *s, entry *e) {
    e->older = s->newest;
    *(s->newest ? &s->newest->newer : &s->oldest) = e;
    s->newest = e;
}

static void drop(reply_ids *s, entry *e) {
    entry **p = &s->buckets[e->hash & (s->n_buckets - 1)];
    while (*p != e)
        p = &(*p)->chain;
    *p = e->chain;
    lru_unlink(s, e);
    s->count--;
    s->bytes -= e->bytes;
    free(e);
}

/* Doubles the bucket array when it holds as many replies as buckets (a failed growth only makes
 * chains longer). */
static void grow(reply_ids *s) {
    if (s->count < s->n_buckets) return;
    size_t n = s->n_buckets * 2;
    entry **b = calloc(n, sizeof *b);
    if (!b) return;
    for (entry *e = s->oldest; e; e = e->newer) {
        e->chain = b[e->hash & (n - 1)];
        b[e->hash & (n - 1)] = e;
    }
    free(s->buckets);
    s->buckets = b;
    s->n_buckets = n;
}

int reply_ids_put(reply_ids *s, reply_key k, const char *text, size_t len, const uint32_t *ids,
                  size_t n) {
    if (!s || !n || !len) return 0;
    if (!k.salt) k.salt = "";
    size_t ml = strlen(k.model), sl = strlen(k.salt), kl = ml + 1 + sl;
    size_t bytes = sizeof(entry) + n * sizeof *ids + kl + len;
    if (bytes > s->max_bytes / 8) return 0;
    uint64_t h = key_hash(k, text, len);
    entry **p = slot_of(s, h, k, text, len);
    if (*p) drop(s, *p); /* generated again, maybe as other ids: the latest wins */
    entry *e = malloc(bytes);
    if (!e) return -ENOMEM;
    *e = (entry){.hash = h, .key_len = kl, .text_len = len, .n_ids = n, .bytes = bytes};
    e->ids = (uint32_t *)(e + 1);
    e->key = (char *)(e->ids + n);
    e->text = e->key + kl;
    memcpy(e->ids, ids, n * sizeof *ids);
    memcpy(e->key, k.model, ml);
    e->key[ml] = 0;
    memcpy(e->key + ml + 1, k.salt, sl);
    memcpy(e->text, text, len);
    while (s->oldest && s->bytes + bytes > s->max_bytes)
        drop(s, s->oldest);
    grow(s);
    size_t b = h & (s->n_buckets - 1);
    e->chain = s->buckets[b];
    s->buckets[b] = e;
    lru_push(s, e);
    s->count++;
    s->bytes += bytes;
    return 0;
}

const uint32_t *reply_ids_get(reply_ids *s, reply_key k, const char *text, size_t len, size_t *n) {
    *n = 0;
    if (!s || !len) return NULL;
    if (!k.salt) k.salt = "";
    entry *e = *slot_of(s, key_hash(k, text, len), k, text, len);
    if (!e) return NULL;
    lru_unlink(s, e);
    lru_push(s, e);
    *n = e->n_ids;
    return e->ids;
}

size_t reply_ids_count(const reply_ids *s) {
    return s ? s->count : 0;
}
size_t reply_ids_bytes(const reply_ids *s) {
    return s ? s->bytes : 0;
}
