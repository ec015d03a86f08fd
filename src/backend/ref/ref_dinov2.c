// The reference backend's DINOv2 ops (backend.h): row scaling, row gather
// and scatter for the masked patch tokens, the Sinkhorn-Knopp steps (column
// maxima, exp, one normalisation) and KoLeo's nearest-neighbour distances.
// Plain loops in double.
#include <math.h>

#include "backend/ref/ref_ops.h"

void ref_scale_rows(Backend *backend, size_t rows, int channels, const float *x,
                    const float *scale, float *y) {
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < channels; c++)
            y[r * channels + c] = (float)((double)x[r * channels + c] * scale[r]);
}

void ref_mask_tokens_forward(Backend *backend, size_t rows, int channels, const Act *x_act,
                             const float *mask, const float *token, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < channels; c++)
            y[r * channels + c] = mask[r] != 0.0f ? token[c] : x[r * channels + c];
    ref_round_acts(backend, y_act, rows * channels);
}

void ref_mask_tokens_backward(Backend *backend, size_t rows, int channels, const float *mask,
                              const Act *dy_act, Act *dx_act, float *dtoken) {
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    for (int c = 0; c < channels; c++) {
        double total = 0.0;
        for (size_t r = 0; r < rows; r++)
            if (mask[r] != 0.0f) total += dy[r * channels + c];
        dtoken[c] += (float)total;
    }
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < channels; c++)
            dx[r * channels + c] = mask[r] != 0.0f ? 0.0f : dy[r * channels + c];
}

void ref_gather_rows(Backend *backend, int count, int channels, const int32_t *index,
                     const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    for (int i = 0; i < count; i++)
        for (int c = 0; c < channels; c++)
            y[(size_t)i * channels + c] = x[(size_t)index[i] * channels + c];
}

void ref_scatter_add_rows(Backend *backend, int count, int channels, const int32_t *index,
                          const Act *dy_act, Act *dx_act) {
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    for (int i = 0; i < count; i++)
        for (int c = 0; c < channels; c++)
            dx[(size_t)index[i] * channels + c] += dy[(size_t)i * channels + c];
    for (int i = 0; i < count; i++)
        ref_round_acts(backend, act_at(backend, dx_act, (size_t)index[i] * channels),
                       (size_t)channels);
}

void ref_column_max(Backend *backend, size_t rows, int channels, const float *x, float *max) {
    for (int c = 0; c < channels; c++) {
        float m = -INFINITY;
        for (size_t r = 0; r < rows; r++) {
            const float v = x[r * channels + c];
            if (v > m || isnan(v)) m = v;  // a NaN stays: v > NaN is false
        }
        max[c] = m;
    }
}

// exp in double of the exact (double) products, rounded once to float.
void ref_sinkhorn_exp(Backend *backend, int rows, int channels, const float *x, float scale,
                      const float *max, float *q) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < channels; c++) {
            const size_t i = (size_t)r * channels + c;
            q[i] = (float)exp((double)scale * x[i] - (double)scale * max[c]);
        }
}

// Each entry rounded to float after the column division (as an fp32
// implementation stores it), the row sum in double.
void ref_sinkhorn_normalize(Backend *backend, int rows, int channels, const float *column_sum,
                            float *q) {
    for (int r = 0; r < rows; r++) {
        float *row = q + (size_t)r * channels;
        double sum = 0.0;
        for (int c = 0; c < channels; c++) {
            row[c] = column_sum[c] > 0.0f ? (float)((double)row[c] / column_sum[c]) : 0.0f;
            sum += row[c];
        }
        for (int c = 0; c < channels; c++) row[c] = sum > 0.0 ? (float)(row[c] / sum) : 0.0f;
    }
}

static int32_t nearest_neighbor(int rows, int dim, const float *y, int i) {
    int32_t best = i;
    double best_dot = -INFINITY;
    for (int j = 0; j < rows; j++) {
        if (j == i) continue;
        double dot = 0.0;
        for (int d = 0; d < dim; d++) dot += (double)y[(size_t)i * dim + d] * y[(size_t)j * dim + d];
        if (dot > best_dot) best_dot = dot, best = j;  // strict: the first maximum wins
    }
    return best;
}

void ref_koleo_forward(Backend *backend, int rows, int dim, const float *y, float eps,
                       int32_t *neighbor, float *distance, float *log_distance) {
    for (int i = 0; i < rows; i++) {
        const int32_t j = nearest_neighbor(rows, dim, y, i);
        double squares = 0.0;
        for (int d = 0; d < dim; d++) {
            const double diff = (double)y[(size_t)i * dim + d] - y[(size_t)j * dim + d] + eps;
            squares += diff * diff;
        }
        const double length = sqrt(squares);
        neighbor[i] = j;
        distance[i] = (float)length;
        log_distance[i] = (float)log(length + eps);
    }
}

void ref_koleo_backward(Backend *backend, int rows, int dim, const float *y,
                        const int32_t *neighbor, const float *distance, float eps, float dlog,
                        float *dy) {
    // Row k: +g_k diff_k from its own distance, -g_i diff_i from every i
    // whose neighbour it is, summed in i order in double.
    for (int k = 0; k < rows; k++) {
        for (int d = 0; d < dim; d++) {
            double total = 0.0;
            for (int i = 0; i < rows; i++) {
                const int own = i == k, theirs = neighbor[i] == k;
                const double length = distance[i];
                if ((!own && !theirs) || length == 0.0) continue;
                const double g = dlog / ((length + eps) * length);
                const double diff =
                    (double)y[(size_t)i * dim + d] - y[(size_t)neighbor[i] * dim + d] + eps;
                total += (own - theirs) * g * diff;
            }
            dy[(size_t)k * dim + d] = (float)total;
        }
    }
}
