/* grammar_internal: what grammar_gen (JSON Schema to GBNF) shares with grammar_tools (tool calls
 * in a format's shape): the compiler's state and its entry points for one schema. */
#ifndef SOL_GRAMMAR_INTERNAL_H
#define SOL_GRAMMAR_INTERNAL_H

#include <jansson.h>

#include "err.h"
#include "strbuf.h"

enum { USE_STRING = 1, USE_NUMBER = 2, USE_INT = 4, USE_VALUE = 8, USE_WS = 16, USE_CHAR = 32 };

typedef struct gg {
    strbuf *out;
    sol_err *err;
    const json_t *root;
    int n_rules;
    unsigned used;
    char refs[64][96]; /* $ref targets already made into rules */
    int n_refs;
    int def_base; /* rule number of refs[0]: several schemas (tools) share one grammar */
} gg;

/* A rule for schema s named into name (at least 32 bytes), its own rules appended to c->out. */
int gg_schema_rule(gg *c, const json_t *s, const char *path, char *name, int depth);
/* The JSON building blocks the rules used, and root ::= root_rule. */
int gg_finish(gg *c, const char *root_rule);

#endif
