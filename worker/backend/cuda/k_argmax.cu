/* k_argmax: each row's largest value and its id, the greedy token, so a decode step sends 8 bytes
 * a row to the host instead of the vocabulary's logits (argmax_rows in backend.h).
 *
 * Order. Candidates compare by value, then by id (the lower wins), with NaN read as -inf: a total
 * order, so any reduction tree gives the host sampler's argmax (ties to the lowest id). A row of
 * width w is cut into chunks of AMAX_CHUNK values, a block each (grid: chunks x rows), so a
 * 128k vocabulary spreads over 32 SMs; a block reduces its chunk (coalesced 32-bit loads, warp
 * butterflies, one barrier), and the last block of a row to finish (a counter per row, left at 0
 * for the next launch, as the attention's split merge) reduces the row's partials with one warp.
 * One chunk: the block writes the result itself. */
#include <limits.h>
#include <math.h>

#include "cuda_kernels.h"
#include "sol_cuda_kernel.h"

enum { AMAX_THREADS = 256, AMAX_WARPS = AMAX_THREADS / 32, AMAX_CHUNK = 4096 };

/* (v, id) takes (v2, id2) when it comes first in the order. */
__device__ __forceinline__ void amax_take(float &v, int &id, float v2, int id2) {
    if (v2 > v || (v2 == v && id2 < id)) v = v2, id = id2;
}

/* The warp's best candidate, on every lane. */
__device__ __forceinline__ void amax_warp(float &v, int &id) {
    for (int o = 16; o > 0; o >>= 1) {
        float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        int id2 = __shfl_xor_sync(0xffffffffu, id, o);
        amax_take(v, id, v2, id2);
    }
}

/* ws_v/ws_id: rows x gridDim.x partials; cnt: a zeroed int per row. */
static __global__ void k_argmax(const float *x, long long width, float *ws_v, int *ws_id, int *cnt,
                                int32_t *ids, float *vals) {
    sol_grid_dependency();
    SOL_SHARED(float, s_v, [AMAX_WARPS]);
    SOL_SHARED(int, s_id, [AMAX_WARPS]);
    int chunk = (int)blockIdx.x, chunks = (int)gridDim.x, row = (int)blockIdx.y;
    int warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31;
    const float *r = x + (size_t)row * (size_t)width;
    long long end =
        ((long long)chunk + 1) * AMAX_CHUNK < width ? ((long long)chunk + 1) * AMAX_CHUNK : width;
    float v = -INFINITY;
    int id = INT_MAX;
    for (long long i = (long long)chunk * AMAX_CHUNK + threadIdx.x; i < end; i += AMAX_THREADS) {
        float e = r[i];
        amax_take(v, id, e == e ? e : -INFINITY, (int)i);
    }
    amax_warp(v, id);
    if (lane == 0) s_v[warp] = v, s_id[warp] = id;
    __syncthreads(); /* every warp's best is in before warp 0 reads them */
    if (warp > 0) return;
    v = lane < AMAX_WARPS ? s_v[lane] : -INFINITY;
    id = lane < AMAX_WARPS ? s_id[lane] : INT_MAX;
    amax_warp(v, id);
    if (chunks == 1) {
        if (lane == 0) ids[row] = id, vals[row] = v;
        return;
    }
    size_t at = (size_t)row * (size_t)chunks;
    if (lane == 0) {
        ws_v[at + chunk] = v, ws_id[at + chunk] = id;
        __threadfence(); /* the partial is visible before the count says so */
    }
    int last = lane == 0 ? atomicAdd(cnt + row, 1) == chunks - 1 : 0;
    if (!__shfl_sync(0xffffffffu, last, 0)) return;
    __threadfence(); /* the acquire side: every other block's partial is visible */
    v = -INFINITY, id = INT_MAX;
    for (int j = lane; j < chunks; j += 32)
        amax_take(v, id, __ldcg(ws_v + at + j), __ldcg(ws_id + at + j));
    amax_warp(v, id);
    if (lane == 0) {
        ids[row] = id, vals[row] = v;
        atomicExch(cnt + row, 0);
    }
}

extern "C" int SOL_CUDA_FN(argmax_chunks)(long long width) {
    return (int)((width + AMAX_CHUNK - 1) / AMAX_CHUNK);
}

extern "C" void SOL_CUDA_FN(argmax_rows)(const float *x, int n, long long width, float *ws_v,
                                         int *ws_id, int *cnt, int32_t *ids, float *vals,
                                         void *stream) {
    if (n > 0 && width > 0)
        SOL_LAUNCH(k_argmax, dim3((unsigned)SOL_CUDA_FN(argmax_chunks)(width), (unsigned)n),
                   dim3(AMAX_THREADS), 0, stream, x, width, ws_v, ws_id, cnt, ids, vals);
}
