/* oai_error: what went wrong, as the OpenAI error object ({"error": {message, type, param, code}})
 * with its HTTP status: every 4xx/5xx of the API and every error in a stream. */
#ifndef SOL_OAI_ERROR_H
#define SOL_OAI_ERROR_H

#include "strbuf.h"

/* What went wrong, ready to be rendered by oai_error_json. Strings are NUL-terminated. */
typedef struct oai_error {
    int status;     /* HTTP status: 400, 401, 404, 413, 429, 500, 503 */
    char type[40];  /* invalid_request_error, authentication_error, ... */
    char code[40];  /* "" = null */
    char param[64]; /* "" = null */
    char message[384];
    int retry_after_s; /* > 0: send Retry-After (429, 503) */
} oai_error;

/* Fill *e. `param`/`code` may be NULL. Returns e->status. */
int oai_error_set(oai_error *e, int status, const char *type, const char *code, const char *param,
                  const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Ready-made errors with the OpenAI type/code for each status. */
int oai_error_status(oai_error *e, int status, const char *message);
/* {"error":{"message":...,"type":...,"param":...,"code":...}} */
int oai_error_json(strbuf *out, const oai_error *e);

#endif
