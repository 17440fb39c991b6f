/* clock: monotonic time helpers for latency metrics, timeouts and heartbeats.
 * Never wall-clock: NTP steps must not fire timeouts or skew histograms. */
#ifndef SOL_CLOCK_H
#define SOL_CLOCK_H

#include <stdint.h>

uint64_t sol_now_ns(void);
uint64_t sol_now_us(void);
uint64_t sol_now_ms(void);
double sol_now_s(void);
void sol_sleep_ms(uint32_t ms);

#endif
