// View transforms of SSL methods: RandomResizedCrop, horizontal flip, colour
// jitter, random greyscale, Gaussian blur, solarize, with LightlyTrain's
// defaults for SimCLR and DINO (multi-crop).
//
// A view is rendered in two steps: view_sample() draws every random parameter
// from a counter-based Rng (so the pixels depend only on seed, epoch, sample
// and view), and view_render() produces the uint8 RGB (size, size, 3) output
// from a decoded source image. Sampling happens before decoding because the
// crop decides which region, at which scale, the decoder must produce.
//
// The deep path (docs/input-pipeline.md "Depth and channels": 16-bit and
// float images, channel counts other than 3) renders float views instead:
// view_render_float() from a float image of the image's channels, with the
// same crop, flip and blur, the colour ops in float (color_float.h) and
// LightlyTrain's ChannelDrop.
#ifndef LTC_AUGMENT_AUGMENT_H
#define LTC_AUGMENT_AUGMENT_H

#include <stdint.h>

#include "decode/decode.h"
#include "util/error.h"
#include "util/image.h"
#include "util/rng.h"

#define AUGMENT_MAX_VIEWS 24
#define AUGMENT_MAX_CHANNELS SAMPLES_MAX_CHANNELS

// A view whose crop follows an earlier view's (its parent's), as
// LightlyTrain's DINOv31 PaKA views (constrained_crop.py).
typedef enum ViewCoupling {
    VIEW_COUPLING_NONE = 0,
    // A clean render of the parent: its crop, flip and channels, with no
    // colour jitter, greyscale, blur or solarize whatever the transform says.
    VIEW_COUPLING_SAME,
    // A box inside the parent's crop (sample_high_overlap_box): scale_min ..
    // scale_max of the parent's area, aspect ratio_min .. ratio_max (both
    // uniform), rounded, clipped to the parent and placed uniformly in it;
    // the view's own flip and colour draws.
    VIEW_COUPLING_INSIDE,
} ViewCoupling;

typedef struct ViewTransform {
    int size;                    // output is size x size pixels
    float scale_min, scale_max;  // RandomResizedCrop area fraction
    float ratio_min, ratio_max;  // RandomResizedCrop aspect ratio (w/h)
    float flip_p;                // horizontal flip probability
    // Vertical flip probability (LightlyTrain's random_flip vertical_prob);
    // drawn last, and only when above 0, so views without it draw as before.
    float vflip_p;
    // Rotation (LightlyTrain's random_rotation {prob, degrees}): with
    // probability rotate_p, by an angle uniform in [rotate_min, rotate_max]
    // degrees (augment/rotate.h); drawn after the vertical flip, and only
    // when rotate_p is above 0.
    float rotate_p, rotate_min, rotate_max;
    float jitter_p;              // probability of applying colour jitter
    float brightness, contrast, saturation, hue;  // jitter strengths (hue <= 0.5)
    float grey_p;                                 // random greyscale probability
    float blur_p, blur_sigma_min, blur_sigma_max;  // Gaussian blur
    float solarize_p, solarize_threshold;          // threshold in [0, 1]
    // 1: a plain resize of the whole image to size x size (aspect ratio not
    // kept), as LightlyTrain's embed transform (albumentations' Resize):
    // decoded at full resolution (load_plan) and resized bilinearly at every
    // scale, no antialiasing (OpenCV's INTER_LINEAR; resize.h's
    // RESIZE_BILINEAR); view_sample draws nothing and returns the full image
    // as the crop with every other op off.
    int resize_only;
    // Channels (0 means 3): images are read as input_channels, the view
    // carries `channels`. Fewer than input_channels is LightlyTrain's
    // ChannelDrop: each view drops input_channels - channels of them, drawn
    // one after another with probabilities in proportion to drop_weights
    // among those left (weight 0: never dropped), and keeps the others in
    // their order. Colour jitter, greyscale and solarize need 3 channels.
    int input_channels, channels;
    float drop_weights[AUGMENT_MAX_CHANNELS];
    ViewCoupling coupling;  // VIEW_COUPLING_NONE: an independent crop
    int parent;             // with a coupling: the earlier, uncoupled view it follows
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
    int vflip;
    int rotate;             // rotate by rotate_degrees
    float rotate_degrees;
    int jitter;            // colour jitter applied at all
    JitterOp order[4];     // torchvision applies the four in random order
    float brightness_factor, contrast_factor, saturation_factor, hue_factor;
    int grey;
    float blur_sigma;  // 0: no blur
    int solarize;
    uint8_t channel_map[AUGMENT_MAX_CHANNELS];  // view channel k reads input channel map[k]
} ViewParams;

// Where a view came from in its image (DINOv31's PaKA loss aligns views by
// it): the crop in full-image pixels, the image's size, the flip.
typedef struct ViewGeometry {
    PixelRect crop;
    int32_t image_width, image_height;
    int32_t flip;
} ViewGeometry;

typedef struct ViewSet {
    int count;
    int global_count;  // views [0, global_count) are "global", the rest "local" (DINO)
    // The last teacher_views of the global views are for a teacher only
    // (DINOv31's clean globals): the student's forward leaves them out.
    int teacher_views;
    ViewTransform views[AUGMENT_MAX_VIEWS];
    // 0: the views are 8-bit RGB (view_render; 3 channels in and out);
    // 1: floats of view_channels(views[0]) channels (view_render_float, the
    // deep path: images read natively by samples_to_float's rule).
    int float_pixels;
    // How the views enter the model: (x - mean[c]) / std[c] with x in [0, 1]
    // (8-bit: v / 255). normalize_count 0: ImageNet's (3 channels); else
    // one mean and std per view channel.
    int normalize_count;
    float mean[AUGMENT_MAX_CHANNELS], std[AUGMENT_MAX_CHANNELS];
} ViewSet;

// What a run asks for (--num-channels, --channel-drop, --normalize;
// view_pixels.c parses their text).
typedef struct ChannelSettings {
    int channels;    // images are read with this many (0: 3)
    int keep;        // ChannelDrop: channels each view keeps (0: no ChannelDrop)
    int drop_count;  // weights given (must be `channels`)
    float drop_weights[AUGMENT_MAX_CHANNELS];
    int normalize_count;  // 0: ImageNet's (3 channels only)
    float mean[AUGMENT_MAX_CHANNELS], std[AUGMENT_MAX_CHANNELS];
} ChannelSettings;

// "MEAN1,...:STD1,..." and "KEEP:WEIGHT1,..." into settings; -1 with a
// message naming the option when malformed.
int channel_normalize_parse(const char *text, ChannelSettings *settings, ErrorMessage *err);
int channel_drop_parse(const char *text, ChannelSettings *settings, ErrorMessage *err);
// The channels the model takes: ChannelDrop's keep, else the images'.
int channel_settings_model_channels(const ChannelSettings *settings);
// The combinations: weights for every image channel, KEEP below it, at most
// KEEP weights 0 (LightlyTrain's ChannelDropTV checks), a mean and std per
// model channel (required unless it takes 3).
int channel_settings_check(const ChannelSettings *settings, ErrorMessage *err);
// Applies the settings to every view (view_set_channels), with 8-bit
// (float_pixels 0; 3 channels only) or float pixels.
void view_set_apply_channels(ViewSet *set, const ChannelSettings *settings, int float_pixels);
// The set's normalisation as "MEAN1,...:STD1,..." (%.9g each; checkpoints).
void channel_normalize_format(const ViewSet *set, char *out, size_t size);

// The channels of every view (view 0's: all views share them) and the
// bytes of one of their pixels (3 for 8-bit RGB, 4 x channels for floats).
int view_set_channels_out(const ViewSet *set);
size_t view_set_pixel_bytes(const ViewSet *set);
// The normalisation's mean and std, view_set_channels_out of each.
void view_set_normalization(const ViewSet *set, float *mean, float *std);

// The largest magnitude a normalised sample may have: float16's largest
// value, what the device's 16-bit activations hold. No image normalised
// for training comes near it; a no-data fill (-3.4e38, 1e30) does.
#define VIEW_NORMALIZED_LIMIT 65504.0
// Per image channel (view_input_channels of them), the range of float
// samples whose normalised value stays within VIEW_NORMALIZED_LIMIT:
// [mean - limit std, mean + limit std] of the model channel it becomes;
// with ChannelDrop an image channel c may become any model channel from
// c - dropped to c, and the range is the intersection of theirs.
void view_set_sample_range(const ViewSet *set, float *low, float *high);
// The checks every view set must pass (each view's view_transform_validate,
// the views' shared channel counts, 8-bit views RGB, normalize_count).
int view_set_validate(const ViewSet *set, ErrorMessage *err);

// LightlyTrain defaults (../shared/reference/lightlytrain.md).
void view_set_simclr(ViewSet *set, int image_size);
void view_set_dino(ViewSet *set, int global_size, int local_size, int local_count);
// LightlyTrain's DINOv2 views: DINO's with global scale [0.32, 1] and 8
// local views of 98 px at scale [0.05, 0.32].
void view_set_dinov2(ViewSet *set, int global_size);
// LightlyTrain's DINOv31 views: DINOv2's two global views, their clean
// renders (VIEW_COUPLING_SAME, for the teacher only), local_count DINOv2
// local views of local_size px, then paka_count PaKA local views of
// local_size (VIEW_COUPLING_INSIDE global view k % 2 at scale [0.05, 0.4] of
// its area, the local views' colour ops and flip). local_size <= 0: 98 px;
// local_count < 0: 8. -1 with a message when the views exceed
// AUGMENT_MAX_VIEWS.
int view_set_dinov31(ViewSet *set, int global_size, int local_size, int local_count,
                     int paka_count, ErrorMessage *err);
// --local-image-size / --local-views over a multi-crop set: local_size > 0
// resizes the local views, local_count >= 0 sets how many there are (copies
// of the first local view); negative values keep the set's own.
void view_set_multi_crop(ViewSet *set, int local_size, int local_count);
// One resize_only view of size x size (embedding, evaluation).
void view_set_resize(ViewSet *set, int size);
// Every view reads input_channels and carries `channels` (ChannelDrop with
// drop_weights, input_channels of them, when fewer); with other than 3
// channels colour jitter, greyscale and solarize are turned off, as
// LightlyTrain does.
void view_set_channels(ViewSet *set, int input_channels, int channels,
                       const float *drop_weights);
// The pixels of a whole set without ChannelDrop: every view reads and
// carries `channels` (colour ops off unless 3), float_pixels as given, the
// normalisation's normalize_count means and stds (0: ImageNet's).
void view_set_pixels(ViewSet *set, int channels, int float_pixels, int normalize_count,
                     const float *mean, const float *std);
// A view's channel counts (0 read as 3).
static inline int view_input_channels(const ViewTransform *t) {
    return t->input_channels > 0 ? t->input_channels : 3;
}
static inline int view_channels(const ViewTransform *t) {
    return t->channels > 0 ? t->channels : 3;
}
// Sets parameters from "KEY=VALUE", for every view, or "SCOPE.KEY=VALUE"
// for some: SCOPE is global, local or view<N> (0-based). KEY is a float field
// of ViewTransform by name (scale_min, flip_p, brightness, blur_sigma_max,
// solarize_threshold, ...). The views are validated after all are set, so
// their order does not matter. view_set_override: one assignment.
int view_set_overrides(ViewSet *set, const char *const *assignments, int count,
                       ErrorMessage *err);
int view_set_override(ViewSet *set, const char *assignment, ErrorMessage *err);
// Checks ranges (probabilities in [0,1], scale 0 < min <= max <= 1, ...).
int view_transform_validate(const ViewTransform *transform, ErrorMessage *err);

void view_sample(const ViewTransform *transform, int image_width, int image_height, Rng *rng,
                 ViewParams *params);
// A coupled view's parameters from its parent's (ViewTransform.coupling),
// after view_sample drew its own from rng; draws the INSIDE box from rng.
void view_couple(const ViewTransform *transform, const ViewParams *parent, Rng *rng,
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
// `covered`. out: (size, size, 3) uint8, rows packed. Needs 3 channels in
// and out.
int view_render(const ViewTransform *transform, const ViewParams *params, const Image *source,
                PixelRect covered, uint8_t *out, AugmentScratch *scratch, ErrorMessage *err);

// A float image (samples_to_float's output).
typedef struct FloatImage {
    const float *pixels;
    int width, height, channels;
    size_t stride;  // floats between row starts
} FloatImage;

// The deep path's view_render: source has view_input_channels channels;
// out: (size, size, view_channels) floats, rows packed.
int view_render_float(const ViewTransform *transform, const ViewParams *params,
                      const FloatImage *source, PixelRect covered, float *out,
                      AugmentScratch *scratch, ErrorMessage *err);

#endif
