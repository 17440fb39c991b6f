/* Promise: OpenAI request bodies are validated field by field (400 naming the param) and responses,
 * SSE chunks and error bodies have the OpenAI shapes. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "oai_render.h"

static oai_request *ok(oai_kind k, const char *body) {
    oai_request *r = NULL;
    oai_error e;
    int rc = oai_parse_request(k, body, strlen(body), &r, &e);
    if (rc) fail_msg("unexpected error: %s", e.message);
    return r;
}

static void bad(oai_kind k, const char *body, size_t len, const char *param, const char *needle) {
    oai_request *r = NULL;
    oai_error e;
    assert_int_equal(oai_parse_request(k, body, len, &r, &e), -EINVAL);
    assert_null(r);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.type, "invalid_request_error");
    assert_string_equal(e.param, param);
    if (!strstr(e.message, needle)) fail_msg("message '%s' lacks '%s'", e.message, needle);
}
#define BAD(k, body, param, needle) bad(k, body, strlen(body), param, needle)

static void test_completion_defaults_and_fields(void **st) {
    (void)st;
    oai_request *r = ok(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"hi\"}");
    assert_int_equal(r->max_tokens, 16);
    assert_true(r->sampling.temperature == 1.0f && r->sampling.top_p == 1.0f &&
                r->sampling.top_k == -1);
    assert_false(r->stream);
    oai_request_free(r);
    r = ok(OAI_COMPLETION,
           "{\"model\":\"m\",\"prompt\":[\"x\"],\"max_tokens\":5,\"temperature\":0,\"top_p\":0.5,"
           "\"top_k\":40,\"min_p\":0.1,\"stop\":[\"a\",\"b\"],\"seed\":7,\"stream\":true,"
           "\"stream_options\":{\"include_usage\":true},\"logprobs\":3,\"priority\":-2,"
           "\"cache_salt\":\"t1\",\"tags\":[\"fast\"],\"user\":\"u\",\"logit_bias\":{\"5\":-100,"
           "\"9\":2.5},"
           "\"n\":1,\"echo\":false,\"presence_penalty\":null}");
    assert_string_equal(r->prompt, "x");
    assert_int_equal(r->max_tokens, 5);
    assert_int_equal(r->sampling.top_k, 40);
    assert_int_equal(r->n_stop, 2);
    assert_string_equal(r->stop[1], "b");
    assert_true(r->sampling.has_seed && r->sampling.seed == 7);
    assert_true(r->stream && r->include_usage && r->sampling.want_logprobs);
    assert_int_equal(r->sampling.n_logprobs, 3);
    assert_int_equal(r->priority, -2);
    assert_int_equal(r->n_bias, 2);
    assert_true(r->bias_tokens[0] == 5 && r->bias_values[0] == -100.0f && r->bias_tokens[1] == 9);
    assert_string_equal(r->cache_salt, "t1");
    assert_string_equal(r->tags[0], "fast");
    oai_request_free(r);
}

static void test_completion_errors(void **st) {
    (void)st;
    /* `model` may be omitted: the router's classification then picks the pool. */
    oai_request *nm = ok(OAI_COMPLETION, "{\"prompt\":\"x\"}");
    assert_null(nm->model);
    assert_string_equal(nm->prompt, "x");
    oai_request_free(nm);
    BAD(OAI_COMPLETION, "{\"model\":5,\"prompt\":\"x\"}", "model", "string");
    BAD(OAI_COMPLETION, "{\"model\":\"m\"}", "prompt", "required");
    BAD(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[1,2]}", "prompt", "token-id");
    BAD(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens",
        "at least 1");
    BAD(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":\"5\"}", "max_tokens",
        "integer");
    BAD(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"temperature\":2.5}", "temperature",
        "2.5");
    BAD(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"top_p\":0}", "top_p", "(0, 1]");
    BAD(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"top_k\":-2}", "top_k", "-1");
    BAD(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"n\":17}", "n", "'n'");
    oai_request *nt = ok(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                   "\"n\":2,\"tools\":[{\"type\":\"function\",\"function\":"
                                   "{\"name\":\"f\"}}]}");
    assert_int_equal(nt->n, 2); /* n > 1 with tools: each choice has its own calls */
    oai_request_free(nt);
    oai_request *n3 = ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"n\":3}");
    assert_int_equal(n3->n, 3);
    oai_request_free(n3);
    BAD(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"echo\":true}", "echo",
        "not supported");
    BAD(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"suffix\":\"s\"}", "suffix",
        "not supported");
    BAD(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"logprobs\":21}", "logprobs", "20");
    BAD(OAI_COMPLETION,
        "{\"model\":\"m\",\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop",
        "at most 4");
    BAD(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"stream\":1}", "stream", "boolean");
    BAD(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"repetition_penalty\":0}",
        "repetition_penalty", "got 0");
    /* the bound the wire and the sampler hold (one table): a 400 naming the API field */
    BAD(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"repetition_penalty\":500}",
        "repetition_penalty", "'repetition_penalty' must be in (0, 100], got 500");
    BAD(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_k\":1.5}", "top_k",
        "'top_k' must be an integer");
    BAD(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"min_p\":\"0\"}", "min_p",
        "'min_p' must be a number, got a string");
    BAD(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"tags\":[1]}", "tags", "string");
    BAD(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",", "", "invalid JSON");
    BAD(OAI_COMPLETION, "[1]", "", "JSON object");
    BAD(OAI_COMPLETION, "{\"model\":\"m\",\"model\":\"n\",\"prompt\":\"x\"}", "", "invalid JSON");
    const char utf[] = "{\"model\":\"m\",\"prompt\":\"\xff\"}";
    bad(OAI_COMPLETION, utf, sizeof utf - 1, "", "not valid UTF-8");
    const char nul[] = "{\"model\":\"m\",\"prompt\":\"a\\u0000b\"}";
    bad(OAI_COMPLETION, nul, sizeof nul - 1, "", "invalid JSON");
}

/* No field is silently ignored: unknown ones are refused as OpenAI does, OpenAI's own that this
 * server lacks with the reason, bad logit_bias entries and constraint mixes by name. */
static void test_field_audit(void **st) {
    (void)st;
    BAD(OAI_COMPLETION, "{\"prompt\":\"x\",\"unknown_x\":1}", "unknown_x",
        "Unrecognized request argument supplied: unknown_x");
    BAD(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"store\":true}", "store",
        "stored completions");
    BAD(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"audio\":{}}", "audio",
        "audio output");
    BAD(OAI_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"-3\":1}}", "logit_bias",
        "is not a token id");
    BAD(OAI_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"3\":101}}", "logit_bias",
        "[-100, 100]");
    BAD(OAI_COMPLETION, "{\"prompt\":\"x\",\"guided_regex\":\"a\",\"guided_choice\":[\"b\"]}",
        "guided_choice", "cannot be combined");
    oai_request *r = ok(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                  "\"store\":false,\"metadata\":null,"
                                  "\"response_format\":{\"type\":\"json_object\"}}");
    assert_non_null(r->grammar);
    assert_string_equal(r->grammar_field, "response_format");
    oai_request_free(r);
}

static void test_chat(void **st) {
    (void)st;
    oai_request *r =
        ok(OAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be "
                     "brief\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
                     "\"he\"},{\"type\":\"text\",\"text\":\"llo\"}]}],"
                     "\"max_completion_tokens\":9,\"logprobs\":true,\"top_logprobs\":2}");
    assert_int_equal(r->n_messages, 2);
    assert_string_equal(r->messages[1].content, "hello");
    assert_string_equal(oai_request_last_user_text(r), "hello");
    assert_int_equal(r->max_tokens, 9);
    assert_true(r->sampling.want_logprobs);
    assert_int_equal(r->sampling.n_logprobs, 2);
    strbuf b;
    strbuf_init(&b);
    oai_request_text(r, &b);
    assert_string_equal(b.data, "be brief\nhello");
    strbuf_free(&b);
    oai_request_free(r);
    r = ok(OAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
    assert_false(r->max_tokens_set);
    oai_request_free(r);
    BAD(OAI_CHAT, "{\"model\":\"m\",\"messages\":[]}", "messages", "non-empty");
    BAD(OAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}",
        "messages[0].role", "bot");
    BAD(OAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":5}]}",
        "messages[0].content", "string");
    BAD(OAI_CHAT,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]"
        "}",
        "messages[0].content", "only text");
    BAD(OAI_CHAT,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"functions\":[]}",
        "functions", "use tools");
    BAD(OAI_CHAT,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}",
        "tool_choice", "needs 'tools'");
    /* auto with strict tools (a lazy grammar, made when the pool is bound) takes no other
     * grammar beside it */
    BAD(OAI_CHAT,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"strict\":true}}],\"guided_regex\":\"a\"}",
        "tool_choice", "auto with strict tools and 'guided_regex' cannot be combined");
    BAD(OAI_CHAT, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "messages[0].role",
        "tool_call_id");
    BAD(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":\"bob\"}]}",
        "messages[0]", "messages[0].name' is not supported");
    /* reasoning handed back: an assistant's, as a string */
    BAD(OAI_CHAT,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"reasoning_content\":\"r\"}]}",
        "messages[0].reasoning_content", "only assistant messages");
    BAD(OAI_CHAT,
        "{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\",\"reasoning_content\":1}]}",
        "messages[0].reasoning_content", "must be a string");
    BAD(OAI_CHAT,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
        "\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\","
        "\"function\":{\"name\":\"g\"}}}",
        "tool_choice", "not in 'tools'");
    r = ok(OAI_CHAT,
           "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":\"assistant\","
           "\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":"
           "{\"name\":\"get\",\"arguments\":\"{\\\"a\\\": 1}\"}}]},{\"role\":\"tool\","
           "\"tool_call_id\":\"c1\",\"content\":\"sunny\"}],\"tools\":[{\"type\":\"function\","
           "\"function\":{\"name\":\"get\",\"parameters\":{\"type\":\"object\",\"properties\":"
           "{\"a\":{\"type\":\"integer\"}}}}}],\"tool_choice\":\"required\"}");
    assert_int_equal(r->tools.n, 1);
    assert_string_equal(r->tools.json[0],
                        "{\"type\": \"function\", \"function\": {\"name\": \"get\", "
                        "\"parameters\": {\"type\": \"object\", \"properties\": {\"a\": "
                        "{\"type\": \"integer\"}}}}}");
    assert_int_equal(r->messages[1].n_calls, 1);
    assert_string_equal(r->messages[1].calls[0].arguments, "{\"a\": 1}");
    assert_string_equal(r->messages[2].tool_call_id, "c1");
    assert_null(r->messages[1].reasoning);
    assert_null(r->grammar); /* required: constrained once the pool's format is known */
    oai_error e;
    assert_int_equal(
        oai_tools_bind(&r->tools, "hermes", "qwen2.5", "p", &r->grammar, &r->grammar_field, &e), 0);
    assert_non_null(strstr(r->grammar, "<tool_call>"));
    assert_string_equal(r->grammar_field, "tool_choice");
    oai_request_free(r);
    BAD(OAI_CHAT,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}",
        "logprobs", "boolean");
}

static json_t *parse_json(const char *s, size_t n) {
    json_error_t je;
    json_t *j = json_loadb(s, n, 0, &je);
    if (!j) fail_msg("not JSON (%s): %.*s", je.text, (int)n, s);
    return j;
}

static void test_responses(void **st) {
    (void)st;
    oai_top_logprob top[2] = {{"a", -0.1f}, {"b\"", -2.5f}};
    oai_token_logprob lp[2] = {{"a", -0.1f, top, 2}, {"\xc3\xa9", -1.0f, NULL, 0}};
    oai_answer a = {.text = "a\xc3\xa9",
                    .text_len = 3,
                    .logprobs = lp,
                    .n_logprobs = 2,
                    .finish = OAI_FINISH_LENGTH};
    oai_response r = {OAI_COMPLETION, "cmpl-1", 1700000000, "m", &a, 1, {4, 2, 0}};
    strbuf b;
    strbuf_init(&b);
    assert_int_equal(oai_response_json(&b, &r), 0);
    json_t *j = parse_json(b.data, b.len);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "text_completion");
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c0, "text")), "a\xc3\xa9");
    assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")), "length");
    json_t *l = json_object_get(c0, "logprobs");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(l, "text_offset"), 1)), 1);
    assert_true(json_real_value(json_object_get(
                    json_array_get(json_object_get(l, "top_logprobs"), 0), "b\"")) == -2.5);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")), 6);
    json_decref(j);

    strbuf_reset(&b);
    r.kind = OAI_CHAT;
    a.finish = OAI_FINISH_STOP;
    oai_response_json(&b, &r);
    j = parse_json(b.data, b.len);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion");
    c0 = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(c0, "message"), "role")),
                        "assistant");
    json_t *content = json_object_get(json_object_get(c0, "logprobs"), "content");
    json_t *bytes = json_object_get(json_array_get(content, 1), "bytes");
    assert_int_equal(json_array_size(bytes), 2);
    assert_int_equal(json_integer_value(json_array_get(bytes, 0)), 0xc3);
    json_decref(j);
    strbuf_free(&b);
}

static void test_sse(void **st) {
    (void)st;
    oai_request *req = ok(OAI_CHAT, "{\"model\":\"m\",\"stream\":true,\"stream_options\":"
                                    "{\"include_usage\":true},\"messages\":[{\"role\":\"user\","
                                    "\"content\":\"x\"}]}");
    oai_stream s;
    oai_stream_init(&s, req, "chatcmpl-9", 5);
    strbuf b;
    strbuf_init(&b);
    oai_sse_chunk(&b, &s, "Hel", 3, NULL, 0, OAI_FINISH_NONE);
    assert_true(!strncmp(b.data, "data: {", 7) && !strcmp(b.data + b.len - 2, "\n\n"));
    json_t *j = parse_json(b.data + 6, b.len - 8);
    json_t *d = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
    assert_string_equal(json_string_value(json_object_get(d, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(d, "content")), "Hel");
    assert_true(json_is_null(json_object_get(j, "usage")));
    json_decref(j);
    strbuf_reset(&b);
    oai_sse_chunk(&b, &s, "lo", 2, NULL, 0, OAI_FINISH_STOP);
    j = parse_json(b.data + 6, b.len - 8);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    assert_null(json_object_get(json_object_get(c0, "delta"), "role"));
    assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")), "stop");
    json_decref(j);
    strbuf_reset(&b);
    oai_usage u = {3, 2, 0};
    oai_sse_usage(&b, &s, &u);
    j = parse_json(b.data + 6, b.len - 8);
    assert_int_equal(json_array_size(json_object_get(j, "choices")), 0);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 2);
    json_decref(j);
    strbuf_reset(&b);
    oai_sse_done(&b);
    assert_string_equal(b.data, "data: [DONE]\n\n");
    strbuf_free(&b);
    oai_request_free(req);
}

static void test_error_body(void **st) {
    (void)st;
    oai_error e;
    oai_error_status(&e, 429, "slow \"down\"");
    strbuf b;
    strbuf_init(&b);
    oai_error_json(&b, &e);
    json_t *j = parse_json(b.data, b.len);
    json_t *err = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(err, "message")), "slow \"down\"");
    assert_string_equal(json_string_value(json_object_get(err, "code")), "rate_limit_exceeded");
    assert_true(json_is_null(json_object_get(err, "param")));
    json_decref(j);
    strbuf_free(&b);
    /* invalid UTF-8 in a text delta still yields valid JSON */
    strbuf_init(&b);
    strbuf_json_str(&b, "a\xff\x01", 3);
    assert_string_equal(b.data, "\"a\\ufffd\\u0001\"");
    strbuf_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_defaults_and_fields),
        cmocka_unit_test(test_completion_errors),
        cmocka_unit_test(test_chat),
        cmocka_unit_test(test_field_audit),
        cmocka_unit_test(test_responses),
        cmocka_unit_test(test_sse),
        cmocka_unit_test(test_error_body),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
