/* grammar_range: integer ranges as alternatives of digit patterns. For numbers of one length
 * from a to b, the first digit splits the range: a's own first digit followed by a's tail up to
 * 9...9, the digits strictly between followed by any tail, and b's first digit followed by 0...0
 * up to b's tail; a shared first digit is a literal and the rest recurses. */
#include "grammar_range.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DIGITS = 20 };

static void alt(strbuf *o, bool *first) {
    if (!*first) strbuf_puts(o, " | ");
    *first = false;
}

static bool all(const char *s, char c, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != c) return false;
    return true;
}

/* " [0-9]{n}" (nothing for n = 0). */
static void any_digits(strbuf *o, size_t n) {
    if (n == 1) strbuf_puts(o, " [0-9]");
    if (n > 1) strbuf_printf(o, " [0-9]{%zu}", n);
}

/* The alternatives for the n-digit strings from a to b (a <= b), each after the GBNF text pre. */
static void span(strbuf *o, bool *first, const char *pre, const char *a, const char *b, size_t n) {
    static const char nines[] = "99999999999999999999", zeros[] = "00000000000000000000";
    char more[256];
    if (n == 0 || (all(a, '0', n) && all(b, '9', n))) {
        alt(o, first);
        strbuf_puts(o, pre);
        any_digits(o, n);
        return;
    }
    if (a[0] == b[0]) {
        snprintf(more, sizeof more, "%s \"%c\"", pre, a[0]);
        span(o, first, more, a + 1, b + 1, n - 1);
        return;
    }
    char lo = a[0], hi = b[0];
    if (!all(a + 1, '0', n - 1)) { /* a's digit with a's tail and above */
        snprintf(more, sizeof more, "%s \"%c\"", pre, a[0]);
        span(o, first, more, a + 1, nines, n - 1);
        lo++;
    }
    bool b_tail = !all(b + 1, '9', n - 1);
    if (b_tail) hi--;
    if (lo <= hi) {
        alt(o, first);
        if (lo == hi)
            strbuf_printf(o, "%s \"%c\"", pre, lo);
        else
            strbuf_printf(o, "%s [%c-%c]", pre, lo, hi);
        any_digits(o, n - 1);
    }
    if (b_tail) { /* b's digit with b's tail and below */
        snprintf(more, sizeof more, "%s \"%c\"", pre, b[0]);
        span(o, first, more, zeros, b + 1, n - 1);
    }
}

/* Lengths first..last (>= 2) whose every number is in the range, as one alternative:
 * [1-9] [0-9]{first-1,last-1} (one repeat keeps one matcher stack, where one alternative per
 * length kept one each). */
static void full_lengths(strbuf *o, bool *first_alt, size_t first, size_t last) {
    alt(o, first_alt);
    if (first == last)
        strbuf_printf(o, " [1-9] [0-9]{%zu}", first - 1);
    else
        strbuf_printf(o, " [1-9] [0-9]{%zu,%zu}", first - 1, last - 1);
}

/* The non-negative integers a..b, length by length; a run of whole lengths in one piece. */
static void nonneg(strbuf *o, bool *first, uint64_t a, uint64_t b) {
    char sa[MAX_DIGITS + 1], sb[MAX_DIGITS + 1], x[MAX_DIGITS + 1], y[MAX_DIGITS + 1];
    size_t la = (size_t)snprintf(sa, sizeof sa, "%llu", (unsigned long long)a);
    size_t lb = (size_t)snprintf(sb, sizeof sb, "%llu", (unsigned long long)b);
    size_t run = 0; /* first length of the pending run of whole lengths, 0: none */
    for (size_t len = la; len <= lb; len++) {
        if (len == la)
            memcpy(x, sa, len + 1);
        else
            x[0] = '1', memset(x + 1, '0', len - 1), x[len] = 0;
        if (len == lb)
            memcpy(y, sb, len + 1);
        else
            memset(y, '9', len), y[len] = 0;
        bool whole = len >= 2 && x[0] == '1' && all(x + 1, '0', len - 1) && all(y, '9', len);
        if (whole && !run) run = len;
        if (whole) continue;
        if (run) full_lengths(o, first, run, len - 1), run = 0;
        span(o, first, "", x, y, len);
    }
    if (run) full_lengths(o, first, run, lb);
}

void gg_int_range(strbuf *out, int64_t lo, int64_t hi) {
    bool first = true;
    strbuf_puts(out, "(");
    if (lo < 0) { /* "-" and the magnitudes max(1, -hi)..-lo */
        bool inner = true;
        alt(out, &first);
        strbuf_puts(out, " \"-\" (");
        nonneg(out, &inner, hi < 0 ? (uint64_t)-hi : 1, (uint64_t)-lo);
        strbuf_puts(out, " )");
    }
    if (hi >= 0) nonneg(out, &first, lo < 0 ? 0 : (uint64_t)lo, (uint64_t)hi);
    strbuf_puts(out, " )");
}

enum { FRAC_DIGITS = 15 };

/* x >= 0 as decimal digits, from the fewest fraction digits that give x back (0.2 is "0"
 * and "2", as the schema wrote it): the integer part and the fraction without trailing zeros.
 * False when x needs more than FRAC_DIGITS fraction digits. */
static bool decimal_of(double x, char ip[24], char fp[FRAC_DIGITS + 1]) {
    char buf[48];
    for (int fd = 0; fd <= FRAC_DIGITS; fd++) {
        snprintf(buf, sizeof buf, "%.*f", fd, x);
        if (strtod(buf, NULL) != x) continue;
        char *dot = strchr(buf, '.');
        if (dot) *dot = 0;
        snprintf(ip, 24, "%.23s", buf);
        snprintf(fp, FRAC_DIGITS + 1, "%.15s", dot ? dot + 1 : "");
        for (size_t n = strlen(fp); n && fp[n - 1] == '0';)
            fp[--n] = 0;
        return true;
    }
    return false;
}

/* One side of a fraction's bound: its digits not yet matched (NULL: no bound on this side; ""
 * is zeros from here on), and whether the bound itself is excluded. */
typedef struct fbound {
    const char *d;
    bool x;
} fbound;

static fbound fb_next(fbound b) {
    if (b.d && *b.d) b.d++;
    return b;
}

/* The continuations of at most `left` digits of a fraction whose digits so far equal the
 * bounds' own (on each side that has one), keeping lo <= fraction <= hi: appends "( ... )",
 * with "?" when ending here is allowed; returns 0, 1 when ending is the only way (nothing
 * appended), -1 when there is none (need: at least one digit must come). */
static int frac_tail(strbuf *o, fbound lo, fbound hi, int left, bool need) {
    if (lo.d && !*lo.d && !lo.x) lo.d = NULL; /* >= 0.000...: no bound */
    bool zeros = hi.d && !*hi.d && !lo.d;     /* <= 0.000...: only zeros follow */
    if (zeros && hi.x) return -1;
    if ((zeros || (!lo.d && !hi.d)) && left > 0) {
        strbuf_printf(o, "( %s{1,%d} )%s", zeros ? "\"0\"" : "[0-9]", left, need ? "" : "?");
        return 0;
    }
    bool end = !need && (!lo.d || (!*lo.d && !lo.x)) && (!hi.d || !hi.x || *hi.d);
    int l = lo.d && *lo.d ? *lo.d - '0' : 0, h = hi.d ? (*hi.d ? *hi.d - '0' : 0) : 9;
    strbuf b;
    strbuf_init(&b);
    bool first = true;
    int fa = lo.d ? l + 1 : 0, fz = hi.d ? h - 1 : 9; /* digits that free both sides */
    if (left > 0 && fa <= fz) {
        alt(&b, &first);
        strbuf_printf(&b, "[%d-%d]", fa, fz);
        if (left > 1) strbuf_printf(&b, " [0-9]{0,%d}", left - 1);
    }
    for (int side = 0; left > 0 && side < 2; side++) { /* the digit that keeps a side tight */
        bool both = lo.d && hi.d && l == h;
        if (side == 0 ? !lo.d || (hi.d && l > h) : !hi.d || (both || (lo.d && h < l))) continue;
        int d = side == 0 ? l : h;
        fbound nl = (side == 0 || both) ? fb_next(lo) : (fbound){NULL, false};
        fbound nh = (side == 1 || both) ? fb_next(hi) : (fbound){NULL, false};
        strbuf sub;
        strbuf_init(&sub);
        int rc = frac_tail(&sub, nl, nh, left - 1, false);
        if (rc >= 0) {
            alt(&b, &first);
            strbuf_printf(&b, "\"%d\"%s%s", d, rc ? "" : " ", rc ? "" : sub.data);
        }
        strbuf_free(&sub);
    }
    int rc = first ? (end ? 1 : -1) : 0;
    if (!rc) strbuf_printf(o, "( %s )%s", b.data, end ? "?" : "");
    strbuf_free(&b);
    return rc;
}

/* `sign I` and `sign I "." fraction` within the fraction bounds lo, hi (bare: I itself is in). */
static void int_part(strbuf *o, bool *first, const char *sign, const char *i, bool bare, fbound lo,
                     fbound hi) {
    if (bare) {
        alt(o, first);
        strbuf_printf(o, "%s\"%s\"", sign, i);
    }
    strbuf f;
    strbuf_init(&f);
    if (frac_tail(&f, lo, hi, FRAC_DIGITS, true) == 0) {
        alt(o, first);
        strbuf_printf(o, "%s\"%s.\" %s", sign, i, f.data);
    }
    strbuf_free(&f);
}

/* Non-negative magnitudes m with a <= m <= b (ax, bx: exclusive; b infinite or beyond
 * GG_INT_SAFE: no upper bound), after sign: integers (not 0 when one_up: "-0" is not written)
 * and decimals of up to FRAC_DIGITS fraction digits, exactly those inside. The integer parts
 * strictly between a's and b's take any fraction; a's and b's own take the fractions on their
 * side of the bound's digits. -2 when a bound needs more fraction digits. */
static int magnitudes(strbuf *o, bool *first, const char *sign, double a, bool ax, double b,
                      bool bx, bool one_up) {
    char ai[24], af[FRAC_DIGITS + 1], bi[24], bf[FRAC_DIGITS + 1];
    bool b_open = isinf(b) || b > (double)GG_INT_SAFE;
    if (a > (double)GG_INT_SAFE || (!b_open && a > b)) return 0;
    if (!decimal_of(a, ai, af) || (!b_open && !decimal_of(b, bi, bf))) return -2;
    int64_t ia = strtoll(ai, NULL, 10), ib = b_open ? GG_INT_SAFE + 1 : strtoll(bi, NULL, 10);
    fbound lo = {af, ax}, hi = {bf, bx}, none = {NULL, false};
    bool a_bare = !*af && !ax && !(one_up && ia == 0);
    if (ia == ib) {
        int_part(o, first, sign, ai, a_bare && (*bf || !bx), lo, hi);
        return 0;
    }
    int_part(o, first, sign, ai, a_bare, lo, none);
    int64_t from = ia + 1, to = ib - 1 > GG_INT_SAFE ? GG_INT_SAFE : ib - 1;
    if (from <= to) {
        alt(o, first);
        strbuf_puts(o, sign);
        gg_int_range(o, from, to);
        strbuf_printf(o, " ( \".\" [0-9]{1,%d} )?", FRAC_DIGITS);
    }
    if (!b_open) int_part(o, first, sign, bi, *bf || !bx, none, hi);
    return 0;
}

int gg_num_range(strbuf *out, double lo, bool lo_x, double hi, bool hi_x) {
    strbuf body;
    strbuf_init(&body);
    bool first = true;
    int rc = 0;
    if (lo < 0) /* -m: hi's magnitude below (0 when hi >= 0), lo's above */
        rc = magnitudes(&body, &first, "\"-\" ", hi < 0 ? -hi : 0, hi < 0 ? hi_x : hi == 0 && hi_x,
                        -lo, lo_x, true);
    if (!rc && (hi > 0 || (hi == 0 && !hi_x)))
        rc = magnitudes(&body, &first, "", lo < 0 ? 0 : lo, lo < 0 ? false : lo_x, hi, hi_x, false);
    if (!rc && first) rc = -1;
    if (!rc) strbuf_printf(out, "( %s )", body.data);
    strbuf_free(&body);
    return rc;
}

int gg_int_multiples_listed(strbuf *out, int64_t lo, int64_t hi, int64_t m) {
    int64_t first = lo % m == 0 ? lo : lo >= 0 ? lo + (m - lo % m) : lo - lo % m;
    if (first > hi || (hi - first) / m >= GG_MULTIPLES_MAX) return -1;
    strbuf_puts(out, "(");
    for (int64_t v = first; v <= hi; v += m)
        strbuf_printf(out, "%s \"%lld\"", v == first ? "" : " |", (long long)v);
    strbuf_puts(out, " )");
    return 0;
}

/* NAME-R-K: K digits read (1..15), their value is R mod m; the next digit moves to
 * (10 R + d) mod m, and the number may end when R is 0. Only states that can still end are
 * written (GBNF has no rule that matches nothing). */
void gg_int_multiples_dfa(strbuf *rules, strbuf *out, const char *name, int m) {
    enum { DIGITS = 15 };
    bool live[GG_MULTIPLE_OF_MAX][DIGITS + 2] = {{false}};
    for (int k = DIGITS; k >= 1; k--)
        for (int r = 0; r < m; r++) {
            live[r][k] = r == 0;
            for (int d = 0; d <= 9 && k < DIGITS && !live[r][k]; d++)
                live[r][k] = live[(10 * r + d) % m][k + 1];
        }
    for (int k = 1; k < DIGITS; k++) /* the 15th digit ends the number: no rule after it */
        for (int r = 0; r < m; r++) {
            if (!live[r][k]) continue;
            strbuf_printf(rules, "%s-%d-%d ::= (", name, r, k);
            bool first = true; /* never stays true: (0, k) moves on with a 0, the others live */
            for (int d = 0; d <= 9; d++) {
                int to = (10 * r + d) % m;
                if (!live[to][k + 1]) continue;
                alt(rules, &first);
                if (k + 1 == DIGITS)
                    strbuf_printf(rules, " \"%d\"", d);
                else
                    strbuf_printf(rules, " \"%d\" %s-%d-%d", d, name, to, k + 1);
            }
            strbuf_puts(rules, r == 0 ? " )?\n" : " )\n");
        }
    /* 0, or a first digit 1..9 then the automaton, with an optional "-" before non-zero ones */
    strbuf_puts(out, "( \"0\" | \"-\"? (");
    bool first = true;
    for (int d = 1; d <= 9; d++)
        if (live[d % m][1]) {
            alt(out, &first);
            strbuf_printf(out, " \"%d\" %s-%d-1", d, name, d % m);
        }
    strbuf_puts(out, " ) )");
}
