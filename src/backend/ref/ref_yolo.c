// Reference ops of Ultralytics' YOLO models (backend.h): SiLU and the
// depthwise convolution of C2PSA's position encoding. Plain loops in double,
// every output rounded to the compute dtype once (ref_round_acts).
#include <math.h>

#include "backend/ref/ref_ops.h"

static double sigmoid(double a) { return 1.0 / (1.0 + exp(-a)); }

void ref_silu_forward(Backend *backend, size_t n, const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    for (size_t i = 0; i < n; i++) y[i] = (float)(x[i] * sigmoid(x[i]));
    ref_round_acts(backend, y_act, n);
}

void ref_silu_backward(Backend *backend, size_t n, const Act *x_act, const Act *dy_act,
                       Act *dx_act) {
    const float *x = (const float *)x_act;
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    for (size_t i = 0; i < n; i++) {
        const double a = x[i], s = sigmoid(a);
        dx[i] = (float)(dy[i] * s * (1.0 + a * (1.0 - s)));
    }
    ref_round_acts(backend, dx_act, n);
}

// The input row and column of output (oh, ow) under tap (kh, kw); -1 when
// it falls in the padding.
static int tap_row(const ConvShape *s, int oh, int kh) {
    const int ih = oh * s->stride - s->padding + kh;
    return ih >= 0 && ih < s->in_height ? ih : -1;
}
static int tap_col(const ConvShape *s, int ow, int kw) {
    const int iw = ow * s->stride - s->padding + kw;
    return iw >= 0 && iw < s->in_width ? iw : -1;
}

void ref_depthwise_conv2d_forward(Backend *backend, const ConvShape *s, const Act *x_act,
                                  const Act *w_act, Act *y_act) {
    const float *x = (const float *)x_act, *w = (const float *)w_act;
    float *y = (float *)y_act;
    const int C = s->in_channels, K = s->kernel;
    for (int n = 0; n < s->batch; n++)
        for (int oh = 0; oh < s->out_height; oh++)
            for (int ow = 0; ow < s->out_width; ow++)
                for (int c = 0; c < C; c++) {
                    double sum = 0.0;
                    for (int kh = 0; kh < K; kh++) {
                        const int ih = tap_row(s, oh, kh);
                        if (ih < 0) continue;
                        for (int kw = 0; kw < K; kw++) {
                            const int iw = tap_col(s, ow, kw);
                            if (iw < 0) continue;
                            sum += (double)x[(((size_t)n * s->in_height + ih) * s->in_width + iw) *
                                                 C + c] *
                                   w[((size_t)c * K + kh) * K + kw];
                        }
                    }
                    y[(((size_t)n * s->out_height + oh) * s->out_width + ow) * C + c] =
                        (float)sum;
                }
    ref_round_acts(backend, y_act, (size_t)s->batch * s->out_height * s->out_width * C);
}

void ref_depthwise_conv2d_backward_data(Backend *backend, const ConvShape *s, const Act *dy_act,
                                        const Act *w_act, Act *dx_act) {
    const float *dy = (const float *)dy_act, *w = (const float *)w_act;
    float *dx = (float *)dx_act;
    const int C = s->in_channels, K = s->kernel;
    // Gathered per input pixel (each output that reads it), so every dx is one sum.
    for (int n = 0; n < s->batch; n++)
        for (int ih = 0; ih < s->in_height; ih++)
            for (int iw = 0; iw < s->in_width; iw++)
                for (int c = 0; c < C; c++) {
                    double sum = 0.0;
                    for (int kh = 0; kh < K; kh++) {
                        const int row = ih + s->padding - kh;
                        if (row < 0 || row % s->stride) continue;
                        const int oh = row / s->stride;
                        if (oh >= s->out_height) continue;
                        for (int kw = 0; kw < K; kw++) {
                            const int col = iw + s->padding - kw;
                            if (col < 0 || col % s->stride) continue;
                            const int ow = col / s->stride;
                            if (ow >= s->out_width) continue;
                            sum += (double)dy[(((size_t)n * s->out_height + oh) * s->out_width +
                                               ow) * C + c] *
                                   w[((size_t)c * K + kh) * K + kw];
                        }
                    }
                    dx[(((size_t)n * s->in_height + ih) * s->in_width + iw) * C + c] = (float)sum;
                }
    ref_round_acts(backend, dx_act, (size_t)s->batch * s->in_height * s->in_width * C);
}

void ref_depthwise_conv2d_backward_weights(Backend *backend, const ConvShape *s,
                                           const Act *x_act, const Act *dy_act, float *dw) {
    const float *x = (const float *)x_act, *dy = (const float *)dy_act;
    const int C = s->in_channels, K = s->kernel;
    for (int c = 0; c < C; c++)
        for (int kh = 0; kh < K; kh++)
            for (int kw = 0; kw < K; kw++) {
                double sum = 0.0;
                for (int n = 0; n < s->batch; n++)
                    for (int oh = 0; oh < s->out_height; oh++) {
                        const int ih = tap_row(s, oh, kh);
                        if (ih < 0) continue;
                        for (int ow = 0; ow < s->out_width; ow++) {
                            const int iw = tap_col(s, ow, kw);
                            if (iw < 0) continue;
                            sum += (double)x[(((size_t)n * s->in_height + ih) * s->in_width +
                                              iw) * C + c] *
                                   dy[(((size_t)n * s->out_height + oh) * s->out_width + ow) * C +
                                      c];
                        }
                    }
                dw[((size_t)c * K + kh) * K + kw] += (float)sum;
            }
}
