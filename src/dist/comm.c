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

int comm_all_gather(Communicator *comm, const float *send, float *recv, size_t count,
                    ErrorMessage *err) {
    if (!comm) {
        if (send != recv) memmove(recv, send, count * sizeof *send);
        return 0;
    }
    if (comm->failed) return comm_refuse(comm, err);
    return comm->ops->all_gather(comm, send, recv, count, err);
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

static void single_abort(Communicator *comm, int exit_status) {
    exit(exit_status);  // not reached through comm_abort (world size 1 returns)
}

static void single_destroy(Communicator *comm) { free(comm); }

static const CommOps single_ops = {
    .all_reduce = single_all_reduce,
    .all_gather = single_all_gather,
    .broadcast = single_broadcast,
    .barrier = single_barrier,
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
