/* One table (k_keys) describes every leaf key: its path, type, place in sol_config and range.
 * Loading, `--set` overrides, "did you mean" hints and printing all walk that table, so a key
 * added there is parsed, checked, printed and suggested the same way everywhere. Cross-key
 * rules live in sol_config_validate, which runs after flags so it sees the final values. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config_key.h"
#include "config_slo.h"
#include "yaml_doc.h"

_Static_assert(sizeof(sol_backend_kind) == sizeof(int), "enum fields are written through int *");
_Static_assert(sizeof(sol_log_level) == sizeof(int), "enum fields are written through int *");

static const char *const k_levels[] = {"debug", "info", "warn", "error", "off", NULL};
static const char *const k_backends[] = {"cpu", "cuda", "sim", "cuda-emu", NULL};
static const char *const k_dtypes[] = {"f16", "f32", NULL};
/* worker.dtype (vLLM's --dtype): weights compute in the GGUF file's own types. */
static const char *const k_model_dtypes[] = {"auto", NULL};
/* worker.embedding_pooling: the order of engine_pooling */
static const char *const k_poolings[] = {"auto", "last", "mean", "cls", NULL};
/* router.routing.policy: the order of sol_routing_policy */
static const char *const k_policies[] = {"cache_aware", "affinity", "least_loaded", "round_robin",
                                         NULL};
/* worker.drain: the order of sol_drain_mode */
static const char *const k_drains[] = {"migrate", "finish", NULL};
static const char *const k_methods[] = {"off", "draft", "ngram", NULL};

#define OFF(m) offsetof(sol_config, m)
#define KEY(m, t, ...)                                                                             \
    { .path = #m, .type = t, .off = OFF(m), __VA_ARGS__ }
#define KINT(m, lo, hi, ...) KEY(m, T_INT, .min = lo, .max = hi, __VA_ARGS__)
#define KDBL(m, lo, hi, ...) KEY(m, T_DBL, .min = lo, .max = hi, __VA_ARGS__)

static const cfg_key k_keys[] = {
    KEY(log.level, T_ENUM, .names = k_levels),
    KEY(log.json, T_BOOL),
    KEY(router.http.listen, T_STR, .check = CHK_HOSTPORT),
    KEY(router.http.api_keys_file, T_NSTR, .flags = F_NONEMPTY),
    KINT(router.http.max_body_bytes, 1024, 64 << 20),
    KINT(router.http.max_header_bytes, 0, 1 << 20),
    KINT(router.http.max_connections, 0, 1 << 20),
    KINT(router.http.max_connections_per_client, 0, 1 << 20),
    KINT(router.http.header_timeout_s, 0, 3600),
    KINT(router.http.keepalive_timeout_s, 0, 86400),
    KINT(router.http.body_timeout_s, 0, 3600),
    KINT(router.http.sse_max_buffer_bytes, 0, 1 << 30),
    KDBL(router.http.rate_limit.requests_per_s, 0, 1e6),
    KINT(router.http.rate_limit.burst, 0, 1000000),
    KINT(router.http.request_timeout_ms, 0, 86400000),
    KEY(router.workers.bind, T_STR, .check = CHK_ENDPOINT),
    KINT(router.workers.heartbeat_ms, 10, 60000),
    KINT(router.workers.dead_after_ms, 20, 600000),
    KINT(router.workers.max_queue_per_pool, 0, 1000000),
    KDBL(router.workers.rebalance_hot_ratio, 0, 1000),
    KEY(router.workers.allow_public, T_BOOL),
    KEY(router.workers.allow_insecure, T_BOOL),
    KEY(router.workers.curve.secret_key_file, T_NSTR, .flags = F_NONEMPTY),
    KEY(router.workers.curve.authorized_keys_dir, T_NSTR, .flags = F_NONEMPTY),
    KEY(router.routing.default_pool, T_STR, .check = CHK_NAME),
    KEY(router.routing.fallback_pool, T_NSTR, .check = CHK_NAME),
    KEY(router.routing.pools, T_LIST, .check = CHK_NAME, .flags = F_NONEMPTY),
    KEY(router.routing.classifier.weights_file, T_NSTR, .flags = F_NONEMPTY),
    KDBL(router.routing.classifier.threshold, 0, 1),
    KEY(router.routing.classifier.positive_pool, T_STR, .check = CHK_NAME),
    KINT(router.routing.affinity_prefix_chars, 0, 1 << 20),
    KEY(router.routing.policy, T_ENUM, .names = k_policies),
    KINT(router.routing.reply_tokens_mib, 0, 4096),
    KEY(router.routing.rules, T_RULES),
    KEY(router.slo, T_SLOS),
    KEY(worker.router, T_LIST, .check = CHK_ENDPOINT, .flags = F_NONEMPTY),
    KEY(worker.pool, T_STR, .check = CHK_NAME),
    KEY(worker.model, T_NSTR, .flags = F_NONEMPTY),
    KEY(worker.served_model_name, T_NSTR, .check = CHK_ID, .flags = F_NONEMPTY),
    KEY(worker.id, T_STR, .check = CHK_ID),
    KEY(worker.backend, T_ENUM, .names = k_backends),
    KEY(worker.backend_variant, T_NSTR, .flags = F_NONEMPTY),
    KINT(worker.threads, 0, 1024),
    KINT(worker.device, 0, 63),
    KEY(worker.batch_invariant, T_BOOL),
    KEY(worker.enforce_eager, T_BOOL),
    KINT(worker.tensor_parallel, 1, 8),
    KINT(worker.tp_timeout_ms, 100, 3600000),
    KINT(worker.stall_after_ms, 0, 3600000),
    KEY(worker.dtype, T_ENUM, .names = k_model_dtypes),
    KEY(worker.chat_template, T_STR),
    KEY(worker.embedding_pooling, T_ENUM, .names = k_poolings),
    KEY(worker.mmap, T_BOOL),
    KEY(worker.mlock, T_BOOL),
    KINT(worker.heartbeat_ms, 10, 60000),
    KINT(worker.router_resolve_ms, 0, 3600000),
    KEY(worker.health_file, T_NSTR, .flags = F_NONEMPTY),
    KEY(worker.drain, T_ENUM, .names = k_drains),
    KEY(worker.curve.secret_key_file, T_NSTR, .flags = F_NONEMPTY),
    KEY(worker.curve.server_public_key, T_NSTR, .flags = F_NONEMPTY),
    KINT(worker.kv.block_size, 1, 1024, .check = CHK_POW2),
    KDBL(worker.kv.memory_fraction, 0, 1, .flags = F_MIN_EXCL),
    KINT(worker.kv.num_blocks, 0, 100000000),
    KINT(worker.kv.max_model_len, 1, 1 << 20),
    KINT(worker.kv.tier2_blocks, 0, 100000000),
    KEY(worker.kv.tier2_dir, T_NSTR, .flags = F_NONEMPTY),
    KEY(worker.kv.dtype, T_ENUM, .names = k_dtypes),
    KINT(worker.scheduler.max_num_seqs, 1, 4096),
    KINT(worker.scheduler.max_batched_tokens, 1, 1 << 20),
    KEY(worker.scheduler.prefix_caching, T_BOOL),
    KEY(worker.speculative.method, T_ENUM, .names = k_methods),
    KEY(worker.speculative.draft_model, T_NSTR, .flags = F_NONEMPTY),
    KINT(worker.speculative.k, 1, 16),
    KEY(worker.speculative.adaptive, T_BOOL),
    KINT(worker.sim.ttft_ms, 0, 600000),
    KDBL(worker.sim.tokens_per_s, 0, 1e6, .flags = F_MIN_EXCL),
};
static const size_t k_nkeys = sizeof k_keys / sizeof k_keys[0];

static int apply_rules(cfg_ctx *c, const ydoc_node *seq, const char *path);

/* A load or override context over this file's key table and rules parser. */
static cfg_ctx ctx_for(sol_config *cfg, const char *src, sol_err *err) {
    return (cfg_ctx){.cfg = cfg,
                     .src = src,
                     .err = err,
                     .keys = k_keys,
                     .n_keys = k_nkeys,
                     .apply_rules = apply_rules,
                     .apply_slos = cfg_apply_slos};
}

#define ROFF(m) offsetof(sol_route_rule, m)
#define RKEY(m, t, ...)                                                                            \
    { .path = #m, .type = t, .off = ROFF(m), __VA_ARGS__ }
#define RINT(m) RKEY(m, T_INT, .min = 0, .max = 1e9)

/* The keys of one rule's `if:` mapping. */
static const cfg_key k_cond_keys[] = {
    RKEY(tag, T_STR, .flags = F_NONEMPTY),
    RINT(prompt_chars_below),
    RINT(prompt_chars_above),
    RINT(max_tokens_below),
    RINT(max_tokens_above),
    RKEY(keywords, T_LIST, .flags = F_NONEMPTY | F_ITEMS_NONEMPTY),
    RKEY(model, T_STR, .flags = F_NONEMPTY),
};
static const size_t k_ncond_keys = sizeof k_cond_keys / sizeof k_cond_keys[0];
static const cfg_key k_rule_pool = RKEY(pool, T_STR, .check = CHK_NAME);

static void rule_init(sol_route_rule *r) {
    memset(r, 0, sizeof *r);
    r->prompt_chars_below = r->prompt_chars_above = SOL_RULE_UNSET;
    r->max_tokens_below = r->max_tokens_above = SOL_RULE_UNSET;
}

static void rule_clear(sol_route_rule *r) {
    free(r->tag);
    free(r->model);
    free(r->pool);
    cfg_strlist_clear(&r->keywords);
}

static void rules_clear(sol_route_rule *items, size_t n) {
    for (size_t i = 0; i < n; i++)
        rule_clear(&items[i]);
    free(items);
}

void sol_config_defaults(sol_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->log.level = SOL_LOG_INFO;
    sol_router_config *r = &cfg->router;
    r->http.listen = cfg_strdup("127.0.0.1:8080");
    r->http.max_body_bytes = 1048576;
    r->http.request_timeout_ms = 600000;
    r->workers.bind = cfg_strdup("tcp://127.0.0.1:5555");
    r->workers.heartbeat_ms = 1000;
    r->workers.dead_after_ms = 3000;
    r->workers.max_queue_per_pool = 256;
    r->routing.default_pool = cfg_strdup("precise");
    cfg_strlist_push(&r->routing.pools, "fast");
    cfg_strlist_push(&r->routing.pools, "precise");
    r->routing.classifier.threshold = 0.5;
    r->routing.classifier.positive_pool = cfg_strdup("fast");
    r->routing.affinity_prefix_chars = SOL_AFFINITY_PREFIX_CHARS_DEFAULT;
    r->routing.policy = SOL_ROUTE_CACHE_AWARE; /* bench/multiturn.sh: docs/benchmarks.md */
    r->routing.reply_tokens_mib = 16;          /* ~10^5 replies of 32 tokens */
    sol_worker_config *w = &cfg->worker;
    cfg_strlist_push(&w->router, "tcp://127.0.0.1:5555");
    w->pool = cfg_strdup("precise");
    w->id = cfg_strdup("");
    w->backend = SOL_BACKEND_CPU;
    w->tensor_parallel = 1;
    w->tp_timeout_ms = 60000;
    w->stall_after_ms = 120000;
    w->chat_template = cfg_strdup("");
    w->mmap = true;
    w->heartbeat_ms = 1000;
    w->kv.block_size = 16;
    w->kv.memory_fraction = 0.9;
    w->kv.max_model_len = 4096;
    w->kv.dtype = SOL_KV_F16;
    w->scheduler.max_num_seqs = 64;
    w->scheduler.max_batched_tokens = 2048;
    w->scheduler.prefix_caching = true;
    w->speculative.method = SOL_SPEC_OFF;
    w->speculative.k = 4;
    w->sim.ttft_ms = 50;
    w->sim.tokens_per_s = 100;
}

void sol_config_free(sol_config *cfg) {
    if (!cfg) return;
    for (size_t i = 0; i < k_nkeys; i++) {
        void *p = (char *)cfg + k_keys[i].off;
        if (k_keys[i].type == T_STR || k_keys[i].type == T_NSTR) {
            free(*(char **)p);
            *(char **)p = NULL;
        } else if (k_keys[i].type == T_LIST) {
            cfg_strlist_clear(p);
        }
    }
    rules_clear(cfg->router.routing.rules.items, cfg->router.routing.rules.n);
    cfg->router.routing.rules.items = NULL;
    cfg->router.routing.rules.n = 0;
    cfg_slos_clear(cfg);
    origin_free(cfg->origin);
    cfg->origin = NULL;
}

/* ---- loading ---------------------------------------------------------------------------- */

static int apply_map(cfg_ctx *c, const ydoc_node *map, const char *prefix) {
    char found[64];
    if (ydoc_is_null(map)) return 0; /* "kv:" with nothing under it keeps the defaults */
    if (map->kind != YDOC_MAP)
        return cfg_fail(c, map, *prefix ? prefix : "top level", "expected a mapping, found %s",
                        cfg_found(map, found, sizeof found));
    for (size_t i = 0; i < ydoc_map_len(map); i++) {
        const ydoc_node *key = map->items[2 * i], *val = map->items[2 * i + 1];
        char path[CFG_PATH_MAX];
        int rc = cfg_join(c, key, prefix, key->text, path);
        if (rc == 0) rc = cfg_check_duplicate(c, map, i, path);
        if (rc < 0) return rc;
        const cfg_key *k = cfg_find_key(c, path);
        if (k)
            rc = cfg_apply_leaf(c, k, c->cfg, val, path);
        else if (cfg_is_section(c, path)) {
            if (c->src) origin_record(c->cfg, path, c->src, key);
            rc = apply_map(c, val, path);
        } else
            rc = cfg_unknown_key(c, key, prefix, key->text);
        if (rc < 0) return rc;
    }
    return 0;
}

static int load_tree(sol_config *cfg, const ydoc_node *root, const char *name, sol_err *err) {
    cfg_ctx c = ctx_for(cfg, name, err);
    return apply_map(&c, root, "");
}

int sol_config_load(sol_config *cfg, const char *path, sol_err *err) {
    ydoc_node *root = NULL;
    int rc = ydoc_parse_file(path, &root, err);
    if (rc == 0) rc = load_tree(cfg, root, path, err);
    ydoc_free(root);
    return rc;
}

int sol_config_load_string(sol_config *cfg, const char *text, const char *name, sol_err *err) {
    ydoc_node *root = NULL;
    int rc = ydoc_parse_string(text, strlen(text), name, &root, err);
    if (rc == 0) rc = load_tree(cfg, root, name, err);
    ydoc_free(root);
    return rc;
}

/* ---- rules ------------------------------------------------------------------------------ */

static int parse_cond(cfg_ctx *c, const ydoc_node *map, const char *prefix, sol_route_rule *r) {
    char found[64];
    if (ydoc_is_null(map)) return 0;
    if (map->kind != YDOC_MAP)
        return cfg_fail(c, map, prefix, "expected a mapping of conditions, found %s",
                        cfg_found(map, found, sizeof found));
    int rc = cfg_apply_map_leaves(c, map, prefix, k_cond_keys, k_ncond_keys, r);
    if (rc < 0) return rc;
    if (r->prompt_chars_above != SOL_RULE_UNSET && r->prompt_chars_below != SOL_RULE_UNSET &&
        r->prompt_chars_above + 1 >= r->prompt_chars_below)
        return cfg_fail(c, map, prefix,
                        "prompt_chars_above (%d) and prompt_chars_below (%d) leave no length "
                        "that matches",
                        r->prompt_chars_above, r->prompt_chars_below);
    if (r->max_tokens_above != SOL_RULE_UNSET && r->max_tokens_below != SOL_RULE_UNSET &&
        r->max_tokens_above + 1 >= r->max_tokens_below)
        return cfg_fail(c, map, prefix,
                        "max_tokens_above (%d) and max_tokens_below (%d) leave no value that "
                        "matches",
                        r->max_tokens_above, r->max_tokens_below);
    return 0;
}

static int parse_rule(cfg_ctx *c, const ydoc_node *map, const char *prefix, sol_route_rule *r) {
    char found[64];
    if (ydoc_is_null(map) || map->kind != YDOC_MAP)
        return cfg_fail(c, map, prefix,
                        "expected a mapping like {if: {tag: fast}, pool: fast}, "
                        "found %s",
                        cfg_found(map, found, sizeof found));
    static const cfg_key rule_keys[] = {{.path = "if"}, {.path = "pool"}};
    for (size_t i = 0; i < ydoc_map_len(map); i++) {
        const ydoc_node *key = map->items[2 * i], *val = map->items[2 * i + 1];
        char path[CFG_PATH_MAX];
        int rc = cfg_join(c, key, prefix, key->text, path);
        if (rc == 0) rc = cfg_check_duplicate(c, map, i, path);
        if (rc < 0) return rc;
        if (!strcmp(key->text, "if"))
            rc = parse_cond(c, val, path, r);
        else if (!strcmp(key->text, "pool"))
            rc = cfg_apply_leaf(c, &k_rule_pool, r, val, path);
        else
            rc = cfg_unknown_in(c, key, path, rule_keys, 2);
        if (rc < 0) return rc;
    }
    if (!r->pool) return cfg_fail(c, map, prefix, "missing required key \"pool\"");
    return 0;
}

static int apply_rules(cfg_ctx *c, const ydoc_node *seq, const char *path) {
    char found[64];
    if (!ydoc_is_null(seq) && seq->kind != YDOC_SEQ)
        return cfg_fail(c, seq, path, "expected a list of rules, found %s",
                        cfg_found(seq, found, sizeof found));
    size_t n = ydoc_is_null(seq) ? 0 : seq->n;
    sol_route_rule *items = n ? calloc(n, sizeof *items) : NULL;
    if (n && !items) return sol_err_set(c->err, -ENOMEM, "%s: out of memory", path);
    int rc = 0;
    for (size_t i = 0; i < n; i++)
        rule_init(&items[i]);
    for (size_t i = 0; i < n && rc == 0; i++) {
        char rpath[CFG_PATH_MAX];
        snprintf(rpath, sizeof rpath, "%s[%zu]", path, i);
        rc = parse_rule(c, seq->items[i], rpath, &items[i]);
    }
    if (rc < 0) {
        rules_clear(items, n);
        return rc;
    }
    rules_clear(c->cfg->router.routing.rules.items, c->cfg->router.routing.rules.n);
    c->cfg->router.routing.rules.items = items;
    c->cfg->router.routing.rules.n = n;
    return 0;
}

/* ---- overrides -------------------------------------------------------------------------- */

int sol_config_set(sol_config *cfg, const char *key_path, const char *value, sol_err *err) {
    cfg_ctx c = ctx_for(cfg, NULL, err);
    const cfg_key *k = cfg_find_key(&c, key_path);
    int structured =
        !k || k->type == T_RULES || k->type == T_SLOS || (k->type == T_LIST && value[0] == '[');
    if (!k && !cfg_is_section(&c, key_path)) {
        const char *dot = strrchr(key_path, '.');
        char prefix[CFG_PATH_MAX];
        snprintf(prefix, sizeof prefix, "%.*s", dot ? (int)(dot - key_path) : 0, key_path);
        if (*prefix && !cfg_is_section(&c, prefix))
            return cfg_fail(&c, NULL, key_path, "unknown key");
        return cfg_unknown_key(&c, NULL, prefix, dot ? dot + 1 : key_path);
    }
    if (!structured) {
        ydoc_node scalar = {.kind = YDOC_SCALAR, .text = (char *)value, .plain = 1};
        return cfg_apply_leaf(&c, k, cfg, &scalar, key_path);
    }
    ydoc_node *root = NULL;
    int rc = ydoc_parse_string(value, strlen(value), "command line", &root, err);
    if (rc < 0) return sol_err_wrap(err, "%s: ", key_path);
    rc = k ? cfg_apply_leaf(&c, k, cfg, root, key_path) : apply_map(&c, root, key_path);
    ydoc_free(root);
    return rc;
}

int sol_config_append(sol_config *cfg, const char *key_path, const char *value, sol_err *err) {
    cfg_ctx c = ctx_for(cfg, NULL, err);
    const cfg_key *k = cfg_find_key(&c, key_path);
    if (!k || k->type != T_LIST)
        return cfg_fail(&c, NULL, key_path, "not a list key; cannot append");
    ydoc_node scalar = {.kind = YDOC_SCALAR, .text = (char *)value, .plain = 0};
    sol_strlist *l = (sol_strlist *)((char *)cfg + k->off);
    int rc = cfg_check_list_item(&c, k, l, &scalar, key_path);
    if (rc < 0) return rc;
    cfg_strlist_push(l, value);
    origin_record(cfg, key_path, NULL, NULL);
    return 0;
}

/* ---- cross-key checks ------------------------------------------------------------------- */

static int vfail(const sol_config *cfg, sol_err *err, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int vfail(const sol_config *cfg, sol_err *err, const char *path, const char *fmt, ...) {
    char where[CFG_PATH_MAX + 64], msg[SOL_ERR_MSG_MAX];
    origin_where(cfg, path, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sol_err_set(err, -EINVAL, "%s%s: %s", where, path, msg);
}

static int in_list(const sol_strlist *l, const char *s) {
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->items[i], s)) return 1;
    return 0;
}

static void join_list(const sol_strlist *l, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < l->n && used < cap; i++)
        used += snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", l->items[i]);
}

static int check_pool(const sol_config *cfg, sol_err *err, const char *path, const char *pool) {
    const sol_strlist *pools = &cfg->router.routing.pools;
    if (in_list(pools, pool)) return 0;
    char all[256];
    join_list(pools, all, sizeof all);
    return vfail(cfg, err, path, "\"%s\" is not one of router.routing.pools (%s)", pool, all);
}

static int validate_router(const sol_config *cfg, sol_err *err) {
    const sol_router_config *r = &cfg->router;
    int rc = check_pool(cfg, err, "router.routing.default_pool", r->routing.default_pool);
    if (rc == 0 && r->routing.fallback_pool)
        rc = check_pool(cfg, err, "router.routing.fallback_pool", r->routing.fallback_pool);
    if (rc == 0 && r->routing.fallback_pool &&
        !strcmp(r->routing.fallback_pool, r->routing.default_pool))
        rc = vfail(cfg, err, "router.routing.fallback_pool",
                   "\"%s\" is also router.routing.default_pool; a fallback must be another pool",
                   r->routing.fallback_pool);
    if (rc == 0 && r->routing.classifier.weights_file)
        rc = check_pool(cfg, err, "router.routing.classifier.positive_pool",
                        r->routing.classifier.positive_pool);
    for (size_t i = 0; rc == 0 && i < r->routing.rules.n; i++) {
        char path[CFG_PATH_MAX];
        snprintf(path, sizeof path, "router.routing.rules[%zu].pool", i);
        rc = check_pool(cfg, err, path, r->routing.rules.items[i].pool);
    }
    for (size_t i = 0; rc == 0 && i < r->slo.n; i++) {
        char path[CFG_PATH_MAX];
        snprintf(path, sizeof path, "router.slo[%zu].pool", i);
        rc = check_pool(cfg, err, path, r->slo.items[i].pool);
    }
    /* only affinity hashes the leading characters: another value under another policy would be
     * ignored, so it is refused */
    if (rc == 0 && r->routing.policy != SOL_ROUTE_AFFINITY &&
        r->routing.affinity_prefix_chars != SOL_AFFINITY_PREFIX_CHARS_DEFAULT)
        rc = vfail(cfg, err, "router.routing.affinity_prefix_chars",
                   "%d applies to router.routing.policy affinity only (the policy is %s)",
                   r->routing.affinity_prefix_chars, k_policies[r->routing.policy]);
    if (rc == 0 && r->workers.dead_after_ms <= r->workers.heartbeat_ms)
        rc = vfail(cfg, err, "router.workers.dead_after_ms",
                   "%d must be greater than router.workers.heartbeat_ms (%d)",
                   r->workers.dead_after_ms, r->workers.heartbeat_ms);
    return rc;
}

static int validate_worker(const sol_config *cfg, sol_err *err) {
    const sol_worker_config *w = &cfg->worker;
    if (w->backend != SOL_BACKEND_SIM && !w->model)
        return vfail(cfg, err, "worker.model",
                     "required when worker.backend is %s (the path of a GGUF file; only backend "
                     "sim runs without a model)",
                     sol_backend_kind_name(w->backend));
    if (w->speculative.method == SOL_SPEC_DRAFT && w->backend != SOL_BACKEND_SIM &&
        !w->speculative.draft_model)
        return vfail(cfg, err, "worker.speculative.draft_model",
                     "required when worker.speculative.method is draft (or use method ngram, "
                     "which needs no model)");
    if (w->threads > 0 && w->backend == SOL_BACKEND_CUDA_EMU)
        return vfail(cfg, err, "worker.threads",
                     "%d applies to backend cpu; cuda-emu runs each kernel launch on the calling "
                     "thread (leave it 0)",
                     w->threads);
    /* the second KV tier: its copies are built for the CPU and CUDA backends, it reuses cached
     * blocks, its folder is the CPU backend's file-backed store (a GPU's is page-locked host
     * memory) and means nothing without it (docs/kv_cache.md, "Second tier") */
    if (w->kv.tier2_blocks > 0 && w->backend == SOL_BACKEND_SIM)
        return vfail(cfg, err, "worker.kv.tier2_blocks",
                     "%d applies to backends cpu, cuda and cuda-emu; backend sim runs no model",
                     w->kv.tier2_blocks);
    if (w->kv.tier2_dir && w->backend != SOL_BACKEND_CPU)
        return vfail(cfg, err, "worker.kv.tier2_dir",
                     "\"%s\" applies to backend cpu (a file-backed tier); %s keeps its second tier "
                     "in page-locked host memory",
                     w->kv.tier2_dir, sol_backend_kind_name(w->backend));
    if (w->kv.tier2_blocks > 0 && !w->scheduler.prefix_caching)
        return vfail(cfg, err, "worker.kv.tier2_blocks",
                     "%d needs worker.scheduler.prefix_caching: the tier keeps the cached blocks "
                     "the pool evicts",
                     w->kv.tier2_blocks);
    if (w->kv.tier2_dir && w->kv.tier2_blocks == 0)
        return vfail(cfg, err, "worker.kv.tier2_dir",
                     "\"%s\" applies only with worker.kv.tier2_blocks > 0 (no second tier is set)",
                     w->kv.tier2_dir);
    if (w->tensor_parallel > 1 && w->backend == SOL_BACKEND_SIM)
        return vfail(cfg, err, "worker.tensor_parallel",
                     "%d applies to backends cpu, cuda and cuda-emu; backend sim runs no model",
                     w->tensor_parallel);
    if (w->backend == SOL_BACKEND_CUDA_EMU && w->device + w->tensor_parallel > 8)
        return vfail(cfg, err, "worker.device",
                     "%d with worker.tensor_parallel %d needs emulated devices up to %d; the "
                     "emulation has 0..7",
                     w->device, w->tensor_parallel, w->device + w->tensor_parallel - 1);
    if (w->backend_variant && w->backend != SOL_BACKEND_CPU)
        return vfail(cfg, err, "worker.backend_variant",
                     "\"%s\" applies to backend cpu (an ISA and/or the llamacpp mode), found %s",
                     w->backend_variant, sol_backend_kind_name(w->backend));
    if (w->device > 0 && w->backend != SOL_BACKEND_CUDA && w->backend != SOL_BACKEND_CUDA_EMU)
        return vfail(cfg, err, "worker.device", "%d applies to backend cuda, found %s", w->device,
                     sol_backend_kind_name(w->backend));
    if (w->scheduler.max_batched_tokens < w->scheduler.max_num_seqs)
        return vfail(cfg, err, "worker.scheduler.max_batched_tokens",
                     "%d is below worker.scheduler.max_num_seqs (%d): each running sequence "
                     "needs a token per step",
                     w->scheduler.max_batched_tokens, w->scheduler.max_num_seqs);
    long long tokens = (long long)w->kv.num_blocks * w->kv.block_size;
    if (w->kv.num_blocks && tokens < w->kv.max_model_len)
        return vfail(cfg, err, "worker.kv.num_blocks",
                     "%d blocks of %d tokens hold %lld tokens, fewer than "
                     "worker.kv.max_model_len (%d)",
                     w->kv.num_blocks, w->kv.block_size, tokens, w->kv.max_model_len);
    return 0;
}

int sol_config_validate(const sol_config *cfg, int which, sol_err *err) {
    int rc = 0;
    if (which & SOL_CONFIG_ROUTER) rc = validate_router(cfg, err);
    if (rc == 0 && (which & SOL_CONFIG_WORKER)) rc = validate_worker(cfg, err);
    return rc;
}

/* ---- printing --------------------------------------------------------------------------- */

static void put_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch == '\n')
            fputs("\\n", f);
        else if (ch == '\t')
            fputs("\\t", f);
        else if (ch < 0x20 || ch == 0x7f)
            fprintf(f, "\\x%02x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* The shortest form that reads back to the same double, so 0.9 prints as 0.9. */
static void put_dbl(FILE *f, double x) {
    char buf[40];
    snprintf(buf, sizeof buf, "%.15g", x);
    if (strtod(buf, NULL) != x) snprintf(buf, sizeof buf, "%.17g", x);
    fputs(buf, f);
}

static void put_list(FILE *f, const sol_strlist *l) {
    fputc('[', f);
    for (size_t i = 0; i < l->n; i++) {
        if (i) fputs(", ", f);
        put_str(f, l->items[i]);
    }
    fputc(']', f);
}

static void put_value(FILE *f, const cfg_key *k, const void *base) {
    const void *p = (const char *)base + k->off;
    switch (k->type) {
    case T_INT:
        fprintf(f, "%d", *(const int *)p);
        break;
    case T_DBL:
        put_dbl(f, *(const double *)p);
        break;
    case T_BOOL:
        fputs(*(const bool *)p ? "true" : "false", f);
        break;
    case T_STR:
    case T_NSTR:
        if (*(char *const *)p)
            put_str(f, *(char *const *)p);
        else
            fputs("null", f);
        break;
    case T_ENUM:
        fputs(k->names[*(const int *)p], f);
        break;
    case T_LIST:
        put_list(f, p);
        break;
    default:
        break;
    }
}

static void put_rule(FILE *f, const sol_route_rule *r, int indent) {
    fprintf(f, "%*s- if: {", indent, "");
    int first = 1;
    for (size_t i = 0; i < k_ncond_keys; i++) {
        const cfg_key *k = &k_cond_keys[i];
        const void *p = (const char *)r + k->off;
        int set = k->type == T_INT    ? *(const int *)p != SOL_RULE_UNSET
                  : k->type == T_LIST ? ((const sol_strlist *)p)->n > 0
                                      : *(char *const *)p != NULL;
        if (!set) continue;
        fprintf(f, "%s%s: ", first ? "" : ", ", k->path);
        put_value(f, k, r);
        first = 0;
    }
    fprintf(f, "}\n%*spool: ", indent + 2, "");
    put_str(f, r->pool);
    fputc('\n', f);
}

static int key_wanted(const cfg_key *k, int which) {
    if (!strncmp(k->path, "router.", 7)) return which & SOL_CONFIG_ROUTER;
    if (!strncmp(k->path, "worker.", 7)) return which & SOL_CONFIG_WORKER;
    return 1;
}

/* Split "a.b.c" into components; returns how many. */
static int split_path(const char *path, char *buf, size_t cap, char **parts, int max) {
    snprintf(buf, cap, "%s", path);
    int n = 0;
    for (char *tok = strtok(buf, "."); tok && n < max; tok = strtok(NULL, "."))
        parts[n++] = tok;
    return n;
}

int sol_config_print(const sol_config *cfg, FILE *f, int which) {
    char prev_buf[CFG_PATH_MAX] = "", cur_buf[CFG_PATH_MAX];
    char *prev[8], *cur[8];
    int nprev = 0;
    for (size_t i = 0; i < k_nkeys; i++) {
        const cfg_key *k = &k_keys[i];
        if (!key_wanted(k, which)) continue;
        int n = split_path(k->path, cur_buf, sizeof cur_buf, cur, 8);
        int same = 0; /* sections (all but the last component) already open */
        while (same < n - 1 && same < nprev - 1 && !strcmp(cur[same], prev[same]))
            same++;
        for (int d = same; d < n - 1; d++)
            fprintf(f, "%*s%s:\n", 2 * d, "", cur[d]);
        int indent = 2 * (n - 1);
        if (k->type == T_RULES) {
            const sol_route_rule *rules = cfg->router.routing.rules.items;
            size_t nr = cfg->router.routing.rules.n;
            fprintf(f, "%*s%s:%s\n", indent, "", cur[n - 1], nr ? "" : " []");
            for (size_t r = 0; r < nr; r++)
                put_rule(f, &rules[r], indent + 2);
        } else if (k->type == T_SLOS) {
            fprintf(f, "%*s%s:%s\n", indent, "", cur[n - 1], cfg->router.slo.n ? "" : " []");
            cfg_put_slos(f, cfg, indent + 2);
        } else {
            fprintf(f, "%*s%s: ", indent, "", cur[n - 1]);
            put_value(f, k, cfg);
            fputc('\n', f);
        }
        memcpy(prev_buf, cur_buf, sizeof prev_buf);
        nprev = split_path(k->path, prev_buf, sizeof prev_buf, prev, 8);
    }
    return ferror(f) ? -EIO : 0;
}

const char *sol_backend_kind_name(sol_backend_kind b) {
    return (b >= SOL_BACKEND_CPU && b <= SOL_BACKEND_CUDA_EMU) ? k_backends[b] : "?";
}

const char *sol_kv_dtype_name(sol_kv_dtype d) {
    return (d >= SOL_KV_F16 && d <= SOL_KV_F32) ? k_dtypes[d] : "?";
}

const char *sol_spec_method_name(sol_spec_method m) {
    return (m >= SOL_SPEC_OFF && m <= SOL_SPEC_NGRAM) ? k_methods[m] : "?";
}
