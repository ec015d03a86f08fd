// The NCCL communicator (see comm_nccl.h). Untested on a GPU: compiled and
// linked in CUDA builds only.
//
// Overlap (comm.h's non-blocking all-reduce): with the backend's compute
// stream attached, a started all-reduce waits on the device for an event
// recorded on the compute stream, runs on the communicator's own stream
// and records its done event, which the wait makes the compute stream wait
// for. The host never blocks on them; the next blocking operation first
// polls the communication stream against the timeout (nccl_begin), and
// every other wait of the attached backend's host for its device polls
// against it too (nccl_watch), so a dead peer still ends in an error, not a
// hang: a step now holds no blocking collective, and a peer that died holds
// a queued one, and everything queued behind it, for ever.
//
// A training step captured as a CUDA graph (cuda_step_graph.c) holds its
// collectives: the communication stream joins the capture through the
// events that fork it from the compute stream, and is joined back by the
// events the compute stream waits for. Every call that queues work on the
// device passes the backend's queue point, so a replayed step's host side
// queues none of it (its graph does).
#include "dist/comm_nccl.h"

#include <stdio.h>

#ifdef LTC_WITH_CUDA

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "dist/nccl_library.h"
#include "dist/rendezvous.h"
#include "util/cpu.h"

typedef struct NcclState {
    ncclComm_t comm;       // NULL after an abort
    cudaStream_t stream;   // the collectives' stream
    float *barrier_value;  // (1) device memory, the barrier's all-reduce
    int device;
    cudaStream_t compute;  // the attached backend's stream, or NULL (no overlap)
    cudaEvent_t ready[COMM_MAX_REQUESTS];  // per request: compute work before the start
    cudaEvent_t done[COMM_MAX_REQUESTS];   // per request: the all-reduce is through
    cudaEvent_t queued_ready, queued_done;  // the same for a queued all-reduce
    cudaEvent_t timer[2][2];  // exposed-time marks, two pairs in turn: [pair][end]
    long timer_pairs;         // pairs marked so far
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

// The checks every wait makes (nccl_wait, nccl_watch): -1 with the message,
// the communicator aborted, when NCCL reports an asynchronous error or the
// wait begun `waited` seconds ago is past the timeout; else 0, with *async
// NCCL's state (ncclInProgress: the last call is still being issued).
static int nccl_check_wait(Communicator *comm, const char *what, size_t count, double waited,
                           ncclResult_t *async, ErrorMessage *err) {
    NcclState *state = comm->impl;
    *async = ncclSuccess;
    NCCL_CHECK(comm, err, ncclCommGetAsyncError(state->comm, async));
    if (*async != ncclSuccess && *async != ncclInProgress) {
        const char *detail = ncclGetLastError(state->comm);
        nccl_abort_comm(state);
        return comm_fail(comm, err, "rank %d of %d: %s: NCCL error %s (%s)", comm->rank,
                         comm->world_size, what, ncclGetErrorString(*async),
                         detail ? detail : "");
    }
    if (waited <= comm->timeout_seconds) return 0;
    nccl_abort_comm(state);
    char values[48] = "";
    if (count) snprintf(values, sizeof values, " of %zu values", count);
    return comm_fail(comm, err,
                     "rank %d of %d (device %d): %s%s did not complete within %g s (a rank "
                     "died, hangs or is far slower; see --dist-timeout); NCCL communicator "
                     "aborted",
                     comm->rank, comm->world_size, state->device, what, values,
                     comm->timeout_seconds);
}

// Waits until the communicator's pending call is through (async state not
// in progress) and, with stream_too, the stream has drained; fails after
// the timeout or on an asynchronous error, aborting the communicator.
static int nccl_wait(Communicator *comm, const char *what, size_t count, int stream_too,
                     ErrorMessage *err) {
    NcclState *state = comm->impl;
    const double start = time_now();
    for (;;) {
        const double waited = time_now() - start;
        ncclResult_t async;
        if (nccl_check_wait(comm, what, count, waited, &async, err)) return -1;
        if (async == ncclSuccess) {
            if (!stream_too) return 0;
            const cudaError_t query = cudaStreamQuery(state->stream);
            if (query == cudaSuccess) return 0;
            if (query != cudaErrorNotReady)
                return nccl_error(comm, err, "cudaStreamQuery", __FILE__, __LINE__,
                                  cudaGetErrorString(query));
        }
        if (waited > 1e-3) sleep_seconds(waited / 10 < 1e-3 ? waited / 10 : 1e-3);
    }
}

// A blocking collective waits for all work queued on the device (correct;
// no overlap): first, against the timeout, for the non-blocking all-reduces
// still on the communication stream, then for the rest.
static int nccl_begin(Communicator *comm, ErrorMessage *err) {
    if (nccl_wait(comm, "the all-reduces in flight", 0, 1, err)) return -1;
    CUDA_CHECK(comm, err, cudaDeviceSynchronize());
    return 0;
}

static ncclRedOp_t nccl_reduce(CommReduce op) {
    return op == COMM_MAX ? ncclMax : op == COMM_MEAN ? ncclAvg : ncclSum;
}

static int nccl_all_reduce(Communicator *comm, float *buffer, size_t count, CommReduce op,
                           ErrorMessage *err) {
    NcclState *state = comm->impl;
    const ncclRedOp_t reduce = nccl_reduce(op);
    if (nccl_begin(comm, err)) return -1;
    NCCL_CHECK(comm, err, ncclAllReduce(buffer, buffer, count, ncclFloat32, reduce, state->comm,
                                        state->stream));
    return nccl_wait(comm, "all_reduce", count, 1, err);
}

static int nccl_all_reduce_start(Communicator *comm, CommRequest request, ErrorMessage *err) {
    NcclState *state = comm->impl;
    const CommPending *pending = &comm->pending[request];
    if (state->compute) {
        if (!cuda_backend_queue_point()) return 0;  // a replayed step: in its graph
        CUDA_CHECK(comm, err, cudaEventRecord(state->ready[request], state->compute));
        CUDA_CHECK(comm, err, cudaStreamWaitEvent(state->stream, state->ready[request], 0));
    } else if (nccl_begin(comm, err)) {
        return -1;
    }
    NCCL_CHECK(comm, err, ncclAllReduce(pending->buffer, pending->buffer, pending->count,
                                        ncclFloat32, nccl_reduce(pending->op), state->comm,
                                        state->stream));
    if (nccl_wait(comm, "all_reduce", pending->count, 0, err)) return -1;  // queued
    CUDA_CHECK(comm, err, cudaEventRecord(state->done[request], state->stream));
    return 0;
}

// A queued collective runs on the communication stream behind the compute
// stream's work (so every collective of the communicator keeps one
// stream's order), the compute stream's next work behind it; the host
// waits for neither. The events are recorded again by the next one: each
// wait holds the record it was queued after. queued_begin forks,
// queued_end (after the collective's call) joins.
static int queued_begin(Communicator *comm, ErrorMessage *err) {
    NcclState *state = comm->impl;
    CUDA_CHECK(comm, err, cudaEventRecord(state->queued_ready, state->compute));
    CUDA_CHECK(comm, err, cudaStreamWaitEvent(state->stream, state->queued_ready, 0));
    return 0;
}

static int queued_end(Communicator *comm, const char *what, size_t count, ErrorMessage *err) {
    NcclState *state = comm->impl;
    if (nccl_wait(comm, what, count, 0, err)) return -1;  // queued
    CUDA_CHECK(comm, err, cudaEventRecord(state->queued_done, state->stream));
    CUDA_CHECK(comm, err, cudaStreamWaitEvent(state->compute, state->queued_done, 0));
    return 0;
}

static int nccl_all_reduce_queued(Communicator *comm, float *buffer, size_t count, CommReduce op,
                                  ErrorMessage *err) {
    NcclState *state = comm->impl;
    if (!state->compute) return nccl_all_reduce(comm, buffer, count, op, err);
    if (!cuda_backend_queue_point()) return 0;
    if (queued_begin(comm, err)) return -1;
    NCCL_CHECK(comm, err, ncclAllReduce(buffer, buffer, count, ncclFloat32, nccl_reduce(op),
                                        state->comm, state->stream));
    return queued_end(comm, "all_reduce", count, err);
}

// With a compute stream: the device waits, the host goes on. Without one
// the host waits (bounded) for the communication stream.
static int nccl_all_reduce_wait(Communicator *comm, CommRequest request, ErrorMessage *err) {
    NcclState *state = comm->impl;
    if (!state->compute) return nccl_wait(comm, "all_reduce", comm->pending[request].count, 1, err);
    if (!cuda_backend_queue_point()) return 0;
    CUDA_CHECK(comm, err, cudaStreamWaitEvent(state->compute, state->done[request], 0));
    return 0;
}

static void nccl_abort(Communicator *comm, int exit_status);

// The backend's host waits (cuda_backend_watch_waits), bounded as a
// blocking collective is: on NCCL's asynchronous error, or past the
// timeout, the rank says so and ends (the last checkpoint stays whole).
static void nccl_watch(void *arg, double seconds) {
    Communicator *comm = arg;
    ErrorMessage err;
    ncclResult_t async;
    if (!((NcclState *)comm->impl)->comm ||
        !nccl_check_wait(comm, "the device's queued collectives", 0, seconds, &async, &err))
        return;  // (aborted already: the process is ending)
    fprintf(stderr, "error: %s\n", err.text);
    nccl_abort(comm, 1);
}

static int nccl_attach_backend(Communicator *comm, Backend *backend, ErrorMessage *err) {
    NcclState *state = comm->impl;
    if (strcmp(backend->name, "cuda") != 0)
        return error_set(err, "rank %d: the NCCL communicator needs the cuda backend, not %s",
                         comm->rank, backend->name);
    state->compute = (cudaStream_t)cuda_backend_stream(backend);
    cuda_backend_watch_waits(backend, nccl_watch, comm);
    return 0;
}

// Inside a captured step the records are the graph's own nodes, recorded at
// every replay (cuda_backend_record_for_waiters).
static void nccl_wait_timer_mark(Communicator *comm, int end) {
    NcclState *state = comm->impl;
    if (!state->compute) return;
    if (cuda_backend_queue_point())
        cuda_backend_record_for_waiters(state->timer[state->timer_pairs % 2][end ? 1 : 0],
                                        state->compute);
    if (end) state->timer_pairs++;
}

// The latest pair whose end the device has passed (the one before the
// latest is not recorded again until the next mark). None while a step is
// captured: its marks are the capture's, not to be asked about then. A
// replayed graph records the pair it captured, so with graphs the figure
// is some recent step's, not always the last one's.
static double nccl_wait_timer_seconds(Communicator *comm) {
    NcclState *state = comm->impl;
    if (cuda_backend_capturing()) return -1;
    for (long pair = state->timer_pairs - 1; pair >= 0 && pair >= state->timer_pairs - 2; pair--) {
        cudaEvent_t *marks = state->timer[pair % 2];
        float milliseconds = 0;
        if (cudaEventQuery(marks[1]) == cudaSuccess &&
            cudaEventElapsedTime(&milliseconds, marks[0], marks[1]) == cudaSuccess)
            return milliseconds / 1e3;
    }
    return -1;
}

static int nccl_all_gather(Communicator *comm, const float *send, float *recv, size_t count,
                           ErrorMessage *err) {
    NcclState *state = comm->impl;
    if (nccl_begin(comm, err)) return -1;
    NCCL_CHECK(comm, err, ncclAllGather(send, recv, count, ncclFloat32, state->comm,
                                        state->stream));
    return nccl_wait(comm, "all_gather", count, 1, err);
}

static int nccl_all_gather_queued(Communicator *comm, const float *send, float *recv,
                                  size_t count, ErrorMessage *err) {
    NcclState *state = comm->impl;
    if (!state->compute) return nccl_all_gather(comm, send, recv, count, err);
    if (!cuda_backend_queue_point()) return 0;
    if (queued_begin(comm, err)) return -1;
    NCCL_CHECK(comm, err, ncclAllGather(send, recv, count, ncclFloat32, state->comm,
                                        state->stream));
    return queued_end(comm, "all_gather", count, err);
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
        for (int r = 0; r < COMM_MAX_REQUESTS; r++) {
            if (state->ready[r]) cudaEventDestroy(state->ready[r]);
            if (state->done[r]) cudaEventDestroy(state->done[r]);
        }
        if (state->queued_ready) cudaEventDestroy(state->queued_ready);
        if (state->queued_done) cudaEventDestroy(state->queued_done);
        for (int e = 0; e < 4; e++)
            if (state->timer[e / 2][e % 2]) cudaEventDestroy(state->timer[e / 2][e % 2]);
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
    .all_reduce_queued = nccl_all_reduce_queued,
    .all_gather = nccl_all_gather,
    .all_gather_queued = nccl_all_gather_queued,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .all_reduce_start = nccl_all_reduce_start,
    .all_reduce_wait = nccl_all_reduce_wait,
    .attach_backend = nccl_attach_backend,
    .wait_timer_mark = nccl_wait_timer_mark,
    .wait_timer_seconds = nccl_wait_timer_seconds,
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
    for (int r = 0; r < COMM_MAX_REQUESTS; r++) {
        CUDA_CHECK(comm, err, cudaEventCreateWithFlags(&state->ready[r], cudaEventDisableTiming));
        CUDA_CHECK(comm, err, cudaEventCreateWithFlags(&state->done[r], cudaEventDisableTiming));
    }
    CUDA_CHECK(comm, err, cudaEventCreateWithFlags(&state->queued_ready, cudaEventDisableTiming));
    CUDA_CHECK(comm, err, cudaEventCreateWithFlags(&state->queued_done, cudaEventDisableTiming));
    for (int e = 0; e < 4; e++)
        CUDA_CHECK(comm, err, cudaEventCreate(&state->timer[e / 2][e % 2]));
    if (nccl_library_open(err)) return -1;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (share_unique_id(setup, comm, &id, err)) return -1;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    NCCL_CHECK(comm, err, ncclCommInitRankConfig(&state->comm, setup->world_size, id,
                                                 setup->rank, &config));
    return nccl_wait(comm, "ncclCommInitRankConfig", 0, 0, err);
}

// The oldest NCCL with every call made here (ncclCommInitRankConfig and
// ncclCommFinalize came in 2.14), in NCCL's encoding.
#define NCCL_OLDEST_USABLE 21400

int comm_nccl_version(char *text, size_t size, ErrorMessage *err) {
    int version = 0;
    if (nccl_library_open(err)) {
        snprintf(text, size, "not loaded");
        return -1;
    }
    char file[256];
    nccl_library_path(file, sizeof file);
    const char *path = file[0] ? file : "unknown file";
    if (ncclGetVersion(&version) != ncclSuccess) {
        snprintf(text, size, "NCCL: unknown version (%s)", path);
        return error_set(err, "NCCL (%s) does not say its version", path);
    }
    // NCCL 2.9 and newer: 10000 major + 100 minor + patch.
    snprintf(text, size, "NCCL %d.%d.%d (%s)", version / 10000, version % 10000 / 100,
             version % 100, path);
    if (version / 10000 != NCCL_MAJOR || version < NCCL_OLDEST_USABLE)
        return error_set(err, "%s loaded: this build needs NCCL %d.%d or newer of major version "
                              "%d (built with %d.%d.%d)", text, NCCL_OLDEST_USABLE / 10000,
                         NCCL_OLDEST_USABLE % 10000 / 100, NCCL_MAJOR, NCCL_MAJOR, NCCL_MINOR,
                         NCCL_PATCH);
    return 0;
}

Communicator *comm_nccl_create(const NcclSetup *setup, ErrorMessage *err) {
    char version[320];
    if (comm_nccl_version(version, sizeof version, err)) return NULL;
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

int comm_nccl_version(char *text, size_t size, ErrorMessage *err) {
    snprintf(text, size, "none (CPU build)");
    return 0;
}

Communicator *comm_nccl_create(const NcclSetup *setup, ErrorMessage *err) {
    error_set(err, "this build has no CUDA/NCCL (build with CUDA_HOME pointing to a CUDA "
                   "toolkit with NCCL)");
    return NULL;
}

#endif
