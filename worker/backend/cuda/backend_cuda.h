/* backend_cuda: the CUDA backend's entry points as the registry calls them (one variant per
 * visible device). Built only when the CUDA toolchain and NCCL are found (SOL_HAVE_CUDA). */
#ifndef SOL_BACKEND_CUDA_H
#define SOL_BACKEND_CUDA_H

#include "backend.h"

/* "0", "1", ...: one per visible device; 0 without a driver or device. */
int sol_backend_cuda_variants(char out[][SOL_BACKEND_VARIANT_MAX], int cap);

/* variant: a device index, or NULL/"" for device 0. */
sol_backend *sol_backend_cuda_create(const char *variant, const sol_backend_opts *o, sol_err *err);

#endif
