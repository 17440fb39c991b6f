/* err: the one error-reporting convention shared by every Sol module.
 * Fallible functions return int (0 ok, negative errno-style) and fill a caller-owned sol_err. */
#ifndef SOL_ERR_H
#define SOL_ERR_H

#include <stddef.h>

#define SOL_ERR_MSG_MAX 512

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sol_err {
    int code;                  /* negative errno-style code of the last failure, 0 when clear */
    char msg[SOL_ERR_MSG_MAX]; /* human-readable: what was expected, what was found, and where */
} sol_err;

/* Record a failure and return `code` so callers can write `return sol_err_set(e, -EINVAL, ...)`.
 * `e` may be NULL (the message is then dropped). `code` should be negative. */
int sol_err_set(sol_err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prefix an existing message with more context ("loading x.gguf: " + old message). */
int sol_err_wrap(sol_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void sol_err_clear(sol_err *e);

#ifdef __cplusplus
}
#endif

#endif
