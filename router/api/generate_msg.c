/* generate_msg: the only place that maps OpenAI request fields onto Sol__Generate. Runs on the
 * HTTP thread that accepted the request, so the broker thread only copies finished bytes. */
#include "generate_msg.h"

#include <errno.h>
#include <stdlib.h>

#include "frame.h"

int genmsg_encode(const oai_request *req, const char *request_id, uint32_t choice, uint8_t **out,
                  size_t *len, sol_err *e) {
    *out = NULL;
    Sol__Generate g = SOL__GENERATE__INIT;
    Sol__SamplingParams sp = SOL__SAMPLING_PARAMS__INIT;
    sol_sampling s = req->sampling;
    s.seed += choice; /* each of the n samples its own stream; without a seed the worker picks */
    sol_sampling_to_msg(&s, &sp);
    g.request_id = (char *)request_id;
    g.sampling = &sp;
    g.max_tokens = req->max_tokens; /* chat without max_tokens: 0 = up to the context */
    g.stop = (char **)req->stop;
    g.n_stop = req->n_stop;
    g.priority = req->priority;
    g.tags = (char **)req->tags;
    g.n_tags = req->n_tags;
    g.add_bos = 1;
    g.traceparent = (char *)req->traceparent;
    g.cache_salt = req->cache_salt ? req->cache_salt : "";
    g.grammar = req->grammar ? req->grammar : "";
    g.bias_tokens = req->bias_tokens;
    g.n_bias_tokens = req->n_bias;
    g.bias_values = req->bias_values;
    g.n_bias_values = req->n_bias;
    Sol__ChatMessage *msgs = NULL;
    Sol__ChatMessage **ptrs = NULL;
    Sol__ToolCall *calls = NULL, **call_ptrs = NULL;
    const char *opening = oai_tools_text_token(&req->tools); /* lives until packed */
    if (oai_tools_active(&req->tools)) {
        g.tools = (char **)req->tools.json;
        g.n_tools = req->tools.n;
        g.tool_format = (char *)oai_tool_format_name(req->tools.format);
        if (opening) g.text_tokens = (char **)&opening, g.n_text_tokens = 1;
    }
    if (req->kind == OAI_CHAT) {
        size_t n_calls = 0;
        for (size_t i = 0; i < req->n_messages; i++)
            n_calls += req->messages[i].n_calls;
        msgs = calloc(req->n_messages ? req->n_messages : 1, sizeof *msgs);
        ptrs = calloc(req->n_messages ? req->n_messages : 1, sizeof *ptrs);
        calls = calloc(n_calls ? n_calls : 1, sizeof *calls);
        call_ptrs = calloc(n_calls ? n_calls : 1, sizeof *call_ptrs);
        if (!msgs || !ptrs || !calls || !call_ptrs) {
            free(msgs), free(ptrs), free(calls), free(call_ptrs);
            return sol_err_set(e, -ENOMEM, "out of memory building the request");
        }
        for (size_t i = 0, c = 0; i < req->n_messages; i++) {
            const oai_message *m = &req->messages[i];
            sol__chat_message__init(&msgs[i]);
            msgs[i].role = m->role;
            msgs[i].content = m->content ? m->content : "";
            msgs[i].tool_call_id = m->tool_call_id ? m->tool_call_id : "";
            msgs[i].tool_calls = call_ptrs + c;
            msgs[i].n_tool_calls = m->n_calls;
            for (size_t j = 0; j < m->n_calls; j++, c++) {
                sol__tool_call__init(&calls[c]);
                calls[c].id = m->calls[j].id;
                calls[c].name = m->calls[j].name;
                calls[c].arguments = m->calls[j].arguments;
                call_ptrs[c] = &calls[c];
            }
            ptrs[i] = &msgs[i];
        }
        g.messages = ptrs;
        g.n_messages = req->n_messages;
        g.prompt = "";
    } else if (req->kind == OAI_EMBEDDING) {
        g.prompt = req->inputs[choice] ? req->inputs[choice] : "";
        g.embed = 1;
        g.max_tokens = 1; /* room for the sampling row the embedding is read at */
    } else {
        g.prompt = req->prompt ? req->prompt : "";
    }
    Sol__Envelope env;
    frame_wrap_generate(&env, &g);
    int rc = frame_encode(&env, out, len, e);
    free(msgs);
    free(ptrs);
    free(calls), free(call_ptrs);
    return rc;
}
