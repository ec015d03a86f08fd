// iBOT's masks for DINOv2 (LightlyTrain's MaskingGenerator and
// create_collated_masks, from DINOv2's data/masking.py and collate.py): of
// the n_crops global crops, int(n_crops * mask_probability) get a mask, the
// i-th of them covering int(P * uniform(r_i, r_i+1)) of its P patches where
// r = linspace(ratio_min, ratio_max, masked crops + 1); the masks are laid
// down as random rectangles (area uniform in [4, max], aspect log-uniform
// in [0.3, 1/0.3], at most 10 tries per rectangle, at most P/2 patches per
// rectangle), then shuffled over the crops. Draws come from the
// counter-based RNG keyed by (seed, step), so a resumed run masks the same.
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

// The most masked patches n_crops crops can get (for buffer sizes).
int dinov2_masks_capacity(const Dinov2MaskConfig *config, int n_crops);

// n_crops <= DINOV2_MASKS_MAX_CROPS, P <= DINOV2_MASKS_MAX_PATCHES (the
// caller checks). mask (n_crops, P) = 1.0 where masked, else 0; index (the masked count)
// = the flat positions c * P + p of the masked patches in order; weight (same
// count) = 1 / (masked patches of that crop). Returns the masked count.
int dinov2_masks_make(const Dinov2MaskConfig *config, int n_crops, uint64_t seed, long step,
                      float *mask, int32_t *index, float *weight);

#endif
