/* cuda_rt: the CUDA runtime as the CUDA backend uses it (discovery, memory, async copies on one
 * stream, errors, the half-precision GEMM), callable from C; no CUDA header reaches C code.
 *
 * Device discovery and NCCL are real-only (cuda_rt.cu). The dev_* calls exist twice, named by
 * SOL_CUDA_FN: sol_cuda_dev_* (cuda_rt.cu: CUDA runtime + cuBLASLt) and sol_emu_dev_*
 * (cuda_rt_emu.cc: host memory and a host GEMM), so the one backend source (backend_cuda.c) is the
 * GPU backend and, built with SOL_CUDA_EMU, the cuda-emu backend that CI runs. */
#ifndef SOL_CUDA_RT_H
#define SOL_CUDA_RT_H

#include <stddef.h>

#include <stdint.h>

#include "cuda_kernels.h"
#include "graph_sig.h"
#include "tp_comm.h"

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

/* One opened device: its stream and cuBLASLt handle. Every call below queues on that stream (in
 * order) unless it says it waits. */
typedef struct sol_cuda_dev sol_cuda_dev;

/* Opens device `index` (current on the calling thread) with a stream and a cuBLASLt handle.
 * mem_bytes: the emulation's pretend device size (0: 256 MiB); ignored on a GPU. 0, or a negative
 * code with the runtime's reason in why. */
int SOL_CUDA_FN(dev_open)(int index, size_t mem_bytes, sol_cuda_dev **out, char *why, size_t cap);
void SOL_CUDA_FN(dev_close)(sol_cuda_dev *d);
/* The device's name ("NVIDIA H200", "host emulation") and its queue for kernel launches: the
 * stream and the graph signature the launches are written to (graph_sig.h; the backend sets its
 * mode per step). */
void SOL_CUDA_FN(dev_name)(sol_cuda_dev *d, char *out, size_t cap);
sol_cuda_queue *SOL_CUDA_FN(dev_stream)(sol_cuda_dev *d);
/* Makes the device current on the calling thread (CUDA keeps it per thread; nothing is done
 * when it already is). Every backend op calls it before it launches anything: a rank's backend
 * is driven from threads other than the one that opened it. The emulation keeps the same per
 * thread state and refuses work queued for a device that is not current. */
void SOL_CUDA_FN(dev_bind)(sol_cuda_dev *d);

/* Device memory (NULL when out of memory) and page-locked host memory for staging. */
void *SOL_CUDA_FN(dev_malloc)(sol_cuda_dev *d, size_t bytes);
void SOL_CUDA_FN(dev_free)(sol_cuda_dev *d, void *p);
void *SOL_CUDA_FN(dev_host_malloc)(sol_cuda_dev *d, size_t bytes);
void SOL_CUDA_FN(dev_host_free)(sol_cuda_dev *d, void *p);
/* 1 when [p, p + bytes) lies inside one dev_malloc allocation. The emulation checks; on a GPU it
 * always says 1 (the runtime faults instead). */
int SOL_CUDA_FN(dev_owns)(sol_cuda_dev *d, const void *p, size_t bytes);

enum { SOL_CUDA_H2D = 1, SOL_CUDA_D2H = 2, SOL_CUDA_D2D = 3 };
/* Queued copy; from pageable host memory it returns once the source was read. */
int SOL_CUDA_FN(dev_copy)(sol_cuda_dev *d, void *dst, const void *src, size_t bytes, int kind);
int SOL_CUDA_FN(dev_memset)(sol_cuda_dev *d, void *p, int value, size_t bytes);

/* The error a launch or copy left (does not wait), and: wait for the stream, then its first
 * error. 0 or a negative code, the runtime's name and message in why.
 * Once the device belongs to a rank group (its first all-reduce) the wait has the group's
 * deadline (worker.tp_timeout_ms): it polls the stream, and returns -ECANCELED when another
 * rank aborted the group, -EIO on an NCCL error, -ETIMEDOUT when the deadline passed; each of
 * those aborts this rank's communicator first (and the group, so the other ranks learn it). A
 * stream that still does not drain after the abort leaves the device stuck (dev_health). Without
 * a group it waits as long as the stream takes. */
int SOL_CUDA_FN(dev_last_error)(sol_cuda_dev *d, char *why, size_t cap);
int SOL_CUDA_FN(dev_sync)(sol_cuda_dev *d, char *why, size_t cap);
/* 0, or -ETIMEDOUT with the reason: the stream missed its deadline and did not drain after the
 * communicator was aborted, so nothing queued on it will run (a hung kernel or device). Every
 * later wait fails at once, and device memory is no longer freed (freeing waits for the
 * device). */
int SOL_CUDA_FN(dev_health)(sol_cuda_dev *d, char *why, size_t cap);
/* NCCL communicators this device made and aborted since it was opened. */
void SOL_CUDA_FN(dev_comm_stats)(sol_cuda_dev *d, unsigned long *made, unsigned long *aborted);
/* The device's streaming multiprocessors (attention sizes its context splits by them). The
 * emulation says 132 (an H100/H200), or SOL_EMU_SMS. */
int SOL_CUDA_FN(dev_sm_count)(sol_cuda_dev *d);
/* Free and total device memory in bytes. */
int SOL_CUDA_FN(dev_mem_info)(sol_cuda_dev *d, size_t *free_bytes, size_t *total_bytes);

/* y[t][m] = sum_k x[t][k] w[m][k] for t < n, m < M: w is M x K and x n x K, both F16 (bf16 = 0)
 * or both BF16 (bf16 = 1) as raw bits, y float with row stride ldy; float accumulation. GPU:
 * cuBLASLt (tensor cores), its algorithm chosen once per shape and alignment and kept. */
int SOL_CUDA_FN(dev_gemm)(sol_cuda_dev *d, int bf16, const void *w, const void *x, float *y, int M,
                          int n, int K, int ldy, char *why, size_t cap);

/* Sum x (n floats) in place across the ranks of `comm` (this device is rank `rank`), queued on
 * the stream. GPU: NCCL, with the rank's communicator made on first use and again after any
 * abort of the group (sol_tp_comm_epoch): rank 0's unique id goes to the others through comm,
 * the communicator is non-blocking and its init polled against the group's deadline; that call
 * waits for every rank, so it must not be made inside a capture: allreduce_ready says whether it
 * was. -ECANCELED at once while the group is aborted. Emulation: the same communicator life
 * (made with a barrier of comm, aborted, rebuilt), and the shared-memory all-reduce of tp_comm
 * queued like a kernel (inside a graph it runs at each replay); a failure there is the NCCL
 * error the next sync reports. */
int SOL_CUDA_FN(dev_allreduce)(sol_cuda_dev *d, sol_tp_comm *comm, int rank, float *x, int64_t n,
                               char *why, size_t cap);
int SOL_CUDA_FN(dev_allreduce_ready)(sol_cuda_dev *d, const sol_tp_comm *comm);

/* CUDA graphs. capture_begin: from now on the stream records instead of running (kernels,
 * copies, memsets, GEMMs) until capture_end_launch, which turns the record into *exec — updated
 * in place when an existing *exec has the same topology (cudaGraphExecUpdate: the same node
 * types in the same order; kernel arguments, grids and functions, copy addresses and sizes may
 * differ, a copy's memory types may not), else re-instantiated — and launches it. *how: 1 updated,
 * 2 instantiated. up_bytes > 0: the graph first copies up_bytes from pinned host memory up_src
 * to up_dst, before anything it recorded (the step's staged index arrays, sent as one copy).
 * Nothing may wait for the stream or allocate while a capture is open. */
int SOL_CUDA_FN(dev_capture_begin)(sol_cuda_dev *d, char *why, size_t cap);
int SOL_CUDA_FN(dev_capture_end_launch)(sol_cuda_dev *d, void *up_dst, const void *up_src,
                                        size_t up_bytes, void **exec, int *how, char *why,
                                        size_t cap);
/* Launches an executable graph as it stands (a replay: its staged copy reads the pinned bytes
 * again, its kernels the arguments they were recorded with). */
int SOL_CUDA_FN(dev_graph_launch)(sol_cuda_dev *d, void *exec, char *why, size_t cap);
void SOL_CUDA_FN(dev_graph_free)(sol_cuda_dev *d, void *exec);

#ifdef __cplusplus
}
#endif

#endif
