/* regex_gbnf: the regex subset (docs/api.md: literals, escapes, classes, groups, alternation,
 * counted repeats; no lookaround or backreferences) written as GBNF, a character at a time. */
#include "regex_gbnf.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void gbnf_literal(strbuf *o, const char *s, size_t n) {
    strbuf_putc(o, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            strbuf_putc(o, '\\'), strbuf_putc(o, (char)ch);
        else if (ch == '\n')
            strbuf_puts(o, "\\n");
        else if (ch < 0x20 || ch == 0x7f)
            strbuf_printf(o, "\\x%02x", ch);
        else
            strbuf_putc(o, (char)ch);
    }
    strbuf_putc(o, '"');
}

/* " {m,n}" or "*" for a repetition count pair (max < 0: unbounded). */
void gbnf_repeat(strbuf *o, int min, int max) {
    if (min == 0 && max < 0)
        strbuf_puts(o, "*");
    else if (max < 0)
        strbuf_printf(o, "{%d,}", min);
    else
        strbuf_printf(o, "{%d,%d}", min, max);
}

typedef struct re_ctx {
    sol_err *err;
    strbuf *b;
    const char *p, *start;
    bool json; /* inside a JSON string: " and \ are written escaped, classes exclude them */
    const char *path;
} re_ctx;

static int re_bad(re_ctx *r, const char *what) {
    char where[300];
    snprintf(where, sizeof where, "%.200s (at offset %d of the regex)", r->path,
             (int)(r->p - r->start));
    return sol_err_set(r->err, -EINVAL, "%s: %s", where, what);
}

static int re_alt(re_ctx *r);

/* \d \w \s (and their negations) as class members; 0 when esc is not one of them. */
static const char *class_escape(char esc) {
    switch (esc) {
    case 'd':
        return "0-9";
    case 'w':
        return "a-zA-Z0-9_";
    case 's':
        return " \\t\\n\\r\\x0b\\x0c";
    default:
        return NULL;
    }
}

static void re_char(re_ctx *r, char ch) {
    if (r->json && (ch == '"' || ch == '\\')) {
        char esc[2] = {'\\', ch};
        gbnf_literal(r->b, esc, 2);
    } else {
        gbnf_literal(r->b, &ch, 1);
    }
}

static int re_class(re_ctx *r) {
    const char *at = r->p++;
    bool neg = *r->p == '^';
    if (neg) r->p++;
    strbuf_puts(r->b, neg ? "[^" : "[");
    if (neg && r->json) strbuf_puts(r->b, "\"\\\\\\x00-\\x1f");
    for (bool first = true; *r->p && (*r->p != ']' || first); first = false) {
        char ch = *r->p++;
        if (ch == '\\') {
            char e = *r->p++;
            const char *cls = class_escape(e);
            if (cls)
                strbuf_puts(r->b, cls);
            else if (e == 'n')
                strbuf_puts(r->b, "\\n");
            else if (e == 't')
                strbuf_puts(r->b, "\\t");
            else if (e && strchr("\\]^-[.", e))
                strbuf_putc(r->b, '\\'), strbuf_putc(r->b, e);
            else if (e &&
                     !((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')))
                strbuf_putc(r->b, e);
            else
                return r->p = at, re_bad(r, "unsupported escape in a class");
            if (r->json && e == '\\') return re_bad(r, "a class with \\ inside a JSON string");
            continue;
        }
        if (r->json && ch == '"') return re_bad(r, "a class with \" inside a JSON string");
        if (ch == '"')
            strbuf_puts(r->b, "\\\"");
        else
            strbuf_putc(r->b, ch);
    }
    if (*r->p != ']') return r->p = at, re_bad(r, "unterminated class");
    r->p++;
    strbuf_putc(r->b, ']');
    return 0;
}

static int re_atom(re_ctx *r) {
    char ch = *r->p;
    if (ch == '(') {
        r->p++;
        if (r->p[0] == '?') {
            if (r->p[1] != ':') return re_bad(r, "lookaround and named groups are not supported");
            r->p += 2;
        }
        strbuf_puts(r->b, "( ");
        int rc = re_alt(r);
        if (rc) return rc;
        if (*r->p != ')') return re_bad(r, "expected )");
        r->p++;
        strbuf_puts(r->b, " )");
        return 0;
    }
    if (ch == '[') return re_class(r);
    if (ch == '.') {
        r->p++;
        strbuf_puts(r->b, r->json ? "[^\"\\\\\\x00-\\x1f]" : "[^\\n\\x00]");
        return 0;
    }
    if (ch == '\\') {
        char e = r->p[1];
        r->p += 2;
        const char *cls = class_escape(e);
        if (cls) return strbuf_printf(r->b, "[%s]", cls), 0;
        if (e == 'D' || e == 'W' || e == 'S') {
            strbuf_printf(r->b, "[^%s%s]", class_escape((char)(e + 32)),
                          r->json ? "\"\\\\\\x00-\\x1f" : "");
            return 0;
        }
        if (e == 'n') return re_char(r, '\n'), 0;
        if (e == 't') return re_char(r, '\t'), 0;
        if (e && !((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')))
            return re_char(r, e), 0;
        return re_bad(r, "unsupported escape (backreferences, \\b and the like)");
    }
    if (strchr("*+?{", ch)) return re_bad(r, "a quantifier follows nothing");
    r->p++;
    re_char(r, ch);
    return 0;
}

static int re_quant(re_ctx *r) {
    char ch = *r->p;
    if (ch == '*' || ch == '+' || ch == '?') {
        r->p++;
        strbuf_putc(r->b, ch);
    } else if (ch == '{') {
        const char *q = r->p;
        int m = 0, n = -1, k = 0;
        if (sscanf(q, "{%d,%d}%n", &m, &n, &k) == 2 && k) {
        } else if (sscanf(q, "{%d,}%n", &m, &k) == 1 && k) {
            n = -1;
        } else if (sscanf(q, "{%d}%n", &m, &k) == 1 && k) {
            n = m;
        } else {
            return re_bad(r, "bad {m,n}");
        }
        if (m < 0 || m > 1000 || n > 1000 || (n >= 0 && n < m))
            return re_bad(r, "repetition counts must be 0..1000, m <= n");
        r->p += k;
        gbnf_repeat(r->b, m, n);
    } else {
        return 0;
    }
    if (*r->p == '?' || *r->p == '+') return re_bad(r, "lazy and possessive quantifiers");
    return 0;
}

static int re_seq(re_ctx *r) {
    bool any = false;
    while (*r->p && *r->p != '|' && *r->p != ')') {
        if (*r->p == '^' && r->p == r->start) { /* the match is anchored anyway */
            r->p++;
            continue;
        }
        if (*r->p == '$' && (r->p[1] == 0)) {
            r->p++;
            continue;
        }
        if (any) strbuf_putc(r->b, ' ');
        int rc = re_atom(r);
        if (!rc) rc = re_quant(r);
        if (rc) return rc;
        any = true;
    }
    if (!any) strbuf_puts(r->b, "\"\"");
    return 0;
}

static int re_alt(re_ctx *r) {
    int rc = re_seq(r);
    while (!rc && *r->p == '|') {
        r->p++;
        strbuf_puts(r->b, " | ");
        rc = re_seq(r);
    }
    return rc;
}

int regex_gbnf(strbuf *b, const char *re, bool json_string, const char *path, sol_err *err) {
    re_ctx r = {err, b, re, re, json_string, path};
    strbuf_puts(b, "( ");
    int rc = re_alt(&r);
    if (!rc && *r.p) rc = re_bad(&r, "unbalanced )");
    strbuf_puts(b, " )");
    return rc;
}
