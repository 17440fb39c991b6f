/* rng: a counter-based random stream where draw i is a pure function of (seed, i, lane).
 * No state to carry but two integers, so a sequence resumed on another worker draws exactly the
 * same numbers. */
#ifndef SOL_RNG_H
#define SOL_RNG_H

#include <stddef.h>
#include <stdint.h>

/* Independent sub-streams at the same draw index: sampling a token uses SOL_RNG_LANE_SAMPLE;
 * speculative decoding's accept/reject test uses SOL_RNG_LANE_ACCEPT, so adding that test
 * never shifts the token draws. Further lanes are free for future users. */
enum { SOL_RNG_LANE_SAMPLE = 0, SOL_RNG_LANE_ACCEPT = 1 };

/* 64 well-mixed bits for (seed, index, lane). Stateless and thread-safe. */
uint64_t sol_rng_u64(uint64_t seed, uint64_t index, uint32_t lane);

/* Uniform double in [0, 1) with 53 random bits, from sol_rng_u64. */
double sol_rng_uniform(uint64_t seed, uint64_t index, uint32_t lane);

/* A seed derived from bytes (a request id, say), so a request without a client seed still gets
 * the same seed on whichever worker serves it. FNV-1a folded through the same mixer. */
uint64_t sol_rng_seed_from_bytes(const void *data, size_t len);

#endif
