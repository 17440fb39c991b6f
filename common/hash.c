/* hash: see hash.h. */
#include "hash.h"

uint64_t sol_fnv64(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * SOL_FNV64_PRIME;
    return h;
}

uint32_t sol_fnv32(uint32_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

uint64_t sol_fnv64_str(uint64_t h, const char *s) {
    for (; s && *s; s++)
        h = (h ^ (unsigned char)*s) * SOL_FNV64_PRIME;
    return h;
}

uint64_t sol_fnv64_lower(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = b[i] >= 'A' && b[i] <= 'Z' ? (unsigned char)(b[i] + 32) : b[i];
        h = (h ^ c) * SOL_FNV64_PRIME;
    }
    return h;
}

uint64_t sol_mix64(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t sol_splitmix64(uint64_t x) {
    return sol_mix64(x + SOL_GOLDEN64);
}

uint64_t sol_fmix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}
