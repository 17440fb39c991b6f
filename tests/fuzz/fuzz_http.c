/* fuzz_http: arbitrary bytes sent as a client's whole connection to the router's HTTP server
 * (libmicrohttpd's request parsing, then Sol's: limits, API keys, endpoints, bodies, streaming)
 * over real TCP on 127.0.0.1. A connection's first answer must be a well-formed status line, and
 * Sol's own errors OpenAI-style JSON; a connection left unanswered must not stop the server
 * answering the next one; never a crash or leak. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "http.h"

/* A backend that answers every generation at once: one chunk with the finish and usage, pushed
 * from the dispatch call itself (the server must take a stream finished before it was read). */
static int answer(void *ctx, const http_dispatch_info *info, http_stream *s, oai_error *e) {
    (void)ctx, (void)e;
    static const oai_usage u = {3, 1, 0};
    static const float emb[4] = {0.5f, -0.5f, 0.25f, 0.0f};
    int embed = info->req->kind == OAI_EMBEDDING;
    http_chunk c = {.text = embed ? "" : "ok",
                    .text_len = embed ? 0 : 2,
                    .finish = OAI_FINISH_STOP,
                    .usage = &u,
                    .index = info->choice,
                    .embedding = embed ? emb : NULL,
                    .n_embedding = embed ? 4 : 0};
    http_stream_ref(s);
    http_stream_push(s, &c);
    http_stream_unref(s);
    return 0;
}

static int workers(void *ctx, strbuf *out) {
    (void)ctx;
    return strbuf_puts(out, "{\"workers\":[]}");
}

static const char *const k_pools[] = {"fast", "precise"};
static const char *const k_keys[] = {"sk-fuzz-key"};

typedef struct server {
    classify *cl;
    apikeys *keys;
    metrics *m;
    http_server *srv;
    uint16_t port;
} server;

/* One server for the whole run (a fuzzer calls the target millions of times); small limits so
 * inputs reach them: 4 KiB headers, 8 KiB bodies, 1 s deadlines. */
static server *server_get(void) {
    static server sv;
    static int started;
    if (started) return sv.srv ? &sv : NULL;
    started = 1;
    sol_err e = {0};
    classify_config cc = {k_pools, 2, "precise", NULL, 0, NULL, 0};
    if (classify_new(&cc, &sv.cl, &e) || apikeys_from_list(k_keys, 1, &sv.keys, &e)) {
        fprintf(stderr, "fuzz_http: %s\n", e.msg);
        abort();
    }
    sv.m = metrics_new("fuzz");
    http_config hc = {.host = "127.0.0.1",
                      .max_body_bytes = 8192,
                      .max_header_bytes = 4096,
                      .header_timeout_s = 1,
                      .keepalive_timeout_s = 1,
                      .body_timeout_s = 1,
                      .threads = 2,
                      .keys = sv.keys,
                      .router = sv.cl,
                      .metrics = sv.m,
                      .served_model = "fuzz",
                      .backend = {NULL, answer, NULL, NULL, workers, NULL, NULL, NULL}};
    if (http_server_start(&hc, &sv.srv, &e)) {
        fprintf(stderr, "fuzz_http: %s\n", e.msg);
        abort();
    }
    sv.port = http_server_port(sv.srv);
    return &sv;
}

static int dial(uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) abort();
    return fd;
}

/* 1 once buf holds the whole first response (by Content-Length or the last chunk), interim
 * 1xx responses (100 Continue) skipped. */
static int first_complete(const char *buf, size_t n) {
    const char *end = strstr(buf, "\r\n\r\n");
    while (end && !strncmp(buf, "HTTP/1.1 1", 10)) {
        n -= (size_t)(end + 4 - buf);
        buf = end + 4;
        end = strstr(buf, "\r\n\r\n");
    }
    if (!end) return 0;
    size_t head = (size_t)(end - buf) + 4;
    const char *cl = strstr(buf, "Content-Length: ");
    if (cl && cl < end) return n >= head + strtoul(cl + 16, NULL, 10);
    const char *te = strstr(buf, "Transfer-Encoding: chunked");
    if (te && te < end) return strstr(end, "\r\n0\r\n\r\n") != NULL;
    return 0;
}

/* What the server sends: until it closes, or 50 ms after the first response is whole (a kept-alive
 * connection that saw the client's half-close only while busy may stay open for its idle
 * timeout). -1 when nothing whole came for 5 s (a request the server cannot parse should still be
 * ended by its 1 s header deadline with a JSON 408). */
static long read_all(int fd, char *buf, size_t cap) {
    size_t n = 0;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        int whole = first_complete(buf, n);
        if (poll(&p, 1, whole ? 50 : 5000) != 1) return whole ? (long)n : -1;
        char tmp[4096];
        ssize_t r = recv(fd, tmp, sizeof tmp, 0);
        if (r <= 0) return (long)n; /* closed (or reset) */
        size_t keep = (size_t)r < cap - 1 - n ? (size_t)r : cap - 1 - n;
        memcpy(buf + n, tmp, keep);
        n += keep;
        buf[n] = '\0';
    }
}

/* After a connection that got no answer: the server must still serve a new one at once. */
static void still_serving(uint16_t port) {
    int fd = dial(port);
    static const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char buf[4096] = "";
    if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof req - 1) ||
        read_all(fd, buf, sizeof buf) <= 0 || strncmp(buf, "HTTP/1.1 200", 12)) {
        fprintf(stderr, "fuzz_http: the server stopped serving: %.60s\n", buf);
        abort();
    }
    close(fd);
}

/* The first response must start with a status line; Sol's JSON errors must carry an error
 * object (libmicrohttpd's own 400/431 pages are HTML: not ours to shape). Later responses on a
 * kept-alive connection are not parsed: a body may echo "HTTP/1." from the input. */
static void check_response(const char *buf) {
    int status = 0;
    if (sscanf(buf, "HTTP/1.%*1[01] %3d", &status) != 1 || status < 100 || status > 599) {
        fprintf(stderr, "fuzz_http: bad status line: %.60s\n", buf);
        abort();
    }
    const char *body = strstr(buf, "\r\n\r\n");
    const char *json = strstr(buf, "Content-Type: application/json");
    if (status >= 400 && body && json && json < body && strncmp(body + 4, "{\"error\":", 9)) {
        fprintf(stderr, "fuzz_http: a %d without an error object: %.80s\n", status, body + 4);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    server *sv = server_get();
    int fd = dial(sv->port);
    size_t off = 0;
    while (off < size) {
        ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (w <= 0) break; /* the server may close early (a 413, a 431): fine */
        off += (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    static char buf[1 << 16];
    buf[0] = '\0';
    long n = read_all(fd, buf, sizeof buf);
    close(fd);
    if (n < 0) { /* see docs/reliability.md: a NUL-led request line under sustained fuzzing */
        still_serving(sv->port);
        return 0;
    }
    if (n) check_response(buf);
    return 0;
}
