// The two source taps and weights of one output row (or column) of the
// bilinear resize (backend.h resize_bilinear_forward), computed with the
// same fp32 operations by every backend, CUDA kernels included, so that the
// forward agrees bit for bit. PyTorch's upsample_bilinear2d with
// align_corners=False and an output size: scale = in / out (fp32),
// source = max(scale (i + 0.5) - 0.5, 0), i0 = floor(source),
// i1 = i0 + 1 unless i0 is the last index, w1 = source - i0, w0 = 1 - w1.
#ifndef LTC_BACKEND_RESIZE_TAPS_H
#define LTC_BACKEND_RESIZE_TAPS_H

#include <math.h>
#include <stddef.h>

#ifdef __CUDACC__
#define RESIZE_TAPS_FN static inline __host__ __device__
#else
#define RESIZE_TAPS_FN static inline
#endif

typedef struct ResizeTap {
    int i0, i1;
    float w0, w1;
} ResizeTap;

RESIZE_TAPS_FN ResizeTap resize_tap(int out_index, int in_size, int out_size) {
    const float scale = (float)in_size / (float)out_size;
    float source = scale * ((float)out_index + 0.5f) - 0.5f;
    if (source < 0.0f) source = 0.0f;
    ResizeTap tap;
    tap.i0 = (int)source;  // source >= 0: truncation is floor
    if (tap.i0 > in_size - 1) tap.i0 = in_size - 1;
    tap.i1 = tap.i0 + (tap.i0 < in_size - 1 ? 1 : 0);
    tap.w1 = source - (float)tap.i0;
    tap.w0 = 1.0f - tap.w1;
    return tap;
}

// One output value from its four source values (row taps ty, column taps tx).
RESIZE_TAPS_FN float resize_mix(ResizeTap ty, ResizeTap tx, float x00, float x01, float x10,
                                float x11) {
    return ty.w0 * (tx.w0 * x00 + tx.w1 * x01) + ty.w1 * (tx.w0 * x10 + tx.w1 * x11);
}

// The weight output tap puts on input index i along one axis (0 when none;
// both weights when the two taps coincide at the last index).
RESIZE_TAPS_FN float resize_tap_weight(ResizeTap tap, int i) {
    return (tap.i0 == i ? tap.w0 : 0.0f) + (tap.i1 == i ? tap.w1 : 0.0f);
}

// The outputs [*first, *last] along one axis whose taps may reach input
// index i (a gathering backward walks them): source(o) lies in [i - 1,
// i + 1) for those, o from the inverse of the source map, one wider on each
// side for rounding; the weights themselves (resize_tap_weight) decide.
RESIZE_TAPS_FN void resize_output_range(int i, int in_size, int out_size, int *first,
                                        int *last) {
    const float scale = (float)in_size / (float)out_size;
    const int lo = (int)ceilf(((float)i - 0.5f) / scale - 0.5f) - 1;
    const int hi = (int)ceilf(((float)i + 1.5f) / scale - 0.5f);
    *first = lo < 0 ? 0 : lo;
    *last = hi > out_size - 1 ? out_size - 1 : hi;
}

#ifndef __CUDACC__
#include <string.h>

// Output row i (out_w, C) of one sample xb (in_h, in_w, C) on the host
// (ref, and cpu per row in parallel).
static inline void resize_forward_row(int in_height, int in_width, int channels,
                                      const float *xb, int i, int out_height, int out_width,
                                      float *out_row) {
    const size_t row = (size_t)in_width * channels;
    const ResizeTap ty = resize_tap(i, in_height, out_height);
    for (int j = 0; j < out_width; j++) {
        const ResizeTap tx = resize_tap(j, in_width, out_width);
        float *out = out_row + (size_t)j * channels;
        const float *p00 = xb + ty.i0 * row + (size_t)tx.i0 * channels;
        const float *p01 = xb + ty.i0 * row + (size_t)tx.i1 * channels;
        const float *p10 = xb + ty.i1 * row + (size_t)tx.i0 * channels;
        const float *p11 = xb + ty.i1 * row + (size_t)tx.i1 * channels;
        for (int c = 0; c < channels; c++)
            out[c] = resize_mix(ty, tx, p00[c], p01[c], p10[c], p11[c]);
    }
}

// The backward of one sample on the host (ref, and cpu per sample in
// parallel): dx (in_h, in_w, C) zeroed, then every output pixel's gradient
// dy (out_h, out_w, C) scattered onto its four taps in output order.
static inline void resize_scatter_sample(int in_height, int in_width, int channels,
                                         const float *dy, int out_height, int out_width,
                                         float *dx) {
    const size_t row = (size_t)in_width * channels;
    memset(dx, 0, (size_t)in_height * row * sizeof *dx);
    for (int i = 0; i < out_height; i++) {
        const ResizeTap ty = resize_tap(i, in_height, out_height);
        for (int j = 0; j < out_width; j++) {
            const ResizeTap tx = resize_tap(j, in_width, out_width);
            const float *g = dy + ((size_t)i * out_width + j) * channels;
            const int rows[2] = {ty.i0, ty.i1}, cols[2] = {tx.i0, tx.i1};
            const float row_w[2] = {ty.w0, ty.w1}, col_w[2] = {tx.w0, tx.w1};
            for (int r = 0; r < 2; r++)
                for (int s = 0; s < 2; s++) {
                    const float w = row_w[r] * col_w[s];
                    float *target = dx + rows[r] * row + (size_t)cols[s] * channels;
                    for (int c = 0; c < channels; c++) target[c] += w * g[c];
                }
        }
    }
}
#endif

#endif
