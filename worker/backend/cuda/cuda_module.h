/* cuda_module: the one entry point of the CUDA backend's shared module (libsol-cuda.so), which
 * the registry loads at run time (cuda_loader.c) so no binary needs a CUDA library to start.
 *
 * The module exports a single symbol, SOL_CUDA_MODULE_ENTRY, returning this table. The loader
 * refuses a module whose abi or struct sizes differ from its own (a module from another build),
 * rather than call into it with a different layout. */
#ifndef SOL_CUDA_MODULE_H
#define SOL_CUDA_MODULE_H

#include <stddef.h>

#include "backend.h"

/* Bump when the table, sol_backend_ops or sol_backend_opts change meaning. */
#define SOL_CUDA_MODULE_ABI 1
#define SOL_CUDA_MODULE_ENTRY "sol_cuda_module_get"

typedef struct sol_cuda_module {
    int abi;
    size_t sizeof_ops, sizeof_opts, sizeof_err; /* the layouts both sides must share */
    int (*variants)(char out[][SOL_BACKEND_VARIANT_MAX], int cap);
    sol_backend *(*create)(const char *variant, const sol_backend_opts *o, sol_err *err);
} sol_cuda_module;

typedef const sol_cuda_module *(*sol_cuda_module_get_fn)(void);

#endif
