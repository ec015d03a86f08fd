// Reference ops for distillation: the bilinear feature-map resize (taps
// from resize_taps.h; backward scatters each output gradient onto its four
// source pixels), mixup and the strided 2-D copy; and ShuffleNetV2's
// channel shuffle (a permutation within each row). Plain loops.
#include <string.h>

#include "backend/ref/ref_ops.h"
#include "backend/resize_taps.h"

void ref_resize_bilinear_forward(Backend *backend, int batch, int in_height, int in_width,
                                 int channels, const Act *x_act, int out_height, int out_width,
                                 Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const size_t in_sample = (size_t)in_height * in_width * channels;
    const size_t out_row = (size_t)out_width * channels;
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < out_height; i++)
            resize_forward_row(in_height, in_width, channels, x + (size_t)b * in_sample, i,
                               out_height, out_width,
                               y + ((size_t)b * out_height + i) * out_row);
    ref_round_acts(backend, y_act, (size_t)batch * out_height * out_width * channels);
}

void ref_resize_bilinear_backward(Backend *backend, int batch, int in_height, int in_width,
                                  int channels, const Act *dy_act, int out_height, int out_width,
                                  Act *dx_act) {
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    const size_t in_sample = (size_t)in_height * in_width * channels;
    const size_t out_sample = (size_t)out_height * out_width * channels;
    for (int b = 0; b < batch; b++)
        resize_scatter_sample(in_height, in_width, channels, dy + (size_t)b * out_sample,
                              out_height, out_width, dx + (size_t)b * in_sample);
    ref_round_acts(backend, dx_act, (size_t)batch * in_height * in_width * channels);
}

void ref_mixup(Backend *backend, int batch, size_t sample, const Act *x_act,
               const int32_t *permutation, float lambda, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const float other = 1.0f - lambda;
    for (int b = 0; b < batch; b++) {
        const float *mine = x + (size_t)b * sample;
        const float *partner = x + (size_t)permutation[b] * sample;
        float *out = y + (size_t)b * sample;
        for (size_t i = 0; i < sample; i++) out[i] = lambda * mine[i] + other * partner[i];
    }
    ref_round_acts(backend, y_act, batch * sample);
}

void ref_copy_2d(Backend *backend, size_t rows, size_t cols, const Act *x_act, size_t x_stride,
                 Act *y_act, size_t y_stride) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    for (size_t r = 0; r < rows; r++) memcpy(y + r * y_stride, x + r * x_stride, cols * sizeof *x);
}

// Written as backend.h states it; the values are copied, never rounded
// again (they are already in the activation dtype).
void ref_channel_shuffle(Backend *backend, size_t rows, int channels, int groups,
                         const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const int per_group = channels / groups;
    for (size_t r = 0; r < rows; r++)
        for (int g = 0; g < groups; g++)
            for (int k = 0; k < per_group; k++)
                y[r * channels + (size_t)k * groups + g] =
                    x[r * channels + (size_t)g * per_group + k];
}
