/* grammar_range: integer ranges as alternatives of digit patterns. For numbers of one length
 * from a to b, the first digit splits the range: a's own first digit followed by a's tail up to
 * 9...9, the digits strictly between followed by any tail, and b's first digit followed by 0...0
 * up to b's tail; a shared first digit is a literal and the rest recurses. */
#include "grammar_range.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
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

/* x rounded as f rounds it, within [0, GG_INT_SAFE] (infinities to the ends). */
static int64_t clamp_int(double x) {
    if (!(x > 0)) return 0;
    if (x >= (double)GG_INT_SAFE) return GG_INT_SAFE;
    return (int64_t)x;
}

/* Non-negative magnitudes m with a <= m <= b (ax, bx: exclusive), after sign: bare integers
 * (from 1 when one_up: "-0" is not written), and I.fraction where every fraction fits. */
static void magnitudes(strbuf *o, bool *first, const char *sign, double a, bool ax, double b,
                       bool bx, bool one_up) {
    double lo_i = ax ? floor(a) + 1 : ceil(a);
    bool lo_in = lo_i <= (double)GG_INT_SAFE;
    int64_t i_lo = clamp_int(lo_i);
    int64_t top = isinf(b) ? GG_INT_SAFE : (bx ? (int64_t)ceil(b) - 1 : (int64_t)floor(b));
    int64_t any_hi = isinf(b) ? GG_INT_SAFE : (int64_t)floor(b) - 1; /* I + 1 <= b */
    top = top > GG_INT_SAFE ? GG_INT_SAFE : top;
    any_hi = any_hi > GG_INT_SAFE ? GG_INT_SAFE : any_hi;
    int64_t bare_lo = one_up && i_lo < 1 ? 1 : i_lo;
    if (lo_in && bare_lo <= top) {
        alt(o, first);
        strbuf_puts(o, sign);
        gg_int_range(o, bare_lo, top);
    }
    if (lo_in && i_lo <= any_hi) {
        alt(o, first);
        strbuf_puts(o, sign);
        gg_int_range(o, i_lo, any_hi);
        strbuf_puts(o, " \".\" [0-9]{1,15}");
    }
}

int gg_num_range(strbuf *out, double lo, bool lo_x, double hi, bool hi_x) {
    strbuf body;
    strbuf_init(&body);
    bool first = true;
    if (lo < 0) /* -m: hi's magnitude below (0 when hi >= 0), lo's above */
        magnitudes(&body, &first, "\"-\" ", hi < 0 ? -hi : 0, hi < 0 ? hi_x : hi == 0 && hi_x, -lo,
                   lo_x, true);
    if (hi > 0 || (hi == 0 && !hi_x))
        magnitudes(&body, &first, "", lo < 0 ? 0 : lo, lo < 0 ? false : lo_x, hi, hi_x, false);
    int rc = first ? -1 : 0;
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
