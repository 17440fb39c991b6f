/* grammar_gen: the request's output constraints as one GBNF grammar (common/gbnf.h) for the
 * worker: JSON Schema (response_format json_schema, vLLM's guided_json), any JSON object
 * (json_object), a regular expression (guided_regex) and a choice list (guided_choice).
 *
 * The JSON Schema subset (docs/api.md, "Structured outputs"): type (one or a list), properties,
 * required, additionalProperties (absent or false: no other keys; true or a schema: any more),
 * items, prefixItems, minItems, maxItems, enum, const, anyOf, oneOf (as anyOf), allOf with one
 * member, $ref into $defs/definitions, minLength, maxLength, pattern; annotations (title,
 * description, default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly) are
 * accepted and do not constrain. Any other keyword is refused, naming it and where it is.
 * Outputs are compact JSON (at most one space after ',' and ':'); properties come in the
 * schema's order; numbers are bounded in digits so a text always can end. */
#ifndef SOL_GRAMMAR_GEN_H
#define SOL_GRAMMAR_GEN_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "err.h"
#include "strbuf.h"

#define GG_MAX_DEPTH 32      /* nested schemas */
#define GG_MAX_BYTES 1000000 /* of generated grammar */

/* Each appends a GBNF grammar (root rule `root`) to out; 0, or -EINVAL with the reason (the
 * JSON path of an unsupported keyword: "schema.properties.a.format: unsupported keyword"). */
int gg_json_schema(const json_t *schema, strbuf *out, sol_err *err);
int gg_json_object(strbuf *out, sol_err *err);
int gg_regex(const char *re, strbuf *out, sol_err *err);
int gg_choice(const char *const *choices, size_t n, strbuf *out, sol_err *err);

#endif
