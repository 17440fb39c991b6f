/* args: the command-line parser of the tools and benches - one table of flags (name, short name,
 * kind, destination, bounds) from which parsing, the range checks and their messages come, so no
 * tool writes its own getopt loop. (sol-router and sol-worker use cli.h, whose flags name config
 * keys instead.) */
#ifndef SOL_ARGS_H
#define SOL_ARGS_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

typedef enum {
    SOL_ARG_STR,    /* const char **dst = the value (borrowed from argv) */
    SOL_ARG_INT,    /* int *dst, an integer in [lo, hi] */
    SOL_ARG_U64,    /* unsigned long long *dst, any unsigned integer (decimal or 0x hex) */
    SOL_ARG_FLOAT,  /* float *dst, a number in [lo, hi] or (lo, hi] with lo_open */
    SOL_ARG_DOUBLE, /* double *dst, the same */
    SOL_ARG_SWITCH, /* int *dst = 1; takes no value */
    SOL_ARG_FN,     /* fn(value, ctx, err): repeatable or structured values */
} sol_arg_kind;

typedef struct sol_arg {
    const char *name; /* "--seed" */
    char short_name;  /* 's' for -s, or 0 */
    sol_arg_kind kind;
    void *dst;
    double lo, hi;
    bool lo_open;
    int (*fn)(const char *value, void *ctx, sol_err *err);
    void *ctx;
    int *seen; /* when not NULL: set to 1 when the flag is given */
} sol_arg;

/* Parses argv[1..] against args[0, n): "--name VALUE", "--name=VALUE", "-s VALUE" and switches,
 * before, between or after the positional arguments (as GNU getopt permutes; "--" ends the flags).
 * Returns the count of positional arguments, moved to argv[1 ..] in their order, or a negative
 * code with err naming the flag and what was expected ("--seed: expected an integer, found
 * 'x'"). */
int sol_args_parse(const sol_arg *args, size_t n, int argc, char **argv, sol_err *err);

#endif
