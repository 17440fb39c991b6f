/* reply_ids: a hash table of replies (chained buckets, doubled as it fills) threaded on one
 * least-recently-used list; every entry is one allocation holding its model, text and ids. */
#include "reply_ids.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

typedef struct entry {
    struct entry *chain;         /* next in its bucket */
    struct entry *older, *newer; /* the LRU list */
    uint64_t hash;
    size_t model_len, text_len, n_ids, bytes;
    uint32_t *ids;      /* into the same allocation */
    char *model, *text; /* likewise (not NUL-terminated) */
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

static uint64_t key_hash(const char *model, const char *text, size_t len) {
    uint64_t h = sol_fnv64_str(SOL_FNV64_INIT, model);
    h = sol_fnv64(h, "", 1); /* the model's end: "ab"+"c" and "a"+"bc" differ */
    return sol_mix64(sol_fnv64(h, text, len));
}

static entry **slot_of(reply_ids *s, uint64_t h, const char *model, const char *text, size_t len) {
    size_t ml = strlen(model);
    entry **p = &s->buckets[h & (s->n_buckets - 1)];
    for (; *p; p = &(*p)->chain) {
        entry *e = *p;
        if (e->hash == h && e->model_len == ml && e->text_len == len &&
            !memcmp(e->model, model, ml) && !memcmp(e->text, text, len))
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

int reply_ids_put(reply_ids *s, const char *model, const char *text, size_t len,
                  const uint32_t *ids, size_t n) {
    if (!s || !n || !len) return 0;
    size_t ml = strlen(model);
    size_t bytes = sizeof(entry) + n * sizeof *ids + ml + len;
    if (bytes > s->max_bytes / 8) return 0;
    uint64_t h = key_hash(model, text, len);
    entry **p = slot_of(s, h, model, text, len);
    if (*p) drop(s, *p); /* generated again, maybe as other ids: the latest wins */
    entry *e = malloc(bytes);
    if (!e) return -ENOMEM;
    *e = (entry){.hash = h, .model_len = ml, .text_len = len, .n_ids = n, .bytes = bytes};
    e->ids = (uint32_t *)(e + 1);
    e->model = (char *)(e->ids + n);
    e->text = e->model + ml;
    memcpy(e->ids, ids, n * sizeof *ids);
    memcpy(e->model, model, ml);
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

const uint32_t *reply_ids_get(reply_ids *s, const char *model, const char *text, size_t len,
                              size_t *n) {
    *n = 0;
    if (!s || !len) return NULL;
    entry *e = *slot_of(s, key_hash(model, text, len), model, text, len);
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
