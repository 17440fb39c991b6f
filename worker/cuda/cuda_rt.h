/* cuda_rt: the C-callable surface of the CUDA backend (device discovery, NCCL version).
 * C code includes only this header; no CUDA header ever reaches the model or the engine. */
#ifndef SOL_CUDA_RT_H
#define SOL_CUDA_RT_H

#ifdef __cplusplus
extern "C" {
#endif

/* Number of visible CUDA devices; 0 when there is no driver or device (never an error). */
int sol_cuda_device_count(void);

/* NCCL library version as major*10000+minor*100+patch, or a negative code. */
int sol_cuda_nccl_version(void);

#ifdef __cplusplus
}
#endif

#endif
