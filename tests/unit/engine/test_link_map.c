/* link_map: a prompt's chain links to the KV blocks they end in - a completion prompt's end maps
 * to its last full block; chat contents are found in the rendered text, verbatim or trimmed, in
 * order; a content the text does not hold ends the mapping (fewer links, never a wrong one). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "block_hash.h"
#include "engine_fixture.h"
#include "link_map.h"

static engine_fixture F;

static int setup(void **st) {
    (void)st;
    return engine_fixture_open(&F, "--preset tiny --type f32 --seed 1");
}

static int teardown(void **st) {
    (void)st;
    return engine_fixture_close(&F);
}

/* ids of text with a BOS first (as the engine prepends it); returns the count. */
static int32_t encode(const char *text, int32_t *ids, int32_t cap) {
    ids[0] = tokenizer_bos(F.tok);
    int n = tokenizer_encode(F.tok, text, strlen(text), 0, 1, ids + 1, cap - 1);
    assert_true(n > 0 && n < cap - 1);
    return n + 1;
}

/* How many whole blocks of ids the chain hash h covers (-1: none). */
static int32_t blocks_of(uint64_t h, const int32_t *ids, int32_t n, int32_t bs) {
    uint64_t x = block_hash_seed(NULL);
    for (int32_t j = 0; (j + 1) * bs <= n; j++) {
        x = block_hash_tokens(x, ids + (size_t)j * bs, bs);
        if (x == h) return j + 1;
    }
    return -1;
}

static void test_completion_prompt(void **st) {
    (void)st;
    const char *text = "The archive keeps every record in order and checks each one twice.";
    int32_t ids[256];
    int32_t n = encode(text, ids, 256);
    prefix_chain c;
    pc_begin(&c, NULL, 0, NULL, 0);
    pc_prompt(&c, text);
    pc_end(&c);
    link_block out[PC_MAX_LINKS];
    link_prompt p = {text, strlen(text), NULL, 0, ids, n};
    assert_int_equal(link_map(F.tok, &p, &c, 4, NULL, out), 1);
    assert_true(out[0].link == c.hash[0]);
    assert_int_equal(blocks_of(out[0].block, ids, n, 4), n / 4); /* every whole block */
    /* a block larger than the prompt: no full block, nothing to report */
    assert_int_equal(link_map(F.tok, &p, &c, 512, NULL, out), 0);
}

static void test_chat_contents(void **st) {
    (void)st;
    const char *text = "<<SYS>>Be brief and exact in every answer.<</SYS>> [INST] hello there, "
                       "tell me about the archive [/INST]";
    chat_message msgs[2] = {
        {.role = "system", .content = "Be brief and exact in every answer."},
        {.role = "user", .content = "  hello there, tell me about the archive\n"}};
    int32_t ids[256];
    int32_t n = encode(text, ids, 256);
    prefix_chain c;
    pc_begin(&c, NULL, 1, NULL, 0);
    for (int i = 0; i < 2; i++) {
        pc_message(&c, msgs[i].role, msgs[i].content);
        pc_message_end(&c, NULL);
    }
    pc_end(&c);
    link_block out[PC_MAX_LINKS];
    link_prompt p = {text, strlen(text), msgs, 2, ids, n};
    assert_int_equal(link_map(F.tok, &p, &c, 4, NULL, out), 2); /* the second found trimmed */
    int32_t b0 = blocks_of(out[0].block, ids, n, 4), b1 = blocks_of(out[1].block, ids, n, 4);
    assert_true(b0 >= 1 && b1 > b0 && b1 <= n / 4);
    /* the system content ends within its 9 + 35 bytes: its block holds no later text */
    size_t sys_end = strstr(text, "<</SYS>>") - text, bytes = 0;
    for (int32_t k = 1; k < b0 * 4; k++) {
        size_t len = 0;
        tokenizer_token_piece(F.tok, ids[k], &len);
        bytes += len;
    }
    assert_true(bytes <= sys_end);
    /* a template that rewrote the user's content: its link is not reported */
    chat_message other[2] = {msgs[0], {.role = "user", .content = "something else entirely"}};
    p.msgs = other;
    assert_int_equal(link_map(F.tok, &p, &c, 4, NULL, out), 1);
    /* another salt: other blocks (tenants never share) */
    link_block salted[PC_MAX_LINKS];
    p.msgs = msgs;
    assert_int_equal(link_map(F.tok, &p, &c, 4, "tenant-b", salted), 2);
    assert_true(salted[0].block != out[0].block);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_prompt),
        cmocka_unit_test(test_chat_contents),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
