/* tokenizer: text <-> token ids for SentencePiece-BPE ("llama") and byte-level BPE ("gpt2")
 * vocabularies, matching llama.cpp id for id, plus incremental detokenization for streaming. */
#ifndef SOL_TOKENIZER_H
#define SOL_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Token types as stored in tokenizer.ggml.token_type. */
enum {
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

/* Everything needed to build a tokenizer; all arrays are borrowed (tokenizer_new copies them).
 * A NULL lens array means the strings are NUL-terminated. */
typedef struct tok_vocab_desc {
    const char *model; /* tokenizer.ggml.model: "llama" (SPM) or "gpt2" (byte-level BPE) */
    const char *pre;   /* tokenizer.ggml.pre (gpt2 only); NULL = "default" */
    int32_t n_tokens;
    const char *const *tokens; /* tokenizer.ggml.tokens */
    const size_t *token_lens;
    const float *scores;  /* tokenizer.ggml.scores (llama: required for merging); may be NULL */
    const int32_t *types; /* tokenizer.ggml.token_type; NULL = all NORMAL */
    int32_t n_merges;
    const char *const *merges; /* tokenizer.ggml.merges (gpt2): "left right", rank = index */
    const size_t *merge_lens;
    int32_t bos, eos, unk, pad, eot; /* special ids; -1 = none */
    int add_bos, add_eos;            /* -1 = the model's default (llama: 1/0, gpt2: llama3 1/0) */
    int add_space_prefix;            /* llama only; -1 = default (1) */
} tok_vocab_desc;

/* A desc with every id and flag set to -1 and everything else zero. */
tok_vocab_desc tok_vocab_desc_init(void);

typedef struct tokenizer tokenizer;

/* Validate desc and build the lookup tables. Returns NULL and fills err on bad input. */
tokenizer *tokenizer_new(const tok_vocab_desc *desc, sol_err *err);

/* Build from a GGUF file's tokenizer.ggml.* keys (model, tokens, scores, token_type, merges,
 * bos/eos/unknown/padding/eot_token_id, add_bos_token, add_eos_token, add_space_prefix, pre).
 * Errors name the file and the key. g is only read during the call. */
struct gguf_file;
tokenizer *tokenizer_from_gguf(const struct gguf_file *g, sol_err *err);
void tokenizer_free(tokenizer *tok);

/* Tokenize text[0..len) (any bytes; invalid UTF-8 is handled as llama.cpp does: byte tokens for
 * llama, U+FFFD for gpt2). add_special: add BOS (and EOS) when the vocab asks for them, like
 * llama.cpp's add_special. parse_special: control tokens written in the text ("<s>",
 * "<|eot_id|>") become their ids; user-defined tokens are always matched, as in llama.cpp.
 * Writes at most max_out ids and returns the number of ids the text needs: a result > max_out
 * means out was too small (its first max_out ids are valid; call again with a bigger buffer).
 * Negative on error (-EINVAL for NULL arguments, -ENOMEM). */
int tokenizer_encode(const tokenizer *tok, const char *text, size_t len, int add_special,
                     int parse_special, int32_t *out, int max_out);

/* One piece of a text tokenized in pieces: no BOS or EOS, and after_text says the piece continues
 * text (SPM then adds no "▁" before its first fragment, as the whole text would not). The pieces'
 * ids differ from the whole text's only where a boundary splits what would have merged. */
int tokenizer_encode_piece(const tokenizer *tok, const char *text, size_t len, int parse_special,
                           int after_text, int32_t *out, int max_out);

/* The bytes token id renders to (byte tokens -> their byte, SPM "▁" -> ' ', byte-level
 * characters -> bytes; control/unknown tokens -> their text). Not NUL-terminated; *len is set.
 * Returns NULL (and *len = 0) for an id out of range. Valid as long as tok lives. */
const char *tokenizer_token_piece(const tokenizer *tok, int32_t id, size_t *len);

/* Raw vocabulary string of id (as stored in the GGUF), or NULL. */
const char *tokenizer_token_text(const tokenizer *tok, int32_t id, size_t *len);
int tokenizer_token_type(const tokenizer *tok, int32_t id);

enum {
    TOK_DECODE_SPECIAL = 1,    /* render control/unknown tokens as their text (default: nothing) */
    TOK_DECODE_FROM_START = 2, /* ids start a sequence: drop the space SPM's dummy prefix added
                                  to the first text token (after a leading BOS) */
};

/* Decode ids into out (cap bytes). Returns the byte count the text needs (> cap: truncated,
 * retry bigger; out is NUL-terminated whenever cap > 0), or -EINVAL for a bad id. */
int tokenizer_decode(const tokenizer *tok, const int32_t *ids, int n, unsigned flags, char *out,
                     size_t cap);

int32_t tokenizer_n_vocab(const tokenizer *tok);
int32_t tokenizer_bos(const tokenizer *tok); /* -1 when none */
int32_t tokenizer_eos(const tokenizer *tok);
int32_t tokenizer_eot(const tokenizer *tok);
int tokenizer_add_bos(const tokenizer *tok); /* whether add_special adds BOS */
int tokenizer_add_eos(const tokenizer *tok); /* whether add_special adds EOS */
/* End of generation: EOS, EOT, or a control token whose text ends turns
 * (<|eot_id|>, <|im_end|>, <|endoftext|>, <end_of_turn>, <|end|>, ...). */
int tokenizer_is_eog(const tokenizer *tok, int32_t id);
/* Look up the id of an exact vocabulary string, or -1. */
int32_t tokenizer_find(const tokenizer *tok, const char *text, size_t len);

/* Incremental detokenizer for streaming: push ids one at a time and send what comes back. It
 * never returns part of a UTF-8 character (incomplete sequences wait for the next token) and its
 * output is always valid UTF-8 (bytes that cannot form a character become U+FFFD). */
typedef struct tok_stream tok_stream;

/* flags: TOK_DECODE_* (SPECIAL, FROM_START); the stream borrows tok. NULL on -ENOMEM. */
tok_stream *tok_stream_new(const tokenizer *tok, unsigned flags);
void tok_stream_free(tok_stream *s);

/* The most control tokens one stream shows (tok_stream_show). */
#define TOK_STREAM_MAX_SHOWN 8
/* Show control token id as its text (a tool format's opening the call parser must see), as if
 * TOK_DECODE_SPECIAL held for it alone. -E2BIG past TOK_STREAM_MAX_SHOWN, -EINVAL for a bad id. */
int tok_stream_show(tok_stream *s, int32_t id);

/* Feed one id. *text points to the bytes ready to emit (valid until the next call), *len their
 * count (may be 0). Returns 0, or -EINVAL for an id out of range (nothing is consumed). */
int tok_stream_push(tok_stream *s, int32_t id, const char **text, size_t *len);

/* End of stream: returns what is still held (an incomplete tail becomes U+FFFD). */
void tok_stream_flush(tok_stream *s, const char **text, size_t *len);

#endif
