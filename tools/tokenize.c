/* sol-tokenize: tokenizes text with a GGUF file's tokenizer, one input line per output line of
 * ids, so tests can compare Sol with llama.cpp; --vocab-test checks llama.cpp's .inp/.out pairs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
                    "  --roundtrip check decode(encode(line)) == line instead of printing ids\n");
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

int main(int argc, char **argv) {
    const char *model = NULL, *vt_in = NULL, *vt_out = NULL;
    int bos = 1, special = 0, escapes = 0, roundtrip = 0;
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
        else if (!strcmp(argv[i], "--vocab-test") && i + 2 < argc) {
            vt_in = argv[++i];
            vt_out = argv[++i];
        } else {
            usage(stderr);
            return 2;
        }
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
