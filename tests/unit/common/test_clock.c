/* Promise: periodic and bounded waits (the HTTP deadline sweeper, the router resolver, the
 * engine's idle wake, tensor-parallel rank waits) run on the monotonic clock: a deadline from
 * sol_deadline_ms() on a sol_cond_init() variable waits its time, neither returning at once (a
 * clock mismatch) nor much longer. Lower bounds only, plus a generous ceiling. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "clock.h"

static void test_deadline_waits_its_time(void **state) {
    (void)state;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv;
    assert_int_equal(sol_cond_init(&cv), 0);
    pthread_mutex_lock(&mu);
    for (int i = 0; i < 3; i++) {
        uint64_t t0 = sol_now_ms();
        struct timespec dl = sol_deadline_ms(40);
        int rc = 0;
        while (rc != ETIMEDOUT) /* a spurious wake-up waits again for the same deadline */
            rc = pthread_cond_timedwait(&cv, &mu, &dl);
        uint64_t took = sol_now_ms() - t0;
        /* On the wall clock's epoch a monotonic deadline lies decades back: no wait at all. */
        assert_true(took >= 39);
        assert_true(took < 10000);
    }
    pthread_mutex_unlock(&mu);
    pthread_cond_destroy(&cv);
}

static void test_deadline_normalised(void **state) {
    (void)state;
    for (uint64_t ms = 0; ms < 3000; ms += 7) {
        struct timespec ts = sol_deadline_ms(ms);
        assert_true(ts.tv_nsec >= 0 && ts.tv_nsec < 1000000000L);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deadline_waits_its_time),
        cmocka_unit_test(test_deadline_normalised),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
