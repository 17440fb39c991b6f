/* http_stream: the per-request mailbox between the backend (broker thread) and the HTTP thread.
 * Design: the HTTP thread never blocks on a stream. When the mailbox is empty the connection is
 * suspended (MHD_suspend_connection: no polling, no timer); a push formats the chunk into the
 * stream's buffer and resumes the connection. So hundreds of idle-between-tokens streams cost
 * only memory, and formatting work happens on the pushing thread, not the HTTP thread. */
#include "http_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "clock.h"
#include "log.h"

void http_stream_ref(http_stream *s) {
    pthread_mutex_lock(&s->mu);
    s->refs++;
    pthread_mutex_unlock(&s->mu);
}

static void free_logprobs(oai_token_logprob *lp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free((char *)lp[i].text);
        for (size_t j = 0; j < lp[i].n_top; j++)
            free((char *)lp[i].top[j].text);
        free((void *)lp[i].top);
    }
    free(lp);
}

void http_stream_unref(http_stream *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    int left = --s->refs;
    pthread_mutex_unlock(&s->mu);
    if (left) return;
    pthread_mutex_destroy(&s->mu);
    strbuf_free(&s->out);
    for (size_t i = 0; i < OAI_MAX_N; i++) {
        strbuf_free(&s->choices[i].text);
        free_logprobs(s->choices[i].lp, s->choices[i].n_lp);
        free(s->emb[i]);
        oai_call_parser_free(&s->calls[i]);
    }
    oai_request_free(s->req);
    free(s);
}

const char *http_stream_request_id(const http_stream *s) {
    return s->request_id;
}

http_stream *http_stream_new(http_server *srv, struct MHD_Connection *conn, oai_request *req,
                             const char *request_id, const char *pool, uint64_t received_ns) {
    http_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->mu, NULL);
    s->refs = 1;
    s->srv = srv;
    s->conn = conn;
    s->req = req;
    s->streaming = req->stream;
    snprintf(s->request_id, sizeof s->request_id, "%s", request_id);
    snprintf(s->pool, sizeof s->pool, "%s", pool);
    s->t_start = received_ns;
    char id[HTTP_REQUEST_ID_MAX + 16];
    oai_make_id(id, sizeof id, req->kind, request_id);
    oai_stream_init(&s->sse, req, id, (int64_t)(time(NULL)));
    strbuf_init(&s->out);
    s->tools = req->kind == OAI_CHAT && oai_tools_parse_output(&req->tools);
    s->n_choices = req->n ? req->n : 1;
    for (size_t i = 0; i < OAI_MAX_N; i++) { /* ids stay unique across the n choices */
        strbuf_init(&s->choices[i].text);
        char base[32];
        snprintf(base, sizeof base, i ? "%.24s_%zu" : "%.24s", request_id, i);
        oai_call_parser_init(&s->calls[i], req->tools.format, base);
    }
    return s;
}

/* Non-streaming: keep owned copies of the logprobs until the final JSON is built. */
static int keep_logprobs(oai_token_logprob **arr, size_t *have, const oai_token_logprob *lp,
                         size_t n) {
    if (!lp || !n) return 0;
    oai_token_logprob *a = realloc(*arr, (*have + n) * sizeof *a);
    if (!a) return -ENOMEM;
    *arr = a;
    for (size_t i = 0; i < n; i++) {
        oai_token_logprob *d = &a[(*have)++];
        d->text = strdup(lp[i].text ? lp[i].text : "");
        d->logprob = lp[i].logprob;
        d->n_top = 0;
        oai_top_logprob *top = lp[i].n_top ? calloc(lp[i].n_top, sizeof *top) : NULL;
        d->top = top;
        for (size_t j = 0; top && j < lp[i].n_top; j++) {
            top[j].text = strdup(lp[i].top[j].text ? lp[i].top[j].text : "");
            top[j].logprob = lp[i].top[j].logprob;
            d->n_top++;
        }
    }
    return 0;
}

static void observe_timing(http_stream *s, const http_chunk *c) {
    if (!c->text_len && !c->n_logprobs) return;
    uint64_t now = sol_now_ns();
    metrics *m = s->srv->cfg.metrics;
    if (!s->t_first) {
        s->t_first = now;
        metrics_observe(m, METRIC_TTFT, s->pool, (double)(now - s->t_start) * 1e-9);
    } else if (s->streaming) {
        metrics_observe(m, METRIC_ITL, s->pool, (double)(now - s->t_last) * 1e-9);
    }
    s->t_last = now;
}

/* With tools: the text goes through the call parser; content is sent as it comes, each call when
 * it is complete, and the last chunk says tool_calls when the model made any. */
static void format_tools(http_stream *s, const http_chunk *c) {
    strbuf parsed, content;
    strbuf_init(&parsed);
    strbuf_init(&content);
    oai_call_parser *p = &s->calls[c->index];
    size_t from = p->n_calls;
    oai_call_parser_feed(p, c->text ? c->text : "", c->text_len, &parsed);
    if (c->finish != OAI_FINISH_NONE) oai_call_parser_flush(p, &parsed);
    /* whitespace waits for text: no whitespace-only deltas, none at all for calls only */
    oai_call_parser_gate(p, &parsed, &content, c->finish != OAI_FINISH_NONE);
    strbuf_free(&parsed);
    if (p->reasoning.len) { /* harmony's analysis channel, before the content it precedes */
        oai_sse_reasoning(&s->out, &s->sse, p->reasoning.data, p->reasoning.len);
        strbuf_reset(&p->reasoning);
    }
    if (content.len || c->n_logprobs)
        oai_sse_chunk(&s->out, &s->sse, content.data, content.len, c->logprobs, c->n_logprobs,
                      OAI_FINISH_NONE);
    if (p->n_calls > from) oai_sse_tool_calls(&s->out, &s->sse, p->calls, from, p->n_calls);
    oai_finish f = c->finish == OAI_FINISH_STOP && p->n_calls ? OAI_FINISH_TOOL_CALLS : c->finish;
    if (f != OAI_FINISH_NONE) oai_sse_chunk(&s->out, &s->sse, "", 0, NULL, 0, f);
    strbuf_free(&content);
}

static void format_stream(http_stream *s, const http_chunk *c, int last) {
    if (c->error) {
        oai_sse_error(&s->out, c->error);
        oai_sse_done(&s->out);
        return;
    }
    s->sse.index = c->index;
    if (s->tools)
        format_tools(s, c);
    else if (c->text_len || c->n_logprobs || c->finish != OAI_FINISH_NONE)
        oai_sse_chunk(&s->out, &s->sse, c->text, c->text_len, c->logprobs, c->n_logprobs,
                      c->finish);
    if (!last) return; /* n > 1: usage and [DONE] after the last choice ends */
    if (s->sse.include_usage) oai_sse_usage(&s->out, &s->sse, &s->usage);
    oai_sse_done(&s->out);
}

/* A choice's final usage: the prompt once, the completions summed over the n choices. */
static void add_usage(http_stream *s, const oai_usage *u) {
    if (s->req->kind == OAI_EMBEDDING) { /* every input is a prompt of its own */
        s->usage.prompt_tokens += u->prompt_tokens;
        return;
    }
    if (s->n_choices == 1 || s->n_finished == 1) {
        s->usage = *u;
        return;
    }
    s->usage.completion_tokens += u->completion_tokens;
}

/* Ends a stream whose client reads nothing (called with s->mu held, the connection still open:
 * on_completed clears s->conn under the same lock before MHD closes the descriptor). Lingering
 * off and shut down, the socket wakes MHD at once, and its close resets the connection: the
 * client sees the stream broken, not a truncated answer that ends cleanly, and the kernel drops
 * the megabytes of unsent data it held for it instead of keeping them until a timeout. */
static void break_off(http_stream *s) {
    LOG_WARN("http", "request %s: the client left %zu bytes unread; ending its stream",
             s->request_id, s->out.len - s->out_off);
    s->client_gone = true;
    s->done = true;
    s->abandoned = true;
    strbuf_reset(&s->out);
    s->out_off = 0;
    const union MHD_ConnectionInfo *ci =
        s->conn ? MHD_get_connection_info(s->conn, MHD_CONNECTION_INFO_CONNECTION_FD) : NULL;
    if (!ci) return;
    struct linger off = {1, 0};
    setsockopt(ci->connect_fd, SOL_SOCKET, SO_LINGER, &off, sizeof off);
    shutdown(ci->connect_fd, SHUT_RDWR);
}

int http_stream_push(http_stream *s, const http_chunk *c) {
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (s->client_gone) {
        rc = -EPIPE;
        goto out;
    }
    if (s->done) {
        rc = -EALREADY;
        goto out;
    }
    if (c->index >= s->n_choices) {
        rc = -EINVAL;
        goto out;
    }
    if (c->finish != OAI_FINISH_NONE) s->n_finished++;
    int last = c->error || (c->finish != OAI_FINISH_NONE && s->n_finished == s->n_choices);
    observe_timing(s, c);
    if (c->usage) add_usage(s, c->usage);
    if (c->embedding && c->n_embedding && !s->emb[c->index] &&
        (s->emb[c->index] = malloc(c->n_embedding * sizeof(float)))) {
        memcpy(s->emb[c->index], c->embedding, c->n_embedding * sizeof(float));
        s->emb_dim[c->index] = c->n_embedding;
    }
    if (c->error && !s->headers_sent) {
        s->err = *c->error; /* nothing sent yet: the client gets a real HTTP error status */
        s->failed = true;
    } else if (s->streaming) {
        if (c->error) s->failed_mid_stream = true;
        format_stream(s, c, last);
        if (s->out.len - s->out_off > s->srv->cfg.sse_max_buffer && !last) {
            /* the client reads nothing: end its stream rather than buffer without bound */
            break_off(s);
            rc = -EPIPE;
        }
    } else if (c->index < OAI_MAX_N) {
        http_choice *ch = &s->choices[c->index];
        strbuf_append(&ch->text, c->text ? c->text : "", c->text ? c->text_len : 0);
        if (c->finish != OAI_FINISH_NONE) ch->finish = c->finish;
        if (s->req->sampling.want_logprobs)
            keep_logprobs(&ch->lp, &ch->n_lp, c->logprobs, c->n_logprobs);
    }
    if (last) s->done = true;
    /* non-streaming responses wake the connection only once, when complete */
    if (s->suspended && (last || s->streaming)) {
        s->suspended = false;
        MHD_resume_connection(s->conn);
    }
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* MHD content reader for SSE responses. Runs on the HTTP thread with no lock held by MHD. */
ssize_t http_stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    http_stream *s = cls;
    pthread_mutex_lock(&s->mu);
    ssize_t n = 0;
    if (s->abandoned) {
        /* An abrupt close, not the chunked terminator: a client that reads again must see the
         * stream broken, not a response that looks whole. */
        n = MHD_CONTENT_READER_END_WITH_ERROR;
    } else if (s->out_off < s->out.len) {
        size_t left = s->out.len - s->out_off;
        n = (ssize_t)(left < max ? left : max);
        memcpy(buf, s->out.data + s->out_off, (size_t)n);
        s->out_off += (size_t)n;
        if (s->out_off == s->out.len) {
            strbuf_reset(&s->out); /* reuse the capacity for the next chunks */
            s->out_off = 0;
        }
    } else if (s->done || s->client_gone) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        s->suspended = true;
        MHD_suspend_connection(s->conn);
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}
