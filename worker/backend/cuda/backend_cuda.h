/* backend_cuda: the CUDA backend's entry points as the registry calls them. One source
 * (backend_cuda.c) builds twice: "cuda" on the GPU runtime (when nvcc and NCCL are found) and
 * "cuda-emu" on the host emulation of the runtime and kernels (every build; tests). */
#ifndef SOL_BACKEND_CUDA_H
#define SOL_BACKEND_CUDA_H

#include "backend.h"

/* "0", "1", ...: one per visible device; 0 without a driver or device. */
int sol_backend_cuda_variants(char out[][SOL_BACKEND_VARIANT_MAX], int cap);
/* variant: a device index, or NULL/"" for device 0. */
sol_backend *sol_backend_cuda_create(const char *variant, const sol_backend_opts *o, sol_err *err);

/* One variant, "host". The default (no variant) behaves as a GPU would: every activation pointer
 * must come from buf_alloc and every weight from weight_prepare, or the op fails naming it;
 * "cuda-emu:host" also accepts host pointers (the op tests pass host arrays). */
int sol_backend_cuda_emu_variants(char out[][SOL_BACKEND_VARIANT_MAX], int cap);
sol_backend *sol_backend_cuda_emu_create(const char *variant, const sol_backend_opts *o,
                                         sol_err *err);

#endif
