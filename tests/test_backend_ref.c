// Forward tests of the reference backend: every op against a direct formula
// written independently here (a naive NCHW convolution, textbook batch norm,
// double-loop GEMM, ...), on small odd shapes. Gradients are checked in
// test_backend_ref_grad.c, optimizer and input ops in
// test_backend_ref_update.c.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ref/ref_backend.h"
#include "backend_fixture.h"
#include "gradcheck.h"

// Forward references below are computed in double; the backend also
// accumulates in double, so results differ only by the final rounding to
// float and the summation order: 1e-6 relative (~8 float ulps) + 1e-6
// absolute (for results that cancel to near 0) is a tight but safe bound.
#define FORWARD_RTOL 1e-6
#define FORWARD_ATOL 1e-6

static void test_memory_ops(void **state) {
    float *a = fixture_tensor(37), *b = fixture_tensor(37);
    assert_int_equal((uintptr_t)a % 64, 0);
    assert_int_equal((uintptr_t)b % 64, 0);
    float host[37], back[37];
    for (int i = 0; i < 37; i++) host[i] = (float)i * 0.5f - 3.0f;
    fixture_backend->op.upload(fixture_backend, a, host, sizeof host);
    fixture_backend->op.copy(fixture_backend, b, a, sizeof host);
    fixture_backend->op.synchronize(fixture_backend);
    fixture_backend->op.download(fixture_backend, back, b, sizeof back);
    assert_memory_equal(back, host, sizeof host);
    fixture_backend->op.fill(fixture_backend, b, 2.5f, 30);
    fixture_backend->op.download(fixture_backend, back, b, sizeof back);
    for (int i = 0; i < 37; i++) assert_true(back[i] == (i < 30 ? 2.5f : host[i]));
    assert_string_equal(fixture_backend->name, "ref");
}

// ---- convolution -----------------------------------------------------------------

typedef struct ConvCase {
    int batch, height, width, in_channels, out_channels, kernel, stride, padding;
} ConvCase;

// Odd sizes, batch 1, stride 2, padding 0/1/3, 1x1 / 3x3 / 7x7 kernels.
static const ConvCase conv_cases[] = {
    {1, 5, 6, 3, 4, 3, 1, 1}, {2, 9, 7, 3, 5, 7, 2, 3}, {1, 6, 5, 5, 3, 1, 2, 0},
    {2, 5, 5, 2, 3, 3, 2, 0}, {1, 7, 7, 10, 3, 3, 2, 1}, {1, 4, 3, 3, 2, 1, 1, 0},
};

// The naive NCHW / OIHW convolution, written the other way round from the
// backend: scatter every input pixel into the outputs it contributes to.
static void naive_conv_nchw(const ConvShape *s, const double *x_nchw, const double *w_oihw,
                            double *y_nchw) {
    const int K = s->kernel, OH = s->out_height, OW = s->out_width;
    memset(y_nchw, 0, sizeof(double) * s->batch * s->out_channels * OH * OW);
    for (int n = 0; n < s->batch; n++)
        for (int ci = 0; ci < s->in_channels; ci++)
            for (int ih = 0; ih < s->in_height; ih++)
                for (int iw = 0; iw < s->in_width; iw++) {
                    const double xv =
                        x_nchw[((n * s->in_channels + ci) * s->in_height + ih) * s->in_width + iw];
                    for (int co = 0; co < s->out_channels; co++)
                        for (int kh = 0; kh < K; kh++)
                            for (int kw = 0; kw < K; kw++) {
                                const int sh = ih + s->padding - kh, sw = iw + s->padding - kw;
                                if (sh < 0 || sw < 0 || sh % s->stride || sw % s->stride) continue;
                                const int oh = sh / s->stride, ow = sw / s->stride;
                                if (oh >= OH || ow >= OW) continue;
                                y_nchw[((n * s->out_channels + co) * OH + oh) * OW + ow] +=
                                    xv * w_oihw[((co * s->in_channels + ci) * K + kh) * K + kw];
                            }
                }
}

static void test_conv_forward_matches_naive_nchw(void **state) {
    for (size_t t = 0; t < sizeof conv_cases / sizeof conv_cases[0]; t++) {
        const ConvCase *c = &conv_cases[t];
        ConvShape s;
        assert_int_equal(conv_shape_make(&s, c->batch, c->height, c->width, c->in_channels,
                                         c->out_channels, c->kernel, c->stride, c->padding, NULL),
                         0);
        const size_t nx = (size_t)s.batch * s.in_height * s.in_width * s.in_channels;
        const size_t nw = (size_t)s.out_channels * s.kernel * s.kernel * s.in_channels;
        const size_t ny = (size_t)s.batch * s.out_height * s.out_width * s.out_channels;
        float *x = fixture_random_tensor(nx, -1, 1, 10 + t), *w = fixture_random_tensor(nw, -1, 1, 20 + t);
        float *y = fixture_tensor(ny), *expected = fixture_tensor(ny);
        ConvPlan *plan = fixture_backend->op.conv2d_plan(fixture_backend, &s, NULL);
        assert_non_null(plan);
        fixture_backend->op.conv2d_forward(fixture_backend, plan, (const Act *)x, (const Act *)w,
                                           (Act *)y);
        fixture_backend->op.conv2d_plan_free(fixture_backend, plan);

        // NHWC -> NCHW and OHWI -> OIHW copies for the naive version.
        double *x_nchw = malloc(sizeof(double) * nx), *w_oihw = malloc(sizeof(double) * nw);
        double *y_nchw = malloc(sizeof(double) * ny);
        for (int n = 0; n < s.batch; n++)
            for (int h = 0; h < s.in_height; h++)
                for (int x_ = 0; x_ < s.in_width; x_++)
                    for (int ch = 0; ch < s.in_channels; ch++)
                        x_nchw[((n * s.in_channels + ch) * s.in_height + h) * s.in_width + x_] =
                            x[((n * s.in_height + h) * s.in_width + x_) * s.in_channels + ch];
        for (int o = 0; o < s.out_channels; o++)
            for (int kh = 0; kh < s.kernel; kh++)
                for (int kw = 0; kw < s.kernel; kw++)
                    for (int ch = 0; ch < s.in_channels; ch++)
                        w_oihw[((o * s.in_channels + ch) * s.kernel + kh) * s.kernel + kw] =
                            w[((o * s.kernel + kh) * s.kernel + kw) * s.in_channels + ch];
        naive_conv_nchw(&s, x_nchw, w_oihw, y_nchw);
        for (int n = 0; n < s.batch; n++)
            for (int h = 0; h < s.out_height; h++)
                for (int x_ = 0; x_ < s.out_width; x_++)
                    for (int o = 0; o < s.out_channels; o++)
                        expected[((n * s.out_height + h) * s.out_width + x_) * s.out_channels + o] =
                            (float)y_nchw[((n * s.out_channels + o) * s.out_height + h) *
                                              s.out_width + x_];
        free(x_nchw);
        free(w_oihw);
        free(y_nchw);
        assert_int_equal(gradcheck_count_mismatches("conv forward", ny, y, expected, FORWARD_RTOL,
                                                    FORWARD_ATOL),
                         0);
    }
}

static void test_conv_plan_rejects_inconsistent_shape(void **state) {
    ConvShape s;
    assert_int_equal(conv_shape_make(&s, 1, 8, 8, 3, 4, 3, 2, 1, NULL), 0);
    ErrorMessage err = {{0}};
    s.out_height += 1;  // not what the geometry gives
    assert_null(fixture_backend->op.conv2d_plan(fixture_backend, &s, &err));
    assert_non_null(strstr(err.text, "ref conv plan"));
    s.out_height -= 1;
    s.kernel = 0;
    assert_null(fixture_backend->op.conv2d_plan(fixture_backend, &s, &err));
    assert_non_null(strstr(err.text, "invalid geometry"));
}

// ---- GEMM ---------------------------------------------------------------------------

static void test_gemm_all_transposes(void **state) {
    const int m = 5, n = 7, k = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int zero_beta = 0; zero_beta < 2; zero_beta++) {
                // Stored shapes, with leading dimensions wider than the rows.
                const int a_rows = ta ? k : m, a_cols = ta ? m : k, lda = a_cols + 2;
                const int b_rows = tb ? n : k, b_cols = tb ? k : n, ldb = b_cols + 1;
                const int ldc = n + 3;
                const float alpha = 0.7f, beta = zero_beta ? 0.0f : -0.4f;
                const uint64_t seed = 100 + ta * 4 + tb * 2 + zero_beta;
                float *a = fixture_random_tensor((size_t)a_rows * lda, -1, 1, seed);
                float *b = fixture_random_tensor((size_t)b_rows * ldb, -1, 1, seed + 10);
                float *c = fixture_random_tensor((size_t)m * ldc, -1, 1, seed + 20);
                float *expected = fixture_tensor((size_t)m * ldc);
                memcpy(expected, c, sizeof(float) * m * ldc);
                if (zero_beta)  // beta = 0: C must not be read (BLAS rule)
                    for (int i = 0; i < m; i++)
                        for (int j = 0; j < n; j++) c[i * ldc + j] = NAN;
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        double total = 0.0;
                        for (int p = 0; p < k; p++) {
                            const double av = ta ? a[p * lda + i] : a[i * lda + p];
                            const double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
                            total += av * bv;
                        }
                        const double old = zero_beta ? 0.0 : expected[i * ldc + j];
                        expected[i * ldc + j] = (float)(alpha * total + beta * old);
                    }
                fixture_backend->op.gemm(fixture_backend, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
                // The whole C including the padding columns (which must be untouched).
                assert_int_equal(gradcheck_count_mismatches("gemm", (size_t)m * ldc, c, expected,
                                                            FORWARD_RTOL, FORWARD_ATOL),
                                 0);
            }
}

// ---- batch norm -------------------------------------------------------------------------

static void check_batchnorm_train(size_t rows, int channels, uint64_t seed) {
    const float momentum = 0.1f, eps = 1e-5f;
    float *x = fixture_random_tensor(rows * channels, -2, 2, seed);
    for (size_t r = 0; r < rows; r++)  // a different offset per channel
        for (int c = 0; c < channels; c++) x[r * channels + c] += (float)c - 1.5f;
    float *gamma = fixture_random_tensor(channels, 0.5f, 1.5f, seed + 1);
    float *beta = fixture_random_tensor(channels, -0.5f, 0.5f, seed + 2);
    float *running_mean = fixture_random_tensor(channels, -0.2f, 0.2f, seed + 3);
    float *running_var = fixture_random_tensor(channels, 0.5f, 1.5f, seed + 4);
    float *y = fixture_tensor(rows * channels), *mean = fixture_tensor(channels), *inv_std = fixture_tensor(channels);
    float *want_y = fixture_tensor(rows * channels), *want_mean = fixture_tensor(channels);
    float *want_inv_std = fixture_tensor(channels), *want_rm = fixture_tensor(channels);
    float *want_rv = fixture_tensor(channels);

    // Textbook: var = E[x^2] - E[x]^2 (biased) normalises; the running
    // variance takes the unbiased var * R / (R - 1).
    for (int c = 0; c < channels; c++) {
        double s1 = 0.0, s2 = 0.0;
        for (size_t r = 0; r < rows; r++) {
            s1 += x[r * channels + c];
            s2 += (double)x[r * channels + c] * x[r * channels + c];
        }
        const double mu = s1 / rows, var = s2 / rows - mu * mu;
        for (size_t r = 0; r < rows; r++)
            want_y[r * channels + c] =
                (float)(gamma[c] * (x[r * channels + c] - mu) / sqrt(var + eps) + beta[c]);
        want_mean[c] = (float)mu;
        want_inv_std[c] = (float)(1.0 / sqrt(var + eps));
        want_rm[c] = (float)((1 - momentum) * running_mean[c] + momentum * mu);
        want_rv[c] = (float)((1 - momentum) * running_var[c] +
                             momentum * var * (double)rows / (double)(rows - 1));
    }
    fixture_backend->op.batchnorm_forward_train(fixture_backend, rows, channels, (const Act *)x,
                                                gamma, beta, momentum, eps, (Act *)y, mean, inv_std,
                                                running_mean, running_var);
    // E[x^2] - E[x]^2 in double loses ~1e-15 relative to the two-pass
    // variance: the forward tolerance still holds.
    assert_int_equal(gradcheck_count_mismatches("bn y", rows * channels, y, want_y, 1e-5, 1e-5), 0);
    assert_int_equal(gradcheck_count_mismatches("bn mean", channels, mean, want_mean, FORWARD_RTOL,
                                                FORWARD_ATOL),
                     0);
    assert_int_equal(gradcheck_count_mismatches("bn inv_std", channels, inv_std, want_inv_std,
                                                FORWARD_RTOL, FORWARD_ATOL),
                     0);
    assert_int_equal(gradcheck_count_mismatches("bn running_mean", channels, running_mean, want_rm,
                                                FORWARD_RTOL, FORWARD_ATOL),
                     0);
    assert_int_equal(gradcheck_count_mismatches("bn running_var", channels, running_var, want_rv,
                                                FORWARD_RTOL, FORWARD_ATOL),
                     0);
}

static void test_batchnorm_train_forward_and_running_stats(void **state) {
    check_batchnorm_train(3 * 5 * 7, 6, 200);  // 2d: N=3, 5x7 pixels
    check_batchnorm_train(4, 3, 210);          // 1d: a batch of 4 rows
    check_batchnorm_train(2, 5, 220);          // smallest batch that has an unbiased variance
}

static void test_batchnorm_eval(void **state) {
    const size_t rows = 11;
    const int channels = 5;
    const float eps = 1e-5f;
    float *x = fixture_random_tensor(rows * channels, -3, 3, 300);
    float *gamma = fixture_random_tensor(channels, 0.5f, 1.5f, 301);
    float *beta = fixture_random_tensor(channels, -0.5f, 0.5f, 302);
    float *rm = fixture_random_tensor(channels, -1, 1, 303), *rv = fixture_random_tensor(channels, 0.2f, 2, 304);
    float *y = fixture_tensor(rows * channels), *want = fixture_tensor(rows * channels);
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < channels; c++)
            want[r * channels + c] = (float)(gamma[c] * ((double)x[r * channels + c] - rm[c]) /
                                                 sqrt((double)rv[c] + eps) +
                                             beta[c]);
    fixture_backend->op.batchnorm_forward_eval(fixture_backend, rows, channels, (const Act *)x,
                                               gamma, beta, rm, rv, eps, (Act *)y);
    assert_int_equal(gradcheck_count_mismatches("bn eval", rows * channels, y, want, FORWARD_RTOL,
                                                FORWARD_ATOL),
                     0);
}

// ---- elementwise and reductions ---------------------------------------------------------------

// GELU against PyTorch's formula 0.5 x (1 + erf(x / sqrt 2)) in double, and
// known values: GELU(1) = Phi(1) = 0.841344746..., GELU(-1) = -(1 - Phi(1)).
static void test_gelu_forward(void **state) {
    const size_t n = 61;
    float *x = fixture_random_tensor(n, -6, 6, 450), *y = fixture_tensor(n);
    float *want = fixture_tensor(n);
    x[0] = 1.0f;
    x[1] = -1.0f;
    x[2] = 0.0f;
    x[3] = -10.0f;  // Phi ~ 7.6e-24: y ~ -7.6e-23, well inside float range
    for (size_t i = 0; i < n; i++)
        want[i] = (float)(0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0))));
    fixture_backend->op.gelu_forward(fixture_backend, n, (const Act *)x, (Act *)y);
    assert_int_equal(gradcheck_count_mismatches("gelu", n, y, want, FORWARD_RTOL, FORWARD_ATOL),
                     0);
    // float(0.8413447460685429) and float(-0.15865525393145707), 1 ulp of slack
    assert_float_equal(y[0], 0.8413447460685429, 1e-7);
    assert_float_equal(y[1], -0.15865525393145707, 2e-8);
    assert_true(y[2] == 0.0f);
    // Relative accuracy in the far tail (the erf form above cancels to 0 there).
    const double tail = -10.0 * 0.5 * erfc(10.0 / sqrt(2.0));
    assert_float_equal(y[3] / tail, 1.0, 1e-6);
}

static void test_elementwise(void **state) {
    const size_t n = 23;
    float *a = fixture_random_tensor(n, -1, 1, 400), *b = fixture_random_tensor(n, -1, 1, 401);
    float *y = fixture_tensor(n), *want = fixture_tensor(n);
    // Elementwise float ops must be exact: the reference computes the same
    // single float operation.
    fixture_backend->op.relu_forward(fixture_backend, n, (const Act *)a, (Act *)y);
    for (size_t i = 0; i < n; i++) want[i] = a[i] > 0 ? a[i] : 0;
    assert_memory_equal(y, want, n * sizeof(float));
    fixture_backend->op.relu_forward(fixture_backend, n, (const Act *)b, (Act *)b); // in place
    for (size_t i = 0; i < n; i++) assert_true(b[i] >= 0.0f);

    fixture_backend->op.add(fixture_backend, n, a, b, y);
    for (size_t i = 0; i < n; i++) want[i] = a[i] + b[i];
    assert_memory_equal(y, want, n * sizeof(float));
    fixture_backend->op.mul(fixture_backend, n, a, b, y);
    for (size_t i = 0; i < n; i++) want[i] = a[i] * b[i];
    assert_memory_equal(y, want, n * sizeof(float));

    for (size_t i = 0; i < n; i++) y[i] = NAN;  // beta = 0: y is not read
    fixture_backend->op.axpby(fixture_backend, n, 1.5f, a, 0.0f, y);
    for (size_t i = 0; i < n; i++) want[i] = 1.5f * a[i];
    assert_memory_equal(y, want, n * sizeof(float));
    fixture_backend->op.axpby(fixture_backend, n, -0.5f, b, 2.0f, y);
    for (size_t i = 0; i < n; i++) want[i] = -0.5f * b[i] + 2.0f * want[i];
    assert_int_equal(gradcheck_count_mismatches("axpby", n, y, want, 1e-6, 1e-7), 0);

    // bias_add over (rows, C)
    const size_t rows = 7;
    const int channels = 3;
    float *z = fixture_random_tensor(rows * channels, -1, 1, 402);
    float *bias = fixture_random_tensor(channels, -1, 1, 403);
    float *zwant = fixture_tensor(rows * channels);
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < channels; c++) zwant[r * channels + c] = z[r * channels + c] + bias[c];
    fixture_backend->op.bias_add(fixture_backend, rows, channels, bias, (Act *)z);
    assert_memory_equal(z, zwant, rows * channels * sizeof(float));
}

static void test_reductions(void **state) {
    const size_t n = 1001;
    float *a = fixture_random_tensor(n, -1, 1, 500), *b = fixture_random_tensor(n, -1, 1, 501);
    float *result = fixture_tensor(1);
    double sum = 0, squares = 0, dot = 0;
    for (size_t i = 0; i < n; i++) {
        sum += a[i];
        squares += (double)a[i] * a[i];
        dot += (double)a[i] * b[i];
    }
    fixture_backend->op.sum(fixture_backend, n, a, result);
    assert_float_equal(result[0], (float)sum, 1e-5);  // double accumulation: exact to rounding
    fixture_backend->op.sum_squares(fixture_backend, n, a, result);
    assert_float_equal(result[0], (float)squares, 1e-5);
    fixture_backend->op.dot(fixture_backend, n, a, b, result);
    assert_float_equal(result[0], (float)dot, 1e-5);

    const size_t rows = 13;
    const int channels = 5;
    float *columns = fixture_tensor(channels), *want = fixture_tensor(channels);
    for (int c = 0; c < channels; c++) {
        double total = 0;
        for (size_t r = 0; r < rows; r++) total += a[r * channels + c];
        want[c] = (float)total;
    }
    fixture_backend->op.column_sum(fixture_backend, rows, channels, a, columns);
    assert_int_equal(gradcheck_count_mismatches("column_sum", channels, columns, want,
                                                FORWARD_RTOL, FORWARD_ATOL),
                     0);
}

// ---- pooling -----------------------------------------------------------------------------

static void test_maxpool_forward(void **state) {
    // (N, H, W, C, window, stride, padding): ResNet's 3x3/2 pad 1 on odd sizes,
    // 2x2/2 without padding, 3x3/1 pad 1.
    const int cases[][7] = {{2, 7, 9, 3, 3, 2, 1}, {1, 6, 5, 5, 2, 2, 0}, {1, 5, 5, 4, 3, 1, 1}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int *c = cases[t];
        PoolShape s;
        assert_int_equal(pool_shape_make(&s, c[0], c[1], c[2], c[3], c[4], c[5], c[6], NULL), 0);
        const size_t in_sample = (size_t)s.in_height * s.in_width * s.channels;
        const size_t out_sample = (size_t)s.out_height * s.out_width * s.channels;
        // All negative: padding must act as -inf, never as 0.
        float *x = fixture_random_tensor(in_sample * s.batch, -5, -1, 600 + t);
        float *y = fixture_tensor(out_sample * s.batch);
        int32_t *argmax = (int32_t *)fixture_tensor(out_sample * s.batch);
        fixture_backend->op.maxpool_forward(fixture_backend, &s, (const Act *)x, (Act *)y, argmax);
        for (int n = 0; n < s.batch; n++)
            for (int oh = 0; oh < s.out_height; oh++)
                for (int ow = 0; ow < s.out_width; ow++)
                    for (int ch = 0; ch < s.channels; ch++) {
                        // The window clipped to the image.
                        const int h0 = oh * s.stride - s.padding, w0 = ow * s.stride - s.padding;
                        const int h_lo = h0 < 0 ? 0 : h0, w_lo = w0 < 0 ? 0 : w0;
                        const int h_hi = h0 + s.window < s.in_height ? h0 + s.window : s.in_height;
                        const int w_hi = w0 + s.window < s.in_width ? w0 + s.window : s.in_width;
                        const float *xn = x + n * in_sample;
                        float best = -INFINITY;
                        for (int h = h_lo; h < h_hi; h++)
                            for (int w = w_lo; w < w_hi; w++)
                                best = fmaxf(best, xn[(h * s.in_width + w) * s.channels + ch]);
                        const size_t o = n * out_sample + (oh * s.out_width + ow) * s.channels + ch;
                        assert_true(y[o] == best);
                        const int32_t index = argmax[o];
                        assert_int_equal(index % s.channels, ch);
                        const int ih = index / s.channels / s.in_width;
                        const int iw = index / s.channels % s.in_width;
                        assert_true(ih >= h_lo && ih < h_hi && iw >= w_lo && iw < w_hi);
                        assert_true(x[n * in_sample + index] == best);
                    }
    }
}

static void test_maxpool_ties_pick_first(void **state) {
    // All-equal input: like PyTorch, the first maximum in window order wins,
    // i.e. the top-left element of the window clipped to the image.
    PoolShape s;
    assert_int_equal(pool_shape_make(&s, 1, 5, 5, 2, 3, 2, 1, NULL), 0);
    float *x = fixture_tensor(5 * 5 * 2), *y = fixture_tensor((size_t)s.out_height * s.out_width * 2);
    int32_t *argmax = (int32_t *)fixture_tensor((size_t)s.out_height * s.out_width * 2);
    fixture_backend->op.fill(fixture_backend, x, 0.5f, 5 * 5 * 2);
    fixture_backend->op.maxpool_forward(fixture_backend, &s, (const Act *)x, (Act *)y, argmax);
    for (int oh = 0; oh < s.out_height; oh++)
        for (int ow = 0; ow < s.out_width; ow++)
            for (int ch = 0; ch < 2; ch++) {
                const int h = oh * 2 - 1 < 0 ? 0 : oh * 2 - 1, w = ow * 2 - 1 < 0 ? 0 : ow * 2 - 1;
                assert_int_equal(argmax[(oh * s.out_width + ow) * 2 + ch], (h * 5 + w) * 2 + ch);
            }
}

static void test_avgpool_forward(void **state) {
    const int batch = 3, pixels = 7 * 5, channels = 6;
    float *x = fixture_random_tensor((size_t)batch * pixels * channels, -1, 1, 700);
    float *y = fixture_tensor((size_t)batch * channels), *want = fixture_tensor((size_t)batch * channels);
    for (int n = 0; n < batch; n++)
        for (int c = 0; c < channels; c++) {
            double total = 0;
            for (int p = 0; p < pixels; p++) total += x[(n * pixels + p) * channels + c];
            want[n * channels + c] = (float)(total / pixels);
        }
    fixture_backend->op.avgpool_forward(fixture_backend, batch, pixels, channels, (const Act *)x,
                                        (Act *)y);
    assert_int_equal(gradcheck_count_mismatches("avgpool", (size_t)batch * channels, y, want,
                                                FORWARD_RTOL, FORWARD_ATOL),
                     0);
}

// ---- row-wise ops ------------------------------------------------------------------------------

static void test_softmax_forward(void **state) {
    const int rows = 5, dim = 7;
    const float scale = 2.5f;
    float *x = fixture_random_tensor((size_t)rows * dim, -1, 1, 800);
    for (int d = 0; d < dim; d++) x[4 * dim + d] += 1000.0f;  // would overflow a naive exp
    x[3 * dim + 0] = -200.0f;  // a spread of 2.5 * 400 in one row: exp(1000) overflows even
    x[3 * dim + 4] = 200.0f;   // in double unless the shift is the row maximum
    float *y = fixture_tensor((size_t)rows * dim), *log_y = fixture_tensor((size_t)rows * dim);
    float *want = fixture_tensor((size_t)rows * dim), *want_log = fixture_tensor((size_t)rows * dim);
    for (int r = 0; r < rows; r++) {
        // exp(s x_d - s max) / sum exp(s x_j - s max): the textbook stable form.
        double max = x[r * dim];
        for (int d = 1; d < dim; d++) max = fmax(max, x[r * dim + d]);
        double total = 0;
        for (int d = 0; d < dim; d++) total += exp(scale * ((double)x[r * dim + d] - max));
        for (int d = 0; d < dim; d++) {
            const double shifted = scale * ((double)x[r * dim + d] - max);
            want[r * dim + d] = (float)(exp(shifted) / total);
            want_log[r * dim + d] = (float)(shifted - log(total));
        }
    }
    fixture_backend->op.softmax_forward(fixture_backend, rows, dim, x, scale, y);
    fixture_backend->op.log_softmax_forward(fixture_backend, rows, dim, x, scale, log_y);
    // Both sides form scale * x exactly in double (a float product fits), so
    // the forward tolerance holds even for the +1000 row.
    assert_int_equal(gradcheck_count_mismatches("softmax", (size_t)rows * dim, y, want,
                                                FORWARD_RTOL, FORWARD_ATOL),
                     0);
    assert_int_equal(gradcheck_count_mismatches("log_softmax", (size_t)rows * dim, log_y, want_log,
                                                FORWARD_RTOL, FORWARD_ATOL),
                     0);
    // Rows sum to 1 (within the float rounding of 7 terms).
    for (int r = 0; r < rows; r++) {
        double total = 0;
        for (int d = 0; d < dim; d++) total += y[r * dim + d];
        assert_float_equal(total, 1.0, 1e-6);
    }
}

static void test_l2_normalize_forward(void **state) {
    const int rows = 4, dim = 9;
    const float eps = 0.1f;
    float *x = fixture_random_tensor((size_t)rows * dim, -1, 1, 900);
    for (int d = 0; d < dim; d++) x[2 * dim + d] *= 0.01f;  // norm < eps: divided by eps
    float *y = fixture_tensor((size_t)rows * dim), *norm = fixture_tensor(rows);
    float *want = fixture_tensor((size_t)rows * dim), *want_norm = fixture_tensor(rows);
    for (int r = 0; r < rows; r++) {
        double squares = 0;
        for (int d = 0; d < dim; d++) squares += (double)x[r * dim + d] * x[r * dim + d];
        want_norm[r] = (float)sqrt(squares);
        const double divisor = sqrt(squares) > eps ? sqrt(squares) : eps;
        for (int d = 0; d < dim; d++) want[r * dim + d] = (float)(x[r * dim + d] / divisor);
    }
    assert_true(want_norm[2] < eps && want_norm[0] > eps);
    fixture_backend->op.l2_normalize_forward(fixture_backend, rows, dim, x, eps, y, norm);
    assert_int_equal(gradcheck_count_mismatches("l2 y", (size_t)rows * dim, y, want, FORWARD_RTOL,
                                                FORWARD_ATOL),
                     0);
    assert_int_equal(gradcheck_count_mismatches("l2 norm", rows, norm, want_norm, FORWARD_RTOL,
                                                FORWARD_ATOL),
                     0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_memory_ops, fixture_tensors_free),
        cmocka_unit_test_teardown(test_conv_forward_matches_naive_nchw, fixture_tensors_free),
        cmocka_unit_test_teardown(test_conv_plan_rejects_inconsistent_shape, fixture_tensors_free),
        cmocka_unit_test_teardown(test_gemm_all_transposes, fixture_tensors_free),
        cmocka_unit_test_teardown(test_batchnorm_train_forward_and_running_stats, fixture_tensors_free),
        cmocka_unit_test_teardown(test_batchnorm_eval, fixture_tensors_free),
        cmocka_unit_test_teardown(test_elementwise, fixture_tensors_free),
        cmocka_unit_test_teardown(test_gelu_forward, fixture_tensors_free),
        cmocka_unit_test_teardown(test_reductions, fixture_tensors_free),
        cmocka_unit_test_teardown(test_maxpool_forward, fixture_tensors_free),
        cmocka_unit_test_teardown(test_maxpool_ties_pick_first, fixture_tensors_free),
        cmocka_unit_test_teardown(test_avgpool_forward, fixture_tensors_free),
        cmocka_unit_test_teardown(test_softmax_forward, fixture_tensors_free),
        cmocka_unit_test_teardown(test_l2_normalize_forward, fixture_tensors_free),
    };
    return cmocka_run_group_tests(tests, fixture_backend_create_ref, fixture_backend_destroy);
}
