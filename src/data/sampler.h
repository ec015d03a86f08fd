// Epoch sampling: a seeded shuffle of the dataset per epoch, sharded over R
// ranks like PyTorch's DistributedSampler with drop_last: every rank takes a
// disjoint 1/R of the epoch's permutation (the tail that does not divide
// evenly is dropped), then incomplete batches are dropped, so all ranks run
// the same number of batches.
#ifndef LTC_DATA_SAMPLER_H
#define LTC_DATA_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

typedef struct Sampler {
    size_t dataset_size;
    int batch_size;  // per rank
    int rank;
    int world_size;
    uint64_t seed;
    int shuffle;
    size_t per_rank;            // samples each rank sees per epoch (before batching)
    size_t batches_per_epoch;   // full batches per rank and epoch
    int64_t cached_epoch;       // epoch whose permutation is in `permutation`, or -1
    uint32_t *permutation;      // (dataset_size) the whole epoch's order, all ranks
} Sampler;

int sampler_init(Sampler *sampler, size_t dataset_size, int batch_size, int rank,
                 int world_size, uint64_t seed, int shuffle, ErrorMessage *err);
void sampler_free(Sampler *sampler);

// Writes the dataset indices of batch `batch_in_epoch` of `epoch` for this
// rank into indices (batch_size entries).
void sampler_batch(Sampler *sampler, uint32_t epoch, size_t batch_in_epoch, uint32_t *indices);

#endif
