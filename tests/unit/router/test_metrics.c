/* Promise: metrics render valid Prometheus 0.0.4 text with cumulative buckets, per-pool and
 * per-worker series (speculative-decoding counters exact to 64 bits) under both sol_* and vllm:*
 * names, and concurrent updates are not lost. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "metrics.h"

static void expect(const char *text, const char *line) {
    if (!strstr(text, line)) fail_msg("missing line: %s\n--- got ---\n%s", line, text);
}

static void test_render(void **st) {
    (void)st;
    metrics *m = metrics_new("demo");
    metrics_observe(m, METRIC_TTFT, "fast", 0.03);
    metrics_observe(m, METRIC_TTFT, "fast", 0.2);
    metrics_observe(m, METRIC_TTFT, "fast", 1000);
    metrics_count_request(m, "fast", 200);
    metrics_count_request(m, "fast", 200);
    metrics_count_request(m, "fast", 429);
    metrics_worker_load l = {.running = 3,
                             .waiting = 1,
                             .kv_usage = 0.25,
                             .prefix_hit_rate = 0.5,
                             .spec_acceptance = 0.75};
    metrics_set_worker(m, "w\"1", "fast", &l);
    /* a speculative worker, its counters past 2^53 where a double would round them */
    metrics_worker_load s = {.spec_acceptance = 0.6,
                             .spec_steps = 40,
                             .spec_drafted = 200,
                             .spec_accepted = 120,
                             .spec_emitted = 160,
                             .spec_draft_seconds = 1.5,
                             .spec_verify_seconds = 2.25};
    metrics_set_worker(m, "spec", "fast", &s);
    metrics_worker_load big = {.spec_steps = (1ull << 60) + 1,
                               .spec_drafted = (1ull << 62) + 3,
                               .spec_accepted = (1ull << 61) + 7,
                               .spec_emitted = (1ull << 62) + 5};
    metrics_set_worker(m, "big", "precise", &big);
    metrics_add_prefix_cache(m, "fast", 10, 40);
    metrics_add_tokens(m, "fast", 40, 7);
    metrics_add_tokens(m, "fast", 2, 5);
    strbuf b;
    strbuf_init(&b);
    assert_int_equal(metrics_render(m, &b), 0);
    expect(b.data, "# TYPE sol_request_ttft_seconds histogram\n");
    expect(b.data, "sol_request_ttft_seconds_bucket{pool=\"fast\",le=\"0.02\"} 0\n");
    expect(b.data, "sol_request_ttft_seconds_bucket{pool=\"fast\",le=\"0.04\"} 1\n");
    expect(b.data, "sol_request_ttft_seconds_bucket{pool=\"fast\",le=\"0.25\"} 2\n");
    expect(b.data, "sol_request_ttft_seconds_bucket{pool=\"fast\",le=\"80\"} 2\n");
    expect(b.data, "sol_request_ttft_seconds_bucket{pool=\"fast\",le=\"+Inf\"} 3\n");
    expect(b.data, "sol_request_ttft_seconds_count{pool=\"fast\"} 3\n");
    expect(b.data, "vllm:time_to_first_token_seconds_count{model_name=\"demo\",pool=\"fast\"} 3\n");
    expect(b.data, "sol_requests_total{pool=\"fast\",status=\"200\"} 2\n");
    expect(b.data, "sol_requests_total{pool=\"fast\",status=\"429\"} 1\n");
    expect(b.data,
           "vllm:num_requests_running{model_name=\"demo\",pool=\"fast\",worker=\"w\\\"1\"} 3\n");
    expect(b.data,
           "vllm:kv_cache_usage_perc{model_name=\"demo\",pool=\"fast\",worker=\"w\\\"1\"} 0.25\n");
    expect(b.data, "vllm:prefix_cache_hits_total{model_name=\"demo\",pool=\"fast\"} 10\n");
    expect(b.data, "vllm:prefix_cache_queries_total{model_name=\"demo\",pool=\"fast\"} 40\n");
    expect(b.data, "# TYPE sol_generation_tokens_total counter\n");
    expect(b.data, "sol_prompt_tokens_total{pool=\"fast\"} 42\n");
    expect(b.data, "sol_generation_tokens_total{pool=\"fast\"} 12\n");
    expect(b.data, "vllm:generation_tokens_total{model_name=\"demo\",pool=\"fast\"} 12\n");
    expect(b.data, "vllm:prompt_tokens_total{model_name=\"demo\",pool=\"fast\"} 42\n");
    expect(b.data, "sol_worker_spec_acceptance{pool=\"fast\",worker=\"w\\\"1\"} 0.75\n");
    expect(b.data, "# TYPE sol_worker_spec_verify_steps_total counter\n");
    expect(b.data, "sol_worker_spec_acceptance{pool=\"fast\",worker=\"spec\"} 0.6\n");
    expect(b.data, "sol_worker_spec_verify_steps_total{pool=\"fast\",worker=\"spec\"} 40\n");
    expect(b.data, "sol_worker_spec_draft_tokens_total{pool=\"fast\",worker=\"spec\"} 200\n");
    expect(b.data, "sol_worker_spec_accepted_tokens_total{pool=\"fast\",worker=\"spec\"} 120\n");
    expect(b.data, "sol_worker_spec_emitted_tokens_total{pool=\"fast\",worker=\"spec\"} 160\n");
    expect(b.data, "sol_worker_spec_draft_seconds_total{pool=\"fast\",worker=\"spec\"} 1.5\n");
    expect(b.data, "sol_worker_spec_verify_seconds_total{pool=\"fast\",worker=\"spec\"} 2.25\n");
    expect(b.data, "sol_worker_spec_tokens_per_step{pool=\"fast\",worker=\"spec\"} 4\n");
    expect(b.data, "sol_worker_spec_tokens_per_step{pool=\"fast\",worker=\"w\\\"1\"} 0\n");
    expect(b.data, "# TYPE vllm:spec_decode_num_drafts_total counter\n");
    expect(b.data, "vllm:spec_decode_num_drafts_total{model_name=\"demo\",pool=\"fast\","
                   "worker=\"spec\"} 40\n");
    expect(b.data, "vllm:spec_decode_num_draft_tokens_total{model_name=\"demo\",pool=\"fast\","
                   "worker=\"spec\"} 200\n");
    expect(b.data, "vllm:spec_decode_num_accepted_tokens_total{model_name=\"demo\",pool=\"fast\","
                   "worker=\"spec\"} 120\n");
    expect(b.data, "sol_worker_spec_verify_steps_total{pool=\"precise\",worker=\"big\"} "
                   "1152921504606846977\n");
    expect(b.data, "sol_worker_spec_draft_tokens_total{pool=\"precise\",worker=\"big\"} "
                   "4611686018427387907\n");
    expect(b.data, "sol_worker_spec_accepted_tokens_total{pool=\"precise\",worker=\"big\"} "
                   "2305843009213693959\n");
    expect(b.data, "sol_worker_spec_emitted_tokens_total{pool=\"precise\",worker=\"big\"} "
                   "4611686018427387909\n");
    metrics_remove_worker(m, "spec");
    metrics_remove_worker(m, "big");
    metrics_remove_worker(m, "w\"1");
    strbuf_reset(&b);
    metrics_render(m, &b);
    assert_null(strstr(b.data, "worker=\"w"));
    /* every non-comment line is "name{labels} value" */
    for (char *line = strtok(b.data, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char *sp = strrchr(line, ' ');
        assert_non_null(sp);
        assert_true(sp[1] != '\0');
    }
    strbuf_free(&b);
    metrics_free(m);
}

static void *hammer(void *arg) {
    metrics *m = arg;
    for (int i = 0; i < 10000; i++) {
        metrics_observe(m, METRIC_ITL, "precise", 0.001);
        metrics_count_request(m, "precise", 200);
    }
    return NULL;
}

static void test_concurrent(void **st) {
    (void)st;
    metrics *m = metrics_new("demo");
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, hammer, m);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    strbuf b;
    strbuf_init(&b);
    metrics_render(m, &b);
    expect(b.data, "sol_request_inter_token_latency_seconds_count{pool=\"precise\"} 40000\n");
    expect(b.data, "sol_requests_total{pool=\"precise\",status=\"200\"} 40000\n");
    strbuf_free(&b);
    metrics_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render),
        cmocka_unit_test(test_concurrent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
