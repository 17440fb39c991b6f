/* backend_cpu: the CPU backend's entry points as the registry calls them (one variant per SIMD
 * path this CPU runs); everyone else creates backends through sol_backend_new("cpu[:ISA]"). */
#ifndef SOL_BACKEND_CPU_H
#define SOL_BACKEND_CPU_H

#include "backend.h"

/* "scalar", then "avx2" and "avx512" where the CPU has their features; returns the count. */
int sol_backend_cpu_variants(char out[][SOL_BACKEND_VARIANT_MAX], int cap);

/* variant: an ISA name, or NULL/"" for SOL_CPU_ISA or the best path. o->threads 0 = all cores.
 * Variants: "cpu:ISA", "cpu:MODE" or "cpu:ISA+MODE" (ISA scalar|avx2|avx512, MODE
 * exact|llamacpp); SOL_CPU_ISA and SOL_CPU_ATTN fill what the spec leaves out (docs/backend.md). */
sol_backend *sol_backend_cpu_create(const char *variant, const sol_backend_opts *o, sol_err *err);

#endif
