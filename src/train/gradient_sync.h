// Gradient averaging over the ranks of a data-parallel run, in buckets.
//
// The buckets follow PyTorch DDP's layout: about 25 MB each (the first one
// 1 MB), in reverse order of the parameters (the last group's last
// parameters first), which is the order backward completes them. Each
// bucket is one contiguous piece of a group's gradient arena, all-reduced
// with the mean.
//
// Two ways to run them (--gradient-overlap):
//
// overlap (default): before the backward of a step's last micro-batch,
//   gradient_sync_begin listens to the groups' backward progress
//   (ParameterProgress in nn/parameters.h: "the gradients of this set from
//   offset X to the end are final"); each report starts, in bucket order,
//   every bucket whose range is complete (comm_all_reduce_start). After
//   backward, gradient_sync_finish starts the rest and waits for all of
//   them; the optimizer runs after it. Only the last micro-batch of a
//   gradient-accumulation step listens (DDP's no_sync for the others).
//   On a GPU (NCCL) the buckets run on the communication stream while the
//   compute stream goes on with backward. On the CPU a started bucket
//   advances at the next report (comm_progress: OpenMPI has no progress
//   thread), so MPI's transfers interleave with the backward blocks.
// after backward (gradient_sync_all_reduce): the buckets one after the
//   other, once backward is done (on a GPU queued on the device behind it,
//   comm_all_reduce_queued: the host does not wait).
//
// Both give the same bits: the same buckets reduced by the same calls.
// Every rank starts the same buckets in the same order (the reports come
// from the same code), and groups frozen at a step are left out on every
// rank alike.
#ifndef LTC_TRAIN_GRADIENT_SYNC_H
#define LTC_TRAIN_GRADIENT_SYNC_H

#include <stddef.h>

#include "dist/comm.h"
#include "ssl_methods/method.h"

#define GRADIENT_FIRST_BUCKET_BYTES ((size_t)1 << 20)
#define GRADIENT_BUCKET_BYTES ((size_t)25 << 20)

typedef struct GradientBucket {
    int group;      // index of the method group
    float *grads;   // backend memory, a piece of the group's gradient arena
    size_t count;   // floats
    size_t offset;  // of grads in the group's arena, in floats
    CommRequest request;  // while started (overlap)
} GradientBucket;

typedef struct GradientSync {
    int bucket_count;
    GradientBucket *buckets;  // reverse parameter order
    // Overlap, between gradient_sync_begin and gradient_sync_finish:
    ParameterProgress progress;  // set on every group's parameters
    Communicator *comm;
    MethodGroup *groups;
    int group_count;
    long step;
    int listening;
    size_t final_from[METHOD_MAX_GROUPS];  // reported final from here to the end
    int started, waited;  // buckets [0, started) started, [0, waited) complete
    int failed;           // the first failure of a report, in `failure`
    ErrorMessage failure;
} GradientSync;

// Cuts the gradient arenas of groups[0..count) into buckets of at most
// bucket_bytes (the first at most first_bucket_bytes).
int gradient_sync_plan(GradientSync *sync, const MethodGroup *groups, int count,
                       size_t first_bucket_bytes, size_t bucket_bytes, ErrorMessage *err);
void gradient_sync_free(GradientSync *sync);

// Replaces every gradient of the groups active at `step`
// (method_group_active: not frozen, or frozen at lr 0) by its mean over
// comm's ranks, after backward. Groups skipped while frozen are left out on
// every rank alike (the same step on all ranks).
int gradient_sync_all_reduce(const GradientSync *sync, Communicator *comm,
                             const MethodGroup *groups, long step, ErrorMessage *err);

// Overlap: listens to the backward progress of groups[0..count) (the
// groups gradient_sync_plan cut) for `step`'s last micro-batch.
void gradient_sync_begin(GradientSync *sync, Communicator *comm, MethodGroup *groups, int count,
                         long step);
// After that backward: starts the buckets not started yet, waits for all,
// stops listening. The result of gradient_sync_all_reduce. A report that
// came after its gradients had been reported final (a backward pass the
// method did not hold) fails here, naming the group.
int gradient_sync_finish(GradientSync *sync, ErrorMessage *err);

#endif
