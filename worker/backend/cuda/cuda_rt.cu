// Device discovery and the NCCL link for tensor parallelism.
#include "cuda_rt.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>

extern "C" int sol_cuda_device_count(void) {
    int n = 0;
    // A machine without a driver reports an error here; that simply means "no GPU".
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

extern "C" int sol_cuda_probe(char *why, size_t cap) {
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        snprintf(why, cap, "the driver returned %d, %s: %s", (int)rc, cudaGetErrorName(rc),
                 cudaGetErrorString(rc));
        return 0;
    }
    if (n == 0) snprintf(why, cap, "the driver reports no device");
    return n;
}

extern "C" int sol_cuda_nccl_version(void) {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return -1;
    return v;
}
