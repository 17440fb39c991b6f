/* rng: counter-based generator. The mixer is the SplitMix64 finalizer (Steele, Lea, Flood 2014),
 * a bijection with full avalanche; applying it to (mixed seed + counter * odd constant) is the
 * SplitMix64 stream itself, which passes BigCrush. The seed and lane are pre-mixed so that
 * nearby seeds (0, 1, 2, ...) do not yield shifted copies of one stream. */
#include "rng.h"

#define GOLDEN_GAMMA 0x9E3779B97F4A7C15ULL

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

uint64_t sol_rng_u64(uint64_t seed, uint64_t index, uint32_t lane) {
    uint64_t key = mix64(seed ^ mix64((uint64_t)lane + 0x632BE59BD9B4E019ULL));
    return mix64(key + (index + 1) * GOLDEN_GAMMA);
}

double sol_rng_uniform(uint64_t seed, uint64_t index, uint32_t lane) {
    return (double)(sol_rng_u64(seed, index, lane) >> 11) * (1.0 / 9007199254740992.0);
}

uint64_t sol_rng_seed_from_bytes(const void *data, size_t len) {
    const unsigned char *p = data;
    uint64_t h = 0xCBF29CE484222325ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001B3ULL;
    }
    return mix64(h);
}
