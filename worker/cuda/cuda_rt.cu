// Device discovery and the NCCL link for tensor parallelism.
#include "cuda_rt.h"

#include <cuda_runtime.h>
#include <nccl.h>

extern "C" int sol_cuda_device_count(void) {
    int n = 0;
    // A machine without a driver reports an error here; that simply means "no GPU".
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

extern "C" int sol_cuda_nccl_version(void) {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return -1;
    return v;
}
