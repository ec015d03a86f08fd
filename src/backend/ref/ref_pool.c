// Reference pooling: max pooling with -inf padding (argmax saved for
// backward) and global average pooling over the pixels of each sample.
#include <math.h>

#include "backend/ref/ref_ops.h"

// The argmax is the flat index of the chosen element within its sample,
// (ih * W + iw) * C + c; ties keep the first maximum in window order and a
// NaN wins over any number (the last NaN in window order), as PyTorch does.
void ref_maxpool_forward(Backend *backend, const PoolShape *shape, const Act *x_act, Act *y_act,
                         int32_t *argmax) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const PoolShape *s = shape;
    const size_t in_sample = (size_t)s->in_height * s->in_width * s->channels;
    const size_t out_sample = (size_t)s->out_height * s->out_width * s->channels;
    for (int n = 0; n < s->batch; n++) {
        const float *xn = x + n * in_sample;
        for (int oh = 0; oh < s->out_height; oh++)
            for (int ow = 0; ow < s->out_width; ow++)
                for (int c = 0; c < s->channels; c++) {
                    float best = -INFINITY;
                    int32_t best_index = -1;
                    for (int kh = 0; kh < s->window; kh++) {
                        const int ih = oh * s->stride - s->padding + kh;
                        if (ih < 0 || ih >= s->in_height) continue;
                        for (int kw = 0; kw < s->window; kw++) {
                            const int iw = ow * s->stride - s->padding + kw;
                            if (iw < 0 || iw >= s->in_width) continue;
                            const int32_t index =
                                (int32_t)(((size_t)ih * s->in_width + iw) * s->channels + c);
                            if (best_index < 0 || xn[index] > best || isnan(xn[index])) {
                                best = xn[index];
                                best_index = index;
                            }
                        }
                    }
                    const size_t o = n * out_sample +
                                     ((size_t)oh * s->out_width + ow) * s->channels + c;
                    y[o] = best;
                    argmax[o] = best_index;
                }
    }
}

void ref_maxpool_backward(Backend *backend, const PoolShape *shape, const Act *dy_act,
                          const int32_t *argmax, Act *dx_act) {
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    const PoolShape *s = shape;
    const size_t in_sample = (size_t)s->in_height * s->in_width * s->channels;
    const size_t out_sample = (size_t)s->out_height * s->out_width * s->channels;
    for (size_t i = 0; i < in_sample * s->batch; i++) dx[i] = 0.0f;
    for (int n = 0; n < s->batch; n++)
        for (size_t o = 0; o < out_sample; o++)
            dx[n * in_sample + argmax[n * out_sample + o]] += dy[n * out_sample + o];
    ref_round_acts(backend, dx_act,
                   (size_t)shape->batch * shape->in_height * shape->in_width * shape->channels);
}

void ref_avgpool_forward(Backend *backend, int batch, int pixels, int channels, const Act *x_act,
                         Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    for (int n = 0; n < batch; n++)
        for (int c = 0; c < channels; c++) {
            double total = 0.0;
            for (int p = 0; p < pixels; p++)
                total += x[((size_t)n * pixels + p) * channels + c];
            y[(size_t)n * channels + c] = (float)(total / pixels);
        }
    ref_round_acts(backend, y_act, (size_t)batch * channels);
}

void ref_avgpool_backward(Backend *backend, int batch, int pixels, int channels, const Act *dy_act,
                          Act *dx_act) {
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    for (int n = 0; n < batch; n++)
        for (int p = 0; p < pixels; p++)
            for (int c = 0; c < channels; c++)
                dx[((size_t)n * pixels + p) * channels + c] =
                    dy[(size_t)n * channels + c] / (float)pixels;
    ref_round_acts(backend, dx_act, (size_t)batch * pixels * channels);
}
