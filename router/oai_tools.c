/* oai_tools: parsing OpenAI's tool fields and extracting <tool_call> blocks from the output. */
#include "oai_tools.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_gen.h"
#include "openai.h"

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

int oai_tools_finish(oai_tools *t, char **grammar, const char **grammar_field, oai_error *err) {
    if (!t->n && t->choice_given && t->choice != OAI_TOOLS_NONE)
        return BAD(err, "tool_choice", "'tool_choice' needs 'tools'"), -EINVAL;
    /* With auto nothing constrains the model's calls: promises that need it are refused, not
     * silently unkept. */
    if (t->n && t->choice == OAI_TOOLS_AUTO && t->strict)
        return BAD(err, "tools",
                   "'strict': true is enforced with tool_choice required or a named "
                   "function; with auto the arguments are not constrained yet"),
               -EINVAL;
    if (t->n && t->choice == OAI_TOOLS_AUTO && t->parallel_given && !t->parallel)
        return BAD(err, "parallel_tool_calls",
                   "'parallel_tool_calls': false is enforced with "
                   "tool_choice required or a named function; with auto it is not yet"),
               -EINVAL;
    if (t->choice != OAI_TOOLS_REQUIRED && t->choice != OAI_TOOLS_NAMED) return 0;
    if (*grammar)
        return BAD(err, "tool_choice", "'tool_choice' %s and '%s' cannot be combined",
                   t->choice == OAI_TOOLS_NAMED ? "naming a function" : "required", *grammar_field),
               -EINVAL;
    const char *names[OAI_MAX_TOOLS];
    const json_t *params[OAI_MAX_TOOLS];
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->choice == OAI_TOOLS_REQUIRED || !strcmp(t->names[i], t->choice_name))
            names[n] = t->names[i], params[n++] = t->params[i];
    if (!n)
        return BAD(err, "tool_choice", "'tool_choice' names \"%s\", which is not in 'tools'",
                   t->choice_name),
               -EINVAL;
    strbuf g;
    strbuf_init(&g);
    sol_err e = {0};
    if (gg_tool_calls(names, params, n, t->parallel && t->choice == OAI_TOOLS_REQUIRED, &g, &e)) {
        strbuf_free(&g);
        return BAD(err, "tools", "%s", e.msg), -EINVAL;
    }
    *grammar = strbuf_take(&g, NULL);
    *grammar_field = "tool_choice";
    return 0;
}

/* ---- output --------------------------------------------------------------------------- */

static const char k_open[] = "<tool_call>", k_close[] = "</tool_call>";

void oai_call_parser_init(oai_call_parser *p, const char *request_id) {
    memset(p, 0, sizeof *p);
    strbuf_init(&p->held);
    snprintf(p->id_base, sizeof p->id_base, "call_%.24s", request_id);
}

void oai_call_parser_free(oai_call_parser *p) {
    for (size_t i = 0; i < p->n_calls; i++)
        free(p->calls[i].name), free(p->calls[i].arguments);
    free(p->calls);
    strbuf_free(&p->held);
}

/* The text between the tags: {"name": "...", "arguments": {...}} -> a call; else -1. */
static int add_call(oai_call_parser *p, const char *s, size_t n) {
    json_error_t je;
    json_t *o = json_loadb(s, n, 0, &je);
    const char *name = json_string_value(json_object_get(o, "name"));
    const json_t *args = json_object_get(o, "arguments");
    int rc = -1;
    if (name && (json_is_object(args) || json_is_string(args))) {
        oai_call *c = realloc(p->calls, (p->n_calls + 1) * sizeof *c);
        if (c) {
            p->calls = c;
            c += p->n_calls;
            snprintf(c->id, sizeof c->id, "%s_%zu", p->id_base, p->n_calls);
            c->name = strdup(name);
            c->arguments = json_is_string(args)
                               ? strdup(json_string_value(args))
                               : json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
            p->n_calls++;
            rc = 0;
        }
    }
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

int oai_call_parser_feed(oai_call_parser *p, const char *text, size_t len, strbuf *content) {
    size_t before = p->n_calls;
    if (strbuf_append(&p->held, text, len)) return -ENOMEM; /* allocates even for no text */
    for (;;) {
        char *h = p->held.data; /* never NULL: appended to above */
        if (!p->in_call) {
            char *at = strstr(h, k_open);
            size_t keep = at ? 0 : partial_tag(&p->held, 0, k_open);
            size_t out = at ? (size_t)(at - h) : p->held.len - keep;
            strbuf_append(content, h, out);
            memmove(h, h + out, p->held.len - out + 1);
            p->held.len -= out;
            if (!at) break;
            memmove(h, h + strlen(k_open), p->held.len - strlen(k_open) + 1);
            p->held.len -= strlen(k_open);
            p->in_call = true;
        } else {
            char *end = strstr(h, k_close);
            if (!end) break;
            if (add_call(p, h, (size_t)(end - h))) { /* not a call after all: content */
                strbuf_puts(content, k_open);
                strbuf_append(content, h, (size_t)(end - h) + strlen(k_close));
            }
            size_t used = (size_t)(end - h) + strlen(k_close);
            memmove(h, h + used, p->held.len - used + 1);
            p->held.len -= used;
            p->in_call = false;
        }
    }
    return (int)(p->n_calls - before);
}

void oai_call_parser_flush(oai_call_parser *p, strbuf *content) {
    if (p->in_call) strbuf_puts(content, k_open);
    strbuf_append(content, p->held.data ? p->held.data : "", p->held.len);
    strbuf_reset(&p->held);
    p->in_call = false;
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
