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

#include "strbuf.h"

typedef enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT } role_t;

static const char *const ROLE_NAMES[] = {"system", "user", "assistant"};

static int parse_role(const char *role, size_t index, role_t *out, sol_err *err) {
    if (!role) return sol_err_set(err, -EINVAL, "chat message %zu: role is missing", index);
    for (int r = 0; r < 3; r++)
        if (strcmp(role, ROLE_NAMES[r]) == 0) {
            *out = (role_t)r;
            return 0;
        }
    return sol_err_set(err, -EINVAL,
                       "chat message %zu: unknown role \"%.64s\"; expected system, user or "
                       "assistant",
                       index, role);
}

/* ChatML, Llama-3 and Zephyr wrap every message the same way: header(role) content footer. */
static void render_wrapped(chat_template_family f, strbuf *b, role_t r, const char *content) {
    const char *role = ROLE_NAMES[r];
    switch (f) {
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
    if (f == CHAT_TEMPLATE_LLAMA3)
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

int chat_template_apply(chat_template_family f, const chat_message *msgs, size_t n,
                        bool add_generation_prompt, char **out, size_t *out_len, sol_err *err) {
    if (!out) return sol_err_set(err, -EINVAL, "chat template: out is NULL");
    *out = NULL;
    if ((unsigned)f >= CHAT_TEMPLATE_COUNT)
        return sol_err_set(err, -EINVAL, "chat template: unknown family %d", (int)f);
    if (n == 0 || !msgs)
        return sol_err_set(err, -EINVAL, "chat template: expected at least one message, got none");
    int inst = f == CHAT_TEMPLATE_LLAMA2 || f == CHAT_TEMPLATE_MISTRAL;
    const inst_style *st = f == CHAT_TEMPLATE_LLAMA2 ? &LLAMA2_STYLE : &MISTRAL_STYLE;
    inst_state is = {0, 0};
    strbuf b;
    strbuf_init(&b);
    for (size_t i = 0; i < n; i++) {
        role_t r = ROLE_USER;
        int rc = parse_role(msgs[i].role, i, &r, err);
        if (rc) {
            strbuf_free(&b);
            return rc;
        }
        const char *content = msgs[i].content ? msgs[i].content : "";
        if (inst)
            render_inst(st, &is, &b, r, content);
        else
            render_wrapped(f, &b, r, content);
    }
    if (add_generation_prompt) {
        /* For [INST] families the assistant header is the closing [/INST] itself. */
        if (inst)
            inst_close(&is, &b);
        else
            wrapped_generation_prompt(f, &b);
    }
    /* A message list of empty strings still yields a valid "" (strbuf_take allocates it). */
    char *text = b.oom ? NULL : strbuf_take(&b, out_len);
    if (!text) {
        strbuf_free(&b);
        return sol_err_set(err, -ENOMEM, "chat template: out of memory rendering %zu messages", n);
    }
    *out = text;
    return 0;
}

bool chat_template_detect_known(const char *src, chat_template_family *out) {
    chat_template_family f = CHAT_TEMPLATE_DEFAULT;
    bool known = true;
    if (!src || !*src)
        known = false;
    else if (strstr(src, "<|im_start|>"))
        f = CHAT_TEMPLATE_CHATML;
    else if (strstr(src, "<|start_header_id|>") && strstr(src, "<|end_header_id|>"))
        f = CHAT_TEMPLATE_LLAMA3;
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
    {"chatml", CHAT_TEMPLATE_CHATML},   {"qwen2", CHAT_TEMPLATE_CHATML},
    {"llama2", CHAT_TEMPLATE_LLAMA2},   {"llama-2", CHAT_TEMPLATE_LLAMA2},
    {"llama3", CHAT_TEMPLATE_LLAMA3},   {"llama-3", CHAT_TEMPLATE_LLAMA3},
    {"mistral", CHAT_TEMPLATE_MISTRAL}, {"zephyr", CHAT_TEMPLATE_ZEPHYR},
};

int chat_template_from_name(const char *name, chat_template_family *out, sol_err *err) {
    if (name)
        for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
            if (strcasecmp(name, NAMES[i].name) == 0) {
                if (out) *out = NAMES[i].family;
                return 0;
            }
    return sol_err_set(err, -EINVAL,
                       "chat template: unknown name \"%.64s\"; expected chatml, llama2, llama3, "
                       "mistral or zephyr",
                       name ? name : "(null)");
}

const char *chat_template_name(chat_template_family f) {
    static const char *const names[CHAT_TEMPLATE_COUNT] = {"chatml", "llama2", "llama3", "mistral",
                                                           "zephyr"};
    return (unsigned)f < CHAT_TEMPLATE_COUNT ? names[f] : "?";
}
