/* zmq_util: ZeroMQ sockets configured the way Sol's failure model needs (ROUTER_MANDATORY, size
 * cap, handshake timeout, reconnect backoff, loopback-only binds) and one Envelope per message. */
#ifndef SOL_ZMQ_UTIL_H
#define SOL_ZMQ_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "curve_keys.h"
#include "err.h"
#include "frame.h"

/* A peer that has not finished the ZMTP handshake by then is dropped (libzmq's default is 30 s,
 * long enough for a slow-loris peer to pin a connection). */
#define SOL_ZMQ_HANDSHAKE_MS 5000
/* Paranoid Pirate reconnect backoff: 1 s doubling up to 32 s (libzmq doubles for us). */
#define SOL_ZMQ_RECONNECT_MS 1000
#define SOL_ZMQ_RECONNECT_MAX_MS 32000
/* ZMTP routing ids are 1..255 bytes. */
#define SOL_ZMQ_IDENTITY_MAX 255

/* A ROUTER-side peer address: the routing id of a DEALER (its worker_id when it set one). */
typedef struct zmq_util_identity {
    size_t len;
    uint8_t bytes[SOL_ZMQ_IDENTITY_MAX];
} zmq_util_identity;

/* Fill `id` from a string (a worker_id); -EINVAL when empty or longer than 255 bytes. */
int zmq_util_identity_set(zmq_util_identity *id, const char *s, sol_err *e);

/* 1 when binding `endpoint` is reachable only from this machine (inproc://, ipc://, tcp on
 * 127.0.0.0/8, [::1] or localhost), else 0. */
int zmq_util_endpoint_is_local(const char *endpoint);

/* The ZAP domain the router's CURVE handshakes are authorized in (zap_auth.h). */
#define SOL_ZAP_DOMAIN "sol"

/* Create a ROUTER socket on `ctx` and bind it: ROUTER_MANDATORY (unroutable sends fail instead
 * of vanishing), ROUTER_HANDOVER (a restarted worker with the same id takes over its old slot),
 * MAXMSGSIZE = SOL_FRAME_MAX_BYTES, HANDSHAKE_IVL, LINGER 0. With `curve` (the router's key
 * pair) the socket is a CURVE server whose peers a ZAP handler for SOL_ZAP_DOMAIN must admit;
 * start that handler first and keep it until the socket is closed (libzmq admits every key when
 * no handler answers). Without it a
 * non-loopback endpoint is refused with -EPERM unless `allow_insecure` (plain ZMTP: anyone who
 * reaches the port can register as a worker). `endpoint` may use an ephemeral port
 * ("tcp://127.0.0.1:*"); zmq_util_last_endpoint tells which one was chosen. The caller owns *out
 * and closes it with zmq_util_close. */
int zmq_util_router_bind(void *ctx, const char *endpoint, bool allow_insecure,
                         const curve_pair *curve, void **out, sol_err *e);

/* Create a DEALER socket on `ctx` and connect it: routing id `identity` (NULL: libzmq picks one),
 * RECONNECT_IVL 1 s, RECONNECT_IVL_MAX 32 s, MAXMSGSIZE, HANDSHAKE_IVL, LINGER 0; with `curve`
 * (the worker's pair) a CURVE client of the router whose public key is `server_key`. The
 * connection is made in the background; sends queue until it is up. Caller closes *out. */
int zmq_util_dealer_connect(void *ctx, const char *endpoint, const char *identity,
                            const curve_pair *curve, const curve_key *server_key, void **out,
                            sol_err *e);

/* The endpoint a socket last bound ("tcp://127.0.0.1:41234"). */
int zmq_util_last_endpoint(void *sock, char *buf, size_t cap, sol_err *e);

/* zmq_close; NULL is a no-op. */
void zmq_util_close(void *sock);

/* Sends never block: -EAGAIN means the peer's queue is full (it is not reading).
 * ROUTER: [identity, frame]. -EHOSTUNREACH when no connected peer has that identity (the worker
 * is gone); nothing is sent then. The envelope is validated and size-checked first. */
int zmq_util_router_send(void *sock, const zmq_util_identity *to, const Sol__Envelope *env,
                         sol_err *e);
/* ROUTER: send an already encoded frame (e.g. a Generate re-sent on failover). */
int zmq_util_router_send_bytes(void *sock, const zmq_util_identity *to, const void *frame,
                               size_t len, sol_err *e);
/* DEALER: one frame. */
int zmq_util_dealer_send(void *sock, const Sol__Envelope *env, sol_err *e);
/* DEALER: an already encoded frame (e.g. a TokenChunk the executor encoded). */
int zmq_util_dealer_send_bytes(void *sock, const void *frame, size_t len, sol_err *e);

/* Receive and decode one message; `flags` is 0 (block) or ZMQ_DONTWAIT (-EAGAIN when nothing is
 * waiting). On success the caller owns *out (frame_free_envelope). ROUTER: `from` is filled as
 * soon as the identity part arrived, so on a decode error (-EBADMSG, -EINVAL, -EMSGSIZE, -EPROTO
 * for a wrong number of parts) the caller can still answer the peer with an Error. */
int zmq_util_router_recv(void *sock, int flags, zmq_util_identity *from, Sol__Envelope **out,
                         sol_err *e);
int zmq_util_dealer_recv(void *sock, int flags, Sol__Envelope **out, sol_err *e);

/* Printable form of an identity for logs: ASCII as-is, other bytes as \xNN; truncated to fit. */
const char *zmq_util_identity_str(const zmq_util_identity *id, char *buf, size_t cap);

#endif
