/* grammar_tools: tool calls as a GBNF grammar in the shape of a model's tool format, forced or
 * lazy (free text until the format's opening). */
#ifndef SOL_GRAMMAR_TOOLS_H
#define SOL_GRAMMAR_TOOLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "err.h"
#include "strbuf.h"

/* How a format writes its calls: begin, then each call as open {"name": NAME, "KEY": ARGS}
 * close (args_key NULL: open name_pre NAME name_post ARGS close, the name outside the arguments,
 * as harmony writes it), calls joined by sep, then end. trigger: the prefix of begin + open that
 * opens the calls in free text. start (formats without a trigger: Llama 3's JSON): the answer is
 * calls when, after whitespace, it opens with a call or with this text (<|python_tag|>), and free
 * text otherwise. Neither: lazy grammars are refused. */
typedef struct gg_call_shape {
    const char *begin, *open, *args_key, *close, *sep, *end, *trigger, *start;
    const char *name_pre, *name_post;
} gg_call_shape;

/* One call (or, parallel, one or more) of the n functions in that shape, ARGS valid against
 * params[i] (NULL: any object). lazy (tool_choice auto): any text that does not contain the
 * shape's trigger, and where it does, the calls from there to the end, held as above; with a
 * start instead, calls or text that does not open like them. */
int gg_tool_calls(const char *const *names, const json_t *const *params, size_t n, bool parallel,
                  bool lazy, const gg_call_shape *shape, strbuf *out, sol_err *err);

#endif
