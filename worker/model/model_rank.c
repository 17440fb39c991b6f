/* model_rank: one rank of a model - the whole GGUF decoder, or one tensor-parallel rank's shard
 * of it: its hyperparameters, weights bound from the file and activation scratch (sized up
 * front). The forward pass is model_forward.c; the public model over its ranks is model.c. */
#include "model_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arch.h"
#include "log.h"
#include "moe_route.h"

/* ---- loading ---------------------------------------------------------------------------- */

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
static int load_yarn(model_rank *m, const char *arch, sol_err *err) {
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
    sol_rope_params *r = &hp->rope;
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
static int load_rope_scaling(model_rank *m, const char *arch, sol_err *err) {
    const gguf_file *g = m->gguf;
    model_hparams *hp = &m->hp;
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
        hp->rope.freq_scale = 1.0f / factor;
        return 0;
    }
    if (strcmp(stype, "yarn") == 0) return load_yarn(m, arch, err);
    if (strcmp(stype, "llama3") != 0)
        return sol_err_set(err, -ENOTSUP,
                           "%s: key %s: RoPE scaling \"%s\" is not supported (expected none, "
                           "linear, yarn or llama3)",
                           gguf_path(g), key, stype);
    uint32_t orig = 0;
    if ((rc = get_f32_opt(g, arch, "rope.scaling.factor", 8.0f, &hp->rope.scaling_factor, err)) ||
        (rc = get_f32_opt(g, arch, "rope.scaling.low_freq_factor", 1.0f, &hp->rope.low_freq_factor,
                          err)) ||
        (rc = get_f32_opt(g, arch, "rope.scaling.high_freq_factor", 4.0f,
                          &hp->rope.high_freq_factor, err)))
        return rc;
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
    if ((rc = gguf_get_u32_def(g, key, 8192, &orig, err))) return rc;
    hp->rope.orig_ctx = (int32_t)orig;
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
    /* Local layers use their own base and no scaling (llama.cpp: rope_freq_base_train_swa). */
    sol_rope_params local = {.neox = hp->rope.neox};
    if ((rc = get_f32_opt(g, arch, "rope.freq_base_swa", 10000.0f, &local.freq_base, err)))
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

static int load_hparams(model_rank *m, sol_err *err) {
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
    if ((rc = load_rope_scaling(m, arch, err))) return rc;
    snprintf(key, sizeof key, "%s.pooling_type", arch);
    uint32_t pooling = UINT32_MAX;
    if ((rc = gguf_get_u32_def(g, key, pooling, &pooling, err))) return rc;
    hp->pooling_type = pooling > 4 ? -1 : (int32_t)pooling;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    if ((rc = load_swa(m, arch, err)) || (rc = load_gemma_extras(m, arch, err))) return rc;
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

#define MODEL_WEIGHT_TYPES                                                                         \
    (GGUF_TYPE_BIT(SOL_DT_F32) | GGUF_TYPE_BIT(SOL_DT_F16) | GGUF_TYPE_BIT(SOL_DT_BF16) |          \
     GGUF_TYPE_BIT(SOL_DT_Q8_0) | GGUF_TYPE_BIT(SOL_DT_Q4_0) | GGUF_TYPE_BIT(SOL_DT_Q5_0) |        \
     GGUF_TYPE_BIT(SOL_DT_Q5_1) | GGUF_TYPE_BIT(SOL_DT_Q4_K) | GGUF_TYPE_BIT(SOL_DT_Q5_K) |        \
     GGUF_TYPE_BIT(SOL_DT_Q6_K) | GGUF_TYPE_BIT(SOL_DT_MXFP4))

/* Rank `rank` of `n`: which heads, FFN columns and vocabulary rows it holds. The shapes must
 * divide; else the key and the numbers. */
static int plan_shard(model_rank *m, int rank, int n, sol_tp_comm *comm, sol_err *err) {
    const model_hparams *hp = &m->hp;
    model_shard *sh = &m->sh;
    const char *f = gguf_path(m->gguf), *a = hp->arch->name;
    if (hp->n_heads % n)
        return sol_err_set(err, -EINVAL,
                           "%s: worker.tensor_parallel %d does not divide %s.attention.head_count "
                           "%d",
                           f, n, a, hp->n_heads);
    if (hp->n_kv_heads % n && n % hp->n_kv_heads)
        return sol_err_set(err, -EINVAL,
                           "%s: worker.tensor_parallel %d neither divides "
                           "%s.attention.head_count_kv %d nor is a multiple of it",
                           f, n, a, hp->n_kv_heads);
    if (hp->n_expert && hp->ffn_exp % n)
        return sol_err_set(err, -EINVAL,
                           "%s: worker.tensor_parallel %d does not divide "
                           "%s.expert_feed_forward_length %d (each expert is split as the dense "
                           "FFN)",
                           f, n, a, hp->ffn_exp);
    if (!hp->n_expert && hp->ffn % n)
        return sol_err_set(
            err, -EINVAL, "%s: worker.tensor_parallel %d does not divide %s.feed_forward_length %d",
            f, n, a, hp->ffn);
    *sh = (model_shard){.rank = rank, .n = n, .comm = n > 1 ? comm : NULL};
    sh->heads = hp->n_heads / n;
    sh->head0 = rank * sh->heads;
    /* Fewer KV heads than ranks: each rank keeps the one KV head its query heads read. */
    sh->kv_heads = hp->n_kv_heads % n == 0 ? hp->n_kv_heads / n : 1;
    sh->kv_head0 =
        hp->n_kv_heads % n == 0 ? rank * sh->kv_heads : sh->head0 / (hp->n_heads / hp->n_kv_heads);
    sh->q_dim = sh->heads * hp->head_dim;
    sh->kv_dim = sh->kv_heads * hp->head_dim;
    sh->ffn = hp->ffn / n;
    sh->ffn0 = rank * sh->ffn;
    sh->ffn_exp = hp->ffn_exp / n;
    sh->ffn_exp0 = rank * sh->ffn_exp;
    sh->vocab0 = (int)((int64_t)hp->n_vocab * rank / n);
    sh->vocab = (int)((int64_t)hp->n_vocab * (rank + 1) / n) - sh->vocab0;
    return 0;
}

/* A part of a weight: rows [row0, row0 + nrows) and columns [col0, col0 + ncols). */
typedef struct slice {
    int64_t row0, nrows, col0, ncols;
    int copy; /* 1: copy even a whole-column slice (the tied head: the embedding is repacked) */
} slice;

/* Columns of a row-major block layout are not contiguous: the slice is copied out, row by row,
 * into memory the model owns. */
static int copy_slice(model_rank *m, const char *name, sol_weight *w, const slice *sl,
                      sol_err *err) {
    size_t rb = sol_dtype_row_bytes(w->type, sl->ncols);
    size_t off = sol_dtype_row_bytes(w->type, sl->col0);
    if (rb == 0 || (sl->col0 && off == 0))
        return sol_err_set(err, -EINVAL,
                           "%s: tensor %s: worker.tensor_parallel %d splits its %lld columns into "
                           "parts of %lld, not a multiple of the %s block of %zu",
                           gguf_path(m->gguf), name, m->sh.n, (long long)w->cols,
                           (long long)sl->ncols, sol_dtype_name(w->type),
                           sol_dtype_block_elems(w->type));
    void **grown = realloc(m->owned, sizeof *grown * (size_t)(m->n_owned + 1));
    if (!grown) return sol_err_set(err, -ENOMEM, "out of memory for %s", name);
    m->owned = grown;
    size_t bytes = (rb * (size_t)sl->nrows + 63) / 64 * 64;
    char *dst = aligned_alloc(64, bytes ? bytes : 64);
    if (!dst) return sol_err_set(err, -ENOMEM, "out of memory for a shard of %s", name);
    m->owned[m->n_owned++] = dst;
    for (int64_t r = 0; r < sl->nrows; r++)
        memcpy(dst + (size_t)r * rb, (const char *)w->data + (size_t)r * w->row_bytes + off, rb);
    w->data = dst;
    w->cols = sl->ncols;
    w->row_bytes = rb;
    return 0;
}

/* The matrix of `rows` x `cols` at `data` (of tensor t; one expert's part of a 3-D one);
 * sl: the part this rank holds (NULL: all of it). Row slices point into the file; column slices
 * are copied. */
static int bind_view(model_rank *m, const gguf_tensor *t, const void *data, int64_t cols,
                     int64_t rows, const slice *sl, sol_weight *w, sol_err *err) {
    int rc;
    w->type = t->type;
    w->rows = rows;
    w->cols = cols;
    w->data = data;
    w->row_bytes = sol_dtype_row_bytes(t->type, cols);
    if (w->row_bytes == 0)
        return sol_err_set(err, -EINVAL,
                           "%s: tensor %s: row of %lld elements is not a whole number of %s "
                           "blocks",
                           gguf_path(m->gguf), t->name, (long long)cols, sol_dtype_name(t->type));
    if (sl) {
        w->data = (const char *)w->data + (size_t)sl->row0 * w->row_bytes;
        w->rows = sl->nrows;
        if ((sl->ncols < cols || sl->copy) && (rc = copy_slice(m, t->name, w, sl, err))) return rc;
    }
    if ((rc = sol_weight_prepare(m->be, w)))
        return sol_err_set(err, rc, "%s: tensor %s: %s", gguf_path(m->gguf), t->name,
                           m->be->err.msg);
    return 0;
}

/* A 2-D weight [cols, rows] in GGUF terms (ne0 = cols); sl as bind_view's. */
static int bind_weight(model_rank *m, const char *name, int64_t cols, int64_t rows, const slice *sl,
                       sol_weight *w, sol_err *err) {
    int rc;
    if ((rc = gguf_expect_tensor(m->gguf, name, 2, cols, rows, err))) return rc;
    if ((rc = gguf_expect_type(m->gguf, name, MODEL_WEIGHT_TYPES, err))) return rc;
    const gguf_tensor *t = gguf_tensor_find(m->gguf, name);
    return bind_view(m, t, t->data, cols, rows, sl, w, err);
}

/* A 3-D [cols, rows, n_expert] tensor as one weight per expert (ws[e]: expert e's rows x cols
 * matrix, this rank's slice sl of it). */
static int bind_experts(model_rank *m, const char *name, int64_t cols, int64_t rows,
                        const slice *sl, sol_weight **ws, sol_err *err) {
    int64_t ne = m->hp.n_expert;
    int rc;
    if ((rc = gguf_expect_shape(m->gguf, name, 3, (const int64_t[]){cols, rows, ne}, err)) ||
        (rc = gguf_expect_type(m->gguf, name, MODEL_WEIGHT_TYPES, err)))
        return rc;
    const gguf_tensor *t = gguf_tensor_find(m->gguf, name);
    if (!(*ws = calloc((size_t)ne, sizeof **ws)))
        return sol_err_set(err, -ENOMEM, "out of memory for %s", name);
    size_t per = sol_dtype_row_bytes(t->type, cols) * (size_t)rows;
    for (int64_t e = 0; e < ne; e++) {
        (*ws)[e].flags = SOL_WEIGHT_EXPERT;
        if ((rc = bind_view(m, t, (const char *)t->data + (size_t)e * per, cols, rows, sl,
                            &(*ws)[e], err)))
            return rc;
    }
    return 0;
}

/* An F32 vector of `dim`, elements [off, off + len) of it (a bias shard; else off 0, len dim). */
static int bind_vec(model_rank *m, const char *name, int64_t dim, int64_t off, int64_t len,
                    const float **out, sol_err *err) {
    int rc;
    if ((rc = gguf_expect_tensor(m->gguf, name, 1, dim, 1, err))) return rc;
    if ((rc = gguf_expect_type(m->gguf, name, GGUF_TYPE_BIT(SOL_DT_F32), err))) return rc;
    /* As a 1 x len weight, so a device backend uploads it like the matrices (the CPU backend
     * leaves F32 where it lies). */
    const float *data = (const float *)gguf_tensor_find(m->gguf, name)->data + off;
    sol_weight w = {SOL_DT_F32, 1, len, data, (size_t)len * sizeof(float), 0, 0};
    if ((rc = sol_weight_prepare(m->be, &w)))
        return sol_err_set(err, rc, "%s: tensor %s: %s", gguf_path(m->gguf), name, m->be->err.msg);
    *out = w.data;
    return 0;
}

static int bind_norm(model_rank *m, const char *name, int64_t dim, const float **out,
                     sol_err *err) {
    return bind_vec(m, name, dim, 0, dim, out, err);
}

/* Layer l's mixture of experts: the router (whole on every rank: each picks the same experts)
 * and this rank's columns of every expert (gate/up rows, down columns), as the dense FFN. */
static int bind_moe(model_rank *m, int l, sol_err *err) {
    const model_hparams *hp = &m->hp;
    const model_shard *sh = &m->sh;
    layer_weights *L = &m->layers[l];
    slice up = {sh->ffn_exp0, sh->ffn_exp, 0, hp->dim, 0};
    slice down = {0, hp->dim, sh->ffn_exp0, sh->ffn_exp, 0};
    char n[GGUF_MAX_NAME + 1];
    int rc;
    snprintf(n, sizeof n, "blk.%d.ffn_gate_inp.weight", l);
    if ((rc = bind_weight(m, n, hp->dim, hp->n_expert, NULL, &L->w_router, err))) return rc;
    snprintf(n, sizeof n, "blk.%d.ffn_gate_exps.weight", l);
    if ((rc = bind_experts(m, n, hp->dim, hp->ffn_exp, &up, &L->e_gate, err))) return rc;
    snprintf(n, sizeof n, "blk.%d.ffn_up_exps.weight", l);
    if ((rc = bind_experts(m, n, hp->dim, hp->ffn_exp, &up, &L->e_up, err))) return rc;
    snprintf(n, sizeof n, "blk.%d.ffn_down_exps.weight", l);
    return bind_experts(m, n, hp->ffn_exp, hp->dim, &down, &L->e_down, err);
}

static int bind_layer(model_rank *m, int l, sol_err *err) {
    const model_hparams *hp = &m->hp;
    const model_shard *sh = &m->sh;
    layer_weights *L = &m->layers[l];
    int64_t kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim, hd = hp->head_dim;
    /* Rows: this rank's heads and FFN columns; columns: the same ranges as inputs. */
    slice q = {sh->head0 * hd, sh->q_dim, 0, hp->dim, 0};
    slice kv = {sh->kv_head0 * hd, sh->kv_dim, 0, hp->dim, 0};
    slice o = {0, hp->dim, sh->head0 * hd, sh->q_dim, 0};
    slice up = {sh->ffn0, sh->ffn, 0, hp->dim, 0}, down = {0, hp->dim, sh->ffn0, sh->ffn, 0};
    char n[GGUF_MAX_NAME + 1];
    int rc;
#define W(suffix, cols, rows, sl, dst)                                                             \
    do {                                                                                           \
        snprintf(n, sizeof n, "blk.%d." suffix ".weight", l);                                      \
        if ((rc = bind_weight(m, n, cols, rows, sl, dst, err))) return rc;                         \
    } while (0)
    W("attn_q", hp->dim, hp->q_dim, &q, &L->wq);
    W("attn_k", hp->dim, kv_dim, &kv, &L->wk);
    W("attn_v", hp->dim, kv_dim, &kv, &L->wv);
    W("attn_output", hp->q_dim, hp->dim, &o, &L->wo);
    if (hp->n_expert) {
        if ((rc = bind_moe(m, l, err))) return rc;
    } else {
        W("ffn_gate", hp->dim, hp->ffn, &up, &L->w_gate);
        W("ffn_up", hp->dim, hp->ffn, &up, &L->w_up);
        W("ffn_down", hp->ffn, hp->dim, &down, &L->w_down);
    }
#undef W
#define V(suffix, len, off, part, dst)                                                             \
    do {                                                                                           \
        snprintf(n, sizeof n, "blk.%d." suffix, l);                                                \
        if ((rc = bind_vec(m, n, len, off, part, dst, err))) return rc;                            \
    } while (0)
    V("attn_norm.weight", hp->dim, 0, hp->dim, &L->attn_norm);
    V("ffn_norm.weight", hp->dim, 0, hp->dim, &L->ffn_norm);
    if (hp->arch->flags & ARCH_QKV_BIAS) {
        V("attn_q.bias", hp->q_dim, q.row0, q.nrows, &L->bq);
        V("attn_k.bias", kv_dim, kv.row0, kv.nrows, &L->bk);
        V("attn_v.bias", kv_dim, kv.row0, kv.nrows, &L->bv);
    }
    if (hp->arch->flags & ARCH_QK_NORM) {
        V("attn_q_norm.weight", hd, 0, hd, &L->q_norm);
        V("attn_k_norm.weight", hd, 0, hd, &L->k_norm);
    }
    if (hp->arch->flags & ARCH_POST_NORMS) {
        V("post_attention_norm.weight", hp->dim, 0, hp->dim, &L->attn_post_norm);
        V("post_ffw_norm.weight", hp->dim, 0, hp->dim, &L->ffn_post_norm);
    }
#undef V
    return 0;
}

static void set_name(model_rank *m, const char *path) {
    const char *gname = NULL;
    sol_err ignore = {0};
    if (gguf_get_kv(m->gguf, "general.name") &&
        gguf_get_str(m->gguf, "general.name", &gname, &ignore) == 0 && gname[0]) {
        snprintf(m->name, sizeof m->name, "%s", gname);
        return;
    }
    const char *base = strrchr(path, '/');
    snprintf(m->name, sizeof m->name, "%s", base ? base + 1 : path);
    char *dot = strrchr(m->name, '.');
    if (dot) *dot = '\0';
}

/* The head: this rank's vocabulary rows of output.weight, or of the embedding when tied (copied
 * out before the embedding is prepared when sharded: a backend may repack it in place). */
static int bind_head(model_rank *m, sol_err *err) {
    const model_hparams *hp = &m->hp;
    const model_shard *sh = &m->sh;
    slice v = {sh->vocab0, sh->vocab, 0, hp->dim, 0};
    if (gguf_tensor_find(m->gguf, "output.weight"))
        return bind_weight(m, "output.weight", hp->dim, hp->n_vocab, &v, &m->output, err);
    m->hp.tied_output = 1;
    if (sh->n == 1) return 0; /* the embedding itself, once it is bound */
    v.copy = 1;
    return bind_weight(m, "token_embd.weight", hp->dim, hp->n_vocab, &v, &m->output, err);
}

static int bind_all(model_rank *m, sol_err *err) {
    const model_hparams *hp = &m->hp;
    int rc;
    if ((rc = bind_head(m, err)) ||
        (rc = bind_weight(m, "token_embd.weight", hp->dim, hp->n_vocab, NULL, &m->tok_embd, err)))
        return rc;
    if (m->hp.tied_output && m->sh.n == 1) m->output = m->tok_embd;
    m->hp.weight_type = m->tok_embd.type;
    if ((rc = bind_norm(m, "output_norm.weight", hp->dim, &m->output_norm, err))) return rc;
    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    if (!m->layers) return sol_err_set(err, -ENOMEM, "out of memory for layer table");
    for (int l = 0; l < hp->n_layers; l++)
        if ((rc = bind_layer(m, l, err))) return rc;
    if (hp->n_layers > 0) m->hp.weight_type = m->layers[0].wq.type;
    return 0;
}

model_rank *rank_load(const char *path, int gguf_flags, sol_backend *be, int rank, int n,
                      sol_tp_comm *comm, sol_err *err) {
    model_rank *m = calloc(1, sizeof *m);
    if (!m) {
        sol_err_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    m->be = be;
    m->gguf = gguf_open(path, gguf_flags, err);
    if (!m->gguf || load_hparams(m, err) || plan_shard(m, rank, n, comm, err) || bind_all(m, err)) {
        rank_free(m);
        return NULL;
    }
    set_name(m, path);
    return m;
}

static void scratch_free(model_rank *m) {
    model_scratch *s = &m->s;
    float **bufs[] = {&s->x,   &s->xb, &s->xb2,    &s->q,        &s->att, &s->k,  &s->v,   &s->hb,
                      &s->hb2, &s->xl, &s->logits, &s->r_logits, &s->ex,  &s->eh, &s->eh2, &s->ey};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (*bufs[i]) sol_buf_free(m->be, *bufs[i]);
        *bufs[i] = NULL;
    }
    free(s->h_logits);
    free(s->h_w);
    free(s->h_rows);
    free(s->h_pos);
    free(s->h_count);
    s->h_logits = s->h_w = NULL;
    s->h_rows = s->h_pos = s->h_count = NULL;
    s->cap_tokens = s->cap_logits = 0;
}

/* A mixture of experts' scratch for n tokens (none for a dense model): the router's logits on
 * the backend and the host, and the n*k rows each token's chosen experts read and write. */
static int moe_scratch(model_rank *m, size_t n) {
    const model_hparams *hp = &m->hp;
    model_scratch *s = &m->s;
    if (!hp->n_expert) return 0;
    size_t nk = n * (size_t)hp->n_expert_used, f = sizeof(float), ne = (size_t)hp->n_expert;
    s->r_logits = sol_buf_alloc(m->be, n * ne * f);
    s->ex = sol_buf_alloc(m->be, nk * (size_t)hp->dim * f);
    s->ey = sol_buf_alloc(m->be, nk * (size_t)hp->dim * f);
    s->eh = sol_buf_alloc(m->be, nk * (size_t)m->sh.ffn_exp * f);
    s->eh2 = sol_buf_alloc(m->be, nk * (size_t)m->sh.ffn_exp * f);
    s->h_logits = malloc(n * ne * f);
    s->h_w = malloc(nk * f);
    s->h_rows = malloc(nk * sizeof(int32_t));
    s->h_pos = malloc(nk * sizeof(int32_t));
    s->h_count = malloc(ne * sizeof(int32_t));
    return s->r_logits && s->ex && s->ey && s->eh && s->eh2 && s->h_logits && s->h_w && s->h_rows &&
                   s->h_pos && s->h_count
               ? 0
               : -ENOMEM;
}

int rank_reserve(model_rank *m, int max_tokens, int max_logits, sol_err *err) {
    if (max_tokens <= m->s.cap_tokens && max_logits <= m->s.cap_logits) return 0;
    if (max_tokens < m->s.cap_tokens) max_tokens = m->s.cap_tokens;
    if (max_logits < m->s.cap_logits) max_logits = m->s.cap_logits;
    if (max_tokens < 1 || max_logits < 1)
        return sol_err_set(err, -EINVAL, "model_reserve: bad sizes %d/%d", max_tokens, max_logits);
    scratch_free(m);
    const model_hparams *hp = &m->hp;
    const model_shard *sh = &m->sh;
    size_t n = (size_t)max_tokens, f = sizeof(float), kv_dim = (size_t)sh->kv_dim;
    sol_backend *be = m->be;
    model_scratch *s = &m->s;
    s->x = sol_buf_alloc(be, n * hp->dim * f);
    s->xb = sol_buf_alloc(be, n * hp->dim * f);
    s->xb2 = sol_buf_alloc(be, n * hp->dim * f);
    s->q = sol_buf_alloc(be, n * sh->q_dim * f);
    s->att = sol_buf_alloc(be, n * sh->q_dim * f);
    s->k = sol_buf_alloc(be, n * kv_dim * f);
    s->v = sol_buf_alloc(be, n * kv_dim * f);
    size_t ffn = sh->ffn > 0 ? (size_t)sh->ffn : 1; /* a mixture may have no dense width */
    s->hb = sol_buf_alloc(be, n * ffn * f);
    s->hb2 = sol_buf_alloc(be, n * ffn * f);
    s->xl = sol_buf_alloc(be, (size_t)max_logits * hp->dim * f);
    s->logits = sol_buf_alloc(be, (size_t)max_logits * sh->vocab * f);
    if (!s->x || !s->xb || !s->xb2 || !s->q || !s->att || !s->k || !s->v || !s->hb || !s->hb2 ||
        !s->xl || !s->logits || moe_scratch(m, n)) {
        scratch_free(m);
        return sol_err_set(err, -ENOMEM,
                           "out of %s memory for activations of %d tokens (%.1f MiB): lower "
                           "worker.scheduler.max_batched_tokens",
                           sol_backend_name(be), max_tokens,
                           (double)(n * (3 * hp->dim + 2 * sh->q_dim + 2 * kv_dim + 2 * sh->ffn) +
                                    (size_t)max_logits * (hp->dim + sh->vocab)) *
                               f / 1048576.0);
    }
    s->cap_tokens = max_tokens;
    s->cap_logits = max_logits;
    int64_t max_dim = sh->ffn > sh->vocab ? sh->ffn : sh->vocab;
    if (max_dim < sh->ffn_exp) max_dim = sh->ffn_exp;
    if (max_dim < hp->n_expert) max_dim = hp->n_expert;
    if (max_dim < hp->dim) max_dim = hp->dim;
    if (max_dim < sh->q_dim) max_dim = sh->q_dim;
    if (sol_reserve(be, max_tokens, max_dim))
        return sol_err_set(err, -ENOMEM, "backend scratch: %s", be->err.msg);
    return 0;
}

void rank_free(model_rank *m) {
    if (!m) return;
    if (m->be) scratch_free(m);
    for (int i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    for (int l = 0; m->layers && l < m->hp.n_layers; l++) {
        free(m->layers[l].e_gate);
        free(m->layers[l].e_up);
        free(m->layers[l].e_down);
    }
    free(m->layers);
    free(m->swa);
    gguf_close(m->gguf);
    free(m);
}
