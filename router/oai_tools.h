/* oai_tools: OpenAI tool calling on the router side - the `tools`, `tool_choice` and
 * `parallel_tool_calls` fields (validated; `required` and a named function become a grammar so
 * the output always parses), and the extraction of the calls from the generated text, in the
 * Hermes/Qwen format the worker's template asked for: <tool_call>\n{"name": ..., "arguments":
 * {...}}\n</tool_call>. Text outside the tags is the message's content. */
#ifndef SOL_OAI_TOOLS_H
#define SOL_OAI_TOOLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "strbuf.h"

struct oai_error;

#define OAI_MAX_TOOLS 128

typedef enum { OAI_TOOLS_AUTO = 0, OAI_TOOLS_NONE, OAI_TOOLS_REQUIRED, OAI_TOOLS_NAMED } oai_choice;

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
    bool strict; /* some function asked for strict: true */
} oai_tools;

void oai_tools_init(oai_tools *t);
void oai_tools_free(oai_tools *t);

/* 1 when key is not a tool field; else 0 or -EINVAL/-ENOMEM with err filled. */
int oai_tools_field(oai_tools *t, const char *key, const json_t *v, struct oai_error *err);

/* After every field: consistency (tool_choice without tools, a named function that is not among
 * them) and, for required or named, the grammar of the calls into *grammar (malloc'd GBNF;
 * refused when another output constraint is set). */
int oai_tools_finish(oai_tools *t, char **grammar, const char **grammar_field,
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
    strbuf held;  /* text that may be the start of a tag, or a call being read */
    bool in_call; /* between <tool_call> and </tool_call> */
    oai_call *calls;
    size_t n_calls;
    char id_base[40];
} oai_call_parser;

void oai_call_parser_init(oai_call_parser *p, const char *request_id);
void oai_call_parser_free(oai_call_parser *p);
/* Feeds generated text: content (text outside calls) is appended to `content`; calls that
 * completed are appended to p->calls. Returns the number of new calls, or -ENOMEM. */
int oai_call_parser_feed(oai_call_parser *p, const char *text, size_t len, strbuf *content);
/* At the end: held text (a tag start, an unterminated call) is content after all. */
void oai_call_parser_flush(oai_call_parser *p, strbuf *content);

/* `"tool_calls":[{"id":..,"type":"function","function":{"name":..,"arguments":".."}},...]`
 * for calls[from, n); with index fields for stream deltas. */
void oai_put_tool_calls(strbuf *out, const oai_call *calls, size_t from, size_t n, bool indexed);

#endif
