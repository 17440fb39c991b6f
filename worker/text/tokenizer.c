/* tokenizer: construction from a vocabulary description, the special-token partition of input
 * text, and dispatch to the SPM (tok_spm.c) or byte-level BPE (tok_bpe.c) merge loop. The rules
 * follow llama.cpp's llama-vocab so that ids match it exactly: special tokens (control, unknown,
 * user-defined) are cut out of the text first, longest first; the remaining fragments are
 * tokenized independently. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"
#include "utf8.h"

/* Tokens llama.cpp treats as end-of-generation (and as control tokens) by their text. */
static const char *const k_eog_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81"
    "of\xe2\x96\x81"
    "sentence\xef\xbd\x9c>",
    "[e~[",
};

tok_vocab_desc tok_vocab_desc_init(void) {
    tok_vocab_desc d;
    memset(&d, 0, sizeof d);
    d.bos = d.eos = d.unk = d.pad = d.eot = -1;
    d.add_bos = d.add_eos = d.add_space_prefix = -1;
    return d;
}

static size_t str_len(const char *const *s, const size_t *lens, int32_t i) {
    return lens ? lens[i] : strlen(s[i]);
}

/* Copy n strings into one arena with offset/length tables. */
static int copy_strings(const char *const *src, const size_t *lens, int32_t n, char **arena,
                        uint32_t **off, uint32_t **len, const char *what, sol_err *err) {
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!src[i]) return sol_err_set(err, -EINVAL, "%s[%d] is NULL", what, i);
        size_t l = str_len(src, lens, i);
        if (l > UINT32_MAX / 2) return sol_err_set(err, -EINVAL, "%s[%d] is too long", what, i);
        total += l;
    }
    if (total > UINT32_MAX) return sol_err_set(err, -EINVAL, "%s: %zu bytes in all", what, total);
    *arena = malloc(total + 1);
    *off = malloc(sizeof **off * (size_t)(n + 1));
    *len = malloc(sizeof **len * (size_t)(n + 1));
    if (!*arena || !*off || !*len) return sol_err_set(err, -ENOMEM, "%s: out of memory", what);
    size_t o = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t l = str_len(src, lens, i);
        memcpy(*arena + o, src[i], l);
        (*off)[i] = (uint32_t)o;
        (*len)[i] = (uint32_t)l;
        o += l;
    }
    return 0;
}

static int check_id(int32_t id, int32_t n, const char *what, sol_err *err) {
    if (id < -1 || id >= n)
        return sol_err_set(err, -EINVAL, "%s = %d: expected -1 (none) or an id below %d", what, id,
                           n);
    return 0;
}

static int set_options(tokenizer *t, const tok_vocab_desc *d, sol_err *err) {
    if (!d->model || (strcmp(d->model, "llama") != 0 && strcmp(d->model, "gpt2") != 0))
        return sol_err_set(err, -ENOTSUP,
                           "tokenizer model '%s' is not supported: expected 'llama' or 'gpt2'",
                           d->model ? d->model : "(missing)");
    t->is_spm = strcmp(d->model, "llama") == 0;
    if (!t->is_spm && pretok_from_name(d->pre, &t->pre) != 0)
        return sol_err_set(err, -ENOTSUP, "pre-tokenizer '%s' is not supported: expected one of %s",
                           d->pre, pretok_names());
    /* llama.cpp's LLAMA3 family skips merging for words that are whole tokens and adds BOS;
     * "default" (no pre name) borrows the llama-3 split but not those two flags */
    int llama3 = !t->is_spm && t->pre == PRETOK_LLAMA3 && d->pre && strcmp(d->pre, "default");
    t->ignore_merges = llama3;
    int def_bos = t->is_spm || llama3;
    t->add_bos = d->add_bos >= 0 ? d->add_bos : def_bos;
    t->add_eos = d->add_eos >= 0 ? d->add_eos : 0;
    t->add_space_prefix = t->is_spm && (d->add_space_prefix >= 0 ? d->add_space_prefix : 1);
    if (check_id(d->bos, d->n_tokens, "bos_token_id", err) ||
        check_id(d->eos, d->n_tokens, "eos_token_id", err) ||
        check_id(d->unk, d->n_tokens, "unknown_token_id", err) ||
        check_id(d->pad, d->n_tokens, "padding_token_id", err) ||
        check_id(d->eot, d->n_tokens, "eot_token_id", err))
        return -EINVAL;
    t->bos = d->bos;
    t->eos = d->eos;
    t->unk = d->unk;
    t->pad = d->pad;
    t->eot = d->eot;
    if (t->add_bos && t->bos < 0)
        return sol_err_set(err, -EINVAL, "add_bos_token is set but there is no bos_token_id");
    if (t->add_eos && t->eos < 0)
        return sol_err_set(err, -EINVAL, "add_eos_token is set but there is no eos_token_id");
    return 0;
}

static int load_merges(tokenizer *t, const tok_vocab_desc *d, sol_err *err) {
    if (t->is_spm || d->n_merges <= 0) return 0;
    if (!d->merges)
        return sol_err_set(err, -EINVAL, "n_merges = %d but merges is NULL", d->n_merges);
    int rc = copy_strings(d->merges, d->merge_lens, d->n_merges, &t->merge_text, &t->merge_off,
                          &t->merge_len, "merges", err);
    if (rc) return rc;
    t->n_merges = d->n_merges;
    for (int32_t i = 0; i < t->n_merges; i++) {
        const char *m = t->merge_text + t->merge_off[i];
        if (t->merge_len[i] < 3 || !memchr(m + 1, ' ', t->merge_len[i] - 1))
            return sol_err_set(err, -EINVAL, "merges[%d] = '%.*s': expected 'left right'", i,
                               (int)t->merge_len[i], m);
    }
    if (tok_map_build(&t->merges, t->merge_text, t->merge_off, t->merge_len, t->n_merges, 0))
        return sol_err_set(err, -ENOMEM, "merges: out of memory");
    return 0;
}

static int is_eog_text(const char *s, size_t n) {
    for (size_t i = 0; i < sizeof k_eog_texts / sizeof k_eog_texts[0]; i++)
        if (strlen(k_eog_texts[i]) == n && memcmp(k_eog_texts[i], s, n) == 0) return 1;
    return 0;
}

static int32_t find_text(const tokenizer *t, const char *s) {
    size_t n = strlen(s);
    for (int32_t i = 0; i < t->n; i++)
        if (t->text_len[i] == n && !memcmp(t->text + t->text_off[i], s, n)) return i;
    return -1;
}

/* Harmony (gpt-oss's o200k_harmony): <|end|> ends a message, not the answer - the model goes on
 * to its next channel - when the vocabulary has <|return|> and <|call|> to end with (llama.cpp
 * reads it so too). */
static void harmony_end(tokenizer *t) {
    int32_t end = find_text(t, "<|end|>");
    if (end >= 0 && end != t->eos && find_text(t, "<|return|>") >= 0 &&
        find_text(t, "<|call|>") >= 0)
        t->flags[end] &= (uint8_t)~TOKF_EOG;
}

static int load_types(tokenizer *t, const tok_vocab_desc *d, sol_err *err) {
    t->types = malloc((size_t)t->n);
    t->flags = calloc((size_t)t->n, 1);
    t->scores = malloc(sizeof *t->scores * (size_t)t->n);
    if (!t->types || !t->flags || !t->scores) return sol_err_set(err, -ENOMEM, "out of memory");
    for (int32_t i = 0; i < t->n; i++) {
        int32_t ty = d->types ? d->types[i] : TOK_TYPE_NORMAL;
        t->types[i] = (ty >= TOK_TYPE_NORMAL && ty <= TOK_TYPE_BYTE) ? (uint8_t)ty : 0;
        t->scores[i] = d->scores ? d->scores[i] : 0.0f;
        if (is_eog_text(t->text + t->text_off[i], t->text_len[i])) {
            t->types[i] = TOK_TYPE_CONTROL;
            t->flags[i] |= TOKF_EOG;
        }
        if (t->types[i] == TOK_TYPE_CONTROL || t->types[i] == TOK_TYPE_UNKNOWN)
            t->flags[i] |= TOKF_SPECIAL;
    }
    if (t->eos >= 0) t->flags[t->eos] |= TOKF_EOG;
    if (t->eot >= 0) t->flags[t->eot] |= TOKF_EOG;
    harmony_end(t);
    return 0;
}

static void insertion_sort_specials(tokenizer *t) {
    /* stable, so equal lengths keep id order; special lists are short (hundreds at most) */
    for (int32_t i = 1; i < t->n_specials; i++) {
        int32_t v = t->specials[i], j = i;
        while (j > 0 && t->text_len[t->specials[j - 1]] < t->text_len[v]) {
            t->specials[j] = t->specials[j - 1];
            j--;
        }
        t->specials[j] = v;
    }
}

static int build_specials(tokenizer *t, sol_err *err) {
    t->specials = malloc(sizeof *t->specials * (size_t)t->n);
    if (!t->specials) return sol_err_set(err, -ENOMEM, "out of memory");
    for (int32_t i = 0; i < t->n; i++) {
        uint8_t ty = t->types[i];
        if ((ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNKNOWN) &&
            t->text_len[i] > 0)
            t->specials[t->n_specials++] = i;
    }
    insertion_sort_specials(t);
    return 0;
}

static void build_byte_tables(tokenizer *t) {
    static const char hex[] = "0123456789ABCDEF";
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        /* GPT-2's alphabet: printable Latin-1 bytes stand for themselves, the others are moved
         * to U+0100 and up, in byte order */
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        uint32_t cpt = printable ? (uint32_t)b : next++;
        t->byte_utf8_len[b] = (uint8_t)utf8_encode(cpt, t->byte_utf8[b]);
        char name[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
        char raw = (char)b;
        int32_t id = tok_map_find2(&t->tokens, name, 6, 0, "", 0);
        if (id < 0) id = tok_map_find2(&t->tokens, &raw, 1, 0, "", 0);
        t->byte_tok[b] = id >= 0 ? id : t->unk;
    }
}

tokenizer *tokenizer_new(const tok_vocab_desc *d, sol_err *err) {
    if (!d) return sol_err_set(err, -EINVAL, "tokenizer_new: desc is NULL"), NULL;
    if (d->n_tokens <= 0 || !d->tokens) {
        sol_err_set(err, -EINVAL, "tokenizer: expected a non-empty token list, found %d tokens",
                    d->n_tokens);
        return NULL;
    }
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return sol_err_set(err, -ENOMEM, "out of memory"), NULL;
    t->n = d->n_tokens;
    if (set_options(t, d, err) ||
        copy_strings(d->tokens, d->token_lens, t->n, &t->text, &t->text_off, &t->text_len, "tokens",
                     err) ||
        load_types(t, d, err) || load_merges(t, d, err) || build_specials(t, err))
        goto fail;
    if (tok_map_build(&t->tokens, t->text, t->text_off, t->text_len, t->n, 1)) {
        sol_err_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    build_byte_tables(t);
    if (tok_build_pieces(t)) {
        sol_err_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    return t;
fail:
    tokenizer_free(t);
    return NULL;
}

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    tok_map_release(&t->tokens);
    tok_map_release(&t->merges);
    free(t->text);
    free(t->text_off);
    free(t->text_len);
    free(t->piece);
    free(t->piece_off);
    free(t->piece_len);
    free(t->scores);
    free(t->types);
    free(t->flags);
    free(t->merge_text);
    free(t->merge_off);
    free(t->merge_len);
    free(t->specials);
    free(t);
}

/* A piece of the input: raw text [off, off+len) when id < 0, else a special token. */
typedef struct fragment {
    size_t off, len;
    int32_t id;
} fragment;

typedef struct frag_list {
    fragment *v;
    size_t n, cap;
} frag_list;

static int frag_push(frag_list *l, fragment f) {
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 16;
        fragment *v = realloc(l->v, sizeof *v * c);
        if (!v) return -ENOMEM;
        l->v = v;
        l->cap = c;
    }
    l->v[l->n++] = f;
    return 0;
}

/* Cut every occurrence of special token id out of the raw fragments of *cur, into *next. */
static int split_on(const tokenizer *t, const char *text, int32_t id, frag_list *cur,
                    frag_list *next) {
    const char *s = t->text + t->text_off[id];
    size_t sl = t->text_len[id];
    next->n = 0;
    for (size_t i = 0; i < cur->n; i++) {
        fragment f = cur->v[i];
        while (f.id < 0 && f.len >= sl) {
            const char *hit = memmem(text + f.off, f.len, s, sl);
            if (!hit) break;
            size_t at = (size_t)(hit - text);
            if (at > f.off && frag_push(next, (fragment){f.off, at - f.off, -1})) return -ENOMEM;
            if (frag_push(next, (fragment){at, sl, id})) return -ENOMEM;
            f.len -= at + sl - f.off;
            f.off = at + sl;
        }
        if ((f.id >= 0 || f.len > 0) && frag_push(next, f)) return -ENOMEM;
    }
    frag_list tmp = *cur;
    *cur = *next;
    *next = tmp;
    return 0;
}

static int partition(const tokenizer *t, const char *text, size_t len, int parse_special,
                     frag_list *out) {
    frag_list spare = {0};
    int rc = frag_push(out, (fragment){0, len, -1});
    for (int32_t k = 0; rc == 0 && k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        if (!parse_special && t->types[id] != TOK_TYPE_USER_DEFINED) continue;
        rc = split_on(t, text, id, out, &spare);
    }
    free(spare.v);
    return rc;
}

/* prev_special: SPM gives a fragment at the start or after a special the "▁" (1 at the start of
 * a text, 0 for a piece that continues text) */
static int encode_fragments(const tokenizer *t, const char *text, const frag_list *fl,
                            int prev_special, tok_scratch *sc, tok_sink *sink) {
    for (size_t i = 0; i < fl->n; i++) {
        const fragment *f = &fl->v[i];
        int rc = 0;
        if (f->id >= 0) {
            tok_sink_push(sink, f->id);
            prev_special = 1;
            continue;
        }
        if (t->is_spm)
            rc = tok_spm_encode(t, text + f->off, f->len, t->add_space_prefix && prev_special, sc,
                                sink);
        else
            rc = tok_bpe_encode(t, text + f->off, f->len, sc, sink);
        if (rc) return rc;
        prev_special = 0;
    }
    return 0;
}

static int encode(const tokenizer *t, const char *text, size_t len, int bos, int eos,
                  int parse_special, int at_start, int32_t *out, int max_out) {
    if (!t || (!text && len > 0) || (!out && max_out > 0) || max_out < 0) return -EINVAL;
    tok_sink sink = {out, max_out, 0};
    frag_list fl = {0};
    tok_scratch sc = {0};
    int rc = 0;
    if (bos) tok_sink_push(&sink, t->bos);
    if (len > 0) rc = partition(t, text, len, parse_special, &fl);
    if (rc == 0) rc = encode_fragments(t, text, &fl, at_start, &sc, &sink);
    if (rc == 0 && eos) tok_sink_push(&sink, t->eos);
    free(fl.v);
    tok_scratch_release(&sc);
    return rc ? rc : sink.n;
}

int tokenizer_encode(const tokenizer *t, const char *text, size_t len, int add_special,
                     int parse_special, int32_t *out, int max_out) {
    int s = add_special && t;
    return encode(t, text, len, s && t->add_bos, s && t->add_eos, parse_special, 1, out, max_out);
}

int tokenizer_encode_piece(const tokenizer *t, const char *text, size_t len, int parse_special,
                           int after_text, int32_t *out, int max_out) {
    return encode(t, text, len, 0, 0, parse_special, !after_text, out, max_out);
}

int32_t tokenizer_n_vocab(const tokenizer *t) {
    return t->n;
}

int32_t tokenizer_bos(const tokenizer *t) {
    return t->bos;
}

int32_t tokenizer_eos(const tokenizer *t) {
    return t->eos;
}

int32_t tokenizer_eot(const tokenizer *t) {
    return t->eot;
}

int tokenizer_add_bos(const tokenizer *t) {
    return t->add_bos;
}

int tokenizer_add_eos(const tokenizer *t) {
    return t->add_eos;
}

int tokenizer_is_eog(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n && (t->flags[id] & TOKF_EOG);
}

int32_t tokenizer_find(const tokenizer *t, const char *text, size_t len) {
    return tok_map_find2(&t->tokens, text, len, 0, "", 0);
}

const char *tokenizer_token_text(const tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->text_len[id];
    return t->text + t->text_off[id];
}

int tokenizer_token_type(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n ? t->types[id] : 0;
}
