/* sol-worker entry point: flags and configuration, then the executor (the engine, or the
 * simulation), the link actor, and signal handling: SIGTERM/SIGINT drain, a second one stops. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include <zmq.h>

#include "cli.h"
#include "backend.h"
#include "config.h"
#include "executor.h"
#include "link.h"
#include "log.h"
#include "sim.h"

static const sol_cli_flag k_worker_flags[] = {
    {"--router", "ZMQ_ENDPOINT", SOL_FLAG_APPEND, "worker.router",
     "router to connect to (repeatable; replaces the file's list)", NULL},
    {"--pool", "NAME", SOL_FLAG_SET, "worker.pool", "pool this worker serves", NULL},
    {"--model", "PATH", SOL_FLAG_SET, "worker.model", "GGUF model file", NULL},
    {"--served-model-name", "NAME", SOL_FLAG_SET, "worker.served_model_name",
     "the model name this worker registers, which requests' \"model\" selects and /v1/models "
     "lists (as vLLM's flag). Default: the GGUF's general.name, else the file's stem",
     NULL},
    {"--draft-model", "PATH", SOL_FLAG_SET, "worker.speculative.draft_model",
     "GGUF draft model for speculative decoding", NULL},
    {"--threads", "N", SOL_FLAG_SET, "worker.threads", "CPU threads (0 = all cores)", NULL},
    {"--backend", "cpu|cuda|sim|cuda-emu", SOL_FLAG_SET, "worker.backend",
     "compute backend; sim is a SIMULATION that runs no model and streams made-up words at "
     "worker.sim.ttft_ms / worker.sim.tokens_per_s (for router benchmarks only)",
     NULL},
    {"--device", "N", SOL_FLAG_SET, "worker.device",
     "GPU index for backend cuda (default 0); with --tensor-parallel-size N, ranks use N..N+n-1",
     NULL},
    {"--tensor-parallel-size", "N", SOL_FLAG_SET, "worker.tensor_parallel",
     "shard the model over N ranks, one thread and one GPU (cpu: a share of the cores) each, as "
     "vLLM's flag",
     NULL},
    {"--max-model-len", "N", SOL_FLAG_SET, "worker.kv.max_model_len",
     "longest sequence (prompt + output) in tokens, as vLLM's flag", NULL},
    {"--max-num-seqs", "N", SOL_FLAG_SET, "worker.scheduler.max_num_seqs",
     "sequences batched at once, as vLLM's flag", NULL},
    {"--enable-prefix-caching", NULL, SOL_FLAG_TRUE, "worker.scheduler.prefix_caching",
     "reuse the KV of shared prompt prefixes (the default), as vLLM's flag", NULL},
    {"--no-enable-prefix-caching", NULL, SOL_FLAG_FALSE, "worker.scheduler.prefix_caching",
     "never reuse KV across requests, as vLLM's flag", NULL},
    {"--embedding-pooling", "auto|last|mean|cls", SOL_FLAG_SET, "worker.embedding_pooling",
     "how /v1/embeddings pools the final hidden states (auto: the GGUF's pooling_type, else last)",
     NULL},
    {"--router-resolve-ms", "MS", SOL_FLAG_SET, "worker.router_resolve_ms",
     "resolve each --router tcp://NAME:PORT to every address it has this often and connect to "
     "each (every replica behind a Kubernetes headless Service); 0 = off",
     NULL},
    {"--health-file", "FILE", SOL_FLAG_SET, "worker.health_file",
     "rewritten at every heartbeat while the worker is healthy; a liveness check (Docker's "
     "HEALTHCHECK, a Kubernetes exec probe) fails when it grows old",
     NULL},
    {"--drain", "migrate|finish", SOL_FLAG_SET, "worker.drain",
     "what a drain (SIGTERM, POST /admin/workers/ID/drain) does with running requests: migrate "
     "hands each back to the router, which moves it token-exactly to another worker of the pool "
     "(the default); finish lets them run to their end",
     NULL},
    {"--curve-secret-key", "FILE", SOL_FLAG_SET, "worker.curve.secret_key_file",
     "this worker's CURVE key pair (sol-keygen); with --curve-server-key", NULL},
    {"--curve-server-key", "KEY|FILE", SOL_FLAG_SET, "worker.curve.server_public_key",
     "the router's CURVE public key (40 Z85 characters, or its .pub file)", NULL},
    {"--chat-template", "NAME", SOL_FLAG_SET, "worker.chat_template",
     "chat template family instead of the GGUF's (chatml, llama2, llama3, llama3.1, llama3.2, "
     "mistral, mistral-v3, zephyr, qwen2.5, qwen3, gemma, harmony); unlike vLLM's flag, a name, "
     "not a Jinja "
     "file",
     NULL},
    {"--dtype", "auto", SOL_FLAG_SET, "worker.dtype",
     "as vLLM's flag; only auto: weights compute in the GGUF file's types (make another file "
     "with sol-quantize)",
     NULL},
    {"--gpu-memory-utilization", "F", SOL_FLAG_SET, "worker.kv.memory_fraction",
     "share of the device memory left after weights and workspace that the KV pool takes "
     "(as vLLM's flag; RAM for cpu)",
     NULL},
    {"--batch-invariant", NULL, SOL_FLAG_TRUE, "worker.batch_invariant",
     "cuda: prefill through the decode kernels, so a token's logits never depend on its batch "
     "(slower prefill; the cpu backend always is)",
     NULL},
    {"--enforce-eager", NULL, SOL_FLAG_TRUE, "worker.enforce_eager",
     "cuda: never replay decode steps as CUDA graphs (as vLLM's flag)", NULL},
    {"--no-mmap", NULL, SOL_FLAG_FALSE, "worker.mmap", "read weights into memory, no mmap", NULL},
    {"--mlock", NULL, SOL_FLAG_TRUE, "worker.mlock", "lock weights in RAM", NULL},
    {"--id", "ID", SOL_FLAG_SET, "worker.id",
     "worker identity (default: host name, pid and a random suffix)", NULL},
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

/* The model name a sim worker announces: worker.served_model_name, else the file stem of
 * worker.model, else "sim". */
static void sim_model_name(const sol_worker_config *w, char *buf, size_t cap) {
    if (w->served_model_name) {
        snprintf(buf, cap, "%s", w->served_model_name);
        return;
    }
    const char *p = w->model && w->model[0] ? w->model : "sim";
    const char *slash = strrchr(p, '/');
    if (slash) p = slash + 1;
    snprintf(buf, cap, "%s", p);
    char *dot = strstr(buf, ".gguf");
    if (dot && dot != buf) *dot = '\0';
}

/* The compute backend worker.backend names, through the registry. A backend this build or
 * machine cannot run is a configuration error: the message names the key and the reason. */
/* worker.curve: the worker's pair and the router's public key, both or neither. */
static int load_curve(const sol_worker_config *w, curve_pair *pair, curve_key *server, sol_err *e) {
    const char *key = w->curve.secret_key_file, *srv = w->curve.server_public_key;
    if (!key && !srv) return 0;
    if (!key || !srv)
        return sol_err_set(e, -EINVAL,
                           "worker.curve needs both secret_key_file and server_public_key");
    int rc = curve_load_pair(key, pair, e);
    if (rc) return sol_err_wrap(e, "worker.curve.secret_key_file: "), rc;
    rc = curve_load_public(srv, server, e);
    if (rc) return sol_err_wrap(e, "worker.curve.server_public_key: "), rc;
    LOG_INFO("worker", "CURVE on: worker public key %s, router %s", pair->public_key.z85,
             server->z85);
    return 0;
}

static int make_backend(const sol_worker_config *w, sol_backend **out, sol_err *e) {
    sol_backend_opts o = {.threads = w->tensor_parallel > 1
                                         ? model_tp_rank_threads(w->threads, w->tensor_parallel)
                                         : w->threads,
                          .device = w->device,
                          .batch_invariant = w->batch_invariant,
                          .enforce_eager = w->enforce_eager};
    char spec[96]; /* "cpu:VARIANT" with worker.backend_variant (validated: cpu only) */
    snprintf(spec, sizeof spec, "%s%s%s", sol_backend_kind_name(w->backend),
             w->backend_variant ? ":" : "", w->backend_variant ? w->backend_variant : "");
    *out = sol_backend_new(spec, &o, e);
    if (*out) return 0;
    sol_err_wrap(e, w->backend_variant ? "worker.backend_variant: " : "worker.backend: ");
    return e->code ? e->code : -EINVAL;
}

static int make_executor(void *zctx, const sol_worker_config *w, sol_backend *be, exec_events *ev,
                         executor **out, sol_err *e) {
    if (w->backend == SOL_BACKEND_SIM) {
        char model[256];
        sim_model_name(w, model, sizeof model);
        sim_config sc = {
            .model = model,
            .ttft_ms = w->sim.ttft_ms,
            .tokens_per_s = w->sim.tokens_per_s,
            .capacity = (uint32_t)w->scheduler.max_num_seqs,
            .max_context = (uint32_t)w->kv.max_model_len,
            .block_size = (uint32_t)w->kv.block_size,
            .total_blocks = (uint32_t)w->kv.num_blocks,
        };
        return sim_new(zctx, &sc, ev, out, e);
    }
    exec_engine_config ec = {
        .be = be,
        .model = w->model,
        .served_model_name = w->served_model_name,
        .mmap = w->mmap,
        .mlock = w->mlock,
        .block_size = w->kv.block_size,
        .num_blocks = w->kv.num_blocks,
        .max_model_len = w->kv.max_model_len,
        .memory_fraction = w->kv.memory_fraction,
        .kv_f32 = w->kv.dtype == SOL_KV_F32,
        .tier2_blocks = w->kv.tier2_blocks,
        .tier2_dir = w->kv.tier2_dir,
        .max_num_seqs = w->scheduler.max_num_seqs,
        .max_batched_tokens = w->scheduler.max_batched_tokens,
        .prefix_caching = w->scheduler.prefix_caching,
        .chat_template = w->chat_template,
        .embedding_pooling = w->embedding_pooling,
        /* A draft model with the method left at its default means "speculate with it": that
         * is what `--draft-model PATH` alone asks for (the fixed command line of the issue). */
        .spec_method = (int)(w->speculative.method == SOL_SPEC_OFF && w->speculative.draft_model
                                 ? SOL_SPEC_DRAFT
                                 : w->speculative.method),
        .draft_model = w->speculative.draft_model,
        .spec_k = w->speculative.k,
        .spec_adaptive = w->speculative.adaptive,
        .tp = {.n = w->tensor_parallel,
               .timeout_ms = w->tp_timeout_ms,
               .backend = sol_backend_kind_name(w->backend),
               .opts = {.threads = model_tp_rank_threads(w->threads, w->tensor_parallel),
                        .device = w->device,
                        .batch_invariant = w->batch_invariant,
                        .enforce_eager = w->enforce_eager}},
    };
    if (w->speculative.method == SOL_SPEC_OFF && w->speculative.draft_model)
        LOG_INFO("worker", "worker.speculative.draft_model is set: speculative decoding with it "
                           "(method: draft)");
    return exec_engine_new(&ec, ev, out, e);
}

/* SIGTERM/SIGINT arrive on a signalfd; every thread inherits the blocked mask. */
static int block_signals(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, set, NULL) != 0) return -1;
    return signalfd(-1, set, SFD_CLOEXEC | SFD_NONBLOCK);
}

/* Wait for the link to end; the first signal drains, a second one stops at once. */
static int supervise(worker_link *l, int sfd) {
    int signals = 0;
    for (;;) {
        zmq_pollitem_t items[2] = {{link_socket(l), 0, ZMQ_POLLIN, 0}, {NULL, sfd, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, 2, -1) < 0 && zmq_errno() != EINTR) return 1;
        if (items[0].revents & ZMQ_POLLIN) {
            int st = link_wait(l, 0);
            if (st != -EAGAIN) return st;
        }
        struct signalfd_siginfo si;
        if ((items[1].revents & ZMQ_POLLIN) && read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
            if (++signals == 1) {
                LOG_INFO("worker", "signal %u: draining (send it again to stop at once)",
                         si.ssi_signo);
                link_drain(l);
            } else {
                LOG_WARN("worker", "second signal: stopping without finishing running requests");
                return 1;
            }
        }
    }
}

/* The test-only environment settings: each one changes what the production path does (a fault
 * injected, DNS answers replaced), so a worker that sees one says so at start, whatever its log
 * level. docs/configuration.md lists the same names (tests/integration/test_hooks.sh checks both
 * against every getenv("SOL_TEST_...") in the sources). */
static const struct {
    const char *name, *effect;
} k_test_hooks[] = {
    {"SOL_TEST_RESOLVE_FILE", "router host names are resolved from this file, not from DNS"},
    {"SOL_TEST_TP_STALL", "a tensor-parallel rank will stop at the given step"},
    {"SOL_TEST_ENGINE_STALL", "the engine thread will stop at the given step"},
    {"SOL_TEST_CUDA_EMU_FAULT",
     "an emulated CUDA device will hang or fail at the given collective (cuda-emu only)"},
};

static void warn_test_hooks(void) {
    for (size_t i = 0; i < sizeof k_test_hooks / sizeof k_test_hooks[0]; i++) {
        const char *v = getenv(k_test_hooks[i].name);
        if (v && v[0])
            LOG_WARN("worker", "test-only setting %s=%s is active: %s", k_test_hooks[i].name, v,
                     k_test_hooks[i].effect);
    }
}

static int worker_run(const sol_config *cfg) {
    const sol_worker_config *w = &cfg->worker;
    warn_test_hooks();
    sigset_t set;
    int sfd = block_signals(&set);
    if (sfd < 0) {
        LOG_ERROR("worker", "cannot set up signal handling: %s", strerror(errno));
        return 1;
    }
    void *zctx = zmq_ctx_new();
    exec_events *ev = NULL;
    executor *exec = NULL;
    worker_link *l = NULL;
    sol_backend *be = NULL;
    sol_err err = {0};
    int rc = 1;
    char id[SOL_ERR_MSG_MAX];
    if (w->id && w->id[0])
        snprintf(id, sizeof id, "%s", w->id);
    else
        link_default_id(id, sizeof id);
    link_config lc = {
        .routers = (const char *const *)w->router.items,
        .n_routers = w->router.n,
        .worker_id = id,
        .pool = w->pool,
        .heartbeat_ms = w->heartbeat_ms,
        .stall_after_ms = w->stall_after_ms,
        .router_resolve_ms = w->router_resolve_ms,
        .health_file = w->health_file,
        .drain_migrate = w->drain == SOL_DRAIN_MIGRATE,
    };
    curve_pair pair;
    curve_key server;
    int curve_rc = load_curve(w, &pair, &server, &err);
    lc.curve = curve_rc == 0 && w->curve.secret_key_file ? &pair : NULL;
    lc.curve_server = lc.curve ? &server : NULL;
    if (curve_rc < 0) {
        LOG_ERROR("worker", "%s", err.msg);
        rc = SOL_EXIT_USAGE;
    } else if (w->backend != SOL_BACKEND_SIM && make_backend(w, &be, &err) < 0) {
        LOG_ERROR("worker", "%s", err.msg);
        rc = SOL_EXIT_USAGE;
    } else if (!zctx || exec_events_new(zctx, &ev, &err) < 0 ||
               make_executor(zctx, w, be, ev, &exec, &err) < 0 ||
               link_new(zctx, &lc, exec, ev, &l, &err) < 0) {
        LOG_ERROR("worker", "%s", err.msg[0] ? err.msg : "cannot create a ZeroMQ context");
        rc = err.code == -ENOTSUP ? SOL_EXIT_NOT_IMPLEMENTED : 1;
    } else {
        LOG_INFO("worker", "worker %s serving pool %s (backend %s)", id, w->pool,
                 sol_backend_kind_name(w->backend));
        rc = supervise(l, sfd);
        LOG_INFO("worker", "exiting with status %d", rc);
    }
    link_free(l);
    exec_free(exec);
    sol_backend_free(be); /* after the executor, which borrowed it */
    exec_events_free(ev);
    if (zctx) zmq_ctx_term(zctx);
    close(sfd);
    return rc;
}

int main(int argc, char **argv) {
    sol_config cfg;
    int rc = worker_cli_parse(argc, argv, &cfg);
    if (rc < 0) rc = worker_run(&cfg);
    sol_config_free(&cfg);
    return rc;
}
