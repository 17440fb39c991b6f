/* tp_comm: the communicator of tensor-parallel ranks that share one process (one thread per
 * rank): barriers and an in-place sum all-reduce through shared memory, with a deadline.
 *
 * CPU ranks (and the emulated CUDA backend) all-reduce through it; CUDA ranks use NCCL and take
 * only its byte broadcast (the NCCL unique id) from here. Every wait has a deadline
 * (worker.tp_timeout_ms): a rank that does not arrive makes the others fail with -ETIMEDOUT
 * instead of hanging, and a rank that failed aborts the communicator so the others return at
 * once. The sum is deterministic: every element is added in rank order 0..n-1 by exactly one
 * rank and copied to the others, so all ranks hold the same bits. */
#ifndef SOL_TP_COMM_H
#define SOL_TP_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define SOL_TP_MAX 8

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sol_tp_comm sol_tp_comm;

/* n_ranks in [1, SOL_TP_MAX]; timeout_ms > 0. Caller owns the result. */
int sol_tp_comm_new(int n_ranks, int timeout_ms, sol_tp_comm **out, sol_err *err);
void sol_tp_comm_free(sol_tp_comm *c); /* NULL is a no-op; no rank may be inside a call */

int sol_tp_comm_size(const sol_tp_comm *c);

/* Sum x (n floats, the same n on every rank) across ranks in place. 0, -ETIMEDOUT when a rank
 * did not arrive within the deadline, -ECANCELED when the communicator was aborted; err says
 * which. */
int sol_tp_allreduce(sol_tp_comm *c, int rank, float *x, int64_t n, sol_err *err);

/* Every rank waits for every other one. */
int sol_tp_barrier(sol_tp_comm *c, int rank, sol_err *err);

/* Rank 0's `bytes` bytes of buf are copied into every other rank's buf (bytes <= 256). */
int sol_tp_broadcast(sol_tp_comm *c, int rank, void *buf, int bytes, sol_err *err);

/* All-reduces rank `rank` made and the time it spent in them (waiting for the others included),
 * since the communicator was made: for benchmarks. */
void sol_tp_comm_time(const sol_tp_comm *c, int rank, uint64_t *calls, uint64_t *ns);

/* A rank failed: every rank waiting now or later returns -ECANCELED with `why`, until reset. */
void sol_tp_comm_abort(sol_tp_comm *c, const char *why);

/* Ready for the next step after a failure. Only when no rank is inside a call. */
void sol_tp_comm_reset(sol_tp_comm *c);

/* 1 with the abort's reason in why while the communicator is aborted, else 0; never waits.
 * CUDA ranks poll it while they wait for their stream, so a rank that failed elsewhere makes
 * them abort their NCCL communicator instead of waiting out the deadline. */
int sol_tp_comm_aborted(sol_tp_comm *c, char *why, size_t cap);

/* Counts the aborts so far: a CUDA rank's NCCL communicator made in an earlier epoch has seen
 * an aborted step and is rebuilt (every rank sees the same epoch after the reset). */
unsigned sol_tp_comm_epoch(const sol_tp_comm *c);

/* The deadline of every wait (worker.tp_timeout_ms): CUDA ranks wait for their stream and for
 * NCCL against it too. */
int sol_tp_comm_timeout_ms(const sol_tp_comm *c);

#ifdef __cplusplus
}
#endif

#endif
