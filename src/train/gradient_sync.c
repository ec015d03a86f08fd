// Bucketed gradient averaging, after backward or overlapped with it (see
// gradient_sync.h).
#include "train/gradient_sync.h"

#include <stdlib.h>
#include <string.h>

int gradient_sync_plan(GradientSync *sync, const MethodGroup *groups, int count,
                       size_t first_bucket_bytes, size_t bucket_bytes, ErrorMessage *err) {
    *sync = (GradientSync){0};
    const size_t first_floats = first_bucket_bytes / sizeof(float);
    const size_t floats = bucket_bytes / sizeof(float);
    if (first_floats == 0 || floats == 0) return error_set(err, "gradient buckets of 0 floats");
    if (count > METHOD_MAX_GROUPS)
        return error_set(err, "%d parameter groups (at most %d)", count, METHOD_MAX_GROUPS);
    size_t buckets = 0;
    for (int g = 0; g < count; g++)
        buckets += groups[g].params->total / floats + 2;  // enough for any first bucket
    sync->buckets = calloc(buckets ? buckets : 1, sizeof *sync->buckets);
    if (!sync->buckets) return error_set(err, "out of memory for %zu gradient buckets", buckets);
    for (int g = count - 1; g >= 0; g--) {
        const ParameterSet *params = groups[g].params;
        size_t end = params->total;
        while (end > 0) {
            const size_t limit = sync->bucket_count == 0 ? first_floats : floats;
            const size_t size = end < limit ? end : limit;
            end -= size;
            sync->buckets[sync->bucket_count++] = (GradientBucket){
                .group = g, .grads = params->grads + end, .count = size, .offset = end,
                .request = -1};
        }
    }
    return 0;
}

void gradient_sync_free(GradientSync *sync) {
    free(sync->buckets);
    *sync = (GradientSync){0};
}

int gradient_sync_all_reduce(const GradientSync *sync, Communicator *comm,
                             const MethodGroup *groups, long step, ErrorMessage *err) {
    if (!comm || strcmp(comm->name, "single") == 0) return 0;  // an NCCL world of 1 runs it
    for (int b = 0; b < sync->bucket_count; b++) {
        const GradientBucket *bucket = &sync->buckets[b];
        if (!method_group_active(&groups[bucket->group], step)) continue;
        if (comm_all_reduce_queued(comm, bucket->grads, bucket->count, COMM_MEAN, err))
            return error_prefix(err, "averaging the gradients");
    }
    return 0;
}

// ---- overlap ----------------------------------------------------------------------

// Completes the oldest started bucket.
static int wait_oldest(GradientSync *sync, ErrorMessage *err) {
    GradientBucket *bucket = &sync->buckets[sync->waited++];
    const CommRequest request = bucket->request;
    bucket->request = -1;
    return comm_all_reduce_wait(sync->comm, request, err);
}

// Starts, in bucket order, every bucket whose range is final (a frozen
// group's are passed over); stops at the first that is not.
static int start_complete_buckets(GradientSync *sync, ErrorMessage *err) {
    while (sync->started < sync->bucket_count) {
        GradientBucket *bucket = &sync->buckets[sync->started];
        const MethodGroup *group = &sync->groups[bucket->group];
        if (method_group_active(group, sync->step)) {
            if (bucket->offset < sync->final_from[bucket->group]) return 0;
            if (sync->started - sync->waited == COMM_MAX_REQUESTS && wait_oldest(sync, err))
                return -1;
            if (comm_all_reduce_start(sync->comm, bucket->grads, bucket->count, COMM_MEAN,
                                      &bucket->request, err))
                return -1;
        }
        sync->started++;  // a frozen group's bucket keeps request -1: nothing to wait for
    }
    return 0;
}

static void on_progress(void *listener, const ParameterSet *set, size_t offset) {
    GradientSync *sync = listener;
    if (sync->failed) return;
    int g = 0;
    while (g < sync->group_count && sync->groups[g].params != set) g++;
    if (g == sync->group_count) return;  // not a group of the plan
    if (offset >= sync->final_from[g]) {
        sync->failed = 1;
        error_set(&sync->failure,
                  "group '%s': backward reported its gradients final from %zu after it had "
                  "reported them final from %zu (a second backward pass reached them: the "
                  "method must hold the progress of every pass but the last)",
                  sync->groups[g].name, offset, sync->final_from[g]);
        return;
    }
    sync->final_from[g] = offset;
    if (start_complete_buckets(sync, &sync->failure) ||
        comm_progress(sync->comm, &sync->failure))
        sync->failed = 1;
}

void gradient_sync_begin(GradientSync *sync, Communicator *comm, MethodGroup *groups, int count,
                         long step) {
    sync->progress = (ParameterProgress){.report = on_progress, .listener = sync};
    sync->comm = comm;
    sync->groups = groups;
    sync->group_count = count;
    sync->step = step;
    sync->started = sync->waited = 0;
    sync->failed = 0;
    for (int g = 0; g < count; g++) {
        // One past the end: nothing final yet (a report of `total` is an empty range).
        sync->final_from[g] = groups[g].params->total + 1;
        groups[g].params->progress = &sync->progress;
    }
    sync->listening = 1;
}

int gradient_sync_finish(GradientSync *sync, ErrorMessage *err) {
    if (!sync->listening) return error_set(err, "gradient_sync_finish without a begin");
    for (int g = 0; g < sync->group_count; g++) {
        sync->groups[g].params->progress = NULL;
        sync->final_from[g] = 0;  // backward is done: everything is final
    }
    sync->listening = 0;
    // After a failure the started buckets are still waited for (a failed
    // communicator refuses at once): nothing stays in flight.
    int status = 0;
    if (sync->failed) {
        if (err) *err = sync->failure;
        status = -1;
    } else {
        status = start_complete_buckets(sync, err);
    }
    while (sync->waited < sync->started) {
        ErrorMessage later = {{0}};
        if (wait_oldest(sync, status ? &later : err)) status = -1;
    }
    return status ? error_prefix(err, "averaging the gradients") : 0;
}
