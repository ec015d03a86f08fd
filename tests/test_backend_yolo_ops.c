// The YOLO ops of backend.h (silu_forward / silu_backward and the depthwise
// convolution of C2PSA's position encoding): each fast backend against the
// ref backend on awkward shapes (one pixel, channel counts around the cpu
// backend's blocks, stride 2, kernels 1, 3 and 7, sizes past the threading
// threshold), then the ref backend's gradients against central finite
// differences of its forward. Runs as a "cpu" and a "cuda" group
// (tests/backend_mirror.h); the cuda group skips where no GPU works and
// runs on the CPU emulation of CUDA in make test.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend_mirror.h"
#include "gradcheck.h"

// Central differences with h = 1e-3: the convolution is linear (exact up to
// fp32 rounding of the loss), SiLU smooth (O(h^2) truncation ~1e-6).
static const GradcheckTolerance FD_TOLERANCE = {.step = 1e-3f, .rtol = 1e-2, .atol = 1e-3};

// ---- SiLU ------------------------------------------------------------------------------------

// fp32 exp (cpu) against double (ref): a few ulps; inputs out to +-20 reach
// both saturated ends of the sigmoid.
static void check_silu(size_t n, uint64_t seed) {
    const float *x = mirror_random_tensor(n, -20, 20, seed);
    float *y_ref = mirror_nan_tensor(n), *y_fast = mirror_nan_tensor(n);
    ref->op.silu_forward(ref, n, (const Act *)x, (Act *)y_ref);
    fast->op.silu_forward(fast, n, DA(x), DA(y_fast));
    HA(y_fast);
    mirror_expect_close("silu y", n, y_fast, y_ref, mirror_act_tol(1e-5), 1e-6);
    const float *dy = mirror_random_tensor(n, -1, 1, seed + 1);
    float *dx_ref = mirror_nan_tensor(n), *dx_fast = mirror_copy(dy, n);
    ref->op.silu_backward(ref, n, (const Act *)x, (const Act *)dy, (Act *)dx_ref);
    // in place: dx may alias dy
    fast->op.silu_backward(fast, n, DA(x), DA(dx_fast), DA(dx_fast));
    HA(dx_fast);
    mirror_expect_close("silu dx", n, dx_fast, dx_ref, mirror_act_tol(1e-5), 1e-6);
}

static void test_silu(void **state) {
    NEED_FAST_BACKEND();
    check_silu(1, 10);
    check_silu(37, 20);
    check_silu(100003, 30);  // past the threading threshold
}

// silu(0) = 0, NaN stays NaN, -inf gives -0 or 0 (x e^x), +inf stays +inf.
static void test_silu_special_values(void **state) {
    NEED_FAST_BACKEND();
    float *x = mirror_tensor(3), *y = mirror_nan_tensor(3);
    const float values[3] = {0.0f, NAN, INFINITY};
    memcpy(x, values, sizeof values);
    fast->op.silu_forward(fast, 3, DA(x), DA(y));
    HA(y);
    assert_true(y[0] == 0.0f);
    assert_true(isnan(y[1]));
    assert_true(isinf(y[2]) && y[2] > 0);
}

typedef struct SiluProblem {
    size_t n;
    float *y;
    const float *projection;
} SiluProblem;

static double silu_loss(void *context, const float *x) {
    SiluProblem *p = context;
    ref->op.silu_forward(ref, p->n, (const Act *)x, (Act *)p->y);
    return gradcheck_project(p->n, p->y, p->projection);
}

static void test_silu_backward_fd(void **state) {
    NEED_FAST_BACKEND();
    const size_t n = 24;
    SiluProblem p = {.n = n, .y = mirror_tensor(n),
                     .projection = mirror_random_tensor(n, -1, 1, 40)};
    float *x = mirror_random_tensor(n, -5, 5, 41), *dx = mirror_nan_tensor(n);
    ref->op.silu_backward(ref, n, (const Act *)x, (const Act *)p.projection, (Act *)dx);
    assert_int_equal(gradcheck_compare("silu dx", silu_loss, &p, x, n, dx, FD_TOLERANCE), 0);
}

// ---- depthwise convolution -------------------------------------------------------------------

static ConvShape depthwise_shape(int batch, int size, int channels, int kernel, int stride) {
    ConvShape shape;
    ErrorMessage err;
    if (conv_shape_make(&shape, batch, size, size, channels, channels, kernel, stride, kernel / 2,
                        &err))
        fail_msg("%s", err.text);
    return shape;
}

static size_t input_elements(const ConvShape *s) {
    return (size_t)s->batch * s->in_height * s->in_width * s->in_channels;
}
static size_t output_elements(const ConvShape *s) {
    return (size_t)s->batch * s->out_height * s->out_width * s->in_channels;
}
static size_t weight_elements(const ConvShape *s) {
    return (size_t)s->in_channels * s->kernel * s->kernel;
}

// Sums of up to K^2 products of values in +-1 (forward, data) or of up to
// N OH OW (weights), in fp32 against double: relative 1e-5 of the terms.
static void check_depthwise(ConvShape s, uint64_t seed) {
    const size_t nx = input_elements(&s), ny = output_elements(&s), nw = weight_elements(&s);
    const float *x = mirror_random_tensor(nx, -1, 1, seed);
    const float *w = mirror_random_tensor(nw, -1, 1, seed + 1);
    float *y_ref = mirror_nan_tensor(ny), *y_fast = mirror_nan_tensor(ny);
    ref->op.depthwise_conv2d_forward(ref, &s, (const Act *)x, (const Act *)w, (Act *)y_ref);
    fast->op.depthwise_conv2d_forward(fast, &s, DA(x), DA(w), DA(y_fast));
    HA(y_fast);
    mirror_expect_close("depthwise y", ny, y_fast, y_ref, mirror_act_tol(1e-5), 1e-5);

    const float *dy = mirror_random_tensor(ny, -1, 1, seed + 2);
    float *dx_ref = mirror_nan_tensor(nx), *dx_fast = mirror_nan_tensor(nx);
    ref->op.depthwise_conv2d_backward_data(ref, &s, (const Act *)dy, (const Act *)w,
                                           (Act *)dx_ref);
    fast->op.depthwise_conv2d_backward_data(fast, &s, DA(dy), DA(w), DA(dx_fast));
    HA(dx_fast);
    mirror_expect_close("depthwise dx", nx, dx_fast, dx_ref, mirror_act_tol(1e-5), 1e-5);

    // += : both start from the same values
    const float *start = mirror_random_tensor(nw, -1, 1, seed + 3);
    float *dw_ref = mirror_copy(start, nw), *dw_fast = mirror_copy(start, nw);
    ref->op.depthwise_conv2d_backward_weights(ref, &s, (const Act *)x, (const Act *)dy, dw_ref);
    fast->op.depthwise_conv2d_backward_weights(fast, &s, DA(x), DA(dy), D(dw_fast));
    H(dw_fast);
    const double terms = (double)s.batch * s.out_height * s.out_width;
    mirror_expect_close("depthwise dw", nw, dw_fast, dw_ref, mirror_act_tol(1e-5),
                        1e-6 * terms);
}

static void test_depthwise(void **state) {
    NEED_FAST_BACKEND();
    check_depthwise(depthwise_shape(1, 1, 1, 3, 1), 100);    // one pixel: only the centre tap
    check_depthwise(depthwise_shape(2, 5, 17, 3, 1), 110);   // odd channels past a block of 16
    check_depthwise(depthwise_shape(2, 7, 8, 3, 2), 120);    // stride 2
    check_depthwise(depthwise_shape(1, 6, 5, 7, 1), 130);    // ConvNeXt's 7 x 7
    check_depthwise(depthwise_shape(3, 4, 4, 1, 1), 140);    // 1 x 1
    if (!mirror_emulation_skips("depthwise 2 x 14 x 14 x 128"))
        check_depthwise(depthwise_shape(2, 14, 128, 3, 1), 150);  // C2PSA-sized, threaded
}

typedef struct DepthwiseProblem {
    ConvShape shape;
    const float *other;  // the weights when x varies, the input when w varies
    float *y;
    const float *projection;
    int vary_weights;
} DepthwiseProblem;

static double depthwise_loss(void *context, const float *values) {
    DepthwiseProblem *p = context;
    const float *x = p->vary_weights ? p->other : values, *w = p->vary_weights ? values : p->other;
    ref->op.depthwise_conv2d_forward(ref, &p->shape, (const Act *)x, (const Act *)w, (Act *)p->y);
    return gradcheck_project(output_elements(&p->shape), p->y, p->projection);
}

static void test_depthwise_backward_fd(void **state) {
    NEED_FAST_BACKEND();
    const ConvShape shapes[] = {depthwise_shape(2, 5, 3, 3, 1), depthwise_shape(1, 6, 2, 3, 2)};
    for (int t = 0; t < 2; t++) {
        const ConvShape s = shapes[t];
        const size_t nx = input_elements(&s), ny = output_elements(&s), nw = weight_elements(&s);
        float *x = mirror_random_tensor(nx, -1, 1, 200 + t);
        float *w = mirror_random_tensor(nw, -1, 1, 210 + t);
        DepthwiseProblem p = {.shape = s, .y = mirror_tensor(ny),
                              .projection = mirror_random_tensor(ny, -1, 1, 220 + t)};
        float *dx = mirror_nan_tensor(nx), *dw = mirror_tensor(nw);
        memset(dw, 0, nw * sizeof *dw);  // backward_weights adds
        ref->op.depthwise_conv2d_backward_data(ref, &s, (const Act *)p.projection,
                                               (const Act *)w, (Act *)dx);
        ref->op.depthwise_conv2d_backward_weights(ref, &s, (const Act *)x,
                                                  (const Act *)p.projection, dw);
        p.other = w;
        assert_int_equal(
            gradcheck_compare("depthwise dx", depthwise_loss, &p, x, nx, dx, FD_TOLERANCE), 0);
        p.other = x;
        p.vary_weights = 1;
        assert_int_equal(
            gradcheck_compare("depthwise dw", depthwise_loss, &p, w, nw, dw, FD_TOLERANCE), 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_silu, mirror_free),
        cmocka_unit_test_teardown(test_silu_special_values, mirror_free),
        cmocka_unit_test_teardown(test_silu_backward_fd, mirror_free),
        cmocka_unit_test_teardown(test_depthwise, mirror_free),
        cmocka_unit_test_teardown(test_depthwise_backward_fd, mirror_free),
    };
    // The ops again with cuda storing fp16 / bf16 against ref in the same dtype.
    const struct CMUnitTest act_tests[] = {
        cmocka_unit_test_teardown(test_silu, mirror_free),
        cmocka_unit_test_teardown(test_depthwise, mirror_free),
    };
    return mirror_run_groups(tests, sizeof tests / sizeof tests[0]) +
           mirror_run_16bit_groups(act_tests, sizeof act_tests / sizeof act_tests[0]);
}
