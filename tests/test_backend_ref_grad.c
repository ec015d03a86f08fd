// Gradient tests of the reference backend: every backward op against central
// finite differences of its forward, with a random projection <p, y> of the
// output as the scalar loss (accumulated in double); plus the gradient
// contract of backend.h: parameter gradients accumulate (+=), activation
// gradients are overwritten (=).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "backend/ref/ref_backend.h"
#include "backend_fixture.h"
#include "gradcheck.h"
#include "op_checks.h"

// Ops linear in the perturbed input (conv, GEMM, pooling, bias): central
// differences are exact up to rounding, which is ~1e-7 |y| per output in
// fp32 times sqrt(outputs) in the loss, divided by 2h = 0.02: far below
// rtol 1e-2 / atol 1e-3.
static const GradcheckTolerance LINEAR_TOLERANCE = {.step = 1e-2f, .rtol = 1e-2, .atol = 1e-3};
// Smooth nonlinear ops (batch norm, L2 normalise, softmax): h = 1e-3 keeps
// the O(h^2) truncation error ~1e-6 while the fp32 rounding noise of the
// loss (~1e-7 * sqrt(outputs)) / 2h stays ~1e-4, under atol 1e-3.
static const GradcheckTolerance SMOOTH_TOLERANCE = {.step = 1e-3f, .rtol = 1e-2, .atol = 1e-3};

// ---- convolution --------------------------------------------------------------------

typedef struct ConvProblem {
    ConvShape shape;
    ConvPlan *plan;
    size_t nx, nw, ny;
    float *x;           // (N, H, W, Cin)
    float *w;           // (Cout, K, K, Cin)
    float *y, *projection;  // (N, OH, OW, Cout)
} ConvProblem;

static void conv_problem_make(ConvProblem *p, const int c[8], uint64_t seed) {
    assert_int_equal(conv_shape_make(&p->shape, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
                                     NULL),
                     0);
    const ConvShape *s = &p->shape;
    p->nx = (size_t)s->batch * s->in_height * s->in_width * s->in_channels;
    p->nw = (size_t)s->out_channels * s->kernel * s->kernel * s->in_channels;
    p->ny = (size_t)s->batch * s->out_height * s->out_width * s->out_channels;
    p->x = fixture_random_tensor(p->nx, -1, 1, seed);
    p->w = fixture_random_tensor(p->nw, -1, 1, seed + 1);
    p->y = fixture_tensor(p->ny);
    p->projection = fixture_random_tensor(p->ny, -1, 1, seed + 2);
    p->plan = fixture_backend->op.conv2d_plan(fixture_backend, s, NULL);
    assert_non_null(p->plan);
}

static double conv_loss_x(void *problem, const float *x) {
    ConvProblem *p = problem;
    fixture_backend->op.conv2d_forward(fixture_backend, p->plan, (const Act *)x, (const Act *)p->w,
                                       (Act *)p->y);
    return gradcheck_project(p->ny, p->y, p->projection);
}

static double conv_loss_w(void *problem, const float *w) {
    ConvProblem *p = problem;
    fixture_backend->op.conv2d_forward(fixture_backend, p->plan, (const Act *)p->x, (const Act *)w,
                                       (Act *)p->y);
    return gradcheck_project(p->ny, p->y, p->projection);
}

static void conv_gradient_x(void *problem, float *dx) {
    ConvProblem *p = problem;
    fixture_backend->op.conv2d_backward_data(fixture_backend, p->plan, (const Act *)p->projection,
                                             (const Act *)p->w, (Act *)dx);
}

static void conv_gradient_w(void *problem, float *dw) {
    ConvProblem *p = problem;
    fixture_backend->op.conv2d_backward_weights(fixture_backend, p->plan, (const Act *)p->x,
                                                (const Act *)p->projection, dw);
}

// (N, H, W, Cin, Cout, kernel, stride, padding): odd sizes, batch 1, stride
// 2, padding 0/1/3, 1x1 / 3x3 / 7x7 kernels, channels not multiples of 8.
static const int conv_cases[][8] = {
    {1, 5, 6, 3, 4, 3, 1, 1}, {2, 9, 7, 3, 5, 7, 2, 3}, {1, 6, 5, 5, 3, 1, 2, 0},
    {2, 5, 5, 2, 3, 3, 2, 0}, {1, 7, 7, 10, 3, 3, 2, 1},
};

static void test_conv_backward_fd(void **state) {
    for (size_t t = 0; t < sizeof conv_cases / sizeof conv_cases[0]; t++) {
        ConvProblem p;
        conv_problem_make(&p, conv_cases[t], 1000 + 10 * t);
        op_check_gradient("conv dx", conv_loss_x, conv_gradient_x, &p, p.x, p.nx, LINEAR_TOLERANCE);
        op_check_gradient("conv dw", conv_loss_w, conv_gradient_w, &p, p.w, p.nw, LINEAR_TOLERANCE);
        op_assert_overwrites(conv_gradient_x, &p, p.nx);
        op_assert_accumulates(conv_gradient_w, &p, p.nw);
        fixture_backend->op.conv2d_plan_free(fixture_backend, p.plan);
    }
}

// ---- batch norm (training) ----------------------------------------------------------------

typedef struct BatchNormProblem {
    size_t rows;
    int channels;
    float *x, *gamma, *beta, *y, *projection;   // x, y, projection (rows, C); gamma, beta (C)
    float *mean, *inv_std, *running_mean, *running_var, *scratch_dx, *scratch_dc;
    // fused: y = relu(bn(x) + residual) through the batchnorm_relu ops
    int fused;
    float *residual, *scratch_dr;  // (rows, C)
} BatchNormProblem;

static void batchnorm_problem_make(BatchNormProblem *p, size_t rows, int channels, uint64_t seed) {
    p->rows = rows;
    p->channels = channels;
    p->x = fixture_random_tensor(rows * channels, -2, 2, seed);
    p->gamma = fixture_random_tensor(channels, 0.5f, 1.5f, seed + 1);
    p->beta = fixture_random_tensor(channels, -0.5f, 0.5f, seed + 2);
    p->projection = fixture_random_tensor(rows * channels, -1, 1, seed + 3);
    p->y = fixture_tensor(rows * channels);
    p->scratch_dx = fixture_tensor(rows * channels);
    p->mean = fixture_tensor(channels);
    p->inv_std = fixture_tensor(channels);
    p->running_mean = fixture_tensor(channels);
    p->running_var = fixture_tensor(channels);
    p->scratch_dc = fixture_tensor(channels);
    p->fused = 0;
    p->residual = fixture_random_tensor(rows * channels, -1, 1, seed + 4);
    p->scratch_dr = fixture_tensor(rows * channels);
}

static double batchnorm_loss(BatchNormProblem *p, const float *x, const float *gamma,
                             const float *beta) {
    if (p->fused)
        fixture_backend->op.batchnorm_relu_forward_train(
            fixture_backend, p->rows, p->channels, (const Act *)x, (const Act *)p->residual, gamma,
            beta, 0.1f, 1e-5f, (Act *)p->y, p->mean, p->inv_std, p->running_mean, p->running_var);
    else
        fixture_backend->op.batchnorm_forward_train(
            fixture_backend, p->rows, p->channels, (const Act *)x, gamma, beta, 0.1f, 1e-5f,
            (Act *)p->y, p->mean, p->inv_std, p->running_mean, p->running_var);
    return gradcheck_project(p->rows * p->channels, p->y, p->projection);
}

static double batchnorm_loss_x(void *problem, const float *x) {
    BatchNormProblem *p = problem;
    return batchnorm_loss(p, x, p->gamma, p->beta);
}

static double batchnorm_loss_gamma(void *problem, const float *gamma) {
    BatchNormProblem *p = problem;
    return batchnorm_loss(p, p->x, gamma, p->beta);
}

static double batchnorm_loss_beta(void *problem, const float *beta) {
    BatchNormProblem *p = problem;
    return batchnorm_loss(p, p->x, p->gamma, beta);
}

// Forward at the current inputs (for the saved statistics), then backward;
// the two gradients not asked for go to scratch.
static void batchnorm_backward_into(BatchNormProblem *p, float *dx, float *dgamma, float *dbeta,
                                    float *dresidual) {
    batchnorm_loss(p, p->x, p->gamma, p->beta);
    if (p->fused)
        fixture_backend->op.batchnorm_relu_backward(
            fixture_backend, p->rows, p->channels, (const Act *)p->x, (const Act *)p->y,
            (const Act *)p->projection, p->gamma, p->beta, p->mean, p->inv_std, (Act *)dx, dgamma,
            dbeta, (Act *)dresidual);
    else
        fixture_backend->op.batchnorm_backward(
            fixture_backend, p->rows, p->channels, (const Act *)p->x, (const Act *)p->projection,
            p->gamma, p->mean, p->inv_std, (Act *)dx, dgamma, dbeta);
}

static void batchnorm_backward(BatchNormProblem *p, float *dx, float *dgamma, float *dbeta) {
    batchnorm_backward_into(p, dx, dgamma, dbeta, p->fused ? p->scratch_dr : NULL);
}

// The fused op's residual: loss as a function of it, and its gradient.
static double batchnorm_loss_residual(void *problem, const float *residual) {
    BatchNormProblem *p = problem;
    float *saved = p->residual;
    p->residual = (float *)residual;
    const double loss = batchnorm_loss(p, p->x, p->gamma, p->beta);
    p->residual = saved;
    return loss;
}

static void batchnorm_gradient_residual(void *problem, float *dresidual) {
    BatchNormProblem *p = problem;
    batchnorm_backward_into(p, p->scratch_dx, p->scratch_dc, p->scratch_dc, dresidual);
}

static void batchnorm_gradient_x(void *problem, float *dx) {
    BatchNormProblem *p = problem;
    batchnorm_backward(p, dx, p->scratch_dc, p->scratch_dc);
}

static void batchnorm_gradient_gamma(void *problem, float *dgamma) {
    BatchNormProblem *p = problem;
    batchnorm_backward(p, p->scratch_dx, dgamma, p->scratch_dc);
}

static void batchnorm_gradient_beta(void *problem, float *dbeta) {
    BatchNormProblem *p = problem;
    batchnorm_backward(p, p->scratch_dx, p->scratch_dc, dbeta);
}

static void test_batchnorm_backward_fd(void **state) {
    const size_t rows[] = {2 * 3 * 3, 4, 2};  // 2d (N=2, 3x3 pixels), 1d batch 4, batch 2
    const int channels[] = {5, 3, 3};
    for (int t = 0; t < 3; t++) {
        BatchNormProblem p;
        batchnorm_problem_make(&p, rows[t], channels[t], 2000 + 10 * t);
        const size_t n = rows[t] * channels[t];
        op_check_gradient("bn dx", batchnorm_loss_x, batchnorm_gradient_x, &p, p.x, n,
                       SMOOTH_TOLERANCE);
        op_check_gradient("bn dgamma", batchnorm_loss_gamma, batchnorm_gradient_gamma, &p, p.gamma,
                       channels[t], SMOOTH_TOLERANCE);
        op_check_gradient("bn dbeta", batchnorm_loss_beta, batchnorm_gradient_beta, &p, p.beta,
                       channels[t], SMOOTH_TOLERANCE);
        op_assert_overwrites(batchnorm_gradient_x, &p, n);
        op_assert_accumulates(batchnorm_gradient_gamma, &p, channels[t]);
        op_assert_accumulates(batchnorm_gradient_beta, &p, channels[t]);
    }
}

// batchnorm_relu_forward_train / batchnorm_relu_backward: through the ReLU
// mask and the residual add. No pre-activation lies within ~h of the kink
// at 0 for these seeds (a crossing would show as a mismatch).
static void test_batchnorm_relu_backward_fd(void **state) {
    const size_t rows[] = {2 * 3 * 3, 4};  // 2d (N=2, 3x3 pixels), 1d batch 4
    const int channels[] = {5, 3};
    for (int t = 0; t < 2; t++) {
        BatchNormProblem p;
        batchnorm_problem_make(&p, rows[t], channels[t], 2500 + 10 * t);
        p.fused = 1;
        const size_t n = rows[t] * channels[t];
        op_check_gradient("bn+relu dx", batchnorm_loss_x, batchnorm_gradient_x, &p, p.x, n,
                       SMOOTH_TOLERANCE);
        op_check_gradient("bn+relu dgamma", batchnorm_loss_gamma, batchnorm_gradient_gamma, &p,
                       p.gamma, channels[t], SMOOTH_TOLERANCE);
        op_check_gradient("bn+relu dbeta", batchnorm_loss_beta, batchnorm_gradient_beta, &p, p.beta,
                       channels[t], SMOOTH_TOLERANCE);
        op_check_gradient("bn+relu dresidual", batchnorm_loss_residual, batchnorm_gradient_residual,
                       &p, p.residual, n, SMOOTH_TOLERANCE);
        op_assert_overwrites(batchnorm_gradient_x, &p, n);
        op_assert_overwrites(batchnorm_gradient_residual, &p, n);
        op_assert_accumulates(batchnorm_gradient_gamma, &p, channels[t]);
        op_assert_accumulates(batchnorm_gradient_beta, &p, channels[t]);
    }
}

// ---- elementwise, pooling, bias ---------------------------------------------------------------

// One problem shape for the single-input ops: y = f(x), loss = <p, y>.
typedef struct UnaryProblem {
    size_t nx, ny;
    float *x, *y, *projection;
    PoolShape pool;       // maxpool
    int32_t *argmax;      // maxpool (N, OH, OW, C)
    int batch, pixels;    // avgpool
    int rows, dim;        // bias (rows, dim = channels), l2 / softmax rows
    float *base;          // bias: y = base + bias
    float *norm;          // l2 (rows)
    float scale, eps;     // softmax scale, l2 eps
} UnaryProblem;

static void unary_problem_make(UnaryProblem *p, size_t nx, size_t ny, uint64_t seed) {
    p->nx = nx;
    p->ny = ny;
    p->x = fixture_random_tensor(nx, -1, 1, seed);
    p->y = fixture_tensor(ny);
    p->projection = fixture_random_tensor(ny, -1, 1, seed + 1);
}

static double relu_loss(void *problem, const float *x) {
    UnaryProblem *p = problem;
    fixture_backend->op.relu_forward(fixture_backend, p->nx, (const Act *)x, (Act *)p->y);
    return gradcheck_project(p->ny, p->y, p->projection);
}

static void relu_gradient(void *problem, float *dx) {
    UnaryProblem *p = problem;
    relu_loss(p, p->x);
    fixture_backend->op.relu_backward(fixture_backend, p->nx, (const Act *)p->y,
                                      (const Act *)p->projection, (Act *)dx);
}

static void test_relu_backward_fd(void **state) {
    UnaryProblem p;
    unary_problem_make(&p, 41, 41, 3000);
    // Values +-0.05, +-0.15, ...: at least 0.05 from the kink at 0 > h = 0.01.
    gradcheck_fill_distinct(p.x, p.nx, -2.05f, 0.1f, 3002);
    op_check_gradient("relu dx", relu_loss, relu_gradient, &p, p.x, p.nx, LINEAR_TOLERANCE);
    op_assert_overwrites(relu_gradient, &p, p.nx);
}

static double gelu_loss(void *problem, const float *x) {
    UnaryProblem *p = problem;
    fixture_backend->op.gelu_forward(fixture_backend, p->nx, (const Act *)x, (Act *)p->y);
    return gradcheck_project(p->ny, p->y, p->projection);
}

static void gelu_gradient(void *problem, float *dx) {
    UnaryProblem *p = problem;
    fixture_backend->op.gelu_backward(fixture_backend, p->nx, (const Act *)p->x,
                                      (const Act *)p->projection, (Act *)dx);
}

// Inputs over [-4, 4], where GELU's derivative changes fastest (|x| < 2) and
// its tails; and dx aliasing dy gives the same result.
static void test_gelu_backward_fd(void **state) {
    UnaryProblem p;
    unary_problem_make(&p, 41, 41, 3100);
    gradcheck_fill_uniform(p.x, p.nx, -4.0f, 4.0f, 3102);
    op_check_gradient("gelu dx", gelu_loss, gelu_gradient, &p, p.x, p.nx, SMOOTH_TOLERANCE);
    op_assert_overwrites(gelu_gradient, &p, p.nx);
    float *expected = fixture_tensor(p.nx), *in_place = fixture_tensor(p.nx);
    gelu_gradient(&p, expected);
    memcpy(in_place, p.projection, p.nx * sizeof(float));
    fixture_backend->op.gelu_backward(fixture_backend, p.nx, (const Act *)p.x,
                                      (const Act *)in_place, (Act *)in_place);
    assert_memory_equal(in_place, expected, p.nx * sizeof(float));
}

static double maxpool_loss(void *problem, const float *x) {
    UnaryProblem *p = problem;
    fixture_backend->op.maxpool_forward(fixture_backend, &p->pool, (const Act *)x, (Act *)p->y,
                                        p->argmax);
    return gradcheck_project(p->ny, p->y, p->projection);
}

static void maxpool_gradient(void *problem, float *dx) {
    UnaryProblem *p = problem;
    maxpool_loss(p, p->x);
    fixture_backend->op.maxpool_backward(fixture_backend, &p->pool, (const Act *)p->projection,
                                         p->argmax, (Act *)dx);
}

static void test_maxpool_backward_fd(void **state) {
    // (N, H, W, C, window, stride, padding): overlapping 3x3/2 windows (ResNet),
    // 2x2/2, 3x3/1.
    const int cases[][7] = {{2, 7, 9, 3, 3, 2, 1}, {1, 6, 5, 5, 2, 2, 0}, {1, 5, 5, 4, 3, 1, 1}};
    for (int t = 0; t < 3; t++) {
        const int *c = cases[t];
        UnaryProblem p;
        assert_int_equal(pool_shape_make(&p.pool, c[0], c[1], c[2], c[3], c[4], c[5], c[6], NULL),
                         0);
        const size_t nx = (size_t)c[0] * c[1] * c[2] * c[3];
        const size_t ny = (size_t)c[0] * p.pool.out_height * p.pool.out_width * c[3];
        unary_problem_make(&p, nx, ny, 3100 + 10 * t);
        p.argmax = (int32_t *)fixture_tensor(ny);
        // Distinct values 0.05 apart: a step of h = 0.01 never reorders them (no ties).
        gradcheck_fill_distinct(p.x, nx, -3.0f, 0.05f, 3105 + 10 * t);
        op_check_gradient("maxpool dx", maxpool_loss, maxpool_gradient, &p, p.x, nx,
                       LINEAR_TOLERANCE);
        op_assert_overwrites(maxpool_gradient, &p, nx);
    }
}

static double avgpool_loss(void *problem, const float *x) {
    UnaryProblem *p = problem;
    fixture_backend->op.avgpool_forward(fixture_backend, p->batch, p->pixels, p->dim,
                                        (const Act *)x, (Act *)p->y);
    return gradcheck_project(p->ny, p->y, p->projection);
}

static void avgpool_gradient(void *problem, float *dx) {
    UnaryProblem *p = problem;
    fixture_backend->op.avgpool_backward(fixture_backend, p->batch, p->pixels, p->dim,
                                         (const Act *)p->projection, (Act *)dx);
}

static void test_avgpool_backward_fd(void **state) {
    UnaryProblem p = {.batch = 2, .pixels = 3 * 5, .dim = 7};
    unary_problem_make(&p, 2 * 15 * 7, 2 * 7, 3200);
    op_check_gradient("avgpool dx", avgpool_loss, avgpool_gradient, &p, p.x, p.nx,
                      LINEAR_TOLERANCE);
    op_assert_overwrites(avgpool_gradient, &p, p.nx);
}

static double bias_loss(void *problem, const float *bias) {
    UnaryProblem *p = problem;
    memcpy(p->y, p->base, p->ny * sizeof(float));
    fixture_backend->op.bias_add(fixture_backend, (size_t)p->rows, p->dim, bias, (Act *)p->y);
    return gradcheck_project(p->ny, p->y, p->projection);
}

static void bias_gradient(void *problem, float *dbias) {
    UnaryProblem *p = problem;
    fixture_backend->op.bias_backward(fixture_backend, (size_t)p->rows, p->dim,
                                      (const Act *)p->projection, dbias);
}

static void test_bias_backward_fd(void **state) {
    UnaryProblem p = {.rows = 9, .dim = 5};
    unary_problem_make(&p, 5, 9 * 5, 3300);  // x is the bias
    p.base = fixture_random_tensor(p.ny, -1, 1, 3302);
    op_check_gradient("bias", bias_loss, bias_gradient, &p, p.x, p.nx, LINEAR_TOLERANCE);
    op_assert_accumulates(bias_gradient, &p, p.nx);
}

// ---- row-wise ops ------------------------------------------------------------------------------

static double l2_loss(void *problem, const float *x) {
    UnaryProblem *p = problem;
    fixture_backend->op.l2_normalize_forward(fixture_backend, p->rows, p->dim, x, p->eps, p->y, p->norm);
    return gradcheck_project(p->ny, p->y, p->projection);
}

static void l2_gradient(void *problem, float *dx) {
    UnaryProblem *p = problem;
    l2_loss(p, p->x);
    fixture_backend->op.l2_normalize_backward(fixture_backend, p->rows, p->dim, p->y, p->norm, p->projection,
                                      p->eps, dx);
}

static void test_l2_normalize_backward_fd(void **state) {
    UnaryProblem p = {.rows = 4, .dim = 9, .eps = 0.1f};
    unary_problem_make(&p, 4 * 9, 4 * 9, 3400);
    p.norm = fixture_tensor(4);
    // Row 2 has norm ~0.02 < eps (even after a step of h = 1e-3): there
    // y = x / eps and the gradient is dy / eps (PyTorch's clamp_min).
    for (int d = 0; d < p.dim; d++) p.x[2 * p.dim + d] *= 0.01f;
    op_check_gradient("l2 dx", l2_loss, l2_gradient, &p, p.x, p.nx, SMOOTH_TOLERANCE);
    op_assert_overwrites(l2_gradient, &p, p.nx);
}

static double softmax_loss(void *problem, const float *x) {
    UnaryProblem *p = problem;
    fixture_backend->op.softmax_forward(fixture_backend, p->rows, p->dim, x, p->scale, p->y);
    return gradcheck_project(p->ny, p->y, p->projection);
}

static void softmax_gradient(void *problem, float *dx) {
    UnaryProblem *p = problem;
    softmax_loss(p, p->x);
    fixture_backend->op.softmax_backward(fixture_backend, p->rows, p->dim, p->y, p->projection, p->scale, dx);
}

static double log_softmax_loss(void *problem, const float *x) {
    UnaryProblem *p = problem;
    fixture_backend->op.log_softmax_forward(fixture_backend, p->rows, p->dim, x, p->scale, p->y);
    return gradcheck_project(p->ny, p->y, p->projection);
}

static void log_softmax_gradient(void *problem, float *dx) {
    UnaryProblem *p = problem;
    log_softmax_loss(p, p->x);
    fixture_backend->op.log_softmax_backward(fixture_backend, p->rows, p->dim, p->y, p->projection, p->scale, dx);
}

static void test_softmax_backward_fd(void **state) {
    const float scales[] = {1.0f, 2.5f};  // 2.5: a temperature of 0.4
    for (int t = 0; t < 2; t++) {
        UnaryProblem p = {.rows = 3, .dim = 7, .scale = scales[t]};
        unary_problem_make(&p, 21, 21, 3500 + 10 * t);
        op_check_gradient("softmax dx", softmax_loss, softmax_gradient, &p, p.x, p.nx,
                       SMOOTH_TOLERANCE);
        op_check_gradient("log_softmax dx", log_softmax_loss, log_softmax_gradient, &p, p.x, p.nx,
                       SMOOTH_TOLERANCE);
        op_assert_overwrites(softmax_gradient, &p, p.nx);
        op_assert_overwrites(log_softmax_gradient, &p, p.nx);
    }
}

// ---- GEMM as a linear layer: C = op(A) op(B) ----------------------------------------------------

typedef struct GemmProblem {
    int transpose_a, transpose_b, m, n, k, lda, ldb;
    size_t na, nb;
    float *a, *b, *c, *projection;  // stored A, B (with padded rows); C and projection (M, N)
} GemmProblem;

static double gemm_loss(GemmProblem *p, const float *a, const float *b) {
    fixture_backend->op.gemm(fixture_backend, p->transpose_a, p->transpose_b, p->m, p->n, p->k, 1.0f, a, p->lda, b,
                     p->ldb, 0.0f, p->c, p->n);
    return gradcheck_project((size_t)p->m * p->n, p->c, p->projection);
}

static double gemm_loss_a(void *problem, const float *a) {
    GemmProblem *p = problem;
    return gemm_loss(p, a, p->b);
}

static double gemm_loss_b(void *problem, const float *b) {
    GemmProblem *p = problem;
    return gemm_loss(p, p->a, b);
}

// dL/d op(A) = P op(B)^T and dL/d op(B) = op(A)^T P, written back in A's
// and B's stored layouts; beta = 1 accumulates, as a weight gradient does.
static void gemm_gradient_a(void *problem, float *da) {
    GemmProblem *p = problem;
    if (!p->transpose_a)  // dA (M, K) = P op(B)^T
        fixture_backend->op.gemm(fixture_backend, 0, !p->transpose_b, p->m, p->k, p->n, 1.0f, p->projection, p->n,
                         p->b, p->ldb, 1.0f, da, p->lda);
    else  // dA (K, M) = op(B) P^T
        fixture_backend->op.gemm(fixture_backend, p->transpose_b, 1, p->k, p->m, p->n, 1.0f, p->b, p->ldb,
                         p->projection, p->n, 1.0f, da, p->lda);
}

static void gemm_gradient_b(void *problem, float *db) {
    GemmProblem *p = problem;
    if (!p->transpose_b)  // dB (K, N) = op(A)^T P
        fixture_backend->op.gemm(fixture_backend, !p->transpose_a, 0, p->k, p->n, p->m, 1.0f, p->a, p->lda,
                         p->projection, p->n, 1.0f, db, p->ldb);
    else  // dB (N, K) = P^T op(A)
        fixture_backend->op.gemm(fixture_backend, 1, p->transpose_a, p->n, p->k, p->m, 1.0f, p->projection, p->n,
                         p->a, p->lda, 1.0f, db, p->ldb);
}

static void test_gemm_backward_fd(void **state) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            GemmProblem p = {.transpose_a = ta, .transpose_b = tb, .m = 3, .n = 5, .k = 4};
            const int a_rows = ta ? p.k : p.m, b_rows = tb ? p.n : p.k;
            p.lda = (ta ? p.m : p.k) + 1;  // padded rows: their gradient must be 0
            p.ldb = (tb ? p.k : p.n) + 2;
            p.na = (size_t)a_rows * p.lda;
            p.nb = (size_t)b_rows * p.ldb;
            const uint64_t seed = 4000 + 10 * (2 * ta + tb);
            p.a = fixture_random_tensor(p.na, -1, 1, seed);
            p.b = fixture_random_tensor(p.nb, -1, 1, seed + 1);
            p.c = fixture_tensor((size_t)p.m * p.n);
            p.projection = fixture_random_tensor((size_t)p.m * p.n, -1, 1, seed + 2);
            op_check_gradient("gemm dA", gemm_loss_a, gemm_gradient_a, &p, p.a, p.na,
                           LINEAR_TOLERANCE);
            op_check_gradient("gemm dB", gemm_loss_b, gemm_gradient_b, &p, p.b, p.nb,
                           LINEAR_TOLERANCE);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_conv_backward_fd, fixture_tensors_free),
        cmocka_unit_test_teardown(test_batchnorm_backward_fd, fixture_tensors_free),
        cmocka_unit_test_teardown(test_batchnorm_relu_backward_fd, fixture_tensors_free),
        cmocka_unit_test_teardown(test_relu_backward_fd, fixture_tensors_free),
        cmocka_unit_test_teardown(test_gelu_backward_fd, fixture_tensors_free),
        cmocka_unit_test_teardown(test_maxpool_backward_fd, fixture_tensors_free),
        cmocka_unit_test_teardown(test_avgpool_backward_fd, fixture_tensors_free),
        cmocka_unit_test_teardown(test_bias_backward_fd, fixture_tensors_free),
        cmocka_unit_test_teardown(test_l2_normalize_backward_fd, fixture_tensors_free),
        cmocka_unit_test_teardown(test_softmax_backward_fd, fixture_tensors_free),
        cmocka_unit_test_teardown(test_gemm_backward_fd, fixture_tensors_free),
    };
    return cmocka_run_group_tests(tests, fixture_backend_create_ref, fixture_backend_destroy);
}
