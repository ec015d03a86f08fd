// The communicator: what data-parallel training needs from the ranks of a
// run (all-reduce, all-gather, broadcast, barrier, abort), behind one table
// of function pointers so the trainer never knows which engine it has:
//
//   single  one process, world size 1 (comm_single_create)
//   mpi     CPU ranks through MPI (OpenMPI), host memory (comm_mpi.c)
//   nccl    GPU ranks through NCCL, device memory (comm_nccl.c, CUDA builds;
//           compiled and linked but not yet run on a GPU)
//
// Buffers are in the memory of the backend the communicator serves (host
// memory for single and mpi, device memory for nccl): the trainer passes
// backend memory and stays the same for all three.
//
// Every operation is collective (every rank calls it, in the same order,
// with the same counts) and bounded: when the other ranks do not answer
// within timeout_seconds (a rank died, hangs, or is far slower), it fails
// with a message naming the operation, the rank and the timeout. Failures
// are sticky: once an operation failed, every later one fails with the
// first message without communicating (a collective that timed out cannot
// be cancelled, so the ranks are out of step for good). After a failure the
// only way out is comm_abort (it ends every rank); comm_destroy aborts too
// instead of finalising.
//
// A NULL Communicator is a valid single process everywhere (world size 1),
// so library code and tests need no communicator.
//
// Non-blocking all-reduce (the gradient buckets overlapped with backward,
// train/gradient_sync.h): comm_all_reduce_start queues the reduction of a
// buffer and returns a request from a fixed pool (COMM_MAX_REQUESTS in
// flight, nothing allocated per call); comm_all_reduce_wait completes it.
// Requests are collective like everything else: every rank starts the same
// reductions in the same order. The buffer must not be touched between
// start and wait.
//   mpi     MPI_Iallreduce; wait is bounded by timeout_seconds like every
//           operation; comm_progress lets the started ones advance (OpenMPI
//           has no progress thread: without calls into MPI nothing moves).
//   nccl    start makes the communication stream wait for the work queued
//           so far on the backend's compute stream (comm_attach_backend),
//           queues ncclAllReduce there and records a done event; wait makes
//           the compute stream wait for that event: no host synchronisation.
//           The next blocking operation is bounded by the timeout for them,
//           and so is every host wait of the backend for its device (its
//           watch, comm_nccl.c).
//   single  nothing to do.
#ifndef LTC_DIST_COMM_H
#define LTC_DIST_COMM_H

#include <stddef.h>

#include "util/error.h"

typedef enum CommReduce {
    COMM_SUM,
    COMM_MEAN,  // the sum divided by the world size
    COMM_MAX,
} CommReduce;

typedef struct Communicator Communicator;
typedef struct Backend Backend;

#define COMM_MAX_REQUESTS 64

// A started all-reduce: an index into the communicator's pool, or -1 for
// one that needed no communication (NULL communicator).
typedef int CommRequest;

// What a pool entry remembers between start and wait.
typedef struct CommPending {
    int in_use;
    float *buffer;
    size_t count;
    CommReduce op;
} CommPending;

typedef struct CommOps {
    // buffer (count) = the reduction over all ranks of their buffer (count), in place
    int (*all_reduce)(Communicator *comm, float *buffer, size_t count, CommReduce op,
                      ErrorMessage *err);
    // The same reduction queued on the attached backend's device, behind
    // the work queued there and ahead of what is queued next, the host
    // waiting for neither (nccl). May be NULL: all_reduce serves.
    int (*all_reduce_queued)(Communicator *comm, float *buffer, size_t count, CommReduce op,
                             ErrorMessage *err);
    // recv (world_size * count) = every rank's send (count), in rank order
    int (*all_gather)(Communicator *comm, const float *send, float *recv, size_t count,
                      ErrorMessage *err);
    // The same queued on the device as all_reduce_queued. May be NULL.
    int (*all_gather_queued)(Communicator *comm, const float *send, float *recv, size_t count,
                             ErrorMessage *err);
    // buffer (bytes) = root's buffer on every rank
    int (*broadcast)(Communicator *comm, void *buffer, size_t bytes, int root, ErrorMessage *err);
    int (*barrier)(Communicator *comm, ErrorMessage *err);
    // The non-blocking all-reduce of comm->pending[request] (see the top).
    int (*all_reduce_start)(Communicator *comm, CommRequest request, ErrorMessage *err);
    int (*all_reduce_wait)(Communicator *comm, CommRequest request, ErrorMessage *err);
    // Lets started requests advance without waiting for them. May be NULL.
    int (*progress)(Communicator *comm, ErrorMessage *err);
    // The backend whose memory the buffers are in (nccl: its compute
    // stream). May be NULL (nothing to know).
    int (*attach_backend)(Communicator *comm, Backend *backend, ErrorMessage *err);
    // Exposed communication time on the device (nccl): marks on the compute
    // stream before (end 0) and after (end 1) the waits of a step, and the
    // seconds between the marks of the last pair the device has finished
    // (one step late, nothing synchronised), or -1 when none has. NULL
    // where the host's time is the measure (single, mpi).
    void (*wait_timer_mark)(Communicator *comm, int end);
    double (*wait_timer_seconds)(Communicator *comm);
    // Ends every rank of the run with exit_status; does not return.
    void (*abort)(Communicator *comm, int exit_status);
    // Finalises the engine and frees comm (after a failure: see above).
    void (*destroy)(Communicator *comm);
} CommOps;

struct Communicator {
    const char *name;        // "single", "mpi", "nccl"
    int rank, world_size;
    int local_rank, local_world_size;  // within this node
    double timeout_seconds;  // bound on every operation
    const CommOps *ops;
    void *impl;
    int failed;              // sticky (see above)
    ErrorMessage failure;    // the first failure
    CommPending pending[COMM_MAX_REQUESTS];  // the non-blocking all-reduces
};

// ---- the calls the rest of the program makes (NULL comm = one process) ----

int comm_rank(const Communicator *comm);
int comm_world_size(const Communicator *comm);
int comm_all_reduce(Communicator *comm, float *buffer, size_t count, CommReduce op,
                    ErrorMessage *err);
// comm_all_reduce for a buffer of the attached backend that only the
// backend's work reads next (synchronised BatchNorm's sums): where the
// communicator can queue it on the device (nccl), the host does not wait
// for the device, so it keeps queueing the step; a failure shows at the
// next call that waits (sticky, as above).
int comm_all_reduce_queued(Communicator *comm, float *buffer, size_t count, CommReduce op,
                           ErrorMessage *err);
int comm_all_gather(Communicator *comm, const float *send, float *recv, size_t count,
                    ErrorMessage *err);
// comm_all_gather queued on the device, as comm_all_reduce_queued.
int comm_all_gather_queued(Communicator *comm, const float *send, float *recv, size_t count,
                           ErrorMessage *err);
int comm_broadcast(Communicator *comm, void *buffer, size_t bytes, int root, ErrorMessage *err);
int comm_barrier(Communicator *comm, ErrorMessage *err);
// Non-blocking all-reduce (see the top). start fails when COMM_MAX_REQUESTS
// are in flight; wait on -1 does nothing.
int comm_all_reduce_start(Communicator *comm, float *buffer, size_t count, CommReduce op,
                          CommRequest *request, ErrorMessage *err);
int comm_all_reduce_wait(Communicator *comm, CommRequest request, ErrorMessage *err);
int comm_progress(Communicator *comm, ErrorMessage *err);
// Tells the communicator the backend it serves (before the first start;
// nccl: the backend's host waits are bounded by the timeout from then on).
int comm_attach_backend(Communicator *comm, Backend *backend, ErrorMessage *err);
void comm_wait_timer_mark(Communicator *comm, int end);
// Device-measured wait seconds (see CommOps), or -1 where the host's time counts.
double comm_wait_timer_seconds(Communicator *comm);
// Ends every rank (exit_status) when the world has several ranks; with one
// rank (or NULL) it returns and the caller exits normally.
void comm_abort(Communicator *comm, int exit_status);
void comm_destroy(Communicator *comm);

// ---- implementations ----

// World size 1: reductions leave the buffer as it is, all_gather copies.
Communicator *comm_single_create(ErrorMessage *err);

// Records a failure in comm (the first one wins) and returns -1 with err
// holding it; for the implementations.
int comm_fail(Communicator *comm, ErrorMessage *err, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

#endif
