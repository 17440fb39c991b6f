/* zmq_util: every Sol socket is created here so the options the failure model depends on
 * (ARCHITECTURE.md section 5, docs/protocol.md) are set in one place and cannot be forgotten by
 * one actor. Sends are non-blocking because the broker and link actors run one poll loop each:
 * a peer that stops reading must surface as an error, never stall every other peer. */
#include "zmq_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <zmq.h>

int zmq_util_identity_set(zmq_util_identity *id, const char *s, sol_err *e) {
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > SOL_ZMQ_IDENTITY_MAX)
        return sol_err_set(e, -EINVAL, "routing identity is %zu bytes; expected 1..%d", n,
                           SOL_ZMQ_IDENTITY_MAX);
    memcpy(id->bytes, s, n);
    id->len = n;
    return 0;
}

const char *zmq_util_identity_str(const zmq_util_identity *id, char *buf, size_t cap) {
    size_t o = 0;
    if (cap == 0) return buf;
    for (size_t i = 0; i < id->len && o + 5 < cap; i++) {
        uint8_t c = id->bytes[i];
        if (c >= 0x20 && c < 0x7f && c != '\\')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    buf[o] = '\0';
    return buf;
}

/* ---- endpoints ---------------------------------------------------------------------------- */

/* Host part of "tcp://host:port" (brackets of an IPv6 literal removed) into `host`. */
static int tcp_host(const char *endpoint, char *host, size_t cap, int *bracketed) {
    const char *h = endpoint + strlen("tcp://");
    const char *colon = strrchr(h, ':');
    if (!colon || colon == h) return -1;
    size_t n = (size_t)(colon - h);
    *bracketed = h[0] == '[' && n >= 2 && h[n - 1] == ']';
    if (*bracketed) {
        h++;
        n -= 2;
    }
    if (n >= cap) return -1;
    memcpy(host, h, n);
    host[n] = '\0';
    return 0;
}

static int host_is_loopback(const char *host) {
    struct in_addr a4;
    struct in6_addr a6;
    if (strcasecmp(host, "localhost") == 0) return 1;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0; /* "*", interface names, other hostnames: may face the network */
}

int zmq_util_endpoint_is_local(const char *endpoint) {
    if (!endpoint) return 0;
    if (strncmp(endpoint, "inproc://", 9) == 0 || strncmp(endpoint, "ipc://", 6) == 0) return 1;
    if (strncmp(endpoint, "tcp://", 6) != 0) return 0;
    char host[256];
    int bracketed;
    if (tcp_host(endpoint, host, sizeof host, &bracketed) < 0) return 0;
    return host_is_loopback(host);
}

static int wants_ipv6(const char *endpoint) {
    char host[256];
    int bracketed = 0;
    if (strncmp(endpoint, "tcp://", 6) != 0) return 0;
    return tcp_host(endpoint, host, sizeof host, &bracketed) == 0 && bracketed;
}

/* ---- sockets ------------------------------------------------------------------------------ */

static int set_int(void *sock, int option, int value, const char *name, sol_err *e) {
    if (zmq_setsockopt(sock, option, &value, sizeof value) == 0) return 0;
    return sol_err_set(e, -errno, "zmq_setsockopt(%s=%d): %s", name, value, zmq_strerror(errno));
}

static int set_i64(void *sock, int option, int64_t value, const char *name, sol_err *e) {
    if (zmq_setsockopt(sock, option, &value, sizeof value) == 0) return 0;
    return sol_err_set(e, -errno, "zmq_setsockopt(%s=%lld): %s", name, (long long)value,
                       zmq_strerror(errno));
}

/* Options both ends share. */
static int set_common(void *sock, const char *endpoint, sol_err *e) {
    int rc;
    if ((rc = set_int(sock, ZMQ_LINGER, 0, "ZMQ_LINGER", e)) < 0) return rc;
    if ((rc = set_i64(sock, ZMQ_MAXMSGSIZE, SOL_FRAME_MAX_BYTES, "ZMQ_MAXMSGSIZE", e)) < 0)
        return rc;
    if ((rc = set_int(sock, ZMQ_HANDSHAKE_IVL, SOL_ZMQ_HANDSHAKE_MS, "ZMQ_HANDSHAKE_IVL", e)) < 0)
        return rc;
    if (wants_ipv6(endpoint) && (rc = set_int(sock, ZMQ_IPV6, 1, "ZMQ_IPV6", e)) < 0) return rc;
    return 0;
}

static int router_options(void *sock, const char *endpoint, sol_err *e) {
    int rc;
    if ((rc = set_common(sock, endpoint, e)) < 0) return rc;
    if ((rc = set_int(sock, ZMQ_ROUTER_MANDATORY, 1, "ZMQ_ROUTER_MANDATORY", e)) < 0) return rc;
    /* Workers send chunks without blocking and drop them when their queue is full; a dropped
     * final chunk leaves a client waiting forever. No receive limit: the I/O thread keeps draining
     * every worker's connection while the broker catches up (bounded by the requests in flight).
     * Set before bind: listeners copy the options. */
    if ((rc = set_int(sock, ZMQ_RCVHWM, 0, "ZMQ_RCVHWM", e)) < 0) return rc;
    return set_int(sock, ZMQ_ROUTER_HANDOVER, 1, "ZMQ_ROUTER_HANDOVER", e);
}

/* A Z85 key: libzmq tells it from 32 raw bytes by the size, 41 with the NUL. */
static int set_str(void *sock, int opt, const char *v, const char *name, sol_err *e) {
    if (zmq_setsockopt(sock, opt, v, strlen(v) + 1) != 0)
        return sol_err_set(e, -errno, "zmq_setsockopt(%s): %s", name, zmq_strerror(errno));
    return 0;
}

/* CURVE server: its secret key, and every handshake goes to the ZAP handler. libzmq admits any
 * key when no handler answers (ZAP_ENFORCE_DOMAIN, which would fail closed, is a draft option
 * that Debian's libzmq lacks), so the broker starts its handler before it binds and stops it
 * after it closes the socket. */
static int curve_server(void *sock, const curve_pair *c, sol_err *e) {
    int rc;
    if ((rc = set_int(sock, ZMQ_CURVE_SERVER, 1, "ZMQ_CURVE_SERVER", e)) < 0 ||
        (rc = set_str(sock, ZMQ_CURVE_SECRETKEY, c->secret_key.z85, "ZMQ_CURVE_SECRETKEY", e)) < 0)
        return rc;
    if (zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, SOL_ZAP_DOMAIN, strlen(SOL_ZAP_DOMAIN)) != 0)
        return sol_err_set(e, -errno, "zmq_setsockopt(ZMQ_ZAP_DOMAIN): %s", zmq_strerror(errno));
    return 0;
}

int zmq_util_router_bind(void *ctx, const char *endpoint, bool allow_insecure,
                         const curve_pair *curve, void **out, sol_err *e) {
    *out = NULL;
    if (!endpoint || !*endpoint)
        return sol_err_set(e, -EINVAL, "router bind endpoint is empty; expected e.g. %s",
                           "tcp://127.0.0.1:5555");
    if (!curve && !allow_insecure && !zmq_util_endpoint_is_local(endpoint))
        return sol_err_set(e, -EPERM,
                           "refusing to bind %s without CURVE: it is reachable from other "
                           "machines, and without authentication anyone who reaches it can "
                           "register as a worker and read users' prompts; set "
                           "router.workers.curve (sol-keygen makes the keys), bind 127.0.0.1 "
                           "(or [::1], ipc://), or set router.workers.allow_insecure to accept "
                           "the risk",
                           endpoint);
    void *sock = zmq_socket(ctx, ZMQ_ROUTER);
    if (!sock) return sol_err_set(e, -errno, "zmq_socket(ROUTER): %s", zmq_strerror(errno));
    int rc = router_options(sock, endpoint, e);
    if (rc == 0 && curve) rc = curve_server(sock, curve, e);
    if (rc == 0 && zmq_bind(sock, endpoint) != 0)
        rc = sol_err_set(e, -errno, "cannot bind the worker socket to %s: %s", endpoint,
                         zmq_strerror(errno));
    if (rc < 0) {
        zmq_close(sock);
        return rc;
    }
    *out = sock;
    return 0;
}

static int dealer_options(void *sock, const char *endpoint, const char *identity, sol_err *e) {
    int rc;
    if ((rc = set_common(sock, endpoint, e)) < 0) return rc;
    /* Token chunks must not be dropped for a full queue (see router_options). */
    if ((rc = set_int(sock, ZMQ_SNDHWM, 0, "ZMQ_SNDHWM", e)) < 0) return rc;
    if ((rc = set_int(sock, ZMQ_RECONNECT_IVL, SOL_ZMQ_RECONNECT_MS, "ZMQ_RECONNECT_IVL", e)) < 0)
        return rc;
    if ((rc = set_int(sock, ZMQ_RECONNECT_IVL_MAX, SOL_ZMQ_RECONNECT_MAX_MS,
                      "ZMQ_RECONNECT_IVL_MAX", e)) < 0)
        return rc;
    if (!identity) return 0;
    size_t n = strlen(identity);
    /* libzmq reserves routing ids that start with a zero byte, so "" cannot be one. */
    if (n == 0 || n > SOL_ZMQ_IDENTITY_MAX)
        return sol_err_set(e, -EINVAL, "dealer identity is %zu bytes; expected 1..%d", n,
                           SOL_ZMQ_IDENTITY_MAX);
    if (zmq_setsockopt(sock, ZMQ_ROUTING_ID, identity, n) != 0)
        return sol_err_set(e, -errno, "zmq_setsockopt(ZMQ_ROUTING_ID=%s): %s", identity,
                           zmq_strerror(errno));
    return 0;
}

int zmq_util_dealer_connect(void *ctx, const char *endpoint, const char *identity,
                            const curve_pair *curve, const curve_key *server_key, void **out,
                            sol_err *e) {
    *out = NULL;
    if (!endpoint || !*endpoint)
        return sol_err_set(e, -EINVAL, "router endpoint is empty; expected e.g. %s",
                           "tcp://127.0.0.1:5555");
    if (curve && !server_key) return sol_err_set(e, -EINVAL, "CURVE needs the router's public key");
    void *sock = zmq_socket(ctx, ZMQ_DEALER);
    if (!sock) return sol_err_set(e, -errno, "zmq_socket(DEALER): %s", zmq_strerror(errno));
    int rc = dealer_options(sock, endpoint, identity, e);
    if (rc == 0 && curve &&
        ((rc = set_str(sock, ZMQ_CURVE_SERVERKEY, server_key->z85, "ZMQ_CURVE_SERVERKEY", e)) < 0 ||
         (rc = set_str(sock, ZMQ_CURVE_PUBLICKEY, curve->public_key.z85, "ZMQ_CURVE_PUBLICKEY",
                       e)) < 0 ||
         (rc = set_str(sock, ZMQ_CURVE_SECRETKEY, curve->secret_key.z85, "ZMQ_CURVE_SECRETKEY",
                       e)) < 0))
        zmq_close(sock), sock = NULL;
    if (!sock) return rc;
    if (rc == 0 && zmq_connect(sock, endpoint) != 0)
        rc = sol_err_set(e, -errno, "cannot connect to router at %s: %s", endpoint,
                         zmq_strerror(errno));
    if (rc < 0) {
        zmq_close(sock);
        return rc;
    }
    *out = sock;
    return 0;
}

int zmq_util_last_endpoint(void *sock, char *buf, size_t cap, sol_err *e) {
    size_t n = cap;
    if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, buf, &n) != 0)
        return sol_err_set(e, -errno, "zmq_getsockopt(ZMQ_LAST_ENDPOINT): %s", zmq_strerror(errno));
    return 0;
}

void zmq_util_close(void *sock) {
    if (sock) zmq_close(sock);
}

/* ---- send --------------------------------------------------------------------------------- */

static int send_failed(int err, const zmq_util_identity *to, sol_err *e) {
    char who[64] = "the router";
    if (to) {
        char id[48];
        snprintf(who, sizeof who, "worker '%s'", zmq_util_identity_str(to, id, sizeof id));
    }
    if (err == EHOSTUNREACH)
        return sol_err_set(e, -EHOSTUNREACH,
                           "%s is gone: no connected peer has that identity (dropped by "
                           "ZMQ_ROUTER_MANDATORY)",
                           who);
    if (err == EAGAIN)
        return sol_err_set(e, -EAGAIN,
                           "send queue to %s is full (high-water mark reached): it is not reading",
                           who);
    return sol_err_set(e, -err, "sending to %s: %s", who, zmq_strerror(err));
}

static int send_identity(void *sock, const zmq_util_identity *to, sol_err *e) {
    if (!to || to->len == 0 || to->len > SOL_ZMQ_IDENTITY_MAX)
        return sol_err_set(e, -EINVAL, "router send needs a 1..%d byte identity",
                           SOL_ZMQ_IDENTITY_MAX);
    if (zmq_send(sock, to->bytes, to->len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return send_failed(errno, to, e);
    return 0;
}

/* Packs straight into the zmq message buffer: no copy and no allocation besides libzmq's own. */
static int send_envelope(void *sock, const zmq_util_identity *to, const Sol__Envelope *env,
                         sol_err *e) {
    size_t n;
    int rc = frame_measure(env, &n, e);
    if (rc < 0) return rc;
    if (to && (rc = send_identity(sock, to, e)) < 0) return rc;
    zmq_msg_t msg;
    if (zmq_msg_init_size(&msg, n) != 0)
        return sol_err_set(e, -ENOMEM, "out of memory for a %zu-byte frame", n);
    frame_pack(env, zmq_msg_data(&msg));
    if (zmq_msg_send(&msg, sock, ZMQ_DONTWAIT) < 0) {
        int err = errno;
        zmq_msg_close(&msg);
        return send_failed(err, to, e);
    }
    return 0;
}

int zmq_util_router_send(void *sock, const zmq_util_identity *to, const Sol__Envelope *env,
                         sol_err *e) {
    if (!to) return sol_err_set(e, -EINVAL, "router send needs an identity");
    return send_envelope(sock, to, env, e);
}

static int check_frame_len(size_t len, sol_err *e) {
    if (len == 0 || len > SOL_FRAME_MAX_BYTES)
        return sol_err_set(e, -EMSGSIZE, "frame is %zu bytes; expected 1..%u", len,
                           SOL_FRAME_MAX_BYTES);
    return 0;
}

int zmq_util_router_send_bytes(void *sock, const zmq_util_identity *to, const void *frame,
                               size_t len, sol_err *e) {
    int rc = check_frame_len(len, e);
    if (rc == 0) rc = send_identity(sock, to, e);
    if (rc < 0) return rc;
    if (zmq_send(sock, frame, len, ZMQ_DONTWAIT) < 0) return send_failed(errno, to, e);
    return 0;
}

int zmq_util_dealer_send_bytes(void *sock, const void *frame, size_t len, sol_err *e) {
    int rc = check_frame_len(len, e);
    if (rc < 0) return rc;
    if (zmq_send(sock, frame, len, ZMQ_DONTWAIT) < 0) return send_failed(errno, NULL, e);
    return 0;
}

int zmq_util_dealer_send(void *sock, const Sol__Envelope *env, sol_err *e) {
    return send_envelope(sock, NULL, env, e);
}

/* ---- receive ------------------------------------------------------------------------------ */

static int recv_failed(int err, sol_err *e) {
    if (err == EAGAIN) return sol_err_set(e, -EAGAIN, "no message waiting");
    return sol_err_set(e, -err, "receiving: %s", zmq_strerror(err));
}

static int more_parts(void *sock) {
    int more = 0;
    size_t sz = sizeof more;
    return zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more;
}

/* Discard the rest of a multipart message; returns how many parts were dropped. Parts of one
 * message arrive together, so this never waits. */
static int drain_parts(void *sock) {
    int dropped = 0;
    while (more_parts(sock)) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        int rc = zmq_msg_recv(&m, sock, ZMQ_DONTWAIT);
        zmq_msg_close(&m);
        if (rc < 0) break;
        dropped++;
    }
    return dropped;
}

/* Receive the frame part (already known to be the last one expected) and decode it. */
static int recv_frame(void *sock, int flags, int parts_before, Sol__Envelope **out, sol_err *e) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, flags) < 0) {
        int err = errno;
        zmq_msg_close(&m);
        return recv_failed(err, e);
    }
    int extra = drain_parts(sock);
    int rc;
    if (extra > 0)
        rc = sol_err_set(e, -EPROTO, "message has %d parts; expected %d (one Envelope frame)",
                         parts_before + 1 + extra, parts_before + 1);
    else
        rc = frame_decode(zmq_msg_data(&m), zmq_msg_size(&m), out, e);
    zmq_msg_close(&m);
    return rc;
}

int zmq_util_router_recv(void *sock, int flags, zmq_util_identity *from, Sol__Envelope **out,
                         sol_err *e) {
    *out = NULL;
    from->len = 0;
    zmq_msg_t id;
    zmq_msg_init(&id);
    if (zmq_msg_recv(&id, sock, flags) < 0) {
        int err = errno;
        zmq_msg_close(&id);
        return recv_failed(err, e);
    }
    size_t n = zmq_msg_size(&id);
    if (n > SOL_ZMQ_IDENTITY_MAX) n = SOL_ZMQ_IDENTITY_MAX;
    memcpy(from->bytes, zmq_msg_data(&id), n);
    from->len = n;
    zmq_msg_close(&id);
    if (!more_parts(sock))
        return sol_err_set(e, -EPROTO, "message has only the identity part; expected 2 parts");
    return recv_frame(sock, ZMQ_DONTWAIT, 1, out, e);
}

int zmq_util_dealer_recv(void *sock, int flags, Sol__Envelope **out, sol_err *e) {
    *out = NULL;
    return recv_frame(sock, flags, 0, out, e);
}
