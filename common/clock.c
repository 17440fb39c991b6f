#define _POSIX_C_SOURCE 200809L
#include "clock.h"

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
