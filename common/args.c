/* args: see args.h. */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sol_arg *find(const sol_arg *args, size_t n, const char *a, const char **inline_v) {
    *inline_v = NULL;
    if (a[0] == '-' && a[1] && a[1] != '-' && !a[2]) {
        for (size_t i = 0; i < n; i++)
            if (args[i].short_name == a[1]) return &args[i];
        return NULL;
    }
    const char *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    for (size_t i = 0; i < n; i++)
        if (strlen(args[i].name) == len && !strncmp(args[i].name, a, len)) {
            *inline_v = eq ? eq + 1 : NULL;
            return &args[i];
        }
    return NULL;
}

/* x as written: whole numbers without an exponent (16777216, not 1.67772e+07). */
static void num(char *out, size_t cap, double x) {
    if (x == floor(x) && fabs(x) < 1e15)
        snprintf(out, cap, "%.0f", x);
    else
        snprintf(out, cap, "%g", x);
}

static int bounds_msg(const sol_arg *f, const char *what, const char *v, sol_err *err) {
    char lo[32], hi[32];
    num(lo, sizeof lo, f->lo), num(hi, sizeof hi, f->hi);
    if (f->hi == INFINITY)
        return sol_err_set(err, -EINVAL, "%s: expected %s %s %s, found '%s'", f->name, what,
                           f->lo_open ? ">" : ">=", lo, v);
    return sol_err_set(err, -EINVAL, "%s: expected %s in %c%s, %s], found '%s'", f->name, what,
                       f->lo_open ? '(' : '[', lo, hi, v);
}

static bool in_bounds(const sol_arg *f, double x) {
    return x <= f->hi && (f->lo_open ? x > f->lo : x >= f->lo);
}

static int set_value(const sol_arg *f, const char *v, sol_err *err) {
    char *end;
    errno = 0;
    switch (f->kind) {
    case SOL_ARG_STR:
        *(const char **)f->dst = v;
        return 0;
    case SOL_ARG_INT: {
        long x = strtol(v, &end, 10);
        if (errno || *end || end == v || !in_bounds(f, (double)x))
            return bounds_msg(f, "an integer", v, err);
        *(int *)f->dst = (int)x;
        return 0;
    }
    case SOL_ARG_U64: {
        unsigned long long x = strtoull(v, &end, 0);
        if (errno || *end || end == v || v[0] == '-')
            return sol_err_set(err, -EINVAL, "%s: expected an integer, found '%s'", f->name, v);
        *(unsigned long long *)f->dst = x;
        return 0;
    }
    case SOL_ARG_FLOAT: {
        float x = strtof(v, &end);
        if (*end || end == v || !isfinite(x) || !in_bounds(f, (double)x))
            return bounds_msg(f, "a number", v, err);
        *(float *)f->dst = x;
        return 0;
    }
    case SOL_ARG_DOUBLE: {
        double x = strtod(v, &end);
        if (*end || end == v || !isfinite(x) || !in_bounds(f, x))
            return bounds_msg(f, "a number", v, err);
        *(double *)f->dst = x;
        return 0;
    }
    case SOL_ARG_FN:
        return f->fn(v, f->ctx, err);
    case SOL_ARG_SWITCH:
        break;
    }
    return sol_err_set(err, -EINVAL, "%s: takes no value", f->name);
}

int sol_args_parse(const sol_arg *args, size_t n, int argc, char **argv, sol_err *err) {
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--")) { /* the rest are positional */
            while (++i < argc)
                argv[1 + npos++] = argv[i];
            break;
        }
        if (a[0] != '-' || !a[1]) { /* positional: moved down, over flags already read */
            argv[1 + npos++] = argv[i];
            continue;
        }
        const sol_arg *f = find(args, n, a, &v);
        if (!f) return sol_err_set(err, -EINVAL, "unknown option '%s' (see --help)", a);
        if (f->seen) *f->seen = 1;
        if (f->kind == SOL_ARG_SWITCH) {
            if (v) return sol_err_set(err, -EINVAL, "%s: takes no value", f->name);
            *(int *)f->dst = 1;
            continue;
        }
        if (!v) {
            if (i + 1 >= argc) return sol_err_set(err, -EINVAL, "%s: needs a value", f->name);
            v = argv[++i];
        }
        int rc = set_value(f, v, err);
        if (rc) return rc;
    }
    return npos;
}
