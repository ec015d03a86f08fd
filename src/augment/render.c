// view_render and view_render_float: one view from a decoded source, in
// LightlyTrain's order: (ChannelDrop, folded into the resize) ->
// RandomResizedCrop (+ flips folded into the resize) -> rotation -> colour
// jitter (ops in the sampled order) -> greyscale -> Gaussian blur ->
// solarize. Also the per-thread scratch they work in (see augment.h).
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "augment/blur.h"
#include "augment/color.h"
#include "augment/color_float.h"
#include "augment/resample_float.h"
#include "augment/resize.h"
#include "augment/rotate.h"

struct AugmentScratch {
    ResampleTable columns, rows;  // resize tables, then blur tables
    ResampleBuffer buffer;        // u16 intermediate between the passes
    FloatTable float_columns, float_rows;  // the same for float views
    FloatBuffer float_buffer;
    void *unrotated;              // a view before its rotation
    size_t unrotated_bytes;
    int unrotated_allocations;
};

// Rotates the view in out by params' angle (through the scratch copy).
static int rotate_view(const ViewParams *params, void *out, int size, int channels, int is_float,
                       AugmentScratch *scratch, ErrorMessage *err) {
    const size_t bytes = (size_t)size * size * channels * (is_float ? sizeof(float) : 1);
    if (bytes > scratch->unrotated_bytes) {
        void *grown = realloc(scratch->unrotated, bytes);
        if (!grown) return error_set(err, "view_render: out of memory for the rotation");
        scratch->unrotated = grown;
        scratch->unrotated_bytes = bytes;
        scratch->unrotated_allocations++;
    }
    memcpy(scratch->unrotated, out, bytes);
    if (is_float)
        rotate_view_float(scratch->unrotated, out, size, channels, params->rotate_degrees);
    else
        rotate_view_u8(scratch->unrotated, out, size, params->rotate_degrees);
    return 0;
}

AugmentScratch *augment_scratch_create(void) { return calloc(1, sizeof(AugmentScratch)); }

void augment_scratch_destroy(AugmentScratch *scratch) {
    if (!scratch) return;
    resample_table_free(&scratch->columns);
    resample_table_free(&scratch->rows);
    resample_buffer_free(&scratch->buffer);
    float_table_free(&scratch->float_columns);
    float_table_free(&scratch->float_rows);
    float_buffer_free(&scratch->float_buffer);
    free(scratch->unrotated);
    free(scratch);
}

int augment_scratch_allocations(const AugmentScratch *scratch) {
    return scratch->columns.allocations + scratch->rows.allocations +
           scratch->buffer.allocations + scratch->float_columns.allocations +
           scratch->float_rows.allocations + scratch->float_buffer.allocations +
           scratch->unrotated_allocations;
}

static int inside(PixelRect inner, PixelRect outer) {
    return inner.width > 0 && inner.height > 0 && inner.x >= outer.x && inner.y >= outer.y &&
           (long long)inner.x + inner.width <= (long long)outer.x + outer.width &&
           (long long)inner.y + inner.height <= (long long)outer.y + outer.height;
}

// The four jitter ops in the sampled order, on 8-bit (deep 0) or float
// (deep 1) RGB.
static void apply_jitter(const ViewParams *params, void *rgb, size_t pixels, int deep) {
    for (int k = 0; k < 4; k++) {
        switch (params->order[k]) {
            case JITTER_BRIGHTNESS:
                if (params->brightness_factor == 1.0f) break;
                if (deep) color_float_brightness(rgb, pixels, params->brightness_factor);
                else color_brightness(rgb, pixels, params->brightness_factor);
                break;
            case JITTER_CONTRAST:
                if (params->contrast_factor == 1.0f) break;
                if (deep) color_float_contrast(rgb, pixels, params->contrast_factor);
                else color_contrast(rgb, pixels, params->contrast_factor);
                break;
            case JITTER_SATURATION:
                if (params->saturation_factor == 1.0f) break;
                if (deep) color_float_saturation(rgb, pixels, params->saturation_factor);
                else color_saturation(rgb, pixels, params->saturation_factor);
                break;
            case JITTER_HUE:
                if (params->hue_factor == 0.0f) break;
                if (deep) color_float_hue(rgb, pixels, params->hue_factor);
                else color_hue(rgb, pixels, params->hue_factor);
                break;
        }
    }
}

// The checks both renderers make: arguments, the crop inside `covered`.
static int check_render(const ViewTransform *transform, const ViewParams *params,
                        const void *source, int width, int height, PixelRect covered,
                        const void *out, const AugmentScratch *scratch, ErrorMessage *err) {
    if (!transform || !params || !source || !out || !scratch)
        return error_set(err, "view_render: missing argument");
    if (transform->size < 1)
        return error_set(err, "view_render: view size %d must be positive", transform->size);
    if (width < 1 || height < 1)
        return error_set(err, "view_render: bad source image (%dx%d)", width, height);
    const PixelRect crop = params->crop;
    if (covered.width < 1 || covered.height < 1 || !inside(crop, covered))
        return error_set(err,
                         "view_render: crop (%d, %d, %dx%d) is not inside the decoded rectangle "
                         "(%d, %d, %dx%d)",
                         crop.x, crop.y, crop.width, crop.height, covered.x, covered.y,
                         covered.width, covered.height);
    return 0;
}

// A resize_only view resizes as LightlyTrain's embed transform does (resize.h).
static ResizeFilter view_resize_filter(const ViewTransform *transform) {
    return transform->resize_only ? RESIZE_BILINEAR : RESIZE_ANTIALIASED;
}

int view_render(const ViewTransform *transform, const ViewParams *params, const Image *source,
                PixelRect covered, uint8_t *out, AugmentScratch *scratch, ErrorMessage *err) {
    if (check_render(transform, params, source ? source->pixels : NULL, source ? source->width : 0,
                     source ? source->height : 0, covered, out, scratch, err))
        return -1;
    if (source->stride < (size_t)source->width * 3)
        return error_set(err, "view_render: bad source image (%dx%d, stride %zu)", source->width,
                         source->height, source->stride);
    if (view_input_channels(transform) != 3 || view_channels(transform) != 3)
        return error_set(err, "view_render: 8-bit views are RGB (the float path reads %d "
                              "channels)", view_input_channels(transform));
    const int size = transform->size;
    const PixelRect crop = params->crop;
    // Full-image coordinates -> (fractional) source pixels.
    const double x_scale = (double)source->width / covered.width;
    const double y_scale = (double)source->height / covered.height;
    if (resize_rgb(source, (crop.x - covered.x) * x_scale, (crop.y - covered.y) * y_scale,
                   crop.width * x_scale, crop.height * y_scale,
                   (params->flip ? RESIZE_FLIP_HORIZONTAL : 0) |
                       (params->vflip ? RESIZE_FLIP_VERTICAL : 0),
                   view_resize_filter(transform), size, size, out,
                   (size_t)size * 3, &scratch->columns, &scratch->rows, &scratch->buffer, err))
        return error_prefix(err, "view_render");
    const size_t pixels = (size_t)size * (size_t)size;
    if (params->rotate && rotate_view(params, out, size, 3, 0, scratch, err)) return -1;
    if (params->jitter) apply_jitter(params, out, pixels, 0);
    if (params->grey) color_greyscale(out, pixels);
    if (params->blur_sigma > 0.0f &&
        blur_rgb(out, size, size, (size_t)size * 3, params->blur_sigma, &scratch->columns,
                 &scratch->rows, &scratch->buffer, err))
        return error_prefix(err, "view_render");
    if (params->solarize) color_solarize(out, pixels, transform->solarize_threshold);
    return 0;
}

// A float table for one axis of the resize (resize.h's weights).
static int float_resize_table(FloatTable *table, double start, double length, int source_size,
                              int out_size, int reverse, ResizeFilter filter) {
    if (float_table_reserve(table, out_size, resize_max_taps(length, out_size, filter))) return -1;
    for (int i = 0; i < out_size; i++) {
        int first, count;
        resize_row_weights(start, length, source_size, out_size, i, filter, table->row_scratch,
                           &first, &count);
        float_table_set_row(table, reverse ? out_size - 1 - i : i, first, count,
                            table->row_scratch);
    }
    return 0;
}

// The Gaussian blur (blur.h's weights) of a size x size float view in place.
static int float_blur(float *view, int size, int channels, float sigma, AugmentScratch *scratch,
                      ErrorMessage *err) {
    if (!(sigma > 0.0f && sigma <= BLUR_MAX_SIGMA))
        return error_set(err, "blur: sigma %g outside (0, %g]", (double)sigma,
                         (double)BLUR_MAX_SIGMA);
    FloatTable *table = &scratch->float_columns;
    if (float_table_reserve(table, size, blur_max_taps(size, sigma)))
        return error_set(err, "blur: out of memory for weight tables");
    for (int i = 0; i < size; i++) {
        int first;
        const int count = blur_row_weights(size, sigma, i, table->row_scratch, &first);
        float_table_set_row(table, i, first, count, table->row_scratch);
    }
    uint8_t identity[AUGMENT_MAX_CHANNELS];
    for (int c = 0; c < channels; c++) identity[c] = (uint8_t)c;
    const size_t stride = (size_t)size * (size_t)channels;
    if (resample_float(view, stride, channels, identity, channels, table, table,
                       &scratch->float_buffer, view, stride))
        return error_set(err, "blur: out of memory for the intermediate buffer");
    return 0;
}

int view_render_float(const ViewTransform *transform, const ViewParams *params,
                      const FloatImage *source, PixelRect covered, float *out,
                      AugmentScratch *scratch, ErrorMessage *err) {
    if (check_render(transform, params, source ? source->pixels : NULL, source ? source->width : 0,
                     source ? source->height : 0, covered, out, scratch, err))
        return -1;
    const int channels = view_channels(transform);
    if (source->channels != view_input_channels(transform) ||
        source->stride < (size_t)source->width * (size_t)source->channels)
        return error_set(err, "view_render: source of %d channels (stride %zu), the view reads %d",
                         source->channels, source->stride, view_input_channels(transform));
    const int size = transform->size;
    const PixelRect crop = params->crop;
    const double x_scale = (double)source->width / covered.width;
    const double y_scale = (double)source->height / covered.height;
    const double x = (crop.x - covered.x) * x_scale, y = (crop.y - covered.y) * y_scale;
    const double width = crop.width * x_scale, height = crop.height * y_scale;
    const double slack = 1e-6;
    if (!(x >= -slack && y >= -slack && x + width <= source->width + slack &&
          y + height <= source->height + slack))
        return error_set(err, "view_render: crop outside the %dx%d source", source->width,
                         source->height);
    const ResizeFilter filter = view_resize_filter(transform);
    if (float_resize_table(&scratch->float_columns, x, width, source->width, size, params->flip,
                           filter) ||
        float_resize_table(&scratch->float_rows, y, height, source->height, size, params->vflip,
                           filter) ||
        resample_float(source->pixels, source->stride, source->channels, params->channel_map,
                       channels, &scratch->float_columns, &scratch->float_rows,
                       &scratch->float_buffer, out, (size_t)size * (size_t)channels))
        return error_set(err, "view_render: out of memory for the resize (%d px)", size);
    const size_t pixels = (size_t)size * (size_t)size;
    if (params->rotate && rotate_view(params, out, size, channels, 1, scratch, err)) return -1;
    if (channels == 3) {  // the colour ops (off otherwise: view_transform_validate)
        if (params->jitter) apply_jitter(params, out, pixels, 1);
        if (params->grey) color_float_greyscale(out, pixels);
    }
    if (params->blur_sigma > 0.0f &&
        float_blur(out, size, channels, params->blur_sigma, scratch, err))
        return error_prefix(err, "view_render");
    if (channels == 3 && params->solarize)
        color_float_solarize(out, pixels, transform->solarize_threshold);
    return 0;
}
