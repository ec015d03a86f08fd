// View transform defaults (SimCLR, DINO), their validation, and view_sample:
// the random parameters of one view, drawn in a fixed order from a
// counter-based Rng (see augment.h).
#include <math.h>
#include <string.h>

#include "augment/augment.h"
#include "augment/blur.h"

// Brightness / contrast / saturation factors go up to 1 + strength; the 16.16
// fixed-point colour kernels stay exact in int32 up to a factor of 16.
#define VIEW_MAX_JITTER 15.0f
#define VIEW_MAX_SIZE 16384

static ViewTransform default_view(int size) {
    ViewTransform view = {
        .size = size,
        .scale_min = 0.08f, .scale_max = 1.0f,
        .ratio_min = 3.0f / 4.0f, .ratio_max = 4.0f / 3.0f,
        .flip_p = 0.5f,
        .jitter_p = 0.8f,
        .brightness = 0.8f, .contrast = 0.8f, .saturation = 0.8f, .hue = 0.2f,
        .grey_p = 0.2f,
        .blur_p = 0.5f, .blur_sigma_min = 0.1f, .blur_sigma_max = 2.0f,
        .solarize_p = 0.0f, .solarize_threshold = 0.5f,
    };
    return view;
}

void view_set_simclr(ViewSet *set, int image_size) {
    memset(set, 0, sizeof *set);
    set->count = 2;
    set->global_count = 2;
    set->views[0] = set->views[1] = default_view(image_size);
}

// local_count is clamped to [0, AUGMENT_MAX_VIEWS - 2].
void view_set_dino(ViewSet *set, int global_size, int local_size, int local_count) {
    memset(set, 0, sizeof *set);
    if (local_count < 0) local_count = 0;
    if (local_count > AUGMENT_MAX_VIEWS - 2) local_count = AUGMENT_MAX_VIEWS - 2;
    ViewTransform global = default_view(global_size);
    global.scale_min = 0.14f;
    global.brightness = 0.4f;
    global.contrast = 0.4f;
    global.saturation = 0.2f;
    global.hue = 0.1f;
    set->views[0] = global;
    set->views[0].blur_p = 1.0f;
    set->views[1] = global;
    set->views[1].blur_p = 0.1f;
    set->views[1].solarize_p = 0.2f;
    ViewTransform local = global;
    local.size = local_size;
    local.scale_min = 0.05f;
    local.scale_max = 0.14f;
    local.blur_p = 0.5f;
    for (int i = 0; i < local_count; i++) set->views[2 + i] = local;
    set->count = 2 + local_count;
    set->global_count = 2;
}

// LightlyTrain's DINOv2ViTTransform: DINO's views with global crops of
// scale [0.32, 1] and 8 local crops of 98 px, scale [0.05, 0.32].
void view_set_dinov2(ViewSet *set, int global_size) {
    view_set_dino(set, global_size, 98, 8);
    for (int v = 0; v < set->count; v++) {
        if (v < set->global_count) set->views[v].scale_min = 0.32f;
        else set->views[v].scale_max = 0.32f;
    }
}

int view_set_dinov31(ViewSet *set, int global_size, int local_size, int local_count,
                     int paka_count, ErrorMessage *err) {
    if (local_size <= 0) local_size = 98;
    if (local_count < 0) local_count = 8;
    if (paka_count < 0 || 4 + local_count + paka_count > AUGMENT_MAX_VIEWS)
        return error_set(err, "DINOv31 takes 4 global views, %d local and %d PaKA local views: "
                              "at most %d views in all", local_count, paka_count,
                         AUGMENT_MAX_VIEWS);
    view_set_dinov2(set, global_size);
    ViewTransform local = set->views[2];
    local.size = local_size;
    for (int i = 0; i < local_count; i++) set->views[4 + i] = local;
    for (int g = 0; g < 2; g++) {
        ViewTransform clean = set->views[g];
        clean.flip_p = clean.vflip_p = clean.rotate_p = clean.jitter_p = clean.grey_p =
            clean.blur_p = clean.solarize_p = 0.0f;
        clean.coupling = VIEW_COUPLING_SAME;
        clean.parent = g;
        set->views[2 + g] = clean;
    }
    ViewTransform paka = local;
    paka.scale_min = 0.05f;
    paka.scale_max = 0.40f;
    paka.coupling = VIEW_COUPLING_INSIDE;
    for (int k = 0; k < paka_count; k++) {
        paka.parent = k % 2;
        set->views[4 + local_count + k] = paka;
    }
    set->count = 4 + local_count + paka_count;
    set->global_count = 4;
    set->teacher_views = 2;
    return 0;
}

void view_set_multi_crop(ViewSet *set, int local_size, int local_count) {
    if (local_size <= 0 && local_count < 0) return;
    const ViewTransform local = set->views[set->global_count < set->count ? set->global_count : 0];
    if (local_count < 0) local_count = set->count - set->global_count;
    if (local_count > AUGMENT_MAX_VIEWS - set->global_count)
        local_count = AUGMENT_MAX_VIEWS - set->global_count;
    for (int i = 0; i < local_count; i++) {
        ViewTransform *view = &set->views[set->global_count + i];
        *view = local;
        if (local_size > 0) view->size = local_size;
    }
    set->count = set->global_count + local_count;
}

void view_set_resize(ViewSet *set, int size) {
    memset(set, 0, sizeof *set);
    ViewTransform view = default_view(size);
    view.scale_min = view.scale_max = 1.0f;
    view.flip_p = view.vflip_p = view.rotate_p = view.jitter_p = view.grey_p = view.blur_p =
        view.solarize_p = 0.0f;
    view.resize_only = 1;
    set->views[0] = view;
    set->count = 1;
    set->global_count = 1;
}

// Channel counts, ChannelDrop's weights (LightlyTrain's checks) and the
// colour ops that need 3 channels.
static int check_channels(const ViewTransform *t, ErrorMessage *err) {
    const int input = view_input_channels(t), channels = view_channels(t);
    if (input < 1 || input > AUGMENT_MAX_CHANNELS || channels < 1 || channels > input)
        return error_set(err, "view transform: %d channel(s) from images of %d: need 1 <= "
                              "channels <= input channels <= %d", channels, input,
                         AUGMENT_MAX_CHANNELS);
    if (channels < input) {
        int zeros = 0;
        for (int c = 0; c < input; c++) {
            if (!(t->drop_weights[c] >= 0.0f && isfinite(t->drop_weights[c])))
                return error_set(err, "view transform: channel drop weight %d = %g must be "
                                      "finite and >= 0", c, (double)t->drop_weights[c]);
            zeros += t->drop_weights[c] == 0.0f;
        }
        if (zeros > channels)
            return error_set(err, "view transform: %d channels have drop weight 0 but only %d "
                                  "are kept: at most as many as are kept may be never dropped",
                             zeros, channels);
    }
    if (channels != 3 && (t->jitter_p > 0.0f || t->grey_p > 0.0f || t->solarize_p > 0.0f))
        return error_set(err, "view transform: colour jitter, greyscale and solarize work on 3 "
                              "channels, the views have %d: leave jitter_p, grey_p and "
                              "solarize_p at 0", channels);
    return 0;
}

// Written as !(in range) so that NaN fails too.
static int check_probability(float p, const char *name, ErrorMessage *err) {
    if (!(p >= 0.0f && p <= 1.0f))
        return error_set(err, "view transform: %s = %g must be a probability in [0, 1]", name,
                         (double)p);
    return 0;
}

static int check_strength(float value, float max, const char *name, ErrorMessage *err) {
    if (!(value >= 0.0f && value <= max))
        return error_set(err, "view transform: %s = %g must be in [0, %g]", name, (double)value,
                         (double)max);
    return 0;
}

int view_transform_validate(const ViewTransform *t, ErrorMessage *err) {
    if (t->size < 1 || t->size > VIEW_MAX_SIZE)
        return error_set(err, "view transform: size = %d must be in [1, %d]", t->size,
                         VIEW_MAX_SIZE);
    if (!(t->scale_min > 0.0f && t->scale_min <= 1.0f))
        return error_set(err, "view transform: scale_min = %g must be in (0, 1]",
                         (double)t->scale_min);
    if (!(t->scale_max >= t->scale_min && t->scale_max <= 1.0f))
        return error_set(err, "view transform: scale_max = %g must be in [scale_min = %g, 1]",
                         (double)t->scale_max, (double)t->scale_min);
    if (!(t->ratio_min > 0.0f && isfinite(t->ratio_min)))
        return error_set(err, "view transform: ratio_min = %g must be positive and finite",
                         (double)t->ratio_min);
    if (!(t->ratio_max >= t->ratio_min && isfinite(t->ratio_max)))
        return error_set(err, "view transform: ratio_max = %g must be finite and >= ratio_min = %g",
                         (double)t->ratio_max, (double)t->ratio_min);
    if (check_probability(t->flip_p, "flip_p", err) ||
        check_probability(t->vflip_p, "vflip_p", err) ||
        check_probability(t->rotate_p, "rotate_p", err) ||
        check_probability(t->jitter_p, "jitter_p", err) ||
        check_probability(t->grey_p, "grey_p", err) ||
        check_probability(t->blur_p, "blur_p", err) ||
        check_probability(t->solarize_p, "solarize_p", err) ||
        check_strength(t->brightness, VIEW_MAX_JITTER, "brightness", err) ||
        check_strength(t->contrast, VIEW_MAX_JITTER, "contrast", err) ||
        check_strength(t->saturation, VIEW_MAX_JITTER, "saturation", err) ||
        check_strength(t->hue, 0.5f, "hue", err) ||
        check_strength(t->solarize_threshold, 1.0f, "solarize_threshold", err) ||
        check_channels(t, err))
        return -1;
    if (t->rotate_p > 0.0f &&
        !(t->rotate_min >= -360.0f && t->rotate_max <= 360.0f && t->rotate_min <= t->rotate_max))
        return error_set(err, "view transform: rotate_min = %g and rotate_max = %g must lie in "
                              "[-360, 360], rotate_min first", (double)t->rotate_min,
                         (double)t->rotate_max);
    if (t->blur_p > 0.0f) {
        if (!(t->blur_sigma_min > 0.0f && t->blur_sigma_min <= BLUR_MAX_SIGMA))
            return error_set(err, "view transform: blur_sigma_min = %g must be in (0, %g]",
                             (double)t->blur_sigma_min, (double)BLUR_MAX_SIGMA);
        if (!(t->blur_sigma_max >= t->blur_sigma_min && t->blur_sigma_max <= BLUR_MAX_SIGMA))
            return error_set(err,
                             "view transform: blur_sigma_max = %g must be in [blur_sigma_min = %g, %g]",
                             (double)t->blur_sigma_max, (double)t->blur_sigma_min,
                             (double)BLUR_MAX_SIGMA);
    }
    return 0;
}

static int clamp_int(int value, int low, int high) {
    return value < low ? low : value > high ? high : value;
}

// torchvision RandomResizedCrop.get_params: 10 tries of a random area and
// log-uniform aspect ratio, then the central crop with the ratio clamped.
// Python's round() is round-half-even, as nearbyint in the default mode.
static PixelRect sample_crop(const ViewTransform *t, int width, int height, Rng *rng) {
    const double area = (double)width * (double)height;
    const double log_min = log((double)t->ratio_min), log_max = log((double)t->ratio_max);
    for (int attempt = 0; attempt < 10; attempt++) {
        const double scale =
            t->scale_min + ((double)t->scale_max - t->scale_min) * (double)rng_uniform(rng);
        const double ratio = exp(log_min + (log_max - log_min) * (double)rng_uniform(rng));
        const double target = area * scale;
        const double w = nearbyint(sqrt(target * ratio)), h = nearbyint(sqrt(target / ratio));
        if (w > 0.0 && w <= width && h > 0.0 && h <= height) {
            PixelRect crop = {.width = (int)w, .height = (int)h};
            crop.y = (int)rng_below(rng, (uint32_t)(height - crop.height + 1));
            crop.x = (int)rng_below(rng, (uint32_t)(width - crop.width + 1));
            return crop;
        }
    }
    const double in_ratio = (double)width / (double)height;
    PixelRect crop = {.width = width, .height = height};
    if (in_ratio < t->ratio_min)
        crop.height = clamp_int((int)nearbyint(width / (double)t->ratio_min), 1, height);
    else if (in_ratio > t->ratio_max)
        crop.width = clamp_int((int)nearbyint(height * (double)t->ratio_max), 1, width);
    crop.x = (width - crop.width) / 2;
    crop.y = (height - crop.height) / 2;
    return crop;
}

// ChannelDrop: input - channels channels dropped one after another, each
// drawn with probability weight / (sum of the weights left), as numpy's
// choice(replace=False, p) in LightlyTrain; the kept ones in their order.
static void sample_channel_drop(const ViewTransform *t, Rng *rng, uint8_t *map) {
    const int input = view_input_channels(t), channels = view_channels(t);
    uint8_t dropped[AUGMENT_MAX_CHANNELS] = {0};
    for (int d = 0; d < input - channels; d++) {
        double total = 0.0;
        for (int c = 0; c < input; c++)
            if (!dropped[c]) total += t->drop_weights[c];
        const double u = (double)rng_uniform(rng) * total;
        double cumulative = 0.0;
        int pick = -1;
        for (int c = 0; c < input; c++) {
            if (dropped[c] || t->drop_weights[c] <= 0.0f) continue;
            pick = c;  // the last eligible one catches rounding at the top
            cumulative += t->drop_weights[c];
            if (u < cumulative) break;
        }
        for (int c = 0; pick < 0 && c < input; c++)  // all weights left 0: not validated
            if (!dropped[c]) pick = c;
        dropped[pick] = 1;
    }
    int k = 0;
    for (int c = 0; c < input; c++)
        if (!dropped[c]) map[k++] = (uint8_t)c;
}

// Draw order: crop, flip, jitter?, op order, 4 jitter factors, grey?, blur?,
// blur sigma, solarize?, then the dropped channels (only with ChannelDrop)
// and the vertical flip (only with vflip_p > 0), so that views without
// them draw what they always drew. Everything after
// the crop is always drawn, so whether one op applies never shifts the
// draws of the next.
void view_sample(const ViewTransform *t, int image_width, int image_height, Rng *rng,
                 ViewParams *params) {
    memset(params, 0, sizeof *params);
    for (int c = 0; c < AUGMENT_MAX_CHANNELS; c++) params->channel_map[c] = (uint8_t)c;
    if (t->resize_only) {  // no draws: the whole image, every op off
        params->crop = (PixelRect){0, 0, image_width > 0 ? image_width : 0,
                                   image_height > 0 ? image_height : 0};
        for (int i = 0; i < 4; i++) params->order[i] = (JitterOp)i;
        params->brightness_factor = params->contrast_factor = params->saturation_factor = 1.0f;
        return;
    }
    if (image_width > 0 && image_height > 0)
        params->crop = sample_crop(t, image_width, image_height, rng);
    params->flip = rng_bernoulli(rng, t->flip_p);
    params->jitter = rng_bernoulli(rng, t->jitter_p);
    JitterOp order[4] = {JITTER_BRIGHTNESS, JITTER_CONTRAST, JITTER_SATURATION, JITTER_HUE};
    for (int i = 3; i > 0; i--) {  // Fisher-Yates
        const int j = (int)rng_below(rng, (uint32_t)(i + 1));
        const JitterOp swap = order[i];
        order[i] = order[j];
        order[j] = swap;
    }
    const float brightness = rng_range(rng, fmaxf(0.0f, 1.0f - t->brightness), 1.0f + t->brightness);
    const float contrast = rng_range(rng, fmaxf(0.0f, 1.0f - t->contrast), 1.0f + t->contrast);
    const float saturation = rng_range(rng, fmaxf(0.0f, 1.0f - t->saturation), 1.0f + t->saturation);
    const float hue = rng_range(rng, -t->hue, t->hue);
    for (int i = 0; i < 4; i++) params->order[i] = order[i];
    params->brightness_factor = params->jitter ? brightness : 1.0f;
    params->contrast_factor = params->jitter ? contrast : 1.0f;
    params->saturation_factor = params->jitter ? saturation : 1.0f;
    params->hue_factor = params->jitter ? hue : 0.0f;
    params->grey = rng_bernoulli(rng, t->grey_p);
    const int blur = rng_bernoulli(rng, t->blur_p);
    const float sigma = rng_range(rng, t->blur_sigma_min, t->blur_sigma_max);
    params->blur_sigma = blur ? sigma : 0.0f;
    params->solarize = rng_bernoulli(rng, t->solarize_p);
    if (view_channels(t) < view_input_channels(t)) sample_channel_drop(t, rng, params->channel_map);
    if (t->vflip_p > 0.0f) params->vflip = rng_bernoulli(rng, t->vflip_p);
    if (t->rotate_p > 0.0f) {
        params->rotate = rng_bernoulli(rng, t->rotate_p);
        const float degrees = rng_range(rng, t->rotate_min, t->rotate_max);
        params->rotate_degrees = params->rotate ? degrees : 0.0f;
    }
}

// LightlyTrain's sample_high_overlap_box: a box of a uniform fraction of the
// parent's area and a uniform aspect ratio, fully inside the parent.
static PixelRect sample_inside(const ViewTransform *t, PixelRect parent, Rng *rng) {
    if (parent.width <= 1 || parent.height <= 1) return parent;
    const double area = rng_range(rng, t->scale_min, t->scale_max) *
                        (double)parent.width * parent.height;
    const double aspect = rng_range(rng, t->ratio_min, t->ratio_max);
    int width = (int)lround(sqrt(area * aspect)), height = (int)lround(sqrt(area / aspect));
    width = width < 1 ? 1 : width > parent.width ? parent.width : width;
    height = height < 1 ? 1 : height > parent.height ? parent.height : height;
    const int x = parent.x + (int)rng_below(rng, (uint32_t)(parent.width - width + 1));
    const int y = parent.y + (int)rng_below(rng, (uint32_t)(parent.height - height + 1));
    return (PixelRect){x, y, width, height};
}

void view_couple(const ViewTransform *t, const ViewParams *parent, Rng *rng,
                 ViewParams *params) {
    if (t->coupling == VIEW_COUPLING_INSIDE) {
        params->crop = sample_inside(t, parent->crop, rng);
    } else if (t->coupling == VIEW_COUPLING_SAME) {
        params->crop = parent->crop;
        params->flip = parent->flip;
        params->vflip = parent->vflip;
        params->rotate = parent->rotate;
        params->rotate_degrees = parent->rotate_degrees;
        memcpy(params->channel_map, parent->channel_map, sizeof params->channel_map);
        params->jitter = params->grey = params->solarize = 0;
        params->brightness_factor = params->contrast_factor = params->saturation_factor = 1.0f;
        params->hue_factor = 0.0f;
        params->blur_sigma = 0.0f;
    }
}
