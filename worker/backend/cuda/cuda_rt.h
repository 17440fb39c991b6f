/* cuda_rt: the C-callable surface of the CUDA runtime that the backend needs (device discovery
 * with the driver's reason when there is none, NCCL version); no CUDA header reaches C code. */
#ifndef SOL_CUDA_RT_H
#define SOL_CUDA_RT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of visible CUDA devices; 0 when there is no driver or device (never an error). */
int sol_cuda_device_count(void);

/* The same, but when there is no device `why` gets the runtime's reason ("the driver returned
 * 35, cudaErrorInsufficientDriver: CUDA driver version is insufficient for ...") or "no device". */
int sol_cuda_probe(char *why, size_t cap);

/* NCCL library version as major*10000+minor*100+patch, or a negative code. */
int sol_cuda_nccl_version(void);

#ifdef __cplusplus
}
#endif

#endif
