/* http: the OpenAI-compatible HTTP front door (libmicrohttpd). Validates, authenticates,
 * rate-limits and classifies each request, hands it to a backend (the broker) and streams back
 * whatever the backend pushes into the request's http_stream. */
#ifndef SOL_HTTP_H
#define SOL_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "apikeys.h"
#include "classify.h"
#include "err.h"
#include "metrics.h"
#include "oai_render.h"
#include "ratelimit.h"
#include "strbuf.h"

#define HTTP_DEFAULT_MAX_BODY (1u << 20)
#define HTTP_DEFAULT_MAX_HEADER (16u << 10) /* request line + headers; larger: a JSON 431 */
#define HTTP_DEFAULT_CONN_TIMEOUT_S 30      /* idle seconds before a silent client is dropped */
#define HTTP_DEFAULT_MAX_CONNECTIONS 4096
#define HTTP_DEFAULT_MAX_PER_CLIENT 256     /* connections from one address at once */
#define HTTP_DEFAULT_HEADER_TIMEOUT_S 10    /* a new connection's whole header */
#define HTTP_DEFAULT_KEEPALIVE_TIMEOUT_S 30 /* the next request's header on a kept-alive one */
#define HTTP_DEFAULT_BODY_TIMEOUT_S 60      /* a body, once its header arrived */
#define HTTP_DEFAULT_SSE_MAX_BUFFER                                                                \
    (4u << 20) /* unread stream bytes before the client is dropped */
#define HTTP_DEFAULT_THREADS 2
#define HTTP_REQUEST_ID_MAX 64

/* One in-flight generation: the backend's handle for sending results to the client. Thread-safe:
 * the backend pushes from its own thread while the HTTP thread drains it. Reference counted. */
typedef struct http_stream http_stream;

typedef struct http_chunk {
    const char *text; /* UTF-8 delta, may be empty */
    size_t text_len;
    const oai_token_logprob *logprobs; /* one per token in this chunk; NULL when not requested */
    size_t n_logprobs;
    oai_finish finish;      /* != OAI_FINISH_NONE: this is the last chunk */
    const oai_usage *usage; /* with the last chunk */
    const oai_error *error; /* non-NULL: the request failed; this is the last chunk */
    uint32_t index;         /* which of the request's n samples (choices[].index) */
    const float *embedding; /* /v1/embeddings: the vector, with the last chunk */
    size_t n_embedding;
} http_chunk;

/* Deliver a chunk (copied). Returns 0, -EPIPE when the client is gone (stop generating; the
 * cancel callback has been or will be called), -EALREADY after the last chunk. */
int http_stream_push(http_stream *s, const http_chunk *c);
void http_stream_ref(http_stream *s);
void http_stream_unref(http_stream *s); /* the backend drops its reference when done */
const char *http_stream_request_id(const http_stream *s);

/* What the backend gets for each generation request; borrowed for the dispatch call only. */
typedef struct http_dispatch_info {
    const oai_request *req;
    const char *request_id;
    const char *pool;         /* classify's decision */
    const char *model;        /* a model a worker registered: only its workers (NULL: any) */
    const char *route_reason; /* model | tag | rule:N | classifier:P | default */
    const char *client_key;   /* API key or client address: a tenant identity */
    uint64_t received_ns;     /* sol_now_ns() when the body was complete */
    uint32_t choice;          /* n > 1: one dispatch per sample, 0..n-1, into the same stream */
} http_dispatch_info;

/* The broker plugs in here. Every callback may be NULL except dispatch. Callbacks run on HTTP
 * threads: they must not block (enqueue to the broker actor and return). */
typedef struct http_backend {
    void *ctx;
    /* Accept: take a reference (http_stream_ref) and return 0; chunks arrive later through
     * http_stream_push. Refuse: fill *err (e.g. 503 + retry_after_s, 429) and return -1. */
    int (*dispatch)(void *ctx, const http_dispatch_info *info, http_stream *stream, oai_error *err);
    /* The client went away before the last chunk. */
    void (*cancel)(void *ctx, const char *request_id);
    /* 1 when at least one worker can take work (GET /ready). NULL → always ready. */
    int (*ready)(void *ctx);
    /* JSON body for GET /admin/workers. */
    int (*workers_json)(void *ctx, strbuf *out);
    /* POST /admin/workers/{id}/drain: 0, or fill *err (404 unknown worker). */
    int (*drain)(void *ctx, const char *worker_id, oai_error *err);
    /* The chat template and tool-call format ("" = none) of `pool`'s workers serving `model`
     * (NULL: any): 1 when a live worker told them, 0 when none is known yet. */
    int (*pool_tools)(void *ctx, const char *pool, const char *model, char *chat_template,
                      size_t tmpl_cap, char *tool_format, size_t fmt_cap);
    /* Appends "\nname1\nname2\n" (or "" when none): every model a worker registered since the
     * router started. Requests may name one (only its workers serve them); /v1/models lists
     * them. NULL: no models known (any name is taken). */
    int (*models)(void *ctx, strbuf *out);
} http_backend;

typedef struct http_config {
    const char *host;         /* IPv4 address to bind, default 127.0.0.1 */
    uint16_t port;            /* 0: an ephemeral port (see http_server_port) */
    size_t max_body_bytes;    /* 0: HTTP_DEFAULT_MAX_BODY */
    size_t max_header_bytes;  /* 0: HTTP_DEFAULT_MAX_HEADER */
    unsigned conn_timeout_s;  /* 0: HTTP_DEFAULT_CONN_TIMEOUT_S */
    unsigned max_connections; /* 0: HTTP_DEFAULT_MAX_CONNECTIONS */
    unsigned max_per_client;  /* 0: HTTP_DEFAULT_MAX_PER_CLIENT */
    unsigned header_timeout_s, keepalive_timeout_s, body_timeout_s; /* 0: the defaults */
    size_t sse_max_buffer;    /* 0: HTTP_DEFAULT_SSE_MAX_BUFFER */
    unsigned threads;         /* 0: HTTP_DEFAULT_THREADS */
    const apikeys *keys;      /* NULL: no authentication */
    ratelimit *limiter;       /* NULL: no rate limiting */
    const classify *router;   /* required */
    metrics *metrics;         /* NULL: not recorded */
    const char *served_model; /* listed by /v1/models and echoed in responses */
    http_backend backend;
} http_config;

typedef struct http_server http_server;

/* Borrowed pointers in cfg must outlive the server. */
int http_server_start(const http_config *cfg, http_server **out, sol_err *e);
uint16_t http_server_port(const http_server *s);
/* Ends every open stream, stops the daemon and frees the server. NULL is a no-op. */
void http_server_stop(http_server *s);

#endif
