/* cuda_emu_sched: the machinery under cuda_emu.h (which documents the emulation): fibers and
 * their schedules, barriers and warp exchanges with their checks, shared-memory poisoning,
 * launch limits, the environment (SOL_EMU_SEED, SOL_EMU_SCHEDULE, SOL_EMU_DROP_BARRIER) and what a
 * graph keeps of a captured operation. Included by cuda_emu.h only. */
#ifndef SOL_CUDA_EMU_SCHED_H
#define SOL_CUDA_EMU_SCHED_H

#include <atomic>
#include <cmath>
#include <cstdarg>
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
enum warp_op { W_NONE, W_SYNCWARP, W_SHUFFLE, W_MMA };

struct fiber {
    ucontext_t ctx;
    uint3 tid;
    fiber_state state;
    warp_op op;    /* the warp intrinsic it waits in (F_WARP) */
    unsigned mask; /* and that intrinsic's mask */
    unsigned char *stack;
    bool waited; /* it has called sol_grid_dependency() (sol_cuda_kernel.h) */
#ifdef SOL_EMU_ASAN
    void *fake_stack; /* this fiber's ASan fake stack while it is switched out */
#endif
};

enum {
    STACK_BYTES = 128 * 1024,
    MAX_THREADS = 1024,
    MAX_SHARED_VARS = 32,
    SMEM_BYTES = 48 * 1024 /* without cudaFuncAttributeMaxDynamicSharedMemorySize */
};

enum schedule { S_IN_ORDER, S_REVERSED, S_SHUFFLED, S_WARP, S_COUNT };
inline const char *schedule_name(int s) {
    static const char *const names[S_COUNT] = {"in-order", "reversed", "shuffled", "warp"};
    return s >= 0 && s < S_COUNT ? names[s] : "?";
}

inline const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The environment, read once per process. */
struct config {
    unsigned long long seed = 1;
    int schedule = -1;
    char drop_file[256] = "";
    int drop_line = 0;
    std::atomic<int> dropped{0};

    static void drop_never_ran();
    config() {
        const char *s = getenv("SOL_EMU_SEED"), *p = getenv("SOL_EMU_SCHEDULE"),
                   *d = getenv("SOL_EMU_DROP_BARRIER");
        char *end = nullptr;
        if (s && *s && (seed = strtoull(s, &end, 0), *end)) bad("SOL_EMU_SEED", s);
        for (int i = 0; p && *p && i < S_COUNT; i++)
            if (strcmp(p, schedule_name(i)) == 0) schedule = i;
        if (p && *p && schedule < 0) bad("SOL_EMU_SCHEDULE", p);
        if (d && *d) {
            const char *colon = strrchr(d, ':');
            long line = colon ? strtol(colon + 1, &end, 10) : 0;
            if (!colon || *end || line <= 0 || colon == d) bad("SOL_EMU_DROP_BARRIER", d);
            snprintf(drop_file, sizeof drop_file, "%.*s", (int)(colon - d), d);
            memmove(drop_file, base_name(drop_file), strlen(base_name(drop_file)) + 1);
            drop_line = (int)line;
            atexit(drop_never_ran);
        }
    }
    [[noreturn]] static void bad(const char *var, const char *v) {
        fprintf(stderr,
                "cuda_emu: %s=%s is not valid (seed: a number; schedule: in-order, "
                "reversed, shuffled or warp; barrier: file:line)\n",
                var, v);
        abort();
    }
};

inline config &cfg() {
    static config c;
    return c;
}

inline void config::drop_never_ran() {
    config &c = cfg();
    if (!c.dropped.load())
        fprintf(stderr, "cuda_emu: SOL_EMU_DROP_BARRIER=%s:%d: no barrier at that place ran\n",
                c.drop_file, c.drop_line);
}

/* splitmix64: small, and good enough to draw orders from. */
struct rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    uint64_t below(uint64_t n) {
        return n ? next() % n : 0;
    }
};

struct block {
    dim3 grid, dim;
    uint3 bid;
    int n, cur, sched;
    fiber *f;
    ucontext_t sched_ctx;
    void (*body)(void *);
    void *arg;
    const char *kernel;
    unsigned char *dyn_smem;
    size_t dyn_bytes, static_bytes;
    void *shared[MAX_SHARED_VARS]; /* the static shared variables poisoned in this block */
    int n_shared;
    rng r;
    uint64_t slots[MAX_THREADS]; /* warp exchange: each lane's published value */
    int order[MAX_THREADS];
#ifdef SOL_EMU_ASAN
    /* The scheduler's (the OS thread's own) stack and fake stack while a fiber runs: ASan must
     * get these bounds back on every switch to the scheduler, or it takes the thread's stack as
     * [0, 0) and ignores later longjmps (their dead frames stay poisoned: false reports). */
    void *fake_stack;
    const void *sched_bottom;
    size_t sched_size;
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

/* Aborts with the kernel, the block, its schedule and the seed that reproduces it. */
[[noreturn]] __attribute__((format(printf, 2, 3))) inline void die_in(const char *kernel,
                                                                      const char *fmt, ...) {
    block *b = current();
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda_emu: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " in kernel %s", kernel ? kernel : "?");
    if (b && b->kernel == kernel)
        fprintf(stderr, " (block %u,%u,%u of %d threads, %s schedule)", b->bid.x, b->bid.y,
                b->bid.z, b->n, schedule_name(b->sched));
    fprintf(stderr, "; SOL_EMU_SEED=%llu\n", cfg().seed);
    abort();
}
#define SOL_EMU_DIE(...) sol_emu::die_in(sol_emu::current()->kernel, __VA_ARGS__)

/* Back to the scheduler with the current fiber in state s. */
inline void yield(fiber_state s) {
    block *b = current();
    fiber *me = &b->f[b->cur];
    me->state = s;
#ifdef SOL_EMU_ASAN
    /* a finished fiber is never resumed (the next block makes its context anew): no save */
    __sanitizer_start_switch_fiber(s == F_DONE ? nullptr : &me->fake_stack, b->sched_bottom,
                                   b->sched_size);
#endif
    swapcontext(&me->ctx, &b->sched_ctx);
#ifdef SOL_EMU_ASAN
    __sanitizer_finish_switch_fiber(me->fake_stack, &b->sched_bottom, &b->sched_size);
#endif
}

/* Programmatic dependent launch (sol_cuda_kernel.h): every thread opens with the grid-dependency
 * wait, before any barrier or warp exchange and on every path to its end; a kernel that could
 * return, or meet, before it would on a GPU read what the previous kernel is still writing. */
inline void grid_dependency() {
    block *b = current();
    fiber *me = &b->f[b->cur];
    if (me->waited)
        SOL_EMU_DIE("thread %d calls sol_grid_dependency() twice", linear_tid(b, b->cur));
    me->waited = true;
}
inline void require_waited(const char *at) {
    block *b = current();
    if (!b->f[b->cur].waited)
        SOL_EMU_DIE("thread %d reaches %s before sol_grid_dependency() (a kernel's first "
                    "statement: the PDL wait, sol_cuda_kernel.h)",
                    linear_tid(b, b->cur), at);
}

inline void entry() {
    block *b = current();
#ifdef SOL_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &b->sched_bottom, &b->sched_size);
#endif
    b->body(b->arg);
    require_waited("its end");
    yield(F_DONE);
}

inline void run_fiber(block *b, int i) {
    b->cur = i;
#ifdef SOL_EMU_ASAN
    __sanitizer_start_switch_fiber(&b->fake_stack, b->f[i].stack, STACK_BYTES);
#endif
    swapcontext(&b->sched_ctx, &b->f[i].ctx);
#ifdef SOL_EMU_ASAN
    __sanitizer_finish_switch_fiber(b->fake_stack, nullptr, nullptr);
#endif
}

/* Releases the exchanges of warp w that every lane of their mask has reached. */
inline bool release_warp(block *b, int w) {
    int base = w * 32, lanes = b->n - base < 32 ? b->n - base : 32;
    unsigned have = lanes == 32 ? ~0u : (1u << lanes) - 1, waiting = 0, done = 0;
    for (int l = 0; l < lanes; l++) {
        waiting |= (unsigned)(b->f[base + l].state == F_WARP) << l;
        done |= (unsigned)(b->f[base + l].state == F_DONE) << l;
    }
    bool any = false;
    for (int l = 0; l < lanes; l++) {
        if (!(waiting >> l & 1)) continue;
        unsigned m = b->f[base + l].mask;
        if (m & ~have)
            SOL_EMU_DIE("warp %d: lane %d's mask 0x%08x names lanes the block does not have", w, l,
                        m);
        if (m & done)
            SOL_EMU_DIE("warp %d: lane %d waits in a warp exchange (mask 0x%08x) for lane %d, "
                        "which has exited",
                        w, l, m, __builtin_ctz(m & done));
        if ((m & waiting) != m) continue;
        for (int k = 0; k < lanes; k++)
            if ((m >> k & 1) &&
                (b->f[base + k].mask != m || b->f[base + k].op != b->f[base + l].op))
                SOL_EMU_DIE("warp %d: lanes %d and %d meet in one warp exchange with different "
                            "masks (0x%08x, 0x%08x) or intrinsics",
                            w, l, k, m, b->f[base + k].mask);
        for (int k = 0; k < lanes; k++)
            if (m >> k & 1) b->f[base + k].state = F_RUN;
        waiting &= ~m;
        any = true;
    }
    return any;
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
    for (int w = 0; w * 32 < b->n; w++)
        any |= release_warp(b, w);
    return any;
}

inline void shuffle_order(block *b, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)b->r.below((uint64_t)i + 1), t = b->order[i];
        b->order[i] = b->order[j], b->order[j] = t;
    }
}

/* Runs one block to its end under the block's schedule. */
inline void run_block(block *b) {
    for (int i = 0; i < b->n; i++) {
        fiber *f = &b->f[i];
        getcontext(&f->ctx);
        f->ctx.uc_stack.ss_sp = f->stack;
        f->ctx.uc_stack.ss_size = STACK_BYTES;
        f->ctx.uc_link = nullptr;
        makecontext(&f->ctx, entry, 0);
#ifdef SOL_EMU_ASAN
        f->fake_stack = nullptr;
#endif
        f->state = F_RUN;
        f->op = W_NONE;
        f->waited = false;
    }
    b->n_shared = 0;
    b->static_bytes = 0;
    if (b->dyn_bytes) memset(b->dyn_smem, 0xFF, b->dyn_bytes);
    b->sched = cfg().schedule >= 0 ? cfg().schedule : (int)b->r.below(S_COUNT);
    int warps = (b->n + 31) / 32;
    for (;;) {
        bool ran = false;
        if (b->sched == S_WARP) {
            for (int k = 0; k < warps; k++)
                b->order[k] = k;
            shuffle_order(b, warps);
            for (int k = 0; k < warps; k++) {
                int w = b->order[k], end = w * 32 + 32 < b->n ? w * 32 + 32 : b->n;
                for (bool any = true; any;) {
                    any = false;
                    for (int i = w * 32; i < end; i++)
                        if (b->f[i].state == F_RUN) run_fiber(b, i), any = ran = true;
                    if (any) release(b);
                }
            }
        } else {
            for (int k = 0; k < b->n; k++)
                b->order[k] = b->sched == S_REVERSED ? b->n - 1 - k : k;
            if (b->sched == S_SHUFFLED) shuffle_order(b, b->n);
            for (int k = 0; k < b->n; k++)
                if (b->f[b->order[k]].state == F_RUN) run_fiber(b, b->order[k]), ran = true;
        }
        if (release(b)) continue;
        if (ran) continue;
        for (int i = 0; i < b->n; i++)
            if (b->f[i].state != F_DONE)
                SOL_EMU_DIE("deadlock: thread %d waits at a %s that some threads never reach",
                            linear_tid(b, i),
                            b->f[i].state == F_BARRIER ? "block barrier" : "warp exchange");
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

/* The launch limits of sm_80 and sm_90 (CUDA programming guide, compute capability table); a GPU
 * refuses such a launch with cudaErrorInvalidConfiguration and runs nothing. */
inline void check_launch(const char *kernel, dim3 g, dim3 d, size_t smem) {
    uint64_t threads = (uint64_t)d.x * d.y * d.z;
    if (!g.x || !g.y || !g.z || !threads)
        die_in(kernel, "launch of an empty grid (%u,%u,%u) or block (%u,%u,%u)", g.x, g.y, g.z, d.x,
               d.y, d.z);
    if (d.x > 1024 || d.y > 1024 || d.z > 64 || threads > MAX_THREADS)
        die_in(kernel,
               "launch with a block of (%u,%u,%u): at most 1024 threads, x and y <= 1024, "
               "z <= 64",
               d.x, d.y, d.z);
    if (g.x > 2147483647u || g.y > 65535 || g.z > 65535)
        die_in(kernel, "launch with a grid of (%u,%u,%u): x <= 2^31 - 1, y and z <= 65535", g.x,
               g.y, g.z);
    if (smem > SMEM_BYTES)
        die_in(kernel,
               "launch with %zu bytes of dynamic shared memory: more than 48 KiB needs "
               "cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize)",
               smem);
}

inline uint64_t &launch_count() {
    static thread_local uint64_t n = 0;
    return n;
}

/* Runs body(arg) for every thread of every block, the blocks in a random order. */
inline void launch(const char *kernel, dim3 grid, dim3 dim, size_t smem, void (*body)(void *),
                   void *arg) {
    check_launch(kernel, grid, dim, smem);
    int n = (int)(dim.x * dim.y * dim.z);
    block *b = new block();
    b->grid = grid;
    b->dim = dim;
    b->n = n;
    b->body = body;
    b->arg = arg;
    b->kernel = kernel;
    b->r.s = cfg().seed * 0xD1B54A32D192ED03ull + ++launch_count();
    b->f = fibers(n);
    for (int i = 0; i < n; i++)
        b->f[i].tid = uint3{(unsigned)(i % dim.x), (unsigned)(i / dim.x % dim.y),
                            (unsigned)(i / (dim.x * dim.y))};
    b->dyn_bytes = smem;
    b->dyn_smem = smem ? new unsigned char[smem] : nullptr;
    block *saved = current();
    current() = b;
    /* block k of the order is a * k + c (mod total): a permutation when a is coprime to total */
    uint64_t total = (uint64_t)grid.x * grid.y * grid.z, a = 1 + b->r.below(total), c, x = a,
             y = total;
    while (y)
        c = x % y, x = y, y = c;
    if (x != 1) a = 1;
    c = b->r.below(total);
    for (uint64_t k = 0; k < total; k++) {
        uint64_t id = (uint64_t)(((unsigned __int128)a * k + c) % total);
        b->bid = uint3{(unsigned)(id % grid.x), (unsigned)(id / grid.x % grid.y),
                       (unsigned)(id / ((uint64_t)grid.x * grid.y))};
        run_block(b);
    }
    current() = saved;
    delete[] b->dyn_smem;
    delete b;
}

/* What a graph keeps of each captured operation, for cudaGraphExecUpdate's rules
 * (cuda_rt_emu.cc): its node type, the kernel launched, a copy's memory types, a memset's size. */
enum node_type { NODE_KERNEL, NODE_MEMCPY, NODE_MEMSET };
enum mem_type { MEM_HOST = 1, MEM_DEVICE = 2 };
struct node_desc {
    node_type type;
    const char *name;
    int src_mem, dst_mem;
    size_t bytes;
};
struct node {
    node_desc desc;
    std::function<void()> work;
};

/* A stream: launches run at once, unless a capture is open (a CUDA graph being recorded, see
 * cuda_rt_emu.cc), in which case they are kept, with their arguments, to run when the graph is
 * launched. A NULL stream never captures. */
struct stream {
    std::vector<node> *capture = nullptr;
};

inline void submit(void *s, const node_desc &d, std::function<void()> work) {
    stream *st = static_cast<stream *>(s);
    if (st && st->capture)
        st->capture->push_back(node{d, std::move(work)});
    else
        work();
}

/* The first thread of a block to reach a static shared variable's declaration poisons it. */
inline void shared_here(void *p, size_t bytes) {
    block *b = current();
    for (int i = 0; i < b->n_shared; i++)
        if (b->shared[i] == p) return;
    if (b->n_shared == MAX_SHARED_VARS)
        SOL_EMU_DIE("more than %d shared variables", MAX_SHARED_VARS);
    b->shared[b->n_shared++] = p;
    b->static_bytes += bytes;
    if (b->static_bytes + b->dyn_bytes > SMEM_BYTES)
        SOL_EMU_DIE("%zu bytes of static and %zu of dynamic shared memory: more than 48 KiB",
                    b->static_bytes, b->dyn_bytes);
    memset(p, 0xFF, bytes);
}

/* Whether the barrier at file:line is the one SOL_EMU_DROP_BARRIER removes. */
inline bool dropped(const char *file, int line) {
    config &c = cfg();
    if (line != c.drop_line || strcmp(base_name(file), c.drop_file) != 0) return false;
    if (!c.dropped.exchange(1))
        fprintf(stderr, "cuda_emu: SOL_EMU_DROP_BARRIER: dropping the barrier at %s:%d\n",
                c.drop_file, line);
    return true;
}

/* Waits in a warp exchange with `mask` (see release_warp). */
inline void warp_wait(warp_op op, unsigned mask, const char *what) {
    block *b = current();
    fiber *me = &b->f[b->cur];
    int lane = linear_tid(b, b->cur) % 32;
    require_waited(what);
    if (!(mask >> lane & 1))
        SOL_EMU_DIE("thread %d calls %s with mask 0x%08x, which leaves its lane %d out",
                    linear_tid(b, b->cur), what, mask, lane);
    me->op = op;
    me->mask = mask;
    yield(F_WARP);
    me->op = W_NONE;
}

inline void syncthreads_at(const char *file, int line) {
    require_waited("__syncthreads()");
    if (!dropped(file, line)) yield(F_BARRIER);
}

struct syncwarp_at {
    const char *file;
    int line;
    void operator()(unsigned mask = 0xffffffffu) const {
        if (!dropped(file, line)) warp_wait(W_SYNCWARP, mask, "__syncwarp");
    }
};

/* A lane's value in its warp's exchange: publish, wait for the mask's lanes, read, wait again
 * (so no lane overwrites its slot before every lane has read). */
template <class T>
inline T shuffle(const char *what, unsigned mask, T v, int src_of_lane(int lane, int arg), int arg,
                 int width) {
    static_assert(sizeof(T) <= sizeof(uint64_t), "shuffle of a value wider than 64 bits");
    block *b = current();
    if (width < 1 || width > 32 || (width & (width - 1)))
        SOL_EMU_DIE("%s with width %d (a power of 2 up to 32)", what, width);
    int me = linear_tid(b, b->cur), lane = me % 32, base = me - lane;
    int seg = lane / width * width, src = seg + src_of_lane(lane % width, arg);
    memcpy(&b->slots[me], &v, sizeof(T));
    warp_wait(W_SHUFFLE, mask, what);
    T out = v;
    if (src >= seg && src < seg + width) {
        if (!(mask >> src & 1))
            SOL_EMU_DIE("thread %d's %s reads lane %d, outside its mask 0x%08x", me, what, src,
                        mask);
        memcpy(&out, &b->slots[base + src], sizeof(T));
    }
    warp_wait(W_SHUFFLE, mask, what);
    return out;
}

/* A warp-wide meeting for the emulated warp-collective instructions (mma.sync, mma.cuh): every
 * lane of a full warp publishes a pointer (to its fragments, on its own fiber stack) and, once the
 * whole warp has arrived, reads every lane's; warp_leave is the second meeting, after which a
 * lane's fragments may change again. */
inline void warp_meet(const char *what, const void *mine, const void *all[32]) {
    block *b = current();
    int me = linear_tid(b, b->cur), base = me - me % 32;
    if (b->n - base < 32) SOL_EMU_DIE("%s in a warp of fewer than 32 threads", what);
    memcpy(&b->slots[me], &mine, sizeof mine);
    warp_wait(W_MMA, 0xffffffffu, what);
    for (int l = 0; l < 32; l++)
        memcpy(&all[l], &b->slots[base + l], sizeof all[l]);
}

inline void warp_leave(const char *what) {
    warp_wait(W_MMA, 0xffffffffu, what);
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

#endif
