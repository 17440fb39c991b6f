/* registry: the backends this build holds and the one constructor that picks one by name, so
 * no caller hard-codes a backend and a new one joins every user (and the op tests) by a line. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "backend_cpu.h"
#include "backend_cuda.h"

#ifndef SOL_HAVE_CUDA
/* A build without the CUDA toolchain still knows the name, so asking for it says why. */
static int cuda_absent_variants(char out[][SOL_BACKEND_VARIANT_MAX], int cap) {
    (void)out;
    (void)cap;
    return 0;
}

static sol_backend *cuda_absent_create(const char *variant, const sol_backend_opts *o,
                                       sol_err *err) {
    (void)variant;
    (void)o;
    sol_err_set(err, -ENOTSUP,
                "this build has no CUDA backend: it was configured without nvcc and NCCL "
                "(install the CUDA toolkit, then configure with -DSOL_CUDA=ON)");
    return NULL;
}
#endif

static const sol_backend_entry k_backends[] = {
    {"cpu", "CPU: AVX-512 (VNNI), AVX2 or scalar kernels, threads over the cores",
     sol_backend_cpu_variants, sol_backend_cpu_create},
#ifdef SOL_HAVE_CUDA
    {"cuda", "NVIDIA GPUs through CUDA: cuBLAS prefill, Sol's decode kernels",
     sol_backend_cuda_variants, sol_backend_cuda_create},
#else
    {"cuda", "NVIDIA GPUs through CUDA (not in this build)", cuda_absent_variants,
     cuda_absent_create},
#endif
    {"cuda-emu", "the CUDA backend run on the CPU through a host emulation (tests; slow)",
     sol_backend_cuda_emu_variants, sol_backend_cuda_emu_create},
};

int sol_backend_registry(const sol_backend_entry **out) {
    *out = k_backends;
    return (int)(sizeof k_backends / sizeof k_backends[0]);
}

const char *sol_backend_names(void) {
    return "cpu, cuda, cuda-emu";
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
    sol_err_set(err, -EINVAL, "unknown backend '%s': this build has %s", spec, sol_backend_names());
    return NULL;
}

void sol_backend_free(sol_backend *be) {
    if (be) be->ops->free(be);
}
