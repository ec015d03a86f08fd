// Epoch sampling: a seeded shuffle of the dataset per epoch, sharded over R
// ranks like PyTorch's DistributedSampler with drop_last: every rank takes a
// disjoint 1/R of the epoch's permutation (the tail that does not divide
// evenly is dropped), then incomplete batches are dropped, so all ranks run
// the same number of batches.
//
// keep_last mode (sampler_init_keep_last) is for passes that must see every
// image exactly once (embedding, evaluation): no shuffle, indices in scan
// order, the last batch holds the remainder. With R ranks the scan order
// goes in rounds of R blocks of batch_size: rank r's batch k is block
// k R + r, so the ranks' batches of round k, in rank order, are images
// [k R batch, (k + 1) R batch); a rank whose block starts past the end has
// no batch in that round.
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
    int keep_last;              // 1: sequential, last batch may be smaller
    size_t per_rank;            // samples each rank sees per epoch (before batching)
    size_t batches_per_epoch;   // full batches per rank and epoch (keep_last: all batches)
    int64_t cached_epoch;       // epoch whose permutation is in `permutation`, or -1
    uint32_t *permutation;      // (dataset_size) the whole epoch's order, all ranks
} Sampler;

int sampler_init(Sampler *sampler, size_t dataset_size, int batch_size, int rank,
                 int world_size, uint64_t seed, int shuffle, ErrorMessage *err);
// keep_last mode: every index of [0, dataset_size) exactly once per epoch
// over all ranks, in order (see above); this rank's batches_per_epoch are
// its non-empty blocks.
int sampler_init_keep_last(Sampler *sampler, size_t dataset_size, int batch_size, int rank,
                           int world_size, ErrorMessage *err);
void sampler_free(Sampler *sampler);

// Samples in batch `batch_in_epoch`: batch_size, except for the last batch of
// an epoch in keep_last mode (the remainder).
int sampler_batch_size(const Sampler *sampler, size_t batch_in_epoch);

// Writes the dataset indices of batch `batch_in_epoch` of `epoch` for this
// rank into indices (sampler_batch_size entries).
void sampler_batch(Sampler *sampler, uint32_t epoch, size_t batch_in_epoch, uint32_t *indices);

#endif
