// Dynamic loss scaling (nn/loss_scaler.h) on every backend: the scale
// trajectory of PyTorch's GradScaler (back off and skip on NaN/inf, grow
// after growth_interval good steps, never grow to infinity), checkpoint
// restore, refusal of invalid configurations, and whole steps as the
// trainer runs them (the scaled backward seed, the step gate unscaling and
// clipping, the update skipped, AdamW's count of applied steps) against
// GradScaler + AdamW / SGD (tests/fixtures/loss_scaler.safetensors, made by
// tools/make_scaler_fixtures.py).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_fixture.h"
#include "fixture_init.h"
#include "fixture_tensors.h"
#include "nn/loss_scaler.h"
#include "nn/optimizer.h"
#include "nn/step_gate.h"

static LossScaler make_scaler(Backend *backend, float scale, int interval) {
    LossScalerConfig config = loss_scaler_config_default();
    config.initial_scale = scale;
    config.growth_interval = interval;
    LossScaler scaler;
    ErrorMessage err = {{0}};
    if (loss_scaler_init(&scaler, backend, &config, &err)) fail_msg("%s", err.text);
    return scaler;
}

// One step whose single gradient tensor holds value (and 1, 2): its
// NaN/inf count decides; returns the state after the update.
static LossScalerState step_with(LossScaler *scaler, float *grad, float value) {
    Backend *backend = scaler->backend;
    const float host[3] = {value, 1.0f, 2.0f};
    backend->op.upload(backend, grad, host, sizeof host);
    backend->op.fill(backend, grad + 3, 0.0f, 1);
    backend->op.count_nonfinite(backend, 3, grad, grad + 3);
    loss_scaler_update(scaler, grad + 3);
    return loss_scaler_read(scaler);
}

static void assert_state(LossScalerState got, float scale, int good_steps) {
    if (got.scale != scale || got.good_steps != good_steps)
        fail_msg("state (scale %g, good %d), expected (%g, %d)", got.scale, got.good_steps,
                 scale, good_steps);
}

// GradScaler with growth_interval 3 from scale 8: three good steps double
// it, an inf or a NaN halves it and restarts the count; 1/scale follows.
static void test_scale_trajectory(void **state) {
    Backend *backend = fixture_backend_of_prestate(state);
    float *grad = backend->op.alloc(backend, 4 * sizeof *grad);
    LossScaler scaler = make_scaler(backend, 8.0f, 3);
    assert_state(loss_scaler_read(&scaler), 8.0f, 0);
    assert_state(step_with(&scaler, grad, 1.0f), 8.0f, 1);
    assert_state(step_with(&scaler, grad, 1.0f), 8.0f, 2);
    assert_state(step_with(&scaler, grad, 1.0f), 16.0f, 0);
    assert_state(step_with(&scaler, grad, 1.0f), 16.0f, 1);
    assert_state(step_with(&scaler, grad, INFINITY), 8.0f, 0);
    assert_state(step_with(&scaler, grad, NAN), 4.0f, 0);
    assert_state(step_with(&scaler, grad, -INFINITY), 2.0f, 0);
    assert_state(step_with(&scaler, grad, 1.0f), 2.0f, 1);
    float inverse = 0;
    backend->op.download(backend, &inverse, loss_scaler_unscale(&scaler), sizeof inverse);
    assert_true(inverse == 0.5f);
    loss_scaler_free(&scaler);
    backend->op.free(backend, grad);
    backend_destroy(backend);
}

// A scale whose growth would overflow stays where it is (and the count
// restarts), as GradScaler's isfinite guard.
static void test_growth_stays_finite(void **state) {
    Backend *backend = fixture_backend_of_prestate(state);
    float *grad = backend->op.alloc(backend, 4 * sizeof *grad);
    LossScaler scaler = make_scaler(backend, 3.0e38f, 1);
    assert_state(step_with(&scaler, grad, 1.0f), 3.0e38f, 0);
    loss_scaler_free(&scaler);
    scaler = make_scaler(backend, 1.0e38f, 1);
    assert_state(step_with(&scaler, grad, 1.0f), 2.0e38f, 0);
    loss_scaler_free(&scaler);
    backend->op.free(backend, grad);
    backend_destroy(backend);
}

// A restored checkpoint state continues the count: one good step short of
// the interval grows at the next good step.
static void test_restore(void **state) {
    Backend *backend = fixture_backend_of_prestate(state);
    float *grad = backend->op.alloc(backend, 4 * sizeof *grad);
    LossScaler scaler = make_scaler(backend, 65536.0f, 2000);
    ErrorMessage err = {{0}};
    assert_int_equal(loss_scaler_restore(&scaler, 256.0f, 1999, &err), 0);
    assert_state(step_with(&scaler, grad, 1.0f), 512.0f, 0);
    const float bad_scales[] = {0.0f, -1.0f, INFINITY, NAN};
    for (int i = 0; i < 4; i++) {
        err.text[0] = 0;
        assert_int_equal(loss_scaler_restore(&scaler, bad_scales[i], 0, &err), -1);
        assert_non_null(strstr(err.text, "out of range"));
    }
    assert_int_equal(loss_scaler_restore(&scaler, 2.0f, 2000, &err), -1);
    assert_int_equal(loss_scaler_restore(&scaler, 2.0f, -1, &err), -1);
    assert_state(loss_scaler_read(&scaler), 512.0f, 0);  // unchanged by refusals
    loss_scaler_free(&scaler);
    backend->op.free(backend, grad);
    backend_destroy(backend);
}

static void test_invalid_config(void **state) {
    (void)state;
    ErrorMessage err = {{0}};
    LossScaler scaler;
    const LossScalerConfig base = loss_scaler_config_default();
    assert_true(base.initial_scale == 65536.0f && base.growth == 2.0f && base.backoff == 0.5f &&
                base.growth_interval == 2000);
    LossScalerConfig bad[4] = {base, base, base, base};
    bad[0].initial_scale = INFINITY;
    bad[1].growth = 1.0f;
    bad[2].backoff = 1.0f;
    bad[3].growth_interval = 0;
    Backend *backend = backend_create("ref", 1, &err);
    assert_non_null(backend);
    for (int i = 0; i < 4; i++) {
        err.text[0] = 0;
        assert_int_equal(loss_scaler_init(&scaler, backend, &bad[i], &err), -1);
        assert_non_null(strstr(err.text, "invalid configuration"));
    }
    backend_destroy(backend);
}

// ---- whole steps against GradScaler -------------------------------------------------------

#define SCALER_STEPS 8  // what the fixture stores (tools/make_scaler_fixtures.py)

typedef struct ScalerRun {
    const char *name;
    OptimizerKind kind;
    float lr, weight_decay;  // weight decay on w only
} ScalerRun;

// The fixture's gradient of step t with its injected inf or NaN.
static void fixture_gradient(const char *run, const char *name, int step, float *out, size_t n) {
    char key[PARAM_MAX_NAME + 32];
    snprintf(key, sizeof key, "scaler/grad/%s/%d", name, step);
    fixture_fill(key, 0.0f, 1.0f, out, n);
    if (strcmp(run, "adamw") == 0 && step == 3 && strcmp(name, "w") == 0) out[5] = INFINITY;
    if (strcmp(run, "adamw") == 0 && step == 7 && strcmp(name, "b") == 0) out[2] = NAN;
    if (strcmp(run, "sgd") == 0 && step == 1 && strcmp(name, "w") == 0) out[0] = INFINITY;
}

static void compare_floats(const char *label, const float *actual, const float *expected,
                           size_t n) {
    // fp32 against fp32 PyTorch (its foreach kernels round in another order
    // and may fuse a*b+c): a few ulps per step of values up to ~1, carried
    // into later steps by the optimizer state: 1e-6 + 1e-5 |expected|.
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)actual[i] - expected[i]) <= 1e-6 + 1e-5 * fabs((double)expected[i])))
            fail_msg("%s[%zu] = %.9g, PyTorch %.9g", label, i, actual[i], expected[i]);
}

static void check_scaler_run(Backend *backend, const SafeTensors *file, const ScalerRun *run) {
    ErrorMessage err = {{0}};
    ParameterSet set;
    parameter_set_init(&set, backend, 1);
    const int w_shape[2] = {4, 3}, b_shape[1] = {4};
    assert_int_equal(parameter_declare(&set, "w", PARAM_WEIGHT, 2, w_shape, NULL, &err), 0);
    assert_int_equal(parameter_declare(&set, "b", PARAM_BIAS, 1, b_shape, NULL, &err), 1);
    assert_int_equal(parameter_set_allocate(&set, &err), 0);
    for (int i = 0; i < 2; i++) {
        float host[12];
        char key[PARAM_MAX_NAME + 16];
        snprintf(key, sizeof key, "scaler/%s", set.params[i].name);
        fixture_fill(key, 0.0f, 0.5f, host, set.params[i].count);
        snprintf(key, sizeof key, "init/%s", set.params[i].name);  // the same float32 formula
        const SafeTensor *init =
            fixture_find_tensor(file, key, SAFE_F32, (int64_t)set.params[i].count);
        assert_memory_equal(host, safetensors_data(file, init), set.params[i].count * sizeof(float));
        backend->op.upload(backend, set.params[i].value, host,
                           set.params[i].count * sizeof(float));
    }
    OptimizerConfig config = optimizer_config_default(run->kind);
    Optimizer *opt = optimizer_create(backend, &set, &config, &err);
    if (!opt) fail_msg("%s", err.text);
    StepGate gate;
    assert_int_equal(step_gate_create(&gate, backend, 1, &err), 0);
    LossScaler scaler = make_scaler(backend, 1024.0f, 2);
    int applied = 0;
    for (int step = 1; step <= SCALER_STEPS; step++) {
        // The backward of sum(w Gw) + sum(b Gb) seeded with the scale:
        // gradients = scale x G (the trainer's methods multiply their loss
        // gradient by it the same way).
        parameter_set_zero_grads(&set);
        for (int i = 0; i < 2; i++) {
            float host[12];
            fixture_gradient(run->name, set.params[i].name, step, host, set.params[i].count);
            backend->op.upload(backend, set.params[i].grad, host,
                               set.params[i].count * sizeof(float));
        }
        backend->op.scale_rows(backend, 1, (int)set.total, set.grads, loss_scaler_scale(&scaler),
                               set.grads);
        // The trainer's sequence (train/trainer.c train_update).
        step_gate_open(&gate);
        step_gate_measure(&gate, 0, &set);
        step_gate_close(&gate, 1.0f, loss_scaler_unscale(&scaler), 1.0f);
        optimizer_step(opt, run->lr, run->weight_decay, step_gate_values(&gate));
        loss_scaler_update(&scaler, step_gate_values(&gate) + GATE_SKIP);

        char key[PARAM_MAX_NAME + 64];
        StepGateReading reading;
        step_gate_read(&gate, 1.0f, &reading);
        snprintf(key, sizeof key, "%s/skipped/%d", run->name, step);
        assert_int_equal(reading.skipped, fixture_read_f32(file, key) != 0.0f);
        applied += !reading.skipped;
        assert_int_equal(optimizer_step_count(opt), applied);
        const LossScalerState scale_state = loss_scaler_read(&scaler);
        snprintf(key, sizeof key, "%s/scale/%d", run->name, step);
        assert_true(scale_state.scale == fixture_read_f32(file, key));
        snprintf(key, sizeof key, "%s/tracker/%d", run->name, step);
        assert_int_equal(scale_state.good_steps, (int)fixture_read_f32(file, key));
        for (int i = 0; i < 2; i++) {
            float actual[12];
            const Parameter *param = &set.params[i];
            backend->op.download(backend, actual, param->value, param->count * sizeof(float));
            snprintf(key, sizeof key, "%s/%s/%d", run->name, param->name, step);
            const SafeTensor *expected =
                fixture_find_tensor(file, key, SAFE_F32, (int64_t)param->count);
            float host_expected[12];
            memcpy(host_expected, safetensors_data(file, expected), param->count * sizeof(float));
            compare_floats(key, actual, host_expected, param->count);
        }
    }
    loss_scaler_free(&scaler);
    step_gate_free(&gate);
    optimizer_free(opt);
    parameter_set_free(&set);
}

static void test_matches_grad_scaler(void **state) {
    Backend *backend = fixture_backend_of_prestate(state);
    const char *dir = getenv("LTC_FIXTURES");
    char path[512];
    snprintf(path, sizeof path, "%s/loss_scaler.safetensors", dir ? dir : "tests/fixtures");
    SafeTensors file;
    ErrorMessage err = {{0}};
    if (safetensors_read(path, &file, &err)) fail_msg("%s", err.text);
    const ScalerRun runs[] = {
        {"adamw", OPTIMIZER_ADAMW, 1e-2f, 0.05f},
        {"sgd", OPTIMIZER_SGD, 0.1f, 1e-4f},
    };
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++)
        check_scaler_run(backend, &file, &runs[r]);
    safetensors_free(&file);
    backend_destroy(backend);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        ON_EVERY_BACKEND(test_scale_trajectory),
        ON_EVERY_BACKEND(test_growth_stays_finite),
        ON_EVERY_BACKEND(test_restore),
        ON_EVERY_BACKEND(test_matches_grad_scaler),
        cmocka_unit_test(test_invalid_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
