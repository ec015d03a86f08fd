// The cpu backend's DINOv2 ops (backend.h): row scaling, row gather and
// scatter for the masked patch tokens, the Sinkhorn-Knopp steps and
// KoLeo's nearest-neighbour distances. Rows (or column strips) are split
// across threads; every sum runs in a fixed order in double, so results do
// not depend on the thread count.
#include <math.h>

#include "backend/cpu/cpu_internal.h"

// Columns one thread takes at a time in the Sinkhorn-Knopp column maxima.
#define CPU_SINKHORN_STRIP 64

void cpu_scale_rows(Backend *backend, size_t rows, int channels, const float *x,
                    const float *scale, float *y) {
    const int team = cpu_team(backend, rows * (size_t)channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float s = scale[r];
        const float *x_row = x + r * channels;
        float *y_row = y + r * channels;
#pragma omp simd
        for (int c = 0; c < channels; c++) y_row[c] = x_row[c] * s;
    }
}

void cpu_mask_tokens_forward(Backend *backend, size_t rows, int channels, const Act *x_act,
                             const float *mask, const float *token, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const int team = cpu_team(backend, rows * (size_t)channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float *source = mask[r] != 0.0f ? token : x + r * channels;
        float *target = y + r * channels;
        for (int c = 0; c < channels; c++) target[c] = source[c];
    }
}

// dtoken: each thread sums whole columns over the rows in order (in double),
// so the result does not depend on the thread count.
void cpu_mask_tokens_backward(Backend *backend, size_t rows, int channels, const float *mask,
                              const Act *dy_act, Act *dx_act, float *dtoken) {
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    const int team = cpu_team(backend, rows * (size_t)channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int c = 0; c < channels; c++) {
        double total = 0.0;
        for (size_t r = 0; r < rows; r++)
            if (mask[r] != 0.0f) total += dy[r * channels + c];
        dtoken[c] += (float)total;
    }
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++)
        if (mask[r] != 0.0f)
            for (int c = 0; c < channels; c++) dx[r * channels + c] = 0.0f;
        else if (dx != dy)
            for (int c = 0; c < channels; c++) dx[r * channels + c] = dy[r * channels + c];
}

void cpu_gather_rows(Backend *backend, int count, int channels, const int32_t *index,
                     const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const int team = cpu_team(backend, (size_t)count * channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int i = 0; i < count; i++) {
        const float *source = x + (size_t)index[i] * channels;
        float *target = y + (size_t)i * channels;
        for (int c = 0; c < channels; c++) target[c] = source[c];
    }
}

void cpu_scatter_add_rows(Backend *backend, int count, int channels, const int32_t *index,
                          const Act *dy_act, Act *dx_act) {
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    const int team = cpu_team(backend, (size_t)count * channels);
    // Distinct indices: no two iterations touch the same row of dx.
#pragma omp parallel for num_threads(team) schedule(static)
    for (int i = 0; i < count; i++) {
        const float *source = dy + (size_t)i * channels;
        float *target = dx + (size_t)index[i] * channels;
#pragma omp simd
        for (int c = 0; c < channels; c++) target[c] += source[c];
    }
}

// Column strips: each thread takes CPU_SINKHORN_STRIP columns and walks
// the rows, so the reads stay contiguous within a row.
void cpu_column_max(Backend *backend, size_t rows, int channels, const float *x, float *max) {
    const int team = cpu_team(backend, rows * (size_t)channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int k0 = 0; k0 < channels; k0 += CPU_SINKHORN_STRIP) {
        const int width = channels - k0 < CPU_SINKHORN_STRIP ? channels - k0 : CPU_SINKHORN_STRIP;
        float strip[CPU_SINKHORN_STRIP];
        for (int k = 0; k < width; k++) strip[k] = -INFINITY;
        for (size_t r = 0; r < rows; r++)
            for (int k = 0; k < width; k++) {
                const float v = x[r * channels + k0 + k];
                if (v > strip[k] || isnan(v)) strip[k] = v;  // a NaN stays: v > NaN is false
            }
        for (int k = 0; k < width; k++) max[k0 + k] = strip[k];
    }
}

void cpu_sinkhorn_exp(Backend *backend, int rows, int channels, const float *x, float scale,
                      const float *max, float *q) {
    const int team = cpu_team(backend, (size_t)rows * channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *x_row = x + (size_t)r * channels;
        float *q_row = q + (size_t)r * channels;
        for (int k = 0; k < channels; k++)
            q_row[k] = (float)exp((double)scale * x_row[k] - (double)scale * max[k]);
    }
}

// Row by row: the column division, the row sum in double, the row division.
void cpu_sinkhorn_normalize(Backend *backend, int rows, int channels, const float *column_sum,
                            float *q) {
    const int team = cpu_team(backend, (size_t)rows * channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int r = 0; r < rows; r++) {
        float *row = q + (size_t)r * channels;
        double sum = 0.0;
        for (int k = 0; k < channels; k++) {
            row[k] = column_sum[k] > 0.0f ? (float)((double)row[k] / column_sum[k]) : 0.0f;
            sum += row[k];
        }
        for (int k = 0; k < channels; k++) row[k] = sum > 0.0 ? (float)(row[k] / sum) : 0.0f;
    }
}

void cpu_koleo_forward(Backend *backend, int rows, int dim, const float *y, float eps,
                       int32_t *neighbor, float *distance, float *log_distance) {
    const int team = cpu_team(backend, (size_t)rows * rows * dim);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int i = 0; i < rows; i++) {
        const float *yi = y + (size_t)i * dim;
        int32_t best = i;
        double best_dot = -INFINITY;
        for (int j = 0; j < rows; j++) {
            if (j == i) continue;
            const float *yj = y + (size_t)j * dim;
            double dot = 0.0;
#pragma omp simd reduction(+ : dot)
            for (int d = 0; d < dim; d++) dot += (double)yi[d] * yj[d];
            if (dot > best_dot) best_dot = dot, best = j;  // the first maximum wins
        }
        const float *yn = y + (size_t)best * dim;
        double squares = 0.0;
#pragma omp simd reduction(+ : squares)
        for (int d = 0; d < dim; d++) {
            const double diff = (double)yi[d] - yn[d] + eps;
            squares += diff * diff;
        }
        const double length = sqrt(squares);
        neighbor[i] = best;
        distance[i] = (float)length;
        log_distance[i] = (float)log(length + eps);
    }
}

void cpu_koleo_backward(Backend *backend, int rows, int dim, const float *y,
                        const int32_t *neighbor, const float *distance, float eps, float dlog,
                        float *dy) {
    const int team = cpu_team(backend, (size_t)rows * rows * dim);
    // Row k gathers its own term and those of the rows whose neighbour it
    // is, in row order (no scatter between threads).
#pragma omp parallel for num_threads(team) schedule(static)
    for (int k = 0; k < rows; k++) {
        float *dk = dy + (size_t)k * dim;
        for (int d = 0; d < dim; d++) dk[d] = 0.0f;
        for (int i = 0; i < rows; i++) {
            const int own = i == k, theirs = neighbor[i] == k;
            const double length = distance[i];
            if ((!own && !theirs) || length == 0.0) continue;
            const float g = (float)((own - theirs) * (double)dlog / ((length + eps) * length));
            const float *yi = y + (size_t)i * dim, *yn = y + (size_t)neighbor[i] * dim;
#pragma omp simd
            for (int d = 0; d < dim; d++) dk[d] += g * (yi[d] - yn[d] + eps);
        }
    }
}
