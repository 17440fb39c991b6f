/* resolver: getaddrinfo on its own thread, since a lookup can block for seconds and the link
 * thread must keep heartbeating. Kubernetes gives a headless Service one A record per ready pod,
 * so re-resolving it is how a worker learns of a router replica that started, or one that left. */
#include "resolver.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "clock.h"
#include "log.h"

typedef char endpoint_t[RESOLVER_ENDPOINT_MAX];

struct router_resolver {
    endpoint_t *names;
    size_t n_names;
    int interval_ms;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    endpoint_t eps[RESOLVER_MAX]; /* guarded by mu */
    size_t n_eps;
    uint64_t gen;
};

/* host and port of tcp://HOST:PORT (host without IPv6 brackets); false when not that shape. */
static bool split(const char *ep, char *host, size_t hcap, char *port, size_t pcap) {
    if (strncmp(ep, "tcp://", 6)) return false;
    const char *h = ep + 6, *colon = strrchr(h, ':');
    if (!colon || !colon[1]) return false;
    size_t hl = (size_t)(colon - h);
    if (hl && h[0] == '[' && h[hl - 1] == ']') h++, hl -= 2;
    if (!hl || hl >= hcap || strlen(colon + 1) >= pcap) return false;
    memcpy(host, h, hl), host[hl] = '\0';
    snprintf(port, pcap, "%s", colon + 1);
    return true;
}

bool resolver_is_name(const char *endpoint) {
    char host[256], port[16];
    unsigned char buf[16];
    if (!split(endpoint, host, sizeof host, port, sizeof port)) return false;
    return strcmp(host, "*") && inet_pton(AF_INET, host, buf) != 1 &&
           inet_pton(AF_INET6, host, buf) != 1;
}

static int cmp_ep(const void *a, const void *b) {
    return strcmp(a, b);
}

/* SOL_TEST_RESOLVE_FILE (tests only, as Redis's DEBUG commands): a file of lines
 * "NAME ADDRESS [ADDRESS ...]" answering for NAME instead of DNS, read at every lookup, so a test
 * can make a name gain or lose router replicas on one machine (127.0.0.1, 127.0.0.2, ...). */
static int test_lookup(const char *path, const char *host, const char *port, endpoint_t *out,
                       size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024];
    int n = -1;
    while (n < 0 && fgets(line, sizeof line, f)) {
        char *save = NULL, *name = strtok_r(line, " \t\r\n", &save);
        if (!name || strcmp(name, host)) continue;
        n = 0;
        for (char *a; (a = strtok_r(NULL, " \t\r\n", &save)) && (size_t)n < cap;)
            snprintf(out[n++], RESOLVER_ENDPOINT_MAX, "tcp://%.64s:%s", a, port);
    }
    fclose(f);
    if (n <= 0) return n;
    qsort(out, (size_t)n, sizeof *out, cmp_ep);
    int u = 1;
    for (int i = 1; i < n; i++)
        if (strcmp(out[i], out[u - 1])) memmove(out[u++], out[i], sizeof *out);
    return u;
}

int resolver_lookup(const char *endpoint, endpoint_t *out, size_t cap, sol_err *e) {
    char host[256], port[16];
    if (!split(endpoint, host, sizeof host, port, sizeof port))
        return sol_err_set(e, -EINVAL, "%s: expected tcp://HOST:PORT", endpoint);
    const char *test = getenv("SOL_TEST_RESOLVE_FILE");
    int t = test && *test ? test_lookup(test, host, port, out, cap) : -1;
    if (t >= 0) return t;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc) return sol_err_set(e, -EHOSTUNREACH, "%s: %s", host, gai_strerror(rc));
    size_t n = 0;
    for (struct addrinfo *a = res; a && n < cap; a = a->ai_next) {
        char ip[INET6_ADDRSTRLEN];
        const void *src = a->ai_family == AF_INET
                              ? (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr
                              : (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr;
        if ((a->ai_family != AF_INET && a->ai_family != AF_INET6) ||
            !inet_ntop(a->ai_family, src, ip, sizeof ip))
            continue;
        snprintf(out[n], RESOLVER_ENDPOINT_MAX,
                 a->ai_family == AF_INET6 ? "tcp://[%s]:%s" : "tcp://%s:%s", ip, port);
        bool dup = false;
        for (size_t k = 0; k < n && !dup; k++)
            dup = !strcmp(out[k], out[n]);
        n += !dup;
    }
    freeaddrinfo(res);
    qsort(out, n, sizeof *out, cmp_ep);
    return (int)n;
}

/* One round over every name: the union of their addresses; false when every lookup failed. */
static bool resolve_all(router_resolver *r, endpoint_t *all, size_t *n_all, char *why,
                        size_t wcap) {
    *n_all = 0;
    bool any = false;
    for (size_t i = 0; i < r->n_names; i++) {
        endpoint_t got[RESOLVER_MAX];
        sol_err e = {0};
        int n = resolver_lookup(r->names[i], got, RESOLVER_MAX, &e);
        if (n < 0) {
            snprintf(why, wcap, "%.200s", e.msg);
            continue;
        }
        any = true;
        for (int k = 0; k < n && *n_all < RESOLVER_MAX; k++)
            memcpy(all[(*n_all)++], got[k], sizeof got[k]);
    }
    qsort(all, *n_all, sizeof *all, cmp_ep);
    return any;
}

static void *resolver_main(void *arg) {
    router_resolver *r = arg;
    char last_err[256] = "";
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        pthread_mutex_unlock(&r->mu);
        endpoint_t all[RESOLVER_MAX];
        size_t n = 0;
        char why[256] = "";
        bool ok = resolve_all(r, all, &n, why, sizeof why);
        if (!ok && strcmp(why, last_err)) LOG_WARN("link", "router lookup failed: %s", why);
        snprintf(last_err, sizeof last_err, "%s", ok ? "" : why);
        pthread_mutex_lock(&r->mu);
        if (ok && (n != r->n_eps || memcmp(all, r->eps, n * sizeof *all))) {
            memcpy(r->eps, all, n * sizeof *all);
            r->n_eps = n;
            r->gen++;
        }
        struct timespec ts = sol_deadline_ms(ok ? (uint64_t)r->interval_ms : 1000);
        if (!r->stop) pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int router_resolver_new(const char *const *endpoints, size_t n, int interval_ms,
                        router_resolver **out, sol_err *e) {
    *out = NULL;
    router_resolver *r = calloc(1, sizeof *r);
    if (!r || !(r->names = calloc(n ? n : 1, sizeof *r->names))) {
        free(r);
        return sol_err_set(e, -ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        if (resolver_is_name(endpoints[i]))
            snprintf(r->names[r->n_names++], RESOLVER_ENDPOINT_MAX, "%s", endpoints[i]);
    r->interval_ms = interval_ms > 0 ? interval_ms : 5000;
    pthread_mutex_init(&r->mu, NULL);
    sol_cond_init(&r->cv);
    if (pthread_create(&r->thread, NULL, resolver_main, r)) {
        pthread_mutex_destroy(&r->mu), pthread_cond_destroy(&r->cv);
        free(r->names), free(r);
        return sol_err_set(e, -EAGAIN, "cannot start the router resolver thread");
    }
    *out = r;
    return 0;
}

void router_resolver_free(router_resolver *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->names);
    free(r);
}

bool router_resolver_take(router_resolver *r, uint64_t *gen, endpoint_t *eps, size_t *n) {
    pthread_mutex_lock(&r->mu);
    bool changed = r->gen != *gen;
    if (changed) {
        memcpy(eps, r->eps, r->n_eps * sizeof *eps);
        *n = r->n_eps;
        *gen = r->gen;
    }
    pthread_mutex_unlock(&r->mu);
    return changed;
}
