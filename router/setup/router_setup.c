/* router_setup: the one place where configuration units meet module units. The config uses -1
 * (SOL_RULE_UNSET) for a rule condition that is absent while classify uses 0, a rate-limit
 * burst of 0 means max(1, ceil(rate)), and the HTTP layer wants a host and a port apart. */
#include "router_setup.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

int router_parse_listen(const char *s, char *host, size_t cap, uint16_t *port, sol_err *e) {
    const char *colon = s ? strrchr(s, ':') : NULL;
    if (!colon || colon == s || (size_t)(colon - s) >= cap)
        return sol_err_set(e, -EINVAL, "router.http.listen: expected HOST:PORT, found \"%s\"",
                           s ? s : "");
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || p < 0 || p > 65535)
        return sol_err_set(e, -EINVAL,
                           "router.http.listen: port must be 0..65535, found \"%s\" in \"%s\"",
                           colon + 1, s);
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    if (!strcmp(host, "localhost")) snprintf(host, cap, "127.0.0.1");
    *port = (uint16_t)p;
    return 0;
}

static size_t unset0(int v) {
    return v == SOL_RULE_UNSET || v < 0 ? 0 : (size_t)v;
}

static int build_classifier(router_setup *s, const sol_router_config *r, const router_setup_opts *o,
                            sol_err *e) {
    size_t n = r->routing.rules.n;
    classify_rule *rules = calloc(n ? n : 1, sizeof *rules);
    if (!rules) return sol_err_set(e, -ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const sol_route_rule *c = &r->routing.rules.items[i];
        rules[i] = (classify_rule){
            .tag = c->tag,
            .prompt_chars_below = unset0(c->prompt_chars_below),
            .prompt_chars_above = unset0(c->prompt_chars_above),
            .max_tokens_below = (uint32_t)unset0(c->max_tokens_below),
            .max_tokens_above = (uint32_t)unset0(c->max_tokens_above),
            .keywords = (const char *const *)c->keywords.items,
            .n_keywords = c->keywords.n,
            .model = c->model,
            .pool = c->pool,
        };
    }
    const char *weights = r->routing.classifier.weights_file;
    if (!weights && o->config_file_given && access(ROUTER_DEFAULT_WEIGHTS, R_OK) == 0)
        weights = ROUTER_DEFAULT_WEIGHTS;
    s->weights_used = weights;
    classify_config cc = {
        .pools = (const char *const *)r->routing.pools.items,
        .n_pools = r->routing.pools.n,
        .default_pool = r->routing.default_pool,
        .rules = rules,
        .n_rules = n,
        .classifier_path = weights,
        .classifier_threshold = r->routing.classifier.threshold,
    };
    int rc = classify_new(&cc, &s->cls, e);
    free(rules);
    return rc;
}

static int build_http(router_setup *s, const sol_router_config *r, const router_setup_opts *o,
                      sol_err *e) {
    uint16_t port;
    int rc = router_parse_listen(r->http.listen, s->host, sizeof s->host, &port, e);
    if (rc) return rc;
    if (r->http.api_keys_file && (rc = apikeys_load(r->http.api_keys_file, &s->keys, e))) return rc;
    double rate = r->http.rate_limit.requests_per_s;
    if (rate > 0) {
        double burst = r->http.rate_limit.burst > 0 ? r->http.rate_limit.burst : ceil(rate);
        if (burst < 1) burst = 1;
        if (!(s->limiter = ratelimit_new(rate, burst, NULL, NULL)))
            return sol_err_set(e, -ENOMEM, "out of memory");
    }
    s->http = (http_config){
        .host = s->host,
        .port = port,
        .max_body_bytes = (size_t)r->http.max_body_bytes,
        .max_header_bytes = (size_t)r->http.max_header_bytes,
        .max_connections = (unsigned)r->http.max_connections,
        .max_per_client = (unsigned)r->http.max_connections_per_client,
        .header_timeout_s = (unsigned)r->http.header_timeout_s,
        .keepalive_timeout_s = (unsigned)r->http.keepalive_timeout_s,
        .body_timeout_s = (unsigned)r->http.body_timeout_s,
        .sse_max_buffer = (size_t)r->http.sse_max_buffer_bytes,
        .keys = s->keys,
        .limiter = s->limiter,
        .router = s->cls,
        .metrics = s->metrics,
        .served_model = o->served_model,
    };
    return 0;
}

int router_setup_new(const sol_config *cfg, const router_setup_opts *opts, router_setup **out,
                     sol_err *e) {
    *out = NULL;
    router_setup_opts none = {0};
    const router_setup_opts *o = opts ? opts : &none;
    const sol_router_config *r = &cfg->router;
    router_setup *s = calloc(1, sizeof *s);
    if (!s) return sol_err_set(e, -ENOMEM, "out of memory");
    s->metrics = metrics_new(o->served_model ? o->served_model : "sol");
    int rc = s->metrics ? 0 : sol_err_set(e, -ENOMEM, "out of memory");
    if (!rc) rc = build_classifier(s, r, o, e);
    if (!rc) rc = build_http(s, r, o, e);
    if (rc) {
        router_setup_free(s);
        return rc;
    }
    s->broker = (broker_config){
        .bind = r->workers.bind,
        .allow_insecure = r->workers.allow_insecure || r->workers.allow_public,
        .curve_secret_key_file = r->workers.curve.secret_key_file,
        .curve_authorized_dir = r->workers.curve.authorized_keys_dir,
        .pools = (const char *const *)r->routing.pools.items,
        .n_pools = r->routing.pools.n,
        .fallback_pool = r->routing.fallback_pool,
        .heartbeat_ms = r->workers.heartbeat_ms,
        .dead_after_ms = r->workers.dead_after_ms,
        .max_queue_per_pool = r->workers.max_queue_per_pool,
        .rebalance_hot_ratio = r->workers.rebalance_hot_ratio,
        .affinity_prefix_chars = r->routing.affinity_prefix_chars,
        .policy = r->routing.policy,
        .reply_tokens_mib = r->routing.reply_tokens_mib,
        .request_timeout_ms = r->http.request_timeout_ms,
        .slo = r->slo.items,
        .n_slo = r->slo.n,
        .metrics = s->metrics,
    };
    *out = s;
    return 0;
}

void router_setup_free(router_setup *s) {
    if (!s) return;
    classify_free(s->cls);
    apikeys_free(s->keys);
    ratelimit_free(s->limiter);
    metrics_free(s->metrics);
    free(s);
}
