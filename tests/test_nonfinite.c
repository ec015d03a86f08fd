// NaN and infinity are never silent (issue: divergence detected): ops of
// every backend propagate them as PyTorch does, a ResNet forward keeps a NaN
// input visible in its features, count_nonfinite counts them, and the
// weight and checkpoint readers and the safetensors writer refuse them
// naming the tensor.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend_fixture.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "nn/weights.h"
#include "safetensors_edit.h"
#include "train/checkpoint.h"

// Each op test runs once per backend, named by the cmocka prestate
// (fixture_backend_of_prestate: cuda without a GPU skips).

static float *upload(Backend *backend, const float *host, size_t n) {
    float *device = backend->op.alloc(backend, n * sizeof *device);
    assert_non_null(device);
    backend->op.upload(backend, device, host, n * sizeof *host);
    return device;
}

static void download(Backend *backend, float *host, const float *device, size_t n) {
    backend->op.download(backend, host, device, n * sizeof *host);
}

// relu(NaN) = NaN, relu(+-inf) = inf / 0, as torch.relu; the backward lets
// the gradient through where the output is NaN (torch: zero only where
// the output is <= 0).
static void test_relu_keeps_nan(void **state) {
    const float x[6] = {NAN, -1.0f, 2.0f, INFINITY, -INFINITY, 0.0f};
    const float dy[6] = {1, 1, 1, 1, 1, 1};
    {
        Backend *backend = fixture_backend_of_prestate(state);
        float *dx = upload(backend, x, 6), *y = upload(backend, x, 6), *g = upload(backend, dy, 6);
        backend->op.relu_forward(backend, 6, (const Act *)dx, (Act *)y);
        float out[6];
        download(backend, out, y, 6);
        assert_true(isnan(out[0]));
        assert_true(out[1] == 0.0f && out[2] == 2.0f && isinf(out[3]) && out[4] == 0.0f);
        backend->op.relu_backward(backend, 6, (const Act *)y, (const Act *)g, (Act *)dx);
        download(backend, out, dx, 6);
        assert_true(out[0] == 1.0f && out[1] == 0.0f && out[2] == 1.0f && out[5] == 0.0f);
        backend->op.free(backend, dx), backend->op.free(backend, y), backend->op.free(backend, g);
        backend_destroy(backend);
    }
}

// BatchNorm + ReLU (training): a NaN in channel 1 makes that channel's
// statistics and outputs NaN; channel 0 stays finite.
static void test_batchnorm_relu_keeps_nan(void **state) {
    enum { ROWS = 5, CHANNELS = 2 };
    float x[ROWS * CHANNELS];
    for (int i = 0; i < ROWS * CHANNELS; i++) x[i] = (float)(i % 7) - 3.0f;
    x[2 * CHANNELS + 1] = NAN;
    const float ones[CHANNELS] = {1, 1}, zeros[CHANNELS] = {0, 0};
    {
        Backend *backend = fixture_backend_of_prestate(state);
        float *dx = upload(backend, x, ROWS * CHANNELS), *y = upload(backend, x, ROWS * CHANNELS);
        float *gamma = upload(backend, ones, CHANNELS), *beta = upload(backend, zeros, CHANNELS);
        float *mean = upload(backend, zeros, CHANNELS), *inv = upload(backend, zeros, CHANNELS);
        float *run_mean = upload(backend, zeros, CHANNELS), *run_var = upload(backend, ones, CHANNELS);
        backend->op.batchnorm_relu_forward_train(backend, ROWS, CHANNELS, (const Act *)dx, NULL,
                                                 gamma, beta, 0.1f, 1e-5f, (Act *)y, mean, inv,
                                                 run_mean, run_var);
        float out[ROWS * CHANNELS], stats[CHANNELS];
        download(backend, out, y, ROWS * CHANNELS);
        for (int r = 0; r < ROWS; r++) {
            assert_true(isfinite(out[r * CHANNELS]));
            assert_true(isnan(out[r * CHANNELS + 1]));
        }
        download(backend, stats, run_var, CHANNELS);
        assert_true(isfinite(stats[0]) && isnan(stats[1]));
        float *tensors[] = {dx, y, gamma, beta, mean, inv, run_mean, run_var};
        for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++)
            backend->op.free(backend, tensors[i]);
        backend_destroy(backend);
    }
}

// Max pooling: a window holding NaN pools to NaN (torch.nn.functional.max_pool2d).
static void test_maxpool_keeps_nan(void **state) {
    enum { SIDE = 4, CHANNELS = 3, IN = SIDE * SIDE * CHANNELS };
    float x[IN];
    for (int i = 0; i < IN; i++) x[i] = (float)i;
    x[(1 * SIDE + 1) * CHANNELS + 2] = NAN;  // pixel (1, 1), channel 2
    ErrorMessage err = {{0}};
    PoolShape shape;
    assert_int_equal(pool_shape_make(&shape, 1, SIDE, SIDE, CHANNELS, 2, 2, 0, &err), 0);
    const size_t out_count = (size_t)shape.out_height * shape.out_width * CHANNELS;
    {
        Backend *backend = fixture_backend_of_prestate(state);
        float *in = upload(backend, x, IN), *y = backend->op.alloc(backend, out_count * 4);
        int32_t *argmax = backend->op.alloc(backend, out_count * 4);
        backend->op.maxpool_forward(backend, &shape, (const Act *)in, (Act *)y, argmax);
        float out[IN];
        download(backend, out, y, out_count);
        for (size_t o = 0; o < out_count; o++)
            assert_true(o == 2 ? isnan(out[o]) : isfinite(out[o]));  // window (0, 0), channel 2
        backend->op.free(backend, in), backend->op.free(backend, y), backend->op.free(backend, argmax);
        backend_destroy(backend);
    }
}

// L2 normalisation and softmax: a NaN in a row makes the whole row NaN (the
// norm is not clamped to eps, as torch.nn.functional.normalize's clamp_min).
static void test_rows_keep_nan(void **state) {
    enum { ROWS = 2, DIM = 5 };
    float x[ROWS * DIM];
    for (int i = 0; i < ROWS * DIM; i++) x[i] = 0.25f * (float)(i + 1);
    x[DIM + 3] = NAN;
    {
        Backend *backend = fixture_backend_of_prestate(state);
        float *in = upload(backend, x, ROWS * DIM), *y = upload(backend, x, ROWS * DIM);
        float *norm = upload(backend, x, ROWS);
        float out[ROWS * DIM];
        backend->op.l2_normalize_forward(backend, ROWS, DIM, in, 1e-12f, y, norm);
        download(backend, out, y, ROWS * DIM);
        for (int i = 0; i < ROWS * DIM; i++) assert_true(i < DIM ? isfinite(out[i]) : isnan(out[i]));
        backend->op.softmax_forward(backend, ROWS, DIM, in, 1.0f, y);
        download(backend, out, y, ROWS * DIM);
        for (int i = 0; i < ROWS * DIM; i++) assert_true(i < DIM ? isfinite(out[i]) : isnan(out[i]));
        backend->op.free(backend, in), backend->op.free(backend, y), backend->op.free(backend, norm);
        backend_destroy(backend);
    }
}

// count_nonfinite: NaN, +inf and -inf count; the largest float, the
// smallest subnormal and -0 do not; the result accumulates (+=).
static void test_count_nonfinite(void **state) {
    enum { N = 1000 };
    // The backend first: a cuda group without a GPU skips here (a longjmp),
    // before anything is allocated.
    Backend *backend = fixture_backend_of_prestate(state);
    float *x = calloc(N, sizeof *x);
    for (int i = 0; i < N; i++) x[i] = (float)i - 500.0f;
    x[3] = NAN, x[500] = INFINITY, x[999] = -INFINITY, x[10] = -NAN;
    x[20] = 3.4028235e38f, x[21] = 1e-45f, x[22] = -0.0f;
    {
        float *in = upload(backend, x, N);
        const float start = 2.0f;
        float *result = upload(backend, &start, 1);
        backend->op.count_nonfinite(backend, N, in, result);
        float count;
        download(backend, &count, result, 1);
        assert_true(count == 2.0f + 4.0f);
        backend->op.free(backend, in), backend->op.free(backend, result);
        backend_destroy(backend);
    }
    free(x);
}

// A NaN pixel reaches the features of a ResNet-18 forward (before the fix,
// ReLU turned the NaN channel into zeros and the loss stayed finite).
static void test_resnet_forward_keeps_nan(void **state) {
    enum { BATCH = 2, SIZE = 32 };
    const size_t pixels = (size_t)BATCH * SIZE * SIZE * 3;
    Backend *backend = fixture_backend_of_prestate(state);  // may skip: before any malloc
    float *image = malloc(pixels * sizeof *image);
    for (size_t i = 0; i < pixels; i++) image[i] = (float)(i % 13) / 13.0f - 0.5f;
    image[123] = NAN;
    {
        ErrorMessage err = {{0}};
        Resnet model;
        const ResnetInputShape shape = {BATCH, SIZE};
        const ResnetConfig config = resnet_config_default(18);
        if (resnet_create(&model, backend, &config, &shape, 1, 7, &err)) fail_msg("%s", err.text);
        float *input = upload(backend, image, pixels);
        for (int training = 1; training >= 0; training--) {
            if (resnet_forward(&model, 0, BATCH, (const Act *)input, training, &err))
                fail_msg("%s", err.text);
            const size_t count = (size_t)BATCH * model.feature_dim;
            float *features = malloc(count * sizeof *features);
            download(backend, features, (const float *)(resnet_features(&model, 0)), count);
            size_t nan_count = 0;
            for (size_t i = 0; i < count; i++) nan_count += isnan(features[i]) != 0;
            // Training: batch statistics spread the NaN to every feature;
            // evaluation: at least the first sample's features.
            if (training) assert_int_equal(nan_count, count);
            else assert_true(nan_count >= (size_t)model.feature_dim / 2);
            free(features);
        }
        backend->op.free(backend, input);
        resnet_free(&model);
        backend_destroy(backend);
    }
    free(image);
}

// ---- files ------------------------------------------------------------------------

// A safetensors file with one F32 tensor "w" (4), optionally with w[2] = NaN
// patched in afterwards (our writer refuses to write it) and the CRC-32
// re-recorded.
static void write_weights(const char *path, int with_nan) {
    const float values[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    const SafeTensorWrite tensor = {.name = "w", .dtype = SAFE_F32, .rank = 1, .shape = {4},
                                    .data = values};
    ErrorMessage err = {{0}};
    if (safetensors_write(path, &tensor, 1, NULL, 0, &err)) fail_msg("%s", err.text);
    if (!with_nan) return;
    FILE *file = fopen(path, "r+b");
    assert_non_null(file);
    uint64_t header = 0;
    assert_int_equal(fread(&header, 8, 1, file), 1);
    const float nan = NAN;
    assert_int_equal(fseek(file, (long)(8 + header + 2 * sizeof(float)), SEEK_SET), 0);
    assert_int_equal(fwrite(&nan, sizeof nan, 1, file), 1);
    fclose(file);
    // Read as written: the NaN check is under test, not the CRC-32's.
    assert_int_equal(safetensors_edit_rerecord_crc32(path, 0), 0);
}

// The writer refuses NaN and infinity, naming the tensor and the element,
// and leaves no file behind.
static void test_writer_refuses_nonfinite(void **state) {
    char path[] = "/tmp/ltc-nonfinite-XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    unlink(path);
    const float values[3] = {1.0f, INFINITY, 2.0f};
    const SafeTensorWrite tensor = {.name = "layer.weight", .dtype = SAFE_F32, .rank = 1,
                                    .shape = {3}, .data = values};
    ErrorMessage err = {{0}};
    assert_int_equal(safetensors_write(path, &tensor, 1, NULL, 0, &err), -1);
    assert_non_null(strstr(err.text, "\"layer.weight\": non-finite value (NaN or inf) at element 1"));
    assert_int_equal(access(path, F_OK), -1);
}

// Loading weights with a NaN: refused with the tensor's name; the same file
// without it loads.
static void test_loader_refuses_nonfinite(void **state) {
    char path[] = "/tmp/ltc-nonfinite-XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    ErrorMessage err = {{0}};
    ErrorMessage backend_err = {{0}};
    Backend *backend = backend_create("ref", 1, &backend_err);
    assert_non_null(backend);
    ParameterSet params;
    parameter_set_init(&params, backend, 1);
    const int shape[1] = {4};
    assert_true(parameter_declare(&params, "w", PARAM_WEIGHT, 1, shape, NULL, &err) >= 0);
    assert_int_equal(parameter_set_allocate(&params, &err), 0);
    write_weights(path, 0);
    if (weights_load(path, &params, NULL, NULL, NULL, &err)) fail_msg("%s", err.text);
    write_weights(path, 1);
    assert_int_equal(weights_load(path, &params, NULL, NULL, NULL, &err), -1);
    assert_non_null(strstr(err.text, "tensor \"w\" holds 1 non-finite value(s)"));
    assert_non_null(strstr(err.text, "element 2"));
    parameter_set_free(&params);
    backend_destroy(backend);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        ON_EVERY_BACKEND(test_relu_keeps_nan),
        ON_EVERY_BACKEND(test_batchnorm_relu_keeps_nan),
        ON_EVERY_BACKEND(test_maxpool_keeps_nan),
        ON_EVERY_BACKEND(test_rows_keep_nan),
        ON_EVERY_BACKEND(test_count_nonfinite),
        ON_EVERY_BACKEND(test_resnet_forward_keeps_nan),
        cmocka_unit_test(test_writer_refuses_nonfinite),
        cmocka_unit_test(test_loader_refuses_nonfinite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
