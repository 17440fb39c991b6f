/* oai_render: the response objects, SSE chunks and embeddings lists of the OpenAI-compatible
 * endpoints, written by hand into a reused strbuf: a streamed token costs no allocation once the
 * buffer has grown. */
#include "oai_render.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *oai_finish_name(oai_finish f) {
    switch (f) {
    case OAI_FINISH_STOP:
        return "stop";
    case OAI_FINISH_LENGTH:
        return "length";
    case OAI_FINISH_TOOL_CALLS:
        return "tool_calls";
    default:
        return NULL;
    }
}

void oai_make_id(char *dst, size_t cap, oai_kind kind, const char *request_id) {
    snprintf(dst, cap, "%s%s", kind == OAI_CHAT ? "chatcmpl-" : "cmpl-", request_id);
}

static void put_finish(strbuf *out, oai_finish f) {
    const char *n = oai_finish_name(f);
    strbuf_puts(out, ",\"finish_reason\":");
    if (n)
        strbuf_printf(out, "\"%s\"", n);
    else
        strbuf_puts(out, "null");
}

/* JSON has no NaN/Infinity; a -inf logprob (impossible token) is written as -9999.0 like vLLM. */
static void put_logprob(strbuf *out, float lp) {
    if (!isfinite(lp)) lp = -9999.0f;
    strbuf_printf(out, "%.9g", (double)lp);
}

static void put_bytes(strbuf *out, const char *s) {
    strbuf_puts(out, ",\"bytes\":[");
    for (size_t i = 0; s[i]; i++)
        strbuf_printf(out, "%s%u", i ? "," : "", (unsigned char)s[i]);
    strbuf_putc(out, ']');
}

/* chat: {"content":[{"token","logprob","bytes","top_logprobs":[...]}]} */
static void put_chat_logprobs(strbuf *out, const oai_token_logprob *lp, size_t n) {
    strbuf_puts(out, "{\"content\":[");
    for (size_t i = 0; i < n; i++) {
        const char *t = lp[i].text ? lp[i].text : "";
        strbuf_puts(out, i ? ",{\"token\":" : "{\"token\":");
        strbuf_json_str(out, t, strlen(t));
        strbuf_puts(out, ",\"logprob\":");
        put_logprob(out, lp[i].logprob);
        put_bytes(out, t);
        strbuf_puts(out, ",\"top_logprobs\":[");
        for (size_t j = 0; j < lp[i].n_top; j++) {
            const char *tt = lp[i].top[j].text ? lp[i].top[j].text : "";
            strbuf_puts(out, j ? ",{\"token\":" : "{\"token\":");
            strbuf_json_str(out, tt, strlen(tt));
            strbuf_puts(out, ",\"logprob\":");
            put_logprob(out, lp[i].top[j].logprob);
            put_bytes(out, tt);
            strbuf_putc(out, '}');
        }
        strbuf_puts(out, "]}");
    }
    strbuf_puts(out, "]}");
}

/* completions: {"tokens":[],"token_logprobs":[],"top_logprobs":[{tok:lp}],"text_offset":[]} */
static void put_completion_logprobs(strbuf *out, const oai_token_logprob *lp, size_t n,
                                    size_t *offset) {
    strbuf_puts(out, "{\"tokens\":[");
    for (size_t i = 0; i < n; i++) {
        const char *t = lp[i].text ? lp[i].text : "";
        if (i) strbuf_putc(out, ',');
        strbuf_json_str(out, t, strlen(t));
    }
    strbuf_puts(out, "],\"token_logprobs\":[");
    for (size_t i = 0; i < n; i++) {
        if (i) strbuf_putc(out, ',');
        put_logprob(out, lp[i].logprob);
    }
    strbuf_puts(out, "],\"top_logprobs\":[");
    for (size_t i = 0; i < n; i++) {
        strbuf_puts(out, i ? ",{" : "{");
        for (size_t j = 0; j < lp[i].n_top; j++) {
            const char *tt = lp[i].top[j].text ? lp[i].top[j].text : "";
            if (j) strbuf_putc(out, ',');
            strbuf_json_str(out, tt, strlen(tt));
            strbuf_putc(out, ':');
            put_logprob(out, lp[i].top[j].logprob);
        }
        strbuf_putc(out, '}');
    }
    strbuf_puts(out, "],\"text_offset\":[");
    for (size_t i = 0; i < n; i++) {
        strbuf_printf(out, "%s%zu", i ? "," : "", *offset);
        *offset += lp[i].text ? strlen(lp[i].text) : 0;
    }
    strbuf_puts(out, "]}");
}

static void put_usage(strbuf *out, const oai_usage *u) {
    strbuf_printf(out, "{\"prompt_tokens\":%u,\"completion_tokens\":%u,\"total_tokens\":%u",
                  u->prompt_tokens, u->completion_tokens, u->prompt_tokens + u->completion_tokens);
    if (u->cached_tokens)
        strbuf_printf(out, ",\"prompt_tokens_details\":{\"cached_tokens\":%u}", u->cached_tokens);
    strbuf_putc(out, '}');
}

static void put_header(strbuf *out, const char *id, const char *object, int64_t created,
                       const char *model) {
    strbuf_puts(out, "{\"id\":");
    strbuf_json_str(out, id, strlen(id));
    strbuf_printf(out, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object,
                  (long long)created);
    strbuf_json_str(out, model ? model : "", model ? strlen(model) : 0);
}

static void put_chat_message(strbuf *out, const oai_answer *c) {
    const char *text = c->text;
    size_t len = c->text_len, n_calls = c->n_calls;
    const oai_call *calls = c->calls;
    strbuf_puts(out, "\"message\":{\"role\":\"assistant\",");
    if (c->reasoning) { /* vLLM's field, before the content as the model wrote them */
        strbuf_puts(out, "\"reasoning_content\":");
        strbuf_json_str(out, c->reasoning, c->reasoning_len);
        strbuf_putc(out, ',');
    }
    strbuf_puts(out, "\"content\":");
    len = oai_content_len(text, len, n_calls); /* the separators around calls are not content */
    if (n_calls && !len)
        strbuf_puts(out, "null"); /* OpenAI's shape when the answer is only calls */
    else
        strbuf_json_str(out, text ? text : "", text ? len : 0);
    if (n_calls) {
        strbuf_putc(out, ',');
        oai_put_tool_calls(out, calls, 0, n_calls, false);
    }
    strbuf_putc(out, '}');
}

int oai_response_json(strbuf *out, const oai_response *r) {
    bool chat = r->kind == OAI_CHAT;
    put_header(out, r->id, chat ? "chat.completion" : "text_completion", r->created, r->model);
    strbuf_puts(out, ",\"choices\":[");
    for (size_t i = 0; i < r->n_choices; i++) {
        const oai_answer *c = &r->choices[i];
        strbuf_printf(out, "%s{\"index\":%zu,", i ? "," : "", i);
        if (chat) {
            put_chat_message(out, c);
        } else {
            strbuf_puts(out, "\"text\":");
            strbuf_json_str(out, c->text ? c->text : "", c->text ? c->text_len : 0);
        }
        strbuf_puts(out, ",\"logprobs\":");
        size_t offset = 0; /* completions: text_offset counts within the choice */
        if (!c->logprobs)
            strbuf_puts(out, "null");
        else if (chat)
            put_chat_logprobs(out, c->logprobs, c->n_logprobs);
        else
            put_completion_logprobs(out, c->logprobs, c->n_logprobs, &offset);
        put_finish(out, c->finish);
        strbuf_putc(out, '}');
    }
    strbuf_puts(out, "],\"usage\":");
    put_usage(out, &r->usage);
    return strbuf_putc(out, '}');
}

void oai_stream_init(oai_stream *s, const oai_request *req, const char *id, int64_t created) {
    memset(s, 0, sizeof *s);
    s->kind = req->kind;
    snprintf(s->id, sizeof s->id, "%s", id ? id : "");
    snprintf(s->model, sizeof s->model, "%s", req->model ? req->model : "");
    s->created = created;
    s->include_usage = req->include_usage;
    s->want_logprobs = req->sampling.want_logprobs;
}

/* Whether this choice's role is still to be sent (the first delta of each choice carries it). */
static bool take_role(oai_stream *s) {
    bool first = s->index ? !(s->role_mask >> (s->index & 31) & 1) : !s->role_sent;
    if (first && s->index)
        s->role_mask |= 1u << (s->index & 31);
    else if (first)
        s->role_sent = true;
    return first;
}

int oai_sse_chunk(strbuf *out, oai_stream *s, const char *text, size_t len,
                  const oai_token_logprob *lp, size_t n_lp, oai_finish finish) {
    strbuf_puts(out, "data: ");
    if (s->kind == OAI_CHAT) {
        put_header(out, s->id, "chat.completion.chunk", s->created, s->model);
        strbuf_printf(out, ",\"choices\":[{\"index\":%u,\"delta\":{", s->index);
        if (take_role(s)) strbuf_puts(out, "\"role\":\"assistant\",");
        strbuf_puts(out, "\"content\":");
        strbuf_json_str(out, text ? text : "", text ? len : 0);
        strbuf_puts(out, "},\"logprobs\":");
        if (s->want_logprobs && lp)
            put_chat_logprobs(out, lp, n_lp);
        else
            strbuf_puts(out, "null");
    } else {
        put_header(out, s->id, "text_completion", s->created, s->model);
        strbuf_printf(out, ",\"choices\":[{\"index\":%u,\"text\":", s->index);
        strbuf_json_str(out, text ? text : "", text ? len : 0);
        strbuf_puts(out, ",\"logprobs\":");
        if (s->want_logprobs && lp)
            put_completion_logprobs(out, lp, n_lp, &s->text_offset);
        else
            strbuf_puts(out, "null");
    }
    put_finish(out, finish);
    strbuf_puts(out, "}]");
    /* with include_usage every chunk carries "usage": null except the last, as OpenAI does */
    if (s->include_usage) strbuf_puts(out, ",\"usage\":null");
    return strbuf_puts(out, "}\n\n");
}

int oai_sse_reasoning(strbuf *out, oai_stream *s, const char *text, size_t len) {
    strbuf_puts(out, "data: ");
    put_header(out, s->id, "chat.completion.chunk", s->created, s->model);
    strbuf_printf(out, ",\"choices\":[{\"index\":%u,\"delta\":{", s->index);
    if (take_role(s)) strbuf_puts(out, "\"role\":\"assistant\",");
    strbuf_puts(out, "\"reasoning_content\":");
    strbuf_json_str(out, text, len);
    strbuf_puts(out, "},\"logprobs\":null,\"finish_reason\":null}]");
    if (s->include_usage) strbuf_puts(out, ",\"usage\":null");
    return strbuf_puts(out, "}\n\n");
}

int oai_sse_tool_calls(strbuf *out, oai_stream *s, const oai_call *calls, size_t from, size_t n) {
    strbuf_puts(out, "data: ");
    put_header(out, s->id, "chat.completion.chunk", s->created, s->model);
    strbuf_printf(out, ",\"choices\":[{\"index\":%u,\"delta\":{", s->index);
    if (take_role(s)) strbuf_puts(out, "\"role\":\"assistant\",\"content\":null,");
    oai_put_tool_calls(out, calls, from, n, true);
    strbuf_puts(out, "},\"logprobs\":null,\"finish_reason\":null}]");
    if (s->include_usage) strbuf_puts(out, ",\"usage\":null");
    return strbuf_puts(out, "}\n\n");
}

int oai_sse_usage(strbuf *out, const oai_stream *s, const oai_usage *u) {
    strbuf_puts(out, "data: ");
    put_header(out, s->id, s->kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion",
               s->created, s->model);
    strbuf_puts(out, ",\"choices\":[],\"usage\":");
    put_usage(out, u);
    return strbuf_puts(out, "}\n\n");
}

int oai_sse_error(strbuf *out, const oai_error *e) {
    strbuf_puts(out, "data: ");
    oai_error_json(out, e);
    return strbuf_puts(out, "\n\n");
}

int oai_sse_done(strbuf *out) {
    return strbuf_puts(out, "data: [DONE]\n\n");
}

static void put_base64(strbuf *out, const unsigned char *p, size_t n) {
    static const char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    strbuf_putc(out, '"');
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        char q[4] = {k[v >> 18 & 63], k[v >> 12 & 63], i + 1 < n ? k[v >> 6 & 63] : '=',
                     i + 2 < n ? k[v & 63] : '='};
        strbuf_append(out, q, 4);
    }
    strbuf_putc(out, '"');
}

int oai_embeddings_json(strbuf *out, const char *model, const float *const *vec, const size_t *dim,
                        size_t n, bool base64, uint32_t prompt_tokens) {
    strbuf_puts(out, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < n; i++) {
        strbuf_printf(out, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":", i ? "," : "",
                      i);
        if (base64) {
            /* float32 little endian, as OpenAI's base64 (x86/ARM hosts are little endian) */
            put_base64(out, (const unsigned char *)vec[i], dim[i] * sizeof(float));
        } else {
            strbuf_putc(out, '[');
            for (size_t k = 0; k < dim[i]; k++)
                strbuf_printf(out, "%s%.9g", k ? "," : "", (double)vec[i][k]);
            strbuf_putc(out, ']');
        }
        strbuf_putc(out, '}');
    }
    strbuf_puts(out, "],\"model\":");
    strbuf_json_str(out, model ? model : "", model ? strlen(model) : 0);
    return strbuf_printf(out, ",\"usage\":{\"prompt_tokens\":%u,\"total_tokens\":%u}}",
                         prompt_tokens, prompt_tokens);
}
