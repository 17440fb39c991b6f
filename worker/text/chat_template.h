/* chat_template: turns {role, content} messages into the prompt text a chat model was tuned on,
 * for the common families, chosen from GGUF's tokenizer.chat_template or by name.
 *
 * We do not run Jinja: each family is written out by hand, and detection looks for markers that
 * only that family's template contains. The text contains special-token spellings (<|im_start|>,
 * </s>, ...) which the tokenizer must map to their special ids; the leading BOS is NOT written
 * (the tokenizer adds it when asked), later BOS/EOS inside the history are. Content is copied
 * verbatim (no trimming). See docs/sampling.md for the exact layout of each family. */
#ifndef SOL_CHAT_TEMPLATE_H
#define SOL_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef enum chat_template_family {
    CHAT_TEMPLATE_CHATML = 0, /* <|im_start|>role\n...<|im_end|>\n (Qwen2, many fine-tunes) */
    CHAT_TEMPLATE_LLAMA2,     /* [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] */
    CHAT_TEMPLATE_LLAMA3,     /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_TEMPLATE_MISTRAL,    /* [INST] ... [/INST] with no system block */
    CHAT_TEMPLATE_ZEPHYR,     /* <|role|>\n...</s>\n */
    CHAT_TEMPLATE_QWEN25,     /* ChatML with Qwen2.5's default system message */
    CHAT_TEMPLATE_LLAMA31,    /* Llama 3.1-3.3: a system block with the knowledge-date header */
    CHAT_TEMPLATE_GEMMA,      /* <start_of_turn>user|model\n...<end_of_turn>\n (Gemma 2, 3) */
    CHAT_TEMPLATE_LLAMA32,    /* Llama 3.2: as 3.1, with today's date (strftime_now) */
    CHAT_TEMPLATE_QWEN3,      /* ChatML with Qwen3's <think> handling of the latest turn */
    CHAT_TEMPLATE_MISTRAL_V3, /* Mistral v0.3: [INST] ...[/INST], [AVAILABLE_TOOLS], [TOOL_CALLS] */
    CHAT_TEMPLATE_HARMONY,    /* gpt-oss: <|start|>role<|channel|>..<|message|>..<|end|> */
    CHAT_TEMPLATE_COUNT
} chat_template_family;

/* What detection falls back to when the template is absent or unrecognized. */
#define CHAT_TEMPLATE_DEFAULT CHAT_TEMPLATE_CHATML

/* A function call the assistant made (OpenAI's tool_calls[i].function). */
typedef struct chat_tool_call {
    const char *id; /* the call's id (Mistral v0.3 prints it); NULL = none */
    const char *name;
    /* The arguments as JSON text in Python's json.dumps layout (", " and ": " separators, the
     * keys in their order), as Jinja's tojson prints an object; or, when arguments_is_string,
     * the raw text of a string argument (OpenAI sends arguments as a JSON-encoded string). */
    const char *arguments;
    bool arguments_is_string;
} chat_tool_call;

typedef struct chat_message {
    const char *role;    /* "system", "user", "assistant" or "tool" */
    const char *content; /* NULL is read as "" */
    /* assistant only: the calls it made, and (Qwen3, harmony) its reasoning; NULL = none given */
    const chat_tool_call *tool_calls;
    size_t n_tool_calls;
    const char *reasoning_content;
    const char *tool_call_id; /* tool only: the call this result answers (Mistral v0.3) */
    /* assistant only: the ids content was generated as (router.routing.reply_tokens_mib); the
     * templates ignore them, the engine tokenizes the content as these when they decode to it */
    const int32_t *content_ids;
    size_t n_content_ids;
} chat_message;

/* The functions offered to the model, each as JSON text in Python's json.dumps layout (what the
 * template's `tool | tojson` prints). */
typedef struct chat_tools {
    const char *const *json;
    size_t n;
} chat_tools;

/* Family whose markers appear in the Jinja source; NULL, "" or unknown -> CHAT_TEMPLATE_DEFAULT. */
chat_template_family chat_template_detect(const char *jinja_source);

/* Like chat_template_detect, but says whether a family was actually recognized. */
bool chat_template_detect_known(const char *jinja_source, chat_template_family *out);

/* "chatml", "llama2", "llama3", "mistral", "zephyr", "qwen2.5", "llama3.1", "gemma", "llama3.2",
 * "qwen3", "mistral-v3", "harmony" (also
 * "qwen2", "llama-2", "llama-3", "gemma2", "gemma3", "gpt-oss"; case-insensitive). Unknown ->
 * -EINVAL listing the accepted names. */
int chat_template_from_name(const char *name, chat_template_family *out, sol_err *err);

/* The canonical name (the one Register.chat_template carries); "?" for out-of-range values. */
const char *chat_template_name(chat_template_family f);

/* Render msgs[0, n) and, when add_generation_prompt, the assistant header that makes the model
 * answer. On success *out is a malloc'd NUL-terminated string the caller frees, and *out_len (if
 * not NULL) its length. Errors: no messages, NULL/unknown role (named, with its index), bad
 * family, out of memory. */
int chat_template_apply(chat_template_family f, const chat_message *msgs, size_t n,
                        bool add_generation_prompt, char **out, size_t *out_len, sol_err *err);

/* The same with tools: the families that define a tool format render them, each as its own
 * template does - qwen2.5, qwen3: a "# Tools" system block, calls as <tool_call> JSON, results
 * as <tool_response> user turns; llama3.1, llama3.2: the functions in the first user turn, a
 * call as {"name", "parameters"} JSON, results as ipython turns; mistral-v3: [AVAILABLE_TOOLS]
 * before the last user turn, [TOOL_CALLS] [...] and [TOOL_RESULTS]; harmony: a TypeScript
 * namespace in the developer message, calls on the commentary channel to functions.NAME, results
 * from functions.NAME (chat_harmony.h). Any other family given
 * tools, tool_calls or a tool message fails with -ENOTSUP naming the family. tools may be NULL. */
int chat_template_apply_tools(chat_template_family f, const chat_message *msgs, size_t n,
                              const chat_tools *tools, bool add_generation_prompt, char **out,
                              size_t *out_len, sol_err *err);

/* Whether the family has a tool-call format (qwen2.5, qwen3, llama3.1, llama3.2, mistral-v3,
 * harmony). */
bool chat_template_supports_tools(chat_template_family f);

/* The shape of the calls the family's models write, as the router parses them: "hermes"
 * (<tool_call> blocks), "llama3-json" ({"name", "parameters"} objects), "mistral"
 * ([TOOL_CALLS] [...]) or "harmony" (channels: the router also reads reasoning out of it, tools
 * or not); NULL for a family without one. */
const char *chat_template_tool_format(chat_template_family f);

#endif
