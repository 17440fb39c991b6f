/* http: request handling on libmicrohttpd's internal polling threads (epoll, a small pool).
 * Each connection goes: headers → auth + rate limit (before reading a body: unauthenticated
 * clients get the tightest limits) → body (counted; over max_body_bytes → 413) → validate →
 * classify → backend dispatch → suspended until the backend pushes → response. Nothing here blocks:
 * a slow client only holds its own connection, which MHD times out after conn_timeout_s idle. */
#include "http_internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "frame.h"
#include "log.h"
#include "status_page.h"

#define MOD "http"
#define MAX_HEADER_TAGS 16

enum endpoint { EP_NONE, EP_COMPLETIONS, EP_CHAT, EP_EMBEDDINGS };

/* Per-connection request state, MHD's *req_cls. */
typedef struct conn_ctx {
    enum endpoint ep;
    strbuf body;
    bool too_large;
    bool dispatched;
    bool responded; /* start_generation already queued an error response */
    /* A GET is answered once the whole request is in: a response queued from the header
     * callback makes libmicrohttpd close the connection (it cannot know no body follows). */
    bool deferred, get_body;
    char client_key[APIKEYS_MAX_LEN + 1];
    char request_id[HTTP_REQUEST_ID_MAX + 1];
    uint64_t t_start;
    http_stream *stream;
} conn_ctx;

/* ---- simple endpoints ------------------------------------------------------------------------ */

static void model_entry(strbuf *b, const char *id, size_t len, long long created, int *first) {
    strbuf_puts(b, *first ? "{\"id\":" : ",{\"id\":");
    strbuf_json_str(b, id, len);
    strbuf_printf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"sol\"}", created);
    *first = 0;
}

static void known_models(http_server *s, strbuf *out);

/* The names "model" takes: the router's --served-model, the models workers registered, then the
 * pools (resolve_model). */
static enum MHD_Result handle_models(http_server *s, struct MHD_Connection *c, const char *rid) {
    strbuf b, list;
    strbuf_init(&b);
    strbuf_init(&list);
    known_models(s, &list);
    const classify *cl = s->cfg.router;
    long long created = (long long)time(NULL);
    strbuf_puts(&b, "{\"object\":\"list\",\"data\":[");
    int first = 1;
    const char *sm = s->cfg.served_model;
    if (sm) model_entry(&b, sm, strlen(sm), created, &first);
    for (const char *p = list.len > 1 ? list.data + 1 : NULL; p && *p;) {
        const char *nl = strchr(p, '\n');
        char name[SOL_FRAME_MAX_NAME_BYTES + 1];
        snprintf(name, sizeof name, "%.*s", (int)(nl - p), p);
        if ((!sm || strcmp(name, sm)) && !classify_pool(cl, name)) /* listed once */
            model_entry(&b, name, strlen(name), created, &first);
        p = nl + 1;
    }
    for (size_t i = 0; i < classify_n_pools(cl); i++) {
        const char *p = classify_pool_at(cl, i);
        model_entry(&b, p, strlen(p), created, &first);
    }
    strbuf_puts(&b, "]}");
    strbuf_free(&list);
    return http_send_json(c, 200, &b, rid);
}

static enum MHD_Result handle_ready(http_server *s, struct MHD_Connection *c, const char *rid) {
    strbuf b;
    strbuf_init(&b);
    int ready = !s->cfg.backend.ready || s->cfg.backend.ready(s->cfg.backend.ctx);
    strbuf_puts(&b, ready ? "{\"status\":\"ready\"}" : "{\"status\":\"not ready\"}");
    return http_send_json(c, ready ? 200 : 503, &b, rid);
}

static enum MHD_Result handle_metrics(http_server *s, struct MHD_Connection *c, const char *rid) {
    strbuf b;
    strbuf_init(&b);
    if (s->cfg.metrics) metrics_render(s->cfg.metrics, &b);
    return http_send_buf(c, 200, "text/plain; version=0.0.4; charset=utf-8", &b, rid, NULL, NULL,
                         0);
}

static enum MHD_Result handle_workers(http_server *s, struct MHD_Connection *c, const char *rid) {
    strbuf b;
    strbuf_init(&b);
    if (s->cfg.backend.workers_json)
        s->cfg.backend.workers_json(s->cfg.backend.ctx, &b);
    else
        strbuf_puts(&b, "{\"workers\":[]}");
    return http_send_json(c, 200, &b, rid);
}

static enum MHD_Result handle_drain(http_server *s, struct MHD_Connection *c, const char *url,
                                    const char *rid) {
    const char *id = url + strlen("/admin/workers/");
    const char *end = strstr(id, "/drain");
    char worker[128];
    size_t n = end ? (size_t)(end - id) : 0;
    if (!n || n >= sizeof worker || strcmp(end, "/drain"))
        return http_send_status(c, 404, rid, "no such endpoint: %s", url);
    memcpy(worker, id, n);
    worker[n] = '\0';
    oai_error e;
    oai_error_status(&e, 503, "draining is not available (no broker)");
    if (s->cfg.backend.drain && !s->cfg.backend.drain(s->cfg.backend.ctx, worker, &e)) {
        strbuf b;
        strbuf_init(&b);
        strbuf_puts(&b, "{\"worker\":");
        strbuf_json_str(&b, worker, n);
        strbuf_puts(&b, ",\"draining\":true}");
        return http_send_json(c, 200, &b, rid);
    }
    return http_send_error(c, &e, rid, NULL, NULL);
}

/* ---- generation ------------------------------------------------------------------------------ */

static void make_request_id(http_server *s, struct MHD_Connection *c, char *dst) {
    const char *given = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");
    if (given && given[0] && strlen(given) <= HTTP_REQUEST_ID_MAX) {
        size_t i = 0;
        while (given[i] &&
               (given[i] == '-' || given[i] == '_' || given[i] == '.' ||
                (given[i] >= '0' && given[i] <= '9') || (given[i] >= 'a' && given[i] <= 'z') ||
                (given[i] >= 'A' && given[i] <= 'Z')))
            i++;
        if (!given[i]) { /* only safe characters: echo it */
            strcpy(dst, given);
            return;
        }
    }
    uint64_t n = atomic_fetch_add(&s->next_id, 1);
    snprintf(dst, HTTP_REQUEST_ID_MAX + 1, "%016llx%08llx", (unsigned long long)s->id_salt,
             (unsigned long long)n);
}

static bool all_hex(const char *p, size_t n, bool *all_zero) {
    *all_zero = true;
    for (size_t i = 0; i < n; i++) {
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f'))) return false;
        if (p[i] != '0') *all_zero = false;
    }
    return true;
}

/* W3C Trace Context: version-traceid-parentid-flags, lowercase hex, ids not all zero. A header
 * that is present but malformed is the client's error (400), not silently dropped. */
static int read_traceparent(struct MHD_Connection *c, oai_request *req, oai_error *e) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "traceparent");
    if (!h) return 0;
    bool z0, z1, z2, z3;
    size_t n = strlen(h);
    bool ok = n == 55 && h[2] == '-' && h[35] == '-' && h[52] == '-' && all_hex(h, 2, &z0) &&
              all_hex(h + 3, 32, &z1) && all_hex(h + 36, 16, &z2) && all_hex(h + 53, 2, &z3) &&
              !z1 && !z2 && strncmp(h, "ff", 2) != 0;
    if (!ok) {
        oai_error_set(e, 400, "invalid_request_error", "invalid_value", "traceparent",
                      "header traceparent: expected W3C trace context "
                      "00-<32 hex trace id>-<16 hex parent id>-<2 hex flags> (lowercase, ids not "
                      "all zero), found '%.64s'",
                      h);
        return -EINVAL;
    }
    memcpy(req->traceparent, h, 56);
    return 0;
}

/* The latency-target headers, indexed as sol_slo (docs/api.md, "Latency targets"). */
static const char *const k_slo_headers[SOL_SLO_FIELDS] = {
    [SOL_SLO_TTFT] = "X-Sol-TTFT-Ms",
    [SOL_SLO_TPOT] = "X-Sol-TPOT-Ms",
    [SOL_SLO_DEADLINE] = "X-Sol-Deadline-Ms",
};

/* Each present header: whole milliseconds in [0, SOL_SLO_MAX_MS], else a 400 naming it. */
static int read_slo_headers(struct MHD_Connection *c, oai_request *req, oai_error *e) {
    for (int i = 0; i < SOL_SLO_FIELDS; i++) {
        const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, k_slo_headers[i]);
        if (!h) continue;
        char *end = NULL;
        errno = 0;
        long v = strtol(h, &end, 10);
        if (!*h || *end || errno || v < 0 || v > SOL_SLO_MAX_MS || !isdigit((unsigned char)*h)) {
            oai_error_set(e, 400, "invalid_request_error", "invalid_value", k_slo_headers[i],
                          "header %s: expected whole milliseconds in 0..%d (0: no target), "
                          "found '%.64s'",
                          k_slo_headers[i], SOL_SLO_MAX_MS, h);
            return -EINVAL;
        }
        if (i == SOL_SLO_TPOT && req->kind == OAI_EMBEDDING) {
            oai_error_set(e, 400, "invalid_request_error", "invalid_value", k_slo_headers[i],
                          "header %s applies to completions and chat (an embedding streams no "
                          "tokens); X-Sol-TTFT-Ms and X-Sol-Deadline-Ms bound its answer",
                          k_slo_headers[i]);
            return -EINVAL;
        }
        req->slo.ms[i] = (int)v;
        req->slo_given |= 1u << i;
    }
    return 0;
}

static size_t collect_tags(const oai_request *req, struct MHD_Connection *c, char *store,
                           size_t cap, const char **tags) {
    size_t n = 0;
    for (size_t i = 0; i < req->n_tags && n < MAX_HEADER_TAGS; i++)
        tags[n++] = req->tags[i];
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Sol-Tags");
    if (h) n += classify_split_tags(h, store, cap, tags + n, MAX_HEADER_TAGS * 2 - n);
    return n;
}

static void link_stream(http_server *s, http_stream *st) {
    pthread_mutex_lock(&s->mu);
    st->next = s->streams;
    if (s->streams) s->streams->prev = st;
    s->streams = st;
    pthread_mutex_unlock(&s->mu);
}

static void unlink_stream(http_server *s, http_stream *st) {
    pthread_mutex_lock(&s->mu);
    if (st->prev)
        st->prev->next = st->next;
    else if (s->streams == st)
        s->streams = st->next;
    if (st->next) st->next->prev = st->prev;
    st->next = st->prev = NULL;
    pthread_mutex_unlock(&s->mu);
}

/* ---- a request's way: parse -> route -> bind the pool's tools -> stream -> dispatch ---------- */

/* The OpenAI body, validated (oai_request.c), with the W3C trace context of the headers. */
static int parse_body(struct MHD_Connection *c, http_server *s, conn_ctx *cc, oai_request **out,
                      oai_error *e) {
    *out = NULL;
    if (cc->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "request body exceeds the limit of %zu bytes",
                 s->cfg.max_body_bytes);
        return oai_error_status(e, 413, msg), -1;
    }
    oai_kind kind = cc->ep == EP_CHAT         ? OAI_CHAT
                    : cc->ep == EP_EMBEDDINGS ? OAI_EMBEDDING
                                              : OAI_COMPLETION;
    if (oai_parse_request(kind, cc->body.data ? cc->body.data : "", cc->body.len, out, e))
        return -1;
    if (read_traceparent(c, *out, e) || read_slo_headers(c, *out, e))
        return oai_request_free(*out), *out = NULL, -1;
    return 0;
}

/* Every model a worker registered, "\nm1\nm2\n" into out (nothing without the callback). */
static void known_models(http_server *s, strbuf *out) {
    if (s->cfg.backend.models) s->cfg.backend.models(s->cfg.backend.ctx, out);
}

/* The 404 for a model that is not served: the names that are, within the message's bound. */
static void model_not_found(http_server *s, const char *name, const strbuf *list, oai_error *e) {
    char served[256] = "";
    size_t used = 0;
    const char *sm = s->cfg.served_model;
    if (sm) used += (size_t)snprintf(served, sizeof served, "'%.100s'", sm);
    for (const char *p = list->len > 1 ? list->data + 1 : NULL; p && *p && used < sizeof served;) {
        const char *nl = strchr(p, '\n');
        int len = (int)(nl - p);
        used += (size_t)snprintf(served + used, sizeof served - used, "%s'%.*s'", used ? ", " : "",
                                 len > 100 ? 100 : len, p);
        p = nl + 1;
    }
    oai_error_set(e, 404, "invalid_request_error", "model_not_found", "model",
                  "The model '%.100s' does not exist; served: %s (a pool name also works)", name,
                  served);
}

/* What "model" names (docs/api.md, "Models"): a pool (any of its workers), the router's
 * --served-model (any worker) or a model workers registered (only their workers: *only). Any
 * other name is a 404 naming what is served; before any worker registered and without
 * --served-model there is nothing to check a name against, and every name is taken. */
static int resolve_model(http_server *s, const oai_request *req, const char **only, oai_error *e) {
    *only = NULL;
    const char *m = req->model;
    if (!m || classify_pool(s->cfg.router, m)) return 0;
    if (s->cfg.served_model && !strcmp(m, s->cfg.served_model)) return 0;
    strbuf list;
    strbuf_init(&list);
    known_models(s, &list);
    int rc = 0;
    if (strbuf_has_line(&list, m))
        *only = m;
    else if (s->cfg.served_model || list.len > 1)
        model_not_found(s, m, &list, e), rc = -1;
    strbuf_free(&list);
    return rc;
}

/* The pool: explicit tags, then the YAML rules, then the classifier (classify.c). */
static void route_request(http_server *s, struct MHD_Connection *c, const oai_request *req,
                          classify_result *route) {
    strbuf text;
    strbuf_init(&text);
    oai_request_text(req, &text);
    char tagstore[512];
    const char *tags[MAX_HEADER_TAGS * 2];
    const char *user = oai_request_last_user_text(req);
    classify_input in = {req->model,
                         text.data ? text.data : "",
                         text.len,
                         user,
                         strlen(user),
                         req->max_tokens,
                         req->max_tokens_set,
                         tags,
                         collect_tags(req, c, tagstore, sizeof tagstore, tags)};
    classify_route(s->cfg.router, &in, route);
    strbuf_free(&text);
}

/* Tools in the chosen pool's call format (its workers' chat template): their grammar, if any. */
static int bind_pool_tools(http_server *s, oai_request *req, const classify_result *route,
                           const char *only, oai_error *e) {
    char tmpl[32] = "", fmt[16] = "";
    int known = s->cfg.backend.pool_tools &&
                s->cfg.backend.pool_tools(s->cfg.backend.ctx, route->pool, only, tmpl, sizeof tmpl,
                                          fmt, sizeof fmt);
    return oai_tools_bind(&req->tools, known ? fmt : NULL, tmpl, route->pool, &req->grammar,
                          &req->grammar_field, e)
               ? -1
               : 0;
}

/* One dispatch per sample into the stream (n > 1: each its own seed and worker, sharing the
 * prompt's KV through the prefix cache when they land together); a refusal part-way cancels
 * the ones already sent. */
static int dispatch_all(http_server *s, conn_ctx *cc, http_stream *st, oai_request *req,
                        const classify_result *route, const char *only, oai_error *e) {
    http_dispatch_info info = {req,           cc->request_id, route->pool, only,
                               route->reason, cc->client_key, cc->t_start, 0};
    for (uint32_t i = 0; i < req->n; i++) {
        info.choice = i;
        if (s->cfg.backend.dispatch(s->cfg.backend.ctx, &info, st, e) == 0) continue;
        pthread_mutex_lock(&st->mu);
        st->done = true;
        st->client_gone = i > 0; /* the broker drops the samples already sent */
        pthread_mutex_unlock(&st->mu);
        if (i > 0 && s->cfg.backend.cancel)
            s->cfg.backend.cancel(s->cfg.backend.ctx, cc->request_id);
        metrics_count_request(s->cfg.metrics, route->pool, e->status);
        return -1;
    }
    return 0;
}

static enum MHD_Result start_generation(http_server *s, struct MHD_Connection *c, conn_ctx *cc) {
    oai_request *req = NULL;
    oai_error e;
    classify_result route;
    const char *only = NULL; /* the model a worker registered that the request named */
    cc->responded = true;    /* every early return below queues a response */
    if (parse_body(c, s, cc, &req, &e)) return http_send_error(c, &e, cc->request_id, NULL, NULL);
    if (resolve_model(s, req, &only, &e)) {
        oai_request_free(req);
        return http_send_error(c, &e, cc->request_id, NULL, NULL);
    }
    route_request(s, c, req, &route);
    if (bind_pool_tools(s, req, &route, only, &e)) {
        oai_request_free(req);
        return http_send_error(c, &e, cc->request_id, route.pool, route.reason);
    }
    if (!req->model && !(req->model = strdup(route.pool))) { /* echoed as the response's model */
        oai_request_free(req);
        return http_send_status(c, 500, cc->request_id, "out of memory%s", NULL);
    }
    http_stream *st = http_stream_new(s, c, req, cc->request_id, route.pool, cc->t_start);
    if (!st) {
        oai_request_free(req);
        return http_send_status(c, 500, cc->request_id, "out of memory%s", NULL);
    }
    snprintf(st->reason, sizeof st->reason, "%s", route.reason);
    cc->stream = st;
    cc->dispatched = true;
    link_stream(s, st);
    if (dispatch_all(s, cc, st, req, &route, only, &e))
        return http_send_error(c, &e, cc->request_id, route.pool, route.reason);
    if (req->traceparent[0])
        LOG_INFO(MOD, "request %s traceparent %s → pool %s (%s)", cc->request_id, req->traceparent,
                 route.pool, route.reason);
    else
        LOG_DEBUG(MOD, "request %s → pool %s (%s)", cc->request_id, route.pool, route.reason);
    cc->responded = false;
    return MHD_YES; /* continue_generation runs next; the answer is rendered by respond_full or
                     * streamed by http_stream_push (the broker's chunks) */
}

static enum MHD_Result respond_embeddings(struct MHD_Connection *c, http_stream *st) {
    strbuf b;
    strbuf_init(&b);
    for (uint32_t i = 0; i < st->n_choices; i++)
        if (!st->emb[i]) { /* a worker that sent no vector: not an embedding-capable answer */
            oai_error e;
            oai_error_set(&e, 500, "server_error", NULL, "input",
                          "the worker returned no embedding for input %u", i);
            return http_send_error(c, &e, st->request_id, st->pool, st->reason);
        }
    oai_embeddings_json(&b, st->req->model, (const float *const *)st->emb, st->emb_dim,
                        st->n_choices, st->req->base64, st->usage.prompt_tokens);
    return http_send_buf(c, 200, "application/json", &b, st->request_id, st->pool, st->reason, 0);
}

/* With tools: a choice's text less the calls read out of it (into st->calls[i]); its finish
 * becomes tool_calls when it made any. */
static void read_calls(http_stream *st, uint32_t i, const strbuf *text, strbuf *content,
                       oai_finish *finish) {
    oai_call_parser_feed(&st->calls[i], text->data ? text->data : "", text->len, content);
    oai_call_parser_flush(&st->calls[i], content);
    if (st->calls[i].n_calls && *finish == OAI_FINISH_STOP) *finish = OAI_FINISH_TOOL_CALLS;
}

static enum MHD_Result respond_full(struct MHD_Connection *c, http_stream *st) {
    if (st->req->kind == OAI_EMBEDDING) return respond_embeddings(c, st);
    strbuf content[OAI_MAX_N]; /* with tools: each choice's text less its calls */
    oai_answer choices[OAI_MAX_N];
    bool lp = st->req->sampling.want_logprobs;
    for (uint32_t i = 0; i < st->n_choices; i++) {
        http_choice *ch = &st->choices[i];
        strbuf_init(&content[i]);
        if (st->tools) read_calls(st, i, &ch->text, &content[i], &ch->finish);
        const strbuf *shown = st->tools ? &content[i] : &ch->text;
        const strbuf *why = &st->calls[i].reasoning; /* harmony's analysis channel */
        choices[i] = (oai_answer){.text = shown->data,
                                  .text_len = shown->len,
                                  .reasoning = why->len ? why->data : NULL,
                                  .reasoning_len = why->len,
                                  .logprobs = lp ? ch->lp : NULL,
                                  .n_logprobs = ch->n_lp,
                                  .finish = ch->finish,
                                  .calls = st->calls[i].calls,
                                  .n_calls = st->calls[i].n_calls};
    }
    oai_response r = {.kind = st->req->kind,
                      .id = st->sse.id,
                      .created = st->sse.created,
                      .model = st->req->model,
                      .choices = choices,
                      .n_choices = st->n_choices,
                      .usage = st->usage};
    strbuf b;
    strbuf_init(&b);
    oai_response_json(&b, &r);
    for (uint32_t i = 0; i < st->n_choices; i++)
        strbuf_free(&content[i]);
    return http_send_buf(c, 200, "application/json", &b, st->request_id, st->pool, st->reason, 0);
}

static enum MHD_Result respond_stream(struct MHD_Connection *c, http_stream *st) {
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, http_stream_read, st, NULL);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    http_common_headers(r, st->request_id, st->pool, st->reason);
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ok;
}

/* Called after dispatch and after every resume: answer when there is something to answer. */
static enum MHD_Result continue_generation(struct MHD_Connection *c, conn_ctx *cc) {
    http_stream *st = cc->stream;
    pthread_mutex_lock(&st->mu);
    enum MHD_Result ok = MHD_YES;
    if (st->failed) {
        oai_error e = st->err;
        st->headers_sent = true;
        pthread_mutex_unlock(&st->mu);
        return http_send_error(c, &e, st->request_id, st->pool, st->reason);
    }
    if (st->streaming && (st->out.len || st->done)) {
        st->headers_sent = true;
        pthread_mutex_unlock(&st->mu);
        return respond_stream(c, st);
    }
    if (!st->streaming && st->done) {
        st->headers_sent = true;
        pthread_mutex_unlock(&st->mu);
        return respond_full(c, st);
    }
    st->suspended = true;
    MHD_suspend_connection(c);
    pthread_mutex_unlock(&st->mu);
    return ok;
}

/* ---- MHD callbacks --------------------------------------------------------------------------- */

static int check_auth(http_server *s, struct MHD_Connection *c, conn_ctx *cc) {
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *key = NULL;
    if (s->cfg.keys) {
        if (!apikeys_check_bearer(s->cfg.keys, auth, &key)) return 401;
        snprintf(cc->client_key, sizeof cc->client_key, "%s", key);
    } else {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr && ci->client_addr->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)ci->client_addr)->sin_addr,
                      cc->client_key, sizeof cc->client_key);
    }
    return 0;
}

/* The status page: static bytes; its scripts and styles are inline, and the policy keeps it from
 * loading anything from elsewhere. The data it shows is fetched with the user's key. */
static enum MHD_Result send_status_page(struct MHD_Connection *c, const char *rid) {
    size_t len;
    const char *html = status_page(&len);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)html, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; connect-src 'self'; script-src 'unsafe-inline'; "
                            "style-src 'unsafe-inline'; img-src 'self'");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    http_common_headers(r, rid, NULL, NULL);
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result add_header_bytes(void *cls, enum MHD_ValueKind kind, const char *key,
                                        const char *value) {
    (void)kind;
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4; /* ": " and CRLF */
    return MHD_YES;
}

/* The request line and headers as sent (near enough: whitespace folded by the parser is not
 * counted), against router.http.max_header_bytes. */
static size_t header_bytes(struct MHD_Connection *c, const char *url, const char *method) {
    size_t n = strlen(method) + strlen(url) + 12; /* " HTTP/1.1\r\n" */
    MHD_get_connection_values(c, MHD_HEADER_KIND, add_header_bytes, &n);
    return n;
}

/* The guard's record of this connection (http_guard.h), or NULL. */
static void *guard_record(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static enum MHD_Result first_call(http_server *s, struct MHD_Connection *c, conn_ctx *cc,
                                  const char *url, const char *method) {
    int post = !strcmp(method, "POST"), get = !strcmp(method, "GET");
    const char *rid = cc->request_id;
    size_t hb = header_bytes(c, url, method);
    if (hb > s->cfg.max_header_bytes) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "request header too large: %zu bytes (router.http.max_header_bytes = %zu)", hb,
                 s->cfg.max_header_bytes);
        return http_send_status(c, 431, rid, "%s", msg);
    }
    if (!strcmp(url, "/health")) {
        strbuf b;
        strbuf_init(&b);
        strbuf_puts(&b, "{\"status\":\"ok\"}");
        return http_send_json(c, 200, &b, rid);
    }
    if (!strcmp(url, "/v1/completions"))
        cc->ep = EP_COMPLETIONS;
    else if (!strcmp(url, "/v1/chat/completions"))
        cc->ep = EP_CHAT;
    else if (!strcmp(url, "/v1/embeddings"))
        cc->ep = EP_EMBEDDINGS;
    bool page = !strcmp(url, "/") || !strcmp(url, "/ui");
    int known = cc->ep || page || !strcmp(url, "/v1/models") || !strcmp(url, "/ready") ||
                !strcmp(url, "/metrics") || !strncmp(url, "/admin/workers", 14);
    if (!known) return http_send_status(c, 404, rid, "no such endpoint: %s", url);
    if (page && get) return send_status_page(c, rid);
    if (page) return http_send_status(c, 405, rid, "method not allowed on %s", url);
    if (!strcmp(url, "/ready") && get) return handle_ready(s, c, rid);
    if (!strcmp(url, "/metrics") && get) return handle_metrics(s, c, rid);
    if (check_auth(s, c, cc)) {
        oai_error e;
        oai_error_status(&e, 401,
                         "missing or invalid API key (send 'Authorization: Bearer <key>')");
        return http_send_error(c, &e, rid, NULL, NULL);
    }
    int retry = 0;
    if (!ratelimit_take(s->cfg.limiter, cc->client_key, &retry)) {
        oai_error e;
        oai_error_status(&e, 429, "rate limit exceeded for this API key; retry later");
        e.retry_after_s = retry;
        return http_send_error(c, &e, rid, NULL, NULL);
    }
    if (!strcmp(url, "/v1/models") && get) return handle_models(s, c, rid);
    if (!strcmp(url, "/admin/workers") && get) return handle_workers(s, c, rid);
    if (!strncmp(url, "/admin/workers/", 15) && post) return handle_drain(s, c, url, rid);
    if (!cc->ep || !post) return http_send_status(c, 405, rid, "method not allowed on %s", url);
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body_bytes) {
        cc->too_large = true; /* answer before reading the body; MHD closes the connection */
        return start_generation(s, c, cc);
    }
    if (!cl && !MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding")) {
        /* No body follows (RFC 9112 6.3): answer now. Waiting for the final call raced the
         * 100 Continue libmicrohttpd sends for Expect: under load that call came when an answer
         * could no longer be queued, and the connection closed unanswered (found by fuzz_http). */
        http_guard_body_done(guard_record(c));
        return start_generation(s, c, cc);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **req_cls) {
    (void)version;
    http_server *s = cls;
    conn_ctx *cc = *req_cls;
    if (!cc) {
        http_guard_headers_done(guard_record(c));
        if (!(cc = calloc(1, sizeof *cc))) return MHD_NO;
        *req_cls = cc;
        strbuf_init(&cc->body);
        cc->t_start = sol_now_ns();
        make_request_id(s, c, cc->request_id);
        if (!strcmp(method, "GET")) {
            cc->deferred = true;
            return MHD_YES;
        }
        return first_call(s, c, cc, url, method);
    }
    if (cc->deferred) {
        if (*upload_size) {
            cc->get_body = true; /* read and dropped; refused below */
            *upload_size = 0;
            return MHD_YES;
        }
        cc->deferred = false;
        if (cc->get_body)
            return http_send_status(c, 400, cc->request_id, "a GET takes no body%s", NULL);
        return first_call(s, c, cc, url, method);
    }
    if (*upload_size) {
        if (!cc->too_large && cc->body.len + *upload_size <= s->cfg.max_body_bytes)
            strbuf_append(&cc->body, upload, *upload_size);
        else
            cc->too_large = true; /* keep reading and discarding; answer 413 at the end */
        *upload_size = 0;
        return MHD_YES;
    }
    if (!cc->ep) return MHD_NO; /* a response was already queued */
    if (!cc->dispatched) {
        http_guard_body_done(guard_record(c));
        cc->t_start = sol_now_ns();
        enum MHD_Result r = start_generation(s, c, cc);
        if (r != MHD_YES || cc->responded) return r;
    }
    return continue_generation(c, cc);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe) {
    http_server *s = cls;
    conn_ctx *cc = *req_cls;
    http_guard_request_done(guard_record(c));
    if (!cc) return;
    http_stream *st = cc->stream;
    if (st) {
        unlink_stream(s, st);
        pthread_mutex_lock(&st->mu);
        bool cancel = !st->done, abandoned = st->abandoned;
        int status = st->failed ? st->err.status : cancel || abandoned ? 499 : 200;
        st->client_gone = true;
        st->conn = NULL;
        pthread_mutex_unlock(&st->mu);
        if (cancel && s->cfg.backend.cancel)
            s->cfg.backend.cancel(s->cfg.backend.ctx, st->request_id);
        if (cancel)
            LOG_INFO(MOD, "request %s ended early (code %d): cancelled", st->request_id, (int)toe);
        if ((!cancel && !abandoned) || st->failed)
            metrics_observe(s->cfg.metrics, METRIC_E2E, st->pool,
                            (double)(sol_now_ns() - st->t_start) * 1e-9);
        if (st->headers_sent || cancel || abandoned)
            metrics_count_request(s->cfg.metrics, st->pool, status);
        http_stream_unref(st);
    }
    strbuf_free(&cc->body);
    free(cc);
    *req_cls = NULL;
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    http_guard_notify(cls, c, socket_context, toe == MHD_CONNECTION_NOTIFY_STARTED);
}

static void apply_defaults(http_config *c) {
    if (!c->max_body_bytes) c->max_body_bytes = HTTP_DEFAULT_MAX_BODY;
    if (!c->max_header_bytes) c->max_header_bytes = HTTP_DEFAULT_MAX_HEADER;
    if (!c->conn_timeout_s) c->conn_timeout_s = HTTP_DEFAULT_CONN_TIMEOUT_S;
    if (!c->max_connections) c->max_connections = HTTP_DEFAULT_MAX_CONNECTIONS;
    if (!c->max_per_client) c->max_per_client = HTTP_DEFAULT_MAX_PER_CLIENT;
    if (!c->header_timeout_s) c->header_timeout_s = HTTP_DEFAULT_HEADER_TIMEOUT_S;
    if (!c->keepalive_timeout_s) c->keepalive_timeout_s = HTTP_DEFAULT_KEEPALIVE_TIMEOUT_S;
    if (!c->body_timeout_s) c->body_timeout_s = HTTP_DEFAULT_BODY_TIMEOUT_S;
    if (!c->sse_max_buffer) c->sse_max_buffer = HTTP_DEFAULT_SSE_MAX_BUFFER;
    if (!c->threads) c->threads = HTTP_DEFAULT_THREADS;
}

/* libmicrohttpd's per-connection memory holds the header, the read buffer and our response
 * header; a header that does not fit gets its own HTML 431. Twice our limit leaves the JSON 431
 * of first_call() to every header up to about there; only a deliberately huge one still meets
 * libmicrohttpd's page. Not more: libmicrohttpd zeroes the pool between requests, so all of it
 * is resident for every open connection (64 KiB at the default limit). */
static size_t mhd_pool_bytes(const http_config *c) {
    return 2 * c->max_header_bytes + (32u << 10);
}

/* libmicrohttpd's own messages go through Sol's log, so --log-json output stays one JSON object
 * per line. Most are a client leaving mid-request or sending a malformed one (answered with a
 * 400/505 of libmicrohttpd's own), routine on a public server: debug. The rest (a full server, a
 * failed socket call) are the operator's business: warn. The logger must be the first option, or
 * libmicrohttpd prints what comes before it on its own. */
__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    static const char *const routine[] = {"closed when reading",
                                          "Failed to send",
                                          "closure",
                                          "reset by peer",
                                          "Broken pipe",
                                          "closed by remote",
                                          "Error processing request",
                                          "Content-Length' header",
                                          "without `Host' header",
                                          "disconnected when reading"};
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r' || msg[n - 1] == ' '))
        msg[--n] = '\0';
    sol_log_level level = SOL_LOG_WARN;
    for (size_t i = 0; i < sizeof routine / sizeof *routine; i++)
        if (strstr(msg, routine[i])) level = SOL_LOG_DEBUG;
    sol_log(level, "http/mhd", "%s", msg);
}

int http_server_start(const http_config *cfg, http_server **out, sol_err *e) {
    *out = NULL;
    if (!cfg->router || !cfg->backend.dispatch)
        return sol_err_set(e, -EINVAL, "http: a classifier and a backend dispatch are required");
    http_server *s = calloc(1, sizeof *s);
    if (!s) return sol_err_set(e, -ENOMEM, "out of memory");
    s->cfg = *cfg;
    apply_defaults(&s->cfg);
    int rc = http_guard_new(s->cfg.header_timeout_s, s->cfg.keepalive_timeout_s,
                            s->cfg.body_timeout_s, &s->guard, e);
    if (rc) {
        free(s);
        return rc;
    }
    s->id_salt = sol_now_ns() ^ ((uint64_t)getpid() << 32);
    pthread_mutex_init(&s->mu, NULL);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(cfg->port)};
    const char *host = cfg->host ? cfg->host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        pthread_mutex_destroy(&s->mu);
        http_guard_free(s->guard);
        free(s);
        return sol_err_set(e, -EINVAL, "http: listen host '%s' is not an IPv4 address", host);
    }
    s->daemon = MHD_start_daemon(
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL, NULL,
        on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&addr, MHD_OPTION_THREAD_POOL_SIZE, s->cfg.threads,
        MHD_OPTION_CONNECTION_TIMEOUT, s->cfg.conn_timeout_s, MHD_OPTION_CONNECTION_LIMIT,
        s->cfg.max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->cfg.max_per_client,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, mhd_pool_bytes(&s->cfg), MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s->guard, MHD_OPTION_END);
    if (!s->daemon) {
        pthread_mutex_destroy(&s->mu);
        http_guard_free(s->guard);
        free(s);
        return sol_err_set(e, -EADDRINUSE,
                           "http: cannot listen on %s:%u (in use, or no permission)", host,
                           cfg->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    LOG_INFO(MOD, "listening on http://%s:%u", host, s->port);
    *out = s;
    return 0;
}

uint16_t http_server_port(const http_server *s) {
    return s->port;
}

void http_server_stop(http_server *s) {
    if (!s) return;
    /* MHD must not be stopped with suspended connections: end every stream and wake it. */
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    for (http_stream *st = s->streams; st; st = st->next) {
        pthread_mutex_lock(&st->mu);
        if (!st->done) {
            st->done = true;
            if (!st->headers_sent) {
                st->failed = true;
                oai_error_status(&st->err, 503, "server is shutting down");
            }
        }
        if (st->suspended) {
            st->suspended = false;
            MHD_resume_connection(st->conn);
        }
        pthread_mutex_unlock(&st->mu);
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < 100; i++) { /* let the HTTP threads answer the woken connections */
        pthread_mutex_lock(&s->mu);
        bool empty = s->streams == NULL;
        pthread_mutex_unlock(&s->mu);
        if (empty) break;
        sol_sleep_ms(10);
    }
    MHD_stop_daemon(s->daemon);
    http_guard_free(s->guard);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
