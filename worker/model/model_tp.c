/* model_tp: the tensor-parallel rank group behind a model's rank 0. Rank 0 runs on the caller's
 * thread (the engine's), ranks 1..n-1 on a thread each, all in lock-step on one batch: a step is
 * posted, every rank runs its shard's forward pass (meeting at the all-reduces), rank 0 waits for
 * the others. A rank that fails aborts the communicator so the others return at once; a rank
 * that does not finish within tp_timeout_ms leaves the group broken: every later step fails at
 * once and model_health says why, so the worker can report itself unhealthy. So does a rank
 * whose device is stuck (its backend's health: a CUDA stream that missed the deadline and did not
 * drain after its NCCL communicator was aborted). Any other failure fails the step only: the
 * communicator is reset, and CUDA ranks rebuild their NCCL communicators at the next step. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "model_internal.h"

typedef struct rank {
    model_group *g;
    int r;
    model_rank *m;
    sol_backend *be; /* owned */
    pthread_t thread;
    int started;
    int running; /* inside the posted step */
    int rc;
    sol_err err;
} rank;

struct model_group {
    int n, timeout_ms;
    sol_tp_comm *comm;      /* owned */
    rank ranks[SOL_TP_MAX]; /* [0] unused: rank 0 is the caller's model */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t step; /* steps posted */
    int busy;      /* ranks 1..n-1 still inside the posted step */
    int stop;
    model_kv *kv; /* the posted step */
    const model_batch *b;
    float *logits;
    char broken[SOL_ERR_MSG_MAX / 2]; /* a rank missed the deadline: the group is stuck */
    int stall_rank;                   /* SOL_TEST_TP_STALL (test-only, docs/configuration.md) */
    uint64_t stall_step;
};

/* The test-only fault: rank R stops before step S ("R:S") and stays stopped until the group is
 * freed, as a hung GPU or a deadlocked rank would. */
static void read_stall_hook(model_group *g) {
    const char *v = getenv("SOL_TEST_TP_STALL");
    unsigned long long step = 0;
    int r = 0;
    if (!v || sscanf(v, "%d:%llu", &r, &step) != 2 || r < 1 || r >= g->n) return;
    g->stall_rank = r;
    g->stall_step = step;
    LOG_WARN("model", "SOL_TEST_TP_STALL: rank %d will stall at step %llu (a test-only fault)", r,
             step);
}

static void stall(model_group *g) {
    for (;;) {
        pthread_mutex_lock(&g->mu);
        int stop = g->stop;
        pthread_mutex_unlock(&g->mu);
        if (stop) return;
        usleep(10000);
    }
}

static void *rank_main(void *arg) {
    rank *k = arg;
    model_group *g = k->g;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        while (!g->stop && g->step == seen)
            pthread_cond_wait(&g->go, &g->mu);
        if (g->stop) {
            pthread_mutex_unlock(&g->mu);
            return NULL;
        }
        seen = g->step;
        model_kv *kv = g->kv;
        const model_batch *b = g->b;
        float *logits = g->logits;
        pthread_mutex_unlock(&g->mu);
        if (k->r == g->stall_rank && seen == g->stall_step) {
            stall(g);
            return NULL;
        }
        sol_err_clear(&k->err);
        int rc = rank_forward(k->m, kv->r[k->r], b, logits, &k->err);
        if (rc) sol_tp_comm_abort(g->comm, k->err.msg);
        pthread_mutex_lock(&g->mu);
        k->rc = rc;
        k->running = 0;
        g->busy--;
        pthread_cond_broadcast(&g->done);
        pthread_mutex_unlock(&g->mu);
    }
}

/* A rank whose device stopped answering (sol_backend_health): the group is broken, as when its
 * thread does not come back. 0, or 1 with g->broken set. Only when no rank is running. */
static int device_stuck(model_group *g, model_rank *m0) {
    char why[SOL_ERR_MSG_MAX / 2 - 64];
    for (int r = 0; r < g->n; r++) {
        sol_backend *be = r ? g->ranks[r].be : m0->be;
        if (!be || !sol_backend_health(be, why, sizeof why)) continue;
        snprintf(g->broken, sizeof g->broken,
                 "tensor-parallel rank %d: %s: the rank group is stuck", r, why);
        LOG_ERROR("model", "%s", g->broken);
        return 1;
    }
    return 0;
}

/* Waits up to timeout_ms for ranks 1..n-1; 0, or the first rank still running. */
static int wait_ranks(model_group *g) {
    struct timespec dl = sol_deadline_ms((uint64_t)g->timeout_ms);
    int late = 0;
    pthread_mutex_lock(&g->mu);
    while (g->busy > 0)
        if (pthread_cond_timedwait(&g->done, &g->mu, &dl) == ETIMEDOUT) break;
    for (int r = 1; r < g->n && g->busy > 0 && !late; r++)
        if (g->ranks[r].running) late = r;
    pthread_mutex_unlock(&g->mu);
    return late;
}

/* The error to report: a rank's own failure before the -ECANCELED it caused in the others.
 * Every rank's failure is logged: each says what it saw (its abort, its deadline). */
static int first_error(model_group *g, int rc0, const sol_err *e0, sol_err *err) {
    int rc = rc0;
    const sol_err *src = e0;
    if (rc0)
        LOG_WARN("model", "tensor-parallel rank 0 failed step %llu: %s",
                 (unsigned long long)g->step, e0->msg);
    for (int r = 1; r < g->n; r++) {
        const rank *k = &g->ranks[r];
        if (k->rc)
            LOG_WARN("model", "tensor-parallel rank %d failed step %llu: %s", r,
                     (unsigned long long)g->step, k->err.msg);
        if (k->rc && (!rc || (rc == -ECANCELED && k->rc != -ECANCELED))) rc = k->rc, src = &k->err;
    }
    if (rc) {
        sol_err_set(err, rc, "%s", src->msg);
        sol_tp_comm_reset(g->comm);
    }
    return rc;
}

int tp_forward(model_group *g, model_rank *m, model_kv *kv, const model_batch *b, float *logits,
               sol_err *err) {
    if (g->broken[0]) return sol_err_set(err, -EIO, "%s", g->broken);
    pthread_mutex_lock(&g->mu);
    g->kv = kv, g->b = b, g->logits = logits;
    g->busy = g->n - 1;
    for (int r = 1; r < g->n; r++)
        g->ranks[r].running = 1, g->ranks[r].rc = 0;
    g->step++;
    pthread_cond_broadcast(&g->go);
    pthread_mutex_unlock(&g->mu);
    sol_err e0 = {0};
    int rc0 = rank_forward(m, kv->r[0], b, logits, &e0);
    if (rc0) sol_tp_comm_abort(g->comm, e0.msg);
    int late = wait_ranks(g);
    if (late) {
        snprintf(g->broken, sizeof g->broken,
                 "tensor-parallel rank %d did not finish step %llu within %d ms "
                 "(worker.tp_timeout_ms): the rank group is stuck",
                 late, (unsigned long long)g->step, g->timeout_ms);
        LOG_ERROR("model", "%s", g->broken);
        return sol_err_set(err, -ETIMEDOUT, "%s", g->broken);
    }
    int rc = first_error(g, rc0, &e0, err);
    if (rc && device_stuck(g, m)) return sol_err_set(err, -ETIMEDOUT, "%s", g->broken);
    return rc;
}

int tp_health(const model_group *g, char *why, size_t cap) {
    if (!g->broken[0]) return 0;
    snprintf(why, cap, "%s", g->broken);
    return -ETIMEDOUT;
}

model_rank *tp_rank(model_group *g, int r) {
    return g->ranks[r].m;
}

/* Ranks 1..n-1: a backend each (rank r on device opts.device + r), the shard, the thread. */
static int add_rank(model_group *g, int r, const char *path, int flags, const model_tp_config *tp,
                    sol_err *err) {
    rank *k = &g->ranks[r];
    k->g = g, k->r = r;
    sol_backend_opts o = tp->opts;
    o.device += r;
    if (!(k->be = sol_backend_new(tp->backend, &o, err)))
        return sol_err_wrap(err, "tensor-parallel rank %d: ", r);
    if (!(k->m = rank_load(path, flags, k->be, r, g->n, g->comm, err)))
        return sol_err_wrap(err, "tensor-parallel rank %d: ", r);
    if (pthread_create(&k->thread, NULL, rank_main, k) != 0)
        return sol_err_set(err, -EAGAIN, "cannot start the thread of tensor-parallel rank %d", r);
    k->started = 1;
    return 0;
}

model_group *tp_group_new(const char *path, int gguf_flags, const model_tp_config *tp,
                          sol_tp_comm *comm, sol_err *err) {
    model_group *g = calloc(1, sizeof *g);
    if (!g) {
        sol_tp_comm_free(comm);
        sol_err_set(err, -ENOMEM, "out of memory for the rank group");
        return NULL;
    }
    g->n = tp->n, g->timeout_ms = tp->timeout_ms, g->comm = comm;
    pthread_mutex_init(&g->mu, NULL);
    sol_cond_init(&g->done);
    pthread_cond_init(&g->go, NULL);
    read_stall_hook(g);
    for (int r = 1; r < g->n; r++)
        if (add_rank(g, r, path, gguf_flags, tp, err)) {
            tp_group_free(g);
            return NULL;
        }
    return g;
}

void tp_group_free(model_group *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_broadcast(&g->go);
    pthread_mutex_unlock(&g->mu);
    for (int r = 1; r < g->n; r++) {
        rank *k = &g->ranks[r];
        if (k->started) pthread_join(k->thread, NULL);
        rank_free(k->m);
        sol_backend_free(k->be);
    }
    pthread_cond_destroy(&g->go);
    pthread_cond_destroy(&g->done);
    pthread_mutex_destroy(&g->mu);
    sol_tp_comm_free(g->comm);
    free(g);
}
