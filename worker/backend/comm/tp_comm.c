/* tp_comm: barriers and a deterministic all-reduce for tensor-parallel rank threads. */
#include "tp_comm.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

struct sol_tp_comm {
    int n, timeout_ms;
    atomic_int arrived;
    atomic_uint generation;
    atomic_int aborted;
    atomic_uint epoch; /* aborts so far (sol_tp_comm_epoch) */
    pthread_mutex_t why_lock;
    char why[SOL_ERR_MSG_MAX / 2];
    float *bufs[SOL_TP_MAX]; /* published before a barrier, read after it */
    unsigned char blob[256];
    uint64_t calls[SOL_TP_MAX], ns[SOL_TP_MAX]; /* each written by its own rank only */
};

int sol_tp_comm_new(int n_ranks, int timeout_ms, sol_tp_comm **out, sol_err *err) {
    *out = NULL;
    if (n_ranks < 1 || n_ranks > SOL_TP_MAX || timeout_ms < 1)
        return sol_err_set(err, -EINVAL, "tensor-parallel communicator: %d ranks (1..%d), %d ms",
                           n_ranks, SOL_TP_MAX, timeout_ms);
    sol_tp_comm *c = calloc(1, sizeof *c);
    if (!c) return sol_err_set(err, -ENOMEM, "out of memory for the communicator");
    c->n = n_ranks;
    c->timeout_ms = timeout_ms;
    pthread_mutex_init(&c->why_lock, NULL);
    *out = c;
    return 0;
}

void sol_tp_comm_free(sol_tp_comm *c) {
    if (!c) return;
    pthread_mutex_destroy(&c->why_lock);
    free(c);
}

int sol_tp_comm_size(const sol_tp_comm *c) {
    return c->n;
}

void sol_tp_comm_abort(sol_tp_comm *c, const char *why) {
    pthread_mutex_lock(&c->why_lock);
    if (!atomic_load(&c->aborted)) {
        snprintf(c->why, sizeof c->why, "%s", why);
        atomic_fetch_add(&c->epoch, 1);
        atomic_store(&c->aborted, 1);
    }
    pthread_mutex_unlock(&c->why_lock);
}

void sol_tp_comm_reset(sol_tp_comm *c) {
    atomic_store(&c->arrived, 0);
    atomic_store(&c->aborted, 0);
    c->why[0] = '\0';
}

int sol_tp_comm_aborted(sol_tp_comm *c, char *why, size_t cap) {
    if (!atomic_load(&c->aborted)) return 0;
    pthread_mutex_lock(&c->why_lock);
    snprintf(why, cap, "%s", c->why);
    pthread_mutex_unlock(&c->why_lock);
    return 1;
}

unsigned sol_tp_comm_epoch(const sol_tp_comm *c) {
    return atomic_load(&c->epoch);
}

int sol_tp_comm_timeout_ms(const sol_tp_comm *c) {
    return c->timeout_ms;
}

static int aborted(sol_tp_comm *c, sol_err *err) {
    pthread_mutex_lock(&c->why_lock);
    sol_err_set(err, -ECANCELED, "tensor parallelism: %s", c->why);
    pthread_mutex_unlock(&c->why_lock);
    return -ECANCELED;
}

/* Counting barrier with a generation number. Waiters spin briefly, then yield (ranks may share
 * cores with each other and with their backends' threads). */
int sol_tp_barrier(sol_tp_comm *c, int rank, sol_err *err) {
    if (c->n == 1) return 0;
    if (atomic_load(&c->aborted)) return aborted(c, err);
    unsigned gen = atomic_load(&c->generation);
    if (atomic_fetch_add(&c->arrived, 1) == c->n - 1) {
        atomic_store(&c->arrived, 0);
        atomic_fetch_add(&c->generation, 1);
        return 0;
    }
    uint64_t deadline = 0;
    for (unsigned spin = 0; atomic_load(&c->generation) == gen; spin++) {
        if (atomic_load(&c->aborted)) return aborted(c, err);
        if (spin < 2048) continue;
        sched_yield();
        if (spin % 64) continue;
        uint64_t now = sol_now_ms();
        if (!deadline) deadline = now + (uint64_t)c->timeout_ms;
        if (now < deadline) continue;
        char why[200];
        snprintf(why, sizeof why,
                 "rank %d waited %d ms (worker.tp_timeout_ms) for the other ranks of %d", rank,
                 c->timeout_ms, c->n);
        sol_tp_comm_abort(c, why);
        sol_err_set(err, -ETIMEDOUT, "tensor parallelism: %s", why);
        return -ETIMEDOUT;
    }
    return 0;
}

/* Reduce-scatter then all-gather through the published buffers: rank r sums chunk r of every
 * rank's x (rank order) into its own x, then copies the other chunks from their owners. */
static int allreduce(sol_tp_comm *c, int rank, float *x, int64_t n, sol_err *err) {
    c->bufs[rank] = x;
    int rc = sol_tp_barrier(c, rank, err);
    if (rc) return rc;
    int64_t lo = n * rank / c->n, hi = n * (rank + 1) / c->n;
    for (int64_t i = lo; i < hi; i++) {
        float s = c->bufs[0][i];
        for (int r = 1; r < c->n; r++)
            s += c->bufs[r][i];
        x[i] = s;
    }
    if ((rc = sol_tp_barrier(c, rank, err))) return rc;
    for (int r = 0; r < c->n; r++) {
        if (r == rank) continue;
        int64_t a = n * r / c->n, b = n * (r + 1) / c->n;
        memcpy(x + a, c->bufs[r] + a, sizeof(float) * (size_t)(b - a));
    }
    return sol_tp_barrier(c, rank, err); /* nobody reuses its x while others still read it */
}

int sol_tp_allreduce(sol_tp_comm *c, int rank, float *x, int64_t n, sol_err *err) {
    if (c->n == 1) return 0;
    uint64_t t0 = sol_now_ns();
    int rc = allreduce(c, rank, x, n, err);
    c->calls[rank]++;
    c->ns[rank] += sol_now_ns() - t0;
    return rc;
}

void sol_tp_comm_time(const sol_tp_comm *c, int rank, uint64_t *calls, uint64_t *ns) {
    *calls = c->calls[rank];
    *ns = c->ns[rank];
}

int sol_tp_broadcast(sol_tp_comm *c, int rank, void *buf, int bytes, sol_err *err) {
    if (bytes < 0 || bytes > (int)sizeof c->blob)
        return sol_err_set(err, -EINVAL, "tp broadcast of %d bytes (at most %zu)", bytes,
                           sizeof c->blob);
    if (rank == 0) memcpy(c->blob, buf, (size_t)bytes);
    int rc = sol_tp_barrier(c, rank, err);
    if (rc) return rc;
    if (rank != 0) memcpy(buf, c->blob, (size_t)bytes);
    return sol_tp_barrier(c, rank, err);
}
