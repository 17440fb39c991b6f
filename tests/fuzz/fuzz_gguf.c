/* fuzz_gguf: feeds arbitrary bytes to the GGUF parser; any accepted file must be safe to walk:
 * every key readable, every tensor's bytes inside the input. */
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

static volatile uint8_t g_sink;

static void walk_arr(const gguf_arr *a) {
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->type == GGUF_T_STR) g_sink ^= (uint8_t)a->strs[i][a->lens[i]];
        if (a->type == GGUF_T_ARR) walk_arr(&a->arrs[i]);
    }
    if (a->data && a->n) g_sink ^= ((const uint8_t *)a->data)[a->n * gguf_vtype_size(a->type) - 1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sol_err e = {0};
    gguf_file *g = gguf_open_memory(data, size, "fuzz.gguf", &e);
    if (!g) return 0;
    for (int i = 0; i < gguf_n_kv(g); i++) {
        const gguf_kv *kv = gguf_kv_at(g, i);
        uint32_t u;
        float f;
        const char *s;
        gguf_get_u32(g, kv->key, &u, &e);
        gguf_get_f32(g, kv->key, &f, &e);
        if (gguf_get_str(g, kv->key, &s, &e) == 0) g_sink ^= (uint8_t)s[0];
        if (kv->type == GGUF_T_ARR) walk_arr(&kv->arr);
    }
    for (int i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (t->nbytes)
            g_sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->nbytes - 1];
        gguf_expect_tensor(g, t->name, 2, 32, 32, &e);
        if (gguf_tensor_find(g, t->name) != t) __builtin_trap();
    }
    gguf_close(g);
    return 0;
}
