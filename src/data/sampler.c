// Epoch shuffle and rank sharding (see sampler.h).
#include "data/sampler.h"

#include <stdlib.h>

#include "util/rng.h"

int sampler_init(Sampler *sampler, size_t dataset_size, int batch_size, int rank,
                 int world_size, uint64_t seed, int shuffle, ErrorMessage *err) {
    *sampler = (Sampler){0};
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return error_set(err, "rank %d is outside a world of %d ranks", rank, world_size);
    if (batch_size < 1) return error_set(err, "batch size must be at least 1, got %d", batch_size);
    if (dataset_size > UINT32_MAX)
        return error_set(err, "dataset of %zu images exceeds the limit of %u", dataset_size,
                         UINT32_MAX);
    const size_t per_rank = dataset_size / (size_t)world_size;
    if (per_rank < (size_t)batch_size)
        return error_set(err,
                         "%zu images over %d rank(s) give %zu per rank, fewer than the batch "
                         "size %d: no full batch",
                         dataset_size, world_size, per_rank, batch_size);
    sampler->permutation = malloc(dataset_size * sizeof *sampler->permutation);
    if (!sampler->permutation) return error_set(err, "out of memory for the epoch order");
    sampler->dataset_size = dataset_size;
    sampler->batch_size = batch_size;
    sampler->rank = rank;
    sampler->world_size = world_size;
    sampler->seed = seed;
    sampler->shuffle = shuffle;
    sampler->per_rank = per_rank;
    sampler->batches_per_epoch = per_rank / (size_t)batch_size;
    sampler->cached_epoch = -1;
    return 0;
}

int sampler_init_keep_last(Sampler *sampler, size_t dataset_size, int batch_size, int rank,
                           int world_size, ErrorMessage *err) {
    *sampler = (Sampler){0};
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return error_set(err, "rank %d is outside a world of %d ranks", rank, world_size);
    if (batch_size < 1) return error_set(err, "batch size must be at least 1, got %d", batch_size);
    if (dataset_size == 0) return error_set(err, "cannot sample an empty dataset");
    if (dataset_size > UINT32_MAX)
        return error_set(err, "dataset of %zu images exceeds the limit of %u", dataset_size,
                         UINT32_MAX);
    sampler->dataset_size = dataset_size;
    sampler->batch_size = batch_size;
    sampler->rank = rank;
    sampler->world_size = world_size;
    sampler->keep_last = 1;
    sampler->per_rank = dataset_size;
    // Blocks rank, rank + R, ... that start before the end.
    const size_t blocks = (dataset_size + (size_t)batch_size - 1) / (size_t)batch_size;
    sampler->batches_per_epoch =
        blocks > (size_t)rank ? (blocks - (size_t)rank + (size_t)world_size - 1) / (size_t)world_size
                              : 0;
    sampler->cached_epoch = -1;
    return 0;
}

// keep_last: the first index of this rank's batch `batch_in_epoch`.
static size_t keep_last_first(const Sampler *sampler, size_t batch_in_epoch) {
    const size_t block = batch_in_epoch * (size_t)sampler->world_size + (size_t)sampler->rank;
    return block * (size_t)sampler->batch_size;
}

int sampler_batch_size(const Sampler *sampler, size_t batch_in_epoch) {
    if (!sampler->keep_last) return sampler->batch_size;
    const size_t first = keep_last_first(sampler, batch_in_epoch);
    const size_t left = first < sampler->dataset_size ? sampler->dataset_size - first : 0;
    return left < (size_t)sampler->batch_size ? (int)left : sampler->batch_size;
}

void sampler_free(Sampler *sampler) {
    free(sampler->permutation);
    *sampler = (Sampler){0};
}

static void sampler_fill_epoch(Sampler *sampler, uint32_t epoch) {
    uint32_t *order = sampler->permutation;
    const size_t n = sampler->dataset_size;
    for (size_t i = 0; i < n; i++) order[i] = (uint32_t)i;
    if (sampler->shuffle) {
        // Fisher-Yates from one counter-based stream per (seed, epoch).
        Rng rng = rng_make(sampler->seed, epoch, 0, RNG_STREAM_SHUFFLE);
        for (size_t i = n - 1; i > 0; i--) {
            const size_t j = rng_below(&rng, (uint32_t)(i + 1));
            const uint32_t t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    }
    sampler->cached_epoch = epoch;
}

void sampler_batch(Sampler *sampler, uint32_t epoch, size_t batch_in_epoch, uint32_t *indices) {
    if (sampler->keep_last) {  // no permutation: scan order
        const size_t first = keep_last_first(sampler, batch_in_epoch);
        const int size = sampler_batch_size(sampler, batch_in_epoch);
        for (int i = 0; i < size; i++) indices[i] = (uint32_t)(first + (size_t)i);
        return;
    }
    if (sampler->cached_epoch != (int64_t)epoch) sampler_fill_epoch(sampler, epoch);
    // Rank r owns positions r, r+R, r+2R, ... of the permutation.
    const size_t first = batch_in_epoch * (size_t)sampler->batch_size;
    for (int i = 0; i < sampler->batch_size; i++) {
        const size_t local = first + (size_t)i;
        indices[i] = sampler->permutation[local * (size_t)sampler->world_size +
                                          (size_t)sampler->rank];
    }
}
