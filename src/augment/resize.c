// Area / bilinear resize tables and the resize entry point (see resize.h).
#include "augment/resize.h"

#include <math.h>

static int clamp_int(int value, int low, int high) {
    return value < low ? low : value > high ? high : value;
}

// Output i covers [start + i*scale, start + (i+1)*scale); every source pixel
// weighs the length of its overlap with that interval.
static void area_row(double start, double scale, int source_size, int i, double *weights,
                     int *first, int *count) {
    double low = start + i * scale, high = start + (i + 1) * scale;
    if (low < 0.0) low = 0.0;
    if (high > source_size) high = source_size;
    int begin = clamp_int((int)floor(low), 0, source_size - 1);
    int end = clamp_int((int)ceil(high), begin + 1, source_size);
    *first = begin;
    *count = end - begin;
    for (int j = begin; j < end; j++) {
        const double overlap = fmin(high, j + 1.0) - fmax(low, (double)j);
        weights[j - begin] = overlap > 0.0 ? overlap : 0.0;
    }
}

// Output i samples the source at start + (i + 0.5) * scale - 0.5 between the
// two nearest pixel centres, indices clamped to the rectangle's pixels.
static void bilinear_row(double start, double length, double scale, int source_size, int i,
                         double *weights, int *first, int *count) {
    const int low = clamp_int((int)floor(start), 0, source_size - 1);
    const int high = clamp_int((int)ceil(start + length) - 1, low, source_size - 1);
    const double centre = start + (i + 0.5) * scale - 0.5;
    const double left = floor(centre);
    const double fraction = centre - left;
    const int a = clamp_int((int)left, low, high), b = clamp_int((int)left + 1, low, high);
    *first = a;
    if (a == b) {
        *count = 1;
        weights[0] = 1.0;
    } else {
        *count = 2;
        weights[0] = 1.0 - fraction;
        weights[1] = fraction;
    }
}

int resize_max_taps(double length, int out_size, ResizeFilter filter) {
    const double scale = length / out_size;
    return scale > 1.0 && filter == RESIZE_ANTIALIASED ? (int)ceil(scale) + 2 : 2;
}

void resize_row_weights(double start, double length, int source_size, int out_size, int i,
                        ResizeFilter filter, double *weights, int *first, int *count) {
    const double scale = length / out_size;
    if (scale > 1.0 && filter == RESIZE_ANTIALIASED)
        area_row(start, scale, source_size, i, weights, first, count);
    else
        bilinear_row(start, length, scale, source_size, i, weights, first, count);
}

int resize_table(ResampleTable *table, double start, double length, int source_size, int out_size,
                 int reverse, ResizeFilter filter) {
    if (resample_table_reserve(table, out_size, resize_max_taps(length, out_size, filter)))
        return -1;
    double *weights = table->row_scratch;
    for (int i = 0; i < out_size; i++) {
        int first, count;
        resize_row_weights(start, length, source_size, out_size, i, filter, weights, &first,
                           &count);
        resample_table_set_row(table, reverse ? out_size - 1 - i : i, first, count, weights);
    }
    return 0;
}

const uint8_t *image_pixels_end(const Image *image) {
    return image->pixels + (size_t)(image->height - 1) * image->stride + (size_t)image->width * 3;
}

int resize_rgb(const Image *source, double x, double y, double width, double height, int flip,
               ResizeFilter filter, int out_width, int out_height, uint8_t *out, size_t out_stride,
               ResampleTable *columns, ResampleTable *rows, ResampleBuffer *buffer,
               ErrorMessage *err) {
    if (!source->pixels || source->width < 1 || source->height < 1)
        return error_set(err, "resize: empty source image (%dx%d)", source->width, source->height);
    if (out_width < 1 || out_height < 1)
        return error_set(err, "resize: output size %dx%d must be positive", out_width, out_height);
    // A little slack for rounding in the caller's coordinate mapping.
    const double slack = 1e-6;
    if (!(width > 0.0 && height > 0.0 && x >= -slack && y >= -slack &&
          x + width <= source->width + slack && y + height <= source->height + slack))
        return error_set(err, "resize: rectangle (%.3f, %.3f, %.3f x %.3f) not inside the %dx%d source",
                         x, y, width, height, source->width, source->height);
    if (resize_table(columns, x, width, source->width, out_width,
                     (flip & RESIZE_FLIP_HORIZONTAL) != 0, filter) ||
        resize_table(rows, y, height, source->height, out_height,
                     (flip & RESIZE_FLIP_VERTICAL) != 0, filter))
        return error_set(err, "resize: out of memory for weight tables (%dx%d)", out_width,
                         out_height);
    if (resample_separable(source->pixels, source->stride, image_pixels_end(source), columns, rows,
                           buffer, out, out_stride))
        return error_set(err, "resize: out of memory for the intermediate buffer");
    return 0;
}
