/* model: the decoder forward pass. Reads like the math (llama2.c's shape): embed, then per layer
 * attention and SwiGLU FFN with pre-RMSNorm and residuals, then the final norm and the head; the
 * architecture's description (arch.h) adds q/k/v biases, q/k norms and the RoPE pairing.
 * All activation buffers live in `model_scratch`, sized up front. */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "log.h"

typedef struct layer_weights {
    const float *attn_norm, *ffn_norm;
    const float *attn_post_norm, *ffn_post_norm; /* ARCH_POST_NORMS */
    const float *bq, *bk, *bv;                   /* ARCH_QKV_BIAS */
    const float *q_norm, *k_norm;                /* ARCH_QK_NORM: head_dim each */
    sol_weight wq, wk, wv, wo;
    sol_weight w_gate, w_up, w_down;
} layer_weights;

typedef struct model_scratch {
    int cap_tokens, cap_logits;
    float *x, *xb, *xb2; /* n x dim */
    float *q, *att;      /* n x q_dim (heads x head_dim) */
    float *k, *v;        /* n x kv_dim */
    float *hb, *hb2;     /* n x ffn */
    float *xl;           /* n_logits x dim: rows that want logits */
    float *logits;       /* n_logits x vocab, on the backend */
} model_scratch;

struct model {
    gguf_file *gguf;
    sol_backend *be;
    model_hparams hp;
    char name[128];
    sol_weight tok_embd, output;
    const float *output_norm;
    layer_weights *layers;
    uint8_t *swa; /* per layer: 1 = sliding-window attention (ARCH_SWA), NULL = none */
    model_scratch s;
};

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

/* rope.scaling.type: absent/none, llama3 (Llama 3.1's frequency bands) or linear (positions
 * divided by rope.scaling.factor; Gemma 3's global layers). Other types are refused by name. */
static int load_rope_scaling(model *m, const char *arch, sol_err *err) {
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
    if (strcmp(stype, "llama3") != 0)
        return sol_err_set(err, -ENOTSUP,
                           "%s: key %s: RoPE scaling \"%s\" is not supported (expected none, "
                           "linear or llama3)",
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
static int load_swa_layers(model *m, const char *arch, sol_err *err) {
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
static int load_swa(model *m, const char *arch, sol_err *err) {
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
static int load_gemma_extras(model *m, const char *arch, sol_err *err) {
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

static int load_hparams(model *m, sol_err *err) {
    const gguf_file *g = m->gguf;
    const char *arch = NULL;
    int rc = gguf_get_str(g, "general.architecture", &arch, err);
    if (rc == -ENOENT)
        return sol_err_set(err, -EINVAL, "%s: missing required key general.architecture",
                           gguf_path(g));
    if (rc) return rc;
    model_hparams *hp = &m->hp;
    if (!(hp->arch = model_arch_find(arch)))
        return sol_err_set(err, -ENOTSUP,
                           "%s: key general.architecture: \"%s\" is not supported (expected one "
                           "of %s)",
                           gguf_path(g), arch, model_arch_names());
    if ((rc = get_u32_req(g, arch, "embedding_length", &hp->dim, err)) ||
        (rc = get_u32_req(g, arch, "block_count", &hp->n_layers, err)) ||
        (rc = get_u32_req(g, arch, "attention.head_count", &hp->n_heads, err)) ||
        (rc = get_u32_req(g, arch, "feed_forward_length", &hp->ffn, err)) ||
        (rc = get_u32_req(g, arch, "context_length", &hp->ctx_len, err)))
        return rc;
    char key[128];
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
     GGUF_TYPE_BIT(SOL_DT_Q6_K))

/* A 2-D weight [cols, rows] in GGUF terms (ne0 = cols). */
static int bind_weight(model *m, const char *name, int64_t cols, int64_t rows, sol_weight *w,
                       sol_err *err) {
    int rc;
    if ((rc = gguf_expect_tensor(m->gguf, name, 2, cols, rows, err))) return rc;
    if ((rc = gguf_expect_type(m->gguf, name, MODEL_WEIGHT_TYPES, err))) return rc;
    const gguf_tensor *t = gguf_tensor_find(m->gguf, name);
    w->type = t->type;
    w->rows = rows;
    w->cols = cols;
    w->data = t->data;
    w->row_bytes = sol_dtype_row_bytes(t->type, cols);
    if (w->row_bytes == 0)
        return sol_err_set(err, -EINVAL,
                           "%s: tensor %s: row of %lld elements is not a whole number of %s "
                           "blocks",
                           gguf_path(m->gguf), name, (long long)cols, sol_dtype_name(t->type));
    if ((rc = sol_weight_prepare(m->be, w)))
        return sol_err_set(err, rc, "%s: tensor %s: %s", gguf_path(m->gguf), name, m->be->err.msg);
    return 0;
}

static int bind_norm(model *m, const char *name, int64_t dim, const float **out, sol_err *err) {
    int rc;
    if ((rc = gguf_expect_tensor(m->gguf, name, 1, dim, 1, err))) return rc;
    if ((rc = gguf_expect_type(m->gguf, name, GGUF_TYPE_BIT(SOL_DT_F32), err))) return rc;
    /* As a 1 x dim weight, so a device backend uploads it like the matrices (the CPU backend
     * leaves F32 where it lies). */
    sol_weight w = {
        SOL_DT_F32, 1, dim, gguf_tensor_find(m->gguf, name)->data, (size_t)dim * sizeof(float), 0};
    if ((rc = sol_weight_prepare(m->be, &w)))
        return sol_err_set(err, rc, "%s: tensor %s: %s", gguf_path(m->gguf), name, m->be->err.msg);
    *out = w.data;
    return 0;
}

static int bind_layer(model *m, int l, sol_err *err) {
    const model_hparams *hp = &m->hp;
    layer_weights *L = &m->layers[l];
    int64_t kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim;
    char n[GGUF_MAX_NAME + 1];
    int rc;
#define W(suffix, cols, rows, dst)                                                                 \
    do {                                                                                           \
        snprintf(n, sizeof n, "blk.%d." suffix ".weight", l);                                      \
        if ((rc = bind_weight(m, n, cols, rows, dst, err))) return rc;                             \
    } while (0)
    W("attn_q", hp->dim, hp->q_dim, &L->wq);
    W("attn_k", hp->dim, kv_dim, &L->wk);
    W("attn_v", hp->dim, kv_dim, &L->wv);
    W("attn_output", hp->q_dim, hp->dim, &L->wo);
    W("ffn_gate", hp->dim, hp->ffn, &L->w_gate);
    W("ffn_up", hp->dim, hp->ffn, &L->w_up);
    W("ffn_down", hp->ffn, hp->dim, &L->w_down);
#undef W
#define V(suffix, len, dst)                                                                        \
    do {                                                                                           \
        snprintf(n, sizeof n, "blk.%d." suffix, l);                                                \
        if ((rc = bind_norm(m, n, len, dst, err))) return rc;                                      \
    } while (0)
    V("attn_norm.weight", hp->dim, &L->attn_norm);
    V("ffn_norm.weight", hp->dim, &L->ffn_norm);
    if (hp->arch->flags & ARCH_QKV_BIAS) {
        V("attn_q.bias", hp->q_dim, &L->bq);
        V("attn_k.bias", kv_dim, &L->bk);
        V("attn_v.bias", kv_dim, &L->bv);
    }
    if (hp->arch->flags & ARCH_QK_NORM) {
        V("attn_q_norm.weight", hp->head_dim, &L->q_norm);
        V("attn_k_norm.weight", hp->head_dim, &L->k_norm);
    }
    if (hp->arch->flags & ARCH_POST_NORMS) {
        V("post_attention_norm.weight", hp->dim, &L->attn_post_norm);
        V("post_ffw_norm.weight", hp->dim, &L->ffn_post_norm);
    }
#undef V
    return 0;
}

static void set_name(model *m, const char *path) {
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

static int bind_all(model *m, sol_err *err) {
    const model_hparams *hp = &m->hp;
    int rc;
    if ((rc = bind_weight(m, "token_embd.weight", hp->dim, hp->n_vocab, &m->tok_embd, err)))
        return rc;
    m->hp.weight_type = m->tok_embd.type;
    if (gguf_tensor_find(m->gguf, "output.weight")) {
        if ((rc = bind_weight(m, "output.weight", hp->dim, hp->n_vocab, &m->output, err)))
            return rc;
    } else {
        m->output = m->tok_embd; /* tied embeddings */
        m->hp.tied_output = 1;
    }
    if ((rc = bind_norm(m, "output_norm.weight", hp->dim, &m->output_norm, err))) return rc;
    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    if (!m->layers) return sol_err_set(err, -ENOMEM, "out of memory for layer table");
    for (int l = 0; l < hp->n_layers; l++)
        if ((rc = bind_layer(m, l, err))) return rc;
    if (hp->n_layers > 0) m->hp.weight_type = m->layers[0].wq.type;
    return 0;
}

model *model_load(const char *path, int gguf_flags, sol_backend *be, sol_err *err) {
    model *m = calloc(1, sizeof *m);
    if (!m) {
        sol_err_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    m->be = be;
    m->gguf = gguf_open(path, gguf_flags, err);
    if (!m->gguf || load_hparams(m, err) || bind_all(m, err)) {
        model_free(m);
        return NULL;
    }
    set_name(m, path);
    return m;
}

static void scratch_free(model *m) {
    model_scratch *s = &m->s;
    float **bufs[] = {&s->x, &s->xb, &s->xb2, &s->q,  &s->att,   &s->k,
                      &s->v, &s->hb, &s->hb2, &s->xl, &s->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (*bufs[i]) sol_buf_free(m->be, *bufs[i]);
        *bufs[i] = NULL;
    }
    s->cap_tokens = s->cap_logits = 0;
}

void model_free(model *m) {
    if (!m) return;
    if (m->be) scratch_free(m);
    free(m->layers);
    free(m->swa);
    gguf_close(m->gguf);
    free(m);
}

const model_hparams *model_get_hparams(const model *m) {
    return &m->hp;
}
const gguf_file *model_gguf(const model *m) {
    return m->gguf;
}
sol_backend *model_backend(const model *m) {
    return m->be;
}
const char *model_name(const model *m) {
    return m->name;
}

void model_describe(const model *m, char *buf, size_t cap) {
    int count[64] = {0};
    double params = 0;
    for (int i = 0; i < gguf_n_tensors(m->gguf); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->gguf, i);
        double n = 1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            n *= (double)t->ne[d];
        params += n;
        if ((unsigned)t->type < 64) count[t->type]++;
    }
    size_t used = (size_t)snprintf(buf, cap, "%s, %.2f B parameters, weights", m->hp.arch->name,
                                   params / 1e9);
    const char *sep = " ";
    for (int t = 0; t < 64 && used < cap; t++)
        if (count[t]) {
            used += (size_t)snprintf(buf + used, cap - used, "%s%s x %d", sep,
                                     sol_dtype_name((sol_dtype)t), count[t]);
            sep = " + ";
        }
    int local = 0;
    for (int l = 0; m->swa && l < m->hp.n_layers; l++)
        local += m->swa[l];
    if (m->hp.swa_window && used < cap)
        snprintf(buf + used, cap - used, "; sliding window %d on %d of %d layers", m->hp.swa_window,
                 local, m->hp.n_layers);
}

int model_reserve(model *m, int max_tokens, int max_logits, sol_err *err) {
    if (max_tokens <= m->s.cap_tokens && max_logits <= m->s.cap_logits) return 0;
    if (max_tokens < m->s.cap_tokens) max_tokens = m->s.cap_tokens;
    if (max_logits < m->s.cap_logits) max_logits = m->s.cap_logits;
    if (max_tokens < 1 || max_logits < 1)
        return sol_err_set(err, -EINVAL, "model_reserve: bad sizes %d/%d", max_tokens, max_logits);
    scratch_free(m);
    const model_hparams *hp = &m->hp;
    size_t n = (size_t)max_tokens, f = sizeof(float);
    size_t kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
    sol_backend *be = m->be;
    model_scratch *s = &m->s;
    s->x = sol_buf_alloc(be, n * hp->dim * f);
    s->xb = sol_buf_alloc(be, n * hp->dim * f);
    s->xb2 = sol_buf_alloc(be, n * hp->dim * f);
    s->q = sol_buf_alloc(be, n * hp->q_dim * f);
    s->att = sol_buf_alloc(be, n * hp->q_dim * f);
    s->k = sol_buf_alloc(be, n * kv_dim * f);
    s->v = sol_buf_alloc(be, n * kv_dim * f);
    s->hb = sol_buf_alloc(be, n * hp->ffn * f);
    s->hb2 = sol_buf_alloc(be, n * hp->ffn * f);
    s->xl = sol_buf_alloc(be, (size_t)max_logits * hp->dim * f);
    s->logits = sol_buf_alloc(be, (size_t)max_logits * hp->n_vocab * f);
    if (!s->x || !s->xb || !s->xb2 || !s->q || !s->att || !s->k || !s->v || !s->hb || !s->hb2 ||
        !s->xl || !s->logits) {
        scratch_free(m);
        return sol_err_set(err, -ENOMEM,
                           "out of %s memory for activations of %d tokens (%.1f MiB): lower "
                           "worker.scheduler.max_batched_tokens",
                           sol_backend_name(be), max_tokens,
                           (double)(n * (3 * hp->dim + 2 * hp->q_dim + 2 * kv_dim + 2 * hp->ffn) +
                                    (size_t)max_logits * (hp->dim + hp->n_vocab)) *
                               f / 1048576.0);
    }
    s->cap_tokens = max_tokens;
    s->cap_logits = max_logits;
    int64_t max_dim = hp->ffn > hp->n_vocab ? hp->ffn : hp->n_vocab;
    if (max_dim < hp->dim) max_dim = hp->dim;
    if (max_dim < hp->q_dim) max_dim = hp->q_dim;
    if (sol_reserve(be, max_tokens, max_dim))
        return sol_err_set(err, -ENOMEM, "backend scratch: %s", be->err.msg);
    return 0;
}

sol_kv *model_kv_new(model *m, int num_blocks, int block_size, sol_dtype dtype, sol_err *err) {
    sol_kv *kv = sol_kv_alloc(m->be, m->hp.n_layers, num_blocks, block_size, m->hp.n_kv_heads,
                              m->hp.head_dim, dtype);
    if (!kv) sol_err_set(err, -ENOMEM, "KV cache: %s", m->be->err.msg);
    return kv;
}

void model_kv_free(model *m, sol_kv *kv) {
    if (kv) sol_kv_free(m->be, kv);
}

size_t model_kv_bytes_per_token(const model *m, sol_dtype dtype) {
    size_t elem = dtype == SOL_DT_F32 ? 4 : 2;
    return 2 * (size_t)m->hp.n_layers * m->hp.n_kv_heads * m->hp.head_dim * elem;
}

/* ---- forward ---------------------------------------------------------------------------- */

/* Largest decode/verify step recorded as a CUDA graph (vLLM captures up to 512 by default; Sol's
 * steps are smaller: max_num_seqs x (1 + speculative k)). */
enum { MODEL_GRAPH_MAX_TOKENS = 256 };

/* y[t] += bias for each of n rows of len (the q/k/v biases of ARCH_QKV_BIAS). */
static int add_rows(sol_backend *be, float *y, const float *bias, int n, int len) {
    int rc = 0;
    for (int t = 0; t < n && !rc; t++)
        rc = sol_add(be, y + (size_t)t * len, bias, y + (size_t)t * len, len);
    return rc;
}

/* q, k and v of the batch: projections, then the architecture's biases and per-head norms. */
static int qkv(model *m, const layer_weights *L, int n) {
    const model_hparams *hp = &m->hp;
    model_scratch *s = &m->s;
    sol_backend *be = m->be;
    int kv_dim = hp->n_kv_heads * hp->head_dim, rc;
    if ((rc = sol_matmul_many(be, (const sol_weight *[]){&L->wq, &L->wk, &L->wv},
                              (float *[]){s->q, s->k, s->v}, 3, s->xb, n)))
        return rc;
    if (L->bq && ((rc = add_rows(be, s->q, L->bq, n, hp->q_dim)) ||
                  (rc = add_rows(be, s->k, L->bk, n, kv_dim)) ||
                  (rc = add_rows(be, s->v, L->bv, n, kv_dim))))
        return rc;
    if (L->q_norm &&
        ((rc = sol_rmsnorm(be, s->q, L->q_norm, s->q, n * hp->n_heads, hp->head_dim, hp->eps)) ||
         (rc = sol_rmsnorm(be, s->k, L->k_norm, s->k, n * hp->n_kv_heads, hp->head_dim, hp->eps))))
        return rc;
    return 0;
}

/* x += post_norm(xb2) (ARCH_POST_NORMS), else x += xb2: a block's output joins the stream. */
static int residual(model *m, const float *post_norm, int n) {
    const model_hparams *hp = &m->hp;
    model_scratch *s = &m->s;
    int rc;
    if (post_norm && (rc = sol_rmsnorm(m->be, s->xb2, post_norm, s->xb2, n, hp->dim, hp->eps)))
        return rc;
    return sol_add(m->be, s->x, s->xb2, s->x, (int64_t)n * hp->dim);
}

/* Attention block of layer l: x += Wo · attn(rope(Wq·norm(x)), rope(Wk·norm(x)), Wv·norm(x)). */
static int attention(model *m, sol_kv *kv, int l, const model_batch *b) {
    const model_hparams *hp = &m->hp;
    const layer_weights *L = &m->layers[l];
    model_scratch *s = &m->s;
    sol_backend *be = m->be;
    int n = b->n, rc, slides = m->swa && m->swa[l];
    const sol_rope_params *rope = slides ? &hp->rope_swa : &hp->rope;
    if ((rc = sol_rmsnorm(be, s->x, L->attn_norm, s->xb, n, hp->dim, hp->eps)) ||
        (rc = qkv(m, L, n)) ||
        (rc = sol_rope(be, s->q, b->pos, n, hp->n_heads, hp->head_dim, rope)) ||
        (rc = sol_rope(be, s->k, b->pos, n, hp->n_kv_heads, hp->head_dim, rope)) ||
        (rc = sol_kv_write(be, kv, l, s->k, s->v, b->slots, n)))
        return rc;
    if ((rc = sol_paged_attention_swa(be, kv, l, s->q, s->att, n, hp->n_heads, hp->n_kv_heads,
                                      hp->head_dim, hp->attn_scale, slides ? hp->swa_window : 0,
                                      b->attn)) ||
        (rc = sol_matmul(be, &L->wo, s->att, s->xb2, n)) ||
        (rc = sol_allreduce(be, s->xb2, (int64_t)n * hp->dim)))
        return rc;
    return residual(m, L->attn_post_norm, n);
}

/* Gated FFN: x += W_down · (act(W_gate·norm(x)) * W_up·norm(x)), act = SiLU or GELU (Gemma). */
static int feed_forward(model *m, int l, int n) {
    const model_hparams *hp = &m->hp;
    const layer_weights *L = &m->layers[l];
    model_scratch *s = &m->s;
    sol_backend *be = m->be;
    int rc;
    if ((rc = sol_rmsnorm(be, s->x, L->ffn_norm, s->xb, n, hp->dim, hp->eps)) ||
        (rc = sol_matmul_many(be, (const sol_weight *[]){&L->w_gate, &L->w_up},
                              (float *[]){s->hb, s->hb2}, 2, s->xb, n)) ||
        (rc = (hp->arch->flags & ARCH_GELU)
                  ? sol_gelu_mul(be, s->hb, s->hb2, s->hb, (int64_t)n * hp->ffn)
                  : sol_silu_mul(be, s->hb, s->hb2, s->hb, (int64_t)n * hp->ffn)) ||
        (rc = sol_matmul(be, &L->w_down, s->hb, s->xb2, n)) ||
        (rc = sol_allreduce(be, s->xb2, (int64_t)n * hp->dim)))
        return rc;
    return residual(m, L->ffn_post_norm, n);
}

static int check_batch(const model *m, const model_batch *b, sol_err *err) {
    if (b->n < 1 || !b->tokens || !b->pos || !b->slots || !b->attn)
        return sol_err_set(err, -EINVAL, "model_forward: empty or incomplete batch");
    if (b->n_logits < 0 || b->n_logits > b->n || (b->n_logits && !b->logit_rows))
        return sol_err_set(err, -EINVAL, "model_forward: bad logit rows (%d of %d)", b->n_logits,
                           b->n);
    for (int t = 0; t < b->n; t++) {
        if (b->tokens[t] < 0 || b->tokens[t] >= m->hp.n_vocab)
            return sol_err_set(err, -EINVAL, "token id %d is outside the vocabulary (0..%d)",
                               b->tokens[t], m->hp.n_vocab - 1);
        if (b->pos[t] < 0 || b->attn[t].n_ctx < 1 || b->attn[t].n_ctx > b->pos[t] + 1)
            return sol_err_set(err, -EINVAL, "token %d: position %d with n_ctx %d", t, b->pos[t],
                               b->attn[t].n_ctx);
    }
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n)
            return sol_err_set(err, -EINVAL, "logit row %d is outside the batch of %d",
                               b->logit_rows[i], b->n);
    return 0;
}

static int head(model *m, const model_batch *b, float *logits) {
    const model_hparams *hp = &m->hp;
    model_scratch *s = &m->s;
    sol_backend *be = m->be;
    /* Gather first: the head is the biggest matmul, and only the rows that sample need it. */
    int rc;
    if ((rc = sol_get_rows(be, s->x, hp->dim, b->logit_rows, b->n_logits, b->n, s->xl)) ||
        (rc = sol_rmsnorm(be, s->xl, m->output_norm, s->xl, b->n_logits, hp->dim, hp->eps)) ||
        (rc = sol_matmul(be, &m->output, s->xl, s->logits, b->n_logits)) ||
        (rc = sol_synchronize(be)))
        return rc;
    size_t count = (size_t)b->n_logits * hp->n_vocab;
    if ((rc = sol_download(be, logits, s->logits, count * sizeof(float)))) return rc;
    if (hp->softcap > 0.0f) /* on the host: a few vocab rows, after the download */
        for (size_t i = 0; i < count; i++)
            logits[i] = hp->softcap * tanhf(logits[i] / hp->softcap);
    return 0;
}

int model_forward(model *m, sol_kv *kv, const model_batch *b, float *logits, sol_err *err) {
    int rc = check_batch(m, b, err);
    if (rc) return rc;
    if ((rc = model_reserve(m, b->n, b->n_logits > 0 ? b->n_logits : 1, err))) return rc;
    sol_backend *be = m->be;
    /* Decode and verify steps (every row samples, few rows) may be replayed as a CUDA graph
     * keyed by their size; prefill chunks run eagerly. */
    int key = b->n_logits == b->n && b->n <= MODEL_GRAPH_MAX_TOKENS ? b->n : 0;
    if ((rc = sol_step_begin(be, key))) goto fail;
    if ((rc = sol_embed(be, &m->tok_embd, b->tokens, b->n, m->s.x))) goto fail;
    if ((m->hp.arch->flags & ARCH_EMBD_SCALE) &&
        (rc = sol_scale(be, m->s.x, sqrtf((float)m->hp.dim), m->s.x, (int64_t)b->n * m->hp.dim)))
        goto fail;
    for (int l = 0; l < m->hp.n_layers; l++)
        if ((rc = attention(m, kv, l, b)) || (rc = feed_forward(m, l, b->n))) goto fail;
    if (b->n_logits > 0 && (rc = head(m, b, logits))) goto fail;
    if (b->n_logits == 0 && (rc = sol_synchronize(be))) goto fail;
    return 0;
fail:
    sol_err_set(err, rc, "forward pass: %s", be->err.msg);
    sol_synchronize(be); /* closes a graph capture the step left open */
    return rc;
}
