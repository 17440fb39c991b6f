/* tok_gguf: fills a tok_vocab_desc from GGUF metadata (tokenizer.ggml.*) and builds the
 * tokenizer. Kept apart so the tokenizer itself does not depend on the file format. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

/* Optional token id: absent -> -1. */
static int get_id(const gguf_file *g, const char *key, int32_t *out, sol_err *e) {
    uint32_t v;
    int rc = gguf_get_u32(g, key, &v, e);
    if (rc == -ENOENT) {
        *out = -1;
        return 0;
    }
    if (rc) return rc;
    *out = (int32_t)v;
    return 0;
}

/* Optional bool: absent -> -1 (the model's default). */
static int get_flag(const gguf_file *g, const char *key, int *out, sol_err *e) {
    int rc = gguf_get_bool(g, key, out, e);
    if (rc == -ENOENT) {
        *out = -1;
        return 0;
    }
    return rc;
}

static int get_strs(const gguf_file *g, const char *key, int required, int32_t *n,
                    const char *const **strs, size_t **lens, sol_err *e) {
    const gguf_arr *a;
    int rc = gguf_get_arr(g, key, GGUF_T_STR, &a, e);
    if (rc == -ENOENT && !required) return 0;
    if (rc == -ENOENT)
        return sol_err_set(e, -ENOENT, "%s: missing key %s (a tokenizer needs it)", gguf_path(g),
                           key);
    if (rc) return rc;
    if (a->n > INT32_MAX)
        return sol_err_set(e, -EINVAL, "%s: %s has %llu entries, too many", gguf_path(g), key,
                           (unsigned long long)a->n);
    *n = (int32_t)a->n;
    *strs = a->strs;
    *lens = malloc(sizeof **lens * (a->n + 1));
    if (!*lens) return sol_err_set(e, -ENOMEM, "out of memory");
    for (uint64_t i = 0; i < a->n; i++)
        (*lens)[i] = (size_t)a->lens[i];
    return 0;
}

/* A numeric per-token array of n_tokens elements of type elem, or NULL when absent. */
static int get_per_token(const gguf_file *g, const char *key, int elem, int32_t n_tokens,
                         const void **out, sol_err *e) {
    const gguf_arr *a;
    int rc = gguf_get_arr(g, key, elem, &a, e);
    *out = NULL;
    if (rc == -ENOENT) return 0;
    if (rc) return rc;
    if (a->n != (uint64_t)n_tokens)
        return sol_err_set(e, -EINVAL, "%s: %s has %llu entries, expected one per token (%d)",
                           gguf_path(g), key, (unsigned long long)a->n, n_tokens);
    *out = a->data;
    return 0;
}

static int fill_desc(const gguf_file *g, tok_vocab_desc *d, size_t **tl, size_t **ml, sol_err *e) {
    const void *p;
    int rc = gguf_get_str(g, "tokenizer.ggml.model", &d->model, e);
    if (rc == -ENOENT)
        return sol_err_set(e, -ENOENT, "%s: missing key tokenizer.ggml.model", gguf_path(g));
    if (rc) return rc;
    if (gguf_get_str(g, "tokenizer.ggml.pre", &d->pre, e) == -ENOENT) d->pre = NULL;
    if ((rc = get_strs(g, "tokenizer.ggml.tokens", 1, &d->n_tokens, &d->tokens, tl, e))) return rc;
    d->token_lens = *tl;
    if ((rc = get_strs(g, "tokenizer.ggml.merges", 0, &d->n_merges, &d->merges, ml, e))) return rc;
    d->merge_lens = *ml;
    if ((rc = get_per_token(g, "tokenizer.ggml.scores", GGUF_T_F32, d->n_tokens, &p, e))) return rc;
    d->scores = p;
    if ((rc = get_per_token(g, "tokenizer.ggml.token_type", GGUF_T_I32, d->n_tokens, &p, e)))
        return rc;
    d->types = p;
    if ((rc = get_id(g, "tokenizer.ggml.bos_token_id", &d->bos, e)) ||
        (rc = get_id(g, "tokenizer.ggml.eos_token_id", &d->eos, e)) ||
        (rc = get_id(g, "tokenizer.ggml.unknown_token_id", &d->unk, e)) ||
        (rc = get_id(g, "tokenizer.ggml.padding_token_id", &d->pad, e)) ||
        (rc = get_id(g, "tokenizer.ggml.eot_token_id", &d->eot, e)) ||
        (rc = get_flag(g, "tokenizer.ggml.add_bos_token", &d->add_bos, e)) ||
        (rc = get_flag(g, "tokenizer.ggml.add_eos_token", &d->add_eos, e)) ||
        (rc = get_flag(g, "tokenizer.ggml.add_space_prefix", &d->add_space_prefix, e)))
        return rc;
    return 0;
}

tokenizer *tokenizer_from_gguf(const struct gguf_file *g, sol_err *e) {
    tok_vocab_desc d = tok_vocab_desc_init();
    size_t *tl = NULL, *ml = NULL;
    tokenizer *t = NULL;
    if (fill_desc(g, &d, &tl, &ml, e) == 0) {
        t = tokenizer_new(&d, e);
        if (!t) sol_err_wrap(e, "%s: ", gguf_path(g));
    }
    free(tl);
    free(ml);
    return t;
}
