// Resize of a (possibly fractional) source rectangle of an RGB image to a
// given output size. As used by RandomResizedCrop (RESIZE_ANTIALIASED): per
// axis, area averaging when shrinking (each output pixel is the
// area-weighted mean of the source pixels it covers) and bilinear
// interpolation when growing (triangle filter, pixel centres at +0.5, edges
// clamped to the rectangle's pixels). As LightlyTrain's embed resizes
// (RESIZE_BILINEAR): that bilinear interpolation at every scale, two taps,
// shrinking too (no antialiasing: OpenCV's INTER_LINEAR, which its
// albumentations Resize calls). A horizontal flip is folded into the column
// table (reversed order), a vertical one into the row table.
#ifndef LTC_AUGMENT_RESIZE_H
#define LTC_AUGMENT_RESIZE_H

#include <stdint.h>

#include "augment/resample.h"
#include "util/error.h"
#include "util/image.h"

typedef enum ResizeFilter {
    RESIZE_ANTIALIASED,  // area when shrinking, bilinear when growing (training views)
    RESIZE_BILINEAR,     // bilinear at every scale (embedding, as LightlyTrain's)
} ResizeFilter;

// The most source pixels one output reads, and output i's real-valued
// weights over source pixels [*first, *first + *count) (weights: room for
// resize_max_taps). Shared by the 8-bit tables and the float ones.
int resize_max_taps(double length, int out_size, ResizeFilter filter);
void resize_row_weights(double start, double length, int source_size, int out_size, int i,
                        ResizeFilter filter, double *weights, int *first, int *count);

// Weight table for one axis: the source span [start, start + length) (in
// source pixels, inside [0, source_size]) onto out_size outputs; reverse
// mirrors the outputs. Returns -1 when out of memory.
int resize_table(ResampleTable *table, double start, double length, int source_size, int out_size,
                 int reverse, ResizeFilter filter);

// What resize_rgb's flip mirrors: bits, 0 for none.
enum { RESIZE_FLIP_HORIZONTAL = 1, RESIZE_FLIP_VERTICAL = 2 };

// out: (out_height, out_width, 3) u8, rows out_stride bytes apart. The
// rectangle (x, y, width, height) is in source pixels and must lie inside the
// source (checked). flip: RESIZE_FLIP_* bits. Tables and buffer are reused
// scratch.
int resize_rgb(const Image *source, double x, double y, double width, double height, int flip,
               ResizeFilter filter, int out_width, int out_height, uint8_t *out, size_t out_stride,
               ResampleTable *columns, ResampleTable *rows, ResampleBuffer *buffer,
               ErrorMessage *err);

// One past the last byte of the image's pixels (the end of its last row).
const uint8_t *image_pixels_end(const Image *image);

#endif
