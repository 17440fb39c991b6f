// cuda_rt: the CUDA runtime and cuBLASLt behind cuda_rt.h for the GPU backend; device discovery
// with the driver's reason, and the NCCL link for tensor parallelism.
#include "cuda_rt.h"
#include "rank_wait.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// One GEMM shape's cuBLASLt plan: its layouts and the algorithm the heuristic chose, kept so a
// step pays the heuristic once per shape (a prefill chunk repeats the same few shapes).
typedef struct {
    int used, bf16, M, n, K, ldy, align; // align: the operands' common pointer alignment
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

enum { GEMM_PLANS = 32 };

struct sol_cuda_dev {
    int index;
    int sms; // multiprocessors, read once at open
    cudaStream_t stream;
    sol_cuda_queue q; // the stream for the kernel launchers, with the step's graph signature
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op; // F32 compute and scale, W transposed: the same for every GEMM
    void *blas_ws;           // cuBLASLt's workspace, ours: nothing may allocate inside a capture
    gemm_plan plans[GEMM_PLANS];
    int next_plan; // round-robin replacement once all are used
    // Tensor parallelism: the rank group (its deadline and abort flag), set by the first
    // all-reduce, and the NCCL communicator, made for the group's epoch `epoch`.
    sol_tp_comm *of;
    int rank, timeout_ms, joined;
    unsigned epoch;
    ncclComm_t nccl;
    unsigned long made, aborted;
    cudaEvent_t done; // recorded by a wait with a deadline and polled
    int stuck;        // a wait's stream did not drain after the abort: dev_health
    char stuck_why[400];
};

// The device is current per thread in CUDA, and a rank's backend may be driven from a thread
// other than the one that opened it (the engine thread, a tensor-parallel rank thread): every
// backend op binds first (dev_bind), and so does every call here that touches the device.
static void bind(sol_cuda_dev *d) {
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != d->index) cudaSetDevice(d->index);
}

// A poll's pause: spin first (a decode step's wait is often shorter than a sleep), then sleep
// longer and longer up to 1 ms, so a long wait costs little CPU and a short one no latency.
static void pause_poll(unsigned i) {
    if (i < 64) return;
    // Every TP decode step ends in this wait: short sleeps (~10 us asked, ~60 us with the
    // kernel's timer slack) for the first ~0.25 s keep a 5 ms step from being noticed late by
    // a fraction of a millisecond; only a long wait backs off to 1 ms.
    struct timespec t = {0, (long)(i < 4096 ? 10000 : 1000000)};
    nanosleep(&t, NULL);
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

static const char *cublasLt_status(cublasStatus_t st) {
    switch (st) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
        return "CUBLAS_STATUS_INTERNAL_ERROR";
    default:
        return "a cuBLASLt error";
    }
}

static void plan_drop(gemm_plan *p) {
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->c) cublasLtMatrixLayoutDestroy(p->c);
    memset(p, 0, sizeof *p);
}

static int say(cudaError_t rc, const char *what, char *why, size_t cap) {
    if (rc == cudaSuccess) return 0;
    if (why) snprintf(why, cap, "%s: %s (%s)", what, cudaGetErrorName(rc), cudaGetErrorString(rc));
    return rc == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

static int lt_say(cublasStatus_t st, const char *what, char *why, size_t cap) {
    if (st == CUBLAS_STATUS_SUCCESS) return 0;
    if (why) snprintf(why, cap, "%s: %s", what, cublasLt_status(st));
    return st == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : -EIO;
}

// y^T = W^T' x^T in cuBLASLt's column-major terms: W (M x K row-major) is a K x M column-major
// matrix used transposed, x^T is K x n, y^T is M x n with leading dimension ldy.
static int lt_open(sol_cuda_dev *d, char *why, size_t cap) {
    int rc = lt_say(cublasLtCreate(&d->lt), "cublasLtCreate", why, cap);
    if (!rc)
        rc = lt_say(cublasLtMatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                    "cublasLtMatmulDescCreate", why, cap);
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    if (!rc)
        rc = lt_say(
            cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
            "cublasLtMatmulDescSetAttribute(TRANSA)", why, cap);
    if (!rc)
        rc = lt_say(
            cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
            "cublasLtMatmulDescSetAttribute(TRANSB)", why, cap);
    return rc;
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
    if (!rc)
        rc = say(cudaDeviceGetAttribute(&d->sms, cudaDevAttrMultiProcessorCount, index),
                 "cudaDeviceGetAttribute(MultiProcessorCount)", why, cap);
    int major = 0;
    if (!rc)
        rc = say(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index),
                 "cudaDeviceGetAttribute(ComputeCapabilityMajor)", why, cap);
    d->q.pdl = major >= 9; /* griddepcontrol is sm_90's (sol_cuda_kernel.h) */
    if (!rc) rc = lt_open(d, why, cap);
    if (!rc) rc = say(cudaMalloc(&d->blas_ws, BLAS_WS_BYTES), "cuBLASLt workspace", why, cap);
    if (!rc)
        rc = say(cudaEventCreateWithFlags(&d->done, cudaEventDisableTiming), "cudaEventCreate", why,
                 cap);
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
    // Abort, not destroy: ncclCommDestroy finalizes, which waits until the whole group is
    // quiescent, and the ranks close one after another on one thread (and a peer may be gone).
    if (d->nccl) ncclCommAbort(d->nccl);
    for (int i = 0; i < GEMM_PLANS; i++)
        plan_drop(&d->plans[i]);
    if (d->op) cublasLtMatmulDescDestroy(d->op);
    // A stuck device keeps its memory and handles: freeing them waits for the device.
    if (d->lt && !d->stuck) cublasLtDestroy(d->lt);
    if (d->blas_ws && !d->stuck) cudaFree(d->blas_ws);
    if (d->done) cudaEventDestroy(d->done);
    if (d->stream) cudaStreamDestroy(d->stream);
    free(d->q.sig.buf);
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

extern "C" int sol_cuda_dev_sm_count(sol_cuda_dev *d) {
    return d->sms > 0 ? d->sms : 1;
}

extern "C" sol_cuda_queue *sol_cuda_dev_stream(sol_cuda_dev *d) {
    d->q.stream = d->stream;
    return &d->q;
}

extern "C" void sol_cuda_dev_bind(sol_cuda_dev *d) {
    bind(d);
}

extern "C" void *sol_cuda_dev_malloc(sol_cuda_dev *d, size_t bytes) {
    bind(d);
    void *p = NULL;
    return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}

extern "C" void sol_cuda_dev_free(sol_cuda_dev *d, void *p) {
    bind(d);
    if (p && !d->stuck) cudaFree(p); // cudaFree waits for the device: a stuck one never answers
}

extern "C" void *sol_cuda_dev_host_malloc(sol_cuda_dev *d, size_t bytes) {
    bind(d);
    void *p = NULL;
    return cudaMallocHost(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}

extern "C" void sol_cuda_dev_host_free(sol_cuda_dev *d, void *p) {
    bind(d);
    if (p && !d->stuck) cudaFreeHost(p);
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

static int nccl_say(ncclResult_t r, const char *what, char *why, size_t cap) {
    if (r == ncclSuccess) return 0;
    snprintf(why, cap, "%s: %s", what, ncclGetErrorString(r));
    return -EIO;
}

// This rank gives up on the group's step: its NCCL communicator is aborted (that releases its
// kernels still waiting for peers), and the group is, so the other ranks stop waiting too. The
// next all-reduce makes a new communicator (the group's epoch moved on).
static void fail_group(sol_cuda_dev *d, const char *why) {
    if (d->nccl) {
        ncclCommAbort(d->nccl);
        d->nccl = NULL;
        d->aborted++;
    }
    d->joined = 0;
    if (d->of) sol_tp_comm_abort(d->of, why);
}

// Why this rank should stop waiting now: NCCL's asynchronous error (a peer or the network
// failed), or another rank aborted the group. 0, or the code with the reason in why.
static int group_failed(sol_cuda_dev *d, char *why, size_t cap) {
    ncclResult_t ar = ncclSuccess;
    if (d->nccl && ncclCommGetAsyncError(d->nccl, &ar) == ncclSuccess && ar != ncclSuccess &&
        ar != ncclInProgress) {
        snprintf(why, cap, "device %d (rank %d): NCCL reported %s: %s", d->index, d->rank,
                 ncclGetErrorString(ar), ncclGetLastError(d->nccl));
        return -EIO;
    }
    char msg[200];
    if (d->of && sol_tp_comm_aborted(d->of, msg, sizeof msg)) {
        snprintf(why, cap, "tensor parallelism: %s", msg);
        return -ECANCELED;
    }
    return 0;
}

// Polls NCCL's state after a call on the non-blocking communicator returned ncclInProgress,
// until it settles, the group fails or the deadline passes.
static int nccl_settle(sol_cuda_dev *d, const char *what, char *why, size_t cap) {
    uint64_t deadline = sol_rank_now_ms() + (uint64_t)d->timeout_ms;
    for (unsigned i = 0;; i++) {
        ncclResult_t ar = ncclInProgress;
        if (ncclCommGetAsyncError(d->nccl, &ar) != ncclSuccess) ar = ncclInternalError;
        if (ar != ncclInProgress) return nccl_say(ar, what, why, cap);
        char msg[200];
        if (d->of && sol_tp_comm_aborted(d->of, msg, sizeof msg)) {
            snprintf(why, cap, "%s: tensor parallelism: %s", what, msg);
            return -ECANCELED;
        }
        if (sol_rank_now_ms() >= deadline) {
            snprintf(why, cap,
                     "%s: device %d (rank %d) waited %d ms (worker.tp_timeout_ms) for the other "
                     "ranks",
                     what, d->index, d->rank, d->timeout_ms);
            return -ETIMEDOUT;
        }
        pause_poll(i);
    }
}

// The stream's wait against the group's deadline: an event after the queued work, polled.
// A failed group or the deadline aborts the communicator, then the stream gets half a deadline
// more to drain (an aborted NCCL kernel returns); one that does not leaves the device stuck.
static int wait_stream(sol_cuda_dev *d, char *why, size_t cap) {
    int rc = say(cudaEventRecord(d->done, d->stream), "cudaEventRecord", why, cap);
    if (rc) return rc;
    auto finished = [&](int failed, int *out) {
        cudaError_t q = cudaEventQuery(d->done);
        if (q == cudaErrorNotReady) return 0;
        if (failed || (*out = say(q, "the stream", why, cap))) return 1;
        // Done, but a collective in it may have failed: its sums are not to be used.
        if ((*out = group_failed(d, why, cap)) == -EIO) fail_group(d, why);
        if (*out != -EIO) *out = 0;
        return 1;
    };
    return sol_rank_wait(d, why, cap, finished, group_failed, fail_group, pause_poll);
}

extern "C" int sol_cuda_dev_sync(sol_cuda_dev *d, char *why, size_t cap) {
    bind(d);
    if (d->stuck) return sol_cuda_dev_health(d, why, cap);
    // Without a group nothing can stall the stream but the device itself: wait as long as it
    // takes (a hung device is the heartbeat's stall check's, worker.stall_after_ms).
    int rc = d->of ? wait_stream(d, why, cap)
                   : say(cudaStreamSynchronize(d->stream), "cudaStreamSynchronize", why, cap);
    return rc ? rc : say(cudaGetLastError(), "a queued kernel", why, cap);
}

extern "C" int sol_cuda_dev_health(sol_cuda_dev *d, char *why, size_t cap) {
    return sol_rank_health(d, why, cap);
}

extern "C" void sol_cuda_dev_comm_stats(sol_cuda_dev *d, unsigned long *made,
                                        unsigned long *aborted) {
    *made = d->made;
    *aborted = d->aborted;
}

extern "C" int sol_cuda_dev_mem_info(sol_cuda_dev *d, size_t *free_bytes, size_t *total_bytes) {
    bind(d);
    return cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess ? 0 : -EIO;
}

// The largest power of two (up to 256, cuBLASLt's default assumption) dividing every operand's
// address and row stride: the heuristic must not pick a kernel that needs more (a tile of y may
// start anywhere).
static int gemm_align(const void *w, const void *x, const float *y, int K, int ldy) {
    uintptr_t bits = (uintptr_t)w | (uintptr_t)x | (uintptr_t)y | ((uintptr_t)K * 2) |
                     ((uintptr_t)ldy * 4) | 256;
    return (int)(bits & (~bits + 1));
}

static int plan_make(sol_cuda_dev *d, gemm_plan *p, char *why, size_t cap) {
    cudaDataType_t h = p->bf16 ? CUDA_R_16BF : CUDA_R_16F;
    int rc = lt_say(cublasLtMatrixLayoutCreate(&p->a, h, p->K, p->M, p->K), "layout W", why, cap);
    if (!rc)
        rc = lt_say(cublasLtMatrixLayoutCreate(&p->b, h, p->K, p->n, p->K), "layout x", why, cap);
    if (!rc)
        rc = lt_say(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, p->M, p->n, p->ldy), "layout y",
                    why, cap);
    cublasLtMatmulPreference_t pref = NULL;
    if (!rc) rc = lt_say(cublasLtMatmulPreferenceCreate(&pref), "preference", why, cap);
    size_t ws = BLAS_WS_BYTES;
    uint32_t al = (uint32_t)p->align;
    if (!rc)
        rc = lt_say(cublasLtMatmulPreferenceSetAttribute(
                        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                    "preference workspace", why, cap);
    const cublasLtMatmulPreferenceAttributes_t aligns[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; !rc && i < 4; i++)
        rc = lt_say(cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &al, sizeof al),
                    "preference alignment", why, cap);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (!rc)
        rc = lt_say(cublasLtMatmulAlgoGetHeuristic(d->lt, d->op, p->a, p->b, p->c, p->c, pref, 1,
                                                   &res, &found),
                    "cublasLtMatmulAlgoGetHeuristic", why, cap);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (!rc && !found) {
        snprintf(why, cap, "cuBLASLt has no algorithm for %s %d x %d x %d (alignment %d)",
                 p->bf16 ? "BF16" : "F16", p->M, p->n, p->K, p->align);
        rc = -ENOTSUP;
    }
    if (rc) {
        plan_drop(p);
        return rc;
    }
    p->algo = res.algo;
    p->used = 1;
    return 0;
}

static int plan_get(sol_cuda_dev *d, int bf16, int M, int n, int K, int ldy, int align,
                    gemm_plan **out, char *why, size_t cap) {
    for (int i = 0; i < GEMM_PLANS; i++) {
        gemm_plan *p = &d->plans[i];
        if (p->used && p->bf16 == bf16 && p->M == M && p->n == n && p->K == K && p->ldy == ldy &&
            p->align == align) {
            *out = p;
            return 0;
        }
    }
    gemm_plan *p = &d->plans[d->next_plan];
    d->next_plan = (d->next_plan + 1) % GEMM_PLANS;
    plan_drop(p);
    p->bf16 = bf16, p->M = M, p->n = n, p->K = K, p->ldy = ldy, p->align = align;
    *out = p;
    return plan_make(d, p, why, cap);
}

extern "C" int sol_cuda_dev_gemm(sol_cuda_dev *d, int bf16, const void *w, const void *x, float *y,
                                 int M, int n, int K, int ldy, char *why, size_t cap) {
    bind(d);
    gemm_plan *p;
    int rc = plan_get(d, bf16, M, n, K, ldy, gemm_align(w, x, y, K, ldy), &p, why, cap);
    if (rc) return rc;
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasLtMatmul(d->lt, d->op, &one, w, p->a, x, p->b, &zero, y, p->c, y,
                                       p->c, &p->algo, d->blas_ws, BLAS_WS_BYTES, d->stream);
    if (st == CUBLAS_STATUS_SUCCESS) return 0;
    snprintf(why, cap, "cublasLtMatmul (%s %d x %d x %d): %s", bf16 ? "BF16" : "F16", M, n, K,
             cublasLt_status(st));
    return -EIO;
}

// One NCCL communicator per rank and group epoch, made on the first all-reduce and again after
// the group was aborted (one made before an abort may hold aborted work and the others rebuild
// theirs: every rank sees the same epoch once the group is reset). Rank 0's unique id reaches
// the other rank threads through the shared-memory communicator, then every rank joins. The
// communicator is non-blocking, so the join is polled against the deadline instead of blocking
// forever on a rank that never comes. The backend never calls this inside a graph capture.
static int nccl_join(sol_cuda_dev *d, sol_tp_comm *comm, int rank, char *why, size_t cap) {
    unsigned epoch = sol_tp_comm_epoch(comm);
    if (d->nccl) {
        ncclCommAbort(d->nccl);
        d->nccl = NULL;
        d->aborted++;
    }
    ncclUniqueId id;
    int rc = rank == 0 ? nccl_say(ncclGetUniqueId(&id), "ncclGetUniqueId", why, cap) : 0;
    sol_err e = {0, ""};
    if (rc) sol_tp_comm_abort(comm, why);
    if (sol_tp_broadcast(comm, rank, &id, (int)sizeof id, &e)) {
        snprintf(why, cap, "%s", e.msg);
        return e.code;
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&d->nccl, sol_tp_comm_size(comm), id, rank, &cfg);
    if (r == ncclInProgress)
        rc = nccl_settle(d, "ncclCommInitRankConfig", why, cap);
    else
        rc = nccl_say(r, "ncclCommInitRankConfig", why, cap);
    if (rc) {
        fail_group(d, why);
        return rc;
    }
    d->made++;
    d->joined = 1;
    d->epoch = epoch;
    return 0;
}

extern "C" int sol_cuda_dev_allreduce(sol_cuda_dev *d, sol_tp_comm *comm, int rank, float *x,
                                      int64_t n, char *why, size_t cap) {
    bind(d);
    if (d->stuck) return sol_cuda_dev_health(d, why, cap);
    d->of = comm, d->rank = rank, d->timeout_ms = sol_tp_comm_timeout_ms(comm);
    char msg[200];
    if (sol_tp_comm_aborted(comm, msg, sizeof msg)) {
        snprintf(why, cap, "tensor parallelism: %s", msg);
        return -ECANCELED;
    }
    int rc = sol_cuda_dev_allreduce_ready(d, comm) ? 0 : nccl_join(d, comm, rank, why, cap);
    if (rc) return rc;
    ncclResult_t r = ncclAllReduce(x, x, (size_t)n, ncclFloat, ncclSum, d->nccl, d->stream);
    // A non-blocking communicator may still be queuing the collective when the call returns.
    rc = r == ncclInProgress ? nccl_settle(d, "ncclAllReduce", why, cap)
                             : nccl_say(r, "ncclAllReduce", why, cap);
    if (rc) fail_group(d, why);
    return rc;
}

extern "C" int sol_cuda_dev_allreduce_ready(sol_cuda_dev *d, const sol_tp_comm *comm) {
    return d->joined && d->of == comm && d->epoch == sol_tp_comm_epoch(comm);
}

extern "C" int sol_cuda_dev_capture_begin(sol_cuda_dev *d, char *why, size_t cap) {
    bind(d);
    return say(cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeThreadLocal),
               "cudaStreamBeginCapture", why, cap);
}

// The staged copy goes in as a root that every recorded root waits for, so it runs first.
static int graph_prepend_copy(cudaGraph_t g, void *dst, const void *src, size_t bytes, char *why,
                              size_t cap) {
    size_t n = 0;
    int rc = say(cudaGraphGetRootNodes(g, NULL, &n), "cudaGraphGetRootNodes", why, cap);
    cudaGraphNode_t *roots = (cudaGraphNode_t *)calloc(n ? 2 * n : 1, sizeof *roots);
    if (!roots) return -ENOMEM;
    cudaGraphNode_t copy;
    if (!rc && n) rc = say(cudaGraphGetRootNodes(g, roots, &n), "cudaGraphGetRootNodes", why, cap);
    if (!rc)
        rc = say(
            cudaGraphAddMemcpyNode1D(&copy, g, NULL, 0, dst, src, bytes, cudaMemcpyHostToDevice),
            "cudaGraphAddMemcpyNode1D", why, cap);
    for (size_t i = 0; !rc && i < n; i++)
        roots[n + i] = copy;
    if (!rc && n)
        rc = say(cudaGraphAddDependencies(g, roots + n, roots, NULL, n), "cudaGraphAddDependencies",
                 why, cap);
    free(roots);
    return rc;
}

extern "C" int sol_cuda_dev_capture_end_launch(sol_cuda_dev *d, void *up_dst, const void *up_src,
                                               size_t up_bytes, void **exec, int *how, char *why,
                                               size_t cap) {
    bind(d);
    cudaGraph_t g = NULL;
    int rc = say(cudaStreamEndCapture(d->stream, &g), "cudaStreamEndCapture", why, cap);
    if (rc) return rc;
    if (up_bytes && (rc = graph_prepend_copy(g, up_dst, up_src, up_bytes, why, cap))) {
        cudaGraphDestroy(g);
        return rc;
    }
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

extern "C" int sol_cuda_dev_graph_launch(sol_cuda_dev *d, void *exec, char *why, size_t cap) {
    bind(d);
    return say(cudaGraphLaunch((cudaGraphExec_t)exec, d->stream), "cudaGraphLaunch", why, cap);
}

extern "C" void sol_cuda_dev_graph_free(sol_cuda_dev *d, void *exec) {
    bind(d);
    if (exec) cudaGraphExecDestroy((cudaGraphExec_t)exec);
}
