/* sol-router entry point: flags and configuration, then the broker actor and the HTTP server,
 * until SIGTERM/SIGINT. Router-specific flags live in k_router_flags: extend them there. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "broker.h"
#include "cli.h"
#include "config.h"
#include "http.h"
#include "log.h"
#include "router_setup.h"

#define MOD "router"

typedef struct router_flags {
    const char *served_model;
} router_flags;

static int flag_served_model(sol_config *cfg, const char *value, void *user, sol_err *err) {
    (void)cfg;
    if (!value || !value[0])
        return sol_err_set(err, -EINVAL, "--served-model: expected a model name, found \"\"");
    ((router_flags *)user)->served_model = value;
    return 0;
}

static const sol_cli_flag k_router_flags[] = {
    {"--listen", "HOST:PORT", SOL_FLAG_SET, "router.http.listen", "HTTP address to listen on",
     NULL},
    {"--bind", "ZMQ_ENDPOINT", SOL_FLAG_SET, "router.workers.bind",
     "ZeroMQ endpoint the workers connect to", NULL},
    {"--curve-secret-key", "FILE", SOL_FLAG_SET, "router.workers.curve.secret_key_file",
     "the router's CURVE key pair (sol-keygen): workers must authenticate", NULL},
    {"--curve-authorized-keys", "DIR", SOL_FLAG_SET, "router.workers.curve.authorized_keys_dir",
     "the workers' CURVE public keys (.pub files) the router admits", NULL},
    {"--routing-policy", "POLICY", SOL_FLAG_SET, "router.routing.policy",
     "how a pool's worker is chosen: cache_aware (default), affinity, least_loaded or "
     "round_robin (docs/broker.md)",
     NULL},
    {"--reply-tokens-mib", "N", SOL_FLAG_SET, "router.routing.reply_tokens_mib",
     "memory for the ids replies were generated as, handed back with a later turn that quotes "
     "the reply so its prompt matches the cached KV (default 16; 0: off; docs/kv_cache.md)",
     NULL},
    {"--served-model", "NAME", SOL_FLAG_CUSTOM, NULL,
     "model name clients send (listed by /v1/models); other names except pool names get 404. "
     "Default: any name is accepted",
     flag_served_model},
    {NULL, NULL, 0, NULL, NULL, NULL},
};

/* Blocks SIGTERM/SIGINT in every thread (set before any thread starts) so sigwait gets them. */
static void block_signals(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    pthread_sigmask(SIG_BLOCK, set, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static int config_file_given(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--config") || !strncmp(argv[i], "--config=", 9)) return 1;
    return 0;
}

/* Open files as Redis sizes maxclients: raise the soft limit to the hard one, then keep HTTP
 * connections below what is left after the sockets and files the router needs itself. */
static void fit_open_files(http_config *h) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max == RLIM_INFINITY ? 1048576 : rl.rlim_max;
        struct rlimit up = {want, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0) rl.rlim_cur = want;
    }
    unsigned conns = h->max_connections ? h->max_connections : HTTP_DEFAULT_MAX_CONNECTIONS;
    rlim_t room = rl.rlim_cur > 256 ? rl.rlim_cur - 256 : 0;
    if (conns > room) {
        LOG_WARN("router",
                 "open files limited to %llu: HTTP connections at most %llu instead of %u "
                 "(router.http.max_connections); raise the hard limit (ulimit -Hn)",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)room, conns);
        h->max_connections = room > 1 ? (unsigned)room : 1;
    } else {
        LOG_INFO("router", "open files: %llu; HTTP connections at most %u",
                 (unsigned long long)rl.rlim_cur, conns);
    }
}

static int serve(const sol_config *cfg, const router_flags *fl, bool with_config) {
    router_setup_opts o = {.served_model = fl->served_model, .config_file_given = with_config};
    router_setup *s = NULL;
    broker *b = NULL;
    http_server *h = NULL;
    sol_err e = {0};
    sigset_t set;
    block_signals(&set);
    int rc = router_setup_new(cfg, &o, &s, &e);
    if (!rc) rc = broker_new(&s->broker, &b, &e);
    if (!rc) {
        s->http.backend = broker_http_backend(b);
        fit_open_files(&s->http);
        rc = http_server_start(&s->http, &h, &e);
    }
    if (rc) {
        fprintf(stderr, "sol-router: %s\n", e.msg);
        broker_free(b);
        router_setup_free(s);
        return 1;
    }
    LOG_INFO(MOD, "serving on http://%s:%u, workers connect to %s%s%s", s->host,
             http_server_port(h), broker_endpoint(b), s->weights_used ? ", classifier " : "",
             s->weights_used ? s->weights_used : "");
    int sig = 0;
    sigwait(&set, &sig);
    LOG_INFO(MOD, "%s received: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    http_server_stop(h); /* ends open streams first, so no client waits on a gone broker */
    broker_free(b);
    router_setup_free(s);
    LOG_INFO(MOD, "stopped");
    return 0;
}

int main(int argc, char **argv) {
    router_flags fl = {0};
    sol_cli_spec spec = {
        .prog = "sol-router",
        .summary = "OpenAI-compatible HTTP front end that routes requests to pools of sol-worker.",
        .which = SOL_CONFIG_ROUTER,
        .flags = k_router_flags,
        .user = &fl,
    };
    sol_config cfg;
    sol_config_defaults(&cfg);
    int rc = sol_cli_start(&spec, argc, argv, &cfg);
    if (rc < 0) rc = serve(&cfg, &fl, config_file_given(argc, argv));
    sol_config_free(&cfg);
    return rc;
}
