// cuda_rt: the CUDA runtime and cuBLAS behind cuda_rt.h for the GPU backend; device discovery
// with the driver's reason, and the NCCL link for tensor parallelism.
#include "cuda_rt.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

struct sol_cuda_dev {
    int index;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;   // cuBLAS's workspace, set by us: it may not allocate inside a graph capture
    ncclComm_t nccl; // tensor parallelism: made on the first all-reduce
    const sol_tp_comm *of; // the rank group the NCCL communicator belongs to
};

// The device is current per thread in CUDA, and a rank's backend may be driven from a thread
// other than the one that opened it (the engine thread, a tensor-parallel rank thread): every
// call that touches the device makes it current first (cheap when it already is).
static void bind(sol_cuda_dev *d) {
    cudaSetDevice(d->index);
}

enum { BLAS_WS_BYTES = 32 << 20 };

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

static int say(cudaError_t rc, const char *what, char *why, size_t cap) {
    if (rc == cudaSuccess) return 0;
    if (why) snprintf(why, cap, "%s: %s (%s)", what, cudaGetErrorName(rc), cudaGetErrorString(rc));
    return rc == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

extern "C" int sol_cuda_dev_open(int index, size_t mem_bytes, sol_cuda_dev **out, char *why,
                                 size_t cap) {
    (void)mem_bytes;
    sol_cuda_dev *d = (sol_cuda_dev *)calloc(1, sizeof *d);
    if (!d) return -ENOMEM;
    d->index = index;
    int rc = say(cudaSetDevice(index), "cudaSetDevice", why, cap);
    if (!rc)
        rc = say(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking), "cudaStreamCreate",
                 why, cap);
    if (!rc && cublasCreate(&d->blas) != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, cap, "cublasCreate failed");
        rc = -EIO;
    }
    if (!rc && cublasSetStream(d->blas, d->stream) != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, cap, "cublasSetStream failed");
        rc = -EIO;
    }
    if (!rc) rc = say(cudaMalloc(&d->blas_ws, BLAS_WS_BYTES), "cuBLAS workspace", why, cap);
    if (!rc && cublasSetWorkspace(d->blas, d->blas_ws, BLAS_WS_BYTES) != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, cap, "cublasSetWorkspace failed");
        rc = -EIO;
    }
    if (rc) {
        sol_cuda_dev_close(d);
        return rc;
    }
    *out = d;
    return 0;
}

extern "C" void sol_cuda_dev_close(sol_cuda_dev *d) {
    if (!d) return;
    bind(d);
    if (d->nccl) ncclCommDestroy(d->nccl);
    if (d->blas) cublasDestroy(d->blas);
    if (d->blas_ws) cudaFree(d->blas_ws);
    if (d->stream) cudaStreamDestroy(d->stream);
    free(d);
}

extern "C" void sol_cuda_dev_name(sol_cuda_dev *d, char *out, size_t cap) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d->index) == cudaSuccess)
        snprintf(out, cap, "%s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
                 p.totalGlobalMem / 1073741824.0);
    else
        snprintf(out, cap, "CUDA device %d", d->index);
}

extern "C" void *sol_cuda_dev_stream(sol_cuda_dev *d) {
    bind(d);
    return d->stream;
}

extern "C" void *sol_cuda_dev_malloc(sol_cuda_dev *d, size_t bytes) {
    bind(d);
    void *p = NULL;
    return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}

extern "C" void sol_cuda_dev_free(sol_cuda_dev *d, void *p) {
    bind(d);
    if (p) cudaFree(p);
}

extern "C" void *sol_cuda_dev_host_malloc(sol_cuda_dev *d, size_t bytes) {
    bind(d);
    void *p = NULL;
    return cudaMallocHost(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}

extern "C" void sol_cuda_dev_host_free(sol_cuda_dev *d, void *p) {
    bind(d);
    if (p) cudaFreeHost(p);
}

extern "C" int sol_cuda_dev_owns(sol_cuda_dev *d, const void *p, size_t bytes) {
    (void)d, (void)p, (void)bytes;
    return 1;
}

extern "C" int sol_cuda_dev_copy(sol_cuda_dev *d, void *dst, const void *src, size_t bytes,
                                 int kind) {
    bind(d);
    cudaMemcpyKind k = kind == SOL_CUDA_H2D   ? cudaMemcpyHostToDevice
                       : kind == SOL_CUDA_D2H ? cudaMemcpyDeviceToHost
                                              : cudaMemcpyDeviceToDevice;
    if (!bytes) return 0;
    return cudaMemcpyAsync(dst, src, bytes, k, d->stream) == cudaSuccess ? 0 : -EIO;
}

extern "C" int sol_cuda_dev_memset(sol_cuda_dev *d, void *p, int value, size_t bytes) {
    bind(d);
    return cudaMemsetAsync(p, value, bytes, d->stream) == cudaSuccess ? 0 : -EIO;
}

extern "C" int sol_cuda_dev_last_error(sol_cuda_dev *d, char *why, size_t cap) {
    (void)d;
    return say(cudaGetLastError(), "launch", why, cap);
}

extern "C" int sol_cuda_dev_sync(sol_cuda_dev *d, char *why, size_t cap) {
    bind(d);
    int rc = say(cudaStreamSynchronize(d->stream), "cudaStreamSynchronize", why, cap);
    return rc ? rc : say(cudaGetLastError(), "a queued kernel", why, cap);
}

extern "C" int sol_cuda_dev_mem_info(sol_cuda_dev *d, size_t *free_bytes, size_t *total_bytes) {
    bind(d);
    return cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess ? 0 : -EIO;
}

// cuBLAS is column-major: y^T (M x n, ld ldy) = W (M x K as K x M transposed) . x^T (K x n).
extern "C" int sol_cuda_dev_gemm_f16(sol_cuda_dev *d, const void *w, const void *x, float *y, int M,
                                     int n, int K, int ldy, char *why, size_t cap) {
    bind(d);
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasGemmEx(d->blas, CUBLAS_OP_T, CUBLAS_OP_N, M, n, K, &one, w,
                                     CUDA_R_16F, K, x, CUDA_R_16F, K, &zero, y, CUDA_R_32F, ldy,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st == CUBLAS_STATUS_SUCCESS) return 0;
    snprintf(why, cap, "cublasGemmEx (%d x %d x %d): %s", M, n, K, cublasGetStatusString(st));
    return -EIO;
}

static int nccl_say(ncclResult_t r, const char *what, char *why, size_t cap) {
    if (r == ncclSuccess) return 0;
    snprintf(why, cap, "%s: %s", what, ncclGetErrorString(r));
    return -EIO;
}

// One NCCL communicator per rank, made on the first all-reduce: rank 0's unique id reaches the
// other rank threads through the shared-memory communicator, then every rank joins (the calls
// block until all have). The backend never calls this first inside a graph capture.
static int nccl_join(sol_cuda_dev *d, sol_tp_comm *comm, int rank, char *why, size_t cap) {
    ncclUniqueId id;
    int rc = rank == 0 ? nccl_say(ncclGetUniqueId(&id), "ncclGetUniqueId", why, cap) : 0;
    sol_err e = {0, ""};
    if (rc) sol_tp_comm_abort(comm, why);
    if (sol_tp_broadcast(comm, rank, &id, (int)sizeof id, &e)) {
        snprintf(why, cap, "%s", e.msg);
        return e.code;
    }
    if (d->nccl) ncclCommDestroy(d->nccl), d->nccl = NULL;
    rc = nccl_say(ncclCommInitRank(&d->nccl, sol_tp_comm_size(comm), id, rank), "ncclCommInitRank",
                  why, cap);
    d->of = rc ? NULL : comm;
    return rc;
}

extern "C" int sol_cuda_dev_allreduce(sol_cuda_dev *d, sol_tp_comm *comm, int rank, float *x,
                                      int64_t n, char *why, size_t cap) {
    bind(d);
    int rc = d->of == comm ? 0 : nccl_join(d, comm, rank, why, cap);
    if (rc) return rc;
    return nccl_say(ncclAllReduce(x, x, (size_t)n, ncclFloat, ncclSum, d->nccl, d->stream),
                    "ncclAllReduce", why, cap);
}

extern "C" int sol_cuda_dev_allreduce_ready(sol_cuda_dev *d, const sol_tp_comm *comm) {
    return d->of == comm;
}

extern "C" int sol_cuda_dev_capture_begin(sol_cuda_dev *d, char *why, size_t cap) {
    bind(d);
    return say(cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeThreadLocal),
               "cudaStreamBeginCapture", why, cap);
}

extern "C" int sol_cuda_dev_capture_end_launch(sol_cuda_dev *d, void **exec, int *how, char *why,
                                               size_t cap) {
    bind(d);
    cudaGraph_t g = NULL;
    int rc = say(cudaStreamEndCapture(d->stream, &g), "cudaStreamEndCapture", why, cap);
    if (rc) return rc;
    cudaGraphExec_t e = (cudaGraphExec_t)*exec;
    *how = 1;
    if (e) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(e, g, &info) != cudaSuccess) {
            cudaGetLastError(); // a failed update is an answer, not an error to report later
            cudaGraphExecDestroy(e);
            e = NULL;
        }
    }
    if (!e) {
        *how = 2;
        rc = say(cudaGraphInstantiate(&e, g, 0), "cudaGraphInstantiate", why, cap);
    }
    cudaGraphDestroy(g);
    *exec = rc ? NULL : (void *)e;
    return rc ? rc : say(cudaGraphLaunch(e, d->stream), "cudaGraphLaunch", why, cap);
}

extern "C" void sol_cuda_dev_graph_free(sol_cuda_dev *d, void *exec) {
    bind(d);
    if (exec) cudaGraphExecDestroy((cudaGraphExec_t)exec);
}
