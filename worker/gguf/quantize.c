/* quantize: tensor type policy, row conversion and metadata copying (see quantize.h). */
#include "quantize.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The --type names quant_policy_parse takes, for its messages. */
static const char k_policy_names[] = "q4_0, q8_0, q4_k_m, q5_k_m, q6_k or mxfp4_moe";

int quant_policy_init(quant_policy *p, sol_dtype base, sol_err *err) {
    memset(p, 0, sizeof *p);
    if (base != SOL_DT_Q4_0 && base != SOL_DT_Q8_0 && base != SOL_DT_Q6_K)
        return sol_err_set(err, -EINVAL, "--type: expected %s, found %s", k_policy_names,
                           sol_dtype_known(base) ? sol_dtype_name(base) : "an unknown type");
    p->base = base;
    p->mixed = 1;
    p->file_type = quant_file_type(base);
    return 0;
}

int quant_policy_parse(quant_policy *p, const char *name, sol_err *err) {
    if (!strcmp(name, "q4_k_m") || !strcmp(name, "q5_k_m")) {
        memset(p, 0, sizeof *p);
        p->base = name[1] == '4' ? SOL_DT_Q4_K : SOL_DT_Q5_K;
        p->k_mix = 1;
        p->file_type = name[1] == '4' ? 15 : 17; /* LLAMA_FTYPE_MOSTLY_Q4_K_M / _Q5_K_M */
        return 0;
    }
    if (!strcmp(name, "mxfp4_moe")) {
        memset(p, 0, sizeof *p);
        p->base = SOL_DT_Q8_0;
        p->expert_type = SOL_DT_MXFP4;
        p->file_type = 38; /* LLAMA_FTYPE_MOSTLY_MXFP4_MOE */
        return 0;
    }
    int t = sol_dtype_parse(name);
    if (t < 0 || (t != SOL_DT_Q4_0 && t != SOL_DT_Q8_0 && t != SOL_DT_Q6_K))
        return sol_err_set(err, -EINVAL, "--type: expected %s, found '%s'", k_policy_names, name);
    return quant_policy_init(p, (sol_dtype)t, err);
}

int quant_policy_add_keep(quant_policy *p, const char *spec, sol_err *err) {
    const char *eq = strrchr(spec, '=');
    if (!eq || eq == spec || !eq[1])
        return sol_err_set(err, -EINVAL, "--keep: expected PATTERN=TYPE, found '%s'", spec);
    size_t len = (size_t)(eq - spec);
    if (len >= QUANT_MAX_PATTERN)
        return sol_err_set(err, -EINVAL, "--keep: pattern longer than %d bytes in '%s'",
                           QUANT_MAX_PATTERN - 1, spec);
    int t = sol_dtype_parse(eq + 1);
    if (t != SOL_DT_F32 && t != SOL_DT_F16 && t != SOL_DT_BF16 && t != SOL_DT_Q8_0 &&
        t != SOL_DT_Q4_0 && t != SOL_DT_Q4_K && t != SOL_DT_Q5_K && t != SOL_DT_Q6_K &&
        t != SOL_DT_MXFP4)
        return sol_err_set(err, -EINVAL,
                           "--keep %s: unknown type '%s' (expected f32, f16, bf16, q8_0, q4_0, "
                           "q4_k, q5_k, q6_k or mxfp4)",
                           spec, eq + 1);
    if (p->n_keep == QUANT_MAX_KEEP)
        return sol_err_set(err, -EINVAL, "--keep: at most %d rules", QUANT_MAX_KEEP);
    quant_rule *r = &p->keep[p->n_keep++];
    memcpy(r->pattern, spec, len);
    r->pattern[len] = 0;
    r->type = (sol_dtype)t;
    r->hits = 0;
    return 0;
}

int quant_pattern_match(const char *pattern, const char *name) {
    if (strpbrk(pattern, "*?[")) return fnmatch(pattern, name, 0) == 0;
    return strstr(name, pattern) != NULL;
}

static int is_head_or_embd(const char *name) {
    return strncmp(name, "token_embd.", 11) == 0 || strncmp(name, "output.", 7) == 0;
}

/* llama.cpp's "use more bits" layers of the K mixes: the first and last eighth, every third
 * layer between. */
static int more_bits_layer(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* The K mixes' choice for a matrix (see quant_policy.k_mix). */
static sol_dtype k_mix_type(const quant_policy *p, const char *name) {
    if (!strncmp(name, "output.", 7) || (p->tied && !strncmp(name, "token_embd.", 11)))
        return SOL_DT_Q6_K;
    int layer = -1, at = 0;
    if (sscanf(name, "blk.%d.%n", &layer, &at) != 1 || at == 0 || layer < 0) return p->base;
    const char *s = name + at;
    /* llama.cpp gives an 8-expert model (Mixtral 8x7B's shape) Q8_0 attention k and v */
    if (p->n_expert == 8 && (!strcmp(s, "attn_k.weight") || !strcmp(s, "attn_v.weight")))
        return SOL_DT_Q8_0;
    if (p->n_expert == 8 && p->base == SOL_DT_Q4_K && !strcmp(s, "attn_output.weight"))
        return SOL_DT_Q5_K; /* and Q5_K attn_output in its Q4_K_M */
    if ((!strcmp(s, "attn_v.weight") || !strcmp(s, "ffn_down.weight") ||
         !strcmp(s, "ffn_down_exps.weight")) &&
        more_bits_layer(layer, p->n_layers))
        return SOL_DT_Q6_K;
    return p->base;
}

sol_dtype quant_choose(quant_policy *p, const gguf_tensor *t) {
    sol_dtype want = p->base;
    int decided = 0;
    for (int i = 0; i < p->n_keep && !decided; i++)
        if (quant_pattern_match(p->keep[i].pattern, t->name)) {
            want = p->keep[i].type;
            p->keep[i].hits++;
            decided = 1;
        }
    /* vectors, biases (gpt-oss's experts' are 2-D) and a mixture of experts' router stay F32
     * (llama.cpp quantizes only tensors named *weight, and never a router) */
    size_t len = strlen(t->name);
    int weight = len >= 6 && !strcmp(t->name + len - 6, "weight");
    if (!decided && (t->n_dims < 2 || !weight || strstr(t->name, "ffn_gate_inp.weight")))
        want = SOL_DT_F32;
    else if (!decided && p->expert_type && t->n_dims == 3 && t->ne[2] > 1)
        want = p->expert_type;
    else if (!decided && p->mixed && p->base == SOL_DT_Q4_0 && is_head_or_embd(t->name))
        want = SOL_DT_Q8_0;
    else if (!decided && p->k_mix)
        want = k_mix_type(p, t->name);
    if (t->ne[0] % (int64_t)sol_dtype_block_elems(want))
        want = t->ne[0] % 32 == 0 ? SOL_DT_Q8_0 : SOL_DT_F16;
    return want;
}

uint32_t quant_file_type(sol_dtype t) {
    switch (t) {
    case SOL_DT_F16:
        return 1;
    case SOL_DT_Q4_0:
        return 2;
    case SOL_DT_Q8_0:
        return 7;
    case SOL_DT_Q6_K:
        return 18;
    case SOL_DT_BF16:
        return 32;
    default:
        return 0;
    }
}

int quant_convert_rows(const gguf_tensor *t, sol_dtype dst_type, int64_t row0, int64_t n, void *dst,
                       float *tmp, double *sq_err, sol_err *err) {
    int64_t ne0 = t->ne[0];
    size_t src_rb = sol_dtype_row_bytes(t->type, ne0), dst_rb = sol_dtype_row_bytes(dst_type, ne0);
    if (!src_rb || !dst_rb)
        return sol_err_set(err, -EINVAL, "tensor %s: rows of %lld elements do not fit %s -> %s",
                           t->name, (long long)ne0, sol_dtype_name(t->type),
                           sol_dtype_name(dst_type));
    float *back = tmp + ne0;
    for (int64_t r = 0; r < n; r++) {
        const uint8_t *src = (const uint8_t *)t->data + (size_t)(row0 + r) * src_rb;
        uint8_t *out = (uint8_t *)dst + (size_t)r * dst_rb;
        if (t->type == dst_type) {
            memcpy(out, src, dst_rb); /* exact: no rounding through floats */
            continue;
        }
        sol_dequantize_row(t->type, src, tmp, ne0);
        if (sol_quantize_row(dst_type, tmp, out, ne0))
            return sol_err_set(err, -EINVAL, "tensor %s: cannot convert to %s", t->name,
                               sol_dtype_name(dst_type));
        if (!sq_err) continue;
        sol_dequantize_row(dst_type, out, back, ne0);
        double s = 0;
        for (int64_t i = 0; i < ne0; i++) {
            double d = (double)back[i] - (double)tmp[i];
            s += d * d;
        }
        *sq_err += s;
    }
    return 0;
}

/* GGUF encoding of an array value (element type, count, elements), for nested arrays. */
static size_t arr_encode(const gguf_arr *a, uint8_t *buf) {
    size_t o = 0;
    uint32_t et = (uint32_t)a->type;
    uint64_t n = a->n;
    if (buf) memcpy(buf + o, &et, 4), memcpy(buf + o + 4, &n, 8);
    o += 12;
    for (uint64_t i = 0; i < n; i++) {
        if (a->type == GGUF_T_STR) {
            if (buf) memcpy(buf + o, &a->lens[i], 8), memcpy(buf + o + 8, a->strs[i], a->lens[i]);
            o += 8 + a->lens[i];
        } else if (a->type == GGUF_T_ARR) {
            o += arr_encode(&a->arrs[i], buf ? buf + o : NULL);
        } else {
            size_t es = gguf_vtype_size(a->type);
            if (buf) memcpy(buf + o, (const uint8_t *)a->data + i * es, es);
            o += es;
        }
    }
    return o;
}

static int copy_arr(gguf_writer *w, const gguf_kv *kv, sol_err *err) {
    const gguf_arr *a = &kv->arr;
    if (a->type == GGUF_T_STR) return gguf_writer_add_str_arr(w, kv->key, a->strs, a->n, err);
    if (a->type != GGUF_T_ARR) return gguf_writer_add_arr(w, kv->key, a->type, a->data, a->n, err);
    size_t len = arr_encode(a, NULL);
    uint8_t *buf = malloc(len);
    if (!buf) return sol_err_set(err, -ENOMEM, "out of memory copying %s", kv->key);
    arr_encode(a, buf);
    int rc = gguf_writer_add_raw(w, kv->key, GGUF_T_ARR, buf, len, err);
    free(buf);
    return rc;
}

int quant_copy_kv(gguf_writer *w, const gguf_kv *kv, sol_err *err) {
    const char *k = kv->key;
    switch (kv->type) {
    case GGUF_T_U8:
        return gguf_writer_add_u8(w, k, (uint8_t)kv->u, err);
    case GGUF_T_I8:
        return gguf_writer_add_i8(w, k, (int8_t)kv->i, err);
    case GGUF_T_U16:
        return gguf_writer_add_u16(w, k, (uint16_t)kv->u, err);
    case GGUF_T_I16:
        return gguf_writer_add_i16(w, k, (int16_t)kv->i, err);
    case GGUF_T_U32:
        return gguf_writer_add_u32(w, k, (uint32_t)kv->u, err);
    case GGUF_T_I32:
        return gguf_writer_add_i32(w, k, (int32_t)kv->i, err);
    case GGUF_T_U64:
        return gguf_writer_add_u64(w, k, kv->u, err);
    case GGUF_T_I64:
        return gguf_writer_add_i64(w, k, kv->i, err);
    case GGUF_T_F32:
        return gguf_writer_add_f32(w, k, (float)kv->f, err);
    case GGUF_T_F64:
        return gguf_writer_add_f64(w, k, kv->f, err);
    case GGUF_T_BOOL:
        return gguf_writer_add_bool(w, k, (int)kv->u, err);
    case GGUF_T_STR: {
        uint64_t n = kv->str_len + 8;
        uint8_t *buf = malloc(n);
        if (!buf) return sol_err_set(err, -ENOMEM, "out of memory copying %s", k);
        memcpy(buf, &kv->str_len, 8);
        memcpy(buf + 8, kv->str, kv->str_len);
        int rc = gguf_writer_add_raw(w, k, GGUF_T_STR, buf, n, err);
        free(buf);
        return rc;
    }
    case GGUF_T_ARR:
        return copy_arr(w, kv, err);
    default:
        return sol_err_set(err, -EINVAL, "metadata %s: unknown value type %d", k, kv->type);
    }
}
