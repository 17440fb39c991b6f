/* config_key: one configuration key (path, type, range) and how a YAML value is checked against
 * it; plus the messages, "did you mean" hints and value origins the config module reports with.
 * Private to common/config*.c: other modules use config.h. */
#ifndef SOL_CONFIG_KEY_H
#define SOL_CONFIG_KEY_H

#include <stddef.h>

#include "config.h"
#include "yaml_doc.h"

#define CFG_PATH_MAX 160

typedef enum { T_INT, T_DBL, T_BOOL, T_STR, T_NSTR, T_ENUM, T_LIST, T_RULES, T_SLOS } cfg_type;

/* Checks beyond type and range, applied to the value (or to each item of a list). */
typedef enum { CHK_NONE = 0, CHK_NAME, CHK_ENDPOINT, CHK_HOSTPORT, CHK_POW2, CHK_ID } cfg_check;

enum {
    F_MIN_EXCL = 1,       /* the range's lower bound is excluded: (min, max] */
    F_NONEMPTY = 2,       /* strings: "" refused; lists: at least one item */
    F_ITEMS_NONEMPTY = 4, /* lists: "" refused as an item */
};

typedef struct cfg_key {
    const char *path; /* "worker.kv.block_size" (or "tag" for a rule condition) */
    cfg_type type;
    size_t off;               /* offset of the field inside its base struct */
    double min, max;          /* T_INT, T_DBL */
    const char *const *names; /* T_ENUM: NULL-terminated, index = stored value */
    cfg_check check;
    unsigned flags;
} cfg_key;

/* What one load or override works with. config.c fills in its key table and the rules parser,
 * so this module never calls back into config.c (no dependency cycle between the two). */
typedef struct cfg_ctx {
    sol_config *cfg;
    const char *src; /* file name; NULL when the value comes from the command line */
    sol_err *err;
    const cfg_key *keys; /* every leaf key, in print order, sections kept together */
    size_t n_keys;
    /* Replaces router.routing.rules from a YAML sequence (the T_RULES key). */
    int (*apply_rules)(struct cfg_ctx *c, const ydoc_node *seq, const char *path);
    /* Replaces router.slo likewise (the T_SLOS key: config_slo.h). */
    int (*apply_slos)(struct cfg_ctx *c, const ydoc_node *seq, const char *path);
} cfg_ctx;

/* Report "src:line:col: path: message" (just "path: message" for command-line values, which the
 * flag parser prefixes with the flag); returns -EINVAL. */
int cfg_fail(cfg_ctx *c, const ydoc_node *at, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* `"abc"` for a scalar (shortened when long), else "a mapping", "a sequence" or "null". */
const char *cfg_found(const ydoc_node *n, char *buf, size_t cap);

/* out = prefix + "." + key, refusing paths longer than CFG_PATH_MAX. */
int cfg_join(cfg_ctx *c, const ydoc_node *at, const char *prefix, const char *key, char *out);

/* Fails when key i of `map` repeats an earlier key. */
int cfg_check_duplicate(cfg_ctx *c, const ydoc_node *map, size_t i, const char *path);

const cfg_key *cfg_find_key(const cfg_ctx *c, const char *path);
int cfg_is_section(const cfg_ctx *c, const char *path);

/* Unknown key `key` under section `prefix` of c->keys, with a hint. */
int cfg_unknown_key(cfg_ctx *c, const ydoc_node *at, const char *prefix, const char *key);
/* Unknown key at `path` among a small fixed set (a rule's keys), with a hint. */
int cfg_unknown_in(cfg_ctx *c, const ydoc_node *at, const char *path, const cfg_key *known,
                   size_t n);

/* Every key of mapping `map` (under path `prefix`) applied to base as the leaf of that name in
 * keys[0..n): duplicates and names not in the table refused. */
int cfg_apply_map_leaves(cfg_ctx *c, const ydoc_node *map, const char *prefix, const cfg_key *keys,
                         size_t n, void *base);

/* Check `val` against `k` and store it at base + k->off; records where it came from. */
int cfg_apply_leaf(cfg_ctx *c, const cfg_key *k, void *base, const ydoc_node *val,
                   const char *path);
/* Check one item about to join list `l` of key `k` (type, emptiness, duplicates, check). */
int cfg_check_list_item(cfg_ctx *c, const cfg_key *k, const sol_strlist *l, const ydoc_node *item,
                        const char *path);

/* Owned-string helpers; they abort on out-of-memory (start-up only). */
char *cfg_strdup(const char *s);
void cfg_strlist_push(sol_strlist *l, const char *s);
void cfg_strlist_clear(sol_strlist *l);

/* Value origins: `at` NULL or `src` NULL records "command line". */
void origin_record(sol_config *cfg, const char *path, const char *src, const ydoc_node *at);
/* "file:line:col: " / "command line: " / "" for `path` or its nearest recorded ancestor. */
void origin_where(const sol_config *cfg, const char *path, char *buf, size_t cap);
void origin_forget_prefix(sol_config *cfg, const char *prefix);
void origin_free(struct sol_config_origin *o);

#endif
