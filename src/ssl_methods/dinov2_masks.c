// iBOT's block-wise masks for DINOv2 (see dinov2_masks.h), on the host.
#include "ssl_methods/dinov2_masks.h"

#include <math.h>
#include <string.h>

#include "util/rng.h"

#define MASK_MIN_PATCHES 4     // MaskingGenerator's min_num_patches
#define MASK_MIN_ASPECT 0.3    // min_aspect (max_aspect = 1 / min_aspect)
#define MASK_TRIES 10
#define MASK_RNG_STREAM 0x4D41534Bu  // "MASK"

// draw_masks' i-th masked crop of masked_crops gets int(P * r) patches for
// r below high_i (the same float expression), at most: its bound.
static int crop_bound(const Dinov2MaskConfig *config, int i, int masked_crops) {
    const int patches = config->grid * config->grid;
    const double high = config->ratio_min +
                        (config->ratio_max - config->ratio_min) * (i + 1) / masked_crops;
    // + 1e-6: low + u (high - low) may round a last bit above high
    const int most = (int)floor(patches * high + 1e-6);
    return most < patches ? most : patches;
}

int dinov2_masks_capacity(const Dinov2MaskConfig *config, int n_crops, int world) {
    const int global_crops = n_crops * world;
    int masked_crops = (int)(global_crops * config->probability);  // as draw_masks
    if (masked_crops > DINOV2_MASKS_MAX_CROPS) masked_crops = DINOV2_MASKS_MAX_CROPS;
    if (config->grid * config->grid > DINOV2_MASKS_MAX_PATCHES) return 0;
    // the bounds grow with i: a rank may hold the largest of them
    const int mine = masked_crops < n_crops ? masked_crops : n_crops;
    int most = 0;
    for (int i = masked_crops - mine; i < masked_crops; i++)
        most += crop_bound(config, i, masked_crops);
    return most;
}

// One rectangle (MaskingGenerator._mask): how many patches it newly masked.
static int mask_rectangle(Rng *rng, int grid, uint8_t *mask, int max_patches) {
    int added = 0;
    const double log_min = log(MASK_MIN_ASPECT), log_max = log(1.0 / MASK_MIN_ASPECT);
    for (int attempt = 0; attempt < MASK_TRIES && added == 0; attempt++) {
        const double area = MASK_MIN_PATCHES + rng_uniform(rng) * (max_patches - MASK_MIN_PATCHES);
        const double aspect = exp(log_min + rng_uniform(rng) * (log_max - log_min));
        const int h = (int)lround(sqrt(area * aspect)), w = (int)lround(sqrt(area / aspect));
        if (w >= grid || h >= grid) continue;
        const int top = (int)rng_below(rng, (uint32_t)(grid - h + 1));
        const int left = (int)rng_below(rng, (uint32_t)(grid - w + 1));
        int already = 0;
        for (int i = top; i < top + h; i++)
            for (int j = left; j < left + w; j++) already += mask[i * grid + j];
        const int fresh = h * w - already;
        if (fresh <= 0 || fresh > max_patches) continue;
        for (int i = top; i < top + h; i++)
            for (int j = left; j < left + w; j++)
                if (!mask[i * grid + j]) mask[i * grid + j] = 1, added++;
    }
    return added;
}

// MaskingGenerator.__call__: rectangles until `target` patches are masked
// or a rectangle adds nothing.
static void mask_crop(Rng *rng, int grid, int target, uint8_t *mask) {
    const int patches = grid * grid, largest = patches / 2;  // max_num_patches = 0.5 h w
    memset(mask, 0, (size_t)patches);
    int count = 0;
    while (count < target) {
        int budget = target - count;
        if (budget > largest) budget = largest;
        const int added = mask_rectangle(rng, grid, mask, budget);
        if (added == 0) break;
        count += added;
    }
}

// mask (n_crops, P) = 1 where masked, else 0.
static void draw_masks(const Dinov2MaskConfig *config, int n_crops, uint64_t seed, long step,
                       float *mask) {
    const int grid = config->grid, patches = grid * grid;
    const int masked_crops = (int)(n_crops * config->probability);
    Rng rng = rng_make(seed, (uint32_t)step, (uint64_t)step, MASK_RNG_STREAM);
    // the crop each generated mask goes to: a random permutation (random.shuffle)
    int order[DINOV2_MASKS_MAX_CROPS];
    const int crops = n_crops < DINOV2_MASKS_MAX_CROPS ? n_crops : DINOV2_MASKS_MAX_CROPS;
    for (int c = 0; c < crops; c++) order[c] = c;
    for (int c = crops - 1; c > 0; c--) {
        const int other = (int)rng_below(&rng, (uint32_t)(c + 1));
        const int swap = order[c];
        order[c] = order[other], order[other] = swap;
    }
    uint8_t crop_mask[DINOV2_MASKS_MAX_PATCHES];
    for (int c = 0; c < n_crops * patches; c++) mask[c] = 0.0f;
    for (int i = 0; i < masked_crops && i < crops && patches <= DINOV2_MASKS_MAX_PATCHES; i++) {
        const double low = config->ratio_min +
                           (config->ratio_max - config->ratio_min) * i / masked_crops;
        const double high = config->ratio_min +
                            (config->ratio_max - config->ratio_min) * (i + 1) / masked_crops;
        const int target = (int)(patches * (low + rng_uniform(&rng) * (high - low)));
        mask_crop(&rng, grid, target, crop_mask);
        for (int p = 0; p < patches; p++) mask[(size_t)order[i] * patches + p] = crop_mask[p];
    }
}

// index, weight of the masked patches of mask (n_crops, P); their count.
static int collect_masked(int n_crops, int patches, const float *mask, int32_t *index,
                          float *weight) {
    int count = 0;
    for (int c = 0; c < n_crops; c++) {
        int in_crop = 0;
        for (int p = 0; p < patches; p++) in_crop += mask[(size_t)c * patches + p] != 0.0f;
        for (int p = 0; p < patches; p++)
            if (mask[(size_t)c * patches + p] != 0.0f) {
                index[count] = c * patches + p;
                weight[count++] = 1.0f / (float)in_crop;
            }
    }
    return count;
}

int dinov2_masks_make(const Dinov2MaskConfig *config, int n_crops, uint64_t seed, long step,
                      float *mask, int32_t *index, float *weight) {
    draw_masks(config, n_crops, seed, step, mask);
    return collect_masked(n_crops, config->grid * config->grid, mask, index, weight);
}

int dinov2_masks_make_rank(const Dinov2MaskConfig *config, int views, int batch, int world,
                           int rank, uint64_t seed, long step, float *global_mask, float *mask,
                           int32_t *index, float *weight, int *total) {
    const int patches = config->grid * config->grid, global_crops = world * views * batch;
    draw_masks(config, global_crops, seed, step, global_mask);
    int masked = 0;
    for (size_t i = 0; i < (size_t)global_crops * patches; i++) masked += global_mask[i] != 0.0f;
    *total = masked;
    for (int v = 0; v < views; v++)
        for (int i = 0; i < batch; i++) {
            const size_t crop = (size_t)v * world * batch + (size_t)i * world + (size_t)rank;
            memcpy(mask + ((size_t)v * batch + i) * patches, global_mask + crop * patches,
                   (size_t)patches * sizeof *mask);
        }
    return collect_masked(views * batch, patches, mask, index, weight);
}
