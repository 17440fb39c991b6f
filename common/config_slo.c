/* config_slo: router.slo (config_slo.h). Each entry is a mapping checked against one small key
 * table, as rules are; a pool named twice is refused (which would win is not obvious). */
#include "config_slo.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SOFF(m) offsetof(sol_pool_slo, m)
static const cfg_key k_slo_keys[] = {
    {.path = "pool", .type = T_STR, .off = SOFF(pool), .check = CHK_NAME},
    {.path = "ttft_ms", .type = T_INT, .off = SOFF(slo.ms[SOL_SLO_TTFT]), .max = SOL_SLO_MAX_MS},
    {.path = "tpot_ms", .type = T_INT, .off = SOFF(slo.ms[SOL_SLO_TPOT]), .max = SOL_SLO_MAX_MS},
    {.path = "deadline_ms",
     .type = T_INT,
     .off = SOFF(slo.ms[SOL_SLO_DEADLINE]),
     .max = SOL_SLO_MAX_MS},
};
enum { N_SLO_KEYS = sizeof k_slo_keys / sizeof k_slo_keys[0] };

static void clear(sol_pool_slo *items, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(items[i].pool);
    free(items);
}

void cfg_slos_clear(sol_config *cfg) {
    clear(cfg->router.slo.items, cfg->router.slo.n);
    cfg->router.slo.items = NULL;
    cfg->router.slo.n = 0;
}

static int parse_one(cfg_ctx *c, const ydoc_node *map, const char *prefix, sol_pool_slo *s) {
    char found[64];
    if (ydoc_is_null(map) || map->kind != YDOC_MAP)
        return cfg_fail(c, map, prefix,
                        "expected a mapping like {pool: fast, ttft_ms: 500, tpot_ms: 50}, found %s",
                        cfg_found(map, found, sizeof found));
    int rc = cfg_apply_map_leaves(c, map, prefix, k_slo_keys, N_SLO_KEYS, s);
    if (rc < 0) return rc;
    if (!s->pool) return cfg_fail(c, map, prefix, "missing required key \"pool\"");
    return 0;
}

int cfg_apply_slos(cfg_ctx *c, const ydoc_node *seq, const char *path) {
    char found[64];
    if (!ydoc_is_null(seq) && seq->kind != YDOC_SEQ)
        return cfg_fail(c, seq, path,
                        "expected a list of {pool, ttft_ms, tpot_ms, deadline_ms}, found %s",
                        cfg_found(seq, found, sizeof found));
    size_t n = ydoc_is_null(seq) ? 0 : seq->n;
    sol_pool_slo *items = n ? calloc(n, sizeof *items) : NULL;
    if (n && !items) return sol_err_set(c->err, -ENOMEM, "%s: out of memory", path);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char ipath[CFG_PATH_MAX];
        snprintf(ipath, sizeof ipath, "%s[%zu]", path, i);
        rc = parse_one(c, seq->items[i], ipath, &items[i]);
        for (size_t j = 0; rc == 0 && j < i; j++)
            if (!strcmp(items[j].pool, items[i].pool))
                rc = cfg_fail(c, seq->items[i], ipath,
                              "pool \"%s\" has targets already (%s[%zu]); one entry per pool",
                              items[i].pool, path, j);
    }
    if (rc < 0) {
        clear(items, n);
        return rc;
    }
    cfg_slos_clear(c->cfg);
    c->cfg->router.slo.items = items;
    c->cfg->router.slo.n = n;
    return 0;
}

void cfg_put_slos(FILE *f, const sol_config *cfg, int indent) {
    for (size_t i = 0; i < cfg->router.slo.n; i++) {
        const sol_pool_slo *s = &cfg->router.slo.items[i];
        fprintf(f, "%*s- {pool: %s", indent, "", s->pool);
        for (size_t k = 1; k < N_SLO_KEYS; k++)
            fprintf(f, ", %s: %d", k_slo_keys[k].path,
                    *(const int *)((const char *)s + k_slo_keys[k].off));
        fputs("}\n", f);
    }
}
