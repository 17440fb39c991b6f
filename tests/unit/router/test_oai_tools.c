/* Promise: tool calls are read out of generated text in each family's format - Hermes
 * <tool_call> blocks, Llama 3's {"name", "parameters"} answers (with <|python_tag|> or ';'
 * between calls), Mistral's [TOOL_CALLS] [...] - the same whether the text arrives whole or a
 * byte at a time; text that only looks like a call stays content; Mistral ids are 9 letters and
 * digits; a pool whose template has no tool format is a 400 naming it. Harmony's channels:
 * reasoning, content and a call apart, at any split. */
#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "oai_tools.h"
#include "oai_render.h"

typedef struct parsed {
    strbuf content;
    oai_call_parser p;
} parsed;

/* Feeds text in pieces of `step` bytes (0: whole), then flushes. */
static void parse(parsed *r, oai_tool_format fmt, const char *text, size_t step) {
    strbuf_init(&r->content);
    oai_call_parser_init(&r->p, fmt, "req42");
    size_t n = strlen(text);
    for (size_t i = 0; i < n;) {
        size_t k = step && n - i > step ? step : n - i;
        assert_true(oai_call_parser_feed(&r->p, text + i, k, &r->content) >= 0);
        i += k;
    }
    oai_call_parser_flush(&r->p, &r->content);
}

static void done(parsed *r) {
    strbuf_free(&r->content);
    oai_call_parser_free(&r->p);
}

/* The same content and calls however the text is split. */
static void expect(oai_tool_format fmt, const char *text, const char *content, size_t n_calls,
                   const char *name0, const char *args0) {
    size_t steps[] = {0, 1, 3, 7};
    for (size_t s = 0; s < 4; s++) {
        parsed r;
        parse(&r, fmt, text, steps[s]);
        if (strcmp(r.content.data ? r.content.data : "", content) || r.p.n_calls != n_calls)
            fail_msg("%s (step %zu): content \"%s\", %zu calls", text, steps[s],
                     r.content.data ? r.content.data : "", r.p.n_calls);
        if (n_calls) {
            assert_string_equal(r.p.calls[0].name, name0);
            assert_string_equal(r.p.calls[0].arguments, args0);
        }
        done(&r);
    }
}

static void test_hermes(void **state) {
    (void)state;
    expect(OAI_FMT_HERMES,
           "Sure. <tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>",
           "Sure. ", 1, "f", "{\"x\":1}");
    expect(OAI_FMT_HERMES, "<tool_call>\nnot json\n</tool_call> tail",
           "<tool_call>\nnot json\n</tool_call> tail", 0, NULL, NULL);
    expect(OAI_FMT_HERMES, "a <tool_ca", "a <tool_ca", 0, NULL, NULL);
}

static void test_llama3(void **state) {
    (void)state;
    expect(OAI_FMT_LLAMA3, "{\"name\": \"get\", \"parameters\": {\"city\": \"{;}\"}}", "", 1, "get",
           "{\"city\":\"{;}\"}");
    expect(OAI_FMT_LLAMA3,
           "  <|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", "
           "\"parameters\": {\"k\": [1, 2]}}",
           "", 2, "a", "{}");
    expect(OAI_FMT_LLAMA3, "Hello {\"name\": \"a\", \"parameters\": {}}",
           "Hello {\"name\": \"a\", \"parameters\": {}}", 0, NULL, NULL);
    expect(OAI_FMT_LLAMA3, " {\"a\": 1} and more", " {\"a\": 1} and more", 0, NULL, NULL);
    expect(OAI_FMT_LLAMA3, "{\"name\": \"a\", \"parameters\": {\"x\"",
           "{\"name\": \"a\", "
           "\"parameters\": {\"x\"",
           0, NULL, NULL);
    /* the older "arguments" spelling is read too */
    expect(OAI_FMT_LLAMA3, "{\"name\": \"a\", \"arguments\": {\"y\": true}}", "", 1, "a",
           "{\"y\":true}");
    parsed r; /* two calls, both kept, in order */
    parse(&r, OAI_FMT_LLAMA3,
          "{\"name\": \"a\", \"parameters\": {}};{\"name\": \"b\", \"parameters\": {}}", 1);
    assert_int_equal(r.p.n_calls, 2);
    assert_string_equal(r.p.calls[1].name, "b");
    assert_string_not_equal(r.p.calls[0].id, r.p.calls[1].id);
    done(&r);
}

static void test_mistral(void **state) {
    (void)state;
    expect(OAI_FMT_MISTRAL,
           "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"s\": \"]}\"}}, {\"name\": \"g\", "
           "\"arguments\": {}}]",
           "", 2, "f", "{\"s\":\"]}\"}");
    expect(OAI_FMT_MISTRAL, "Let me check.[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]",
           "Let me check.", 1, "f", "{}");
    expect(OAI_FMT_MISTRAL, "[TOOL_CALLS] no array", "[TOOL_CALLS] no array", 0, NULL, NULL);
    expect(OAI_FMT_MISTRAL, "[TOOL_CALLS] [1, 2]", "[TOOL_CALLS] [1, 2]", 0, NULL, NULL);
    expect(OAI_FMT_MISTRAL, "[TOOL_CALLS] [{\"name\": \"f\"", "[TOOL_CALLS] [{\"name\": \"f\"", 0,
           NULL, NULL);
    parsed r;
    parse(&r, OAI_FMT_MISTRAL,
          "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": "
          "{}}]",
          0);
    assert_int_equal(r.p.n_calls, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(strlen(r.p.calls[i].id), 9);
        for (size_t k = 0; k < 9; k++)
            assert_true(strchr("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
                               r.p.calls[i].id[k]));
    }
    assert_string_not_equal(r.p.calls[0].id, r.p.calls[1].id);
    done(&r);
}

static oai_request *chat_with_tools(const char *extra) {
    char body[1024];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
             "\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]%s}",
             extra);
    oai_request *r = NULL;
    oai_error e;
    if (oai_parse_request(OAI_CHAT, body, strlen(body), &r, &e)) fail_msg("%s", e.message);
    return r;
}

/* Streams text through the parser and the content gate, step bytes at a time: the deltas it
 * would send, each checked to hold a non-space character, concatenated into `sent`. */
static size_t stream_gated(const char *text, size_t step, strbuf *sent) {
    oai_call_parser p;
    oai_call_parser_init(&p, OAI_FMT_HERMES, "r");
    size_t len = strlen(text), deltas = 0;
    for (size_t i = 0; i <= len; i += step) {
        strbuf parsed, out;
        strbuf_init(&parsed), strbuf_init(&out);
        size_t k = i + step > len ? len - i : step;
        assert_true(oai_call_parser_feed(&p, text + i, k, &parsed) >= 0);
        bool final = i + step > len;
        if (final) oai_call_parser_flush(&p, &parsed);
        oai_call_parser_gate(&p, &parsed, &out, final);
        if (out.len) {
            bool text_in = false;
            for (size_t j = 0; j < out.len; j++)
                text_in |= !strchr(" \t\r\n", out.data[j]);
            if (!text_in && p.n_calls) fail_msg("a whitespace-only delta: '%s'", out.data);
            strbuf_append(sent, out.data, out.len), deltas++;
        }
        strbuf_free(&parsed), strbuf_free(&out);
    }
    oai_call_parser_free(&p);
    return deltas;
}

/* An answer of calls only has no content (null; not the separators between the calls), and
 * streams no content delta; text around calls keeps everything but its trailing whitespace,
 * streamed or not; an answer without calls keeps all of its text. */
static void test_content_around_calls(void **state) {
    (void)state;
    const char *call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
    char only[512], text[512];
    snprintf(only, sizeof only, "%s\n\n%s\n\n\n", call, call);
    snprintf(text, sizeof text, "\n Sure. \n%s\n\n%s\n", call, call);
    const struct {
        const char *in, *content;
    } cases[] = {{only, ""}, {text, "\n Sure."}, {"  no calls \n", "  no calls \n"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t step = 1; step <= 9; step += 4) {
            parsed r;
            parse(&r, OAI_FMT_HERMES, cases[c].in, step);
            size_t n = oai_content_len(r.content.data, r.content.len, r.p.n_calls);
            if (n != strlen(cases[c].content) || memcmp(r.content.data, cases[c].content, n))
                fail_msg("case %zu: content '%.*s'", c, (int)n, r.content.data);
            done(&r);
            strbuf sent;
            strbuf_init(&sent);
            size_t deltas = stream_gated(cases[c].in, step, &sent);
            if (sent.len != n || (n && memcmp(sent.data, cases[c].content, n)))
                fail_msg("case %zu step %zu: streamed '%.*s'", c, step, (int)sent.len, sent.data);
            if (c == 0) assert_int_equal(deltas, 0);
            strbuf_free(&sent);
        }
    /* the response: null content for calls only */
    oai_call call1 = {.id = "c1", .name = (char *)"f", .arguments = (char *)"{}"};
    oai_answer ans = {.text = "\n\n\n", .text_len = 3, .calls = &call1, .n_calls = 1};
    oai_response resp = {
        .kind = OAI_CHAT, .id = "x", .model = "m", .choices = &ans, .n_choices = 1};
    strbuf out;
    strbuf_init(&out);
    assert_int_equal(oai_response_json(&out, &resp), 0);
    assert_non_null(strstr(out.data, "\"content\":null"));
    strbuf_free(&out);
}

/* Harmony: reasoning, content and one call as one text, split at every size; the reasoning
 * out of the analysis channel, the final channel's text as content, the call's name from its
 * recipient (before or after <|channel|>) and its raw arguments. */
static void harmony(const char *text, const char *reasoning, const char *content, size_t n_calls,
                    const char *name0, const char *args0) {
    for (size_t step = 0; step < 12; step++) {
        parsed r;
        parse(&r, OAI_FMT_HARMONY, text, step);
        const char *why = r.p.reasoning.data ? r.p.reasoning.data : "";
        if (strcmp(why, reasoning) || strcmp(r.content.data ? r.content.data : "", content) ||
            r.p.n_calls != n_calls)
            fail_msg("%s (step %zu): reasoning \"%s\", content \"%s\", %zu calls", text, step, why,
                     r.content.data ? r.content.data : "", r.p.n_calls);
        if (n_calls) {
            assert_string_equal(r.p.calls[0].name, name0);
            assert_string_equal(r.p.calls[0].arguments, args0);
            assert_non_null(strstr(r.p.calls[0].id, "call_req42_0"));
        }
        done(&r);
    }
}

static void test_harmony(void **state) {
    (void)state;
    harmony("<|channel|>analysis<|message|>Think: 2<3.<|end|><|start|>assistant<|channel|>final"
            "<|message|>It is 4.",
            "Think: 2<3.", "It is 4.", 0, NULL, NULL);
    harmony("<|channel|>final<|message|>Just <this>.<|return|>", "", "Just <this>.", 0, NULL, NULL);
    harmony("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
            "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}",
            "Need weather.", "", 1, "get_weather", "{\"city\":\"Oslo\"}");
    harmony("<|start|>assistant to=functions.add<|channel|>commentary json<|message|>{\"a\": 1}"
            "<|call|>",
            "", "", 1, "add", "{\"a\": 1}");
    harmony(" to=functions.add<|channel|>commentary json<|message|>{}", "", "", 1, "add", "{}");
    /* a model that writes no harmony at all: its text is the content */
    harmony("plain words, <|no markers", "", "plain words, <|no markers", 0, NULL, NULL);
    /* the reasoning alone (the answer cut short by max_tokens) */
    harmony("<|channel|>analysis<|message|>Hmm", "Hmm", "", 0, NULL, NULL);

    /* streaming: the reasoning leaves as it comes, before the final channel opens */
    oai_call_parser p;
    strbuf c;
    strbuf_init(&c);
    oai_call_parser_init(&p, OAI_FMT_HARMONY, "r");
    const char *part = "<|channel|>analysis<|message|>abc<|e";
    oai_call_parser_feed(&p, part, strlen(part), &c);
    assert_string_equal(p.reasoning.data, "abc"); /* "<|e" may begin <|end|>: held */
    part = "nd|><|start|>assistant<|channel|>final<|message|>x";
    oai_call_parser_feed(&p, part, strlen(part), &c);
    assert_string_equal(p.reasoning.data, "abc");
    assert_string_equal(c.data, "x");
    oai_call_parser_free(&p);
    strbuf_free(&c);
}

static void test_bind(void **state) {
    (void)state;
    oai_error e;
    oai_request *r = chat_with_tools(",\"tool_choice\":\"required\"");
    assert_null(r->grammar); /* the grammar waits for the pool's format */
    assert_int_equal(oai_tools_bind(&r->tools, "mistral", "mistral-v3", "fast", &r->grammar,
                                    &r->grammar_field, &e),
                     0);
    assert_int_equal(r->tools.format, OAI_FMT_MISTRAL);
    assert_non_null(strstr(r->grammar, "[TOOL_CALLS] ["));
    oai_request_free(r);

    r = chat_with_tools(",\"tool_choice\":\"required\"");
    assert_int_equal(oai_tools_bind(&r->tools, "llama3-json", "llama3.1", "fast", &r->grammar,
                                    &r->grammar_field, &e),
                     0);
    assert_non_null(strstr(r->grammar, "parameters"));
    assert_null(strstr(r->grammar, "tool_call"));
    oai_request_free(r);

    r = chat_with_tools(""); /* auto: no grammar; unknown pool format: Hermes */
    assert_int_equal(
        oai_tools_bind(&r->tools, NULL, "", "fast", &r->grammar, &r->grammar_field, &e), 0);
    assert_null(r->grammar);
    assert_int_equal(r->tools.format, OAI_FMT_HERMES);
    assert_int_equal(
        oai_tools_bind(&r->tools, "", "llama2", "fast", &r->grammar, &r->grammar_field, &e),
        -EINVAL);
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.message, "llama2"));
    assert_non_null(strstr(e.message, "'fast'"));
    oai_request_free(r);

    /* harmony: one call a turn after the channel marker; no tools: the format is still noted
     * (the output's reasoning is parsed), with its markers as the text's control tokens */
    r = chat_with_tools(",\"tool_choice\":\"required\"");
    assert_int_equal(
        oai_tools_bind(&r->tools, "harmony", "harmony", "fast", &r->grammar, &r->grammar_field, &e),
        0);
    assert_non_null(strstr(r->grammar, "commentary to=functions."));
    assert_non_null(strstr(r->grammar, " <|constrain|>json<|message|>"));
    assert_null(strstr(r->grammar, "\"name\""));
    oai_request_free(r);
    r = chat_with_tools(",\"tool_choice\":\"none\"");
    assert_int_equal(
        oai_tools_bind(&r->tools, "harmony", "harmony", "fast", &r->grammar, &r->grammar_field, &e),
        0);
    assert_true(oai_tools_parse_output(&r->tools));
    size_t nt = 0;
    const char *const *tt = oai_tools_text_tokens(&r->tools, &nt);
    assert_int_equal(nt, 5);
    assert_string_equal(tt[2], "<|message|>");
    oai_request_free(r);

    oai_tool_format f;
    assert_int_equal(oai_tool_format_parse("harmony", &f), 0);
    assert_int_equal(f, OAI_FMT_HARMONY);
    assert_int_equal(oai_tool_format_parse("llama3-json", &f), 0);
    assert_string_equal(oai_tool_format_name(f), "llama3-json");
    assert_int_equal(oai_tool_format_parse("json", &f), -EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hermes),  cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_mistral), cmocka_unit_test(test_bind),
        cmocka_unit_test(test_harmony), cmocka_unit_test(test_content_around_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
