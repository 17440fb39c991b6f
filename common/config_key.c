/* Values are checked where they are read, so a file error points at the exact line:column of
 * the offending text, and a flag error names the key the flag writes. */
#include "config_key.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Start-up configuration is the one place where running out of memory has no useful recovery. */
char *cfg_strdup(const char *s) {
    char *d = strdup(s);
    if (!d) {
        fputs("sol: out of memory while building the configuration\n", stderr);
        abort();
    }
    return d;
}

void cfg_strlist_clear(sol_strlist *l) {
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i]);
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

void cfg_strlist_push(sol_strlist *l, const char *s) {
    char **items = realloc(l->items, (l->n + 1) * sizeof *items);
    if (!items) {
        fputs("sol: out of memory while building the configuration\n", stderr);
        abort();
    }
    l->items = items;
    l->items[l->n++] = cfg_strdup(s);
}

/* ---- origins: where each value was set, so later cross-key errors can point at it ---------- */

typedef struct {
    char *path, *src; /* src NULL: the command line */
    int line, col;
} origin_mark;

struct sol_config_origin {
    origin_mark *m;
    size_t n;
};

void origin_free(struct sol_config_origin *o) {
    if (!o) return;
    for (size_t i = 0; i < o->n; i++) {
        free(o->m[i].path);
        free(o->m[i].src);
    }
    free(o->m);
    free(o);
}

void origin_record(sol_config *cfg, const char *path, const char *src, const ydoc_node *at) {
    if (!cfg->origin && !(cfg->origin = calloc(1, sizeof *cfg->origin))) return;
    struct sol_config_origin *o = cfg->origin;
    origin_mark *m = NULL;
    for (size_t i = 0; i < o->n && !m; i++)
        if (!strcmp(o->m[i].path, path)) m = &o->m[i];
    if (!m) {
        origin_mark *grown = realloc(o->m, (o->n + 1) * sizeof *grown);
        if (!grown) return; /* origins only improve messages; losing one is harmless */
        o->m = grown;
        m = &o->m[o->n++];
        m->path = cfg_strdup(path);
    } else {
        free(m->src);
    }
    m->src = src ? cfg_strdup(src) : NULL;
    m->line = (src && at) ? at->line : 0;
    m->col = (src && at) ? at->col : 0;
}

/* Write "file:line:col: " (or "command line: ") for `path` or its nearest recorded ancestor. */
void origin_where(const sol_config *cfg, const char *path, char *buf, size_t cap) {
    buf[0] = '\0';
    const struct sol_config_origin *o = cfg->origin;
    char p[CFG_PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    while (o && p[0]) {
        for (size_t i = 0; i < o->n; i++) {
            const origin_mark *m = &o->m[i];
            if (strcmp(m->path, p)) continue;
            if (!m->src)
                snprintf(buf, cap, "command line: ");
            else if (m->line)
                snprintf(buf, cap, "%s:%d:%d: ", m->src, m->line, m->col);
            else
                snprintf(buf, cap, "%s: ", m->src);
            return;
        }
        char *cut = strrchr(p, '.');
        char *br = strrchr(p, '[');
        if (br && (!cut || br > cut)) cut = br;
        if (!cut) break;
        *cut = '\0';
    }
}

/* ---- key lookup and "did you mean" ------------------------------------------------------- */

const cfg_key *cfg_find_key(const cfg_ctx *c, const char *path) {
    for (size_t i = 0; i < c->n_keys; i++)
        if (!strcmp(c->keys[i].path, path)) return &c->keys[i];
    return NULL;
}

/* A section is a path some key lives under ("worker.kv"); "" is the top level. */
int cfg_is_section(const cfg_ctx *c, const char *path) {
    size_t n = strlen(path);
    for (size_t i = 0; i < c->n_keys; i++)
        if (!n || (!strncmp(c->keys[i].path, path, n) && c->keys[i].path[n] == '.')) return 1;
    return 0;
}

/* Optimal-string-alignment distance: a swapped pair of letters ("cdua") counts as one edit. */
size_t sol_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return (size_t)-1; /* keys are short; long input is no typo */
    size_t d[65][65];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[la][lb];
}

static int cfg_is_close(const char *typed, const char *known) {
    size_t d = sol_edit_distance(typed, known), len = strlen(typed);
    return d <= 2 || d * 3 <= len;
}

/* Children of section `prefix` (one path component each), written comma-separated into `out`;
 * the closest one to `typed`, if close enough, goes into `best`. */
static void section_children(const cfg_ctx *c, const char *prefix, const char *typed, char *best,
                             size_t best_cap, char *out, size_t out_cap) {
    size_t n = strlen(prefix), used = 0, best_d = (size_t)-1;
    char last[CFG_PATH_MAX] = "";
    best[0] = out[0] = '\0';
    for (size_t i = 0; i < c->n_keys; i++) {
        const char *p = c->keys[i].path;
        if (n && (strncmp(p, prefix, n) || p[n] != '.')) continue;
        const char *child = n ? p + n + 1 : p;
        size_t len = strcspn(child, ".");
        char name[CFG_PATH_MAX];
        snprintf(name, sizeof name, "%.*s", (int)len, child);
        /* The table keeps each section's keys together, so a repeat is always the last child. */
        if (!strcmp(name, last)) continue;
        snprintf(last, sizeof last, "%s", name);
        used += snprintf(out + used, used < out_cap ? out_cap - used : 0, "%s%s", used ? ", " : "",
                         name);
        if (used >= out_cap) used = out_cap - 1;
        size_t d = sol_edit_distance(typed, name);
        if (d < best_d && cfg_is_close(typed, name)) {
            best_d = d;
            snprintf(best, best_cap, "%s", name);
        }
    }
}

int cfg_unknown_key(cfg_ctx *c, const ydoc_node *at, const char *prefix, const char *key) {
    char path[CFG_PATH_MAX], best[CFG_PATH_MAX], all[400];
    snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", key);
    section_children(c, prefix, key, best, sizeof best, all, sizeof all);
    if (best[0]) return cfg_fail(c, at, path, "unknown key (did you mean \"%s\"?)", best);
    for (size_t i = 0; i < c->n_keys; i++) {
        const char *leaf = strrchr(c->keys[i].path, '.');
        if (leaf && !strcmp(leaf + 1, key))
            return cfg_fail(c, at, path, "unknown key (did you mean \"%s\"?)", c->keys[i].path);
    }
    return cfg_fail(c, at, path, "unknown key (expected one of: %s)", all);
}

/* ---- messages --------------------------------------------------------------------------- */

int cfg_fail(cfg_ctx *c, const ydoc_node *at, const char *path, const char *fmt, ...) {
    char msg[SOL_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *sep = *path ? ": " : "";
    if (!c->src) return sol_err_set(c->err, -EINVAL, "%s%s%s", path, sep, msg);
    if (at && at->line)
        return sol_err_set(c->err, -EINVAL, "%s:%d:%d: %s%s%s", c->src, at->line, at->col, path,
                           sep, msg);
    return sol_err_set(c->err, -EINVAL, "%s: %s%s%s", c->src, path, sep, msg);
}

/* `"abc"` for a scalar (shortened when long), else "a mapping", "a sequence" or "null". */
const char *cfg_found(const ydoc_node *n, char *buf, size_t cap) {
    if (!n || ydoc_is_null(n) || n->kind != YDOC_SCALAR) return ydoc_describe(n);
    if (strlen(n->text) > 40)
        snprintf(buf, cap, "\"%.37s...\"", n->text);
    else
        snprintf(buf, cap, "\"%s\"", n->text);
    return buf;
}

int cfg_check_duplicate(cfg_ctx *c, const ydoc_node *map, size_t i, const char *path) {
    const ydoc_node *key = map->items[2 * i];
    for (size_t j = 0; j < i; j++)
        if (!strcmp(map->items[2 * j]->text, key->text))
            return cfg_fail(c, key, path, "duplicate key (first set at line %d)",
                            map->items[2 * j]->line);
    return 0;
}

int cfg_join(cfg_ctx *c, const ydoc_node *at, const char *prefix, const char *key, char *out) {
    int n = snprintf(out, CFG_PATH_MAX, "%s%s%s", prefix, *prefix ? "." : "", key);
    if (n < 0 || n >= CFG_PATH_MAX)
        return cfg_fail(c, at, prefix, "key \"%.40s...\" is too long", key);
    return 0;
}

void origin_forget_prefix(sol_config *cfg, const char *prefix) {
    struct sol_config_origin *o = cfg->origin;
    if (!o) return;
    size_t n = strlen(prefix), kept = 0;
    for (size_t i = 0; i < o->n; i++) {
        if (!strncmp(o->m[i].path, prefix, n)) {
            free(o->m[i].path);
            free(o->m[i].src);
        } else {
            o->m[kept++] = o->m[i];
        }
    }
    o->n = kept;
}

int cfg_unknown_in(cfg_ctx *c, const ydoc_node *at, const char *path, const cfg_key *known,
                   size_t n) {
    const char *dot = strrchr(path, '.');
    const char *typed = dot ? dot + 1 : path;
    char all[400];
    size_t used = 0;
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    all[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        used += snprintf(all + used, used < sizeof all ? sizeof all - used : 0, "%s%s",
                         i ? ", " : "", known[i].path);
        if (used >= sizeof all) used = sizeof all - 1;
        size_t d = sol_edit_distance(typed, known[i].path);
        if (d < best_d && cfg_is_close(typed, known[i].path)) {
            best_d = d;
            best = known[i].path;
        }
    }
    if (best) return cfg_fail(c, at, path, "unknown key (did you mean \"%s\"?)", best);
    return cfg_fail(c, at, path, "unknown key (expected one of: %s)", all);
}

/* ---- single values ---------------------------------------------------------------------- */

static int need_scalar(cfg_ctx *c, const ydoc_node *v, const char *path, const char *what) {
    char found[64];
    if (v && v->kind == YDOC_SCALAR && !ydoc_is_null(v)) return 0;
    return cfg_fail(c, v, path, "expected %s, found %s", what, cfg_found(v, found, sizeof found));
}

static void range_text(const cfg_key *k, char *buf, size_t cap) {
    if (k->type == T_INT)
        snprintf(buf, cap, "%.0f..%.0f", k->min, k->max);
    else
        snprintf(buf, cap, "%s%g, %g]", (k->flags & F_MIN_EXCL) ? "(" : "[", k->min, k->max);
}

static int out_of_range(cfg_ctx *c, const cfg_key *k, const ydoc_node *v, const char *path) {
    char range[64];
    range_text(k, range, sizeof range);
    return cfg_fail(c, v, path, "%s is out of range (expected %s)", v->text, range);
}

static int apply_int(cfg_ctx *c, const cfg_key *k, int *dst, const ydoc_node *v, const char *path) {
    char found[64];
    int rc = need_scalar(c, v, path, "an integer");
    if (rc < 0) return rc;
    const char *s = v->text;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end || isspace((unsigned char)*s))
        return cfg_fail(c, v, path, "expected an integer, found %s",
                        cfg_found(v, found, sizeof found));
    if (errno == ERANGE || x < (long long)k->min || x > (long long)k->max)
        return out_of_range(c, k, v, path);
    if (k->check == CHK_POW2 && (x & (x - 1)))
        return cfg_fail(c, v, path, "expected a power of two, found %lld", x);
    *dst = (int)x;
    return 0;
}

static int apply_dbl(cfg_ctx *c, const cfg_key *k, double *dst, const ydoc_node *v,
                     const char *path) {
    char found[64];
    int rc = need_scalar(c, v, path, "a number");
    if (rc < 0) return rc;
    const char *s = v->text;
    char *end;
    double x = strtod(s, &end);
    if (end == s || *end || isspace((unsigned char)*s) || !isfinite(x))
        return cfg_fail(c, v, path, "expected a number, found %s",
                        cfg_found(v, found, sizeof found));
    int below = (k->flags & F_MIN_EXCL) ? x <= k->min : x < k->min;
    if (below || x > k->max) return out_of_range(c, k, v, path);
    *dst = x;
    return 0;
}

static int apply_bool(cfg_ctx *c, bool *dst, const ydoc_node *v, const char *path) {
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    char found[64];
    int rc = need_scalar(c, v, path, "true or false");
    if (rc < 0) return rc;
    for (int i = 0; i < 3; i++) {
        if (!strcasecmp(v->text, yes[i])) return *dst = true, 0;
        if (!strcasecmp(v->text, no[i])) return *dst = false, 0;
    }
    return cfg_fail(c, v, path, "expected true or false, found %s",
                    cfg_found(v, found, sizeof found));
}

static int apply_enum(cfg_ctx *c, const cfg_key *k, int *dst, const ydoc_node *v,
                      const char *path) {
    char found[64], all[128];
    size_t used = 0;
    all[0] = '\0';
    for (int i = 0; k->names[i]; i++)
        used += snprintf(all + used, sizeof all - used, "%s%s", i ? ", " : "", k->names[i]);
    int rc = need_scalar(c, v, path, "a name");
    for (int i = 0; rc == 0 && k->names[i]; i++)
        if (!strcmp(v->text, k->names[i])) return *dst = i, 0;
    if (rc < 0) return rc;
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (int i = 0; k->names[i]; i++) {
        size_t d = sol_edit_distance(v->text, k->names[i]);
        if (d < best_d && cfg_is_close(v->text, k->names[i])) best_d = d, best = k->names[i];
    }
    if (best)
        return cfg_fail(c, v, path, "expected one of %s; found %s (did you mean \"%s\"?)", all,
                        cfg_found(v, found, sizeof found), best);
    return cfg_fail(c, v, path, "expected one of %s; found %s", all,
                    cfg_found(v, found, sizeof found));
}

static int is_port(const char *s, int allow_star) {
    if (allow_star && !strcmp(s, "*")) return 1;
    if (!*s || strlen(s) > 5) return 0;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p)) return 0;
    return atoi(s) <= 65535;
}

/* "HOST:PORT" with a non-empty host ("[::1]" allowed) and a port 0..65535. */
static int is_hostport(const char *s, int allow_star) {
    const char *colon = strrchr(s, ':');
    return colon && colon > s && is_port(colon + 1, allow_star);
}

static int is_endpoint(const char *s) {
    if (!strncmp(s, "tcp://", 6)) return is_hostport(s + 6, 1);
    if (!strncmp(s, "ipc://", 6)) return s[6] != '\0';
    if (!strncmp(s, "inproc://", 9)) return s[9] != '\0';
    return 0;
}

static int is_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 63) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("_-.", *s)) return 0;
    return 1;
}

static int is_id(const char *s) {
    if (strlen(s) > 128) return 0;
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || *s == 0x7f) return 0;
    return 1;
}

static int check_text(cfg_ctx *c, const cfg_key *k, const ydoc_node *v, const char *path,
                      int nonempty) {
    char found[64];
    const char *s = v->text, *want = NULL;
    if (nonempty && !*s) want = "a non-empty string";
    switch (k->check) {
    case CHK_NAME:
        if (!is_name(s)) want = "a pool name (1-63 letters, digits, '_', '-' or '.')";
        break;
    case CHK_ENDPOINT:
        if (!is_endpoint(s))
            want = "a ZeroMQ endpoint (tcp://HOST:PORT, ipc://PATH or inproc://NAME)";
        break;
    case CHK_HOSTPORT:
        if (!is_hostport(s, 0)) want = "HOST:PORT with a port in 0..65535";
        break;
    case CHK_ID:
        if (!is_id(s)) want = "at most 128 characters without spaces or control characters";
        break;
    default:
        break;
    }
    if (!want) return 0;
    return cfg_fail(c, v, path, "expected %s, found %s", want, cfg_found(v, found, sizeof found));
}

static int apply_str(cfg_ctx *c, const cfg_key *k, char **dst, const ydoc_node *v,
                     const char *path) {
    if (k->type == T_NSTR && ydoc_is_null(v)) {
        free(*dst);
        *dst = NULL;
        return 0;
    }
    int rc = need_scalar(c, v, path, k->type == T_NSTR ? "a string or null" : "a string");
    if (rc == 0) rc = check_text(c, k, v, path, k->flags & F_NONEMPTY);
    if (rc < 0) return rc;
    free(*dst);
    *dst = cfg_strdup(v->text);
    return 0;
}

int cfg_check_list_item(cfg_ctx *c, const cfg_key *k, const sol_strlist *l, const ydoc_node *item,
                        const char *path) {
    int rc = need_scalar(c, item, path, "a string");
    if (rc == 0) rc = check_text(c, k, item, path, k->flags & F_ITEMS_NONEMPTY);
    if (rc < 0) return rc;
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->items[i], item->text))
            return cfg_fail(c, item, path, "\"%s\" is listed twice", item->text);
    return 0;
}

static int apply_list(cfg_ctx *c, const cfg_key *k, sol_strlist *dst, const ydoc_node *v,
                      const char *path) {
    char found[64];
    sol_strlist tmp = {0};
    const ydoc_node *const *items = (const ydoc_node *const *)&v;
    size_t n = 0;
    if (v && v->kind == YDOC_SEQ)
        items = (const ydoc_node *const *)v->items, n = v->n;
    else if (v && v->kind == YDOC_SCALAR && !ydoc_is_null(v))
        n = 1; /* a single string stands for a one-item list */
    else if (!ydoc_is_null(v))
        return cfg_fail(c, v, path, "expected a list of strings, found %s",
                        cfg_found(v, found, sizeof found));
    for (size_t i = 0; i < n; i++) {
        char ipath[CFG_PATH_MAX + 16];
        snprintf(ipath, sizeof ipath, "%s[%zu]", path, i);
        int rc = cfg_check_list_item(c, k, &tmp, items[i], ipath);
        if (rc < 0) {
            cfg_strlist_clear(&tmp);
            return rc;
        }
        cfg_strlist_push(&tmp, items[i]->text);
    }
    if ((k->flags & F_NONEMPTY) && tmp.n == 0)
        return cfg_fail(c, v, path, "expected at least one item, found an empty list");
    cfg_strlist_clear(dst);
    *dst = tmp;
    return 0;
}

int cfg_apply_leaf(cfg_ctx *c, const cfg_key *k, void *base, const ydoc_node *val,
                   const char *path) {
    void *dst = (char *)base + k->off;
    int rc;
    switch (k->type) {
    case T_INT:
        rc = apply_int(c, k, dst, val, path);
        break;
    case T_DBL:
        rc = apply_dbl(c, k, dst, val, path);
        break;
    case T_BOOL:
        rc = apply_bool(c, dst, val, path);
        break;
    case T_STR:
    case T_NSTR:
        rc = apply_str(c, k, dst, val, path);
        break;
    case T_ENUM:
        rc = apply_enum(c, k, dst, val, path);
        break;
    case T_LIST:
        rc = apply_list(c, k, dst, val, path);
        break;
    case T_RULES:
        origin_forget_prefix(c->cfg, "router.routing.rules[");
        rc = c->apply_rules(c, val, path);
        break;
    case T_SLOS:
        origin_forget_prefix(c->cfg, "router.slo[");
        rc = c->apply_slos(c, val, path);
        break;
    default:
        rc = cfg_fail(c, val, path, "internal error: unknown key type");
    }
    if (rc == 0) origin_record(c->cfg, path, c->src, val);
    return rc;
}

int cfg_apply_map_leaves(cfg_ctx *c, const ydoc_node *map, const char *prefix, const cfg_key *keys,
                         size_t n, void *base) {
    for (size_t i = 0; i < ydoc_map_len(map); i++) {
        const ydoc_node *key = map->items[2 * i];
        char path[CFG_PATH_MAX];
        int rc = cfg_join(c, key, prefix, key->text, path);
        if (rc == 0) rc = cfg_check_duplicate(c, map, i, path);
        const cfg_key *k = NULL;
        for (size_t j = 0; rc == 0 && j < n && !k; j++)
            if (!strcmp(keys[j].path, key->text)) k = &keys[j];
        if (rc == 0 && !k) rc = cfg_unknown_in(c, key, path, keys, n);
        if (rc == 0) rc = cfg_apply_leaf(c, k, base, map->items[2 * i + 1], path);
        if (rc < 0) return rc;
    }
    return 0;
}
