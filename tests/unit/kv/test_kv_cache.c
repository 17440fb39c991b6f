/* Promise: the KV block manager keeps every block in one consistent state and serves correct prefix
 * hits, LRU evictions, rollbacks and copy-on-write forks. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "block_hash.h"
#include "kv_cache.h"

#define BS 4

static void check_ok(const kv_cache *kv) {
    sol_err e = {0};
    int rc = kv_cache_check(kv, &e);
    if (rc) fail_msg("kv_cache_check: %s", e.msg);
}

/* Reserve and append `n` tokens; the tests below never need copies here unless they ask. */
static void put(kv_seq *s, const int32_t *t, int32_t n) {
    kv_copy cp[KV_MAX_COPIES];
    int32_t ncp = -1;
    sol_err e = {0};
    assert_int_equal(kv_seq_reserve(s, n, cp, &ncp, &e), 0);
    assert_int_equal(ncp, 0);
    assert_int_equal(kv_seq_append(s, t, n, &e), 0);
}

static kv_seq *prompt_seq(kv_cache *kv, const char *salt, const int32_t *p, int32_t n,
                          int32_t *cached) {
    sol_err e = {0};
    kv_seq *s = kv_seq_new(kv, salt, &e);
    assert_non_null(s);
    *cached = kv_seq_match_prefix(s, p, n, &e);
    assert_true(*cached >= 0);
    put(s, p + *cached, n - *cached);
    return s;
}

static const int32_t P[16] = {11, 12, 13, 14, 21, 22, 23, 24, 31, 32, 33, 34, 41, 42, 43, 44};

static void test_prefix_hit(void **state) {
    (void)state;
    sol_err e = {0};
    kv_cache *kv = kv_cache_new(16, BS, true, &e);
    assert_non_null(kv);
    int32_t c, n;
    kv_seq *a = prompt_seq(kv, NULL, P, 10, &c);
    assert_int_equal(c, 0);
    const int32_t *ta = kv_seq_block_table(a, &n);
    assert_int_equal(n, 3);
    int32_t a0 = ta[0], a1 = ta[1];

    /* While a is alive: shares its two full blocks, not its partial third. */
    int32_t q[11] = {11, 12, 13, 14, 21, 22, 23, 24, 99, 98, 97};
    kv_seq *b = prompt_seq(kv, NULL, q, 11, &c);
    assert_int_equal(c, 8);
    const int32_t *tb = kv_seq_block_table(b, &n);
    assert_int_equal(n, 3);
    assert_int_equal(tb[0], a0);
    assert_int_equal(tb[1], a1);
    assert_int_not_equal(tb[2], ta[2]);
    assert_int_equal(kv_seq_token_at(b, 9), 98);
    check_ok(kv);

    /* After both are freed the full blocks stay cached; an exact 8-token prompt may take only
     * one block so its last token is recomputed. */
    kv_seq_free(a);
    kv_seq_free(b);
    kv_cache_stats st;
    kv_cache_get_stats(kv, &st);
    assert_int_equal(st.cached_blocks, 2);
    assert_int_equal(st.used_blocks, 0);
    kv_seq *d = prompt_seq(kv, NULL, P, 8, &c);
    assert_int_equal(c, 4);
    assert_int_equal(kv_seq_block_table(d, &n)[0], a0);
    kv_seq *f = prompt_seq(kv, NULL, P, 9, &c);
    assert_int_equal(c, 8);
    assert_int_equal(kv_seq_block_table(f, &n)[1], a1);
    assert_int_equal(kv_cache_peek_prefix(kv, NULL, P, 16, NULL), 8);
    kv_cache_get_stats(kv, &st);
    assert_int_equal(st.prefix_query_tokens, 10 + 11 + 8 + 9);
    assert_int_equal(st.prefix_hit_tokens, 8 + 4 + 8);
    check_ok(kv);
    kv_cache_free(kv);
}

static void test_salt_isolates(void **state) {
    (void)state;
    sol_err e = {0};
    kv_cache *kv = kv_cache_new(16, BS, true, &e);
    int32_t c;
    kv_seq_free(prompt_seq(kv, "tenant-1", P, 9, &c));
    kv_seq *s2 = prompt_seq(kv, "tenant-2", P, 9, &c);
    assert_int_equal(c, 0);
    kv_seq *s0 = prompt_seq(kv, NULL, P, 9, &c);
    assert_int_equal(c, 0);
    kv_seq *s1 = prompt_seq(kv, "tenant-1", P, 9, &c);
    assert_int_equal(c, 8);
    assert_int_equal(kv_cache_peek_prefix(kv, "tenant-2", P, 9, NULL), 8);
    check_ok(kv);
    kv_seq_free(s0);
    kv_seq_free(s1);
    kv_seq_free(s2);
    kv_cache_free(kv);
}

static void test_disabled_caching(void **state) {
    (void)state;
    sol_err e = {0};
    kv_cache *kv = kv_cache_new(8, BS, false, &e);
    int32_t c;
    kv_seq_free(prompt_seq(kv, NULL, P, 9, &c));
    kv_seq *s = prompt_seq(kv, NULL, P, 9, &c);
    assert_int_equal(c, 0);
    kv_cache_stats st;
    kv_cache_get_stats(kv, &st);
    assert_int_equal(st.cached_blocks, 0);
    assert_int_equal(st.free_blocks, 5);
    check_ok(kv);
    kv_seq_free(s);
    kv_cache_free(kv);
}

static void test_lru_evicts_oldest(void **state) {
    (void)state;
    sol_err e = {0};
    kv_cache *kv = kv_cache_new(4, BS, true, &e);
    int32_t c, n, first[3];
    for (int i = 0; i < 3; i++) { /* three one-block sequences, freed in order 0, 1, 2 */
        kv_seq *s = prompt_seq(kv, NULL, P + 4 * i, 4, &c);
        first[i] = kv_seq_block_table(s, &n)[0];
        kv_seq_free(s);
    }
    kv_cache_stats st;
    kv_cache_get_stats(kv, &st);
    assert_int_equal(st.cached_blocks, 3);
    assert_int_equal(st.free_blocks, 1);
    kv_seq *x = kv_seq_new(kv, NULL, &e);
    put(x, P + 12, 4); /* takes the never-used block, evicts nothing */
    kv_cache_get_stats(kv, &st);
    assert_int_equal(st.evictions, 0);
    kv_seq *y = kv_seq_new(kv, NULL, &e);
    put(y, (int32_t[]){1, 2, 3, 4}, 4);
    assert_int_equal(kv_seq_block_table(y, &n)[0], first[0]);
    kv_cache_get_stats(kv, &st);
    assert_int_equal(st.evictions, 1);
    int32_t p0[5] = {11, 12, 13, 14, 0}, p1[5] = {21, 22, 23, 24, 0};
    assert_int_equal(kv_cache_peek_prefix(kv, NULL, p0, 5, NULL), 0);
    int32_t ev = -1;
    assert_int_equal(kv_cache_peek_prefix(kv, NULL, p1, 5, &ev), 4);
    assert_int_equal(ev, 1);
    put(y, (int32_t[]){5}, 1);
    assert_int_equal(kv_seq_block_table(y, &n)[1], first[1]);
    check_ok(kv);
    kv_cache_free(kv); /* frees x and y too */
}

static void test_reserve_failure_is_clean(void **state) {
    (void)state;
    sol_err e = {0};
    kv_cache *kv = kv_cache_new(4, BS, true, &e);
    kv_seq *a = kv_seq_new(kv, NULL, &e);
    put(a, P, 6); /* 2 blocks, last one partial */
    kv_seq *b = kv_seq_fork(a, &e);
    assert_non_null(b);
    kv_copy cp[KV_MAX_COPIES];
    int32_t ncp;
    assert_int_equal(kv_seq_reserve(b, 2, cp, &ncp, &e), 0); /* CoW of the partial block */
    assert_int_equal(ncp, 1);
    kv_cache_stats before, after;
    memset(&before, 0, sizeof before); /* padding too: compared bytewise below */
    memset(&after, 0, sizeof after);
    kv_cache_get_stats(kv, &before);
    assert_int_equal(before.free_blocks, 1);
    int32_t nb0, nb1;
    int32_t t0[8];
    const int32_t *tab = kv_seq_block_table(a, &nb0);
    assert_int_equal(nb0, 2);
    memcpy(t0, tab, sizeof(int32_t) * (size_t)nb0);
    assert_int_equal(kv_seq_blocks_needed(a, 7), 2);
    assert_int_equal(kv_seq_reserve(a, 7, cp, &ncp, &e), -ENOSPC);
    assert_non_null(strstr(e.msg, "need 2 blocks"));
    assert_int_equal(ncp, 0);
    const int32_t *t1 = kv_seq_block_table(a, &nb1);
    assert_int_equal(nb0, nb1);
    assert_memory_equal(t0, t1, sizeof(int32_t) * (size_t)nb0);
    assert_int_equal(kv_seq_len(a), 6);
    kv_cache_get_stats(kv, &after);
    assert_memory_equal(&before, &after, sizeof before);
    assert_false(kv_cache_can_allocate(kv, 2));
    assert_true(kv_cache_can_allocate(kv, 1));
    assert_int_equal(kv_seq_append(a, P, 3, &e), -EINVAL); /* only 2 slots reserved */
    check_ok(kv);
    kv_seq_free(a);
    kv_seq_free(b);
    kv_cache_free(kv);
}

static void test_truncate_releases_exact_blocks(void **state) {
    (void)state;
    sol_err e = {0};
    kv_cache *kv = kv_cache_new(8, BS, true, &e);
    kv_seq *a = kv_seq_new(kv, NULL, &e);
    put(a, P, 14); /* blocks 0..3, last holds 2 */
    kv_copy cp[KV_MAX_COPIES];
    int32_t ncp, n;
    assert_int_equal(kv_seq_reserve(a, 8, cp, &ncp, &e), 0); /* 22 tokens -> 6 blocks */
    int32_t t[6];
    memcpy(t, kv_seq_block_table(a, &n), sizeof t);
    assert_int_equal(n, 6);
    assert_int_equal(kv_cache_peek_prefix(kv, NULL, P, 16, NULL), 12);

    assert_int_equal(kv_seq_truncate(a, 9, &e), 0); /* keeps blocks 0..2, block 2 un-committed */
    kv_seq_block_table(a, &n);
    assert_int_equal(n, 3);
    kv_cache_stats st;
    kv_cache_get_stats(kv, &st);
    assert_int_equal(st.free_blocks, 5);
    assert_int_equal(st.used_blocks, 3);
    assert_int_equal(kv_cache_peek_prefix(kv, NULL, P, 16, NULL), 8);
    check_ok(kv);

    /* Rewrite position 9.. with other tokens: the un-committed block is written in place. */
    put(a, (int32_t[]){7, 7, 7}, 3);
    assert_int_equal(kv_seq_block_table(a, &n)[2], t[2]);
    assert_int_equal(kv_seq_token_at(a, 8), 31);
    assert_int_equal(kv_seq_token_at(a, 9), 7);
    int32_t q[13] = {11, 12, 13, 14, 21, 22, 23, 24, 31, 7, 7, 7, 0};
    assert_int_equal(kv_cache_peek_prefix(kv, NULL, q, 13, NULL), 12);

    assert_int_equal(kv_seq_truncate(a, 8, &e), 0); /* exactly two blocks left */
    kv_seq_block_table(a, &n);
    assert_int_equal(n, 2);
    assert_int_equal(kv_seq_truncate(a, 9, &e), -EINVAL);
    assert_int_equal(kv_seq_truncate(a, 0, &e), 0);
    kv_cache_get_stats(kv, &st);
    assert_int_equal(st.used_blocks, 0);
    assert_int_equal(st.cached_blocks, 3); /* 2 original full blocks + the rewritten one */
    check_ok(kv);
    kv_seq_free(a);
    kv_cache_free(kv);
}

/* Sliding window: blocks wholly before the window are released (prefix-cached as usual), the
 * table keeps their places as KV_BLOCK_DROPPED, the hash chain continues past them, and nothing
 * can write, read or truncate into them. */
static void test_drop_before_window(void **state) {
    (void)state;
    sol_err e = {0};
    kv_cache *kv = kv_cache_new(8, BS, true, &e);
    kv_seq *a = kv_seq_new(kv, NULL, &e);
    put(a, P, 14); /* blocks 0..3, the last holds 2 */
    int32_t n;
    assert_int_equal(kv_seq_drop_before(a, 3), 0); /* block 0 still holds position 3 */
    assert_int_equal(kv_seq_drop_before(a, 9), 2);
    assert_int_equal(kv_seq_drop_before(a, 9), 0); /* idempotent */
    assert_int_equal(kv_seq_dropped(a), 2);
    const int32_t *t = kv_seq_block_table(a, &n);
    assert_int_equal(n, 4);
    assert_int_equal(t[0], KV_BLOCK_DROPPED);
    assert_int_equal(t[1], KV_BLOCK_DROPPED);
    assert_int_equal(kv_seq_token_at(a, 7), -1);
    assert_int_equal(kv_seq_token_at(a, 8), 31);
    kv_cache_stats st;
    kv_cache_get_stats(kv, &st);
    assert_int_equal(st.used_blocks, 2);
    assert_int_equal(st.cached_blocks, 2);
    check_ok(kv);
    int32_t slots[4];
    assert_int_equal(kv_seq_slots(a, 4, 2, slots, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "dropped"));
    assert_int_equal(kv_seq_truncate(a, 7, &e), -EINVAL);
    /* Filling block 3 commits it chained from block 2, whose parent was dropped. */
    put(a, P + 14, 2);
    check_ok(kv);
    assert_int_equal(kv_cache_peek_prefix(kv, NULL, P, 16, NULL), 12);
    /* A fork shares the live blocks only; freeing both returns every block. */
    kv_seq *b = kv_seq_fork(a, &e);
    assert_non_null(b);
    assert_int_equal(kv_seq_dropped(b), 2);
    check_ok(kv);
    assert_int_equal(kv_seq_truncate(a, 8, &e), 0);
    kv_seq_free(a);
    kv_seq_free(b);
    kv_cache_get_stats(kv, &st);
    assert_int_equal(st.used_blocks, 0);
    assert_int_equal(st.free_blocks + st.cached_blocks, 8);
    check_ok(kv);
    kv_cache_free(kv);
}

static void test_fork_copy_on_write(void **state) {
    (void)state;
    sol_err e = {0};
    kv_cache *kv = kv_cache_new(8, BS, true, &e);
    kv_seq *a = kv_seq_new(kv, NULL, &e);
    put(a, P, 6);
    kv_seq *b = kv_seq_fork(a, &e);
    int32_t na, nb;
    const int32_t *ta = kv_seq_block_table(a, &na);
    const int32_t *tb = kv_seq_block_table(b, &nb);
    assert_int_equal(nb, 2);
    assert_memory_equal(ta, tb, sizeof(int32_t) * 2);
    assert_int_equal(kv_seq_len(b), 6);
    int32_t shared = ta[1];

    kv_copy cp[KV_MAX_COPIES];
    int32_t ncp;
    assert_int_equal(kv_seq_append(b, (int32_t[]){5}, 1, &e), -EINVAL); /* must reserve first */
    assert_int_equal(kv_seq_reserve(b, 1, cp, &ncp, &e), 0);
    assert_int_equal(ncp, 1);
    assert_int_equal(cp[0].src_block, shared);
    tb = kv_seq_block_table(b, &nb);
    assert_int_equal(cp[0].dst_block, tb[1]);
    assert_int_not_equal(tb[1], shared);
    assert_int_equal(tb[0], kv_seq_block_table(a, &na)[0]); /* full block still shared */
    assert_int_equal(kv_seq_append(b, (int32_t[]){5}, 1, &e), 0);
    assert_int_equal(kv_seq_token_at(b, 5), 22);

    /* a now holds its block alone: no copy. */
    assert_int_equal(kv_seq_reserve(a, 1, cp, &ncp, &e), 0);
    assert_int_equal(ncp, 0);
    assert_int_equal(kv_seq_append(a, (int32_t[]){9}, 1, &e), 0);
    assert_int_equal(kv_seq_block_table(a, &na)[1], shared);
    assert_int_equal(kv_seq_token_at(a, 6), 9);
    assert_int_equal(kv_seq_token_at(b, 6), 5);

    /* A second fork of a partial block: whoever writes first copies, the other keeps it. */
    kv_seq *c = kv_seq_fork(a, &e);
    assert_int_equal(kv_seq_reserve(a, 1, cp, &ncp, &e), 0);
    assert_int_equal(ncp, 1);
    assert_int_equal(cp[0].src_block, shared);
    assert_int_equal(kv_seq_append(a, (int32_t[]){8}, 1, &e), 0);
    put(c, (int32_t[]){6}, 1);
    assert_int_equal(kv_seq_block_table(c, &na)[1], shared);
    assert_int_equal(kv_seq_token_at(c, 7), 6);
    assert_int_equal(kv_seq_token_at(a, 7), 8);
    check_ok(kv);

    /* Truncating into a full block shared with a fork leaves it full for the other holder and
     * copies it on the next write. */
    kv_seq *d = kv_seq_new(kv, NULL, &e);
    put(d, P, 8);
    kv_seq *f = kv_seq_fork(d, &e);
    int32_t full = kv_seq_block_table(d, &na)[1];
    assert_int_equal(kv_seq_truncate(f, 6, &e), 0);
    assert_int_equal(kv_cache_peek_prefix(kv, NULL, P, 9, NULL), 8);
    assert_int_equal(kv_seq_reserve(f, 1, cp, &ncp, &e), 0);
    assert_int_equal(ncp, 1);
    assert_int_equal(cp[0].src_block, full);
    assert_int_equal(kv_seq_append(f, (int32_t[]){3}, 1, &e), 0);
    assert_int_equal(kv_seq_token_at(f, 5), 22);
    assert_int_equal(kv_seq_token_at(f, 6), 3);
    assert_int_equal(kv_seq_token_at(d, 6), 23);
    check_ok(kv);
    kv_cache_free(kv); /* frees a, b, c, d, f */
}

/* ---- property test: random operations against a shadow model ----
 * The test plays the backend: `fake` is the K/V pool, and the "K/V" written at a position is a
 * hash of the salt and all tokens up to it (as real K/V depends on the whole prefix). Every
 * sequence must read back exactly its own history, so a wrong prefix hit, a missed
 * copy-on-write, a cross-salt share or a freed-while-used block all show up as a mismatch. */

#define PN_BLOCKS 40
#define PMAX_SEQS 10
#define PMAX_LEN 48
#define P_OPS 30000

typedef struct shadow {
    kv_seq *s;
    int salt;
    int32_t len;
    int32_t tok[PMAX_LEN];
    uint32_t kvv[PMAX_LEN]; /* expected fake K/V per position */
} shadow;

typedef struct world {
    kv_cache *kv;
    shadow sh[PMAX_SEQS];
    int n;
    uint32_t fake[PN_BLOCKS * BS];
    uint64_t rng;
    int enospc, copies, dropped;
} world;

static const char *const SALTS[3] = {NULL, "alice", "bob"};
static const int32_t PREFIX[3][12] = {{1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2},
                                      {1, 2, 3, 4, 0, 0, 0, 0, 5, 5, 5, 5},
                                      {3, 1, 4, 1, 5, 2, 6, 5, 3, 5, 0, 1}};

static uint32_t rnd(world *w, uint32_t n) {
    w->rng ^= w->rng << 13; /* xorshift64 with a fixed seed: the run is reproducible */
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    return (uint32_t)(w->rng % n);
}

static uint32_t kv_value(uint32_t prev, int32_t tok) {
    uint32_t h = (prev ^ (uint32_t)tok) * 0x9e3779b1u;
    return h ^ (h >> 15);
}

static void shadow_push(shadow *sh, int32_t tok) {
    uint32_t prev = sh->len ? sh->kvv[sh->len - 1] : 0x1000u * (uint32_t)(sh->salt + 1);
    sh->tok[sh->len] = tok;
    sh->kvv[sh->len++] = kv_value(prev, tok);
}

static void verify_seq(world *w, const shadow *sh) {
    assert_int_equal(kv_seq_len(sh->s), sh->len);
    int32_t slots[PMAX_LEN], lo = kv_seq_dropped(sh->s) * BS;
    sol_err e = {0};
    assert_int_equal(kv_seq_slots(sh->s, lo, sh->len - lo, slots + lo, &e), 0);
    for (int32_t i = 0; i < lo; i++)
        assert_int_equal(kv_seq_token_at(sh->s, i), -1);
    for (int32_t i = lo; i < sh->len; i++) {
        assert_int_equal(kv_seq_token_at(sh->s, i), sh->tok[i]);
        assert_int_equal(w->fake[slots[i]], sh->kvv[i]);
    }
}

typedef struct snapshot {
    kv_cache_stats st;
    int32_t n, len, table[PN_BLOCKS];
} snapshot;

static void snap(const world *w, const shadow *sh, snapshot *out) {
    memset(out, 0, sizeof *out);
    kv_cache_get_stats(w->kv, &out->st);
    const int32_t *t = kv_seq_block_table(sh->s, &out->n);
    memcpy(out->table, t, sizeof(int32_t) * (size_t)out->n);
    out->len = kv_seq_len(sh->s);
}

/* One engine step for a sequence: reserve, copy, write K/V at the slots, append. */
static int forward(world *w, shadow *sh, const int32_t *toks, int32_t n) {
    kv_copy cp[KV_MAX_COPIES];
    int32_t ncp = -1, slots[PMAX_LEN];
    sol_err e = {0};
    snapshot before, after;
    snap(w, sh, &before);
    int32_t need = kv_seq_blocks_needed(sh->s, n);
    int rc = kv_seq_reserve(sh->s, n, cp, &ncp, &e);
    if (rc == -ENOSPC) {
        assert_false(kv_cache_can_allocate(w->kv, need));
        snap(w, sh, &after);
        assert_memory_equal(&before, &after, sizeof before);
        w->enospc++;
        return rc;
    }
    assert_int_equal(rc, 0);
    for (int32_t i = 0; i < ncp; i++) {
        memcpy(&w->fake[cp[i].dst_block * BS], &w->fake[cp[i].src_block * BS],
               BS * sizeof(uint32_t));
        w->copies++;
    }
    assert_int_equal(kv_seq_slots(sh->s, sh->len, n, slots, &e), 0);
    for (int32_t i = 0; i < n; i++) {
        shadow_push(sh, toks[i]);
        w->fake[slots[i]] = sh->kvv[sh->len - 1];
    }
    assert_int_equal(kv_seq_append(sh->s, toks, n, &e), 0);
    return 0;
}

static void drop(world *w, int i) {
    kv_seq_free(w->sh[i].s);
    w->sh[i] = w->sh[--w->n];
}

static void op_new(world *w) {
    if (w->n == PMAX_SEQS) return;
    shadow *sh = &w->sh[w->n];
    memset(sh, 0, sizeof *sh);
    sh->salt = (int)rnd(w, 3);
    int32_t prompt[PMAX_LEN], len = 0, p = (int32_t)rnd(w, 3), plen = (int32_t)rnd(w, 13);
    for (; len < plen; len++)
        prompt[len] = PREFIX[p][len];
    for (int32_t k = 1 + (int32_t)rnd(w, 12); k > 0; k--)
        prompt[len++] = (int32_t)rnd(w, 6);
    sol_err e = {0};
    sh->s = kv_seq_new(w->kv, SALTS[sh->salt], &e);
    assert_non_null(sh->s);
    w->n++;
    int32_t peek = kv_cache_peek_prefix(w->kv, SALTS[sh->salt], prompt, len, NULL);
    int32_t cached = kv_seq_match_prefix(sh->s, prompt, len, &e);
    assert_int_equal(cached, peek);
    assert_true(cached % BS == 0 && cached <= len - 1);
    for (int32_t i = 0; i < cached; i++)
        shadow_push(sh, prompt[i]);
    verify_seq(w, sh); /* a hit must hold exactly this salt's and prompt's K/V */
    if (forward(w, sh, prompt + cached, len - cached) != 0) drop(w, w->n - 1);
}

static void op_decode(world *w, shadow *sh) {
    int32_t n = 1 + (int32_t)rnd(w, 3), toks[4];
    if (sh->len + n > PMAX_LEN) return;
    for (int32_t i = 0; i < n; i++)
        toks[i] = (int32_t)rnd(w, 6);
    if (forward(w, sh, toks, n) != 0) drop(w, (int)rnd(w, (uint32_t)w->n)); /* preempt */
}

static void op_speculate(world *w, shadow *sh) {
    int32_t k = 1 + (int32_t)rnd(w, 4), toks[5], old = sh->len;
    if (sh->len + k > PMAX_LEN) return;
    for (int32_t i = 0; i < k; i++)
        toks[i] = (int32_t)rnd(w, 6);
    if (forward(w, sh, toks, k) != 0) return;
    int32_t keep = old + (int32_t)rnd(w, (uint32_t)k + 1);
    sol_err e = {0};
    if (rnd(w, 4) == 0) /* a sliding window behind the accepted tokens */
        w->dropped += kv_seq_drop_before(sh->s, old - (int32_t)rnd(w, 9));
    assert_int_equal(kv_seq_truncate(sh->s, keep, &e), 0);
    sh->len = keep;
}

static void op_truncate(world *w, shadow *sh) {
    int32_t lo = kv_seq_dropped(sh->s) * BS;
    int32_t keep = lo + (int32_t)rnd(w, (uint32_t)(sh->len - lo) + 1);
    sol_err e = {0};
    assert_int_equal(kv_seq_truncate(sh->s, keep, &e), 0);
    sh->len = keep;
    int32_t n;
    kv_seq_block_table(sh->s, &n);
    assert_int_equal(n, (keep + BS - 1) / BS);
}

static void op_fork(world *w, shadow *sh) {
    if (w->n == PMAX_SEQS) return;
    sol_err e = {0};
    shadow *d = &w->sh[w->n++];
    *d = *sh;
    d->s = kv_seq_fork(sh->s, &e);
    assert_non_null(d->s);
}

static void op_reserve(world *w, shadow *sh) {
    kv_copy cp[KV_MAX_COPIES];
    int32_t ncp, n = (int32_t)rnd(w, 6);
    sol_err e = {0};
    if (sh->len + n > PMAX_LEN) return;
    int rc = kv_seq_reserve(sh->s, n, cp, &ncp, &e);
    assert_true(rc == 0 || rc == -ENOSPC);
    for (int32_t i = 0; rc == 0 && i < ncp; i++)
        memcpy(&w->fake[cp[i].dst_block * BS], &w->fake[cp[i].src_block * BS],
               BS * sizeof(uint32_t));
}

static void step(world *w) {
    uint32_t r = rnd(w, 100);
    if (w->n == 0 || r < 18) return op_new(w);
    int i = (int)rnd(w, (uint32_t)w->n);
    shadow *sh = &w->sh[i];
    if (r < 50)
        op_decode(w, sh);
    else if (r < 62)
        op_speculate(w, sh);
    else if (r < 70)
        op_truncate(w, sh);
    else if (r < 80)
        op_fork(w, sh);
    else if (r < 86)
        op_reserve(w, sh);
    else
        drop(w, i);
}

static void test_random_operations_keep_invariants(void **state) {
    (void)state;
    sol_err e = {0};
    world *w = calloc(1, sizeof *w);
    w->kv = kv_cache_new(PN_BLOCKS, BS, true, &e);
    w->rng = 0x5eed5eed1234ull;
    for (int op = 0; op < P_OPS; op++) {
        step(w);
        check_ok(w->kv);
        if (op % 64 == 0)
            for (int i = 0; i < w->n; i++)
                verify_seq(w, &w->sh[i]);
    }
    kv_cache_stats st;
    kv_cache_get_stats(w->kv, &st);
    /* The run must have exercised what it claims to test. */
    assert_true(st.prefix_hit_tokens > 1000);
    assert_true(st.evictions > 100);
    assert_true(w->enospc > 100);
    assert_true(w->copies > 100);
    assert_true(w->dropped > 50);
    while (w->n)
        drop(w, w->n - 1);
    check_ok(w->kv);
    kv_cache_get_stats(w->kv, &st);
    assert_int_equal(st.used_blocks, 0);
    assert_int_equal(st.live_seqs, 0);
    assert_int_equal(st.free_blocks + st.cached_blocks, PN_BLOCKS);
    kv_cache_free(w->kv);
    free(w);
}

static void test_block_table_backward_shift(void **state) {
    (void)state;
    block_table t;
    assert_int_equal(block_table_init(&t, 4), 0); /* 8 slots; keys below 2^32 home at key & 7 */
    assert_int_equal(block_table_insert(&t, 1, 10), 0);
    assert_int_equal(block_table_insert(&t, 9, 11), 0);  /* home 1 -> slot 2 */
    assert_int_equal(block_table_insert(&t, 2, 12), 0);  /* home 2 -> slot 3 */
    assert_int_equal(block_table_insert(&t, 17, 13), 0); /* home 1 -> slot 4 */
    assert_int_equal(block_table_insert(&t, 9, 14), -EEXIST);
    assert_int_equal(block_table_insert(&t, 33, 15), -ENOSPC);
    assert_int_equal(block_table_remove(&t, 1), 0);
    assert_int_equal(block_table_find(&t, 9), 11);
    assert_int_equal(block_table_find(&t, 2), 12);
    assert_int_equal(block_table_find(&t, 17), 13);
    assert_int_equal(block_table_remove(&t, 9), 0);
    assert_int_equal(block_table_remove(&t, 9), -ENOENT);
    assert_int_equal(block_table_find(&t, 2), 12);
    assert_int_equal(block_table_find(&t, 17), 13);
    assert_int_equal(block_table_find(&t, 1), -1);
    assert_int_equal(t.count, 2);
    block_table_destroy(&t);
    assert_int_not_equal(block_hash_tokens(1, (int32_t[]){1, 2}, 2),
                         block_hash_tokens(1, (int32_t[]){2, 1}, 2));
    assert_int_not_equal(block_hash_seed(NULL), block_hash_seed("x"));
    assert_int_equal(block_hash_seed(NULL), block_hash_seed(""));
}

static void test_bad_input_is_reported(void **state) {
    (void)state;
    sol_err e = {0};
    assert_null(kv_cache_new(0, BS, true, &e));
    assert_non_null(strstr(e.msg, "num_blocks >= 1"));
    assert_null(kv_cache_new(1 << 20, 1 << 12, true, &e));
    kv_cache *kv = kv_cache_new(4, BS, true, &e);
    kv_seq *s = kv_seq_new(kv, NULL, &e);
    kv_copy cp[KV_MAX_COPIES];
    int32_t ncp, slots[4];
    assert_int_equal(kv_seq_reserve(s, 17, cp, &ncp, &e), -E2BIG);
    assert_int_equal(kv_seq_reserve(s, -1, cp, &ncp, &e), -EINVAL);
    put(s, P, 5);
    assert_int_equal(kv_seq_match_prefix(s, P, 8, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "expected an empty sequence"));
    assert_int_equal(kv_seq_slots(s, 6, 4, slots, &e), -EINVAL);
    assert_int_equal(kv_seq_slots(s, 4, 4, slots, &e), 0);
    assert_int_equal(kv_seq_truncate(s, 6, &e), -EINVAL);
    assert_int_equal(kv_seq_append(s, NULL, 1, &e), -EINVAL);
    assert_int_equal(kv_seq_token_at(s, 5), -1);
    assert_int_equal(kv_seq_token_at(s, 4), 21);
    check_ok(kv);
    kv_seq_free(NULL);
    kv_cache_free(NULL);
    kv_cache_free(kv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_hit),
        cmocka_unit_test(test_salt_isolates),
        cmocka_unit_test(test_disabled_caching),
        cmocka_unit_test(test_lru_evicts_oldest),
        cmocka_unit_test(test_reserve_failure_is_clean),
        cmocka_unit_test(test_truncate_releases_exact_blocks),
        cmocka_unit_test(test_drop_before_window),
        cmocka_unit_test(test_fork_copy_on_write),
        cmocka_unit_test(test_random_operations_keep_invariants),
        cmocka_unit_test(test_block_table_backward_shift),
        cmocka_unit_test(test_bad_input_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
