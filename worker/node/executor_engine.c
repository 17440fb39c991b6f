/* executor_engine: the executor interface over the serving engine (engine.h). Loads the model,
 * tokenizer and KV pool, turns a Generate into an engine_request, and each engine event (one per
 * token, then a finish) into a TokenChunk on the event queue. engine events arrive on the engine
 * thread, which is therefore the event queue's writer.
 *
 * request_id -> engine id for Cancel: records are allocated on the link thread at submit and
 * referenced by the engine thread through engine_request.user; the engine thread's last act on
 * one is to set `done` (release), after which the link thread may free it (acquire). */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "engine.h"
#include "executor.h"
#include "frame.h"
#include "log.h"

typedef struct eng_rec {
    char id[SOL_FRAME_MAX_ID_BYTES + 1];
    uint64_t eid;
    uint32_t seq; /* engine thread */
    atomic_bool done;
    struct eng_rec *next; /* link thread's list */
} eng_rec;

typedef struct eng_exec {
    executor base;
    exec_info info;
    sol_backend *be; /* borrowed from exec_engine_config */
    model *draft;    /* speculative decoding's draft model, or NULL */
    model *m;
    tokenizer *tok;
    engine *eng;
    exec_events *events;
    eng_rec *recs; /* link thread */
    atomic_uint inflight;
    chat_template_family family; /* the template chat requests are rendered with */
} eng_exec;

static Sol__FinishReason finish_of(engine_finish_reason f) {
    switch (f) {
    case ENGINE_FINISH_STOP:
        return SOL__FINISH_REASON__FINISH_STOP;
    case ENGINE_FINISH_LENGTH:
        return SOL__FINISH_REASON__FINISH_LENGTH;
    case ENGINE_FINISH_CANCELLED:
        return SOL__FINISH_REASON__FINISH_CANCELLED;
    case ENGINE_FINISH_ERROR:
        return SOL__FINISH_REASON__FINISH_ERROR;
    default:
        return SOL__FINISH_REASON__FINISH_NONE;
    }
}

/* Engine thread. */
static void on_event(void *ctx, const engine_event *ev) {
    eng_exec *x = ctx;
    eng_rec *r = ev->user;
    char text[4096];
    size_t n = ev->text_len < sizeof text - 1 ? ev->text_len : sizeof text - 1;
    if (ev->text_len >= sizeof text) LOG_WARN("engine", "request %s: text delta truncated", r->id);
    memcpy(text, ev->text ? ev->text : "", n);
    text[n] = '\0';
    Sol__TokenChunk c = SOL__TOKEN_CHUNK__INIT;
    Sol__Usage u = SOL__USAGE__INIT;
    Sol__TokenLogprob lp = SOL__TOKEN_LOGPROB__INIT, *lpp = &lp;
    Sol__TopLogprob top[SAMPLER_MAX_LOGPROBS], *topp[SAMPLER_MAX_LOGPROBS];
    uint32_t tok;
    c.request_id = r->id;
    c.text = text;
    c.seq = r->seq++;
    if (ev->kind == ENGINE_EV_TOKEN && ev->token >= 0) {
        tok = (uint32_t)ev->token;
        c.token_ids = &tok;
        c.n_token_ids = 1;
        if (ev->sample && (ev->sample->logprob < 0 || ev->sample->n_top > 0)) {
            lp.token = tok;
            lp.logprob = ev->sample->logprob;
            for (int32_t i = 0; i < ev->sample->n_top && i < SAMPLER_MAX_LOGPROBS; i++) {
                sol__top_logprob__init(&top[i]);
                top[i].token = (uint32_t)ev->sample->top[i].token;
                top[i].logprob = ev->sample->top[i].logprob;
                topp[i] = &top[i];
            }
            lp.top = topp;
            lp.n_top = (size_t)(ev->sample->n_top > 0 ? ev->sample->n_top : 0);
            c.logprobs = &lpp;
            c.n_logprobs = 1;
        }
    }
    if (ev->kind == ENGINE_EV_FINISH) {
        c.finish_reason = finish_of(ev->finish);
        if (c.finish_reason == SOL__FINISH_REASON__FINISH_NONE)
            c.finish_reason = SOL__FINISH_REASON__FINISH_STOP;
        if (c.finish_reason == SOL__FINISH_REASON__FINISH_ERROR)
            c.error = (char *)(ev->error && ev->error[0] ? ev->error : "engine error");
        u.prompt_tokens = (uint32_t)ev->usage.prompt_tokens;
        u.completion_tokens = (uint32_t)ev->usage.completion_tokens;
        u.cached_tokens = (uint32_t)ev->usage.cached_tokens;
        c.usage = &u;
        c.embedding = (float *)ev->embedding; /* read only: the message is packed at once */
        c.n_embedding = ev->embedding ? (size_t)ev->embedding_dim : 0;
    }
    sol_err err = {0};
    if (exec_events_push(x->events, &c, &err) < 0)
        LOG_ERROR("engine", "request %s: chunk dropped: %s", r->id, err.msg);
    if (ev->kind == ENGINE_EV_FINISH) {
        atomic_fetch_sub(&x->inflight, 1);
        atomic_store_explicit(&r->done, true, memory_order_release);
    }
}

/* Link thread: free the records the engine thread is finished with. */
static void sweep(eng_exec *x) {
    for (eng_rec **pp = &x->recs; *pp;) {
        eng_rec *r = *pp;
        if (atomic_load_explicit(&r->done, memory_order_acquire)) {
            *pp = r->next;
            free(r);
        } else {
            pp = &r->next;
        }
    }
}

static sampler_params sampling_of(const Sol__Generate *g) {
    sampler_params p = sol_sampling_from_msg(g->sampling);
    if (!p.has_seed) p.seed = sol_now_ns();
    return p;
}

static int eng_submit(void *self, const Sol__Generate *g, sol_err *e) {
    eng_exec *x = self;
    sweep(x);
    if (g->n_resume_tokens == 0 && g->resume_text && g->resume_text[0])
        return sol_err_set(e, -EINVAL,
                           "request %s: resume_text without resume_tokens; the "
                           "engine resumes from token ids",
                           g->request_id);
    const char *want = g->tool_format, *have = chat_template_tool_format(x->family);
    if (want && want[0] && (!have || strcmp(want, have)))
        return sol_err_set(e, -EINVAL,
                           "request %s: the router parses tool calls as %s, but this worker's "
                           "chat template (%s) writes %s",
                           g->request_id, want, chat_template_name(x->family),
                           have ? have : "none");
    eng_rec *r = calloc(1, sizeof *r);
    chat_message *msgs = g->n_messages ? calloc(g->n_messages, sizeof *msgs) : NULL;
    if (!r || (g->n_messages && !msgs)) {
        free(r);
        free(msgs);
        return sol_err_set(e, -ENOMEM, "out of memory for request %s", g->request_id);
    }
    snprintf(r->id, sizeof r->id, "%s", g->request_id);
    size_t n_calls = 0;
    for (size_t i = 0; i < g->n_messages; i++)
        n_calls += g->messages[i]->n_tool_calls;
    chat_tool_call *calls = n_calls ? calloc(n_calls, sizeof *calls) : NULL;
    if (n_calls && !calls) {
        free(r), free(msgs);
        return sol_err_set(e, -ENOMEM, "out of memory for request %s", g->request_id);
    }
    for (size_t i = 0, c = 0; i < g->n_messages; i++) {
        const Sol__ChatMessage *m = g->messages[i];
        msgs[i] = (chat_message){.role = m->role, .content = m->content};
        msgs[i].tool_call_id = m->tool_call_id;
        /* "" on the wire: none given (a family without reasoning refuses only a real one) */
        msgs[i].reasoning_content =
            m->reasoning_content && *m->reasoning_content ? m->reasoning_content : NULL;
        msgs[i].tool_calls = calls + c;
        msgs[i].n_tool_calls = m->n_tool_calls;
        /* ids are below the vocabulary's size (checked with the prompt): int32's range */
        msgs[i].content_ids = (const int32_t *)m->content_ids;
        msgs[i].n_content_ids = m->n_content_ids;
        /* OpenAI sends arguments as JSON-encoded text: printed as they are */
        for (size_t j = 0; j < m->n_tool_calls; j++)
            calls[c++] = (chat_tool_call){m->tool_calls[j]->id, m->tool_calls[j]->name,
                                          m->tool_calls[j]->arguments, true};
    }
    engine_request q = {0};
    if (g->n_messages) {
        q.messages = msgs;
        q.n_messages = g->n_messages;
    } else {
        q.prompt_text = g->prompt ? g->prompt : "";
    }
    q.add_bos = -1;
    q.sampling = sampling_of(g);
    q.max_tokens = (int32_t)g->max_tokens;
    q.stop = (const char *const *)g->stop;
    q.n_stop = g->n_stop;
    q.priority = g->priority;
    q.deadline_ns = g->deadline_ms ? sol_now_ns() + g->deadline_ms * 1000000ull : 0;
    q.first_due_ns = g->ttft_ms ? sol_now_ns() + g->ttft_ms * 1000000ull : 0;
    q.tpot_ms = g->tpot_ms;
    q.cache_salt = g->cache_salt;
    q.embed = g->embed;
    q.tools = (const char *const *)g->tools;
    q.n_tools = g->n_tools;
    q.grammar = g->grammar && g->grammar[0] ? g->grammar : NULL;
    q.text_tokens = (const char *const *)g->text_tokens;
    q.n_text_tokens = (int32_t)g->n_text_tokens;
    q.bias_tokens = (const int32_t *)g->bias_tokens; /* checked against the vocabulary */
    q.bias_values = g->bias_values;
    q.n_bias = (int32_t)g->n_bias_tokens;
    q.resume_tokens = (const int32_t *)g->resume_tokens; /* ids fit in int32 (vocab size) */
    q.n_resume_tokens = (int32_t)g->n_resume_tokens;
    q.user = r;
    prefix_chain chain; /* as the router computed it (the same function, the same message) */
    pc_of_generate(g, &chain);
    q.chain = &chain;
    atomic_fetch_add(&x->inflight, 1);
    int64_t id = engine_submit(x->eng, &q, e);
    free(msgs);
    free(calls);
    if (id < 0) {
        atomic_fetch_sub(&x->inflight, 1);
        free(r);
        return (int)id;
    }
    r->eid = (uint64_t)id;
    r->next = x->recs;
    x->recs = r;
    return 0;
}

static size_t eng_kv_events(void *self, kv_link_event *out, size_t cap, bool *lost) {
    return engine_kv_events(((eng_exec *)self)->eng, out, cap, lost);
}

static size_t eng_kv_held(void *self, kv_link_event *out, size_t cap) {
    return engine_kv_held(((eng_exec *)self)->eng, out, cap);
}

static void eng_cancel(void *self, const char *request_id) {
    eng_exec *x = self;
    for (eng_rec *r = x->recs; r; r = r->next)
        if (!atomic_load_explicit(&r->done, memory_order_acquire) &&
            strcmp(r->id, request_id) == 0) {
            engine_cancel(x->eng, r->eid);
            return;
        }
}

static void eng_info(void *self, exec_info *out) {
    *out = ((eng_exec *)self)->info;
}

static void eng_stats(void *self, exec_stats *out) {
    eng_exec *x = self;
    engine_stats st;
    engine_get_stats(x->eng, &st);
    memset(out, 0, sizeof *out);
    out->running = (uint32_t)st.running;
    out->waiting = (uint32_t)st.waiting;
    out->preempted = (uint32_t)st.preempted;
    out->total_blocks = (uint32_t)st.total_blocks;
    out->free_blocks =
        (uint32_t)(st.free_blocks < st.total_blocks ? st.free_blocks : st.total_blocks);
    out->prefix_hit_rate =
        st.prefix_hit_rate >= 0 && st.prefix_hit_rate <= 1 ? st.prefix_hit_rate : 0;
    out->tokens_per_s = st.tokens_per_s >= 0 ? st.tokens_per_s : 0;
    out->spec_acceptance = st.spec_acceptance; /* 0 until a draft was verified */
    out->engine_steps = st.steps;
    out->tier1_hit_tokens = st.tier1_hit_tokens;
    out->tier2_hit_tokens = st.tier2_hit_tokens;
    out->tier2_blocks = (uint32_t)st.tier2_blocks;
    out->tier2_used = (uint32_t)st.tier2_used;
    out->quotes_used = st.quotes_used;
    out->quotes_declined = st.quotes_declined;
    out->spec_steps = st.spec.steps;
    out->spec_drafted = st.spec.drafted;
    out->spec_accepted = st.spec.accepted;
    out->spec_emitted = st.spec.emitted;
    out->spec_draft_seconds = (double)st.spec.draft_ns / 1e9;
    out->spec_verify_seconds = (double)st.spec.verify_ns / 1e9;
    snprintf(out->unhealthy, sizeof out->unhealthy, "%s", st.unhealthy);
}

static bool eng_idle(void *self) {
    return atomic_load(&((eng_exec *)self)->inflight) == 0;
}

static void eng_free(void *self) {
    eng_exec *x = self;
    if (!x) return;
    engine_free(x->eng);  /* joins the engine thread: no more events after this */
    model_free(x->draft); /* after the engine: its drafter borrowed it */
    for (eng_rec *r = x->recs, *n; r; r = n) {
        n = r->next;
        free(r);
    }
    tokenizer_free(x->tok);
    model_free(x->m);
    free(x);
}

static const executor_ops k_engine_ops = {
    .submit = eng_submit,
    .cancel = eng_cancel,
    .info = eng_info,
    .stats = eng_stats,
    .idle = eng_idle,
    .free = eng_free,
    .kv_events = eng_kv_events,
    .kv_held = eng_kv_held,
};

/* worker.speculative into the engine config; a draft model shares the target's backend (one
 * thread pool: draft and verify passes never run at the same time). */
static int load_spec(eng_exec *x, const exec_engine_config *w, int flags, engine_config *ec,
                     sol_err *e) {
    ec->spec_method = (engine_spec_method)w->spec_method;
    ec->spec_k = w->spec_k > 0 ? w->spec_k : 4;
    ec->spec_adaptive = w->spec_adaptive;
    if (w->spec_method != ENGINE_SPEC_DRAFT) return 0;
    if (!w->draft_model || !w->draft_model[0])
        return sol_err_set(e, -EINVAL,
                           "worker.speculative.method is draft but worker.speculative.draft_model "
                           "is not set; expected a GGUF file (--draft-model)");
    uint64_t t0 = sol_now_ms();
    if (!(x->draft = model_load(w->draft_model, flags, x->be, e))) return e->code ? e->code : -EIO;
    const model_hparams *hp = model_get_hparams(x->draft);
    LOG_INFO("engine", "draft model %s: %d layers, dim %d, weights %s; loaded in %" PRIu64 " ms",
             model_name(x->draft), hp->n_layers, hp->dim, sol_dtype_name(hp->weight_type),
             sol_now_ms() - t0);
    ec->draft_model = x->draft;
    return 0;
}

static int load(eng_exec *x, const exec_engine_config *w, sol_err *e) {
    uint64_t t0 = sol_now_ms();
    LOG_INFO("engine", "loading %s (%s%s) on backend %s", w->model, w->mmap ? "mmap" : "no-mmap",
             w->mlock ? ", mlock" : "", sol_backend_name(w->be));
    x->be = w->be;
    int flags = (w->mmap ? 0 : GGUF_OPEN_NO_MMAP) | (w->mlock ? GGUF_OPEN_MLOCK : 0);
    if (!(x->m = model_load_tp(w->model, flags, x->be, &w->tp, e))) return e->code ? e->code : -EIO;
    if (!(x->tok = tokenizer_from_gguf(model_gguf(x->m), e))) return e->code ? e->code : -EIO;
    const model_hparams *hp = model_get_hparams(x->m);
    char desc[256];
    model_describe(x->m, desc, sizeof desc);
    LOG_INFO("engine",
             "model %s: %s; %d layers, dim %d, %d heads (%d kv, %d dims), vocab %d, context %d; "
             "tensor parallel %d; loaded in %" PRIu64 " ms",
             model_name(x->m), desc, hp->n_layers, hp->dim, hp->n_heads, hp->n_kv_heads,
             hp->head_dim, hp->n_vocab, hp->ctx_len, model_tp_size(x->m), sol_now_ms() - t0);
    engine_config ec = engine_config_default();
    ec.block_size = w->block_size;
    ec.num_blocks = w->num_blocks;
    ec.memory_fraction = w->memory_fraction;
    ec.max_model_len = w->max_model_len < hp->ctx_len ? w->max_model_len : hp->ctx_len;
    ec.kv_dtype = w->kv_f32 ? SOL_DT_F32 : SOL_DT_F16;
    ec.tier2_blocks = w->tier2_blocks;
    ec.tier2_dir = w->tier2_dir;
    ec.max_num_seqs = w->max_num_seqs;
    ec.max_batched_tokens = w->max_batched_tokens;
    ec.prefix_caching = w->prefix_caching;
    ec.chat_template = w->chat_template;
    ec.pooling = (engine_pooling)w->embedding_pooling;
    int rc = load_spec(x, w, flags, &ec, e);
    if (rc) return rc;
    ec.on_event = on_event;
    ec.event_ctx = x;
    if (!(x->eng = engine_new(&ec, x->m, x->tok, e))) return e->code ? e->code : -EIO;
    engine_stats st;
    engine_get_stats(x->eng, &st);
    LOG_INFO("engine", "KV pool: %d blocks of %d tokens; max_model_len %d, max_num_seqs %d",
             st.total_blocks, st.block_size, st.max_model_len, ec.max_num_seqs);
    exec_info *in = &x->info;
    snprintf(in->model, sizeof in->model, "%s",
             w->served_model_name ? w->served_model_name : model_name(x->m));
    snprintf(in->backend, sizeof in->backend, "%s", sol_backend_name(x->be));
    const char *src = NULL;
    sol_err ignore = {0};
    if (gguf_get_kv(model_gguf(x->m), "tokenizer.chat_template"))
        gguf_get_str(model_gguf(x->m), "tokenizer.chat_template", &src, &ignore);
    x->family = chat_template_detect(src);
    if (w->chat_template && w->chat_template[0]) /* checked by engine_new already */
        chat_template_from_name(w->chat_template, &x->family, &ignore);
    snprintf(in->chat_template, sizeof in->chat_template, "%s", chat_template_name(x->family));
    const char *fmt = chat_template_tool_format(x->family);
    snprintf(in->tool_format, sizeof in->tool_format, "%s", fmt ? fmt : "");
    in->max_context = (uint32_t)st.max_model_len;
    in->capacity = (uint32_t)ec.max_num_seqs;
    in->speculative = st.speculative;
    return 0;
}

int exec_engine_new(const exec_engine_config *w, exec_events *events, executor **out, sol_err *e) {
    *out = NULL;
    if (!w->model || !w->model[0])
        return sol_err_set(e, -EINVAL, "worker.model is not set; expected a GGUF file (--model)");
    eng_exec *x = calloc(1, sizeof *x);
    if (!x) return sol_err_set(e, -ENOMEM, "out of memory for the engine");
    x->base.ops = &k_engine_ops;
    x->base.self = x;
    x->events = events;
    int rc = load(x, w, e);
    if (rc < 0) {
        eng_free(x);
        return rc;
    }
    *out = &x->base;
    return 0;
}
