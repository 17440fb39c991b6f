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
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define BUF_BYTES (1 << 16)

typedef enum { MODE_RPS, MODE_LATENCY, MODE_STREAM } mode;

typedef struct opts {
    mode m;
    int port, conns, max_tokens;
    const char *model; /* the model (pool) name sent */
    long requests;     /* total, all connections */
    double rate;       /* latency mode, and stream mode when given: requests/s, all connections */
    int rate_set;      /* --rate given: stream mode runs an open loop too */
    double time_limit_s;
    int read_timeout_s; /* a response silent this long counts as broken */
} opts;

typedef struct shared {
    const opts *o;
    atomic_long next; /* request tickets */
    atomic_long done, tokens, errors;
    atomic_long http_errors, broken; /* errors: a non-200 status, or no complete response */
    atomic_long rejected, rejected_retry_after; /* 429s, and those with a Retry-After */
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

/* Counts "data: {" event starts across reads (the pattern may straddle chunk boundaries). */
typedef struct counter {
    size_t matched;
    long events;
} counter;

static void count_bytes(counter *k, int b) {
    static const char pat[] = "data: {";
    if (b == pat[k->matched]) {
        if (++k->matched == sizeof pat - 1) {
            k->events++;
            k->matched = 0;
        }
    } else {
        k->matched = b == pat[0];
    }
}

/* Read one full response (Content-Length or chunked). Returns the HTTP status, -1 on error; adds
 * the SSE data events to *events, sets *t_first when the first one arrived (0: none) and
 * *retry_after when the response carried a Retry-After header. */
static int read_response(conn *c, long *events, double *t_first, int *retry_after) {
    *t_first = 0;
    *retry_after = 0;
    char line[1024];
    if (read_line(c, line, sizeof line) < 12) return -1;
    int status = atoi(line + 9);
    long clen = -1;
    int chunked = 0;
    for (;;) {
        long n = read_line(c, line, sizeof line);
        if (n < 0) return -1;
        if (n == 0) break;
        if (!strncasecmp(line, "content-length:", 15)) clen = atol(line + 15);
        if (!strncasecmp(line, "transfer-encoding:", 18) && strstr(line, "chunked")) chunked = 1;
        if (!strncasecmp(line, "retry-after:", 12)) *retry_after = 1;
    }
    counter k = {0};
    if (!chunked) {
        for (long i = 0; i < clen; i++)
            if (next_byte(c) < 0) return -1;
        return status;
    }
    for (;;) {
        if (read_line(c, line, sizeof line) < 0) return -1;
        long sz = strtol(line, NULL, 16);
        if (sz == 0) {
            if (read_line(c, line, sizeof line) < 0) return -1; /* final CRLF */
            break;
        }
        for (long i = 0; i < sz; i++) {
            int b = next_byte(c);
            if (b < 0) return -1;
            count_bytes(&k, b);
            if (k.events == 1 && !*t_first) *t_first = now_s();
        }
        if (read_line(c, line, sizeof line) < 0) return -1;
    }
    *events += k.events;
    return status;
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
                      o->model, ticket, o->max_tokens, o->m == MODE_STREAM ? "true" : "false");
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
        atomic_fetch_add(&s->errors, 1);
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
        long ev = 0;
        double t_first = 0;
        int retry_after = 0;
        int st = send_all(c->fd, req, n) ? -1 : read_response(c, &ev, &t_first, &retry_after);
        double t2 = now_s();
        if (st == 429) {
            atomic_fetch_add(&s->rejected, 1);
            if (retry_after) atomic_fetch_add(&s->rejected_retry_after, 1);
        }
        if (st != 200) {
            atomic_fetch_add(&s->errors, 1);
            atomic_fetch_add(st < 0 ? &s->broken : &s->http_errors, 1);
            if (st < 0) { /* reconnect once the stream broke */
                close(c->fd);
                if (conn_open(c, o->port, o->read_timeout_s)) break;
            }
            continue;
        }
        s->lat[t] = t2 - t1;
        if (t_first > 0) s->ttft[t] = t_first - t1;
        atomic_fetch_add(&s->done, 1);
        atomic_fetch_add(&s->tokens, ev);
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
    fprintf(f,
            "usage: bench_router --port P [--mode rps|latency|stream] [--conns N]\n"
            "                    [--requests N] [--rate R] [--max-tokens N] [--time-limit S]\n"
            "                    [--model NAME] [--read-timeout S]\n"
            "Sends POST /v1/completions to sol-router on 127.0.0.1 over keep-alive sockets.\n"
            "  rps      closed loop: each connection sends the next request when the last ended\n"
            "  latency  open loop at --rate requests/s in total; latency percentiles\n"
            "  stream   streaming requests; counts data events (tokens) per second; a closed\n"
            "           loop, or with --rate an open loop at that many requests/s\n"
            "defaults: --mode rps --conns 32 --requests 20000 --rate 1000 --max-tokens 1\n"
            "          --time-limit 20 --model precise --read-timeout 10 (a response silent that\n"
            "          long is counted as broken: errors = http_errors + broken)\n");
}

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){MODE_RPS, 0, 32, 1, "precise", 20000, 1000, 0, 20, 10};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (!v) {
            fprintf(stderr, "bench_router: %s needs a value (or is unknown)\n", a);
            return -1;
        }
        i++;
        if (!strcmp(a, "--port"))
            o->port = atoi(v);
        else if (!strcmp(a, "--conns"))
            o->conns = atoi(v);
        else if (!strcmp(a, "--requests"))
            o->requests = atol(v);
        else if (!strcmp(a, "--model"))
            o->model = v;
        else if (!strcmp(a, "--rate"))
            o->rate = atof(v), o->rate_set = 1;
        else if (!strcmp(a, "--max-tokens"))
            o->max_tokens = atoi(v);
        else if (!strcmp(a, "--time-limit"))
            o->time_limit_s = atof(v);
        else if (!strcmp(a, "--read-timeout"))
            o->read_timeout_s = atoi(v);
        else if (!strcmp(a, "--mode")) {
            if (!strcmp(v, "rps"))
                o->m = MODE_RPS;
            else if (!strcmp(v, "latency"))
                o->m = MODE_LATENCY;
            else if (!strcmp(v, "stream"))
                o->m = MODE_STREAM;
            else {
                fprintf(stderr,
                        "bench_router: --mode: expected rps, latency or stream, found '%s'\n", v);
                return -1;
            }
        } else {
            fprintf(stderr, "bench_router: unknown option %s (try --help)\n", a);
            return -1;
        }
    }
    if (o->port <= 0 || o->port > 65535 || o->conns < 1 || o->conns > 4096 || o->requests < 1 ||
        o->requests > 10000000 || o->rate <= 0 || o->max_tokens < 1 || o->time_limit_s <= 0 ||
        o->read_timeout_s < 1) {
        fprintf(stderr, "bench_router: need --port 1..65535, --conns 1..4096, --requests "
                        "1..10000000, positive --rate, --max-tokens, --time-limit\n");
        return -1;
    }
    if (o->rate_set && o->m == MODE_RPS) {
        fprintf(stderr, "bench_router: --rate applies to --mode latency and stream (rps is a "
                        "closed loop)\n");
        return -1;
    }
    return 0;
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
    long done = atomic_load(&s.done);
    size_t n = 0;
    for (long i = 0; i < o.requests; i++)
        if (s.lat[i] > 0) s.lat[n++] = s.lat[i];
    qsort(s.lat, n, sizeof *s.lat, cmp_d);
    double p50 = n ? s.lat[n / 2] : 0, p99 = n ? s.lat[(size_t)((double)n * 0.99)] : 0;
    static const char *names[] = {"rps", "latency", "stream"};
    printf("mode=%s conns=%d requests=%ld errors=%ld http_errors=%ld broken=%ld elapsed=%.2fs "
           "requests/s=%.0f p50=%.3fms p99=%.3fms max=%.3fms",
           names[o.m], o.conns, done, atomic_load(&s.errors), atomic_load(&s.http_errors),
           atomic_load(&s.broken), el, (double)done / el, p50 * 1e3, p99 * 1e3,
           n ? s.lat[n - 1] * 1e3 : 0);
    /* every request runs to max_tokens (sim workers ignore end of sequence); a worker may pack
     * several tokens into one chunk, so SSE events can be fewer than tokens */
    if (o.m == MODE_STREAM)
        printf(" tokens/s=%.0f sse_events/s=%.0f", (double)done * o.max_tokens / el,
               (double)atomic_load(&s.tokens) / el);
    if (o.m == MODE_STREAM) { /* time to the first event of the requests that were served */
        size_t k = 0;
        for (long i = 0; i < o.requests; i++)
            if (s.ttft[i] > 0) s.ttft[k++] = s.ttft[i];
        qsort(s.ttft, k, sizeof *s.ttft, cmp_d);
        printf(" ttft_p50=%.3fms ttft_p99=%.3fms", k ? s.ttft[k / 2] * 1e3 : 0,
               k ? s.ttft[(size_t)((double)k * 0.99)] * 1e3 : 0);
    }
    printf(" rejected_429=%ld with_retry_after=%ld", atomic_load(&s.rejected),
           atomic_load(&s.rejected_retry_after));
    printf("\n");
    free(s.lat);
    free(s.ttft);
    free(th);
    return atomic_load(&s.errors) ? 1 : 0;
}
