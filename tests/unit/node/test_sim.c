/* Promise: the sim backend streams a pure function of (prompt, seed, position): same input, same
 * text; a resumed request continues exactly; stop strings, max_tokens, cancel and many concurrent
 * requests behave. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include <cmocka.h>

#include "executor.h"
#include "frame.h"
#include "clock.h"
#include "sim.h"

/* The sim thread settles its counters just after it sends a final chunk: poll briefly. */
static bool wait_idle(executor *x) {
    for (int i = 0; i < 200 && !exec_idle(x); i++)
        sol_sleep_ms(10);
    return exec_idle(x);
}

typedef struct result {
    char text[8192];
    uint32_t ids[1024];
    size_t n_ids;
    uint32_t chunks, last_seq;
    Sol__FinishReason finish;
    uint32_t prompt_tokens, completion_tokens;
} result;

typedef struct fixture {
    void *zctx;
    exec_events *ev;
    executor *x;
} fixture;

static void fx_open(fixture *f, double rate, uint32_t capacity) {
    sol_err e = {0};
    f->zctx = zmq_ctx_new();
    assert_int_equal(exec_events_new(f->zctx, &f->ev, &e), 0);
    sim_config c = {.model = "t",
                    .ttft_ms = 0,
                    .tokens_per_s = rate,
                    .capacity = capacity,
                    .max_context = 4096,
                    .block_size = 16};
    assert_int_equal(sim_new(f->zctx, &c, f->ev, &f->x, &e), 0);
}

static void fx_close(fixture *f) {
    exec_free(f->x);
    exec_events_free(f->ev);
    zmq_ctx_term(f->zctx);
}

/* Read events until `n_final` requests have finished; results indexed by the id "r<k>". */
static void collect(fixture *f, result *res, size_t n_final) {
    size_t finals = 0;
    while (finals < n_final) {
        zmq_pollitem_t it = {exec_events_socket(f->ev), 0, ZMQ_POLLIN, 0};
        assert_true(zmq_poll(&it, 1, 10000) > 0); /* a hang fails instead of blocking ctest */
        exec_event ev;
        sol_err e = {0};
        while (exec_events_pop(f->ev, &ev, &e) == 0) {
            Sol__Envelope *env = NULL;
            assert_int_equal(frame_decode(ev.frame, ev.frame_len, &env, &e), 0);
            assert_int_equal(env->body_case, SOL__ENVELOPE__BODY_TOKEN_CHUNK);
            const Sol__TokenChunk *c = env->token_chunk;
            assert_string_equal(c->request_id, ev.request_id);
            result *r = &res[atoi(c->request_id + 1)];
            assert_int_equal(c->seq, r->chunks); /* seq counts from 0 without gaps */
            r->chunks++;
            assert_true(strlen(r->text) + strlen(c->text) < sizeof r->text);
            strcat(r->text, c->text);
            for (size_t i = 0; i < c->n_token_ids; i++)
                r->ids[r->n_ids++] = c->token_ids[i];
            assert_int_equal(ev.final, c->finish_reason != SOL__FINISH_REASON__FINISH_NONE);
            if (ev.final) {
                r->finish = c->finish_reason;
                assert_non_null(c->usage);
                r->prompt_tokens = c->usage->prompt_tokens;
                r->completion_tokens = c->usage->completion_tokens;
                finals++;
            }
            frame_free_envelope(env);
            exec_event_release(&ev);
        }
    }
}

static void gen_init(Sol__Generate *g, Sol__SamplingParams *s, const char *id, const char *prompt,
                     uint64_t seed, uint32_t max_tokens) {
    sol__generate__init(g);
    sol__sampling_params__init(s);
    s->seed = seed;
    s->has_seed = true;
    g->sampling = s;
    g->request_id = (char *)id;
    g->prompt = (char *)prompt;
    g->max_tokens = max_tokens;
}

static void run_one(const Sol__Generate *g, result *r) {
    fixture f;
    fx_open(&f, 1e5, 4);
    sol_err e = {0};
    memset(r, 0, sizeof *r);
    assert_int_equal(exec_submit(f.x, g, &e), 0);
    collect(&f, r - atoi(g->request_id + 1), 1);
    assert_true(wait_idle(f.x));
    fx_close(&f);
}

static void test_deterministic(void **state) {
    (void)state;
    Sol__Generate g;
    Sol__SamplingParams s;
    static result a, b, c;
    gen_init(&g, &s, "r0", "tell me  a\tstory", 7, 12);
    run_one(&g, &a);
    run_one(&g, &b);
    assert_string_equal(a.text, b.text);
    assert_int_equal(a.n_ids, 12);
    assert_memory_equal(a.ids, b.ids, sizeof a.ids[0] * 12);
    assert_int_equal(a.finish, SOL__FINISH_REASON__FINISH_LENGTH);
    assert_int_equal(a.prompt_tokens, 4); /* whitespace-separated words */
    assert_int_equal(a.completion_tokens, 12);
    for (size_t k = 0; k < 12; k++)
        assert_int_equal(a.ids[k], sim_token_id(sim_prompt_hash(&g), 7, (uint32_t)k));
    s.seed = 8;
    run_one(&g, &c);
    assert_string_not_equal(a.text, c.text);
}

static void test_resume(void **state) {
    (void)state;
    Sol__Generate g;
    Sol__SamplingParams s;
    static result full, rest;
    gen_init(&g, &s, "r0", "resume me please", 3, 10);
    run_one(&g, &full);
    /* The first 4 tokens were streamed by a worker that died: text " w1 w2 w3 w4". */
    char streamed[512] = "";
    for (size_t k = 0; k < 4; k++) {
        strcat(streamed, " ");
        strcat(streamed, sim_token_text(full.ids[k]));
    }
    assert_memory_equal(full.text, streamed, strlen(streamed));
    g.resume_tokens = full.ids;
    g.n_resume_tokens = 4;
    g.resume_text = streamed;
    run_one(&g, &rest);
    assert_int_equal(rest.n_ids, 6);
    assert_memory_equal(rest.ids, full.ids + 4, 6 * sizeof full.ids[0]);
    assert_string_equal(rest.text, full.text + strlen(streamed));
    assert_int_equal(rest.completion_tokens, 10);
    /* resume_text alone (no ids): its words count as the tokens already streamed. */
    g.resume_tokens = NULL;
    g.n_resume_tokens = 0;
    run_one(&g, &rest);
    assert_string_equal(rest.text, full.text + strlen(streamed));
}

static void test_stop_string(void **state) {
    (void)state;
    Sol__Generate g;
    Sol__SamplingParams s;
    static result full, stopped;
    gen_init(&g, &s, "r0", "stop test", 11, 40);
    run_one(&g, &full);
    /* Stop on the text of tokens 5..6 (spanning a token boundary). */
    char stop[64];
    snprintf(stop, sizeof stop, "%s %s", sim_token_text(full.ids[5]), sim_token_text(full.ids[6]));
    const char *first = strstr(full.text, stop);
    assert_non_null(first);
    char *stops[1] = {stop};
    g.stop = stops;
    g.n_stop = 1;
    run_one(&g, &stopped);
    assert_int_equal(stopped.finish, SOL__FINISH_REASON__FINISH_STOP);
    assert_int_equal(strlen(stopped.text), (size_t)(first - full.text));
    assert_memory_equal(stopped.text, full.text, strlen(stopped.text));
    assert_null(strstr(stopped.text, stop));
    assert_true(stopped.completion_tokens < 40);
}

static void test_cancel(void **state) {
    (void)state;
    fixture f;
    fx_open(&f, 2, 4); /* 2 tokens/s: 1000 tokens would take minutes */
    Sol__Generate g;
    Sol__SamplingParams s;
    static result r[1];
    memset(r, 0, sizeof r);
    gen_init(&g, &s, "r0", "cancel me", 1, 1000);
    sol_err e = {0};
    assert_int_equal(exec_submit(f.x, &g, &e), 0);
    exec_cancel(f.x, "nope"); /* unknown ids are ignored */
    exec_cancel(f.x, "r0");
    collect(&f, r, 1);
    assert_int_equal(r[0].finish, SOL__FINISH_REASON__FINISH_CANCELLED);
    assert_true(r[0].completion_tokens < 1000);
    assert_true(wait_idle(f.x));
    fx_close(&f);
}

static void test_many_concurrent(void **state) {
    (void)state;
    enum { N = 200 };
    fixture f;
    fx_open(&f, 1e4, 8); /* capacity 8: most wait, then run */
    static result r[N];
    memset(r, 0, sizeof r);
    Sol__Generate g;
    Sol__SamplingParams s;
    char ids[N][16];
    sol_err e = {0};
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "r%d", i);
        gen_init(&g, &s, ids[i], "many requests at once", (uint64_t)i, 5 + (uint32_t)(i % 7));
        assert_int_equal(exec_submit(f.x, &g, &e), 0);
    }
    exec_stats st;
    exec_stats_get(f.x, &st);
    assert_true(st.running <= 8);
    collect(&f, r, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].n_ids, 5 + i % 7);
        assert_int_equal(r[i].finish, SOL__FINISH_REASON__FINISH_LENGTH);
    }
    /* The sim thread updates its counters just after it sends a final chunk: allow it to. */
    for (int i = 0; i < 200; i++) {
        exec_stats_get(f.x, &st);
        if (st.running + st.waiting == 0) break;
        sol_sleep_ms(10);
    }
    assert_int_equal(st.running + st.waiting, 0);
    assert_int_equal(st.free_blocks, st.total_blocks);
    assert_true(st.engine_steps > 0);
    fx_close(&f);
}

static void test_prompt_too_long(void **state) {
    (void)state;
    fixture f;
    sol_err e = {0};
    f.zctx = zmq_ctx_new();
    assert_int_equal(exec_events_new(f.zctx, &f.ev, &e), 0);
    sim_config c = {.ttft_ms = 0, .tokens_per_s = 100, .capacity = 1, .max_context = 3};
    assert_int_equal(sim_new(f.zctx, &c, f.ev, &f.x, &e), 0);
    Sol__Generate g;
    Sol__SamplingParams s;
    static result r[1];
    memset(r, 0, sizeof r);
    gen_init(&g, &s, "r0", "one two three four", 1, 5);
    assert_int_equal(exec_submit(f.x, &g, &e), 0);
    collect(&f, r, 1);
    assert_int_equal(r[0].finish, SOL__FINISH_REASON__FINISH_ERROR);
    fx_close(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deterministic),   cmocka_unit_test(test_resume),
        cmocka_unit_test(test_stop_string),     cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_many_concurrent), cmocka_unit_test(test_prompt_too_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
