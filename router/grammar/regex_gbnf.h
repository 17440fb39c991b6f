/* regex_gbnf: regular expressions of the subset docs/api.md lists, and string literals, as GBNF
 * expressions (pattern, guided_regex and the string formats go through it). */
#ifndef SOL_REGEX_GBNF_H
#define SOL_REGEX_GBNF_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"
#include "strbuf.h"

/* A GBNF string literal of the n bytes of s. */
void gbnf_literal(strbuf *o, const char *s, size_t n);

/* "{m,n}", "{m,}" or "*" after an item: min..max repeats (max < 0: unbounded). */
void gbnf_repeat(strbuf *o, int min, int max);

/* The whole regex re as "( ... )" into b (the whole text must match: ^ and $ are implied).
 * json_string: inside a JSON string, so " and \ are written escaped and classes exclude them.
 * 0, or -EINVAL naming path and the offset in re. */
int regex_gbnf(strbuf *b, const char *re, bool json_string, const char *path, sol_err *err);

/* The same regex, its matches also min..max characters long (max < 0: no maximum): rules
 * NAME-Q-K (automaton state Q after K characters) appended to rules, and the expression that
 * uses them to b. -EINVAL, naming path, when no match has such a length or when the grammar
 * would pass 20,000 rules. */
int regex_gbnf_bounded(strbuf *rules, strbuf *b, const char *name, const char *re, bool json_string,
                       int min, int max, const char *path, sol_err *err);

#endif
