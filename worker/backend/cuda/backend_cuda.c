/* backend_cuda: device selection for the CUDA backend. The ops table on the GPU is not written
 * yet (issue 12), so creation checks the device and then refuses, saying exactly that. */
#include "backend_cuda.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_rt.h"

int sol_backend_cuda_variants(char out[][SOL_BACKEND_VARIANT_MAX], int cap) {
    int n = sol_cuda_device_count();
    int k = 0;
    for (; k < n && k < cap; k++)
        snprintf(out[k], SOL_BACKEND_VARIANT_MAX, "%d", k);
    return k;
}

sol_backend *sol_backend_cuda_create(const char *variant, const sol_backend_opts *o, sol_err *err) {
    (void)o;
    char why[256] = "";
    int n = sol_cuda_probe(why, sizeof why);
    if (n == 0) {
        sol_err_set(err, -ENODEV, "no CUDA device: %s", why);
        return NULL;
    }
    long dev = 0;
    if (variant && *variant) {
        char *end = NULL;
        dev = strtol(variant, &end, 10);
        if (*end || dev < 0 || dev >= n) {
            sol_err_set(err, -EINVAL, "cuda:%s: expected a device index from 0 to %d", variant,
                        n - 1);
            return NULL;
        }
    }
    sol_err_set(err, -ENOTSUP,
                "CUDA device %ld of %d found, but the CUDA backend's kernels are not written yet "
                "(issue 12); use the cpu backend",
                dev, n);
    return NULL;
}
