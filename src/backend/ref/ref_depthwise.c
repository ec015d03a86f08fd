// Reference depthwise convolution (NHWC activations, (K, K, C) weights):
// direct loops over every output / input / weight element with double
// accumulators, as ref_conv.c for the dense one. The plan is a copy of the
// shape; no workspace.
#include <stdlib.h>

#include "backend/ref/ref_ops.h"

struct DepthwisePlan {
    DepthwiseShape shape;
};

DepthwisePlan *ref_depthwise_plan(Backend *backend, const DepthwiseShape *shape,
                                  ErrorMessage *err) {
    // Ops trust the shape from here on: it must be what depthwise_shape_make gives.
    DepthwiseShape check;
    if (depthwise_shape_make(&check, shape->batch, shape->in_height, shape->in_width,
                             shape->channels, shape->kernel, shape->stride, shape->padding,
                             err) != 0) {
        error_prefix(err, "ref depthwise plan");
        return NULL;
    }
    if (check.out_height != shape->out_height || check.out_width != shape->out_width) {
        error_set(err, "ref depthwise plan: output %dx%d does not match the geometry (%dx%d)",
                  shape->out_height, shape->out_width, check.out_height, check.out_width);
        return NULL;
    }
    DepthwisePlan *plan = malloc(sizeof *plan);
    if (!plan) {
        error_set(err, "ref depthwise plan: out of memory");
        return NULL;
    }
    plan->shape = *shape;
    return plan;
}

void ref_depthwise_plan_free(Backend *backend, DepthwisePlan *plan) { free(plan); }

static size_t x_index(const DepthwiseShape *s, int n, int h, int w, int c) {
    return (((size_t)n * s->in_height + h) * s->in_width + w) * s->channels + c;
}

static size_t y_index(const DepthwiseShape *s, int n, int h, int w, int c) {
    return (((size_t)n * s->out_height + h) * s->out_width + w) * s->channels + c;
}

static size_t w_index(const DepthwiseShape *s, int kh, int kw, int c) {
    return ((size_t)kh * s->kernel + kw) * s->channels + c;
}

// y[n,oh,ow,c] = sum over kh,kw of x[n, oh*stride - pad + kh, ow*stride - pad + kw, c] w[kh,kw,c]
void ref_depthwise_forward(Backend *backend, const DepthwisePlan *plan, const Act *x_act,
                           const Act *w_act, const float *bias, Act *y_act) {
    const float *x = (const float *)x_act;
    const float *w = (const float *)w_act;
    float *y = (float *)y_act;
    const DepthwiseShape *s = &plan->shape;
    for (int n = 0; n < s->batch; n++)
        for (int oh = 0; oh < s->out_height; oh++)
            for (int ow = 0; ow < s->out_width; ow++)
                for (int c = 0; c < s->channels; c++) {
                    double total = 0.0;
                    for (int kh = 0; kh < s->kernel; kh++) {
                        const int ih = oh * s->stride - s->padding + kh;
                        if (ih < 0 || ih >= s->in_height) continue;
                        for (int kw = 0; kw < s->kernel; kw++) {
                            const int iw = ow * s->stride - s->padding + kw;
                            if (iw < 0 || iw >= s->in_width) continue;
                            total += (double)x[x_index(s, n, ih, iw, c)] * w[w_index(s, kh, kw, c)];
                        }
                    }
                    // 16 bits: the bias rounded to the dtype, the sum rounded once below
                    if (bias) total = (float)total + ref_round_act(backend, bias[c]);
                    y[y_index(s, n, oh, ow, c)] = (float)total;
                }
    ref_round_acts(backend, y_act,
                   (size_t)s->batch * s->out_height * s->out_width * s->channels);
}

// dx[n,ih,iw,c] = sum over the (oh, kh) pairs with oh*stride - pad + kh = ih
// (and the same for width) of dy[n,oh,ow,c] w[kh,kw,c].
void ref_depthwise_backward_data(Backend *backend, const DepthwisePlan *plan, const Act *dy_act,
                                 const Act *w_act, Act *dx_act) {
    const float *dy = (const float *)dy_act;
    const float *w = (const float *)w_act;
    float *dx = (float *)dx_act;
    const DepthwiseShape *s = &plan->shape;
    for (int n = 0; n < s->batch; n++)
        for (int ih = 0; ih < s->in_height; ih++)
            for (int iw = 0; iw < s->in_width; iw++)
                for (int c = 0; c < s->channels; c++) {
                    double total = 0.0;
                    for (int kh = 0; kh < s->kernel; kh++) {
                        const int th = ih + s->padding - kh;  // = oh * stride
                        if (th < 0 || th % s->stride != 0 || th / s->stride >= s->out_height)
                            continue;
                        for (int kw = 0; kw < s->kernel; kw++) {
                            const int tw = iw + s->padding - kw;  // = ow * stride
                            if (tw < 0 || tw % s->stride != 0 || tw / s->stride >= s->out_width)
                                continue;
                            total += (double)dy[y_index(s, n, th / s->stride, tw / s->stride, c)] *
                                     w[w_index(s, kh, kw, c)];
                        }
                    }
                    dx[x_index(s, n, ih, iw, c)] = (float)total;
                }
    ref_round_acts(backend, dx_act, (size_t)s->batch * s->in_height * s->in_width * s->channels);
}

// dw[kh,kw,c] += sum over n,oh,ow of x[n, oh*stride - pad + kh, ow*stride - pad + kw, c]
// dy[n,oh,ow,c]; dbias[c] += sum over n,oh,ow of dy[n,oh,ow,c].
void ref_depthwise_backward_weights(Backend *backend, const DepthwisePlan *plan,
                                    const Act *x_act, const Act *dy_act, float *dw,
                                    float *dbias) {
    const float *x = (const float *)x_act;
    const float *dy = (const float *)dy_act;
    const DepthwiseShape *s = &plan->shape;
    for (int kh = 0; kh < s->kernel; kh++)
        for (int kw = 0; kw < s->kernel; kw++)
            for (int c = 0; c < s->channels; c++) {
                double total = 0.0;
                for (int n = 0; n < s->batch; n++)
                    for (int oh = 0; oh < s->out_height; oh++) {
                        const int ih = oh * s->stride - s->padding + kh;
                        if (ih < 0 || ih >= s->in_height) continue;
                        for (int ow = 0; ow < s->out_width; ow++) {
                            const int iw = ow * s->stride - s->padding + kw;
                            if (iw < 0 || iw >= s->in_width) continue;
                            total += (double)x[x_index(s, n, ih, iw, c)] *
                                     dy[y_index(s, n, oh, ow, c)];
                        }
                    }
                dw[w_index(s, kh, kw, c)] += (float)total;
            }
    if (!dbias) return;
    for (int c = 0; c < s->channels; c++) {
        double total = 0.0;
        for (int n = 0; n < s->batch; n++)
            for (int oh = 0; oh < s->out_height; oh++)
                for (int ow = 0; ow < s->out_width; ow++) total += dy[y_index(s, n, oh, ow, c)];
        dbias[c] += (float)total;
    }
}
