/* http_guard: a list of live connections and a thread that times out the slow ones.
 *
 * Why a separate thread writing a raw 408: libmicrohttpd calls us only once a header is complete,
 * so a connection still sending its header has no callback in which to answer it. The sweeper
 * writes the response straight to the socket (nothing else writes to it before the header is
 * complete or while a body is still arriving) and shuts the socket down; MHD sees the end of the
 * stream and closes the connection, telling us through the CLOSED notification. Records are freed
 * only there, under the same lock the sweeper holds, and MHD notifies before it closes the
 * descriptor, so the sweeper never touches a descriptor number that was reused. */
#include "http_guard.h"

#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "clock.h"
#include "log.h"

#define MOD "http"

enum stage { WAIT_HEADER, WAIT_BODY, ANSWERING };

typedef struct guard_conn {
    int fd;
    atomic_int stage;
    _Atomic uint64_t since_ms; /* when the current stage began */
    atomic_bool kept_alive;    /* a request finished on it before */
    bool timed_out;
    struct guard_conn *prev, *next;
} guard_conn;

struct http_guard {
    unsigned header_s, keepalive_s, body_s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    guard_conn *head;
    pthread_t thread;
    atomic_uint_fast64_t timeouts;
};

static void answer_408(const guard_conn *c, const char *what) {
    char body[192], msg[512];
    int bl = snprintf(body, sizeof body,
                      "{\"error\":{\"message\":\"the request %s did not arrive in time\","
                      "\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}",
                      what);
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
                     "Connection: close\r\nContent-Length: %d\r\n\r\n%s",
                     bl, body);
    ssize_t w = send(c->fd, msg, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)w; /* best effort: a client that is not reading still gets closed */
    shutdown(c->fd, SHUT_RDWR);
}

static void sweep(http_guard *g) {
    uint64_t now = sol_now_ms();
    pthread_mutex_lock(&g->mu);
    for (guard_conn *c = g->head; c; c = c->next) {
        int st = atomic_load(&c->stage);
        uint64_t limit_ms =
            1000ull * (st == WAIT_BODY ? g->body_s
                       : st == WAIT_HEADER
                           ? (atomic_load(&c->kept_alive) ? g->keepalive_s : g->header_s)
                           : 0);
        if (!limit_ms || c->timed_out || now < atomic_load(&c->since_ms) + limit_ms) continue;
        c->timed_out = true;
        uint64_t n = atomic_fetch_add(&g->timeouts, 1) + 1;
        if (n <= 20 || n % 100 == 0)
            LOG_WARN(MOD, "closed a connection whose request %s took over %llu s (%llu so far)",
                     st == WAIT_BODY ? "body" : "header", (unsigned long long)(limit_ms / 1000),
                     (unsigned long long)n);
        answer_408(c, st == WAIT_BODY ? "body" : "header");
    }
    pthread_mutex_unlock(&g->mu);
}

static void *guard_main(void *arg) {
    http_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        struct timespec ts = sol_deadline_ms(500);
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        if (g->stop) break;
        pthread_mutex_unlock(&g->mu);
        sweep(g);
        pthread_mutex_lock(&g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int http_guard_new(unsigned header_s, unsigned keepalive_s, unsigned body_s, http_guard **out,
                   sol_err *e) {
    *out = NULL;
    http_guard *g = calloc(1, sizeof *g);
    if (!g) return sol_err_set(e, -ENOMEM, "out of memory");
    g->header_s = header_s, g->keepalive_s = keepalive_s, g->body_s = body_s;
    pthread_mutex_init(&g->mu, NULL);
    sol_cond_init(&g->cv);
    if (pthread_create(&g->thread, NULL, guard_main, g)) {
        pthread_mutex_destroy(&g->mu), pthread_cond_destroy(&g->cv);
        free(g);
        return sol_err_set(e, -EAGAIN, "http: cannot start the deadline thread");
    }
    *out = g;
    return 0;
}

void http_guard_free(http_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    for (guard_conn *c = g->head, *n; c; c = n) /* left by a daemon stopped without notices */
        n = c->next, free(c);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

void http_guard_notify(void *cls, void *connection, void **socket_context, int started) {
    http_guard *g = cls;
    if (started) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        guard_conn *c = ci ? calloc(1, sizeof *c) : NULL;
        if (!c) return; /* untracked: only the idle timeout applies */
        c->fd = ci->connect_fd;
        atomic_store(&c->since_ms, sol_now_ms());
        pthread_mutex_lock(&g->mu);
        c->next = g->head;
        if (g->head) g->head->prev = c;
        g->head = c;
        pthread_mutex_unlock(&g->mu);
        *socket_context = c;
        return;
    }
    guard_conn *c = *socket_context;
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        g->head = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&g->mu);
    free(c);
    *socket_context = NULL;
}

static void set_stage(void *record, int stage) {
    guard_conn *c = record;
    if (!c) return;
    atomic_store(&c->since_ms, sol_now_ms());
    atomic_store(&c->stage, stage);
}

void http_guard_headers_done(void *record) {
    set_stage(record, WAIT_BODY);
}

void http_guard_body_done(void *record) {
    set_stage(record, ANSWERING);
}

void http_guard_request_done(void *record) {
    guard_conn *c = record;
    if (c) atomic_store(&c->kept_alive, true);
    set_stage(record, WAIT_HEADER);
}

uint64_t http_guard_timeouts(http_guard *g) {
    return atomic_load(&g->timeouts);
}
