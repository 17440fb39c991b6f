/* Promise: the tensor-parallel communicator sums every rank's buffer into every rank's buffer,
 * the same bits on each (rank order), for sizes that do not divide by the rank count; a rank
 * that never arrives makes the others fail with -ETIMEDOUT (naming the deadline) instead of
 * hanging; an abort releases waiting ranks at once; broadcast copies rank 0's bytes. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "clock.h"
#include "tp_comm.h"

#define N_MAX 4
#define LEN 1001

typedef struct job {
    sol_tp_comm *c;
    int rank, rc, rounds;
    float x[LEN];
    sol_err err;
} job;

static void *reduce_main(void *arg) {
    job *j = arg;
    for (int round = 0; round < j->rounds && !j->rc; round++) {
        for (int i = 0; i < LEN; i++)
            j->x[i] = (float)(j->rank + 1) * 0.1f + (float)i * 1e-3f + (float)round;
        j->rc = sol_tp_allreduce(j->c, j->rank, j->x, LEN, &j->err);
    }
    return NULL;
}

static int run(int n, int rounds, int absent_rank, job *jobs, sol_tp_comm *c) {
    pthread_t t[N_MAX];
    for (int r = 0; r < n; r++) {
        jobs[r] = (job){.c = c, .rank = r, .rounds = rounds};
        if (r != absent_rank) pthread_create(&t[r], NULL, reduce_main, &jobs[r]);
    }
    for (int r = 0; r < n; r++)
        if (r != absent_rank) pthread_join(t[r], NULL);
    return 0;
}

static void test_sum_is_the_same_everywhere(void **state) {
    (void)state;
    static job jobs[N_MAX];
    for (int n = 1; n <= N_MAX; n++) {
        sol_tp_comm *c = NULL;
        sol_err e = {0};
        assert_int_equal(sol_tp_comm_new(n, 5000, &c, &e), 0);
        run(n, 3, -1, jobs, c);
        for (int i = 0; i < LEN; i++) {
            float want = 0; /* rank order, as the communicator adds */
            for (int r = 0; r < n; r++)
                want += (float)(r + 1) * 0.1f + (float)i * 1e-3f + 2.0f;
            for (int r = 0; r < n; r++) {
                assert_int_equal(jobs[r].rc, 0);
                assert_memory_equal(&jobs[r].x[i], &want, sizeof want);
            }
        }
        sol_tp_comm_free(c);
    }
}

static void test_absent_rank_times_out(void **state) {
    (void)state;
    static job jobs[3];
    sol_tp_comm *c = NULL;
    sol_err e = {0};
    assert_int_equal(sol_tp_comm_new(3, 200, &c, &e), 0);
    uint64_t t0 = sol_now_ms();
    run(3, 1, 2, jobs, c);
    uint64_t took = sol_now_ms() - t0;
    for (int r = 0; r < 2; r++)
        assert_true(jobs[r].rc == -ETIMEDOUT || jobs[r].rc == -ECANCELED);
    assert_true(jobs[0].rc == -ETIMEDOUT || jobs[1].rc == -ETIMEDOUT);
    const sol_err *te = jobs[0].rc == -ETIMEDOUT ? &jobs[0].err : &jobs[1].err;
    assert_non_null(strstr(te->msg, "200 ms"));
    assert_true(took >= 200 && took < 5000);
    /* Reset, then the three ranks work again. */
    sol_tp_comm_reset(c);
    run(3, 2, -1, jobs, c);
    for (int r = 0; r < 3; r++)
        assert_int_equal(jobs[r].rc, 0);
    sol_tp_comm_free(c);
}

static void test_abort_releases_waiters(void **state) {
    (void)state;
    static job jobs[2];
    sol_tp_comm *c = NULL;
    sol_err e = {0};
    assert_int_equal(sol_tp_comm_new(2, 60000, &c, &e), 0);
    sol_tp_comm_abort(c, "rank 1 failed: out of memory");
    uint64_t t0 = sol_now_ms();
    run(2, 1, 1, jobs, c);
    assert_int_equal(jobs[0].rc, -ECANCELED);
    assert_non_null(strstr(jobs[0].err.msg, "out of memory"));
    assert_true(sol_now_ms() - t0 < 5000);
    sol_tp_comm_free(c);
}

typedef struct bjob {
    sol_tp_comm *c;
    int rank, rc;
    char buf[128];
} bjob;

static void *bcast_main(void *arg) {
    bjob *j = arg;
    sol_err e = {0};
    j->rc = sol_tp_broadcast(j->c, j->rank, j->buf, (int)sizeof j->buf, &e);
    return NULL;
}

static void test_broadcast(void **state) {
    (void)state;
    sol_tp_comm *c = NULL;
    sol_err e = {0};
    assert_int_equal(sol_tp_comm_new(3, 5000, &c, &e), 0);
    bjob j[3];
    pthread_t t[3];
    for (int r = 0; r < 3; r++) {
        j[r] = (bjob){.c = c, .rank = r};
        memset(j[r].buf, r == 0 ? 'A' : 'z', sizeof j[r].buf);
        pthread_create(&t[r], NULL, bcast_main, &j[r]);
    }
    for (int r = 0; r < 3; r++)
        pthread_join(t[r], NULL);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(j[r].rc, 0);
        assert_memory_equal(j[r].buf, j[0].buf, sizeof j[r].buf);
        assert_int_equal(j[r].buf[5], 'A');
    }
    assert_int_equal(sol_tp_broadcast(c, 0, j[0].buf, 1000, &e), -EINVAL);
    sol_tp_comm_free(c);
}

static void test_bad_sizes(void **state) {
    (void)state;
    sol_tp_comm *c = NULL;
    sol_err e = {0};
    assert_int_equal(sol_tp_comm_new(0, 100, &c, &e), -EINVAL);
    assert_int_equal(sol_tp_comm_new(SOL_TP_MAX + 1, 100, &c, &e), -EINVAL);
    assert_int_equal(sol_tp_comm_new(2, 0, &c, &e), -EINVAL);
    assert_null(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sum_is_the_same_everywhere),
        cmocka_unit_test(test_absent_rank_times_out),
        cmocka_unit_test(test_abort_releases_waiters),
        cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_bad_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
