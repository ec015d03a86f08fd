// Bicubic resampling weights of the position-embedding grid, PyTorch's two
// bicubic kernels written out (see vit_pos_embed.h).
#include "nn/vit_pos_embed.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// DINOv2's historical offset (facebookresearch/dino issue 8): sampling with
// scale factor (n + 0.1) / M instead of n / M.
#define VIT_POS_OFFSET 0.1

const char *vit_pos_interpolation_name(VitPosInterpolation mode) {
    return mode == VIT_POS_INTERP_ANTIALIAS ? "antialias"
           : mode == VIT_POS_INTERP_BICUBIC ? "bicubic"
                                             : "offset";
}

int vit_pos_interpolation_parse(const char *name, VitPosInterpolation *mode, ErrorMessage *err) {
    if (strcmp(name, "offset") == 0) *mode = VIT_POS_INTERP_OFFSET;
    else if (strcmp(name, "antialias") == 0) *mode = VIT_POS_INTERP_ANTIALIAS;
    else if (strcmp(name, "bicubic") == 0) *mode = VIT_POS_INTERP_BICUBIC;
    else return error_set(err, "unknown position interpolation '%s' (offset, antialias, bicubic)",
                          name);
    return 0;
}

// Keys' cubic convolution kernel with parameter a at distance |x|.
static double cubic_kernel(double x, double a) {
    x = fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

// upsample_bicubic2d (align_corners False): four taps around
// src = (o + 0.5) step - 0.5 with a = -0.75, indices clamped to the grid (a
// border tap adds to the edge position). step is in / out for a given size,
// 1 / scale_factor for a given factor.
static void bicubic_weights(int in, int out, double step, double *weights) {
    for (int o = 0; o < out; o++) {
        const double src = (o + 0.5) * step - 0.5;
        const double first = floor(src), t = src - first;
        for (int tap = -1; tap <= 2; tap++) {
            int index = (int)first + tap;
            index = index < 0 ? 0 : index >= in ? in - 1 : index;
            weights[(size_t)o * in + index] += cubic_kernel(t - tap, -0.75);
        }
    }
}

// _upsample_bicubic2d_aa (align_corners False): PIL's resampling with
// a = -0.5 over the support 2 * max(scale, 1) around center = scale (o + 0.5),
// the filter stretched by the scale when shrinking; weights normalised to
// sum 1 (which also handles the borders: taps outside the grid are dropped).
static void antialias_weights(int in, int out, double *weights) {
    const double scale = (double)in / out;
    const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
    const double inverse = scale >= 1.0 ? 1.0 / scale : 1.0;
    for (int o = 0; o < out; o++) {
        const double center = scale * (o + 0.5);
        // C's truncation toward zero, as PyTorch's static_cast<int64_t>.
        int low = (int)(center - support + 0.5), high = (int)(center + support + 0.5);
        low = low < 0 ? 0 : low;
        high = high > in ? in : high;
        double total = 0.0;
        double *row = weights + (size_t)o * in;
        for (int i = low; i < high; i++) {
            row[i] = cubic_kernel((i - center + 0.5) * inverse, -0.5);
            total += row[i];
        }
        if (total != 0.0)
            for (int i = low; i < high; i++) row[i] /= total;
    }
}

int vit_pos_axis_weights(VitPosInterpolation mode, int in, int out, double *weights,
                         ErrorMessage *err) {
    if (in < 1 || out < 1)
        return error_set(err, "position interpolation from %d to %d positions", in, out);
    memset(weights, 0, (size_t)out * in * sizeof *weights);
    if (mode == VIT_POS_INTERP_ANTIALIAS) {
        antialias_weights(in, out, weights);
        return 0;
    }
    if (mode == VIT_POS_INTERP_BICUBIC) {
        bicubic_weights(in, out, (double)in / out, weights);
        return 0;
    }
    // PyTorch derives the output size from the factor: floor(in * factor).
    const int derived = (int)floor(in * ((out + VIT_POS_OFFSET) / in));
    if (derived != out)
        return error_set(err, "position interpolation %d -> %d: the offset scale factor gives "
                              "%d positions", in, out, derived);
    bicubic_weights(in, out, 1.0 / ((out + VIT_POS_OFFSET) / in), weights);
    return 0;
}

int vit_pos_grid_matrix(VitPosInterpolation mode, int in, int out_h, int out_w, float *matrix,
                        ErrorMessage *err) {
    double *rows = malloc((size_t)out_h * in * sizeof *rows);
    double *cols = malloc((size_t)out_w * in * sizeof *cols);
    int status = 0;
    if (!rows || !cols) status = error_set(err, "out of memory for position interpolation");
    if (!status) status = vit_pos_axis_weights(mode, in, out_h, rows, err);
    if (!status) status = vit_pos_axis_weights(mode, in, out_w, cols, err);
    for (int oy = 0; !status && oy < out_h; oy++)
        for (int ox = 0; ox < out_w; ox++) {
            float *row = matrix + ((size_t)oy * out_w + ox) * in * in;
            for (int iy = 0; iy < in; iy++)
                for (int ix = 0; ix < in; ix++)
                    row[iy * in + ix] =
                        (float)(rows[(size_t)oy * in + iy] * cols[(size_t)ox * in + ix]);
        }
    free(rows);
    free(cols);
    return status;
}
