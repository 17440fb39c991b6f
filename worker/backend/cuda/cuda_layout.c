/* cuda_layout: the split layout's packing on the host, at upload (cuda_layout.h says why). */
#include "cuda_layout.h"

#include <errno.h>
#include <string.h>

/* Where a ggml block keeps its scale: first for Q4_0/Q5_0/Q8_0/MXFP4, last for Q6_K (byte 208). */
static size_t scale_at(int type) {
    return type == 14 ? 208 : 0;
}

size_t sol_cuda_weight_bytes(int type, int rows, int cols, size_t row_bytes) {
    if (!sol_cuda_split_part(type)) return row_bytes * (size_t)rows + SOL_CUDA_WEIGHT_SLACK;
    size_t blocks = (size_t)rows * (size_t)(cols / sol_cuda_block_elems(type));
    return sol_cuda_scales_offset(type, rows, cols) + (size_t)sol_cuda_scale_bytes(type) * blocks +
           SOL_CUDA_WEIGHT_SLACK;
}

int sol_cuda_split_pack(int type, const void *src, size_t row_bytes, int rows, int cols,
                        void *dst) {
    size_t part = (size_t)sol_cuda_split_part(type);
    if (!part) return -EINVAL;
    int nb = cols / sol_cuda_block_elems(type);
    size_t sb = (size_t)sol_cuda_scale_bytes(type), bb = part + sb, at = scale_at(type),
           q_from = at ? 0 : sb;
    unsigned char *q = dst, *s = q + sol_cuda_scales_offset(type, rows, cols);
    memset(dst, 0, sol_cuda_weight_bytes(type, rows, cols, row_bytes));
    for (int r = 0; r < rows; r++) {
        const unsigned char *row = (const unsigned char *)src + (size_t)r * row_bytes;
        for (int b = 0; b < nb; b++, q += part, s += sb) {
            memcpy(q, row + (size_t)b * bb + q_from, part);
            memcpy(s, row + (size_t)b * bb + at, sb);
        }
    }
    return 0;
}
