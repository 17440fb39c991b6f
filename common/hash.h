/* hash: the one copy of the non-cryptographic hashes Sol uses (FNV-1a, the SplitMix64 and
 * MurmurHash3 finalizers). Their values are kept in saved state (classifier weights, seeds), so
 * they never change. */
#ifndef SOL_HASH_H
#define SOL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define SOL_FNV64_INIT 0xcbf29ce484222325ull
#define SOL_FNV64_PRIME 0x100000001b3ull
#define SOL_FNV32_INIT 2166136261u
#define SOL_GOLDEN64 0x9e3779b97f4a7c15ull /* 2^64 / phi, SplitMix64's increment */

/* FNV-1a: fold n bytes of p into h (start from SOL_FNV64_INIT / SOL_FNV32_INIT). */
uint64_t sol_fnv64(uint64_t h, const void *p, size_t n);
uint32_t sol_fnv32(uint32_t h, const void *p, size_t n);
/* The same over a NUL-terminated string; NULL folds nothing. */
uint64_t sol_fnv64_str(uint64_t h, const char *s);
/* FNV-1a over bytes with ASCII letters lower-cased (the classifier's case-blind features). */
uint64_t sol_fnv64_lower(uint64_t h, const void *p, size_t n);

/* SplitMix64's finalizer: a bijection with full avalanche. */
uint64_t sol_mix64(uint64_t x);
/* One step of the SplitMix64 generator: the finalizer of x + SOL_GOLDEN64. */
uint64_t sol_splitmix64(uint64_t x);
/* MurmurHash3's fmix64: another full-avalanche bijection (the router's affinity hashes). */
uint64_t sol_fmix64(uint64_t x);

#endif
