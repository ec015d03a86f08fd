// Batch norm of the fast backends against the ref backend (the oracle):
// training and evaluation forward and backward, the versions fused with
// ReLU and residual add, and the split ops of synchronised BatchNorm, on
// rows x channels shapes around the cpu backend's blocks and threads. Every
// test runs for the cpu backend and again for the cuda backend
// (tests/backend_mirror.h), and for cuda in fp16 and bf16 against ref in
// the same dtype: activations (y, dx) then within mirror_act_tol of ref's,
// statistics and parameter gradients (fp32 from the same inputs) within
// the fp32 tolerances.
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

// ---- batch norm ---------------------------------------------------------------------------

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

// Training and evaluation forward of x (rows, c) against ref; frees the
// mirrors (x included) when done.
static void check_batchnorm_forward(void **state, size_t rows, int c, const float *x,
                                    uint64_t seed) {
    const size_t n = rows * c;
    {
        const float *gamma = mirror_random_tensor(c, 0.5f, 1.5f, seed + 1);
        const float *beta = mirror_random_tensor(c, -0.5f, 0.5f, seed + 2);
        float *run_mean_ref = mirror_random_tensor(c, -1, 1, seed + 3), *run_mean_fast = mirror_copy(run_mean_ref, c);
        float *run_var_ref = mirror_random_tensor(c, 0.5f, 2, seed + 4), *run_var_fast = mirror_copy(run_var_ref, c);
        float *y_ref = mirror_nan_tensor(n), *y_fast = mirror_nan_tensor(n);
        float *mean_ref = mirror_nan_tensor(c), *mean_fast = mirror_nan_tensor(c);
        float *inv_ref = mirror_nan_tensor(c), *inv_fast = mirror_nan_tensor(c);
        ref->op.batchnorm_forward_train(ref, rows, c, (const Act *)x, gamma, beta, 0.1f, 1e-5f, (Act *)y_ref,
                                        mean_ref, inv_ref, run_mean_ref, run_var_ref);
        fast->op.batchnorm_forward_train(fast, rows, c, DA(x), D(gamma), D(beta), 0.1f, 1e-5f,
                                         DA(y_fast), D(mean_fast), D(inv_fast), D(run_mean_fast),
                                         D(run_var_fast));
        HA(y_fast), H(mean_fast), H(inv_fast), H(run_mean_fast), H(run_var_fast);
        mirror_expect_close("bn train y", n, y_fast, y_ref, mirror_act_tol(NORM_MAP_TOL),
                            mirror_act_tol(NORM_MAP_TOL));
        mirror_expect_close("bn save_mean", c, mean_fast, mean_ref, NORM_STATS_TOL, NORM_STATS_TOL);
        // inv_std reaches 1/sqrt(eps) ~ 316 with one row: relative only matters.
        mirror_expect_close("bn save_inv_std", c, inv_fast, inv_ref, NORM_STATS_TOL,
                            NORM_STATS_TOL);
        mirror_expect_close("bn running_mean", c, run_mean_fast, run_mean_ref, NORM_STATS_TOL,
                     NORM_STATS_TOL);
        mirror_expect_close("bn running_var", c, run_var_fast, run_var_ref, NORM_STATS_TOL,
                     NORM_STATS_TOL);

        float *e_ref = mirror_nan_tensor(n), *e_fast = mirror_nan_tensor(n);
        ref->op.batchnorm_forward_eval(ref, rows, c, (const Act *)x, gamma, beta, run_mean_ref, run_var_ref,
                                       1e-5f, (Act *)e_ref);
        fast->op.batchnorm_forward_eval(fast, rows, c, DA(x), D(gamma), D(beta), D(run_mean_ref),
                                        D(run_var_ref), 1e-5f, DA(e_fast));
        HA(e_fast);
        mirror_expect_close("bn eval y", n, e_fast, e_ref, mirror_act_tol(NORM_MAP_TOL),
                            mirror_act_tol(NORM_MAP_TOL));
        mirror_free(state);
    }
}

static void test_batchnorm_forward(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < NORM_CASE_COUNT; i++) {
        const size_t rows = norm_cases[i].rows;
        const int c = norm_cases[i].channels;
        const uint64_t seed = 1000 + 10 * i;
        // An offset mean (x in [0.5, 2.5)) exercises the variance's cancellation.
        check_batchnorm_forward(state, rows, c, mirror_random_tensor(rows * c, 0.5f, 2.5f, seed),
                                seed);
    }
}

// Means 1e8 standard deviations away from 0 (1e4 and -2.5e3, spread
// +-0.01; in fp32 about 20 levels of x per channel): a variance from plain
// sums of x and x^2 loses every digit here even in double (the cuda
// backend's one-pass statistics shift each channel by one of its values).
// In fp16 and bf16 the channels round to constants: a variance of 0.
static void test_batchnorm_forward_offset(void **state) {
    NEED_FAST_BACKEND();
    const size_t sizes[2][2] = {{1001, 67}, {324, 64}};
    for (int k = 0; k < 2; k++) {
        const size_t rows = sizes[k][0];
        const int c = (int)sizes[k][1];
        float *x = mirror_random_tensor(rows * c, -0.01f, 0.01f, 4000 + k);
        for (size_t i = 0; i < rows * c; i++) x[i] += i % c % 2 ? 1e4f : -2.5e3f;
        mirror_round(x, rows * c);
        check_batchnorm_forward(state, rows, c, x, 4000 + k);
    }
}

static void test_batchnorm_backward(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < NORM_CASE_COUNT; i++) {
        const size_t rows = norm_cases[i].rows;
        const int c = norm_cases[i].channels;
        const size_t n = rows * c;
        const uint64_t seed = 2000 + 10 * i;
        const float *x = mirror_random_tensor(n, -1, 1, seed);
        const float *dy = mirror_random_tensor(n, -1, 1, seed + 1);
        const float *gamma = mirror_random_tensor(c, 0.5f, 1.5f, seed + 2);
        const float *beta = mirror_random_tensor(c, -0.5f, 0.5f, seed + 3);
        float *y = mirror_tensor(n), *mean = mirror_tensor(c), *inv_std = mirror_tensor(c);
        float *run_mean = mirror_random_tensor(c, -1, 1, seed + 4), *run_var = mirror_random_tensor(c, 1, 2, seed + 5);
        ref->op.batchnorm_forward_train(ref, rows, c, (const Act *)x, gamma, beta, 0.1f, 1e-5f,
                                        (Act *)y, mean, inv_std, run_mean, run_var);
        float *dx_ref = mirror_nan_tensor(n), *dx_fast = mirror_nan_tensor(n);
        // Parameter gradients accumulate: both start from the same values.
        float *dgamma_ref = mirror_random_tensor(c, -1, 1, seed + 6), *dgamma_fast = mirror_copy(dgamma_ref, c);
        float *dbeta_ref = mirror_random_tensor(c, -1, 1, seed + 7), *dbeta_fast = mirror_copy(dbeta_ref, c);
        ref->op.batchnorm_backward(ref, rows, c, (const Act *)x, (const Act *)dy, gamma, mean, inv_std, (Act *)dx_ref, dgamma_ref,
                                   dbeta_ref);
        fast->op.batchnorm_backward(fast, rows, c, DA(x), DA(dy), D(gamma), D(mean), D(inv_std),
                                    DA(dx_fast), D(dgamma_fast), D(dbeta_fast));
        HA(dx_fast), H(dgamma_fast), H(dbeta_fast);
        // dx = a dy + b x + c in fp32 where the three terms can cancel; rows
        // = 1 has inv_std ~ 316 (x - mean = 0, so still O(1) terms).
        mirror_expect_close("bn dx", n, dx_fast, dx_ref, mirror_act_tol(NORM_MAP_TOL),
                            mirror_act_tol(NORM_MAP_TOL));
        mirror_expect_close("bn dgamma", c, dgamma_fast, dgamma_ref, NORM_STATS_TOL,
                     gradient_sum_tol(rows));
        mirror_expect_close("bn dbeta", c, dbeta_fast, dbeta_ref, NORM_STATS_TOL,
                            gradient_sum_tol(rows));
        mirror_free(state);
    }
}

// ---- batch norm fused with ReLU and residual add -------------------------------------------

// The fused ops on both backends: ref's against the plain composition it
// stands for (identical, tolerance 0: same fp32 operations), cpu's against
// ref's (the tolerances above; the residual add and ReLU are exact fp32
// operations on values that already carry that error).
static void check_batchnorm_relu_forward(size_t rows, int c, int with_residual, uint64_t seed) {
    const size_t n = rows * c;
    const float *x = mirror_random_tensor(n, 0.5f, 2.5f, seed);
    const float *residual = with_residual ? mirror_random_tensor(n, -1, 1, seed + 1) : NULL;
    const float *gamma = mirror_random_tensor(c, 0.5f, 1.5f, seed + 2);
    const float *beta = mirror_random_tensor(c, -0.5f, 0.5f, seed + 3);
    float *run_mean[3], *run_var[3], *y[3], *mean[3], *inv_std[3];  // composition, ref, fast
    for (int k = 0; k < 3; k++) {
        run_mean[k] = mirror_random_tensor(c, -1, 1, seed + 4);
        run_var[k] = mirror_random_tensor(c, 0.5f, 2, seed + 5);
        y[k] = mirror_nan_tensor(n);
        mean[k] = mirror_nan_tensor(c);
        inv_std[k] = mirror_nan_tensor(c);
    }
    // the composition in fp32, rounded once at the end as the fused op stores
    ref->op.batchnorm_forward_train_f32(ref, rows, c, x, gamma, beta, 0.1f, 1e-5f, y[0], mean[0],
                                        inv_std[0], run_mean[0], run_var[0]);
    if (residual) ref->op.add(ref, n, y[0], residual, y[0]);
    ref->op.relu_forward_f32(ref, n, y[0], y[0]);
    mirror_round(y[0], n);
    ref->op.batchnorm_relu_forward_train(ref, rows, c, (const Act *)x, (const Act *)residual, gamma, beta, 0.1f, 1e-5f, (Act *)y[1],
                                         mean[1], inv_std[1], run_mean[1], run_var[1]);
    fast->op.batchnorm_relu_forward_train(fast, rows, c, DA(x), DA(residual), D(gamma), D(beta), 0.1f,
                                          1e-5f, DA(y[2]), D(mean[2]), D(inv_std[2]),
                                          D(run_mean[2]), D(run_var[2]));
    HA(y[2]), H(mean[2]), H(inv_std[2]), H(run_mean[2]), H(run_var[2]);
    mirror_expect_close("ref bn+relu train y", n, y[1], y[0], 0, 0);
    mirror_expect_close("ref bn+relu running_var", c, run_var[1], run_var[0], 0, 0);
    mirror_expect_close("bn+relu train y", n, y[2], y[1], mirror_act_tol(NORM_MAP_TOL),
                        mirror_act_tol(NORM_MAP_TOL));
    mirror_expect_close("bn+relu save_mean", c, mean[2], mean[1], NORM_STATS_TOL, NORM_STATS_TOL);
    mirror_expect_close("bn+relu save_inv_std", c, inv_std[2], inv_std[1], NORM_STATS_TOL,
                 NORM_STATS_TOL);
    mirror_expect_close("bn+relu running_mean", c, run_mean[2], run_mean[1], NORM_STATS_TOL,
                 NORM_STATS_TOL);
    mirror_expect_close("bn+relu running_var", c, run_var[2], run_var[1], NORM_STATS_TOL,
                 NORM_STATS_TOL);

    // Evaluation, with the running statistics just updated.
    // (no fp32 twin of the evaluation: in 16 bits this composition rounds
    // twice, so the comparison with it is fp32's alone)
    ref->op.batchnorm_forward_eval(ref, rows, c, (const Act *)x, gamma, beta, run_mean[0], run_var[0], 1e-5f,
                                   (Act *)y[0]);
    if (residual) ref->op.add(ref, n, y[0], residual, y[0]);
    ref->op.relu_forward(ref, n, (const Act *)y[0], (Act *)y[0]);
    ref->op.batchnorm_relu_forward_eval(ref, rows, c, (const Act *)x, (const Act *)residual, gamma, beta, run_mean[0],
                                        run_var[0], 1e-5f, (Act *)y[1]);
    fast->op.batchnorm_relu_forward_eval(fast, rows, c, DA(x), DA(residual), D(gamma), D(beta),
                                         D(run_mean[0]), D(run_var[0]), 1e-5f, DA(y[2]));
    HA(y[2]);
    if (mirror_dtype == COMPUTE_F32) mirror_expect_close("ref bn+relu eval y", n, y[1], y[0], 0, 0);
    mirror_expect_close("bn+relu eval y", n, y[2], y[1], mirror_act_tol(NORM_MAP_TOL),
                        mirror_act_tol(NORM_MAP_TOL));
}

static void test_batchnorm_relu_forward(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < NORM_CASE_COUNT; i++)
        for (int with_residual = 0; with_residual < 2; with_residual++) {
            check_batchnorm_relu_forward(norm_cases[i].rows, norm_cases[i].channels,
                                         with_residual, 6000 + 10 * i + with_residual);
            mirror_free(state);
        }
}

// A batchnorm_relu_backward's gradients, [0] the expectation, [1] ref's
// (exactly [0]) and [2] the fast backend's (within the op's tolerance).
static void expect_bn_relu_gradients(const char *what, size_t rows, int c, float *const dx[3],
                                     float *const dgamma[3], float *const dbeta[3]) {
    char label[96];
    const size_t n = rows * c;
    snprintf(label, sizeof label, "ref %s dx", what);
    mirror_expect_close(label, n, dx[1], dx[0], 0, 0);
    snprintf(label, sizeof label, "ref %s dgamma", what);
    mirror_expect_close(label, c, dgamma[1], dgamma[0], 0, 0);
    snprintf(label, sizeof label, "ref %s dbeta", what);
    mirror_expect_close(label, c, dbeta[1], dbeta[0], 0, 0);
    snprintf(label, sizeof label, "%s dx", what);
    mirror_expect_close(label, n, dx[2], dx[1], mirror_act_tol(NORM_MAP_TOL),
                        mirror_act_tol(NORM_MAP_TOL));
    snprintf(label, sizeof label, "%s dgamma", what);
    mirror_expect_close(label, c, dgamma[2], dgamma[1], NORM_STATS_TOL, gradient_sum_tol(rows));
    snprintf(label, sizeof label, "%s dbeta", what);
    mirror_expect_close(label, c, dbeta[2], dbeta[1], NORM_STATS_TOL, gradient_sum_tol(rows));
}

// with_dresidual: 0 none, 1 its own buffer, 2 aliasing dy (as ResNet blocks use it).
static void check_batchnorm_relu_backward(size_t rows, int c, int with_dresidual, uint64_t seed) {
    const size_t n = rows * c;
    const float *x = mirror_random_tensor(n, -1, 1, seed);
    const float *residual = mirror_random_tensor(n, -1, 1, seed + 1);
    const float *gamma = mirror_random_tensor(c, 0.5f, 1.5f, seed + 2);
    const float *beta = mirror_random_tensor(c, -0.5f, 0.5f, seed + 3);
    float *y = mirror_tensor(n), *mean = mirror_tensor(c), *inv_std = mirror_tensor(c);
    float *run_mean = mirror_random_tensor(c, -1, 1, seed + 4), *run_var = mirror_random_tensor(c, 1, 2, seed + 5);
    // y = relu(bn(x) + residual): about half the mask is 0.
    ref->op.batchnorm_relu_forward_train(ref, rows, c, (const Act *)x, (const Act *)residual, gamma,
                                         beta, 0.1f, 1e-5f, (Act *)y, mean, inv_std, run_mean,
                                         run_var);
    const float *dy = mirror_random_tensor(n, -1, 1, seed + 6);
    float *dx[3], *dgamma[3], *dbeta[3], *dz[3];  // composition, ref, fast
    for (int k = 0; k < 3; k++) {
        dx[k] = mirror_nan_tensor(n);
        dgamma[k] = mirror_random_tensor(c, -1, 1, seed + 7);  // += : the same start
        dbeta[k] = mirror_random_tensor(c, -1, 1, seed + 8);
        dz[k] = with_dresidual == 2 ? mirror_copy(dy, n) : mirror_nan_tensor(n);
    }
    ref->op.relu_backward(ref, n, (const Act *)y, (const Act *)dy, (Act *)dz[0]);
    ref->op.batchnorm_backward(ref, rows, c, (const Act *)x, (const Act *)dz[0], gamma, mean,
                               inv_std, (Act *)dx[0], dgamma[0], dbeta[0]);
    ref->op.batchnorm_relu_backward(ref, rows, c, (const Act *)x, (const Act *)y,
                                    (const Act *)(with_dresidual == 2 ? dz[1] : dy), gamma, beta,
                                    mean, inv_std, (Act *)dx[1], dgamma[1], dbeta[1],
                                    (Act *)(with_dresidual ? dz[1] : NULL));
    fast->op.batchnorm_relu_backward(fast, rows, c, DA(x), DA(y), DA(with_dresidual == 2 ? dz[2] : dy),
                                     D(gamma), D(beta), D(mean), D(inv_std), DA(dx[2]),
                                     D(dgamma[2]), D(dbeta[2]), DA(with_dresidual ? dz[2] : NULL));
    HA(dx[2]), H(dgamma[2]), H(dbeta[2]);
    if (with_dresidual) HA(dz[2]);
    expect_bn_relu_gradients("bn+relu", rows, c, dx, dgamma, dbeta);
    if (with_dresidual) {  // the masked copy of dy: exact
        mirror_expect_close("ref bn+relu dresidual", n, dz[1], dz[0], 0, 0);
        mirror_expect_close("bn+relu dresidual", n, dz[2], dz[0], 0, 0);
    }
}

static void test_batchnorm_relu_backward(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < NORM_CASE_COUNT; i++)
        for (int with_dresidual = 0; with_dresidual < 3; with_dresidual++) {
            check_batchnorm_relu_backward(norm_cases[i].rows, norm_cases[i].channels,
                                          with_dresidual, 7000 + 10 * i + with_dresidual);
            mirror_free(state);
        }
}

// y NULL: the ReLU was a convolution's prologue (backend.h NormAffine) and
// the mask is fmaf(x, scale, shift) > 0 with the coefficients rounded to
// the dtype. Expected: the same op given that ReLU input as y, computed
// here on the host (ref: exactly; the fast backend: its own mask, so the
// tolerance of the op with y).
static void check_batchnorm_relu_backward_from_input(size_t rows, int c, uint64_t seed) {
    const size_t n = rows * c;
    const float *x = mirror_random_tensor(n, -1, 1, seed);
    const float *gamma = mirror_random_tensor(c, 0.5f, 1.5f, seed + 1);
    const float *beta = mirror_random_tensor(c, -0.5f, 0.5f, seed + 2);
    const float *mean = mirror_random_tensor(c, -0.3f, 0.3f, seed + 3);
    const float *inv_std = mirror_random_tensor(c, 0.8f, 3.0f, seed + 4);
    const float *dy = mirror_random_tensor(n, -1, 1, seed + 5);
    float *relu_input = mirror_tensor(n);
    mirror_prologue_input(rows, c, x, gamma, beta, mean, inv_std, relu_input);
    float *dx[3], *dgamma[3], *dbeta[3];  // ref with y, ref without, fast without
    for (int k = 0; k < 3; k++) {
        dx[k] = mirror_nan_tensor(n);
        dgamma[k] = mirror_random_tensor(c, -1, 1, seed + 6);
        dbeta[k] = mirror_random_tensor(c, -1, 1, seed + 7);
    }
    ref->op.batchnorm_relu_backward(ref, rows, c, (const Act *)x, (const Act *)relu_input,
                                    (const Act *)dy, gamma, beta, mean, inv_std, (Act *)dx[0],
                                    dgamma[0], dbeta[0], NULL);
    ref->op.batchnorm_relu_backward(ref, rows, c, (const Act *)x, NULL, (const Act *)dy, gamma,
                                    beta, mean, inv_std, (Act *)dx[1], dgamma[1], dbeta[1], NULL);
    fast->op.batchnorm_relu_backward(fast, rows, c, DA(x), NULL, DA(dy), D(gamma), D(beta),
                                     D(mean), D(inv_std), DA(dx[2]), D(dgamma[2]), D(dbeta[2]),
                                     NULL);
    HA(dx[2]), H(dgamma[2]), H(dbeta[2]);
    expect_bn_relu_gradients("bn+relu from input", rows, c, dx, dgamma, dbeta);
}

static void test_batchnorm_relu_backward_from_input(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < NORM_CASE_COUNT; i++) {
        check_batchnorm_relu_backward_from_input(norm_cases[i].rows, norm_cases[i].channels,
                                                 7500 + 10 * i);
        mirror_free(state);
    }
}


// ---- synchronised BatchNorm's split ops -------------------------------------------------

// The five ops of backend.h that synchronised BatchNorm chains around its
// all-reduces, each fed the same inputs on both backends (ref's output of
// the step before), so each op's own error is what is compared: sums and
// statistics as the plain batch norm's (NORM_STATS_TOL, gradient_sum_tol),
// maps as NORM_MAP_TOL. total_rows is 3 x rows, as if two more ranks had
// added theirs. relu_residual: the fused form (residual add, ReLU mask).
static void check_batchnorm_sync_split(size_t rows, int c, int relu_residual, uint64_t seed) {
    const size_t n = rows * c, total_rows = 3 * rows;
    const float *x = mirror_random_tensor(n, 0.5f, 2.5f, seed);
    const float *residual = relu_residual ? mirror_random_tensor(n, -1, 1, seed + 1) : NULL;
    const float *gamma = mirror_random_tensor(c, 0.5f, 1.5f, seed + 2);
    const float *beta = mirror_random_tensor(c, -0.5f, 0.5f, seed + 3);
    float *mean = mirror_tensor(c);
    for (int k = 0; k < c; k++) {
        double total = 0;
        for (size_t r = 0; r < rows; r++) total += x[r * c + k];
        mean[k] = (float)(total / (double)rows);
    }
    float *squares[2] = {mirror_nan_tensor(c), mirror_nan_tensor(c)};  // ref, fast
    ref->op.batchnorm_centered_squares(ref, rows, c, (const Act *)x, mean, squares[0]);
    fast->op.batchnorm_centered_squares(fast, rows, c, DA(x), D(mean), D(squares[1]));
    H(squares[1]);
    mirror_expect_close("sync bn squares", c, squares[1], squares[0], NORM_STATS_TOL,
                        NORM_STATS_TOL);

    // Statistics from ref's squares (in place: each backend its own copy).
    float *inv_std[2], *run_mean[2], *run_var[2];
    for (int k = 0; k < 2; k++) {
        inv_std[k] = mirror_copy(squares[0], c);
        run_mean[k] = mirror_random_tensor(c, -1, 1, seed + 4);
        run_var[k] = mirror_random_tensor(c, 0.5f, 2, seed + 5);
    }
    ref->op.batchnorm_finish_statistics(ref, c, total_rows, 0.1f, 1e-5f, mean, inv_std[0],
                                        run_mean[0], run_var[0]);
    fast->op.batchnorm_finish_statistics(fast, c, total_rows, 0.1f, 1e-5f, D(mean),
                                         D(inv_std[1]), D(run_mean[1]), D(run_var[1]));
    H(inv_std[1]), H(run_mean[1]), H(run_var[1]);
    mirror_expect_close("sync bn inv_std", c, inv_std[1], inv_std[0], NORM_STATS_TOL,
                        NORM_STATS_TOL);
    mirror_expect_close("sync bn running_mean", c, run_mean[1], run_mean[0], NORM_STATS_TOL,
                        NORM_STATS_TOL);
    mirror_expect_close("sync bn running_var", c, run_var[1], run_var[0], NORM_STATS_TOL,
                        NORM_STATS_TOL);

    float *y[2] = {mirror_nan_tensor(n), mirror_nan_tensor(n)};
    ref->op.batchnorm_forward_apply(ref, rows, c, (const Act *)x, (const Act *)residual, relu_residual, gamma, beta, mean,
                                    inv_std[0], (Act *)y[0]);
    fast->op.batchnorm_forward_apply(fast, rows, c, DA(x), DA(residual), relu_residual, D(gamma),
                                     D(beta), D(mean), D(inv_std[0]), DA(y[1]));
    HA(y[1]);
    mirror_expect_close("sync bn y", n, y[1], y[0], mirror_act_tol(NORM_MAP_TOL),
                        mirror_act_tol(NORM_MAP_TOL));

    // Backward: the ReLU mask is ref's output; dz_out into its own buffer.
    const float *relu_out = relu_residual ? y[0] : NULL;
    const float *dy = mirror_random_tensor(n, -1, 1, seed + 6);
    float *sums[2], *dgamma[2], *dbeta[2], *dz[2], *dx[2];
    for (int k = 0; k < 2; k++) {
        sums[k] = mirror_nan_tensor(2 * (size_t)c);
        dgamma[k] = mirror_random_tensor(c, -1, 1, seed + 7);  // += : the same start
        dbeta[k] = mirror_random_tensor(c, -1, 1, seed + 8);
        dz[k] = mirror_nan_tensor(n);
        dx[k] = mirror_nan_tensor(n);
    }
    ref->op.batchnorm_backward_reduce(ref, rows, c, (const Act *)x, (const Act *)relu_out, (const Act *)dy, (Act *)dz[0], mean, inv_std[0],
                                      dgamma[0], dbeta[0], sums[0]);
    fast->op.batchnorm_backward_reduce(fast, rows, c, DA(x), DA(relu_out), DA(dy), DA(dz[1]),
                                       D(mean), D(inv_std[0]), D(dgamma[1]), D(dbeta[1]),
                                       D(sums[1]));
    H(sums[1]), H(dgamma[1]), H(dbeta[1]), HA(dz[1]);
    mirror_expect_close("sync bn sums", 2 * (size_t)c, sums[1], sums[0], NORM_STATS_TOL,
                        gradient_sum_tol(rows));
    mirror_expect_close("sync bn dgamma", c, dgamma[1], dgamma[0], NORM_STATS_TOL,
                        gradient_sum_tol(rows));
    mirror_expect_close("sync bn dbeta", c, dbeta[1], dbeta[0], NORM_STATS_TOL,
                        gradient_sum_tol(rows));
    mirror_expect_close("sync bn dz", n, dz[1], dz[0], 0, 0);  // a masked copy: exact
    ref->op.batchnorm_backward_apply(ref, rows, total_rows, c, (const Act *)x,
                                     (const Act *)relu_out, (const Act *)dy, gamma, mean,
                                     inv_std[0], sums[0], (Act *)dx[0]);
    fast->op.batchnorm_backward_apply(fast, rows, total_rows, c, DA(x), DA(relu_out), DA(dy),
                                      D(gamma), D(mean), D(inv_std[0]), D(sums[0]), DA(dx[1]));
    HA(dx[1]);
    mirror_expect_close("sync bn dx", n, dx[1], dx[0], mirror_act_tol(NORM_MAP_TOL),
                        mirror_act_tol(NORM_MAP_TOL));
}

static void test_batchnorm_sync_split(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < NORM_CASE_COUNT; i++)
        for (int relu_residual = 0; relu_residual < 2; relu_residual++) {
            check_batchnorm_sync_split(norm_cases[i].rows, norm_cases[i].channels, relu_residual,
                                       8000 + 10 * i + relu_residual);
            mirror_free(state);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_batchnorm_forward, mirror_free),
        cmocka_unit_test_teardown(test_batchnorm_forward_offset, mirror_free),
        cmocka_unit_test_teardown(test_batchnorm_backward, mirror_free),
        cmocka_unit_test_teardown(test_batchnorm_relu_forward, mirror_free),
        cmocka_unit_test_teardown(test_batchnorm_relu_backward, mirror_free),
        cmocka_unit_test_teardown(test_batchnorm_relu_backward_from_input, mirror_free),
        cmocka_unit_test_teardown(test_batchnorm_sync_split, mirror_free),
    };
    return mirror_run_groups_16bit(tests, sizeof tests / sizeof tests[0]);
}
