/* quantize: the library half of sol-quantize - which type each tensor gets (mixed-precision
 * policy, --keep rules), row conversion with error accounting, and GGUF metadata copying. */
#ifndef SOL_QUANTIZE_H
#define SOL_QUANTIZE_H

#include <stdint.h>

#include "dtype.h"
#include "err.h"
#include "gguf.h"
#include "gguf_writer.h"

#define QUANT_MAX_KEEP 32
#define QUANT_MAX_PATTERN 64

typedef struct quant_rule {
    char pattern[QUANT_MAX_PATTERN]; /* glob when it has * ? or [, else a substring */
    sol_dtype type;
    int hits; /* tensors it decided (an unused rule is an error) */
} quant_rule;

typedef struct quant_policy {
    sol_dtype base; /* the matrices' type: Q4_0, Q8_0, Q4_K, Q5_K or Q6_K */
    int mixed;      /* 1: token_embd and output stay Q8_0 when base is Q4_0 (the default) */
    /* K-quant mixes (q4_k_m, q5_k_m), as llama.cpp's: the head (or the tied embeddings) and the
     * attn_v / ffn_down of the "more bits" layers (the first and last eighth of the layers and
     * every third between) get Q6_K (ffn_down_exps too); with 8 experts attn_k / attn_v get
     * Q8_0 and, in Q4_K_M, attn_output Q5_K. */
    int k_mix;
    int n_layers; /* for k_mix: <arch>.block_count of the input */
    int tied;     /* the input has no output.weight: token_embd is also the head */
    int n_expert; /* for k_mix: the experts per layer (ffn_gate_exps' third dimension) */
    /* mxfp4_moe (llama.cpp's MXFP4_MOE, file type 38): a mixture's 3-D expert tensors get MXFP4,
     * every other matrix the base Q8_0; 0 otherwise */
    sol_dtype expert_type;
    uint32_t file_type; /* general.file_type written for the whole model */
    quant_rule keep[QUANT_MAX_KEEP];
    int n_keep;
} quant_policy;

/* base must be q4_0 or q8_0; mixed starts on. */
int quant_policy_init(quant_policy *p, sol_dtype base, sol_err *err);
/* A policy by name: q4_0, q8_0, q4_k_m, q5_k_m, q6_k or mxfp4_moe (the --type of sol-quantize). */
int quant_policy_parse(quant_policy *p, const char *name, sol_err *err);
/* "PATTERN=TYPE" with TYPE one of f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k. */
int quant_policy_add_keep(quant_policy *p, const char *spec, sol_err *err);
/* 1 when the tensor name matches the pattern (glob over the whole name, or substring). */
int quant_pattern_match(const char *pattern, const char *name);
/* The type for tensor t (rules first, then 1-D -> F32, then the mixed defaults, then base; a row
 * length the block size does not divide falls back to Q8_0 when 32 divides it, else F16). Counts
 * the deciding rule's hit. */
sol_dtype quant_choose(quant_policy *p, const gguf_tensor *t);

/* llama.cpp's general.file_type for a whole-model type (MOSTLY_Q4_0 = 2, MOSTLY_Q8_0 = 7,
 * MOSTLY_Q6_K = 18, ...); the K mixes' are in quant_policy.file_type (15, 17). */
uint32_t quant_file_type(sol_dtype t);

/* Converts rows [row0, row0 + n) of a F32/F16/BF16/Q8_0/Q4_0 tensor to `dst_type` at `dst`.
 * tmp holds 2 x ne[0] floats. Adds the squared error of the result against the source values
 * to *sq_err when it is not NULL. */
int quant_convert_rows(const gguf_tensor *t, sol_dtype dst_type, int64_t row0, int64_t n, void *dst,
                       float *tmp, double *sq_err, sol_err *err);

/* Copies one metadata entry verbatim (nested arrays included). */
int quant_copy_kv(gguf_writer *w, const gguf_kv *kv, sol_err *err);

#endif
