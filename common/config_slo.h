/* config_slo: router.slo, the per-pool default latency targets - a YAML list of
 * {pool, ttft_ms, tpot_ms, deadline_ms} parsed, checked, freed and printed. Private to config.c. */
#ifndef SOL_CONFIG_SLO_H
#define SOL_CONFIG_SLO_H

#include <stdio.h>

#include "config_key.h"

/* Replaces cfg->router.slo from a YAML sequence (null or [] clears it); errors name the file,
 * line, column and key (router.slo[1].ttft_ms). */
int cfg_apply_slos(cfg_ctx *c, const ydoc_node *seq, const char *path);
void cfg_slos_clear(sol_config *cfg);
/* Every entry, as a YAML list at `indent`. */
void cfg_put_slos(FILE *f, const sol_config *cfg, int indent);

#endif
