// The fast backends against the ref backend (the oracle), op by op, on
// random inputs of awkward shapes: odd sizes, batch 1, stride 2, padding,
// 1x1 / 3x3 / 7x7 kernels, channel counts that are not multiples of 8 or
// 16, and sizes on both sides of the threshold where the cpu backend goes
// multi-threaded. Every test runs for the cpu backend and again for the cuda
// backend, which is skipped (reported, not passed) where no GPU works
// (backend_mirror.h: the D() / H() twins of host buffers).
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

#include "backend_mirror.h"

// ---- convolution ---------------------------------------------------------------------------

typedef struct ConvCase {
    int batch, height, width, in_channels, out_channels, kernel, stride, padding;
} ConvCase;

// Conv outputs are fp32 sums of `terms` products of values in [-1, 1]; both
// backends round each partial sum but in different orders (oneDNN blocks
// over channels and pixels), so the difference grows like sqrt(terms) *
// eps(fp32) * |partial sums|. Allowed: 1e-6 * sqrt(terms) absolute (~15x
// that estimate) + 1e-5 relative.
static void expect_conv_close(const char *label, size_t n, const float *actual,
                              const float *expected, double terms) {
    expect_close(label, n, actual, expected, 1e-5, 1e-6 * sqrt(terms));
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
    const float *x = random_tensor(x_n, -1, 1, seed);
    const float *w = random_tensor(w_n, -1, 1, seed + 1);
    const float *w_other = random_tensor(w_n, -1, 1, seed + 2);
    const float *dy = random_tensor(y_n, -1, 1, seed + 3);
    float *y_ref = nan_tensor(y_n), *y_fast = nan_tensor(y_n);
    float *dx_ref = nan_tensor(x_n), *dx_fast = nan_tensor(x_n);
    // dw accumulates (+=): both start from the same non-zero values.
    float *dw_ref = random_tensor(w_n, -1, 1, seed + 4), *dw_fast = copy_of(dw_ref, w_n);

    ref->op.conv2d_forward(ref, ref_plan, x, w, y_ref);
    // A first call with other weights: the plan must not keep stale ones.
    fast->op.conv2d_forward(fast, fast_plan, D(x), D(w_other), D(y_fast));
    fast->op.conv2d_forward(fast, fast_plan, D(x), D(w), D(y_fast));
    H(y_fast);
    expect_conv_close("conv forward", y_n, y_fast, y_ref,
                      (double)s.kernel * s.kernel * s.in_channels);

    ref->op.conv2d_backward_data(ref, ref_plan, dy, w, dx_ref);
    fast->op.conv2d_backward_data(fast, fast_plan, D(dy), D(w), D(dx_fast));
    H(dx_fast);
    expect_conv_close("conv backward data", x_n, dx_fast, dx_ref,
                      (double)s.kernel * s.kernel * s.out_channels);

    ref->op.conv2d_backward_weights(ref, ref_plan, x, dy, dw_ref);
    fast->op.conv2d_backward_weights(fast, fast_plan, D(x), D(dy), D(dw_fast));
    H(dw_fast);
    expect_conv_close("conv backward weights", w_n, dw_fast, dw_ref,
                      (double)s.batch * s.out_height * s.out_width);

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

static void test_conv_7x7_stem(void **state) {
    NEED_FAST_BACKEND();
    check_conv_case((ConvCase){2, 23, 21, 3, 8, 7, 2, 3}, 70);
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
    const float *a = random_tensor(a_n, -1, 1, seed), *b = random_tensor(b_n, -1, 1, seed + 1);
    float *c_ref = random_tensor(c_n, -1, 1, seed + 2), *c_fast = copy_of(c_ref, c_n);
    ref->op.gemm(ref, transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c_ref, ldc);
    fast->op.gemm(fast, transpose_a, transpose_b, m, n, k, alpha, D(a), lda, D(b), ldb, beta,
                  D(c_fast), ldc);
    H(c_fast);
    // The padding columns of C (beyond n) must be left alone: compared too.
    expect_close("gemm", c_n, c_fast, c_ref, 1e-5, 1e-6 * sqrt((double)k));
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

// ---- batch norm ---------------------------------------------------------------------------

typedef struct NormCase {
    size_t rows;
    int channels;
} NormCase;

// Rows x channels around the cpu backend's channel blocks (16 .. 64), its
// threading threshold, its batch-norm row chunks (32, uneven splits between
// threads), channel strips (256) and groups (1024); rows = 1 is batch norm
// 1d on one sample.
static const NormCase norm_cases[] = {{70, 13},   {1, 5},     {324, 64}, {37, 100},
                                      {150, 200}, {1001, 67}, {45, 300}, {19, 1100}};

// Statistics: both accumulate in double (two passes), so they differ only by
// the summation order and the final rounding to float: 1e-6 relative and
// absolute. y and dx: the cpu backend applies a per-channel fp32 affine map
// (x * scale + shift) where ref works in double; values are O(1..10), so a
// few fp32 ulps of the largest term: 1e-5 absolute + 1e-5 relative.
#define NORM_STATS_TOL 1e-6
#define NORM_MAP_TOL 1e-5

// dgamma and dbeta: the cpu backend sums fp32 within chunks of 8 rows and
// double across chunks (ref: double throughout), so its error is a random
// walk of fp32 roundings growing like sqrt(rows): ~2e-6 measured at 1001
// rows of O(1) terms. Allowed: NORM_STATS_TOL (1 + sqrt(rows / 64)), 2.5x
// that at 1001 rows; a lost row or a wrong term is off by O(1).
static double gradient_sum_tol(size_t rows) {
    return NORM_STATS_TOL * (1.0 + sqrt((double)rows / 64.0));
}

static void test_batchnorm_forward(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < sizeof norm_cases / sizeof *norm_cases; i++) {
        const size_t rows = norm_cases[i].rows;
        const int c = norm_cases[i].channels;
        const size_t n = rows * c;
        const uint64_t seed = 1000 + 10 * i;
        // An offset mean (x in [0.5, 2.5)) exercises the two-pass variance.
        const float *x = random_tensor(n, 0.5f, 2.5f, seed);
        const float *gamma = random_tensor(c, 0.5f, 1.5f, seed + 1);
        const float *beta = random_tensor(c, -0.5f, 0.5f, seed + 2);
        float *run_mean_ref = random_tensor(c, -1, 1, seed + 3), *run_mean_fast = copy_of(run_mean_ref, c);
        float *run_var_ref = random_tensor(c, 0.5f, 2, seed + 4), *run_var_fast = copy_of(run_var_ref, c);
        float *y_ref = nan_tensor(n), *y_fast = nan_tensor(n);
        float *mean_ref = nan_tensor(c), *mean_fast = nan_tensor(c);
        float *inv_ref = nan_tensor(c), *inv_fast = nan_tensor(c);
        ref->op.batchnorm_forward_train(ref, rows, c, x, gamma, beta, 0.1f, 1e-5f, y_ref,
                                        mean_ref, inv_ref, run_mean_ref, run_var_ref);
        fast->op.batchnorm_forward_train(fast, rows, c, D(x), D(gamma), D(beta), 0.1f, 1e-5f,
                                         D(y_fast), D(mean_fast), D(inv_fast), D(run_mean_fast),
                                         D(run_var_fast));
        H(y_fast), H(mean_fast), H(inv_fast), H(run_mean_fast), H(run_var_fast);
        expect_close("bn train y", n, y_fast, y_ref, NORM_MAP_TOL, NORM_MAP_TOL);
        expect_close("bn save_mean", c, mean_fast, mean_ref, NORM_STATS_TOL, NORM_STATS_TOL);
        // inv_std reaches 1/sqrt(eps) ~ 316 with one row: relative only matters.
        expect_close("bn save_inv_std", c, inv_fast, inv_ref, NORM_STATS_TOL, NORM_STATS_TOL);
        expect_close("bn running_mean", c, run_mean_fast, run_mean_ref, NORM_STATS_TOL,
                     NORM_STATS_TOL);
        expect_close("bn running_var", c, run_var_fast, run_var_ref, NORM_STATS_TOL,
                     NORM_STATS_TOL);

        float *e_ref = nan_tensor(n), *e_fast = nan_tensor(n);
        ref->op.batchnorm_forward_eval(ref, rows, c, x, gamma, beta, run_mean_ref, run_var_ref,
                                       1e-5f, e_ref);
        fast->op.batchnorm_forward_eval(fast, rows, c, D(x), D(gamma), D(beta), D(run_mean_ref),
                                        D(run_var_ref), 1e-5f, D(e_fast));
        H(e_fast);
        expect_close("bn eval y", n, e_fast, e_ref, NORM_MAP_TOL, NORM_MAP_TOL);
        free_buffers(state);
    }
}

static void test_batchnorm_backward(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < sizeof norm_cases / sizeof *norm_cases; i++) {
        const size_t rows = norm_cases[i].rows;
        const int c = norm_cases[i].channels;
        const size_t n = rows * c;
        const uint64_t seed = 2000 + 10 * i;
        const float *x = random_tensor(n, -1, 1, seed);
        const float *dy = random_tensor(n, -1, 1, seed + 1);
        const float *gamma = random_tensor(c, 0.5f, 1.5f, seed + 2);
        const float *beta = random_tensor(c, -0.5f, 0.5f, seed + 3);
        float *y = tensor(n), *mean = tensor(c), *inv_std = tensor(c);
        float *run_mean = random_tensor(c, -1, 1, seed + 4), *run_var = random_tensor(c, 1, 2, seed + 5);
        ref->op.batchnorm_forward_train(ref, rows, c, x, gamma, beta, 0.1f, 1e-5f, y, mean,
                                        inv_std, run_mean, run_var);
        float *dx_ref = nan_tensor(n), *dx_fast = nan_tensor(n);
        // Parameter gradients accumulate: both start from the same values.
        float *dgamma_ref = random_tensor(c, -1, 1, seed + 6), *dgamma_fast = copy_of(dgamma_ref, c);
        float *dbeta_ref = random_tensor(c, -1, 1, seed + 7), *dbeta_fast = copy_of(dbeta_ref, c);
        ref->op.batchnorm_backward(ref, rows, c, x, dy, gamma, mean, inv_std, dx_ref, dgamma_ref,
                                   dbeta_ref);
        fast->op.batchnorm_backward(fast, rows, c, D(x), D(dy), D(gamma), D(mean), D(inv_std),
                                    D(dx_fast), D(dgamma_fast), D(dbeta_fast));
        H(dx_fast), H(dgamma_fast), H(dbeta_fast);
        // dx = a dy + b x + c in fp32 where the three terms can cancel; rows
        // = 1 has inv_std ~ 316 (x - mean = 0, so still O(1) terms).
        expect_close("bn dx", n, dx_fast, dx_ref, NORM_MAP_TOL, NORM_MAP_TOL);
        expect_close("bn dgamma", c, dgamma_fast, dgamma_ref, NORM_STATS_TOL,
                     gradient_sum_tol(rows));
        expect_close("bn dbeta", c, dbeta_fast, dbeta_ref, NORM_STATS_TOL, gradient_sum_tol(rows));
        free_buffers(state);
    }
}

// ---- batch norm fused with ReLU and residual add -------------------------------------------

// The fused ops on both backends: ref's against the plain composition it
// stands for (identical, tolerance 0: same fp32 operations), cpu's against
// ref's (the tolerances above; the residual add and ReLU are exact fp32
// operations on values that already carry that error).
static void check_batchnorm_relu_forward(size_t rows, int c, int with_residual, uint64_t seed) {
    const size_t n = rows * c;
    const float *x = random_tensor(n, 0.5f, 2.5f, seed);
    const float *residual = with_residual ? random_tensor(n, -1, 1, seed + 1) : NULL;
    const float *gamma = random_tensor(c, 0.5f, 1.5f, seed + 2);
    const float *beta = random_tensor(c, -0.5f, 0.5f, seed + 3);
    float *run_mean[3], *run_var[3], *y[3], *mean[3], *inv_std[3];  // composition, ref, fast
    for (int k = 0; k < 3; k++) {
        run_mean[k] = random_tensor(c, -1, 1, seed + 4);
        run_var[k] = random_tensor(c, 0.5f, 2, seed + 5);
        y[k] = nan_tensor(n);
        mean[k] = nan_tensor(c);
        inv_std[k] = nan_tensor(c);
    }
    ref->op.batchnorm_forward_train(ref, rows, c, x, gamma, beta, 0.1f, 1e-5f, y[0], mean[0],
                                    inv_std[0], run_mean[0], run_var[0]);
    if (residual) ref->op.add(ref, n, y[0], residual, y[0]);
    ref->op.relu_forward(ref, n, y[0], y[0]);
    ref->op.batchnorm_relu_forward_train(ref, rows, c, x, residual, gamma, beta, 0.1f, 1e-5f, y[1],
                                         mean[1], inv_std[1], run_mean[1], run_var[1]);
    fast->op.batchnorm_relu_forward_train(fast, rows, c, D(x), D(residual), D(gamma), D(beta), 0.1f,
                                          1e-5f, D(y[2]), D(mean[2]), D(inv_std[2]),
                                          D(run_mean[2]), D(run_var[2]));
    H(y[2]), H(mean[2]), H(inv_std[2]), H(run_mean[2]), H(run_var[2]);
    expect_close("ref bn+relu train y", n, y[1], y[0], 0, 0);
    expect_close("ref bn+relu running_var", c, run_var[1], run_var[0], 0, 0);
    expect_close("bn+relu train y", n, y[2], y[1], NORM_MAP_TOL, NORM_MAP_TOL);
    expect_close("bn+relu save_mean", c, mean[2], mean[1], NORM_STATS_TOL, NORM_STATS_TOL);
    expect_close("bn+relu save_inv_std", c, inv_std[2], inv_std[1], NORM_STATS_TOL,
                 NORM_STATS_TOL);
    expect_close("bn+relu running_mean", c, run_mean[2], run_mean[1], NORM_STATS_TOL,
                 NORM_STATS_TOL);
    expect_close("bn+relu running_var", c, run_var[2], run_var[1], NORM_STATS_TOL,
                 NORM_STATS_TOL);

    // Evaluation, with the running statistics just updated.
    ref->op.batchnorm_forward_eval(ref, rows, c, x, gamma, beta, run_mean[0], run_var[0], 1e-5f,
                                   y[0]);
    if (residual) ref->op.add(ref, n, y[0], residual, y[0]);
    ref->op.relu_forward(ref, n, y[0], y[0]);
    ref->op.batchnorm_relu_forward_eval(ref, rows, c, x, residual, gamma, beta, run_mean[0],
                                        run_var[0], 1e-5f, y[1]);
    fast->op.batchnorm_relu_forward_eval(fast, rows, c, D(x), D(residual), D(gamma), D(beta),
                                         D(run_mean[0]), D(run_var[0]), 1e-5f, D(y[2]));
    H(y[2]);
    expect_close("ref bn+relu eval y", n, y[1], y[0], 0, 0);
    expect_close("bn+relu eval y", n, y[2], y[1], NORM_MAP_TOL, NORM_MAP_TOL);
}

static void test_batchnorm_relu_forward(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < sizeof norm_cases / sizeof *norm_cases; i++)
        for (int with_residual = 0; with_residual < 2; with_residual++) {
            check_batchnorm_relu_forward(norm_cases[i].rows, norm_cases[i].channels,
                                         with_residual, 6000 + 10 * i + with_residual);
            free_buffers(state);
        }
}

// with_dresidual: 0 none, 1 its own buffer, 2 aliasing dy (as ResNet blocks use it).
static void check_batchnorm_relu_backward(size_t rows, int c, int with_dresidual, uint64_t seed) {
    const size_t n = rows * c;
    const float *x = random_tensor(n, -1, 1, seed);
    const float *residual = random_tensor(n, -1, 1, seed + 1);
    const float *gamma = random_tensor(c, 0.5f, 1.5f, seed + 2);
    const float *beta = random_tensor(c, -0.5f, 0.5f, seed + 3);
    float *y = tensor(n), *mean = tensor(c), *inv_std = tensor(c);
    float *run_mean = random_tensor(c, -1, 1, seed + 4), *run_var = random_tensor(c, 1, 2, seed + 5);
    // y = relu(bn(x) + residual): about half the mask is 0.
    ref->op.batchnorm_relu_forward_train(ref, rows, c, x, residual, gamma, beta, 0.1f, 1e-5f, y,
                                         mean, inv_std, run_mean, run_var);
    const float *dy = random_tensor(n, -1, 1, seed + 6);
    float *dx[3], *dgamma[3], *dbeta[3], *dz[3];  // composition, ref, fast
    for (int k = 0; k < 3; k++) {
        dx[k] = nan_tensor(n);
        dgamma[k] = random_tensor(c, -1, 1, seed + 7);  // += : the same start
        dbeta[k] = random_tensor(c, -1, 1, seed + 8);
        dz[k] = with_dresidual == 2 ? copy_of(dy, n) : nan_tensor(n);
    }
    ref->op.relu_backward(ref, n, y, dy, dz[0]);
    ref->op.batchnorm_backward(ref, rows, c, x, dz[0], gamma, mean, inv_std, dx[0], dgamma[0],
                               dbeta[0]);
    ref->op.batchnorm_relu_backward(ref, rows, c, x, y, with_dresidual == 2 ? dz[1] : dy, gamma,
                                    mean, inv_std, dx[1], dgamma[1], dbeta[1],
                                    with_dresidual ? dz[1] : NULL);
    fast->op.batchnorm_relu_backward(fast, rows, c, D(x), D(y), D(with_dresidual == 2 ? dz[2] : dy),
                                     D(gamma), D(mean), D(inv_std), D(dx[2]), D(dgamma[2]),
                                     D(dbeta[2]), D(with_dresidual ? dz[2] : NULL));
    H(dx[2]), H(dgamma[2]), H(dbeta[2]), H(dz[2]);
    expect_close("ref bn+relu dx", n, dx[1], dx[0], 0, 0);
    expect_close("ref bn+relu dgamma", c, dgamma[1], dgamma[0], 0, 0);
    expect_close("ref bn+relu dbeta", c, dbeta[1], dbeta[0], 0, 0);
    expect_close("bn+relu dx", n, dx[2], dx[1], NORM_MAP_TOL, NORM_MAP_TOL);
    expect_close("bn+relu dgamma", c, dgamma[2], dgamma[1], NORM_STATS_TOL,
                 gradient_sum_tol(rows));
    expect_close("bn+relu dbeta", c, dbeta[2], dbeta[1], NORM_STATS_TOL, gradient_sum_tol(rows));
    if (with_dresidual) {  // the masked copy of dy: exact
        expect_close("ref bn+relu dresidual", n, dz[1], dz[0], 0, 0);
        expect_close("bn+relu dresidual", n, dz[2], dz[0], 0, 0);
    }
}

static void test_batchnorm_relu_backward(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < sizeof norm_cases / sizeof *norm_cases; i++)
        for (int with_dresidual = 0; with_dresidual < 3; with_dresidual++) {
            check_batchnorm_relu_backward(norm_cases[i].rows, norm_cases[i].channels,
                                          with_dresidual, 7000 + 10 * i + with_dresidual);
            free_buffers(state);
        }
}

// ---- column reductions and bias ------------------------------------------------------------

// Double accumulation in both backends: summation order and final rounding
// only, 1e-6 relative + 1e-6 absolute (for sums that cancel to ~0).
#define SUM_TOL 1e-6

static void test_bias_and_column_sums(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < sizeof norm_cases / sizeof *norm_cases; i++) {
        const size_t rows = norm_cases[i].rows;
        const int c = norm_cases[i].channels;
        const size_t n = rows * c;
        const float *x = random_tensor(n, -1, 1, 3000 + i);
        const float *bias = random_tensor(c, -1, 1, 3100 + i);
        float *y_ref = copy_of(x, n), *y_fast = copy_of(x, n);
        ref->op.bias_add(ref, rows, c, bias, y_ref);
        fast->op.bias_add(fast, rows, c, D(bias), D(y_fast));
        H(y_fast);
        // One fp32 addition per element in both: identical results.
        expect_close("bias_add", n, y_fast, y_ref, 0, 0);

        float *db_ref = random_tensor(c, -1, 1, 3200 + i), *db_fast = copy_of(db_ref, c);
        ref->op.bias_backward(ref, rows, c, x, db_ref);
        fast->op.bias_backward(fast, rows, c, D(x), D(db_fast));
        H(db_fast);
        expect_close("bias_backward (+=)", c, db_fast, db_ref, SUM_TOL, SUM_TOL);

        float *s_ref = nan_tensor(c), *s_fast = nan_tensor(c);
        ref->op.column_sum(ref, rows, c, x, s_ref);
        fast->op.column_sum(fast, rows, c, D(x), D(s_fast));
        H(s_fast);
        expect_close("column_sum", c, s_fast, s_ref, SUM_TOL, SUM_TOL);
        free_buffers(state);
    }
    // Wider than one 65536-column chunk of the cuda backend's scratch (a
    // DINO head's output is 65536 wide).
    const size_t rows = 3;
    const int c = 70001;
    const float *x = random_tensor(rows * c, -1, 1, 3300);
    float *s_ref = nan_tensor(c), *s_fast = nan_tensor(c);
    ref->op.column_sum(ref, rows, c, x, s_ref);
    fast->op.column_sum(fast, rows, c, D(x), D(s_fast));
    H(s_fast);
    expect_close("column_sum wide", c, s_fast, s_ref, SUM_TOL, SUM_TOL);
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
        const float *a = random_tensor(n, -1, 1, 4000 + i), *b = random_tensor(n, -1, 1, 4100 + i);
        float *r = nan_tensor(n), *c = nan_tensor(n);
        ref->op.relu_forward(ref, n, a, r);
        fast->op.relu_forward(fast, n, D(a), D(c));
        H(c);
        expect_close("relu", n, c, r, 0, 0);
        float *in_place = copy_of(a, n);  // y may alias x
        fast->op.relu_forward(fast, n, D(in_place), D(in_place));
        H(in_place);
        expect_close("relu in place", n, in_place, r, 0, 0);

        ref->op.relu_backward(ref, n, r, b, r);  // dx aliases dy's buffer role: r = y here
        float *y = copy_of(c, n);
        fast->op.relu_backward(fast, n, D(y), D(b), D(c));
        H(c);
        expect_close("relu backward", n, c, r, 0, 0);

        ref->op.add(ref, n, a, b, r);
        fast->op.add(fast, n, D(a), D(b), D(c));
        H(c);
        expect_close("add", n, c, r, 0, 0);
        ref->op.mul(ref, n, a, b, r);
        fast->op.mul(fast, n, D(a), D(b), D(c));
        H(c);
        expect_close("mul", n, c, r, 0, 0);

        // beta = 0: y is not read (NaN in it must not leak through).
        float *y_ref = nan_tensor(n), *y_fast = nan_tensor(n);
        ref->op.axpby(ref, n, 0.5f, a, 0.0f, y_ref);
        fast->op.axpby(fast, n, 0.5f, D(a), 0.0f, D(y_fast));
        H(y_fast);
        expect_close("axpby beta 0", n, y_fast, y_ref, 0, 0);
        ref->op.axpby(ref, n, -1.5f, b, 0.75f, y_ref);
        fast->op.axpby(fast, n, -1.5f, D(b), 0.75f, D(y_fast));
        H(y_fast);
        expect_close("axpby", n, y_fast, y_ref, 0, 0);

        ref->op.fill(ref, y_ref, 3.25f, n);
        fast->op.fill(fast, D(y_fast), 3.25f, n);
        H(y_fast);
        expect_close("fill", n, y_fast, y_ref, 0, 0);
        free_buffers(state);
    }
}

// GELU: fp32 erfcf / expf in the fast backends, double in ref. The fp32
// functions of glibc and CUDA are within ~2 ulps, and the few fp32 products
// add as many: 1e-6 relative; the absolute part covers results near 0 (x
// near 0 or far left).
#define GELU_RTOL 1e-6
#define GELU_ATOL 1e-7

static void test_gelu(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < sizeof element_counts / sizeof *element_counts; i++) {
        const size_t n = element_counts[i];
        const float *x = random_tensor(n, -8, 8, 4200 + i), *dy = random_tensor(n, -1, 1, 4300 + i);
        float *r = nan_tensor(n), *c = nan_tensor(n);
        ref->op.gelu_forward(ref, n, x, r);
        fast->op.gelu_forward(fast, n, D(x), D(c));
        H(c);
        expect_close("gelu", n, c, r, GELU_RTOL, GELU_ATOL);
        ref->op.gelu_backward(ref, n, x, dy, r);
        fast->op.gelu_backward(fast, n, D(x), D(dy), D(c));
        H(c);
        expect_close("gelu backward", n, c, r, GELU_RTOL, GELU_ATOL);
        float *in_place = copy_of(dy, n);  // dx may alias dy
        fast->op.gelu_backward(fast, n, D(x), D(in_place), D(in_place));
        H(in_place);
        expect_close("gelu backward in place", n, in_place, c, 0, 0);
        free_buffers(state);
    }
}

// ---- reductions ----------------------------------------------------------------------------

static void test_reductions(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < sizeof element_counts / sizeof *element_counts; i++) {
        const size_t n = element_counts[i];
        float *a = random_tensor(n, -1, 1, 5000 + i), *b = random_tensor(n, -1, 1, 5100 + i);
        a[n / 2] = INFINITY;  // one non-finite value for count_nonfinite, then restored
        float *r = nan_tensor(4), *c = nan_tensor(4);
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
        expect_close("sum, sum_squares, dot, count_nonfinite", 4, c, r, SUM_TOL, SUM_TOL);
        assert_true(c[3] == 3.0f);
        free_buffers(state);
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
    float *x = tensor(x_n);
    if (with_ties) {  // values from {-1, -0.5, 0, 0.5, 1}: many equal maxima
        gradcheck_fill_uniform(x, x_n, -1, 1, seed);
        for (size_t i = 0; i < x_n; i++) x[i] = roundf(x[i] * 2) / 2;
    } else {
        gradcheck_fill_distinct(x, x_n, -1, 1e-3f, seed);
    }
    float *y_ref = nan_tensor(y_n), *y_fast = nan_tensor(y_n);
    int32_t *arg_ref = buffer(y_n * sizeof(int32_t)), *arg_fast = buffer(y_n * sizeof(int32_t));
    ref->op.maxpool_forward(ref, &s, x, y_ref, arg_ref);
    fast->op.maxpool_forward(fast, &s, D(x), D(y_fast), D(arg_fast));
    H(y_fast), H(arg_fast);
    // A max is a copy of an input, and ties pick the first in window order in
    // both: identical values and indices.
    expect_close("maxpool forward", y_n, y_fast, y_ref, 0, 0);
    for (size_t i = 0; i < y_n; i++) assert_int_equal(arg_fast[i], arg_ref[i]);

    const float *dy = random_tensor(y_n, -1, 1, seed + 1);
    float *dx_ref = nan_tensor(x_n), *dx_fast = nan_tensor(x_n);
    ref->op.maxpool_backward(ref, &s, dy, arg_ref, dx_ref);
    fast->op.maxpool_backward(fast, &s, D(dy), D(arg_ref), D(dx_fast));
    H(dx_fast);
    // Overlapping windows add in the same order (output index order within
    // a sample) in both: identical.
    expect_close("maxpool backward", x_n, dx_fast, dx_ref, 0, 0);
}

static void test_maxpool(void **state) {
    NEED_FAST_BACKEND();
    check_maxpool((PoolCase){2, 9, 9, 5, 3, 2, 1}, 0, 6000);    // ResNet's 3x3/2 pad 1, odd
    check_maxpool((PoolCase){1, 7, 6, 16, 2, 2, 0}, 0, 6100);   // batch 1, dropped tail
    check_maxpool((PoolCase){4, 16, 16, 64, 3, 2, 1}, 0, 6200); // threaded
    check_maxpool((PoolCase){2, 9, 9, 5, 3, 2, 1}, 1, 6300);    // ties
    check_maxpool((PoolCase){4, 16, 16, 64, 3, 2, 1}, 1, 6400); // ties, threaded
}

static void test_avgpool(void **state) {
    NEED_FAST_BACKEND();
    const int cases[][3] = {{1, 1, 7}, {3, 49, 13}, {8, 49, 100}, {2, 9, 2048}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int batch = cases[i][0], pixels = cases[i][1], channels = cases[i][2];
        const size_t x_n = (size_t)batch * pixels * channels, y_n = (size_t)batch * channels;
        const float *x = random_tensor(x_n, -1, 1, 7000 + i);
        float *y_ref = nan_tensor(y_n), *y_fast = nan_tensor(y_n);
        ref->op.avgpool_forward(ref, batch, pixels, channels, x, y_ref);
        fast->op.avgpool_forward(fast, batch, pixels, channels, D(x), D(y_fast));
        H(y_fast);
        expect_close("avgpool forward", y_n, y_fast, y_ref, SUM_TOL, SUM_TOL);
        float *dx_ref = nan_tensor(x_n), *dx_fast = nan_tensor(x_n);
        ref->op.avgpool_backward(ref, batch, pixels, channels, y_ref, dx_ref);
        fast->op.avgpool_backward(fast, batch, pixels, channels, D(y_ref), D(dx_fast));
        H(dx_fast);
        // One fp32 division per element in both: identical.
        expect_close("avgpool backward", x_n, dx_fast, dx_ref, 0, 0);
        free_buffers(state);
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
        float *x = random_tensor(n, -1, 1, 8000 + i);
        // Row 1 is tiny: its norm is below eps, the clamped branch.
        for (int d = 0; d < dim; d++) x[dim + d] *= 1e-9f;
        const float *dy = random_tensor(n, -1, 1, 8100 + i);
        float *y_ref = nan_tensor(n), *y_fast = nan_tensor(n);
        float *norm_ref = nan_tensor(rows), *norm_fast = nan_tensor(rows);
        ref->op.l2_normalize_forward(ref, rows, dim, x, 1e-6f, y_ref, norm_ref);
        fast->op.l2_normalize_forward(fast, rows, dim, D(x), 1e-6f, D(y_fast), D(norm_fast));
        H(y_fast), H(norm_fast);
        expect_close("l2 normalize y", n, y_fast, y_ref, ROW_RTOL, ROW_ATOL);
        expect_close("l2 normalize norm", rows, norm_fast, norm_ref, SUM_TOL, 0);
        float *dx_ref = nan_tensor(n), *dx_fast = nan_tensor(n);
        ref->op.l2_normalize_backward(ref, rows, dim, y_ref, norm_ref, dy, 1e-6f, dx_ref);
        fast->op.l2_normalize_backward(fast, rows, dim, D(y_ref), D(norm_ref), D(dy), 1e-6f,
                                       D(dx_fast));
        H(dx_fast);
        // dx = (dy - y <y, dy>) / norm: O(1) / norm, and 1e6 * dy in the
        // clamped row, so the absolute part scales with 1 / norm too.
        for (int r = 0; r < rows; r++) {
            const double scale = 1.0 / fmax(norm_ref[r], 1e-6);
            expect_close("l2 normalize dx", dim, dx_fast + (size_t)r * dim,
                         dx_ref + (size_t)r * dim, ROW_RTOL, ROW_ATOL * scale);
        }
        free_buffers(state);
    }
}

static void test_softmax(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < sizeof row_cases / sizeof *row_cases; i++) {
        const int rows = row_cases[i][0], dim = row_cases[i][1];
        const size_t n = (size_t)rows * dim;
        const float scale = 1.0f / 0.07f;  // a contrastive temperature: large logits
        const float *x = random_tensor(n, -1, 1, 9000 + i);
        const float *dy = random_tensor(n, -1, 1, 9100 + i);
        float *p_ref = nan_tensor(n), *p_fast = nan_tensor(n);
        ref->op.softmax_forward(ref, rows, dim, x, scale, p_ref);
        fast->op.softmax_forward(fast, rows, dim, D(x), scale, D(p_fast));
        H(p_fast);
        expect_close("softmax", n, p_fast, p_ref, ROW_RTOL, ROW_ATOL);
        float *l_ref = nan_tensor(n), *l_fast = nan_tensor(n);
        ref->op.log_softmax_forward(ref, rows, dim, x, scale, l_ref);
        fast->op.log_softmax_forward(fast, rows, dim, D(x), scale, D(l_fast));
        H(l_fast);
        expect_close("log_softmax", n, l_fast, l_ref, ROW_RTOL, ROW_ATOL);

        float *dx_ref = nan_tensor(n), *dx_fast = nan_tensor(n);
        ref->op.softmax_backward(ref, rows, dim, p_ref, dy, scale, dx_ref);
        fast->op.softmax_backward(fast, rows, dim, D(p_ref), D(dy), scale, D(dx_fast));
        H(dx_fast);
        // scale (~14) multiplies every term.
        expect_close("softmax backward", n, dx_fast, dx_ref, ROW_RTOL, ROW_ATOL * scale);
        ref->op.log_softmax_backward(ref, rows, dim, l_ref, dy, scale, dx_ref);
        fast->op.log_softmax_backward(fast, rows, dim, D(l_ref), D(dy), scale, D(dx_fast));
        H(dx_fast);
        // softmax * sum(dy): sum(dy) grows like sqrt(dim).
        expect_close("log_softmax backward", n, dx_fast, dx_ref, ROW_RTOL,
                     ROW_ATOL * scale * sqrt((double)dim));
        free_buffers(state);
    }
}

// ---- optimizer updates and input -------------------------------------------------------------

// The same fp32 expressions in the same order in both backends (bias
// corrections in double in both): identical results, tolerance 0.
static void test_optimizer_updates(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < sizeof element_counts / sizeof *element_counts; i++) {
        const size_t n = element_counts[i];
        const float *grad = random_tensor(n, -1, 1, 10000 + i);
        float *p_ref = random_tensor(n, -1, 1, 10100 + i), *p_fast = copy_of(p_ref, n);
        float *m_ref = random_tensor(n, -1, 1, 10200 + i), *m_fast = copy_of(m_ref, n);
        float *v_ref = random_tensor(n, 0, 1, 10300 + i), *v_fast = copy_of(v_ref, n);
        for (int variant = 0; variant < 4; variant++) {  // nesterov x first_step
            const int nesterov = variant & 1, first = variant >> 1;
            ref->op.sgd_update(ref, n, p_ref, grad, m_ref, 0.1f, 0.9f, 1e-4f, nesterov, first);
            fast->op.sgd_update(fast, n, D(p_fast), D(grad), D(m_fast), 0.1f, 0.9f, 1e-4f,
                                nesterov, first);
            H(p_fast), H(m_fast);
        }
        expect_close("sgd param", n, p_fast, p_ref, 0, 0);
        expect_close("sgd momentum", n, m_fast, m_ref, 0, 0);
        for (int step = 1; step <= 7; step += 6) {
            ref->op.adamw_update(ref, n, p_ref, grad, m_ref, v_ref, 1e-3f, 0.9f, 0.999f, 1e-8f,
                                 0.05f, step);
            fast->op.adamw_update(fast, n, D(p_fast), D(grad), D(m_fast), D(v_fast), 1e-3f, 0.9f,
                                  0.999f, 1e-8f, 0.05f, step);
            H(p_fast), H(m_fast), H(v_fast);
        }
        expect_close("adamw param", n, p_fast, p_ref, 0, 0);
        expect_close("adamw m", n, m_fast, m_ref, 0, 0);
        expect_close("adamw v", n, v_fast, v_ref, 0, 0);
        ref->op.ema_update(ref, n, m_ref, p_ref, 0.996f);
        fast->op.ema_update(fast, n, D(m_fast), D(p_ref), 0.996f);
        H(m_fast);
        expect_close("ema", n, m_fast, m_ref, 0, 0);
        free_buffers(state);
    }
}

static void test_normalize_u8(void **state) {
    NEED_FAST_BACKEND();
    const size_t pixels = 3 * 7001;  // odd, threaded
    uint8_t *x = buffer(pixels * 3);
    for (size_t i = 0; i < pixels * 3; i++) x[i] = (uint8_t)((i * 37 + i / 5) & 255);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    float *y_ref = nan_tensor(pixels * 3), *y_fast = nan_tensor(pixels * 3);
    ref->op.normalize_u8(ref, pixels, x, mean, std, y_ref);
    fast->op.normalize_u8(fast, pixels, D(x), mean, std, D(y_fast));
    H(y_fast);
    // Same three fp32 operations in the same order: identical.
    expect_close("normalize_u8", pixels * 3, y_fast, y_ref, 0, 0);
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
        cmocka_unit_test_teardown(test_conv_3x3, free_buffers),
        cmocka_unit_test_teardown(test_conv_1x1, free_buffers),
        cmocka_unit_test_teardown(test_conv_7x7_stem, free_buffers),
        cmocka_unit_test_teardown(test_gemm, free_buffers),
        cmocka_unit_test_teardown(test_batchnorm_forward, free_buffers),
        cmocka_unit_test_teardown(test_batchnorm_backward, free_buffers),
        cmocka_unit_test_teardown(test_batchnorm_relu_forward, free_buffers),
        cmocka_unit_test_teardown(test_batchnorm_relu_backward, free_buffers),
        cmocka_unit_test_teardown(test_bias_and_column_sums, free_buffers),
        cmocka_unit_test_teardown(test_elementwise, free_buffers),
        cmocka_unit_test_teardown(test_gelu, free_buffers),
        cmocka_unit_test_teardown(test_reductions, free_buffers),
        cmocka_unit_test_teardown(test_maxpool, free_buffers),
        cmocka_unit_test_teardown(test_avgpool, free_buffers),
        cmocka_unit_test_teardown(test_l2_normalize, free_buffers),
        cmocka_unit_test_teardown(test_softmax, free_buffers),
        cmocka_unit_test_teardown(test_optimizer_updates, free_buffers),
        cmocka_unit_test_teardown(test_normalize_u8, free_buffers),
        cmocka_unit_test(test_default_threads),
    };
    return FAST_BACKEND_GROUPS(tests);
}
