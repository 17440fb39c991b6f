/* Promise: the thread pool runs every task exactly once, by a fixed static partition, across many
 * back-to-back runs and after workers have gone to sleep; bad sizes are refused. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <cmocka.h>

#include "threadpool.h"

typedef struct {
    _Atomic int hits[256];
    pthread_t who[256];
} record;

static void mark(void *ctx, int task, int n_tasks) {
    record *r = ctx;
    assert_true(task >= 0 && task < n_tasks);
    atomic_fetch_add(&r->hits[task], 1);
    r->who[task] = pthread_self();
}

static void test_every_task_once(void **state) {
    (void)state;
    sol_err e = {0};
    for (int threads = 1; threads <= 3; threads++) {
        sol_threadpool *tp = sol_threadpool_new(threads, &e);
        assert_non_null(tp);
        assert_int_equal(sol_threadpool_size(tp), threads);
        static record r;
        for (int round = 0; round < 300; round++) {
            int n = 1 + round % 200;
            memset(&r, 0, sizeof(r));
            sol_threadpool_run(tp, mark, &r, n);
            for (int i = 0; i < n; i++)
                assert_int_equal(atomic_load(&r.hits[i]), 1);
            for (int i = n; i < 256; i++)
                assert_int_equal(atomic_load(&r.hits[i]), 0);
            /* Static partition: the caller (thread 0) runs the first slice. */
            if (n >= threads) assert_true(pthread_equal(r.who[0], pthread_self()));
        }
        sol_threadpool_free(tp);
    }
}

/* Contiguous slices: tasks run by one thread form one range, and the same run twice maps tasks to
 * the same slice boundaries. */
static void test_static_slices(void **state) {
    (void)state;
    sol_err e = {0};
    sol_threadpool *tp = sol_threadpool_new(3, &e);
    assert_non_null(tp);
    static record r;
    memset(&r, 0, sizeof(r));
    sol_threadpool_run(tp, mark, &r, 10);
    /* Slices of 10 over 3 threads: [0,3) [3,6) [6,10). */
    assert_true(pthread_equal(r.who[0], r.who[2]));
    assert_true(pthread_equal(r.who[3], r.who[5]));
    assert_true(pthread_equal(r.who[6], r.who[9]));
    assert_false(pthread_equal(r.who[2], r.who[3]));
    assert_false(pthread_equal(r.who[5], r.who[6]));
    sol_threadpool_free(tp);
}

static void test_wakes_after_sleep(void **state) {
    (void)state;
    sol_err e = {0};
    sol_threadpool *tp = sol_threadpool_new(2, &e);
    assert_non_null(tp);
    static record r;
    for (int round = 0; round < 3; round++) {
        usleep(20000); /* long enough for the worker to stop spinning and sleep */
        memset(&r, 0, sizeof(r));
        sol_threadpool_run(tp, mark, &r, 2);
        assert_int_equal(atomic_load(&r.hits[0]), 1);
        assert_int_equal(atomic_load(&r.hits[1]), 1);
        assert_false(pthread_equal(r.who[1], pthread_self()));
    }
    sol_threadpool_run(tp, mark, &r, 0); /* no tasks: returns at once */
    sol_threadpool_free(tp);
    sol_threadpool_free(NULL);
}

static void test_bad_size(void **state) {
    (void)state;
    sol_err e = {0};
    assert_null(sol_threadpool_new(0, &e));
    assert_int_equal(e.code, -EINVAL);
    assert_non_null(strstr(e.msg, "got 0"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_task_once),
        cmocka_unit_test(test_static_slices),
        cmocka_unit_test(test_wakes_after_sleep),
        cmocka_unit_test(test_bad_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
