/* cuda_layout: how a weight lies in device memory, shared by the kernels (device code), the
 * backend that uploads it and the tests: ggml's rows, or Sol's split layout for the block types
 * whose ggml blocks are only 2-byte aligned (Q4_0: 18 bytes, Q5_0: 22, Q8_0: 34, Q6_K: 210) or
 * not aligned at all (MXFP4: 17).
 *
 * Why split: a GPU reads a word only from an address aligned to its size, so the quants of an
 * 18-byte block can be fetched only 8 or 16 bits at a time (the SASS check, tests/gpu/
 * sass_check.py, counts them). weight_prepare rewrites such a tensor once, at upload, as every
 * block's quant bytes (the ggml block less its scale) packed block after block, row after row
 * (16, 20, 32 or 208 bytes: 16-byte aligned but Q5_0's 20, which is 4-byte aligned), then the
 * blocks' scales (f16; MXFP4's one E8M0 byte) in the same order from the next 16-byte boundary. The
 * bytes are the same in number (plus at most 15 of padding); the quants are ggml's, in ggml's order
 * within a block. Q5_1 (24-byte blocks), Q4_K (144), Q5_K (176) and the float types keep ggml's
 * rows. */
#ifndef SOL_CUDA_LAYOUT_H
#define SOL_CUDA_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define SOL_HD __host__ __device__
#else
#define SOL_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* sol_weight.layout of a weight in the split layout (the CUDA backend's private value). */
#define SOL_CUDA_LAYOUT_SPLIT 0x53504c54u /* "SPLT" */
/* Bytes every device copy of a weight has past its end: a kernel may read the aligned 32-bit
 * word that holds a weight's last 16-bit field. */
#define SOL_CUDA_WEIGHT_SLACK 16

/* A weight as the kernels see it. split: 1 in the split layout (row_bytes unused then). */
typedef struct sol_cuda_wt {
    const void *data;
    size_t row_bytes;
    int type, split, rows, cols;
} sol_cuda_wt;

/* Quant bytes per block in the split layout; 0 for a type that keeps ggml's rows. Type ids are
 * ggml's (cuda_kernels.h: SOL_CUDA_Q4_0 = 2, Q5_0 = 6, Q8_0 = 8, Q6_K = 14). */
static inline SOL_HD int sol_cuda_split_part(int type) {
    return type == 2 || type == 39 ? 16 : type == 6 ? 20 : type == 8 ? 32 : type == 14 ? 208 : 0;
}

/* Bytes of a split block's scale: MXFP4's E8M0 exponent (ggml type 39) is one, f16's two. */
static inline SOL_HD int sol_cuda_scale_bytes(int type) {
    return type == 39 ? 1 : 2;
}

/* Elements per block: 256 for K-quants, 32 for the other quantized types, 1 for floats. */
static inline SOL_HD int sol_cuda_block_elems(int type) {
    return type >= 12 && type <= 14                              ? 256
           : type == 2 || (type >= 6 && type <= 8) || type == 39 ? 32
                                                                 : 1;
}

/* Offset of the scales in a split tensor: past every quant byte, rounded up to 16. */
static inline SOL_HD size_t sol_cuda_scales_offset(int type, int rows, int cols) {
    size_t q = (size_t)rows * (size_t)(cols / sol_cuda_block_elems(type)) *
               (size_t)sol_cuda_split_part(type);
    return (q + 15) & ~(size_t)15;
}

/* Device bytes of a weight in the layout weight_prepare gives its type, slack included. */
size_t sol_cuda_weight_bytes(int type, int rows, int cols, size_t row_bytes);

/* Writes rows x cols of ggml rows (row_bytes apart) in the split layout to dst
 * (sol_cuda_weight_bytes); -EINVAL for a type that keeps ggml's rows. */
int sol_cuda_split_pack(int type, const void *src, size_t row_bytes, int rows, int cols, void *dst);

#ifdef __cplusplus
}
#endif

#endif
