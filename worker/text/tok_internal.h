/* tok_internal: the tokenizer's private state, shared by tokenizer.c, tok_spm.c, tok_bpe.c and
 * tok_detok.c. Nothing outside the tokenizer module includes this header. */
#ifndef SOL_TOK_INTERNAL_H
#define SOL_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "pretok.h"
#include "tokenizer.h"

/* String -> index hash map over strings kept elsewhere (open addressing, linear probing). */
typedef struct tok_map {
    int32_t *slot; /* index into the key arrays, -1 = empty */
    uint32_t mask;
    const char *arena;
    const uint32_t *off, *len;
} tok_map;

int tok_map_build(tok_map *m, const char *arena, const uint32_t *off, const uint32_t *len,
                  int32_t n, int last_wins);
void tok_map_release(tok_map *m);
/* Index of the key a + sep + b (sep 0 = no separator byte), or -1. */
int32_t tok_map_find2(const tok_map *m, const char *a, size_t alen, char sep, const char *b,
                      size_t blen);

enum { TOKF_EOG = 1, TOKF_SPECIAL = 2 /* control/unknown: silent unless rendered */ };

struct tokenizer {
    int is_spm;
    pretok_kind pre;
    int ignore_merges;
    int32_t n;
    char *text; /* all token strings, back to back */
    uint32_t *text_off, *text_len;
    char *piece; /* what each token renders to */
    uint32_t *piece_off, *piece_len;
    size_t max_piece;
    float *scores;
    uint8_t *types, *flags;
    tok_map tokens;
    char *merge_text;
    uint32_t *merge_off, *merge_len;
    int32_t n_merges;
    tok_map merges;
    int32_t byte_tok[256];     /* SPM byte fallback: id of <0xXX>, or -1 */
    uint8_t byte_utf8[256][2]; /* GPT-2 byte -> printable character, UTF-8 */
    uint8_t byte_utf8_len[256];
    int32_t *specials; /* ids matched in text, longest first */
    int32_t n_specials;
    int32_t bos, eos, unk, pad, eot;
    int add_bos, add_eos, add_space_prefix;
};

/* Output sink: keeps counting past max so the caller learns the size it needs. */
typedef struct tok_sink {
    int32_t *out;
    int max;
    int n;
} tok_sink;

static inline void tok_sink_push(tok_sink *s, int32_t id) {
    if (s->n < s->max) s->out[s->n] = id;
    s->n++;
}

typedef struct tok_symbol {
    int32_t prev, next; /* neighbours in the linked list, -1 at the ends */
    uint32_t off, n;    /* bytes of the current text; n == 0 once merged into the left one */
} tok_symbol;

typedef struct tok_bigram {
    float prio; /* higher merges first: SPM score, or -rank for BPE */
    int32_t left, right;
    uint32_t size; /* byte length when queued; a different sum later means the entry is stale */
} tok_bigram;

/* Scratch for one encode call; buffers grow as needed (never per symbol or per token). */
typedef struct tok_scratch {
    char *bytes;
    size_t cap_bytes;
    uint32_t *cpts, *ends;
    size_t cap_cpts;
    tok_symbol *sym;
    size_t cap_sym;
    tok_bigram *heap;
    size_t cap_heap, n_heap;
} tok_scratch;

int tok_scratch_bytes(tok_scratch *sc, size_t n);
int tok_scratch_cpts(tok_scratch *sc, size_t n);
int tok_scratch_sym(tok_scratch *sc, size_t n);
void tok_scratch_release(tok_scratch *sc);

/* Max-heap of bigrams ordered by prio, then by leftmost position (llama.cpp's tie rule). */
int tok_heap_push(tok_scratch *sc, tok_bigram b);
int tok_heap_pop(tok_scratch *sc, tok_bigram *out);

/* Merge symbol b.right into b.left and relink; caller checked that b is not stale. */
void tok_symbols_merge(tok_symbol *sym, const tok_bigram *b);

/* Tokenize one fragment of raw text (no special tokens in it). 0 or -ENOMEM. */
int tok_spm_encode(const tokenizer *t, const char *text, size_t len, int space_prefix,
                   tok_scratch *sc, tok_sink *sink);
int tok_bpe_encode(const tokenizer *t, const char *text, size_t len, tok_scratch *sc,
                   tok_sink *sink);

/* Fill piece/piece_off/piece_len/max_piece for every token. */
int tok_build_pieces(tokenizer *t);

#endif
