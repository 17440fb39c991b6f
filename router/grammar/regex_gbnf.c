/* regex_gbnf: the regex subset (docs/api.md: literals, escapes, classes, groups, alternation,
 * counted repeats; no lookaround or backreferences) written as GBNF, a character at a time.
 * The regex is parsed into a tree whose leaves each match one character (a literal, an escape, a
 * class, `.`); the tree is written as one GBNF expression, or, when the string's length is
 * bounded too (a format or pattern beside minLength/maxLength), as the product of its Thompson
 * automaton with a character counter: rule NAME-q-k is "in automaton state q after k
 * characters", so the grammar holds both the regex and the length. */
#include "regex_gbnf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

/* ---- the tree ----------------------------------------------------------------------------- */

typedef enum { RX_ATOM, RX_SEQ, RX_ALT, RX_REP } rx_kind;

typedef struct rx_node {
    rx_kind kind;
    int kid, last, next; /* first and last child, next sibling (-1: none) */
    int min, max;        /* RX_REP: min..max repeats of kid (max < 0: unbounded) */
    size_t off, len;     /* RX_ATOM: its GBNF text in the tree's atoms */
} rx_node;

typedef struct rx_tree {
    rx_node *n;
    int len, cap;
    strbuf atoms;
} rx_tree;

static int rx_new(rx_tree *t, rx_kind kind) {
    if (t->len == t->cap) {
        int cap = t->cap ? t->cap * 2 : 64;
        rx_node *n = realloc(t->n, (size_t)cap * sizeof *n);
        if (!n) return -ENOMEM;
        t->n = n, t->cap = cap;
    }
    t->n[t->len] = (rx_node){kind, -1, -1, -1, 0, 0, 0, 0};
    return t->len++;
}

static void rx_add(rx_tree *t, int parent, int kid) {
    rx_node *p = &t->n[parent];
    if (p->last < 0)
        p->kid = kid;
    else
        t->n[p->last].next = kid;
    p->last = kid;
}

typedef struct re_ctx {
    sol_err *err;
    rx_tree *t;
    strbuf *b; /* the tree's atoms: an atom's text is written here */
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

static int re_alt(re_ctx *r, int *out);

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

/* One character's GBNF text into the atoms (the character at r->p: a class, `.`, an escape or a
 * literal). */
static int re_char_text(re_ctx *r) {
    char ch = *r->p;
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

/* A group (its alternation node) or one character (an atom node) into *out. */
static int re_atom(re_ctx *r, int *out) {
    if (*r->p == '(') {
        r->p++;
        if (r->p[0] == '?') {
            if (r->p[1] != ':') return re_bad(r, "lookaround and named groups are not supported");
            r->p += 2;
        }
        int rc = re_alt(r, out);
        if (rc) return rc;
        if (*r->p != ')') return re_bad(r, "expected )");
        r->p++;
        return 0;
    }
    size_t off = r->b->len;
    int rc = re_char_text(r);
    if (rc) return rc;
    int n = rx_new(r->t, RX_ATOM);
    if (n < 0 || r->b->oom) return sol_err_set(r->err, -ENOMEM, "out of memory for the regex");
    r->t->n[n].off = off, r->t->n[n].len = r->b->len - off;
    *out = n;
    return 0;
}

/* A quantifier after the item *node wraps it in a repeat node. */
static int re_quant(re_ctx *r, int *node) {
    char ch = *r->p;
    int m, n;
    if (ch == '*' || ch == '+' || ch == '?') {
        r->p++;
        m = ch == '+', n = ch == '?' ? 1 : -1;
    } else if (ch == '{') {
        const char *q = r->p;
        int k = 0;
        m = 0, n = -1;
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
    } else {
        return 0;
    }
    if (*r->p == '?' || *r->p == '+') return re_bad(r, "lazy and possessive quantifiers");
    int rep = rx_new(r->t, RX_REP);
    if (rep < 0) return sol_err_set(r->err, -ENOMEM, "out of memory for the regex");
    r->t->n[rep].kid = r->t->n[rep].last = *node;
    r->t->n[rep].min = m, r->t->n[rep].max = n;
    *node = rep;
    return 0;
}

static int re_seq(re_ctx *r, int *out) {
    int seq = rx_new(r->t, RX_SEQ);
    if (seq < 0) return sol_err_set(r->err, -ENOMEM, "out of memory for the regex");
    while (*r->p && *r->p != '|' && *r->p != ')') {
        if (*r->p == '^' && r->p == r->start) { /* the match is anchored anyway */
            r->p++;
            continue;
        }
        if (*r->p == '$' && (r->p[1] == 0)) {
            r->p++;
            continue;
        }
        int item, rc = re_atom(r, &item);
        if (!rc) rc = re_quant(r, &item);
        if (rc) return rc;
        rx_add(r->t, seq, item);
    }
    *out = seq;
    return 0;
}

static int re_alt(re_ctx *r, int *out) {
    int alt = rx_new(r->t, RX_ALT), seq;
    if (alt < 0) return sol_err_set(r->err, -ENOMEM, "out of memory for the regex");
    int rc = re_seq(r, &seq);
    if (!rc) rx_add(r->t, alt, seq);
    while (!rc && *r->p == '|') {
        r->p++;
        if (!(rc = re_seq(r, &seq))) rx_add(r->t, alt, seq);
    }
    *out = alt;
    return rc;
}

/* The whole regex's tree (its root: an alternation); the caller frees t. */
static int rx_parse(rx_tree *t, const char *re, bool json, const char *path, sol_err *err,
                    int *root) {
    strbuf_init(&t->atoms);
    re_ctx r = {err, t, &t->atoms, re, re, json, path};
    int rc = re_alt(&r, root);
    if (!rc && *r.p) rc = re_bad(&r, "unbalanced )");
    return rc;
}

static void rx_free(rx_tree *t) {
    free(t->n);
    strbuf_free(&t->atoms);
}

/* ---- one expression ------------------------------------------------------------------------ */

static void emit(const rx_tree *t, int i, strbuf *o) {
    const rx_node *x = &t->n[i];
    switch (x->kind) {
    case RX_ATOM:
        strbuf_printf(o, "%.*s", (int)x->len, t->atoms.data + x->off);
        return;
    case RX_SEQ:
        if (x->kid < 0) strbuf_puts(o, "\"\"");
        for (int k = x->kid; k >= 0; k = t->n[k].next) {
            if (k != x->kid) strbuf_putc(o, ' ');
            emit(t, k, o);
        }
        return;
    case RX_ALT:
        strbuf_puts(o, "( ");
        for (int k = x->kid; k >= 0; k = t->n[k].next) {
            if (k != x->kid) strbuf_puts(o, " | ");
            emit(t, k, o);
        }
        strbuf_puts(o, " )");
        return;
    case RX_REP: /* the item is an atom or a group: its text takes the count as one */
        emit(t, x->kid, o);
        gbnf_repeat(o, x->min, x->max);
        return;
    }
}

int regex_gbnf(strbuf *b, const char *re, bool json_string, const char *path, sol_err *err) {
    rx_tree t = {0};
    int root, rc = rx_parse(&t, re, json_string, path, err, &root);
    if (!rc) emit(&t, root, b);
    rx_free(&t);
    return rc;
}

/* ---- with a length ------------------------------------------------------------------------- */

enum { NFA_MAX_STATES = 4096, PRODUCT_MAX_RULES = 20000 };

typedef struct nfa_edge {
    int from, to, atom; /* atom: its node in the tree, -1: an epsilon edge */
} nfa_edge;

typedef struct nfa {
    nfa_edge *e;
    int n_e, cap_e, n_states;
    int *out0; /* edges leaving state s: e[out0[s] .. out0[s + 1]) once sorted */
} nfa;

static int nfa_state(nfa *a) {
    return a->n_states < NFA_MAX_STATES ? a->n_states++ : -E2BIG;
}

static int nfa_add(nfa *a, int from, int to, int atom) {
    if (a->n_e == a->cap_e) {
        int cap = a->cap_e ? a->cap_e * 2 : 256;
        nfa_edge *e = realloc(a->e, (size_t)cap * sizeof *e);
        if (!e) return -ENOMEM;
        a->e = e, a->cap_e = cap;
    }
    a->e[a->n_e++] = (nfa_edge){from, to, atom};
    return 0;
}

/* Thompson's construction of node i from state `from`: returns the state where it ends, or a
 * negative code. Counted repeats are unrolled; every loop gets a fresh state. */
static int build(const rx_tree *t, int i, nfa *a, int from) {
    const rx_node *x = &t->n[i];
    int end, cur = from, rc = 0;
    switch (x->kind) {
    case RX_ATOM:
        if ((end = nfa_state(a)) < 0) return end;
        return (rc = nfa_add(a, from, end, i)) ? rc : end;
    case RX_SEQ:
        for (int k = x->kid; k >= 0 && cur >= 0; k = t->n[k].next)
            cur = build(t, k, a, cur);
        return cur;
    case RX_ALT:
        if ((end = nfa_state(a)) < 0) return end;
        for (int k = x->kid; k >= 0 && !rc; k = t->n[k].next) {
            int e = build(t, k, a, from);
            rc = e < 0 ? e : nfa_add(a, e, end, -1);
        }
        return rc ? rc : end;
    case RX_REP:
        for (int k = 0; k < x->min && cur >= 0; k++)
            cur = build(t, x->kid, a, cur);
        if (cur < 0 || (end = nfa_state(a)) < 0) return cur < 0 ? cur : end;
        if (x->max < 0) { /* a loop through `end` */
            int e = build(t, x->kid, a, end);
            if (e < 0 || (rc = nfa_add(a, cur, end, -1)) || (rc = nfa_add(a, e, end, -1)))
                return e < 0 ? e : rc;
            return end;
        }
        for (int k = x->min; k < x->max && cur >= 0 && !rc; k++) { /* each optional copy */
            rc = nfa_add(a, cur, end, -1);
            cur = rc ? rc : build(t, x->kid, a, cur);
        }
        if (cur < 0 || rc) return cur < 0 ? cur : rc;
        return (rc = nfa_add(a, cur, end, -1)) ? rc : end;
    }
    return -EINVAL;
}

static int cmp_from(const void *x, const void *y) {
    const nfa_edge *a = x, *b = y;
    return (a->from > b->from) - (a->from < b->from);
}

static int nfa_index(nfa *a) {
    qsort(a->e, (size_t)a->n_e, sizeof *a->e, cmp_from);
    if (!(a->out0 = calloc((size_t)a->n_states + 1, sizeof *a->out0))) return -ENOMEM;
    for (int k = 0; k < a->n_e; k++)
        a->out0[a->e[k].from + 1]++;
    for (int s = 0; s < a->n_states; s++)
        a->out0[s + 1] += a->out0[s];
    return 0;
}

/* The states reachable from q by epsilon edges (q included) into list; returns their count.
 * seen: n_states stamps, stamp: this call's. */
static int closure(const nfa *a, int q, int *list, int *seen, int stamp) {
    int n = 0, top = 0;
    list[n++] = q, seen[q] = stamp;
    while (top < n) {
        int s = list[top++];
        for (int k = a->out0[s]; k < a->out0[s + 1]; k++)
            if (a->e[k].atom < 0 && seen[a->e[k].to] != stamp)
                seen[a->e[k].to] = stamp, list[n++] = a->e[k].to;
    }
    return n;
}

/* How the product is bounded: lengths 0..top are told apart; with no maximum, top = min and
 * top stands for "top or more". */
typedef struct lenb {
    int min, max, top, words;
} lenb;

static int grow(const lenb *L, int k) {
    return k < L->top ? k + 1 : L->max < 0 ? L->top : -1;
}

/* rem[s]: the lengths a match can still have from state s (bit L of words at s * L->words). */
static int remaining(const nfa *a, int accept, const lenb *L, uint64_t *rem) {
    rem[(size_t)accept * L->words] |= 1;
    for (bool changed = true; changed;) {
        changed = false;
        for (int k = 0; k < a->n_e; k++) {
            const uint64_t *to = rem + (size_t)a->e[k].to * L->words;
            uint64_t *from = rem + (size_t)a->e[k].from * L->words;
            for (int b = 0; b <= L->top; b++) {
                if (!(to[b >> 6] >> (b & 63) & 1)) continue;
                int n = a->e[k].atom < 0 ? b : grow(L, b);
                if (n < 0 || from[n >> 6] >> (n & 63) & 1) continue;
                from[n >> 6] |= 1ull << (n & 63), changed = true;
            }
        }
    }
    return 0;
}

/* Whether a match can end within the bounds from state s after k characters. */
static bool live(const uint64_t *rem, const lenb *L, int s, int k) {
    const uint64_t *r = rem + (size_t)s * L->words;
    for (int b = 0; b <= L->top; b++)
        if ((r[b >> 6] >> (b & 63) & 1) &&
            (L->max < 0 ? k + b >= L->min || b == L->top : k + b >= L->min && k + b <= L->max))
            return true;
    return false;
}

typedef struct product {
    const rx_tree *t;
    const nfa *a;
    int accept;
    const lenb *L;
    const uint64_t *rem;
    uint8_t *made; /* (state, k) already queued */
    int *queue, n_queue, *list, *seen, stamp;
    const char *name;
} product;

/* Rule NAME-q-k: each character an automaton state of q's closure may read, then its target
 * after k + 1, where a match can still end in bounds; the empty text when q's closure accepts
 * with k in bounds. */
static void product_rule(product *P, strbuf *rules, int q, int k) {
    const nfa *a = P->a;
    strbuf_printf(rules, "%s-%d-%d ::= ", P->name, q, k);
    bool first = true;
    int n = closure(a, q, P->list, P->seen, ++P->stamp);
    for (int c = 0; c < n; c++) {
        int s = P->list[c];
        for (int e = a->out0[s]; e < a->out0[s + 1]; e++) {
            int to = a->e[e].to, k1 = grow(P->L, k);
            if (a->e[e].atom < 0 || k1 < 0 || !live(P->rem, P->L, to, k1)) continue;
            const rx_node *x = &P->t->n[a->e[e].atom];
            strbuf_printf(rules, "%s%.*s %s-%d-%d", first ? "" : " | ", (int)x->len,
                          P->t->atoms.data + x->off, P->name, to, k1);
            first = false;
            size_t at = (size_t)to * (size_t)(P->L->top + 1) + (size_t)k1;
            if (!P->made[at]) P->made[at] = 1, P->queue[P->n_queue++] = (int)at;
        }
        if (s == P->accept && k >= P->L->min && (P->L->max < 0 || k <= P->L->max))
            strbuf_printf(rules, "%s\"\"", first ? "" : " | "), first = false;
    }
    strbuf_putc(rules, '\n');
}

int regex_gbnf_bounded(strbuf *rules, strbuf *b, const char *name, const char *re, bool json_string,
                       int min, int max, const char *path, sol_err *err) {
    rx_tree t = {0};
    nfa a = {0};
    int root, rc = rx_parse(&t, re, json_string, path, err, &root);
    int start = rc ? -1 : nfa_state(&a), accept = start < 0 ? start : build(&t, root, &a, start);
    lenb L = {min, max, max >= 0 ? max : min, 0};
    L.words = (L.top + 64) / 64;
    product P = {&t, &a, accept, &L, NULL, NULL, NULL, 0, NULL, NULL, 0, name};
    uint64_t *rem = NULL;
    size_t cells = (size_t)a.n_states * (size_t)(L.top + 1);
    if (!rc && accept < 0)
        rc = accept == -E2BIG ? sol_err_set(err, -EINVAL,
                                            "%s: the pattern is too large to bound its length "
                                            "(over %d automaton states)",
                                            path, NFA_MAX_STATES)
                              : sol_err_set(err, accept, "out of memory for the regex");
    if (!rc && (nfa_index(&a) || !(rem = calloc((size_t)a.n_states * (size_t)L.words, 8)) ||
                !(P.made = calloc(cells, 1)) || !(P.queue = malloc(cells * sizeof *P.queue)) ||
                !(P.list = malloc((size_t)a.n_states * sizeof *P.list)) ||
                !(P.seen = calloc((size_t)a.n_states, sizeof *P.seen))))
        rc = sol_err_set(err, -ENOMEM, "out of memory for the regex");
    if (!rc) remaining(&a, accept, &L, rem), P.rem = rem;
    if (!rc && !live(rem, &L, start, 0))
        rc = sol_err_set(err, -EINVAL,
                         "%s: no text the pattern or format allows is %d to %d characters long",
                         path, min, max);
    if (!rc) {
        P.made[(size_t)start * (size_t)(L.top + 1)] = 1;
        P.queue[P.n_queue++] = start * (L.top + 1);
        for (int i = 0; i < P.n_queue && !rc; i++) {
            if (i >= PRODUCT_MAX_RULES)
                rc = sol_err_set(err, -EINVAL,
                                 "%s: the pattern or format with minLength/maxLength needs over "
                                 "%d grammar rules (a smaller maxLength helps)",
                                 path, PRODUCT_MAX_RULES);
            else
                product_rule(&P, rules, P.queue[i] / (L.top + 1), P.queue[i] % (L.top + 1));
        }
    }
    if (!rc) strbuf_printf(b, "%s-%d-0", name, start);
    free(rem), free(P.made), free(P.queue), free(P.list), free(P.seen);
    free(a.e), free(a.out0);
    rx_free(&t);
    return rc;
}
