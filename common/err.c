#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int sol_err_set(sol_err *e, int code, const char *fmt, ...) {
    if (!e) return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->code = code;
    return code;
}

int sol_err_wrap(sol_err *e, const char *fmt, ...) {
    if (!e) return -1;
    char prefix[SOL_ERR_MSG_MAX], old[SOL_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    /* Truncation is acceptable: the prefix matters most and the tail is best effort. */
    size_t n = strlen(prefix);
    memcpy(e->msg, prefix, n + 1);
    if (n < sizeof e->msg - 1) {
        size_t room = sizeof e->msg - 1 - n, m = strlen(old);
        if (m > room) m = room;
        memcpy(e->msg + n, old, m);
        e->msg[n + m] = '\0';
    }
    return e->code;
}

void sol_err_clear(sol_err *e) {
    if (!e) return;
    e->code = 0;
    e->msg[0] = '\0';
}
