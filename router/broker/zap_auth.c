/* zap_auth: one thread answering libzmq's ZAP requests on inproc://zeromq.zap.01.
 *
 * Why a directory read at every handshake: workers connect rarely (at start and after a
 * reconnect), so the cost is nothing, and an operator rotates or revokes a worker's key by
 * adding or deleting its .pub file, without restarting the router. A revoked worker keeps its
 * current connection until it reconnects; restart it (or the router) to cut it off at once. */
#include "zap_auth.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "curve_keys.h"
#include "log.h"
#include "zmq_util.h"

#define MOD "zap"
#define ZAP_FRAMES 7          /* version, request id, domain, address, identity, mechanism, key */
#define LOG_FIRST_REFUSALS 20 /* then every 100th: a rogue peer must not flood the log */

struct zap_auth {
    void *sock;
    char *dir;
    pthread_t thread;
    atomic_bool stop;
    atomic_uint_fast64_t admitted, refused;
};

typedef struct zap_msg {
    zmq_msg_t part[ZAP_FRAMES];
    int n;
} zap_msg;

static int recv_request(void *sock, zap_msg *m) {
    m->n = 0;
    int more = 1;
    while (more) {
        zmq_msg_t tmp;
        zmq_msg_init(&tmp);
        if (zmq_msg_recv(&tmp, sock, 0) < 0) {
            zmq_msg_close(&tmp);
            return -1;
        }
        more = zmq_msg_more(&tmp);
        if (m->n < ZAP_FRAMES)
            m->part[m->n++] = tmp;
        else
            zmq_msg_close(&tmp), m->n = ZAP_FRAMES + 1; /* too many: refused below */
    }
    return 0;
}

static void close_request(zap_msg *m) {
    for (int i = 0; i < m->n && i < ZAP_FRAMES; i++)
        zmq_msg_close(&m->part[i]);
}

static bool part_is(zap_msg *m, int i, const char *s) {
    return zmq_msg_size(&m->part[i]) == strlen(s) &&
           !memcmp(zmq_msg_data(&m->part[i]), s, strlen(s));
}

static void send_part(void *sock, const void *p, size_t n, bool more) {
    zmq_send(sock, p, n, more ? ZMQ_SNDMORE : 0);
}

static void reply(void *sock, zap_msg *m, const char *code, const char *text, const char *user) {
    send_part(sock, "1.0", 3, true);
    send_part(sock, zmq_msg_data(&m->part[1]), zmq_msg_size(&m->part[1]), true);
    send_part(sock, code, strlen(code), true);
    send_part(sock, text, strlen(text), true);
    send_part(sock, user, strlen(user), true);
    send_part(sock, "", 0, false);
}

/* 200 with the key's file name as user id, or 400 with the reason. */
static void decide(zap_auth *z, zap_msg *m) {
    char addr[64] = "?", name[256] = "", bad[256] = "", why[400];
    curve_key key = {{0}};
    if (m->n >= 4)
        snprintf(addr, sizeof addr, "%.*s", (int)zmq_msg_size(&m->part[3]),
                 (const char *)zmq_msg_data(&m->part[3]));
    sol_err e = {0};
    if (m->n != ZAP_FRAMES || !part_is(m, 0, "1.0"))
        snprintf(why, sizeof why, "a malformed ZAP request");
    else if (!part_is(m, 2, SOL_ZAP_DOMAIN) || !part_is(m, 5, "CURVE") ||
             zmq_msg_size(&m->part[6]) != 32)
        snprintf(why, sizeof why, "not a CURVE handshake of domain %s", SOL_ZAP_DOMAIN);
    else if (!zmq_z85_encode(key.z85, zmq_msg_data(&m->part[6]), 32))
        snprintf(why, sizeof why, "a key that cannot be encoded");
    else if (curve_authorized(z->dir, &key, name, sizeof name, bad, sizeof bad, &e) == 0) {
        uint64_t n = atomic_fetch_add(&z->admitted, 1) + 1;
        LOG_INFO(MOD, "worker key %s (%s.pub) admitted from %s (%llu admitted)", key.z85, name,
                 addr, (unsigned long long)n);
        if (m->n >= 2) reply(z->sock, m, "200", "OK", name);
        return;
    } else
        snprintf(why, sizeof why, "%.390s", e.msg);
    uint64_t n = atomic_fetch_add(&z->refused, 1) + 1;
    if (n <= LOG_FIRST_REFUSALS || n % 100 == 0)
        LOG_WARN(MOD, "refused a worker connection from %s: %s (%llu refused)%s%s", addr, why,
                 (unsigned long long)n, bad[0] ? "; also skipped " : "", bad);
    if (m->n >= 2) reply(z->sock, m, "400", "unknown key", "");
}

static void *zap_main(void *arg) {
    zap_auth *z = arg;
    zmq_pollitem_t it = {z->sock, 0, ZMQ_POLLIN, 0};
    while (!atomic_load(&z->stop)) {
        if (zmq_poll(&it, 1, 100) <= 0 || !(it.revents & ZMQ_POLLIN)) continue;
        zap_msg m;
        if (recv_request(z->sock, &m)) continue;
        decide(z, &m);
        close_request(&m);
    }
    return NULL;
}

int zap_auth_new(void *zctx, const char *authorized_dir, zap_auth **out, sol_err *e) {
    *out = NULL;
    int n = curve_count_authorized(authorized_dir, e);
    if (n < 0) return n;
    zap_auth *z = calloc(1, sizeof *z);
    if (!z || !(z->dir = strdup(authorized_dir))) {
        free(z);
        return sol_err_set(e, -ENOMEM, "out of memory");
    }
    z->sock = zmq_socket(zctx, ZMQ_REP);
    int linger = 0;
    if (!z->sock || zmq_setsockopt(z->sock, ZMQ_LINGER, &linger, sizeof linger) ||
        zmq_bind(z->sock, "inproc://zeromq.zap.01") != 0) {
        int rc = sol_err_set(e, -errno, "ZAP handler: %s", zmq_strerror(errno));
        if (z->sock) zmq_close(z->sock);
        free(z->dir), free(z);
        return rc;
    }
    if (pthread_create(&z->thread, NULL, zap_main, z)) {
        zmq_close(z->sock);
        free(z->dir), free(z);
        return sol_err_set(e, -EAGAIN, "ZAP handler: cannot start its thread");
    }
    LOG_INFO(MOD, "CURVE: admitting the %d worker key%s in %s", n, n == 1 ? "" : "s",
             authorized_dir);
    *out = z;
    return 0;
}

void zap_auth_free(zap_auth *z) {
    if (!z) return;
    atomic_store(&z->stop, true);
    pthread_join(z->thread, NULL);
    zmq_close(z->sock);
    free(z->dir);
    free(z);
}

void zap_auth_counts(zap_auth *z, uint64_t *admitted, uint64_t *refused) {
    *admitted = atomic_load(&z->admitted);
    *refused = atomic_load(&z->refused);
}
