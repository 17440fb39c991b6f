/* oai_tools: parsing OpenAI's tool fields and extracting <tool_call> blocks from the output. */
#include "oai_tools.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_tools.h"
#include "hash.h"
#include "oai_error.h"

#define BAD(err, param, ...)                                                                       \
    oai_error_set(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

void oai_tools_init(oai_tools *t) {
    memset(t, 0, sizeof *t);
    t->parallel = true;
}

void oai_tools_free(oai_tools *t) {
    for (size_t i = 0; i < t->n; i++) {
        free(t->json[i]), free(t->names[i]);
        json_decref(t->params[i]);
    }
    free(t->choice_name);
    oai_tools_init(t);
}

static bool good_name(const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

static int parse_tool(oai_tools *t, size_t i, const json_t *tool, oai_error *err) {
    char p[48];
    snprintf(p, sizeof p, "tools[%zu]", i);
    const json_t *fn = json_object_get(tool, "function"), *v;
    const char *type = json_string_value(json_object_get(tool, "type")), *k;
    if (!json_is_object(tool) || !type || strcmp(type, "function") || !json_is_object(fn))
        return BAD(err, p, "'%s' must be {\"type\": \"function\", \"function\": {...}}", p),
               -EINVAL;
    json_object_foreach((json_t *)fn, k, v) {
        if (!strcmp(k, "name") || !strcmp(k, "description")) {
            if (!json_is_string(v))
                return BAD(err, p, "'%s.function.%s' must be a string", p, k), -EINVAL;
        } else if (!strcmp(k, "parameters")) {
            if (!json_is_object(v))
                return BAD(err, p, "'%s.function.parameters' must be a JSON Schema object", p),
                       -EINVAL;
        } else if (!strcmp(k, "strict")) {
            if (!json_is_boolean(v))
                return BAD(err, p, "'%s.function.strict' must be a boolean", p), -EINVAL;
            t->strict = t->strict || json_is_true(v);
        } else {
            return BAD(err, p, "'%s.function.%s' is not supported", p, k), -EINVAL;
        }
    }
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (!good_name(name))
        return BAD(err, p, "'%s.function.name' must be 1-64 of a-z, A-Z, 0-9, _ and -", p), -EINVAL;
    for (size_t j = 0; j < i; j++)
        if (!strcmp(t->names[j], name))
            return BAD(err, p, "two tools are named \"%s\"", name), -EINVAL;
    t->names[i] = strdup(name);
    t->json[i] = json_dumps(tool, JSON_ENCODE_ANY | JSON_PRESERVE_ORDER); /* ", " and ": " */
    t->params[i] = json_incref(json_object_get(fn, "parameters"));
    t->n = i + 1;
    return t->names[i] && t->json[i] ? 0 : -ENOMEM;
}

static int parse_choice(oai_tools *t, const json_t *v, oai_error *err) {
    const char *s = json_string_value(v);
    t->choice_given = true;
    if (s) {
        if (!strcmp(s, "none")) return t->choice = OAI_TOOLS_NONE, 0;
        if (!strcmp(s, "auto")) return t->choice = OAI_TOOLS_AUTO, 0;
        if (!strcmp(s, "required")) return t->choice = OAI_TOOLS_REQUIRED, 0;
        return BAD(err, "tool_choice",
                   "'tool_choice' must be none, auto, required or "
                   "{\"type\": \"function\", \"function\": {\"name\": ...}}"),
               -EINVAL;
    }
    const char *name = json_string_value(json_object_get(json_object_get(v, "function"), "name"));
    const char *type = json_string_value(json_object_get(v, "type"));
    if (!name || !type || strcmp(type, "function"))
        return BAD(err, "tool_choice",
                   "'tool_choice' must be none, auto, required or "
                   "{\"type\": \"function\", \"function\": {\"name\": ...}}"),
               -EINVAL;
    free(t->choice_name);
    t->choice_name = strdup(name);
    t->choice = OAI_TOOLS_NAMED;
    return t->choice_name ? 0 : -ENOMEM;
}

int oai_tools_field(oai_tools *t, const char *key, const json_t *v, oai_error *err) {
    if (strcmp(key, "tools") && strcmp(key, "tool_choice") && strcmp(key, "parallel_tool_calls"))
        return 1;
    if (json_is_null(v)) return 0;
    if (!strcmp(key, "tool_choice")) return parse_choice(t, v, err);
    if (!strcmp(key, "parallel_tool_calls")) {
        if (!json_is_boolean(v))
            return BAD(err, key, "'parallel_tool_calls' must be a boolean"), -EINVAL;
        t->parallel = json_is_true(v);
        t->parallel_given = true;
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) > OAI_MAX_TOOLS)
        return BAD(err, key, "'tools' must be an array of at most %d tools", OAI_MAX_TOOLS),
               -EINVAL;
    for (size_t i = 0; i < json_array_size(v); i++) {
        int rc = parse_tool(t, i, json_array_get(v, i), err);
        if (rc) return rc;
    }
    return 0;
}

bool oai_tools_active(const oai_tools *t) {
    return t->n > 0 && t->choice != OAI_TOOLS_NONE;
}

static const gg_call_shape SHAPES[] = {
    [OAI_FMT_HERMES] = {"", "<tool_call>\n", "arguments", "\n</tool_call>", "\n", "", "<tool_call>",
                        NULL, NULL, NULL},
    /* a Llama 3 answer is calls when it opens with "{" or <|python_tag|> (step_llama) */
    [OAI_FMT_LLAMA3] = {"", "", "parameters", "", "; ", "", NULL, "<|python_tag|>", NULL, NULL},
    [OAI_FMT_MISTRAL] = {"[TOOL_CALLS] [", "", "arguments", "", ", ", "]", "[TOOL_CALLS]", NULL,
                         NULL, NULL},
    /* one call a turn (<|call|> ends the answer); the name before the raw JSON arguments */
    [OAI_FMT_HARMONY] = {"", "<|channel|>", NULL, "", "", "", NULL, NULL,
                         "commentary to=functions.", " <|constrain|>json<|message|>"},
};
static const char *const FORMAT_NAMES[] = {"hermes", "llama3-json", "mistral", "harmony"};
enum { N_FORMATS = sizeof FORMAT_NAMES / sizeof FORMAT_NAMES[0] };

/* Harmony's markers, which its output's text must show (control tokens otherwise silent). */
static const char *const HARMONY_MARKS[] = {"<|start|>", "<|channel|>", "<|message|>", "<|end|>",
                                            "<|constrain|>"};

int oai_tool_format_parse(const char *name, oai_tool_format *out) {
    for (int f = 0; f < N_FORMATS; f++)
        if (name && !strcmp(name, FORMAT_NAMES[f])) return *out = (oai_tool_format)f, 0;
    return -EINVAL;
}

const char *oai_tool_format_name(oai_tool_format f) {
    return (unsigned)f < N_FORMATS ? FORMAT_NAMES[f] : "?";
}

/* tool_choice auto with something to hold the calls to: strict schemas, or one call only. */
static bool auto_lazy(const oai_tools *t) {
    return t->n && t->choice == OAI_TOOLS_AUTO &&
           (t->strict || (t->parallel_given && !t->parallel));
}

/* Whether a grammar holds the calls: required, a named function, or auto_lazy. */
static bool calls_held(const oai_tools *t) {
    return t->choice == OAI_TOOLS_REQUIRED || t->choice == OAI_TOOLS_NAMED || auto_lazy(t);
}

int oai_tools_finish(oai_tools *t, const char *grammar, const char *grammar_field, oai_error *err) {
    if (!t->n && t->choice_given && t->choice != OAI_TOOLS_NONE)
        return BAD(err, "tool_choice", "'tool_choice' needs 'tools'"), -EINVAL;
    /* With auto, strict tools and parallel_tool_calls false are held by a lazy grammar
     * (oai_tools_bind): free text, and the calls from their opening text on */
    if (!calls_held(t)) return 0;
    if (grammar)
        return BAD(err, "tool_choice", "'tool_choice' %s and '%s' cannot be combined",
                   t->choice == OAI_TOOLS_NAMED  ? "naming a function"
                   : t->choice == OAI_TOOLS_AUTO ? "auto with strict tools"
                                                 : "required",
                   grammar_field),
               -EINVAL;
    if (t->choice == OAI_TOOLS_AUTO) return 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->choice == OAI_TOOLS_REQUIRED || !strcmp(t->names[i], t->choice_name)) return 0;
    return BAD(err, "tool_choice", "'tool_choice' names \"%s\", which is not in 'tools'",
               t->choice_name),
           -EINVAL;
}

int oai_tools_bind(oai_tools *t, const char *tool_format, const char *chat_template,
                   const char *pool, char **grammar, const char **grammar_field, oai_error *err) {
    if (!oai_tools_active(t)) { /* the format still says how to read the output (harmony) */
        if (tool_format && *tool_format) oai_tool_format_parse(tool_format, &t->format);
        return 0;
    }
    if (tool_format && !*tool_format)
        return BAD(err, "tools",
                   "pool '%s' serves a model whose chat template (%s) has no tool format; tools "
                   "are rendered by the qwen2.5, qwen3, llama3.1, llama3.2, mistral-v3 and "
                   "harmony templates (worker.chat_template)",
                   pool, chat_template && *chat_template ? chat_template : "unknown"),
               -EINVAL;
    t->format = OAI_FMT_HERMES;
    if (tool_format && oai_tool_format_parse(tool_format, &t->format))
        return oai_error_set(err, 500, "server_error", NULL, "tools",
                             "pool '%s' reports an unknown tool format '%s'", pool, tool_format),
               -EINVAL;
    if (!calls_held(t)) return 0;
    bool lazy = auto_lazy(t); /* every format but harmony has an opening to wait for */
    if (lazy && t->format == OAI_FMT_HARMONY)
        return BAD(err, "tools",
                   "pool '%s' serves harmony (gpt-oss), whose calls follow its reasoning: "
                   "tool_choice auto cannot hold strict tools or parallel_tool_calls false to "
                   "their schema there; use tool_choice required or a named function",
                   pool),
               -EINVAL;
    const char *names[OAI_MAX_TOOLS];
    const json_t *params[OAI_MAX_TOOLS];
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++) /* auto: any tool; not strict: any arguments object */
        if (t->choice != OAI_TOOLS_NAMED || !strcmp(t->names[i], t->choice_name))
            names[n] = t->names[i], params[n++] = lazy && !t->strict ? NULL : t->params[i];
    strbuf g;
    strbuf_init(&g);
    sol_err e = {0};
    bool parallel = t->parallel && t->choice != OAI_TOOLS_NAMED && t->format != OAI_FMT_HARMONY;
    if (gg_tool_calls(names, params, n, parallel, lazy, &SHAPES[t->format], &g, &e)) {
        strbuf_free(&g);
        return BAD(err, "tools", "%s", e.msg), -EINVAL;
    }
    free(*grammar);
    *grammar = strbuf_take(&g, NULL);
    *grammar_field = "tool_choice";
    return 0;
}

const char *const *oai_tools_text_tokens(const oai_tools *t, size_t *n) {
    *n = 0;
    if (t->format == OAI_FMT_HARMONY)
        return *n = sizeof HARMONY_MARKS / sizeof *HARMONY_MARKS, HARMONY_MARKS;
    if (!oai_tools_active(t)) return NULL;
    const gg_call_shape *s = &SHAPES[t->format];
    return *n = 1, s->trigger ? &s->trigger : &s->start;
}

bool oai_tools_parse_output(const oai_tools *t) {
    return oai_tools_active(t) || t->format == OAI_FMT_HARMONY;
}

/* ---- output --------------------------------------------------------------------------- */

static const char k_open[] = "<tool_call>", k_close[] = "</tool_call>";
/* The parsers' markers, from the shapes the grammars are written with. */
#define k_mistral (SHAPES[OAI_FMT_MISTRAL].trigger)
#define k_python (SHAPES[OAI_FMT_LLAMA3].start)

/* Parser states. Hermes: OUTSIDE / INSIDE the tags. Llama 3: START (only whitespace so far),
 * CALLS (the answer is calls), TEXT (it is not: all content). Mistral: OUTSIDE, then ARRAY
 * after the marker. Harmony: HEAD (a message's header, up to <|message|>), BODY (its text, up to
 * <|end|> or <|call|>), NEXT (after <|end|>: <|start|> and a role open the next message), TEXT
 * (not harmony after all: content). */
enum {
    ST_OUTSIDE = 0,
    ST_INSIDE,
    ST_START,
    ST_CALLS,
    ST_TEXT,
    ST_ARRAY,
    ST_HEAD,
    ST_BODY,
    ST_NEXT
};

/* A harmony message's body goes to the reasoning (analysis), to a call's arguments
 * (to=functions.NAME), or to the content (final, and anything else). */
enum { BODY_CONTENT = 0, BODY_REASONING, BODY_CALL };

/* A header this long without <|message|> is not harmony's. */
enum { HARMONY_HEAD_MAX = 512 };

void oai_call_parser_init(oai_call_parser *p, oai_tool_format fmt, const char *request_id) {
    memset(p, 0, sizeof *p);
    p->fmt = fmt;
    p->state = fmt == OAI_FMT_LLAMA3 ? ST_START : fmt == OAI_FMT_HARMONY ? ST_HEAD : ST_OUTSIDE;
    strbuf_init(&p->held);
    strbuf_init(&p->ws);
    strbuf_init(&p->reasoning);
    snprintf(p->id_base, sizeof p->id_base, "%.36s", request_id);
}

void oai_call_parser_free(oai_call_parser *p) {
    for (size_t i = 0; i < p->n_calls; i++)
        free(p->calls[i].name), free(p->calls[i].arguments);
    free(p->calls);
    strbuf_free(&p->held);
    strbuf_free(&p->ws);
    strbuf_free(&p->reasoning);
    free(p->call_name);
}

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The length of text without its trailing whitespace. */
static size_t trimmed(const char *text, size_t len) {
    while (len && is_space(text[len - 1]))
        len--;
    return len;
}

size_t oai_content_len(const char *text, size_t len, size_t n_calls) {
    return n_calls && text ? trimmed(text, len) : len;
}

void oai_call_parser_gate(oai_call_parser *p, const strbuf *in, strbuf *out, bool final) {
    const char *t = in->data ? in->data : "";
    size_t keep = trimmed(t, in->len);
    if (keep) { /* text: what was held goes out first, this chunk's own trailing run waits */
        strbuf_append(out, p->ws.data ? p->ws.data : "", p->ws.len);
        strbuf_reset(&p->ws);
        strbuf_append(out, t, keep);
    }
    strbuf_append(&p->ws, t + keep, in->len - keep);
    if (final && !p->n_calls) strbuf_append(out, p->ws.data ? p->ws.data : "", p->ws.len);
    if (final) strbuf_reset(&p->ws);
}

/* Mistral's template takes 9 letters and digits; the others OpenAI's call_ prefix. */
static void make_id(const oai_call_parser *p, char *id, size_t cap) {
    if (p->fmt != OAI_FMT_MISTRAL) {
        snprintf(id, cap, "call_%.30s_%zu", p->id_base, p->n_calls);
        return;
    }
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    uint64_t h = sol_fmix64(sol_fnv64_str(SOL_FNV64_INIT, p->id_base) + p->n_calls);
    for (int i = 0; i < 9; i++, h /= 62)
        id[i] = digits[h % 62];
    id[9] = '\0';
}

/* {"name": "...", "arguments" | "parameters": {...} or "..."} -> a call; else -1. */
static int add_call(oai_call_parser *p, const json_t *o) {
    const char *name = json_string_value(json_object_get(o, "name"));
    const json_t *args = json_object_get(o, p->fmt == OAI_FMT_LLAMA3 ? "parameters" : "arguments");
    if (!args) args = json_object_get(o, p->fmt == OAI_FMT_LLAMA3 ? "arguments" : "parameters");
    if (!name || !(json_is_object(args) || json_is_string(args))) return -1;
    oai_call *c = realloc(p->calls, (p->n_calls + 1) * sizeof *c);
    if (!c) return -1;
    p->calls = c;
    c += p->n_calls;
    make_id(p, c->id, sizeof c->id);
    c->name = strdup(name);
    c->arguments = json_is_string(args) ? strdup(json_string_value(args))
                                        : json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
    p->n_calls++;
    return 0;
}

static int add_call_text(oai_call_parser *p, const char *s, size_t n) {
    json_t *o = json_loadb(s, n, 0, NULL);
    int rc = add_call(p, o);
    json_decref(o);
    return rc;
}

/* Bytes at the end of held that could begin `tag`: they wait for more text. */
static size_t partial_tag(const strbuf *b, size_t from, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t k = tl - 1; k > 0; k--)
        if (b->len - from >= k && !memcmp(b->data + b->len - k, tag, k)) return k;
    return 0;
}

/* Length of the complete JSON object or array at s (s[0] is '{' or '['), 0 while unfinished. */
static size_t json_span(const char *s, size_t n) {
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '"') {
            for (i++; i < n && s[i] != '"'; i++)
                i += s[i] == '\\';
            if (i >= n) return 0;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            return i + 1;
        }
    }
    return 0;
}

static void drop(strbuf *b, size_t n) {
    memmove(b->data, b->data + n, b->len - n + 1);
    b->len -= n;
}

static size_t skip_ws(const strbuf *b, size_t i, const char *also) {
    while (i < b->len && (strchr(" \t\r\n", b->data[i]) || (also && strchr(also, b->data[i]))))
        i++;
    return i;
}

/* Everything held is content, and (Llama 3) so is the rest of the answer. */
static void to_content(oai_call_parser *p, strbuf *content, int next) {
    strbuf_append(content, p->held.data, p->held.len);
    strbuf_reset(&p->held);
    p->state = next;
}

/* Moves text before `tag` to content; true when the tag was found (and is dropped). */
static bool until_tag(oai_call_parser *p, const char *tag, strbuf *content) {
    char *h = p->held.data, *at = strstr(h, tag);
    size_t out = at ? (size_t)(at - h) : p->held.len - partial_tag(&p->held, 0, tag);
    strbuf_append(content, h, out);
    drop(&p->held, out);
    if (at) drop(&p->held, strlen(tag));
    return at != NULL;
}

static bool step_hermes(oai_call_parser *p, strbuf *content) {
    if (p->state == ST_OUTSIDE) {
        if (!until_tag(p, k_open, content)) return false;
        p->state = ST_INSIDE;
        return true;
    }
    char *h = p->held.data, *end = strstr(h, k_close);
    if (!end) return false;
    if (add_call_text(p, h, (size_t)(end - h))) { /* not a call after all: content */
        strbuf_puts(content, k_open);
        strbuf_append(content, h, (size_t)(end - h) + strlen(k_close));
    }
    drop(&p->held, (size_t)(end - h) + strlen(k_close));
    p->state = ST_OUTSIDE;
    return true;
}

/* Llama 3: an answer that opens with { (or <|python_tag|>) is calls joined by ';'. */
static bool step_llama(oai_call_parser *p, strbuf *content) {
    const strbuf *b = &p->held;
    if (p->state == ST_TEXT) return to_content(p, content, ST_TEXT), false;
    size_t i = skip_ws(b, 0, p->state == ST_CALLS ? ";" : NULL);
    if (i == b->len) return false;
    if (p->state == ST_START) {
        size_t k = strlen(k_python), have = b->len - i < k ? b->len - i : k;
        if (!memcmp(b->data + i, k_python, have)) {
            if (have < k) return false;
            drop(&p->held, i + k);
            p->state = ST_CALLS;
            return true;
        }
        if (b->data[i] != '{') return to_content(p, content, ST_TEXT), false;
        p->state = ST_CALLS;
    }
    if (b->data[i] != '{') return to_content(p, content, ST_TEXT), false;
    size_t n = json_span(b->data + i, b->len - i);
    if (!n) return false;
    if (add_call_text(p, b->data + i, n)) return to_content(p, content, ST_TEXT), false;
    drop(&p->held, i + n);
    return true;
}

/* Mistral: [TOOL_CALLS] then a JSON array of calls; text around it is content. */
static bool step_mistral(oai_call_parser *p, strbuf *content) {
    if (p->state == ST_OUTSIDE) {
        if (!until_tag(p, k_mistral, content)) return false;
        p->state = ST_ARRAY;
        return true;
    }
    const strbuf *b = &p->held;
    size_t i = skip_ws(b, 0, NULL);
    if (i == b->len) return false;
    size_t n = b->data[i] == '[' ? json_span(b->data + i, b->len - i) : 0;
    if (b->data[i] == '[' && !n) return false;
    json_t *arr = n ? json_loadb(b->data + i, n, 0, NULL) : NULL;
    bool ok = json_is_array(arr) && json_array_size(arr) > 0;
    for (size_t k = 0; ok && k < json_array_size(arr); k++)
        ok = json_is_object(json_array_get(arr, k)) &&
             json_string_value(json_object_get(json_array_get(arr, k), "name"));
    for (size_t k = 0; ok && k < json_array_size(arr); k++)
        add_call(p, json_array_get(arr, k));
    json_decref(arr);
    if (!ok)
        strbuf_puts(content, k_mistral); /* not calls: the text stays as it was */
    else
        drop(&p->held, i + n);
    p->state = ST_OUTSIDE;
    return true;
}

/* Harmony: a call's arguments are its message's text, JSON or not (OpenAI's arguments are a
 * string). */
static void harmony_call(oai_call_parser *p, const char *args, size_t n) {
    oai_call *c = realloc(p->calls, (p->n_calls + 1) * sizeof *c);
    if (!c) return;
    p->calls = c;
    c += p->n_calls;
    make_id(p, c->id, sizeof c->id);
    c->name = p->call_name ? p->call_name : strdup("");
    c->arguments = strndup(args, n);
    p->call_name = NULL;
    p->n_calls++;
}

/* The header's channel and recipient (" to=functions.NAME" before or after <|channel|>). */
static void harmony_header(oai_call_parser *p, const char *h, size_t n) {
    char head[HARMONY_HEAD_MAX + 1];
    snprintf(head, sizeof head, "%.*s", (int)n, h);
    const char *ch = strstr(head, "<|channel|>"), *to = strstr(head, "to=functions.");
    free(p->call_name);
    p->call_name = NULL;
    if (to) {
        to += strlen("to=functions.");
        p->call_name = strndup(to, strcspn(to, " <"));
        p->body = BODY_CALL;
        return;
    }
    ch = ch ? ch + strlen("<|channel|>") : "";
    p->body = !strncmp(ch, "analysis", 8) ? BODY_REASONING : BODY_CONTENT;
}

/* The body's text up to `end` (or, while unfinished, all but a marker's possible start) to its
 * place; true when a marker ended it. */
static bool harmony_body(oai_call_parser *p, strbuf *content) {
    char *h = p->held.data;
    char *end = strstr(h, "<|end|>"), *call = strstr(h, "<|call|>"), *ret = strstr(h, "<|return|>");
    char *at = end;
    if (call && (!at || call < at)) at = call;
    if (ret && (!at || ret < at)) at = ret;
    size_t out = at ? (size_t)(at - h) : p->held.len;
    if (!at) { /* hold what could begin a marker */
        const char *lt = memchr(h, '<', p->held.len);
        for (; lt; lt = memchr(lt + 1, '<', p->held.len - (size_t)(lt + 1 - h)))
            if (!strncmp(lt, "<|end|>", p->held.len - (size_t)(lt - h)) ||
                !strncmp(lt, "<|call|>", p->held.len - (size_t)(lt - h)) ||
                !strncmp(lt, "<|return|>", p->held.len - (size_t)(lt - h)))
                break;
        out = lt ? (size_t)(lt - h) : p->held.len;
        if (p->body == BODY_CALL) return false; /* the arguments are taken whole */
    }
    if (p->body == BODY_CALL) {
        harmony_call(p, h, out);
    } else {
        strbuf_append(p->body == BODY_REASONING ? &p->reasoning : content, h, out);
    }
    drop(&p->held, out);
    if (!at) return false;
    drop(&p->held, strlen(at == end ? "<|end|>" : at == call ? "<|call|>" : "<|return|>"));
    p->state = ST_NEXT;
    return true;
}

static bool step_harmony(oai_call_parser *p, strbuf *content) {
    const char *h = p->held.data;
    if (p->state == ST_TEXT) return to_content(p, content, ST_TEXT), false;
    if (p->state == ST_NEXT) { /* <|start|> then the role, up to the header's first marker */
        static const char start[] = "<|start|>";
        size_t have = p->held.len < sizeof start - 1 ? p->held.len : sizeof start - 1;
        if (memcmp(h, start, have)) return to_content(p, content, ST_TEXT), false;
        if (have < sizeof start - 1) return false;
        size_t role = strcspn(h + have, "< ");
        if (have + role == p->held.len) return false;
        drop(&p->held, have + role);
        p->state = ST_HEAD;
        return true;
    }
    if (p->state == ST_HEAD) {
        const char *msg = strstr(h, "<|message|>");
        /* a header opens with a marker (<|channel|>) or a recipient (" to="); else plain text */
        bool plain = p->held.len && h[0] != '<' && h[0] != ' ';
        if ((!msg && p->held.len > HARMONY_HEAD_MAX) || plain)
            return to_content(p, content, ST_TEXT), false;
        if (!msg) return false;
        harmony_header(p, h, (size_t)(msg - h));
        drop(&p->held, (size_t)(msg - h) + strlen("<|message|>"));
        p->state = ST_BODY;
        return true;
    }
    return harmony_body(p, content);
}

int oai_call_parser_feed(oai_call_parser *p, const char *text, size_t len, strbuf *content) {
    size_t before = p->n_calls;
    if (strbuf_append(&p->held, text, len)) return -ENOMEM; /* allocates even for no text */
    bool more = true;
    while (more)
        more = p->fmt == OAI_FMT_LLAMA3    ? step_llama(p, content)
               : p->fmt == OAI_FMT_MISTRAL ? step_mistral(p, content)
               : p->fmt == OAI_FMT_HARMONY ? step_harmony(p, content)
                                           : step_hermes(p, content);
    return (int)(p->n_calls - before);
}

void oai_call_parser_flush(oai_call_parser *p, strbuf *content) {
    if (p->fmt == OAI_FMT_HARMONY && p->state == ST_BODY) { /* the answer ended the message */
        if (p->body == BODY_CALL) harmony_call(p, p->held.data ? p->held.data : "", p->held.len);
        if (p->body == BODY_REASONING)
            strbuf_append(&p->reasoning, p->held.data ? p->held.data : "", p->held.len);
        if (p->body != BODY_CONTENT) strbuf_reset(&p->held);
    }
    if (p->fmt == OAI_FMT_HARMONY && p->state == ST_NEXT) strbuf_reset(&p->held);
    if (p->fmt == OAI_FMT_HERMES && p->state == ST_INSIDE) strbuf_puts(content, k_open);
    if (p->fmt == OAI_FMT_MISTRAL && p->state == ST_ARRAY) strbuf_puts(content, k_mistral);
    strbuf_append(content, p->held.data ? p->held.data : "", p->held.len);
    strbuf_reset(&p->held);
    p->state = p->fmt == OAI_FMT_LLAMA3 ? ST_TEXT : ST_OUTSIDE;
}

void oai_put_tool_calls(strbuf *out, const oai_call *calls, size_t from, size_t n, bool indexed) {
    strbuf_puts(out, "\"tool_calls\":[");
    for (size_t i = from; i < n; i++) {
        if (i > from) strbuf_putc(out, ',');
        strbuf_putc(out, '{');
        if (indexed) strbuf_printf(out, "\"index\":%zu,", i);
        strbuf_puts(out, "\"id\":");
        strbuf_json_str(out, calls[i].id, strlen(calls[i].id));
        strbuf_puts(out, ",\"type\":\"function\",\"function\":{\"name\":");
        strbuf_json_str(out, calls[i].name ? calls[i].name : "",
                        calls[i].name ? strlen(calls[i].name) : 0);
        strbuf_puts(out, ",\"arguments\":");
        strbuf_json_str(out, calls[i].arguments ? calls[i].arguments : "{}",
                        calls[i].arguments ? strlen(calls[i].arguments) : 2);
        strbuf_puts(out, "}}");
    }
    strbuf_putc(out, ']');
}
