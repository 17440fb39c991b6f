/* bench_router: an HTTP load generator for sol-router over raw keep-alive sockets on 127.0.0.1.
 * Three modes: `rps` (closed loop, non-streaming requests/s), `latency` (open loop at a fixed rate,
 * latency percentiles) and `stream` (streamed tokens/s through the router). Bounded by a request
 * count and a time limit; loopback only. Run by bench/router.sh against sim workers. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "args.h"

#define BUF_BYTES (1 << 16)
#define MAX_POOLS 8

typedef enum { MODE_RPS, MODE_LATENCY, MODE_STREAM } mode;

typedef struct opts {
    mode m;
    int port, conns, max_tokens;
    char *models[MAX_POOLS]; /* the model (pool) names sent, ticket i gets models[i % n] */
    int n_models;
    long requests; /* total, all connections */
    double rate;   /* latency mode, and stream mode when given: requests/s, all connections */
    int rate_set;  /* --rate given: stream mode runs an open loop too */
    double time_limit_s;
    int read_timeout_s; /* a response silent this long counts as broken */
} opts;

/* The verdict on one response; see the categories in usage(). */
typedef enum { V_SERVED, V_REFUSED, V_ERRORED, V_LOST, V_CUT, V_COUNT } verdict;
static const char *const verdict_names[V_COUNT] = {"served", "refused", "errored", "lost", "cut"};

/* Counters of one pool (one --model name). */
typedef struct pool_counts {
    atomic_long verdicts[V_COUNT];
    atomic_long tokens;       /* completion tokens of the served streams */
    atomic_long partial;      /* text events of the streams that were not served */
    atomic_long events;       /* SSE data events with a choice, all streams */
    atomic_long retry_after;  /* refusals that carried a Retry-After header */
    atomic_long rejected_429; /* of the refusals, 429s (the rest are 503s) */
} pool_counts;

typedef struct shared {
    const opts *o;
    atomic_long next; /* request tickets */
    pool_counts pools[MAX_POOLS];
    atomic_long connect_failures; /* client threads that could not connect at all */
    atomic_flag first_taken;      /* the first response not served is described once */
    char first[320];
    double *ttft; /* stream mode: seconds to the first event, one slot per ticket */
    double t0;
    double *lat; /* seconds, one slot per ticket */
} shared;

typedef struct conn {
    int fd;
    char buf[BUF_BYTES];
    size_t len, off;
} conn;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int conn_open(conn *c, int port, int read_timeout_s) {
    c->len = c->off = 0;
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0) return -errno;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {read_timeout_s, 0}; /* a stalled response fails, not hangs the bench */
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) < 0) {
        int rc = -errno;
        close(c->fd);
        c->fd = -1;
        return rc;
    }
    return 0;
}

/* Next byte of the response, reading more when needed; -1 on EOF or error. */
static int next_byte(conn *c) {
    if (c->off == c->len) {
        ssize_t n = recv(c->fd, c->buf, sizeof c->buf, 0);
        if (n <= 0) return -1;
        c->len = (size_t)n;
        c->off = 0;
    }
    return (unsigned char)c->buf[c->off++];
}

/* One CRLF-terminated line into `line` (without CRLF); length or -1. */
static long read_line(conn *c, char *line, size_t cap) {
    size_t n = 0;
    for (;;) {
        int b = next_byte(c);
        if (b < 0) return -1;
        if (b == '\n') break;
        if (n + 1 < cap) line[n++] = (char)b;
    }
    if (n && line[n - 1] == '\r') n--;
    line[n] = '\0';
    return (long)n;
}

/* What one response said. A stream counts as served only when it ended with [DONE], carried no
 * error event, reported a finish reason, and its usage says every token came (max_tokens, or fewer
 * with finish_reason "stop"): a stream the router cut after its first token ends with an error
 * event and [DONE], which alone would look like success. */
typedef struct outcome {
    int status;             /* HTTP status, -1: no complete response (closed, reset, silent) */
    int retry_after;        /* the response carried a Retry-After header */
    long events;            /* SSE data events with a choice (text deltas and the finish) */
    long content_events;    /* of those, events carrying text */
    int done;               /* "data: [DONE]" seen */
    int error_event;        /* a "data: {"error"...}" event seen */
    int finish;             /* a non-null finish_reason seen */
    int finish_stop;        /* ... and it was "stop" */
    long completion_tokens; /* from the final usage chunk; -1 when none came */
    double t_first;         /* when the first text event arrived (0: none) */
    char body[256];         /* the start of a body that was not chunked (an error's message) */
} outcome;

/* One SSE line, grown as needed (a data line holds one JSON event). */
typedef struct sse_line {
    char *p;
    size_t len, cap;
} sse_line;

static void sse_put(sse_line *l, int b) {
    if (l->len + 1 >= l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 1024;
        char *q = realloc(l->p, cap);
        if (!q) return; /* an event longer than memory allows is judged by its prefix */
        l->p = q;
        l->cap = cap;
    }
    l->p[l->len++] = (char)b;
    l->p[l->len] = '\0';
}

static void sse_event(outcome *o, const char *d) {
    if (strncmp(d, "data: ", 6)) return;
    d += 6;
    if (!strcmp(d, "[DONE]")) {
        o->done = 1;
        return;
    }
    if (!strncmp(d, "{\"error\"", 8)) {
        o->error_event = 1;
        return;
    }
    const char *u = strstr(d, "\"completion_tokens\":");
    if (u && strstr(d, "\"choices\":[]")) { /* the usage chunk (stream_options.include_usage) */
        o->completion_tokens = atol(u + 20);
        return;
    }
    o->events++;
    /* inside JSON strings a quote is escaped, so these patterns only match the keys themselves */
    const char *f = strstr(d, "\"finish_reason\":\"");
    if (f) {
        o->finish = 1;
        o->finish_stop = !strncmp(f + 17, "stop\"", 5);
    }
    const char *t = strstr(d, "\"text\":\"");
    if (t && t[8] != '"') {
        o->content_events++;
        if (!o->t_first) o->t_first = now_s();
    }
}

/* Read one full response (Content-Length or chunked) into *o; o->status is -1 on error. */
static void read_response(conn *c, outcome *o) {
    *o = (outcome){.status = -1, .completion_tokens = -1};
    char line[1024];
    if (read_line(c, line, sizeof line) < 12) return;
    int status = atoi(line + 9);
    long clen = -1;
    int chunked = 0;
    for (;;) {
        long n = read_line(c, line, sizeof line);
        if (n < 0) return;
        if (n == 0) break;
        if (!strncasecmp(line, "content-length:", 15)) clen = atol(line + 15);
        if (!strncasecmp(line, "transfer-encoding:", 18) && strstr(line, "chunked")) chunked = 1;
        if (!strncasecmp(line, "retry-after:", 12)) o->retry_after = 1;
    }
    if (!chunked) {
        for (long i = 0; i < clen; i++) {
            int b = next_byte(c);
            if (b < 0) return;
            if ((size_t)i + 1 < sizeof o->body) o->body[i] = (char)b;
        }
        o->status = status;
        return;
    }
    sse_line l = {0};
    for (;;) {
        if (read_line(c, line, sizeof line) < 0) goto out;
        long sz = strtol(line, NULL, 16);
        if (sz == 0) {
            if (read_line(c, line, sizeof line) < 0) goto out; /* final CRLF */
            break;
        }
        for (long i = 0; i < sz; i++) {
            int b = next_byte(c);
            if (b < 0) goto out;
            if (b != '\n') {
                sse_put(&l, b);
                continue;
            }
            if (l.len) sse_event(o, l.p);
            l.len = 0;
        }
        if (read_line(c, line, sizeof line) < 0) goto out;
    }
    o->status = status;
out:
    free(l.p);
}

static verdict judge(const opts *op, const outcome *o) {
    /* shed before any work: a full queue (429) or an overloaded router (503 that says so); other
     * 503s (no worker left, failed on every worker, timed out) are failures */
    if (o->status == 429 || (o->status == 503 && strstr(o->body, "overloaded"))) return V_REFUSED;
    if (o->status < 0) return o->content_events ? V_CUT : V_ERRORED;
    if (o->status != 200) return V_ERRORED;
    if (op->m != MODE_STREAM) return V_SERVED;
    if (o->error_event) return o->content_events ? V_LOST : V_ERRORED;
    if (!o->done || !o->finish || o->completion_tokens < 0) return V_CUT;
    if (o->completion_tokens > op->max_tokens) return V_CUT;
    if (o->completion_tokens < op->max_tokens && !o->finish_stop) return V_CUT;
    if (o->completion_tokens > 0 && !o->content_events) return V_CUT;
    return V_SERVED;
}

static int send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static size_t make_request(const opts *o, long ticket, char *out, size_t cap) {
    char body[512];
    int bl = snprintf(body, sizeof body,
                      "{\"model\":\"%s\",\"prompt\":\"bench request %ld\",\"max_tokens\":%d,"
                      "\"stream\":%s}",
                      o->models[ticket % o->n_models], ticket, o->max_tokens,
                      o->m == MODE_STREAM ? "true,\"stream_options\":{\"include_usage\":true}"
                                          : "false");
    return (size_t)snprintf(out, cap,
                            "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                            bl, body);
}

static void *client(void *arg) {
    shared *s = arg;
    const opts *o = s->o;
    conn *c = malloc(sizeof *c);
    if (!c || conn_open(c, o->port, o->read_timeout_s)) {
        fprintf(stderr, "bench_router: cannot connect to 127.0.0.1:%d\n", o->port);
        atomic_fetch_add(&s->connect_failures, 1);
        free(c);
        return NULL;
    }
    char req[1024];
    for (;;) {
        long t = atomic_fetch_add(&s->next, 1);
        if (t >= o->requests || now_s() - s->t0 > o->time_limit_s) break;
        if (o->m == MODE_LATENCY || (o->m == MODE_STREAM && o->rate_set)) {
            /* open loop: ticket t is due at t / rate */
            double due = s->t0 + (double)t / o->rate, d = due - now_s();
            if (d > 0) {
                struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
                nanosleep(&ts, NULL);
            }
        }
        size_t n = make_request(o, t, req, sizeof req);
        double t1 = now_s();
        outcome r = {.status = -1};
        if (!send_all(c->fd, req, n)) read_response(c, &r);
        double t2 = now_s();
        pool_counts *pc = &s->pools[t % o->n_models];
        verdict v = judge(o, &r);
        atomic_fetch_add(&pc->verdicts[v], 1);
        if (v != V_SERVED && !atomic_flag_test_and_set(&s->first_taken))
            snprintf(s->first, sizeof s->first,
                     "%s: status %d, %ld text events, [DONE] %s, error event %s, "
                     "completion_tokens %ld, body '%.160s'",
                     verdict_names[v], r.status, r.content_events, r.done ? "yes" : "no",
                     r.error_event ? "yes" : "no", r.completion_tokens, r.body);
        atomic_fetch_add(&pc->events, r.events);
        if (v == V_REFUSED && r.retry_after) atomic_fetch_add(&pc->retry_after, 1);
        if (r.status == 429) atomic_fetch_add(&pc->rejected_429, 1);
        if (v == V_SERVED) {
            s->lat[t] = t2 - t1;
            if (r.t_first > 0) s->ttft[t] = r.t_first - t1;
            atomic_fetch_add(&pc->tokens, o->m == MODE_STREAM ? r.completion_tokens : 0);
        } else {
            atomic_fetch_add(&pc->partial, r.content_events);
        }
        if (r.status < 0) { /* the connection's state is unknown: a new one */
            close(c->fd);
            if (conn_open(c, o->port, o->read_timeout_s)) break;
        }
    }
    if (c->fd >= 0) close(c->fd);
    free(c);
    return NULL;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: bench_router --port P [--mode rps|latency|stream] [--conns N]\n"
        "                    [--requests N] [--rate R] [--max-tokens N] [--time-limit S]\n"
        "                    [--model NAME[,NAME...]] [--read-timeout S]\n"
        "Sends POST /v1/completions to sol-router on 127.0.0.1 over keep-alive sockets.\n"
        "  rps      closed loop: each connection sends the next request when the last ended\n"
        "  latency  open loop at --rate requests/s in total; latency percentiles\n"
        "  stream   streaming requests (stream_options.include_usage); a closed loop, or\n"
        "           with --rate an open loop at that many requests/s\n"
        "--model a,b sends request i to the i-th name modulo their number (up to %d) and\n"
        "counts each pool apart (one 'pool=' line each, then the totals).\n"
        "Each response is counted once:\n"
        "  served   200 and, when streamed: [DONE], no error event, a finish_reason, and a\n"
        "           usage chunk whose completion_tokens is max_tokens (or fewer with 'stop')\n"
        "  refused  429, or 503 'overloaded' (the router shed the request before any work)\n"
        "  errored  any other status, or an error event before the first token\n"
        "  lost     an error event after tokens were sent (e.g. the worker died and no\n"
        "           other could take the stream over)\n"
        "  cut      the response ended with no verdict: connection closed, reset or silent for\n"
        "           --read-timeout, or [DONE] with tokens missing and no reason given\n"
        "tokens/s counts the completion tokens of served streams only.\n"
        "Exit status 1 when anything was errored, lost or cut (refusals alone: 0).\n"
        "defaults: --mode rps --conns 32 --requests 20000 --rate 1000 --max-tokens 1\n"
        "          --time-limit 20 --model precise --read-timeout 10\n",
        MAX_POOLS);
}

/* Splits --model's comma list into o->models (the names point into argv's copy). */
static int parse_models(opts *o, char *v) {
    o->n_models = 0;
    for (char *save = NULL, *t = strtok_r(v, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->n_models == MAX_POOLS) {
            fprintf(stderr, "bench_router: --model: at most %d names\n", MAX_POOLS);
            return -1;
        }
        o->models[o->n_models++] = t;
    }
    if (!o->n_models) {
        fprintf(stderr, "bench_router: --model: no name given\n");
        return -1;
    }
    return 0;
}

/* --model A[,B...]: the pool names the tickets cycle through. */
static int model_list(const char *v, void *ctx, sol_err *err) {
    if (parse_models(ctx, (char *)v)) return sol_err_set(err, -EINVAL, "--model: bad list '%s'", v);
    return 0;
}

/* --mode rps|latency|stream. */
static int set_mode(const char *v, void *ctx, sol_err *err) {
    static const char *const names[] = {"rps", "latency", "stream"};
    static const mode modes[] = {MODE_RPS, MODE_LATENCY, MODE_STREAM};
    for (int i = 0; i < 3; i++)
        if (!strcmp(v, names[i])) return *(mode *)ctx = modes[i], 0;
    return sol_err_set(err, -EINVAL, "--mode: expected rps, latency or stream, found '%s'", v);
}

static int parse(int argc, char **argv, opts *o) {
    static char def_model[] = "precise";
    *o = (opts){.m = MODE_RPS,
                .conns = 32,
                .max_tokens = 1,
                .models = {def_model},
                .n_models = 1,
                .requests = 20000,
                .rate = 1000,
                .time_limit_s = 20,
                .read_timeout_s = 10};
    int help = 0, requests = (int)o->requests;
    const sol_arg args[] = {
        {"--port", 0, SOL_ARG_INT, &o->port, 1, 65535, 0, NULL, NULL, NULL},
        {"--conns", 0, SOL_ARG_INT, &o->conns, 1, 4096, 0, NULL, NULL, NULL},
        {"--requests", 0, SOL_ARG_INT, &requests, 1, 10000000, 0, NULL, NULL, NULL},
        {"--model", 0, SOL_ARG_FN, NULL, 0, 0, 0, model_list, o, NULL},
        {"--rate", 0, SOL_ARG_DOUBLE, &o->rate, 0, 1e9, 1, NULL, NULL, &o->rate_set},
        {"--max-tokens", 0, SOL_ARG_INT, &o->max_tokens, 1, 1 << 20, 0, NULL, NULL, NULL},
        {"--time-limit", 0, SOL_ARG_DOUBLE, &o->time_limit_s, 0, 1e6, 1, NULL, NULL, NULL},
        {"--read-timeout", 0, SOL_ARG_INT, &o->read_timeout_s, 1, 3600, 0, NULL, NULL, NULL},
        {"--mode", 0, SOL_ARG_FN, NULL, 0, 0, 0, set_mode, &o->m, NULL},
        {"--help", 'h', SOL_ARG_SWITCH, &help, 0, 0, 0, NULL, NULL, NULL},
    };
    sol_err e = {0};
    int npos = sol_args_parse(args, sizeof args / sizeof args[0], argc, argv, &e);
    if (npos < 0) return fprintf(stderr, "bench_router: %s\n", e.msg), -1;
    if (help) usage(stdout), exit(0);
    if (npos > 0) return fprintf(stderr, "bench_router: unexpected argument %s\n", argv[1]), -1;
    o->requests = requests;
    if (o->port == 0) {
        fprintf(stderr, "bench_router: need --port 1..65535\n");
        return -1;
    }
    if (o->rate_set && o->m == MODE_RPS) {
        fprintf(stderr, "bench_router: --rate applies to --mode latency and stream (rps is a "
                        "closed loop)\n");
        return -1;
    }
    return 0;
}

/* Percentiles of the nonzero slots of v (compacted in place). */
static size_t compact_sorted(double *v, long n) {
    size_t k = 0;
    for (long i = 0; i < n; i++)
        if (v[i] > 0) v[k++] = v[i];
    qsort(v, k, sizeof *v, cmp_d);
    return k;
}

static double pct(const double *v, size_t n, double q) {
    return n ? v[(size_t)((double)n * q)] : 0;
}

/* One line per pool when there are several, then the totals: key=value pairs, read by scripts. */
static void report(const opts *o, shared *s, double el) {
    pool_counts tot = {0};
    for (int p = 0; p < o->n_models; p++) {
        const pool_counts *pc = &s->pools[p];
        for (int v = 0; v < V_COUNT; v++)
            tot.verdicts[v] += atomic_load(&pc->verdicts[v]);
        tot.tokens += atomic_load(&pc->tokens);
        tot.partial += atomic_load(&pc->partial);
        tot.events += atomic_load(&pc->events);
        tot.retry_after += atomic_load(&pc->retry_after);
        tot.rejected_429 += atomic_load(&pc->rejected_429);
        if (o->n_models < 2) continue;
        printf("pool=%s", o->models[p]);
        for (int v = 0; v < V_COUNT; v++)
            printf(" %s=%ld", verdict_names[v], atomic_load(&pc->verdicts[v]));
        printf(" tokens=%ld\n", atomic_load(&pc->tokens));
    }
    long served = tot.verdicts[V_SERVED], bad = 0;
    for (int v = 1; v < V_COUNT; v++)
        bad += tot.verdicts[v];
    size_t n = compact_sorted(s->lat, o->requests);
    static const char *names[] = {"rps", "latency", "stream"};
    /* requests= is the served count; errors= every request not served (refusals included) */
    printf("mode=%s conns=%d requests=%ld", names[o->m], o->conns, served);
    for (int v = 0; v < V_COUNT; v++)
        printf(" %s=%ld", verdict_names[v], tot.verdicts[v]);
    printf(" errors=%ld connect_failures=%ld elapsed=%.2fs requests/s=%.0f p50=%.3fms "
           "p99=%.3fms max=%.3fms",
           bad, atomic_load(&s->connect_failures), el, (double)served / el,
           pct(s->lat, n, 0.5) * 1e3, pct(s->lat, n, 0.99) * 1e3, n ? s->lat[n - 1] * 1e3 : 0);
    if (o->m == MODE_STREAM) {
        /* tokens the served streams received (their usage, checked against max_tokens), and
         * apart the text events of the streams that failed */
        size_t k = compact_sorted(s->ttft, o->requests);
        printf(" tokens=%ld tokens/s=%.0f partial_events=%ld sse_events/s=%.0f ttft_p50=%.3fms "
               "ttft_p99=%.3fms",
               tot.tokens, (double)tot.tokens / el, tot.partial, (double)tot.events / el,
               pct(s->ttft, k, 0.5) * 1e3, pct(s->ttft, k, 0.99) * 1e3);
    }
    printf(" rejected_429=%ld with_retry_after=%ld\n", tot.rejected_429, tot.retry_after);
}

int main(int argc, char **argv) {
    opts o;
    if (parse(argc, argv, &o)) return 2;
    shared s = {.o = &o};
    s.lat = calloc((size_t)o.requests, sizeof *s.lat);
    s.ttft = calloc((size_t)o.requests, sizeof *s.ttft);
    pthread_t *th = calloc((size_t)o.conns, sizeof *th);
    if (!s.lat || !th) {
        fprintf(stderr, "bench_router: out of memory\n");
        return 1;
    }
    s.t0 = now_s();
    for (int i = 0; i < o.conns; i++)
        pthread_create(&th[i], NULL, client, &s);
    for (int i = 0; i < o.conns; i++)
        pthread_join(th[i], NULL);
    double el = now_s() - s.t0;
    report(&o, &s, el);
    if (s.first[0]) fprintf(stderr, "bench_router: first not served: %s\n", s.first);
    long bad = atomic_load(&s.connect_failures);
    for (int p = 0; p < o.n_models; p++)
        bad += atomic_load(&s.pools[p].verdicts[V_ERRORED]) +
               atomic_load(&s.pools[p].verdicts[V_LOST]) + atomic_load(&s.pools[p].verdicts[V_CUT]);
    free(s.lat);
    free(s.ttft);
    free(th);
    return bad ? 1 : 0;
}
