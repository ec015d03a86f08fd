// The NCCL communicator (see comm_nccl.h). Untested on a GPU: compiled and
// linked in CUDA builds only.
#include "dist/comm_nccl.h"

#ifdef LTC_WITH_CUDA

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "dist/rendezvous.h"
#include "util/cpu.h"

typedef struct NcclState {
    ncclComm_t comm;       // NULL after an abort
    cudaStream_t stream;   // the collectives' stream
    float *barrier_value;  // (1) device memory, the barrier's all-reduce
    int device;
} NcclState;

static int nccl_error(Communicator *comm, ErrorMessage *err, const char *call, const char *file,
                      int line, const char *text) {
    const NcclState *state = comm->impl;
    return comm_fail(comm, err, "%s failed (%s:%d, rank %d of %d, device %d): %s", call, file,
                     line, comm->rank, comm->world_size, state ? state->device : -1, text);
}

// The one check for NCCL calls; ncclInProgress is the normal answer of a
// non-blocking communicator (completion is polled in nccl_wait).
#define NCCL_CHECK(comm, err, call)                                                         \
    do {                                                                                    \
        const ncclResult_t nccl_status_ = (call);                                           \
        if (nccl_status_ != ncclSuccess && nccl_status_ != ncclInProgress)                  \
            return nccl_error((comm), (err), #call, __FILE__, __LINE__,                     \
                              ncclGetErrorString(nccl_status_));                            \
    } while (0)

#define CUDA_CHECK(comm, err, call)                                                         \
    do {                                                                                    \
        const cudaError_t cuda_status_ = (call);                                            \
        if (cuda_status_ != cudaSuccess)                                                    \
            return nccl_error((comm), (err), #call, __FILE__, __LINE__,                     \
                              cudaGetErrorString(cuda_status_));                            \
    } while (0)

// Aborts the NCCL communicator (pending work is dropped, peers see errors).
static void nccl_abort_comm(NcclState *state) {
    if (state->comm) ncclCommAbort(state->comm);
    state->comm = NULL;
}

// Waits until the communicator's pending call is through (async state not
// in progress) and, with stream_too, the stream has drained; fails after
// the timeout or on an asynchronous error, aborting the communicator.
static int nccl_wait(Communicator *comm, const char *what, size_t count, int stream_too,
                     ErrorMessage *err) {
    NcclState *state = comm->impl;
    const double start = time_now();
    for (;;) {
        ncclResult_t async = ncclSuccess;
        NCCL_CHECK(comm, err, ncclCommGetAsyncError(state->comm, &async));
        if (async != ncclSuccess && async != ncclInProgress) {
            const char *detail = ncclGetLastError(state->comm);
            nccl_abort_comm(state);
            return comm_fail(comm, err, "rank %d of %d: %s: NCCL error %s (%s)", comm->rank,
                             comm->world_size, what, ncclGetErrorString(async),
                             detail ? detail : "");
        }
        if (async == ncclSuccess) {
            if (!stream_too) return 0;
            const cudaError_t query = cudaStreamQuery(state->stream);
            if (query == cudaSuccess) return 0;
            if (query != cudaErrorNotReady)
                return nccl_error(comm, err, "cudaStreamQuery", __FILE__, __LINE__,
                                  cudaGetErrorString(query));
        }
        const double waited = time_now() - start;
        if (waited > comm->timeout_seconds) {
            nccl_abort_comm(state);
            return comm_fail(comm, err,
                             "rank %d of %d (device %d): %s of %zu values did not complete "
                             "within %g s (a rank died, hangs or is far slower; see "
                             "--dist-timeout); NCCL communicator aborted",
                             comm->rank, comm->world_size, state->device, what, count,
                             comm->timeout_seconds);
        }
        if (waited > 1e-3) sleep_seconds(waited / 10 < 1e-3 ? waited / 10 : 1e-3);
    }
}

// Until the CUDA backend exists and names its compute stream, every
// collective waits for all work queued on the device (correct; no overlap).
static int nccl_begin(Communicator *comm, ErrorMessage *err) {
    CUDA_CHECK(comm, err, cudaDeviceSynchronize());
    return 0;
}

static int nccl_all_reduce(Communicator *comm, float *buffer, size_t count, CommReduce op,
                           ErrorMessage *err) {
    NcclState *state = comm->impl;
    const ncclRedOp_t reduce = op == COMM_MAX ? ncclMax : op == COMM_MEAN ? ncclAvg : ncclSum;
    if (nccl_begin(comm, err)) return -1;
    NCCL_CHECK(comm, err, ncclAllReduce(buffer, buffer, count, ncclFloat32, reduce, state->comm,
                                        state->stream));
    return nccl_wait(comm, "all_reduce", count, 1, err);
}

static int nccl_all_gather(Communicator *comm, const float *send, float *recv, size_t count,
                           ErrorMessage *err) {
    NcclState *state = comm->impl;
    if (nccl_begin(comm, err)) return -1;
    NCCL_CHECK(comm, err, ncclAllGather(send, recv, count, ncclFloat32, state->comm,
                                        state->stream));
    return nccl_wait(comm, "all_gather", count, 1, err);
}

static int nccl_broadcast(Communicator *comm, void *buffer, size_t bytes, int root,
                          ErrorMessage *err) {
    NcclState *state = comm->impl;
    if (nccl_begin(comm, err)) return -1;
    NCCL_CHECK(comm, err, ncclBroadcast(buffer, buffer, bytes, ncclUint8, root, state->comm,
                                        state->stream));
    return nccl_wait(comm, "broadcast", bytes, 1, err);
}

static int nccl_barrier(Communicator *comm, ErrorMessage *err) {
    NcclState *state = comm->impl;
    return nccl_all_reduce(comm, state->barrier_value, 1, COMM_SUM, err);
}

static void nccl_release(Communicator *comm) {
    NcclState *state = comm->impl;
    if (state) {
        if (state->barrier_value) cudaFree(state->barrier_value);
        if (state->stream) cudaStreamDestroy(state->stream);
        free(state);
    }
    free(comm);
}

// NCCL cannot end the other processes: they fail on their next collective
// (remote error or timeout); a launcher ends the job when one rank exits.
static void nccl_abort(Communicator *comm, int exit_status) {
    nccl_abort_comm(comm->impl);
    exit(exit_status);
}

static void nccl_destroy(Communicator *comm) {
    NcclState *state = comm->impl;
    if (comm->failed && comm->world_size > 1) nccl_abort(comm, 1);
    if (state->comm) {
        ErrorMessage ignored;
        if (ncclCommFinalize(state->comm) == ncclSuccess ||
            nccl_wait(comm, "finalize", 0, 0, &ignored) == 0)
            ncclCommDestroy(state->comm);
        else
            nccl_abort_comm(state);
    }
    nccl_release(comm);
}

static const CommOps nccl_ops = {
    .all_reduce = nccl_all_reduce,
    .all_gather = nccl_all_gather,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

// Rank 0's unique id on every rank: bootstrap broadcast or TCP rendezvous.
static int share_unique_id(const NcclSetup *setup, Communicator *comm, ncclUniqueId *id,
                           ErrorMessage *err) {
    if (setup->rank == 0) NCCL_CHECK(comm, err, ncclGetUniqueId(id));
    if (setup->bootstrap) return comm_broadcast(setup->bootstrap, id, sizeof *id, 0, err);
    const RendezvousConfig rendezvous = {
        .host = setup->host,
        .port = setup->port,
        .rank = setup->rank,
        .world_size = setup->world_size,
        .token = setup->token ? setup->token : "",
        .timeout_seconds = setup->timeout_seconds,
    };
    return rendezvous_share(&rendezvous, id, sizeof *id, err);
}

static int nccl_start(const NcclSetup *setup, Communicator *comm, ErrorMessage *err) {
    NcclState *state = comm->impl;
    CUDA_CHECK(comm, err, cudaSetDevice(setup->device));
    CUDA_CHECK(comm, err, cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking));
    CUDA_CHECK(comm, err, cudaMalloc((void **)&state->barrier_value, sizeof(float)));
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (share_unique_id(setup, comm, &id, err)) return -1;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    NCCL_CHECK(comm, err, ncclCommInitRankConfig(&state->comm, setup->world_size, id,
                                                 setup->rank, &config));
    return nccl_wait(comm, "ncclCommInitRankConfig", 0, 0, err);
}

Communicator *comm_nccl_create(const NcclSetup *setup, ErrorMessage *err) {
    Communicator *comm = calloc(1, sizeof *comm);
    NcclState *state = calloc(1, sizeof *state);
    if (!comm || !state) {
        free(comm);
        free(state);
        error_set(err, "out of memory for the NCCL communicator");
        return NULL;
    }
    state->device = setup->device;
    *comm = (Communicator){
        .name = "nccl",
        .rank = setup->rank,
        .world_size = setup->world_size,
        .local_rank = setup->local_rank,
        .local_world_size = setup->local_world_size,
        .timeout_seconds = setup->timeout_seconds,
        .ops = &nccl_ops,
        .impl = state,
    };
    if (nccl_start(setup, comm, err)) {
        nccl_abort_comm(state);
        nccl_release(comm);
        return NULL;
    }
    return comm;
}

#else  // built without CUDA

Communicator *comm_nccl_create(const NcclSetup *setup, ErrorMessage *err) {
    error_set(err, "this build has no CUDA/NCCL (build with CUDA_HOME pointing to a CUDA "
                   "toolkit with NCCL)");
    return NULL;
}

#endif
