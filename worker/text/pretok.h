/* pretok: the regex pre-tokenizers of byte-level BPE vocabularies, hand-coded over code points.
 * Each kind reproduces one regex from the model's tokenizer.json exactly as llama.cpp applies it.
 */
#ifndef SOL_PRETOK_H
#define SOL_PRETOK_H

#include <stddef.h>
#include <stdint.h>

typedef enum pretok_kind {
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
     * \s*[\r\n]+|\s+(?!\S)|\s+ */
    PRETOK_LLAMA3,
    /* the same with \p{N} matching one digit at a time */
    PRETOK_QWEN2,
    /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    PRETOK_GPT2,
} pretok_kind;

/* Map a tokenizer.ggml.pre name to a kind; returns 0, or -ENOENT for names not supported. */
int pretok_from_name(const char *name, pretok_kind *kind);

/* Comma-separated list of the accepted names, for error messages. */
const char *pretok_names(void);

/* Split cpts[0..n) into words. Writes the exclusive end offset (in code points) of each word into
 * ends (room for n entries suffices) and returns the number of words. Words cover the input. */
size_t pretok_split(pretok_kind kind, const uint32_t *cpts, size_t n, uint32_t *ends);

#endif
