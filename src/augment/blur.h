// Gaussian blur of an RGB image in place: separable, a true Gaussian
// exp(-d^2 / (2 sigma^2)) with radius ceil(3 sigma) (at least 1), weights
// normalised in fixed point. Edges are CLAMPED (replicate the border pixel):
// taps that fall outside the image add their weight to the edge pixel. Runs
// on the shared separable kernels (resample.h), scalar or AVX2.
#ifndef LTC_AUGMENT_BLUR_H
#define LTC_AUGMENT_BLUR_H

#include <stddef.h>
#include <stdint.h>

#include "augment/resample.h"
#include "util/error.h"

#define BLUR_MAX_SIGMA 64.0f

// ceil(3 sigma), at least 1.
int blur_radius(float sigma);

// The most taps of a row, and position i's real-valued weights (clamped
// edges folded in) over [*first, *first + count); returns count. Shared by
// the 8-bit tables and the float ones.
int blur_max_taps(int size, float sigma);
int blur_row_weights(int size, float sigma, int i, double *weights, int *first);

// Table for `size` positions; sigma in (0, BLUR_MAX_SIGMA]. -1 when out of
// memory or sigma out of range.
int blur_table(ResampleTable *table, int size, float sigma);

// pixels: (height, width, 3) u8, rows `stride` bytes apart, blurred in place.
int blur_rgb(uint8_t *pixels, int width, int height, size_t stride, float sigma,
             ResampleTable *columns, ResampleTable *rows, ResampleBuffer *buffer,
             ErrorMessage *err);

#endif
