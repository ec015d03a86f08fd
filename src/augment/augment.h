// View transforms of SSL methods: RandomResizedCrop, horizontal flip, colour
// jitter, random greyscale, Gaussian blur, solarize, with LightlyTrain's
// defaults for SimCLR and DINO (multi-crop).
//
// A view is rendered in two steps: view_sample() draws every random parameter
// from a counter-based Rng (so the pixels depend only on seed, epoch, sample
// and view), and view_render() produces the uint8 RGB (size, size, 3) output
// from a decoded source image. Sampling happens before decoding because the
// crop decides which region, at which scale, the decoder must produce.
#ifndef LTC_AUGMENT_AUGMENT_H
#define LTC_AUGMENT_AUGMENT_H

#include <stdint.h>

#include "decode/decode.h"
#include "util/error.h"
#include "util/image.h"
#include "util/rng.h"

#define AUGMENT_MAX_VIEWS 16

typedef struct ViewTransform {
    int size;                    // output is size x size pixels
    float scale_min, scale_max;  // RandomResizedCrop area fraction
    float ratio_min, ratio_max;  // RandomResizedCrop aspect ratio (w/h)
    float flip_p;                // horizontal flip probability
    float jitter_p;              // probability of applying colour jitter
    float brightness, contrast, saturation, hue;  // jitter strengths (hue <= 0.5)
    float grey_p;                                 // random greyscale probability
    float blur_p, blur_sigma_min, blur_sigma_max;  // Gaussian blur
    float solarize_p, solarize_threshold;          // threshold in [0, 1]
    // 1: a plain resize of the whole image to size x size (aspect ratio not
    // kept, as LightlyTrain's embed transform): view_sample draws nothing and
    // returns the full image as the crop with every other op off.
    int resize_only;
} ViewTransform;

typedef enum JitterOp {
    JITTER_BRIGHTNESS = 0,
    JITTER_CONTRAST,
    JITTER_SATURATION,
    JITTER_HUE,
} JitterOp;

// One random draw of a ViewTransform for one image.
typedef struct ViewParams {
    PixelRect crop;  // in full-image pixels, inside the image
    int flip;
    int jitter;            // colour jitter applied at all
    JitterOp order[4];     // torchvision applies the four in random order
    float brightness_factor, contrast_factor, saturation_factor, hue_factor;
    int grey;
    float blur_sigma;  // 0: no blur
    int solarize;
} ViewParams;

typedef struct ViewSet {
    int count;
    int global_count;  // views [0, global_count) are "global", the rest "local" (DINO)
    ViewTransform views[AUGMENT_MAX_VIEWS];
} ViewSet;

// LightlyTrain defaults (../shared/reference/lightlytrain.md).
void view_set_simclr(ViewSet *set, int image_size);
void view_set_dino(ViewSet *set, int global_size, int local_size, int local_count);
// LightlyTrain's DINOv2 views: DINO's with global scale [0.32, 1] and 8
// local views of 98 px at scale [0.05, 0.32].
void view_set_dinov2(ViewSet *set, int global_size);
// --local-image-size / --local-views over a multi-crop set: local_size > 0
// resizes the local views, local_count >= 0 sets how many there are (copies
// of the first local view); negative values keep the set's own.
void view_set_multi_crop(ViewSet *set, int local_size, int local_count);
// One resize_only view of size x size (embedding, evaluation).
void view_set_resize(ViewSet *set, int size);
// Sets one parameter from "KEY=VALUE", for every view, or "SCOPE.KEY=VALUE"
// for some: SCOPE is global, local or view<N> (0-based). KEY is a float field
// of ViewTransform by name (scale_min, flip_p, brightness, blur_sigma_max,
// solarize_threshold, ...). The changed views are validated.
int view_set_override(ViewSet *set, const char *assignment, ErrorMessage *err);
// Checks ranges (probabilities in [0,1], scale 0 < min <= max <= 1, ...).
int view_transform_validate(const ViewTransform *transform, ErrorMessage *err);

void view_sample(const ViewTransform *transform, int image_width, int image_height, Rng *rng,
                 ViewParams *params);

// Per-thread scratch for view_render; grows to the largest need, then reused.
typedef struct AugmentScratch AugmentScratch;
AugmentScratch *augment_scratch_create(void);
void augment_scratch_destroy(AugmentScratch *scratch);
// How many times the scratch has (re)allocated memory so far: constant once
// warm (tests use it to check that view_render does not allocate).
int augment_scratch_allocations(const AugmentScratch *scratch);

// Renders one view. `source` holds the pixels of the full-image rectangle
// `covered` (possibly at a reduced scale); params->crop must lie inside
// `covered`. out: (size, size, 3) uint8, rows packed.
int view_render(const ViewTransform *transform, const ViewParams *params, const Image *source,
                PixelRect covered, uint8_t *out, AugmentScratch *scratch, ErrorMessage *err);

#endif
