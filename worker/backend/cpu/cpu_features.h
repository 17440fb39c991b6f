/* cpu_features: which SIMD path the CPU backend runs (scalar, AVX2+FMA+F16C, AVX-512 with VNNI),
 * chosen once at backend creation from the CPU's flags or forced by env SOL_CPU_ISA for tests. */
#ifndef SOL_CPU_FEATURES_H
#define SOL_CPU_FEATURES_H

#include "err.h"

typedef enum { SOL_ISA_SCALAR = 0, SOL_ISA_AVX2 = 1, SOL_ISA_AVX512 = 2 } sol_cpu_isa;

/* The best path this CPU can run. */
sol_cpu_isa sol_cpu_isa_best(void);
/* 1 when the CPU has every feature the path uses. */
int sol_cpu_isa_supported(sol_cpu_isa isa);
/* "scalar", "avx2", "avx512". */
const char *sol_cpu_isa_name(sol_cpu_isa isa);
/* The path to use: `variant` when given (the registry's "cpu:VARIANT"), else SOL_CPU_ISA when
 * set, else the best; an unknown or unsupported name is an error naming where it came from. */
int sol_cpu_isa_select(const char *variant, sol_cpu_isa *out, sol_err *err);

#endif
