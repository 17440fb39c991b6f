/* kv_tier and the KV cache's second tier: evicted full blocks kept and restored with their copies
 * queued in order, the least recently spilled dropped for room, a slot awaiting its restore never
 * reused, hash collisions missed, and the observer told only what leaves both tiers. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "block_hash.h"
#include "kv_cache.h"
#include "kv_tier.h"

static void test_tier_bookkeeping(void **st) {
    (void)st;
    sol_err e = {0};
    kv_tier *t = kv_tier_new(2, 2, &e);
    assert_non_null(t);
    int32_t a[2] = {1, 2}, b[2] = {3, 4}, c[2] = {5, 6};
    uint64_t dropped = 9;
    assert_int_equal(kv_tier_spill(t, 7, 100, 1, a, &dropped), 0);
    assert_true(dropped == 0);
    assert_int_equal(kv_tier_spill(t, 7, 100, 1, a, &dropped), -1); /* kept already */
    assert_int_equal(kv_tier_spill(t, 8, 200, 1, b, &dropped), 1);
    assert_int_equal(kv_tier_find(t, 100, 1, a), 0);
    assert_int_equal(kv_tier_find(t, 100, 2, a), -1); /* another parent: a collision, a miss */
    assert_int_equal(kv_tier_find(t, 100, 1, b), -1); /* other tokens: a miss */
    assert_int_equal(kv_tier_restore(t, 1, 9), 0);    /* 200 back into block 9: slot 1 pinned */
    assert_int_equal(kv_tier_find(t, 200, 1, b), -1);
    assert_int_equal(kv_tier_spill(t, 10, 300, 1, c, &dropped), 0); /* drops 100, not pinned 1 */
    assert_true(dropped == 100);
    int32_t n = 0;
    const kv_tier_op *op = kv_tier_ops(t, &n);
    assert_int_equal(n, 4); /* in order: 7 -> 0, 8 -> 1, 1 -> 9, 10 -> 0 */
    assert_true(op[0].to_tier && op[0].block == 7 && op[0].slot == 0);
    assert_true(op[1].to_tier && op[1].block == 8 && op[1].slot == 1);
    assert_true(!op[2].to_tier && op[2].block == 9 && op[2].slot == 1);
    assert_true(op[3].to_tier && op[3].block == 10 && op[3].slot == 0);
    kv_tier_done(t);
    kv_tier_stats s;
    kv_tier_get_stats(t, &s);
    assert_int_equal(s.used, 1);
    assert_true(s.spills == 3 && s.restores == 1 && s.drops == 1);
    assert_int_equal(kv_tier_spill(t, 11, 400, 1, a, &dropped), 1); /* slot 1 free again */
    assert_true(dropped == 0);
    kv_tier_free(t);
    assert_null(kv_tier_new(0, 16, &e));
}

typedef struct seen {
    uint64_t hash[16];
    kv_place where[16];
    int n;
} seen;

static void observe(void *ctx, uint64_t hash, kv_place where) {
    seen *s = ctx;
    if (s->n < 16) s->hash[s->n] = hash, s->where[s->n++] = where;
}

static void fill(kv_cache *kv, const int32_t *tokens, int32_t n) {
    sol_err e = {0};
    kv_seq *s = kv_seq_new(kv, NULL, &e);
    assert_non_null(s);
    assert_int_equal(kv_seq_match_prefix(s, tokens, n, &e) >= 0, 1);
    int32_t len = kv_seq_len(s);
    kv_copy cp[KV_MAX_COPIES];
    int32_t n_cp = 0;
    assert_int_equal(kv_seq_reserve(s, n - len, cp, &n_cp, &e), 0);
    assert_int_equal(kv_seq_append(s, tokens + len, n - len, &e), 0);
    assert_int_equal(kv_cache_check(kv, &e), 0);
    kv_seq_free(s);
}

static void test_cache_with_a_tier(void **st) {
    (void)st;
    sol_err e = {0};
    kv_cache *kv = kv_cache_new(2, 2, true, &e);
    assert_non_null(kv);
    assert_int_equal(kv_cache_tier2(kv, 4, &e), 0);
    seen obs = {0};
    kv_cache_observe(kv, observe, &obs);
    int32_t p[5] = {1, 2, 3, 4, 9}, q[4] = {7, 7, 8, 8};
    fill(kv, p, 4); /* blocks {1,2} {3,4} cached */
    uint64_t h0 = block_hash_tokens(block_hash_seed(NULL), p, 2),
             h1 = block_hash_tokens(h0, p + 2, 2);
    assert_int_equal(obs.n, 2);
    fill(kv, q, 4); /* the whole pool: p's blocks spilled, reported in the tier, not gone */
    int32_t n = 0;
    const kv_tier_op *op = kv_cache_tier_ops(kv, &n);
    assert_int_equal(n, 2);
    assert_true(op[0].to_tier && op[1].to_tier);
    kv_cache_tier_done(kv);
    assert_int_equal(obs.n, 6); /* p's two stored, then p's two spilled and q's two stored */
    int in_tier = 0;
    for (int i = 2; i < obs.n; i++) {
        assert_int_not_equal(obs.where[i], KV_GONE);
        if (obs.where[i] == KV_IN_TIER2) {
            assert_true(obs.hash[i] == (in_tier ? h0 : h1)); /* a prefix's tail goes first */
            in_tier++;
        }
    }
    assert_int_equal(in_tier, 2);
    assert_true(kv_cache_holds(kv, h0) == false); /* out of the pool, in the tier */
    sol_err e2 = {0};
    kv_seq *s = kv_seq_new(kv, NULL, &e2);
    assert_int_equal(kv_seq_match_prefix(s, p, 5, &e2), 4); /* both blocks back from the tier */
    op = kv_cache_tier_ops(kv, &n);
    assert_int_equal(n, 4); /* per block: q's out of it, then p's into it */
    assert_true(op[0].to_tier && !op[1].to_tier && op[2].to_tier && !op[3].to_tier);
    assert_true(op[1].block == op[0].block && op[3].block == op[2].block);
    kv_cache_tier_done(kv);
    assert_true(kv_cache_holds(kv, h0) && kv_cache_holds(kv, h1));
    assert_int_equal(obs.n, 10); /* q's two spilled, p's two back in the pool */
    for (int i = 6; i < 10; i++)
        assert_int_equal(obs.where[i],
                         obs.hash[i] == h0 || obs.hash[i] == h1 ? KV_IN_POOL : KV_IN_TIER2);
    kv_cache_stats cs;
    kv_cache_get_stats(kv, &cs);
    assert_true(cs.tier2_hit_tokens == 4 && cs.prefix_hit_tokens >= 4);
    assert_int_equal(cs.tier2_used, 2); /* q's blocks */
    assert_int_equal(kv_cache_check(kv, &e2), 0);
    kv_seq_free(s);
    kv_cache_free(kv);
    kv = kv_cache_new(2, 2, false, &e);
    assert_int_equal(kv_cache_tier2(kv, 4, &e), -EINVAL); /* needs prefix caching */
    kv_cache_free(kv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tier_bookkeeping),
        cmocka_unit_test(test_cache_with_a_tier),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
