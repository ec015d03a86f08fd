// The PaKA loss's view alignment on the host (see paka_roi.h). Arithmetic
// in double; torchvision computes in the features' type (fp32 under AMP),
// so the weights agree to fp32 rounding.
#include "ssl_methods/paka_roi.h"

#include <math.h>

PakaBox paka_crop_box(const ViewGeometry *view) {
    return (PakaBox){view->crop.x, view->crop.y, (double)view->crop.x + view->crop.width,
                     (double)view->crop.y + view->crop.height};
}

int paka_shared_region(PakaBox student, PakaBox teacher, int out_h, int out_w, PakaBox *region) {
    const PakaBox shared = {fmax(student.x0, teacher.x0), fmax(student.y0, teacher.y0),
                            fmin(student.x1, teacher.x1), fmin(student.y1, teacher.y1)};
    const double min_w = (student.x1 - student.x0) / (out_w > 1 ? out_w : 1);
    const double min_h = (student.y1 - student.y0) / (out_h > 1 ? out_h : 1);
    const int overlap = shared.x1 - shared.x0 >= min_w && shared.y1 - shared.y0 >= min_h;
    *region = overlap ? shared : student;
    return overlap;
}

static double clamp(double value, double high) {
    return value < 0.0 ? 0.0 : value > high ? high : value;
}

PakaBox paka_grid_box(PakaBox crop, PakaBox region, int height, int width) {
    const double crop_w = fmax(crop.x1 - crop.x0, 1e-6), crop_h = fmax(crop.y1 - crop.y0, 1e-6);
    return (PakaBox){clamp((region.x0 - crop.x0) / crop_w * width, width),
                     clamp((region.y0 - crop.y0) / crop_h * height, height),
                     clamp((region.x1 - crop.x0) / crop_w * width, width),
                     clamp((region.y1 - crop.y0) / crop_h * height, height)};
}

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

int paka_roi_cell_bound(int height, int width, int out_h, int out_w) {
    // a bin spans at most ceil(height / out_h) cells, so its samples' taps
    // touch at most that + 2 rows (likewise columns); 4 taps per sample
    const int grid_h = ceil_div(height, out_h), grid_w = ceil_div(width, out_w);
    const int taps = 4 * grid_h * grid_w, span = (grid_h + 2) * (grid_w + 2);
    const int bound = taps < span ? taps : span;
    return bound < height * width ? bound : height * width;
}

// One bilinear tap into the cell's list, merged with an equal index.
static void add_tap(int32_t cell, double w, int32_t *index, double *weight, int *count) {
    if (w == 0.0) return;  // a sample on a cell centre: its other taps weigh nothing
    for (int i = 0; i < *count; i++)
        if (index[i] == cell) {
            weight[i] += w;
            return;
        }
    if (*count == PAKA_ROI_MAX_TAPS) return;  // not reached: paka_roi_cell checks the bound
    index[*count] = cell;
    weight[(*count)++] = w;
}

// torchvision's bilinear_interpolate weights at (y, x), 0 outside [-1, size].
static void bilinear_taps(double y, double x, int height, int width, int flip, double scale,
                          int32_t *index, double *weight, int *count) {
    if (y < -1.0 || y > height || x < -1.0 || x > width) return;
    y = y <= 0 ? 0 : y;
    x = x <= 0 ? 0 : x;
    int y_low = (int)y, x_low = (int)x, y_high, x_high;
    if (y_low >= height - 1) y_high = y_low = height - 1, y = y_low;
    else y_high = y_low + 1;
    if (x_low >= width - 1) x_high = x_low = width - 1, x = x_low;
    else x_high = x_low + 1;
    const double ly = y - y_low, lx = x - x_low, hy = 1.0 - ly, hx = 1.0 - lx;
    const int ys[4] = {y_low, y_low, y_high, y_high}, xs[4] = {x_low, x_high, x_low, x_high};
    const double ws[4] = {hy * hx, hy * lx, ly * hx, ly * lx};
    for (int t = 0; t < 4; t++) {
        const int column = flip ? width - 1 - xs[t] : xs[t];
        add_tap(ys[t] * width + column, ws[t] * scale, index, weight, count);
    }
}

int paka_roi_cell(PakaBox box, int height, int width, int out_h, int out_w, int cell_y,
                  int cell_x, int flip, int32_t *index, float *weight) {
    // aligned=True: pixel centres at +0.5, no minimum size
    const double start_x = box.x0 - 0.5, start_y = box.y0 - 0.5;
    const double roi_w = box.x1 - box.x0, roi_h = box.y1 - box.y0;
    const double bin_w = roi_w / out_w, bin_h = roi_h / out_h;
    const int grid_h = (int)ceil(roi_h / out_h), grid_w = (int)ceil(roi_w / out_w);
    const int samples = grid_h * grid_w > 1 ? grid_h * grid_w : 1;
    double sums[PAKA_ROI_MAX_TAPS];
    int32_t cells[PAKA_ROI_MAX_TAPS];
    int count = 0;
    if (paka_roi_cell_bound(height, width, out_h, out_w) > PAKA_ROI_MAX_TAPS) return -1;
    for (int iy = 0; iy < grid_h; iy++) {
        const double y = start_y + cell_y * bin_h + (iy + 0.5) * bin_h / grid_h;
        for (int ix = 0; ix < grid_w; ix++) {
            const double x = start_x + cell_x * bin_w + (ix + 0.5) * bin_w / grid_w;
            bilinear_taps(y, x, height, width, flip, 1.0 / samples, cells, sums, &count);
        }
    }
    for (int i = 0; i < count; i++) index[i] = cells[i], weight[i] = (float)sums[i];
    return count;
}
