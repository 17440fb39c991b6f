/* sol-quantize: converts an F32/F16/BF16 GGUF to Q4_0 or Q8_0 (bit-compatible with ggml), with a
 * mixed-precision default and --keep rules, printing sizes and per-tensor RMSE vs the source. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "gguf.h"
#include "gguf_writer.h"
#include "quantize.h"

typedef struct {
    const gguf_file *g;
    sol_dtype *types; /* per tensor: the output type */
    double *sq_err;   /* per tensor: summed squared error */
    float *tmp;
    int last_pct;
} qjob;

static void usage(FILE *f) {
    fputs(
        "usage: sol-quantize IN.gguf OUT.gguf --type q4_0|q8_0|q4_k_m|q5_k_m|q6_k|mxfp4_moe\n"
        "                    [--keep PATTERN=TYPE ...] [--no-mixed] [--quiet]\n"
        "Converts the weights of an F32/F16/BF16 GGUF to ggml's quantized layouts.\n"
        "  --type T            q4_0, q8_0: every weight matrix (see --no-mixed);\n"
        "                      q4_k_m, q5_k_m: Q4_K / Q5_K with llama.cpp's mix (the head, and\n"
        "                      attn_v and ffn_down of the first and last eighth of the layers and\n"
        "                      every third between, get Q6_K); q6_k: Q6_K throughout;\n"
        "                      mxfp4_moe: a mixture's expert tensors MXFP4, the rest Q8_0\n"
        "                      (llama.cpp's MXFP4_MOE)\n"
        "  --keep PAT=TYPE     tensors whose name contains PAT (or matches the glob PAT) get\n"
        "                      TYPE (f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, mxfp4); first\n"
        "                      matching rule wins; a rule that matches no tensor is an error\n"
        "  --no-mixed          with q4_0, quantize token_embd and output to q4_0 as well\n"
        "                      (default: they stay q8_0)\n"
        "1-D tensors (norms) and a mixture's router (ffn_gate_inp) stay f32; a row length the\n"
        "type's block does not divide gets\n"
        "q8_0 (or f16). All metadata is copied; general.file_type is set.\n",
        f);
}

static int fill(void *ctx, int index, int64_t row0, int64_t n_rows, void *dst, sol_err *e) {
    qjob *j = ctx;
    return quant_convert_rows(gguf_tensor_at(j->g, index), j->types[index], row0, n_rows, dst,
                              j->tmp, &j->sq_err[index], e);
}

static void progress(void *ctx, uint64_t done, uint64_t total, int td, int nt) {
    qjob *j = ctx;
    int pct = total ? (int)(done * 100 / total) : 100;
    if (pct / 10 == j->last_pct / 10 && td != nt) return;
    j->last_pct = pct;
    fprintf(stderr, "\rsol-quantize: %3d%%  %d/%d tensors", pct, td, nt);
    if (td == nt && done >= total) fputc('\n', stderr);
}

/* Refuses quantized inputs and plans each tensor's type; every --keep rule must be used. */
static int plan(const gguf_file *g, quant_policy *p, qjob *j, int64_t *max_ne0, sol_err *e) {
    int n = gguf_n_tensors(g);
    *max_ne0 = 1;
    /* The K mixes need the layer count and whether the embeddings double as the head. */
    p->tied = gguf_tensor_find(g, "output.weight") == NULL;
    for (int i = 0; i < n; i++) {
        int l = -1;
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (sscanf(t->name, "blk.%d.", &l) == 1 && l + 1 > p->n_layers) p->n_layers = l + 1;
        if (t->n_dims == 3 && strstr(t->name, "_exps.")) p->n_expert = (int)t->ne[2];
    }
    for (int i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (t->type != SOL_DT_F32 && t->type != SOL_DT_F16 && t->type != SOL_DT_BF16)
            return sol_err_set(e, -EINVAL,
                               "%s: tensor %s is already %s; quantize from an F32, F16 or BF16 "
                               "file",
                               gguf_path(g), t->name, sol_dtype_name(t->type));
        j->types[i] = quant_choose(p, t);
        if (t->ne[0] > *max_ne0) *max_ne0 = t->ne[0];
    }
    for (int r = 0; r < p->n_keep; r++)
        if (!p->keep[r].hits)
            return sol_err_set(e, -EINVAL, "--keep %s=%s: the pattern matches no tensor in %s",
                               p->keep[r].pattern, sol_dtype_name(p->keep[r].type), gguf_path(g));
    return 0;
}

static int build(gguf_writer *w, const gguf_file *g, const quant_policy *p, qjob *j, sol_err *e) {
    int rc = gguf_writer_set_alignment(w, gguf_alignment(g), e);
    for (int i = 0; !rc && i < gguf_n_kv(g); i++) {
        const gguf_kv *kv = gguf_kv_at(g, i);
        if (!strcmp(kv->key, "general.file_type") || !strcmp(kv->key, "general.alignment"))
            continue;
        rc = quant_copy_kv(w, kv, e);
    }
    if (!rc) rc = gguf_writer_add_u32(w, "general.file_type", p->file_type, e);
    for (int i = 0; !rc && i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        rc =
            gguf_writer_add_tensor_fill(w, t->name, (int)t->n_dims, t->ne, j->types[i], fill, j, e);
    }
    return rc;
}

static void report(const gguf_file *g, const qjob *j, const gguf_writer *w, int quiet) {
    uint64_t in = 0;
    for (int i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        in += t->nbytes;
        int64_t ne = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        if (!quiet)
            fprintf(stderr, "  %-32s %-5s -> %-5s rmse %.3e\n", t->name, sol_dtype_name(t->type),
                    sol_dtype_name(j->types[i]), sqrt(j->sq_err[i] / (double)ne));
    }
    uint64_t out = gguf_writer_data_bytes(w);
    fprintf(stderr, "sol-quantize: tensor data %.2f MiB -> %.2f MiB (%.1f%%)\n",
            (double)in / (1 << 20), (double)out / (1 << 20), in ? 100.0 * out / in : 0.0);
}

static int quantize(const char *in, const char *out, quant_policy *p, int quiet, sol_err *e) {
    gguf_file *g = gguf_open(in, 0, e);
    if (!g) return e->code ? e->code : -EINVAL;
    int n = gguf_n_tensors(g);
    qjob j = {g, calloc((size_t)n + 1, sizeof(sol_dtype)), calloc((size_t)n + 1, sizeof(double)),
              NULL, -10};
    gguf_writer *w = gguf_writer_new();
    int64_t max_ne0 = 1;
    int rc = (!j.types || !j.sq_err || !w) ? sol_err_set(e, -ENOMEM, "out of memory") : 0;
    if (!rc) rc = plan(g, p, &j, &max_ne0, e);
    if (!rc && !(j.tmp = malloc(sizeof(float) * 2 * (size_t)max_ne0)))
        rc = sol_err_set(e, -ENOMEM, "out of memory");
    if (!rc) rc = build(w, g, p, &j, e);
    if (!rc) {
        if (!quiet) gguf_writer_set_progress(w, progress, &j);
        rc = gguf_writer_write_file(w, out, e);
    }
    if (!rc) report(g, &j, w, quiet);
    gguf_writer_free(w);
    free(j.types), free(j.sq_err), free(j.tmp);
    gguf_close(g);
    return rc;
}

typedef struct keep_list {
    const char *v[QUANT_MAX_KEEP + 1];
    int n;
} keep_list;

/* --keep PATTERN (repeatable); one past the policy's limit, so it names the limit. */
static int keep(const char *v, void *ctx, sol_err *err) {
    keep_list *k = ctx;
    if (k->n > QUANT_MAX_KEEP)
        return sol_err_set(err, -EINVAL, "--keep: at most %d patterns", QUANT_MAX_KEEP);
    k->v[k->n++] = v;
    return 0;
}

int main(int argc, char **argv) {
    const char *type = NULL;
    keep_list keeps = {{0}, 0};
    int no_mixed = 0, quiet = 0, help = 0;
    const sol_arg args[] = {
        {"--type", 't', SOL_ARG_STR, &type, 0, 0, 0, NULL, NULL, NULL},
        {"--keep", 'k', SOL_ARG_FN, NULL, 0, 0, 0, keep, &keeps, NULL},
        {"--no-mixed", 0, SOL_ARG_SWITCH, &no_mixed, 0, 0, 0, NULL, NULL, NULL},
        {"--quiet", 'q', SOL_ARG_SWITCH, &quiet, 0, 0, 0, NULL, NULL, NULL},
        {"--help", 'h', SOL_ARG_SWITCH, &help, 0, 0, 0, NULL, NULL, NULL},
    };
    sol_err e = {0};
    int npos = sol_args_parse(args, sizeof args / sizeof args[0], argc, argv, &e);
    if (npos < 0) {
        fprintf(stderr, "sol-quantize: %s\n", e.msg);
        return 2;
    }
    if (help) return usage(stdout), 0;
    if (npos != 2 || !type) {
        fprintf(stderr, "sol-quantize: need IN.gguf OUT.gguf and --type (try --help)\n");
        return 2;
    }
    int mixed = !no_mixed;
    quant_policy p;
    int rc = quant_policy_parse(&p, type, &e);
    if (!rc && !mixed && p.base != SOL_DT_Q4_0)
        rc = sol_err_set(&e, -EINVAL, "--no-mixed applies to --type q4_0 only, not %s", type);
    if (!rc) p.mixed = mixed;
    for (int i = 0; !rc && i < keeps.n; i++)
        rc = quant_policy_add_keep(&p, keeps.v[i], &e);
    if (!rc) rc = quantize(argv[1], argv[2], &p, quiet, &e);
    if (rc) {
        fprintf(stderr, "sol-quantize: %s\n", e.msg[0] ? e.msg : strerror(-rc));
        return 1;
    }
    return 0;
}
