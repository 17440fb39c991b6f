/* fuzz_openai: arbitrary bytes as an OpenAI request body (the first byte picks completions, chat
 * or embeddings, and the tool format a pool would report) - parsed and validated, tools bound to
 * the format - must give a request or a 4xx/5xx error with a message naming the problem, never a
 * crash, hang or leak. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oai_tools.h"
#include "oai_render.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    static const oai_kind kinds[] = {OAI_COMPLETION, OAI_CHAT, OAI_EMBEDDING};
    static const char *const formats[] = {NULL, "hermes", "llama3-json", "mistral", ""};
    oai_kind kind = kinds[data[0] % 3];
    const char *fmt = formats[(data[0] / 3) % 5];
    oai_request *r = NULL;
    oai_error e;
    memset(&e, 0, sizeof e);
    if (oai_parse_request(kind, (const char *)data + 1, size - 1, &r, &e)) {
        if (r || e.status < 400 || e.status > 599 || !e.message[0]) abort();
        return 0;
    }
    if (!r) abort();
    memset(&e, 0, sizeof e);
    if (oai_tools_bind(&r->tools, fmt, "fuzz", "pool", &r->grammar, &r->grammar_field, &e) &&
        (e.status < 400 || !e.message[0]))
        abort();
    oai_request_free(r);
    return 0;
}
