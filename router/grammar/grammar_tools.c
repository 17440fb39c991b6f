/* grammar_tools: tool calls as GBNF in a format's shape (hermes <tool_call>, Llama 3 JSON, Mistral
 * [TOOL_CALLS]): forced calls, and under tool_choice auto the lazy grammar - free text until the
 * format's opening, the calls from there. */
#include "grammar_tools.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "grammar_internal.h"
#include "regex_gbnf.h"

/* A literal, or nothing for "" (GBNF has no empty literal to write). */
static void opt_literal(strbuf *o, const char *s) {
    if (s && *s) gbnf_literal(o, s, strlen(s)), strbuf_putc(o, ' ');
}

/* KMP's automaton over the trigger t: the state after reading c in state i (i characters of t
 * matched). */
static size_t kmp_next(const char *t, size_t i, char c) {
    while (i && t[i] != c) { /* the longest proper border of t[0..i) that c extends */
        size_t k = i - 1;
        while (k && strncmp(t, t + i - k, k))
            k--;
        i = k;
    }
    return t[i] == c ? i + 1 : 0;
}

/* A GBNF class member: c, escaped where classes need it. */
static void class_char(strbuf *o, char c) {
    if (strchr("\\]-^[", c)) strbuf_putc(o, '\\');
    strbuf_putc(o, c);
}

/* Rules free-0 .. free-(m-1): any text without the trigger t (free-i: i characters of it just
 * read), where reading all of t continues with rule `then`. Any state may end the text. */
static void free_text_rules(strbuf *o, const char *t, const char *then) {
    size_t m = strlen(t);
    char alpha[64] = "";
    for (size_t i = 0, n = 0; i < m && n + 1 < sizeof alpha; i++)
        if (!strchr(alpha, t[i])) alpha[n++] = t[i], alpha[n] = 0;
    for (size_t i = 0; i < m; i++) {
        strbuf_printf(o, "free-%zu ::= ( [^", i);
        for (const char *c = alpha; *c; c++)
            class_char(o, *c);
        strbuf_puts(o, "] free-0");
        for (const char *c = alpha; *c; c++) {
            size_t next = kmp_next(t, i, *c);
            strbuf_puts(o, " | ");
            gbnf_literal(o, c, 1);
            if (next == m)
                strbuf_printf(o, " %s", then);
            else
                strbuf_printf(o, " free-%zu", next);
        }
        strbuf_puts(o, " )?\n");
    }
}

/* Rules lead-0 .. lead-m for an answer that is calls when it opens (after whitespace) with a call
 * or with `start` (m characters), and free text otherwise: lead-i has read i characters of
 * start; a character that leaves start (or, first, that is neither `{` nor start's first) makes
 * the rest free. Any state but lead-0's call may end the text. */
static void lead_rules(strbuf *o, const char *start, const char *calls) {
    size_t m = strlen(start);
    strbuf_puts(o, "free-any ::= [^\\x00]*\n");
    for (size_t i = 0; i < m; i++) {
        strbuf_printf(o, "lead-%zu ::= ", i);
        if (!i) strbuf_printf(o, "%s | ", calls);
        gbnf_literal(o, start + i, 1);
        strbuf_printf(o, " lead-%zu | [^", i + 1);
        class_char(o, start[i]);
        strbuf_puts(o, i ? "" : "{ \\t\\n");
        strbuf_printf(o, "] free-any%s\n", i ? " | \"\"" : "");
    }
    strbuf_printf(o, "lead-%zu ::= [ \\t\\n]* %s\n", m, calls);
}

/* The calls' root: begin call (sep call)* end; lazy: free text, and from the trigger on the
 * rest of begin + open, the first call's body, then the others as above. */
static int calls_root(gg *c, strbuf *root, bool parallel, bool lazy, const gg_call_shape *shape) {
    strbuf more;
    strbuf_init(&more);
    if (parallel) {
        strbuf_puts(&more, "( ");
        opt_literal(&more, shape->sep);
        strbuf_puts(&more, "tool-call )* ");
    }
    opt_literal(&more, shape->end);
    if (!lazy) {
        opt_literal(root, shape->begin);
        strbuf_printf(root, "tool-call %s", more.data ? more.data : "");
    } else if (!shape->trigger) { /* calls or text, told apart by how the answer opens */
        strbuf_puts(c->out, "calls-all ::= ");
        opt_literal(c->out, shape->begin);
        strbuf_printf(c->out, "tool-call %s\n", more.data ? more.data : "");
        lead_rules(c->out, shape->start, "calls-all");
        strbuf_puts(root, "[ \\t\\n]* lead-0?");
    } else {
        char head[128];
        snprintf(head, sizeof head, "%s%s", shape->begin, shape->open);
        size_t tl = strlen(shape->trigger);
        strbuf_puts(c->out, "calls-rest ::= ");
        opt_literal(c->out, head + tl);
        strbuf_printf(c->out, "tool-body %s\n", more.data ? more.data : "");
        free_text_rules(c->out, shape->trigger, "calls-rest");
        strbuf_puts(root, "free-0");
    }
    strbuf_free(&more);
    return 0;
}

int gg_tool_calls(const char *const *names, const json_t *const *params, size_t n, bool parallel,
                  bool lazy, const gg_call_shape *shape, strbuf *out, sol_err *err) {
    gg c = {.out = out, .err = err};
    strbuf alts;
    strbuf_init(&alts);
    int rc = n ? 0 : sol_err_set(err, -EINVAL, "tool calls: no tools");
    if (!rc && lazy && !shape->trigger && !(shape->start && *shape->start))
        rc = sol_err_set(err, -EINVAL, "this tool format has no opening text to wait for");
    for (size_t i = 0; i < n && !rc; i++) {
        char args[32] = "json-obj", path[64];
        snprintf(path, sizeof path, "tools[%zu].function.parameters", i);
        c.root = params[i], c.def_base += c.n_refs, c.n_refs = 0;
        if (params[i])
            rc = gg_schema_rule(&c, params[i], path, args, 0);
        else
            c.used |= USE_VALUE;
        if (rc) break;
        char head[256];
        json_t *name = json_string(names[i]);
        char *quoted = json_dumps(name, JSON_ENCODE_ANY);
        if (shape->args_key)
            snprintf(head, sizeof head, "{\"name\": %s, \"%s\": ", quoted, shape->args_key);
        else
            snprintf(head, sizeof head, "%s%s%s", shape->name_pre, names[i], shape->name_post);
        free(quoted), json_decref(name);
        if (i) strbuf_puts(&alts, " | ");
        strbuf_puts(&alts, "( ");
        gbnf_literal(&alts, head, strlen(head));
        strbuf_printf(&alts, " %s ", args);
        char tail[64];
        snprintf(tail, sizeof tail, "%s%s", shape->args_key ? "}" : "", shape->close);
        if (*tail) gbnf_literal(&alts, tail, strlen(tail));
        strbuf_puts(&alts, " )");
    }
    strbuf root;
    strbuf_init(&root);
    if (!rc) {
        c.used |= USE_WS;
        strbuf_printf(out, "tool-body ::= %s\ntool-call ::= ", alts.data);
        opt_literal(out, shape->open);
        strbuf_puts(out, "tool-body\n");
        rc = calls_root(&c, &root, parallel, lazy, shape);
        if (!rc)
            rc = root.oom ? sol_err_set(err, -ENOMEM, "out of memory for the grammar")
                          : gg_finish(&c, root.data);
    }
    strbuf_free(&root);
    strbuf_free(&alts);
    return rc;
}
