/* engine_fixture: test helper shared by the engine test files — writes a synthetic model with
 * sol-mkmodel into a fresh temporary folder and loads it, with its tokenizer, on a CPU backend. */
#ifndef SOL_TEST_ENGINE_FIXTURE_H
#define SOL_TEST_ENGINE_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "model.h"
#include "tokenizer.h"

typedef struct engine_fixture {
    sol_backend *be;
    model *m;
    tokenizer *tok;
    char dir[64];
} engine_fixture;

/* sol-mkmodel -o DIR/m.gguf FLAGS, then the backend (1 thread), model and tokenizer. 0 or -1. */
static inline int engine_fixture_open(engine_fixture *f, const char *mkmodel_flags) {
    snprintf(f->dir, sizeof f->dir, "/tmp/sol_test_engine_XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    char cmd[768];
    snprintf(cmd, sizeof cmd, SOL_BUILD_DIR "/tools/sol-mkmodel -o %s/m.gguf %s >/dev/null 2>&1",
             f->dir, mkmodel_flags);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot run %s (build target sol-mkmodel first)\n", cmd);
        return -1;
    }
    sol_err e = {0};
    f->be = sol_backend_new("cpu", &(sol_backend_opts){.threads = 1}, &e);
    snprintf(cmd, sizeof cmd, "%s/m.gguf", f->dir);
    f->m = f->be ? model_load(cmd, 0, f->be, &e) : NULL;
    f->tok = f->m ? tokenizer_from_gguf(model_gguf(f->m), &e) : NULL;
    if (!f->tok) fprintf(stderr, "engine fixture: %s\n", e.msg);
    return f->tok ? 0 : -1;
}

static inline int engine_fixture_close(engine_fixture *f) {
    tokenizer_free(f->tok);
    model_free(f->m);
    sol_backend_free(f->be);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    return system(cmd) == 0 ? 0 : -1;
}

#endif
