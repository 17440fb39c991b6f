/* grammar_range: the decimal integers of a closed range as a GBNF expression, digit by digit
 * (JSON Schema's minimum/maximum on integers, and the ±(2^53 - 1) bound of unbounded ones). */
#ifndef SOL_GRAMMAR_RANGE_H
#define SOL_GRAMMAR_RANGE_H

#include <stdbool.h>
#include <stdint.h>

#include "strbuf.h"

/* The largest integer a JSON client reads exactly (JavaScript's Number.MAX_SAFE_INTEGER). */
#define GG_INT_SAFE 9007199254740991LL

/* Appends "( ... )" matching exactly the JSON texts of the integers lo..hi: no leading zeros, a
 * "-" for negatives, never "-0". Needs -GG_INT_SAFE <= lo <= hi <= GG_INT_SAFE. */
void gg_int_range(strbuf *out, int64_t lo, int64_t hi);

/* Appends "( ... )" for exactly the JSON numbers between lo and hi that have no exponent and
 * at most 15 fraction digits (lo_x, hi_x: the bound itself excluded; -INFINITY, INFINITY: no
 * bound), integer parts within ±(2^53 - 1); the bounds are read as the shortest decimals that
 * give them back (0.2 is 0.2). Returns 0; -1 when no such number lies inside (nothing
 * appended); -2 when a bound needs more than 15 fraction digits. */
int gg_num_range(strbuf *out, double lo, bool lo_x, double hi, bool hi_x);

/* The most multiples of multipleOf a bounded range may hold (they are listed as literals). */
#define GG_MULTIPLES_MAX 512
/* The largest multipleOf an unbounded integer takes (its grammar has m x 15 rules). */
#define GG_MULTIPLE_OF_MAX 64

/* Appends the integers in lo..hi that are multiples of m (m >= 1), listed, into out; 0, or -1
 * when there are more than GG_MULTIPLES_MAX of them or none (nothing appended). */
int gg_int_multiples_listed(strbuf *out, int64_t lo, int64_t hi, int64_t m);

/* The multiples of m (1 <= m <= GG_MULTIPLE_OF_MAX) of up to 15 digits (so within ±(2^53 - 1)),
 * as rules "NAME-R-K" (remainder R after K digits) appended to rules, and the expression that
 * uses them to out. */
void gg_int_multiples_dfa(strbuf *rules, strbuf *out, const char *name, int m);

#endif
