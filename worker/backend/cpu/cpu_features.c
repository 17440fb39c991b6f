/* cpu_features: runtime detection with __builtin_cpu_supports, so one binary built without
 * -march=native runs the fastest path each machine has. */
#include "cpu_features.h"

#include <cpuid.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* F16C straight from CPUID (leaf 1, ECX bit 29): clang's __builtin_cpu_supports has no "f16c". */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}

int sol_cpu_isa_supported(sol_cpu_isa isa) {
    __builtin_cpu_init();
    switch (isa) {
    case SOL_ISA_SCALAR:
        return 1;
    case SOL_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case SOL_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
               has_f16c() && __builtin_cpu_supports("fma");
    }
    return 0;
}

sol_cpu_isa sol_cpu_isa_best(void) {
    if (sol_cpu_isa_supported(SOL_ISA_AVX512)) return SOL_ISA_AVX512;
    if (sol_cpu_isa_supported(SOL_ISA_AVX2)) return SOL_ISA_AVX2;
    return SOL_ISA_SCALAR;
}

const char *sol_cpu_isa_name(sol_cpu_isa isa) {
    switch (isa) {
    case SOL_ISA_SCALAR:
        return "scalar";
    case SOL_ISA_AVX2:
        return "avx2";
    case SOL_ISA_AVX512:
        return "avx512";
    }
    return "?";
}

/* `name` as a path; `origin` says where the name came from in messages ("SOL_CPU_ISA=", "cpu:"). */
static int isa_from_name(const char *name, const char *origin, sol_cpu_isa *out, sol_err *err) {
    for (int i = SOL_ISA_SCALAR; i <= SOL_ISA_AVX512; i++) {
        if (strcmp(name, sol_cpu_isa_name((sol_cpu_isa)i)) != 0) continue;
        if (!sol_cpu_isa_supported((sol_cpu_isa)i))
            return sol_err_set(err, -ENOTSUP, "%s%s: this CPU lacks the features it needs", origin,
                               name);
        *out = (sol_cpu_isa)i;
        return 0;
    }
    return sol_err_set(err, -EINVAL, "%s%s: expected scalar, avx2 or avx512", origin, name);
}

int sol_cpu_isa_select(const char *variant, sol_cpu_isa *out, sol_err *err) {
    if (variant && *variant) return isa_from_name(variant, "cpu:", out, err);
    const char *env = getenv("SOL_CPU_ISA");
    if (!env || !*env) {
        *out = sol_cpu_isa_best();
        return 0;
    }
    return isa_from_name(env, "SOL_CPU_ISA=", out, err);
}
