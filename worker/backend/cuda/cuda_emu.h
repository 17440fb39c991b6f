/* cuda_emu: a host emulation of the CUDA kernel language, so Sol's .cu kernels compile unchanged
 * as host C++ and run on the CPU in tests (issue 12). A test instrument, not a production path.
 *
 * A launch runs the grid's blocks one after another. Each block's threads are fibers (glibc
 * ucontext) on one OS thread, scheduled round-robin: a fiber runs until it reaches
 * __syncthreads(), a warp shuffle or its end, so a missing barrier shows up as a wrong result
 * (a thread reads shared memory its partner has not written yet). Barriers are real: a block
 * barrier releases when every live thread of the block waits at it, a warp exchange when every
 * live lane of the warp has published its value; anything else (a barrier some threads skip)
 * is reported as a deadlock and aborts. __shared__ variables are thread_local statics, shared by
 * the fibers of the running block; dynamic shared memory comes from SOL_DYN_SMEM. */
#ifndef SOL_CUDA_EMU_H
#define SOL_CUDA_EMU_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <ucontext.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define SOL_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SOL_EMU_ASAN 1
#endif
#endif
#ifdef SOL_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
typedef void *cudaStream_t; /* streams do not exist here: launches run at once, in order */

struct uint3 {
    unsigned x, y, z;
};

namespace sol_emu {

enum fiber_state { F_RUN, F_BARRIER, F_WARP, F_DONE };

struct fiber {
    ucontext_t ctx;
    uint3 tid;
    fiber_state state;
    unsigned char *stack;
};

enum { STACK_BYTES = 128 * 1024, MAX_THREADS = 1024 };

struct block {
    dim3 grid, dim;
    uint3 bid;
    int n, cur;
    fiber *f;
    ucontext_t sched;
    void (*body)(void *);
    void *arg;
    unsigned char *dyn_smem;
    uint64_t slots[MAX_THREADS]; /* warp exchange: each lane's published value */
#ifdef SOL_EMU_ASAN
    void *fake_stack;
#endif
};

inline block *&current() {
    static thread_local block *b = nullptr;
    return b;
}

inline int linear_tid(const block *b, int i) {
    const uint3 &t = b->f[i].tid;
    return (int)(t.x + b->dim.x * (t.y + b->dim.y * t.z));
}

/* Back to the scheduler with the current fiber in state s. */
inline void yield(fiber_state s) {
    block *b = current();
    fiber *me = &b->f[b->cur];
    me->state = s;
#ifdef SOL_EMU_ASAN
    __sanitizer_start_switch_fiber(&b->fake_stack, nullptr, 0);
#endif
    swapcontext(&me->ctx, &b->sched);
#ifdef SOL_EMU_ASAN
    __sanitizer_finish_switch_fiber(b->fake_stack, nullptr, nullptr);
#endif
}

inline void entry() {
    block *b = current();
#ifdef SOL_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
    b->body(b->arg);
    yield(F_DONE);
}

[[noreturn]] inline void die(const char *what) {
    block *b = current();
    fprintf(stderr, "cuda_emu: %s (block %u,%u,%u of %u threads)\n", what, b->bid.x, b->bid.y,
            b->bid.z, (unsigned)b->n);
    abort();
}

/* Releases waiters whose condition holds; returns whether any fiber can run. */
inline bool release(block *b) {
    int live = 0, at_barrier = 0;
    for (int i = 0; i < b->n; i++) {
        live += b->f[i].state != F_DONE;
        at_barrier += b->f[i].state == F_BARRIER;
    }
    if (at_barrier && at_barrier == live) {
        for (int i = 0; i < b->n; i++)
            if (b->f[i].state == F_BARRIER) b->f[i].state = F_RUN;
        return true;
    }
    bool any = false;
    for (int w = 0; w * 32 < b->n; w++) {
        int lanes = 0, waiting = 0;
        for (int i = w * 32; i < b->n && i < w * 32 + 32; i++) {
            lanes += b->f[i].state != F_DONE;
            waiting += b->f[i].state == F_WARP;
        }
        if (waiting && waiting == lanes) {
            for (int i = w * 32; i < b->n && i < w * 32 + 32; i++)
                b->f[i].state = F_RUN;
            any = true;
        }
    }
    return any;
}

inline void run_block(block *b) {
    for (int i = 0; i < b->n; i++) {
        fiber *f = &b->f[i];
        getcontext(&f->ctx);
        f->ctx.uc_stack.ss_sp = f->stack;
        f->ctx.uc_stack.ss_size = STACK_BYTES;
        f->ctx.uc_link = nullptr;
        makecontext(&f->ctx, entry, 0);
        f->state = F_RUN;
    }
    for (;;) {
        bool ran = false;
        for (int i = 0; i < b->n; i++) {
            if (b->f[i].state != F_RUN) continue;
            b->cur = i;
            ran = true;
#ifdef SOL_EMU_ASAN
            __sanitizer_start_switch_fiber(&b->fake_stack, b->f[i].stack, STACK_BYTES);
#endif
            swapcontext(&b->sched, &b->f[i].ctx);
#ifdef SOL_EMU_ASAN
            __sanitizer_finish_switch_fiber(b->fake_stack, nullptr, nullptr);
#endif
        }
        if (release(b)) continue;
        if (ran) continue;
        for (int i = 0; i < b->n; i++)
            if (b->f[i].state != F_DONE)
                die("deadlock: a barrier or warp exchange that some threads never reach");
        return;
    }
}

/* Fibers with their stacks, kept per OS thread and reused by every launch (allocating
 * MAX_THREADS stacks per launch made the op tests spend most of their time in mmap); freed when
 * the thread exits (tensor-parallel rank threads come and go). */
struct fiber_pool {
    fiber *f = nullptr;
    int have = 0;
    ~fiber_pool() {
        for (int i = 0; i < have; i++)
            delete[] f[i].stack;
        delete[] f;
    }
};

inline fiber *fibers(int n) {
    static thread_local fiber_pool pool;
    if (n > pool.have) {
        fiber *grown = new fiber[n];
        for (int i = 0; i < pool.have; i++)
            grown[i] = pool.f[i];
        for (int i = pool.have; i < n; i++)
            grown[i].stack = new unsigned char[STACK_BYTES];
        delete[] pool.f;
        pool.f = grown;
        pool.have = n;
    }
    return pool.f;
}

/* Runs body(arg) for every thread of every block. */
inline void launch(dim3 grid, dim3 dim, size_t smem, void (*body)(void *), void *arg) {
    int n = (int)(dim.x * dim.y * dim.z);
    if (n < 1 || n > MAX_THREADS) {
        fprintf(stderr, "cuda_emu: block of %d threads (1..%d)\n", n, MAX_THREADS);
        abort();
    }
    block b{};
    b.grid = grid;
    b.dim = dim;
    b.n = n;
    b.body = body;
    b.arg = arg;
    b.f = fibers(n);
    for (int i = 0; i < n; i++)
        b.f[i].tid = uint3{(unsigned)(i % dim.x), (unsigned)(i / dim.x % dim.y),
                           (unsigned)(i / (dim.x * dim.y))};
    b.dyn_smem = smem ? new unsigned char[smem] : nullptr;
    block *saved = current();
    current() = &b;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                b.bid = uint3{x, y, z};
                run_block(&b);
            }
    current() = saved;
    delete[] b.dyn_smem;
}

/* A stream: launches run at once, unless a capture is open (a CUDA graph being recorded, see
 * cuda_rt_emu.cc), in which case they are kept, with their arguments, to run when the graph is
 * launched. A NULL stream never captures. */
struct stream {
    std::vector<std::function<void()>> *capture = nullptr;
};

inline void submit(void *s, std::function<void()> work) {
    stream *st = static_cast<stream *>(s);
    if (st && st->capture)
        st->capture->push_back(std::move(work));
    else
        work();
}

/* A lane's value in its warp's exchange: publish, wait for the warp, read, wait again (so no
 * lane overwrites its slot before every lane has read). */
template <class T> inline T shuffle(T v, int src_of_lane(int lane, int arg), int arg, int width) {
    static_assert(sizeof(T) <= sizeof(uint64_t), "shuffle of a value wider than 64 bits");
    block *b = current();
    int me = linear_tid(b, b->cur), lane = me % 32, base = me - lane;
    int seg = lane / width * width, src = seg + src_of_lane(lane % width, arg);
    memcpy(&b->slots[me], &v, sizeof(T));
    yield(F_WARP);
    T out = v;
    if (src >= seg && src < seg + width && base + src < b->n)
        memcpy(&out, &b->slots[base + src], sizeof(T));
    yield(F_WARP);
    return out;
}

inline int src_xor(int lane, int m) {
    return lane ^ m;
}
inline int src_down(int lane, int d) {
    return lane + d;
}
inline int src_up(int lane, int d) {
    return lane - d;
}
inline int src_idx(int, int s) {
    return s;
}

} // namespace sol_emu

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static thread_local
#define threadIdx (sol_emu::current()->f[sol_emu::current()->cur].tid)
#define blockIdx (sol_emu::current()->bid)
#define blockDim (sol_emu::current()->dim)
#define gridDim (sol_emu::current()->grid)
#define warpSize 32

inline void __syncthreads() {
    sol_emu::yield(sol_emu::F_BARRIER);
}
inline void __syncwarp(unsigned = 0xffffffffu) {
    sol_emu::yield(sol_emu::F_WARP);
}

template <class T> inline T __shfl_xor_sync(unsigned, T v, int m, int width = 32) {
    return sol_emu::shuffle(v, sol_emu::src_xor, m, width);
}
template <class T> inline T __shfl_down_sync(unsigned, T v, unsigned d, int width = 32) {
    return sol_emu::shuffle(v, sol_emu::src_down, (int)d, width);
}
template <class T> inline T __shfl_up_sync(unsigned, T v, unsigned d, int width = 32) {
    return sol_emu::shuffle(v, sol_emu::src_up, (int)d, width);
}
template <class T> inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
    return sol_emu::shuffle(v, sol_emu::src_idx, src, width);
}

template <class T> inline T atomicAdd(T *p, T v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline float atomicAdd(float *p, float v) {
    float old = *p; /* one OS thread runs a block's fibers: no other writer between */
    *p = old + v;
    return old;
}
template <class T> inline T atomicMax(T *p, T v) {
    T old = *p;
    if (v > old) *p = v;
    return old;
}

/* The four signed byte products of a and b added to c (sm_61+). */
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

/* kernel<<<grid, block, smem, stream>>>(args...) written portably. */
#define SOL_LAUNCH(kernel, grid, block, smem, stream, ...)                                         \
    do {                                                                                           \
        auto sol_emu_body = [=]() { kernel(__VA_ARGS__); };                                        \
        dim3 sol_emu_g = (grid), sol_emu_b = (block);                                              \
        size_t sol_emu_s = (smem);                                                                 \
        sol_emu::submit((void *)(stream), [=]() mutable {                                          \
            sol_emu::launch(                                                                       \
                sol_emu_g, sol_emu_b, sol_emu_s,                                                   \
                [](void *f) { (*static_cast<decltype(sol_emu_body) *>(f))(); }, &sol_emu_body);    \
        });                                                                                        \
    } while (0)

/* extern __shared__ T name[] written portably. */
#define SOL_DYN_SMEM(T, name) T *name = reinterpret_cast<T *>(sol_emu::current()->dyn_smem)

#endif
