/* Promise: a ROUTER/DEALER pair made by zmq_util exchanges Envelopes both ways, reports a gone
 * worker and bad frames clearly, and never binds beyond loopback by default. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <zmq.h>

#include "zmq_util.h"

typedef struct pair {
    void *ctx, *router, *dealer;
} pair;

/* Receive timeouts only turn a broken exchange into a failure instead of a hang. */
static void no_hang(void *sock) {
    int ms = 10000;
    assert_int_equal(zmq_setsockopt(sock, ZMQ_RCVTIMEO, &ms, sizeof ms), 0);
}

static int pair_setup(void **state) {
    static pair p;
    sol_err e = {0};
    char endpoint[256];
    p.ctx = zmq_ctx_new();
    if (zmq_util_router_bind(p.ctx, "tcp://127.0.0.1:*", false, NULL, &p.router, &e) != 0 ||
        zmq_util_last_endpoint(p.router, endpoint, sizeof endpoint, &e) != 0 ||
        zmq_util_dealer_connect(p.ctx, endpoint, "worker-1", NULL, NULL, &p.dealer, &e) != 0) {
        print_error("setup: %s\n", e.msg);
        return -1;
    }
    no_hang(p.router);
    no_hang(p.dealer);
    *state = &p;
    return 0;
}

static int pair_teardown(void **state) {
    pair *p = *state;
    zmq_util_close(p->dealer);
    zmq_util_close(p->router);
    zmq_ctx_term(p->ctx);
    return 0;
}

static void test_register_then_token_chunk(void **state) {
    pair *p = *state;
    sol_err e = {0};
    Sol__Register reg;
    frame_register_init(&reg, "worker-1", "fast", "demo");
    reg.capacity = 8;
    reg.max_context = 2048;
    Sol__Envelope env;
    frame_wrap_register(&env, &reg);
    assert_int_equal(zmq_util_dealer_send(p->dealer, &env, &e), 0);

    zmq_util_identity from;
    Sol__Envelope *got = NULL;
    if (zmq_util_router_recv(p->router, 0, &from, &got, &e) != 0) fail_msg("%s", e.msg);
    assert_int_equal(from.len, 8);
    assert_memory_equal(from.bytes, "worker-1", 8);
    assert_int_equal(got->body_case, SOL__ENVELOPE__BODY_REGISTER);
    assert_string_equal(got->register_->pool, "fast");
    assert_int_equal(got->register_->capacity, 8);
    assert_int_equal(frame_check_version(got->register_, &e), 0);
    frame_free_envelope(got);

    Sol__TokenChunk chunk = SOL__TOKEN_CHUNK__INIT;
    uint32_t ids[2] = {17, 99};
    chunk.request_id = "req-1";
    chunk.text = "Hi";
    chunk.n_token_ids = 2;
    chunk.token_ids = ids;
    chunk.seq = 3;
    frame_wrap_token_chunk(&env, &chunk);
    assert_int_equal(zmq_util_router_send(p->router, &from, &env, &e), 0);
    if (zmq_util_dealer_recv(p->dealer, 0, &got, &e) != 0) fail_msg("%s", e.msg);
    assert_int_equal(got->body_case, SOL__ENVELOPE__BODY_TOKEN_CHUNK);
    assert_string_equal(got->token_chunk->request_id, "req-1");
    assert_string_equal(got->token_chunk->text, "Hi");
    assert_int_equal(got->token_chunk->n_token_ids, 2);
    assert_int_equal(got->token_chunk->token_ids[1], 99);
    assert_int_equal(got->token_chunk->seq, 3);
    frame_free_envelope(got);

    /* Nothing else is waiting. */
    assert_int_equal(zmq_util_dealer_recv(p->dealer, ZMQ_DONTWAIT, &got, &e), -EAGAIN);
    assert_null(got);
}

static void test_unknown_identity_is_an_error(void **state) {
    pair *p = *state;
    sol_err e = {0};
    zmq_util_identity ghost;
    assert_int_equal(zmq_util_identity_set(&ghost, "ghost", &e), 0);
    Sol__Cancel cancel = SOL__CANCEL__INIT;
    cancel.request_id = "req-9";
    Sol__Envelope env;
    frame_wrap_cancel(&env, &cancel);
    assert_int_equal(zmq_util_router_send(p->router, &ghost, &env, &e), -EHOSTUNREACH);
    assert_non_null(strstr(e.msg, "worker 'ghost' is gone"));
    /* An invalid envelope is refused before anything reaches the socket. */
    cancel.request_id = "";
    assert_int_equal(zmq_util_router_send(p->router, &ghost, &env, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "cancel.request_id"));
}

static void test_bad_frames_keep_the_sender(void **state) {
    pair *p = *state;
    sol_err e = {0};
    zmq_util_identity from;
    Sol__Envelope *got = NULL;
    const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff};
    assert_int_equal(zmq_send(p->dealer, garbage, sizeof garbage, 0), (int)sizeof garbage);
    assert_int_equal(zmq_util_router_recv(p->router, 0, &from, &got, &e), -EBADMSG);
    assert_null(got);
    assert_int_equal(from.len, 8); /* the router can still answer with an Error */
    assert_memory_equal(from.bytes, "worker-1", 8);

    /* A REQ-style empty delimiter makes three parts: refused, and the socket stays in step. */
    assert_int_equal(zmq_send(p->dealer, "", 0, ZMQ_SNDMORE), 0);
    assert_int_equal(zmq_send(p->dealer, garbage, sizeof garbage, 0), (int)sizeof garbage);
    assert_int_equal(zmq_util_router_recv(p->router, 0, &from, &got, &e), -EPROTO);
    assert_non_null(strstr(e.msg, "3 parts; expected 2"));

    Sol__Drain drain = SOL__DRAIN__INIT;
    Sol__Envelope env;
    frame_wrap_drain(&env, &drain);
    assert_int_equal(zmq_util_dealer_send(p->dealer, &env, &e), 0);
    assert_int_equal(zmq_util_router_recv(p->router, 0, &from, &got, &e), 0);
    assert_int_equal(got->body_case, SOL__ENVELOPE__BODY_DRAIN);
    frame_free_envelope(got);
}

static void test_pre_encoded_frames(void **state) {
    pair *p = *state;
    sol_err e = {0};
    Sol__Heartbeat hb = SOL__HEARTBEAT__INIT;
    hb.worker_id = "worker-1";
    hb.engine_steps = 77;
    Sol__Envelope env;
    frame_wrap_heartbeat(&env, &hb);
    uint8_t buf[256];
    size_t len;
    assert_int_equal(frame_encode_into(&env, buf, sizeof buf, &len, &e), 0);
    assert_int_equal(zmq_util_dealer_send_bytes(p->dealer, buf, len, &e), 0);
    zmq_util_identity from;
    Sol__Envelope *got = NULL;
    if (zmq_util_router_recv(p->router, 0, &from, &got, &e) != 0) fail_msg("%s", e.msg);
    assert_int_equal(got->heartbeat->engine_steps, 77);
    frame_free_envelope(got);
    assert_int_equal(zmq_util_router_send_bytes(p->router, &from, buf, len, &e), 0);
    if (zmq_util_dealer_recv(p->dealer, 0, &got, &e) != 0) fail_msg("%s", e.msg);
    assert_string_equal(got->heartbeat->worker_id, "worker-1");
    frame_free_envelope(got);
    assert_int_equal(zmq_util_dealer_send_bytes(p->dealer, buf, 0, &e), -EMSGSIZE);
}

static void test_public_bind_refused(void **state) {
    (void)state;
    void *ctx = zmq_ctx_new(), *sock = (void *)1;
    sol_err e = {0};
    assert_int_equal(zmq_util_router_bind(ctx, "tcp://0.0.0.0:5555", false, NULL, &sock, &e),
                     -EPERM);
    assert_null(sock);
    assert_non_null(strstr(e.msg, "refusing to bind tcp://0.0.0.0:5555"));
    assert_int_equal(zmq_util_router_bind(ctx, "tcp://*:5555", false, NULL, &sock, &e), -EPERM);
    zmq_ctx_term(ctx);

    const char *local[] = {"tcp://127.0.0.1:5555", "tcp://127.3.2.1:1", "tcp://localhost:9",
                           "tcp://[::1]:5555",     "inproc://broker",   "ipc:///tmp/sol.sock"};
    const char *remote[] = {"tcp://0.0.0.0:5555",  "tcp://*:5555",    "tcp://eth0:5555",
                            "tcp://10.0.0.1:5555", "tcp://[::]:5555", "tcp://128.0.0.1:1",
                            "udp://127.0.0.1:5",   "tcp://127.0.0.1", "tcp://:5555"};
    for (size_t i = 0; i < sizeof local / sizeof *local; i++)
        if (!zmq_util_endpoint_is_local(local[i])) fail_msg("%s should be local", local[i]);
    for (size_t i = 0; i < sizeof remote / sizeof *remote; i++)
        if (zmq_util_endpoint_is_local(remote[i])) fail_msg("%s should be refused", remote[i]);
}

static void test_identity_str(void **state) {
    (void)state;
    zmq_util_identity id = {.len = 4, .bytes = {'w', 0x00, 0xff, '1'}};
    char buf[32];
    assert_string_equal(zmq_util_identity_str(&id, buf, sizeof buf), "w\\x00\\xff1");
    sol_err e = {0};
    assert_int_equal(zmq_util_identity_set(&id, "", &e), -EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_register_then_token_chunk, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_unknown_identity_is_an_error, pair_setup,
                                        pair_teardown),
        cmocka_unit_test_setup_teardown(test_bad_frames_keep_the_sender, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_pre_encoded_frames, pair_setup, pair_teardown),
        cmocka_unit_test(test_public_bind_refused),
        cmocka_unit_test(test_identity_str),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
