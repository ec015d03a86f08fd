// The fast backends against the ref backend (the oracle), op by op, on
// random inputs of awkward shapes: odd sizes, batch 1, stride 2, padding,
// 1x1 / 3x3 / 7x7 kernels, channel counts that are not multiples of 8 or
// 16, and sizes on both sides of the threshold where the cpu backend goes
// multi-threaded. Every test runs for the cpu backend and again for the cuda
// backend (tests/backend_mirror.h), and for cuda in fp16 and bf16 against
// ref in the same dtype (activations through DA / HA; the fp32-only ops
// run there too, on inputs rounded to the dtype). Batch norm:
// test_backend_fast_norm.c.
//
// Tolerances 0 mean the same fp32 operations in the same order: the cuda
// kernels are built without FMA contraction (-fmad=false) so that they hold
// there too.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend_mirror.h"
#include "gradcheck.h"

// ---- convolution ---------------------------------------------------------------------------

typedef struct ConvCase {
    int batch, height, width, in_channels, out_channels, kernel, stride, padding;
} ConvCase;

// Conv outputs are fp32 sums of `terms` products of values in [-1, 1]; both
// backends round each partial sum but in different orders (oneDNN blocks
// over channels and pixels), so the difference grows like sqrt(terms) *
// eps(fp32) * |partial sums|. Allowed: 1e-6 * sqrt(terms) absolute (~15x
// that estimate) + 1e-5 relative; in 16 bits the relative part widened by
// mirror_act_tol (both round once). cuDNN's 16-bit weight gradient is
// rounded to 16 bits before its fp32 +=, ref's is not: up to one unit of
// roundoff of the fresh gradient, |g| < sqrt(terms), allowed as
// mirror_act_tol(0) sqrt(terms) more absolute (rounded_weight_gradient).
static void expect_conv_close(const char *label, size_t n, const float *actual,
                              const float *expected, double terms, int rounded_weight_gradient) {
    const double atol = 1e-6 * sqrt(terms) + (rounded_weight_gradient ? mirror_act_tol(0) * sqrt(terms) : 0);
    mirror_expect_close(label, n, actual, expected, mirror_act_tol(1e-5), atol);
}

static void check_conv_case(ConvCase c, uint64_t seed) {
    ErrorMessage err;
    ConvShape s;
    assert_int_equal(conv_shape_make(&s, c.batch, c.height, c.width, c.in_channels,
                                     c.out_channels, c.kernel, c.stride, c.padding, &err),
                     0);
    ConvPlan *fast_plan = fast->op.conv2d_plan(fast, &s, &err);
    if (!fast_plan) fail_msg("%s", err.text);
    ConvPlan *ref_plan = ref->op.conv2d_plan(ref, &s, &err);
    assert_non_null(ref_plan);

    const size_t x_n = (size_t)s.batch * s.in_height * s.in_width * s.in_channels;
    const size_t y_n = (size_t)s.batch * s.out_height * s.out_width * s.out_channels;
    const size_t w_n = (size_t)s.out_channels * s.kernel * s.kernel * s.in_channels;
    const float *x = mirror_random_tensor(x_n, -1, 1, seed);
    const float *w = mirror_random_tensor(w_n, -1, 1, seed + 1);
    const float *w_other = mirror_random_tensor(w_n, -1, 1, seed + 2);
    const float *dy = mirror_random_tensor(y_n, -1, 1, seed + 3);
    float *y_ref = mirror_nan_tensor(y_n), *y_fast = mirror_nan_tensor(y_n);
    float *dx_ref = mirror_nan_tensor(x_n), *dx_fast = mirror_nan_tensor(x_n);
    // dw accumulates (+=): both start from the same non-zero values.
    float *dw_ref = mirror_random_tensor(w_n, -1, 1, seed + 4), *dw_fast = mirror_copy(dw_ref, w_n);

    ref->op.conv2d_forward(ref, ref_plan, (const Act *)x, (const Act *)w, (Act *)y_ref);
    // A first call with other weights: the plan must not keep stale ones.
    fast->op.conv2d_forward(fast, fast_plan, DA(x), DA(w_other), DA(y_fast));
    fast->op.conv2d_forward(fast, fast_plan, DA(x), DA(w), DA(y_fast));
    HA(y_fast);
    expect_conv_close("conv forward", y_n, y_fast, y_ref,
                      (double)s.kernel * s.kernel * s.in_channels, 0);

    ref->op.conv2d_backward_data(ref, ref_plan, (const Act *)dy, (const Act *)w, (Act *)dx_ref);
    fast->op.conv2d_backward_data(fast, fast_plan, DA(dy), DA(w), DA(dx_fast));
    HA(dx_fast);
    expect_conv_close("conv backward data", x_n, dx_fast, dx_ref,
                      (double)s.kernel * s.kernel * s.out_channels, 0);

    ref->op.conv2d_backward_weights(ref, ref_plan, (const Act *)x, (const Act *)dy, dw_ref);
    fast->op.conv2d_backward_weights(fast, fast_plan, DA(x), DA(dy), D(dw_fast));
    H(dw_fast);
    expect_conv_close("conv backward weights", w_n, dw_fast, dw_ref,
                      (double)s.batch * s.out_height * s.out_width, mirror_dtype != COMPUTE_F32);

    fast->op.conv2d_plan_free(fast, fast_plan);
    ref->op.conv2d_plan_free(ref, ref_plan);
}

static void test_conv_3x3(void **state) {
    NEED_FAST_BACKEND();
    check_conv_case((ConvCase){1, 9, 7, 5, 6, 3, 1, 1}, 10);     // batch 1, odd sizes
    check_conv_case((ConvCase){2, 10, 10, 7, 9, 3, 2, 1}, 20);   // stride 2, tail padding 0
    check_conv_case((ConvCase){2, 6, 6, 64, 32, 3, 1, 1}, 30);   // full vector blocks
    check_conv_case((ConvCase){3, 5, 5, 19, 21, 3, 1, 0}, 40);   // no padding
}

static void test_conv_1x1(void **state) {
    NEED_FAST_BACKEND();
    check_conv_case((ConvCase){3, 8, 8, 13, 17, 1, 1, 0}, 50);   // a plain GEMM
    check_conv_case((ConvCase){2, 9, 9, 10, 12, 1, 2, 0}, 60);   // downsample, odd input
}

// 3 input channels: in 16 bits cuda pads them (and the weights) to 8.
static void test_conv_7x7_stem(void **state) {
    NEED_FAST_BACKEND();
    check_conv_case((ConvCase){2, 23, 21, 3, 8, 7, 2, 3}, 70);
    check_conv_case((ConvCase){1, 9, 9, 3, 5, 3, 1, 1}, 80);  // a 3x3 on the 3 channels
}

// ---- GEMM ---------------------------------------------------------------------------------

// op(A) (M, K) op(B) (K, N) with padded leading dimensions; fp32 sums of k
// products of values in [-1, 1]: same sqrt(k) argument as the convolution.
static void check_gemm(int transpose_a, int transpose_b, int m, int n, int k, float alpha,
                       float beta, uint64_t seed) {
    const int lda = (transpose_a ? m : k) + 3, ldb = (transpose_b ? k : n) + 2, ldc = n + 5;
    const size_t a_n = (size_t)(transpose_a ? k : m) * lda;
    const size_t b_n = (size_t)(transpose_b ? n : k) * ldb;
    const size_t c_n = (size_t)m * ldc;
    const float *a = mirror_random_tensor(a_n, -1, 1, seed), *b = mirror_random_tensor(b_n, -1, 1, seed + 1);
    float *c_ref = mirror_random_tensor(c_n, -1, 1, seed + 2), *c_fast = mirror_copy(c_ref, c_n);
    ref->op.gemm(ref, transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c_ref, ldc);
    fast->op.gemm(fast, transpose_a, transpose_b, m, n, k, alpha, D(a), lda, D(b), ldb, beta,
                  D(c_fast), ldc);
    H(c_fast);
    // The padding columns of C (beyond n) must be left alone: compared too.
    mirror_expect_close("gemm", c_n, c_fast, c_ref, 1e-5, 1e-6 * sqrt((double)k));
}

static void test_gemm(void **state) {
    NEED_FAST_BACKEND();
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_gemm(ta, tb, 37, 29, 53, 0.7f, 0.3f, 100 + 10 * ta + tb);
            check_gemm(ta, tb, 1, 130, 257, 1.0f, 0.0f, 200 + 10 * ta + tb);  // a linear layer, batch 1
        }
    check_gemm(0, 1, 64, 300, 200, 1.0f, 1.0f, 300);  // large enough to be threaded
    check_gemm(0, 0, 5, 7, 0, 1.0f, 0.3f, 400);       // k = 0: C = beta C
}

// ---- column reductions and bias ------------------------------------------------------------

// Double accumulation in both backends: summation order and final rounding
// only, 1e-6 relative + 1e-6 absolute (for sums that cancel to ~0).
#define SUM_TOL 1e-6

static void test_bias_and_column_sums(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < NORM_CASE_COUNT; i++) {
        const size_t rows = norm_cases[i].rows;
        const int c = norm_cases[i].channels;
        const size_t n = rows * c;
        const float *x = mirror_random_tensor(n, -1, 1, 3000 + i);
        const float *bias = mirror_random_tensor(c, -1, 1, 3100 + i);
        float *y_ref = mirror_copy(x, n), *y_fast = mirror_copy(x, n);
        ref->op.bias_add(ref, rows, c, bias, (Act *)y_ref);
        fast->op.bias_add(fast, rows, c, D(bias), DA(y_fast));
        HA(y_fast);
        // One fp32 addition per element in both (then one rounding in 16
        // bits): identical results.
        mirror_expect_close("bias_add", n, y_fast, y_ref, 0, 0);

        float *db_ref = mirror_random_tensor(c, -1, 1, 3200 + i), *db_fast = mirror_copy(db_ref, c);
        ref->op.bias_backward(ref, rows, c, (const Act *)x, db_ref);
        fast->op.bias_backward(fast, rows, c, DA(x), D(db_fast));
        H(db_fast);
        mirror_expect_close("bias_backward (+=)", c, db_fast, db_ref, SUM_TOL, SUM_TOL);

        float *s_ref = mirror_nan_tensor(c), *s_fast = mirror_nan_tensor(c);
        ref->op.column_sum(ref, rows, c, x, s_ref);
        fast->op.column_sum(fast, rows, c, D(x), D(s_fast));
        H(s_fast);
        mirror_expect_close("column_sum", c, s_fast, s_ref, SUM_TOL, SUM_TOL);
        mirror_free(state);
    }
    // Wider than one 65536-column chunk of the cuda backend's scratch (a
    // DINO head's output is 65536 wide).
    const size_t rows = 3;
    const int c = 70001;
    const float *x = mirror_random_tensor(rows * c, -1, 1, 3300);
    float *s_ref = mirror_nan_tensor(c), *s_fast = mirror_nan_tensor(c);
    ref->op.column_sum(ref, rows, c, x, s_ref);
    fast->op.column_sum(fast, rows, c, D(x), D(s_fast));
    H(s_fast);
    mirror_expect_close("column_sum wide", c, s_fast, s_ref, SUM_TOL, SUM_TOL);
}

// ---- elementwise -------------------------------------------------------------------------

// Sizes below and above the threading threshold (16384) and not multiples
// of any vector width.
static const size_t element_counts[] = {1, 37, 1000, 100003};

// Each element is the same fp32 expression in both backends (no FP
// contraction: ISO C mode, nvcc -fmad=false; no reassociation), so results
// are identical: tolerance 0.
static void test_elementwise(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < sizeof element_counts / sizeof *element_counts; i++) {
        const size_t n = element_counts[i];
        const float *a = mirror_random_tensor(n, -1, 1, 4000 + i), *b = mirror_random_tensor(n, -1, 1, 4100 + i);
        float *r = mirror_nan_tensor(n), *c = mirror_nan_tensor(n);
        ref->op.relu_forward(ref, n, (const Act *)a, (Act *)r);
        fast->op.relu_forward(fast, n, DA(a), DA(c));
        HA(c);
        mirror_expect_close("relu", n, c, r, 0, 0);
        float *in_place = mirror_copy(a, n);  // y may alias x
        Act *in_place_device = DA(in_place);
        fast->op.relu_forward(fast, n, in_place_device, in_place_device);
        HA(in_place);
        mirror_expect_close("relu in place", n, in_place, r, 0, 0);

        ref->op.relu_backward(ref, n, (const Act *)r, (const Act *)b,
                              (Act *)r); // dx aliases dy's buffer role: r = y here
        float *y = mirror_copy(c, n);
        fast->op.relu_backward(fast, n, DA(y), DA(b), DA(c));
        HA(c);
        mirror_expect_close("relu backward", n, c, r, 0, 0);

        ref->op.add(ref, n, a, b, r);
        fast->op.add(fast, n, D(a), D(b), D(c));
        H(c);
        mirror_expect_close("add", n, c, r, 0, 0);
        ref->op.mul(ref, n, a, b, r);
        fast->op.mul(fast, n, D(a), D(b), D(c));
        H(c);
        mirror_expect_close("mul", n, c, r, 0, 0);

        // beta = 0: y is not read (NaN in it must not leak through).
        float *y_ref = mirror_nan_tensor(n), *y_fast = mirror_nan_tensor(n);
        ref->op.axpby(ref, n, 0.5f, a, 0.0f, y_ref);
        fast->op.axpby(fast, n, 0.5f, D(a), 0.0f, D(y_fast));
        H(y_fast);
        mirror_expect_close("axpby beta 0", n, y_fast, y_ref, 0, 0);
        ref->op.axpby(ref, n, -1.5f, b, 0.75f, y_ref);
        fast->op.axpby(fast, n, -1.5f, D(b), 0.75f, D(y_fast));
        H(y_fast);
        mirror_expect_close("axpby", n, y_fast, y_ref, 0, 0);

        ref->op.fill(ref, y_ref, 3.25f, n);
        fast->op.fill(fast, D(y_fast), 3.25f, n);
        H(y_fast);
        mirror_expect_close("fill", n, y_fast, y_ref, 0, 0);
        mirror_free(state);
    }
}

// GELU: fp32 erfcf / expf in the fast backends, double in ref. The fp32
// functions of glibc and CUDA are within ~2 ulps, and the few fp32 products
// add as many: 1e-6 relative; the absolute part covers results near 0 (x
// near 0 or far left; also fp16's subnormal step, 6e-8). In 16 bits the
// relative part widened by mirror_act_tol.
#define GELU_RTOL 1e-6
#define GELU_ATOL 1e-7

static void test_gelu(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < sizeof element_counts / sizeof *element_counts; i++) {
        const size_t n = element_counts[i];
        const float *x = mirror_random_tensor(n, -8, 8, 4200 + i), *dy = mirror_random_tensor(n, -1, 1, 4300 + i);
        float *r = mirror_nan_tensor(n), *c = mirror_nan_tensor(n);
        ref->op.gelu_forward(ref, n, (const Act *)x, (Act *)r);
        fast->op.gelu_forward(fast, n, DA(x), DA(c));
        HA(c);
        mirror_expect_close("gelu", n, c, r, mirror_act_tol(GELU_RTOL), GELU_ATOL);
        ref->op.gelu_backward(ref, n, (const Act *)x, (const Act *)dy, (Act *)r);
        fast->op.gelu_backward(fast, n, DA(x), DA(dy), DA(c));
        HA(c);
        mirror_expect_close("gelu backward", n, c, r, mirror_act_tol(GELU_RTOL), GELU_ATOL);
        float *in_place = mirror_copy(dy, n);  // dx may alias dy
        Act *in_place_device = DA(in_place);
        fast->op.gelu_backward(fast, n, DA(x), in_place_device, in_place_device);
        HA(in_place);
        mirror_expect_close("gelu backward in place", n, in_place, c, 0, 0);
        mirror_free(state);
    }
}

// ---- reductions ----------------------------------------------------------------------------

static void test_reductions(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < sizeof element_counts / sizeof *element_counts; i++) {
        const size_t n = element_counts[i];
        float *a = mirror_random_tensor(n, -1, 1, 5000 + i), *b = mirror_random_tensor(n, -1, 1, 5100 + i);
        a[n / 2] = INFINITY;  // one non-finite value for count_nonfinite, then restored
        float *r = mirror_nan_tensor(4), *c = mirror_nan_tensor(4);
        r[3] = c[3] = 2.0f;  // count_nonfinite adds to what is there
        ref->op.count_nonfinite(ref, n, a, &r[3]);
        fast->op.count_nonfinite(fast, n, D(a), D(&c[3]));
        H(c);
        a[n / 2] = 0.5f;
        ref->op.sum(ref, n, a, &r[0]);
        fast->op.sum(fast, n, D(a), D(&c[0]));
        H(c);
        ref->op.sum_squares(ref, n, a, &r[1]);
        fast->op.sum_squares(fast, n, D(a), D(&c[1]));
        H(c);
        ref->op.dot(ref, n, a, b, &r[2]);
        fast->op.dot(fast, n, D(a), D(b), D(&c[2]));
        H(c);
        // Double accumulators in both: summation order and final rounding;
        // the count is exact (3).
        mirror_expect_close("sum, sum_squares, dot, count_nonfinite", 4, c, r, SUM_TOL, SUM_TOL);
        assert_true(c[3] == 3.0f);
        mirror_free(state);
    }
}

// ---- pooling -------------------------------------------------------------------------------

typedef struct PoolCase {
    int batch, height, width, channels, window, stride, padding;
} PoolCase;

static void check_maxpool(PoolCase p, int with_ties, uint64_t seed) {
    ErrorMessage err;
    PoolShape s;
    assert_int_equal(pool_shape_make(&s, p.batch, p.height, p.width, p.channels, p.window,
                                     p.stride, p.padding, &err),
                     0);
    const size_t x_n = (size_t)s.batch * s.in_height * s.in_width * s.channels;
    const size_t y_n = (size_t)s.batch * s.out_height * s.out_width * s.channels;
    float *x = mirror_tensor(x_n);
    if (with_ties) {  // values from {-1, -0.5, 0, 0.5, 1}: many equal maxima
        gradcheck_fill_uniform(x, x_n, -1, 1, seed);
        for (size_t i = 0; i < x_n; i++) x[i] = roundf(x[i] * 2) / 2;
    } else {
        gradcheck_fill_distinct(x, x_n, -1, 1e-3f, seed);
    }
    mirror_round(x, x_n);  // 16 bits: ties appear, picked alike
    float *y_ref = mirror_nan_tensor(y_n), *y_fast = mirror_nan_tensor(y_n);
    int32_t *arg_ref = mirror_buffer(y_n * sizeof(int32_t)), *arg_fast = mirror_buffer(y_n * sizeof(int32_t));
    ref->op.maxpool_forward(ref, &s, (const Act *)x, (Act *)y_ref, arg_ref);
    fast->op.maxpool_forward(fast, &s, DA(x), DA(y_fast), D(arg_fast));
    HA(y_fast), H(arg_fast);
    // A max is a copy of an input, and ties pick the first in window order in
    // both: identical values and indices.
    mirror_expect_close("maxpool forward", y_n, y_fast, y_ref, 0, 0);
    for (size_t i = 0; i < y_n; i++) assert_int_equal(arg_fast[i], arg_ref[i]);

    const float *dy = mirror_random_tensor(y_n, -1, 1, seed + 1);
    float *dx_ref = mirror_nan_tensor(x_n), *dx_fast = mirror_nan_tensor(x_n);
    ref->op.maxpool_backward(ref, &s, (const Act *)dy, arg_ref, (Act *)dx_ref);
    fast->op.maxpool_backward(fast, &s, DA(dy), D(arg_ref), DA(dx_fast));
    HA(dx_fast);
    // Overlapping windows add in the same order (output index order within
    // a sample) in both, in fp32, rounded once: identical.
    mirror_expect_close("maxpool backward", x_n, dx_fast, dx_ref, 0, 0);
}

static void test_maxpool(void **state) {
    NEED_FAST_BACKEND();
    check_maxpool((PoolCase){2, 9, 9, 5, 3, 2, 1}, 0, 6000);    // ResNet's 3x3/2 pad 1, odd
    check_maxpool((PoolCase){1, 7, 6, 16, 2, 2, 0}, 0, 6100);   // batch 1, dropped tail
    check_maxpool((PoolCase){4, 16, 16, 64, 3, 2, 1}, 0, 6200); // threaded
    check_maxpool((PoolCase){2, 9, 9, 5, 3, 2, 1}, 1, 6300);    // ties
    check_maxpool((PoolCase){4, 16, 16, 64, 3, 2, 1}, 1, 6400); // ties, threaded
    check_maxpool((PoolCase){2, 7, 7, 32, 5, 1, 2}, 0, 6500);   // YOLO's SPPF: 5x5/1 pad 2
    check_maxpool((PoolCase){2, 4, 4, 16, 5, 1, 2}, 1, 6600);   // SPPF on P5, ties, overlaps
}

static void test_avgpool(void **state) {
    NEED_FAST_BACKEND();
    const int cases[][3] = {{1, 1, 7}, {3, 49, 13}, {8, 49, 100}, {2, 9, 2048}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int batch = cases[i][0], pixels = cases[i][1], channels = cases[i][2];
        const size_t x_n = (size_t)batch * pixels * channels, y_n = (size_t)batch * channels;
        const float *x = mirror_random_tensor(x_n, -1, 1, 7000 + i);
        float *y_ref = mirror_nan_tensor(y_n), *y_fast = mirror_nan_tensor(y_n);
        ref->op.avgpool_forward(ref, batch, pixels, channels, (const Act *)x, (Act *)y_ref);
        fast->op.avgpool_forward(fast, batch, pixels, channels, DA(x), DA(y_fast));
        HA(y_fast);
        mirror_expect_close("avgpool forward", y_n, y_fast, y_ref, mirror_act_tol(SUM_TOL),
                            SUM_TOL);
        float *dx_ref = mirror_nan_tensor(x_n), *dx_fast = mirror_nan_tensor(x_n);
        ref->op.avgpool_backward(ref, batch, pixels, channels, (const Act *)y_ref, (Act *)dx_ref);
        fast->op.avgpool_backward(fast, batch, pixels, channels, DA(y_ref), DA(dx_fast));
        HA(dx_fast);
        // One fp32 division per element in both: identical.
        mirror_expect_close("avgpool backward", x_n, dx_fast, dx_ref, 0, 0);
        mirror_free(state);
    }
}

// ---- row-wise ops --------------------------------------------------------------------------

// Rows x dim: small, one long row, and enough work to be threaded.
static const int row_cases[][2] = {{5, 37}, {3, 1000}, {64, 300}};

// Row sums in double in both; the cpu backend computes exp and the
// per-element maps in fp32 where ref uses double: a few fp32 ulps of O(1)
// (log-softmax: O(10)) values, 1e-6 absolute + 1e-5 relative.
#define ROW_RTOL 1e-5
#define ROW_ATOL 1e-6

static void test_l2_normalize(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < sizeof row_cases / sizeof *row_cases; i++) {
        const int rows = row_cases[i][0], dim = row_cases[i][1];
        const size_t n = (size_t)rows * dim;
        float *x = mirror_random_tensor(n, -1, 1, 8000 + i);
        // Row 1 is tiny: its norm is below eps, the clamped branch.
        for (int d = 0; d < dim; d++) x[dim + d] *= 1e-9f;
        const float *dy = mirror_random_tensor(n, -1, 1, 8100 + i);
        float *y_ref = mirror_nan_tensor(n), *y_fast = mirror_nan_tensor(n);
        float *norm_ref = mirror_nan_tensor(rows), *norm_fast = mirror_nan_tensor(rows);
        ref->op.l2_normalize_forward(ref, rows, dim, x, 1e-6f, y_ref, norm_ref);
        fast->op.l2_normalize_forward(fast, rows, dim, D(x), 1e-6f, D(y_fast), D(norm_fast));
        H(y_fast), H(norm_fast);
        mirror_expect_close("l2 normalize y", n, y_fast, y_ref, ROW_RTOL, ROW_ATOL);
        mirror_expect_close("l2 normalize norm", rows, norm_fast, norm_ref, SUM_TOL, 0);
        float *dx_ref = mirror_nan_tensor(n), *dx_fast = mirror_nan_tensor(n);
        ref->op.l2_normalize_backward(ref, rows, dim, y_ref, norm_ref, dy, 1e-6f, dx_ref);
        fast->op.l2_normalize_backward(fast, rows, dim, D(y_ref), D(norm_ref), D(dy), 1e-6f,
                                       D(dx_fast));
        H(dx_fast);
        // dx = (dy - y <y, dy>) / norm: O(1) / norm, and 1e6 * dy in the
        // clamped row, so the absolute part scales with 1 / norm too.
        for (int r = 0; r < rows; r++) {
            const double scale = 1.0 / fmax(norm_ref[r], 1e-6);
            mirror_expect_close("l2 normalize dx", dim, dx_fast + (size_t)r * dim,
                         dx_ref + (size_t)r * dim, ROW_RTOL, ROW_ATOL * scale);
        }
        mirror_free(state);
    }
}

static void test_softmax(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < sizeof row_cases / sizeof *row_cases; i++) {
        const int rows = row_cases[i][0], dim = row_cases[i][1];
        const size_t n = (size_t)rows * dim;
        const float scale = 1.0f / 0.07f;  // a contrastive temperature: large logits
        const float *x = mirror_random_tensor(n, -1, 1, 9000 + i);
        const float *dy = mirror_random_tensor(n, -1, 1, 9100 + i);
        float *p_ref = mirror_nan_tensor(n), *p_fast = mirror_nan_tensor(n);
        ref->op.softmax_forward(ref, rows, dim, x, scale, p_ref);
        fast->op.softmax_forward(fast, rows, dim, D(x), scale, D(p_fast));
        H(p_fast);
        mirror_expect_close("softmax", n, p_fast, p_ref, ROW_RTOL, ROW_ATOL);
        float *l_ref = mirror_nan_tensor(n), *l_fast = mirror_nan_tensor(n);
        ref->op.log_softmax_forward(ref, rows, dim, x, scale, l_ref);
        fast->op.log_softmax_forward(fast, rows, dim, D(x), scale, D(l_fast));
        H(l_fast);
        mirror_expect_close("log_softmax", n, l_fast, l_ref, ROW_RTOL, ROW_ATOL);

        float *dx_ref = mirror_nan_tensor(n), *dx_fast = mirror_nan_tensor(n);
        ref->op.softmax_backward(ref, rows, dim, p_ref, dy, scale, dx_ref);
        fast->op.softmax_backward(fast, rows, dim, D(p_ref), D(dy), scale, D(dx_fast));
        H(dx_fast);
        // scale (~14) multiplies every term.
        mirror_expect_close("softmax backward", n, dx_fast, dx_ref, ROW_RTOL, ROW_ATOL * scale);
        ref->op.log_softmax_backward(ref, rows, dim, l_ref, dy, scale, dx_ref);
        fast->op.log_softmax_backward(fast, rows, dim, D(l_ref), D(dy), scale, D(dx_fast));
        H(dx_fast);
        // softmax * sum(dy): sum(dy) grows like sqrt(dim).
        mirror_expect_close("log_softmax backward", n, dx_fast, dx_ref, ROW_RTOL,
                     ROW_ATOL * scale * sqrt((double)dim));
        mirror_free(state);
    }
}

// ---- optimizer updates and input -------------------------------------------------------------

// A step gate in backend memory (backend.h GATE_*): multiplier, skip.
static float *mirror_gate(float multiplier, float skip) {
    float *gate = mirror_tensor(GATE_FOUND);
    gate[GATE_MULTIPLIER] = multiplier, gate[GATE_SKIP] = skip;
    gate[GATE_UNIT] = 1.0f, gate[GATE_UNIT_SKIP] = skip;
    return gate;
}

// A copy of fp32 state (parameters, moments) as it is: mirror_copy would
// round it to the group's 16-bit dtype, which these never are.
static float *fp32_copy(const float *x, size_t n) {
    float *p = mirror_tensor(n);
    memcpy(p, x, n * sizeof *p);
    return p;
}

// The same fp32 expressions in the same order in both backends (bias
// corrections in double in both): identical results, tolerance 0. Every
// update reads a gate; a skipping gate changes nothing.
static void test_optimizer_updates(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < sizeof element_counts / sizeof *element_counts; i++) {
        const size_t n = element_counts[i];
        const float *open = mirror_gate(1.0f, 0.0f), *scaled = mirror_gate(0.625f, 0.0f);
        const float *skip = mirror_gate(0.0f, 1.0f);
        const float *grad = mirror_random_tensor(n, -1, 1, 10000 + i);
        float *p_ref = mirror_random_tensor(n, -1, 1, 10100 + i), *p_fast = mirror_copy(p_ref, n);
        float *m_ref = mirror_random_tensor(n, -1, 1, 10200 + i), *m_fast = mirror_copy(m_ref, n);
        float *v_ref = mirror_random_tensor(n, 0, 1, 10300 + i), *v_fast = mirror_copy(v_ref, n);
        for (int variant = 0; variant < 8; variant++) {  // nesterov x first_step x gate
            const int nesterov = variant & 1, first = (variant >> 1) & 1;
            const float *gate = variant >> 2 ? scaled : open;
            ref->op.sgd_update(ref, n, p_ref, grad, gate, m_ref, 0.1f, 0.9f, 1e-4f, nesterov,
                               first);
            fast->op.sgd_update(fast, n, D(p_fast), D(grad), D(gate), D(m_fast), 0.1f, 0.9f,
                                1e-4f, nesterov, first);
            H(p_fast), H(m_fast);
        }
        mirror_expect_close("sgd param", n, p_fast, p_ref, 0, 0);
        mirror_expect_close("sgd momentum", n, m_fast, m_ref, 0, 0);
        // The step count in backend memory (bias corrections derived there;
        // CUDA's double pow is within 2 ulps of the C library's, far below
        // what reaches a float).
        float *steps = mirror_tensor(2);
        steps[0] = 1.0f, steps[1] = 7.0f;
        for (int t = 0; t < 2; t++) {
            const float *gate = t == 0 ? open : scaled;
            ref->op.adamw_update(ref, n, p_ref, grad, gate, m_ref, v_ref, 1e-3f, 0.9, 0.999,
                                 1e-8f, 0.05f, steps + t);
            fast->op.adamw_update(fast, n, D(p_fast), D(grad), D(gate), D(m_fast), D(v_fast),
                                  1e-3f, 0.9, 0.999, 1e-8f, 0.05f, D(steps + t));
            H(p_fast), H(m_fast), H(v_fast);
        }
        mirror_expect_close("adamw param", n, p_fast, p_ref, 0, 0);
        mirror_expect_close("adamw m", n, m_fast, m_ref, 0, 0);
        mirror_expect_close("adamw v", n, v_fast, v_ref, 0, 0);
        ref->op.ema_update(ref, n, m_ref, p_ref, 0.996f);
        fast->op.ema_update(fast, n, D(m_fast), D(p_ref), 0.996f);
        H(m_fast);
        mirror_expect_close("ema", n, m_fast, m_ref, 0, 0);
        // LARS direction from sums in backend memory: adapted, then (a zero
        // gradient norm) the gradient itself.
        float *sums = mirror_tensor(2);
        for (int variant = 3; variant >= 0; variant--) {  // adapted x gate
            const int adapted = variant & 1;
            const float *gate = variant >> 1 ? scaled : open;
            sums[0] = 37.5f, sums[1] = adapted ? 0.25f : 0.0f;
            float *d_ref = mirror_nan_tensor(n), *d_fast = mirror_nan_tensor(n);
            ref->op.lars_direction(ref, n, p_ref, grad, gate, sums, 1e-6f, 0.001f, 1e-8f, d_ref);
            fast->op.lars_direction(fast, n, D(p_ref), D(grad), D(gate), D(sums), 1e-6f, 0.001f,
                                    1e-8f, D(d_fast));
            H(d_fast);
            mirror_expect_close("lars direction", n, d_fast, d_ref, 0, 0);
            if (!adapted && gate == open)
                mirror_expect_close("lars direction = grad", n, d_ref, grad, 0, 0);
            else if (adapted) assert_true(fabsf(d_ref[0]) < fabsf(grad[0]) || grad[0] == 0.0f);
        }
        // A skipping gate: nothing moves, whatever the gradient holds.
        float *nan_grad = mirror_nan_tensor(n);
        float *p_before = fp32_copy(p_fast, n), *m_before = fp32_copy(m_fast, n);
        float *v_before = fp32_copy(v_fast, n);
        fast->op.sgd_update(fast, n, D(p_fast), D(nan_grad), D(skip), D(m_fast), 0.1f, 0.9f,
                            1e-4f, 0, 0);
        fast->op.adamw_update(fast, n, D(p_fast), D(nan_grad), D(skip), D(m_fast), D(v_fast),
                              1e-3f, 0.9, 0.999, 1e-8f, 0.05f, D(steps + 1));
        H(p_fast), H(m_fast), H(v_fast);
        mirror_expect_close("skipped param", n, p_fast, p_before, 0, 0);
        mirror_expect_close("skipped momentum", n, m_fast, m_before, 0, 0);
        mirror_expect_close("skipped v", n, v_fast, v_before, 0, 0);
        mirror_free(state);
    }
}

// Closing a gate: the same rule (scalar_rules.h) on the host and in a
// kernel, so the same floats; with a loss scaler's 1/scale read on the
// device in the last two cases.
static void test_step_gate(void **state) {
    NEED_FAST_BACKEND();
    const int groups = 5;
    const float cases[][5] = {  // scale, max_norm, found, a square not finite (1), unscale
        {1.0f, 0.0f, 0, 0, 0}, {0.25f, 0.5f, 0, 0, 0}, {0.5f, 1e6f, 0, 0, 0},
        {1.0f, 1.0f, 2, 0, 0}, {1.0f, 1.0f, 0, 1, 0}, {0.5f, 0.5f, 0, 0, 1.0f / 65536.0f},
        {1.0f, 0.0f, 0, 0, 0.125f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        float *gate_ref = mirror_random_tensor(GATE_SQUARES + groups, 0, 40, 10400 + c);
        gate_ref[GATE_FOUND] = cases[c][2];
        if (cases[c][3]) gate_ref[GATE_SQUARES + 3] = INFINITY;
        float *gate_fast = mirror_copy(gate_ref, GATE_SQUARES + groups);
        float *unscale = NULL;
        if (cases[c][4] != 0.0f) *(unscale = mirror_tensor(1)) = cases[c][4];
        ref->op.step_gate(ref, gate_ref, groups, cases[c][0], unscale, cases[c][1]);
        fast->op.step_gate(fast, D(gate_fast), groups, cases[c][0], D(unscale), cases[c][1]);
        H(gate_fast);
        mirror_expect_close("step gate", GATE_FOUND, gate_fast, gate_ref, 0, 0);
        const int skip = cases[c][2] != 0 || cases[c][3] != 0;
        assert_true(gate_ref[GATE_SKIP] == (float)skip);
        if (!skip && cases[c][1] == 0.5f) assert_true(gate_ref[GATE_MULTIPLIER] < cases[c][0]);
        if (!skip && cases[c][1] == 1e6f) assert_true(gate_ref[GATE_MULTIPLIER] == cases[c][0]);
    }
    mirror_free(state);
}

// scalar_combine: the same double expression rounded once (scalar_rules.h)
// on the host and in a kernel; with and without b, aliased, NaN.
static void test_scalar_combine(void **state) {
    NEED_FAST_BACKEND();
    float *x = mirror_random_tensor(8, -10, 10, 10500);
    x[6] = NAN, x[7] = -0.0f;
    const float cases[][5] = {  // alpha, a index, beta, b index (-1: NULL), divisor
        {1, 0, 1, 1, 1}, {-1, 2, 0, -1, 37}, {0.7f, 3, -2.5f, 4, 3}, {1, 5, 1, 5, 1},
        {1, 6, 1, 0, 1}, {1, 7, 0, -1, 4}, {-0.125f, 1, 1e-3f, 2, 1e-3f},
    };
    const size_t count = sizeof cases / sizeof *cases;
    float *y_ref = mirror_nan_tensor(count), *y_fast = mirror_nan_tensor(count);
    for (size_t c = 0; c < count; c++) {
        const float *a = x + (int)cases[c][1];
        const float *b = cases[c][3] < 0 ? NULL : x + (int)cases[c][3];
        ref->op.scalar_combine(ref, cases[c][0], a, cases[c][2], b, cases[c][4], y_ref + c);
        fast->op.scalar_combine(fast, cases[c][0], D(a), cases[c][2], D(b), cases[c][4],
                                D(y_fast + c));
        H(y_fast);
    }
    assert_true(isnan(y_ref[4]) && isnan(y_fast[4]));  // NaN + x
    y_ref[4] = y_fast[4] = 0.0f;
    mirror_expect_close("scalar_combine", count, y_fast, y_ref, 0, 0);
    assert_true(signbit(y_fast[5]));  // -0 / 4 without a b term stays -0
    // y aliases a: x[0] += x[1], twice
    float *z = mirror_copy(x, 2), *z_ref = mirror_copy(x, 2);
    float *z_device = D(z);  // uploaded once: the second call must see the first's result
    for (int i = 0; i < 2; i++) {
        ref->op.scalar_combine(ref, 1.0f, z_ref, 1.0f, z_ref + 1, 1.0f, z_ref);
        fast->op.scalar_combine(fast, 1.0f, z_device, 1.0f, z_device + 1, 1.0f, z_device);
    }
    H(z);
    mirror_expect_close("scalar_combine in place", 1, z, z_ref, 0, 0);
}

// Host slots: the record of one step is read while the next one is queued
// (two slots, each filled behind the work queued before it).
static void test_host_slots(void **state) {
    NEED_FAST_BACKEND();
    ErrorMessage err = {{0}};
    enum { N = 1000 };
    HostSlot *slots[2];
    for (int i = 0; i < 2; i++)
        if (!(slots[i] = fast->op.host_slot_create(fast, N * sizeof(float), &err)))
            fail_msg("%s", err.text);
    float *x = mirror_random_tensor(N, -1, 1, 10600);
    float *record = mirror_nan_tensor(N);
    float *device = D(record);
    for (int step = 0; step < 4; step++) {
        // "step": record = x * (step + 1), then queued into its slot
        fast->op.axpby(fast, N, (float)(step + 1), D(x), 0.0f, device);
        fast->op.host_slot_fill(fast, slots[step & 1], device, N * sizeof(float));
        if (step == 0) continue;
        const float *previous = fast->op.host_slot_wait(fast, slots[(step - 1) & 1]);
        for (int i = 0; i < N; i++)
            if (previous[i] != (float)step * x[i]) fail_msg("slot of step %d [%d]", step - 1, i);
    }
    const float *last = fast->op.host_slot_wait(fast, slots[1]);
    for (int i = 0; i < N; i++) assert_true(last[i] == 4.0f * x[i]);
    for (int i = 0; i < 2; i++) fast->op.host_slot_free(fast, slots[i]);
}

static void test_normalize_u8(void **state) {
    NEED_FAST_BACKEND();
    const size_t pixels = 3 * 7001;  // odd, threaded
    uint8_t *x = mirror_buffer(pixels * 3);
    for (size_t i = 0; i < pixels * 3; i++) x[i] = (uint8_t)((i * 37 + i / 5) & 255);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    float *y_ref = mirror_nan_tensor(pixels * 3), *y_fast = mirror_nan_tensor(pixels * 3);
    ref->op.normalize_u8(ref, pixels, x, mean, std, (Act *)y_ref);
    fast->op.normalize_u8(fast, pixels, D(x), mean, std, DA(y_fast));
    HA(y_fast);
    // Same three fp32 operations in the same order (then one rounding): identical.
    mirror_expect_close("normalize_u8", pixels * 3, y_fast, y_ref, 0, 0);
}

static void test_normalize_f32(void **state) {
    NEED_FAST_BACKEND();
    const int channels = 5;  // not 3: the deep path's channel counts
    const size_t pixels = 4001, values = pixels * channels;
    float *x = mirror_tensor(values);
    for (size_t i = 0; i < values; i++) x[i] = (float)((i * 37 + i / 5) % 65536) / 65535.0f;
    const float mean[5] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f}, std[5] = {0.5f, 0.25f, 1.0f, 2.0f, 0.3f};
    float *y_ref = mirror_nan_tensor(values), *y_fast = mirror_nan_tensor(values);
    ref->op.normalize_f32(ref, pixels, channels, x, mean, std, (Act *)y_ref);
    fast->op.normalize_f32(fast, pixels, channels, D(x), mean, std, DA(y_fast));
    HA(y_fast);
    // Same two fp32 operations in the same order (then one rounding): identical.
    mirror_expect_close("normalize_f32", values, y_fast, y_ref, 0, 0);
    // and each value is that formula, the channel by position (within the
    // rounding of a 16-bit activation dtype: bf16 keeps 8 bits)
    for (size_t i = 0; i < 2 * channels; i++) {
        const float expect = (x[i] - mean[i % channels]) / std[i % channels];
        assert_true(fabsf(y_ref[i] - expect) <= 1e-2f * fabsf(expect) + 1e-6f);
    }
}

static void test_default_threads(void **state) {
    NEED_FAST_BACKEND();
    if (strcmp(fast->name, "cpu") != 0) skip();  // a cpu backend matter
    ErrorMessage err;
    Backend *all = backend_create("cpu", 0, &err);
    assert_non_null(all);
    assert_true(all->threads >= 1);
    assert_string_equal(all->name, "cpu");
    backend_destroy(all);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_conv_3x3, mirror_free),
        cmocka_unit_test_teardown(test_conv_1x1, mirror_free),
        cmocka_unit_test_teardown(test_conv_7x7_stem, mirror_free),
        cmocka_unit_test_teardown(test_gemm, mirror_free),
        cmocka_unit_test_teardown(test_bias_and_column_sums, mirror_free),
        cmocka_unit_test_teardown(test_elementwise, mirror_free),
        cmocka_unit_test_teardown(test_gelu, mirror_free),
        cmocka_unit_test_teardown(test_reductions, mirror_free),
        cmocka_unit_test_teardown(test_maxpool, mirror_free),
        cmocka_unit_test_teardown(test_avgpool, mirror_free),
        cmocka_unit_test_teardown(test_l2_normalize, mirror_free),
        cmocka_unit_test_teardown(test_softmax, mirror_free),
        cmocka_unit_test_teardown(test_optimizer_updates, mirror_free),
        cmocka_unit_test_teardown(test_step_gate, mirror_free),
        cmocka_unit_test_teardown(test_scalar_combine, mirror_free),
        cmocka_unit_test_teardown(test_host_slots, mirror_free),
        cmocka_unit_test_teardown(test_normalize_u8, mirror_free),
        cmocka_unit_test_teardown(test_normalize_f32, mirror_free),
        cmocka_unit_test(test_default_threads),
    };
    return mirror_run_groups_16bit(tests, sizeof tests / sizeof tests[0]);
}
