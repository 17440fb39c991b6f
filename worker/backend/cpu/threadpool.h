/* threadpool: a persistent pool for the CPU backend's data-parallel ops. One run() hands out
 * n_tasks by fixed static partition, so which thread computes what never depends on timing. */
#ifndef SOL_THREADPOOL_H
#define SOL_THREADPOOL_H

#include "err.h"

typedef struct sol_threadpool sol_threadpool;

/* Called once per task index in [0, n_tasks). */
typedef void (*sol_task_fn)(void *ctx, int task, int n_tasks);

/* A pool of n_threads threads in total: the caller of run() is thread 0 and n_threads - 1
 * workers are started here (n_threads >= 1). Caller owns the pool. */
sol_threadpool *sol_threadpool_new(int n_threads, sol_err *err);
/* Stops and joins the workers. NULL is a no-op. Must not race with run(). */
void sol_threadpool_free(sol_threadpool *tp);
int sol_threadpool_size(const sol_threadpool *tp);

/* Runs fn for every task and returns when all are done. Thread t runs the contiguous range
 * [t * n_tasks / n_threads, (t + 1) * n_tasks / n_threads) in increasing order (a single task
 * runs on the caller). Workers spin
 * briefly after each run (dispatch costs a few microseconds while calls come back to back),
 * then sleep on a futex. One caller at a time. */
void sol_threadpool_run(sol_threadpool *tp, sol_task_fn fn, void *ctx, int n_tasks);

#endif
