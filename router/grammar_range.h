/* grammar_range: the decimal integers of a closed range as a GBNF expression, digit by digit
 * (JSON Schema's minimum/maximum on integers, and the ±(2^53 - 1) bound of unbounded ones). */
#ifndef SOL_GRAMMAR_RANGE_H
#define SOL_GRAMMAR_RANGE_H

#include <stdint.h>

#include "strbuf.h"

/* The largest integer a JSON client reads exactly (JavaScript's Number.MAX_SAFE_INTEGER). */
#define GG_INT_SAFE 9007199254740991LL

/* Appends "( ... )" matching exactly the JSON texts of the integers lo..hi: no leading zeros, a
 * "-" for negatives, never "-0". Needs -GG_INT_SAFE <= lo <= hi <= GG_INT_SAFE. */
void gg_int_range(strbuf *out, int64_t lo, int64_t hi);

#endif
