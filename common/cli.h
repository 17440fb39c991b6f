/* cli: the command-line parser shared by sol-router and sol-worker. Most flags are names for
 * config keys, so a flag and the same key in the YAML file go through one type/range check. */
#ifndef SOL_CLI_H
#define SOL_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "config.h"
#include "err.h"

/* Exit codes the binaries share (documented in docs/configuration.md). */
enum {
    SOL_EXIT_OK = 0,
    SOL_EXIT_USAGE = 2,           /* bad flag or bad configuration */
    SOL_EXIT_NOT_IMPLEMENTED = 3, /* the configuration is fine but this build cannot serve yet */
};

typedef enum {
    SOL_FLAG_SET,    /* --flag VALUE: sol_config_set(key, VALUE) */
    SOL_FLAG_TRUE,   /* --flag: key = true */
    SOL_FLAG_FALSE,  /* --flag: key = false */
    SOL_FLAG_APPEND, /* repeatable --flag VALUE: the first replaces the list, later ones append */
    SOL_FLAG_CUSTOM, /* calls fn(cfg, VALUE or NULL, user, err) */
} sol_flag_action;

typedef struct sol_cli_flag {
    const char *name;    /* "--listen" */
    const char *metavar; /* "HOST:PORT"; NULL for a switch */
    sol_flag_action action;
    const char *key; /* config key written (SET, TRUE, FALSE, APPEND) */
    const char *help;
    int (*fn)(sol_config *cfg, const char *value, void *user, sol_err *err); /* CUSTOM */
} sol_cli_flag;

typedef struct sol_cli_spec {
    const char *prog;          /* "sol-router" */
    const char *summary;       /* one line printed under the usage line */
    int which;                 /* SOL_CONFIG_ROUTER or _WORKER: what is printed and validated */
    const sol_cli_flag *flags; /* the binary's own flags, ended by an entry with name NULL */
    void *user;                /* passed to CUSTOM handlers */
} sol_cli_spec;

typedef struct sol_cli_result {
    const char *config_path; /* --config FILE (borrowed from argv), NULL if none */
    bool print_config;
    bool help;
} sol_cli_result;

/* Parse argv, load --config over the defaults already in `cfg`, then apply the other flags in
 * command-line order (so flags beat the file whatever their position). With --help nothing is
 * loaded. Validation is left to the caller (sol_cli_start does it). */
int sol_cli_parse(const sol_cli_spec *spec, int argc, char **argv, sol_config *cfg,
                  sol_cli_result *res, sol_err *err);

/* The usage text: every common flag and every flag of `spec`. */
void sol_cli_usage(const sol_cli_spec *spec, FILE *f);

/* The whole start-up of a binary: parse, --help, validation, --print-config, logging setup.
 * Returns -1 when the program should go on serving with `cfg`, else the exit code to return
 * (errors already printed to stderr as "prog: message"). `cfg` holds defaults on entry. */
int sol_cli_start(const sol_cli_spec *spec, int argc, char **argv, sol_config *cfg);

#endif
