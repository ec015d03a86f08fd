// Gradient averaging over the ranks of a data-parallel run, in buckets.
//
// The buckets follow PyTorch DDP's layout: about 25 MB each (the first one
// 1 MB), in reverse order of the parameters (the last group's last
// parameters first), which is the order backward completes them. Each
// bucket is one contiguous piece of a group's gradient arena, all-reduced
// with the mean.
//
// On the CPU the buckets are all-reduced after backward, one after the
// other: the backward ops use every core and OpenMPI has no progress
// thread, so a bucket started during backward would only advance inside
// later MPI calls; bucketing still bounds each message (MPI's int counts,
// its internal buffers). With a GPU backend the same buckets are meant to
// start as backward completes them, on a communication stream (not built
// yet).
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
} GradientBucket;

typedef struct GradientSync {
    int bucket_count;
    GradientBucket *buckets;  // reverse parameter order
} GradientSync;

// Cuts the gradient arenas of groups[0..count) into buckets of at most
// bucket_bytes (the first at most first_bucket_bytes).
int gradient_sync_plan(GradientSync *sync, const MethodGroup *groups, int count,
                       size_t first_bucket_bytes, size_t bucket_bytes, ErrorMessage *err);
void gradient_sync_free(GradientSync *sync);

// Replaces every gradient of the groups active at `step`
// (method_group_active: not frozen, or frozen at lr 0) by its mean over
// comm's ranks. Groups skipped while frozen are left out on every rank
// alike (the same step on all ranks).
int gradient_sync_all_reduce(const GradientSync *sync, Communicator *comm,
                             const MethodGroup *groups, long step, ErrorMessage *err);

#endif
