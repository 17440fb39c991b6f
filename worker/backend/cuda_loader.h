/* cuda_loader: the "cuda" backend as the registry sees it: the CUDA module (libsol-cuda.so)
 * loaded at run time with its libraries, so a binary starts and serves on CPU where none exist.
 *
 * Loading looks for the NVIDIA driver (libcuda.so.1), then cudart, cuBLASLt and NCCL, each in:
 * the folders of SOL_CUDA_LIB_PATH (colon-separated), the system's library path, the CUDA
 * toolkit's folders, and the nvidia/<package>/lib folders of Python environments (the layout of
 * NVIDIA's pip wheels: $VIRTUAL_ENV, $CONDA_PREFIX, the environment of each python3 on PATH,
 * /opt/NAME/.venv, /usr/local, ~/.local). What is missing is one line naming it and every place
 * looked in. The module itself is SOL_CUDA_MODULE, else beside the binary (../lib/sol/ and
 * ../lib/), else where this build wrote it. Nothing is cached: dlopen counts references, so a
 * second load is cheap, and the module is never unloaded (CUDA libraries do not support it). */
#ifndef SOL_CUDA_LOADER_H
#define SOL_CUDA_LOADER_H

#include "backend.h"

/* Devices of the loaded module; 0 when it or a library cannot load (no message). */
int sol_cuda_loader_variants(char out[][SOL_BACKEND_VARIANT_MAX], int cap);
/* Loads the module and creates the backend; NULL with err naming what is missing (-ELIBACC for a
 * library or the module, -ENODEV for the driver or a device). */
sol_backend *sol_cuda_loader_create(const char *variant, const sol_backend_opts *o, sol_err *err);

#endif
