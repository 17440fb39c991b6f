/* executor: the event queue half of the executor interface. The executor thread encodes each
 * chunk once, straight into a ZeroMQ message; the link forwards those bytes to its router.
 * Message layout: [flags:1][id_len:1][request_id:id_len][Envelope frame]. */
#include "executor.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "frame.h"

_Static_assert(sizeof(zmq_msg_t) <= sizeof(((exec_event *)0)->msg), "zmq_msg_t does not fit");

enum { EV_FINAL = 1, EV_HEADER = 2 };

struct exec_events {
    void *writer; /* executor thread */
    void *reader; /* link thread */
};

static void *pair_socket(void *zctx) {
    void *s = zmq_socket(zctx, ZMQ_PAIR);
    if (!s) return NULL;
    int zero = 0;
    zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    return s;
}

int exec_events_new(void *zctx, exec_events **out, sol_err *e) {
    *out = NULL;
    exec_events *q = calloc(1, sizeof *q);
    if (!q) return sol_err_set(e, -ENOMEM, "out of memory for the event queue");
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://sol-exec-events-%p", (void *)q);
    q->reader = pair_socket(zctx);
    q->writer = pair_socket(zctx);
    if (!q->reader || !q->writer || zmq_bind(q->reader, ep) != 0 ||
        zmq_connect(q->writer, ep) != 0) {
        int err = zmq_errno();
        exec_events_free(q);
        return sol_err_set(e, -err, "event queue %s: %s", ep, zmq_strerror(err));
    }
    *out = q;
    return 0;
}

void exec_events_free(exec_events *q) {
    if (!q) return;
    if (q->writer) zmq_close(q->writer);
    if (q->reader) zmq_close(q->reader);
    free(q);
}

void *exec_events_socket(exec_events *q) {
    return q->reader;
}

int exec_events_push(exec_events *q, const Sol__TokenChunk *chunk, sol_err *e) {
    Sol__Envelope env;
    frame_wrap_token_chunk(&env, (Sol__TokenChunk *)chunk);
    size_t len;
    int rc = frame_measure(&env, &len, e);
    if (rc < 0) return rc;
    size_t id_len = strlen(chunk->request_id);
    zmq_msg_t m;
    if (zmq_msg_init_size(&m, EV_HEADER + id_len + len) != 0)
        return sol_err_set(e, -ENOMEM, "no memory for a %zu-byte chunk", len);
    uint8_t *p = zmq_msg_data(&m);
    p[0] = chunk->finish_reason != SOL__FINISH_REASON__FINISH_NONE ? EV_FINAL : 0;
    p[1] = (uint8_t)id_len; /* frame_measure checked id_len <= SOL_FRAME_MAX_ID_BYTES */
    memcpy(p + EV_HEADER, chunk->request_id, id_len);
    frame_pack(&env, p + EV_HEADER + id_len);
    if (zmq_msg_send(&m, q->writer, 0) < 0) {
        int err = zmq_errno();
        zmq_msg_close(&m);
        return sol_err_set(e, -err, "event queue send: %s", zmq_strerror(err));
    }
    return 0;
}

int exec_events_pop(exec_events *q, exec_event *ev, sol_err *e) {
    zmq_msg_t *m = (zmq_msg_t *)ev->msg;
    zmq_msg_init(m);
    if (zmq_msg_recv(m, q->reader, ZMQ_DONTWAIT) < 0) {
        int err = zmq_errno();
        zmq_msg_close(m);
        if (err == EAGAIN) return -EAGAIN;
        return sol_err_set(e, -err, "event queue receive: %s", zmq_strerror(err));
    }
    const uint8_t *p = zmq_msg_data(m);
    size_t n = zmq_msg_size(m);
    if (n < EV_HEADER || p[1] > SOL_FRAME_MAX_ID_BYTES || n < (size_t)EV_HEADER + p[1]) {
        zmq_msg_close(m);
        return sol_err_set(e, -EBADMSG, "event of %zu bytes has a bad header", n);
    }
    ev->final = p[0] & EV_FINAL;
    memcpy(ev->request_id, p + EV_HEADER, p[1]);
    ev->request_id[p[1]] = '\0';
    ev->frame = p + EV_HEADER + p[1];
    ev->frame_len = n - EV_HEADER - p[1];
    return 0;
}

void exec_event_release(exec_event *ev) {
    zmq_msg_close((zmq_msg_t *)ev->msg);
}
