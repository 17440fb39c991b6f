/* utf8: the one copy of Sol's UTF-8 code: strict validation (wire frames, HTTP bodies, JSON) and
 * the tokenizer's lenient, llama.cpp-compatible decoding (an invalid byte becomes U+FFFD). */
#ifndef SOL_UTF8_H
#define SOL_UTF8_H

#include <stddef.h>
#include <stdint.h>

#define UTF8_REPLACEMENT 0xFFFDu

/* Length of the sequence a lead byte announces (1 for ASCII and stray continuation bytes, 4 for
 * 0xF0..0xFF). Tokenizers split text into "characters" by this rule, valid or not. */
size_t utf8_lead_len(uint8_t b);

/* Decode one code point at s[*pos] (pos < n) and advance *pos. Lenient like llama.cpp: overlong
 * forms pass; a bad lead byte or missing continuation yields U+FFFD and advances by one byte. */
uint32_t utf8_decode(const uint8_t *s, size_t n, size_t *pos);

/* Encode cpt (<= 0x10FFFF) into out[0..3]; returns the byte count (1..4). */
size_t utf8_encode(uint32_t cpt, uint8_t *out);

/* Strict check of one sequence at s[0..n): returns its length when it is a complete, valid
 * (shortest-form, non-surrogate, <= U+10FFFF) sequence, 0 when it is a valid but truncated prefix
 * (more bytes may complete it), -1 when the first byte cannot start a valid sequence here. */
int utf8_check(const uint8_t *s, size_t n);

/* Length of the longest strictly valid UTF-8 prefix of s[0..n); == n when all of it is valid
 * (a sequence cut off at the end is not valid). */
size_t utf8_valid_prefix(const char *s, size_t n);

#endif
