/* Promise: when every layer attends through a sliding window, the engine frees each sequence's
 * blocks behind the window as it grows, so a pool far smaller than max_model_len serves long
 * sequences side by side, and the tokens are those of a plain forward pass over a contiguous
 * cache that frees nothing. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend.h"
#include "engine.h"
#include "engine_collect.h"
#include "engine_fixture.h"
#include "model.h"
#include "tokenizer.h"

#define NREQ 6
#define MAX_LEN 256
#define BS 4
#define NEW_TOKENS 40

static engine_fixture F;

static int setup(void **state) {
    (void)state;
    return engine_fixture_open(&F, "--arch gemma3 --dim 64 --head-dim 16 --heads 4 --kv-heads 2 "
                                   "--ffn 128 --layers 2 --vocab 512 --ctx 256 --sliding-window 8 "
                                   "--swa-pattern 0 --seed 3");
}

static int teardown(void **state) {
    (void)state;
    return engine_fixture_close(&F);
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Greedy decoding by model_forward alone: one contiguous cache (block i = physical block i),
 * nothing freed; the prompt in one pass, then one token a pass. */
static void reference(const int32_t *prompt, int n_prompt, int32_t *out) {
    const model_hparams *hp = model_get_hparams(F.m);
    sol_err e = {0};
    model_kv *kv = model_kv_new(F.m, MAX_LEN / BS, BS, SOL_DT_F32, &e);
    assert_non_null(kv);
    static int32_t table[MAX_LEN / BS], toks[MAX_LEN], pos[MAX_LEN];
    static sol_attn_seq attn[MAX_LEN];
    float *logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    for (int i = 0; i < MAX_LEN / BS; i++)
        table[i] = i;
    memcpy(toks, prompt, sizeof(int32_t) * (size_t)n_prompt);
    int done = 0, len = n_prompt;
    for (int step = 0; step < NEW_TOKENS; step++) {
        int n = len - done;
        for (int t = 0; t < n; t++) {
            pos[t] = done + t;
            attn[t] = (sol_attn_seq){table, done + t + 1};
        }
        int32_t last = n - 1;
        model_batch b = {n, toks + done, pos, pos, attn, 1, &last, NULL, 0, NULL, NULL};
        assert_int_equal(model_forward(F.m, kv, &b, logits, &e), 0);
        done = len;
        out[step] = toks[len++] = argmax(logits, hp->n_vocab);
    }
    free(logits);
    model_kv_free(F.m, kv);
}

static void test_window_frees_blocks_and_keeps_tokens(void **state) {
    (void)state;
    assert_int_equal(model_get_hparams(F.m)->kv_window, 8);
    static int32_t prompts[NREQ][96], ref[NREQ][NEW_TOKENS];
    static engine_out o[NREQ];
    int n_prompt[NREQ];
    for (int i = 0; i < NREQ; i++) {
        n_prompt[i] = 20 + 14 * i; /* up to 90 prompt + 40 new = 130 tokens = 33 blocks */
        for (int j = 0; j < n_prompt[i]; j++)
            prompts[i][j] = 3 + (int32_t)((i * 7919 + j * 104729) % 500);
        reference(prompts[i], n_prompt[i], ref[i]);
    }
    /* 12 blocks of 4 = 48 tokens for all sequences together. */
    engine_config c = engine_config_default();
    c.num_blocks = 12;
    c.block_size = BS;
    c.max_model_len = MAX_LEN;
    c.kv_dtype = SOL_DT_F32;
    c.max_num_seqs = 4;
    c.max_batched_tokens = 12;
    c.prefix_caching = true;
    c.on_event = engine_collect;
    sol_err e = {0};
    engine *eng = engine_new(&c, F.m, F.tok, &e);
    if (!eng) fail_msg("engine_new: %s", e.msg);
    for (int i = 0; i < NREQ; i++) {
        engine_request r = {0};
        r.prompt_tokens = prompts[i];
        r.n_prompt_tokens = n_prompt[i];
        r.sampling = sampler_params_default();
        r.sampling.temperature = 0.0f;
        r.max_tokens = NEW_TOKENS;
        r.ignore_eos = true;
        r.user = &o[i];
        if (engine_submit(eng, &r, &e) <= 0) fail_msg("engine_submit: %s", e.msg);
    }
    engine_wait_idle(eng);
    engine_stats st;
    engine_get_stats(eng, &st);
    engine_free(eng);
    for (int i = 0; i < NREQ; i++) {
        assert_true(o[i].done);
        assert_int_equal(o[i].finish, ENGINE_FINISH_LENGTH);
        assert_int_equal(o[i].n, NEW_TOKENS);
        if (memcmp(o[i].tokens, ref[i], sizeof ref[i]) != 0)
            fail_msg("request %d (prompt %d): tokens differ from the contiguous forward pass", i,
                     n_prompt[i]);
    }
    assert_int_equal(st.free_blocks, 12);
}

/* Without a window on every layer the pool must hold a whole max_model_len sequence. */
static void test_pool_check_uses_window(void **state) {
    (void)state;
    engine_config c = engine_config_default();
    c.num_blocks = 5; /* 20 tokens: less than window 8 + chunk 12 + 2 partial blocks */
    c.block_size = BS;
    c.max_model_len = MAX_LEN;
    c.max_num_seqs = 2;
    c.max_batched_tokens = 12;
    sol_err e = {0};
    assert_null(engine_new(&c, F.m, F.tok, &e));
    assert_int_equal(e.code, -ENOSPC);
    assert_non_null(strstr(e.msg, "worker.kv.num_blocks"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_frees_blocks_and_keeps_tokens),
        cmocka_unit_test(test_pool_check_uses_window),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
