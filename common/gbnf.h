/* gbnf: grammars as llama.cpp's server writes them (GBNF), compiled into rules over bytes for
 * the grammar matcher (grammar.h): the one form every constraint (JSON schema, regex, choice)
 * reaches the worker in.
 *
 * Syntax: `name ::= alternatives` per rule (a rule ends at a newline outside parentheses);
 * alternatives separated by `|`; items: "literal" (escapes \n \r \t \\ \" \xHH \uHHHH), [class]
 * and [^class] (ranges, escapes; non-ASCII members only in positive classes of single characters
 * or ranges within one UTF-8 length), `.` (any character), rule names, ( groups ), and the
 * postfix operators * + ? {m} {m,} {m,n}; `#` comments. The start rule is `root`. Matching is
 * over UTF-8 bytes: negated classes and `.` accept exactly the well-formed multi-byte sequences.
 * Refused with the line and column: syntax errors, undefined rules, left recursion, repetition
 * counts above GBNF_MAX_REPEAT, grammars above GBNF_MAX_ELEMS elements. */
#ifndef SOL_GBNF_H
#define SOL_GBNF_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define GBNF_MAX_REPEAT 1000
#define GBNF_MAX_ELEMS 200000

enum { GE_END = 0, GE_SET = 1, GE_REF = 2 };

/* One element of an alternative: GE_SET (a byte set: sets[arg]), GE_REF (rule arg), or GE_END
 * (the alternative is complete). */
typedef struct gelem {
    uint32_t type : 2;
    uint32_t arg : 30;
} gelem;

typedef struct gbnf {
    gelem *elems; /* every alternative's elements, each alternative ended by GE_END */
    int n_elems;
    uint32_t *alt_start; /* first element of alternative i */
    int n_alts;
    uint32_t *rule_alt0, *rule_n_alts; /* rule r: alternatives rule_alt0[r] .. + n_alts */
    int n_rules;
    uint8_t (*sets)[32]; /* 256-bit byte sets */
    int n_sets;
    int root;
} gbnf;

/* Caller owns *out (gbnf_free). Errors name the line and column ("grammar line 3 column 7: ...").
 */
int gbnf_parse(const char *text, size_t len, gbnf **out, sol_err *err);
void gbnf_free(gbnf *g);

#endif
