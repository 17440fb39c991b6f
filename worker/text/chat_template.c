/* chat_template: hand-written renderers for the common chat families, plus marker-based detection.
 *
 * Why no Jinja: the templates shipped in GGUF files are small programs; running them needs a
 * Jinja interpreter, which is a large attack surface for a worker that reads untrusted model
 * files. The handful of families below cover the models Sol targets; a template we cannot place
 * falls back to ChatML, which most recent fine-tunes understand, and the caller can override the
 * choice by name. */
#include "chat_template.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>

#include "chat_harmony.h"
#include "strbuf.h"

typedef enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL } role_t;

static const char *const ROLE_NAMES[] = {"system", "user", "assistant", "tool"};

static int parse_role(const char *role, size_t index, role_t *out, sol_err *err) {
    if (!role) return sol_err_set(err, -EINVAL, "chat message %zu: role is missing", index);
    for (int r = 0; r < 4; r++)
        if (strcmp(role, ROLE_NAMES[r]) == 0) {
            *out = (role_t)r;
            return 0;
        }
    return sol_err_set(err, -EINVAL,
                       "chat message %zu: unknown role \"%.64s\"; expected system, user, "
                       "assistant or tool",
                       index, role);
}

static bool is_role(const chat_message *m, role_t r) {
    return m->role && strcmp(m->role, ROLE_NAMES[r]) == 0;
}

static const char *text_of(const char *s) {
    return s ? s : "";
}

/* Jinja's `trim` (Python's str.strip) on ASCII whitespace, as the Llama 3.1 and Gemma templates
 * apply it to every message. */
static void put_trimmed(strbuf *b, const char *s) {
    size_t n = strlen(s), i = 0;
    while (i < n && strchr(" \t\n\r\f\v", s[i]))
        i++;
    while (n > i && strchr(" \t\n\r\f\v", s[n - 1]))
        n--;
    strbuf_append(b, s + i, n - i);
}

/* ChatML, Llama-3 and Zephyr wrap every message the same way: header(role) content footer. */
static void render_wrapped(chat_template_family f, strbuf *b, role_t r, const char *content) {
    const char *role = ROLE_NAMES[r];
    switch (f) {
    case CHAT_TEMPLATE_LLAMA31:
    case CHAT_TEMPLATE_LLAMA32:
        strbuf_puts(b, "<|start_header_id|>");
        strbuf_puts(b, role);
        strbuf_puts(b, "<|end_header_id|>\n\n");
        put_trimmed(b, content);
        strbuf_puts(b, "<|eot_id|>");
        break;
    case CHAT_TEMPLATE_GEMMA:
        strbuf_puts(b, "<start_of_turn>");
        strbuf_puts(b, r == ROLE_ASSISTANT ? "model" : role);
        strbuf_puts(b, "\n");
        put_trimmed(b, content);
        strbuf_puts(b, "<end_of_turn>\n");
        break;
    case CHAT_TEMPLATE_LLAMA3:
        strbuf_puts(b, "<|start_header_id|>");
        strbuf_puts(b, role);
        strbuf_puts(b, "<|end_header_id|>\n\n");
        strbuf_puts(b, content);
        strbuf_puts(b, "<|eot_id|>");
        break;
    case CHAT_TEMPLATE_ZEPHYR:
        strbuf_puts(b, "<|");
        strbuf_puts(b, role);
        strbuf_puts(b, "|>\n");
        strbuf_puts(b, content);
        strbuf_puts(b, "</s>\n");
        break;
    default:
        strbuf_puts(b, "<|im_start|>");
        strbuf_puts(b, role);
        strbuf_puts(b, "\n");
        strbuf_puts(b, content);
        strbuf_puts(b, "<|im_end|>\n");
        break;
    }
}

static void wrapped_generation_prompt(chat_template_family f, strbuf *b) {
    if (f == CHAT_TEMPLATE_GEMMA)
        strbuf_puts(b, "<start_of_turn>model\n");
    else if (f == CHAT_TEMPLATE_LLAMA3 || f == CHAT_TEMPLATE_LLAMA31 || f == CHAT_TEMPLATE_LLAMA32)
        strbuf_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    else if (f == CHAT_TEMPLATE_ZEPHYR)
        strbuf_puts(b, "<|assistant|>\n");
    else
        strbuf_puts(b, "<|im_start|>assistant\n");
}

/* Llama-2 and Mistral share the [INST] turn structure and differ in three strings. */
typedef struct inst_style {
    const char *sys_open, *sys_close; /* around a system message inside the open [INST] */
    const char *reopen;               /* opens every turn after the first */
    const char *answer_close;         /* after the assistant's content */
} inst_style;

static const inst_style LLAMA2_STYLE = {"<<SYS>>\n", "\n<</SYS>>\n\n", "<s>[INST] ", " </s>"};
static const inst_style MISTRAL_STYLE = {"", "\n\n", "[INST] ", "</s>"};

typedef struct inst_state {
    int started; /* anything written yet */
    int in_inst; /* an [INST] is open and not yet closed by [/INST] */
} inst_state;

static void inst_open(const inst_style *st, inst_state *s, strbuf *b) {
    if (s->in_inst) return;
    strbuf_puts(b, s->started ? st->reopen : "[INST] ");
    s->in_inst = 1;
    s->started = 1;
}

static void inst_close(inst_state *s, strbuf *b) {
    if (!s->in_inst) return;
    strbuf_puts(b, " [/INST]");
    s->in_inst = 0;
}

static void render_inst(const inst_style *st, inst_state *s, strbuf *b, role_t r,
                        const char *content) {
    if (r == ROLE_SYSTEM) {
        inst_open(st, s, b);
        strbuf_puts(b, st->sys_open);
        strbuf_puts(b, content);
        strbuf_puts(b, st->sys_close);
    } else if (r == ROLE_USER) {
        inst_open(st, s, b);
        strbuf_puts(b, content);
        inst_close(s, b);
    } else {
        inst_close(s, b); /* an assistant turn right after a lone system message */
        strbuf_puts(b, " ");
        strbuf_puts(b, content);
        strbuf_puts(b, st->answer_close);
        s->started = 1;
    }
}

/* Gemma 3: the system message opens the first user turn ("SYSTEM\n\nUSER"); only the user part
 * is trimmed, as the template writes it. */
static void gemma_first_user(strbuf *b, const char *system, const char *user) {
    strbuf_puts(b, "<start_of_turn>user\n");
    strbuf_puts(b, system ? system : "");
    strbuf_puts(b, "\n\n");
    put_trimmed(b, user);
    strbuf_puts(b, "<end_of_turn>\n");
}

/* strftime_now(fmt): today's local date, as engines (llama.cpp, transformers) answer it. */
static const char *today(const char *fmt, char out[32]) {
    time_t now = time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm) || !strftime(out, 32, fmt, &tm)) out[0] = '\0';
    return out;
}

/* What a family writes before the message loop, and which message the loop starts at: Llama 3.1's
 * system block (knowledge-date header, then the trimmed system message, if any); Gemma's system
 * message, held for the first user turn. */
static int prologue(chat_template_family f, const chat_message *msgs, size_t n, bool tools,
                    strbuf *b, size_t *first, sol_err *err) {
    int has_system = msgs[0].role && strcmp(msgs[0].role, "system") == 0;
    *first = 0;
    if (f == CHAT_TEMPLATE_LLAMA31 || f == CHAT_TEMPLATE_LLAMA32) {
        /* 3.1 and 3.3 write their default date_string; 3.2 asks strftime_now("%d %b %Y"), which
         * engines (llama.cpp, transformers) answer with today's local date */
        char date[32];
        strbuf_puts(b, "<|start_header_id|>system<|end_header_id|>\n\n");
        if (tools) strbuf_puts(b, "Environment: ipython\n");
        strbuf_puts(b, "Cutting Knowledge Date: December 2023\nToday Date: ");
        strbuf_puts(b, f == CHAT_TEMPLATE_LLAMA32 ? today("%d %b %Y", date) : "26 Jul 2024");
        strbuf_puts(b, "\n\n");
        if (has_system) put_trimmed(b, msgs[0].content ? msgs[0].content : "");
        strbuf_puts(b, "<|eot_id|>");
        *first = (size_t)has_system;
    }
    if (f == CHAT_TEMPLATE_GEMMA && has_system) {
        if (n < 2 || !msgs[1].role || strcmp(msgs[1].role, "user") != 0)
            return sol_err_set(err, -EINVAL,
                               "chat message 1: the gemma template needs a user message after "
                               "the system message");
        *first = 1;
    }
    return 0;
}

/* Every family but the Qwen ones: roles system, user and assistant, content only. */
static int render_plain(chat_template_family f, const chat_message *msgs, size_t n,
                        bool add_generation_prompt, strbuf *out, sol_err *err) {
    int inst = f == CHAT_TEMPLATE_LLAMA2 || f == CHAT_TEMPLATE_MISTRAL;
    const inst_style *st = f == CHAT_TEMPLATE_LLAMA2 ? &LLAMA2_STYLE : &MISTRAL_STYLE;
    inst_state is = {0, 0};
    strbuf *b = out;
    size_t first = 0;
    int rc = prologue(f, msgs, n, false, b, &first, err);
    for (size_t i = first; i < n && !rc; i++) {
        role_t r = ROLE_USER;
        if ((rc = parse_role(msgs[i].role, i, &r, err))) break;
        const char *content = msgs[i].content ? msgs[i].content : "";
        if (inst)
            render_inst(st, &is, b, r, content);
        else if (f == CHAT_TEMPLATE_GEMMA && r == ROLE_SYSTEM)
            rc = sol_err_set(err, -EINVAL,
                             "chat message %zu: the gemma template takes a system message only "
                             "first (it becomes the start of the first user turn)",
                             i);
        else if (f == CHAT_TEMPLATE_GEMMA && i == first && first == 1 && r == ROLE_USER)
            gemma_first_user(b, msgs[0].content, content);
        else
            render_wrapped(f, b, r, content);
    }
    if (rc) return rc;
    if (add_generation_prompt) {
        /* For [INST] families the assistant header is the closing [/INST] itself. */
        if (inst)
            inst_close(&is, b);
        else
            wrapped_generation_prompt(f, b);
    }
    return 0;
}

/* ---- Qwen2.5 / Qwen3: tools and Qwen3's reasoning (their templates, rewritten) ---------- */

static const char QWEN_DEFAULT_SYSTEM[] =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
static const char QWEN_TOOLS_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char QWEN_TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

/* A string as Jinja's tojson prints it (JSON.stringify / Python json.dumps, ensure_ascii off). */
static void put_json_string(strbuf *b, const char *s) {
    strbuf_puts(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        const char *esc = c == '"'    ? "\\\""
                          : c == '\\' ? "\\\\"
                          : c == '\b' ? "\\b"
                          : c == '\f' ? "\\f"
                          : c == '\n' ? "\\n"
                          : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t"
                                      : NULL;
        if (esc)
            strbuf_puts(b, esc);
        else if (c < 0x20)
            strbuf_printf(b, "\\u%04x", c);
        else
            strbuf_append(b, s, 1);
    }
    strbuf_puts(b, "\"");
}

/* The system block: with tools, the system message (or Qwen2.5's default) and the tool list;
 * without, the system message (or Qwen2.5's default; Qwen3 has none). */
static void qwen_prologue(chat_template_family f, const chat_message *m, const chat_tools *tools,
                          strbuf *b) {
    bool sys = is_role(&m[0], ROLE_SYSTEM), q3 = f == CHAT_TEMPLATE_QWEN3;
    if (tools && tools->n) {
        strbuf_puts(b, "<|im_start|>system\n");
        if (sys) strbuf_puts(b, text_of(m[0].content));
        if (!sys && !q3) strbuf_puts(b, QWEN_DEFAULT_SYSTEM);
        if (sys || !q3) strbuf_puts(b, "\n\n");
        strbuf_puts(b, QWEN_TOOLS_HEAD);
        for (size_t i = 0; i < tools->n; i++) {
            strbuf_puts(b, "\n");
            strbuf_puts(b, tools->json[i]);
        }
        strbuf_puts(b, QWEN_TOOLS_TAIL);
    } else if (sys || !q3) {
        strbuf_puts(b, "<|im_start|>system\n");
        strbuf_puts(b, sys ? text_of(m[0].content) : QWEN_DEFAULT_SYSTEM);
        strbuf_puts(b, "<|im_end|>\n");
    }
}

static void qwen_tool_calls(chat_template_family f, const chat_message *m, bool content,
                            strbuf *b) {
    for (size_t j = 0; j < m->n_tool_calls; j++) {
        const chat_tool_call *tc = &m->tool_calls[j];
        if (f == CHAT_TEMPLATE_QWEN25 || content || j > 0) strbuf_puts(b, "\n");
        strbuf_puts(b, "<tool_call>\n{\"name\": \"");
        strbuf_puts(b, text_of(tc->name));
        strbuf_puts(b, "\", \"arguments\": ");
        /* Qwen2.5 passes every argument through tojson; Qwen3 prints a string as it is. */
        if (tc->arguments_is_string && f == CHAT_TEMPLATE_QWEN25)
            put_json_string(b, text_of(tc->arguments));
        else
            strbuf_puts(b, text_of(tc->arguments));
        strbuf_puts(b, "}\n</tool_call>");
    }
    strbuf_puts(b, "<|im_end|>\n");
}

typedef struct span {
    const char *p;
    size_t n;
} span;

static span lstrip_nl(span s) {
    while (s.n && *s.p == '\n')
        s.p++, s.n--;
    return s;
}

static span rstrip_nl(span s) {
    while (s.n && s.p[s.n - 1] == '\n')
        s.n--;
    return s;
}

static const char *last_of(const char *s, size_t n, const char *needle) {
    const char *hit = NULL;
    for (const char *p = s; (p = memmem(p, n - (size_t)(p - s), needle, strlen(needle))); p++)
        hit = p;
    return hit;
}

/* Qwen3's split of an assistant message into reasoning and answer: reasoning_content when
 * given, else the text between <think> and the first </think>, the answer after the last. */
static void qwen3_split(const chat_message *m, span *content, span *reasoning) {
    const char *c = text_of(m->content);
    *content = (span){c, strlen(c)};
    *reasoning = (span){"", 0};
    if (m->reasoning_content) {
        *reasoning = (span){m->reasoning_content, strlen(m->reasoning_content)};
        return;
    }
    const char *first = strstr(c, "</think>");
    if (!first) return;
    const char *last = last_of(c, content->n, "</think>");
    *content = lstrip_nl((span){last + 8, strlen(last + 8)});
    span pre = rstrip_nl((span){c, (size_t)(first - c)});
    const char *open = last_of(pre.p, pre.n, "<think>");
    if (open) pre = (span){open + 7, pre.n - (size_t)(open + 7 - pre.p)};
    *reasoning = lstrip_nl(pre);
}

static void qwen3_assistant(const chat_message *m, bool after_query, bool last, strbuf *b) {
    span content, reasoning;
    qwen3_split(m, &content, &reasoning);
    strbuf_puts(b, "<|im_start|>assistant\n");
    if (after_query && (last || reasoning.n)) {
        span r = rstrip_nl(lstrip_nl(reasoning)), c = lstrip_nl(content);
        strbuf_puts(b, "<think>\n");
        strbuf_append(b, r.p, r.n);
        strbuf_puts(b, "\n</think>\n\n");
        strbuf_append(b, c.p, c.n);
    } else {
        strbuf_append(b, content.p, content.n);
    }
    qwen_tool_calls(CHAT_TEMPLATE_QWEN3, m, content.n > 0, b);
}

static void qwen25_assistant(const chat_message *m, strbuf *b) {
    const char *c = text_of(m->content);
    if (!m->n_tool_calls) {
        render_wrapped(CHAT_TEMPLATE_QWEN25, b, ROLE_ASSISTANT, c);
        return;
    }
    strbuf_puts(b, "<|im_start|>assistant");
    if (*c) {
        strbuf_puts(b, "\n");
        strbuf_puts(b, c);
    }
    qwen_tool_calls(CHAT_TEMPLATE_QWEN25, m, *c != 0, b);
}

/* Qwen3's last real user query: the last user message that is not a wrapped tool response. */
static size_t qwen3_last_query(const chat_message *m, size_t n) {
    for (size_t i = n; i-- > 0;) {
        const char *c = text_of(m[i].content);
        size_t len = strlen(c);
        bool wrapped = len >= 31 && strncmp(c, "<tool_response>", 15) == 0 &&
                       strcmp(c + len - 16, "</tool_response>") == 0;
        if (is_role(&m[i], ROLE_USER) && !wrapped) return i;
    }
    return n - 1;
}

static int render_qwen(chat_template_family f, const chat_message *m, size_t n,
                       const chat_tools *tools, bool add_generation_prompt, strbuf *b,
                       sol_err *err) {
    role_t r = ROLE_USER;
    for (size_t i = 0; i < n; i++)
        if (parse_role(m[i].role, i, &r, err)) return err->code;
    qwen_prologue(f, m, tools, b);
    size_t lq = qwen3_last_query(m, n);
    for (size_t i = 0; i < n; i++) {
        parse_role(m[i].role, i, &r, err);
        if (r == ROLE_USER || (r == ROLE_SYSTEM && i > 0)) {
            render_wrapped(f, b, r, text_of(m[i].content));
        } else if (r == ROLE_ASSISTANT) {
            if (f == CHAT_TEMPLATE_QWEN3)
                qwen3_assistant(&m[i], i > lq, i + 1 == n, b);
            else
                qwen25_assistant(&m[i], b);
        } else if (r == ROLE_TOOL) {
            if (i == 0 || !is_role(&m[i - 1], ROLE_TOOL)) strbuf_puts(b, "<|im_start|>user");
            strbuf_puts(b, "\n<tool_response>\n");
            strbuf_puts(b, text_of(m[i].content));
            strbuf_puts(b, "\n</tool_response>");
            if (i + 1 == n || !is_role(&m[i + 1], ROLE_TOOL)) strbuf_puts(b, "<|im_end|>\n");
        }
    }
    if (add_generation_prompt) strbuf_puts(b, "<|im_start|>assistant\n");
    return 0;
}

/* ---- Llama 3.1 / 3.2 with tools (their templates, tools_in_user_message as by default) ---- */

static const char LLAMA_TOOLS_HEAD[] =
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": "
    "function name, \"parameters\": dictionary of argument name and its value}.Do not use "
    "variables.\n\n";

static void put_indent(strbuf *b, int depth) {
    strbuf_putc(b, '\n');
    for (int i = 0; i < depth; i++)
        strbuf_puts(b, "    ");
}

/* JSON text (any layout) as Python's json.dumps(indent=4) prints it, which the template's
 * tojson(indent=4) is: one member per line, "," at line ends, ": " after keys, {} and [] when
 * empty. Tokens (strings, numbers) are copied as they are. */
static void put_json_indented(strbuf *b, const char *s) {
    int depth = 0;
    for (; *s; s++) {
        char c = *s;
        if (c == '"') {
            const char *e = s + 1;
            while (*e && *e != '"')
                e += e[0] == '\\' && e[1] ? 2 : 1;
            strbuf_append(b, s, (size_t)(e - s) + (*e ? 1 : 0));
            s = *e ? e : e - 1;
        } else if (c == '{' || c == '[') {
            const char *k = s + 1;
            while (*k && strchr(" \t\r\n", *k))
                k++;
            if (*k == (c == '{' ? '}' : ']')) {
                strbuf_putc(b, c), strbuf_putc(b, *k);
                s = k;
            } else {
                strbuf_putc(b, c);
                put_indent(b, ++depth);
            }
        } else if (c == '}' || c == ']') {
            put_indent(b, --depth);
            strbuf_putc(b, c);
        } else if (c == ',') {
            strbuf_putc(b, ',');
            put_indent(b, depth);
        } else if (c == ':') {
            strbuf_puts(b, ": ");
        } else if (!strchr(" \t\r\n", c)) {
            strbuf_putc(b, c);
        }
    }
}

/* The first user turn carrying the function list (the template takes the message after the
 * system one as that turn, so it must be the user's). */
static int llama_tools_turn(chat_template_family f, const chat_message *m, size_t n, size_t *i,
                            const chat_tools *tools, strbuf *b, sol_err *err) {
    if (*i >= n || !is_role(&m[*i], ROLE_USER))
        return sol_err_set(err, -EINVAL,
                           "chat message %zu: the %s template puts the tools into the first "
                           "user message, and this is not one",
                           *i, chat_template_name(f));
    strbuf_puts(b, "<|start_header_id|>user<|end_header_id|>\n\n");
    strbuf_puts(b, LLAMA_TOOLS_HEAD);
    for (size_t t = 0; t < tools->n; t++) {
        put_json_indented(b, tools->json[t]);
        strbuf_puts(b, "\n\n");
    }
    put_trimmed(b, text_of(m[*i].content));
    strbuf_puts(b, "<|eot_id|>");
    (*i)++;
    return 0;
}

/* A call's arguments are printed as the object they encode (tojson of a mapping), as llama.cpp
 * and vLLM hand them to these templates. */
static int render_llama(chat_template_family f, const chat_message *m, size_t n,
                        const chat_tools *tools, bool add_generation_prompt, strbuf *b,
                        sol_err *err) {
    bool with = tools && tools->n;
    size_t i;
    int rc = prologue(f, m, n, with, b, &i, err);
    if (!rc && with) rc = llama_tools_turn(f, m, n, &i, tools, b, err);
    for (; i < n && !rc; i++) {
        role_t r = ROLE_USER;
        if ((rc = parse_role(m[i].role, i, &r, err))) break;
        if (r == ROLE_TOOL) {
            strbuf_puts(b, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            put_json_string(b, text_of(m[i].content)); /* a string "is iterable": tojson */
            strbuf_puts(b, "<|eot_id|>");
        } else if (m[i].n_tool_calls > 1) {
            rc = sol_err_set(err, -EINVAL,
                             "chat message %zu: the %s template takes one tool call per "
                             "assistant message, not %zu",
                             i, chat_template_name(f), m[i].n_tool_calls);
        } else if (m[i].n_tool_calls) {
            strbuf_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"");
            strbuf_puts(b, text_of(m[i].tool_calls[0].name));
            strbuf_puts(b, "\", \"parameters\": ");
            strbuf_puts(b, text_of(m[i].tool_calls[0].arguments));
            strbuf_puts(b, "}<|eot_id|>");
        } else {
            render_wrapped(f, b, r, text_of(m[i].content));
        }
    }
    if (!rc && add_generation_prompt) wrapped_generation_prompt(f, b);
    return rc;
}

/* ---- Mistral v0.3 (its template: tools before the last user turn, 9-character call ids) ---- */

/* The template insists on ids of 9 letters and digits; others (OpenAI's "call_...") are mapped
 * the same way wherever they appear, so a call and its result still match: the last 9 letters
 * and digits, left-padded with 0. */
static void put_mistral_id(strbuf *b, const char *id) {
    char out[10] = "000000000";
    size_t k = 9;
    for (size_t i = strlen(text_of(id)); i-- > 0 && k > 0;) {
        char c = id[i];
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            out[--k] = c;
    }
    strbuf_puts(b, out);
}

/* [AVAILABLE_TOOLS] [{"type": "function", "function": {...}}, ...][/AVAILABLE_TOOLS]: the
 * function's string fields are written raw, the others through tojson; "return" is left out. */
static int mistral_tools(const chat_tools *tools, strbuf *b, sol_err *err) {
    strbuf_puts(b, "[AVAILABLE_TOOLS] [");
    for (size_t t = 0; t < tools->n; t++) {
        json_t *tool = json_loads(tools->json[t], 0, NULL);
        json_t *fn = json_object_get(tool, "function");
        if (!json_is_object(fn)) {
            json_decref(tool);
            return sol_err_set(err, -EINVAL, "tools[%zu]: not a {\"type\": \"function\"} tool", t);
        }
        strbuf_puts(b, "{\"type\": \"function\", \"function\": {");
        const char *key;
        json_t *val;
        bool first = true;
        json_object_foreach(fn, key, val) {
            if (!strcmp(key, "return")) continue;
            strbuf_printf(b, "%s\"%s\": ", first ? "" : ", ", key);
            first = false;
            char *txt = json_is_string(val) ? NULL : json_dumps(val, JSON_ENCODE_ANY);
            if (json_is_string(val))
                strbuf_printf(b, "\"%s\"", json_string_value(val));
            else
                strbuf_puts(b, txt ? txt : "null");
            free(txt);
        }
        json_decref(tool);
        strbuf_puts(b, t + 1 < tools->n ? "}}, " : "}}]");
    }
    strbuf_puts(b, "[/AVAILABLE_TOOLS]");
    return 0;
}

static void mistral_calls(const chat_message *m, strbuf *b) {
    strbuf_puts(b, "[TOOL_CALLS] [");
    for (size_t j = 0; j < m->n_tool_calls; j++) {
        strbuf_puts(b, "{\"name\": ");
        put_json_string(b, text_of(m->tool_calls[j].name));
        strbuf_puts(b, ", \"arguments\": ");
        strbuf_puts(b, text_of(m->tool_calls[j].arguments));
        strbuf_puts(b, ", \"id\": \"");
        put_mistral_id(b, m->tool_calls[j].id);
        strbuf_puts(b, j + 1 < m->n_tool_calls ? "\"}, " : "\"}]</s>");
    }
}

static int render_mistral_v3(const chat_message *m, size_t n, const chat_tools *tools, strbuf *b,
                             sol_err *err) {
    size_t first = is_role(&m[0], ROLE_SYSTEM) ? 1 : 0, last_user = n;
    for (size_t i = n; i-- > first && last_user == n;)
        if (is_role(&m[i], ROLE_USER)) last_user = i;
    int rc = 0;
    for (size_t i = first; i < n && !rc; i++) {
        role_t r = ROLE_USER;
        if ((rc = parse_role(m[i].role, i, &r, err))) break;
        if (r == ROLE_USER) {
            if (tools && tools->n && i == last_user && (rc = mistral_tools(tools, b, err))) break;
            strbuf_puts(b, "[INST] ");
            if (first && i + 1 == n) { /* the template gives the system message to a last turn */
                strbuf_puts(b, text_of(m[0].content));
                strbuf_puts(b, "\n\n");
            }
            strbuf_puts(b, text_of(m[i].content));
            strbuf_puts(b, "[/INST]");
        } else if (r == ROLE_ASSISTANT && m[i].n_tool_calls) {
            mistral_calls(&m[i], b);
        } else if (r == ROLE_ASSISTANT) {
            strbuf_puts(b, " ");
            put_trimmed(b, text_of(m[i].content));
            strbuf_puts(b, "</s>");
        } else if (r == ROLE_TOOL) {
            strbuf_puts(b, "[TOOL_RESULTS] {\"content\": ");
            strbuf_puts(b, text_of(m[i].content));
            strbuf_puts(b, ", \"call_id\": \"");
            put_mistral_id(b, m[i].tool_call_id);
            strbuf_puts(b, "\"}[/TOOL_RESULTS]");
        } else {
            rc = sol_err_set(err, -EINVAL,
                             "chat message %zu: the mistral-v3 template takes a system message "
                             "only first",
                             i);
        }
    }
    return rc;
}

const char *chat_template_tool_format(chat_template_family f) {
    switch (f) {
    case CHAT_TEMPLATE_QWEN25:
    case CHAT_TEMPLATE_QWEN3:
        return "hermes";
    case CHAT_TEMPLATE_LLAMA31:
    case CHAT_TEMPLATE_LLAMA32:
        return "llama3-json";
    case CHAT_TEMPLATE_MISTRAL_V3:
        return "mistral";
    case CHAT_TEMPLATE_HARMONY:
        return "harmony";
    default:
        return NULL;
    }
}

bool chat_template_supports_tools(chat_template_family f) {
    return chat_template_tool_format(f) != NULL;
}

/* Tools, tool calls, tool messages or reasoning given to a family that has no place for them:
 * refused by name, never dropped. */
static int check_extras(chat_template_family f, const chat_message *m, size_t n,
                        const chat_tools *tools, sol_err *err) {
    bool tooling = chat_template_supports_tools(f);
    if (tools && tools->n && !tooling)
        return sol_err_set(err, -ENOTSUP,
                           "chat template %s has no tool format (tools are rendered by the "
                           "qwen2.5, qwen3, llama3.1, llama3.2, mistral-v3 and harmony templates)",
                           chat_template_name(f));
    for (size_t i = 0; i < n; i++) {
        const char *what =
            m[i].n_tool_calls && !is_role(&m[i], ROLE_ASSISTANT)
                ? "tool_calls on a message that is not the assistant's"
            : (m[i].n_tool_calls || is_role(&m[i], ROLE_TOOL)) && !tooling
                ? "tool calls and tool messages"
            : m[i].reasoning_content && f != CHAT_TEMPLATE_QWEN3 && f != CHAT_TEMPLATE_HARMONY
                ? "reasoning_content"
                : NULL;
        if (what)
            return sol_err_set(err, -ENOTSUP,
                               "chat message %zu: the %s chat template has no place for %s", i,
                               chat_template_name(f), what);
    }
    return 0;
}

int chat_template_apply_tools(chat_template_family f, const chat_message *msgs, size_t n,
                              const chat_tools *tools, bool add_generation_prompt, char **out,
                              size_t *out_len, sol_err *err) {
    if (!out) return sol_err_set(err, -EINVAL, "chat template: out is NULL");
    *out = NULL;
    if ((unsigned)f >= CHAT_TEMPLATE_COUNT)
        return sol_err_set(err, -EINVAL, "chat template: unknown family %d", (int)f);
    if (n == 0 || !msgs)
        return sol_err_set(err, -EINVAL, "chat template: expected at least one message, got none");
    int rc = check_extras(f, msgs, n, tools, err);
    if (rc) return rc;
    strbuf b;
    strbuf_init(&b);
    char date[32];
    if (f == CHAT_TEMPLATE_QWEN25 || f == CHAT_TEMPLATE_QWEN3)
        rc = render_qwen(f, msgs, n, tools, add_generation_prompt, &b, err);
    else if (f == CHAT_TEMPLATE_LLAMA31 || f == CHAT_TEMPLATE_LLAMA32)
        rc = render_llama(f, msgs, n, tools, add_generation_prompt, &b, err);
    else if (f == CHAT_TEMPLATE_MISTRAL_V3)
        rc = render_mistral_v3(msgs, n, tools, &b, err); /* [/INST] is the generation prompt */
    else if (f == CHAT_TEMPLATE_HARMONY)
        rc = chat_harmony_render(msgs, n, tools, add_generation_prompt, today("%Y-%m-%d", date), &b,
                                 err);
    else
        rc = render_plain(f, msgs, n, add_generation_prompt, &b, err);
    /* A message list of empty strings still yields a valid "" (strbuf_take allocates it). */
    char *text = rc || b.oom ? NULL : strbuf_take(&b, out_len);
    if (!text) {
        strbuf_free(&b);
        return rc ? rc
                  : sol_err_set(err, -ENOMEM, "chat template: out of memory rendering %zu messages",
                                n);
    }
    *out = text;
    return 0;
}

int chat_template_apply(chat_template_family f, const chat_message *msgs, size_t n,
                        bool add_generation_prompt, char **out, size_t *out_len, sol_err *err) {
    return chat_template_apply_tools(f, msgs, n, NULL, add_generation_prompt, out, out_len, err);
}

bool chat_template_detect_known(const char *src, chat_template_family *out) {
    chat_template_family f = CHAT_TEMPLATE_DEFAULT;
    bool known = true;
    if (!src || !*src)
        known = false;
    else if (strstr(src, "<|start|>") && strstr(src, "<|channel|>"))
        f = CHAT_TEMPLATE_HARMONY;
    else if (strstr(src, "<|im_start|>"))
        f = strstr(src, "You are Qwen, created by Alibaba Cloud") ? CHAT_TEMPLATE_QWEN25
            : strstr(src, "<tool_response>") && strstr(src, "reasoning_content")
                ? CHAT_TEMPLATE_QWEN3
                : CHAT_TEMPLATE_CHATML;
    else if (strstr(src, "<|start_header_id|>") && strstr(src, "<|end_header_id|>"))
        f = !strstr(src, "Cutting Knowledge Date") ? CHAT_TEMPLATE_LLAMA3
            : strstr(src, "strftime_now")          ? CHAT_TEMPLATE_LLAMA32
                                                   : CHAT_TEMPLATE_LLAMA31;
    else if (strstr(src, "<start_of_turn>") && strstr(src, "<end_of_turn>"))
        f = CHAT_TEMPLATE_GEMMA;
    else if (strstr(src, "[AVAILABLE_TOOLS]") && strstr(src, "[INST]"))
        f = CHAT_TEMPLATE_MISTRAL_V3;
    else if (strstr(src, "[INST]"))
        f = strstr(src, "<<SYS>>") ? CHAT_TEMPLATE_LLAMA2 : CHAT_TEMPLATE_MISTRAL;
    else if (strstr(src, "<|user|>") && strstr(src, "<|assistant|>") && !strstr(src, "<|end|>"))
        f = CHAT_TEMPLATE_ZEPHYR; /* Phi-3 shares the tags but ends turns with <|end|> */
    else
        known = false;
    if (out) *out = f;
    return known;
}

chat_template_family chat_template_detect(const char *jinja_source) {
    chat_template_family f;
    chat_template_detect_known(jinja_source, &f);
    return f;
}

static const struct {
    const char *name;
    chat_template_family family;
} NAMES[] = {
    {"chatml", CHAT_TEMPLATE_CHATML},
    {"qwen2", CHAT_TEMPLATE_CHATML},
    {"llama2", CHAT_TEMPLATE_LLAMA2},
    {"llama-2", CHAT_TEMPLATE_LLAMA2},
    {"llama3", CHAT_TEMPLATE_LLAMA3},
    {"llama-3", CHAT_TEMPLATE_LLAMA3},
    {"mistral", CHAT_TEMPLATE_MISTRAL},
    {"zephyr", CHAT_TEMPLATE_ZEPHYR},
    {"qwen2.5", CHAT_TEMPLATE_QWEN25},
    {"llama3.1", CHAT_TEMPLATE_LLAMA31},
    {"gemma", CHAT_TEMPLATE_GEMMA},
    {"gemma2", CHAT_TEMPLATE_GEMMA},
    {"gemma3", CHAT_TEMPLATE_GEMMA},
    {"llama3.2", CHAT_TEMPLATE_LLAMA32},
    {"qwen3", CHAT_TEMPLATE_QWEN3},
    {"mistral-v3", CHAT_TEMPLATE_MISTRAL_V3},
    {"mistral-v0.3", CHAT_TEMPLATE_MISTRAL_V3},
    {"harmony", CHAT_TEMPLATE_HARMONY},
    {"gpt-oss", CHAT_TEMPLATE_HARMONY},
};

int chat_template_from_name(const char *name, chat_template_family *out, sol_err *err) {
    if (name)
        for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
            if (strcasecmp(name, NAMES[i].name) == 0) {
                if (out) *out = NAMES[i].family;
                return 0;
            }
    return sol_err_set(
        err, -EINVAL,
        "chat template: unknown name \"%.64s\"; expected chatml, llama2, llama3, "
        "mistral, mistral-v3, zephyr, qwen2.5, qwen3, llama3.1, llama3.2, gemma or harmony",
        name ? name : "(null)");
}

const char *chat_template_name(chat_template_family f) {
    static const char *const names[CHAT_TEMPLATE_COUNT] = {
        "chatml",   "llama2", "llama3",   "mistral", "zephyr",     "qwen2.5",
        "llama3.1", "gemma",  "llama3.2", "qwen3",   "mistral-v3", "harmony"};
    return (unsigned)f < CHAT_TEMPLATE_COUNT ? names[f] : "?";
}
