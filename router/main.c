/* sol-router entry point: flags and configuration; the HTTP, broker and metrics actors hang off
 * main() once they exist. Router-specific flags live in k_router_flags: extend them there. */
#include <stdio.h>

#include "cli.h"
#include "config.h"

static const sol_cli_flag k_router_flags[] = {
    {"--listen", "HOST:PORT", SOL_FLAG_SET, "router.http.listen", "HTTP address to listen on",
     NULL},
    {"--bind", "ZMQ_ENDPOINT", SOL_FLAG_SET, "router.workers.bind",
     "ZeroMQ endpoint the workers connect to", NULL},
    {NULL, NULL, 0, NULL, NULL, NULL},
};

static const sol_cli_spec k_router_cli = {
    .prog = "sol-router",
    .summary = "OpenAI-compatible HTTP front end that routes requests to pools of sol-worker.",
    .which = SOL_CONFIG_ROUTER,
    .flags = k_router_flags,
};

/* Defaults < file < flags into `cfg`; returns -1 to go on serving, else the exit code. */
static int router_cli_parse(int argc, char **argv, sol_config *cfg) {
    sol_config_defaults(cfg);
    return sol_cli_start(&k_router_cli, argc, argv, cfg);
}

int main(int argc, char **argv) {
    sol_config cfg;
    int rc = router_cli_parse(argc, argv, &cfg);
    if (rc < 0) {
        fprintf(stderr, "sol-router: serving is not implemented yet in this build (config OK)\n");
        rc = SOL_EXIT_NOT_IMPLEMENTED;
    }
    sol_config_free(&cfg);
    return rc;
}
