// The cpu backend's row-wise ops for heads and losses (L2 normalisation,
// softmax, log-softmax and their gradients), combine_rows (a sparse matrix
// times rows: DINOv31's ROI-align) and max pooling. Rows (or output rows of
// a pooled image) are split across threads; inside a row the loops are
// contiguous and vectorised. Row sums accumulate in double, exp and the
// per-element maps are fp32.
#include <math.h>

#include "backend/cpu/cpu_internal.h"

// Declares team and r (the row index).
#define CPU_FOR_ROWS(rows, dim)                                      \
    const int team = cpu_team(backend, (size_t)(rows) * (dim));      \
    _Pragma("omp parallel for num_threads(team) schedule(static)")   \
    for (int r = 0; r < (rows); r++)

// ---- L2 normalisation ---------------------------------------------------------------

void cpu_l2_normalize_forward(Backend *backend, int rows, int dim, const float *x, float eps,
                              float *y, float *norm) {
    CPU_FOR_ROWS(rows, dim) {
        const float *x_row = x + (size_t)r * dim;
        float *y_row = y + (size_t)r * dim;
        double squares = 0.0;
#pragma omp simd reduction(+ : squares)
        for (int d = 0; d < dim; d++) squares += (double)x_row[d] * x_row[d];
        const double length = sqrt(squares);
        const float inverse = (float)(1.0 / (length < eps ? eps : length));  // NaN stays NaN
#pragma omp simd
        for (int d = 0; d < dim; d++) y_row[d] = x_row[d] * inverse;
        norm[r] = (float)length;
    }
}

// Where the norm was clamped (norm < eps) y = x / eps is linear: dx = dy / eps.
void cpu_l2_normalize_backward(Backend *backend, int rows, int dim, const float *y,
                               const float *norm, const float *dy, float eps, float *dx) {
    CPU_FOR_ROWS(rows, dim) {
        const float *y_row = y + (size_t)r * dim, *dy_row = dy + (size_t)r * dim;
        float *dx_row = dx + (size_t)r * dim;
        if (norm[r] < eps) {
            const float inverse = (float)(1.0 / eps);
#pragma omp simd
            for (int d = 0; d < dim; d++) dx_row[d] = dy_row[d] * inverse;
            continue;
        }
        double y_dot_dy = 0.0;
#pragma omp simd reduction(+ : y_dot_dy)
        for (int d = 0; d < dim; d++) y_dot_dy += (double)y_row[d] * dy_row[d];
        const float projection = (float)y_dot_dy, inverse = (float)(1.0 / (double)norm[r]);
#pragma omp simd
        for (int d = 0; d < dim; d++) dx_row[d] = (dy_row[d] - y_row[d] * projection) * inverse;
    }
}

// ---- softmax -------------------------------------------------------------------------

// Shift and log-normaliser of one row: max of scale * x and
// log(sum exp(scale * x - max)).
static void row_log_sum_exp(int dim, const float *x_row, float scale, float *max_out,
                            float *log_sum_out) {
    float max = scale * x_row[0];
#pragma omp simd reduction(max : max)
    for (int d = 0; d < dim; d++) max = fmaxf(max, scale * x_row[d]);
    double total = 0.0;
    for (int d = 0; d < dim; d++) total += expf(scale * x_row[d] - max);
    *max_out = max;
    *log_sum_out = (float)log(total);
}

void cpu_softmax_forward(Backend *backend, int rows, int dim, const float *x, float scale,
                         float *y) {
    CPU_FOR_ROWS(rows, dim) {
        const float *x_row = x + (size_t)r * dim;
        float *y_row = y + (size_t)r * dim;
        float max, log_sum;
        row_log_sum_exp(dim, x_row, scale, &max, &log_sum);
        const float shift = max + log_sum;
        for (int d = 0; d < dim; d++) y_row[d] = expf(scale * x_row[d] - shift);
    }
}

void cpu_log_softmax_forward(Backend *backend, int rows, int dim, const float *x, float scale,
                             float *y) {
    CPU_FOR_ROWS(rows, dim) {
        const float *x_row = x + (size_t)r * dim;
        float *y_row = y + (size_t)r * dim;
        float max, log_sum;
        row_log_sum_exp(dim, x_row, scale, &max, &log_sum);
#pragma omp simd
        for (int d = 0; d < dim; d++) y_row[d] = (scale * x_row[d] - max) - log_sum;
    }
}

void cpu_softmax_backward(Backend *backend, int rows, int dim, const float *y, const float *dy,
                          float scale, float *dx) {
    CPU_FOR_ROWS(rows, dim) {
        const float *y_row = y + (size_t)r * dim, *dy_row = dy + (size_t)r * dim;
        float *dx_row = dx + (size_t)r * dim;
        double dy_dot_y = 0.0;
#pragma omp simd reduction(+ : dy_dot_y)
        for (int d = 0; d < dim; d++) dy_dot_y += (double)dy_row[d] * y_row[d];
        const float projection = (float)dy_dot_y;
#pragma omp simd
        for (int d = 0; d < dim; d++) dx_row[d] = scale * y_row[d] * (dy_row[d] - projection);
    }
}

void cpu_log_softmax_backward(Backend *backend, int rows, int dim, const float *y,
                              const float *dy, float scale, float *dx) {
    CPU_FOR_ROWS(rows, dim) {
        const float *y_row = y + (size_t)r * dim, *dy_row = dy + (size_t)r * dim;
        float *dx_row = dx + (size_t)r * dim;
        double dy_sum = 0.0;
#pragma omp simd reduction(+ : dy_sum)
        for (int d = 0; d < dim; d++) dy_sum += dy_row[d];
        const float total = (float)dy_sum;
        for (int d = 0; d < dim; d++) dx_row[d] = scale * (dy_row[d] - expf(y_row[d]) * total);
    }
}

// ---- combine_rows ------------------------------------------------------------------------

// Each output row accumulates in place, in t order (the fp32 sum backend.h
// fixes); the vectorised loop runs across channels, never across t.
void cpu_combine_rows(Backend *backend, int rows, int channels, const int32_t *row_start,
                      const int32_t *index, const float *weight, const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const int entries = rows > 0 ? row_start[rows] - row_start[0] : 0;
    const int team = cpu_team(backend, ((size_t)rows + (size_t)entries) * channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int r = 0; r < rows; r++) {
        float *y_row = y + (size_t)r * channels;
        for (int c = 0; c < channels; c++) y_row[c] = 0.0f;
        for (int32_t t = row_start[r]; t < row_start[r + 1]; t++) {
            const float *x_row = x + (size_t)index[t] * channels;
            const float w = weight[t];
#pragma omp simd
            for (int c = 0; c < channels; c++) y_row[c] += w * x_row[c];
        }
    }
}

// ---- max pooling -------------------------------------------------------------------------

// One output row (n, oh) at a time: for every output pixel, the first valid
// window element is taken, then later ones replace it only when strictly
// greater or NaN (ties keep the first in window order, a NaN wins: as ref
// and PyTorch, so a NaN input is not lost), all
// channels at once. argmax is the flat index (ih * W + iw) * C + c within
// the sample.
void cpu_maxpool_forward(Backend *backend, const PoolShape *shape, const Act *x_act, Act *y_act,
                         int32_t *argmax) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const PoolShape *s = shape;
    const int channels = s->channels;
    const size_t in_sample = (size_t)s->in_height * s->in_width * channels;
    const int out_rows = s->batch * s->out_height;
    const int team = cpu_team(backend, (size_t)out_rows * s->out_width * channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int row = 0; row < out_rows; row++) {
        const int n = row / s->out_height, oh = row % s->out_height;
        const float *x_sample = x + n * in_sample;
        for (int ow = 0; ow < s->out_width; ow++) {
            const size_t o = ((size_t)row * s->out_width + ow) * channels;
            float *best = y + o;
            int32_t *best_index = argmax + o;
            int first = 1;
            for (int kh = 0; kh < s->window; kh++) {
                const int ih = oh * s->stride - s->padding + kh;
                if (ih < 0 || ih >= s->in_height) continue;
                for (int kw = 0; kw < s->window; kw++) {
                    const int iw = ow * s->stride - s->padding + kw;
                    if (iw < 0 || iw >= s->in_width) continue;
                    const int32_t base = (int32_t)(((size_t)ih * s->in_width + iw) * channels);
                    const float *candidate = x_sample + base;
                    if (first) {
#pragma omp simd
                        for (int c = 0; c < channels; c++) {
                            best[c] = candidate[c];
                            best_index[c] = base + c;
                        }
                        first = 0;
                        continue;
                    }
#pragma omp simd
                    for (int c = 0; c < channels; c++) {
                        // NaN wins, as in PyTorch (x != x: NaN, vectorisable)
                        const int greater = candidate[c] > best[c] || candidate[c] != candidate[c];
                        best[c] = greater ? candidate[c] : best[c];
                        best_index[c] = greater ? base + c : best_index[c];
                    }
                }
            }
        }
    }
}

// Samples are independent, so threads split the batch; within a sample the
// scatter adds where windows overlap.
void cpu_maxpool_backward(Backend *backend, const PoolShape *shape, const Act *dy_act,
                          const int32_t *argmax, Act *dx_act) {
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    const PoolShape *s = shape;
    const size_t in_sample = (size_t)s->in_height * s->in_width * s->channels;
    const size_t out_sample = (size_t)s->out_height * s->out_width * s->channels;
    const int team = cpu_team(backend, in_sample * s->batch);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int n = 0; n < s->batch; n++) {
        float *dx_sample = dx + n * in_sample;
        const float *dy_sample = dy + n * out_sample;
        const int32_t *argmax_sample = argmax + n * out_sample;
        for (size_t i = 0; i < in_sample; i++) dx_sample[i] = 0.0f;
        for (size_t o = 0; o < out_sample; o++) dx_sample[argmax_sample[o]] += dy_sample[o];
    }
}
