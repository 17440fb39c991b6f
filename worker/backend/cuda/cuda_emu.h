/* cuda_emu: a host emulation of the CUDA kernel language, so Sol's .cu kernels compile unchanged
 * as host C++ and run on the CPU in tests (issue 12). A test instrument, not a production path:
 * it is built to make a kernel that would misbehave on a GPU misbehave here, visibly.
 *
 * Threads. Each block's threads are fibers (glibc ucontext) on one OS thread. A fiber runs until
 * __syncthreads(), a warp intrinsic or its end. Barriers are real: a block barrier releases when
 * every live thread of the block waits at it; a warp exchange (__shfl_*_sync, __syncwarp) when
 * every lane its mask names waits in it with the same mask and intrinsic.
 *
 * Schedules. Code that assumes an order the hardware does not promise must fail here, so no
 * order is fixed: every launch draws from a seeded generator (SOL_EMU_SEED, default 1, so a run
 * is reproducible; each abort prints it) the order of its blocks (a random permutation of the
 * grid) and, per block, one of four thread schedules: in order, reversed, shuffled anew at every
 * round, or warp-until-blocked (one warp runs, exchanges included, until all its lanes wait at a
 * block barrier or end, then the next, in random order: the schedule under which a warp races
 * ahead of the others, which is what breaks a missing "everyone has read it" barrier). The draw
 * depends only on the seed and the launch's number on its OS thread, so tensor-parallel ranks
 * stay reproducible. SOL_EMU_SCHEDULE=in-order|reversed|shuffled|warp forces one schedule.
 *
 * Shared memory. Declared with SOL_SHARED(type, name, [dims]) (sol_cuda_kernel.h; a plain
 * __shared__ does not compile here): thread_local statics that the first thread of each block to
 * reach the declaration fills with 0xFF bytes (a NaN in every float, -1 in every integer), as is
 * dynamic shared memory (SOL_DYN_SMEM) before each block: what a GPU leaves in shared memory is
 * garbage, so a read before any write shows up as NaN.
 *
 * Checks that abort naming the kernel (SOL_LAUNCH passes its name), block, schedule and seed:
 * - launch limits of sm_80/sm_90: block of 1..1024 threads, blockDim.x, y <= 1024, z <= 64,
 *   gridDim.x <= 2^31 - 1, y, z <= 65535, no empty grid, and static plus dynamic shared memory
 *   <= 48 KiB (above that CUDA needs a cudaFuncSetAttribute opt-in that Sol never makes);
 * - a lane calling a warp intrinsic whose mask leaves it out, a mask naming a lane that has
 *   exited or that the block does not have, lanes meeting with different masks or intrinsics, a
 *   shuffle reading a lane outside its mask;
 * - deadlock: a barrier or exchange that some threads never reach.
 *
 * Barrier mutation. __syncthreads() and __syncwarp() carry their file and line; with
 * SOL_EMU_DROP_BARRIER=file:line (file's base name) that one barrier is a no-op, reported on
 * stderr the first time it is skipped ("dropping the barrier at ..."), and at exit if it never ran
 * (a typo must not look like a survived mutation): tests/integration/barrier_mutation.sh. */
#ifndef SOL_CUDA_EMU_H
#define SOL_CUDA_EMU_H

#include "cuda_emu_sched.h"
#include "graph_sig.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...) /* a register limit: nothing to emulate */
#define __restrict__ __restrict
/* Shared memory is declared with SOL_SHARED (poisoned per block); a bare __shared__ would not
 * be, so it does not compile. */
#define __shared__ __shared___is_not_emulated_use_SOL_SHARED
#define threadIdx (sol_emu::current()->f[sol_emu::current()->cur].tid)
#define blockIdx (sol_emu::current()->bid)
#define blockDim (sol_emu::current()->dim)
#define gridDim (sol_emu::current()->grid)
#define warpSize 32

#define __syncthreads() sol_emu::syncthreads_at(__FILE__, __LINE__)
#define __syncwarp(...) (sol_emu::syncwarp_at{__FILE__, __LINE__}(__VA_ARGS__))

template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) {
    return sol_emu::shuffle("__shfl_xor_sync", mask, v, sol_emu::src_xor, m, width);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
    return sol_emu::shuffle("__shfl_down_sync", mask, v, sol_emu::src_down, (int)d, width);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
    return sol_emu::shuffle("__shfl_up_sync", mask, v, sol_emu::src_up, (int)d, width);
}
/* srcLane is taken modulo width, as on a GPU. */
template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return sol_emu::shuffle("__shfl_sync", mask, v, sol_emu::src_idx, src & (width - 1), width);
}

/* The PDL wait every kernel opens with (sol_cuda_kernel.h): checked, not waited (a launch here
 * runs after the previous one has ended). */
inline void sol_grid_dependency() {
    sol_emu::grid_dependency();
}

template <class T> inline T atomicAdd(T *p, T v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline float atomicAdd(float *p, float v) {
    float old = *p; /* one OS thread runs a block's fibers: no other writer between */
    *p = old + v;
    return old;
}
template <class T> inline T atomicExch(T *p, T v) {
    T old = *p;
    *p = v;
    return old;
}
/* A fence and a load past L1 (cross-block hand-offs, k_attention.cu's split merge): blocks run
 * one after another here, so what another block wrote is already in place. */
inline void __threadfence() {}
template <class T> inline T __ldcg(const T *p) {
    return *p;
}
template <class T> inline T atomicMax(T *p, T v) {
    T old = *p;
    if (v > old) *p = v;
    return old;
}

/* The float with these bits. */
inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The four signed byte products of a and b added to c (sm_61+). */
/* Byte i of the result is byte (s >> 4i) & 7 of y:x (the selectors' sign-replicate bit unused). */
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    uint64_t v = (uint64_t)y << 32 | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++)
        r |= (unsigned)(v >> (8 * ((s >> (4 * i)) & 7)) & 0xFF) << (8 * i);
    return r;
}

inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}

/* Device math the kernels use (fast-math intrinsics map to the exact functions: tests compare
 * with tolerances that cover the difference). */
inline float rsqrtf(float x) {
    return 1.0f / sqrtf(x);
}
inline float __expf(float x) {
    return expf(x);
}
inline float __logf(float x) {
    return logf(x);
}
inline float __fdividef(float a, float b) {
    return a / b;
}

/* Correctly rounded single operations that nvcc never fuses into an FMA (kernels use them where
 * they promise the CPU's bits). The empty asm keeps the host compiler from contracting them
 * either, should it be allowed to (-ffp-contract=fast with FMA instructions). */
inline float sol_emu_opaque(float x) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__("" : "+x"(x));
#elif defined(__aarch64__)
    __asm__("" : "+w"(x));
#else
    volatile float v = x;
    x = v;
#endif
    return x;
}
inline float __fmul_rn(float a, float b) {
    return sol_emu_opaque(a * b);
}
inline float __fadd_rn(float a, float b) {
    return sol_emu_opaque(a + b);
}
inline float __fsub_rn(float a, float b) {
    return sol_emu_opaque(a - b);
}
inline float __fmaf_rn(float a, float b, float c) {
    return fmaf(a, b, c);
}

/* kernel<<<grid, block, smem, stream>>>(args...) written portably; the kernel's name goes with
 * it for the emulation's messages and graph nodes. queue: a sol_cuda_queue * (graph_sig.h) or
 * NULL; in a dry step the launch is only written down (sol_sig_launch). */
#define SOL_LAUNCH(kernel, grid, block, smem, queue, ...)                                          \
    do {                                                                                           \
        auto sol_emu_body = [=]() { kernel(__VA_ARGS__); };                                        \
        dim3 sol_emu_g = (grid), sol_emu_b = (block);                                              \
        size_t sol_emu_s = (smem);                                                                 \
        sol_cuda_queue *sol_q = (sol_cuda_queue *)(queue);                                         \
        if (sol_sig_launch(sol_q, &kernel, sol_emu_g, sol_emu_b, sol_emu_s, ##__VA_ARGS__)) break; \
        sol_emu::submit(sol_q ? sol_q->stream : nullptr,                                           \
                        sol_emu::node_desc{sol_emu::NODE_KERNEL, #kernel, 0, 0, 0},                \
                        [=]() mutable {                                                            \
                            sol_emu::launch(                                                       \
                                #kernel, sol_emu_g, sol_emu_b, sol_emu_s,                          \
                                [](void *f) { (*static_cast<decltype(sol_emu_body) *>(f))(); },    \
                                &sol_emu_body);                                                    \
                        });                                                                        \
    } while (0)

/* __shared__ T name dims written portably: poisoned before each block. */
#define SOL_SHARED(T, name, ...)                                                                   \
    static thread_local T name __VA_ARGS__;                                                        \
    sol_emu::shared_here(&name, sizeof name)

/* extern __shared__ T name[] written portably. */
#define SOL_DYN_SMEM(T, name) T *name = reinterpret_cast<T *>(sol_emu::current()->dyn_smem)

#endif
