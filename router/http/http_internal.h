/* http_internal: structures shared by http.c (request handling) and http_stream.c (the per-request
 * mailbox). Not part of the public API: only the router's HTTP layer includes it. */
#ifndef SOL_HTTP_INTERNAL_H
#define SOL_HTTP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include <microhttpd.h>

#include "http.h"
#include "http_guard.h"

struct http_server {
    http_config cfg;
    struct MHD_Daemon *daemon;
    http_guard *guard; /* header and body deadlines */
    uint16_t port;
    atomic_uint_fast64_t next_id;
    uint64_t id_salt;
    pthread_mutex_t mu; /* guards the list of live streams (for shutdown) */
    http_stream *streams;
    bool stopping;
};

/* One choice of a non-streaming answer, accumulated as its chunks arrive. */
typedef struct http_choice {
    strbuf text;
    oai_token_logprob *lp; /* owned copies */
    size_t n_lp;
    oai_finish finish;
} http_choice;

struct http_stream {
    pthread_mutex_t mu;
    int refs;
    http_server *srv;
    struct MHD_Connection *conn; /* valid while the request is live */
    http_stream *next, *prev;    /* server's live list, guarded by srv->mu */
    oai_request *req;            /* owned */
    char request_id[HTTP_REQUEST_ID_MAX + 1];
    char pool[64];
    char reason[CLASSIFY_REASON_MAX];
    bool streaming;
    bool suspended;    /* we called MHD_suspend_connection and nobody resumed yet */
    bool headers_sent; /* a 200 response was queued */
    bool done;         /* the last chunk was pushed */
    bool client_gone;
    bool abandoned; /* ended for bytes the client left unread: closed abruptly, counted 499 */
    bool failed;    /* error before any byte was sent: err holds the status */
    bool failed_mid_stream;
    oai_error err;
    oai_stream sse;
    strbuf out; /* SSE bytes not yet handed to MHD */
    size_t out_off;
    http_choice choices[OAI_MAX_N]; /* non-streaming: each choice's text, logprobs, finish */
    oai_usage usage;
    uint64_t t_start, t_first, t_last;
    uint32_t n_choices;    /* the request's n: one dispatch per sample into this stream */
    uint32_t n_finished;   /* choices whose last chunk arrived */
    float *emb[OAI_MAX_N]; /* /v1/embeddings: each input's vector (owned) */
    size_t emb_dim[OAI_MAX_N];
    bool tools; /* chat with tools offered, or harmony: calls (and reasoning) are read out of the
                   text */
    oai_call_parser calls[OAI_MAX_N]; /* per choice: the calls so far (streaming: sent as they
                                       * complete) */
};

http_stream *http_stream_new(http_server *srv, struct MHD_Connection *conn, oai_request *req,
                             const char *request_id, const char *pool, uint64_t received_ns);
ssize_t http_stream_read(void *cls, uint64_t pos, char *buf, size_t max);

/* http_send.c: the headers every answer carries (request id, pool, route reason; NULL: none). */
void http_common_headers(struct MHD_Response *r, const char *request_id, const char *pool,
                         const char *reason);
/* Queue a whole response (the body's buffer is taken); pool and reason may be NULL. */
enum MHD_Result http_send_buf(struct MHD_Connection *c, unsigned status, const char *ctype,
                              strbuf *body, const char *request_id, const char *pool,
                              const char *reason, int retry_after);
enum MHD_Result http_send_json(struct MHD_Connection *c, unsigned status, strbuf *body,
                               const char *request_id);
enum MHD_Result http_send_error(struct MHD_Connection *c, const oai_error *e,
                                const char *request_id, const char *pool, const char *reason);
/* An OpenAI error of that status with fmt's message (one %s: arg). */
enum MHD_Result http_send_status(struct MHD_Connection *c, int status, const char *request_id,
                                 const char *fmt, const char *arg);

#endif
