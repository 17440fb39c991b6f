/* oai_error: the OpenAI error object every failure of the API is rendered as. */
#include "oai_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void copy_str(char *dst, size_t cap, const char *src) {
    if (!src) src = "";
    snprintf(dst, cap, "%s", src);
}

int oai_error_set(oai_error *e, int status, const char *type, const char *code, const char *param,
                  const char *fmt, ...) {
    if (!e) return status;
    memset(e, 0, sizeof *e);
    e->status = status;
    copy_str(e->type, sizeof e->type, type);
    copy_str(e->code, sizeof e->code, code);
    copy_str(e->param, sizeof e->param, param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return status;
}

int oai_error_status(oai_error *e, int status, const char *message) {
    const char *type = "invalid_request_error", *code = NULL;
    switch (status) {
    case 400:
        break;
    case 401:
        code = "invalid_api_key";
        break;
    case 404:
        type = "not_found_error";
        code = "not_found";
        break;
    case 405:
        code = "method_not_allowed";
        break;
    case 413:
        code = "request_too_large";
        break;
    case 431:
        code = "request_header_fields_too_large";
        break;
    case 429:
        type = "rate_limit_error";
        code = "rate_limit_exceeded";
        break;
    case 503:
        type = "server_error";
        code = "service_unavailable";
        break;
    default:
        type = "server_error";
        code = "internal_error";
        break;
    }
    return oai_error_set(e, status, type, code, NULL, "%s", message);
}

int oai_error_json(strbuf *out, const oai_error *e) {
    strbuf_puts(out, "{\"error\":{\"message\":");
    strbuf_json_str(out, e->message, strlen(e->message));
    strbuf_puts(out, ",\"type\":");
    strbuf_json_str(out, e->type, strlen(e->type));
    strbuf_puts(out, ",\"param\":");
    if (e->param[0])
        strbuf_json_str(out, e->param, strlen(e->param));
    else
        strbuf_puts(out, "null");
    strbuf_puts(out, ",\"code\":");
    if (e->code[0])
        strbuf_json_str(out, e->code, strlen(e->code));
    else
        strbuf_puts(out, "null");
    return strbuf_puts(out, "}}");
}
