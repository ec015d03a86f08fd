// iBOT's masks for DINOv2 (LightlyTrain's MaskingGenerator and
// create_collated_masks, from DINOv2's data/masking.py and collate.py): of
// the n_crops global crops, int(n_crops * mask_probability) get a mask, the
// i-th of them covering int(P * uniform(r_i, r_i+1)) of its P patches where
// r = linspace(ratio_min, ratio_max, masked crops + 1); the masks are laid
// down as random rectangles (area uniform in [4, max], aspect log-uniform
// in [0.3, 1/0.3], at most 10 tries per rectangle, at most P/2 patches per
// rectangle), then shuffled over the crops. Draws come from the
// counter-based RNG keyed by (seed, step), so a resumed run masks the same.
//
// With several ranks the global batch is masked as one process would mask
// it (dinov2_masks_make_rank), so N ranks with B/N images each mask the
// same crops as one rank with B images: the same training run. (DINOv2
// masks each rank's crops on their own; the share of masked crops and the
// ratio schedule are the same either way.)
#ifndef LTC_SSL_METHODS_DINOV2_MASKS_H
#define LTC_SSL_METHODS_DINOV2_MASKS_H

#include <stdint.h>

#define DINOV2_MASKS_MAX_CROPS 1024    // global crops per step
#define DINOV2_MASKS_MAX_PATCHES 4096  // patches per crop (a 64 x 64 grid)

typedef struct Dinov2MaskConfig {
    int grid;                 // patches per side of a global crop (P = grid^2)
    float ratio_min, ratio_max;  // 0.1, 0.5
    float probability;        // 0.5: the share of crops that get a mask
} Dinov2MaskConfig;

// The most masked patches a rank's `n_crops` crops can get in a world of
// `world` ranks, from the ratio schedule alone (the i-th masked crop's
// int(P r) for r below its range's top), so that it holds for every step
// and seed. With one rank it lies about P (ratio_max - ratio_min) / 2
// patches above a step's expected count, in all (51 of about 4,900 for 64
// masked crops of 256 patches; the bound before, masked crops x P
// ratio_max, was 1.7 times that count), and DINOv2 pads its patch rows to
// it, giving every step of one batch size the same shapes (dinov2.c).
// With several ranks a rank's crops may draw the largest masks: 2 (two
// ranks) to 3.3 (many) times its expected count, so only buffers take it.
int dinov2_masks_capacity(const Dinov2MaskConfig *config, int n_crops, int world);

// n_crops <= DINOV2_MASKS_MAX_CROPS, P <= DINOV2_MASKS_MAX_PATCHES (the
// caller checks). mask (n_crops, P) = 1.0 where masked, else 0; index (the masked count)
// = the flat positions c * P + p of the masked patches in order; weight (same
// count) = 1 / (masked patches of that crop). Returns the masked count.
int dinov2_masks_make(const Dinov2MaskConfig *config, int n_crops, uint64_t seed, long step,
                      float *mask, int32_t *index, float *weight);

// This rank's part of the masks of a global batch of `world` ranks, each
// with `views` global crops of `batch` images: the masks of world x views x
// batch crops are made as dinov2_masks_make makes them for one process
// (into global_mask, (world views batch, P) scratch), and this rank keeps
// those of its crops. Crops are view-major (view v of image i is crop
// v batch + i) and rank r's image i is image i world + r of the global
// batch (the sampler's strided shards, data/sampler.c), so its crop (v, i)
// is global crop v world batch + i world + r. mask, index and weight as
// dinov2_masks_make's for the rank's views x batch crops; returns their
// masked count, *total = the global batch's (the same on every rank). The
// global crops must fit DINOV2_MASKS_MAX_CROPS.
int dinov2_masks_make_rank(const Dinov2MaskConfig *config, int views, int batch, int world,
                           int rank, uint64_t seed, long step, float *global_mask, float *mask,
                           int32_t *index, float *weight, int *total);

#endif
