/* k_embed: token embeddings, a block per token, its threads across the row. */
#include <errno.h>

#include "dequant.cuh"

enum { EMBED_THREADS = 256 };

static __global__ void k_embed(int type, const unsigned char *table, size_t row_bytes, int cols,
                               const int32_t *ids, float *out) {
    const unsigned char *row = table + (size_t)ids[blockIdx.x] * row_bytes;
    for (int k = threadIdx.x; k < cols; k += blockDim.x)
        out[(size_t)blockIdx.x * cols + k] = sol_dequant_elem(type, row, k);
}

extern "C" int SOL_CUDA_FN(embed)(int type, const void *table, size_t row_bytes, int cols,
                                  const int32_t *ids, int n, float *out, void *stream) {
    if (!sol_cuda_type_known(type)) return -ENOTSUP;
    if (n > 0)
        SOL_LAUNCH(k_embed, dim3((unsigned)n), dim3(EMBED_THREADS), 0, (cudaStream_t)stream, type,
                   (const unsigned char *)table, row_bytes, cols, ids, out);
    return 0;
}
