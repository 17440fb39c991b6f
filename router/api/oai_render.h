/* oai_render: the responses the OpenAI API promises - response objects, SSE chunks, embeddings
 * lists - built from the router's results. */
#ifndef SOL_OAI_RENDER_H
#define SOL_OAI_RENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "oai_error.h"
#include "oai_request.h"
#include "oai_tools.h"
#include "strbuf.h"

typedef enum {
    OAI_FINISH_NONE = 0, /* more follows: serialized as null */
    OAI_FINISH_STOP,
    OAI_FINISH_LENGTH,
    OAI_FINISH_TOOL_CALLS, /* the model called tools (chat) */
} oai_finish;

typedef struct oai_top_logprob {
    const char *text;
    float logprob;
} oai_top_logprob;

typedef struct oai_token_logprob {
    const char *text;
    float logprob;
    const oai_top_logprob *top;
    size_t n_top;
} oai_token_logprob;

typedef struct oai_usage {
    uint32_t prompt_tokens;
    uint32_t completion_tokens;
    uint32_t cached_tokens;
} oai_usage;

/* One choice of a non-streaming answer; all borrowed. */
typedef struct oai_answer {
    const char *text; /* chat with tools: the text less the calls read out of it */
    size_t text_len;
    const oai_token_logprob *logprobs; /* NULL when not requested */
    size_t n_logprobs;
    oai_finish finish;
    const oai_call *calls; /* chat: tool calls read out of the text */
    size_t n_calls;
    const char *reasoning; /* chat: the reasoning read out of the text (harmony); NULL: none */
    size_t reasoning_len;
} oai_answer;

/* Everything a non-streaming response carries; all borrowed. choices[i] has index i. */
typedef struct oai_response {
    oai_kind kind;
    const char *id;  /* "cmpl-..." / "chatcmpl-..." (see oai_make_id) */
    int64_t created; /* unix seconds */
    const char *model;
    const oai_answer *choices;
    size_t n_choices; /* the request's n (>= 1) */
    oai_usage usage;
} oai_response;

int oai_response_json(strbuf *out, const oai_response *r);

/* /v1/embeddings: {"object":"list","data":[{"object":"embedding","index":i,"embedding":...}],
 * "model":...,"usage":{"prompt_tokens":N,"total_tokens":N}}; vectors as float arrays, or base64
 * of little-endian float32 when asked. */
int oai_embeddings_json(strbuf *out, const char *model, const float *const *vec, const size_t *dim,
                        size_t n, bool base64, uint32_t prompt_tokens);

/* Per-stream SSE state: remembers whether the chat role was sent and the text offset. */
typedef struct oai_stream {
    oai_kind kind;
    char id[64];
    int64_t created;
    char model[128];
    bool include_usage;
    bool want_logprobs;
    bool role_sent;     /* choice 0 (n = 1) */
    uint32_t index;     /* the choice the next chunk is for */
    uint32_t role_mask; /* n > 1: choices whose first chunk (with the role) went out */
    size_t text_offset; /* completions logprobs.text_offset continues across chunks */
} oai_stream;

void oai_stream_init(oai_stream *s, const oai_request *req, const char *id, int64_t created);
/* One `data: {...}\n\n` chunk with a text delta (may be empty) and, when finish != NONE, the
 * finish_reason. For chat the first chunk also carries delta.role = "assistant". */
int oai_sse_chunk(strbuf *out, oai_stream *s, const char *text, size_t len,
                  const oai_token_logprob *lp, size_t n_lp, oai_finish finish);
/* A chat chunk whose delta carries reasoning_content (vLLM's field for a reasoning model's
 * thinking; harmony's analysis channel). */
int oai_sse_reasoning(strbuf *out, oai_stream *s, const char *text, size_t len);
/* A chunk whose delta carries tool calls[from, n) (each whole: id, name, all the arguments). */
int oai_sse_tool_calls(strbuf *out, oai_stream *s, const oai_call *calls, size_t from, size_t n);
/* The usage chunk (choices: []) sent after the final chunk when include_usage is set. */
int oai_sse_usage(strbuf *out, const oai_stream *s, const oai_usage *u);
/* An error in the middle of a stream: `data: {"error":{...}}\n\n`. */
int oai_sse_error(strbuf *out, const oai_error *e);
int oai_sse_done(strbuf *out); /* data: [DONE]\n\n */

/* "cmpl-" or "chatcmpl-" followed by the request id (already unique per router). */
void oai_make_id(char *dst, size_t cap, oai_kind kind, const char *request_id);

const char *oai_finish_name(oai_finish f); /* "stop" | "length" | NULL */

#endif
