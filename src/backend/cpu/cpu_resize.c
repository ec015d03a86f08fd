// The cpu backend's ops for distillation: the bilinear feature-map resize
// (taps from resize_taps.h, so results equal ref's bit for bit), mixup and
// the strided 2-D copy; and ShuffleNetV2's channel shuffle (rows split
// across threads, each value copied). The resize forward splits output
// rows across threads; its backward splits samples (each thread scatters
// whole samples in ref's order, so no two threads write the same input
// pixel).
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/resize_taps.h"

void cpu_resize_bilinear_forward(Backend *backend, int batch, int in_height, int in_width,
                                 int channels, const Act *x_act, int out_height, int out_width,
                                 Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const size_t in_sample = (size_t)in_height * in_width * channels;
    const size_t out_row = (size_t)out_width * channels;
    const size_t rows = (size_t)batch * out_height;
    const int team = cpu_team(backend, rows * out_row);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++)
        resize_forward_row(in_height, in_width, channels, x + (r / out_height) * in_sample,
                           (int)(r % out_height), out_height, out_width, y + r * out_row);
}

void cpu_resize_bilinear_backward(Backend *backend, int batch, int in_height, int in_width,
                                  int channels, const Act *dy_act, int out_height, int out_width,
                                  Act *dx_act) {
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    const size_t in_sample = (size_t)in_height * in_width * channels;
    const size_t out_sample = (size_t)out_height * out_width * channels;
    const int team = cpu_team(backend, (size_t)batch * out_sample);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int b = 0; b < batch; b++)
        resize_scatter_sample(in_height, in_width, channels, dy + (size_t)b * out_sample,
                              out_height, out_width, dx + (size_t)b * in_sample);
}

void cpu_mixup(Backend *backend, int batch, size_t sample, const Act *x_act,
               const int32_t *permutation, float lambda, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const float other = 1.0f - lambda;
    const size_t total = (size_t)batch * sample;
    const int team = cpu_team(backend, total);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t i = 0; i < total; i++) {
        const size_t b = i / sample, k = i % sample;
        y[i] = lambda * x[i] + other * x[(size_t)permutation[b] * sample + k];
    }
}

void cpu_copy_2d(Backend *backend, size_t rows, size_t cols, const Act *x_act, size_t x_stride,
                 Act *y_act, size_t y_stride) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const int team = cpu_team(backend, rows * cols);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++) memcpy(y + r * y_stride, x + r * x_stride, cols * sizeof *x);
}

// Each row's output written in order (k, then g): one pass of stores, the
// loads from `groups` runs of the row at once.
void cpu_channel_shuffle(Backend *backend, size_t rows, int channels, int groups,
                         const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const int per_group = channels / groups;
    const int team = cpu_team(backend, rows * (size_t)channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float *x_row = x + r * channels;
        float *y_row = y + r * channels;
        for (int k = 0; k < per_group; k++)
            for (int g = 0; g < groups; g++) y_row[k * groups + g] = x_row[g * per_group + k];
    }
}
