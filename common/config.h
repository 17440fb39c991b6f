/* config: Sol's one YAML configuration file (`log:`, `router:`, `worker:`) as typed structs.
 * Precedence is defaults < file < flags; every error names file:line:column and the key path. */
#ifndef SOL_CONFIG_H
#define SOL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "err.h"
#include "log.h"

/* Which sections sol_config_print and sol_config_validate look at (`log:` is always included). */
enum { SOL_CONFIG_ROUTER = 1, SOL_CONFIG_WORKER = 2, SOL_CONFIG_BOTH = 3 };

/* cuda-emu: the CUDA kernels on the CPU through the host emulation (tests, no GPU needed). */
typedef enum {
    SOL_BACKEND_CPU = 0,
    SOL_BACKEND_CUDA,
    SOL_BACKEND_SIM,
    SOL_BACKEND_CUDA_EMU
} sol_backend_kind;
typedef enum { SOL_KV_F16 = 0, SOL_KV_F32 } sol_kv_dtype;
/* worker.drain: what a drain does with running requests (docs/configuration.md) */
typedef enum { SOL_DRAIN_MIGRATE = 0, SOL_DRAIN_FINISH } sol_drain_mode;
/* router.routing.affinity_prefix_chars by default (policy affinity) */
#define SOL_AFFINITY_PREFIX_CHARS_DEFAULT 256
/* router.routing.policy (docs/broker.md, "Dispatch"): the order of config.c's k_policies */
typedef enum {
    SOL_ROUTE_CACHE_AWARE = 0,
    SOL_ROUTE_AFFINITY,
    SOL_ROUTE_LEAST_LOADED,
    SOL_ROUTE_ROUND_ROBIN
} sol_routing_policy;
typedef enum { SOL_SPEC_OFF = 0, SOL_SPEC_DRAFT, SOL_SPEC_NGRAM } sol_spec_method;

/* An owned list of owned strings. */
typedef struct sol_strlist {
    char **items;
    size_t n;
} sol_strlist;

/* A condition left out of a rule is SOL_RULE_UNSET (numbers) or NULL/empty (strings, lists). */
#define SOL_RULE_UNSET (-1)

/* router.routing.rules[i]: every condition present in `if` must hold for `pool` to be chosen;
 * `keywords` holds when any one keyword occurs in the prompt (case-insensitive). */
typedef struct sol_route_rule {
    char *tag;              /* request carries this tag */
    int prompt_chars_below; /* prompt text shorter than this many characters */
    int prompt_chars_above; /* prompt text longer than this */
    int max_tokens_below;   /* request's max_tokens below this */
    int max_tokens_above;   /* request's max_tokens above this */
    sol_strlist keywords;   /* any of these substrings in the prompt */
    char *model;            /* request's "model" field equals this */
    char *pool;             /* the pool to route to (required) */
} sol_route_rule;

/* Latency targets of a request (issue 35; docs/api.md, "Latency targets"), in milliseconds, 0 =
 * none: its first token within ms[SOL_SLO_TTFT] of arrival, then a token every ms[SOL_SLO_TPOT]
 * on average, and the whole of it within ms[SOL_SLO_DEADLINE] of arrival. The index is the one
 * table the config keys, the HTTP headers and the wire follow. */
enum { SOL_SLO_TTFT, SOL_SLO_TPOT, SOL_SLO_DEADLINE, SOL_SLO_FIELDS };
#define SOL_SLO_MAX_MS 86400000 /* one day: the largest target any of them takes */
typedef struct sol_slo {
    int ms[SOL_SLO_FIELDS];
} sol_slo;

/* router.slo[i]: the targets a request routed to `pool` gets unless its headers say otherwise. */
typedef struct sol_pool_slo {
    char *pool;
    sol_slo slo;
} sol_pool_slo;

typedef struct sol_router_config {
    struct {
        char *listen;        /* "HOST:PORT" */
        char *api_keys_file; /* NULL: no authentication */
        int max_body_bytes;
        int max_header_bytes; /* request line + headers; 0: 16 KiB */
        struct {
            double requests_per_s; /* 0: off */
            int burst;             /* 0: max(1, ceil(requests_per_s)) */
        } rate_limit;
        int request_timeout_ms; /* 0: none */
        int max_connections;    /* open HTTP connections at once; 0: HTTP_DEFAULT_MAX_CONNECTIONS */
        int max_connections_per_client; /* from one address; 0: the default (256) */
        int header_timeout_s, keepalive_timeout_s, body_timeout_s; /* 0: 10, 30, 60 */
        int sse_max_buffer_bytes; /* unread stream bytes before the client is dropped; 0: 4 MiB */
    } http;
    struct {
        char *bind; /* ZeroMQ endpoint the ROUTER socket binds */
        int heartbeat_ms;
        int dead_after_ms;
        int max_queue_per_pool;
        double rebalance_hot_ratio; /* > 0: move a stream off a worker holding more than this
                                       times the least loaded peer's requests + 1; 0: off */
        bool allow_insecure;        /* bind beyond loopback without CURVE (anyone may register) */
        bool allow_public;          /* the old name of allow_insecure */
        struct {
            char *secret_key_file;     /* the router's key pair (sol-keygen); NULL: no CURVE */
            char *authorized_keys_dir; /* one .pub per admitted worker */
        } curve;
    } workers;
    struct {
        char *default_pool;
        char *fallback_pool; /* NULL: no fallback (HTTP 503 instead) */
        sol_strlist pools;
        struct {
            char *weights_file; /* NULL: classifier off */
            double threshold;
            char *positive_pool;
        } classifier;
        int affinity_prefix_chars; /* 0: no prefix affinity */
        sol_routing_policy policy;
        int reply_tokens_mib; /* the reply ids' store (docs/kv_cache.md); 0: off */
        struct {
            sol_route_rule *items;
            size_t n;
        } rules;
    } routing;
    struct {
        sol_pool_slo *items;
        size_t n;
    } slo;
} sol_router_config;

typedef struct sol_worker_config {
    sol_strlist router; /* ZeroMQ endpoints of the routers to connect to */
    char *pool;
    char *model;             /* GGUF path; NULL allowed only with backend sim */
    char *served_model_name; /* the name it registers (requests select it by); NULL: the GGUF's
                                general.name, else the file's stem */
    char *id;                /* "": derived from host name and pid */
    sol_backend_kind backend;
    char *backend_variant; /* cpu: an ISA and/or mode ("llamacpp", "avx2+llamacpp"); NULL = none */
    int threads;           /* 0: all cores */
    int device;            /* cuda: the GPU index */
    bool batch_invariant;  /* cuda: GEMV kernels for prefill too (cpu: always) */
    bool enforce_eager;    /* cuda: no CUDA graphs */
    int tensor_parallel;   /* ranks the model is sharded over (one thread, one device each) */
    int tp_timeout_ms;     /* a rank or collective slower than this: the worker is unhealthy */
    int stall_after_ms;    /* work but no engine step for this long: unhealthy; 0 = off */
    int dtype;             /* vLLM's --dtype: only 0 = auto (the file's types) */
    char *chat_template;   /* a family name overriding the GGUF's template; "" = detect */
    int router_resolve_ms; /* > 0: router names resolved to every address this often */
    char *health_file;     /* rewritten at each heartbeat while healthy (liveness); NULL: none */
    sol_drain_mode drain;  /* migrate: running requests go back to the router; finish: they end */
    struct {
        char *secret_key_file;   /* the worker's key pair (sol-keygen); NULL: no CURVE */
        char *server_public_key; /* the router's public key: 40 Z85 characters or a file */
    } curve;
    int embedding_pooling; /* /v1/embeddings: 0 auto (the GGUF's), 1 last, 2 mean, 3 cls */
    bool mmap;
    bool mlock;
    int heartbeat_ms;
    struct {
        int block_size; /* tokens per KV block */
        double memory_fraction;
        int num_blocks;   /* 0: derived from memory_fraction */
        int tier2_blocks; /* a second KV tier of this many blocks (0: none; cpu backend) */
        char *tier2_dir;  /* where the tier's file goes; NULL: $TMPDIR, else /var/tmp */
        int max_model_len;
        sol_kv_dtype dtype;
    } kv;
    struct {
        int max_num_seqs;
        int max_batched_tokens;
        bool prefix_caching;
    } scheduler;
    struct {
        sol_spec_method method;
        char *draft_model; /* required with method draft (unless backend sim) */
        int k;
        bool adaptive;
    } speculative;
    struct {
        int ttft_ms;
        double tokens_per_s;
    } sim;
} sol_worker_config;

typedef struct sol_config {
    struct {
        sol_log_level level;
        bool json;
    } log;
    sol_router_config router;
    sol_worker_config worker;
    /* Where each value came from (file:line:column or the command line), for later messages.
     * Private to config.c. */
    struct sol_config_origin *origin;
} sol_config;

/* Fill `cfg` with the documented defaults. Every other function needs this done first.
 * Copying a sol_config by value shares its strings: don't; free exactly once. */
void sol_config_defaults(sol_config *cfg);

/* Release everything `cfg` owns; it must be re-initialised with sol_config_defaults to reuse. */
void sol_config_free(sol_config *cfg);

/* Overlay the YAML file at `path` onto `cfg` (which holds defaults or an earlier load). Type and
 * range errors, unknown and duplicate keys are reported as "path:line:col: key.path: message".
 * On failure `cfg` stays valid (possibly partly updated) and must still be freed. */
int sol_config_load(sol_config *cfg, const char *path, sol_err *err);

/* Same, from text in memory; `name` stands in for the file name in messages. */
int sol_config_load_string(sol_config *cfg, const char *text, const char *name, sol_err *err);

/* Set one key from text, with the same checks as the file ("worker.kv.block_size", "32").
 * Lists and rules take YAML flow syntax ("[a, b]"; a bare string is a one-item list); a
 * section takes a flow mapping ("worker.kv" = "{block_size: 32}"). */
int sol_config_set(sol_config *cfg, const char *key_path, const char *value, sol_err *err);

/* Append one item to a list key (worker.router, router.routing.pools). */
int sol_config_append(sol_config *cfg, const char *key_path, const char *value, sol_err *err);

/* Checks that span several keys (worker.model needed unless backend sim; pools named by rules
 * exist; ...). `which` is SOL_CONFIG_ROUTER, _WORKER or _BOTH. */
int sol_config_validate(const sol_config *cfg, int which, sol_err *err);

/* Write the configuration as YAML that sol_config_load reads back to the same values.
 * Returns 0, or -EIO when writing failed. */
int sol_config_print(const sol_config *cfg, FILE *f, int which);

/* Names for enum values, as written in the file. */
const char *sol_backend_kind_name(sol_backend_kind b);
const char *sol_kv_dtype_name(sol_kv_dtype d);
const char *sol_spec_method_name(sol_spec_method m);

/* Levenshtein distance, for "did you mean" hints (also used by the flag parser). */
size_t sol_edit_distance(const char *a, const char *b);

#endif
