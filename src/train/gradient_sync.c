// Bucketed gradient averaging (see gradient_sync.h).
#include "train/gradient_sync.h"

#include <stdlib.h>
#include <string.h>

int gradient_sync_plan(GradientSync *sync, const MethodGroup *groups, int count,
                       size_t first_bucket_bytes, size_t bucket_bytes, ErrorMessage *err) {
    *sync = (GradientSync){0};
    const size_t first_floats = first_bucket_bytes / sizeof(float);
    const size_t floats = bucket_bytes / sizeof(float);
    if (first_floats == 0 || floats == 0) return error_set(err, "gradient buckets of 0 floats");
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
            sync->buckets[sync->bucket_count++] =
                (GradientBucket){.group = g, .grads = params->grads + end, .count = size};
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
        if (comm_all_reduce(comm, bucket->grads, bucket->count, COMM_MEAN, err))
            return error_prefix(err, "averaging the gradients");
    }
    return 0;
}
