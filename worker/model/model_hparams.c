/* model_hparams: a model's sizes and graph options read from its GGUF keys - the architecture,
 * heads, RoPE (its scaling: linear, llama3, YaRN), sliding windows and experts - each refused by
 * key name when out of range or not supported. The weights are bound in model_rank.c. */
#include "model_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "log.h"
#include "moe_route.h"

static int get_u32_req(const gguf_file *g, const char *arch, const char *suffix, int32_t *out,
                       sol_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t v = 0;
    int rc = gguf_get_u32(g, key, &v, err);
    if (rc == -ENOENT)
        return sol_err_set(err, -EINVAL, "%s: missing required key %s", gguf_path(g), key);
    if (rc) return rc;
    if (v == 0 || v > (1u << 24))
        return sol_err_set(err, -EINVAL, "%s: key %s: value %u is out of range", gguf_path(g), key,
                           v);
    *out = (int32_t)v;
    return 0;
}

static int get_f32_opt(const gguf_file *g, const char *arch, const char *suffix, float def,
                       float *out, sol_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_f32_def(g, key, def, out, err);
}

/* ggml_rope_yarn_corr_dim: the pair index whose wavelength fits n_rot times in the original
 * context, in float as ggml computes it. */
static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2.0f * (float)M_PI)) /
           (2.0f * logf(base));
}

/* rope.scaling.type = yarn (Qwen's long-context files, gpt-oss): factor, original context,
 * beta_fast / beta_slow (32, 1), attn_factor (1); the correction dims and the magnitude scale as
 * llama.cpp derives them (its attention factor over (1 + 0.1 ln factor) cancels the one it
 * applies in the rotation, leaving attn_factor x (1 + 0.1 ln factor)). */
static int load_yarn(model_rank *m, const char *arch, sol_rope_params *r, sol_err *err) {
    const gguf_file *g = m->gguf;
    model_hparams *hp = &m->hp;
    float factor = 0, fast = 32, slow = 1, attn = 1, logmul = 0;
    uint32_t orig = 0;
    char key[128];
    int rc;
    if ((rc = get_f32_opt(g, arch, "rope.scaling.factor", 0.0f, &factor, err)) ||
        (rc = get_f32_opt(g, arch, "rope.scaling.yarn_beta_fast", 32.0f, &fast, err)) ||
        (rc = get_f32_opt(g, arch, "rope.scaling.yarn_beta_slow", 1.0f, &slow, err)) ||
        (rc = get_f32_opt(g, arch, "rope.scaling.attn_factor", 1.0f, &attn, err)) ||
        (rc = get_f32_opt(g, arch, "rope.scaling.yarn_log_multiplier", 0.0f, &logmul, err)))
        return rc;
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
    if ((rc = gguf_get_u32_def(g, key, 0, &orig, err))) return rc;
    if (!(factor > 0.0f) || orig == 0)
        return sol_err_set(err, -EINVAL,
                           "%s: YaRN needs %s.rope.scaling.factor > 0 and %s (found %g and %u)",
                           gguf_path(g), arch, key, factor, orig);
    if (logmul != 0.0f)
        return sol_err_set(err, -ENOTSUP,
                           "%s: key %s.rope.scaling.yarn_log_multiplier: %g is not supported "
                           "(DeepSeek's YaRN variant)",
                           gguf_path(g), arch, logmul);
    r->freq_scale = 1.0f / factor;
    r->ext_factor = 1.0f;
    float lo = floorf(yarn_corr_dim(hp->head_dim, (int)orig, fast, r->freq_base));
    float hi = ceilf(yarn_corr_dim(hp->head_dim, (int)orig, slow, r->freq_base));
    r->yarn_low = lo > 0.0f ? lo : 0.0f;
    r->yarn_high = hi < (float)(hp->head_dim - 1) ? hi : (float)(hp->head_dim - 1);
    r->mscale = attn * (1.0f + 0.1f * logf(1.0f / r->freq_scale));
    return 0;
}

/* rope.scaling.type: absent/none, llama3 (Llama 3.1's frequency bands), linear (positions
 * divided by rope.scaling.factor; Gemma 3's global layers) or yarn. Other types are refused by
 * name. */
static int load_rope_scaling(model_rank *m, const char *arch, sol_rope_params *r, sol_err *err) {
    const gguf_file *g = m->gguf;
    const char *stype = NULL;
    char key[128];
    int rc;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (!gguf_get_kv(g, key)) return 0;
    if ((rc = gguf_get_str(g, key, &stype, err))) return rc;
    if (strcmp(stype, "none") == 0) return 0;
    if (strcmp(stype, "linear") == 0) {
        float factor = 1.0f;
        if ((rc = get_f32_opt(g, arch, "rope.scaling.factor", 1.0f, &factor, err))) return rc;
        if (!(factor > 0.0f))
            return sol_err_set(err, -EINVAL, "%s: key %s.rope.scaling.factor: %g must be > 0",
                               gguf_path(g), arch, factor);
        r->freq_scale = 1.0f / factor;
        return 0;
    }
    if (strcmp(stype, "yarn") == 0) return load_yarn(m, arch, r, err);
    if (strcmp(stype, "llama3") != 0)
        return sol_err_set(err, -ENOTSUP,
                           "%s: key %s: RoPE scaling \"%s\" is not supported (expected none, "
                           "linear, yarn or llama3)",
                           gguf_path(g), key, stype);
    uint32_t orig = 0;
    if ((rc = get_f32_opt(g, arch, "rope.scaling.factor", 8.0f, &r->scaling_factor, err)) ||
        (rc = get_f32_opt(g, arch, "rope.scaling.low_freq_factor", 1.0f, &r->low_freq_factor,
                          err)) ||
        (rc = get_f32_opt(g, arch, "rope.scaling.high_freq_factor", 4.0f, &r->high_freq_factor,
                          err)))
        return rc;
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
    if ((rc = gguf_get_u32_def(g, key, 8192, &orig, err))) return rc;
    r->orig_ctx = (int32_t)orig;
    return 0;
}

/* Which layers slide: attention.sliding_window_pattern as one bool per layer, or a period P
 * (layer l slides unless l % P == P - 1; P = 0: all slide), else the architecture's period. */
static int load_swa_layers(model_rank *m, const char *arch, sol_err *err) {
    const gguf_file *g = m->gguf;
    const model_hparams *hp = &m->hp;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    const gguf_kv *kv = gguf_get_kv(g, key);
    if (kv && kv->type == GGUF_T_ARR) {
        const gguf_arr *a = NULL;
        int rc = gguf_get_arr(g, key, GGUF_T_BOOL, &a, err);
        if (rc) return rc;
        if (a->n != (uint64_t)hp->n_layers)
            return sol_err_set(err, -EINVAL, "%s: key %s: %llu entries for %d layers", gguf_path(g),
                               key, (unsigned long long)a->n, hp->n_layers);
        for (int l = 0; l < hp->n_layers; l++)
            m->swa[l] = ((const uint8_t *)a->data)[l] != 0;
        return 0;
    }
    uint32_t period = (uint32_t)hp->arch->swa_pattern;
    int rc = gguf_get_u32_def(g, key, period, &period, err);
    if (rc) return rc;
    for (int l = 0; l < hp->n_layers; l++)
        m->swa[l] = period == 0 || (uint32_t)l % period < period - 1;
    return 0;
}

/* ARCH_SWA: the window, the layers that use it and their RoPE base; then the KV window (the
 * window when every layer slides, so older blocks can be freed). */
static int load_swa(model_rank *m, const char *arch, sol_err *err) {
    const gguf_file *g = m->gguf;
    model_hparams *hp = &m->hp;
    hp->rope_swa = hp->rope;
    if (!(hp->arch->flags & ARCH_SWA)) return 0;
    char key[128];
    uint32_t win = 0;
    snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
    int rc = gguf_get_u32_def(g, key, 0, &win, err);
    if (rc) return rc;
    if (win > (1u << 24))
        return sol_err_set(err, -EINVAL, "%s: key %s: %u is out of range", gguf_path(g), key, win);
    if (win == 0) return 0; /* no window: every layer global, as llama.cpp reads it */
    hp->swa_window = (int32_t)win;
    /* Local layers use their own base (llama.cpp: rope_freq_base_train_swa), unscaled (Gemma 3)
     * or with the global scaling, loaded after this (ARCH_SWA_SAME_ROPE: gpt-oss). */
    int same = (hp->arch->flags & ARCH_SWA_SAME_ROPE) != 0;
    sol_rope_params local = same ? hp->rope : (sol_rope_params){.neox = hp->rope.neox};
    if ((rc = get_f32_opt(g, arch, "rope.freq_base_swa", same ? hp->rope.freq_base : 10000.0f,
                          &local.freq_base, err)))
        return rc;
    hp->rope_swa = local;
    if (!(m->swa = calloc((size_t)hp->n_layers, 1)))
        return sol_err_set(err, -ENOMEM, "out of memory for the layer table");
    if ((rc = load_swa_layers(m, arch, err))) return rc;
    hp->kv_window = hp->swa_window;
    for (int l = 0; l < hp->n_layers; l++)
        if (!m->swa[l]) hp->kv_window = 0;
    return 0;
}

/* Gemma 3 and its final soft-cap: the query scale (query_pre_attn_scalar: dim / heads for the
 * 27B model, llama.cpp tells it by its 62 layers; head_dim otherwise) and the cap. */
static int load_gemma_extras(model_rank *m, const char *arch, sol_err *err) {
    model_hparams *hp = &m->hp;
    if (!(hp->arch->flags & ARCH_SOFTCAP)) return 0;
    if (hp->n_layers == 62) hp->attn_scale = 1.0f / sqrtf((float)(hp->dim / hp->n_heads));
    int rc = get_f32_opt(m->gguf, arch, "final_logit_softcapping", 0.0f, &hp->softcap, err);
    if (rc) return rc;
    if (hp->softcap < 0.0f)
        return sol_err_set(err, -EINVAL, "%s: key %s.final_logit_softcapping: %g must be >= 0",
                           gguf_path(m->gguf), arch, hp->softcap);
    return 0;
}

/* A key this mixture-of-experts graph does not build (shared experts, expert groups, another
 * gating function) is refused by name rather than read past. */
static int refuse_expert_key(const gguf_file *g, const char *arch, const char *suffix, uint32_t lo,
                             uint32_t hi, const char *why, sol_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t v = lo;
    int rc = gguf_get_kv(g, key) ? gguf_get_u32(g, key, &v, err) : 0;
    if (rc) return rc;
    if (v < lo || v > hi)
        return sol_err_set(err, -ENOTSUP, "%s: key %s: %u is not supported (%s)", gguf_path(g), key,
                           v, why);
    return 0;
}

/* expert_count, expert_used_count, expert_feed_forward_length and expert_weights_scale (see
 * model_hparams); 0 experts: a dense model, unless the architecture is always a mixture. */
static int load_experts(model_rank *m, const char *arch, sol_err *err) {
    const gguf_file *g = m->gguf;
    model_hparams *hp = &m->hp;
    char key[128];
    uint32_t ne = 0, used = 0, width = 0;
    snprintf(key, sizeof key, "%s.expert_count", arch);
    int rc = gguf_get_u32_def(g, key, 0, &ne, err);
    if (rc) return rc;
    if (ne == 0 && (hp->arch->flags & ARCH_MOE))
        return sol_err_set(err, -EINVAL, "%s: missing required key %s (%s is a mixture of experts)",
                           gguf_path(g), key, arch);
    if (ne == 0) return 0;
    if (ne > MOE_MAX_EXPERTS)
        return sol_err_set(err, -EINVAL, "%s: key %s: %u experts (at most %d)", gguf_path(g), key,
                           ne, MOE_MAX_EXPERTS);
    snprintf(key, sizeof key, "%s.expert_used_count", arch);
    if ((rc = gguf_get_u32_def(g, key, 0, &used, err))) return rc;
    if (used == 0 || used > ne)
        return sol_err_set(err, -EINVAL, "%s: key %s: %u must be in 1..expert_count %u",
                           gguf_path(g), key, used, ne);
    /* Mixtral's experts are feed_forward_length wide; Qwen3-MoE's have their own key (llama.cpp
     * falls back to feed_forward_length / expert_used_count) */
    uint32_t def = (hp->arch->flags & ARCH_MOE) ? (uint32_t)hp->ffn / used : (uint32_t)hp->ffn;
    snprintf(key, sizeof key, "%s.expert_feed_forward_length", arch);
    if ((rc = gguf_get_u32_def(g, key, def, &width, err))) return rc;
    if (width == 0 || width > (1u << 24))
        return sol_err_set(err, -EINVAL, "%s: key %s: expert width %u is out of range",
                           gguf_path(g), key, width);
    if ((rc = get_f32_opt(g, arch, "expert_weights_scale", 0.0f, &hp->expert_w_scale, err)))
        return rc;
    if ((rc = refuse_expert_key(g, arch, "expert_shared_count", 0, 0, "shared experts", err)) ||
        (rc = refuse_expert_key(g, arch, "expert_group_count", 0, 1, "expert groups", err)) ||
        (rc = refuse_expert_key(g, arch, "expert_gating_func", 1, 1,
                                "the router's gating is softmax, 1", err)))
        return rc;
    hp->n_expert = (int32_t)ne;
    hp->n_expert_used = (int32_t)used;
    hp->ffn_exp = (int32_t)width;
    return 0;
}

int rank_load_hparams(model_rank *m, sol_err *err) {
    const gguf_file *g = m->gguf;
    const char *arch = NULL;
    int rc = gguf_get_str(g, "general.architecture", &arch, err);
    if (rc == -ENOENT)
        return sol_err_set(err, -EINVAL, "%s: missing required key general.architecture",
                           gguf_path(g));
    if (rc) return rc;
    model_hparams *hp = &m->hp;
    char names[128], key[128];
    model_arch_names(names, sizeof names, NULL);
    if (!(hp->arch = model_arch_find(arch)))
        return sol_err_set(err, -ENOTSUP,
                           "%s: key general.architecture: \"%s\" is not supported (expected one "
                           "of %s)",
                           gguf_path(g), arch, names);
    if ((rc = get_u32_req(g, arch, "embedding_length", &hp->dim, err)) ||
        (rc = get_u32_req(g, arch, "block_count", &hp->n_layers, err)) ||
        (rc = get_u32_req(g, arch, "attention.head_count", &hp->n_heads, err)) ||
        (rc = get_u32_req(g, arch, "context_length", &hp->ctx_len, err)))
        return rc;
    /* a mixture-of-experts architecture may have no dense FFN width (llama.cpp reads it as
     * optional; the expert width is its own key) */
    if (!(hp->arch->flags & ARCH_MOE) ||
        gguf_get_kv(g, (snprintf(key, sizeof key, "%s.feed_forward_length", arch), key)))
        if ((rc = get_u32_req(g, arch, "feed_forward_length", &hp->ffn, err))) return rc;
    if ((rc = load_experts(m, arch, err))) return rc;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    uint32_t kvh = (uint32_t)hp->n_heads;
    if ((rc = gguf_get_u32_def(g, key, kvh, &kvh, err))) return rc;
    hp->n_kv_heads = (int32_t)kvh;
    if (hp->n_kv_heads <= 0 || hp->n_heads % hp->n_kv_heads != 0)
        return sol_err_set(err, -EINVAL, "%s: key %s: %d does not divide head_count %d",
                           gguf_path(g), key, hp->n_kv_heads, hp->n_heads);
    /* attention.key_length sets the head size where it is not dim / heads (Qwen3, Gemma). */
    snprintf(key, sizeof key, "%s.attention.key_length", arch);
    uint32_t hd = hp->dim % hp->n_heads == 0 ? (uint32_t)(hp->dim / hp->n_heads) : 0, vd;
    if ((rc = gguf_get_u32_def(g, key, hd, &hd, err))) return rc;
    if (hd == 0 || hd > 1024)
        return sol_err_set(err, -EINVAL,
                           "%s: embedding_length %d is not a multiple of head_count %d and %s "
                           "is not set (or out of range)",
                           gguf_path(g), hp->dim, hp->n_heads, key);
    snprintf(key, sizeof key, "%s.attention.value_length", arch);
    if ((rc = gguf_get_u32_def(g, key, hd, &vd, err))) return rc;
    if (vd != hd)
        return sol_err_set(err, -ENOTSUP, "%s: key %s: %u differs from key_length %u", gguf_path(g),
                           key, vd, hd);
    hp->head_dim = (int32_t)hd;
    hp->q_dim = hp->n_heads * hp->head_dim;
    hp->rope.neox = (hp->arch->flags & ARCH_ROPE_NEOX) != 0;
    if (hp->head_dim % 2 != 0)
        return sol_err_set(err, -EINVAL, "%s: head dimension %d must be even for RoPE",
                           gguf_path(g), hp->head_dim);
    snprintf(key, sizeof key, "%s.rope.dimension_count", arch);
    uint32_t rot = (uint32_t)hp->head_dim;
    if ((rc = gguf_get_u32_def(g, key, rot, &rot, err))) return rc;
    if ((int32_t)rot != hp->head_dim)
        return sol_err_set(err, -ENOTSUP,
                           "%s: key %s: partial rotary (%u of %d dims) is not supported",
                           gguf_path(g), key, rot, hp->head_dim);
    if ((rc = get_f32_opt(g, arch, "attention.layer_norm_rms_epsilon", 1e-5f, &hp->eps, err)) ||
        (rc = get_f32_opt(g, arch, "rope.freq_base", 10000.0f, &hp->rope.freq_base, err)))
        return rc;
    snprintf(key, sizeof key, "%s.pooling_type", arch);
    uint32_t pooling = UINT32_MAX;
    if ((rc = gguf_get_u32_def(g, key, pooling, &pooling, err))) return rc;
    hp->pooling_type = pooling > 4 ? -1 : (int32_t)pooling;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    if ((rc = load_swa(m, arch, err)) || (rc = load_rope_scaling(m, arch, &hp->rope, err)) ||
        (m->swa && (hp->arch->flags & ARCH_SWA_SAME_ROPE) &&
         (rc = load_rope_scaling(m, arch, &hp->rope_swa, err))) ||
        (rc = load_gemma_extras(m, arch, err)))
        return rc;
    if (gguf_tensor_find(g, "rope_freqs.weight"))
        LOG_WARN("model",
                 "%s: rope_freqs.weight is ignored (per-dimension RoPE factors are not "
                 "supported); long-context outputs may differ from llama.cpp",
                 gguf_path(g));
    const gguf_tensor *te = gguf_tensor_find(g, "token_embd.weight");
    if (!te) return sol_err_set(err, -EINVAL, "%s: missing tensor token_embd.weight", gguf_path(g));
    hp->n_vocab = (int32_t)te->ne[1];
    return 0;
}
