/* threadpool: workers wait on a generation counter. A run publishes the job, bumps the
 * generation and wakes sleepers; each worker runs its static slice and decrements `pending`.
 * Spinning first keeps decode's ~150 small matmuls per token from paying a futex round trip
 * each; sleeping after a while keeps an idle worker off a shared core. */
#include "threadpool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Roughly 50-200 us of spinning on current x86 before a worker sleeps. */
#define SPIN_BEFORE_SLEEP 20000
#define SPIN_BEFORE_YIELD 4000

struct sol_threadpool {
    int n_threads;
    pthread_t *threads;
    _Atomic uint32_t generation;
    _Atomic int sleepers;
    _Atomic int pending;
    _Atomic int stop;
    sol_task_fn fn;
    void *ctx;
    int n_tasks;
};

typedef struct {
    sol_threadpool *tp;
    int index;
} worker_arg;

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t expected) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void run_slice(sol_threadpool *tp, int t) {
    int lo = (int)((int64_t)t * tp->n_tasks / tp->n_threads);
    int hi = (int)((int64_t)(t + 1) * tp->n_tasks / tp->n_threads);
    for (int i = lo; i < hi; i++)
        tp->fn(tp->ctx, i, tp->n_tasks);
}

static uint32_t wait_new_generation(sol_threadpool *tp, uint32_t seen) {
    for (int spins = 0;; spins++) {
        uint32_t g = atomic_load_explicit(&tp->generation, memory_order_acquire);
        if (g != seen) return g;
        if (spins < SPIN_BEFORE_SLEEP) {
            cpu_relax();
            continue;
        }
        /* seq_cst on both sides: either run() sees us sleeping or we see its new generation. */
        atomic_fetch_add(&tp->sleepers, 1);
        if (atomic_load(&tp->generation) == seen) futex_wait(&tp->generation, seen);
        atomic_fetch_sub(&tp->sleepers, 1);
        spins = 0;
    }
}

static void *worker_main(void *p) {
    worker_arg *a = p;
    sol_threadpool *tp = a->tp;
    int index = a->index;
    free(a);
    uint32_t seen = 0;
    for (;;) {
        seen = wait_new_generation(tp, seen);
        if (atomic_load_explicit(&tp->stop, memory_order_acquire)) break;
        run_slice(tp, index);
        atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_release);
    }
    return NULL;
}

static void publish(sol_threadpool *tp) {
    atomic_fetch_add(&tp->generation, 1);
    if (atomic_load(&tp->sleepers) > 0) futex_wake_all(&tp->generation);
}

sol_threadpool *sol_threadpool_new(int n_threads, sol_err *err) {
    if (n_threads < 1 || n_threads > 1024) {
        sol_err_set(err, -EINVAL, "threadpool: n_threads must be in [1, 1024], got %d", n_threads);
        return NULL;
    }
    sol_threadpool *tp = calloc(1, sizeof(*tp));
    if (!tp) goto oom;
    tp->n_threads = 1;
    tp->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!tp->threads) goto oom;
    for (int i = 1; i < n_threads; i++) {
        worker_arg *a = malloc(sizeof(*a));
        if (!a) goto oom;
        a->tp = tp;
        a->index = i;
        int rc = pthread_create(&tp->threads[i], NULL, worker_main, a);
        if (rc != 0) {
            free(a);
            sol_threadpool_free(tp);
            sol_err_set(err, -rc, "threadpool: starting worker %d of %d: %s", i, n_threads,
                        strerror(rc));
            return NULL;
        }
        tp->n_threads = i + 1;
    }
    return tp;
oom:
    sol_threadpool_free(tp);
    sol_err_set(err, -ENOMEM, "threadpool: out of memory for %d threads", n_threads);
    return NULL;
}

void sol_threadpool_free(sol_threadpool *tp) {
    if (!tp) return;
    if (tp->threads) {
        atomic_store_explicit(&tp->stop, 1, memory_order_release);
        publish(tp);
        for (int i = 1; i < tp->n_threads; i++)
            pthread_join(tp->threads[i], NULL);
    }
    free(tp->threads);
    free(tp);
}

int sol_threadpool_size(const sol_threadpool *tp) {
    return tp->n_threads;
}

void sol_threadpool_run(sol_threadpool *tp, sol_task_fn fn, void *ctx, int n_tasks) {
    if (n_tasks <= 0) return;
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n_tasks = n_tasks;
    if (tp->n_threads == 1) {
        run_slice(tp, 0);
        return;
    }
    if (n_tasks == 1) { /* waking a worker for one task only adds latency */
        fn(ctx, 0, 1);
        return;
    }
    atomic_store_explicit(&tp->pending, tp->n_threads - 1, memory_order_relaxed);
    publish(tp);
    run_slice(tp, 0);
    for (int spins = 0; atomic_load_explicit(&tp->pending, memory_order_acquire) > 0; spins++) {
        if (spins < SPIN_BEFORE_YIELD)
            cpu_relax();
        else
            sched_yield();
    }
}
