// ConvNeXt's ops of backend.h: the depthwise convolution (depthwise_forward
// with and without bias, depthwise_backward_data, depthwise_backward_weights;
// also YOLO's C2PSA position encoding) and the planned linear layers
// (linear_planned_forward, with and without the GELU and the bias, against
// linear_forward and gelu_forward): each fast backend against the ref
// backend on ConvNeXt's 7x7 at its stage widths, on YOLO's 3x3 and on
// awkward shapes (channels not a multiple of the cpu
// backend's 8-lane blocks, rows narrower than 8 outputs, stride 2 with a
// 3x3 kernel, a 1x1 image, sizes on both sides of the threading
// threshold), the weight gradient's += contract, then the ref backend's
// three gradients against central finite differences of its forward. Runs
// as a "cpu" and a "cuda" group (tests/backend_mirror.h), and the
// forward / backward comparisons again in fp16 and bf16 against ref.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "backend_mirror.h"
#include "gradcheck.h"

// The convolution is linear in x and in w: central differences are exact
// up to the fp32 rounding of the loss.
static const GradcheckTolerance FD_TOLERANCE = {.step = 1e-2f, .rtol = 1e-3, .atol = 1e-4};

typedef struct DwCase {
    int batch, height, width, channels, kernel, stride, padding;
} DwCase;

static DepthwiseShape make_shape(DwCase c) {
    ErrorMessage err = {{0}};
    DepthwiseShape s;
    if (depthwise_shape_make(&s, c.batch, c.height, c.width, c.channels, c.kernel, c.stride,
                             c.padding, &err))
        fail_msg("%s", err.text);
    return s;
}

static size_t in_elements(const DepthwiseShape *s) {
    return (size_t)s->batch * s->in_height * s->in_width * s->channels;
}
static size_t out_elements(const DepthwiseShape *s) {
    return (size_t)s->batch * s->out_height * s->out_width * s->channels;
}
static size_t weight_elements(const DepthwiseShape *s) {
    return (size_t)s->kernel * s->kernel * s->channels;
}

static DepthwisePlan *plan_for(Backend *backend, const DepthwiseShape *s) {
    ErrorMessage err = {{0}};
    DepthwisePlan *plan = backend->op.depthwise_plan(backend, s, &err);
    if (!plan) fail_msg("%s: %s", backend->name, err.text);
    return plan;
}

// Every op on the case against ref: sums of up to K K products in fp32
// (fast) and double (ref); the weight gradient sums over N OH OW pixels.
static void check_case(DwCase c, uint64_t seed) {
    const DepthwiseShape s = make_shape(c);
    const size_t n_in = in_elements(&s), n_out = out_elements(&s), n_w = weight_elements(&s);
    DepthwisePlan *ref_plan = plan_for(ref, &s), *fast_plan = plan_for(fast, &s);
    const float *x = mirror_random_tensor(n_in, -1, 1, seed);
    const float *w = mirror_random_tensor(n_w, -1, 1, seed + 1);
    const float *bias = mirror_random_tensor((size_t)s.channels, -1, 1, seed + 2);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        float *y_ref = mirror_nan_tensor(n_out), *y_fast = mirror_nan_tensor(n_out);
        const float *b = with_bias ? bias : NULL;
        ref->op.depthwise_forward(ref, ref_plan, (const Act *)x, (const Act *)w, b, (Act *)y_ref);
        fast->op.depthwise_forward(fast, fast_plan, DA(x), DA(w), D(b), DA(y_fast));
        HA(y_fast);
        mirror_expect_close(with_bias ? "depthwise y (bias)" : "depthwise y", n_out, y_fast, y_ref,
                            mirror_act_tol(1e-5), 1e-5);
    }
    const float *dy = mirror_random_tensor(n_out, -1, 1, seed + 3);
    float *dx_ref = mirror_nan_tensor(n_in), *dx_fast = mirror_nan_tensor(n_in);
    ref->op.depthwise_backward_data(ref, ref_plan, (const Act *)dy, (const Act *)w,
                                    (Act *)dx_ref);
    fast->op.depthwise_backward_data(fast, fast_plan, DA(dy), DA(w), DA(dx_fast));
    HA(dx_fast);
    mirror_expect_close("depthwise dx", n_in, dx_fast, dx_ref, mirror_act_tol(1e-5), 1e-5);

    // dw and dbias accumulate: both start from the same values, and a
    // second call without bias must leave dbias alone.
    const float *start = mirror_random_tensor(n_w + s.channels, -1, 1, seed + 4);
    float *grads_ref = mirror_copy(start, n_w + s.channels);
    float *grads_fast = mirror_copy(start, n_w + s.channels);
    ref->op.depthwise_backward_weights(ref, ref_plan, (const Act *)x, (const Act *)dy, grads_ref,
                                       grads_ref + n_w);
    ref->op.depthwise_backward_weights(ref, ref_plan, (const Act *)x, (const Act *)dy, grads_ref,
                                       NULL);
    float *dw_fast = D(grads_fast);
    fast->op.depthwise_backward_weights(fast, fast_plan, DA(x), DA(dy), dw_fast, dw_fast + n_w);
    fast->op.depthwise_backward_weights(fast, fast_plan, DA(x), DA(dy), dw_fast, NULL);
    H(grads_fast);
    // The sums reach sqrt(N OH OW) ~ 60; fp32 over up to 12k terms per thread row.
    mirror_expect_close("depthwise dw, dbias", n_w + s.channels, grads_fast, grads_ref,
                        mirror_act_tol(1e-5), 1e-4);
    ref->op.depthwise_plan_free(ref, ref_plan);
    fast->op.depthwise_plan_free(fast, fast_plan);
}

static void test_depthwise_convnext(void **state) {
    NEED_FAST_BACKEND();
    check_case((DwCase){2, 14, 14, 96, 7, 1, 3}, 10);   // ConvNeXt-T stage 0 width
    check_case((DwCase){1, 7, 7, 768, 7, 1, 3}, 20);    // stage 3 at 224 px: 7-wide rows
    check_case((DwCase){3, 9, 23, 16, 7, 1, 3}, 30);    // odd sizes and edges
    check_case((DwCase){2, 56, 56, 32, 7, 1, 3}, 40);   // past the threading threshold
}

static void test_depthwise_awkward(void **state) {
    NEED_FAST_BACKEND();
    check_case((DwCase){2, 6, 5, 12, 7, 1, 3}, 50);     // channels not a multiple of 8
    check_case((DwCase){1, 1, 1, 8, 7, 1, 3}, 60);      // one pixel: only the centre tap
}

// YOLO's C2PSA position encoding: 3x3, stride 1, padding 1 (no bias in
// Ultralytics; check_case runs both).
static void test_depthwise_yolo_pe(void **state) {
    NEED_FAST_BACKEND();
    check_case((DwCase){1, 1, 1, 1, 3, 1, 1}, 92);      // one pixel, one channel: the centre tap
    check_case((DwCase){2, 5, 5, 17, 3, 1, 1}, 94);     // odd channels past two 8-lane blocks
    check_case((DwCase){2, 14, 14, 128, 3, 1, 1}, 96);  // yolo11n's C2PSA at 448 px
}

static void test_depthwise_other_kernels(void **state) {
    NEED_FAST_BACKEND();
    check_case((DwCase){2, 11, 10, 24, 3, 2, 1}, 70);   // stride 2, 3x3 (YOLO's DWConv kind)
    check_case((DwCase){1, 8, 9, 40, 5, 1, 0}, 80);     // no padding: smaller output
    check_case((DwCase){2, 5, 7, 3, 1, 1, 0}, 90);      // 1x1: a per-channel scale
}

// Kernels past cuda's register-row weight gradient (K > 7) and its strip
// kernel (K > 13): the other paths, run by no model today.
static void test_depthwise_large_kernels(void **state) {
    NEED_FAST_BACKEND();
    check_case((DwCase){2, 9, 11, 16, 9, 1, 4}, 97);    // 9x9: weight gradient by pixel chunks
    check_case((DwCase){1, 16, 15, 8, 15, 1, 7}, 98);   // 15x15: one output per thread
}

// ---- planned linear layers (ConvNeXt's fc1 + GELU, fc2) ----------------------------------------

// The fast backend's planned layer (with and without GELU, bias and none)
// against ref's linear_forward and gelu_forward: sums of `in` products in
// fp32; the cpu backend's GELU is oneDNN's erf, not ours.
static void check_linear(int rows, int in, int out, uint64_t seed) {
    ErrorMessage err = {{0}};
    const size_t n_x = (size_t)rows * in, n_y = (size_t)rows * out;
    const float *x = mirror_random_tensor(n_x, -2, 2, seed);
    const float *w = mirror_random_tensor((size_t)out * in, -0.5f, 0.5f, seed + 1);
    const float *bias = mirror_random_tensor((size_t)out, -1, 1, seed + 2);
    for (int gelu = 0; gelu < 2; gelu++) {
        LinearPlan *plan = fast->op.linear_plan(fast, rows, in, out, gelu, &err);
        if (!plan) fail_msg("%s: %s", fast->name, err.text);
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            const float *b = with_bias ? bias : NULL;
            float *y_ref = mirror_nan_tensor(n_y), *y_fast = mirror_nan_tensor(n_y);
            ref->op.linear_forward(ref, rows, in, out, (const Act *)x, (const Act *)w, b,
                                   (Act *)y_ref);
            if (gelu) ref->op.gelu_forward(ref, n_y, (const Act *)y_ref, (Act *)y_ref);
            fast->op.linear_planned_forward(fast, plan, DA(x), DA(w), D(b), DA(y_fast));
            HA(y_fast);
            char label[64];
            snprintf(label, sizeof label, "linear %d -> %d%s%s", in, out, gelu ? " + GELU" : "",
                     with_bias ? " (bias)" : "");
            // In 16 bits the product is rounded before the GELU: one unit
            // apart there (2^-8 at |y| ~ 4) moves the GELU by up to 1.13 units.
            const double atol = mirror_dtype == COMPUTE_F32 || !gelu ? 1e-5 : 4e-3;
            mirror_expect_close(label, n_y, y_fast, y_ref, mirror_act_tol(1e-5), atol);
        }
        fast->op.linear_plan_free(fast, plan);
    }
}

static void test_linear_plan(void **state) {
    NEED_FAST_BACKEND();
    check_linear(50, 24, 96, 200);     // fc1 of a narrow stage, odd rows
    check_linear(7, 96, 24, 210);      // fc2
    check_linear(3000, 16, 64, 220);   // past the threading threshold
}

// ---- finite differences on ref --------------------------------------------------------------

typedef struct DwProblem {
    DepthwiseShape shape;
    DepthwisePlan *plan;
    const float *x, *w, *bias, *projection;
    float *y;
    int wrt;  // 0: x, 1: w, 2: bias
} DwProblem;

static double dw_loss(void *context, const float *values) {
    DwProblem *p = context;
    const float *x = p->wrt == 0 ? values : p->x;
    const float *w = p->wrt == 1 ? values : p->w;
    const float *bias = p->wrt == 2 ? values : p->bias;
    ref->op.depthwise_forward(ref, p->plan, (const Act *)x, (const Act *)w, bias, (Act *)p->y);
    return gradcheck_project(out_elements(&p->shape), p->y, p->projection);
}

static void check_fd(DwCase c, uint64_t seed) {
    DwProblem p = {.shape = make_shape(c)};
    const DepthwiseShape *s = &p.shape;
    const size_t n_in = in_elements(s), n_out = out_elements(s), n_w = weight_elements(s);
    p.plan = plan_for(ref, s);
    float *x = mirror_random_tensor(n_in, -1, 1, seed);
    float *w = mirror_random_tensor(n_w, -1, 1, seed + 1);
    float *bias = mirror_random_tensor((size_t)s->channels, -1, 1, seed + 2);
    p.x = x;
    p.w = w;
    p.bias = bias;
    p.projection = mirror_random_tensor(n_out, -1, 1, seed + 3);
    p.y = mirror_tensor(n_out);
    float *dx = mirror_nan_tensor(n_in), *dw = mirror_tensor(n_w + s->channels);
    memset(dw, 0, (n_w + s->channels) * sizeof *dw);
    ref->op.depthwise_backward_data(ref, p.plan, (const Act *)p.projection, (const Act *)w,
                                    (Act *)dx);
    ref->op.depthwise_backward_weights(ref, p.plan, (const Act *)x, (const Act *)p.projection, dw,
                                       dw + n_w);
    p.wrt = 0;
    assert_int_equal(gradcheck_compare("depthwise dx", dw_loss, &p, x, n_in, dx, FD_TOLERANCE), 0);
    p.wrt = 1;
    assert_int_equal(gradcheck_compare("depthwise dw", dw_loss, &p, w, n_w, dw, FD_TOLERANCE), 0);
    p.wrt = 2;
    assert_int_equal(gradcheck_compare("depthwise dbias", dw_loss, &p, bias, (size_t)s->channels,
                                       dw + n_w, FD_TOLERANCE),
                     0);
    ref->op.depthwise_plan_free(ref, p.plan);
}

static void test_depthwise_backward_fd(void **state) {
    NEED_FAST_BACKEND();
    check_fd((DwCase){2, 5, 6, 3, 7, 1, 3}, 100);
    check_fd((DwCase){1, 7, 6, 2, 3, 2, 1}, 110);
    check_fd((DwCase){2, 5, 5, 3, 3, 1, 1}, 120);  // YOLO's position encoding
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_depthwise_convnext, mirror_free),
        cmocka_unit_test_teardown(test_depthwise_awkward, mirror_free),
        cmocka_unit_test_teardown(test_depthwise_yolo_pe, mirror_free),
        cmocka_unit_test_teardown(test_depthwise_other_kernels, mirror_free),
        cmocka_unit_test_teardown(test_depthwise_large_kernels, mirror_free),
        cmocka_unit_test_teardown(test_depthwise_backward_fd, mirror_free),
        cmocka_unit_test_teardown(test_linear_plan, mirror_free),
    };
    // The comparisons again with cuda storing fp16 / bf16 against ref in the
    // same dtype (the finite differences hold in fp32 only).
    const struct CMUnitTest act_tests[] = {
        cmocka_unit_test_teardown(test_depthwise_convnext, mirror_free),
        cmocka_unit_test_teardown(test_depthwise_awkward, mirror_free),
        cmocka_unit_test_teardown(test_depthwise_yolo_pe, mirror_free),
        cmocka_unit_test_teardown(test_depthwise_other_kernels, mirror_free),
        cmocka_unit_test_teardown(test_depthwise_large_kernels, mirror_free),
        cmocka_unit_test_teardown(test_linear_plan, mirror_free),
    };
    return mirror_run_groups(tests, sizeof tests / sizeof tests[0]) +
           mirror_run_16bit_groups(act_tests, sizeof act_tests / sizeof act_tests[0]);
}
