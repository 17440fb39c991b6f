/* k_embed: token embeddings, a block per token, its threads across the row (each element read
 * through aligned 32-bit words: dequant.cuh). */
#include <errno.h>

#include "dequant.cuh"

enum { EMBED_THREADS = 256 };

static __global__ void k_embed(sol_cuda_wt table, const int32_t *ids, float *out) {
    sol_grid_dependency();
    int r = ids[blockIdx.x], cols = table.cols;
    for (int k = threadIdx.x; k < cols; k += blockDim.x)
        out[(size_t)blockIdx.x * cols + k] = sol_dequant_elem(table, r, k);
}

extern "C" int SOL_CUDA_FN(embed)(sol_cuda_wt table, const int32_t *ids, int n, float *out,
                                  void *stream) {
    if (!sol_cuda_type_known(table.type)) return -ENOTSUP;
    if (table.split != sol_cuda_wants_split(table.type)) return -EINVAL;
    if (n > 0)
        SOL_LAUNCH(k_embed, dim3((unsigned)n), dim3(EMBED_THREADS), 0, stream, table, ids, out);
    return 0;
}
