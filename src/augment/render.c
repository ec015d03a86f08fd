// view_render: one view from a decoded source, in LightlyTrain's order:
// RandomResizedCrop (+ horizontal flip folded into the resize) -> colour
// jitter (ops in the sampled order) -> greyscale -> Gaussian blur ->
// solarize. Also the per-thread scratch it works in (see augment.h).
#include <stdlib.h>

#include "augment/augment.h"
#include "augment/blur.h"
#include "augment/color.h"
#include "augment/resize.h"

struct AugmentScratch {
    ResampleTable columns, rows;  // resize tables, then blur tables
    ResampleBuffer buffer;        // u16 intermediate between the passes
};

AugmentScratch *augment_scratch_create(void) { return calloc(1, sizeof(AugmentScratch)); }

void augment_scratch_destroy(AugmentScratch *scratch) {
    if (!scratch) return;
    resample_table_free(&scratch->columns);
    resample_table_free(&scratch->rows);
    resample_buffer_free(&scratch->buffer);
    free(scratch);
}

int augment_scratch_allocations(const AugmentScratch *scratch) {
    return scratch->columns.allocations + scratch->rows.allocations + scratch->buffer.allocations;
}

static int inside(PixelRect inner, PixelRect outer) {
    return inner.width > 0 && inner.height > 0 && inner.x >= outer.x && inner.y >= outer.y &&
           (long long)inner.x + inner.width <= (long long)outer.x + outer.width &&
           (long long)inner.y + inner.height <= (long long)outer.y + outer.height;
}

static void apply_jitter(const ViewParams *params, uint8_t *rgb, size_t pixels) {
    for (int k = 0; k < 4; k++) {
        switch (params->order[k]) {
            case JITTER_BRIGHTNESS:
                if (params->brightness_factor != 1.0f) color_brightness(rgb, pixels, params->brightness_factor);
                break;
            case JITTER_CONTRAST:
                if (params->contrast_factor != 1.0f) color_contrast(rgb, pixels, params->contrast_factor);
                break;
            case JITTER_SATURATION:
                if (params->saturation_factor != 1.0f)
                    color_saturation(rgb, pixels, params->saturation_factor);
                break;
            case JITTER_HUE:
                if (params->hue_factor != 0.0f) color_hue(rgb, pixels, params->hue_factor);
                break;
        }
    }
}

int view_render(const ViewTransform *transform, const ViewParams *params, const Image *source,
                PixelRect covered, uint8_t *out, AugmentScratch *scratch, ErrorMessage *err) {
    if (!transform || !params || !source || !out || !scratch)
        return error_set(err, "view_render: missing argument");
    const int size = transform->size;
    if (size < 1) return error_set(err, "view_render: view size %d must be positive", size);
    if (!source->pixels || source->width < 1 || source->height < 1 ||
        source->stride < (size_t)source->width * 3)
        return error_set(err, "view_render: bad source image (%dx%d, stride %zu)", source->width,
                         source->height, source->stride);
    const PixelRect crop = params->crop;
    if (covered.width < 1 || covered.height < 1 || !inside(crop, covered))
        return error_set(err,
                         "view_render: crop (%d, %d, %dx%d) is not inside the decoded rectangle "
                         "(%d, %d, %dx%d)",
                         crop.x, crop.y, crop.width, crop.height, covered.x, covered.y,
                         covered.width, covered.height);
    // Full-image coordinates -> (fractional) source pixels.
    const double x_scale = (double)source->width / covered.width;
    const double y_scale = (double)source->height / covered.height;
    if (resize_rgb(source, (crop.x - covered.x) * x_scale, (crop.y - covered.y) * y_scale,
                   crop.width * x_scale, crop.height * y_scale, params->flip, size, size, out,
                   (size_t)size * 3, &scratch->columns, &scratch->rows, &scratch->buffer, err))
        return error_prefix(err, "view_render");
    const size_t pixels = (size_t)size * (size_t)size;
    if (params->jitter) apply_jitter(params, out, pixels);
    if (params->grey) color_greyscale(out, pixels);
    if (params->blur_sigma > 0.0f &&
        blur_rgb(out, size, size, (size_t)size * 3, params->blur_sigma, &scratch->columns,
                 &scratch->rows, &scratch->buffer, err))
        return error_prefix(err, "view_render");
    if (params->solarize) color_solarize(out, pixels, transform->solarize_threshold);
    return 0;
}
