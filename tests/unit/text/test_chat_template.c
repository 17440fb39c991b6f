/* Promise: each chat family renders exact text (harmony included); detection by markers; bad
 * roles named. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "chat_template.h"

static const chat_message CONVO[] = {{.role = "system", .content = "S"},
                                     {.role = "user", .content = "Hi"},
                                     {.role = "assistant", .content = "Hello"},
                                     {.role = "user", .content = "Bye"}};
#define N_CONVO (sizeof CONVO / sizeof CONVO[0])

static void expect(chat_template_family f, const chat_message *m, size_t n, bool gen,
                   const char *want) {
    char *out = NULL;
    size_t len = 0;
    sol_err e = {0};
    if (chat_template_apply(f, m, n, gen, &out, &len, &e))
        fail_msg("%s: %s", chat_template_name(f), e.msg);
    assert_string_equal(out, want);
    assert_int_equal(len, strlen(want));
    free(out);
}

static void test_multi_turn_with_system(void **state) {
    (void)state;
    expect(CHAT_TEMPLATE_CHATML, CONVO, N_CONVO, true,
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
           "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
           "<|im_start|>assistant\n");
    expect(CHAT_TEMPLATE_LLAMA3, CONVO, N_CONVO, true,
           "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect(CHAT_TEMPLATE_LLAMA2, CONVO, N_CONVO, true,
           "[INST] <<SYS>>\nS\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Bye [/INST]");
    expect(CHAT_TEMPLATE_MISTRAL, CONVO, N_CONVO, true,
           "[INST] S\n\nHi [/INST] Hello</s>[INST] Bye [/INST]");
    expect(CHAT_TEMPLATE_ZEPHYR, CONVO, N_CONVO, true,
           "<|system|>\nS</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello</s>\n<|user|>\nBye</s>\n"
           "<|assistant|>\n");
}

static void test_single_user_without_generation_prompt(void **state) {
    (void)state;
    const chat_message m[] = {{.role = "user", .content = "What is 2+2?"}};
    expect(CHAT_TEMPLATE_CHATML, m, 1, false, "<|im_start|>user\nWhat is 2+2?<|im_end|>\n");
    expect(CHAT_TEMPLATE_LLAMA3, m, 1, false,
           "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>");
    expect(CHAT_TEMPLATE_LLAMA2, m, 1, false, "[INST] What is 2+2? [/INST]");
    expect(CHAT_TEMPLATE_MISTRAL, m, 1, false, "[INST] What is 2+2? [/INST]");
    expect(CHAT_TEMPLATE_ZEPHYR, m, 1, false, "<|user|>\nWhat is 2+2?</s>\n");
}

static void test_empty_and_null_content(void **state) {
    (void)state;
    const chat_message m[] = {{.role = "system", .content = ""}, {.role = "user", .content = NULL}};
    expect(CHAT_TEMPLATE_CHATML, m, 2, true,
           "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n");
    expect(CHAT_TEMPLATE_LLAMA2, m, 2, true, "[INST] <<SYS>>\n\n<</SYS>>\n\n [/INST]");
    expect(CHAT_TEMPLATE_MISTRAL, m, 2, true, "[INST] \n\n [/INST]");
    const chat_message a[] = {{.role = "user", .content = "x"},
                              {.role = "assistant", .content = ""},
                              {.role = "user", .content = "y"}};
    expect(CHAT_TEMPLATE_LLAMA2, a, 3, true, "[INST] x [/INST]  </s><s>[INST] y [/INST]");
}

static void test_llama2_turns_without_system(void **state) {
    (void)state;
    const chat_message m[] = {{.role = "user", .content = "a"},
                              {.role = "assistant", .content = "b"},
                              {.role = "user", .content = "c"},
                              {.role = "assistant", .content = "d"}};
    expect(CHAT_TEMPLATE_LLAMA2, m, 4, false, "[INST] a [/INST] b </s><s>[INST] c [/INST] d </s>");
    expect(CHAT_TEMPLATE_MISTRAL, m, 4, false, "[INST] a [/INST] b</s>[INST] c [/INST] d</s>");
    /* A lone system message still yields a closed instruction for the model to answer. */
    const chat_message s[] = {{.role = "system", .content = "Be brief."}};
    expect(CHAT_TEMPLATE_LLAMA2, s, 1, true, "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n [/INST]");
}

static void test_bad_input_is_named(void **state) {
    (void)state;
    char *out = (char *)1;
    sol_err e = {0};
    const chat_message m[] = {{.role = "user", .content = "hi"}, {.role = "tool", .content = "42"}};
    assert_int_equal(chat_template_apply(CHAT_TEMPLATE_LLAMA3, m, 2, true, &out, NULL, &e),
                     -ENOTSUP);
    assert_null(out);
    assert_non_null(strstr(e.msg, "message 1"));
    assert_non_null(strstr(e.msg, "tool messages"));
    const chat_message upper[] = {{.role = "User", .content = "hi"}};
    assert_int_equal(chat_template_apply(CHAT_TEMPLATE_CHATML, upper, 1, true, &out, NULL, &e),
                     -EINVAL);
    assert_non_null(strstr(e.msg, "\"User\""));
    const chat_message noname[] = {{.role = NULL, .content = "hi"}};
    assert_int_equal(chat_template_apply(CHAT_TEMPLATE_CHATML, noname, 1, true, &out, NULL, &e),
                     -EINVAL);
    assert_non_null(strstr(e.msg, "role is missing"));
    assert_int_equal(chat_template_apply(CHAT_TEMPLATE_CHATML, m, 0, true, &out, NULL, &e),
                     -EINVAL);
    assert_int_equal(chat_template_apply((chat_template_family)99, m, 1, true, &out, NULL, &e),
                     -EINVAL);
}

/* Gemma folds the system message into the first user turn and trims contents; a system message
 * anywhere else is refused with its index; Qwen2.5 adds its default system message. (The real
 * templates are compared in tests/integration/chat_template_reference.sh.) */
static void test_gemma_and_qwen25(void **state) {
    (void)state;
    expect(CHAT_TEMPLATE_GEMMA, CONVO, N_CONVO, true,
           "<start_of_turn>user\nS\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
           "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
    const chat_message spaced[] = {{.role = "user", .content = "  a b \n"}};
    expect(CHAT_TEMPLATE_GEMMA, spaced, 1, false, "<start_of_turn>user\na b<end_of_turn>\n");
    char *out = NULL;
    sol_err e = {0};
    const chat_message late[] = {{.role = "user", .content = "hi"},
                                 {.role = "system", .content = "S"}};
    assert_int_equal(chat_template_apply(CHAT_TEMPLATE_GEMMA, late, 2, true, &out, NULL, &e),
                     -EINVAL);
    assert_non_null(strstr(e.msg, "chat message 1"));
    const chat_message only_system[] = {{.role = "system", .content = "S"}};
    assert_int_equal(chat_template_apply(CHAT_TEMPLATE_GEMMA, only_system, 1, true, &out, NULL, &e),
                     -EINVAL);
    expect(CHAT_TEMPLATE_QWEN25, CONVO + 1, 1, true,
           "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
           "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect(CHAT_TEMPLATE_LLAMA31, CONVO + 1, 1, false,
           "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
           "2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>"
           "\n\nHi<|eot_id|>");
}

static void test_detect_from_markers(void **state) {
    (void)state;
    chat_template_family f;
    assert_int_equal(chat_template_detect("{% for m in messages %}{{'<|im_start|>' + m.role}}"),
                     CHAT_TEMPLATE_CHATML);
    assert_int_equal(
        chat_template_detect("{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>' }}"),
        CHAT_TEMPLATE_LLAMA3);
    assert_int_equal(
        chat_template_detect("{{ '<<SYS>>\\n' + sys + '\\n<</SYS>>' }}{{ '[INST] ' + c }}"),
        CHAT_TEMPLATE_LLAMA2);
    assert_int_equal(chat_template_detect("{{ bos_token }}{{ '[INST] ' + c + ' [/INST]' }}"),
                     CHAT_TEMPLATE_MISTRAL);
    assert_int_equal(chat_template_detect("{{ '<|user|>\\n' + c + eos_token }}{{'<|assistant|>'}}"),
                     CHAT_TEMPLATE_ZEPHYR);
    /* Phi-3 shares <|user|> but is not Zephyr: unknown, so the default */
    assert_false(chat_template_detect_known("<|user|>{{c}}<|end|><|assistant|>", &f));
    assert_int_equal(f, CHAT_TEMPLATE_DEFAULT);
    assert_false(chat_template_detect_known(NULL, &f));
    assert_int_equal(chat_template_detect(""), CHAT_TEMPLATE_CHATML);
    assert_int_equal(chat_template_detect("{{ messages }}"), CHAT_TEMPLATE_CHATML);
    assert_true(chat_template_detect_known("x<|im_start|>y", &f));
}

static void test_names(void **state) {
    (void)state;
    chat_template_family f;
    sol_err e = {0};
    for (int i = 0; i < CHAT_TEMPLATE_COUNT; i++) {
        assert_int_equal(chat_template_from_name(chat_template_name(i), &f, &e), 0);
        assert_int_equal(f, i);
    }
    assert_int_equal(chat_template_from_name("Llama-3", &f, &e), 0);
    assert_int_equal(f, CHAT_TEMPLATE_LLAMA3);
    assert_int_equal(chat_template_from_name("qwen2", &f, &e), 0);
    assert_int_equal(f, CHAT_TEMPLATE_CHATML);
    assert_int_equal(chat_template_from_name("vicuna", &f, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "\"vicuna\""));
    assert_non_null(strstr(e.msg, "llama3"));
    assert_int_equal(chat_template_from_name(NULL, &f, &e), -EINVAL);
    assert_string_equal(chat_template_name((chat_template_family)42), "?");
}

/* Qwen2.5: the tools block replaces the default system message's block; an assistant call's
 * string arguments go through tojson (quoted); tool results become one user turn. Families
 * without a tool format refuse tools by name. */
static void test_qwen_tools(void **state) {
    (void)state;
    const char *tool_json[] = {"{\"type\": \"function\", \"function\": {\"name\": \"f\"}}"};
    const chat_tools tools = {tool_json, 1};
    const chat_tool_call call = {.name = "f", .arguments = "{\"x\": 1}"};
    const chat_tool_call quoted = {
        .name = "f", .arguments = "{\"x\":1}", .arguments_is_string = true};
    const chat_message m[] = {
        {.role = "user", .content = "q"},
        {.role = "assistant", .tool_calls = &call, .n_tool_calls = 1},
        {.role = "tool", .content = "1"},
        {.role = "tool", .content = "2"},
        {.role = "assistant", .content = "a", .tool_calls = &quoted, .n_tool_calls = 1}};
    char *out = NULL;
    sol_err e = {0};
    assert_int_equal(
        chat_template_apply_tools(CHAT_TEMPLATE_QWEN25, m, 5, &tools, true, &out, NULL, &e), 0);
    assert_string_equal(
        out, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
             "assistant.\n\n# Tools\n\nYou may call one or more functions to assist with the "
             "user query.\n\nYou are provided with function signatures within <tools></tools> "
             "XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"f\"}}\n"
             "</tools>\n\nFor each function call, return a json object with function name and "
             "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
             "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
             "<|im_start|>user\nq<|im_end|>\n"
             "<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n"
             "</tool_call><|im_end|>\n"
             "<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n"
             "</tool_response><|im_end|>\n"
             "<|im_start|>assistant\na\n<tool_call>\n{\"name\": \"f\", \"arguments\": "
             "\"{\\\"x\\\":1}\"}\n</tool_call><|im_end|>\n<|im_start|>assistant\n");
    free(out);
    assert_int_equal(
        chat_template_apply_tools(CHAT_TEMPLATE_GEMMA, m, 1, &tools, true, &out, NULL, &e),
        -ENOTSUP);
    assert_non_null(strstr(e.msg, "gemma"));
    assert_int_equal(chat_template_apply(CHAT_TEMPLATE_CHATML, m, 2, true, &out, NULL, &e),
                     -ENOTSUP);
    assert_non_null(strstr(e.msg, "message 1"));
    const chat_message r[] = {{.role = "user", .content = "q"},
                              {.role = "assistant", .content = "x", .reasoning_content = "r"}};
    assert_int_equal(chat_template_apply(CHAT_TEMPLATE_QWEN25, r, 2, true, &out, NULL, &e),
                     -ENOTSUP);
    assert_non_null(strstr(e.msg, "reasoning_content"));
}

/* Llama 3.1 with tools, against the model's own Jinja template rendered by jinja2 (HF's tojson):
 * "Environment: ipython", the functions in the first user turn as tojson(indent=4), a call as
 * {"name", "parameters"}, a tool result as an ipython turn holding the tojson of its text. */
static void test_llama31_tools(void **state) {
    (void)state;
    const char *tool_json[] = {
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"descript"
        "ion\": \"Weather now\", \"parameters\": {\"type\": \"object\", \"properties\""
        ": {\"city\": {\"type\": \"string\"}, \"e\": {}, \"l\": []}, \"required\": [\""
        "city\"]}}}"};
    const chat_tools tools = {tool_json, 1};
    const chat_tool_call call = {.id = "call_1",
                                 .name = "get_weather",
                                 .arguments = "{\"city\": \"Paris\", \"n\": [1, 2]}",
                                 .arguments_is_string = true};
    const chat_message m[] = {
        {.role = "system", .content = " Be brief. "},
        {.role = "user", .content = "Weather in Paris?"},
        {.role = "assistant", .tool_calls = &call, .n_tool_calls = 1},
        {.role = "tool", .content = "{\"temp\": 21}", .tool_call_id = "call_1"},
        {.role = "assistant", .content = "21 C."},
        {.role = "user", .content = "Thanks"}};
    char *out = NULL;
    sol_err e = {0};
    assert_int_equal(
        chat_template_apply_tools(CHAT_TEMPLATE_LLAMA31, m, 6, &tools, true, &out, NULL, &e), 0);
    assert_string_equal(
        out, "<|start_header_id|>system<|end_header_id|>\n"
             "\n"
             "Environment: ipython\n"
             "Cutting Knowledge Date: December 2023\n"
             "Today Date: 26 Jul 2024\n"
             "\n"
             "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
             "\n"
             "Given the following functions, please respond with a JSON for a function call"
             " with its proper arguments that best answers the given prompt.\n"
             "\n"
             "Respond in the format {\"name\": function name, \"parameters\": dictionary of"
             " argument name and its value}.Do not use variables.\n"
             "\n"
             "{\n"
             "    \"type\": \"function\",\n"
             "    \"function\": {\n"
             "        \"name\": \"get_weather\",\n"
             "        \"description\": \"Weather now\",\n"
             "        \"parameters\": {\n"
             "            \"type\": \"object\",\n"
             "            \"properties\": {\n"
             "                \"city\": {\n"
             "                    \"type\": \"string\"\n"
             "                },\n"
             "                \"e\": {},\n"
             "                \"l\": []\n"
             "            },\n"
             "            \"required\": [\n"
             "                \"city\"\n"
             "            ]\n"
             "        }\n"
             "    }\n"
             "}\n"
             "\n"
             "Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
             "\n"
             "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"n\": [1, "
             "2]}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n"
             "\n"
             "\"{\\\"temp\\\": 21}\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
             "\n"
             "\n"
             "21 C.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
             "\n"
             "Thanks<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
             "\n");
    free(out);
    const chat_tool_call two[] = {call, call};
    const chat_message m2[] = {{.role = "user", .content = "q"},
                               {.role = "assistant", .tool_calls = two, .n_tool_calls = 2}};
    assert_int_equal(
        chat_template_apply_tools(CHAT_TEMPLATE_LLAMA32, m2, 2, &tools, true, &out, NULL, &e),
        -EINVAL);
    assert_non_null(strstr(e.msg, "one tool call per assistant message"));
    const chat_message a[] = {{.role = "assistant", .content = "x"}};
    assert_int_equal(
        chat_template_apply_tools(CHAT_TEMPLATE_LLAMA31, a, 1, &tools, true, &out, NULL, &e),
        -EINVAL);
    assert_non_null(strstr(e.msg, "first user message"));
    assert_string_equal(chat_template_tool_format(CHAT_TEMPLATE_LLAMA31), "llama3-json");
    assert_null(chat_template_tool_format(CHAT_TEMPLATE_LLAMA3));
}

/* Mistral v0.3, against its Jinja template: [AVAILABLE_TOOLS] before the last user turn (string
 * fields raw), the system message in that turn, [TOOL_CALLS] with 9-character ids, results in
 * [TOOL_RESULTS] as they are; other ids are mapped to 9 letters and digits the same way in a call
 * and in its result. */
static void test_mistral_v3_tools(void **state) {
    (void)state;
    const char *tool_json[] = {
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"descript"
        "ion\": \"Weather now\", \"parameters\": {\"type\": \"object\", \"properties\""
        ": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}",
        "{\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"parameters\""
        ": {\"type\": \"object\", \"properties\": {}}}}"};
    const chat_tools tools = {tool_json, 2};
    const chat_tool_call calls[] = {
        {.id = "abc123XYZ", .name = "get_weather", .arguments = "{\"city\": \"Paris\"}"},
        {.id = "000000042", .name = "get_time", .arguments = "{}"}};
    const chat_message m[] = {
        {.role = "system", .content = "Be brief."},
        {.role = "user", .content = "Weather in Paris?"},
        {.role = "assistant", .tool_calls = calls, .n_tool_calls = 2},
        {.role = "tool", .content = "{\"temp\": 21}", .tool_call_id = "abc123XYZ"},
        {.role = "tool", .content = "noon", .tool_call_id = "000000042"},
        {.role = "assistant", .content = " 21 C. "},
        {.role = "user", .content = "Thanks"}};
    char *out = NULL;
    sol_err e = {0};
    assert_int_equal(
        chat_template_apply_tools(CHAT_TEMPLATE_MISTRAL_V3, m, 7, &tools, true, &out, NULL, &e), 0);
    assert_string_equal(
        out, "[INST] Weather in Paris?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"ar"
             "guments\": {\"city\": \"Paris\"}, \"id\": \"abc123XYZ\"}, {\"name\": \"get_ti"
             "me\", \"arguments\": {}, \"id\": \"000000042\"}]</s>[TOOL_RESULTS] {\"content"
             "\": {\"temp\": 21}, \"call_id\": \"abc123XYZ\"}[/TOOL_RESULTS][TOOL_RESULTS] "
             "{\"content\": noon, \"call_id\": \"000000042\"}[/TOOL_RESULTS] 21 C.</s>[AVAI"
             "LABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"get_weather"
             "\", \"description\": \"Weather now\", \"parameters\": {\"type\": \"object\", "
             "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}"
             "}}, {\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"paramet"
             "ers\": {\"type\": \"object\", \"properties\": {}}}}][/AVAILABLE_TOOLS][INST] "
             "Be brief.\n"
             "\n"
             "Thanks[/INST]");
    free(out);
    const chat_tool_call oai = {.id = "call_ab_7", .name = "f", .arguments = "{}"};
    const chat_message m2[] = {{.role = "user", .content = "q"},
                               {.role = "assistant", .tool_calls = &oai, .n_tool_calls = 1},
                               {.role = "tool", .content = "1", .tool_call_id = "call_ab_7"}};
    assert_int_equal(
        chat_template_apply_tools(CHAT_TEMPLATE_MISTRAL_V3, m2, 3, NULL, true, &out, NULL, &e), 0);
    assert_string_equal(out, "[INST] q[/INST][TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}, "
                             "\"id\": \"00callab7\"}]</s>[TOOL_RESULTS] {\"content\": 1, "
                             "\"call_id\": \"00callab7\"}[/TOOL_RESULTS]");
    free(out);
    chat_template_family f;
    assert_true(chat_template_detect_known("{{ '[AVAILABLE_TOOLS] [' }}{{ '[INST] ' }}", &f));
    assert_int_equal(f, CHAT_TEMPLATE_MISTRAL_V3);
    assert_int_equal(chat_template_from_name("mistral-v3", &f, &e), 0);
    assert_string_equal(chat_template_name(f), "mistral-v3");
    assert_string_equal(chat_template_tool_format(f), "mistral");
}

/* Qwen3: the latest answer after the last user query shows its reasoning in <think>; earlier
 * answers lose theirs. */
static void test_qwen3_think(void **state) {
    (void)state;
    const chat_message m[] = {{.role = "user", .content = "a"},
                              {.role = "assistant", .content = "<think>\nold\n</think>\n\nA"},
                              {.role = "user", .content = "b"},
                              {.role = "assistant", .content = "B", .reasoning_content = "why"}};
    expect(CHAT_TEMPLATE_QWEN3, m, 4, false,
           "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
           "<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant\n<think>\nwhy\n</think>\n\nB"
           "<|im_end|>\n");
}

/* Harmony (gpt-oss): the system message with today's date and the channels, the caller's system
 * message as the developer's instructions and the tools as a TypeScript namespace; a past turn's
 * answer on final (its reasoning dropped), the current tool loop's reasoning on analysis, a call
 * on commentary to functions.NAME, its result from functions.NAME; the generation prompt. */
static void test_harmony(void **state) {
    (void)state;
    char date[32], head[512];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%d", &tm);
    snprintf(head, sizeof head,
             "<|start|>system<|message|>You are ChatGPT, a large language model trained by "
             "OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: %s\n\nReasoning: medium\n\n# "
             "Valid channels: analysis, commentary, final. Channel must be included for every "
             "message.",
             date);
    const char *tool_json[] = {
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
        "\"Weather now\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
        "{\"type\": \"string\", \"description\": \"City\"}, \"unit\": {\"enum\": [\"c\", "
        "\"f\"], \"default\": \"c\"}, \"days\": {\"type\": \"array\", \"items\": {\"type\": "
        "\"integer\"}}}, \"required\": [\"city\"]}}}",
        "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}"};
    const chat_tools tools = {tool_json, 2};
    const chat_tool_call call = {
        .id = "c1", .name = "get_weather", .arguments = "{\"city\":\"Oslo\"}"};
    const chat_message m[] = {
        {.role = "system", .content = "Be brief."},
        {.role = "user", .content = "Hi"},
        {.role = "assistant", .content = "Hello", .reasoning_content = "old thoughts"},
        {.role = "user", .content = "Weather?"},
        {.role = "assistant",
         .reasoning_content = "Need it.",
         .tool_calls = &call,
         .n_tool_calls = 1},
        {.role = "tool", .content = "{\"t\": 3}", .tool_call_id = "c1"}};
    char *out = NULL, want[4096];
    sol_err e = {0};
    assert_int_equal(
        chat_template_apply_tools(CHAT_TEMPLATE_HARMONY, m, 6, &tools, true, &out, NULL, &e), 0);
    snprintf(want, sizeof want,
             "%s\nCalls to these tools must go to the commentary channel: 'functions'.<|end|>"
             "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## "
             "functions\n\nnamespace functions {\n\n// Weather now\ntype get_weather = (_: {\n"
             "// City\ncity: string,\nunit?: \"c\" | \"f\", // default: \"c\"\ndays?: number[],\n"
             "}) => any;\n\ntype now = () => any;\n\n} // namespace functions<|end|>"
             "<|start|>user<|message|>Hi<|end|>"
             "<|start|>assistant<|channel|>final<|message|>Hello<|end|>"
             "<|start|>user<|message|>Weather?<|end|>"
             "<|start|>assistant<|channel|>analysis<|message|>Need it.<|end|>"
             "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
             "{\"city\":\"Oslo\"}<|call|>"
             "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"
             "{\"t\": 3}<|end|><|start|>assistant",
             head);
    assert_string_equal(out, want);
    free(out);
    /* no system message, no tools: no developer message; the last answer ends with <|return|> */
    const chat_message q[] = {{.role = "user", .content = "Q"},
                              {.role = "assistant", .content = "A", .reasoning_content = "R"}};
    assert_int_equal(chat_template_apply(CHAT_TEMPLATE_HARMONY, q, 2, false, &out, NULL, &e), 0);
    snprintf(want, sizeof want,
             "%s<|end|><|start|>user<|message|>Q<|end|>"
             "<|start|>assistant<|channel|>analysis<|message|>R<|end|>"
             "<|start|>assistant<|channel|>final<|message|>A<|return|>",
             head);
    assert_string_equal(out, want);
    free(out);
    const chat_message orphan[] = {{.role = "user", .content = "Q"},
                                   {.role = "tool", .content = "1"}};
    assert_int_equal(chat_template_apply(CHAT_TEMPLATE_HARMONY, orphan, 2, true, &out, NULL, &e),
                     -EINVAL);
    assert_non_null(strstr(e.msg, "message 1"));
    chat_template_family f;
    assert_true(chat_template_detect_known(
        "{{- '<|start|>assistant<|channel|>final<|message|>' + content }}", &f));
    assert_int_equal(f, CHAT_TEMPLATE_HARMONY);
    assert_int_equal(chat_template_from_name("gpt-oss", &f, &e), 0);
    assert_int_equal(f, CHAT_TEMPLATE_HARMONY);
    assert_string_equal(chat_template_tool_format(CHAT_TEMPLATE_HARMONY), "harmony");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multi_turn_with_system),
        cmocka_unit_test(test_single_user_without_generation_prompt),
        cmocka_unit_test(test_empty_and_null_content),
        cmocka_unit_test(test_llama2_turns_without_system),
        cmocka_unit_test(test_bad_input_is_named),
        cmocka_unit_test(test_gemma_and_qwen25),
        cmocka_unit_test(test_detect_from_markers),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_qwen_tools),
        cmocka_unit_test(test_llama31_tools),
        cmocka_unit_test(test_mistral_v3_tools),
        cmocka_unit_test(test_qwen3_think),
        cmocka_unit_test(test_harmony),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
