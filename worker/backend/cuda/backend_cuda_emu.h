/* backend_cuda_emu: the CUDA backend's kernels run on the CPU through the host emulation
 * (cuda_emu.h), registered as "cuda-emu": how every kernel is checked against the CPU backend
 * without a GPU. A test instrument: correct, slow (a fiber per GPU thread). */
#ifndef SOL_BACKEND_CUDA_EMU_H
#define SOL_BACKEND_CUDA_EMU_H

#include "backend.h"

/* One variant, "host". */
int sol_backend_cuda_emu_variants(char out[][SOL_BACKEND_VARIANT_MAX], int cap);
sol_backend *sol_backend_cuda_emu_create(const char *variant, const sol_backend_opts *o,
                                         sol_err *err);

#endif
