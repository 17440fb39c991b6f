/* k_kv: writing K/V rows into the paged pools and copying whole blocks (copy-on-write). */
#include "cuda_kernels.h"
#include "half_bits.cuh"

enum { KV_THREADS = 256 };

static __global__ void k_kv_write(unsigned char *k_pool, unsigned char *v_pool, int f16, int row,
                                  const float *k, const float *v, const int32_t *slots) {
    sol_grid_dependency();
    size_t t = blockIdx.x, dst = (size_t)slots[t] * row;
    for (int i = threadIdx.x; i < row; i += blockDim.x) {
        float kv[2] = {k[t * row + i], v[t * row + i]};
        unsigned char *pools[2] = {k_pool, v_pool};
        for (int j = 0; j < 2; j++) {
            if (f16) {
                uint16_t h = sol_f32_to_f16(kv[j]);
                memcpy(pools[j] + 2 * (dst + i), &h, 2);
            } else {
                memcpy(pools[j] + 4 * (dst + i), &kv[j], 4);
            }
        }
    }
}

/* grid.x = block pair, grid.y = pool. */
static __global__ void k_kv_copy(unsigned char *const *pools, size_t block_bytes,
                                 const int32_t *src, const int32_t *dst) {
    sol_grid_dependency();
    unsigned char *p = pools[blockIdx.y];
    const unsigned char *from = p + (size_t)src[blockIdx.x] * block_bytes;
    unsigned char *to = p + (size_t)dst[blockIdx.x] * block_bytes;
    for (size_t i = threadIdx.x; i < block_bytes; i += blockDim.x)
        to[i] = from[i];
}

extern "C" void SOL_CUDA_FN(kv_write)(void *k_pool, void *v_pool, int f16, int row, const float *k,
                                      const float *v, const int32_t *slots, int n, void *stream) {
    if (n > 0)
        SOL_LAUNCH(k_kv_write, dim3((unsigned)n), dim3(KV_THREADS), 0, stream,
                   (unsigned char *)k_pool, (unsigned char *)v_pool, f16, row, k, v, slots);
}

extern "C" void SOL_CUDA_FN(kv_copy_blocks)(void *const *pools, int count_pools, size_t block_bytes,
                                            const int32_t *src, const int32_t *dst, int count,
                                            void *stream) {
    if (count > 0 && count_pools > 0)
        SOL_LAUNCH(k_kv_copy, dim3((unsigned)count, (unsigned)count_pools), dim3(KV_THREADS), 0,
                   stream, (unsigned char *const *)pools, block_bytes, src, dst);
}
