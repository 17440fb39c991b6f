/* engine_request: turns an engine_request into the engine's own record on the submitting thread -
 * the prompt as token ids (template, tokenize, BOS), checked against the vocabulary and
 * worker.kv.max_model_len, with the sampler state and stop strings ready - so the engine thread
 * only ever sees valid requests and a bad one is refused at submit with a clear message. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

#include "frame.h"

void ereq_free(ereq *r) {
    if (!r) return;
    free(r->seq.tokens);
    free(r->salt);
    free(r->links);
    stop_text_free(&r->stop);
    tok_stream_free(r->ts);
    grammar_free(r->gram);
    free(r->bias_tokens), free(r->bias_values);
    free(r->emb_acc), free(r->emb_out);
    free(r);
}

/* Tokenizes text into a malloc'd array with `extra` free slots at the end. */
static int encode(const engine *e, const char *text, int add_special, int parse_special,
                  int32_t extra, int32_t **out, int32_t *n, sol_err *err) {
    size_t len = strlen(text);
    int need = tokenizer_encode(e->tok, text, len, add_special, parse_special, NULL, 0);
    if (need < 0) return sol_err_set(err, need, "cannot tokenize the prompt");
    int32_t *ids = malloc(sizeof *ids * (size_t)(need + extra + 1));
    if (!ids) return sol_err_set(err, -ENOMEM, "out of memory for %d prompt tokens", need);
    int got = tokenizer_encode(e->tok, text, len, add_special, parse_special, ids + 1, need);
    if (got < 0) {
        free(ids);
        return sol_err_set(err, got, "cannot tokenize the prompt");
    }
    *out = ids;
    *n = got;
    return 0;
}

/* A quoted reply in the rendered chat: its bytes [start, end) and the ids it was generated as. */
typedef struct quote {
    size_t start, end;
    const int32_t *ids;
    int32_t n;
} quote;

/* Whether ids decode to exactly s[0..len) (as the engine streamed them: no control texts). */
static bool ids_spell(const engine *e, const int32_t *ids, size_t n, const char *s, size_t len) {
    if (n > INT32_MAX || !len) return false;
    char *buf = malloc(len + 1);
    int got = buf ? tokenizer_decode(e->tok, ids, (int)n, 0, buf, len + 1) : -1;
    bool same = got == (int)len && !memcmp(buf, s, len);
    free(buf);
    return same;
}

/* The quoted replies found in text, in order (chat_message.content_ids): each message's content
 * is looked for verbatim after the previous one found; a quote whose ids do not spell it, or
 * whose content the template rewrote, is left to the tokenizer (counted in *declined). Returns
 * how many, or -ENOMEM. */
static int find_quotes(const engine *e, const engine_request *q, const char *text, quote **out,
                       int32_t *declined) {
    *out = NULL;
    *declined = 0;
    for (size_t i = 0; i < q->n_messages; i++)
        *declined += q->messages[i].n_content_ids > 0;
    size_t cursor = 0;
    int k = 0;
    for (size_t i = 0; i < q->n_messages; i++) {
        const chat_message *m = &q->messages[i];
        if (!m->content || !*m->content) continue;
        const char *at = strstr(text + cursor, m->content);
        if (!at) continue;
        size_t start = (size_t)(at - text), len = strlen(m->content);
        cursor = start + len;
        if (!m->n_content_ids || !ids_spell(e, m->content_ids, m->n_content_ids, at, len)) continue;
        if (!*out && !(*out = malloc(sizeof **out * q->n_messages))) return -ENOMEM;
        (*out)[k++] = (quote){start, start + len, m->content_ids, (int32_t)m->n_content_ids};
        (*declined)--;
    }
    return k;
}

/* Appends id when out has room; counts it either way. */
static void put_id(int32_t *out, int64_t cap, int64_t *n, int32_t id) {
    if (out && *n < cap) out[*n] = id;
    (*n)++;
}

/* text's ids with each quote's ids in place of its bytes, the pieces between tokenized alone:
 * the prompt a reply was generated from, then the reply as generated, so the KV blocks its
 * generation left cached match through it (docs/kv_cache.md). Counts the ids when out is NULL. */
static int64_t encode_quoted(const engine *e, const char *text, const quote *qs, int k,
                             int add_special, int32_t *out, int64_t cap) {
    const tokenizer *t = e->tok;
    int64_t n = 0;
    if (add_special && tokenizer_add_bos(t)) put_id(out, cap, &n, tokenizer_bos(t));
    size_t from = 0;
    for (int i = 0; i <= k; i++) {
        size_t to = i < k ? qs[i].start : strlen(text);
        int room = out ? (int)(cap - n) : 0;
        int got =
            tokenizer_encode_piece(t, text + from, to - from, 1, i > 0, out ? out + n : NULL, room);
        if (got < 0 || (out && got > room)) return got < 0 ? got : -EOVERFLOW;
        n += got;
        if (i == k) break;
        for (int32_t j = 0; j < qs[i].n; j++)
            put_id(out, cap, &n, qs[i].ids[j]);
        from = qs[i].end;
    }
    if (add_special && tokenizer_add_eos(t)) put_id(out, cap, &n, tokenizer_eos(t));
    return n;
}

/* A chat's text as ids, quoted replies spliced in where there are any (r counts them). */
static int encode_chat(const engine *e, const engine_request *q, const char *text, int add_special,
                       int32_t extra, ereq *r, int32_t **ids, int32_t *n, sol_err *err) {
    quote *qs = NULL;
    int k = find_quotes(e, q, text, &qs, &r->quotes_declined);
    if (k < 0) return sol_err_set(err, -ENOMEM, "out of memory for the prompt");
    r->quotes_used = k;
    if (!k) return encode(e, text, add_special, 1, extra, ids, n, err);
    int64_t need = encode_quoted(e, text, qs, k, add_special, NULL, 0);
    int32_t *out = need >= 0 && need < INT32_MAX - extra - 1
                       ? malloc(sizeof *out * (size_t)(need + extra + 1))
                       : NULL;
    int64_t got = out ? encode_quoted(e, text, qs, k, add_special, out + 1, need) : -ENOMEM;
    free(qs);
    if (got != need) {
        free(out);
        return sol_err_set(err, got < 0 ? (int)got : -EIO, "cannot tokenize the prompt");
    }
    *ids = out;
    *n = (int32_t)need;
    return 0;
}

/* The prompt as ids at (*ids)[1..n] (slot 0 left free for a BOS that may have to be added); a
 * chat's rendered text into *rendered (the caller frees it). */
static int prompt_ids(const engine *e, const engine_request *q, int32_t extra, ereq *r,
                      int32_t **ids, int32_t *n, char **rendered, sol_err *err) {
    int n_kinds = (q->prompt_tokens != NULL) + (q->prompt_text != NULL) + (q->messages != NULL);
    if (n_kinds != 1)
        return sol_err_set(err, -EINVAL,
                           "a request needs exactly one of prompt tokens, prompt text or chat "
                           "messages; found %d",
                           n_kinds);
    if (q->prompt_tokens) {
        if (q->n_prompt_tokens < 1)
            return sol_err_set(err, -EINVAL, "prompt: expected at least one token, found %d",
                               q->n_prompt_tokens);
        *ids = malloc(sizeof **ids * (size_t)(q->n_prompt_tokens + extra + 1));
        if (!*ids) return sol_err_set(err, -ENOMEM, "out of memory for the prompt");
        memcpy(*ids + 1, q->prompt_tokens, sizeof **ids * (size_t)q->n_prompt_tokens);
        *n = q->n_prompt_tokens;
        return 0;
    }
    if (!e->tok)
        return sol_err_set(err, -EINVAL,
                           "this engine has no tokenizer: send prompt token ids, not text");
    int add_special = q->add_bos != 0;
    if (q->prompt_text) return encode(e, q->prompt_text, add_special, 0, extra, ids, n, err);
    char *text = NULL;
    int rc = chat_template_apply_tools(e->chat_family, q->messages, q->n_messages,
                                       &(chat_tools){q->tools, q->n_tools}, true, &text, NULL, err);
    if (rc) return rc;
    /* The template writes special-token spellings that must become their ids. */
    rc = encode_chat(e, q, text, add_special, extra, r, ids, n, err);
    *rendered = text;
    return rc;
}

/* Where the chain's links end among the prompt's ids (link_map.h), for KV events. */
static int map_links(const engine *e, const engine_request *q, ereq *r, const char *rendered,
                     sol_err *err) {
    if (!q->chain || !q->chain->n || !e->links || !e->tok || q->embed) return 0;
    const char *text = rendered ? rendered : q->prompt_text;
    if (!text) return 0;
    if (!(r->links = malloc(sizeof *r->links * PC_MAX_LINKS)))
        return sol_err_set(err, -ENOMEM, "out of memory");
    link_prompt p = {text,          strlen(text),  rendered ? q->messages : NULL,
                     q->n_messages, r->seq.tokens, r->n_prompt};
    r->n_links = link_map(e->tok, &p, q->chain, e->cfg.block_size, q->cache_salt, r->links);
    return 0;
}

/* add_bos == 1 forces a BOS even where the vocabulary would not add one. */
static void apply_bos(const engine *e, const engine_request *q, int32_t *ids, int32_t *start,
                      int32_t *n) {
    *start = 1;
    int32_t bos = e->tok ? tokenizer_bos(e->tok) : -1;
    if (q->add_bos == 1 && bos >= 0 && (*n == 0 || ids[1] != bos)) {
        ids[0] = bos;
        *start = 0;
        (*n)++;
    }
}

static int check_ids(const engine *e, const int32_t *ids, int32_t n, const char *what,
                     sol_err *err) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->n_vocab)
            return sol_err_set(err, -EINVAL,
                               "%s[%d]: token id %d is outside the vocabulary "
                               "(0..%d)",
                               what, i, ids[i], e->n_vocab - 1);
    return 0;
}

static int check_length(const engine *e, int32_t n_prompt, int32_t n_resume, int32_t *max_tokens,
                        sol_err *err) {
    int32_t lim = e->cfg.max_model_len;
    if (n_prompt + n_resume >= lim)
        return sol_err_set(err, -EINVAL,
                           "prompt of %d tokens (+ %d resumed) leaves no room to generate within "
                           "the maximum model length %d (worker.kv.max_model_len)",
                           n_prompt, n_resume, lim);
    if (*max_tokens <= 0) *max_tokens = lim - n_prompt;
    if ((int64_t)n_prompt + *max_tokens > lim)
        return sol_err_set(err, -EINVAL,
                           "prompt of %d tokens + max_tokens %d = %lld exceeds the maximum model "
                           "length %d (worker.kv.max_model_len)",
                           n_prompt, *max_tokens, (long long)n_prompt + *max_tokens, lim);
    /* Exactly max_tokens resumed: the stream was complete and only its final chunk was lost with
     * its worker (killed between the last token and the finish); take_commands finishes it. */
    if (n_resume > *max_tokens)
        return sol_err_set(err, -EINVAL, "%d resume tokens exceed max_tokens %d", n_resume,
                           *max_tokens);
    return 0;
}

/* The wire's bound on text_tokens is the one rule; the matcher's and the detokenizer's capacities
 * only have to hold it. */
_Static_assert(SOL_FRAME_MAX_TEXT_TOKENS <= GRAMMAR_MAX_CONTROL &&
                   SOL_FRAME_MAX_TEXT_TOKENS <= TOK_STREAM_MAX_SHOWN,
               "text_tokens: the grammar and the stream hold fewer than the wire allows");

/* The control tokens of text_tokens (the others change nothing: ordinary tokens spell them). */
static int setup_text_tokens(const engine *e, const engine_request *q, ereq *r, sol_err *err) {
    if (q->n_text_tokens > SOL_FRAME_MAX_TEXT_TOKENS)
        return sol_err_set(err, -EINVAL, "text_tokens: more than %d", SOL_FRAME_MAX_TEXT_TOKENS);
    if (q->n_text_tokens > 0 && !e->tok)
        return sol_err_set(err, -EINVAL, "text_tokens need a tokenizer (text output)");
    for (int32_t i = 0; i < q->n_text_tokens; i++) {
        const char *t = q->text_tokens[i];
        int32_t id = t && *t ? tokenizer_find(e->tok, t, strlen(t)) : -1;
        if (id >= 0 && tokenizer_token_type(e->tok, id) == TOK_TYPE_CONTROL &&
            !tokenizer_is_eog(e->tok, id))
            r->text_ids[r->n_text_ids++] = id;
    }
    return 0;
}

static int setup_output(const engine *e, const engine_request *q, ereq *r, sol_err *err) {
    int rc = sampler_seq_init(&r->sseq, &q->sampling, r->n_prompt, err);
    if (rc) return rc;
    sampler_seq_set_position(&r->sseq, (uint64_t)q->n_resume_tokens);
    if (q->n_stop && !e->tok)
        return sol_err_set(err, -EINVAL, "stop strings need a tokenizer (text output)");
    if ((rc = stop_text_init(&r->stop, q->stop, q->n_stop, err))) return rc;
    if (q->cache_salt && q->cache_salt[0] && !(r->salt = strdup(q->cache_salt)))
        return sol_err_set(err, -ENOMEM, "out of memory");
    r->seq.cache_salt = r->salt;
    if (!e->tok) return 0;
    if (!(r->ts = tok_stream_new(e->tok, 0))) return sol_err_set(err, -ENOMEM, "out of memory");
    for (int i = 0; i < r->n_text_ids; i++)
        if (tok_stream_show(r->ts, r->text_ids[i]))
            return sol_err_set(err, -E2BIG, "text_tokens: too many");
    /* Resumed ids were streamed by the previous worker: prime the detokenizer with them so the
     * text continues exactly (a half-finished UTF-8 character stays pending). */
    for (int32_t i = 0; i < q->n_resume_tokens; i++) {
        const char *t;
        size_t len;
        tok_stream_push(r->ts, q->resume_tokens[i], &t, &len);
    }
    return 0;
}

/* logit_bias, its token ids checked against the vocabulary. */
static int setup_bias(const engine *e, const engine_request *q, ereq *r, sol_err *err) {
    if (q->n_bias <= 0) return 0;
    for (int32_t i = 0; i < q->n_bias; i++)
        if (q->bias_tokens[i] < 0 || q->bias_tokens[i] >= e->n_vocab)
            return sol_err_set(err, -EINVAL,
                               "logit_bias: token id %d is outside the vocabulary (0..%d)",
                               q->bias_tokens[i], e->n_vocab - 1);
    r->bias_tokens = malloc(sizeof *r->bias_tokens * (size_t)q->n_bias);
    r->bias_values = malloc(sizeof *r->bias_values * (size_t)q->n_bias);
    if (!r->bias_tokens || !r->bias_values) return sol_err_set(err, -ENOMEM, "out of memory");
    memcpy(r->bias_tokens, q->bias_tokens, sizeof *r->bias_tokens * (size_t)q->n_bias);
    memcpy(r->bias_values, q->bias_values, sizeof *r->bias_values * (size_t)q->n_bias);
    r->n_bias = q->n_bias;
    return 0;
}

/* The request's grammar, advanced over its resume tokens (failover replays the state). */
static int setup_grammar(const engine *e, const engine_request *q, ereq *r, sol_err *err) {
    if (!q->grammar) return 0;
    if (!e->gvocab)
        return sol_err_set(err, -EINVAL, "a grammar needs the model's tokenizer (text output)");
    if (!(r->gram = grammar_new(q->grammar, strlen(q->grammar), e->gvocab, err)))
        return err->code ? err->code : -EINVAL;
    grammar_use_cache(r->gram, e->gcache); /* masks are computed on the engine thread only */
    /* before the resume tokens: they may hold one */
    if (grammar_allow_control(r->gram, r->text_ids, r->n_text_ids, err)) return err->code;
    for (int32_t i = 0; i < q->n_resume_tokens; i++) {
        int rc = grammar_accept(r->gram, q->resume_tokens[i], err);
        if (rc) return sol_err_wrap(err, "resume token %d of %d: ", i, q->n_resume_tokens);
    }
    return 0;
}

int ereq_build(const engine *e, const engine_request *q, ereq **out, sol_err *err) {
    *out = NULL;
    if (!q) return sol_err_set(err, -EINVAL, "engine_submit: NULL request");
    if (q->n_resume_tokens < 0 || (q->n_resume_tokens > 0 && !q->resume_tokens))
        return sol_err_set(err, -EINVAL, "resume_tokens: bad count %d", q->n_resume_tokens);
    ereq *r = calloc(1, sizeof *r);
    if (!r) return sol_err_set(err, -ENOMEM, "out of memory");
    int32_t *ids = NULL, n = 0, start = 0;
    char *rendered = NULL;
    int rc = prompt_ids(e, q, q->n_resume_tokens, r, &ids, &n, &rendered, err);
    if (rc) goto fail;
    apply_bos(e, q, ids, &start, &n);
    if (start == 1) memmove(ids, ids + 1, sizeof *ids * (size_t)n);
    r->seq.tokens = ids;
    if (n < 1) {
        rc = sol_err_set(err, -EINVAL, "the prompt produced no tokens");
        goto fail;
    }
    r->n_prompt = n;
    r->max_tokens = q->max_tokens;
    if ((rc = check_ids(e, ids, n, "prompt", err)) ||
        (rc = check_ids(e, q->resume_tokens, q->n_resume_tokens, "resume_tokens", err)) ||
        (rc = check_length(e, n, q->n_resume_tokens, &r->max_tokens, err)))
        goto fail;
    /* Room for every token the request can reach, so the hot path never grows it. */
    int32_t cap = n + r->max_tokens;
    int32_t *grown = realloc(ids, sizeof *ids * (size_t)cap);
    if (!grown) {
        rc = sol_err_set(err, -ENOMEM, "out of memory for %d tokens", cap);
        goto fail;
    }
    r->seq.tokens = grown;
    if (q->n_resume_tokens > 0) /* memcpy from NULL is undefined even for 0 bytes */
        memcpy(grown + n, q->resume_tokens, sizeof *grown * (size_t)q->n_resume_tokens);
    r->seq.n_tokens = n + q->n_resume_tokens;
    r->seq.cap_tokens = cap;
    r->seq.priority = q->priority;
    r->seq.due_ns = q->first_due_ns;
    r->seq.tpot_ns = (uint64_t)q->tpot_ms * 1000000ull;
    r->n_generated = q->n_resume_tokens;
    r->ignore_eos = q->ignore_eos;
    r->prompt_logits = q->prompt_logits;
    /* Verify yields no logprobs; grammars and logit_bias constrain the verify rows
     * (engine_spec.c). */
    r->no_spec = q->no_speculation || q->sampling.want_logprobs;
    r->spec_slot = -1;
    r->deadline_ns = q->deadline_ns;
    r->user = q->user;
    r->embed = q->embed;
    r->no_spec = r->no_spec || q->embed;
    if (q->embed && (q->n_resume_tokens || q->grammar || q->n_bias)) {
        rc = sol_err_set(err, -EINVAL,
                         "an embedding request takes no resume tokens, grammar or "
                         "logit_bias");
        goto fail;
    }
    if (q->embed) {
        size_t dim = (size_t)model_get_hparams(e->m)->dim;
        r->emb_acc = calloc(dim, sizeof *r->emb_acc);
        r->emb_out = calloc(dim, sizeof *r->emb_out);
        if (!r->emb_acc || !r->emb_out) {
            rc = sol_err_set(err, -ENOMEM, "out of memory for an embedding");
            goto fail;
        }
        /* mean and cls read rows a prefix-cache hit would skip: compute them all */
        r->seq.no_prefix_hit = e->pooling != ENGINE_POOL_LAST;
    }
    if ((rc = setup_text_tokens(e, q, r, err)) || (rc = setup_output(e, q, r, err)) ||
        (rc = setup_bias(e, q, r, err)) || (rc = setup_grammar(e, q, r, err)) ||
        (rc = map_links(e, q, r, rendered, err)))
        goto fail;
    free(rendered);
    *out = r;
    return 0;
fail:
    free(rendered);
    if (!r->seq.tokens) free(ids);
    ereq_free(r);
    return rc;
}
