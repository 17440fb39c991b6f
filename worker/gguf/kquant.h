/* kquant: Sol's quantizers for ggml's K-quant block layouts (Q4_K, Q5_K, Q6_K), the writers
 * behind sol-quantize's q4_k_m, q5_k_m and q6_k; sol_quantize_row dispatches here. */
#ifndef SOL_KQUANT_H
#define SOL_KQUANT_H

#include <stdint.h>

#include "dtype.h"

/* n values (a multiple of 256) of src into dst as t (Q4_K, Q5_K or Q6_K); -1 for other types. */
int sol_kquant_row(sol_dtype t, const float *src, void *dst, int64_t n);

#endif
