/* chat_harmony: see chat_harmony.h. The layout is the one gpt-oss's chat template (its Jinja,
 * as published with the weights) writes for these inputs; the tools' TypeScript covers the
 * schema shapes that template renders (strings with or without enums, numbers, booleans, arrays
 * of those, unions, nested objects as `object`), each property's description as a comment and
 * `?` on the optional ones. */
#include "chat_harmony.h"

#include <errno.h>
#include <string.h>

#include <jansson.h>

static const char k_system[] =
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: ";
static const char k_channels[] =
    "\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be "
    "included for every message.";
static const char k_tool_channel[] =
    "\nCalls to these tools must go to the commentary channel: 'functions'.";

static bool role_is(const chat_message *m, const char *r) {
    return m->role && !strcmp(m->role, r);
}

static const char *text_of(const char *s) {
    return s ? s : "";
}

static void put_type(strbuf *b, const json_t *s);

/* A union of the schemas in arr, joined by " | ". */
static void put_union(strbuf *b, const json_t *arr) {
    for (size_t i = 0; i < json_array_size(arr); i++) {
        if (i) strbuf_puts(b, " | ");
        put_type(b, json_array_get(arr, i));
    }
}

/* An enum's values as literals: "a" | "b" | 3. */
static void put_enum(strbuf *b, const json_t *e) {
    for (size_t i = 0; i < json_array_size(e); i++) {
        char *lit = json_dumps(json_array_get(e, i), JSON_ENCODE_ANY | JSON_COMPACT);
        if (i) strbuf_puts(b, " | ");
        strbuf_puts(b, lit ? lit : "any");
        free(lit);
    }
}

/* One JSON schema as a TypeScript type. */
static void put_type(strbuf *b, const json_t *s) {
    const json_t *t = json_object_get(s, "type"), *e = json_object_get(s, "enum");
    const json_t *any = json_object_get(s, "anyOf");
    if (!any) any = json_object_get(s, "oneOf");
    if (json_is_array(e)) return put_enum(b, e);
    if (json_is_array(any)) return put_union(b, any);
    if (json_is_array(t)) {
        for (size_t i = 0; i < json_array_size(t); i++) {
            if (i) strbuf_puts(b, " | ");
            json_t *one = json_object();
            json_object_set(one, "type", json_array_get(t, i));
            put_type(b, one);
            json_decref(one);
        }
        return;
    }
    const char *ty = json_string_value(t);
    if (!ty) return (void)strbuf_puts(b, "any");
    if (!strcmp(ty, "integer") || !strcmp(ty, "number")) return (void)strbuf_puts(b, "number");
    if (!strcmp(ty, "string") || !strcmp(ty, "boolean") || !strcmp(ty, "null"))
        return (void)strbuf_puts(b, ty);
    if (!strcmp(ty, "array")) {
        const json_t *items = json_object_get(s, "items");
        if (!json_is_object(items)) return (void)strbuf_puts(b, "Array<any>");
        put_type(b, items);
        return (void)strbuf_puts(b, "[]");
    }
    strbuf_puts(b, !strcmp(ty, "object") ? "object" : "any");
}

static bool is_required(const json_t *params, const char *name) {
    const json_t *req = json_object_get(params, "required");
    for (size_t i = 0; i < json_array_size(req); i++)
        if (!strcmp(text_of(json_string_value(json_array_get(req, i))), name)) return true;
    return false;
}

/* One function: its description as a comment, then its type with one property a line. */
static int put_function(strbuf *b, const char *json, size_t index, sol_err *err) {
    json_t *tool = json_loads(json, 0, NULL);
    const json_t *fn = json_object_get(tool, "function");
    if (!fn) fn = tool;
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (!name) {
        json_decref(tool);
        return sol_err_set(err, -EINVAL, "tool %zu: not an object with a function name", index);
    }
    const char *desc = json_string_value(json_object_get(fn, "description"));
    if (desc) strbuf_printf(b, "// %s\n", desc);
    strbuf_printf(b, "type %s = ", name);
    const json_t *params = json_object_get(fn, "parameters");
    const json_t *props = json_object_get(params, "properties");
    if (!json_object_size(props)) {
        strbuf_puts(b, "() => any;\n\n");
        json_decref(tool);
        return 0;
    }
    strbuf_puts(b, "(_: {\n");
    const char *key;
    const json_t *p;
    json_object_foreach((json_t *)props, key, p) {
        const char *pd = json_string_value(json_object_get(p, "description"));
        if (pd) strbuf_printf(b, "// %s\n", pd);
        strbuf_printf(b, "%s%s: ", key, is_required(params, key) ? "" : "?");
        put_type(b, p);
        const json_t *def = json_object_get(p, "default");
        char *d = def ? json_dumps(def, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        strbuf_puts(b, ",");
        if (d) strbuf_printf(b, " // default: %s", d);
        strbuf_puts(b, "\n");
        free(d);
    }
    strbuf_puts(b, "}) => any;\n\n");
    json_decref(tool);
    return 0;
}

/* The developer message: the caller's system message as instructions, then the tools. */
static int put_developer(strbuf *b, const char *instructions, const chat_tools *tools,
                         sol_err *err) {
    bool have_tools = tools && tools->n;
    if (!instructions && !have_tools) return 0;
    strbuf_puts(b, "<|start|>developer<|message|>");
    if (instructions) strbuf_printf(b, "# Instructions\n\n%s\n\n", instructions);
    if (have_tools) {
        strbuf_puts(b, "# Tools\n\n## functions\n\nnamespace functions {\n\n");
        for (size_t i = 0; i < tools->n; i++) {
            int rc = put_function(b, tools->json[i], i, err);
            if (rc) return rc;
        }
        strbuf_puts(b, "} // namespace functions");
    }
    strbuf_puts(b, "<|end|>");
    return 0;
}

/* An assistant turn: reasoning (when kept) on analysis, a preamble and calls on commentary, else
 * the answer on final (<|return|> when it is the very last message, as in training). */
static void put_assistant(strbuf *b, const chat_message *m, bool keep_reasoning, bool last) {
    if (keep_reasoning && m->reasoning_content && *m->reasoning_content)
        strbuf_printf(b, "<|start|>assistant<|channel|>analysis<|message|>%s<|end|>",
                      m->reasoning_content);
    if (!m->n_tool_calls) {
        strbuf_printf(b, "<|start|>assistant<|channel|>final<|message|>%s%s", text_of(m->content),
                      last ? "<|return|>" : "<|end|>");
        return;
    }
    if (m->content && *m->content)
        strbuf_printf(b, "<|start|>assistant<|channel|>commentary<|message|>%s<|end|>", m->content);
    for (size_t i = 0; i < m->n_tool_calls; i++)
        strbuf_printf(b,
                      "<|start|>assistant to=functions.%s<|channel|>commentary json<|message|>"
                      "%s<|call|>",
                      text_of(m->tool_calls[i].name), text_of(m->tool_calls[i].arguments));
}

/* The function a tool message answers: the call named by its tool_call_id among the assistant
 * messages before it, else the latest call. */
static const char *answered(const chat_message *m, size_t at) {
    const char *latest = NULL, *id = m[at].tool_call_id;
    for (size_t i = 0; i < at; i++)
        for (size_t j = 0; j < m[i].n_tool_calls; j++) {
            const chat_tool_call *c = &m[i].tool_calls[j];
            latest = c->name;
            if (id && *id && c->id && !strcmp(c->id, id)) return c->name;
        }
    return latest;
}

static size_t last_user(const chat_message *m, size_t n) {
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        if (role_is(&m[i], "user")) at = i;
    return at;
}

int chat_harmony_render(const chat_message *m, size_t n, const chat_tools *tools,
                        bool add_generation_prompt, const char *today, strbuf *b, sol_err *err) {
    bool have_tools = tools && tools->n;
    strbuf_printf(b, "%s%s%s%s<|end|>", k_system, today, k_channels,
                  have_tools ? k_tool_channel : "");
    size_t first = n && role_is(&m[0], "system") ? 1 : 0, lu = last_user(m, n);
    int rc = put_developer(b, first ? text_of(m[0].content) : NULL, tools, err);
    for (size_t i = first; i < n && !rc; i++) {
        if (role_is(&m[i], "assistant")) {
            put_assistant(b, &m[i], i > lu, i + 1 == n && !add_generation_prompt);
        } else if (role_is(&m[i], "tool")) {
            const char *fn = answered(m, i);
            if (!fn)
                return sol_err_set(err, -EINVAL,
                                   "chat message %zu: a tool message with no tool call before it",
                                   i);
            strbuf_printf(b,
                          "<|start|>functions.%s to=assistant<|channel|>commentary<|message|>%s"
                          "<|end|>",
                          fn, text_of(m[i].content));
        } else { /* user; a later system message speaks as the developer */
            strbuf_printf(b, "<|start|>%s<|message|>%s<|end|>",
                          role_is(&m[i], "system") ? "developer" : "user", text_of(m[i].content));
        }
    }
    if (!rc && add_generation_prompt) strbuf_puts(b, "<|start|>assistant");
    return rc;
}
