/* Promise: the link registers with the right fields, heartbeats (carrying the executor's figures,
 * speculative counters included), streams a Generate's chunks to the end, honours Cancel, survives
 * garbage, re-registers after a router restart, and drains. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <cmocka.h>

#include "clock.h"
#include "executor.h"
#include "frame.h"
#include "link.h"
#include "sim.h"
#include "zmq_util.h"

/* A ROUTER socket on an ephemeral loopback port; its endpoint goes to ep (128 bytes). */
static void *bound_router(void *zctx, char *ep) {
    sol_err e = {0};
    void *router = NULL;
    assert_int_equal(zmq_util_router_bind(zctx, "tcp://127.0.0.1:*", false, NULL, &router, &e), 0);
    assert_int_equal(zmq_util_last_endpoint(router, ep, 128, &e), 0);
    return router;
}

/* Next message of kind `want` within 10 s (others are skipped); NULL on timeout. */
static Sol__Envelope *expect(void *router, Sol__Envelope__BodyCase want, zmq_util_identity *from) {
    uint64_t end = sol_now_ms() + 10000;
    while (sol_now_ms() < end) {
        zmq_pollitem_t it = {router, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 200) <= 0) continue;
        Sol__Envelope *env = NULL;
        sol_err e = {0};
        if (zmq_util_router_recv(router, ZMQ_DONTWAIT, from, &env, &e) < 0) continue;
        if (env->body_case == want) return env;
        frame_free_envelope(env);
    }
    return NULL;
}

static void send_generate(void *router, const zmq_util_identity *to, const char *id,
                          uint32_t max_tokens) {
    Sol__Generate g = SOL__GENERATE__INIT;
    g.request_id = (char *)id;
    g.prompt = "hello link";
    g.max_tokens = max_tokens;
    Sol__Envelope env;
    frame_wrap_generate(&env, &g);
    sol_err e = {0};
    assert_int_equal(zmq_util_router_send(router, to, &env, &e), 0);
}

/* Chunks of request `id` until its final one; returns the finish reason, fills the count. */
static Sol__FinishReason stream(void *router, const char *id, size_t *n_tokens, uint32_t *usage) {
    zmq_util_identity from;
    uint32_t next_seq = 0;
    *n_tokens = 0;
    for (;;) {
        Sol__Envelope *env = expect(router, SOL__ENVELOPE__BODY_TOKEN_CHUNK, &from);
        assert_non_null(env);
        const Sol__TokenChunk *c = env->token_chunk;
        assert_string_equal(c->request_id, id);
        assert_int_equal(c->seq, next_seq++);
        *n_tokens += c->n_token_ids;
        Sol__FinishReason f = c->finish_reason;
        if (f != SOL__FINISH_REASON__FINISH_NONE) {
            assert_non_null(c->usage);
            *usage = c->usage->completion_tokens;
        }
        frame_free_envelope(env);
        if (f != SOL__FINISH_REASON__FINISH_NONE) return f;
    }
}

static void test_link_lifecycle(void **state) {
    (void)state;
    void *zctx = zmq_ctx_new();
    sol_err e = {0};
    char ep[128];
    void *router = bound_router(zctx, ep);

    exec_events *ev = NULL;
    executor *x = NULL;
    assert_int_equal(exec_events_new(zctx, &ev, &e), 0);
    sim_config sc = {.model = "demo",
                     .ttft_ms = 0,
                     .tokens_per_s = 100,
                     .capacity = 4,
                     .max_context = 512,
                     .block_size = 16};
    assert_int_equal(sim_new(zctx, &sc, ev, &x, &e), 0);
    const char *routers[] = {ep};
    link_config lc = {.routers = routers,
                      .n_routers = 1,
                      .worker_id = "w-test",
                      .pool = "fast",
                      .heartbeat_ms = 100};
    worker_link *l = NULL;
    assert_int_equal(link_new(zctx, &lc, x, ev, &l, &e), 0);

    zmq_util_identity w;
    Sol__Envelope *env = expect(router, SOL__ENVELOPE__BODY_REGISTER, &w);
    assert_non_null(env);
    assert_int_equal(env->register_->protocol_version, SOL_PROTOCOL_VERSION);
    assert_string_equal(env->register_->worker_id, "w-test");
    assert_string_equal(env->register_->pool, "fast");
    assert_string_equal(env->register_->model, "demo");
    assert_string_equal(env->register_->backend, "sim");
    assert_int_equal(env->register_->capacity, 4);
    assert_int_equal(env->register_->max_context, 512);
    frame_free_envelope(env);
    env = expect(router, SOL__ENVELOPE__BODY_HEARTBEAT, &w);
    assert_non_null(env);
    assert_string_equal(env->heartbeat->worker_id, "w-test");
    assert_false(env->heartbeat->draining);
    frame_free_envelope(env);

    /* Garbage is logged and dropped; the link keeps serving. */
    zmq_send(router, w.bytes, w.len, ZMQ_SNDMORE);
    zmq_send(router, "\xff\xff\xff garbage", 12, 0);

    size_t n;
    uint32_t usage = 0;
    send_generate(router, &w, "r1", 5);
    assert_int_equal(stream(router, "r1", &n, &usage), SOL__FINISH_REASON__FINISH_LENGTH);
    assert_int_equal(n, 5);
    assert_int_equal(usage, 5);

    /* Cancel: 500 tokens at 100/s would take 5 s. */
    send_generate(router, &w, "r2", 500);
    env = expect(router, SOL__ENVELOPE__BODY_TOKEN_CHUNK, &w);
    assert_non_null(env);
    frame_free_envelope(env);
    Sol__Cancel cn = SOL__CANCEL__INIT;
    cn.request_id = "r2";
    Sol__Envelope cenv;
    frame_wrap_cancel(&cenv, &cn);
    assert_int_equal(zmq_util_router_send(router, &w, &cenv, &e), 0);
    Sol__FinishReason f = SOL__FINISH_REASON__FINISH_NONE;
    while (f == SOL__FINISH_REASON__FINISH_NONE) {
        env = expect(router, SOL__ENVELOPE__BODY_TOKEN_CHUNK, &w);
        assert_non_null(env);
        f = env->token_chunk->finish_reason;
        frame_free_envelope(env);
    }
    assert_int_equal(f, SOL__FINISH_REASON__FINISH_CANCELLED);

    /* Router restart on the same endpoint: the worker registers again on its own. */
    zmq_util_close(router);
    router = NULL;
    for (int i = 0; i < 50 && !router; i++) {
        if (zmq_util_router_bind(zctx, ep, false, NULL, &router, &e) < 0) sol_sleep_ms(100);
    }
    assert_non_null(router);
    env = expect(router, SOL__ENVELOPE__BODY_REGISTER, &w);
    assert_non_null(env);
    assert_string_equal(env->register_->worker_id, "w-test");
    frame_free_envelope(env);

    /* Drain: a draining heartbeat, new work refused with 503, then the link ends with 0. */
    send_generate(router, &w, "r3", 30);
    env = expect(router, SOL__ENVELOPE__BODY_TOKEN_CHUNK, &w);
    assert_non_null(env);
    frame_free_envelope(env);
    assert_int_equal(link_drain(l), 0);
    for (;;) {
        env = expect(router, SOL__ENVELOPE__BODY_HEARTBEAT, &w);
        assert_non_null(env);
        bool draining = env->heartbeat->draining;
        frame_free_envelope(env);
        if (draining) break;
    }
    send_generate(router, &w, "r4", 5);
    env = expect(router, SOL__ENVELOPE__BODY_ERROR, &w);
    assert_non_null(env);
    assert_int_equal(env->error->code, SOL_ERROR_OVERLOADED);
    assert_string_equal(env->error->request_id, "r4");
    frame_free_envelope(env);
    assert_int_equal(link_wait(l, 10000), 0);
    assert_true(exec_idle(x)); /* r3 ran to its end before the link stopped */

    link_free(l);
    exec_free(x);
    exec_events_free(ev);
    zmq_util_close(router);
    zmq_ctx_term(zctx);
}

/* The real binary, SIGTERM mid-stream: with worker.drain = migrate (the default) the draining
 * Heartbeat comes first, then the request's final chunk CANCELLED before its end (the hand-back
 * the router moves); with finish the request runs to its end. Either way the worker exits 0. */
static void sigterm_drain(bool migrate) {
    void *zctx = zmq_ctx_new();
    sol_err e = {0};
    char ep[128];
    void *router = bound_router(zctx, ep);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl(SOL_BUILD_DIR "/worker/sol-worker", "sol-worker", "--backend", "sim", "--router", ep,
              "--pool", "fast", "--id", "w-bin", "--log-level", "warn", "--set",
              "worker.sim.tokens_per_s=40", "--set", "worker.sim.ttft_ms=0", "--drain",
              migrate ? "migrate" : "finish", (char *)NULL);
        _exit(127);
    }
    zmq_util_identity w;
    Sol__Envelope *env = expect(router, SOL__ENVELOPE__BODY_REGISTER, &w);
    assert_non_null(env);
    assert_string_equal(env->register_->worker_id, "w-bin");
    assert_string_equal(env->register_->backend, "sim");
    frame_free_envelope(env);
    send_generate(router, &w, "b1", 30); /* ~0.75 s at 40 tokens/s */
    env = expect(router, SOL__ENVELOPE__BODY_TOKEN_CHUNK, &w);
    assert_non_null(env);
    uint32_t seq0 = env->token_chunk->seq;
    size_t n = env->token_chunk->n_token_ids;
    frame_free_envelope(env);
    assert_int_equal(seq0, 0);
    kill(pid, SIGTERM);
    Sol__FinishReason f = SOL__FINISH_REASON__FINISH_NONE;
    bool saw_draining = false;
    while (f == SOL__FINISH_REASON__FINISH_NONE) {
        zmq_pollitem_t it = {router, 0, ZMQ_POLLIN, 0};
        assert_true(zmq_poll(&it, 1, 10000) > 0);
        assert_int_equal(zmq_util_router_recv(router, 0, &w, &env, &e), 0);
        if (env->body_case == SOL__ENVELOPE__BODY_HEARTBEAT && env->heartbeat->draining)
            saw_draining = true;
        if (env->body_case == SOL__ENVELOPE__BODY_TOKEN_CHUNK) {
            if (migrate) assert_true(saw_draining); /* the router learns first: a hand-back */
            n += env->token_chunk->n_token_ids;
            f = env->token_chunk->finish_reason;
        }
        frame_free_envelope(env);
    }
    assert_true(saw_draining);
    if (migrate) {
        assert_int_equal(f, SOL__FINISH_REASON__FINISH_CANCELLED);
        assert_true(n < 30);
    } else {
        assert_int_equal(f, SOL__FINISH_REASON__FINISH_LENGTH);
        assert_int_equal(n, 30);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    zmq_util_close(router);
    zmq_ctx_term(zctx);
}

static void test_binary_sigterm_drains(void **state) {
    (void)state;
    sigterm_drain(false);
}

static void test_binary_sigterm_migrates(void **state) {
    (void)state;
    sigterm_drain(true);
}

/* An executor that is the simulation but for its stats, which carry fixed speculative counters:
 * what the link puts in Heartbeat must be exactly these. */
typedef struct spec_exec {
    executor *inner;
} spec_exec;

static int se_submit(void *self, const Sol__Generate *g, sol_err *e) {
    return exec_submit(((spec_exec *)self)->inner, g, e);
}
static void se_cancel(void *self, const char *id) {
    exec_cancel(((spec_exec *)self)->inner, id);
}
static void se_info(void *self, exec_info *out) {
    exec_info_get(((spec_exec *)self)->inner, out);
}
static void se_stats(void *self, exec_stats *out) {
    exec_stats_get(((spec_exec *)self)->inner, out);
    out->spec_acceptance = 0.625;
    out->spec_steps = 1ull << 40;
    out->spec_drafted = 5000000001ull;
    out->spec_accepted = 3125000000ull;
    out->spec_emitted = 4000000003ull;
    out->spec_draft_seconds = 3.5;
    out->spec_verify_seconds = 9.75;
}
static bool se_idle(void *self) {
    return exec_idle(((spec_exec *)self)->inner);
}
static void se_free(void *self) {
    exec_free(((spec_exec *)self)->inner);
}
static const executor_ops se_ops = {se_submit, se_cancel, se_info, se_stats,
                                    se_idle,   se_free,   NULL,    NULL};

static void test_heartbeat_carries_spec_counters(void **state) {
    (void)state;
    void *zctx = zmq_ctx_new();
    sol_err e = {0};
    char ep[128];
    void *router = bound_router(zctx, ep);
    exec_events *ev = NULL;
    assert_int_equal(exec_events_new(zctx, &ev, &e), 0);
    sim_config sc = {.model = "demo", .tokens_per_s = 100, .capacity = 1, .max_context = 64};
    spec_exec se = {0};
    assert_int_equal(sim_new(zctx, &sc, ev, &se.inner, &e), 0);
    executor x = {&se_ops, &se};
    const char *routers[] = {ep};
    link_config lc = {.routers = routers,
                      .n_routers = 1,
                      .worker_id = "w-spec",
                      .pool = "fast",
                      .heartbeat_ms = 50};
    worker_link *l = NULL;
    assert_int_equal(link_new(zctx, &lc, &x, ev, &l, &e), 0);
    zmq_util_identity w;
    Sol__Envelope *env = expect(router, SOL__ENVELOPE__BODY_HEARTBEAT, &w);
    assert_non_null(env);
    const Sol__Heartbeat *hb = env->heartbeat;
    assert_true(hb->spec_acceptance == 0.625);
    assert_true(hb->spec_steps == 1ull << 40);
    assert_true(hb->spec_drafted == 5000000001ull);
    assert_true(hb->spec_accepted == 3125000000ull);
    assert_true(hb->spec_emitted == 4000000003ull);
    assert_true(hb->spec_draft_seconds == 3.5);
    assert_true(hb->spec_verify_seconds == 9.75);
    frame_free_envelope(env);
    link_free(l);
    exec_free(&x);
    exec_events_free(ev);
    zmq_util_close(router);
    zmq_ctx_term(zctx);
}

static void test_default_id(void **state) {
    (void)state;
    char a[64], b[64];
    link_default_id(a, sizeof a);
    link_default_id(b, sizeof b);
    assert_true(strlen(a) > 10);
    for (const char *p = a; *p; p++)
        assert_true(*p > 0x20 && *p < 0x7f);
    assert_string_not_equal(a, b); /* random suffix */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_link_lifecycle),
        cmocka_unit_test(test_binary_sigterm_drains),
        cmocka_unit_test(test_binary_sigterm_migrates),
        cmocka_unit_test(test_heartbeat_carries_spec_counters),
        cmocka_unit_test(test_default_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
