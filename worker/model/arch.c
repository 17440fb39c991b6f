/* arch: see arch.h. Facts from llama.cpp's model definitions: Qwen2 adds biases to q/k/v and
 * uses NEOX RoPE; Qwen3 drops the biases for a per-head RMSNorm of q and k (its head size may
 * differ from dim / heads: attention.key_length). Mistral files use the Llama graph. Gemma 3
 * scales embeddings by sqrt(dim), normalizes q and k per head, RMS-normalizes each block's output
 * before the residual add, uses a GELU (tanh) gate, and interleaves five sliding-window layers
 * (RoPE base 10000) with one global layer (rope.freq_base); its norm weights are stored with
 * Gemma's (1 + w) already folded in by the converter, so they are used as stored. Qwen3-MoE is
 * Qwen3's attention with a mixture of experts in every layer (no shared expert); Mixtral is the
 * llama graph with experts (expert_count in the file). Both route as llama.cpp's build_moe_ffn
 * does for them: softmax over every expert, top-k, the k weights renormalized. gpt-oss
 * (llama.cpp's openai-moe) adds biases to q/k/v, to the attention output and to its router and
 * experts, learned attention sinks, alternates sliding-window and global layers (both with the
 * file's YaRN RoPE), names its FFN norm post_attention_norm, picks the top k raw logits and
 * weighs them by a softmax over those k, and gates with its clamped SwiGLU. */
#include "arch.h"

#include <stdio.h>
#include <string.h>

static const model_arch k_archs[] = {
    {"llama", 0, 0, "ffn_norm"},
    {"mistral", 0, 0, "ffn_norm"},
    {"qwen2", ARCH_QKV_BIAS | ARCH_ROPE_NEOX, 0, "ffn_norm"},
    {"qwen3", ARCH_QK_NORM | ARCH_ROPE_NEOX, 0, "ffn_norm"},
    {"qwen3moe", ARCH_QK_NORM | ARCH_ROPE_NEOX | ARCH_MOE, 0, "ffn_norm"},
    {"gemma3",
     ARCH_QK_NORM | ARCH_ROPE_NEOX | ARCH_POST_NORMS | ARCH_GELU | ARCH_EMBD_SCALE | ARCH_SWA |
         ARCH_SOFTCAP | ARCH_Q_PRESCALE,
     6, "ffn_norm"},
    {"gpt-oss",
     ARCH_QKV_BIAS | ARCH_ROPE_NEOX | ARCH_SWA | ARCH_SWA_SAME_ROPE | ARCH_MOE | ARCH_ATTN_SINKS |
         ARCH_OUT_BIAS | ARCH_MOE_OAI,
     2, "post_attention_norm"},
};

const model_arch *model_arch_find(const char *name) {
    for (size_t i = 0; name && i < sizeof k_archs / sizeof k_archs[0]; i++)
        if (strcmp(k_archs[i].name, name) == 0) return &k_archs[i];
    return NULL;
}

const model_arch *model_arch_at(int i) {
    return i >= 0 && (size_t)i < sizeof k_archs / sizeof k_archs[0] ? &k_archs[i] : NULL;
}

void model_arch_names(char *out, size_t cap, const char *except) {
    size_t at = 0;
    if (cap) out[0] = 0;
    int k = 0;
    for (int i = 0; model_arch_at(i) && at < cap; i++) {
        const char *name = model_arch_at(i)->name;
        if (except && !strcmp(name, except)) continue;
        at += (size_t)snprintf(out + at, cap - at, "%s%s", k++ ? ", " : "", name);
    }
}
