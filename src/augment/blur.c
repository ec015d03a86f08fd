// Gaussian blur tables with clamped edges, and the in-place blur (blur.h).
#include "augment/blur.h"

#include <math.h>

int blur_radius(float sigma) {
    const int radius = (int)ceilf(3.0f * sigma);
    return radius < 1 ? 1 : radius;
}

int blur_max_taps(int size, float sigma) {
    const int span = 2 * blur_radius(sigma) + 1;
    return span < size ? span : size;
}

int blur_row_weights(int size, float sigma, int i, double *weights, int *first) {
    const int radius = blur_radius(sigma);
    *first = i - radius < 0 ? 0 : i - radius;
    const int last = i + radius > size - 1 ? size - 1 : i + radius;
    for (int j = 0; j <= last - *first; j++) weights[j] = 0.0;
    const double denominator = 2.0 * (double)sigma * (double)sigma;
    for (int d = -radius; d <= radius; d++) {
        int j = i + d;
        j = j < *first ? *first : j > last ? last : j;  // clamped edge
        weights[j - *first] += exp(-(double)(d * d) / denominator);
    }
    return last - *first + 1;
}

int blur_table(ResampleTable *table, int size, float sigma) {
    if (!(sigma > 0.0f && sigma <= BLUR_MAX_SIGMA) || size < 1) return -1;
    if (resample_table_reserve(table, size, blur_max_taps(size, sigma))) return -1;
    double *weights = table->row_scratch;
    for (int i = 0; i < size; i++) {
        int first;
        const int count = blur_row_weights(size, sigma, i, weights, &first);
        resample_table_set_row(table, i, first, count, weights);
    }
    return 0;
}

int blur_rgb(uint8_t *pixels, int width, int height, size_t stride, float sigma,
             ResampleTable *columns, ResampleTable *rows, ResampleBuffer *buffer,
             ErrorMessage *err) {
    if (!(sigma > 0.0f && sigma <= BLUR_MAX_SIGMA))
        return error_set(err, "blur: sigma %g outside (0, %g]", (double)sigma,
                         (double)BLUR_MAX_SIGMA);
    if (width < 1 || height < 1)
        return error_set(err, "blur: image size %dx%d must be positive", width, height);
    if (blur_table(columns, width, sigma))
        return error_set(err, "blur: out of memory for weight tables");
    const ResampleTable *row_table = columns;  // square images share one table
    if (height != width) {
        if (blur_table(rows, height, sigma))
            return error_set(err, "blur: out of memory for weight tables");
        row_table = rows;
    }
    const uint8_t *end = pixels + (size_t)(height - 1) * stride + (size_t)width * 3;
    if (resample_separable(pixels, stride, end, columns, row_table, buffer, pixels, stride))
        return error_set(err, "blur: out of memory for the intermediate buffer");
    return 0;
}
