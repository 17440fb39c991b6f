/* vocab_gen: a deterministic SentencePiece-style (llama) vocabulary of any size, for synthetic
 * models: <unk>, <s>, </s>, 256 byte tokens, then scored "▁"-prefixed English-like pieces. */
#ifndef SOL_VOCAB_GEN_H
#define SOL_VOCAB_GEN_H

#include <stdint.h>

#include "err.h"

/* Token types as llama.cpp stores them in tokenizer.ggml.token_type. */
typedef enum {
    VOCAB_TOK_NORMAL = 1,
    VOCAB_TOK_UNKNOWN = 2,
    VOCAB_TOK_CONTROL = 3,
    VOCAB_TOK_USER_DEFINED = 4,
    VOCAB_TOK_UNUSED = 5,
    VOCAB_TOK_BYTE = 6,
} vocab_tok_type;

#define VOCAB_GEN_UNK 0
#define VOCAB_GEN_BOS 1
#define VOCAB_GEN_EOS 2
#define VOCAB_GEN_BYTE0 3 /* id of <0x00>; byte b is VOCAB_GEN_BYTE0 + b */
#define VOCAB_GEN_MIN 260 /* specials + bytes + "▁" */
#define VOCAB_GEN_MAX 1000000

typedef struct vocab_gen {
    uint32_t n;
    char **pieces;  /* n unique NUL-terminated UTF-8 strings */
    float *scores;  /* higher merges first; 0 for specials and bytes */
    int32_t *types; /* vocab_tok_type */
} vocab_gen;

/* Builds exactly n entries (VOCAB_GEN_MIN <= n <= VOCAB_GEN_MAX). Every normal piece longer than
 * one character is the concatenation of two pieces that precede it, so BPE merges reach it.
 * Returns NULL with `e` filled on a bad size or out of memory. */
vocab_gen *vocab_gen_new(uint32_t n, sol_err *e);
void vocab_gen_free(vocab_gen *v);
/* Id of `piece`, or -1. Linear scan: for tests and tools, not hot paths. */
int32_t vocab_gen_find(const vocab_gen *v, const char *piece);

#endif
