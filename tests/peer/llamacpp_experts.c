/* llamacpp_experts: the experts llama.cpp's router chooses (the prebuilt library inside
 * node-llama-cpp, read through its graph callback: the tensors named ffn_moe_topk-LAYER) for one
 * prompt decoded as one batch with the last token's logits asked for (as llamacpp_ref.mjs
 * decodes it), as lines "LAYER POS E0 E1 ..." in rank order - what
 * `sol-generate --log-experts` writes, so a test compares the two with diff. Built by
 * tests/peer/build_quantize.sh next to llamacpp_quantize.
 *   llamacpp_experts MODEL.gguf TOKEN,TOKEN,...  */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

#ifndef PEER_BINS
#error "build with -DPEER_BINS=\"DIR\": the node-llama-cpp libraries (build_quantize.sh does)"
#endif

enum { MAX_TOKENS = 4096, MAX_K = 64 };

/* The callback: asks for the top-k tensors only, and prints each as it is computed. In the last
 * layer llama.cpp computes only the rows that give outputs (here the last token's): a tensor of
 * fewer rows than the prompt holds its last positions. */
static bool on_tensor(struct ggml_tensor *t, bool ask, void *user) {
    int n = *(const int *)user;
    const char *name = ggml_get_name(t);
    if (strncmp(name, "ffn_moe_topk-", 13) != 0) return !ask;
    if (ask) return true;
    int layer = atoi(name + 13), k = (int)t->ne[0];
    if (t->type != GGML_TYPE_I32 || k > MAX_K) {
        fprintf(stderr, "llamacpp_experts: %s is not k <= %d int32s\n", name, MAX_K);
        exit(1);
    }
    for (int64_t tok = 0; tok < t->ne[1]; tok++) {
        int32_t ids[MAX_K];
        ggml_backend_tensor_get(t, ids, (size_t)tok * t->nb[1], sizeof(int32_t) * (size_t)k);
        printf("%d %lld", layer, (long long)(n - t->ne[1] + tok));
        for (int j = 0; j < k; j++)
            printf(" %d", ids[j]);
        printf("\n");
    }
    return true;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: llamacpp_experts MODEL.gguf TOKEN,TOKEN,...\n");
        return 2;
    }
    static llama_token tokens[MAX_TOKENS];
    int n = 0;
    for (char *s = argv[2]; *s && n < MAX_TOKENS; n++) {
        tokens[n] = (llama_token)strtol(s, &s, 10);
        if (*s == ',') s++;
    }
    llama_backend_init();
    /* the CPU variants the node binding picks among (the best this CPU runs), or the folder of
     * the one the tests pin (SOL_PEER_BINS: tests/peer/compare.sh, peer_bins) */
    const char *bins = getenv("SOL_PEER_BINS");
    ggml_backend_load_all_from_path(bins && *bins ? bins : PEER_BINS);
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return fprintf(stderr, "llamacpp_experts: cannot load %s\n", argv[1]), 1;
    struct llama_context_params cp = llama_context_default_params();
    /* the context tests/peer/llamacpp_ref.mjs makes (its ids and logits are what Sol is held
     * to): no flash attention, a size rounded up to 256 */
    cp.n_ctx = (uint32_t)((n + 40 + 255) / 256 * 256);
    cp.n_batch = cp.n_ubatch = (uint32_t)n;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.cb_eval = on_tensor;
    cp.cb_eval_user_data = &n;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return fprintf(stderr, "llamacpp_experts: no context\n"), 1;
    /* the last token's logits only, as the reference run that Sol's ids and logits are held to */
    int rc = llama_decode(ctx, llama_batch_get_one(tokens, n));
    fflush(stdout);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    if (rc) fprintf(stderr, "llamacpp_experts: llama_decode returned %d\n", rc);
    return rc ? 1 : 0;
}
