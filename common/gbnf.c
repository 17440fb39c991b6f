/* gbnf: the GBNF parser. Builds rules of alternatives of elements (byte sets and rule
 * references), turning groups and repetitions into generated rules, then flattens them. */
#include "gbnf.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct balt {
    gelem *e;
    int n, cap;
} balt;

typedef struct brule {
    char name[64];
    balt *alts;
    int n_alts, cap_alts;
    bool defined;
    int ref_line, ref_col; /* where it was first used, for "never defined" */
} brule;

typedef struct builder {
    const char *text, *p, *end;
    brule *rules;
    int n_rules, cap_rules;
    uint8_t (*sets)[32];
    int n_sets, cap_sets;
    int single[256]; /* set index of the one-byte set {b}, -1 until made */
    int utf8mb;      /* rule: one well-formed multi-byte UTF-8 character, -1 until made */
    long n_elems;
    sol_err *err;
} builder;

static void where(const builder *b, const char *at, int *line, int *col) {
    *line = 1, *col = 1;
    for (const char *q = b->text; q < at && q < b->end; q++)
        if (*q == '\n')
            ++*line, *col = 1;
        else
            ++*col;
}

static int fail(builder *b, const char *at, const char *fmt, const char *arg) {
    int line, col;
    where(b, at, &line, &col);
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg);
    return sol_err_set(b->err, -EINVAL, "grammar line %d column %d: %s", line, col, msg);
}

static int grow(void **p, int *cap, int need, size_t size) {
    if (need <= *cap) return 0;
    int c = *cap ? *cap * 2 : 8;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, size * (size_t)c);
    if (!q) return -ENOMEM;
    *p = q, *cap = c;
    return 0;
}

static int rule_named(builder *b, const char *name, size_t len, const char *at) {
    for (int i = 0; i < b->n_rules; i++)
        if (strlen(b->rules[i].name) == len && !memcmp(b->rules[i].name, name, len)) return i;
    if (len >= sizeof b->rules[0].name) return fail(b, at, "rule name too long (%s)", "max 63");
    if (grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules))
        return sol_err_set(b->err, -ENOMEM, "out of memory for the grammar");
    brule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    memcpy(r->name, name, len);
    where(b, at, &r->ref_line, &r->ref_col);
    return b->n_rules++;
}

/* A generated rule (groups, repetitions, classes): "parent_N", defined at once. */
static int new_rule(builder *b, int parent) {
    char name[64];
    snprintf(name, sizeof name, "%.40s_%d", parent >= 0 ? b->rules[parent].name : "gen",
             b->n_rules);
    int r = rule_named(b, name, strlen(name), b->p);
    if (r >= 0) b->rules[r].defined = true;
    return r;
}

static balt *new_alt(builder *b, int rule) {
    brule *r = &b->rules[rule];
    if (grow((void **)&r->alts, &r->cap_alts, r->n_alts + 1, sizeof *r->alts)) return NULL;
    balt *a = &r->alts[r->n_alts++];
    memset(a, 0, sizeof *a);
    return a;
}

static int push(builder *b, balt *a, int type, int arg) {
    if (++b->n_elems > GBNF_MAX_ELEMS)
        return sol_err_set(b->err, -E2BIG, "grammar has more than %d elements", GBNF_MAX_ELEMS);
    if (grow((void **)&a->e, &a->cap, a->n + 1, sizeof *a->e))
        return sol_err_set(b->err, -ENOMEM, "out of memory for the grammar");
    a->e[a->n++] = (gelem){(uint32_t)type, (uint32_t)arg};
    return 0;
}

static int set_index(builder *b, const uint8_t bits[32]) {
    for (int i = 0; i < b->n_sets; i++)
        if (!memcmp(b->sets[i], bits, 32)) return i;
    if (grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof *b->sets))
        return sol_err_set(b->err, -ENOMEM, "out of memory for the grammar");
    memcpy(b->sets[b->n_sets], bits, 32);
    return b->n_sets++;
}

static int push_range(builder *b, balt *a, int lo, int hi) {
    uint8_t bits[32] = {0};
    for (int c = lo; c <= hi; c++)
        bits[c >> 3] |= (uint8_t)(1u << (c & 7));
    int s = lo == hi && b->single[lo] >= 0 ? b->single[lo] : set_index(b, bits);
    if (s < 0) return s;
    if (lo == hi) b->single[lo] = s;
    return push(b, a, GE_SET, s);
}

/* ---- UTF-8 ---------------------------------------------------------------------------- */

static int utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) return out[0] = (uint8_t)cp, 1;
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6)), out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12)), out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18)), out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)), out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Alternatives of `rule` matching the code points [lo, hi] (one encoded length, no surrogates):
 * split until every byte position is a plain range (as regex engines compile UTF-8 classes). */
static int utf8_alts(builder *b, int rule, uint32_t lo, uint32_t hi) {
    static const uint32_t len_max[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= len_max[i] && hi > len_max[i]) {
            int rc = utf8_alts(b, rule, lo, len_max[i]);
            return rc ? rc : utf8_alts(b, rule, len_max[i] + 1, hi);
        }
    if (lo <= 0xDFFF && hi >= 0xD800) { /* surrogates are not characters */
        int rc = lo < 0xD800 ? utf8_alts(b, rule, lo, 0xD7FF) : 0;
        return rc || hi <= 0xDFFF ? rc : utf8_alts(b, rule, 0xE000, hi);
    }
    uint8_t a[4], z[4];
    int n = utf8_encode(lo, a);
    utf8_encode(hi, z);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m)) continue;
        if (lo & m) {
            int rc = utf8_alts(b, rule, lo, lo | m);
            return rc ? rc : utf8_alts(b, rule, (lo | m) + 1, hi);
        }
        if ((hi & m) != m) {
            int rc = utf8_alts(b, rule, lo, (hi & ~m) - 1);
            return rc ? rc : utf8_alts(b, rule, hi & ~m, hi);
        }
    }
    balt *alt = new_alt(b, rule);
    if (!alt) return sol_err_set(b->err, -ENOMEM, "out of memory for the grammar");
    for (int i = 0; i < n; i++) {
        int rc = push_range(b, alt, a[i], z[i]);
        if (rc) return rc;
    }
    return 0;
}

/* The rule for one well-formed multi-byte character (U+0080..U+10FFFF), made once. */
static int utf8mb_rule(builder *b) {
    if (b->utf8mb >= 0) return b->utf8mb;
    int r = rule_named(b, "utf8-multibyte", 14, b->p);
    if (r < 0) return r;
    b->rules[r].defined = true;
    int rc = utf8_alts(b, r, 0x80, 0x10FFFF);
    return rc ? rc : (b->utf8mb = r);
}

/* ---- lexing --------------------------------------------------------------------------- */

static void skip_space(builder *b, bool newline_ok) {
    while (b->p < b->end) {
        char c = *b->p;
        if (c == '#') {
            while (b->p < b->end && *b->p != '\n')
                b->p++;
        } else if (c == ' ' || c == '\t' || c == '\r' || (newline_ok && c == '\n')) {
            b->p++;
        } else {
            break;
        }
    }
}

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

static int hex_value(builder *b, int digits, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < digits; i++, b->p++) {
        char c = b->p < b->end ? *b->p : 0;
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return fail(b, b->p, "expected a hex digit in an escape%s", "");
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* One character of a literal or class: an escape or one UTF-8 character (*is_byte: \xHH, a raw
 * byte rather than a code point). */
static int parse_char(builder *b, uint32_t *cp, bool *is_byte) {
    *is_byte = false;
    if (b->p >= b->end) return fail(b, b->p, "unexpected end of grammar%s", "");
    unsigned char c = (unsigned char)*b->p++;
    if (c == '\\') {
        if (b->p >= b->end) return fail(b, b->p, "unexpected end after \\%s", "");
        char e = *b->p++;
        switch (e) {
        case 'n':
            *cp = '\n';
            return 0;
        case 'r':
            *cp = '\r';
            return 0;
        case 't':
            *cp = '\t';
            return 0;
        case 'x':
            *is_byte = true;
            return hex_value(b, 2, cp);
        case 'u':
            return hex_value(b, 4, cp);
        case 'U':
            return hex_value(b, 8, cp);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '.':
        case '/':
            *cp = (uint32_t)e;
            return 0;
        default:
            return fail(b, b->p - 2, "unknown escape \\%c", (char[]){e, 0});
        }
    }
    if (c < 0x80) return *cp = c, 0;
    int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
    if (n < 0 || b->p + n > b->end) return fail(b, b->p - 1, "invalid UTF-8 in the grammar%s", "");
    uint32_t v = c & (0x3F >> n);
    for (int i = 0; i < n; i++)
        v = (v << 6) | ((unsigned char)*b->p++ & 0x3F);
    *cp = v;
    return 0;
}

/* ---- items ---------------------------------------------------------------------------- */

static int parse_literal(builder *b, balt *a) {
    b->p++; /* the opening quote */
    while (b->p < b->end && *b->p != '"') {
        uint32_t cp;
        bool raw;
        int rc = parse_char(b, &cp, &raw);
        if (rc) return rc;
        if (cp > 0x10FFFF) return fail(b, b->p, "code point out of range%s", "");
        uint8_t enc[4];
        int n = raw ? (enc[0] = (uint8_t)cp, 1) : utf8_encode(cp, enc);
        for (int i = 0; i < n; i++)
            if ((rc = push_range(b, a, enc[i], enc[i]))) return rc;
    }
    if (b->p >= b->end) return fail(b, b->p, "unterminated string literal%s", "");
    b->p++;
    return 0;
}

/* A class as an element of rule's last alternative: ASCII members make one byte set; multi-byte
 * members (positive classes) become alternatives of a generated rule; a negated class is its
 * ASCII complement or any multi-byte character. */
static int emit_class(builder *b, int rule, uint8_t ascii[32], bool neg, uint32_t (*wide)[2],
                      int n_wide) {
    int rc;
    if (neg)
        for (int i = 0; i < 16; i++)
            ascii[i] = (uint8_t)~ascii[i]; /* bytes 0..127 only */
    bool any_ascii = false;
    for (int i = 0; i < 16; i++)
        any_ascii |= ascii[i] != 0;
    if (!neg && !n_wide) {
        int s = set_index(b, ascii);
        return s < 0 ? s : push(b, &b->rules[rule].alts[b->rules[rule].n_alts - 1], GE_SET, s);
    }
    int r = new_rule(b, rule);
    if (r < 0) return r;
    if (any_ascii) {
        balt *x = new_alt(b, r);
        int s = x ? set_index(b, ascii) : -ENOMEM;
        if (s < 0) return s;
        if ((rc = push(b, x, GE_SET, s))) return rc;
    }
    if (neg) {
        int mb = utf8mb_rule(b);
        if (mb < 0) return mb;
        balt *x = new_alt(b, r);
        if (!x) return -ENOMEM;
        if ((rc = push(b, x, GE_REF, mb))) return rc;
    }
    for (int i = 0; i < n_wide; i++)
        if ((rc = utf8_alts(b, r, wide[i][0], wide[i][1]))) return rc;
    return push(b, &b->rules[rule].alts[b->rules[rule].n_alts - 1], GE_REF, r);
}

static int parse_class(builder *b, int rule) {
    const char *start = b->p++;
    bool neg = b->p < b->end && *b->p == '^';
    if (neg) b->p++;
    uint8_t ascii[32] = {0};
    uint32_t wide[64][2];
    int n_wide = 0, rc;
    while (b->p < b->end && *b->p != ']') {
        uint32_t lo, hi;
        bool raw;
        if ((rc = parse_char(b, &lo, &raw))) return rc;
        hi = lo;
        if (b->p + 1 < b->end && *b->p == '-' && b->p[1] != ']') {
            b->p++;
            if ((rc = parse_char(b, &hi, &raw))) return rc;
        }
        if (hi < lo || hi > 0x10FFFF) return fail(b, start, "bad class range%s", "");
        if (raw && hi > 0x7F) return fail(b, start, "\\x escapes above 0x7f in a class%s", "");
        for (uint32_t c = lo; c <= hi && c < 0x80; c++)
            ascii[c >> 3] |= (uint8_t)(1u << (c & 7));
        if (hi >= 0x80) {
            if (neg) return fail(b, start, "non-ASCII characters in a negated class%s", "");
            if (n_wide == 64) return fail(b, start, "more than 64 non-ASCII ranges%s", "");
            wide[n_wide][0] = lo < 0x80 ? 0x80 : lo, wide[n_wide++][1] = hi;
        }
    }
    if (b->p >= b->end) return fail(b, start, "unterminated character class%s", "");
    b->p++;
    return emit_class(b, rule, ascii, neg, wide, n_wide);
}

static int parse_alternates(builder *b, int rule, bool nested);

/* x* x+ x? x{m} x{m,} x{m,n} on the item that starts at element `from` of the alternative. */
static int repeat(builder *b, int rule, int from, int min, int max) {
    int s = new_rule(b, rule), rc;
    if (s < 0) return s;
    balt *a = &b->rules[rule].alts[b->rules[rule].n_alts - 1];
    balt *body = new_alt(b, s);
    if (!body) return -ENOMEM;
    a = &b->rules[rule].alts[b->rules[rule].n_alts - 1];
    for (int i = from; i < a->n; i++)
        if ((rc = push(b, body, a->e[i].type, (int)a->e[i].arg))) return rc;
    a->n = from;
    for (int i = 0; i < min; i++)
        if ((rc = push(b, &b->rules[rule].alts[b->rules[rule].n_alts - 1], GE_REF, s))) return rc;
    if (max == min) return 0;
    /* The optional rest: R ::= S R | (empty) when unbounded, else nested optionals. */
    int tail = -1, count = max < 0 ? 1 : max - min;
    for (int k = 0; k < count; k++) {
        int r = new_rule(b, rule);
        if (r < 0) return r;
        balt *x = new_alt(b, r);
        if (!x || (rc = push(b, x, GE_REF, s))) return x ? rc : -ENOMEM;
        if (max < 0) tail = r;
        if (tail >= 0 && (rc = push(b, &b->rules[r].alts[0], GE_REF, tail))) return rc;
        if (!new_alt(b, r)) return -ENOMEM; /* empty */
        tail = r;
    }
    return push(b, &b->rules[rule].alts[b->rules[rule].n_alts - 1], GE_REF, tail);
}

static int parse_count(builder *b, int *out) {
    long v = 0;
    const char *s = b->p;
    while (b->p < b->end && *b->p >= '0' && *b->p <= '9' && v <= GBNF_MAX_REPEAT)
        v = v * 10 + (*b->p++ - '0');
    if (b->p == s) return fail(b, s, "expected a number in {m,n}%s", "");
    if (v > GBNF_MAX_REPEAT) return fail(b, s, "repetition count above %s", "1000");
    *out = (int)v;
    return 0;
}

static int parse_braces(builder *b, int rule, int from) {
    const char *at = b->p++;
    int min = 0, max = 0, rc;
    skip_space(b, true);
    if ((rc = parse_count(b, &min))) return rc;
    skip_space(b, true);
    max = min;
    if (b->p < b->end && *b->p == ',') {
        b->p++;
        skip_space(b, true);
        max = -1;
        if (b->p < b->end && *b->p != '}' && (rc = parse_count(b, &max))) return rc;
        skip_space(b, true);
    }
    if (b->p >= b->end || *b->p != '}') return fail(b, at, "expected } to close {m,n}%s", "");
    b->p++;
    if (max >= 0 && max < min) return fail(b, at, "{m,n} with n < m%s", "");
    return repeat(b, rule, from, min, max);
}

static int parse_item(builder *b, int rule, bool nested, int *from) {
    balt *a = &b->rules[rule].alts[b->rules[rule].n_alts - 1];
    char c = *b->p;
    *from = a->n;
    if (c == '"') return parse_literal(b, a);
    if (c == '[') return parse_class(b, rule);
    if (c == '.') { /* any character: the negated empty class */
        b->p++;
        uint8_t none[32] = {0};
        return emit_class(b, rule, none, true, NULL, 0);
    }
    if (c == '(') {
        b->p++;
        int g = new_rule(b, rule), rc;
        if (g < 0) return g;
        skip_space(b, true);
        if ((rc = parse_alternates(b, g, true))) return rc;
        skip_space(b, true);
        if (b->p >= b->end || *b->p != ')') return fail(b, b->p, "expected )%s", "");
        b->p++;
        return push(b, &b->rules[rule].alts[b->rules[rule].n_alts - 1], GE_REF, g);
    }
    if (name_char(c)) {
        const char *s = b->p;
        while (b->p < b->end && name_char(*b->p))
            b->p++;
        if (b->p + 2 < b->end && !nested) {
            const char *q = b->p;
            while (q < b->end && (*q == ' ' || *q == '\t'))
                q++;
            if (q + 3 <= b->end && !memcmp(q, "::=", 3)) {
                b->p = s;
                return 1; /* the next rule starts: this sequence is over */
            }
        }
        int r = rule_named(b, s, (size_t)(b->p - s), s);
        if (r < 0) return r;
        return push(b, &b->rules[rule].alts[b->rules[rule].n_alts - 1], GE_REF, r);
    }
    return fail(b, b->p, "unexpected character '%s'", (char[]){c, 0});
}

static int parse_sequence(builder *b, int rule, bool nested) {
    int from = -1, rc;
    for (;;) {
        skip_space(b, nested);
        if (b->p >= b->end) return 0;
        char c = *b->p;
        if (c == '|' || c == ')' || c == '\n') return 0;
        if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (from < 0) return fail(b, b->p, "'%s' follows nothing", (char[]){c, 0});
            if (c == '{') {
                rc = parse_braces(b, rule, from);
            } else {
                b->p++;
                rc = repeat(b, rule, from, c == '+', c == '?' ? 1 : -1);
            }
            if (rc) return rc;
            from = -1;
            continue;
        }
        if ((rc = parse_item(b, rule, nested, &from)) == 1) return 0;
        if (rc) return rc;
    }
}

static int parse_alternates(builder *b, int rule, bool nested) {
    int rc;
    if (!new_alt(b, rule)) return -ENOMEM;
    if ((rc = parse_sequence(b, rule, nested))) return rc;
    while (b->p < b->end && *b->p == '|') {
        b->p++;
        skip_space(b, true);
        if (!new_alt(b, rule)) return -ENOMEM;
        if ((rc = parse_sequence(b, rule, nested))) return rc;
    }
    return 0;
}

static int parse_rules(builder *b) {
    for (;;) {
        skip_space(b, true);
        if (b->p >= b->end) return 0;
        const char *s = b->p;
        while (b->p < b->end && name_char(*b->p))
            b->p++;
        if (b->p == s) return fail(b, s, "expected a rule name%s", "");
        int r = rule_named(b, s, (size_t)(b->p - s), s), rc;
        if (r < 0) return r;
        if (b->rules[r].defined) return fail(b, s, "rule '%s' is defined twice", b->rules[r].name);
        b->rules[r].defined = true;
        skip_space(b, false);
        if (b->end - b->p < 3 || memcmp(b->p, "::=", 3)) return fail(b, b->p, "expected ::=%s", "");
        b->p += 3;
        skip_space(b, true);
        if ((rc = parse_alternates(b, r, false))) return rc;
    }
}

/* ---- checks and flattening ------------------------------------------------------------ */

/* Rules that can match nothing, then: a rule reaching itself before consuming a byte (left
 * recursion) would make the matcher loop. Depth-first over "may start with" edges, iterative
 * (generated chains can be thousands of rules deep). */
typedef struct lr_frame {
    int r, i, j; /* rule, alternative, element */
} lr_frame;

static bool nullable_pass(builder *b, bool *nullable) {
    bool changed = false;
    for (int r = 0; r < b->n_rules; r++)
        for (int i = 0; i < b->rules[r].n_alts && !nullable[r]; i++) {
            const balt *a = &b->rules[r].alts[i];
            int k = 0;
            while (k < a->n && a->e[k].type == GE_REF && nullable[a->e[k].arg])
                k++;
            if (k == a->n) nullable[r] = changed = true;
        }
    return changed;
}

/* The next rule frame f may start with, advancing f past it; -1 when none is left. */
static int next_leading(builder *b, lr_frame *f, const bool *nullable) {
    while (f->i < b->rules[f->r].n_alts) {
        const balt *a = &b->rules[f->r].alts[f->i];
        if (f->j < a->n && a->e[f->j].type == GE_REF) {
            int s = (int)a->e[f->j].arg;
            if (nullable[s])
                f->j++;
            else
                f->i++, f->j = 0;
            return s;
        }
        f->i++, f->j = 0;
    }
    return -1;
}

static int check_left_recursion(builder *b) {
    bool *nullable = calloc((size_t)b->n_rules, 1);
    uint8_t *mark = calloc((size_t)b->n_rules, 1); /* 1 on the path, 2 done */
    lr_frame *st = malloc(sizeof *st * (size_t)b->n_rules);
    int rc = nullable && mark && st ? 0 : sol_err_set(b->err, -ENOMEM, "out of memory");
    while (!rc && nullable_pass(b, nullable)) {
    }
    for (int root = 0; root < b->n_rules && !rc; root++) {
        if (mark[root]) continue;
        int sp = 0;
        st[sp++] = (lr_frame){root, 0, 0};
        mark[root] = 1;
        while (sp && !rc) {
            int next = next_leading(b, &st[sp - 1], nullable);
            if (next < 0) {
                mark[st[--sp].r] = 2;
            } else if (mark[next] == 1) {
                rc = sol_err_set(b->err, -EINVAL, "grammar: rule '%s' is left-recursive",
                                 b->rules[next].name);
            } else if (!mark[next]) {
                mark[next] = 1;
                st[sp++] = (lr_frame){next, 0, 0};
            }
        }
    }
    free(nullable), free(mark), free(st);
    return rc;
}

static int flatten(builder *b, gbnf *g) {
    int n_alts = 0;
    long n_elems = 0;
    for (int r = 0; r < b->n_rules; r++) {
        n_alts += b->rules[r].n_alts;
        for (int i = 0; i < b->rules[r].n_alts; i++)
            n_elems += b->rules[r].alts[i].n + 1;
    }
    g->elems = malloc(sizeof *g->elems * (size_t)n_elems);
    g->alt_start = malloc(sizeof *g->alt_start * (size_t)(n_alts + 1));
    g->rule_alt0 = malloc(sizeof *g->rule_alt0 * (size_t)b->n_rules);
    g->rule_n_alts = malloc(sizeof *g->rule_n_alts * (size_t)b->n_rules);
    if (!g->elems || !g->alt_start || !g->rule_alt0 || !g->rule_n_alts) return -ENOMEM;
    int e = 0, k = 0;
    for (int r = 0; r < b->n_rules; r++) {
        g->rule_alt0[r] = (uint32_t)k;
        g->rule_n_alts[r] = (uint32_t)b->rules[r].n_alts;
        for (int i = 0; i < b->rules[r].n_alts; i++) {
            g->alt_start[k++] = (uint32_t)e;
            const balt *a = &b->rules[r].alts[i];
            if (a->n) /* an empty alternative has no element array */
                memcpy(g->elems + e, a->e, sizeof *a->e * (size_t)a->n);
            e += a->n;
            g->elems[e++] = (gelem){GE_END, 0};
        }
    }
    g->n_elems = e, g->n_alts = k, g->n_rules = b->n_rules;
    g->sets = b->sets, g->n_sets = b->n_sets;
    b->sets = NULL;
    return 0;
}

static void builder_free(builder *b) {
    for (int r = 0; r < b->n_rules; r++) {
        for (int i = 0; i < b->rules[r].n_alts; i++)
            free(b->rules[r].alts[i].e);
        free(b->rules[r].alts);
    }
    free(b->rules);
    free(b->sets);
}

int gbnf_parse(const char *text, size_t len, gbnf **out, sol_err *err) {
    *out = NULL;
    builder b = {.text = text, .p = text, .end = text + len, .utf8mb = -1, .err = err};
    memset(b.single, -1, sizeof b.single);
    int rc = parse_rules(&b);
    for (int r = 0; r < b.n_rules && !rc; r++)
        if (!b.rules[r].defined)
            rc = sol_err_set(err, -EINVAL, "grammar line %d column %d: rule '%s' is never defined",
                             b.rules[r].ref_line, b.rules[r].ref_col, b.rules[r].name);
    int root = -1;
    for (int r = 0; r < b.n_rules && !rc && root < 0; r++)
        if (!strcmp(b.rules[r].name, "root")) root = r;
    if (!rc && root < 0) rc = sol_err_set(err, -EINVAL, "grammar: no rule named 'root'");
    if (!rc) rc = check_left_recursion(&b);
    gbnf *g = rc ? NULL : calloc(1, sizeof *g);
    if (!rc && !g) rc = sol_err_set(err, -ENOMEM, "out of memory for the grammar");
    if (!rc && (rc = flatten(&b, g))) sol_err_set(err, rc, "out of memory for the grammar");
    builder_free(&b);
    if (rc) {
        gbnf_free(g);
        return rc == -ENOMEM && !err->msg[0] ? sol_err_set(err, rc, "out of memory") : rc;
    }
    g->root = root;
    *out = g;
    return 0;
}

void gbnf_free(gbnf *g) {
    if (!g) return;
    free(g->elems), free(g->alt_start), free(g->rule_alt0), free(g->rule_n_alts), free(g->sets);
    free(g);
}
