#define _POSIX_C_SOURCE 200809L
#include "clock.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

uint64_t sol_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t sol_now_us(void) {
    return sol_now_ns() / 1000ull;
}

uint64_t sol_now_ms(void) {
    return sol_now_ns() / 1000000ull;
}

double sol_now_s(void) {
    return (double)sol_now_ns() * 1e-9;
}

void sol_sleep_ms(uint32_t ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

int sol_cond_init(pthread_cond_t *cv) {
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc) return -rc;
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (!rc) rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return -rc;
}

struct timespec sol_deadline_ms(uint64_t ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    return ts;
}
