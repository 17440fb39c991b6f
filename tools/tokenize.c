/* sol-tokenize: tokenizes text with a GGUF file's tokenizer, one input line per output line of
 * ids, so tests can compare Sol with llama.cpp; --vocab-test checks llama.cpp's .inp/.out pairs;
 * --render-chat prints the prompt a chat template makes of messages (compared with Jinja). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "args.h"
#include "chat_template.h"
#include "err.h"
#include "gguf.h"
#include "strbuf.h"
#include "tokenizer.h"

static void usage(FILE *f) {
    fprintf(f, "usage: sol-tokenize -m VOCAB.gguf [--no-bos] [--special] [--escapes] < lines\n"
               "       sol-tokenize -m VOCAB.gguf --vocab-test FILE.inp FILE.out\n"
               "  prints the ids of each stdin line (newline excluded), space-separated\n"
               "  --no-bos    do not add BOS/EOS (llama.cpp add_special = false)\n"
               "  --special   parse control tokens written in the text\n"
               "  --escapes   decode \\n \\t \\r \\\\ in each line first\n"
               "  --roundtrip check decode(encode(line)) == line instead of printing ids\n"
               "       sol-tokenize --render-chat MESSAGES.json (--template NAME |\n"
               "                    --template-file JINJA | -m MODEL.gguf) [--no-gen-prompt]\n"
               "                    [--tools TOOLS.json]\n"
               "  prints the prompt Sol's chat template family makes of a JSON array of\n"
               "  messages ({role, content}, and for the assistant tool_calls and\n"
               "  reasoning_content; role tool for results) and optionally a JSON array of\n"
               "  OpenAI tools (the family named, or detected from the Jinja source or the\n"
               "  model's tokenizer.chat_template), no newline added\n");
}

static size_t unescape(char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n) {
            char c = s[++i];
            s[o++] = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
            if (c != 'n' && c != 't' && c != 'r' && c != '\\') {
                s[o - 1] = '\\';
                s[o++] = c;
            }
        } else {
            s[o++] = s[i];
        }
    }
    return o;
}

/* Tokenize into a growing buffer; returns the count or a negative error. */
static int encode(const tokenizer *t, const char *s, size_t n, int bos, int special, int32_t **ids,
                  int *cap) {
    int k = tokenizer_encode(t, s, n, bos, special, *ids, *cap);
    if (k > *cap) {
        int32_t *p = realloc(*ids, sizeof *p * (size_t)k);
        if (!p) return -ENOMEM;
        *ids = p;
        *cap = k;
        k = tokenizer_encode(t, s, n, bos, special, *ids, *cap);
    }
    return k;
}

/* decode(encode(text)) must give the text back (valid UTF-8 input, specials not parsed). */
static int check_roundtrip(const tokenizer *t, const char *s, size_t n, const int32_t *ids, int k) {
    static char buf[1 << 16];
    int m = tokenizer_decode(t, ids, k, TOK_DECODE_FROM_START, buf, sizeof buf);
    if (m == (int)n && memcmp(buf, s, n) == 0) return 0;
    fprintf(stderr, "roundtrip: '%.*s' came back as '%.*s'\n", (int)n, s,
            m < 0 ? 0 : (int)(m < (int)sizeof buf ? m : (int)sizeof buf - 1), buf);
    return 1;
}

/* The whole file, NUL-terminated, for the caller to free; NULL when it cannot be read. */
static char *slurp(const char *path, size_t *n) {
    strbuf b;
    strbuf_init(&b);
    if (strbuf_read_file(&b, path) || !b.data) {
        strbuf_free(&b);
        return NULL;
    }
    return strbuf_take(&b, n);
}

/* llama.cpp's test-tokenizer-0 format: inputs separated by "\n__ggml_vocab_test__\n", one line of
 * expected ids per input, tokenized without BOS and without parsing specials. */
static int vocab_test(const tokenizer *t, const char *inp, const char *outp) {
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t ni, no;
    char *in = slurp(inp, &ni), *out = slurp(outp, &no);
    int32_t *ids = NULL;
    int cap = 0, fails = 0, cases = 0;
    if (!in || !out) {
        fprintf(stderr, "sol-tokenize: cannot read %s or %s\n", inp, outp);
        return 2;
    }
    char *lp = out, *oend = out + no;
    for (size_t pos = 0; pos < ni; cases++) {
        char *hit = memmem(in + pos, ni - pos, sep, sizeof sep - 1);
        size_t end = hit ? (size_t)(hit - in) : ni;
        char *nl = memchr(lp, '\n', (size_t)(oend - lp));
        if (!nl) nl = oend;
        int k = encode(t, in + pos, end - pos, 0, 0, &ids, &cap);
        char got[65536];
        size_t g = 0;
        for (int i = 0; i < k && g + 16 < sizeof got; i++)
            g += (size_t)sprintf(got + g, " %d", ids[i]);
        got[g] = 0;
        size_t el = (size_t)(nl - lp);
        if (k < 0 || g != el || memcmp(got, lp, el) != 0) {
            fails++;
            fprintf(stderr, "case %d: '%.*s'\n  want:%.*s\n  got: %s\n", cases,
                    (int)(end - pos > 200 ? 200 : end - pos), in + pos, (int)el, lp, got);
        }
        lp = nl < oend ? nl + 1 : oend;
        pos = hit ? end + sizeof sep - 1 : ni;
    }
    printf("%s: %d/%d cases match\n", inp, cases - fails, cases);
    free(in);
    free(out);
    free(ids);
    return fails ? 1 : 0;
}

/* The family: by name, else detected from a Jinja file or a model's template (must be known). */
static int pick_family(const char *name, const char *jinja_file, const char *model,
                       chat_template_family *f, sol_err *e) {
    if (name) return chat_template_from_name(name, f, e);
    const char *src = NULL;
    char *file = NULL;
    gguf_file *g = NULL;
    size_t n = 0;
    if (jinja_file) {
        if (!(file = slurp(jinja_file, &n)))
            return sol_err_set(e, -ENOENT, "cannot read %s", jinja_file);
        char *z = realloc(file, n + 1);
        if (!z) {
            free(file);
            return sol_err_set(e, -ENOMEM, "out of memory");
        }
        file = z;
        file[n] = 0;
        src = file;
    } else if (model) {
        if (!(g = gguf_open(model, 0, e))) return e->code;
        if (gguf_get_str(g, "tokenizer.chat_template", &src, e)) src = NULL;
    }
    int rc = chat_template_detect_known(src, f)
                 ? 0
                 : sol_err_set(e, -EINVAL, "%s: no chat template family recognized",
                               jinja_file ? jinja_file
                               : model    ? model
                                          : "(no template given)");
    free(file);
    gguf_close(g);
    return rc;
}

/* Everything render_chat allocates, freed at once. */
typedef struct chat_input {
    json_t *msgs, *tools;
    chat_message *m;
    chat_tool_call *calls;
    char **owned; /* JSON texts made here */
    size_t n_owned;
    const char **tool_json;
    chat_tools t;
} chat_input;

/* Jinja's tojson layout: Python's json.dumps (", " and ": ", keys in their order, UTF-8 as is). */
static const char *dump_owned(chat_input *in, const json_t *v) {
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    if (s) in->owned[in->n_owned++] = s;
    return s ? s : "";
}

static int read_call(chat_input *in, const json_t *c, chat_tool_call *out, const char *where) {
    const json_t *fn = json_object_get(c, "function");
    if (!fn) fn = c;
    const json_t *args = json_object_get(fn, "arguments");
    out->name = json_string_value(json_object_get(fn, "name"));
    if (!out->name || !args) {
        fprintf(stderr, "sol-tokenize: %s: a tool call needs function.name and arguments\n", where);
        return -1;
    }
    out->arguments_is_string = json_is_string(args);
    out->arguments = out->arguments_is_string ? json_string_value(args) : dump_owned(in, args);
    return 0;
}

/* One message: role, content, tool_calls, reasoning_content (tool_call_id is accepted and, as in
 * the Qwen templates, not printed); any other key is refused. */
static int read_message(chat_input *in, size_t i, chat_tool_call **calls, const char *path) {
    const json_t *o = json_array_get(in->msgs, i);
    char where[600];
    snprintf(where, sizeof where, "%s: message %zu", path, i);
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        if (strcmp(key, "role") && strcmp(key, "content") && strcmp(key, "tool_calls") &&
            strcmp(key, "reasoning_content") && strcmp(key, "tool_call_id")) {
            fprintf(stderr, "sol-tokenize: %s: unknown key \"%s\"\n", where, key);
            return -1;
        }
    }
    chat_message *m = &in->m[i];
    m->role = json_string_value(json_object_get(o, "role"));
    m->content = json_string_value(json_object_get(o, "content"));
    m->reasoning_content = json_string_value(json_object_get(o, "reasoning_content"));
    const json_t *tc = json_object_get(o, "tool_calls");
    m->tool_calls = *calls;
    m->n_tool_calls = json_array_size(tc);
    for (size_t j = 0; j < m->n_tool_calls; j++)
        if (read_call(in, json_array_get(tc, j), (*calls)++, where)) return -1;
    return 0;
}

static json_t *load_array(const char *path, const char *what) {
    json_error_t je;
    json_t *a = json_load_file(path, 0, &je);
    if (!a) {
        fprintf(stderr, "sol-tokenize: %s:%d:%d: expected a JSON array of %s: %s\n", path, je.line,
                je.column, what, je.text);
        return NULL;
    }
    if (!json_is_array(a)) {
        fprintf(stderr, "sol-tokenize: %s: expected a JSON array of %s, found a JSON %s\n", path,
                what, json_is_object(a) ? "object" : "value that is not an array");
        json_decref(a);
        return NULL;
    }
    return a;
}

static int read_chat_input(chat_input *in, const char *path, const char *tools_path) {
    if (!(in->msgs = load_array(path, "messages"))) return -1;
    if (tools_path && !(in->tools = load_array(tools_path, "tools"))) return -1;
    size_t n = json_array_size(in->msgs), nt = json_array_size(in->tools), ncalls = 0;
    for (size_t i = 0; i < n; i++)
        ncalls += json_array_size(json_object_get(json_array_get(in->msgs, i), "tool_calls"));
    in->m = calloc(n ? n : 1, sizeof *in->m);
    in->calls = calloc(ncalls ? ncalls : 1, sizeof *in->calls);
    in->owned = calloc(ncalls + nt + 1, sizeof *in->owned);
    in->tool_json = calloc(nt ? nt : 1, sizeof *in->tool_json);
    if (!in->m || !in->calls || !in->owned || !in->tool_json) {
        fprintf(stderr, "sol-tokenize: out of memory\n");
        return -1;
    }
    chat_tool_call *next = in->calls;
    for (size_t i = 0; i < n; i++)
        if (read_message(in, i, &next, path)) return -1;
    for (size_t i = 0; i < nt; i++)
        in->tool_json[i] = dump_owned(in, json_array_get(in->tools, i));
    in->t = (chat_tools){in->tool_json, nt};
    return 0;
}

static void chat_input_free(chat_input *in) {
    for (size_t i = 0; i < in->n_owned; i++)
        free(in->owned[i]);
    free(in->owned);
    free(in->tool_json);
    free(in->calls);
    free(in->m);
    json_decref(in->msgs);
    json_decref(in->tools);
}

static int render_chat(const char *path, const char *tools_path, const char *name,
                       const char *jinja, const char *model, bool gen_prompt) {
    sol_err e = {0};
    chat_template_family f;
    chat_input in = {0};
    char *out = NULL;
    size_t len = 0;
    int rc = read_chat_input(&in, path, tools_path);
    if (rc) {
        chat_input_free(&in);
        return 2;
    }
    size_t n = json_array_size(in.msgs);
    rc = pick_family(name, jinja, model, &f, &e);
    if (!rc) rc = chat_template_apply_tools(f, in.m, n, &in.t, gen_prompt, &out, &len, &e);
    if (!rc)
        fwrite(out, 1, len, stdout);
    else
        fprintf(stderr, "sol-tokenize: %s\n", e.msg);
    free(out);
    chat_input_free(&in);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    const char *model = NULL, *vt_in = NULL, *vt_out = NULL;
    const char *chat = NULL, *tmpl = NULL, *tmpl_file = NULL, *tools = NULL;
    int no_bos = 0, special = 0, escapes = 0, roundtrip = 0, no_gen_prompt = 0, help = 0;
    const sol_arg args[] = {
        {"--model", 'm', SOL_ARG_STR, &model, 0, 0, 0, NULL, NULL, NULL},
        {"--no-bos", 0, SOL_ARG_SWITCH, &no_bos, 0, 0, 0, NULL, NULL, NULL},
        {"--special", 0, SOL_ARG_SWITCH, &special, 0, 0, 0, NULL, NULL, NULL},
        {"--escapes", 0, SOL_ARG_SWITCH, &escapes, 0, 0, 0, NULL, NULL, NULL},
        {"--roundtrip", 0, SOL_ARG_SWITCH, &roundtrip, 0, 0, 0, NULL, NULL, NULL},
        {"--render-chat", 0, SOL_ARG_STR, &chat, 0, 0, 0, NULL, NULL, NULL},
        {"--template", 0, SOL_ARG_STR, &tmpl, 0, 0, 0, NULL, NULL, NULL},
        {"--template-file", 0, SOL_ARG_STR, &tmpl_file, 0, 0, 0, NULL, NULL, NULL},
        {"--tools", 0, SOL_ARG_STR, &tools, 0, 0, 0, NULL, NULL, NULL},
        {"--no-gen-prompt", 0, SOL_ARG_SWITCH, &no_gen_prompt, 0, 0, 0, NULL, NULL, NULL},
        {"--vocab-test", 0, SOL_ARG_STR, &vt_in, 0, 0, 0, NULL, NULL, NULL}, /* IN, then OUT */
        {"--help", 'h', SOL_ARG_SWITCH, &help, 0, 0, 0, NULL, NULL, NULL},
    };
    sol_err ae = {0};
    int npos = sol_args_parse(args, sizeof args / sizeof args[0], argc, argv, &ae);
    if (npos < 0) return fprintf(stderr, "sol-tokenize: %s\n", ae.msg), 2;
    if (help) return usage(stdout), 0;
    if (vt_in && npos == 1) vt_out = argv[1], npos = 0; /* --vocab-test IN OUT */
    if (npos > 0 || (vt_in && !vt_out)) {
        usage(stderr);
        return 2;
    }
    int bos = !no_bos, gen_prompt = !no_gen_prompt;
    if (chat) {
        if ((tmpl != NULL) + (tmpl_file != NULL) + (model != NULL) != 1) {
            fprintf(stderr, "sol-tokenize: --render-chat needs exactly one of --template, "
                            "--template-file and -m\n");
            return 2;
        }
        if (!bos || special || escapes || roundtrip || vt_in) {
            fprintf(stderr, "sol-tokenize: --no-bos, --special, --escapes, --roundtrip and "
                            "--vocab-test do not apply to --render-chat\n");
            return 2;
        }
        return render_chat(chat, tools, tmpl, tmpl_file, model, gen_prompt);
    }
    if (tmpl || tmpl_file || tools || !gen_prompt) {
        fprintf(stderr, "sol-tokenize: --template, --template-file, --tools and --no-gen-prompt "
                        "go with --render-chat\n");
        return 2;
    }
    if (!model) {
        usage(stderr);
        return 2;
    }
    sol_err e = {0};
    gguf_file *g = gguf_open(model, 0, &e);
    tokenizer *t = g ? tokenizer_from_gguf(g, &e) : NULL;
    gguf_close(g);
    if (!t) {
        fprintf(stderr, "sol-tokenize: %s\n", e.msg);
        return 1;
    }
    int rc = 0;
    if (vt_in) {
        rc = vocab_test(t, vt_in, vt_out);
    } else {
        char *line = NULL;
        size_t lcap = 0;
        ssize_t n;
        int32_t *ids = NULL;
        int cap = 0;
        while ((n = getline(&line, &lcap, stdin)) >= 0) {
            size_t len = (size_t)n;
            if (len > 0 && line[len - 1] == '\n') len--;
            if (escapes) len = unescape(line, len);
            int k = encode(t, line, len, bos, special, &ids, &cap);
            if (k < 0) {
                fprintf(stderr, "sol-tokenize: encode failed (%d)\n", k);
                rc = 1;
                break;
            }
            if (roundtrip) {
                rc |= check_roundtrip(t, line, len, ids, k);
                continue;
            }
            for (int i = 0; i < k; i++)
                printf(i ? " %d" : "%d", ids[i]);
            putchar('\n');
        }
        free(line);
        free(ids);
    }
    tokenizer_free(t);
    return rc;
}
