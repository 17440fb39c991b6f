/* oai_tools: OpenAI tool calling on the router side - the `tools`, `tool_choice` and
 * `parallel_tool_calls` fields (validated; `required` and a named function become a grammar so
 * the output always parses), and the extraction of the calls from the generated text in the
 * format the pool's chat template asked for (oai_tool_format). Text outside the calls is the
 * message's content. */
#ifndef SOL_OAI_TOOLS_H
#define SOL_OAI_TOOLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "strbuf.h"

struct oai_error;

#define OAI_MAX_TOOLS 128

typedef enum { OAI_TOOLS_AUTO = 0, OAI_TOOLS_NONE, OAI_TOOLS_REQUIRED, OAI_TOOLS_NAMED } oai_choice;

/* How a model family writes its calls (the worker's template says which, Register.tool_format):
 * HERMES   <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, one block per call
 *          (Qwen2.5, Qwen3, Hermes);
 * LLAMA3   {"name": N, "parameters": {...}} as the whole answer, several joined by "; "
 *          (Llama 3.1-3.3's JSON tool calling; an optional <|python_tag|> first);
 * MISTRAL  [TOOL_CALLS] [{"name": N, "arguments": {...}}, ...] (Mistral v0.3);
 * HARMONY  gpt-oss's channels: <|channel|>analysis<|message|>.. (reasoning), final (content),
 *          commentary to=functions.N <|constrain|>json<|message|>{...} (a call, one a turn). Its
 *          output is parsed with tools or without (the reasoning leaves the content). */
typedef enum {
    OAI_FMT_HERMES = 0,
    OAI_FMT_LLAMA3,
    OAI_FMT_MISTRAL,
    OAI_FMT_HARMONY
} oai_tool_format;

/* "hermes", "llama3-json", "mistral", "harmony" -> 0 with *out set; -EINVAL otherwise. */
int oai_tool_format_parse(const char *name, oai_tool_format *out);
const char *oai_tool_format_name(oai_tool_format f);

typedef struct oai_tools {
    char *
        json[OAI_MAX_TOOLS]; /* each tool object in Python's json.dumps layout (for the template) */
    char *names[OAI_MAX_TOOLS];
    json_t *params[OAI_MAX_TOOLS]; /* parameters schemas (owned references), NULL = any object */
    size_t n;
    oai_choice choice;
    char *choice_name; /* OAI_TOOLS_NAMED */
    bool choice_given;
    bool parallel; /* parallel_tool_calls, default true */
    bool parallel_given;
    bool strict;            /* some function asked for strict: true */
    oai_tool_format format; /* set by oai_tools_bind */
} oai_tools;

void oai_tools_init(oai_tools *t);
void oai_tools_free(oai_tools *t);

/* 1 when key is not a tool field; else 0 or -EINVAL/-ENOMEM with err filled. */
int oai_tools_field(oai_tools *t, const char *key, const json_t *v, struct oai_error *err);

/* After every field: consistency (tool_choice without tools, a named function that is not among
 * them, required or named together with another output constraint in *grammar). */
int oai_tools_finish(oai_tools *t, const char *grammar, const char *grammar_field,
                     struct oai_error *err);

/* Once the pool is known: the call format its workers' template writes (tool_format: a
 * Register.tool_format; NULL when no worker has registered yet: Hermes, which a worker with
 * another format refuses by name; "" = the template has none: a 400 naming chat_template and
 * pool) and, for required or named, the grammar of the calls in that format into *grammar
 * (malloc'd GBNF). With no tools offered only the format is noted (harmony's output is parsed
 * anyway). */
/* The control tokens the output's text must show for the parser: harmony's markers (always, for
 * a chat), else, with tools, the format's opening (Mistral's [TOOL_CALLS], hermes' <tool_call>),
 * which a model may write as one control token: the worker streams such a token as its text, so
 * the call parser sees it, and a grammar takes it where its text fits. *n is their count (0:
 * none). */
const char *const *oai_tools_text_tokens(const oai_tools *t, size_t *n);
/* Whether a chat's output goes through the call parser: tools offered, or harmony. */
bool oai_tools_parse_output(const oai_tools *t);

int oai_tools_bind(oai_tools *t, const char *tool_format, const char *chat_template,
                   const char *pool, char **grammar, const char **grammar_field,
                   struct oai_error *err);

/* Whether the request offers tools to the model (tools given and tool_choice is not none). */
bool oai_tools_active(const oai_tools *t);

/* ---- the calls in the output ---- */

typedef struct oai_call {
    char id[48];
    char *name;
    char *arguments; /* compact JSON text of the arguments object */
} oai_call;

typedef struct oai_call_parser {
    oai_tool_format fmt;
    strbuf held; /* text that may be the start of a marker, or calls being read */
    int state;   /* per format: where in the text the parser is (oai_tools.c) */
    oai_call *calls;
    size_t n_calls;
    char id_base[40];
    strbuf ws; /* streaming: trailing whitespace of the content, held (oai_call_parser_gate) */
    /* harmony: the reasoning (analysis channel) read so far and not yet taken, the message's
     * kind (its channel and recipient: oai_tools.c) and a call's name */
    strbuf reasoning;
    int body;
    char *call_name;
} oai_call_parser;

/* request_id seeds the calls' ids: call_<id>_<k>, or for Mistral 9 letters and digits (its
 * template accepts no other ids). */
void oai_call_parser_init(oai_call_parser *p, oai_tool_format fmt, const char *request_id);
void oai_call_parser_free(oai_call_parser *p);
/* Feeds generated text: content (text outside calls) is appended to `content`; calls that
 * completed are appended to p->calls. Returns the number of new calls, or -ENOMEM. */
int oai_call_parser_feed(oai_call_parser *p, const char *text, size_t len, strbuf *content);
/* At the end: held text (a tag start, an unterminated call) is content after all. */
void oai_call_parser_flush(oai_call_parser *p, strbuf *content);
/* The content an answer with calls keeps: its trailing whitespace (the separators between and
 * after the calls) dropped; 0 means none (message.content null, as OpenAI and vLLM answer). */
size_t oai_content_len(const char *text, size_t len, size_t n_calls);
/* Streaming: what of a chunk's content `in` to send now (into `out`), so that the deltas add up
 * to oai_content_len's content: whitespace after the last other character is held until more
 * text follows, and at the end (final) sent only when the answer has no calls. A calls-only
 * answer streams no content delta at all. */
void oai_call_parser_gate(oai_call_parser *p, const strbuf *in, strbuf *out, bool final);

/* `"tool_calls":[{"id":..,"type":"function","function":{"name":..,"arguments":".."}},...]`
 * for calls[from, n); with index fields for stream deltas. */
void oai_put_tool_calls(strbuf *out, const oai_call *calls, size_t from, size_t n, bool indexed);

#endif
