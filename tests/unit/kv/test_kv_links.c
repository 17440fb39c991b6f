/* kv_links: links reported held exactly while a block they end in is cached; bounded pairs and
 * events; snapshots. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "block_hash.h"
#include "kv_cache.h"
#include "kv_links.h"

static kv_links *make(int32_t cap) {
    sol_err e = {0};
    kv_links *x = kv_links_new(cap, &e);
    if (!x) fail_msg("kv_links_new: %s", e.msg);
    return x;
}

/* Drains and checks the events are exactly `want` (link, place), in any order (the pairs of one
 * block, or the blocks one step evicts, come in table order). */
static void expect(kv_links *x, const kv_link_event *want, size_t n) {
    kv_link_event got[16];
    bool lost = true, used[16] = {false};
    size_t k = kv_links_drain(x, got, 16, &lost);
    assert_false(lost);
    assert_int_equal(k, n);
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < k && (used[j] || got[j].link != want[i].link || got[j].where != want[i].where))
            j++;
        if (j == k)
            fail_msg("event (%llu, %d) missing", (unsigned long long)want[i].link,
                     (int)want[i].where);
        used[j] = true;
    }
}

static void test_held_follows_the_block(void **st) {
    (void)st;
    kv_links *x = make(8);
    kv_links_add(x, 11, 100, false); /* not cached yet: nothing to say */
    kv_links_add(x, 12, 100, false); /* two links end in one block */
    kv_links_add(x, 13, 200, true);  /* cached already */
    expect(x, (kv_link_event[]){{13, KV_IN_POOL}}, 1);
    kv_links_block(x, 100, KV_IN_POOL);
    expect(x, (kv_link_event[]){{11, KV_IN_POOL}, {12, KV_IN_POOL}}, 2);
    kv_links_block(x, 100, KV_IN_POOL); /* again: no news */
    kv_links_add(x, 11, 100, true);
    expect(x, NULL, 0);
    assert_int_equal(kv_links_n_held(x), 3);
    kv_links_block(x, 999, KV_GONE); /* a block no link ends in */
    kv_links_block(x, 100, KV_GONE);
    expect(x, (kv_link_event[]){{11, KV_GONE}, {12, KV_GONE}}, 2);
    assert_int_equal(kv_links_pairs(x), 1);
    kv_link_event held[4];
    assert_int_equal(kv_links_held(x, held, 4), 1);
    assert_true(held[0].link == 13 && held[0].where == KV_IN_POOL);
    kv_links_free(x);
}

/* One link over two blocks (two tokenizations): held while either is. */
static void test_link_in_two_blocks(void **st) {
    (void)st;
    kv_links *x = make(8);
    kv_links_add(x, 7, 100, true);
    kv_links_add(x, 7, 200, true);
    expect(x, (kv_link_event[]){{7, KV_IN_POOL}}, 1);
    kv_links_block(x, 100, KV_GONE);
    expect(x, NULL, 0);
    kv_links_block(x, 200, KV_GONE);
    expect(x, (kv_link_event[]){{7, KV_GONE}}, 1);
    kv_links_free(x);
}

/* Tiers: a link is in the pool while one of its blocks is, in the second tier while none is in the
 * pool and one is there; each change is one event, and the snapshot says each link's tier. */
static void test_tiers(void **st) {
    (void)st;
    kv_links *x = make(8);
    kv_links_add(x, 7, 100, true);
    kv_links_add(x, 7, 200, true);
    kv_links_add(x, 8, 300, true);
    expect(x, (kv_link_event[]){{7, KV_IN_POOL}, {8, KV_IN_POOL}}, 2);
    kv_links_block(x, 100, KV_IN_TIER2); /* 200 still in the pool */
    expect(x, NULL, 0);
    kv_links_block(x, 200, KV_IN_TIER2);
    kv_links_block(x, 300, KV_IN_TIER2);
    expect(x, (kv_link_event[]){{7, KV_IN_TIER2}, {8, KV_IN_TIER2}}, 2);
    kv_links_block(x, 300, KV_IN_POOL); /* restored */
    kv_links_block(x, 100, KV_GONE);    /* the tier dropped it: 200 keeps 7 in the tier */
    expect(x, (kv_link_event[]){{8, KV_IN_POOL}}, 1);
    kv_link_event held[4];
    assert_int_equal(kv_links_held(x, held, 4), 2);
    for (int i = 0; i < 2; i++)
        assert_int_equal(held[i].where, held[i].link == 7 ? KV_IN_TIER2 : KV_IN_POOL);
    kv_links_block(x, 200, KV_GONE);
    expect(x, (kv_link_event[]){{7, KV_GONE}}, 1);
    assert_int_equal(kv_links_n_held(x), 1);
    kv_links_free(x);
}

/* Past the bound the oldest pair goes, reported removed when it was held; a known pair is
 * refreshed, not duplicated. */
static void test_bound(void **st) {
    (void)st;
    kv_links *x = make(3);
    kv_links_add(x, 1, 10, true);
    kv_links_add(x, 2, 20, true);
    kv_links_add(x, 3, 30, false);
    kv_links_add(x, 1, 10, true); /* refreshed: 2 is the oldest now */
    kv_links_add(x, 4, 40, true);
    expect(x, (kv_link_event[]){{1, KV_IN_POOL}, {2, KV_IN_POOL}, {2, KV_GONE}, {4, KV_IN_POOL}},
           4);
    assert_int_equal(kv_links_pairs(x), 3);
    kv_links_block(x, 20, KV_IN_POOL); /* 2's pair is gone: nothing */
    expect(x, NULL, 0);
    kv_links_block(x, 30, KV_IN_POOL);
    expect(x, (kv_link_event[]){{3, KV_IN_POOL}}, 1);
    kv_links_free(x);
    sol_err e = {0};
    assert_null(kv_links_new(0, &e));
    assert_null(kv_links_new(KV_LINKS_MAX + 1, &e));
}

/* More events than the ring holds between two drains: the consumer is told to resynchronise. */
static void test_events_lost(void **st) {
    (void)st;
    kv_links *x = make(KV_LINKS_MAX);
    for (uint64_t i = 1; i <= KV_LINK_EVENTS_MAX + 5; i++)
        kv_links_add(x, i, i + 1000000, true);
    kv_link_event *ev = malloc(sizeof *ev * KV_LINK_EVENTS_MAX);
    bool lost = false;
    assert_int_equal(kv_links_drain(x, ev, KV_LINK_EVENTS_MAX, &lost), KV_LINK_EVENTS_MAX);
    assert_true(lost);
    assert_int_equal(kv_links_drain(x, ev, KV_LINK_EVENTS_MAX, &lost), 0);
    assert_false(lost);
    free(ev);
    kv_links_free(x);
}

/* Through the KV cache's observer: a prompt's blocks committed, then evicted by other work. */
static void on_hash(void *ctx, uint64_t hash, kv_place where) {
    kv_links_block(ctx, hash, where);
}

static void run_seq(kv_cache *kv, const int32_t *tokens, int32_t n) {
    sol_err e = {0};
    kv_seq *s = kv_seq_new(kv, NULL, &e);
    assert_non_null(s);
    kv_copy cp[KV_MAX_COPIES];
    int32_t n_cp = 0;
    assert_int_equal(kv_seq_reserve(s, n, cp, &n_cp, &e), 0);
    assert_int_equal(kv_seq_append(s, tokens, n, &e), 0);
    kv_seq_free(s);
}

static void test_with_the_cache(void **st) {
    (void)st;
    sol_err e = {0};
    kv_cache *kv = kv_cache_new(4, 4, true, &e);
    assert_non_null(kv);
    kv_links *x = make(16);
    kv_cache_observe(kv, on_hash, x);
    int32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8},
            other[16] = {9, 9, 9, 9, 8, 8, 8, 8, 7, 7, 7, 7, 6, 6, 6, 6};
    uint64_t b0 = block_hash_tokens(block_hash_seed(NULL), prompt, 4);
    uint64_t b1 = block_hash_tokens(b0, prompt + 4, 4);
    kv_links_add(x, 501, b0, kv_cache_holds(kv, b0));
    kv_links_add(x, 502, b1, kv_cache_holds(kv, b1));
    expect(x, NULL, 0);
    run_seq(kv, prompt, 8); /* both blocks committed, then cached when the sequence ends */
    expect(x, (kv_link_event[]){{501, KV_IN_POOL}, {502, KV_IN_POOL}}, 2);
    assert_true(kv_cache_holds(kv, b1));
    run_seq(kv, other, 16); /* the whole pool: the cached blocks are evicted, oldest first */
    expect(x, (kv_link_event[]){{501, KV_GONE}, {502, KV_GONE}}, 2);
    assert_false(kv_cache_holds(kv, b0));
    assert_int_equal(kv_links_pairs(x), 0);
    kv_cache_free(kv);
    kv_links_free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_held_follows_the_block),
        cmocka_unit_test(test_link_in_two_blocks),
        cmocka_unit_test(test_tiers),
        cmocka_unit_test(test_bound),
        cmocka_unit_test(test_events_lost),
        cmocka_unit_test(test_with_the_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
