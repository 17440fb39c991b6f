/* openai: parse and validate OpenAI /v1/completions and /v1/chat/completions bodies into plain C
 * structs, and build the response objects, SSE chunks and error bodies the API promises. */
#ifndef SOL_OPENAI_H
#define SOL_OPENAI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "oai_tools.h"
#include "sampling.h"
#include "strbuf.h"

#define OAI_MAX_STOP 4      /* OpenAI accepts up to 4 stop sequences */
#define OAI_MAX_LOGPROBS 20 /* completions `logprobs` and chat `top_logprobs` upper bound */
#define OAI_MAX_TOKENS_LIMIT (1u << 20) /* sanity bound; workers clamp to their context */
#define OAI_MAX_TAGS 16
#define OAI_MAX_MESSAGES 4096
#define OAI_DEFAULT_MAX_TOKENS 16 /* completions default, as in OpenAI */
#define OAI_MAX_N 16              /* samples per request (`n`) */

typedef enum { OAI_COMPLETION = 0, OAI_CHAT = 1, OAI_EMBEDDING = 2 } oai_kind;

typedef enum {
    OAI_FINISH_NONE = 0, /* more follows: serialized as null */
    OAI_FINISH_STOP,
    OAI_FINISH_LENGTH,
    OAI_FINISH_TOOL_CALLS, /* the model called tools (chat) */
} oai_finish;

typedef struct oai_msg_call {
    char *id, *name, *arguments; /* arguments: the JSON text the client sent */
} oai_msg_call;

typedef struct oai_message {
    char *role;          /* system | user | assistant | tool */
    char *content;       /* text parts joined (array content is concatenated without separator) */
    oai_msg_call *calls; /* assistant: tool_calls */
    size_t n_calls;
    char *tool_call_id; /* tool: the call this answers */
} oai_message;

/* A validated request. Every string is owned by the struct; free with oai_request_free. */
typedef struct oai_request {
    oai_kind kind;
    char traceparent[56]; /* W3C trace context from the HTTP header ("" = none), checked */
    char *model;
    char *prompt;          /* completions only */
    oai_message *messages; /* chat only */
    size_t n_messages;
    uint32_t max_tokens; /* completions: default 16; chat: 0 = not given (worker's context) */
    bool max_tokens_set;
    sol_sampling sampling; /* top_k defaults to OpenAI's -1 (off); n_logprobs is completions'
                            * `logprobs` value or chat's `top_logprobs` */
    char *stop[OAI_MAX_STOP];
    size_t n_stop;
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    char *user;
    int32_t priority;
    char *cache_salt;
    char *grammar;             /* GBNF of the output constraint (oai_constraint.h), or NULL */
    const char *grammar_field; /* the request field it came from */
    oai_tools tools;           /* chat: tools, tool_choice, parallel_tool_calls */
    uint32_t n;                /* samples (choices), 1..OAI_MAX_N; embeddings: the inputs */
    char *inputs[OAI_MAX_N];   /* embeddings: `input`, one string each */
    bool base64;               /* embeddings: encoding_format base64 */
    uint32_t *bias_tokens;     /* logit_bias, n_bias entries (token ids checked by the worker) */
    float *bias_values;
    size_t n_bias;
    char *tags[OAI_MAX_TAGS];
    size_t n_tags;
} oai_request;

/* What went wrong, ready to be rendered by oai_error_json. Strings are NUL-terminated. */
typedef struct oai_error {
    int status;     /* HTTP status: 400, 401, 404, 413, 429, 500, 503 */
    char type[40];  /* invalid_request_error, authentication_error, ... */
    char code[40];  /* "" = null */
    char param[64]; /* "" = null */
    char message[384];
    int retry_after_s; /* > 0: send Retry-After (429, 503) */
} oai_error;

/* Parse `body` (need not be NUL-terminated). On success *out is a new request the caller frees.
 * On failure returns -EINVAL (or -ENOMEM) and fills *err with a 400 body description. */
int oai_parse_request(oai_kind kind, const char *body, size_t len, oai_request **out,
                      oai_error *err);
void oai_request_free(oai_request *r);

/* The text the router routes on: the prompt, or every message's content joined by "\n". */
int oai_request_text(const oai_request *r, strbuf *out);
/* The last user message (chat) or the prompt (completions); borrowed, never NULL. */
const char *oai_request_last_user_text(const oai_request *r);

/* Fill *e. `param`/`code` may be NULL. Returns e->status. */
int oai_error_set(oai_error *e, int status, const char *type, const char *code, const char *param,
                  const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Ready-made errors with the OpenAI type/code for each status. */
int oai_error_status(oai_error *e, int status, const char *message);
/* {"error":{"message":...,"type":...,"param":...,"code":...}} */
int oai_error_json(strbuf *out, const oai_error *e);

/* --- responses ------------------------------------------------------------------------------ */

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

/* Everything a non-streaming response carries; all borrowed. */
typedef struct oai_response {
    oai_kind kind;
    const char *id;  /* "cmpl-..." / "chatcmpl-..." (see oai_make_id) */
    int64_t created; /* unix seconds */
    const char *model;
    const char *text;
    size_t text_len;
    const oai_token_logprob *logprobs; /* NULL when not requested */
    size_t n_logprobs;
    oai_finish finish;
    oai_usage usage;
    const oai_call *calls; /* chat: tool calls read out of the text (which is then the rest) */
    size_t n_calls;
    /* n > 1: the other choices' texts and finishes (choice 0 is text/finish above) */
    const char *const *more_text;
    const size_t *more_len;
    const oai_finish *more_finish;
    oai_token_logprob *const *more_lp; /* NULL when logprobs were not asked for */
    const size_t *more_n_lp;
    const oai_call *const *more_calls; /* chat with tools: each other choice's calls */
    const size_t *more_n_calls;
    size_t n_more;
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
