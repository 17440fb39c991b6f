/* clock: monotonic time helpers for latency metrics, timeouts and heartbeats.
 * Never wall-clock: NTP steps must not fire timeouts or skew histograms. */
#ifndef SOL_CLOCK_H
#define SOL_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

uint64_t sol_now_ns(void);
uint64_t sol_now_us(void);
uint64_t sol_now_ms(void);
double sol_now_s(void);
void sol_sleep_ms(uint32_t ms);

/* A condition variable whose timed waits run on the monotonic clock: with the default (wall)
 * clock, an NTP step back would stretch a periodic wait by the size of the step. 0 or -errno. */
int sol_cond_init(pthread_cond_t *cv);
/* The deadline `ms` from now for pthread_cond_timedwait on a sol_cond_init() variable. */
struct timespec sol_deadline_ms(uint64_t ms);

#endif
