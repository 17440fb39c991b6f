/* Promise: the broker's dispatch policy (least loaded, bounded prefix affinity, capacity, drain)
 * and its in-flight table (unique wire ids, stale ids refused, queues FIFO) behave as documented.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "inflight.h"
#include "worker_table.h"

/* pool "p", any model */
#define P ((wt_scope){"p", NULL})

static bk_worker *add(worker_table *t, const char *id, const char *pool, uint32_t cap) {
    bk_worker w = {0};
    snprintf(w.id, sizeof w.id, "%s", id);
    snprintf(w.pool, sizeof w.pool, "%s", pool);
    w.ident.len = strlen(id);
    memcpy(w.ident.bytes, id, w.ident.len);
    w.capacity = cap;
    return wt_add(t, &w);
}

static void test_least_loaded_and_capacity(void **st) {
    (void)st;
    worker_table t;
    wt_init(&t);
    bk_worker *a = add(&t, "a", "p", 2), *b = add(&t, "b", "p", 2);
    add(&t, "f", "fast", 8);
    int counts[2] = {0, 0};
    for (int i = 0; i < 4; i++) {
        bk_worker *w = wt_pick(&t, P, 0, false, NULL);
        assert_non_null(w);
        w->inflight++;
        counts[w == b]++;
    }
    assert_int_equal(counts[0], 2);
    assert_int_equal(counts[1], 2);
    assert_null(wt_pick(&t, P, 0, false, NULL)); /* both at capacity: queue */
    a->inflight = 0;
    a->draining = true;
    assert_null(wt_pick(&t, P, 0, false, NULL)); /* draining takes nothing */
    assert_int_equal(wt_live_in_pool(&t, P), 1);
    a->draining = false;
    a->hb_running = 2; /* reported load counts too */
    b->inflight = 1;
    assert_ptr_equal(wt_pick(&t, P, 0, false, NULL), b);
    wt_free(&t);
}

/* Two models share pool p: a request that names one goes only to its workers, under every policy
 * entry point (wt_pick with and without affinity); a request naming none goes to either. */
static void test_model_scope(void **st) {
    (void)st;
    worker_table t;
    wt_init(&t);
    bk_worker *a = add(&t, "a", "p", 4), *b = add(&t, "b", "p", 4);
    snprintf(a->model, sizeof a->model, "llama");
    snprintf(b->model, sizeof b->model, "qwen");
    wt_scope q = {"p", "qwen"}, l = {"p", "llama"}, none = {"p", "mistral"},
             other = {"fast", "qwen"};
    assert_int_equal(wt_live_in_pool(&t, q), 1);
    assert_int_equal(wt_live_in_pool(&t, P), 2);
    assert_int_equal(wt_live_in_pool(&t, none), 0);
    assert_int_equal(wt_live_in_pool(&t, other), 0);
    for (int i = 0; i < 3; i++) {
        assert_ptr_equal(wt_pick(&t, q, (uint64_t)i * 977, i & 1, NULL), b);
        b->inflight++;
    }
    a->inflight = 3; /* qwen's b (3) and llama's a (3): the llama request still goes to a */
    assert_ptr_equal(wt_pick(&t, l, 0, false, NULL), a);
    b->inflight = 4; /* b full: a qwen request waits even though a has room */
    assert_null(wt_pick(&t, q, 0, false, NULL));
    assert_ptr_equal(wt_pick(&t, P, 0, false, NULL), a);
    assert_false(wt_can_take(a, q));
    assert_true(wt_can_take(a, l));
    assert_null(wt_pick(&t, none, 0, false, NULL));
    wt_free(&t);
}

static void test_affinity_bounded(void **st) {
    (void)st;
    worker_table t;
    wt_init(&t);
    for (int i = 0; i < 4; i++) {
        char id[8];
        snprintf(id, sizeof id, "w%d", i);
        add(&t, id, "p", 64);
    }
    uint64_t h = wt_prefix_hash("same system prompt", 18, 256);
    bk_worker *first = wt_pick(&t, P, h, true, NULL);
    for (int i = 0; i < 5; i++) /* lightly loaded: the prefix keeps its worker */
        assert_ptr_equal(wt_pick(&t, P, h, true, NULL), first);
    first->inflight = 10; /* far over (1 + eps) x average: someone else */
    bk_worker *other = wt_pick(&t, P, h, true, NULL);
    assert_ptr_not_equal(other, first);
    assert_ptr_not_equal(wt_pick(&t, P, h, true, first), first); /* avoid is honoured */
    /* the hash looks only at the first N characters */
    assert_true(wt_prefix_hash("abcdef", 6, 3) == wt_prefix_hash("abcxyz", 6, 3));
    assert_true(wt_prefix_hash("abcdef", 6, 4) != wt_prefix_hash("abcxyz", 6, 4));
    wt_remove(&t, first);
    assert_int_equal(t.n, 3);
    assert_null(wt_find_id(&t, first == t.w[0] ? "" : "nope"));
    wt_free(&t);
}

/* 64 distinct prefixes arriving together with affinity on: every worker ends within +-25% of 16. */
static void test_affinity_balances_distinct_prompts(void **st) {
    (void)st;
    worker_table t;
    wt_init(&t);
    bk_worker *w[4];
    for (int i = 0; i < 4; i++) {
        char id[8];
        snprintf(id, sizeof id, "b%d", i + 1);
        w[i] = add(&t, id, "p", 64);
    }
    for (int i = 0; i < 64; i++) {
        char prompt[64];
        int n = snprintf(prompt, sizeof prompt, "balance request %d of many", i + 1);
        bk_worker *x = wt_pick(&t, P, wt_prefix_hash(prompt, (size_t)n, 256), true, NULL);
        assert_non_null(x);
        x->inflight++;
    }
    for (int i = 0; i < 4; i++) {
        assert_in_range(w[i]->inflight, 12, 20);
    }
    wt_free(&t);
}

static void test_inflight_ids(void **st) {
    (void)st;
    inflight t;
    inflight_init(&t);
    bk_req *a = inflight_add(&t, "req.1"), *b = inflight_add(&t, "req.1");
    assert_non_null(a);
    assert_non_null(b);
    assert_string_not_equal(a->wire_id, b->wire_id); /* reused client ids stay distinct */
    assert_ptr_equal(inflight_find(&t, a->wire_id), a);
    char old[INFLIGHT_WIRE_ID_MAX];
    snprintf(old, sizeof old, "%s", a->wire_id);
    inflight_release(&t, a);
    assert_null(inflight_find(&t, old));
    bk_req *c = inflight_add(&t, "req.1"); /* reuses the slot with a new generation */
    assert_null(inflight_find(&t, old));
    assert_ptr_equal(inflight_find(&t, c->wire_id), c);
    assert_null(inflight_find(&t, "garbage"));
    assert_null(inflight_find(&t, "x.zz.1"));
    uint32_t ids[3] = {1, 2, 3};
    assert_int_equal(inflight_add_tokens(c, ids, 3), 0);
    assert_int_equal(c->n_toks, 3);
    bk_queue q = {0};
    queue_push_back(&q, b);
    queue_push_front(&q, c);
    assert_ptr_equal(queue_pop(&q), c);
    assert_int_equal(queue_remove(&q, b), 1);
    assert_null(queue_pop(&q));
    for (int i = 0; i < 200; i++) /* growth keeps earlier records valid */
        assert_non_null(inflight_add(&t, "many"));
    assert_ptr_equal(inflight_find(&t, c->wire_id), c);
    inflight_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_least_loaded_and_capacity),
        cmocka_unit_test(test_model_scope),
        cmocka_unit_test(test_affinity_bounded),
        cmocka_unit_test(test_affinity_balances_distinct_prompts),
        cmocka_unit_test(test_inflight_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
