/* chat_harmony: OpenAI's harmony format, the prompt gpt-oss was tuned on - a system message with
 * the date, reasoning level and channels, the caller's system message and tools as a developer
 * message (the tools as a TypeScript namespace), the conversation's turns on their channels. */
#ifndef SOL_CHAT_HARMONY_H
#define SOL_CHAT_HARMONY_H

#include <stdbool.h>
#include <stddef.h>

#include "chat_template.h"
#include "err.h"
#include "strbuf.h"

/* Appends the harmony rendering of m[0, n) (the first message, when it is the system's, becomes
 * the developer's instructions) and, when add_generation_prompt, "<|start|>assistant", to b.
 * today: "YYYY-MM-DD" for the system message's date line. An assistant message's tool calls go
 * to the commentary channel, addressed to functions.NAME; its reasoning_content to the analysis
 * channel when it comes after the last user message (earlier turns' reasoning is dropped, as the
 * gpt-oss template drops it); a tool message answers the call it names (tool_call_id) or the
 * latest one. Errors: a tool message with no call before it, a tool whose JSON is not an object
 * with a function name. */
int chat_harmony_render(const chat_message *m, size_t n, const chat_tools *tools,
                        bool add_generation_prompt, const char *today, strbuf *b, sol_err *err);

#endif
