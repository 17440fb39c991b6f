/* Promise: each chat family renders exact text; detection by markers; bad roles named. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "chat_template.h"

static const chat_message CONVO[] = {
    {"system", "S"}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
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
    const chat_message m[] = {{"user", "What is 2+2?"}};
    expect(CHAT_TEMPLATE_CHATML, m, 1, false, "<|im_start|>user\nWhat is 2+2?<|im_end|>\n");
    expect(CHAT_TEMPLATE_LLAMA3, m, 1, false,
           "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>");
    expect(CHAT_TEMPLATE_LLAMA2, m, 1, false, "[INST] What is 2+2? [/INST]");
    expect(CHAT_TEMPLATE_MISTRAL, m, 1, false, "[INST] What is 2+2? [/INST]");
    expect(CHAT_TEMPLATE_ZEPHYR, m, 1, false, "<|user|>\nWhat is 2+2?</s>\n");
}

static void test_empty_and_null_content(void **state) {
    (void)state;
    const chat_message m[] = {{"system", ""}, {"user", NULL}};
    expect(CHAT_TEMPLATE_CHATML, m, 2, true,
           "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n");
    expect(CHAT_TEMPLATE_LLAMA2, m, 2, true, "[INST] <<SYS>>\n\n<</SYS>>\n\n [/INST]");
    expect(CHAT_TEMPLATE_MISTRAL, m, 2, true, "[INST] \n\n [/INST]");
    const chat_message a[] = {{"user", "x"}, {"assistant", ""}, {"user", "y"}};
    expect(CHAT_TEMPLATE_LLAMA2, a, 3, true, "[INST] x [/INST]  </s><s>[INST] y [/INST]");
}

static void test_llama2_turns_without_system(void **state) {
    (void)state;
    const chat_message m[] = {{"user", "a"}, {"assistant", "b"}, {"user", "c"}, {"assistant", "d"}};
    expect(CHAT_TEMPLATE_LLAMA2, m, 4, false, "[INST] a [/INST] b </s><s>[INST] c [/INST] d </s>");
    expect(CHAT_TEMPLATE_MISTRAL, m, 4, false, "[INST] a [/INST] b</s>[INST] c [/INST] d</s>");
    /* A lone system message still yields a closed instruction for the model to answer. */
    const chat_message s[] = {{"system", "Be brief."}};
    expect(CHAT_TEMPLATE_LLAMA2, s, 1, true, "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n [/INST]");
}

static void test_bad_input_is_named(void **state) {
    (void)state;
    char *out = (char *)1;
    sol_err e = {0};
    const chat_message m[] = {{"user", "hi"}, {"tool", "42"}};
    assert_int_equal(chat_template_apply(CHAT_TEMPLATE_LLAMA3, m, 2, true, &out, NULL, &e),
                     -EINVAL);
    assert_null(out);
    assert_non_null(strstr(e.msg, "message 1"));
    assert_non_null(strstr(e.msg, "\"tool\""));
    const chat_message upper[] = {{"User", "hi"}};
    assert_int_equal(chat_template_apply(CHAT_TEMPLATE_CHATML, upper, 1, true, &out, NULL, &e),
                     -EINVAL);
    assert_non_null(strstr(e.msg, "\"User\""));
    const chat_message noname[] = {{NULL, "hi"}};
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
    const chat_message spaced[] = {{"user", "  a b \n"}};
    expect(CHAT_TEMPLATE_GEMMA, spaced, 1, false, "<start_of_turn>user\na b<end_of_turn>\n");
    char *out = NULL;
    sol_err e = {0};
    const chat_message late[] = {{"user", "hi"}, {"system", "S"}};
    assert_int_equal(chat_template_apply(CHAT_TEMPLATE_GEMMA, late, 2, true, &out, NULL, &e),
                     -EINVAL);
    assert_non_null(strstr(e.msg, "chat message 1"));
    const chat_message only_system[] = {{"system", "S"}};
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
