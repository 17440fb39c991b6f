/* sol-worker entry point: flags and configuration; the link and engine actors hang off main()
 * once they exist. Worker-specific flags live in k_worker_flags: extend them there. */
#include <stdio.h>

#include "cli.h"
#include "config.h"

static const sol_cli_flag k_worker_flags[] = {
    {"--router", "ZMQ_ENDPOINT", SOL_FLAG_APPEND, "worker.router",
     "router to connect to (repeatable; replaces the file's list)", NULL},
    {"--pool", "NAME", SOL_FLAG_SET, "worker.pool", "pool this worker serves", NULL},
    {"--model", "PATH", SOL_FLAG_SET, "worker.model", "GGUF model file", NULL},
    {"--draft-model", "PATH", SOL_FLAG_SET, "worker.speculative.draft_model",
     "GGUF draft model for speculative decoding", NULL},
    {"--threads", "N", SOL_FLAG_SET, "worker.threads", "CPU threads (0 = all cores)", NULL},
    {"--backend", "cpu|cuda|sim", SOL_FLAG_SET, "worker.backend", "compute backend", NULL},
    {"--no-mmap", NULL, SOL_FLAG_FALSE, "worker.mmap", "read weights into memory, no mmap", NULL},
    {"--mlock", NULL, SOL_FLAG_TRUE, "worker.mlock", "lock weights in RAM", NULL},
    {"--id", "ID", SOL_FLAG_SET, "worker.id", "worker identity (default: host name and pid)", NULL},
    {NULL, NULL, 0, NULL, NULL, NULL},
};

static const sol_cli_spec k_worker_cli = {
    .prog = "sol-worker",
    .summary = "Inference worker: loads a GGUF model and serves one pool for sol-router.",
    .which = SOL_CONFIG_WORKER,
    .flags = k_worker_flags,
};

/* Defaults < file < flags into `cfg`; returns -1 to go on serving, else the exit code. */
static int worker_cli_parse(int argc, char **argv, sol_config *cfg) {
    sol_config_defaults(cfg);
    return sol_cli_start(&k_worker_cli, argc, argv, cfg);
}

int main(int argc, char **argv) {
    sol_config cfg;
    int rc = worker_cli_parse(argc, argv, &cfg);
    if (rc < 0) {
        fprintf(stderr, "sol-worker: serving is not implemented yet in this build (config OK)\n");
        rc = SOL_EXIT_NOT_IMPLEMENTED;
    }
    sol_config_free(&cfg);
    return rc;
}
