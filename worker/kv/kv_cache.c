/* kv_cache: paged KV cache block manager (bookkeeping only; the backend owns the tensors).
 *
 * Every block id is in exactly one state:
 *   FREE   ref 0, no hash, on the free stack (popped first when a fresh block is needed);
 *   CACHED ref 0, its full-block hash in the prefix table, on the LRU list (evictable);
 *   USED   ref > 0, held by one or more block tables; may or may not be in the prefix table.
 * A fresh block comes from the free stack, else by evicting the LRU head (oldest released cached
 * block, whose hash is dropped). All state changes are O(1) per block; nothing scans the pool.
 *
 * Token ids are stored per physical slot (tok[block * block_size + offset]), mirroring where the
 * backend stores their K/V. That lets a hit be verified token by token, needs no per-sequence
 * token array, and makes a fork share token history exactly as it shares K/V.
 *
 * A sequence writes only into a block it holds alone that has no hash; kv_seq_reserve makes the
 * write block so (copy-on-write) and kv_seq_append checks it. */
#include "kv_cache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "block_hash.h"

enum { BLK_FREE = 0, BLK_CACHED = 1, BLK_USED = 2 };

typedef struct kv_block {
    uint64_t hash;   /* chain hash once the block is full (0 while partial or caching is off) */
    uint64_t parent; /* hash it was chained from (previous block's hash or the salt seed) */
    int32_t ref;
    int32_t filled;     /* token slots holding recorded tokens */
    int32_t prev, next; /* LRU links while CACHED, -1 at the ends */
    uint8_t state;
    uint8_t committed; /* the prefix table maps `hash` to this block */
} kv_block;

struct kv_seq {
    kv_cache *kv;
    kv_seq *prev, *next; /* the manager's list of live sequences (for check and free) */
    uint64_t seed;       /* chain seed from the cache salt */
    int32_t *blocks;
    int32_t n_blocks, cap;
    int32_t len;        /* tokens recorded */
    int32_t dropped;    /* leading entries released by kv_seq_drop_before (KV_BLOCK_DROPPED) */
    uint64_t drop_hash; /* hash of the last dropped block: the parent of the next one's chain */
};

struct kv_cache {
    int32_t num_blocks, bs;
    bool caching;
    kv_block *blk;
    int32_t *tok;      /* num_blocks * bs recorded token ids */
    int32_t *free_ids; /* stack of FREE ids */
    int32_t n_free;
    int32_t lru_head, lru_tail, n_cached; /* head = least recently released */
    block_table table;
    kv_seq *seqs;
    int32_t n_seqs;
    uint64_t queries, hits, evictions;
    kv_hash_observer observe; /* NULL: none */
    void *observe_ctx;
    kv_tier *tier;      /* the second tier (kv_cache_tier2), NULL: none */
    uint64_t tier_hits; /* prompt tokens restored from it */
};

/* ---- block states ---- */

static void lru_unlink(kv_cache *kv, int32_t b) {
    kv_block *k = &kv->blk[b];
    if (k->prev >= 0)
        kv->blk[k->prev].next = k->next;
    else
        kv->lru_head = k->next;
    if (k->next >= 0)
        kv->blk[k->next].prev = k->prev;
    else
        kv->lru_tail = k->prev;
    k->prev = k->next = -1;
    kv->n_cached--;
}

static void lru_push_tail(kv_cache *kv, int32_t b) {
    kv_block *k = &kv->blk[b];
    k->prev = kv->lru_tail;
    k->next = -1;
    if (kv->lru_tail >= 0)
        kv->blk[kv->lru_tail].next = b;
    else
        kv->lru_head = b;
    kv->lru_tail = b;
    kv->n_cached++;
}

static void uncommit(kv_cache *kv, int32_t b) {
    kv_block *k = &kv->blk[b];
    if (k->committed) {
        block_table_remove(&kv->table, k->hash);
        if (kv->observe) kv->observe(kv->observe_ctx, k->hash, KV_GONE);
    }
    k->committed = 0;
    k->hash = k->parent = 0;
}

/* Puts a full block into the prefix table unless an equal hash is there already (then the block
 * stays a private duplicate: correct, just not shareable). */
static void try_commit(kv_cache *kv, int32_t b) {
    kv_block *k = &kv->blk[b];
    if (k->committed || !k->hash) return;
    if (block_table_insert(&kv->table, k->hash, b) == 0) {
        k->committed = 1;
        if (kv->observe) kv->observe(kv->observe_ctx, k->hash, KV_IN_POOL);
    }
}

int kv_cache_tier2(kv_cache *kv, int32_t slots, sol_err *err) {
    if (!kv->caching) return sol_err_set(err, -EINVAL, "a second KV tier needs prefix caching");
    kv_tier_free(kv->tier);
    kv->tier = slots > 0 ? kv_tier_new(slots, kv->bs, err) : NULL;
    return slots > 0 && !kv->tier ? (err->code ? err->code : -ENOMEM) : 0;
}

const kv_tier_op *kv_cache_tier_ops(const kv_cache *kv, int32_t *n) {
    *n = 0;
    return kv->tier ? kv_tier_ops(kv->tier, n) : NULL;
}

void kv_cache_tier_done(kv_cache *kv) {
    if (kv->tier) kv_tier_done(kv->tier);
}

void kv_cache_observe(kv_cache *kv, kv_hash_observer fn, void *ctx) {
    kv->observe = fn;
    kv->observe_ctx = ctx;
}

bool kv_cache_holds(const kv_cache *kv, uint64_t hash) {
    return hash && block_table_find(&kv->table, hash) >= 0;
}

/* An evicted cached block into the second tier: its hash leaves the pool's table and is reported
 * KV_IN_TIER2, and a block the tier drops for room is reported gone. false: not kept. */
static bool spill(kv_cache *kv, int32_t b) {
    kv_block *k = &kv->blk[b];
    if (!kv->tier || !k->committed) return false;
    uint64_t dropped = 0;
    if (kv_tier_spill(kv->tier, b, k->hash, k->parent, &kv->tok[(size_t)b * kv->bs], &dropped) < 0)
        return false;
    block_table_remove(&kv->table, k->hash);
    if (kv->observe) {
        if (dropped) kv->observe(kv->observe_ctx, dropped, KV_GONE);
        kv->observe(kv->observe_ctx, k->hash, KV_IN_TIER2);
    }
    k->committed = 0;
    k->hash = k->parent = 0;
    return true;
}

/* A fresh private block (ref 1, empty). The caller has checked that one is available. */
static int32_t take_fresh(kv_cache *kv) {
    int32_t b;
    if (kv->n_free > 0) {
        b = kv->free_ids[--kv->n_free];
    } else {
        b = kv->lru_head;
        lru_unlink(kv, b);
        if (!spill(kv, b)) uncommit(kv, b);
        kv->evictions++;
    }
    kv_block *k = &kv->blk[b];
    k->state = BLK_USED;
    k->ref = 1;
    k->filled = 0;
    return b;
}

/* Takes a reference on a block found in the prefix table. */
static void take_ref(kv_cache *kv, int32_t b) {
    kv_block *k = &kv->blk[b];
    if (k->state == BLK_CACHED) {
        lru_unlink(kv, b);
        k->state = BLK_USED;
    }
    k->ref++;
}

static void release(kv_cache *kv, int32_t b) {
    kv_block *k = &kv->blk[b];
    if (--k->ref > 0) return;
    if (kv->caching && k->hash && k->filled == kv->bs) try_commit(kv, b);
    if (k->committed) {
        k->state = BLK_CACHED;
        lru_push_tail(kv, b);
        return;
    }
    k->hash = k->parent = 0;
    k->filled = 0;
    k->state = BLK_FREE;
    kv->free_ids[kv->n_free++] = b;
}

/* ---- manager ---- */

kv_cache *kv_cache_new(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching,
                       sol_err *err) {
    if (num_blocks < 1 || block_size < 1 || (int64_t)num_blocks * block_size > INT32_MAX) {
        sol_err_set(err, -EINVAL,
                    "kv_cache: expected num_blocks >= 1 and block_size >= 1 with "
                    "num_blocks * block_size <= %d slots, got %d blocks of %d",
                    INT32_MAX, num_blocks, block_size);
        return NULL;
    }
    kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) goto oom;
    kv->num_blocks = num_blocks;
    kv->bs = block_size;
    kv->caching = enable_prefix_caching;
    kv->lru_head = kv->lru_tail = -1;
    kv->blk = calloc((size_t)num_blocks, sizeof *kv->blk);
    kv->tok = calloc((size_t)num_blocks * (size_t)block_size, sizeof *kv->tok);
    kv->free_ids = malloc((size_t)num_blocks * sizeof *kv->free_ids);
    if (!kv->blk || !kv->tok || !kv->free_ids) goto oom;
    if (block_table_init(&kv->table, num_blocks) != 0) goto oom;
    for (int32_t i = 0; i < num_blocks; i++) {
        kv->blk[i].prev = kv->blk[i].next = -1;
        kv->free_ids[i] = num_blocks - 1 - i; /* block 0 is handed out first */
    }
    kv->n_free = num_blocks;
    return kv;
oom:
    kv_cache_free(kv);
    sol_err_set(err, -ENOMEM, "kv_cache: out of memory allocating %d blocks of %d slots",
                num_blocks, block_size);
    return NULL;
}

void kv_cache_free(kv_cache *kv) {
    if (!kv) return;
    while (kv->seqs)
        kv_seq_free(kv->seqs);
    block_table_destroy(&kv->table);
    kv_tier_free(kv->tier);
    free(kv->blk);
    free(kv->tok);
    free(kv->free_ids);
    free(kv);
}

int32_t kv_cache_block_size(const kv_cache *kv) {
    return kv->bs;
}

bool kv_cache_prefix_caching(const kv_cache *kv) {
    return kv->caching;
}

bool kv_cache_can_allocate(const kv_cache *kv, int32_t n_blocks) {
    return n_blocks <= kv->n_free + kv->n_cached;
}

void kv_cache_get_stats(const kv_cache *kv, kv_cache_stats *out) {
    out->total_blocks = kv->num_blocks;
    out->free_blocks = kv->n_free;
    out->cached_blocks = kv->n_cached;
    out->used_blocks = kv->num_blocks - kv->n_free - kv->n_cached;
    out->live_seqs = kv->n_seqs;
    out->prefix_query_tokens = kv->queries;
    out->prefix_hit_tokens = kv->hits;
    out->evictions = kv->evictions;
    kv_tier_stats ts = {0};
    if (kv->tier) kv_tier_get_stats(kv->tier, &ts);
    out->tier2_slots = ts.slots;
    out->tier2_used = ts.used;
    out->tier2_hit_tokens = kv->tier_hits;
    out->tier2_spills = ts.spills;
}

/* ---- prefix matching ---- */

/* Most full blocks a prompt may take from cache: the last prompt token is always recomputed. */
static int32_t max_cached_blocks(const kv_cache *kv, int32_t prompt_len) {
    return prompt_len > 0 ? (prompt_len - 1) / kv->bs : 0;
}

/* Walks the prompt's full blocks through the prefix table, verifying parent hash and token ids so
 * a hash collision is a miss, not wrong K/V. Writes matched ids to out (may be NULL). */
static int32_t match_walk(const kv_cache *kv, uint64_t seed, const int32_t *prompt,
                          int32_t prompt_len, int32_t *out, int32_t *n_evictable) {
    int32_t n = 0, evictable = 0, limit = max_cached_blocks(kv, prompt_len);
    uint64_t parent = seed;
    if (!kv->caching) limit = 0;
    for (; n < limit; n++) {
        const int32_t *t = prompt + (size_t)n * kv->bs;
        uint64_t h = block_hash_tokens(parent, t, kv->bs);
        int32_t b = block_table_find(&kv->table, h);
        if (b < 0 || kv->blk[b].parent != parent ||
            memcmp(&kv->tok[(size_t)b * kv->bs], t, (size_t)kv->bs * sizeof *t) != 0)
            break;
        if (out) out[n] = b;
        evictable += kv->blk[b].state == BLK_CACHED;
        parent = h;
    }
    if (n_evictable) *n_evictable = evictable;
    return n;
}

int32_t kv_cache_peek_prefix(const kv_cache *kv, const char *cache_salt, const int32_t *prompt,
                             int32_t prompt_len, int32_t *n_evictable_blocks) {
    if (n_evictable_blocks) *n_evictable_blocks = 0;
    if (!prompt || prompt_len <= 0) return 0;
    uint64_t seed = block_hash_seed(cache_salt);
    return match_walk(kv, seed, prompt, prompt_len, NULL, n_evictable_blocks) * kv->bs;
}

/* ---- sequences ---- */

static int ensure_cap(kv_seq *s, int32_t need, sol_err *err) {
    if (need <= s->cap) return 0;
    int32_t cap = s->cap ? s->cap : 4;
    while (cap < need)
        cap = cap > INT32_MAX / 2 ? need : cap * 2;
    int32_t *p = realloc(s->blocks, (size_t)cap * sizeof *p);
    if (!p)
        return sol_err_set(err, -ENOMEM, "kv_seq: out of memory growing a block table to %d", cap);
    s->blocks = p;
    s->cap = cap;
    return 0;
}

static kv_seq *seq_alloc(kv_cache *kv, uint64_t seed, int32_t cap, sol_err *err) {
    kv_seq *s = calloc(1, sizeof *s);
    if (!s || ensure_cap(s, cap, err) != 0) {
        free(s);
        sol_err_set(err, -ENOMEM, "kv_seq: out of memory creating a sequence");
        return NULL;
    }
    s->kv = kv;
    s->seed = seed;
    s->next = kv->seqs;
    if (kv->seqs) kv->seqs->prev = s;
    kv->seqs = s;
    kv->n_seqs++;
    return s;
}

kv_seq *kv_seq_new(kv_cache *kv, const char *cache_salt, sol_err *err) {
    if (!kv) {
        sol_err_set(err, -EINVAL, "kv_seq_new: expected a kv_cache, got NULL");
        return NULL;
    }
    return seq_alloc(kv, block_hash_seed(cache_salt), 4, err);
}

/* Releases blocks [keep, n_blocks) last first, so a freed sequence's tail blocks (the least
 * likely to be shared again) sit nearer the LRU head than its prefix blocks and go first. */
static void release_from(kv_seq *s, int32_t keep) {
    while (s->n_blocks > keep && s->n_blocks > s->dropped)
        release(s->kv, s->blocks[--s->n_blocks]);
    if (s->n_blocks > keep) s->n_blocks = keep; /* dropped entries hold no block */
}

void kv_seq_free(kv_seq *seq) {
    if (!seq) return;
    kv_cache *kv = seq->kv;
    release_from(seq, 0);
    if (seq->prev)
        seq->prev->next = seq->next;
    else
        kv->seqs = seq->next;
    if (seq->next) seq->next->prev = seq->prev;
    kv->n_seqs--;
    free(seq->blocks);
    free(seq);
}

int32_t kv_seq_len(const kv_seq *seq) {
    return seq->len;
}

int32_t kv_seq_token_at(const kv_seq *seq, int32_t pos) {
    if (pos < 0 || pos >= seq->len || pos / seq->kv->bs < seq->dropped) return -1;
    const kv_cache *kv = seq->kv;
    return kv->tok[(size_t)seq->blocks[pos / kv->bs] * kv->bs + pos % kv->bs];
}

const int32_t *kv_seq_block_table(const kv_seq *seq, int32_t *n_blocks) {
    if (n_blocks) *n_blocks = seq->n_blocks;
    return seq->blocks;
}

/* After the pool's hits: the prompt's next full blocks found in the second tier come back into
 * fresh blocks (their copies queued for the engine), while fresh blocks can be had without
 * taking one this sequence holds. Returns the sequence's block count. */
static int32_t restore_walk(kv_seq *seq, const int32_t *prompt, int32_t prompt_len) {
    kv_cache *kv = seq->kv;
    int32_t n = seq->n_blocks, limit = max_cached_blocks(kv, prompt_len);
    if (!kv->tier || !kv->caching) return n;
    uint64_t parent = n ? kv->blk[seq->blocks[n - 1]].hash : seq->seed;
    for (; n < limit && kv_cache_can_allocate(kv, 1); n++) {
        const int32_t *t = prompt + (size_t)n * kv->bs;
        uint64_t h = block_hash_tokens(parent, t, kv->bs);
        int32_t slot = kv_tier_find(kv->tier, h, parent, t);
        if (slot < 0) break;
        int32_t b = take_fresh(kv); /* may spill a cached block: its copy is queued first */
        if (kv_tier_restore(kv->tier, slot, b)) {
            release(kv, b);
            break;
        }
        kv_block *k = &kv->blk[b];
        memcpy(&kv->tok[(size_t)b * kv->bs], t, sizeof *t * (size_t)kv->bs);
        k->filled = kv->bs;
        k->parent = parent;
        k->hash = h;
        try_commit(kv, b); /* back in the pool: the observer hears KV_IN_POOL */
        seq->blocks[n] = b;
        kv->tier_hits += (uint64_t)kv->bs;
        parent = h;
    }
    return n;
}

int32_t kv_seq_match_prefix(kv_seq *seq, const int32_t *prompt, int32_t prompt_len, sol_err *err) {
    kv_cache *kv = seq->kv;
    if (seq->len != 0 || seq->n_blocks != 0)
        return sol_err_set(err, -EINVAL,
                           "kv_seq_match_prefix: expected an empty sequence, found %d tokens in "
                           "%d blocks",
                           seq->len, seq->n_blocks);
    if (prompt_len < 0 || (prompt_len > 0 && !prompt))
        return sol_err_set(err, -EINVAL,
                           "kv_seq_match_prefix: expected a prompt of >= 0 tokens, got %d%s",
                           prompt_len, prompt ? "" : " with a NULL array");
    int rc = ensure_cap(seq, max_cached_blocks(kv, prompt_len), err);
    if (rc) return rc;
    int32_t n = match_walk(kv, seq->seed, prompt, prompt_len, seq->blocks, NULL);
    for (int32_t i = 0; i < n; i++)
        take_ref(kv, seq->blocks[i]);
    seq->n_blocks = n;
    n = restore_walk(seq, prompt, prompt_len);
    seq->n_blocks = n;
    seq->len = n * kv->bs;
    kv->queries += (uint64_t)prompt_len;
    kv->hits += (uint64_t)seq->len; /* both tiers: tier_hits tells the second's part */
    return seq->len;
}

/* The block the next token goes into must be copied first: it is partly written, and shared or
 * holding a cached full-block hash whose contents other sequences may still match. */
static bool needs_cow(const kv_seq *s) {
    if (s->len % s->kv->bs == 0) return false;
    const kv_block *k = &s->kv->blk[s->blocks[s->len / s->kv->bs]];
    return k->ref > 1 || k->hash != 0;
}

static int32_t blocks_for(const kv_seq *s, int32_t n_new) {
    int64_t need = ((int64_t)s->len + n_new + s->kv->bs - 1) / s->kv->bs;
    return need > s->n_blocks ? (int32_t)(need - s->n_blocks) : 0;
}

int32_t kv_seq_blocks_needed(const kv_seq *seq, int32_t n_new) {
    if (n_new <= 0) return 0;
    return blocks_for(seq, n_new) + (needs_cow(seq) ? 1 : 0);
}

static void copy_on_write(kv_seq *s, kv_copy *copy) {
    kv_cache *kv = s->kv;
    int32_t idx = s->len / kv->bs, off = s->len % kv->bs;
    int32_t src = s->blocks[idx], dst = take_fresh(kv);
    memcpy(&kv->tok[(size_t)dst * kv->bs], &kv->tok[(size_t)src * kv->bs],
           (size_t)off * sizeof *kv->tok);
    kv->blk[dst].filled = off;
    s->blocks[idx] = dst;
    release(kv, src);
    *copy = (kv_copy){.src_block = src, .dst_block = dst};
}

int kv_seq_reserve(kv_seq *seq, int32_t n_new, kv_copy copies[KV_MAX_COPIES], int32_t *n_copies,
                   sol_err *err) {
    kv_cache *kv = seq->kv;
    if (n_copies) *n_copies = 0;
    if (n_new < 0 || !copies || !n_copies)
        return sol_err_set(err, -EINVAL,
                           "kv_seq_reserve: expected n_new >= 0 and copy outputs, got n_new=%d",
                           n_new);
    int32_t live = seq->len - seq->dropped * kv->bs; /* dropped blocks hold no slot */
    if ((int64_t)live + n_new > (int64_t)kv->num_blocks * kv->bs)
        return sol_err_set(err, -E2BIG,
                           "kv_seq_reserve: %d + %d tokens exceed the whole pool of %d slots", live,
                           n_new, kv->num_blocks * kv->bs);
    if (n_new == 0) return 0;
    int32_t grow = blocks_for(seq, n_new);
    bool cow = needs_cow(seq);
    int32_t need = grow + (cow ? 1 : 0);
    if (!kv_cache_can_allocate(kv, need))
        return sol_err_set(err, -ENOSPC,
                           "kv_seq_reserve: %d tokens need %d blocks, only %d free + %d cached",
                           n_new, need, kv->n_free, kv->n_cached);
    int rc = ensure_cap(seq, seq->n_blocks + grow, err);
    if (rc) return rc;
    if (cow) {
        copy_on_write(seq, &copies[0]);
        *n_copies = 1;
    }
    for (int32_t i = 0; i < grow; i++)
        seq->blocks[seq->n_blocks++] = take_fresh(kv);
    return 0;
}

static void commit_block(kv_seq *s, int32_t idx) {
    kv_cache *kv = s->kv;
    if (!kv->caching) return;
    int32_t b = s->blocks[idx];
    uint64_t parent = idx == 0            ? s->seed
                      : idx == s->dropped ? s->drop_hash
                                          : kv->blk[s->blocks[idx - 1]].hash;
    kv->blk[b].parent = parent;
    kv->blk[b].hash = block_hash_tokens(parent, &kv->tok[(size_t)b * kv->bs], kv->bs);
    try_commit(kv, b);
}

int kv_seq_append(kv_seq *seq, const int32_t *tokens, int32_t n, sol_err *err) {
    kv_cache *kv = seq->kv;
    if (n < 0 || (n > 0 && !tokens))
        return sol_err_set(err, -EINVAL, "kv_seq_append: expected n >= 0 tokens, got %d%s", n,
                           tokens ? "" : " with a NULL array");
    if ((int64_t)seq->len + n > (int64_t)seq->n_blocks * kv->bs)
        return sol_err_set(err, -EINVAL,
                           "kv_seq_append: %d + %d tokens exceed the %d reserved slots; call "
                           "kv_seq_reserve first",
                           seq->len, n, seq->n_blocks * kv->bs);
    if (n > 0 && needs_cow(seq))
        return sol_err_set(err, -EINVAL,
                           "kv_seq_append: block %d at position %d is shared or cached; call "
                           "kv_seq_reserve first (copy-on-write)",
                           seq->blocks[seq->len / kv->bs], seq->len);
    for (int32_t i = 0; i < n; i++) {
        int32_t idx = seq->len / kv->bs, off = seq->len % kv->bs, b = seq->blocks[idx];
        kv->tok[(size_t)b * kv->bs + off] = tokens[i];
        kv->blk[b].filled = off + 1;
        seq->len++;
        if (off + 1 == kv->bs) commit_block(seq, idx);
    }
    return 0;
}

int kv_seq_slots(const kv_seq *seq, int32_t start, int32_t n, int32_t *slots_out, sol_err *err) {
    const kv_cache *kv = seq->kv;
    if (start < 0 || n < 0 || (n > 0 && !slots_out) ||
        (int64_t)start + n > (int64_t)seq->n_blocks * kv->bs ||
        (n > 0 && start / kv->bs < seq->dropped))
        return sol_err_set(err, -EINVAL,
                           "kv_seq_slots: positions [%d, %lld) are outside the %d reserved slots "
                           "(or in the %d dropped blocks)",
                           start, (long long)start + n, seq->n_blocks * kv->bs, seq->dropped);
    for (int32_t i = 0; i < n; i++) {
        int32_t p = start + i;
        slots_out[i] = seq->blocks[p / kv->bs] * kv->bs + p % kv->bs;
    }
    return 0;
}

int kv_seq_truncate(kv_seq *seq, int32_t new_len, sol_err *err) {
    kv_cache *kv = seq->kv;
    if (new_len < seq->dropped * kv->bs || new_len > seq->len)
        return sol_err_set(err, -EINVAL, "kv_seq_truncate: expected %d <= new_len <= %d, got %d",
                           seq->dropped * kv->bs, seq->len, new_len);
    int32_t keep = (new_len + kv->bs - 1) / kv->bs;
    release_from(seq, keep);
    seq->len = new_len;
    int32_t off = new_len % kv->bs;
    if (off == 0) return 0;
    int32_t b = seq->blocks[keep - 1];
    /* Shared: others still see it full; the next reserve copies it instead. */
    if (kv->blk[b].ref > 1) return 0;
    uncommit(kv, b);
    kv->blk[b].filled = off;
    return 0;
}

int32_t kv_seq_drop_before(kv_seq *seq, int32_t pos) {
    kv_cache *kv = seq->kv;
    if (pos > seq->len) pos = seq->len;
    int32_t upto = pos > 0 ? pos / kv->bs : 0, n = 0;
    for (; seq->dropped < upto; seq->dropped++, n++) {
        int32_t b = seq->blocks[seq->dropped];
        seq->drop_hash = kv->blk[b].hash;
        seq->blocks[seq->dropped] = KV_BLOCK_DROPPED;
        release(kv, b);
    }
    return n;
}

int32_t kv_seq_dropped(const kv_seq *seq) {
    return seq->dropped;
}

kv_seq *kv_seq_fork(kv_seq *src, sol_err *err) {
    kv_cache *kv = src->kv;
    int32_t n = (src->len + kv->bs - 1) / kv->bs;
    kv_seq *dst = seq_alloc(kv, src->seed, n > 4 ? n : 4, err);
    if (!dst) return NULL;
    for (int32_t i = 0; i < n; i++) {
        dst->blocks[i] = src->blocks[i];
        if (i >= src->dropped) kv->blk[src->blocks[i]].ref++;
    }
    dst->n_blocks = n;
    dst->len = src->len;
    dst->dropped = src->dropped;
    dst->drop_hash = src->drop_hash;
    return dst;
}

/* ---- invariant check ---- */

enum { MARK_FREE = 1, MARK_LRU = 2 };

static int check_lists(const kv_cache *kv, uint8_t *mark, sol_err *err) {
    if (kv->n_free < 0 || kv->n_free > kv->num_blocks)
        return sol_err_set(err, -EFAULT, "kv check: free count %d outside [0, %d]", kv->n_free,
                           kv->num_blocks);
    for (int32_t i = 0; i < kv->n_free; i++) {
        int32_t b = kv->free_ids[i];
        if (b < 0 || b >= kv->num_blocks || mark[b])
            return sol_err_set(err, -EFAULT, "kv check: free stack entry %d is block %d (%s)", i, b,
                               b < 0 || b >= kv->num_blocks ? "out of range" : "listed twice");
        mark[b] = MARK_FREE;
    }
    int32_t count = 0, prev = -1;
    for (int32_t b = kv->lru_head; b >= 0; prev = b, b = kv->blk[b].next) {
        if (b >= kv->num_blocks || mark[b] || ++count > kv->num_blocks)
            return sol_err_set(err, -EFAULT,
                               "kv check: LRU list reaches block %d twice or out of "
                               "range",
                               b);
        if (kv->blk[b].prev != prev)
            return sol_err_set(err, -EFAULT, "kv check: LRU block %d has prev %d, expected %d", b,
                               kv->blk[b].prev, prev);
        mark[b] = MARK_LRU;
    }
    if (kv->lru_tail != prev || count != kv->n_cached)
        return sol_err_set(err, -EFAULT,
                           "kv check: LRU has %d blocks ending at %d, expected %d "
                           "ending at %d",
                           count, prev, kv->n_cached, kv->lru_tail);
    return 0;
}

static int check_block(const kv_cache *kv, int32_t b, uint8_t mark, sol_err *err) {
    const kv_block *k = &kv->blk[b];
    bool ok;
    switch (k->state) {
    case BLK_FREE:
        ok = mark == MARK_FREE && k->ref == 0 && !k->hash && !k->committed;
        break;
    case BLK_CACHED:
        ok = mark == MARK_LRU && k->ref == 0 && k->committed && k->filled == kv->bs;
        break;
    case BLK_USED:
        ok = mark == 0 && k->ref > 0;
        break;
    default:
        ok = false;
    }
    if (!ok)
        return sol_err_set(err, -EFAULT,
                           "kv check: block %d state %d ref %d committed %d in list "
                           "%d is not one consistent state",
                           b, k->state, k->ref, k->committed, mark);
    if (k->committed && (!k->hash || block_table_find(&kv->table, k->hash) != b))
        return sol_err_set(err, -EFAULT,
                           "kv check: block %d is committed but the table does not "
                           "map its hash %016llx to it",
                           b, (unsigned long long)k->hash);
    return 0;
}

static int check_table(const kv_cache *kv, int32_t n_committed, sol_err *err) {
    const block_table *t = &kv->table;
    int32_t n = 0;
    for (uint32_t i = 0; i <= t->mask; i++) {
        if (!t->keys[i]) continue;
        int32_t b = t->vals[i];
        n++;
        if (b < 0 || b >= kv->num_blocks || kv->blk[b].hash != t->keys[i] || !kv->blk[b].committed)
            return sol_err_set(err, -EFAULT,
                               "kv check: table entry %016llx points to block %d "
                               "which does not hold that hash",
                               (unsigned long long)t->keys[i], b);
    }
    if (n != t->count || n != n_committed)
        return sol_err_set(err, -EFAULT,
                           "kv check: table has %d entries (count %d), %d blocks "
                           "committed",
                           n, t->count, n_committed);
    return 0;
}

static int check_full_block(const kv_seq *s, int32_t i, sol_err *err) {
    const kv_cache *kv = s->kv;
    const kv_block *k = &kv->blk[s->blocks[i]];
    if (k->filled != kv->bs)
        return sol_err_set(err, -EFAULT,
                           "kv check: block %d (index %d) is full for a sequence "
                           "but holds %d tokens",
                           s->blocks[i], i, k->filled);
    if (!kv->caching) return 0;
    uint64_t parent = i == 0            ? s->seed
                      : i == s->dropped ? s->drop_hash
                                        : kv->blk[s->blocks[i - 1]].hash;
    uint64_t h = block_hash_tokens(parent, &kv->tok[(size_t)s->blocks[i] * kv->bs], kv->bs);
    if (k->parent != parent || k->hash != h)
        return sol_err_set(err, -EFAULT, "kv check: block %d (index %d) hash chain broken",
                           s->blocks[i], i);
    return 0;
}

static int check_seq(const kv_seq *s, int32_t *refs, int32_t *stamp, int32_t id, sol_err *err) {
    const kv_cache *kv = s->kv;
    int32_t written = (s->len + kv->bs - 1) / kv->bs;
    if (s->len < 0 || s->n_blocks > s->cap || written > s->n_blocks)
        return sol_err_set(err, -EFAULT, "kv check: sequence of %d tokens has %d blocks (cap %d)",
                           s->len, s->n_blocks, s->cap);
    if (s->dropped > s->len / kv->bs)
        return sol_err_set(err, -EFAULT, "kv check: %d blocks dropped of a %d-token sequence",
                           s->dropped, s->len);
    for (int32_t i = 0; i < s->n_blocks; i++) {
        int32_t b = s->blocks[i];
        if (i < s->dropped) {
            if (b != KV_BLOCK_DROPPED)
                return sol_err_set(err, -EFAULT, "kv check: dropped entry %d holds block %d", i, b);
            continue;
        }
        if (b < 0 || b >= kv->num_blocks || kv->blk[b].state != BLK_USED || stamp[b] == id)
            return sol_err_set(err, -EFAULT,
                               "kv check: table index %d holds block %d which is out "
                               "of range, not in use, or already in this table",
                               i, b);
        stamp[b] = id;
        refs[b]++;
        const kv_block *k = &kv->blk[b];
        int rc = 0;
        if (i < s->len / kv->bs)
            rc = check_full_block(s, i, err);
        else if (i < written && k->filled < s->len % kv->bs)
            rc = sol_err_set(err, -EFAULT,
                             "kv check: last block %d holds %d tokens, sequence "
                             "needs %d",
                             b, k->filled, s->len % kv->bs);
        else if (i >= written && (k->ref != 1 || k->hash || k->filled))
            rc = sol_err_set(err, -EFAULT, "kv check: reserved block %d is not private and empty",
                             b);
        if (rc) return rc;
    }
    return 0;
}

static int check_all(const kv_cache *kv, uint8_t *mark, int32_t *refs, int32_t *stamp,
                     sol_err *err) {
    int rc = check_lists(kv, mark, err);
    int32_t n_committed = 0, n_seqs = 0;
    for (int32_t b = 0; !rc && b < kv->num_blocks; b++) {
        rc = check_block(kv, b, mark[b], err);
        n_committed += kv->blk[b].committed;
    }
    if (!rc) rc = check_table(kv, n_committed, err);
    for (const kv_seq *s = kv->seqs; !rc && s; s = s->next)
        rc = check_seq(s, refs, stamp, ++n_seqs, err);
    if (!rc && n_seqs != kv->n_seqs)
        rc = sol_err_set(err, -EFAULT, "kv check: %d sequences linked, %d counted", n_seqs,
                         kv->n_seqs);
    for (int32_t b = 0; !rc && b < kv->num_blocks; b++)
        if (refs[b] != kv->blk[b].ref)
            rc = sol_err_set(err, -EFAULT, "kv check: block %d has ref %d but %d table references",
                             b, kv->blk[b].ref, refs[b]);
    return rc;
}

int kv_cache_check(const kv_cache *kv, sol_err *err) {
    uint8_t *mark = calloc((size_t)kv->num_blocks, 1);
    int32_t *refs = calloc((size_t)kv->num_blocks, sizeof *refs);
    int32_t *stamp = calloc((size_t)kv->num_blocks, sizeof *stamp);
    int rc = mark && refs && stamp ? check_all(kv, mark, refs, stamp, err)
                                   : sol_err_set(err, -ENOMEM, "kv check: out of memory");
    free(mark);
    free(refs);
    free(stamp);
    return rc;
}
