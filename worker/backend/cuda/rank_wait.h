/* rank_wait: a tensor-parallel rank's wait for its stream against the group's deadline
 * (worker.tp_timeout_ms), one rule for the GPU runtime (cuda_rt.cu) and its emulation.
 *
 * The stream is polled until it finishes; another rank's abort or a collective's error, or the
 * deadline, aborts this rank's communicator and the group (fail_group), then the stream gets half
 * a deadline more to drain (an aborted collective returns). One that does not leaves the device
 * stuck (d->stuck, d->stuck_why): every later wait fails at once. C++ only (a template over the
 * two runtimes' device structs, which share the fields used here). */
#ifndef SOL_RANK_WAIT_H
#define SOL_RANK_WAIT_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static inline uint64_t sol_rank_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/* finished(failed, &rc): 1 when the stream has finished, with its result in rc (computed only
 * when failed is 0: a wait that already failed returns that failure); group_failed(d, why, cap):
 * 0, or why another rank or the collective library gave up; fail_group(d, why): abort the
 * communicator and the group; pause(i): the wait between polls. */
template <class Dev, class Finished, class GroupFailed, class FailGroup, class Pause>
int sol_rank_wait(Dev *d, char *why, size_t cap, Finished finished, GroupFailed group_failed,
                  FailGroup fail_group, Pause pause) {
    uint64_t deadline = sol_rank_now_ms() + (uint64_t)d->timeout_ms;
    int failed = 0;
    for (unsigned i = 0;; i++) {
        int rc = 0;
        if (finished(failed, &rc)) return failed ? failed : rc;
        uint64_t now = sol_rank_now_ms();
        if (!failed && (failed = group_failed(d, why, cap))) {
            fail_group(d, why);
            deadline = now + (uint64_t)d->timeout_ms / 2;
        } else if (!failed && now >= deadline) {
            snprintf(why, cap,
                     "device %d (rank %d): the stream did not finish within %d ms "
                     "(worker.tp_timeout_ms); its NCCL communicator was aborted",
                     d->index, d->rank, d->timeout_ms);
            fail_group(d, why);
            failed = -ETIMEDOUT;
            deadline = now + (uint64_t)d->timeout_ms / 2;
        } else if (failed && now >= deadline) {
            snprintf(d->stuck_why, sizeof d->stuck_why,
                     "device %d (rank %d) is stuck: its stream did not drain within %d ms of "
                     "aborting its NCCL communicator (worker.tp_timeout_ms), after: %.200s",
                     d->index, d->rank, d->timeout_ms / 2, why);
            d->stuck = 1;
            snprintf(why, cap, "%s", d->stuck_why);
            return -ETIMEDOUT;
        }
        pause(i);
    }
}

/* 0, or -ETIMEDOUT with the reason a wait left the device stuck (dev_health). */
template <class Dev> int sol_rank_health(const Dev *d, char *why, size_t cap) {
    if (!d->stuck) return 0;
    snprintf(why, cap, "%s", d->stuck_why);
    return -ETIMEDOUT;
}

#endif
