/* http_send: queueing a whole response on a connection - a buffer, JSON, an OpenAI error - with
 * the headers every answer carries (X-Request-Id, the pool and the route reason, Retry-After). */
#include "http_internal.h"

#include <stdio.h>
#include <stdlib.h>

void http_common_headers(struct MHD_Response *r, const char *request_id, const char *pool,
                         const char *reason) {
    if (request_id && request_id[0]) MHD_add_response_header(r, "X-Request-Id", request_id);
    if (pool && pool[0]) MHD_add_response_header(r, "X-Sol-Pool", pool);
    if (reason && reason[0]) MHD_add_response_header(r, "X-Sol-Route-Reason", reason);
}

enum MHD_Result http_send_buf(struct MHD_Connection *c, unsigned status, const char *ctype,
                              strbuf *body, const char *request_id, const char *pool,
                              const char *reason, int retry_after) {
    size_t len;
    char *data = strbuf_take(body, &len);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(data);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    http_common_headers(r, request_id, pool, reason);
    if (retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", retry_after);
        MHD_add_response_header(r, "Retry-After", v);
    }
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

enum MHD_Result http_send_json(struct MHD_Connection *c, unsigned status, strbuf *body,
                               const char *request_id) {
    return http_send_buf(c, status, "application/json", body, request_id, NULL, NULL, 0);
}

enum MHD_Result http_send_error(struct MHD_Connection *c, const oai_error *e,
                                const char *request_id, const char *pool, const char *reason) {
    strbuf b;
    strbuf_init(&b);
    oai_error_json(&b, e);
    return http_send_buf(c, (unsigned)e->status, "application/json", &b, request_id, pool, reason,
                         e->retry_after_s);
}

enum MHD_Result http_send_status(struct MHD_Connection *c, int status, const char *request_id,
                                 const char *fmt, const char *arg) {
    oai_error e;
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    oai_error_status(&e, status, msg);
    return http_send_error(c, &e, request_id, NULL, NULL);
}
