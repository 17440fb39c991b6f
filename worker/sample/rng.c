/* rng: counter-based generator. The mixer is the SplitMix64 finalizer (Steele, Lea, Flood 2014),
 * a bijection with full avalanche; applying it to (mixed seed + counter * odd constant) is the
 * SplitMix64 stream itself, which passes BigCrush. The seed and lane are pre-mixed so that
 * nearby seeds (0, 1, 2, ...) do not yield shifted copies of one stream. */
#include "rng.h"

#include "hash.h"

uint64_t sol_rng_u64(uint64_t seed, uint64_t index, uint32_t lane) {
    uint64_t key = sol_mix64(seed ^ sol_mix64((uint64_t)lane + 0x632BE59BD9B4E019ULL));
    return sol_mix64(key + (index + 1) * SOL_GOLDEN64);
}

double sol_rng_uniform(uint64_t seed, uint64_t index, uint32_t lane) {
    return (double)(sol_rng_u64(seed, index, lane) >> 11) * (1.0 / 9007199254740992.0);
}

uint64_t sol_rng_seed_from_bytes(const void *data, size_t len) {
    return sol_mix64(sol_fnv64(SOL_FNV64_INIT, data, len));
}
