/* cuda_module: the exported table of libsol-cuda.so (cuda_module.h). Built only into the module;
 * every other symbol of the module stays hidden (cuda_module.map). */
#include "cuda_module.h"

#include "backend_cuda.h"

const sol_cuda_module *sol_cuda_module_get(void);

const sol_cuda_module *sol_cuda_module_get(void) {
    static const sol_cuda_module m = {
        .abi = SOL_CUDA_MODULE_ABI,
        .sizeof_ops = sizeof(sol_backend_ops),
        .sizeof_opts = sizeof(sol_backend_opts),
        .sizeof_err = sizeof(sol_err),
        .variants = sol_backend_cuda_variants,
        .create = sol_backend_cuda_create,
    };
    return &m;
}
