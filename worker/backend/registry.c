/* registry: the backends this build holds and the one constructor that picks one by name, so
 * no caller hard-codes a backend and a new one joins every user (and the op tests) by a line. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "backend_cpu.h"
#include "backend_cuda.h"
#include "cuda_loader.h"

static const sol_backend_entry k_backends[] = {
    {"cpu", "CPU: AVX-512 (VNNI), AVX2 or scalar kernels, threads over the cores",
     sol_backend_cpu_variants, sol_backend_cpu_create},
    /* Loaded at run time (cuda_loader.c): no binary needs a CUDA library to start. */
    {"cuda", "NVIDIA GPUs through CUDA: cuBLAS prefill, Sol's decode kernels (libsol-cuda.so)",
     sol_cuda_loader_variants, sol_cuda_loader_create},
    {"cuda-emu", "the CUDA backend run on the CPU through a host emulation (tests; slow)",
     sol_backend_cuda_emu_variants, sol_backend_cuda_emu_create},
};

int sol_backend_registry(const sol_backend_entry **out) {
    *out = k_backends;
    return (int)(sizeof k_backends / sizeof k_backends[0]);
}

void sol_backend_names(char *out, size_t cap) {
    size_t at = 0;
    if (cap) out[0] = 0;
    for (size_t i = 0; i < sizeof k_backends / sizeof k_backends[0] && at < cap; i++)
        at += (size_t)snprintf(out + at, cap - at, "%s%s", i ? ", " : "", k_backends[i].name);
}

sol_backend *sol_backend_new(const char *spec, const sol_backend_opts *opts, sol_err *err) {
    static const sol_backend_opts defaults = {0};
    if (!spec || !*spec) spec = "cpu";
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    const sol_backend_entry *list;
    int n = sol_backend_registry(&list);
    for (int i = 0; i < n; i++) {
        if (strlen(list[i].name) != len || strncmp(list[i].name, spec, len) != 0) continue;
        sol_backend *be = list[i].create(colon ? colon + 1 : NULL, opts ? opts : &defaults, err);
        if (!be) sol_err_wrap(err, "backend %s: ", spec);
        return be;
    }
    char names[128];
    sol_backend_names(names, sizeof names);
    sol_err_set(err, -EINVAL, "unknown backend '%s': this build has %s", spec, names);
    return NULL;
}

void sol_backend_free(sol_backend *be) {
    if (be) be->ops->free(be);
}
