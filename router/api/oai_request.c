/* oai_request: request validation for the OpenAI-compatible endpoints. Parsing is strict on types
 * and ranges (a clear 400 names the field), lenient on unknown fields (ignored, as vLLM does, so
 * newer SDKs keep working). */
#include "oai_request.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "frame.h"
#include "oai_constraint.h"
#include "utf8.h"

/* A 400 naming the offending field. */
#define BAD(err, param, ...)                                                                       \
    oai_error_set(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

static const char *json_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

static char *dup_json_str(const json_t *v) {
    size_t n = json_string_length(v);
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, json_string_value(v), n);
    s[n] = '\0';
    return s;
}

static int get_int(const json_t *v, const char *name, json_int_t lo, json_int_t hi, json_int_t *out,
                   oai_error *err) {
    if (!json_is_integer(v))
        return BAD(err, name, "'%s' must be an integer, got %s", name, json_type_name(v)), -EINVAL;
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return BAD(err, name, "'%s' must be between %lld and %lld, got %lld", name, (long long)lo,
                   (long long)hi, (long long)x),
               -EINVAL;
    *out = x;
    return 0;
}

static int get_bool(const json_t *v, const char *name, bool *out, oai_error *err) {
    if (!json_is_boolean(v))
        return BAD(err, name, "'%s' must be a boolean, got %s", name, json_type_name(v)), -EINVAL;
    *out = json_is_true(v);
    return 0;
}

static int get_string(const json_t *v, const char *name, char **out, oai_error *err) {
    if (!json_is_string(v))
        return BAD(err, name, "'%s' must be a string, got %s", name, json_type_name(v)), -EINVAL;
    free(*out);
    *out = dup_json_str(v);
    return *out ? 0 : -ENOMEM;
}

static int parse_prompt(oai_request *r, const json_t *v, oai_error *err) {
    if (json_is_array(v)) {
        if (json_array_size(v) != 1 || !json_is_string(json_array_get(v, 0)))
            return BAD(err, "prompt",
                       "'prompt' must be a string or an array of one string; token-id arrays and "
                       "batched prompts are not supported (got an array of %zu %s)",
                       json_array_size(v),
                       json_array_size(v) ? json_type_name(json_array_get(v, 0)) : "elements"),
                   -EINVAL;
        v = json_array_get(v, 0);
    }
    if (!json_is_string(v))
        return BAD(err, "prompt", "'prompt' must be a string, got %s", json_type_name(v)), -EINVAL;
    r->prompt = dup_json_str(v);
    return r->prompt ? 0 : -ENOMEM;
}

static int parse_stop(oai_request *r, const json_t *v, oai_error *err) {
    if (json_is_string(v)) {
        r->stop[0] = dup_json_str(v);
        r->n_stop = r->stop[0] ? 1 : 0;
        return r->stop[0] ? 0 : -ENOMEM;
    }
    if (!json_is_array(v) || json_array_size(v) > OAI_MAX_STOP)
        return BAD(err, "stop", "'stop' must be a string or an array of at most %d strings, got %s",
                   OAI_MAX_STOP, json_type_name(v)),
               -EINVAL;
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *s = json_array_get(v, i);
        if (!json_is_string(s) || json_string_length(s) == 0)
            return BAD(err, "stop", "'stop[%zu]' must be a non-empty string, got %s", i,
                       json_type_name(s)),
                   -EINVAL;
        if (!(r->stop[r->n_stop++] = dup_json_str(s))) return -ENOMEM;
    }
    return 0;
}

static int parse_tags(oai_request *r, const json_t *v, oai_error *err) {
    if (!json_is_array(v) || json_array_size(v) > OAI_MAX_TAGS)
        return BAD(err, "tags", "'tags' must be an array of at most %d strings, got %s",
                   OAI_MAX_TAGS, json_type_name(v)),
               -EINVAL;
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *s = json_array_get(v, i);
        if (!json_is_string(s))
            return BAD(err, "tags", "'tags[%zu]' must be a string, got %s", i, json_type_name(s)),
                   -EINVAL;
        if (!(r->tags[r->n_tags++] = dup_json_str(s))) return -ENOMEM;
    }
    return 0;
}

static int parse_stream_options(oai_request *r, const json_t *v, oai_error *err) {
    if (!json_is_object(v))
        return BAD(err, "stream_options", "'stream_options' must be an object, got %s",
                   json_type_name(v)),
               -EINVAL;
    const json_t *iu = json_object_get(v, "include_usage");
    if (iu && !json_is_null(iu))
        return get_bool(iu, "stream_options.include_usage", &r->include_usage, err);
    return 0;
}

/* content: a string, or an array of {"type":"text","text":...} parts joined together. */
static int parse_content(const json_t *v, size_t idx, char **out, oai_error *err) {
    char param[48];
    snprintf(param, sizeof param, "messages[%zu].content", idx);
    if (json_is_string(v)) return get_string(v, param, out, err);
    if (!json_is_array(v))
        return BAD(err, param, "'%s' must be a string or an array of text parts, got %s", param,
                   json_type_name(v)),
               -EINVAL;
    strbuf b;
    strbuf_init(&b);
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *part = json_array_get(v, i);
        const json_t *type = json_object_get(part, "type");
        const json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) ||
            strcmp(json_string_value(type), "text") || !json_is_string(text)) {
            strbuf_free(&b);
            return BAD(err, param,
                       "'%s[%zu]' must be {\"type\": \"text\", \"text\": string}; only text parts "
                       "are supported",
                       param, i),
                   -EINVAL;
        }
        strbuf_append(&b, json_string_value(text), json_string_length(text));
    }
    if (strbuf_reserve(&b, 0) < 0) return strbuf_free(&b), -ENOMEM;
    free(*out);
    *out = strbuf_take(&b, NULL);
    return 0;
}

/* An assistant message's tool_calls: [{"id", "type": "function", "function": {"name",
 * "arguments"}}]; arguments is the JSON text the model produced (OpenAI's shape). */
static int parse_msg_calls(oai_message *dst, const json_t *v, size_t i, oai_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (!json_is_array(v) || json_array_size(v) > OAI_MAX_TOOLS)
        return BAD(err, param, "'%s' must be an array", param), -EINVAL;
    dst->calls = calloc(json_array_size(v) + 1, sizeof *dst->calls);
    if (!dst->calls) return -ENOMEM;
    for (size_t j = 0; j < json_array_size(v); j++) {
        const json_t *c = json_array_get(v, j), *fn = json_object_get(c, "function");
        const char *id = json_string_value(json_object_get(c, "id"));
        const char *name = json_string_value(json_object_get(fn, "name"));
        const json_t *args = json_object_get(fn, "arguments");
        if (!id || !name || !json_is_string(args))
            return BAD(err, param,
                       "'%s[%zu]' needs id, function.name and function.arguments "
                       "(a string of JSON)",
                       param, j),
                   -EINVAL;
        oai_msg_call *d = &dst->calls[dst->n_calls++];
        d->id = strdup(id), d->name = strdup(name), d->arguments = strdup(json_string_value(args));
        if (!d->id || !d->name || !d->arguments) return -ENOMEM;
    }
    return 0;
}

static int parse_message(oai_message *dst, size_t i, const json_t *m, oai_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(m))
        return BAD(err, param, "'%s' must be an object, got %s", param, json_type_name(m)), -EINVAL;
    const char *k;
    const json_t *x;
    json_object_foreach((json_t *)m, k, x) {
        (void)x;
        if (strcmp(k, "role") && strcmp(k, "content") && strcmp(k, "tool_calls") &&
            strcmp(k, "tool_call_id") && strcmp(k, "reasoning_content"))
            return BAD(err, param,
                       "'%s.%s' is not supported (role, content, tool_calls, "
                       "tool_call_id, reasoning_content)",
                       param, k),
                   -EINVAL;
    }
    const json_t *role = json_object_get(m, "role");
    snprintf(param, sizeof param, "messages[%zu].role", i);
    if (!json_is_string(role))
        return BAD(err, param, "'%s' must be a string, got %s", param,
                   role ? json_type_name(role) : "nothing"),
               -EINVAL;
    const char *rs = json_string_value(role);
    if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") &&
        strcmp(rs, "developer") && strcmp(rs, "tool"))
        return BAD(err, param, "'%s' must be one of system, user, assistant, tool; got \"%.40s\"",
                   param, rs),
               -EINVAL;
    /* "developer" is OpenAI's newer name for the system role */
    dst->role = strdup(!strcmp(rs, "developer") ? "system" : rs);
    if (!dst->role) return -ENOMEM;
    const json_t *calls = json_object_get(m, "tool_calls"),
                 *tid = json_object_get(m, "tool_call_id");
    int rc;
    if (calls && !json_is_null(calls)) {
        if (strcmp(rs, "assistant"))
            return BAD(err, param, "messages[%zu]: only assistant messages carry tool_calls", i),
                   -EINVAL;
        if ((rc = parse_msg_calls(dst, calls, i, err))) return rc;
    }
    if (!strcmp(rs, "tool")) {
        if (!json_is_string(tid))
            return BAD(err, param, "messages[%zu]: a tool message needs tool_call_id", i), -EINVAL;
        if (!(dst->tool_call_id = strdup(json_string_value(tid)))) return -ENOMEM;
    } else if (tid) {
        return BAD(err, param, "messages[%zu]: tool_call_id belongs to tool messages", i), -EINVAL;
    }
    const json_t *why = json_object_get(m, "reasoning_content");
    if (why && !json_is_null(why)) { /* what the model answered before, handed back */
        snprintf(param, sizeof param, "messages[%zu].reasoning_content", i);
        if (strcmp(rs, "assistant"))
            return BAD(err, param, "'%s': only assistant messages carry reasoning", param), -EINVAL;
        if (!json_is_string(why))
            return BAD(err, param, "'%s' must be a string, got %s", param, json_type_name(why)),
                   -EINVAL;
        if (!(dst->reasoning = strdup(json_string_value(why)))) return -ENOMEM;
    }
    const json_t *content = json_object_get(m, "content");
    if ((!content || json_is_null(content)) && dst->n_calls) return 0; /* calls, no text */
    if (!content || json_is_null(content)) {
        snprintf(param, sizeof param, "messages[%zu].content", i);
        return BAD(err, param, "'%s' is required", param), -EINVAL;
    }
    return parse_content(content, i, &dst->content, err);
}

static int parse_messages(oai_request *r, const json_t *v, oai_error *err) {
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > OAI_MAX_MESSAGES)
        return BAD(err, "messages", "'messages' must be a non-empty array (at most %d), got %s",
                   OAI_MAX_MESSAGES, json_type_name(v)),
               -EINVAL;
    r->messages = calloc(json_array_size(v), sizeof *r->messages);
    if (!r->messages) return -ENOMEM;
    for (size_t i = 0; i < json_array_size(v); i++) {
        int rc = parse_message(&r->messages[r->n_messages++], i, json_array_get(v, i), err);
        if (rc) return rc;
    }
    return 0;
}

/* Fields whose presence alone is a 400 on this server. */
static int reject_unsupported(oai_kind kind, const char *key, const json_t *v, oai_error *err) {

    if (!strcmp(key, "best_of")) {
        json_int_t n = 0;
        if (get_int(v, "best_of", 1, INT32_MAX, &n, err)) return -EINVAL;
        if (n > 1) return BAD(err, "best_of", "best_of > 1 is not supported"), -EINVAL;
        return 0;
    }
    if (kind == OAI_COMPLETION && !strcmp(key, "echo")) {
        if (json_is_false(v)) return 0;
        return BAD(err, "echo", "'echo' is not supported"), -EINVAL;
    }
    if (kind == OAI_COMPLETION && !strcmp(key, "suffix"))
        return BAD(err, "suffix", "'suffix' is not supported"), -EINVAL;
    if (kind == OAI_CHAT && (!strcmp(key, "functions") || !strcmp(key, "function_call")))
        return BAD(err, key, "'%s' (the legacy form) is not supported: use tools and tool_choice",
                   key),
               -EINVAL;
    return 1; /* not an unsupported field */
}

static int parse_sampling(oai_request *r, const char *key, const json_t *v, oai_error *err) {
    const sol_sampling_field *f = sol_sampling_field_find(key);
    if (f) { /* the bounds are the table's (common/sampling.c), as the wire and the sampler's */
        if (f->integer ? !json_is_integer(v) : !json_is_number(v))
            return BAD(err, key, "'%s' must be %s, got %s", key,
                       f->integer ? "an integer" : "a number", json_type_name(v)),
                   -EINVAL;
        sol_err e = {0};
        if (sol_sampling_field_set(&r->sampling, f, json_number_value(v), &e))
            return BAD(err, key, "%s", e.msg), -EINVAL;
        return 0;
    }
    if (!strcmp(key, "seed")) {
        if (!json_is_integer(v))
            return BAD(err, "seed", "'seed' must be an integer, got %s", json_type_name(v)),
                   -EINVAL;
        r->sampling.seed = (uint64_t)json_integer_value(v);
        r->sampling.has_seed = true;
        return 0;
    }
    return 1;
}

static int parse_max_tokens(oai_request *r, const char *key, const json_t *v, oai_error *err) {
    json_int_t i;
    if (!json_is_integer(v))
        return BAD(err, key, "'%s' must be an integer >= 1, got %s", key, json_type_name(v)),
               -EINVAL;
    i = json_integer_value(v);
    if (i < 1)
        return BAD(err, key, "'%s' must be at least 1, got %lld", key, (long long)i), -EINVAL;
    if (i > OAI_MAX_TOKENS_LIMIT)
        return BAD(err, key, "'%s' must be at most %u, got %lld", key, OAI_MAX_TOKENS_LIMIT,
                   (long long)i),
               -EINVAL;
    r->max_tokens = (uint32_t)i;
    r->max_tokens_set = true;
    return 0;
}

static int parse_logprobs(oai_request *r, const char *key, const json_t *v, oai_error *err) {
    json_int_t i;
    int rc;
    if (r->kind == OAI_COMPLETION && !strcmp(key, "logprobs")) {
        if ((rc = get_int(v, "logprobs", 0, OAI_MAX_LOGPROBS, &i, err))) return rc;
        r->sampling.want_logprobs = true;
        r->sampling.n_logprobs = (int32_t)i;
        return 0;
    }
    if (r->kind == OAI_CHAT && !strcmp(key, "logprobs"))
        return get_bool(v, "logprobs", &r->sampling.want_logprobs, err);
    if (r->kind == OAI_CHAT && !strcmp(key, "top_logprobs")) {
        if ((rc = get_int(v, "top_logprobs", 0, OAI_MAX_LOGPROBS, &i, err))) return rc;
        r->sampling.n_logprobs = (int32_t)i;
        return 0;
    }
    return 1;
}

/* logit_bias: {"token id": bias in [-100, 100]} as OpenAI takes it. */
static int parse_logit_bias(oai_request *r, const json_t *v, oai_error *err) {
    if (!json_is_object(v))
        return BAD(err, "logit_bias", "'logit_bias' must be an object of token id: bias"), -EINVAL;
    size_t n = json_object_size(v), i = 0;
    if (n > SOL_FRAME_MAX_LOGIT_BIAS)
        return BAD(err, "logit_bias", "'logit_bias' has %zu entries (at most %d)", n,
                   SOL_FRAME_MAX_LOGIT_BIAS),
               -EINVAL;
    free(r->bias_tokens), free(r->bias_values);
    r->bias_tokens = calloc(n ? n : 1, sizeof *r->bias_tokens);
    r->bias_values = calloc(n ? n : 1, sizeof *r->bias_values);
    r->n_bias = 0;
    if (!r->bias_tokens || !r->bias_values) return -ENOMEM;
    const char *k;
    const json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        char *end = NULL;
        unsigned long id = strtoul(k, &end, 10);
        if (!*k || *end || k[0] == '-' || id > 0x7fffffffUL)
            return BAD(err, "logit_bias", "'logit_bias' key \"%.32s\" is not a token id", k),
                   -EINVAL;
        if (!json_is_number(x) || json_number_value(x) < -100 || json_number_value(x) > 100)
            return BAD(err, "logit_bias",
                       "'logit_bias' value of token %lu must be a number in "
                       "[-100, 100]",
                       id),
                   -EINVAL;
        r->bias_tokens[i] = (uint32_t)id;
        r->bias_values[i++] = (float)json_number_value(x);
    }
    r->n_bias = i;
    return 0;
}

/* Every other field: OpenAI's own that this server does not implement are refused with the
 * reason; anything else is refused as OpenAI does ("Unrecognized request argument"). */
static int refuse_field(oai_kind kind, const char *key, const json_t *v, oai_error *err) {
    static const struct {
        const char *key, *why;
    } known[] = {
        {"store", "stored completions are not supported"},
        {"metadata", "metadata is only stored with 'store', which is not supported"},
        {"audio", "audio output is not supported"},
        {"modalities", "only text output is supported (leave 'modalities' out)"},
        {"prediction", "predicted outputs are not supported"},
        {"reasoning_effort", "the level is fixed by the chat template (harmony: medium)"},
        {"web_search_options", "web search is not supported"},
        {"service_tier", "service tiers are not supported"},
    };
    if (json_is_null(v)) return 0; /* null means "not given" */
    if (!strcmp(key, "store") && json_is_false(v)) return 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (kind == OAI_CHAT && !strcmp(key, known[i].key))
            return BAD(err, key, "'%s' is not supported: %s", key, known[i].why), -EINVAL;
    return BAD(err, key, "Unrecognized request argument supplied: %.64s", key), -EINVAL;
}

/* /v1/embeddings: input (a string or up to OAI_MAX_N strings), encoding_format, model, user. */
static int parse_embedding_field(oai_request *r, const char *key, const json_t *v, oai_error *err) {
    if (!strcmp(key, "model")) return get_string(v, "model", &r->model, err);
    if (!strcmp(key, "user")) return get_string(v, "user", &r->user, err);
    if (!strcmp(key, "encoding_format")) {
        const char *f = json_string_value(v);
        if (!f || (strcmp(f, "float") && strcmp(f, "base64")))
            return BAD(err, key, "'encoding_format' must be float or base64"), -EINVAL;
        r->base64 = !strcmp(f, "base64");
        return 0;
    }
    if (!strcmp(key, "dimensions"))
        return BAD(err, key, "'dimensions' is not supported: the model's own width is returned"),
               -EINVAL;
    if (strcmp(key, "input"))
        return BAD(err, key, "Unrecognized request argument supplied: %.64s", key), -EINVAL;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (n == 0 || n > OAI_MAX_N)
        return BAD(err, key, "'input' must be a string or 1 to %d strings", OAI_MAX_N), -EINVAL;
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_string(x) || !json_string_length(x))
            return BAD(err, key,
                       "'input' must hold non-empty strings (token-id arrays are not "
                       "supported)"),
                   -EINVAL;
        free(r->inputs[i]);
        if (!(r->inputs[i] = dup_json_str(x))) return -ENOMEM;
    }
    r->n = (uint32_t)n;
    return 0;
}

static int parse_field(oai_request *r, const char *key, const json_t *v, oai_error *err) {
    int rc;
    if (r->kind == OAI_EMBEDDING)
        return json_is_null(v) ? 0 : parse_embedding_field(r, key, v, err);
    if (!strcmp(key, "n")) {
        json_int_t n = 1;
        if (!json_is_null(v) && get_int(v, "n", 1, OAI_MAX_N, &n, err)) return -EINVAL;
        r->n = (uint32_t)n;
        return 0;
    }
    if ((rc = reject_unsupported(r->kind, key, v, err)) <= 0) return rc;
    if ((rc = parse_sampling(r, key, v, err)) <= 0) return rc;
    if ((rc = parse_logprobs(r, key, v, err)) <= 0) return rc;
    if ((rc = oai_constraint_field(key, v, &r->grammar, &r->grammar_field, err)) <= 0) return rc;
    if (r->kind == OAI_CHAT && (rc = oai_tools_field(&r->tools, key, v, err)) <= 0) return rc;
    if (!strcmp(key, "model")) return get_string(v, "model", &r->model, err);
    if (r->kind == OAI_COMPLETION && !strcmp(key, "prompt")) return parse_prompt(r, v, err);
    if (r->kind == OAI_CHAT && !strcmp(key, "messages")) return parse_messages(r, v, err);
    if (!strcmp(key, "max_tokens") ||
        (r->kind == OAI_CHAT && !strcmp(key, "max_completion_tokens")))
        return parse_max_tokens(r, key, v, err);
    if (!strcmp(key, "stop")) return parse_stop(r, v, err);
    if (!strcmp(key, "stream")) return get_bool(v, "stream", &r->stream, err);
    if (!strcmp(key, "stream_options")) return parse_stream_options(r, v, err);
    if (!strcmp(key, "user")) return get_string(v, "user", &r->user, err);
    if (!strcmp(key, "cache_salt")) return get_string(v, "cache_salt", &r->cache_salt, err);
    if (!strcmp(key, "tags")) return parse_tags(r, v, err);
    if (!strcmp(key, "priority")) {
        json_int_t i;
        if ((rc = get_int(v, "priority", INT32_MIN, INT32_MAX, &i, err))) return rc;
        r->priority = (int32_t)i;
        return 0;
    }
    if (!strcmp(key, "logit_bias")) return parse_logit_bias(r, v, err);
    return refuse_field(r->kind, key, v, err);
}

static oai_request *request_defaults(oai_kind kind) {
    oai_request *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->kind = kind;
    oai_tools_init(&r->tools);
    r->n = 1;
    r->max_tokens = kind == OAI_COMPLETION ? OAI_DEFAULT_MAX_TOKENS : 0;
    r->sampling = sol_sampling_default();
    r->sampling.top_k = -1; /* OpenAI's "off"; 0 on the wire */
    return r;
}

static int check_required(oai_request *r, oai_error *err) {
    int rc = oai_tools_finish(&r->tools, r->grammar, r->grammar_field, err);
    if (rc) return rc;
    /* `model` may be left out: classification then picks the pool (docs/api.md). */
    if (r->kind == OAI_EMBEDDING && !r->inputs[0])
        return BAD(err, "input", "'input' is required"), -EINVAL;
    if (r->kind == OAI_COMPLETION && !r->prompt)
        return BAD(err, "prompt", "'prompt' is required"), -EINVAL;
    if (r->kind == OAI_CHAT && !r->messages)
        return BAD(err, "messages", "'messages' is required"), -EINVAL;
    if (r->kind == OAI_CHAT && r->sampling.n_logprobs && !r->sampling.want_logprobs)
        return BAD(err, "top_logprobs", "'top_logprobs' needs 'logprobs': true"), -EINVAL;
    if (r->include_usage && !r->stream)
        return BAD(err, "stream_options", "'stream_options' is only allowed with 'stream': true"),
               -EINVAL;
    return 0;
}

int oai_parse_request(oai_kind kind, const char *body, size_t len, oai_request **out,
                      oai_error *err) {
    *out = NULL;
    size_t valid = utf8_valid_prefix(body, len);
    if (valid != len)
        return BAD(err, NULL, "request body is not valid UTF-8 (bad byte 0x%02x at offset %zu)",
                   (unsigned char)body[valid], valid),
               -EINVAL;
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return BAD(err, NULL, "invalid JSON at line %d column %d: %s", jerr.line, jerr.column,
                   jerr.text),
               -EINVAL;
    int rc = 0;
    oai_request *r = NULL;
    if (!json_is_object(root)) {
        rc = BAD(err, NULL, "request body must be a JSON object, got %s", json_type_name(root));
        rc = -EINVAL;
        goto done;
    }
    if (!(r = request_defaults(kind))) {
        rc = -ENOMEM;
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (json_is_null(v)) continue; /* SDKs send null for "not set" */
        if ((rc = parse_field(r, key, v, err))) goto done;
    }
    rc = check_required(r, err);
done:
    json_decref(root);
    if (rc == -ENOMEM) oai_error_status(err, 500, "out of memory while parsing the request");
    if (rc) {
        oai_request_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

void oai_request_free(oai_request *r) {
    if (!r) return;
    free(r->model);
    free(r->prompt);
    for (size_t i = 0; i < r->n_messages; i++) {
        oai_message *m = &r->messages[i];
        free(m->role), free(m->content), free(m->tool_call_id), free(m->reasoning);
        for (size_t j = 0; j < m->n_calls; j++)
            free(m->calls[j].id), free(m->calls[j].name), free(m->calls[j].arguments);
        free(m->calls);
    }
    oai_tools_free(&r->tools);
    for (size_t i = 0; i < OAI_MAX_N; i++)
        free(r->inputs[i]);
    free(r->messages);
    for (size_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    for (size_t i = 0; i < r->n_tags; i++)
        free(r->tags[i]);
    free(r->user);
    free(r->cache_salt);
    free(r->grammar);
    free(r->bias_tokens);
    free(r->bias_values);
    free(r);
}

int oai_request_text(const oai_request *r, strbuf *out) {
    if (r->kind == OAI_EMBEDDING) {
        for (uint32_t i = 0; i < r->n && r->inputs[i]; i++) {
            if (i) strbuf_putc(out, '\n');
            strbuf_puts(out, r->inputs[i]);
        }
        return out->oom ? -ENOMEM : 0;
    }
    if (r->kind == OAI_COMPLETION) return strbuf_puts(out, r->prompt ? r->prompt : "");
    for (size_t i = 0; i < r->n_messages; i++) {
        if (i) strbuf_putc(out, '\n');
        strbuf_puts(out, r->messages[i].content ? r->messages[i].content : "");
    }
    return strbuf_reserve(out, 0);
}

const char *oai_request_last_user_text(const oai_request *r) {
    if (r->kind == OAI_COMPLETION) return r->prompt ? r->prompt : "";
    for (size_t i = r->n_messages; i-- > 0;)
        if (!strcmp(r->messages[i].role, "user") && r->messages[i].content)
            return r->messages[i].content;
    return "";
}
