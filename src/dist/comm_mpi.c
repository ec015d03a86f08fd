// The MPI communicator (see comm.h, comm_mpi.h): CPU ranks started by mpirun
// or srun, host memory, OpenMPI (opened at run time: dist/mpi_library.h).
//
// Every collective is started non-blocking and completed by polling
// MPI_Test against the deadline, so a rank that died or hangs turns into an
// error naming the operation after timeout_seconds instead of a silent hang.
// Polling spins for the first microseconds (ranks in step finish there),
// then yields and sleeps in steps of a tenth of the time waited so far (at
// most 1 ms): an idle rank leaves the cores to the ranks still computing,
// which matters when ranks share cores.
#include "dist/comm_mpi.h"

#ifdef LTC_WITH_MPI

#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/mpi_library.h"
#include "util/cpu.h"

typedef struct MpiState {
    MPI_Comm local;  // the ranks of this node (shared memory), for local rank/size
    MPI_Request requests[COMM_MAX_REQUESTS];  // the non-blocking all-reduces (comm->pending)
} MpiState;

static int mpi_error(Communicator *comm, ErrorMessage *err, const char *call, const char *file,
                     int line, int status) {
    char text[MPI_MAX_ERROR_STRING] = "";
    int length = 0;
    if (MPI_Error_string(status, text, &length) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error %d", status);
    return comm_fail(comm, err, "%s failed (%s:%d, rank %d of %d): %s", call, file, line,
                     comm->rank, comm->world_size, text);
}

// The one check for MPI calls: the call, file, line and rank on failure.
#define MPI_CHECK(comm, err, call)                                                       \
    do {                                                                                 \
        const int mpi_status_ = (call);                                                  \
        if (mpi_status_ != MPI_SUCCESS)                                                  \
            return mpi_error((comm), (err), #call, __FILE__, __LINE__, mpi_status_);     \
    } while (0)

// Completes request or fails after the communicator's timeout.
static int mpi_wait(Communicator *comm, MPI_Request *request, const char *what, size_t count,
                    ErrorMessage *err) {
    const double start = time_now();
    for (;;) {
        int done = 0;
        MPI_CHECK(comm, err, MPI_Test(request, &done, MPI_STATUS_IGNORE));
        if (done) return 0;
        const double waited = time_now() - start;
        if (waited > comm->timeout_seconds)
            return comm_fail(comm, err,
                             "rank %d of %d: %s of %zu values got no answer from the other "
                             "ranks within %g s (a rank died, hangs or is far slower; see "
                             "--dist-timeout)",
                             comm->rank, comm->world_size, what, count, comm->timeout_seconds);
        if (waited < 50e-6) continue;
        if (waited < 1e-3)
            sched_yield();
        else
            sleep_seconds(waited / 10 < 1e-3 ? waited / 10 : 1e-3);
    }
}

static int count_fits(Communicator *comm, size_t count, const char *what, ErrorMessage *err) {
    if (count <= (size_t)INT_MAX) return 0;
    return error_set(err, "rank %d: %s of %zu values exceeds MPI's count limit %d", comm->rank,
                     what, count, INT_MAX);
}

static int mpi_all_reduce(Communicator *comm, float *buffer, size_t count, CommReduce op,
                          ErrorMessage *err) {
    if (count_fits(comm, count, "all_reduce", err)) return -1;
    MPI_Request request;
    MPI_CHECK(comm, err, MPI_Iallreduce(MPI_IN_PLACE, buffer, (int)count, MPI_FLOAT,
                                        op == COMM_MAX ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD,
                                        &request));
    if (mpi_wait(comm, &request, "all_reduce", count, err)) return -1;
    if (op == COMM_MEAN) {
        const float ranks = (float)comm->world_size;
        for (size_t i = 0; i < count; i++) buffer[i] /= ranks;
    }
    return 0;
}

static int mpi_all_reduce_start(Communicator *comm, CommRequest request, ErrorMessage *err) {
    MpiState *state = comm->impl;
    const CommPending *pending = &comm->pending[request];
    if (count_fits(comm, pending->count, "all_reduce", err)) return -1;
    MPI_CHECK(comm, err, MPI_Iallreduce(MPI_IN_PLACE, pending->buffer, (int)pending->count,
                                        MPI_FLOAT, pending->op == COMM_MAX ? MPI_MAX : MPI_SUM,
                                        MPI_COMM_WORLD, &state->requests[request]));
    return 0;
}

static int mpi_all_reduce_wait(Communicator *comm, CommRequest request, ErrorMessage *err) {
    MpiState *state = comm->impl;
    const CommPending *pending = &comm->pending[request];
    if (mpi_wait(comm, &state->requests[request], "all_reduce", pending->count, err)) return -1;
    if (pending->op == COMM_MEAN) {
        const float ranks = (float)comm->world_size;
        for (size_t i = 0; i < pending->count; i++) pending->buffer[i] /= ranks;
    }
    return 0;
}

// One MPI_Test on a request in flight drives OpenMPI's progress engine for
// all of them (a completed request becomes MPI_REQUEST_NULL, which the wait
// then finds done at once).
static int mpi_progress(Communicator *comm, ErrorMessage *err) {
    MpiState *state = comm->impl;
    for (int r = 0; r < COMM_MAX_REQUESTS; r++)
        if (comm->pending[r].in_use && state->requests[r] != MPI_REQUEST_NULL) {
            int done = 0;
            MPI_CHECK(comm, err, MPI_Test(&state->requests[r], &done, MPI_STATUS_IGNORE));
            return 0;
        }
    return 0;
}

static int mpi_all_gather(Communicator *comm, const float *send, float *recv, size_t count,
                          ErrorMessage *err) {
    if (count_fits(comm, count * (size_t)comm->world_size, "all_gather", err)) return -1;
    // send may already be this rank's block of recv (MPI's in-place form).
    const void *source = send == recv + (size_t)comm->rank * count ? MPI_IN_PLACE : send;
    MPI_Request request;
    MPI_CHECK(comm, err, MPI_Iallgather(source, (int)count, MPI_FLOAT, recv, (int)count,
                                        MPI_FLOAT, MPI_COMM_WORLD, &request));
    return mpi_wait(comm, &request, "all_gather", count, err);
}

static int mpi_broadcast(Communicator *comm, void *buffer, size_t bytes, int root,
                         ErrorMessage *err) {
    // In pieces below MPI's int count (checkpoints may exceed 2 GB).
    const size_t piece = (size_t)1 << 30;
    for (size_t done = 0; done < bytes; done += piece) {
        const size_t size = bytes - done < piece ? bytes - done : piece;
        MPI_Request request;
        MPI_CHECK(comm, err, MPI_Ibcast((char *)buffer + done, (int)size, MPI_BYTE, root,
                                        MPI_COMM_WORLD, &request));
        if (mpi_wait(comm, &request, "broadcast", size, err)) return -1;
    }
    return 0;
}

static int mpi_barrier(Communicator *comm, ErrorMessage *err) {
    MPI_Request request;
    MPI_CHECK(comm, err, MPI_Ibarrier(MPI_COMM_WORLD, &request));
    return mpi_wait(comm, &request, "barrier", 0, err);
}

static void mpi_abort(Communicator *comm, int exit_status) {
    MPI_Abort(MPI_COMM_WORLD, exit_status);
    exit(exit_status);  // MPI_Abort does not return; this keeps the contract if it did
}

static void mpi_destroy(Communicator *comm) {
    // A collective that failed is still pending: MPI_Finalize would wait for it.
    if (comm->failed && comm->world_size > 1) mpi_abort(comm, 1);
    MpiState *state = comm->impl;
    if (state && state->local != MPI_COMM_NULL) MPI_Comm_free(&state->local);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
    free(state);
    free(comm);
}

static const CommOps mpi_ops = {
    .all_reduce = mpi_all_reduce,
    .all_gather = mpi_all_gather,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .all_reduce_start = mpi_all_reduce_start,
    .all_reduce_wait = mpi_all_reduce_wait,
    .progress = mpi_progress,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
};

// Rank, size and the node-local communicator, after MPI_Init.
static int mpi_describe(Communicator *comm, ErrorMessage *err) {
    MpiState *state = comm->impl;
    MPI_CHECK(comm, err, MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(comm, err, MPI_Comm_rank(MPI_COMM_WORLD, &comm->rank));
    MPI_CHECK(comm, err, MPI_Comm_size(MPI_COMM_WORLD, &comm->world_size));
    MPI_CHECK(comm, err, MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, comm->rank,
                                             MPI_INFO_NULL, &state->local));
    MPI_CHECK(comm, err, MPI_Comm_rank(state->local, &comm->local_rank));
    MPI_CHECK(comm, err, MPI_Comm_size(state->local, &comm->local_world_size));
    return 0;
}

Communicator *comm_mpi_create(double timeout_seconds, ErrorMessage *err) {
    if (mpi_library_open(err)) return NULL;
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized || finalized) {
        error_set(err, "MPI was %s already in this process: one MPI communicator per process",
                  finalized ? "finalised" : "initialised");
        return NULL;
    }
    Communicator *comm = calloc(1, sizeof *comm);
    MpiState *state = calloc(1, sizeof *state);
    if (!comm || !state) {
        free(comm);
        free(state);
        error_set(err, "out of memory for the MPI communicator");
        return NULL;
    }
    state->local = MPI_COMM_NULL;
    for (int r = 0; r < COMM_MAX_REQUESTS; r++) state->requests[r] = MPI_REQUEST_NULL;
    *comm = (Communicator){.name = "mpi", .timeout_seconds = timeout_seconds, .ops = &mpi_ops,
                           .impl = state};
    // Only the main thread calls MPI (the loader's threads never do).
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        error_set(err, "MPI_Init_thread failed");
        free(state);
        free(comm);
        return NULL;
    }
    if (mpi_describe(comm, err)) {
        comm->failed = 0;  // nothing is pending: finalise normally
        mpi_destroy(comm);
        return NULL;
    }
    return comm;
}

int comm_mpi_available(void) { return 1; }

#else  // built without MPI

Communicator *comm_mpi_create(double timeout_seconds, ErrorMessage *err) {
    error_set(err, "this build has no MPI (install libopenmpi-dev, e.g. with `make deps`, and "
                   "rebuild)");
    return NULL;
}

int comm_mpi_available(void) { return 0; }

#endif
