/* arch: the architectures the forward pass runs, each a small description (its GGUF name and the
 * few graph differences from Llama) instead of name checks scattered through the forward pass. */
#ifndef SOL_ARCH_H
#define SOL_ARCH_H

#include <stddef.h>

enum {
    ARCH_QKV_BIAS = 1u << 0,       /* blk.N.attn_{q,k,v}.bias added after the projections (qwen2) */
    ARCH_QK_NORM = 1u << 1,        /* blk.N.attn_{q,k}_norm.weight: per-head RMSNorm before RoPE */
    ARCH_ROPE_NEOX = 1u << 2,      /* RoPE rotates (x[i], x[i + d/2]) instead of (x[2i], x[2i+1]) */
    ARCH_POST_NORMS = 1u << 3,     /* blk.N.{attn,ffn}_post_norm.weight: RMSNorm of each block's
                                      output before it joins the residual stream */
    ARCH_GELU = 1u << 4,           /* FFN gate is GELU (tanh approximation), not SiLU */
    ARCH_EMBD_SCALE = 1u << 5,     /* embeddings multiplied by sqrt(dim) */
    ARCH_SWA = 1u << 6,            /* attention.sliding_window: interleaved local/global layers,
                                      rope.freq_base_swa for local ones (sliding_window_pattern) */
    ARCH_SOFTCAP = 1u << 7,        /* final_logit_softcapping: logits = c * tanh(logits / c) */
    ARCH_Q_PRESCALE = 1u << 8,     /* the query is multiplied by the attention scale after RoPE and
                                      attention runs with scale 1 (Gemma's graph, as llama.cpp builds
                                      it): where the scale is no power of two, rounding the scaled
                                      query (llama.cpp's F16 K.Q) differs from scaling the dot */
    ARCH_MOE = 1u << 9,            /* every FFN is a mixture of experts (expert_count required);
                                      an architecture without the flag may still have experts when
                                      the file says so (llama with experts: Mixtral) */
    ARCH_ATTN_SINKS = 1u << 10,    /* blk.N.attn_sinks.weight: one learned logit per query head
                                      joins every softmax with no value (gpt-oss) */
    ARCH_OUT_BIAS = 1u << 11,      /* blk.N.attn_output.bias added after the output projection */
    ARCH_MOE_OAI = 1u << 12,       /* gpt-oss's experts: biases on the router and on every expert's
                                      gate/up/down; the top k of the raw logits weighed by a
                                      softmax over those k (no renormalization); the gate
                                      x * sigmoid(1.702 x) with x <= 7 times (clamp(up, -7, 7) + 1) */
    ARCH_SWA_SAME_ROPE = 1u << 13, /* sliding-window layers use the global RoPE (its scaling too)
                                      with rope.freq_base_swa, default rope.freq_base (gpt-oss);
                                      without it they use base 10000 unscaled (Gemma 3) */
};

typedef struct model_arch {
    const char *name; /* general.architecture, also the prefix of its hyper-parameter keys */
    unsigned flags;
    int swa_pattern;      /* ARCH_SWA: every swa_pattern-th layer is global unless the file says */
    const char *ffn_norm; /* the FFN's pre-norm tensor, blk.N.<ffn_norm>.weight */
} model_arch;

/* The description for general.architecture = name, or NULL when it is not supported. */
const model_arch *model_arch_find(const char *name);

/* The i-th supported architecture (0..), NULL past the last. */
const model_arch *model_arch_at(int i);
/* "llama, mistral, qwen2, qwen3, qwen3moe, gemma3, gpt-oss": the table's names in order (but
 * `except`, when not NULL), for error messages and --help, into out (cap bytes). */
void model_arch_names(char *out, size_t cap, const char *except);

#endif
