/* engine_collect: test helper shared by the engine test files — an engine event sink that
 * collects one request's tokens, text, finish reason and usage into an `engine_out`. */
#ifndef SOL_TEST_ENGINE_COLLECT_H
#define SOL_TEST_ENGINE_COLLECT_H

#include <string.h>

#include "engine.h"

#define ENGINE_OUT_MAX_TOKENS 96

typedef struct engine_out {
    int32_t tokens[ENGINE_OUT_MAX_TOKENS];
    int n;
    char text[2048];
    size_t text_len;
    engine_finish_reason finish;
    engine_usage usage;
    int done;
} engine_out;

/* engine_config.on_event for requests whose `user` pointer is an engine_out. */
static inline void engine_collect(void *ctx, const engine_event *ev) {
    (void)ctx;
    engine_out *o = ev->user;
    if (ev->kind == ENGINE_EV_TOKEN && o->n < ENGINE_OUT_MAX_TOKENS) o->tokens[o->n++] = ev->token;
    if (o->text_len + ev->text_len < sizeof o->text) {
        memcpy(o->text + o->text_len, ev->text, ev->text_len);
        o->text_len += ev->text_len;
    }
    if (ev->kind == ENGINE_EV_FINISH) {
        o->finish = ev->finish;
        o->usage = ev->usage;
        o->done = 1;
    }
}

#endif
