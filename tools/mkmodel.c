/* sol-mkmodel: writes a synthetic GGUF of a supported architecture (llama, qwen2, qwen3, qwen3moe,
 * gemma3, gpt-oss, llama optionally a mixture of experts; random but well-scaled weights, a
 * synthetic SentencePiece vocab) that llama.cpp and Sol both load, for tests and benchmarks.
 * Weights come from a counter-based RNG keyed by (seed, tensor name, element index), so every
 * tensor is independent of generation order, and are quantized row by row while writing. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "err.h"
#include "gguf.h"
#include "arch.h"
#include "gguf_writer.h"
#include "hash.h"
#include "quantize.h"
#include "args.h"
#include "vocab_gen.h"

#define MAX_TENSORS 4096
#define PROGRESS_MIN_BYTES (64u << 20) /* files smaller than this are written silently */

typedef struct {
    const char *name;
    int dim, layers, heads, kv_heads, ffn, vocab, ctx;
    /* Default --depth-decay. 0.7 makes a draft of the first quarter to third of `small`'s layers
     * reach a greedy acceptance like a trained draft's (docs/models.md); tiny keeps 1 (every
     * layer alike) so the test models the peer and engine tests use stay as they were. */
    float depth_decay;
} shape;

static const shape k_presets[] = {
    {"tiny", 64, 2, 4, 2, 192, 512, 256, 1.0f},
    {"small", 768, 12, 12, 4, 2048, 32000, 2048, 0.7f},
    {"1b", 2048, 22, 32, 4, 5632, 32000, 2048, 0.7f},
};

/* W_NORM: 1 + std z; W_GAIN: a norm weight of scale std (std (1 + z / 20)); others: std z. */
typedef enum { W_NORM, W_GAIN, W_BIAS, W_EMBD, W_MATRIX, W_ROUTER } weight_kind;

typedef struct {
    char name[64];
    int n_dims;
    int64_t ne[3];
    sol_dtype type;
    weight_kind kind;
    float std;
    uint64_t key; /* RNG stream of this tensor */
} tensor_spec;

enum { MAX_CONTROL = 8 }; /* --control-token */

typedef struct {
    shape s;
    sol_dtype type;
    uint64_t seed;
    float rope_base;
    float depth_decay; /* residual outputs of layer l scaled by depth_decay^l */
    int tied;
    const model_arch *arch;    /* --arch: the key prefix and the extra tensors */
    int head_dim;              /* --head-dim, else dim / heads */
    int sliding_window;        /* gemma3: --sliding-window (0 = every layer global) */
    int swa_pattern;           /* gemma3: --swa-pattern P (-1 = not written: the default 6) */
    float softcap;             /* gemma3: --softcap, 0 = not written */
    int pooling_type;          /* --pooling-type: <arch>.pooling_type, -1 = not written */
    int experts, experts_used; /* --experts E --experts-used K: a mixture of experts */
    int expert_ffn;            /* qwen3moe: --expert-ffn, each expert's width (else --ffn) */
    float yarn_factor;         /* --yarn F,N: rope.scaling.type yarn, factor F, ... */
    int yarn_orig_ctx;         /* ... original_context_length N; 0 = not written */
    const char *out;
    tensor_spec *specs;
    int n_specs;
    float *row; /* one row of floats, reused by the fill callback */
    int last_pct;
    const char *draft_of;   /* --draft-of TARGET.gguf */
    const char *vocab_from; /* --vocab-from VOCAB.gguf: its tokenizer.* keys, its vocab size */
    const char *control[MAX_CONTROL]; /* --control-token: the vocabulary's last entries */
    int n_control;
    const char *user[MAX_CONTROL]; /* --user-token ID=TEXT: the vocab-from token's new text */
    int user_id[MAX_CONTROL], n_user;
    int draft_layers, type_given;
} model;

/* FNV-1a over the name from an offset basis that is not FNV's (a digit short of it: a slip kept on
 * purpose, since every seed's weights, and the seeds tests chose for them, depend on it). */
static uint64_t hash64(const char *s) {
    return sol_fnv64_str(1469598103934665603ull, s);
}

/* Approximately standard normal: the sum of four 16-bit uniforms, centred and scaled to unit
 * variance (Irwin-Hall). Symmetric around zero, so quantized weights stay zero-mean. */
static float gauss(uint64_t key, uint64_t i) {
    uint64_t r = sol_splitmix64(key + i);
    float s = (float)((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48));
    return (s / 65536.0f - 2.0f + 2.0f / 65536.0f) * 1.7320508f;
}

static int fill_rows(void *ctx, int index, int64_t row0, int64_t n_rows, void *dst, sol_err *e) {
    model *m = ctx;
    const tensor_spec *t = &m->specs[index];
    int64_t ne0 = t->ne[0];
    size_t row_bytes = sol_dtype_row_bytes(t->type, ne0);
    for (int64_t r = 0; r < n_rows; r++) {
        uint64_t base = (uint64_t)(row0 + r) * (uint64_t)ne0;
        for (int64_t c = 0; c < ne0; c++) {
            float z = gauss(t->key, base + (uint64_t)c);
            m->row[c] = t->kind == W_NORM   ? 1.0f + t->std * z
                        : t->kind == W_GAIN ? t->std * (1.0f + 0.05f * z)
                                            : t->std * z;
        }
        if (sol_quantize_row(t->type, m->row, (uint8_t *)dst + (size_t)r * row_bytes, ne0))
            return sol_err_set(e, -EINVAL, "cannot quantize to %s", sol_dtype_name(t->type));
    }
    return 0;
}

static void progress(void *ctx, uint64_t done, uint64_t total, int tensors_done, int n_tensors) {
    model *m = ctx;
    if (total < PROGRESS_MIN_BYTES) return;
    int pct = (int)(done * 100 / total);
    if (pct / 5 == m->last_pct / 5 && tensors_done != n_tensors) return;
    m->last_pct = pct;
    fprintf(stderr, "\rsol-mkmodel: %3d%%  %d/%d tensors  %" PRIu64 "/%" PRIu64 " MiB", pct,
            tensors_done, n_tensors, done >> 20, total >> 20);
    if (tensors_done == n_tensors && done >= total) fputc('\n', stderr);
}

static void spec(model *m, const char *name, int n_dims, int64_t ne0, int64_t ne1, sol_dtype type,
                 weight_kind kind, float std) {
    tensor_spec *t = &m->specs[m->n_specs++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = 1;
    /* the router stays F32, as llama.cpp's converter and quantizer keep it */
    t->type =
        kind == W_NORM || kind == W_GAIN || kind == W_BIAS || kind == W_ROUTER ? SOL_DT_F32 : type;
    t->kind = kind;
    t->std = std;
    t->key = sol_splitmix64(m->seed ^ hash64(name));
}

/* A mixture of experts' FFN of layer l: the router (F32, scaled so its logits spread about one
 * unit and the choice varies by token) and the experts' 3-D [cols, rows, experts] tensors. */
static void plan_experts(model *m, int l, float out_scale) {
    int64_t dim = m->s.dim, f = m->expert_ffn, ne = m->experts;
    int oai = (m->arch->flags & ARCH_MOE_OAI) != 0;
    /* gpt-oss's gate clamps at 7: wider inputs so some of its values reach the clamp */
    float in_std = (oai ? 2.5f : 1.0f) / sqrtf((float)dim);
    char name[64];
#define BLK(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
    spec(m, BLK("ffn_gate_inp.weight"), 2, dim, ne, m->type, W_ROUTER, 1.0f / sqrtf((float)dim));
    if (oai) { /* biases: the router's [E], each expert's gate/up [f, E] and down [dim, E] */
        spec(m, BLK("ffn_gate_inp.bias"), 1, ne, 1, m->type, W_BIAS, 0.5f);
        spec(m, BLK("ffn_gate_exps.bias"), 2, f, ne, m->type, W_BIAS, 0.1f);
        spec(m, BLK("ffn_up_exps.bias"), 2, f, ne, m->type, W_BIAS, 0.1f);
        spec(m, BLK("ffn_down_exps.bias"), 2, dim, ne, m->type, W_BIAS, 0.02f * out_scale);
    }
    spec(m, BLK("ffn_gate_exps.weight"), 3, dim, f, m->type, W_MATRIX, in_std);
    m->specs[m->n_specs - 1].ne[2] = ne;
    spec(m, BLK("ffn_up_exps.weight"), 3, dim, f, m->type, W_MATRIX, in_std);
    m->specs[m->n_specs - 1].ne[2] = ne;
    spec(m, BLK("ffn_down_exps.weight"), 3, f, dim, m->type, W_MATRIX,
         1.0f / sqrtf((float)f) * out_scale);
    m->specs[m->n_specs - 1].ne[2] = ne;
#undef BLK
}

/* Scales follow trained models: inputs ~ 1/sqrt(fan_in), residual outputs further divided by
 * sqrt(2 * layers) and by depth_decay^l for layer l (trained models refine the residual stream
 * less and less with depth, which is what lets a model's first layers draft for it), norms
 * near 1. With tied embeddings the table doubles as the output head, so
 * it is kept small enough that logits have a spread of a few units, not tens. */
static void plan_tensors(model *m) {
    const shape *s = &m->s;
    int64_t dim = s->dim, hd = m->head_dim, q_dim = hd * s->heads, kv_dim = hd * s->kv_heads;
    int64_t ffn = s->ffn;
    float in_std = 1.0f / sqrtf((float)dim), depth = sqrtf(2.0f * (float)s->layers);
    char name[64];
    /* Gemma multiplies embeddings by sqrt(dim): its table is small so the stream starts near 1. */
    int gemma = (m->arch->flags & ARCH_EMBD_SCALE) != 0;
    spec(m, "token_embd.weight", 2, dim, s->vocab, m->type, W_EMBD,
         m->tied ? 2.0f * in_std
         : gemma ? in_std
                 : 1.0f);
    float decay = 1.0f;
    for (int l = 0; l < s->layers; l++, decay *= m->depth_decay) {
#define BLK(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
        spec(m, BLK("attn_norm.weight"), 1, dim, 1, m->type, W_NORM, 0.05f);
        spec(m, BLK("attn_q.weight"), 2, dim, q_dim, m->type, W_MATRIX, in_std);
        spec(m, BLK("attn_k.weight"), 2, dim, kv_dim, m->type, W_MATRIX, in_std);
        spec(m, BLK("attn_v.weight"), 2, dim, kv_dim, m->type, W_MATRIX, in_std);
        if (m->arch->flags & ARCH_QKV_BIAS) { /* biases are F32 vectors, like norms */
            spec(m, BLK("attn_q.bias"), 1, q_dim, 1, m->type, W_BIAS, 0.02f);
            spec(m, BLK("attn_k.bias"), 1, kv_dim, 1, m->type, W_BIAS, 0.02f);
            spec(m, BLK("attn_v.bias"), 1, kv_dim, 1, m->type, W_BIAS, 0.02f);
        }
        if (m->arch->flags & ARCH_QK_NORM) {
            spec(m, BLK("attn_q_norm.weight"), 1, hd, 1, m->type, W_NORM, 0.05f);
            spec(m, BLK("attn_k_norm.weight"), 1, hd, 1, m->type, W_NORM, 0.05f);
        }
        spec(m, BLK("attn_output.weight"), 2, q_dim, dim, m->type, W_MATRIX,
             1.0f / sqrtf((float)q_dim) / depth * decay);
        if (m->arch->flags & ARCH_OUT_BIAS)
            spec(m, BLK("attn_output.bias"), 1, dim, 1, m->type, W_BIAS, 0.02f * decay / depth);
        /* sinks near the scores' own scale, so they take a visible share of each softmax */
        if (m->arch->flags & ARCH_ATTN_SINKS)
            spec(m, BLK("attn_sinks.weight"), 1, s->heads, 1, m->type, W_BIAS, 1.0f);
        /* A post-norm sets the block output's scale itself: the residual scale moves there. */
        if (m->arch->flags & ARCH_POST_NORMS)
            spec(m, BLK("post_attention_norm.weight"), 1, dim, 1, m->type, W_GAIN, decay / depth);
        char norm[64];
        snprintf(norm, sizeof norm, "blk.%d.%s.weight", l, m->arch->ffn_norm);
        spec(m, norm, 1, dim, 1, m->type, W_NORM, 0.05f);
        if (m->experts)
            plan_experts(m, l, decay / depth);
        else {
            spec(m, BLK("ffn_gate.weight"), 2, dim, ffn, m->type, W_MATRIX, in_std);
            spec(m, BLK("ffn_up.weight"), 2, dim, ffn, m->type, W_MATRIX, in_std);
            spec(m, BLK("ffn_down.weight"), 2, ffn, dim, m->type, W_MATRIX,
                 1.0f / sqrtf((float)ffn) / depth * decay);
        }
        if (m->arch->flags & ARCH_POST_NORMS)
            spec(m, BLK("post_ffw_norm.weight"), 1, dim, 1, m->type, W_GAIN, decay / depth);
#undef BLK
    }
    spec(m, "output_norm.weight", 1, dim, 1, m->type, W_NORM, 0.05f);
    if (!m->tied) spec(m, "output.weight", 2, dim, s->vocab, m->type, W_MATRIX, 2.0f * in_std);
}

static const char k_chat_template[] =
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ '[INST] <<SYS>>\\n' + message['content'] + "
    "'\\n<</SYS>>\\n\\n' }}"
    "{% elif message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + ' ' + eos_token }}"
    "{% endif %}{% endfor %}";

/* "<arch>.<suffix>" */
static const char *akey(const model *m, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", m->arch->name, suffix);
    return buf;
}

static int add_u32(gguf_writer *w, const model *m, const char *suffix, int v, sol_err *e) {
    char k[96];
    return gguf_writer_add_u32(w, akey(m, suffix, k, sizeof k), (uint32_t)v, e);
}

static int add_hparams(gguf_writer *w, const model *m, sol_err *e) {
    const shape *s = &m->s;
    int llama = !strcmp(m->arch->name, "llama");
    char name[96], k[96];
    snprintf(name, sizeof name, "sol-synthetic-%s%s%s-%s", llama ? "" : m->arch->name,
             llama ? "" : "-", s->name, sol_dtype_name(m->type));
    int rc = gguf_writer_add_str(w, "general.architecture", m->arch->name, e);
    if (!rc) rc = gguf_writer_add_str(w, "general.name", name, e);
    if (!rc) rc = gguf_writer_add_u32(w, "general.file_type", quant_file_type(m->type), e);
    if (!rc) rc = gguf_writer_add_u32(w, "general.quantization_version", 2, e);
    if (!rc) rc = add_u32(w, m, "context_length", s->ctx, e);
    if (!rc) rc = add_u32(w, m, "embedding_length", s->dim, e);
    if (!rc) rc = add_u32(w, m, "block_count", s->layers, e);
    if (!rc) rc = add_u32(w, m, "feed_forward_length", s->ffn, e);
    if (!rc) rc = add_u32(w, m, "attention.head_count", s->heads, e);
    if (!rc) rc = add_u32(w, m, "attention.head_count_kv", s->kv_heads, e);
    /* The head size is written where it is not dim / heads, or where the family always writes
     * it (Qwen3's converter does). */
    if (!rc && (m->head_dim * s->heads != s->dim || (m->arch->flags & ARCH_QK_NORM))) {
        rc = add_u32(w, m, "attention.key_length", m->head_dim, e);
        if (!rc) rc = add_u32(w, m, "attention.value_length", m->head_dim, e);
    }
    if (!rc) rc = add_u32(w, m, "rope.dimension_count", m->head_dim, e);
    if (!rc) rc = gguf_writer_add_f32(w, akey(m, "rope.freq_base", k, sizeof k), m->rope_base, e);
    if (!rc)
        rc = gguf_writer_add_f32(w, akey(m, "attention.layer_norm_rms_epsilon", k, sizeof k), 1e-5f,
                                 e);
    if (!rc) rc = add_u32(w, m, "vocab_size", s->vocab, e);
    if (!rc && m->sliding_window) {
        rc = add_u32(w, m, "attention.sliding_window", m->sliding_window, e);
        /* gemma3's local base; gpt-oss's local layers share the global RoPE */
        if (!rc && !(m->arch->flags & ARCH_SWA_SAME_ROPE))
            rc = gguf_writer_add_f32(w, akey(m, "rope.freq_base_swa", k, sizeof k), 10000.0f, e);
        if (!rc && m->swa_pattern >= 0)
            rc = add_u32(w, m, "attention.sliding_window_pattern", m->swa_pattern, e);
    }
    if (!rc && m->softcap > 0)
        rc = gguf_writer_add_f32(w, akey(m, "final_logit_softcapping", k, sizeof k), m->softcap, e);
    if (!rc && m->pooling_type >= 0) rc = add_u32(w, m, "pooling_type", m->pooling_type, e);
    if (!rc && m->yarn_orig_ctx) {
        rc = gguf_writer_add_str(w, akey(m, "rope.scaling.type", k, sizeof k), "yarn", e);
        if (!rc)
            rc = gguf_writer_add_f32(w, akey(m, "rope.scaling.factor", k, sizeof k), m->yarn_factor,
                                     e);
        if (!rc) rc = add_u32(w, m, "rope.scaling.original_context_length", m->yarn_orig_ctx, e);
    }
    if (!rc && m->experts) {
        rc = add_u32(w, m, "expert_count", m->experts, e);
        if (!rc) rc = add_u32(w, m, "expert_used_count", m->experts_used, e);
        /* Qwen3-MoE's converter writes the expert width; Mixtral's experts are the FFN width */
        if (!rc && (m->arch->flags & ARCH_MOE))
            rc = add_u32(w, m, "expert_feed_forward_length", m->expert_ffn, e);
    }
    return rc;
}

/* --vocab-from: every tokenizer.* key of that GGUF (a real vocabulary, merges, special ids and
 * its chat template if it has one, else Sol's default), and the model's vocab size is its
 * token count. */
static int open_vocab(model *m, gguf_file **out, sol_err *e) {
    gguf_file *g = gguf_open(m->vocab_from, 0, e);
    if (!g) return e->code ? e->code : -EINVAL;
    const gguf_arr *tokens;
    int rc = gguf_get_arr(g, "tokenizer.ggml.tokens", -1, &tokens, e);
    if (!rc && (tokens->n < 16 || tokens->n > 1u << 20))
        rc = sol_err_set(e, -EINVAL, "%s: %llu tokens: not a vocabulary to build a model on",
                         m->vocab_from, (unsigned long long)tokens->n);
    if (rc) return gguf_close(g), rc;
    m->s.vocab = (int)tokens->n;
    *out = g;
    return 0;
}

/* The tokens and their types with --user-token's renames (user-defined tokens, as Qwen2.5's
 * <tool_call> stands where Qwen2's vocabulary has padding). */
static int renamed_tokens(gguf_writer *w, const model *m, const gguf_file *g, sol_err *e) {
    const gguf_arr *tok, *ty;
    int rc = gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_T_STR, &tok, e);
    if (!rc) rc = gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_T_I32, &ty, e);
    if (rc) return rc;
    const char **strs = malloc(tok->n * sizeof *strs);
    int32_t *types = malloc(tok->n * sizeof *types);
    if (!strs || !types) rc = sol_err_set(e, -ENOMEM, "out of memory");
    for (uint64_t i = 0; !rc && i < tok->n; i++)
        strs[i] = tok->strs[i], types[i] = ((const int32_t *)ty->data)[i];
    for (int k = 0; !rc && k < m->n_user; k++) {
        if ((uint64_t)m->user_id[k] >= tok->n)
            rc = sol_err_set(e, -EINVAL, "--user-token %d: the vocabulary has %llu tokens",
                             m->user_id[k], (unsigned long long)tok->n);
        else
            strs[m->user_id[k]] = m->user[k], types[m->user_id[k]] = VOCAB_TOK_USER_DEFINED;
    }
    if (!rc) rc = gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", strs, tok->n, e);
    if (!rc) rc = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_T_I32, types, tok->n, e);
    free(strs), free(types);
    return rc;
}

static int copy_tokenizer(gguf_writer *w, const model *m, const gguf_file *g, sol_err *e) {
    int rc = m->n_user ? renamed_tokens(w, m, g, e) : 0;
    for (int i = 0; !rc && i < gguf_n_kv(g); i++) {
        const char *key = gguf_kv_at(g, i)->key;
        if (m->n_user &&
            (!strcmp(key, "tokenizer.ggml.tokens") || !strcmp(key, "tokenizer.ggml.token_type")))
            continue;
        if (!strncmp(key, "tokenizer.", 10)) rc = quant_copy_kv(w, gguf_kv_at(g, i), e);
    }
    if (!rc && gguf_find_key(g, "tokenizer.chat_template") < 0)
        rc = gguf_writer_add_str(w, "tokenizer.chat_template", k_chat_template, e);
    return rc;
}

static int add_tokenizer(gguf_writer *w, const model *m, sol_err *e) {
    vocab_gen *v = vocab_gen_new((uint32_t)m->s.vocab, e);
    if (!v) return e->code ? e->code : -ENOMEM;
    int rc = 0;
    for (int i = 0; i < m->n_control && !rc; i++) { /* the last entries: no merge needs them */
        uint32_t at = v->n - (uint32_t)m->n_control + (uint32_t)i;
        char *dup = vocab_gen_find(v, m->control[i]) >= 0 ? NULL : strdup(m->control[i]);
        if (!dup)
            rc = sol_err_set(e, -EINVAL, "--control-token '%s': already a piece of the vocabulary",
                             m->control[i]);
        else
            free(v->pieces[at]), v->pieces[at] = dup, v->scores[at] = 0.0f,
                                 v->types[at] = VOCAB_TOK_CONTROL;
    }
    if (!rc) rc = gguf_writer_add_str(w, "tokenizer.ggml.model", "llama", e);
    if (!rc)
        rc = gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)v->pieces,
                                     v->n, e);
    if (!rc) rc = gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_T_F32, v->scores, v->n, e);
    if (!rc)
        rc = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_T_I32, v->types, v->n, e);
    vocab_gen_free(v);
    if (!rc) rc = gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", VOCAB_GEN_BOS, e);
    if (!rc) rc = gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", VOCAB_GEN_EOS, e);
    if (!rc) rc = gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", VOCAB_GEN_UNK, e);
    if (!rc) rc = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", 1, e);
    if (!rc) rc = gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", 0, e);
    if (!rc) rc = gguf_writer_add_str(w, "tokenizer.chat_template", k_chat_template, e);
    return rc;
}

static int write_model(model *m, sol_err *e) {
    gguf_writer *w = gguf_writer_new();
    m->specs = calloc(MAX_TENSORS, sizeof *m->specs);
    int64_t widest = m->s.dim > m->s.ffn ? m->s.dim : m->s.ffn;
    if ((int64_t)m->head_dim * m->s.heads > widest) widest = (int64_t)m->head_dim * m->s.heads;
    if (m->expert_ffn > widest) widest = m->expert_ffn; /* a row of ffn_down_exps, or a bias's */
    if (m->experts > widest) widest = m->experts;
    m->row = malloc((size_t)widest * sizeof(float));
    int rc = (!w || !m->specs || !m->row) ? sol_err_set(e, -ENOMEM, "out of memory") : 0;
    gguf_file *vocab = NULL;
    if (!rc && m->vocab_from) rc = open_vocab(m, &vocab, e);
    if (!rc) rc = add_hparams(w, m, e);
    if (!rc) rc = vocab ? copy_tokenizer(w, m, vocab, e) : add_tokenizer(w, m, e);
    if (!rc) plan_tensors(m);
    for (int i = 0; i < m->n_specs && !rc; i++) {
        const tensor_spec *t = &m->specs[i];
        rc = gguf_writer_add_tensor_fill(w, t->name, t->n_dims, t->ne, t->type, fill_rows, m, e);
    }
    if (!rc) {
        gguf_writer_set_progress(w, progress, m);
        rc = gguf_writer_write_file(w, m->out, e);
    }
    if (!rc) {
        uint64_t params = 0;
        for (int i = 0; i < m->n_specs; i++)
            params += (uint64_t)(m->specs[i].ne[0] * m->specs[i].ne[1] * m->specs[i].ne[2]);
        fprintf(stderr, "sol-mkmodel: wrote %s: %s, %" PRIu64 " parameters, %d tensors, %.1f MiB\n",
                m->out, sol_dtype_name(m->type), params, m->n_specs,
                (double)gguf_writer_data_bytes(w) / (1 << 20));
    }
    gguf_writer_free(w);
    if (vocab) gguf_close(vocab);
    free(m->specs);
    free(m->row);
    return rc;
}

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: sol-mkmodel -o OUT.gguf [--preset tiny|small|1b] [--type f32|f16|bf16|q8_0|q4_0]\n"
        "                   [--dim N] [--layers N] [--heads N] [--kv-heads N] [--ffn N]\n"
        "                   [--vocab N] [--ctx N] [--seed N] [--rope-base F] [--tied]\n"
        "                   [--depth-decay F] [--arch llama|qwen2|qwen3|qwen3moe|gemma3|gpt-oss]\n"
        "                   [--head-dim N] [--experts E [--experts-used K] [--expert-ffn N]]\n"
        "                   [--yarn FACTOR,ORIG_CTX]\n"
        "                   [--sliding-window N [--swa-pattern P]] [--softcap F]\n"
        "                   [--pooling-type N] [--vocab-from VOCAB.gguf [--user-token "
        "ID=TEXT]...]\n"
        "                   [--control-token T]...\n"
        "       sol-mkmodel --draft-of TARGET.gguf -o DRAFT.gguf [--layers N] [--type T]\n"
        "With --draft-of, writes a draft model for speculative decoding: the target's first N\n"
        "layers (default a quarter, at least 1) with its embeddings, final norm, output head and\n"
        "tokenizer (same vocabulary), converted to --type (default: the target's types).\n"
        "Writes a synthetic GGUF with random, well-scaled weights (deterministic per seed).\n"
        "--arch writes that architecture's keys and tensors (qwen2: q/k/v biases; qwen3: q/k\n"
        "norms, head size in attention.key_length); --head-dim sets a head size other than\n"
        "dim / heads (as Qwen3's). gemma3: embeddings scaled by sqrt(dim), GELU FFN, q/k norms\n"
        "and post-norms; --sliding-window N makes layers local with a window of N tokens (every\n"
        "P-th layer global, P = --swa-pattern, default 6; 0 = all local), --softcap F writes\n"
        "final_logit_softcapping.\n"
        "gpt-oss: q/k/v and output biases, attention sinks, every other layer local\n"
        "(--sliding-window, default 128), experts with biases on their router, gate, up and down\n"
        "(always a mixture, as qwen3moe).\n"
        "--experts E makes every FFN a mixture of E experts (llama: Mixtral's layout, experts\n"
        "--ffn wide; qwen3moe always has them, default 8, --expert-ffn wide, default --ffn), each\n"
        "token routed to --experts-used K of them (default 2) by an F32 router ffn_gate_inp.\n"
        "--yarn F,N writes YaRN RoPE scaling (rope.scaling.type yarn, factor F, original\n"
        "context N), as Qwen's long-context files and gpt-oss carry it.\n"
        "--vocab-from VOCAB.gguf takes that file's tokenizer (every tokenizer.* key: a real\n"
        "vocabulary such as llama.cpp's models/ggml-vocab-qwen2.gguf) and its size as --vocab.\n"
        "--pooling-type N writes <arch>.pooling_type as llama.cpp numbers it (1 mean, 2 cls,\n"
        "3 last): what an embedding model's GGUF says about pooling.\n"
        "--control-token T (up to 8) makes the generated vocabulary's last entries control\n"
        "tokens with these texts, as a real one has (Mistral v0.3's [TOOL_CALLS]).\n"
        "--user-token ID=TEXT (up to 8, with --vocab-from) makes token ID a user-defined token\n"
        "with that text (Qwen2.5's <tool_call> is 151657, padding in Qwen2's vocabulary).\n"
        "presets: tiny  dim 64,   2 layers,  4 heads, 2 kv heads, ffn 192,  vocab 512,   ctx 256\n"
        "         small dim 768,  12 layers, 12 heads, 4 kv heads, ffn 2048, vocab 32000, ctx "
        "2048\n"
        "         1b    dim 2048, 22 layers, 32 heads, 4 kv heads, ffn 5632, vocab 32000, ctx "
        "2048\n"
        "--depth-decay F scales layer l's residual outputs (attn_output, ffn_down) by F^l, as in\n"
        "trained models where deep layers refine less: a --draft-of draft of the first layers\n"
        "then agrees with its target often (1 = every layer alike).\n"
        "defaults: --preset tiny --type f32 --seed 1 --rope-base 10000; --depth-decay 1 for tiny,\n"
        "0.7 for small and 1b\n");
}

/* --experts: llama (Mixtral: experts as wide as --ffn) or qwen3moe (which needs them; its
 * experts --expert-ffn wide, default --ffn); top-k 2 unless --experts-used says. */
static int check_experts(model *m, sol_err *e) {
    int moe = (m->arch->flags & ARCH_MOE) != 0;
    if (moe && !m->experts) m->experts = 8;
    if (!m->experts && (m->experts_used || m->expert_ffn))
        return sol_err_set(e, -EINVAL, "--experts-used and --expert-ffn need --experts");
    if (!m->experts) return 0;
    if (!moe && strcmp(m->arch->name, "llama"))
        return sol_err_set(e, -EINVAL,
                           "--experts applies to --arch llama (Mixtral), qwen3moe and gpt-oss");
    if (!moe && m->expert_ffn)
        return sol_err_set(e, -EINVAL,
                           "--expert-ffn applies to qwen3moe and gpt-oss (llama's experts are "
                           "--ffn wide)");
    if (!m->experts_used) m->experts_used = m->experts < 2 ? 1 : 2;
    if (m->experts_used > m->experts)
        return sol_err_set(e, -EINVAL, "--experts-used %d: more than --experts %d", m->experts_used,
                           m->experts);
    if (!m->expert_ffn) m->expert_ffn = m->s.ffn;
    return 0;
}

static int check_shape(const model *m, sol_err *e) {
    const shape *s = &m->s;
    if (s->dim < 2 || s->layers < 1 || s->heads < 1 || s->kv_heads < 1 || s->ffn < 1 || s->ctx < 1)
        return sol_err_set(e, -EINVAL,
                           "dim, layers, heads, kv-heads, ffn and ctx must be positive");
    if (s->layers > (MAX_TENSORS - 3) / 20)
        return sol_err_set(e, -EINVAL, "layers %d: at most %d supported", s->layers,
                           (MAX_TENSORS - 3) / 20);
    if (!m->head_dim && (s->dim % s->heads || (s->dim / s->heads) % 2))
        return sol_err_set(e, -EINVAL,
                           "dim %d must split into %d heads of an even size (or give --head-dim)",
                           s->dim, s->heads);
    if (m->head_dim % 2)
        return sol_err_set(e, -EINVAL, "--head-dim %d: must be even for RoPE", m->head_dim);
    if (s->heads % s->kv_heads)
        return sol_err_set(e, -EINVAL, "heads %d must be a multiple of kv-heads %d", s->heads,
                           s->kv_heads);
    size_t blk = sol_dtype_block_elems(m->type);
    if (s->dim % (int)blk || s->ffn % (int)blk)
        return sol_err_set(e, -EINVAL, "type %s needs dim (%d) and ffn (%d) to be multiples of %zu",
                           sol_dtype_name(m->type), s->dim, s->ffn, blk);
    if (s->vocab < VOCAB_GEN_MIN || s->vocab > VOCAB_GEN_MAX)
        return sol_err_set(e, -EINVAL, "vocab %d out of range %d..%d", s->vocab, VOCAB_GEN_MIN,
                           VOCAB_GEN_MAX);
    return 0;
}

/* --user-token ID=TEXT (repeatable). */
static int user_token(const char *v, void *ctx, sol_err *e) {
    model *m = ctx;
    char *end, *eq = strchr(v, '=');
    long id = strtol(v, &end, 10);
    if (m->n_user == MAX_CONTROL)
        return sol_err_set(e, -EINVAL, "--user-token: at most %d", MAX_CONTROL);
    if (!eq || end != eq || id < 0 || !eq[1])
        return sol_err_set(e, -EINVAL, "--user-token: expected ID=TEXT, found '%s'", v);
    m->user_id[m->n_user] = (int)id, m->user[m->n_user++] = eq + 1;
    return 0;
}

/* --yarn FACTOR,ORIG_CTX */
static int yarn_opt(const char *v, void *ctx, sol_err *e) {
    model *m = ctx;
    char *end = NULL;
    m->yarn_factor = strtof(v, &end);
    if (end == v || *end != ',' || !(m->yarn_factor > 1.0f))
        return sol_err_set(e, -EINVAL,
                           "--yarn: expected FACTOR,ORIG_CTX with FACTOR > 1, found '%s'", v);
    long n = strtol(end + 1, &end, 10);
    if (*end || n < 1 || n > (1 << 24))
        return sol_err_set(e, -EINVAL, "--yarn: ORIG_CTX must be 1..16777216, found '%s'", v);
    m->yarn_orig_ctx = (int)n;
    return 0;
}

/* --control-token TEXT (repeatable). */
static int control_token(const char *v, void *ctx, sol_err *e) {
    model *m = ctx;
    if (m->n_control == MAX_CONTROL)
        return sol_err_set(e, -EINVAL, "--control-token: at most %d", MAX_CONTROL);
    if (!*v) return sol_err_set(e, -EINVAL, "--control-token: empty");
    m->control[m->n_control++] = v;
    return 0;
}

static int parse_args(int argc, char **argv, model *m, sol_err *e) {
    int over[8] = {0}, rc = 0, help = 0, gemma_opt = 0;
    const char *preset = "tiny", *type = "f32", *arch = "llama";
    m->seed = 1;
    m->rope_base = 10000.0f;
    m->depth_decay = 0; /* 0: the preset's */
    m->swa_pattern = -1;
    m->pooling_type = -1;
    unsigned long long seed = 1;
    const double big = 1 << 24, inf = INFINITY;
    /* The flags, one table: name, short name, kind, destination, bounds (args.h). */
    const sol_arg args[] = {
        {"--out", 'o', SOL_ARG_STR, &m->out, 0, 0, 0, NULL, NULL, NULL},
        {"--preset", 'p', SOL_ARG_STR, &preset, 0, 0, 0, NULL, NULL, NULL},
        {"--type", 't', SOL_ARG_STR, &type, 0, 0, 0, NULL, NULL, &m->type_given},
        {"--dim", 0, SOL_ARG_INT, &over[1], 1, big, 0, NULL, NULL, NULL},
        {"--layers", 0, SOL_ARG_INT, &over[2], 1, big, 0, NULL, NULL, NULL},
        {"--heads", 0, SOL_ARG_INT, &over[3], 1, big, 0, NULL, NULL, NULL},
        {"--kv-heads", 0, SOL_ARG_INT, &over[4], 1, big, 0, NULL, NULL, NULL},
        {"--ffn", 0, SOL_ARG_INT, &over[5], 1, big, 0, NULL, NULL, NULL},
        {"--vocab", 0, SOL_ARG_INT, &over[6], 1, big, 0, NULL, NULL, NULL},
        {"--ctx", 0, SOL_ARG_INT, &over[7], 1, big, 0, NULL, NULL, NULL},
        {"--seed", 's', SOL_ARG_U64, &seed, 0, 0, 0, NULL, NULL, NULL},
        {"--rope-base", 'r', SOL_ARG_FLOAT, &m->rope_base, 0, inf, 1, NULL, NULL, NULL},
        {"--tied", 'T', SOL_ARG_SWITCH, &m->tied, 0, 0, 0, NULL, NULL, NULL},
        {"--help", 'h', SOL_ARG_SWITCH, &help, 0, 0, 0, NULL, NULL, NULL},
        {"--draft-of", 0, SOL_ARG_STR, &m->draft_of, 0, 0, 0, NULL, NULL, NULL},
        {"--depth-decay", 0, SOL_ARG_FLOAT, &m->depth_decay, 0, 1, 1, NULL, NULL, NULL},
        {"--arch", 0, SOL_ARG_STR, &arch, 0, 0, 0, NULL, NULL, NULL},
        {"--head-dim", 0, SOL_ARG_INT, &m->head_dim, 1, big, 0, NULL, NULL, NULL},
        {"--sliding-window", 0, SOL_ARG_INT, &m->sliding_window, 1, big, 0, NULL, NULL, &gemma_opt},
        {"--swa-pattern", 0, SOL_ARG_INT, &m->swa_pattern, 0, 1 << 16, 0, NULL, NULL, &gemma_opt},
        {"--softcap", 0, SOL_ARG_FLOAT, &m->softcap, 0, inf, 1, NULL, NULL, &gemma_opt},
        {"--pooling-type", 0, SOL_ARG_INT, &m->pooling_type, 0, 4, 0, NULL, NULL, NULL},
        {"--experts", 0, SOL_ARG_INT, &m->experts, 1, 512, 0, NULL, NULL, NULL},
        {"--yarn", 0, SOL_ARG_FN, NULL, 0, 0, 0, yarn_opt, m, NULL},
        {"--experts-used", 0, SOL_ARG_INT, &m->experts_used, 1, 512, 0, NULL, NULL, NULL},
        {"--expert-ffn", 0, SOL_ARG_INT, &m->expert_ffn, 1, big, 0, NULL, NULL, NULL},
        {"--vocab-from", 0, SOL_ARG_STR, &m->vocab_from, 0, 0, 0, NULL, NULL, NULL},
        {"--control-token", 0, SOL_ARG_FN, NULL, 0, 0, 0, control_token, m, NULL},
        {"--user-token", 0, SOL_ARG_FN, NULL, 0, 0, 0, user_token, m, NULL},
    };
    int npos = sol_args_parse(args, sizeof args / sizeof args[0], argc, argv, e);
    if (npos < 0) return npos;
    m->seed = seed;
    if (help) usage(stdout), exit(0);
    if (npos > 0) return sol_err_set(e, -EINVAL, "unexpected argument '%s'", argv[1]);

    if (m->vocab_from && (m->draft_of || over[6]))
        return sol_err_set(e, -EINVAL,
                           "--vocab-from takes the vocabulary's size: not with --vocab or "
                           "--draft-of");
    if (m->n_user && !m->vocab_from)
        return sol_err_set(e, -EINVAL, "--user-token renames a token of --vocab-from's vocabulary");
    if (m->n_control && (m->vocab_from || m->draft_of))
        return sol_err_set(e, -EINVAL,
                           "--control-token adds to the generated vocabulary: not with "
                           "--vocab-from or --draft-of");
    if (m->draft_of && (strcmp(arch, "llama") || m->head_dim))
        return sol_err_set(e, -EINVAL,
                           "--arch and --head-dim do not apply to --draft-of (the draft takes the "
                           "target's architecture and head size)");
    if (!(m->arch = model_arch_find(arch)) || !strcmp(arch, "mistral")) {
        char names[128]; /* mistral's files are llama's with another name: write llama */
        model_arch_names(names, sizeof names, "mistral");
        return sol_err_set(e, -EINVAL, "--arch: expected one of %s, found '%s'", names, arch);
    }
    if (gemma_opt && !(m->arch->flags & ARCH_SWA))
        return sol_err_set(e, -EINVAL,
                           "--sliding-window, --swa-pattern and --softcap apply to --arch gemma3 "
                           "and gpt-oss only");
    if (m->softcap > 0 && !(m->arch->flags & ARCH_SOFTCAP))
        return sol_err_set(e, -EINVAL, "--softcap applies to --arch gemma3 only");
    /* gpt-oss files always carry the window (llama.cpp requires the key): gpt-oss's 128 */
    if ((m->arch->flags & ARCH_SWA_SAME_ROPE) && !m->sliding_window) m->sliding_window = 128;
    if (m->swa_pattern >= 0 && !m->sliding_window)
        return sol_err_set(e, -EINVAL, "--swa-pattern needs --sliding-window");
    if (!m->out) return sol_err_set(e, -EINVAL, "missing -o OUT.gguf (see --help)");
    const shape *p = NULL;
    for (size_t i = 0; i < sizeof k_presets / sizeof k_presets[0]; i++)
        if (strcmp(preset, k_presets[i].name) == 0) p = &k_presets[i];
    if (!p)
        return sol_err_set(e, -EINVAL, "--preset: expected tiny, small or 1b, found '%s'", preset);
    m->s = *p;
    if (m->depth_decay == 0) m->depth_decay = p->depth_decay;
    m->draft_layers = over[2];
    int *fields[8] = {NULL,           &m->s.dim, &m->s.layers, &m->s.heads,
                      &m->s.kv_heads, &m->s.ffn, &m->s.vocab,  &m->s.ctx};
    for (int i = 1; i < 8; i++)
        if (over[i]) *fields[i] = over[i];
    int t = sol_dtype_parse(type);
    if (t != SOL_DT_F32 && t != SOL_DT_F16 && t != SOL_DT_BF16 && t != SOL_DT_Q8_0 &&
        t != SOL_DT_Q4_0)
        return sol_err_set(e, -EINVAL, "--type: expected f32, f16, bf16, q8_0 or q4_0, found '%s'",
                           type);
    m->type = (sol_dtype)t;
    if ((rc = check_shape(m, e)) || (rc = check_experts(m, e))) return rc;
    if (!m->head_dim) m->head_dim = m->s.dim / m->s.heads;
    return 0;
}

typedef struct {
    const gguf_file *g;
    sol_dtype *types;
    float *tmp;
    int *src, n_out; /* writer tensor index -> source tensor index (dropped layers shift them) */
} draft_job;

static int draft_fill(void *ctx, int index, int64_t row0, int64_t n, void *dst, sol_err *e) {
    draft_job *j = ctx;
    int i = j->src[index];
    return quant_convert_rows(gguf_tensor_at(j->g, i), j->types[i], row0, n, dst, j->tmp, NULL, e);
}

/* Keeps tensors outside blk.* and those of the first `layers` blocks. */
static int draft_keeps(const char *name, int layers) {
    return strncmp(name, "blk.", 4) != 0 || atoi(name + 4) < layers;
}

static int draft_build(gguf_writer *w, const gguf_file *g, model *m, draft_job *j, int layers,
                       const char *count_key, sol_err *e) {
    int rc = gguf_writer_set_alignment(w, gguf_alignment(g), e);
    for (int i = 0; !rc && i < gguf_n_kv(g); i++) {
        const gguf_kv *kv = gguf_kv_at(g, i);
        const char *k = kv->key;
        if (!strcmp(k, count_key) || !strcmp(k, "general.alignment") ||
            !strcmp(k, "general.name") || (m->type_given && !strcmp(k, "general.file_type")))
            continue;
        rc = quant_copy_kv(w, kv, e);
    }
    char name[128];
    snprintf(name, sizeof name, "draft-%d-layers-of-%s", layers, gguf_path(g));
    if (!rc) rc = gguf_writer_add_str(w, "general.name", name, e);
    if (!rc) rc = gguf_writer_add_u32(w, count_key, (uint32_t)layers, e);
    if (!rc && m->type_given)
        rc = gguf_writer_add_u32(w, "general.file_type", quant_file_type(m->type), e);
    for (int i = 0; !rc && i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (!draft_keeps(t->name, layers)) continue;
        j->src[j->n_out++] = i;
        j->types[i] = t->n_dims >= 2 && m->type_given ? m->type : t->type;
        if (t->ne[0] % (int64_t)sol_dtype_block_elems(j->types[i])) j->types[i] = t->type;
        rc = gguf_writer_add_tensor_fill(w, t->name, (int)t->n_dims, t->ne, j->types[i], draft_fill,
                                         j, e);
    }
    return rc;
}

static int write_draft(model *m, sol_err *e) {
    gguf_file *g = gguf_open(m->draft_of, 0, e);
    if (!g) return e->code ? e->code : -EINVAL;
    uint32_t n_layers = 0;
    const char *arch = "llama";
    char count_key[96];
    int rc = gguf_get_str(g, "general.architecture", &arch, e);
    snprintf(count_key, sizeof count_key, "%s.block_count", rc ? "llama" : arch);
    if (!rc) rc = gguf_get_u32(g, count_key, &n_layers, e);
    int layers = m->draft_layers ? m->draft_layers : (int)(n_layers / 4 ? n_layers / 4 : 1);
    if (!rc && (layers < 1 || (uint32_t)layers > n_layers))
        rc = sol_err_set(e, -EINVAL, "--layers %d: the target %s has %u layers", layers,
                         m->draft_of, n_layers);
    int n = gguf_n_tensors(g);
    int64_t max_ne0 = 1;
    for (int i = 0; i < n; i++)
        if (gguf_tensor_at(g, i)->ne[0] > max_ne0) max_ne0 = gguf_tensor_at(g, i)->ne[0];
    draft_job j = {g, calloc((size_t)n + 1, sizeof(sol_dtype)),
                   malloc(sizeof(float) * 2 * (size_t)max_ne0), calloc((size_t)n + 1, sizeof(int)),
                   0};
    gguf_writer *w = gguf_writer_new();
    if (!rc && (!j.types || !j.tmp || !j.src || !w)) rc = sol_err_set(e, -ENOMEM, "out of memory");
    if (!rc) rc = draft_build(w, g, m, &j, layers, count_key, e);
    if (!rc) rc = gguf_writer_write_file(w, m->out, e);
    if (!rc)
        fprintf(stderr, "sol-mkmodel: wrote %s: draft of %s, %d of %u layers, %.1f MiB\n", m->out,
                m->draft_of, layers, n_layers, (double)gguf_writer_data_bytes(w) / (1 << 20));
    gguf_writer_free(w);
    free(j.types), free(j.tmp), free(j.src);
    gguf_close(g);
    return rc;
}

int main(int argc, char **argv) {
    model m = {0};
    sol_err e = {0};
    if (parse_args(argc, argv, &m, &e) ||
        (m.draft_of ? write_draft(&m, &e) : write_model(&m, &e))) {
        fprintf(stderr, "sol-mkmodel: %s\n", e.msg);
        return 1;
    }
    return 0;
}
