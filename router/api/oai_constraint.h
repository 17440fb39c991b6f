/* oai_constraint: a request's output-constraint fields - response_format (json_object,
 * json_schema), llama.cpp's grammar, vLLM's guided_json / guided_regex / guided_choice /
 * guided_grammar - turned into the one GBNF grammar the worker enforces (grammar_gen.h), and
 * checked here so a bad schema or grammar is a 400 before any worker sees it. */
#ifndef SOL_OAI_CONSTRAINT_H
#define SOL_OAI_CONSTRAINT_H

#include <jansson.h>

#include "oai_error.h"

/* 1 when key is not a constraint field; else 0 with *grammar set (malloc'd GBNF; *field names
 * the request field it came from), or -EINVAL/-ENOMEM with err filled (two constraints in one
 * request, an unsupported schema keyword, a bad regex or grammar: the message says where). */
int oai_constraint_field(const char *key, const json_t *v, char **grammar, const char **field,
                         oai_error *err);

#endif
