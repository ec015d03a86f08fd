// The communicator calls (sticky failures, NULL = one process) and the
// single-process implementation (see comm.h).
#include "dist/comm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int comm_fail(Communicator *comm, ErrorMessage *err, const char *format, ...) {
    if (!comm->failed) {
        va_list args;
        va_start(args, format);
        vsnprintf(comm->failure.text, sizeof comm->failure.text, format, args);
        va_end(args);
        comm->failed = 1;
    }
    if (err) *err = comm->failure;
    return -1;
}

// The first failure again, for a call after it.
static int comm_refuse(Communicator *comm, ErrorMessage *err) {
    if (err) *err = comm->failure;
    return -1;
}

int comm_rank(const Communicator *comm) { return comm ? comm->rank : 0; }

int comm_world_size(const Communicator *comm) { return comm ? comm->world_size : 1; }

int comm_all_reduce(Communicator *comm, float *buffer, size_t count, CommReduce op,
                    ErrorMessage *err) {
    if (!comm) return 0;
    if (comm->failed) return comm_refuse(comm, err);
    return comm->ops->all_reduce(comm, buffer, count, op, err);
}

int comm_all_reduce_queued(Communicator *comm, float *buffer, size_t count, CommReduce op,
                           ErrorMessage *err) {
    if (!comm) return 0;
    if (comm->failed) return comm_refuse(comm, err);
    if (!comm->ops->all_reduce_queued) return comm->ops->all_reduce(comm, buffer, count, op, err);
    return comm->ops->all_reduce_queued(comm, buffer, count, op, err);
}

int comm_all_gather(Communicator *comm, const float *send, float *recv, size_t count,
                    ErrorMessage *err) {
    if (!comm) {
        if (send != recv) memmove(recv, send, count * sizeof *send);
        return 0;
    }
    if (comm->failed) return comm_refuse(comm, err);
    return comm->ops->all_gather(comm, send, recv, count, err);
}

int comm_all_gather_queued(Communicator *comm, const float *send, float *recv, size_t count,
                           ErrorMessage *err) {
    if (!comm || !comm->ops->all_gather_queued)
        return comm_all_gather(comm, send, recv, count, err);
    if (comm->failed) return comm_refuse(comm, err);
    return comm->ops->all_gather_queued(comm, send, recv, count, err);
}

int comm_broadcast(Communicator *comm, void *buffer, size_t bytes, int root, ErrorMessage *err) {
    if (!comm) return 0;
    if (comm->failed) return comm_refuse(comm, err);
    if (root < 0 || root >= comm->world_size)
        return error_set(err, "broadcast from rank %d in a world of %d", root, comm->world_size);
    return comm->ops->broadcast(comm, buffer, bytes, root, err);
}

int comm_barrier(Communicator *comm, ErrorMessage *err) {
    if (!comm) return 0;
    if (comm->failed) return comm_refuse(comm, err);
    return comm->ops->barrier(comm, err);
}

int comm_all_reduce_start(Communicator *comm, float *buffer, size_t count, CommReduce op,
                          CommRequest *request, ErrorMessage *err) {
    *request = -1;
    if (!comm) return 0;
    if (comm->failed) return comm_refuse(comm, err);
    int free_slot = 0;
    while (free_slot < COMM_MAX_REQUESTS && comm->pending[free_slot].in_use) free_slot++;
    if (free_slot == COMM_MAX_REQUESTS)
        return error_set(err, "rank %d: more than %d all-reduces in flight", comm->rank,
                         COMM_MAX_REQUESTS);
    comm->pending[free_slot] = (CommPending){.in_use = 1, .buffer = buffer, .count = count,
                                             .op = op};
    if (comm->ops->all_reduce_start(comm, free_slot, err)) {
        comm->pending[free_slot].in_use = 0;
        return -1;
    }
    *request = free_slot;
    return 0;
}

int comm_all_reduce_wait(Communicator *comm, CommRequest request, ErrorMessage *err) {
    if (!comm || request < 0) return 0;
    if (request >= COMM_MAX_REQUESTS || !comm->pending[request].in_use)
        return error_set(err, "rank %d: all-reduce request %d is not in flight", comm->rank,
                         request);
    if (comm->failed) return comm_refuse(comm, err);
    // A failed wait keeps the entry: the reduction may still be running.
    if (comm->ops->all_reduce_wait(comm, request, err)) return -1;
    comm->pending[request].in_use = 0;
    return 0;
}

int comm_progress(Communicator *comm, ErrorMessage *err) {
    if (!comm || !comm->ops->progress) return 0;
    if (comm->failed) return comm_refuse(comm, err);
    return comm->ops->progress(comm, err);
}

int comm_attach_backend(Communicator *comm, Backend *backend, ErrorMessage *err) {
    if (!comm || !comm->ops->attach_backend) return 0;
    if (comm->failed) return comm_refuse(comm, err);
    return comm->ops->attach_backend(comm, backend, err);
}

void comm_wait_timer_mark(Communicator *comm, int end) {
    if (comm && comm->ops->wait_timer_mark && !comm->failed) comm->ops->wait_timer_mark(comm, end);
}

double comm_wait_timer_seconds(Communicator *comm) {
    if (!comm || !comm->ops->wait_timer_seconds || comm->failed) return -1;
    return comm->ops->wait_timer_seconds(comm);
}

void comm_abort(Communicator *comm, int exit_status) {
    if (comm && comm->world_size > 1) comm->ops->abort(comm, exit_status);
}

void comm_destroy(Communicator *comm) {
    if (comm) comm->ops->destroy(comm);
}

// ---- single process ---------------------------------------------------------------

static int single_all_reduce(Communicator *comm, float *buffer, size_t count, CommReduce op,
                             ErrorMessage *err) {
    return 0;  // the sum, mean and max of one buffer are the buffer
}

// Host memory only: a device backend with one rank never gathers (see comm.h).
static int single_all_gather(Communicator *comm, const float *send, float *recv, size_t count,
                             ErrorMessage *err) {
    if (send != recv) memmove(recv, send, count * sizeof *send);
    return 0;
}

static int single_broadcast(Communicator *comm, void *buffer, size_t bytes, int root,
                            ErrorMessage *err) {
    return 0;
}

static int single_barrier(Communicator *comm, ErrorMessage *err) { return 0; }

// The reduction over one rank is the buffer: started and done at once.
static int single_all_reduce_start(Communicator *comm, CommRequest request, ErrorMessage *err) {
    return 0;
}

static int single_all_reduce_wait(Communicator *comm, CommRequest request, ErrorMessage *err) {
    return 0;
}

static void single_abort(Communicator *comm, int exit_status) {
    exit(exit_status);  // not reached through comm_abort (world size 1 returns)
}

static void single_destroy(Communicator *comm) { free(comm); }

static const CommOps single_ops = {
    .all_reduce = single_all_reduce,
    .all_gather = single_all_gather,
    .broadcast = single_broadcast,
    .barrier = single_barrier,
    .all_reduce_start = single_all_reduce_start,
    .all_reduce_wait = single_all_reduce_wait,
    .abort = single_abort,
    .destroy = single_destroy,
};

Communicator *comm_single_create(ErrorMessage *err) {
    Communicator *comm = calloc(1, sizeof *comm);
    if (!comm) {
        error_set(err, "out of memory for the communicator");
        return NULL;
    }
    *comm = (Communicator){
        .name = "single",
        .world_size = 1,
        .local_world_size = 1,
        .ops = &single_ops,
    };
    return comm;
}
