/* sol-tokenize: tokenizes text with a GGUF file's tokenizer, one input line per output line of
 * ids, so tests can compare Sol with llama.cpp; --vocab-test checks llama.cpp's .inp/.out pairs;
 * --render-chat prints the prompt a chat template makes of messages (compared with Jinja). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chat_template.h"
#include "err.h"
#include "gguf.h"
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
               "  prints the prompt Sol's chat template family makes of a JSON array of\n"
               "  {role, content} messages (the family named, or detected from the Jinja\n"
               "  source or the model's tokenizer.chat_template), no newline added\n");
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

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0;
    *n = 0;
    for (;;) {
        if (*n + 65536 > cap) {
            cap = cap * 2 + 65536;
            char *p = realloc(buf, cap);
            if (!p) break;
            buf = p;
        }
        size_t r = fread(buf + *n, 1, cap - *n, f);
        if (r == 0) break;
        *n += r;
    }
    fclose(f);
    return buf;
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

static int render_chat(const char *path, const char *name, const char *jinja, const char *model,
                       bool gen_prompt) {
    sol_err e = {0};
    chat_template_family f;
    json_error_t je;
    json_t *arr = json_load_file(path, 0, &je);
    if (!arr || !json_is_array(arr)) {
        fprintf(stderr, "sol-tokenize: %s:%d:%d: expected a JSON array of messages: %s\n", path,
                je.line, je.column, je.text);
        json_decref(arr);
        return 2;
    }
    size_t n = json_array_size(arr);
    chat_message *m = calloc(n ? n : 1, sizeof *m);
    for (size_t i = 0; m && i < n; i++) {
        m[i].role = json_string_value(json_object_get(json_array_get(arr, i), "role"));
        m[i].content = json_string_value(json_object_get(json_array_get(arr, i), "content"));
    }
    char *out = NULL;
    size_t len = 0;
    int rc =
        !m ? sol_err_set(&e, -ENOMEM, "out of memory") : pick_family(name, jinja, model, &f, &e);
    if (!rc) rc = chat_template_apply(f, m, n, gen_prompt, &out, &len, &e);
    if (!rc)
        fwrite(out, 1, len, stdout);
    else
        fprintf(stderr, "sol-tokenize: %s\n", e.msg);
    free(out);
    free(m);
    json_decref(arr);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    const char *model = NULL, *vt_in = NULL, *vt_out = NULL;
    const char *chat = NULL, *tmpl = NULL, *tmpl_file = NULL;
    int bos = 1, special = 0, escapes = 0, roundtrip = 0, gen_prompt = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--no-bos"))
            bos = 0;
        else if (!strcmp(argv[i], "--special"))
            special = 1;
        else if (!strcmp(argv[i], "--escapes"))
            escapes = 1;
        else if (!strcmp(argv[i], "--roundtrip"))
            roundtrip = 1;
        else if (!strcmp(argv[i], "--render-chat") && i + 1 < argc)
            chat = argv[++i];
        else if (!strcmp(argv[i], "--template") && i + 1 < argc)
            tmpl = argv[++i];
        else if (!strcmp(argv[i], "--template-file") && i + 1 < argc)
            tmpl_file = argv[++i];
        else if (!strcmp(argv[i], "--no-gen-prompt"))
            gen_prompt = 0;
        else if (!strcmp(argv[i], "--vocab-test") && i + 2 < argc) {
            vt_in = argv[++i];
            vt_out = argv[++i];
        } else {
            usage(stderr);
            return 2;
        }
    }
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
        return render_chat(chat, tmpl, tmpl_file, model, gen_prompt);
    }
    if (tmpl || tmpl_file || !gen_prompt) {
        fprintf(stderr, "sol-tokenize: --template, --template-file and --no-gen-prompt go with "
                        "--render-chat\n");
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
