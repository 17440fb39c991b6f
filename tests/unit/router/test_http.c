/* Promise: the HTTP server answers every endpoint over real TCP with the right status, headers and
 * OpenAI bodies (JSON and SSE), rejects bad input (JSON, types, model, max_tokens, size, UTF-8,
 * API key, rate) with a clear error, cancels on client abort, and keeps serving afterwards. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "clock.h"
#include "http.h"

/* ---- a fake backend: a test double that emits fixed chunks from its own thread ---- */

typedef struct fake {
    pthread_t threads[64];
    int n_threads;
    int cancels;
    pthread_mutex_t mu;
} fake;

static void *emit(void *arg) {
    http_stream *s = arg;
    const char *parts[] = {"Hello", " wor", "ld"};
    for (int i = 0; i < 3; i++) {
        http_chunk c = {.text = parts[i], .text_len = strlen(parts[i])};
        if (i == 2) {
            static const oai_usage u = {5, 3, 0};
            c.finish = OAI_FINISH_STOP;
            c.usage = &u;
        }
        if (http_stream_push(s, &c) == -EPIPE) break;
        sol_sleep_ms(2);
    }
    http_stream_unref(s);
    return NULL;
}

/* Emits one chunk, then waits for the client to go away (push returns -EPIPE). */
static void *emit_until_gone(void *arg) {
    http_stream *s = arg;
    http_chunk c = {.text = "x", .text_len = 1};
    for (int i = 0; i < 5000 && http_stream_push(s, &c) == 0; i++)
        sol_sleep_ms(2);
    http_stream_unref(s);
    return NULL;
}

static int fake_dispatch(void *ctx, const http_dispatch_info *info, http_stream *s, oai_error *e) {
    fake *f = ctx;
    const char *text = oai_request_last_user_text(info->req);
    if (strstr(text, "overload")) {
        oai_error_status(e, 503, "no worker in pool");
        e->retry_after_s = 2;
        return -1;
    }
    if (strstr(text, "fail-early")) {
        oai_error err;
        oai_error_status(&err, 503, "worker died");
        http_chunk c = {.error = &err};
        http_stream_push(s, &c); /* synchronous error before any byte: real status code */
        return 0;
    }
    http_stream_ref(s);
    pthread_mutex_lock(&f->mu);
    pthread_create(&f->threads[f->n_threads++], NULL,
                   strstr(text, "forever") ? emit_until_gone : emit, s);
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static void fake_cancel(void *ctx, const char *id) {
    (void)id;
    fake *f = ctx;
    pthread_mutex_lock(&f->mu);
    f->cancels++;
    pthread_mutex_unlock(&f->mu);
}

static int fake_workers(void *ctx, strbuf *out) {
    (void)ctx;
    return strbuf_puts(out, "{\"workers\":[{\"id\":\"w1\"}]}");
}

static int fake_drain(void *ctx, const char *id, oai_error *e) {
    (void)ctx;
    if (!strcmp(id, "w1")) return 0;
    oai_error_status(e, 404, "unknown worker");
    return -1;
}

/* ---- a raw HTTP client ---- */

typedef struct reply {
    int status;
    char raw[65536];
    const char *body;
} reply;

static int connect_to(uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

static void send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return; /* the server may close early (413) */
        p += w;
        n -= (size_t)w;
    }
}

/* Sends a whole request as given and reads the answer until the server closes. */
static void exchange(uint16_t port, const char *raw, size_t n, reply *r) {
    int fd = connect_to(port);
    send_all(fd, raw, n);
    size_t got = 0;
    ssize_t k;
    while (got < sizeof r->raw - 1 && (k = recv(fd, r->raw + got, sizeof r->raw - 1 - got, 0)) > 0)
        got += (size_t)k;
    r->raw[got] = '\0';
    close(fd);
    r->status = 0;
    sscanf(r->raw, "HTTP/1.1 %d", &r->status);
    const char *b = strstr(r->raw, "\r\n\r\n");
    r->body = b ? b + 4 : "";
}

static void request(uint16_t port, const char *method, const char *path, const char *headers,
                    const char *body, size_t body_len, reply *r) {
    size_t cap = 1024 + body_len;
    char *msg = malloc(cap);
    assert_non_null(msg);
    int n = snprintf(
        msg, cap, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%sContent-Length: %zu\r\n\r\n",
        method, path, headers ? headers : "", body_len);
    memcpy(msg + n, body, body_len);
    exchange(port, msg, (size_t)n + body_len, r);
    free(msg);
}

static void post(uint16_t port, const char *path, const char *headers, const char *body, reply *r) {
    request(port, "POST", path, headers, body, strlen(body), r);
}

static void has(const reply *r, const char *needle) {
    if (!strstr(r->raw, needle)) fail_msg("missing '%s' in:\n%s", needle, r->raw);
}

/* ---- fixture ---- */

typedef struct fixture {
    fake f;
    classify *cl;
    apikeys *keys;
    ratelimit *rl;
    metrics *m;
    http_server *srv;
    uint16_t port;
} fixture;

static const char *pools[] = {"fast", "precise"};

static int setup(void **state) {
    fixture *x = calloc(1, sizeof *x);
    pthread_mutex_init(&x->f.mu, NULL);
    classify_config cc = {pools, 2, "precise", NULL, 0, NULL, 0};
    sol_err e = {0};
    assert_int_equal(classify_new(&cc, &x->cl, &e), 0);
    const char *k[] = {"sk-test-key-1", "sk-limited-2"};
    assert_int_equal(apikeys_from_list(k, 2, &x->keys, &e), 0);
    x->rl = ratelimit_new(0.001, 50, NULL, NULL); /* 50 requests, then effectively none */
    x->m = metrics_new("demo");
    http_config hc = {
        .host = "127.0.0.1",
        .port = 0,
        .max_body_bytes = 4096,
        .keys = x->keys,
        .limiter = x->rl,
        .router = x->cl,
        .metrics = x->m,
        .served_model = "demo",
        .backend = {&x->f, fake_dispatch, fake_cancel, NULL, fake_workers, fake_drain, NULL, NULL}};
    if (http_server_start(&hc, &x->srv, &e)) fail_msg("%s", e.msg);
    x->port = http_server_port(x->srv);
    *state = x;
    return 0;
}

static int teardown(void **state) {
    fixture *x = *state;
    http_server_stop(x->srv);
    for (int i = 0; i < x->f.n_threads; i++)
        pthread_join(x->f.threads[i], NULL);
    classify_free(x->cl);
    apikeys_free(x->keys);
    ratelimit_free(x->rl);
    metrics_free(x->m);
    free(x);
    return 0;
}

#define AUTH "Authorization: Bearer sk-test-key-1\r\n"
#define CHAT(extra, text)                                                                          \
    "{\"model\":\"demo\"" extra ",\"messages\":[{\"role\":\"user\",\"content\":\"" text "\"}]}"

static void test_completion_and_chat(void **state) {
    fixture *x = *state;
    reply r;
    post(x->port, "/v1/completions", AUTH "X-Request-Id: abc-1\r\n",
         "{\"model\":\"fast\",\"prompt\":\"hi\",\"max_tokens\":3}", &r);
    assert_int_equal(r.status, 200);
    has(&r, "X-Request-Id: abc-1");
    has(&r, "X-Sol-Pool: fast");
    has(&r, "X-Sol-Route-Reason: model");
    has(&r, "\"text\":\"Hello world\"");
    has(&r, "\"id\":\"cmpl-abc-1\"");
    has(&r, "\"finish_reason\":\"stop\"");
    has(&r, "\"total_tokens\":8");
    post(x->port, "/v1/chat/completions", AUTH, CHAT("", "hello"), &r);
    assert_int_equal(r.status, 200);
    has(&r, "X-Sol-Pool: precise");
    has(&r, "X-Sol-Route-Reason: default");
    has(&r, "\"object\":\"chat.completion\"");
    has(&r, "\"content\":\"Hello world\"");
    post(x->port, "/v1/chat/completions", AUTH "X-Sol-Tags: batch, fast\r\n", CHAT("", "x"), &r);
    has(&r, "X-Sol-Route-Reason: tag");
    has(&r, "X-Sol-Pool: fast");
}

static void test_streaming(void **state) {
    fixture *x = *state;
    reply r;
    post(x->port, "/v1/chat/completions", AUTH,
         CHAT(",\"stream\":true,\"stream_options\":{\"include_usage\":true}", "hi"), &r);
    assert_int_equal(r.status, 200);
    has(&r, "Content-Type: text/event-stream");
    has(&r, "\"delta\":{\"role\":\"assistant\",\"content\":\"Hello\"}");
    has(&r, "\"delta\":{\"content\":\" wor\"}");
    has(&r, "\"finish_reason\":\"stop\"");
    has(&r, "\"choices\":[],\"usage\":{\"prompt_tokens\":5");
    has(&r, "data: [DONE]");
    assert_true(strstr(r.raw, "data: [DONE]") > strstr(r.raw, "\"usage\":{"));
}

static void test_bad_input(void **state) {
    fixture *x = *state;
    reply r;
    post(x->port, "/v1/completions", AUTH, "{\"model\":\"demo\",\"prompt\":", &r);
    assert_int_equal(r.status, 400);
    has(&r, "invalid JSON");
    post(x->port, "/v1/completions", AUTH, "{\"model\":\"demo\",\"prompt\":3}", &r);
    assert_int_equal(r.status, 400);
    has(&r, "\"param\":\"prompt\"");
    post(x->port, "/v1/completions", AUTH, "{\"model\":\"gpt-9\",\"prompt\":\"x\"}", &r);
    assert_int_equal(r.status, 404);
    has(&r, "\"code\":\"model_not_found\"");
    post(x->port, "/v1/completions", AUTH, "{\"model\":\"demo\",\"prompt\":\"x\",\"max_tokens\":0}",
         &r);
    assert_int_equal(r.status, 400);
    has(&r, "\"param\":\"max_tokens\"");
    post(x->port, "/v1/completions", AUTH, "{\"model\":\"demo\",\"prompt\":\"\xc3\x28\"}", &r);
    assert_int_equal(r.status, 400);
    has(&r, "UTF-8");
    char big[6000];
    memset(big, 'a', sizeof big);
    memcpy(big, "{\"prompt\":\"", 11);
    request(x->port, "POST", "/v1/completions", AUTH, big, sizeof big, &r);
    assert_int_equal(r.status, 413);
    has(&r, "request_too_large");
    post(x->port, "/v1/completions", "", "{\"model\":\"demo\",\"prompt\":\"x\"}", &r);
    assert_int_equal(r.status, 401);
    has(&r, "invalid_api_key");
    post(x->port, "/v1/completions", "Authorization: Bearer sk-wrong-key\r\n",
         "{\"model\":\"demo\",\"prompt\":\"x\"}", &r);
    assert_int_equal(r.status, 401);
    post(x->port, "/v1/chat/completions", AUTH, CHAT("", "overload"), &r);
    assert_int_equal(r.status, 503);
    has(&r, "Retry-After: 2");
    post(x->port, "/v1/chat/completions", AUTH, CHAT(",\"stream\":true", "fail-early"), &r);
    assert_int_equal(r.status, 503);
    has(&r, "worker died");
    request(x->port, "GET", "/v1/completions", AUTH, "", 0, &r);
    assert_int_equal(r.status, 405);
    request(x->port, "GET", "/nope", AUTH, "", 0, &r);
    assert_int_equal(r.status, 404);
    /* No Content-Length or Transfer-Encoding: no body comes, so the answer comes at once, with no
     * 100 Continue first (waiting for a body raced libmicrohttpd's 100 Continue). */
    static const char no_body[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" AUTH
                                  "Expect: 100-continue\r\nConnection: close\r\n\r\n";
    exchange(x->port, no_body, sizeof no_body - 1, &r);
    assert_int_equal(r.status, 400);
    has(&r, "invalid JSON");
    /* still serving */
    post(x->port, "/v1/completions", AUTH, "{\"model\":\"demo\",\"prompt\":\"x\"}", &r);
    assert_int_equal(r.status, 200);
}

static void test_other_endpoints(void **state) {
    fixture *x = *state;
    reply r;
    request(x->port, "GET", "/health", NULL, "", 0, &r);
    assert_int_equal(r.status, 200);
    request(x->port, "GET", "/ready", NULL, "", 0, &r);
    assert_int_equal(r.status, 200);
    request(x->port, "GET", "/v1/models", AUTH, "", 0, &r);
    assert_int_equal(r.status, 200);
    has(&r, "\"id\":\"demo\"");
    has(&r, "\"id\":\"fast\"");
    request(x->port, "GET", "/admin/workers", AUTH, "", 0, &r);
    has(&r, "\"id\":\"w1\"");
    request(x->port, "POST", "/admin/workers/w1/drain", AUTH, "", 0, &r);
    assert_int_equal(r.status, 200);
    has(&r, "\"draining\":true");
    request(x->port, "POST", "/admin/workers/w9/drain", AUTH, "", 0, &r);
    assert_int_equal(r.status, 404);
    post(x->port, "/v1/completions", AUTH, "{\"model\":\"demo\",\"prompt\":\"x\"}", &r);
    request(x->port, "GET", "/metrics", NULL, "", 0, &r);
    assert_int_equal(r.status, 200);
    has(&r, "sol_requests_total{pool=\"precise\",status=\"200\"}");
    has(&r, "vllm:time_to_first_token_seconds_bucket");
}

static void test_abort_and_rate_limit(void **state) {
    fixture *x = *state;
    int fd = connect_to(x->port);
    const char *body = CHAT(",\"stream\":true", "forever");
    char head[512];
    int n = snprintf(head, sizeof head,
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" AUTH
                     "Content-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    send_all(fd, head, (size_t)n);
    char buf[256];
    assert_true(recv(fd, buf, sizeof buf, 0) > 0); /* the stream started */
    close(fd);
    for (int i = 0; i < 2000; i++) { /* wait (bounded) for the cancel to arrive */
        pthread_mutex_lock(&x->f.mu);
        int c = x->f.cancels;
        pthread_mutex_unlock(&x->f.mu);
        if (c) break;
        sol_sleep_ms(5);
    }
    assert_int_equal(x->f.cancels, 1);

    reply r;
    int limited = 0;
    for (int i = 0; i < 60 && !limited; i++) {
        request(x->port, "GET", "/v1/models", "Authorization: Bearer sk-limited-2\r\n", "", 0, &r);
        limited = r.status == 429;
    }
    assert_true(limited);
    has(&r, "Retry-After: ");
    request(x->port, "GET", "/v1/models", AUTH, "", 0, &r); /* other keys unaffected */
    assert_int_equal(r.status, 200);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_and_chat),
        cmocka_unit_test(test_streaming),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_other_endpoints),
        cmocka_unit_test(test_abort_and_rate_limit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
