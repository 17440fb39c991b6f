/* Promise: config errors name file:line:column + key; defaults < file < flags; print loads back. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cli.h"
#include "config.h"

typedef struct {
    char dir[64];
    char path[128];
    sol_config cfg;
    sol_err err;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/sol_test_config.XXXXXX");
    if (!f || !mkdtemp(f->dir)) return -1;
    snprintf(f->path, sizeof f->path, "%s/cfg.yaml", f->dir);
    sol_config_defaults(&f->cfg);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    sol_config_free(&f->cfg);
    unlink(f->path);
    rmdir(f->dir);
    free(f);
    return 0;
}

static void write_file(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    assert_int_equal(fclose(fp), 0);
}

/* Load `text` from a file and expect the message "<file>:<where>" exactly. */
static void expect_load_error(fixture *f, const char *text, const char *where) {
    write_file(f->path, text);
    assert_int_equal(sol_config_load(&f->cfg, f->path, &f->err), -EINVAL);
    char want[SOL_ERR_MSG_MAX];
    snprintf(want, sizeof want, "%s:%s", f->path, where);
    assert_string_equal(f->err.msg, want);
}

static void test_defaults(void **state) {
    fixture *f = *state;
    const sol_config *c = &f->cfg;
    assert_int_equal(c->log.level, SOL_LOG_INFO);
    assert_false(c->log.json);
    assert_string_equal(c->router.http.listen, "127.0.0.1:8080");
    assert_null(c->router.http.api_keys_file);
    assert_int_equal(c->router.http.max_body_bytes, 1048576);
    assert_int_equal(c->router.http.request_timeout_ms, 600000);
    assert_string_equal(c->router.workers.bind, "tcp://127.0.0.1:5555");
    assert_int_equal(c->router.workers.dead_after_ms, 3000);
    assert_int_equal(c->router.workers.max_queue_per_pool, 256);
    assert_string_equal(c->router.routing.default_pool, "precise");
    assert_int_equal(c->router.routing.pools.n, 2);
    assert_string_equal(c->router.routing.pools.items[0], "fast");
    assert_true(c->router.routing.classifier.threshold == 0.5);
    assert_int_equal(c->router.routing.rules.n, 0);
    assert_int_equal(c->worker.router.n, 1);
    assert_string_equal(c->worker.router.items[0], "tcp://127.0.0.1:5555");
    assert_string_equal(c->worker.pool, "precise");
    assert_null(c->worker.model);
    assert_string_equal(c->worker.id, "");
    assert_int_equal(c->worker.backend, SOL_BACKEND_CPU);
    assert_true(c->worker.mmap);
    assert_false(c->worker.mlock);
    assert_int_equal(c->worker.kv.block_size, 16);
    assert_true(c->worker.kv.memory_fraction == 0.9);
    assert_int_equal(c->worker.kv.dtype, SOL_KV_F16);
    assert_int_equal(c->worker.scheduler.max_num_seqs, 64);
    assert_int_equal(c->worker.scheduler.max_batched_tokens, 2048);
    assert_int_equal(c->worker.speculative.method, SOL_SPEC_OFF);
    assert_int_equal(c->worker.speculative.k, 4);
    assert_int_equal(c->worker.sim.ttft_ms, 50);
    /* The router runs on defaults alone; a worker needs a model unless it simulates. */
    assert_int_equal(sol_config_validate(c, SOL_CONFIG_ROUTER, &f->err), 0);
    assert_int_equal(sol_config_validate(c, SOL_CONFIG_WORKER, &f->err), -EINVAL);
    assert_string_equal(f->err.msg, "worker.model: required when worker.backend is cpu (the path "
                                    "of a GGUF file; only backend sim runs without a model)");
}

static void test_load_values(void **state) {
    fixture *f = *state;
    write_file(f->path, "log: {level: debug, json: true}\n"
                        "worker:\n"
                        "  router: tcp://10.0.0.1:5555\n"
                        "  backend: sim\n"
                        "  kv: {block_size: 32, memory_fraction: 0.5, dtype: f32}\n"
                        "  speculative: {method: ngram, k: 8}\n");
    assert_int_equal(sol_config_load(&f->cfg, f->path, &f->err), 0);
    assert_int_equal(f->cfg.log.level, SOL_LOG_DEBUG);
    assert_true(f->cfg.log.json);
    assert_int_equal(f->cfg.worker.router.n, 1);
    assert_string_equal(f->cfg.worker.router.items[0], "tcp://10.0.0.1:5555");
    assert_int_equal(f->cfg.worker.backend, SOL_BACKEND_SIM);
    assert_int_equal(f->cfg.worker.kv.block_size, 32);
    assert_true(f->cfg.worker.kv.memory_fraction == 0.5);
    assert_int_equal(f->cfg.worker.kv.dtype, SOL_KV_F32);
    assert_int_equal(f->cfg.worker.speculative.method, SOL_SPEC_NGRAM);
    assert_int_equal(f->cfg.worker.speculative.k, 8);
    assert_int_equal(f->cfg.worker.kv.max_model_len, 4096); /* untouched keys keep defaults */
    assert_int_equal(sol_config_validate(&f->cfg, SOL_CONFIG_BOTH, &f->err), 0);
}

static void test_wrong_type(void **state) {
    expect_load_error(*state, "worker:\n  kv:\n    block_size: abc\n",
                      "3:17: worker.kv.block_size: expected an integer, found \"abc\"");
}

static void test_wrong_type_collection(void **state) {
    expect_load_error(*state, "worker:\n  router: {a: 1}\n",
                      "2:11: worker.router: expected a list of strings, found a mapping");
}

static void test_unknown_key(void **state) {
    expect_load_error(*state, "worker:\n  kv:\n    block_sise: 16\n",
                      "3:5: worker.kv.block_sise: unknown key (did you mean \"block_size\"?)");
}

static void test_unknown_key_other_section(void **state) {
    expect_load_error(*state, "worker:\n  kv: {max_num_seqs: 8}\n",
                      "2:8: worker.kv.max_num_seqs: unknown key (did you mean "
                      "\"worker.scheduler.max_num_seqs\"?)");
}

static void test_out_of_range(void **state) {
    expect_load_error(*state, "worker:\n  speculative:\n    k: 20\n",
                      "3:8: worker.speculative.k: 20 is out of range (expected 1..16)");
}

static void test_out_of_range_fraction(void **state) {
    expect_load_error(*state, "worker:\n  kv: {memory_fraction: 0}\n",
                      "2:25: worker.kv.memory_fraction: 0 is out of range (expected (0, 1])");
}

static void test_bad_enum(void **state) {
    expect_load_error(
        *state, "worker:\n  backend: cdua\n",
        "2:12: worker.backend: expected one of cpu, cuda, sim, cuda-emu; found \"cdua\" (did "
        "you mean \"cuda\"?)");
}

static void test_duplicate_key(void **state) {
    expect_load_error(*state, "worker:\n  pool: fast\n  threads: 2\n  pool: precise\n",
                      "4:3: worker.pool: duplicate key (first set at line 2)");
}

static void test_syntax_error(void **state) {
    expect_load_error(*state, "worker:\n  pool: [fast\n",
                      "3:1: YAML syntax error: did not find expected ',' or ']' (while parsing a "
                      "flow sequence at 2:9)");
}

static void test_rule_without_pool(void **state) {
    expect_load_error(*state,
                      "router:\n  routing:\n    rules:\n      - {if: {tag: fast}, pool: fast}\n"
                      "      - if: {tag: slow}\n",
                      "5:9: router.routing.rules[1]: missing required key \"pool\"");
}

static void test_rule_unknown_condition(void **state) {
    expect_load_error(*state,
                      "router:\n  routing:\n    rules:\n      - {if: {tga: x}, pool: fast}\n",
                      "4:15: router.routing.rules[0].if.tga: unknown key (did you mean \"tag\"?)");
}

static void test_missing_model_points_at_section(void **state) {
    fixture *f = *state;
    write_file(f->path, "log: {level: warn}\nworker:\n  pool: fast\n");
    assert_int_equal(sol_config_load(&f->cfg, f->path, &f->err), 0);
    assert_int_equal(sol_config_validate(&f->cfg, SOL_CONFIG_WORKER, &f->err), -EINVAL);
    char want[SOL_ERR_MSG_MAX];
    snprintf(want, sizeof want,
             "%s:2:1: worker.model: required when worker.backend is cpu (the path of a GGUF "
             "file; only backend sim runs without a model)",
             f->path);
    assert_string_equal(f->err.msg, want);
}

static void test_rule_pool_must_exist(void **state) {
    fixture *f = *state;
    write_file(f->path, "router:\n  routing:\n    rules:\n      - {if: {tag: x}, pool: fsat}\n");
    assert_int_equal(sol_config_load(&f->cfg, f->path, &f->err), 0);
    assert_int_equal(sol_config_validate(&f->cfg, SOL_CONFIG_ROUTER, &f->err), -EINVAL);
    char want[SOL_ERR_MSG_MAX];
    snprintf(want, sizeof want,
             "%s:4:30: router.routing.rules[0].pool: \"fsat\" is not one of "
             "router.routing.pools (fast, precise)",
             f->path);
    assert_string_equal(f->err.msg, want);
}

/* router.slo: each entry names a configured pool once, with known keys in range. */
static void test_slo_entries(void **state) {
    expect_load_error(
        *state, "router:\n  slo:\n    - {pool: fast, ttft: 500}\n",
        "3:20: router.slo[0].ttft: unknown key (expected one of: pool, ttft_ms, tpot_ms, "
        "deadline_ms)");
    expect_load_error(*state, "router:\n  slo:\n    - {ttft_ms: 500}\n",
                      "3:7: router.slo[0]: missing required key \"pool\"");
    expect_load_error(*state,
                      "router:\n  slo:\n    - {pool: fast, ttft_ms: 5}\n    - {pool: fast}\n",
                      "4:7: router.slo[1]: pool \"fast\" has targets already (router.slo[0]); one "
                      "entry per pool");
    expect_load_error(*state, "router:\n  slo:\n    - {pool: fast, tpot_ms: -1}\n",
                      "3:29: router.slo[0].tpot_ms: -1 is out of range (expected 0..86400000)");
    fixture *f = *state;
    sol_config_free(&f->cfg);
    sol_config_defaults(&f->cfg);
    write_file(f->path, "router:\n  slo:\n    - {pool: fsat, ttft_ms: 5}\n");
    assert_int_equal(sol_config_load(&f->cfg, f->path, &f->err), 0);
    assert_int_equal(sol_config_validate(&f->cfg, SOL_CONFIG_ROUTER, &f->err), -EINVAL);
    assert_non_null(strstr(f->err.msg, "router.slo[0].pool: \"fsat\" is not one of"));
    assert_int_equal(sol_config_set(&f->cfg, "router.slo", "[{pool: fast, ttft_ms: 250}]", &f->err),
                     0);
    assert_int_equal(f->cfg.router.slo.n, 1);
    assert_int_equal(f->cfg.router.slo.items[0].slo.ms[SOL_SLO_TTFT], 250);
}

/* affinity_prefix_chars other than its default under another policy would be ignored: refused,
 * at its line; under policy affinity it is taken, and a bad policy name is refused. */
/* The second KV tier's keys: refused by name where they would be ignored or cannot work. */
static void test_tier2_keys(void **state) {
    fixture *f = *state;
    static const struct {
        const char *yaml, *want;
    } cases[] = {
        {"worker:\n  backend: sim\n  kv:\n    tier2_blocks: 8\n",
         "4:19: worker.kv.tier2_blocks: 8 applies to backends cpu, cuda and cuda-emu; backend sim "
         "runs no model"},
        {"worker:\n  backend: cuda-emu\n  model: m.gguf\n  kv:\n    tier2_blocks: 8\n"
         "    tier2_dir: /var/tmp\n",
         "6:16: worker.kv.tier2_dir: \"/var/tmp\" applies to backend cpu (a file-backed tier); "
         "cuda-emu keeps its second tier in page-locked host memory"},
        {"worker:\n  model: m.gguf\n  scheduler: {prefix_caching: false}\n  kv:\n"
         "    tier2_blocks: 8\n",
         "5:19: worker.kv.tier2_blocks: 8 needs worker.scheduler.prefix_caching: the tier keeps "
         "the cached blocks the pool evicts"},
        {"worker:\n  model: m.gguf\n  kv:\n    tier2_dir: /var/tmp\n",
         "4:16: worker.kv.tier2_dir: \"/var/tmp\" applies only with worker.kv.tier2_blocks > 0 "
         "(no second tier is set)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sol_config_free(&f->cfg);
        sol_config_defaults(&f->cfg);
        write_file(f->path, cases[i].yaml);
        assert_int_equal(sol_config_load(&f->cfg, f->path, &f->err), 0);
        assert_int_equal(sol_config_validate(&f->cfg, SOL_CONFIG_WORKER, &f->err), -EINVAL);
        char want[SOL_ERR_MSG_MAX];
        snprintf(want, sizeof want, "%s:%s", f->path, cases[i].want);
        assert_string_equal(f->err.msg, want);
    }
    sol_config_free(&f->cfg);
    sol_config_defaults(&f->cfg);
    write_file(f->path, "worker:\n  model: m.gguf\n  kv: {tier2_blocks: 8, tier2_dir: /tmp}\n");
    assert_int_equal(sol_config_load(&f->cfg, f->path, &f->err), 0);
    assert_int_equal(sol_config_validate(&f->cfg, SOL_CONFIG_WORKER, &f->err), 0);
    sol_config_free(&f->cfg);
    sol_config_defaults(&f->cfg);
    write_file(f->path, "worker:\n  backend: cuda-emu\n  model: m.gguf\n  kv: {tier2_blocks: 8}\n");
    assert_int_equal(sol_config_load(&f->cfg, f->path, &f->err), 0);
    assert_int_equal(sol_config_validate(&f->cfg, SOL_CONFIG_WORKER, &f->err), 0);
}

static void test_affinity_chars_need_the_affinity_policy(void **state) {
    fixture *f = *state;
    write_file(f->path, "router:\n  routing:\n    affinity_prefix_chars: 512\n");
    assert_int_equal(sol_config_load(&f->cfg, f->path, &f->err), 0);
    assert_int_equal(sol_config_validate(&f->cfg, SOL_CONFIG_ROUTER, &f->err), -EINVAL);
    char want[SOL_ERR_MSG_MAX];
    snprintf(want, sizeof want,
             "%s:3:28: router.routing.affinity_prefix_chars: 512 applies to "
             "router.routing.policy affinity only (the policy is cache_aware)",
             f->path);
    assert_string_equal(f->err.msg, want);
    write_file(f->path,
               "router:\n  routing:\n    policy: affinity\n    affinity_prefix_chars: 512\n");
    sol_config_free(&f->cfg);
    sol_config_defaults(&f->cfg);
    assert_int_equal(sol_config_load(&f->cfg, f->path, &f->err), 0);
    assert_int_equal(sol_config_validate(&f->cfg, SOL_CONFIG_ROUTER, &f->err), 0);
    assert_int_equal(f->cfg.router.routing.policy, SOL_ROUTE_AFFINITY);
    assert_int_equal(f->cfg.router.routing.affinity_prefix_chars, 512);
    sol_config_free(&f->cfg);
    sol_config_defaults(&f->cfg);
    assert_int_equal(f->cfg.router.routing.policy, SOL_ROUTE_CACHE_AWARE);
    expect_load_error(f, "router:\n  routing:\n    policy: nearest\n",
                      "3:13: router.routing.policy: expected one of cache_aware, affinity, "
                      "least_loaded, round_robin; found \"nearest\"");
}

static void test_file_not_found(void **state) {
    fixture *f = *state;
    char missing[160];
    snprintf(missing, sizeof missing, "%s/nope.yaml", f->dir);
    assert_int_equal(sol_config_load(&f->cfg, missing, &f->err), -ENOENT);
    char want[SOL_ERR_MSG_MAX];
    snprintf(want, sizeof want, "%s: cannot open: No such file or directory", missing);
    assert_string_equal(f->err.msg, want);
}

static void test_set_overrides(void **state) {
    fixture *f = *state;
    sol_config *c = &f->cfg;
    assert_int_equal(sol_config_set(c, "worker.kv.block_size", "32", &f->err), 0);
    assert_int_equal(c->worker.kv.block_size, 32);
    assert_int_equal(sol_config_set(c, "worker.kv.block_size", "abc", &f->err), -EINVAL);
    assert_string_equal(f->err.msg, "worker.kv.block_size: expected an integer, found \"abc\"");
    assert_int_equal(sol_config_set(c, "worker.kv.block_size", "24", &f->err), -EINVAL);
    assert_string_equal(f->err.msg, "worker.kv.block_size: expected a power of two, found 24");
    assert_int_equal(c->worker.kv.block_size, 32); /* a refused value changes nothing */
    assert_int_equal(sol_config_set(c, "worker.kv.blok_size", "8", &f->err), -EINVAL);
    assert_string_equal(f->err.msg,
                        "worker.kv.blok_size: unknown key (did you mean \"block_size\"?)");
    assert_int_equal(sol_config_set(c, "worker.model", "m.gguf", &f->err), 0);
    assert_string_equal(c->worker.model, "m.gguf");
    assert_int_equal(sol_config_set(c, "worker.model", "null", &f->err), 0);
    assert_null(c->worker.model);
    assert_int_equal(sol_config_set(c, "worker.router", "ipc:///tmp/r", &f->err), 0);
    assert_int_equal(sol_config_append(c, "worker.router", "tcp://h:1", &f->err), 0);
    assert_int_equal(c->worker.router.n, 2);
    assert_string_equal(c->worker.router.items[1], "tcp://h:1");
    assert_int_equal(sol_config_set(c, "router.routing.pools", "[a, b, c]", &f->err), 0);
    assert_int_equal(c->router.routing.pools.n, 3);
    assert_int_equal(sol_config_set(c, "worker.kv", "{dtype: f32, max_model_len: 128}", &f->err),
                     0);
    assert_int_equal(c->worker.kv.dtype, SOL_KV_F32);
    assert_int_equal(c->worker.kv.max_model_len, 128);
    assert_int_equal(
        sol_config_set(c, "router.routing.rules", "[{if: {keywords: [x, y]}, pool: a}]", &f->err),
        0);
    assert_int_equal(c->router.routing.rules.n, 1);
    assert_int_equal(c->router.routing.rules.items[0].keywords.n, 2);
    assert_int_equal(c->router.routing.rules.items[0].tag == NULL, 1);
    assert_int_equal(c->router.routing.rules.items[0].prompt_chars_below, SOL_RULE_UNSET);
}

static void test_flags_beat_file(void **state) {
    fixture *f = *state;
    write_file(f->path, "worker:\n  threads: 3\n  pool: fast\n  router: [\"tcp://a:1\"]\n");
    static const sol_cli_flag flags[] = {
        {"--threads", "N", SOL_FLAG_SET, "worker.threads", "", NULL},
        {"--router", "EP", SOL_FLAG_APPEND, "worker.router", "", NULL},
        {"--no-mmap", NULL, SOL_FLAG_FALSE, "worker.mmap", "", NULL},
        {NULL, NULL, 0, NULL, NULL, NULL},
    };
    const sol_cli_spec spec = {
        .prog = "t", .summary = "", .which = SOL_CONFIG_WORKER, .flags = flags};
    /* --config comes last on purpose: flags still win over the file. */
    char *argv[] = {"t",         "--threads", "7",     "--router=tcp://b:2",      "--router",
                    "tcp://c:3", "--no-mmap", "--set", "worker.kv.block_size=64", "--config",
                    f->path,     NULL};
    sol_cli_result res;
    assert_int_equal(sol_cli_parse(&spec, 11, argv, &f->cfg, &res, &f->err), 0);
    assert_int_equal(f->cfg.worker.threads, 7);
    assert_string_equal(f->cfg.worker.pool, "fast"); /* from the file */
    assert_int_equal(f->cfg.worker.router.n, 2);     /* flags replaced the file's list */
    assert_string_equal(f->cfg.worker.router.items[0], "tcp://b:2");
    assert_string_equal(f->cfg.worker.router.items[1], "tcp://c:3");
    assert_false(f->cfg.worker.mmap);
    assert_int_equal(f->cfg.worker.kv.block_size, 64);
    char *bad[] = {"t", "--threads", "lots", NULL};
    assert_int_equal(sol_cli_parse(&spec, 3, bad, &f->cfg, &res, &f->err), -EINVAL);
    assert_string_equal(f->err.msg,
                        "--threads lots: worker.threads: expected an integer, found \"lots\"");
}

static char *print_to_string(const sol_config *c, int which) {
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    assert_non_null(fp);
    assert_int_equal(sol_config_print(c, fp, which), 0);
    fclose(fp);
    return buf;
}

static void test_print_round_trip(void **state) {
    fixture *f = *state;
    write_file(
        f->path,
        "log: {level: error}\n"
        "router:\n"
        "  http: {listen: \"0.0.0.0:9000\", api_keys_file: /etc/sol/keys,\n"
        "         rate_limit: {requests_per_s: 2.5, burst: 5}}\n"
        "  routing:\n"
        "    pools: [fast, precise, code]\n"
        "    fallback_pool: code\n"
        "    classifier: {weights_file: w.json, threshold: 0.3}\n"
        "    rules:\n"
        "      - {if: {tag: fast, model: m1}, pool: fast}\n"
        "      - {if: {prompt_chars_above: 10, prompt_chars_below: 2000,\n"
        "              max_tokens_below: 256}, pool: fast}\n"
        "      - {if: {keywords: [\"prove\", \"a \\\"q\\\" \\\\ b\", \"```\"]}, pool: code}\n"
        "      - pool: precise\n"
        "  slo:\n"
        "    - {pool: fast, ttft_ms: 500, tpot_ms: 40}\n"
        "    - {pool: code, deadline_ms: 60000}\n"
        "worker:\n"
        "  router: [\"tcp://127.0.0.1:5555\", \"ipc:///tmp/sol\"]\n"
        "  model: \"models/x: y.gguf\"\n"
        "  id: w-1\n"
        "  backend: cuda\n"
        "  device: 1\n"
        "  batch_invariant: true\n"
        "  tensor_parallel: 4\n"
        "  tp_timeout_ms: 2500\n"
        "  dtype: auto\n"
        "  kv: {memory_fraction: 0.85, num_blocks: 1000}\n"
        "  speculative: {method: draft, draft_model: d.gguf, adaptive: true}\n"
        "  sim: {tokens_per_s: 33.3}\n");
    assert_int_equal(sol_config_load(&f->cfg, f->path, &f->err), 0);
    assert_int_equal(sol_config_validate(&f->cfg, SOL_CONFIG_BOTH, &f->err), 0);
    char *first = print_to_string(&f->cfg, SOL_CONFIG_BOTH);
    sol_config back;
    sol_config_defaults(&back);
    assert_int_equal(sol_config_load_string(&back, first, "printed", &f->err), 0);
    char *second = print_to_string(&back, SOL_CONFIG_BOTH);
    assert_string_equal(first, second);
    assert_int_equal(back.log.level, SOL_LOG_ERROR);
    assert_true(back.router.http.rate_limit.requests_per_s == 2.5);
    assert_true(back.worker.sim.tokens_per_s == 33.3);
    assert_true(back.worker.kv.memory_fraction == 0.85);
    assert_string_equal(back.worker.model, "models/x: y.gguf");
    assert_int_equal(back.router.routing.rules.n, 4);
    assert_string_equal(back.router.routing.rules.items[2].keywords.items[1], "a \"q\" \\ b");
    assert_int_equal(back.router.routing.rules.items[1].prompt_chars_above, 10);
    assert_string_equal(back.router.routing.rules.items[0].model, "m1");
    assert_null(back.router.routing.rules.items[3].tag);
    assert_int_equal(back.router.slo.n, 2);
    assert_string_equal(back.router.slo.items[0].pool, "fast");
    assert_int_equal(back.router.slo.items[0].slo.ms[SOL_SLO_TTFT], 500);
    assert_int_equal(back.router.slo.items[0].slo.ms[SOL_SLO_TPOT], 40);
    assert_int_equal(back.router.slo.items[0].slo.ms[SOL_SLO_DEADLINE], 0);
    assert_int_equal(back.router.slo.items[1].slo.ms[SOL_SLO_DEADLINE], 60000);
    assert_int_equal(back.worker.device, 1);
    assert_true(back.worker.batch_invariant);
    assert_int_equal(back.worker.tensor_parallel, 4);
    assert_int_equal(back.worker.tp_timeout_ms, 2500);
    assert_true(back.worker.speculative.adaptive);
    /* Printing one section leaves the other out. */
    char *router_only = print_to_string(&back, SOL_CONFIG_ROUTER);
    assert_null(strstr(router_only, "worker:"));
    assert_non_null(strstr(router_only, "router:"));
    free(router_only);
    sol_config_free(&back);
    free(first);
    free(second);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_type, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_type_collection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_key_other_section, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_of_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_of_range_fraction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_enum, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_syntax_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rule_without_pool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rule_unknown_condition, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_model_points_at_section, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rule_pool_must_exist, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tier2_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slo_entries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_affinity_chars_need_the_affinity_policy, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_file_not_found, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_overrides, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flags_beat_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_print_round_trip, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
