/* generate_msg: the only place that maps OpenAI request fields onto Sol__Generate. Runs on the
 * HTTP thread that accepted the request; the broker thread receives the built message through its
 * in-process pipe (a pointer, no bytes) and packs it once per attempt. */
#include "generate_msg.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

struct genmsg {
    Sol__Envelope env; /* wraps g */
    Sol__Generate g;
    Sol__SamplingParams sp;
    Sol__ChatMessage *msgs, **ptrs;
    Sol__ToolCall *calls, **call_ptrs;
    char request_id[];
};

void genmsg_free(genmsg *m) {
    if (!m) return;
    free(m->msgs), free(m->ptrs), free(m->calls), free(m->call_ptrs);
    free(m);
}

Sol__Envelope *genmsg_envelope(genmsg *m) {
    return &m->env;
}

/* Chat: the messages and their tool calls, borrowing the request's strings. */
static int chat_messages(genmsg *m, const oai_request *req, sol_err *e) {
    size_t n_calls = 0;
    for (size_t i = 0; i < req->n_messages; i++)
        n_calls += req->messages[i].n_calls;
    m->msgs = calloc(req->n_messages ? req->n_messages : 1, sizeof *m->msgs);
    m->ptrs = calloc(req->n_messages ? req->n_messages : 1, sizeof *m->ptrs);
    m->calls = calloc(n_calls ? n_calls : 1, sizeof *m->calls);
    m->call_ptrs = calloc(n_calls ? n_calls : 1, sizeof *m->call_ptrs);
    if (!m->msgs || !m->ptrs || !m->calls || !m->call_ptrs)
        return sol_err_set(e, -ENOMEM, "out of memory building the request");
    for (size_t i = 0, c = 0; i < req->n_messages; i++) {
        const oai_message *om = &req->messages[i];
        Sol__ChatMessage *cm = &m->msgs[i];
        sol__chat_message__init(cm);
        cm->role = om->role;
        cm->content = om->content ? om->content : "";
        cm->tool_call_id = om->tool_call_id ? om->tool_call_id : "";
        cm->reasoning_content = om->reasoning ? om->reasoning : "";
        cm->tool_calls = m->call_ptrs + c;
        cm->n_tool_calls = om->n_calls;
        for (size_t j = 0; j < om->n_calls; j++, c++) {
            sol__tool_call__init(&m->calls[c]);
            m->calls[c].id = om->calls[j].id;
            m->calls[c].name = om->calls[j].name;
            m->calls[c].arguments = om->calls[j].arguments;
            m->call_ptrs[c] = &m->calls[c];
        }
        m->ptrs[i] = cm;
    }
    m->g.messages = m->ptrs;
    m->g.n_messages = req->n_messages;
    m->g.prompt = "";
    return 0;
}

int genmsg_new(const oai_request *req, const char *request_id, uint32_t choice, genmsg **out,
               sol_err *e) {
    *out = NULL;
    size_t id_len = strlen(request_id);
    genmsg *m = calloc(1, sizeof *m + id_len + 1);
    if (!m) return sol_err_set(e, -ENOMEM, "out of memory building the request");
    memcpy(m->request_id, request_id, id_len + 1);
    sol__generate__init(&m->g);
    sol__sampling_params__init(&m->sp);
    sol_sampling s = req->sampling;
    s.seed += choice; /* each of the n samples its own stream; without a seed the worker picks */
    sol_sampling_to_msg(&s, &m->sp);
    m->g.request_id = m->request_id;
    m->g.sampling = &m->sp;
    m->g.max_tokens = req->max_tokens; /* chat without max_tokens: 0 = up to the context */
    m->g.stop = (char **)req->stop;
    m->g.n_stop = req->n_stop;
    m->g.priority = req->priority;
    m->g.tags = (char **)req->tags;
    m->g.n_tags = req->n_tags;
    m->g.add_bos = 1;
    m->g.traceparent = (char *)req->traceparent;
    m->g.cache_salt = req->cache_salt ? req->cache_salt : "";
    m->g.grammar = req->grammar ? req->grammar : "";
    m->g.bias_tokens = req->bias_tokens;
    m->g.n_bias_tokens = req->n_bias;
    m->g.bias_values = req->bias_values;
    m->g.n_bias_values = req->n_bias;
    if (oai_tools_active(&req->tools)) {
        m->g.tools = (char **)req->tools.json;
        m->g.n_tools = req->tools.n;
        m->g.tool_format = (char *)oai_tool_format_name(req->tools.format);
    }
    if (req->kind == OAI_CHAT) { /* the control tokens the call parser reads as text */
        size_t nt = 0;
        const char *const *tt = oai_tools_text_tokens(&req->tools, &nt);
        m->g.text_tokens = (char **)tt, m->g.n_text_tokens = nt;
    }
    int rc = 0;
    if (req->kind == OAI_CHAT) {
        rc = chat_messages(m, req, e);
    } else if (req->kind == OAI_EMBEDDING) {
        m->g.prompt = req->inputs[choice] ? req->inputs[choice] : "";
        m->g.embed = 1;
        m->g.max_tokens = 1; /* room for the sampling row the embedding is read at */
    } else {
        m->g.prompt = req->prompt ? req->prompt : "";
    }
    frame_wrap_generate(&m->env, &m->g);
    size_t len;
    if (!rc) rc = frame_measure(&m->env, &len, e); /* the wire's rules, checked once */
    if (rc) return genmsg_free(m), rc;
    *out = m;
    return 0;
}
