/* oai_request: parse and validate OpenAI /v1/completions, /v1/chat/completions and
 * /v1/embeddings bodies into plain C structs (a 400 naming the field otherwise). */
#ifndef SOL_OAI_REQUEST_H
#define SOL_OAI_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h" /* sol_slo */
#include "oai_error.h"
#include "oai_tools.h"
#include "sampling.h"
#include "strbuf.h"

#define OAI_MAX_STOP 4                             /* OpenAI accepts up to 4 stop sequences */
#define OAI_MAX_LOGPROBS SOL_SAMPLING_MAX_LOGPROBS /* `logprobs`, chat `top_logprobs` */
#define OAI_MAX_TOKENS_LIMIT (1u << 20) /* sanity bound; workers clamp to their context */
#define OAI_MAX_TAGS 16
#define OAI_MAX_MESSAGES 4096
#define OAI_DEFAULT_MAX_TOKENS 16 /* completions default, as in OpenAI */
#define OAI_MAX_N 16              /* samples per request (`n`) */

typedef enum { OAI_COMPLETION = 0, OAI_CHAT = 1, OAI_EMBEDDING = 2 } oai_kind;

typedef struct oai_msg_call {
    char *id, *name, *arguments; /* arguments: the JSON text the client sent */
} oai_msg_call;

typedef struct oai_message {
    char *role;          /* system | user | assistant | tool */
    char *content;       /* text parts joined (array content is concatenated without separator) */
    oai_msg_call *calls; /* assistant: tool_calls */
    size_t n_calls;
    char *tool_call_id; /* tool: the call this answers */
    char *reasoning;    /* assistant: reasoning_content (a reasoning model's, handed back) */
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
    /* latency targets from the X-Sol-*-Ms headers (http.c); bit i of slo_given: slo.ms[i] came
     * from one (0 there means "none", overriding the pool's default: router.slo) */
    sol_slo slo;
    unsigned slo_given;
} oai_request;

/* Parse `body` (need not be NUL-terminated). On success *out is a new request the caller frees.
 * On failure returns -EINVAL (or -ENOMEM) and fills *err with a 400 body description. */
int oai_parse_request(oai_kind kind, const char *body, size_t len, oai_request **out,
                      oai_error *err);
void oai_request_free(oai_request *r);

/* The text the router routes on: the prompt, or every message's content joined by "\n". */
int oai_request_text(const oai_request *r, strbuf *out);
/* The last user message (chat) or the prompt (completions); borrowed, never NULL. */
const char *oai_request_last_user_text(const oai_request *r);

#endif
