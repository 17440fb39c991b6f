/* Two passes: the first reads every flag (so --help wins and --config is known wherever it
 * appears), the second applies the overrides after the file is loaded, in command-line order. */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static int set_kv(sol_config *cfg, const char *value, void *user, sol_err *err) {
    (void)user;
    const char *eq = strchr(value, '=');
    if (!eq || eq == value)
        return sol_err_set(err, -EINVAL,
                           "expected KEY=VALUE (e.g. worker.kv.block_size=32), "
                           "found \"%s\"",
                           value);
    char key[160];
    if ((size_t)(eq - value) >= sizeof key)
        return sol_err_set(err, -EINVAL, "key \"%.40s...\" is too long", value);
    memcpy(key, value, (size_t)(eq - value));
    key[eq - value] = '\0';
    return sol_config_set(cfg, key, eq + 1, err);
}

/* --config, --print-config and --help are CUSTOM without a handler: the parser handles them. */
static const sol_cli_flag k_common[] = {
    {"--config", "FILE", SOL_FLAG_CUSTOM, NULL, "YAML configuration file (docs/configuration.md)",
     NULL},
    {"--print-config", NULL, SOL_FLAG_CUSTOM, NULL,
     "print the effective configuration as YAML and exit", NULL},
    {"--set", "KEY=VALUE", SOL_FLAG_CUSTOM, NULL,
     "set any config key, e.g. --set worker.kv.block_size=32 (repeatable)", set_kv},
    {"--log-level", "LEVEL", SOL_FLAG_SET, "log.level", "debug, info, warn, error or off", NULL},
    {"--log-json", NULL, SOL_FLAG_TRUE, "log.json", "log one JSON object per line", NULL},
    {"--help", NULL, SOL_FLAG_CUSTOM, NULL, "show this help and exit", NULL},
    {NULL, NULL, 0, NULL, NULL, NULL},
};

static const sol_cli_flag *find_in(const sol_cli_flag *flags, const char *name, size_t len) {
    for (; flags && flags->name; flags++)
        if (strlen(flags->name) == len && !strncmp(flags->name, name, len)) return flags;
    return NULL;
}

static const char *closest_flag(const sol_cli_spec *spec, const char *typed) {
    const sol_cli_flag *lists[2] = {k_common, spec->flags};
    const char *best = NULL;
    size_t best_d = 4; /* flags are typed in full: suggest only for small slips */
    for (int l = 0; l < 2; l++)
        for (const sol_cli_flag *f = lists[l]; f && f->name; f++) {
            size_t d = sol_edit_distance(typed, f->name);
            if (d < best_d) best_d = d, best = f->name;
        }
    return best;
}

typedef struct {
    const sol_cli_flag *flag;
    const char *value;
} cli_item;

/* Read one argument (and its value) at argv[*i]; fills `it` or sets res fields. */
static int read_flag(const sol_cli_spec *spec, int argc, char **argv, int *i, cli_item *it,
                     sol_err *err) {
    const char *arg = argv[*i];
    if (!strcmp(arg, "-h")) arg = "--help";
    if (strncmp(arg, "--", 2))
        return sol_err_set(err, -EINVAL, "unexpected argument \"%s\" (flags start with --)", arg);
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    const sol_cli_flag *f = find_in(k_common, arg, len);
    if (!f) f = find_in(spec->flags, arg, len);
    if (!f) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(len < 60 ? len : 60), arg);
        const char *hint = closest_flag(spec, name);
        if (hint)
            return sol_err_set(err, -EINVAL, "unknown flag %s (did you mean %s?)", name, hint);
        return sol_err_set(err, -EINVAL, "unknown flag %s", name);
    }
    it->flag = f;
    it->value = NULL;
    if (!f->metavar) {
        if (eq) return sol_err_set(err, -EINVAL, "%s takes no value", f->name);
        return 0;
    }
    if (eq) {
        it->value = eq + 1;
    } else if (*i + 1 < argc) {
        it->value = argv[++*i];
    } else {
        return sol_err_set(err, -EINVAL, "%s needs a value (%s)", f->name, f->metavar);
    }
    return 0;
}

/* Apply one override; `appended` tracks which APPEND keys already replaced their list. */
static int apply_item(const sol_cli_spec *spec, const cli_item *it, sol_config *cfg,
                      const char **appended, size_t *nappended, sol_err *err) {
    const sol_cli_flag *f = it->flag;
    int rc = 0;
    switch (f->action) {
    case SOL_FLAG_SET:
        rc = sol_config_set(cfg, f->key, it->value, err);
        break;
    case SOL_FLAG_TRUE:
    case SOL_FLAG_FALSE:
        rc = sol_config_set(cfg, f->key, f->action == SOL_FLAG_TRUE ? "true" : "false", err);
        break;
    case SOL_FLAG_APPEND: {
        int seen = 0;
        for (size_t j = 0; j < *nappended && !seen; j++)
            seen = !strcmp(appended[j], f->key);
        if (seen) {
            rc = sol_config_append(cfg, f->key, it->value, err);
        } else {
            appended[(*nappended)++] = f->key;
            rc = sol_config_set(cfg, f->key, it->value, err);
        }
        break;
    }
    case SOL_FLAG_CUSTOM:
        if (f->fn) rc = f->fn(cfg, it->value, spec->user, err);
        break;
    }
    if (rc < 0) {
        if (it->value) return sol_err_wrap(err, "%s %s: ", f->name, it->value);
        return sol_err_wrap(err, "%s: ", f->name);
    }
    return 0;
}

int sol_cli_parse(const sol_cli_spec *spec, int argc, char **argv, sol_config *cfg,
                  sol_cli_result *res, sol_err *err) {
    memset(res, 0, sizeof *res);
    cli_item *items = calloc((size_t)(argc > 0 ? argc : 1), sizeof *items);
    const char **appended = calloc((size_t)(argc > 0 ? argc : 1), sizeof *appended);
    size_t n = 0, nappended = 0;
    int rc = (items && appended) ? 0 : sol_err_set(err, -ENOMEM, "out of memory");
    for (int i = 1; rc == 0 && i < argc; i++) {
        cli_item it;
        rc = read_flag(spec, argc, argv, &i, &it, err);
        if (rc < 0) break;
        const char *name = it.flag->name;
        if (!strcmp(name, "--help"))
            res->help = true;
        else if (!strcmp(name, "--print-config"))
            res->print_config = true;
        else if (!strcmp(name, "--config") && res->config_path)
            rc = sol_err_set(err, -EINVAL, "--config given twice");
        else if (!strcmp(name, "--config"))
            res->config_path = it.value;
        else
            items[n++] = it;
    }
    if (rc == 0 && !res->help && res->config_path) rc = sol_config_load(cfg, res->config_path, err);
    for (size_t j = 0; rc == 0 && !res->help && j < n; j++)
        rc = apply_item(spec, &items[j], cfg, appended, &nappended, err);
    free(items);
    free(appended);
    return rc;
}

static void usage_flags(const sol_cli_flag *f, FILE *out) {
    for (; f && f->name; f++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s", f->name, f->metavar ? " " : "",
                 f->metavar ? f->metavar : "");
        fprintf(out, "  %-28s %s", left, f->help);
        if (f->key) fprintf(out, " [%s]", f->key);
        fputc('\n', out);
    }
}

void sol_cli_usage(const sol_cli_spec *spec, FILE *f) {
    fprintf(f, "usage: %s [--config FILE] [FLAG...]\n%s\n\n", spec->prog, spec->summary);
    fputs("Common flags:\n", f);
    usage_flags(k_common, f);
    fprintf(f, "\n%s flags:\n", spec->prog);
    usage_flags(spec->flags, f);
    fputs("\nPrecedence: built-in defaults < --config file < flags (in command-line order).\n"
          "[key] names the config key a flag sets; any key can be set with --set KEY=VALUE.\n"
          "Exit status: 0 ok (--help, --print-config), 2 bad flag or configuration,\n"
          "3 configuration fine but serving is not implemented in this build.\n",
          f);
}

int sol_cli_start(const sol_cli_spec *spec, int argc, char **argv, sol_config *cfg) {
    sol_err err = {0};
    sol_cli_result res;
    if (sol_cli_parse(spec, argc, argv, cfg, &res, &err) < 0) {
        fprintf(stderr, "%s: %s\n", spec->prog, err.msg);
        return SOL_EXIT_USAGE;
    }
    if (res.help) {
        sol_cli_usage(spec, stdout);
        return SOL_EXIT_OK;
    }
    int bad = sol_config_validate(cfg, spec->which, &err) < 0;
    if (res.print_config) {
        printf("# %s effective configuration (defaults < %s < flags)\n", spec->prog,
               res.config_path ? res.config_path : "no file");
        if (sol_config_print(cfg, stdout, spec->which) < 0 || fflush(stdout) != 0) {
            fprintf(stderr, "%s: cannot write the configuration to stdout\n", spec->prog);
            return SOL_EXIT_USAGE;
        }
    }
    if (bad) {
        fprintf(stderr, "%s: %s\n", spec->prog, err.msg);
        return SOL_EXIT_USAGE;
    }
    if (res.print_config) return SOL_EXIT_OK;
    sol_log_setup(cfg->log.level, cfg->log.json,
                  spec->which == SOL_CONFIG_ROUTER ? "router" : "worker");
    return -1;
}
