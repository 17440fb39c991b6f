/* Promise: the tokenizer merges by score (SPM) and rank (BPE), falls back to bytes, matches
 * special tokens only when asked, survives invalid UTF-8, and streams whole characters only. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "pretok.h"
#include "tokenizer.h"

#define SP "\xe2\x96\x81" /* "▁" */

/* SPM vocab: <unk> <s> </s>, 256 byte tokens (ids 3..258), then pieces. */
enum { UNK = 0, BOS = 1, EOS = 2, BYTE0 = 3, P0 = 259 };
static const char *const k_pieces[] = {SP, "a", "b", "c", SP "a", "ab", "bc", SP "ab", "<x>"};
static const float k_scores[] = {-1, -2, -2, -2, -5, -3, -1, -4, 0};
#define N_PIECES (int)(sizeof k_pieces / sizeof k_pieces[0])
#define N_SPM (P0 + N_PIECES)
enum { T_SP = P0, T_A, T_B, T_C, T_SPA, T_AB, T_BC, T_SPAB, T_USER };

typedef struct spm_fixture {
    char names[256][8];
    const char *tokens[N_SPM];
    float scores[N_SPM];
    int32_t types[N_SPM];
} spm_fixture;

/* tokenizer_new, failing the test with its message. */
static tokenizer *new_or_fail(const tok_vocab_desc *d) {
    sol_err e = {0};
    tokenizer *t = tokenizer_new(d, &e);
    if (!t) fail_msg("tokenizer_new: %s", e.msg);
    return t;
}

static tokenizer *make_spm(spm_fixture *f, const float *scores) {
    static const char *const specials[] = {"<unk>", "<s>", "</s>"};
    static const int32_t special_types[] = {TOK_TYPE_UNKNOWN, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL};
    for (int i = 0; i < 3; i++) {
        f->tokens[i] = specials[i];
        f->types[i] = special_types[i];
        f->scores[i] = 0;
    }
    for (int b = 0; b < 256; b++) {
        snprintf(f->names[b], sizeof f->names[b], "<0x%02X>", b);
        f->tokens[BYTE0 + b] = f->names[b];
        f->types[BYTE0 + b] = TOK_TYPE_BYTE;
        f->scores[BYTE0 + b] = 0;
    }
    for (int i = 0; i < N_PIECES; i++) {
        f->tokens[P0 + i] = k_pieces[i];
        f->types[P0 + i] = P0 + i == T_USER ? TOK_TYPE_USER_DEFINED : TOK_TYPE_NORMAL;
        f->scores[P0 + i] = scores[i];
    }
    tok_vocab_desc d = tok_vocab_desc_init();
    d.model = "llama";
    d.n_tokens = N_SPM;
    d.tokens = f->tokens;
    d.scores = f->scores;
    d.types = f->types;
    d.bos = BOS;
    d.eos = EOS;
    d.unk = UNK;
    return new_or_fail(&d);
}

static int enc(const tokenizer *t, const char *s, int add_special, int parse_special,
               int32_t *out) {
    return tokenizer_encode(t, s, strlen(s), add_special, parse_special, out, 64);
}

static void expect_ids(const int32_t *got, int n, const int32_t *want, int wn) {
    assert_int_equal(n, wn);
    for (int i = 0; i < wn; i++)
        assert_int_equal(got[i], want[i]);
}

static void test_spm_merges_by_score(void **state) {
    (void)state;
    spm_fixture f;
    tokenizer *t = make_spm(&f, k_scores);
    int32_t out[64];
    /* "▁abc": "bc" (-1) merges before "ab" (-3) and "▁a" (-5); then nothing joins "▁","a" */
    int n = enc(t, "abc", 0, 0, out);
    expect_ids(out, n, (int32_t[]){T_SPA, T_BC}, 2);
    /* with "ab" scoring best instead, "ab" then "▁ab" win */
    float s2[N_PIECES];
    memcpy(s2, k_scores, sizeof s2);
    s2[T_AB - P0] = 0;
    tokenizer *t2 = make_spm(&f, s2);
    n = enc(t2, "abc", 1, 0, out);
    expect_ids(out, n, (int32_t[]){BOS, T_SPAB, T_C}, 3);
    tokenizer_free(t2);
    tokenizer_free(t);
}

static void test_spm_ties_go_leftmost(void **state) {
    (void)state;
    spm_fixture f;
    float s[N_PIECES];
    for (int i = 0; i < N_PIECES; i++)
        s[i] = -1; /* every merge ties */
    tokenizer *t = make_spm(&f, s);
    int32_t out[64];
    /* "▁abc": the leftmost pair "▁a" first, then the new leftmost pair "▁ab" beats "bc" */
    int n = enc(t, "abc", 0, 0, out);
    expect_ids(out, n, (int32_t[]){T_SPAB, T_C}, 2);
    tokenizer_free(t);
}

static void test_spm_byte_fallback_and_invalid_utf8(void **state) {
    (void)state;
    spm_fixture f;
    tokenizer *t = make_spm(&f, k_scores);
    int32_t out[64];
    int n = enc(t, "a\xe2\x82\xac", 0, 0, out); /* "a€": € has no piece */
    expect_ids(out, n, (int32_t[]){T_SPA, BYTE0 + 0xE2, BYTE0 + 0x82, BYTE0 + 0xAC}, 4);
    /* invalid UTF-8: like llama.cpp, a lead byte claims its announced length (0xFF: 4 bytes,
     * swallowing the "a"), and what no piece covers becomes byte tokens; no crash */
    n = enc(t,
            "\xff"
            "a\xe2\x82",
            0, 0, out);
    expect_ids(out, n, (int32_t[]){T_SP, BYTE0 + 0xFF, BYTE0 + 'a', BYTE0 + 0xE2, BYTE0 + 0x82}, 5);
    n = enc(t, "b\x82", 0, 0, out); /* a stray continuation byte is one symbol */
    expect_ids(out, n, (int32_t[]){T_SP, T_B, BYTE0 + 0x82}, 3);
    tokenizer_free(t);
}

static void test_special_tokens(void **state) {
    (void)state;
    spm_fixture f;
    tokenizer *t = make_spm(&f, k_scores);
    int32_t out[64];
    /* control tokens only with parse_special; the fragment after one gets the "▁" prefix */
    int n = enc(t, "<s>a", 0, 1, out);
    expect_ids(out, n, (int32_t[]){BOS, T_SPA}, 2);
    n = enc(t, "<s>", 0, 0, out);
    assert_true(n > 1);
    assert_int_not_equal(out[0], BOS);
    /* user-defined tokens always match */
    n = enc(t, "a<x>b", 0, 0, out);
    expect_ids(out, n, (int32_t[]){T_SPA, T_USER, T_SP, T_B}, 4);
    assert_true(tokenizer_is_eog(t, EOS));
    assert_false(tokenizer_is_eog(t, BOS));
    /* a stream shows a control token as its text only when told (a tool format's opening) */
    const char *txt;
    size_t len;
    tok_stream *s = tok_stream_new(t, 0), *shown = tok_stream_new(t, 0);
    assert_int_equal(tok_stream_show(shown, BOS), 0);
    assert_int_equal(tok_stream_show(shown, -1), -EINVAL);
    assert_int_equal(tok_stream_push(s, BOS, &txt, &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(tok_stream_push(shown, BOS, &txt, &len), 0);
    assert_int_equal(len, 3);
    assert_memory_equal(txt, "<s>", 3);
    assert_int_equal(tok_stream_push(shown, EOS, &txt, &len), 0); /* not shown */
    assert_int_equal(len, 0);
    tok_stream_free(s), tok_stream_free(shown);
    tokenizer_free(t);
}

static void test_out_too_small_returns_needed(void **state) {
    (void)state;
    spm_fixture f;
    tokenizer *t = make_spm(&f, k_scores);
    int32_t out[2] = {-7, -7};
    int n = tokenizer_encode(t, "a\xe2\x82\xac", 4, 1, 0, out, 1);
    assert_int_equal(n, 5);
    assert_int_equal(out[0], BOS);
    assert_int_equal(out[1], -7);
    assert_int_equal(tokenizer_encode(t, "", 0, 0, 0, NULL, 0), 0);
    assert_int_equal(tokenizer_encode(NULL, "a", 1, 0, 0, out, 2), -EINVAL);
    tokenizer_free(t);
}

static void test_decode_and_stream(void **state) {
    (void)state;
    spm_fixture f;
    tokenizer *t = make_spm(&f, k_scores);
    char buf[64];
    int32_t ids[] = {BOS, T_SPA, T_BC, BYTE0 + 0xE2, BYTE0 + 0x82, BYTE0 + 0xAC, EOS};
    assert_int_equal(tokenizer_decode(t, ids, 7, TOK_DECODE_FROM_START, buf, sizeof buf), 6);
    assert_string_equal(buf, "abc\xe2\x82\xac");
    assert_int_equal(tokenizer_decode(t, ids, 7, TOK_DECODE_SPECIAL, buf, sizeof buf), 14);
    assert_string_equal(buf, "<s> abc\xe2\x82\xac</s>");
    assert_int_equal(tokenizer_decode(t, ids, 7, 0, buf, 3), 7); /* too small: needed size */
    assert_string_equal(buf, " a");

    tok_stream *s = tok_stream_new(t, TOK_DECODE_FROM_START);
    const char *txt;
    size_t len;
    const char *want[] = {"", "a", "bc", "", "", "\xe2\x82\xac", ""};
    for (int i = 0; i < 7; i++) {
        assert_int_equal(tok_stream_push(s, ids[i], &txt, &len), 0);
        assert_int_equal(len, strlen(want[i]));
        assert_memory_equal(txt, want[i], len);
    }
    /* a character cut short by a byte that cannot continue it: U+FFFD, then the byte's text */
    assert_int_equal(tok_stream_push(s, BYTE0 + 0xE2, &txt, &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(tok_stream_push(s, T_A, &txt, &len), 0);
    assert_int_equal(len, 4);
    assert_memory_equal(txt,
                        "\xef\xbf\xbd"
                        "a",
                        4);
    assert_int_equal(tok_stream_push(s, BYTE0 + 0xF0, &txt, &len), 0);
    tok_stream_flush(s, &txt, &len);
    assert_int_equal(len, 3);
    assert_int_equal(tok_stream_push(s, N_SPM, &txt, &len), -EINVAL);
    tok_stream_free(s);
    tok_stream_free(NULL);
    tokenizer_free(t);
}

/* A byte-level BPE vocabulary (gpt2 model and pre-tokenizer) of these tokens and merges. */
static tokenizer *make_gpt2(const char *const *tokens, int n, const char *const *merges,
                            int n_merges, int eos) {
    tok_vocab_desc d = tok_vocab_desc_init();
    d.model = "gpt2";
    d.pre = "gpt2";
    d.n_tokens = n;
    d.tokens = tokens;
    d.merges = merges;
    d.n_merges = n_merges;
    d.eos = eos;
    return new_or_fail(&d);
}

/* Byte-level BPE: "Ġ" is the space byte; merges "b c" (rank 0) before "a b" (rank 1). */
static tokenizer *make_bpe(const char *const *merges, int n_merges) {
    static const char *const tokens[] = {"a",
                                         "b",
                                         "c",
                                         "ab",
                                         "bc",
                                         "\xc4\xa0",
                                         ("\xc4\xa0"
                                          "a"), /* "Ġa", split so \xa0 does not eat the a */
                                         "\xc3\xa2",
                                         "\xc4\xa4",
                                         "\xc2\xac",
                                         "<|endoftext|>"};
    return make_gpt2(tokens, 11, merges, n_merges, 10);
}

static void test_bpe_merges_by_rank(void **state) {
    (void)state;
    const char *m1[] = {"b c", "a b", "\xc4\xa0 a"};
    const char *m2[] = {"a b", "b c", "\xc4\xa0 a"};
    tokenizer *t1 = make_bpe(m1, 3), *t2 = make_bpe(m2, 3);
    int32_t out[64];
    int n = enc(t1, "abc a", 0, 0, out);
    expect_ids(out, n, (int32_t[]){0, 4, 6}, 3); /* a bc Ġa */
    n = enc(t2, "abc", 0, 0, out);
    expect_ids(out, n, (int32_t[]){3, 2}, 2); /* ab c */
    /* <|endoftext|> is a control token: text unless parse_special */
    n = enc(t1, "<|endoftext|>", 0, 1, out);
    expect_ids(out, n, (int32_t[]){10}, 1);
    assert_true(tokenizer_is_eog(t1, 10));
    tokenizer_free(t1);
    tokenizer_free(t2);
}

/* Harmony's vocabulary (o200k_harmony): <|end|> ends a message, not the answer, where
 * <|return|> and <|call|> exist to end it; without them <|end|> ends generation (Phi-3). */
static tokenizer *make_ends(int with_return_call) {
    static const char *const tokens[] = {"a", "b", "<|end|>", "<|return|>", "<|call|>"};
    return make_gpt2(tokens, with_return_call ? 5 : 3, NULL, 0, -1);
}

static void test_harmony_end_is_not_eog(void **state) {
    (void)state;
    tokenizer *t = make_ends(1);
    assert_false(tokenizer_is_eog(t, 2));
    assert_true(tokenizer_is_eog(t, 3));
    assert_true(tokenizer_is_eog(t, 4));
    tokenizer_free(t);
    t = make_ends(0);
    assert_true(tokenizer_is_eog(t, 2));
    tokenizer_free(t);
}

static void test_bpe_stream_splits_character(void **state) {
    (void)state;
    const char *m[] = {"a b"};
    tokenizer *t = make_bpe(m, 1);
    /* "€" = E2 82 AC arrives as three byte-level tokens: â (E2), Ĥ (82, moved to U+0124), ¬ (AC) */
    tok_stream *s = tok_stream_new(t, 0);
    const char *txt;
    size_t len;
    assert_int_equal(tok_stream_push(s, 7, &txt, &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(tok_stream_push(s, 8, &txt, &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(tok_stream_push(s, 9, &txt, &len), 0);
    assert_int_equal(len, 3);
    assert_memory_equal(txt, "\xe2\x82\xac", 3);
    tok_stream_free(s);
    size_t pl;
    const char *p = tokenizer_token_piece(t, 6, &pl);
    assert_int_equal(pl, 2);
    assert_memory_equal(p, " a", 2);
    /* invalid UTF-8 input must not crash: llama.cpp turns the bad byte into U+FFFD */
    int32_t out[64];
    assert_true(enc(t, "a\xff", 0, 0, out) >= 1);
    tokenizer_free(t);
}

static void words(pretok_kind k, const char *text, const char *want) {
    uint32_t cpts[128], ends[128];
    size_t n = 0;
    for (const char *p = text; *p; p++)
        cpts[n++] = (uint8_t)*p; /* ASCII inputs only */
    size_t nw = pretok_split(k, cpts, n, ends);
    char got[512];
    size_t o = 0, start = 0;
    for (size_t w = 0; w < nw; w++) {
        got[o++] = '[';
        for (size_t i = start; i < ends[w]; i++)
            got[o++] = (char)cpts[i];
        got[o++] = ']';
        start = ends[w];
    }
    got[o] = 0;
    assert_string_equal(got, want);
}

static void test_pretokenizers(void **state) {
    (void)state;
    words(PRETOK_LLAMA3, "Hello  world 12345 it's\n\n x",
          "[Hello][ ][ world][ ][123][45][ it]['s][\n\n][ x]");
    words(PRETOK_QWEN2, "a 123", "[a][ ][1][2][3]");
    words(PRETOK_GPT2, "Hello  world 12345 IT'S!!", "[Hello][ ][ world][ 12345][ IT]['][S][!!]");
    words(PRETOK_LLAMA3, "x  ", "[x][  ]");
    pretok_kind k;
    assert_int_equal(pretok_from_name("llama-bpe", &k), 0);
    assert_int_equal(k, PRETOK_LLAMA3);
    assert_int_equal(pretok_from_name("nonsense", &k), -ENOENT);
}

static void test_bad_vocab_errors(void **state) {
    (void)state;
    const char *tokens[] = {"a", "b"};
    tok_vocab_desc d = tok_vocab_desc_init();
    sol_err e = {0};
    d.model = "wordpiece";
    d.n_tokens = 2;
    d.tokens = tokens;
    assert_null(tokenizer_new(&d, &e));
    assert_non_null(strstr(e.msg, "wordpiece"));
    d.model = "gpt2";
    d.pre = "klingon";
    assert_null(tokenizer_new(&d, &e));
    assert_non_null(strstr(e.msg, "klingon"));
    d.pre = "gpt2";
    const char *bad_merge[] = {"ab"};
    d.merges = bad_merge;
    d.n_merges = 1;
    assert_null(tokenizer_new(&d, &e));
    assert_non_null(strstr(e.msg, "merges[0]"));
    d.n_merges = 0;
    d.eos = 5;
    assert_null(tokenizer_new(&d, &e));
    assert_non_null(strstr(e.msg, "eos_token_id"));
    d.eos = -1;
    d.model = "llama"; /* adds BOS by default, but has none */
    assert_null(tokenizer_new(&d, &e));
    assert_non_null(strstr(e.msg, "bos_token_id"));
    assert_null(tokenizer_new(NULL, &e));
    tokenizer_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spm_merges_by_score),
        cmocka_unit_test(test_spm_ties_go_leftmost),
        cmocka_unit_test(test_spm_byte_fallback_and_invalid_utf8),
        cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_out_too_small_returns_needed),
        cmocka_unit_test(test_decode_and_stream),
        cmocka_unit_test(test_bpe_merges_by_rank),
        cmocka_unit_test(test_harmony_end_is_not_eog),
        cmocka_unit_test(test_bpe_stream_splits_character),
        cmocka_unit_test(test_pretokenizers),
        cmocka_unit_test(test_bad_vocab_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
