/* http_guard: deadlines libmicrohttpd does not enforce - the whole request header and the whole
 * body must arrive within their limits (else a JSON 408 and the connection is closed), which an
 * idle timeout restarted by every byte cannot do against a slowloris client. */
#ifndef SOL_HTTP_GUARD_H
#define SOL_HTTP_GUARD_H

#include <stdint.h>

#include "err.h"

typedef struct http_guard http_guard;

/* Starts the sweeper thread (checks twice a second). Seconds: the header of a new connection;
 * the next request's header on a kept-alive one (its idle allowance); a body once its header
 * arrived. */
int http_guard_new(unsigned header_s, unsigned keepalive_s, unsigned body_s, http_guard **out,
                   sol_err *e);
void http_guard_free(http_guard *g);

/* MHD's connection notification (MHD_OPTION_NOTIFY_CONNECTION, cls = the guard): a record per
 * connection in *socket_context, dropped when it closes. */
void http_guard_notify(void *cls, void *connection, void **socket_context, int started);

/* Where a connection's request stands (the record from its socket context; NULL is ignored). */
void http_guard_headers_done(void *record); /* the body's deadline starts */
void http_guard_body_done(void *record);    /* no deadline while the answer runs */
void http_guard_request_done(void *record); /* waiting for the next request's header */

/* Connections closed for a deadline so far (tests, logs). */
uint64_t http_guard_timeouts(http_guard *g);

#endif
