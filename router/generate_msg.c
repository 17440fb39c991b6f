/* generate_msg: the only place that maps OpenAI request fields onto Sol__Generate. Runs on the
 * HTTP thread that accepted the request, so the broker thread only copies finished bytes. */
#include "generate_msg.h"

#include <errno.h>
#include <stdlib.h>

#include "frame.h"

int genmsg_encode(const oai_request *req, const char *request_id, uint8_t **out, size_t *len,
                  sol_err *e) {
    *out = NULL;
    Sol__Generate g = SOL__GENERATE__INIT;
    Sol__SamplingParams sp = SOL__SAMPLING_PARAMS__INIT;
    sol_sampling_to_msg(&req->sampling, &sp);
    g.request_id = (char *)request_id;
    g.sampling = &sp;
    g.max_tokens = req->max_tokens; /* chat without max_tokens: 0 = up to the context */
    g.stop = (char **)req->stop;
    g.n_stop = req->n_stop;
    g.priority = req->priority;
    g.tags = (char **)req->tags;
    g.n_tags = req->n_tags;
    g.add_bos = 1;
    g.cache_salt = req->cache_salt ? req->cache_salt : "";
    g.grammar = req->grammar ? req->grammar : "";
    g.bias_tokens = req->bias_tokens;
    g.n_bias_tokens = req->n_bias;
    g.bias_values = req->bias_values;
    g.n_bias_values = req->n_bias;
    Sol__ChatMessage *msgs = NULL;
    Sol__ChatMessage **ptrs = NULL;
    if (req->kind == OAI_CHAT) {
        msgs = calloc(req->n_messages ? req->n_messages : 1, sizeof *msgs);
        ptrs = calloc(req->n_messages ? req->n_messages : 1, sizeof *ptrs);
        if (!msgs || !ptrs) {
            free(msgs);
            free(ptrs);
            return sol_err_set(e, -ENOMEM, "out of memory building the request");
        }
        for (size_t i = 0; i < req->n_messages; i++) {
            sol__chat_message__init(&msgs[i]);
            msgs[i].role = req->messages[i].role;
            msgs[i].content = req->messages[i].content ? req->messages[i].content : "";
            ptrs[i] = &msgs[i];
        }
        g.messages = ptrs;
        g.n_messages = req->n_messages;
        g.prompt = "";
    } else {
        g.prompt = req->prompt ? req->prompt : "";
    }
    Sol__Envelope env;
    frame_wrap_generate(&env, &g);
    int rc = frame_encode(&env, out, len, e);
    free(msgs);
    free(ptrs);
    return rc;
}
