// Dynamic loss scaling (nn/loss_scaler.h) on every backend: the scale
// trajectory of PyTorch's GradScaler (back off and skip on NaN/inf, grow
// after growth_interval good steps, never grow to infinity), unscaling
// that is exact for power-of-two scales, the NaN/inf count summed over the
// step's tensors, and refusal of invalid configurations and checkpoint
// state.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend_fixture.h"
#include "nn/loss_scaler.h"

static LossScaler make_scaler(Backend *backend, float scale, int interval) {
    LossScalerConfig config = loss_scaler_config_default();
    config.initial_scale = scale;
    config.growth_interval = interval;
    LossScaler scaler;
    ErrorMessage err = {{0}};
    if (loss_scaler_init(&scaler, backend, &config, &err)) fail_msg("%s", err.text);
    return scaler;
}

// One step whose single gradient tensor holds value (and 1, 2): returns
// the state after the update.
static LossScalerState step_with(LossScaler *scaler, float *grad, float value) {
    const float host[3] = {value, 1.0f, 2.0f};
    scaler->backend->op.upload(scaler->backend, grad, host, sizeof host);
    loss_scaler_begin_step(scaler);
    loss_scaler_unscale(scaler, 3, grad);
    loss_scaler_update(scaler);
    return loss_scaler_read(scaler);
}

static void assert_state(LossScalerState got, float scale, int good_steps, int skipped) {
    if (got.scale != scale || got.good_steps != good_steps || got.skipped != skipped)
        fail_msg("state (scale %g, good %d, skipped %d), expected (%g, %d, %d)", got.scale,
                 got.good_steps, got.skipped, scale, good_steps, skipped);
}

// GradScaler with growth_interval 3 from scale 8: three good steps double
// it, an inf or a NaN halves it and restarts the count.
static void test_scale_trajectory(void **state) {
    Backend *backend = fixture_backend_of_prestate(state);
    float *grad = backend->op.alloc(backend, 3 * sizeof *grad);
    LossScaler scaler = make_scaler(backend, 8.0f, 3);
    assert_state(loss_scaler_read(&scaler), 8.0f, 0, 0);
    assert_state(step_with(&scaler, grad, 1.0f), 8.0f, 1, 0);
    assert_state(step_with(&scaler, grad, 1.0f), 8.0f, 2, 0);
    assert_state(step_with(&scaler, grad, 1.0f), 16.0f, 0, 0);
    assert_state(step_with(&scaler, grad, 1.0f), 16.0f, 1, 0);
    assert_state(step_with(&scaler, grad, INFINITY), 8.0f, 0, 1);
    assert_state(step_with(&scaler, grad, NAN), 4.0f, 0, 1);
    assert_state(step_with(&scaler, grad, -INFINITY), 2.0f, 0, 1);
    assert_state(step_with(&scaler, grad, 1.0f), 2.0f, 1, 0);
    loss_scaler_free(&scaler);
    backend->op.free(backend, grad);
    backend_destroy(backend);
}

// A scale whose growth would overflow stays where it is (and the count
// restarts), as GradScaler's isfinite guard.
static void test_growth_stays_finite(void **state) {
    Backend *backend = fixture_backend_of_prestate(state);
    float *grad = backend->op.alloc(backend, 3 * sizeof *grad);
    LossScaler scaler = make_scaler(backend, 3.0e38f, 1);
    assert_state(step_with(&scaler, grad, 1.0f), 3.0e38f, 0, 0);
    loss_scaler_free(&scaler);
    scaler = make_scaler(backend, 1.0e38f, 1);
    assert_state(step_with(&scaler, grad, 1.0f), 2.0e38f, 0, 0);
    loss_scaler_free(&scaler);
    backend->op.free(backend, grad);
    backend_destroy(backend);
}

// Unscaling divides by the scale (exact for a power of two), counts NaN
// and inf over every tensor of the step (checked before the division, so
// a scale below 1 cannot turn a finite value into a counted inf), and the
// count restarts with the next step.
static void test_unscale_and_count(void **state) {
    Backend *backend = fixture_backend_of_prestate(state);
    enum { N = 1000 };
    static float host[N], out[N];
    for (int i = 0; i < N; i++) host[i] = (float)(i - 500) * 0.75f;
    float *a = backend->op.alloc(backend, N * sizeof *a);
    float *b = backend->op.alloc(backend, N * sizeof *b);
    LossScaler scaler = make_scaler(backend, 1024.0f, 2000);
    backend->op.upload(backend, a, host, sizeof host);
    host[17] = INFINITY, host[900] = NAN;
    backend->op.upload(backend, b, host, sizeof host);
    loss_scaler_begin_step(&scaler);
    loss_scaler_unscale(&scaler, N, a);
    loss_scaler_unscale(&scaler, N, b);
    float found = 0;
    backend->op.download(backend, &found, loss_scaler_found(&scaler), sizeof found);
    assert_true(found == 2.0f);
    backend->op.download(backend, out, a, sizeof out);
    for (int i = 0; i < N; i++)
        if (out[i] != (float)(i - 500) * 0.75f / 1024.0f) fail_msg("a[%d] = %g", i, out[i]);
    backend->op.download(backend, out, b, sizeof out);
    assert_true(isinf(out[17]) && isnan(out[900]) && out[0] == -500 * 0.75f / 1024.0f);
    loss_scaler_update(&scaler);
    assert_state(loss_scaler_read(&scaler), 512.0f, 0, 1);

    // Scale 1/4 (after backoffs): 3e38 * 4 overflows only after the check.
    ErrorMessage err = {{0}};
    assert_int_equal(loss_scaler_restore(&scaler, 0.25f, 0, &err), 0);
    const float big = 3.0e38f;
    backend->op.upload(backend, a, &big, sizeof big);
    loss_scaler_begin_step(&scaler);
    loss_scaler_unscale(&scaler, 1, a);
    backend->op.download(backend, &found, loss_scaler_found(&scaler), sizeof found);
    assert_true(found == 0.0f);
    loss_scaler_free(&scaler);
    backend->op.free(backend, a), backend->op.free(backend, b);
    backend_destroy(backend);
}

// A restored checkpoint state continues the count: one good step short of
// the interval grows at the next good step.
static void test_restore(void **state) {
    Backend *backend = fixture_backend_of_prestate(state);
    float *grad = backend->op.alloc(backend, 3 * sizeof *grad);
    LossScaler scaler = make_scaler(backend, 65536.0f, 2000);
    ErrorMessage err = {{0}};
    assert_int_equal(loss_scaler_restore(&scaler, 256.0f, 1999, &err), 0);
    assert_state(step_with(&scaler, grad, 1.0f), 512.0f, 0, 0);
    const float bad_scales[] = {0.0f, -1.0f, INFINITY, NAN};
    for (int i = 0; i < 4; i++) {
        err.text[0] = 0;
        assert_int_equal(loss_scaler_restore(&scaler, bad_scales[i], 0, &err), -1);
        assert_non_null(strstr(err.text, "out of range"));
    }
    assert_int_equal(loss_scaler_restore(&scaler, 2.0f, 2000, &err), -1);
    assert_int_equal(loss_scaler_restore(&scaler, 2.0f, -1, &err), -1);
    assert_state(loss_scaler_read(&scaler), 512.0f, 0, 0);  // unchanged by refusals
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

#define ON_EVERY_BACKEND(test)                                          \
    cmocka_unit_test_prestate(test, "ref"), cmocka_unit_test_prestate(test, "cpu"), \
        cmocka_unit_test_prestate(test, "cuda")

int main(void) {
    const struct CMUnitTest tests[] = {
        ON_EVERY_BACKEND(test_scale_trajectory),
        ON_EVERY_BACKEND(test_growth_stays_finite),
        ON_EVERY_BACKEND(test_unscale_and_count),
        ON_EVERY_BACKEND(test_restore),
        cmocka_unit_test(test_invalid_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
