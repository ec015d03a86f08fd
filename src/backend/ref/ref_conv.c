// Reference 2-d convolution (NHWC activations, OHWI weights): direct loops
// over every output / input / weight element with double accumulators, eight
// neighbouring channels' sums carried side by side (ref_sums.h: the results
// of one at a time, bit for bit). The plan is just a copy of the shape; no
// workspace.
#include <stdlib.h>

#include "backend/ref/ref_ops.h"
#include "backend/ref/ref_sums.h"

struct ConvPlan {
    ConvShape shape;
};

ConvPlan *ref_conv2d_plan(Backend *backend, const ConvShape *shape, ErrorMessage *err) {
    // The shape must be one conv_shape_make would produce (valid geometry,
    // consistent output size): ops trust it from here on.
    ConvShape check;
    if (conv_shape_make(&check, shape->batch, shape->in_height, shape->in_width,
                        shape->in_channels, shape->out_channels, shape->kernel, shape->stride,
                        shape->padding, err) != 0) {
        error_prefix(err, "ref conv plan");
        return NULL;
    }
    if (check.out_height != shape->out_height || check.out_width != shape->out_width) {
        error_set(err, "ref conv plan: output %dx%d does not match the geometry (%dx%d)",
                  shape->out_height, shape->out_width, check.out_height, check.out_width);
        return NULL;
    }
    ConvPlan *plan = malloc(sizeof *plan);
    if (!plan) {
        error_set(err, "ref conv plan: out of memory");
        return NULL;
    }
    plan->shape = *shape;
    return plan;
}

void ref_conv2d_plan_free(Backend *backend, ConvPlan *plan) { free(plan); }

// Flat offsets into the three tensors.
static size_t input_elements(const ConvShape *s) {
    return (size_t)s->batch * s->in_height * s->in_width * s->in_channels;
}

static size_t output_elements(const ConvShape *s) {
    return (size_t)s->batch * s->out_height * s->out_width * s->out_channels;
}

static size_t x_index(const ConvShape *s, int n, int h, int w, int c) {
    return (((size_t)n * s->in_height + h) * s->in_width + w) * s->in_channels + c;
}

static size_t y_index(const ConvShape *s, int n, int h, int w, int c) {
    return (((size_t)n * s->out_height + h) * s->out_width + w) * s->out_channels + c;
}

static size_t w_index(const ConvShape *s, int o, int kh, int kw, int c) {
    return (((size_t)o * s->kernel + kh) * s->kernel + kw) * s->in_channels + c;
}

// The sums of outputs o .. o + width - 1 at (n, oh, ow): each over kh, kw, c
// in order, side by side (ref_sums.h). Inlined where called, so that the
// call with constants runs without the width tests.
static inline __attribute__((always_inline)) void forward_sums(const ConvShape *s,
                                                                const float *x, const float *w,
                                                                int n, int oh, int ow, int o,
                                                                int width,
                                                                double total[REF_SUMS]) {
    RefSums sums = {0};
    const size_t o_step = (size_t)s->kernel * s->kernel * s->in_channels;
    for (int kh = 0; kh < s->kernel; kh++) {
        const int ih = oh * s->stride - s->padding + kh;
        if (ih < 0 || ih >= s->in_height) continue;
        for (int kw = 0; kw < s->kernel; kw++) {
            const int iw = ow * s->stride - s->padding + kw;
            if (iw < 0 || iw >= s->in_width) continue;
            const float *xp = x + x_index(s, n, ih, iw, 0);
            const float *wp = w + w_index(s, o, kh, kw, 0);
            for (int c = 0; c < s->in_channels; c++)
                ref_sums_add(&sums, xp[c], wp + c, o_step, width);
        }
    }
    ref_sums_get(&sums, total);
}

// y[n,oh,ow,o] = sum over kh,kw,c of
//     x[n, oh*stride - pad + kh, ow*stride - pad + kw, c] w[o,kh,kw,c]
void ref_conv2d_forward(Backend *backend, const ConvPlan *plan, const Act *x_act, const Act *w_act,
                        Act *y_act) {
    const float *x = (const float *)x_act;
    const float *w = (const float *)w_act;
    float *y = (float *)y_act;
    const ConvShape *s = &plan->shape;
    for (int n = 0; n < s->batch; n++)
        for (int oh = 0; oh < s->out_height; oh++)
            for (int ow = 0; ow < s->out_width; ow++)
                for (int o = 0; o < s->out_channels; o += REF_SUMS) {
                    const int width = ref_sums_width(s->out_channels - o);
                    double total[REF_SUMS];
                    if (width == REF_SUMS) forward_sums(s, x, w, n, oh, ow, o, REF_SUMS, total);
                    else forward_sums(s, x, w, n, oh, ow, o, width, total);
                    for (int j = 0; j < width; j++)
                        y[y_index(s, n, oh, ow, o + j)] = (float)total[j];
                }
    ref_round_acts(backend, y_act, output_elements(&plan->shape));
}

// The sums of input gradients c .. c + width - 1 at (n, ih, iw), each over
// kh, kw, o in order, side by side (as forward_sums).
static inline __attribute__((always_inline)) void data_sums(const ConvShape *s, const float *dy,
                                                             const float *w, int n, int ih,
                                                             int iw, int c, int width,
                                                             double total[REF_SUMS]) {
    RefSums sums = {0};
    for (int kh = 0; kh < s->kernel; kh++) {
        const int th = ih + s->padding - kh;  // = oh * stride
        if (th < 0 || th % s->stride != 0 || th / s->stride >= s->out_height) continue;
        for (int kw = 0; kw < s->kernel; kw++) {
            const int tw = iw + s->padding - kw;  // = ow * stride
            if (tw < 0 || tw % s->stride != 0 || tw / s->stride >= s->out_width) continue;
            const float *dyp = dy + y_index(s, n, th / s->stride, tw / s->stride, 0);
            for (int o = 0; o < s->out_channels; o++)
                ref_sums_add(&sums, dyp[o], w + w_index(s, o, kh, kw, c), 1, width);
        }
    }
    ref_sums_get(&sums, total);
}

// dx[n,ih,iw,c] = sum over the (oh, kh) pairs with oh*stride - pad + kh = ih
// (and the same for width) and over o of dy[n,oh,ow,o] w[o,kh,kw,c].
void ref_conv2d_backward_data(Backend *backend, const ConvPlan *plan, const Act *dy_act,
                              const Act *w_act, Act *dx_act) {
    const float *dy = (const float *)dy_act;
    const float *w = (const float *)w_act;
    float *dx = (float *)dx_act;
    const ConvShape *s = &plan->shape;
    for (int n = 0; n < s->batch; n++)
        for (int ih = 0; ih < s->in_height; ih++)
            for (int iw = 0; iw < s->in_width; iw++)
                for (int c = 0; c < s->in_channels; c += REF_SUMS) {
                    const int width = ref_sums_width(s->in_channels - c);
                    double total[REF_SUMS];
                    if (width == REF_SUMS) data_sums(s, dy, w, n, ih, iw, c, REF_SUMS, total);
                    else data_sums(s, dy, w, n, ih, iw, c, width, total);
                    for (int j = 0; j < width; j++)
                        dx[x_index(s, n, ih, iw, c + j)] = (float)total[j];
                }
    ref_round_acts(backend, dx_act, input_elements(&plan->shape));
}

// The sums of weight gradients c .. c + width - 1 at (o, kh, kw), each over
// n, oh, ow in order, side by side (as forward_sums).
static inline __attribute__((always_inline)) void weight_sums(const ConvShape *s,
                                                               const float *x, const float *dy,
                                                               int o, int kh, int kw, int c,
                                                               int width,
                                                               double total[REF_SUMS]) {
    RefSums sums = {0};
    for (int n = 0; n < s->batch; n++)
        for (int oh = 0; oh < s->out_height; oh++) {
            const int ih = oh * s->stride - s->padding + kh;
            if (ih < 0 || ih >= s->in_height) continue;
            for (int ow = 0; ow < s->out_width; ow++) {
                const int iw = ow * s->stride - s->padding + kw;
                if (iw < 0 || iw >= s->in_width) continue;
                ref_sums_add(&sums, dy[y_index(s, n, oh, ow, o)], x + x_index(s, n, ih, iw, c), 1,
                             width);
            }
        }
    ref_sums_get(&sums, total);
}

// dw[o,kh,kw,c] += sum over n,oh,ow of
//     x[n, oh*stride - pad + kh, ow*stride - pad + kw, c] dy[n,oh,ow,o]
void ref_conv2d_backward_weights(Backend *backend, const ConvPlan *plan, const Act *x_act,
                                 const Act *dy_act, float *dw) {
    const float *x = (const float *)x_act;
    const float *dy = (const float *)dy_act;
    const ConvShape *s = &plan->shape;
    for (int o = 0; o < s->out_channels; o++)
        for (int kh = 0; kh < s->kernel; kh++)
            for (int kw = 0; kw < s->kernel; kw++)
                for (int c = 0; c < s->in_channels; c += REF_SUMS) {
                    const int width = ref_sums_width(s->in_channels - c);
                    double total[REF_SUMS];
                    if (width == REF_SUMS) weight_sums(s, x, dy, o, kh, kw, c, REF_SUMS, total);
                    else weight_sums(s, x, dy, o, kh, kw, c, width, total);
                    for (int j = 0; j < width; j++)
                        dw[w_index(s, o, kh, kw, c + j)] += (float)total[j];
                }
}
