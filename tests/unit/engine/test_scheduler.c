/* Promise: the scheduler keeps the token budget and sequence cap, serves decodes before prefills,
 * admits by priority then earliest first-token deadline, keeps a step cap, chunks prefills,
 * preempts the lowest-priority most recent sequence, and prefills a prompt that several sequences
 * share once. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kv_cache.h"
#include "scheduler.h"

#define BS 4
#define CAP 64

typedef struct tseq {
    sched_seq seq;
    int32_t toks[CAP];
} tseq;

static void init_seq(tseq *t, uint64_t id, int32_t n_prompt, int32_t priority) {
    memset(t, 0, sizeof *t);
    for (int32_t i = 0; i < n_prompt; i++)
        t->toks[i] = (int32_t)(id * 100 + i);
    t->seq.id = id;
    t->seq.priority = priority;
    t->seq.tokens = t->toks;
    t->seq.n_tokens = n_prompt;
    t->seq.cap_tokens = CAP;
}

static void check_kv(const kv_cache *kv) {
    sol_err e = {0};
    if (kv_cache_check(kv, &e)) fail_msg("kv_cache_check: %s", e.msg);
}

/* Every batch row must be consistent: position order, slot = table[pos/BS]*BS + pos%BS. */
static void check_batch(const sched_batch *b, int32_t budget) {
    assert_true(b->n_tokens <= budget);
    for (int32_t t = 0; t < b->n_tokens; t++) {
        int32_t p = b->pos[t];
        assert_int_equal(b->attn[t].n_ctx, p + 1);
        assert_int_equal(b->slots[t], b->attn[t].block_table[p / BS] * BS + p % BS);
    }
    int32_t total = 0;
    for (int32_t i = 0; i < b->n_seqs; i++)
        total += b->seqs[i]->step_n;
    assert_int_equal(total, b->n_tokens);
}

/* Runs one step, checks it, commits it; sampling sequences get token 7 pushed. */
static void run_step(sched *s, kv_cache *kv, sched_batch *b, int32_t budget) {
    sol_err e = {0};
    assert_int_equal(sched_step(s, b, &e), 0);
    check_batch(b, budget);
    assert_int_equal(sched_commit(s, b, &e), 0);
    for (int32_t i = 0; i < b->n_logits; i++)
        assert_int_equal(sched_seq_push(b->logit_seqs[i], 7), 0);
    check_kv(kv);
}

static int32_t step_n_of(const sched_batch *b, const sched_seq *seq) {
    for (int32_t i = 0; i < b->n_seqs; i++)
        if (b->seqs[i] == seq) return b->seqs[i]->step_n;
    return 0;
}

static void test_budget_chunking_and_decode_first(void **state) {
    (void)state;
    sol_err e = {0};
    kv_cache *kv = kv_cache_new(64, BS, true, &e);
    sched_config cfg = {.max_num_seqs = 8, .max_batched_tokens = 16};
    sched *s = sched_new(&cfg, kv, &e);
    assert_non_null(s);
    tseq a, b, c;
    init_seq(&a, 1, 10, 0);
    init_seq(&b, 2, 10, 0);
    init_seq(&c, 3, 10, 0);
    assert_int_equal(sched_add(s, &a.seq, &e), 0);
    assert_int_equal(sched_add(s, &b.seq, &e), 0);
    assert_int_equal(sched_add(s, &c.seq, &e), 0);
    sched_batch bt;
    /* Step 1: a whole (10), b chunked (6), c waits: the budget is 16. Only a samples. */
    assert_int_equal(sched_step(s, &bt, &e), 0);
    check_batch(&bt, 16);
    assert_int_equal(bt.n_tokens, 16);
    assert_int_equal(step_n_of(&bt, &a.seq), 10);
    assert_int_equal(step_n_of(&bt, &b.seq), 6);
    assert_int_equal(bt.n_logits, 1);
    assert_ptr_equal(bt.logit_seqs[0], &a.seq);
    assert_int_equal(bt.logit_rows[0], 9);
    assert_int_equal(bt.pos[10], 0); /* b starts at position 0 */
    assert_int_equal(sched_commit(s, &bt, &e), 0);
    assert_int_equal(sched_seq_push(&a.seq, 7), 0);
    /* Step 2: a's decode comes first, then b's last 4, then c's 10 (budget 16 - 1 - 4 = 11). */
    assert_int_equal(sched_step(s, &bt, &e), 0);
    check_batch(&bt, 16);
    assert_ptr_equal(bt.seqs[0], &a.seq);
    assert_int_equal(bt.tokens[0], 7);
    assert_int_equal(bt.pos[0], 10);
    assert_int_equal(step_n_of(&bt, &b.seq), 4);
    assert_int_equal(step_n_of(&bt, &c.seq), 10);
    assert_int_equal(bt.n_decode, 1);
    assert_int_equal(bt.n_logits, 3);
    assert_int_equal(sched_commit(s, &bt, &e), 0);
    check_kv(kv);
    sched_counts cn;
    sched_get_counts(s, &cn);
    assert_int_equal(cn.running, 3);
    assert_int_equal(cn.waiting, 0);
    sched_free(s);
    kv_cache_free(kv);
}

static void test_max_num_seqs_and_priority(void **state) {
    (void)state;
    sol_err e = {0};
    kv_cache *kv = kv_cache_new(64, BS, true, &e);
    sched_config cfg = {.max_num_seqs = 2, .max_batched_tokens = 64};
    sched *s = sched_new(&cfg, kv, &e);
    tseq a, b, c;
    init_seq(&a, 1, 5, 3);
    init_seq(&b, 2, 5, 0);
    init_seq(&c, 3, 5, 1);
    sched_add(s, &a.seq, &e);
    sched_add(s, &b.seq, &e);
    sched_add(s, &c.seq, &e);
    sched_batch bt;
    run_step(s, kv, &bt, 64);
    /* Cap 2: the two most important (b: 0, c: 1) run; a (3) waits despite arriving first. */
    assert_int_equal(bt.n_seqs, 2);
    assert_ptr_equal(bt.seqs[0], &b.seq);
    assert_ptr_equal(bt.seqs[1], &c.seq);
    assert_int_equal(a.seq.state, SCHED_WAITING);
    /* Finishing b lets a in. */
    sched_remove(s, &b.seq);
    assert_int_equal(b.seq.state, SCHED_DONE);
    run_step(s, kv, &bt, 64);
    assert_int_equal(a.seq.state, SCHED_RUNNING);
    assert_int_equal(step_n_of(&bt, &a.seq), 5);
    assert_int_equal(step_n_of(&bt, &c.seq), 1);
    sched_free(s);
    kv_cache_stats st;
    kv_cache_get_stats(kv, &st);
    assert_int_equal(st.used_blocks, 0);
    kv_cache_free(kv);
}

/* Earliest deadline first among waiting sequences of one priority (none: after every deadline),
 * priority still first; sched_set_step_cap bounds a step's tokens below max_batched_tokens. */
static void test_deadlines_and_step_cap(void **state) {
    (void)state;
    sol_err e = {0};
    kv_cache *kv = kv_cache_new(64, BS, true, &e);
    sched_config cfg = {.max_num_seqs = 1, .max_batched_tokens = 64};
    sched *s = sched_new(&cfg, kv, &e);
    tseq none, late, soon, urgent_low;
    init_seq(&none, 1, 5, 0);
    init_seq(&late, 2, 5, 0);
    init_seq(&soon, 3, 5, 0);
    init_seq(&urgent_low, 4, 5, 1);
    late.seq.due_ns = 2000;
    soon.seq.due_ns = 1000;
    urgent_low.seq.due_ns = 10; /* earliest, but less important */
    sched_seq *order[] = {&soon.seq, &late.seq, &none.seq, &urgent_low.seq};
    sched_add(s, &none.seq, &e);
    sched_add(s, &late.seq, &e);
    sched_add(s, &urgent_low.seq, &e);
    sched_add(s, &soon.seq, &e);
    sched_batch bt;
    for (int i = 0; i < 4; i++) {
        run_step(s, kv, &bt, 64);
        assert_int_equal(bt.n_seqs, 1);
        assert_ptr_equal(bt.seqs[0], order[i]);
        sched_remove(s, order[i]);
    }
    tseq big;
    init_seq(&big, 5, 40, 0);
    sched_add(s, &big.seq, &e);
    sched_set_step_cap(s, 12);
    run_step(s, kv, &bt, 12);
    assert_int_equal(step_n_of(&bt, &big.seq), 12);
    sched_set_step_cap(s, 0);
    run_step(s, kv, &bt, 64);
    assert_int_equal(step_n_of(&bt, &big.seq), 28);
    sched_free(s);
    kv_cache_free(kv);
}

static void test_preempts_lowest_priority_then_recomputes(void **state) {
    (void)state;
    sol_err e = {0};
    /* 6 blocks of 4: three sequences of 4 prompt tokens outgrow it at position 8. */
    kv_cache *kv = kv_cache_new(6, BS, false, &e);
    sched_config cfg = {.max_num_seqs = 8, .max_batched_tokens = 32};
    sched *s = sched_new(&cfg, kv, &e);
    tseq x, y, z;
    init_seq(&x, 1, 4, 1);
    init_seq(&y, 2, 4, 0);
    init_seq(&z, 3, 4, 2);
    sched_batch bt;
    sched_add(s, &x.seq, &e);
    run_step(s, kv, &bt, 32); /* x admitted alone first: oldest admission */
    sched_add(s, &y.seq, &e);
    sched_add(s, &z.seq, &e);
    run_step(s, kv, &bt, 32);
    int32_t n_run;
    sched_seq *const *run = sched_running(s, &n_run);
    assert_int_equal(n_run, 3);
    assert_ptr_equal(run[0], &y.seq); /* priority 0 first though admitted later */
    assert_ptr_equal(run[2], &z.seq);
    /* Grow until the pool runs dry: z (priority 2) goes first. */
    int guard = 0;
    while (z.seq.state == SCHED_RUNNING && guard++ < 20)
        run_step(s, kv, &bt, 32);
    assert_int_equal(z.seq.state, SCHED_PREEMPTED);
    assert_int_equal(z.seq.kv, NULL);
    assert_int_equal(z.seq.n_computed, 0);
    assert_int_equal(z.seq.n_preempted, 1);
    assert_true(z.seq.n_tokens > 4); /* keeps prompt + generated for the recompute */
    /* Next victim is x (priority 1), even though y was admitted after it. */
    guard = 0;
    while (x.seq.state == SCHED_RUNNING && guard++ < 20)
        run_step(s, kv, &bt, 32);
    assert_int_equal(x.seq.state, SCHED_PREEMPTED);
    assert_int_equal(y.seq.state, SCHED_RUNNING);
    sched_counts cn;
    sched_get_counts(s, &cn);
    assert_int_equal(cn.preempted, 2);
    assert_int_equal(cn.total_preemptions, 2);
    /* Once y finishes, x comes back first (priority 1 < 2) and recomputes all its tokens. */
    int32_t x_tokens = x.seq.n_tokens;
    sched_remove(s, &y.seq);
    run_step(s, kv, &bt, 32);
    assert_int_equal(x.seq.state, SCHED_RUNNING);
    assert_int_equal(x.seq.n_computed, x_tokens);
    assert_int_equal(bt.seqs[0]->step_n, x_tokens);
    sched_free(s);
    kv_cache_free(kv);
}

static void test_prefix_hit_on_admission(void **state) {
    (void)state;
    sol_err e = {0};
    kv_cache *kv = kv_cache_new(32, BS, true, &e);
    sched_config cfg = {.max_num_seqs = 4, .max_batched_tokens = 32};
    sched *s = sched_new(&cfg, kv, &e);
    tseq a, b;
    init_seq(&a, 1, 10, 0);
    init_seq(&b, 1, 10, 0); /* same id => same prompt tokens */
    sched_batch bt;
    sched_add(s, &a.seq, &e);
    run_step(s, kv, &bt, 32);
    sched_add(s, &b.seq, &e);
    run_step(s, kv, &bt, 32);
    /* Two full blocks (8 tokens) come from the cache; only 2 are computed. */
    assert_int_equal(b.seq.n_cached, 8);
    assert_int_equal(step_n_of(&bt, &b.seq), 2);
    assert_int_equal(bt.pos[bt.n_tokens - 2], 8);
    sched_free(s);
    kv_cache_free(kv);
}

/* n samples of one prompt arrive together: the second waits while the first prefills (in chunks)
 * and is then admitted with the prompt's full blocks from the prefix cache; a different prompt
 * and a different cache salt are not held back; without prefix caching nothing waits. */
static void test_identical_prompts_share_one_prefill(void **state) {
    (void)state;
    for (int caching = 0; caching < 2; caching++) {
        sol_err e = {0};
        kv_cache *kv = kv_cache_new(32, BS, caching, &e);
        sched_config cfg = {.max_num_seqs = 4, .max_batched_tokens = 16};
        sched *s = sched_new(&cfg, kv, &e);
        tseq a, b;
        init_seq(&a, 1, 10, 0);
        init_seq(&b, 1, 10, 0); /* the same prompt */
        sched_batch bt;
        sched_add(s, &a.seq, &e);
        sched_add(s, &b.seq, &e);
        run_step(s, kv, &bt, 16); /* a prefills all 10; b waits (with caching) or takes 6 */
        assert_int_equal(step_n_of(&bt, &a.seq), 10);
        assert_int_equal(step_n_of(&bt, &b.seq), caching ? 0 : 6);
        assert_int_equal(b.seq.state, caching ? SCHED_WAITING : SCHED_RUNNING);
        if (caching) {
            run_step(s, kv, &bt, 16); /* a decodes; b comes in on a's written blocks */
            assert_int_equal(b.seq.state, SCHED_RUNNING);
            assert_int_equal(b.seq.n_cached, 8); /* two full blocks shared, 2 tokens computed */
            assert_int_equal(step_n_of(&bt, &b.seq), 2);
        }
        sched_free(s);
        kv_cache_free(kv);
    }
    /* another prompt, or the same under another salt, is admitted at once */
    for (int salted = 0; salted < 2; salted++) {
        sol_err e = {0};
        kv_cache *kv = kv_cache_new(32, BS, true, &e);
        sched_config cfg = {.max_num_seqs = 4, .max_batched_tokens = 16};
        sched *s = sched_new(&cfg, kv, &e);
        tseq a, b;
        init_seq(&a, 1, 10, 0);
        init_seq(&b, salted ? 1 : 2, 10, 0);
        b.seq.cache_salt = salted ? "tenant-b" : NULL;
        sched_batch bt;
        sched_add(s, &a.seq, &e);
        sched_add(s, &b.seq, &e);
        run_step(s, kv, &bt, 16);
        assert_int_equal(b.seq.state, SCHED_RUNNING);
        sched_free(s);
        kv_cache_free(kv);
    }
}

static void test_stalled_prefills_make_progress(void **state) {
    (void)state;
    sol_err e = {0};
    /* 8 blocks = 32 tokens; two 24-token prompts cannot both finish: one must yield. */
    kv_cache *kv = kv_cache_new(8, BS, false, &e);
    sched_config cfg = {.max_num_seqs = 4, .max_batched_tokens = 4};
    sched *s = sched_new(&cfg, kv, &e);
    tseq a, b;
    init_seq(&a, 1, 24, 0);
    init_seq(&b, 2, 24, 0);
    sched_add(s, &a.seq, &e);
    sched_add(s, &b.seq, &e);
    sched_batch bt;
    int sampled_a = 0, sampled_b = 0;
    for (int i = 0; i < 40 && !(sampled_a && sampled_b); i++) {
        run_step(s, kv, &bt, 4);
        assert_true(bt.n_tokens > 0);
        for (int32_t j = 0; j < bt.n_logits; j++) {
            if (bt.logit_seqs[j] == &a.seq && !sampled_a) sched_remove(s, &a.seq), sampled_a = 1;
            if (bt.logit_seqs[j] == &b.seq && !sampled_b) sched_remove(s, &b.seq), sampled_b = 1;
        }
    }
    assert_true(sampled_a && sampled_b);
    sched_free(s);
    kv_cache_free(kv);
}

static void test_bad_config_and_seq(void **state) {
    (void)state;
    sol_err e = {0};
    kv_cache *kv = kv_cache_new(8, BS, false, &e);
    sched_config bad = {.max_num_seqs = 8, .max_batched_tokens = 4};
    assert_null(sched_new(&bad, kv, &e));
    assert_int_equal(e.code, -EINVAL);
    assert_non_null(strstr(e.msg, "max_batched_tokens"));
    sched_config cfg = {.max_num_seqs = 2, .max_batched_tokens = 4};
    sched *s = sched_new(&cfg, kv, &e);
    tseq a;
    init_seq(&a, 1, 0, 0);
    assert_int_equal(sched_add(s, &a.seq, &e), -EINVAL);
    sched_remove(s, &a.seq); /* never added: a no-op */
    sched_free(s);
    sched_free(NULL);
    kv_cache_free(kv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_budget_chunking_and_decode_first),
        cmocka_unit_test(test_max_num_seqs_and_priority),
        cmocka_unit_test(test_deadlines_and_step_cap),
        cmocka_unit_test(test_preempts_lowest_priority_then_recomputes),
        cmocka_unit_test(test_prefix_hit_on_admission),
        cmocka_unit_test(test_identical_prompts_share_one_prefill),
        cmocka_unit_test(test_stalled_prefills_make_progress),
        cmocka_unit_test(test_bad_config_and_seq),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
