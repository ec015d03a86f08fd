// The YOLO ops of backend.h (silu_forward / silu_backward, batch norm
// fused with the SiLU after it; C2PSA's position encoding runs on the
// depthwise ops, tests/test_backend_depthwise_ops.c): each fast backend
// against the ref backend (sizes past the threading threshold; the fused
// norm on batch norm's row x channel cases), the fused norm against ref's
// unfused composition, then the ref backend's gradients against central
// finite differences of its forward. Runs as a "cpu" and a "cuda" group
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

// Central differences with h = 1e-3: SiLU is smooth (O(h^2) truncation ~1e-6).
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

// ---- batch norm fused with the SiLU -----------------------------------------------------------

// The fused ops (fast backend's, and ref's own) against ref's unfused
// composition, which keeps the norm's output: forward train and eval as
// batchnorm_forward_* then silu_forward, backward as silu_backward of the
// kept output then batchnorm_backward. Statistics as batch norm's (1e-6);
// y and dx: the norm's fp32 map and fp32 exp against double, O(1) values:
// 1e-5; dgamma, dbeta (+=, from the same start): sums of rows terms each
// carrying SiLU's fp32 error: 1e-6 (1 + sqrt(rows / 16)), relative
// mirror_act_tol(1e-6) (in 16 bits each term dz is rounded to the dtype,
// and the composition's dz comes from the rounded norm output).
static void check_batchnorm_silu(size_t rows, int c, uint64_t seed) {
    const size_t n = rows * c;
    const float *x = mirror_random_tensor(n, -2, 3, seed);
    const float *gamma = mirror_random_tensor(c, 0.5f, 1.5f, seed + 1);
    const float *beta = mirror_random_tensor(c, -0.5f, 0.5f, seed + 2);
    float *y[3], *mean[3], *inv_std[3], *run_mean[3], *run_var[3];  // composition, ref, fast
    for (int k = 0; k < 3; k++) {
        y[k] = mirror_nan_tensor(n);
        mean[k] = mirror_nan_tensor(c);
        inv_std[k] = mirror_nan_tensor(c);
        run_mean[k] = mirror_random_tensor(c, -1, 1, seed + 3);
        run_var[k] = mirror_random_tensor(c, 0.5f, 2, seed + 4);
    }
    float *norm_out = mirror_nan_tensor(n);
    ref->op.batchnorm_forward_train(ref, rows, c, (const Act *)x, gamma, beta, 0.03f, 1e-3f,
                                    (Act *)norm_out, mean[0], inv_std[0], run_mean[0], run_var[0]);
    ref->op.silu_forward(ref, n, (const Act *)norm_out, (Act *)y[0]);
    ref->op.batchnorm_silu_forward_train(ref, rows, c, (const Act *)x, gamma, beta, 0.03f, 1e-3f,
                                         (Act *)y[1], mean[1], inv_std[1], run_mean[1],
                                         run_var[1]);
    fast->op.batchnorm_silu_forward_train(fast, rows, c, DA(x), D(gamma), D(beta), 0.03f, 1e-3f,
                                          DA(y[2]), D(mean[2]), D(inv_std[2]), D(run_mean[2]),
                                          D(run_var[2]));
    HA(y[2]), H(mean[2]), H(inv_std[2]), H(run_mean[2]), H(run_var[2]);
    const double map_tol = mirror_act_tol(1e-5), sum_tol = 1e-6 * (1.0 + sqrt(rows / 16.0));
    for (int k = 1; k < 3; k++) {
        const char *const labels[2][5] = {
            {"ref bn+silu y", "ref bn+silu mean", "ref bn+silu inv_std", "ref bn+silu running_mean",
             "ref bn+silu running_var"},
            {"bn+silu y", "bn+silu mean", "bn+silu inv_std", "bn+silu running_mean",
             "bn+silu running_var"}};
        mirror_expect_close(labels[k - 1][0], n, y[k], y[0], map_tol, map_tol);
        mirror_expect_close(labels[k - 1][1], c, mean[k], mean[0], 1e-6, 1e-6);
        mirror_expect_close(labels[k - 1][2], c, inv_std[k], inv_std[0], 1e-6, 1e-6);
        mirror_expect_close(labels[k - 1][3], c, run_mean[k], run_mean[0], 1e-6, 1e-6);
        mirror_expect_close(labels[k - 1][4], c, run_var[k], run_var[0], 1e-6, 1e-6);
    }

    // Evaluation with the running statistics.
    ref->op.batchnorm_forward_eval(ref, rows, c, (const Act *)x, gamma, beta, run_mean[0],
                                   run_var[0], 1e-3f, (Act *)norm_out);
    ref->op.silu_forward(ref, n, (const Act *)norm_out, (Act *)y[0]);
    fast->op.batchnorm_silu_forward_eval(fast, rows, c, DA(x), D(gamma), D(beta), D(run_mean[0]),
                                         D(run_var[0]), 1e-3f, DA(y[2]));
    HA(y[2]);
    mirror_expect_close("bn+silu eval y", n, y[2], y[0], map_tol, map_tol);

    // Backward from the statistics of the composition's forward.
    ref->op.batchnorm_forward_train(ref, rows, c, (const Act *)x, gamma, beta, 0.03f, 1e-3f,
                                    (Act *)norm_out, mean[0], inv_std[0], run_mean[0], run_var[0]);
    const float *dy = mirror_random_tensor(n, -1, 1, seed + 5);
    float *dx[3], *dz[3], *dgamma[3], *dbeta[3];
    for (int k = 0; k < 3; k++) {
        dx[k] = mirror_nan_tensor(n);
        dz[k] = mirror_nan_tensor(n);
        dgamma[k] = mirror_random_tensor(c, -1, 1, seed + 6);
        dbeta[k] = mirror_random_tensor(c, -1, 1, seed + 7);
    }
    ref->op.silu_backward(ref, n, (const Act *)norm_out, (const Act *)dy, (Act *)dz[0]);
    ref->op.batchnorm_backward(ref, rows, c, (const Act *)x, (const Act *)dz[0], gamma, mean[0],
                               inv_std[0], (Act *)dx[0], dgamma[0], dbeta[0]);
    ref->op.batchnorm_silu_backward(ref, rows, c, (const Act *)x, (const Act *)dy, gamma, beta,
                                    mean[0], inv_std[0], (Act *)dz[1], (Act *)dx[1], dgamma[1],
                                    dbeta[1]);
    fast->op.batchnorm_silu_backward(fast, rows, c, DA(x), DA(dy), D(gamma), D(beta), D(mean[0]),
                                     D(inv_std[0]), DA(dz[2]), DA(dx[2]), D(dgamma[2]),
                                     D(dbeta[2]));
    HA(dx[2]), H(dgamma[2]), H(dbeta[2]);
    for (int k = 1; k < 3; k++) {
        mirror_expect_close(k == 1 ? "ref bn+silu dx" : "bn+silu dx", n, dx[k], dx[0], map_tol,
                            map_tol);
        mirror_expect_close(k == 1 ? "ref bn+silu dgamma" : "bn+silu dgamma", c, dgamma[k],
                            dgamma[0], mirror_act_tol(1e-6), sum_tol);
        mirror_expect_close(k == 1 ? "ref bn+silu dbeta" : "bn+silu dbeta", c, dbeta[k],
                            dbeta[0], mirror_act_tol(1e-6), sum_tol);
    }
}

static void test_batchnorm_silu(void **state) {
    NEED_FAST_BACKEND();
    for (size_t i = 0; i < NORM_CASE_COUNT; i++) {
        check_batchnorm_silu(norm_cases[i].rows, norm_cases[i].channels, 300 + 10 * i);
        mirror_free(state);
    }
}

// loss = <p, silu(bn_train(x))> through ref's fused ops.
typedef struct NormSiluProblem {
    size_t rows;
    int channels;
    float *x, *gamma, *beta, *y, *mean, *inv_std, *run_mean, *run_var, *dz;
    const float *projection;
    int vary;  // 0 x, 1 gamma, 2 beta
} NormSiluProblem;

static double norm_silu_loss(void *context, const float *values) {
    NormSiluProblem *p = context;
    const float *x = p->vary == 0 ? values : p->x, *gamma = p->vary == 1 ? values : p->gamma;
    const float *beta = p->vary == 2 ? values : p->beta;
    ref->op.batchnorm_silu_forward_train(ref, p->rows, p->channels, (const Act *)x, gamma, beta,
                                         0.03f, 1e-3f, (Act *)p->y, p->mean, p->inv_std,
                                         p->run_mean, p->run_var);
    return gradcheck_project(p->rows * p->channels, p->y, p->projection);
}

static void test_batchnorm_silu_backward_fd(void **state) {
    NEED_FAST_BACKEND();
    const size_t rows = 2 * 3 * 3;
    const int c = 4;
    const size_t n = rows * c;
    NormSiluProblem p = {
        .rows = rows, .channels = c, .x = mirror_random_tensor(n, -2, 2, 50),
        .gamma = mirror_random_tensor(c, 0.5f, 1.5f, 51),
        .beta = mirror_random_tensor(c, -0.5f, 0.5f, 52), .y = mirror_tensor(n),
        .mean = mirror_tensor(c), .inv_std = mirror_tensor(c), .run_mean = mirror_tensor(c),
        .run_var = mirror_tensor(c), .dz = mirror_tensor(n),
        .projection = mirror_random_tensor(n, -1, 1, 53)};
    float *dx = mirror_nan_tensor(n), *dgamma = mirror_tensor(c), *dbeta = mirror_tensor(c);
    memset(dgamma, 0, c * sizeof *dgamma);  // +=
    memset(dbeta, 0, c * sizeof *dbeta);
    norm_silu_loss(&p, p.x);  // the statistics of these inputs
    ref->op.batchnorm_silu_backward(ref, rows, c, (const Act *)p.x, (const Act *)p.projection,
                                    p.gamma, p.beta, p.mean, p.inv_std, (Act *)p.dz, (Act *)dx,
                                    dgamma, dbeta);
    assert_int_equal(gradcheck_compare("bn+silu dx", norm_silu_loss, &p, p.x, n, dx,
                                       FD_TOLERANCE), 0);
    p.vary = 1;
    assert_int_equal(gradcheck_compare("bn+silu dgamma", norm_silu_loss, &p, p.gamma, c, dgamma,
                                       FD_TOLERANCE), 0);
    p.vary = 2;
    assert_int_equal(gradcheck_compare("bn+silu dbeta", norm_silu_loss, &p, p.beta, c, dbeta,
                                       FD_TOLERANCE), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_silu, mirror_free),
        cmocka_unit_test_teardown(test_silu_special_values, mirror_free),
        cmocka_unit_test_teardown(test_silu_backward_fd, mirror_free),
        cmocka_unit_test_teardown(test_batchnorm_silu, mirror_free),
        cmocka_unit_test_teardown(test_batchnorm_silu_backward_fd, mirror_free),
    };
    // The ops again with cuda storing fp16 / bf16 against ref in the same dtype.
    const struct CMUnitTest act_tests[] = {
        cmocka_unit_test_teardown(test_silu, mirror_free),
        cmocka_unit_test_teardown(test_batchnorm_silu, mirror_free),
    };
    return mirror_run_groups(tests, sizeof tests / sizeof tests[0]) +
           mirror_run_16bit_groups(act_tests, sizeof act_tests / sizeof act_tests[0]);
}
