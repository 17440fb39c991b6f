/* Promise: the serving engine's outputs do not depend on batching, chunking, preemption or prefix
 * caching; cancellation frees every block; limits and stop strings behave as documented. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "backend.h"
#include "engine.h"
#include "engine_collect.h"
#include "engine_fixture.h"
#include "model.h"
#include "clock.h"
#include "stop_strings.h"
#include "tokenizer.h"

#define NREQ 64

typedef engine_out out;

typedef struct world {
    engine_fixture f;
    /* hooks for the cancellation test */
    engine *e;
    int64_t victim;
    const engine_request *later;
} world;

static world W;

static int setup(void **state) {
    (void)state;
    return engine_fixture_open(&W.f, "--preset tiny --type f32 --seed 1");
}

static int teardown(void **state) {
    (void)state;
    return engine_fixture_close(&W.f);
}

static engine *make_engine(int32_t num_blocks, int32_t max_seqs, int32_t max_tokens, bool cache) {
    engine_config c = engine_config_default();
    c.num_blocks = num_blocks;
    c.max_model_len = 256;
    c.kv_dtype = SOL_DT_F32;
    c.max_num_seqs = max_seqs;
    c.max_batched_tokens = max_tokens;
    c.prefix_caching = cache;
    c.on_event = engine_collect;
    sol_err e = {0};
    engine *eng = engine_new(&c, W.f.m, W.f.tok, &e);
    if (!eng) fail_msg("engine_new: %s", e.msg);
    return eng;
}

/* Deterministic prompts of varied lengths; half greedy, half seeded sampling at temperature 1. */
typedef struct spec {
    int32_t prompt[128];
    int32_t n_prompt, max_tokens;
    sampler_params sp;
} spec;

static void make_specs(spec *s, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        s[i].n_prompt = 3 + (int32_t)((seed * 31 + (uint64_t)i * 17) % 90);
        for (int32_t j = 0; j < 128; j++)
            s[i].prompt[j] =
                3 + (int32_t)((seed + (uint64_t)i * 7919 + (uint64_t)j * 104729) % 500);
        s[i].max_tokens = 8 + (i * 5) % 32;
        s[i].sp = sampler_params_default();
        s[i].sp.temperature = i % 2 ? 1.0f : 0.0f;
        s[i].sp.seed = 1000 + (uint64_t)i;
    }
}

static engine_request req_of(const spec *s, out *o) {
    engine_request r = {0};
    r.prompt_tokens = s->prompt;
    r.n_prompt_tokens = s->n_prompt;
    r.add_bos = 0;
    r.sampling = s->sp;
    r.max_tokens = s->max_tokens;
    r.ignore_eos = true;
    r.user = o;
    return r;
}

static void submit_ok(engine *eng, const engine_request *r) {
    sol_err e = {0};
    int64_t id = engine_submit(eng, r, &e);
    if (id <= 0) fail_msg("engine_submit: %s", e.msg);
}

/* Each request alone, one after the other; returns the steps taken. */
static uint64_t run_alone(const spec *s, int n, out *o) {
    engine *eng = make_engine(64, 8, 64, false);
    for (int i = 0; i < n; i++) {
        engine_request r = req_of(&s[i], &o[i]);
        submit_ok(eng, &r);
        engine_wait_idle(eng);
    }
    engine_stats st;
    engine_get_stats(eng, &st);
    engine_free(eng);
    return st.steps;
}

/* Arrivals at pseudo-random steps: the event callback (engine thread) submits the next requests
 * when a random draw says so, so requests join mid-prefill and mid-decode of others without any
 * dependence on timing. */
static struct {
    engine *e;
    const spec *s;
    out *o;
    int next, n;
    unsigned rng;
} A;

static void arrivals_hook(void *ctx, const engine_event *ev) {
    engine_collect(ctx, ev);
    A.rng = A.rng * 1103515245u + 12345u;
    int k = ev->kind == ENGINE_EV_FINISH ? 1 : (int)((A.rng >> 16) % 7) - 4; /* often none */
    for (; k > 0 && A.next < A.n; k--, A.next++) {
        engine_request r = req_of(&A.s[A.next], &A.o[A.next]);
        sol_err e = {0};
        if (engine_submit(A.e, &r, &e) <= 0) fprintf(stderr, "submit: %s\n", e.msg);
    }
}

static uint64_t run_random_arrivals(const spec *s, int n, out *o) {
    engine_config c = engine_config_default();
    c.num_blocks = 512;
    c.max_model_len = 256;
    c.kv_dtype = SOL_DT_F32;
    c.max_num_seqs = 32;
    c.max_batched_tokens = 48; /* long prompts are chunked and share steps with decodes */
    c.on_event = arrivals_hook;
    sol_err e = {0};
    A.e = engine_new(&c, W.f.m, W.f.tok, &e);
    assert_non_null(A.e);
    A.s = s;
    A.o = o;
    A.n = n;
    A.next = 1;
    A.rng = 7;
    engine_request r = req_of(&s[0], &o[0]);
    submit_ok(A.e, &r);
    engine_wait_idle(A.e);
    engine_stats st;
    engine_get_stats(A.e, &st);
    engine_free(A.e);
    assert_int_equal(A.next, n);
    return st.steps;
}

static void run_batched(engine *eng, const spec *s, int n, out *o, unsigned jitter_us) {
    unsigned rng = 12345;
    for (int i = 0; i < n; i++) {
        engine_request r = req_of(&s[i], &o[i]);
        submit_ok(eng, &r);
        rng = rng * 1103515245u + 12345u;
        if (jitter_us) usleep((rng >> 8) % jitter_us);
    }
    engine_wait_idle(eng);
}

static void same_outputs(const out *a, const out *b, int n) {
    for (int i = 0; i < n; i++) {
        assert_true(a[i].done && b[i].done);
        assert_int_equal(a[i].finish, ENGINE_FINISH_LENGTH);
        if (a[i].n != b[i].n || memcmp(a[i].tokens, b[i].tokens, sizeof(int32_t) * a[i].n))
            fail_msg("request %d: outputs differ (%d vs %d tokens)", i, a[i].n, b[i].n);
    }
}

static void test_batch_invariance(void **state) {
    (void)state;
    static spec s[32];
    static out alone[32], batched[32], chunked[32];
    make_specs(s, 32, 1);
    uint64_t alone_steps = run_alone(s, 32, alone);
    uint64_t batched_steps = run_random_arrivals(s, 32, batched);
    same_outputs(alone, batched, 32);
    assert_true(batched_steps * 2 < alone_steps); /* they really did share steps */
    /* Different prefill split points (7-token chunks) give the same tokens. */
    engine *eng = make_engine(512, 4, 7, false);
    run_batched(eng, s, 32, chunked, 0);
    engine_free(eng);
    same_outputs(alone, chunked, 32);
}

/* Greedy rows with nothing between the logits and the argmax take the model's argmax (ids, not
 * logits: model_batch.argmax_ids); asking for logprobs makes the same requests sample from the
 * downloaded rows. The tokens are the same either way, and only the first run counts greedy
 * steps; a penalized request keeps every step it samples in on logits. */
static void test_greedy_ids(void **state) {
    (void)state;
    enum { N = 8 };
    static spec s[N];
    static out ids[N], rows[N], mixed[N];
    make_specs(s, N, 3);
    for (int i = 0; i < N; i++)
        s[i].sp.temperature = 0.0f;
    engine_stats st;
    engine *eng = make_engine(512, 8, 64, false);
    run_batched(eng, s, N, ids, 0);
    engine_get_stats(eng, &st);
    engine_free(eng);
    assert_true(st.greedy_steps > 0);
    uint64_t on_ids = st.greedy_steps;
    for (int i = 0; i < N; i++)
        s[i].sp.want_logprobs = true;
    eng = make_engine(512, 8, 64, false);
    run_batched(eng, s, N, rows, 0);
    engine_get_stats(eng, &st);
    engine_free(eng);
    assert_int_equal(st.greedy_steps, 0);
    same_outputs(ids, rows, N);
    for (int i = 0; i < N; i++)
        s[i].sp.want_logprobs = false;
    s[N - 1].sp.repetition_penalty = 1.3f; /* a penalty reads the row first: not plain */
    eng = make_engine(512, 8, 64, false);
    run_batched(eng, s, N, mixed, 0);
    engine_get_stats(eng, &st);
    engine_free(eng);
    print_message("  greedy steps: %llu all plain, %llu with logprobs, %llu of %llu with one "
                  "penalty (its %d tokens)\n",
                  (unsigned long long)on_ids, 0ull, (unsigned long long)st.greedy_steps,
                  (unsigned long long)st.steps, mixed[N - 1].n);
    /* every step that sampled a token of the penalized request read its logits: at least that
     * many steps are not greedy, whichever requests shared them (the arrivals race the engine's
     * steps, so how many steps the others ran alone is not fixed) */
    assert_true(mixed[N - 1].n > 0);
    assert_true(st.greedy_steps + (uint64_t)mixed[N - 1].n <= st.steps);
    same_outputs(ids, mixed, N - 1);
}

static void test_preemption_is_exact(void **state) {
    (void)state;
    static spec s[NREQ];
    static out big[NREQ], tiny[NREQ];
    make_specs(s, NREQ, 2);
    engine *eng = make_engine(1024, 64, 512, true);
    run_batched(eng, s, NREQ, big, 0);
    engine_free(eng);
    /* 17 blocks of 16 = 272 tokens: one 256-token sequence fits, 64 requests do not. */
    eng = make_engine(17, 64, 512, true);
    run_batched(eng, s, NREQ, tiny, 0);
    engine_stats st;
    engine_get_stats(eng, &st);
    engine_free(eng);
    assert_true(st.preemptions > 0);
    same_outputs(big, tiny, NREQ);
}

static void test_prefix_cache_hit(void **state) {
    (void)state;
    spec s[1];
    make_specs(s, 1, 3);
    s[0].n_prompt = 40;
    out cold = {0}, warm = {0};
    engine *eng = make_engine(64, 4, 64, true);
    engine_request r = req_of(&s[0], &cold);
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    r.user = &warm;
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    engine_stats st;
    engine_get_stats(eng, &st);
    engine_free(eng);
    assert_int_equal(cold.usage.cached_tokens, 0);
    assert_int_equal(warm.usage.cached_tokens, 32); /* two full blocks of a 40-token prompt */
    assert_true(st.prefix_hit_rate > 0.3 && st.prefix_hit_rate < 0.5); /* 32 of 80 */
    same_outputs(&cold, &warm, 1);
}

/* The second KV tier (worker.kv.tier2_blocks): a prompt whose blocks another prompt evicted from
 * a small pool comes back from the tier - its full blocks copied, not recomputed - with the
 * outputs it had cold; without the tier the same run recomputes them. */
static void tier2_run(int32_t tier2, out *cold, out *again, engine_stats *st) {
    spec s[2];
    make_specs(s, 2, 5);
    s[0].n_prompt = 60, s[1].n_prompt = 110;
    s[0].max_tokens = s[1].max_tokens = 8;
    s[0].sp.temperature = s[1].sp.temperature = 0;
    engine_config c = engine_config_default();
    c.num_blocks = 8; /* 128 tokens: the second prompt needs every block */
    c.max_model_len = 128;
    c.kv_dtype = SOL_DT_F32;
    c.max_num_seqs = 2;
    c.max_batched_tokens = 64;
    c.prefix_caching = true;
    c.tier2_blocks = tier2;
    c.on_event = engine_collect;
    sol_err e = {0};
    engine *eng = engine_new(&c, W.f.m, W.f.tok, &e);
    if (!eng) fail_msg("engine_new: %s", e.msg);
    out other = {0};
    engine_request r = req_of(&s[0], cold);
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    r = req_of(&s[1], &other);
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    r = req_of(&s[0], again);
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    engine_get_stats(eng, st);
    engine_free(eng);
}

static void test_tier2_restores(void **state) {
    (void)state;
    out cold = {0}, again = {0};
    engine_stats st;
    tier2_run(16, &cold, &again, &st);
    assert_int_equal(again.usage.cached_tokens, 48); /* (60 - 1) / 16 full blocks, all restored */
    assert_int_equal(st.tier2_hit_tokens, 48);
    assert_int_equal(st.tier2_blocks, 16);
    assert_true(st.tier2_used > 0);
    same_outputs(&cold, &again, 1);
    out cold0 = {0}, again0 = {0};
    tier2_run(0, &cold0, &again0, &st); /* without it: evicted, recomputed */
    assert_int_equal(again0.usage.cached_tokens, 0);
    assert_int_equal(st.tier2_hit_tokens, 0);
    same_outputs(&again0, &again, 1);
    /* refused where it cannot work, naming the key */
    engine_config c = engine_config_default();
    c.num_blocks = 8, c.max_model_len = 128, c.tier2_blocks = 4, c.prefix_caching = false;
    sol_err e = {0};
    assert_null(engine_new(&c, W.f.m, W.f.tok, &e));
    assert_non_null(strstr(e.msg, "worker.kv.tier2_blocks"));
    c.prefix_caching = true, c.tier2_dir = "/nonexistent/dir";
    assert_null(engine_new(&c, W.f.m, W.f.tok, &e));
    assert_non_null(strstr(e.msg, "worker.kv.tier2_dir"));
}

/* Latency targets: with one sequence at a time, a request with a first-token deadline waiting
 * behind a running one is admitted before an earlier request without one, and one past its whole
 * deadline ends with an error. */
static out *finish_order[3];
static int n_finished;
static engine_request *queued_later[2]; /* submitted once the first request streams */

static void order_hook(void *ctx, const engine_event *ev) {
    engine_collect(ctx, ev);
    out *o = ev->user;
    if (ev->kind == ENGINE_EV_FINISH && n_finished < 3) finish_order[n_finished++] = o;
    if (ev->kind == ENGINE_EV_TOKEN && o->n == 1 && queued_later[0]) {
        for (int i = 0; i < 2; i++) {
            sol_err e = {0};
            assert_true(engine_submit(W.e, queued_later[i], &e) > 0);
        }
        queued_later[0] = NULL;
    }
}

static void test_deadline_order(void **state) {
    (void)state;
    engine_config c = engine_config_default();
    c.num_blocks = 64, c.max_model_len = 256, c.kv_dtype = SOL_DT_F32;
    c.max_num_seqs = 1, c.max_batched_tokens = 64, c.prefix_caching = false;
    c.on_event = order_hook;
    sol_err e = {0};
    engine *eng = W.e = engine_new(&c, W.f.m, W.f.tok, &e);
    assert_non_null(eng);
    spec s[3];
    make_specs(s, 3, 9);
    s[0].max_tokens = 200; /* runs while the other two wait */
    out a = {0}, b = {0}, d = {0};
    engine_request ra = req_of(&s[0], &a), rb = req_of(&s[1], &b), rd = req_of(&s[2], &d);
    rd.first_due_ns = sol_now_ns() + 60000000000ull; /* due in a minute: still first */
    n_finished = 0;
    queued_later[0] = &rb, queued_later[1] = &rd; /* b first, then d: both wait behind a */
    submit_ok(eng, &ra);
    engine_wait_idle(eng);
    assert_int_equal(n_finished, 3);
    assert_ptr_equal(finish_order[0], &a);
    assert_ptr_equal(finish_order[1], &d);
    assert_ptr_equal(finish_order[2], &b);
    out late = {0};
    engine_request rl = req_of(&s[0], &late);
    rl.deadline_ns = sol_now_ns() + 1000000; /* 1 ms for 200 tokens */
    submit_ok(eng, &rl);
    engine_wait_idle(eng);
    assert_int_equal(late.finish, ENGINE_FINISH_ERROR);
    assert_true(late.n < 200);
    engine_free(eng);
}

static void cancel_hook(void *ctx, const engine_event *ev) {
    engine_collect(ctx, ev);
    out *o = ev->user;
    if (ev->kind != ENGINE_EV_TOKEN || o != ctx) return;
    sol_err e = {0};
    if (o->n == 1) W.victim = engine_submit(W.e, W.later, &e); /* starts a 200-token prefill */
    if (o->n == 3) assert_int_equal(engine_cancel(W.e, (uint64_t)W.victim), 0); /* mid-prefill */
    if (o->n == 5) assert_int_equal(engine_cancel(W.e, ev->id), 0);             /* mid-decode */
}

static void test_cancel_frees_blocks(void **state) {
    (void)state;
    engine_config c = engine_config_default();
    c.num_blocks = 64;
    c.max_model_len = 256;
    c.kv_dtype = SOL_DT_F32;
    c.max_num_seqs = 4;
    c.max_batched_tokens = 16;
    c.prefix_caching = false;
    c.on_event = cancel_hook;
    static out a, b;
    c.event_ctx = &a;
    sol_err e = {0};
    W.e = engine_new(&c, W.f.m, W.f.tok, &e);
    assert_non_null(W.e);
    engine_stats before, after;
    engine_get_stats(W.e, &before);
    spec s[2];
    make_specs(s, 2, 4);
    s[0].max_tokens = 40;
    s[1].n_prompt = 120;
    engine_request ra = req_of(&s[0], &a), rb = req_of(&s[1], &b);
    W.later = &rb;
    submit_ok(W.e, &ra);
    engine_wait_idle(W.e);
    engine_get_stats(W.e, &after);
    engine_free(W.e);
    assert_int_equal(a.finish, ENGINE_FINISH_CANCELLED);
    assert_true(a.n >= 5 && a.n < 40);
    assert_int_equal(b.finish, ENGINE_FINISH_CANCELLED);
    assert_int_equal(b.n, 0);
    assert_int_equal(b.usage.completion_tokens, 0);
    assert_int_equal(before.free_blocks, 64);
    assert_int_equal(after.free_blocks, before.free_blocks);
}

static void test_max_model_len_errors(void **state) {
    (void)state;
    engine *eng = make_engine(64, 4, 64, true);
    spec s[1];
    make_specs(s, 1, 5);
    s[0].n_prompt = 100;
    s[0].max_tokens = 200;
    out o = {0};
    engine_request r = req_of(&s[0], &o);
    sol_err e = {0};
    assert_int_equal(engine_submit(eng, &r, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "worker.kv.max_model_len"));
    assert_non_null(strstr(e.msg, "300"));
    assert_non_null(strstr(e.msg, "256"));
    int32_t bad = 100000;
    r.prompt_tokens = &bad;
    r.n_prompt_tokens = 1;
    r.max_tokens = 4;
    assert_int_equal(engine_submit(eng, &r, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "vocabulary"));
    engine_free(eng);
    /* A pool that cannot hold one max_model_len sequence fails at start, naming the keys. */
    engine_config c = engine_config_default();
    c.num_blocks = 8;
    c.max_model_len = 256;
    assert_null(engine_new(&c, W.f.m, W.f.tok, &e));
    assert_non_null(strstr(e.msg, "worker.kv.num_blocks"));
    assert_non_null(strstr(e.msg, "worker.kv.max_model_len"));
}

static void test_stop_strings(void **state) {
    (void)state;
    spec s[1];
    make_specs(s, 1, 6);
    s[0].max_tokens = 60;
    out full = {0}, cut = {0};
    engine *eng = make_engine(64, 4, 64, true);
    engine_request r = req_of(&s[0], &full);
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    assert_true(full.text_len > 20);
    /* A stop string taken from the middle of the text: output ends right before it. */
    char stop[8] = {0};
    size_t at = full.text_len / 2;
    while (at < full.text_len && ((unsigned char)full.text[at] & 0xC0) == 0x80)
        at++;
    memcpy(stop, full.text + at, 3);
    while (((unsigned char)stop[strlen(stop) - 1] & 0x80))
        stop[strlen(stop) - 1] = 0;
    if (!stop[0]) skip();
    const char *stops[] = {"\x01never", stop};
    r.stop = stops;
    r.n_stop = 2;
    r.user = &cut;
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    engine_free(eng);
    full.text[full.text_len] = 0;
    size_t first = (size_t)(strstr(full.text, stop) - full.text);
    assert_int_equal(cut.finish, ENGINE_FINISH_STOP);
    assert_int_equal(cut.text_len, first);
    assert_memory_equal(cut.text, full.text, first);
}

/* A long stop string whose beginning the output ends with: everything held back for it (here
 * over 256 bytes) is released when the request finishes by length, none of it lost. */
static void test_long_held_text_released(void **state) {
    (void)state;
    spec s[1];
    make_specs(s, 1, 7);
    s[0].sp.temperature = 0.0f;
    s[0].max_tokens = 210; /* prompt 40 + 210 fits max_model_len 256 */
    out full = {0}, held = {0};
    engine *eng = make_engine(64, 4, 64, false);
    engine_request r = req_of(&s[0], &full);
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    assert_int_equal(s[0].n_prompt, 40);
    if (full.text_len < 290) fail_msg("expected >= 290 bytes of text, got %zu", full.text_len);
    /* The stop string: the last 280+ bytes of the output (from a character boundary), padded to
     * 1000 bytes so it never completes. */
    size_t at = full.text_len - 280;
    while (at > 0 && ((unsigned char)full.text[at] & 0xC0) == 0x80)
        at--;
    char stop[1001];
    size_t tail = full.text_len - at;
    memcpy(stop, full.text + at, tail);
    memset(stop + tail, '\x02', 1000 - tail);
    stop[1000] = 0;
    const char *stops[] = {stop};
    r.stop = stops;
    r.n_stop = 1;
    r.user = &held;
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    engine_free(eng);
    assert_int_equal(held.finish, ENGINE_FINISH_LENGTH);
    assert_int_equal(held.text_len, full.text_len);
    assert_memory_equal(held.text, full.text, full.text_len);
}

static void test_stop_text_holds_back(void **state) {
    (void)state;
    stop_text st;
    sol_err e = {0};
    const char *stops[] = {"END", "xy"};
    assert_int_equal(stop_text_init(&st, stops, 2, &e), 0);
    const char *o;
    size_t n;
    assert_int_equal(stop_text_feed(&st, "abcE", 4, &o, &n), 0);
    assert_int_equal(n, 3); /* "E" may start "END" */
    assert_memory_equal(o, "abc", 3);
    assert_int_equal(stop_text_feed(&st, "Nx", 2, &o, &n), 0);
    assert_int_equal(n, 2); /* "ENx" is no longer "END", but "x" may start "xy" */
    assert_memory_equal(o, "EN", 2);
    assert_int_equal(stop_text_feed(&st, "z", 1, &o, &n), 0);
    assert_int_equal(n, 2);
    assert_memory_equal(o, "xz", 2);
    assert_int_equal(stop_text_feed(&st, "qqEN", 4, &o, &n), 0);
    assert_int_equal(stop_text_feed(&st, "D!", 2, &o, &n), 1);
    assert_int_equal(n, 0); /* "qq" was released before; "END" is not */
    assert_int_equal(stop_text_feed(&st, "more", 4, &o, &n), 1);
    assert_int_equal(n, 0);
    stop_text_free(&st);
    const char *empty[] = {""};
    assert_int_equal(stop_text_init(&st, empty, 1, &e), -EINVAL);
}

static void test_resume_is_token_exact(void **state) {
    (void)state;
    spec s[2];
    make_specs(s, 2, 7);
    out full = {0}, rest = {0};
    engine *eng = make_engine(64, 4, 64, true);
    engine_request r = req_of(&s[1], &full); /* seeded sampling */
    r.max_tokens = 24;
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    r.resume_tokens = full.tokens;
    r.n_resume_tokens = 10;
    r.user = &rest;
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    engine_free(eng);
    assert_int_equal(full.n, 24);
    assert_int_equal(rest.n, 14);
    assert_memory_equal(rest.tokens, full.tokens + 10, sizeof(int32_t) * 14);
}

/* A stream whose worker died after its last token but before its final chunk is resumed with
 * max_tokens ids: it finishes at once with "length", generates nothing and counts them all;
 * more than max_tokens is refused. */
static void test_resume_of_a_complete_stream(void **state) {
    (void)state;
    spec s[1];
    make_specs(s, 1, 5);
    out full = {0}, again = {0};
    engine *eng = make_engine(64, 4, 64, true);
    engine_request r = req_of(&s[0], &full);
    r.max_tokens = 12;
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    r.resume_tokens = full.tokens;
    r.n_resume_tokens = 12;
    r.user = &again;
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    assert_int_equal(again.done, 1);
    assert_int_equal(again.n, 0);
    assert_int_equal(again.finish, ENGINE_FINISH_LENGTH);
    assert_int_equal(again.usage.completion_tokens, 12);
    r.max_tokens = 11;
    sol_err e = {0};
    assert_true(engine_submit(eng, &r, &e) < 0);
    assert_non_null(strstr(e.msg, "exceed max_tokens"));
    engine_free(eng);
}

static void test_text_and_chat_prompts(void **state) {
    (void)state;
    engine *eng = make_engine(64, 4, 64, true);
    out a = {0}, b = {0};
    engine_request r = {0};
    r.prompt_text = "hello world";
    r.add_bos = -1;
    r.sampling = sampler_params_default();
    r.sampling.temperature = 0;
    r.max_tokens = 5;
    r.ignore_eos = true;
    r.user = &a;
    submit_ok(eng, &r);
    chat_message msgs[] = {{.role = "system", .content = "be brief"},
                           {.role = "user", .content = "hi"}};
    r.prompt_text = NULL;
    r.messages = msgs;
    r.n_messages = 2;
    r.user = &b;
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    engine_free(eng);
    assert_int_equal(a.n, 5);
    assert_int_equal(b.n, 5);
    assert_true(a.usage.prompt_tokens >= 2);
    assert_true(b.usage.prompt_tokens > a.usage.prompt_tokens);
}

/* ---- quoted replies (chat_message.content_ids) ---- */

static engine *chatml_engine(void) {
    engine_config c = engine_config_default();
    c.num_blocks = 64;
    c.max_model_len = 256;
    c.kv_dtype = SOL_DT_F32;
    c.prefix_caching = true;
    c.chat_template = "chatml"; /* its markers are plain text to this vocabulary: SPM pieces */
    c.on_event = engine_collect;
    sol_err e = {0};
    engine *eng = engine_new(&c, W.f.m, W.f.tok, &e);
    if (!eng) fail_msg("engine_new: %s", e.msg);
    return eng;
}

static engine_request chat_req(const chat_message *m, size_t n, out *o) {
    engine_request r = {0};
    r.messages = m;
    r.n_messages = n;
    r.add_bos = -1;
    r.sampling = sampler_params_default();
    r.sampling.temperature = 0;
    r.max_tokens = 20;
    r.ignore_eos = true;
    r.user = o;
    return r;
}

/* ids of text[0..len) tokenized as the engine must tokenize the pieces around a quote */
static int piece(const char *text, size_t len, bool first, int32_t *out, int cap) {
    int n = 0;
    if (first && tokenizer_add_bos(W.f.tok)) out[n++] = tokenizer_bos(W.f.tok);
    int got = tokenizer_encode_piece(W.f.tok, text, len, 1, !first, out + n, cap - n);
    assert_true(got >= 0 && got <= cap - n);
    return n + got;
}

/* Runs m (whose m[2] quotes a reply: content_ids set or not) and, as token ids, what the engine
 * must make of it: the chat up to the reply, the quoted ids, the rest as continuing text. Returns
 * the reference's prompt length and the length of the part before the reply. */
static int quote_run(engine *eng, const chat_message *m, out *got, out *ref, int32_t *before) {
    engine_request r = chat_req(m, 4, got);
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    char *t1 = NULL, *t2 = NULL;
    sol_err e = {0};
    assert_int_equal(chat_template_apply(CHAT_TEMPLATE_CHATML, m, 2, true, &t1, NULL, &e), 0);
    assert_int_equal(chat_template_apply(CHAT_TEMPLATE_CHATML, m, 4, true, &t2, NULL, &e), 0);
    size_t at = strlen(t1), len = strlen(m[2].content);
    assert_memory_equal(t2 + at, m[2].content, len);
    int32_t ids[256];
    int n = *before = piece(t1, at, true, ids, 256);
    memcpy(ids + n, m[2].content_ids, sizeof(int32_t) * m[2].n_content_ids);
    n += (int)m[2].n_content_ids;
    n += piece(t2 + at + len, strlen(t2) - at - len, false, ids + n, 256 - n);
    free(t1), free(t2);
    r.messages = NULL, r.n_messages = 0;
    r.prompt_tokens = ids, r.n_prompt_tokens = n, r.add_bos = 0;
    r.user = ref;
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    return n;
}

/* A reply sent back with the ids it was generated as is prompted as the turn that generated it
 * plus those ids, so that generation's KV blocks serve the next turn through the reply. */
static void test_quoted_reply(void **state) {
    (void)state;
    chat_message m[4] = {{.role = "system", .content = "be brief and kind to the reader"},
                         {.role = "user", .content = "tell me a long story about the sea"},
                         {.role = "assistant"},
                         {.role = "user", .content = "and then?"}};
    engine *eng = chatml_engine();
    out first = {0}, quoted = {0}, ref = {0};
    engine_request r = chat_req(m, 2, &first);
    /* no byte tokens in the reply: alone they are not UTF-8, and the stream shows U+FFFD, which
     * the ids do not spell (a trained model rarely writes them) */
    int32_t bytes[256];
    float minus[256];
    int32_t nb = 0;
    for (int32_t id = 0; id < tokenizer_n_vocab(W.f.tok) && nb < 256; id++)
        if (tokenizer_token_type(W.f.tok, id) == TOK_TYPE_BYTE) bytes[nb] = id, minus[nb++] = -100;
    r.bias_tokens = bytes, r.bias_values = minus, r.n_bias = nb;
    submit_ok(eng, &r);
    engine_wait_idle(eng);
    assert_int_equal(first.n, 20);
    first.text[first.text_len] = 0;
    m[2].content = first.text;
    m[2].content_ids = first.tokens, m[2].n_content_ids = 20;
    int32_t n1 = 0;
    int n = quote_run(eng, m, &quoted, &ref, &n1);
    engine_free(eng);
    assert_int_equal(n1, first.usage.prompt_tokens);
    assert_int_equal(quoted.usage.prompt_tokens, n);
    same_outputs(&ref, &quoted, 1);
    /* turn one's prompt and 19 of its ids were computed (the last one never was): every full
     * block of those is served from the cache */
    assert_int_equal(quoted.usage.cached_tokens, (n1 + 19) / 16 * 16);
}

/* Ids that are not the text's own tokenization are used as they are when they spell the content
 * exactly, and not at all when they do not. */
static void test_quoted_ids_checked(void **state) {
    (void)state;
    /* a piece the vocabulary also has in two parts: the two ids spell it, the tokenizer would not
     * choose them */
    const tokenizer *t = W.f.tok;
    int32_t split[2] = {-1, -1};
    for (int32_t id = 0; id < tokenizer_n_vocab(t) && split[0] < 0; id++) {
        size_t len = 0;
        const char *s = tokenizer_token_text(t, id, &len);
        for (size_t k = 1; tokenizer_token_type(t, id) == TOK_TYPE_NORMAL && k < len; k++) {
            int32_t a = tokenizer_find(t, s, k), b = tokenizer_find(t, s + k, len - k);
            if (a >= 0 && b >= 0 && tokenizer_token_type(t, a) == TOK_TYPE_NORMAL &&
                tokenizer_token_type(t, b) == TOK_TYPE_NORMAL) {
                split[0] = a, split[1] = b;
                break;
            }
        }
    }
    assert_true(split[0] >= 0);
    char text[64];
    int tl = tokenizer_decode(t, split, 2, 0, text, sizeof text);
    assert_true(tl > 0 && tl < (int)sizeof text);
    chat_message m[4] = {{.role = "system", .content = "be brief"},
                         {.role = "user", .content = "say one word"},
                         {.role = "assistant", .content = text},
                         {.role = "user", .content = "and then?"}};
    engine *eng = chatml_engine();
    out quoted = {0}, ref = {0}, plain = {0}, wrong = {0};
    m[2].content_ids = split, m[2].n_content_ids = 2;
    int32_t n1 = 0;
    int n = quote_run(eng, m, &quoted, &ref, &n1);
    int32_t bad[2] = {split[0], split[0]}; /* the same count, another text */
    const int32_t *ids[2] = {NULL, bad};
    out *o[2] = {&plain, &wrong};
    for (int i = 0; i < 2; i++) {
        m[2].content_ids = ids[i], m[2].n_content_ids = ids[i] ? 2 : 0;
        engine_request r = chat_req(m, 4, o[i]);
        submit_ok(eng, &r);
        engine_wait_idle(eng);
    }
    engine_stats st;
    engine_get_stats(eng, &st);
    engine_free(eng);
    assert_int_equal(st.quotes_used, 1);     /* the quoted run */
    assert_int_equal(st.quotes_declined, 1); /* the wrong ids */
    assert_int_equal(quoted.usage.prompt_tokens, n);
    same_outputs(&ref, &quoted, 1);
    assert_int_not_equal(plain.usage.prompt_tokens, n); /* the tokenizer joins the two */
    assert_int_equal(wrong.usage.prompt_tokens, plain.usage.prompt_tokens);
    same_outputs(&plain, &wrong, 1);
}

/* ---- embeddings ---- */

typedef struct emb_out {
    float v[512];
    int32_t dim;
    int done;
} emb_out;

static void emb_collect(void *ctx, const engine_event *ev) {
    (void)ctx;
    emb_out *o = ev->user;
    if (ev->kind != ENGINE_EV_FINISH) return;
    if (ev->embedding && ev->embedding_dim <= 512) {
        memcpy(o->v, ev->embedding, sizeof(float) * (size_t)ev->embedding_dim);
        o->dim = ev->embedding_dim;
    }
    o->done = 1;
}

/* The pooled vector from one model_forward over the whole prompt: every row's final hidden state,
 * then the mean, the first or the last, L2-normalized. */
static void emb_reference(const spec *s, engine_pooling p, float *out) {
    int32_t dim = model_get_hparams(W.f.m)->dim, n = s->n_prompt;
    sol_err e = {0};
    model_kv *kv = model_kv_new(W.f.m, 32, 16, SOL_DT_F32, &e);
    assert_non_null(kv);
    int32_t table[32], pos[128], rows[128], last = n - 1;
    sol_attn_seq attn[128];
    for (int i = 0; i < 32; i++)
        table[i] = i;
    for (int32_t t = 0; t < n; t++)
        pos[t] = rows[t] = t, attn[t] = (sol_attn_seq){table, t + 1};
    float *h = malloc(sizeof(float) * (size_t)dim * (size_t)n);
    float *logits = malloc(sizeof(float) * (size_t)model_get_hparams(W.f.m)->n_vocab);
    model_batch b = {n, s->prompt, pos, pos, attn, 1, &last, h, n, rows, NULL};
    assert_int_equal(model_forward(W.f.m, kv, &b, logits, &e), 0);
    double ss = 0;
    for (int32_t d = 0; d < dim; d++) {
        double v = 0;
        for (int32_t t = 0; t < n; t++)
            v += h[(size_t)t * dim + d];
        v = p == ENGINE_POOL_MEAN ? v / n : h[(size_t)(p == ENGINE_POOL_CLS ? 0 : n - 1) * dim + d];
        out[d] = (float)v;
        ss += v * v;
    }
    for (int32_t d = 0; d < dim; d++)
        out[d] = (float)(out[d] / sqrt(ss));
    free(h), free(logits);
    model_kv_free(W.f.m, kv);
}

/* Embeddings pool as configured - mean over every prompt row, the first row (cls) or the last -
 * and equal one forward pass over the whole prompt, though the engine splits the prompts into
 * 16-token chunks, batches them with generating requests, and has a prefix of each cached (which
 * mean and cls must not use: they recompute every row). */
static void test_embedding_pooling(void **state) {
    (void)state;
    spec s[4];
    make_specs(s, 4, 9);
    int32_t dim = model_get_hparams(W.f.m)->dim;
    engine_pooling kinds[] = {ENGINE_POOL_LAST, ENGINE_POOL_MEAN, ENGINE_POOL_CLS};
    for (int k = 0; k < 3; k++) {
        engine_config c = engine_config_default();
        c.num_blocks = 64;
        c.max_model_len = 256;
        c.kv_dtype = SOL_DT_F32;
        c.max_num_seqs = 8;
        c.max_batched_tokens = 16;
        c.prefix_caching = true;
        c.pooling = kinds[k];
        c.on_event = emb_collect;
        sol_err e = {0};
        engine *eng = engine_new(&c, W.f.m, W.f.tok, &e);
        assert_non_null(eng);
        static emb_out warm[4], o[4], gen;
        for (int round = 0; round < 2; round++) { /* the second finds the prompts cached */
            emb_out *dst = round ? o : warm;
            engine_request g = req_of(&s[3], NULL); /* a generating request in the same steps */
            g.user = &gen;
            submit_ok(eng, &g);
            for (int i = 0; i < 4; i++) {
                memset(&dst[i], 0, sizeof dst[i]);
                engine_request r = req_of(&s[i], NULL);
                r.user = &dst[i];
                r.embed = true;
                r.max_tokens = 1;
                submit_ok(eng, &r);
            }
            engine_wait_idle(eng);
        }
        engine_free(eng);
        for (int i = 0; i < 4; i++) {
            float ref[512];
            emb_reference(&s[i], kinds[k], ref);
            assert_true(o[i].done);
            assert_int_equal(o[i].dim, dim);
            for (int32_t d = 0; d < dim; d++)
                if (fabsf(o[i].v[d] - ref[d]) > 1e-4f || fabsf(warm[i].v[d] - ref[d]) > 1e-4f)
                    fail_msg("pooling %d, prompt %d (%d tokens), dim %d: %g, %g vs %g", kinds[k], i,
                             s[i].n_prompt, d, o[i].v[d], warm[i].v[d], ref[d]);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_text_holds_back),
        cmocka_unit_test(test_max_model_len_errors),
        cmocka_unit_test(test_prefix_cache_hit),
        cmocka_unit_test(test_tier2_restores),
        cmocka_unit_test(test_deadline_order),
        cmocka_unit_test(test_cancel_frees_blocks),
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_long_held_text_released),
        cmocka_unit_test(test_resume_is_token_exact),
        cmocka_unit_test(test_resume_of_a_complete_stream),
        cmocka_unit_test(test_text_and_chat_prompts),
        cmocka_unit_test(test_quoted_reply),
        cmocka_unit_test(test_quoted_ids_checked),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_greedy_ids),
        cmocka_unit_test(test_preemption_is_exact),
        cmocka_unit_test(test_embedding_pooling),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
