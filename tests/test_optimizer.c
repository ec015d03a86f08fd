// Tests of the optimizers (SGD, nesterov, LARS, AdamW), gradient clipping
// and accumulation, and the schedules: trajectories against PyTorch
// (tests/fixtures/optim.safetensors, made by tools/make_fixtures.py) on the
// ref backend, plus the contracts that the fixture does not cover (weight
// decay groups, no allocation per step, state size, checkpoint round trip).
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
#include "nn/optimizer.h"
#include "nn/parameters.h"
#include "nn/safetensors.h"
#include "nn/schedule.h"
#include "nn/step_gate.h"

#include "fixture_init.h"

#define OPTIM_STEPS 6   // what the fixture stores
#define OPTIM_WARMUP 2
#define MAX_PARAM_FLOATS 128

// ---- the three parameters of the fixture ------------------------------------------

typedef struct TestParam {
    const char *name;
    ParamKind kind;
    int rank;
    int shape[2];
    float offset, scale;  // fixture init of the initial value
} TestParam;

static const TestParam test_params[] = {
    {"w", PARAM_WEIGHT, 2, {16, 8}, 0.0f, 1.0f},
    {"bn.weight", PARAM_NORM, 1, {16, 0}, 1.0f, 0.25f},
    {"bias", PARAM_BIAS, 1, {16, 0}, 0.0f, 1.0f},
};
#define TEST_PARAM_COUNT ((int)(sizeof test_params / sizeof test_params[0]))

// ---- a backend that counts its allocations --------------------------------------------

static struct {
    void *(*alloc)(Backend *backend, size_t bytes);
    void (*free)(Backend *backend, void *pointer);
    int allocs, frees;
} counting;

static void *counting_alloc(Backend *backend, size_t bytes) {
    counting.allocs++;
    return counting.alloc(backend, bytes);
}

static void counting_free(Backend *backend, void *pointer) {
    counting.frees++;
    counting.free(backend, pointer);
}

typedef struct TestState {
    Backend *backend;
    SafeTensors fixture;
} TestState;

// The backend the current group runs on ("ref", then "cpu" when built).
static const char *group_backend = "ref";

static int group_setup(void **state) {
    static TestState test;
    ErrorMessage err = {{0}};
    test.backend = backend_create(group_backend, 1, &err);
    if (!test.backend) {
        fprintf(stderr, "%s backend: %s\n", group_backend, err.text);
        return -1;
    }
    counting.alloc = test.backend->op.alloc;
    counting.free = test.backend->op.free;
    test.backend->op.alloc = counting_alloc;
    test.backend->op.free = counting_free;
    const char *dir = getenv("LTC_FIXTURES");
    char path[512];
    snprintf(path, sizeof path, "%s/optim.safetensors", dir ? dir : "tests/fixtures");
    if (safetensors_read(path, &test.fixture, &err)) {
        fprintf(stderr, "%s\n", err.text);
        backend_destroy(test.backend);
        return -1;
    }
    *state = &test;
    return 0;
}

static int group_teardown(void **state) {
    TestState *test = *state;
    safetensors_free(&test->fixture);
    backend_destroy(test->backend);
    return 0;
}

// Copies the F32 tensor `name` (count elements) out of the fixture file.
static void fixture_floats(const SafeTensors *file, const char *name, float *out, size_t count) {
    const SafeTensor *tensor = safetensors_find(file, name);
    if (!tensor) fprintf(stderr, "fixture tensor '%s' missing\n", name);
    assert_non_null(tensor);
    assert_int_equal(tensor->dtype, SAFE_F32);
    assert_int_equal(safe_tensor_elements(tensor), (int64_t)count);
    memcpy(out, safetensors_data(file, tensor), count * sizeof(float));  // data may be unaligned
}

// The three parameters allocated on the backend with their fixture init values.
static void params_create(Backend *backend, ParameterSet *set) {
    ErrorMessage err = {{0}};
    parameter_set_init(set, backend, 1);
    for (int i = 0; i < TEST_PARAM_COUNT; i++)
        assert_int_equal(parameter_declare(set, test_params[i].name, test_params[i].kind,
                                           test_params[i].rank, test_params[i].shape, NULL, &err),
                         i);
    assert_int_equal(parameter_set_allocate(set, &err), 0);
    for (int i = 0; i < TEST_PARAM_COUNT; i++) {
        float host[MAX_PARAM_FLOATS];
        char name[PARAM_MAX_NAME + 16];
        snprintf(name, sizeof name, "optim/%s", test_params[i].name);
        fixture_fill(name, test_params[i].offset, test_params[i].scale, host,
                     set->params[i].count);
        backend->op.upload(backend, set->params[i].value, host,
                           set->params[i].count * sizeof(float));
    }
}

static void download(Backend *backend, float *host, const float *device, size_t count) {
    backend->op.download(backend, host, device, count * sizeof(float));
}

// Largest |actual - expected| / (atol + rtol |expected|) (> 1: out of
// tolerance; NaN counts as out) and the largest |actual - expected|.
static double tolerance_ratio(const float *actual, const float *expected, size_t n, double atol,
                              double rtol, double *max_abs) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double diff = fabs((double)actual[i] - (double)expected[i]);
        const double ratio = diff / (atol + rtol * fabs((double)expected[i]));
        if (!(ratio <= worst)) worst = isnan(ratio) ? INFINITY : ratio;
        if (max_abs && diff > *max_abs) *max_abs = diff;
    }
    return worst;
}

// ---- the fixture's runs ----------------------------------------------------------------

typedef struct RunSpec {
    const char *run;
    OptimizerKind kind;
    int nesterov;
    double base_lr;      // double, as torch's LambdaLR multiplies it
    float weight_decay;  // on `w` only
    float clip_norm;     // 0: no clipping
    int micro_batches;   // 1, or 2 for gradient accumulation
} RunSpec;

// Sets the gradients of step t as backward passes would: zero, then += each
// micro-batch gradient (fixture init "optim/grad/P/t[/k]").
static void load_step_gradients(Backend *backend, ParameterSet *set, int step, int micro_batches,
                                float *staging) {
    parameter_set_zero_grads(set);
    for (int i = 0; i < TEST_PARAM_COUNT; i++) {
        const Parameter *param = &set->params[i];
        for (int k = 0; k < micro_batches; k++) {
            char name[PARAM_MAX_NAME + 32];
            if (micro_batches == 1)
                snprintf(name, sizeof name, "optim/grad/%s/%d", param->name, step);
            else
                snprintf(name, sizeof name, "optim/grad/%s/%d/%d", param->name, step, k);
            float host[MAX_PARAM_FLOATS];
            fixture_fill(name, 0.0f, 1.0f, host, param->count);
            backend->op.upload(backend, staging, host, param->count * sizeof(float));
            backend->op.axpby(backend, param->count, 1.0f, staging, 1.0f, param->grad);
        }
    }
}

static void check_run(TestState *test, const RunSpec *spec) {
    Backend *backend = test->backend;
    ErrorMessage err = {{0}};
    ParameterSet set;
    params_create(backend, &set);
    float *staging = backend->op.alloc(backend, MAX_PARAM_FLOATS * sizeof(float));
    assert_non_null(staging);

    OptimizerConfig config = optimizer_config_default(spec->kind);
    config.nesterov = spec->nesterov;
    Optimizer *opt = optimizer_create(backend, &set, &config, &err);
    if (!opt) fprintf(stderr, "%s: %s\n", spec->run, err.text);
    assert_non_null(opt);
    StepGate gate;
    assert_int_equal(step_gate_create(&gate, backend, 1, &err), 0);
    const int allocs_before_steps = counting.allocs;

    double worst = 0.0, max_abs = 0.0;
    for (int step = 1; step <= OPTIM_STEPS; step++) {
        load_step_gradients(backend, &set, step, spec->micro_batches, staging);
        // The trainer's sequence: 1/k and clipping through the gate.
        const float scale = 1.0f / (float)spec->micro_batches;
        step_gate_open(&gate);
        step_gate_measure(&gate, 0, &set);
        step_gate_close(&gate, scale, NULL, spec->clip_norm);
        if (spec->clip_norm > 0.0f) {
            StepGateReading reading;
            step_gate_read(&gate, scale, &reading);
            assert_false(reading.skipped);
            // the fixture's gradients are clipped every step
            assert_true(reading.gradient_norm > spec->clip_norm);
            assert_true(reading.multiplier < scale);
        }
        const double factor = schedule_cosine_warmup(step - 1, OPTIM_WARMUP, OPTIM_STEPS, 1.0, 0.0);
        optimizer_step(opt, (float)(spec->base_lr * factor), spec->weight_decay,
                       step_gate_values(&gate));
        assert_int_equal(optimizer_step_count(opt), step);

        for (int i = 0; i < TEST_PARAM_COUNT; i++) {
            const Parameter *param = &set.params[i];
            float actual[MAX_PARAM_FLOATS], expected[MAX_PARAM_FLOATS];
            char name[PARAM_MAX_NAME + 32];
            snprintf(name, sizeof name, "%s/%s/%d", spec->run, param->name, step);
            fixture_floats(&test->fixture, name, expected, param->count);
            download(backend, actual, param->value, param->count);
            // fp32 against fp32 PyTorch: each step is a handful of roundings
            // per element (decay, momentum, update; LARS norms, Adam's sqrt
            // and division) on values of magnitude <= ~4, and torch's CPU
            // kernels may fuse a*b+c (FMA) and sum norms in another order, so
            // results differ by a few ulps per step and the difference
            // carries into later steps through the momentum buffer. 6 steps
            // stay well within 1e-6 + 1e-5 |ref| (measured worst ~0.1 of it).
            const double ratio =
                tolerance_ratio(actual, expected, param->count, 1e-6, 1e-5, &max_abs);
            if (ratio > 1.0) fprintf(stderr, "%s: %g of the tolerance\n", name, ratio);
            assert_true(ratio <= 1.0);
            if (ratio > worst) worst = ratio;
        }
    }
    // Nothing allocated by clipping, scaling or stepping.
    assert_int_equal(counting.allocs, allocs_before_steps);
    printf("  %-15s max |diff| %.3g, worst %.3f of the tolerance\n", spec->run, max_abs, worst);

    step_gate_free(&gate);
    optimizer_free(opt);
    backend->op.free(backend, staging);
    parameter_set_free(&set);
}

// The fixture's initial values equal our fixture init formula (bit for bit).
static void test_fixture_init_matches(void **state) {
    TestState *test = *state;
    for (int i = 0; i < TEST_PARAM_COUNT; i++) {
        const size_t count = (size_t)test_params[i].shape[0] *
                             (size_t)(test_params[i].rank == 2 ? test_params[i].shape[1] : 1);
        float ours[MAX_PARAM_FLOATS], stored[MAX_PARAM_FLOATS];
        char name[PARAM_MAX_NAME + 16];
        snprintf(name, sizeof name, "optim/%s", test_params[i].name);
        fixture_fill(name, test_params[i].offset, test_params[i].scale, ours, count);
        snprintf(name, sizeof name, "init/%s", test_params[i].name);
        fixture_floats(&test->fixture, name, stored, count);
        assert_memory_equal(ours, stored, count * sizeof(float));  // exact: same float32 formula
    }
}

static void test_sgd(void **state) {
    check_run(*state, &(RunSpec){"sgd", OPTIMIZER_SGD, 0, 0.3, 1e-4f, 0.0f, 1});
}

static void test_sgd_nesterov(void **state) {
    check_run(*state, &(RunSpec){"sgd_nesterov", OPTIMIZER_SGD, 1, 0.3, 1e-4f, 0.0f, 1});
}

static void test_sgd_clip(void **state) {
    check_run(*state, &(RunSpec){"sgd_clip", OPTIMIZER_SGD, 0, 0.3, 1e-4f, 1.0f, 1});
}

static void test_sgd_accumulate(void **state) {
    check_run(*state, &(RunSpec){"sgd_accumulate", OPTIMIZER_SGD, 0, 0.3, 1e-4f, 0.0f, 2});
}

static void test_adamw(void **state) {
    check_run(*state, &(RunSpec){"adamw", OPTIMIZER_ADAMW, 0, 1e-3, 0.05f, 0.0f, 1});
}

static void test_lars(void **state) {
    check_run(*state, &(RunSpec){"lars", OPTIMIZER_LARS, 0, 0.3, 1e-6f, 0.0f, 1});
}

// ---- schedules ---------------------------------------------------------------------------

static void test_schedule_fixture(void **state) {
    TestState *test = *state;
    float lr[100], wd[100];
    fixture_floats(&test->fixture, "schedule/lr", lr, 100);
    fixture_floats(&test->fixture, "schedule/wd", wd, 100);
    for (int s = 0; s < 100; s++) {
        // Both sides evaluate the same double formula (same operation order,
        // libm cos) and round to float32; allow one float32 ulp of values
        // <= 0.4 (2.4e-8 < 1e-7) in case the doubles straddle a rounding edge.
        const float lr_ours = (float)schedule_cosine_warmup(s, 10, 100, 1.0, 0.0);
        const float wd_ours = (float)schedule_cosine(s, 100, 0.04, 0.4);
        if (fabsf(lr_ours - lr[s]) > 1e-7f || fabsf(wd_ours - wd[s]) > 1e-7f)
            fprintf(stderr, "step %d: lr %.9g vs %.9g, wd %.9g vs %.9g\n", s, lr_ours, lr[s],
                    wd_ours, wd[s]);
        assert_true(fabsf(lr_ours - lr[s]) <= 1e-7f);
        assert_true(fabsf(wd_ours - wd[s]) <= 1e-7f);
    }
}

static void test_schedule_edges(void **state) {
    // Warmup is linear from start / warmup to start (exact in double).
    assert_true(schedule_cosine_warmup(0, 4, 20, 1.0, 0.0) == 0.25);
    assert_true(schedule_cosine_warmup(3, 4, 20, 1.0, 0.0) == 1.0);
    // First cosine step is the start value, the last the end value.
    assert_true(fabs(schedule_cosine_warmup(4, 4, 20, 1.0, 0.1) - 1.0) <= 1e-15);
    assert_true(schedule_cosine_warmup(19, 4, 20, 1.0, 0.1) == 0.1);
    // Past the end it stays at the end value.
    assert_true(schedule_cosine_warmup(500, 4, 20, 1.0, 0.1) == 0.1);
    assert_true(schedule_cosine(100, 10, 0.996, 1.0) == 1.0);
    // One step after warmup (M = 1) is the end value; no warmup starts at start.
    assert_true(schedule_cosine_warmup(4, 4, 5, 1.0, 0.3) == 0.3);
    assert_true(fabs(schedule_cosine_warmup(0, 0, 11, 1.0, 0.0) - 1.0) <= 1e-15);
    // The midpoint of the cosine is the mean of start and end (cos(pi/2) ~ 6e-17).
    assert_true(fabs(schedule_cosine(5, 11, 0.04, 0.4) - 0.22) <= 1e-15);
}

// ---- contracts not in the fixture ----------------------------------------------------------

// Weight decay (and LARS adaptation) apply to weights only: BN parameters and
// biases holding a large value with zero gradient stay exactly unchanged.
static void test_weight_decay_groups(void **state) {
    TestState *test = *state;
    Backend *backend = test->backend;
    const OptimizerKind kinds[] = {OPTIMIZER_SGD, OPTIMIZER_ADAMW, OPTIMIZER_LARS};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        ParameterSet set;
        params_create(backend, &set);
        ErrorMessage err = {{0}};
        const OptimizerConfig config = optimizer_config_default(kinds[k]);
        Optimizer *opt = optimizer_create(backend, &set, &config, &err);
        assert_non_null(opt);
        for (int i = 0; i < set.count; i++)
            backend->op.fill(backend, set.params[i].value, 100.0f, set.params[i].count);
        parameter_set_zero_grads(&set);
        for (int step = 0; step < 3; step++) optimizer_step(opt, 0.1f, 0.5f, NULL);

        float host[MAX_PARAM_FLOATS];
        for (int i = 1; i < set.count; i++) {  // bn.weight, bias
            download(backend, host, set.params[i].value, set.params[i].count);
            for (size_t j = 0; j < set.params[i].count; j++) assert_true(host[j] == 100.0f);
        }
        download(backend, host, set.params[0].value, set.params[0].count);
        if (kinds[k] == OPTIMIZER_LARS) {
            // lightly's LARS: a zero gradient norm skips adaptation and decay.
            assert_true(host[0] == 100.0f);
        } else {
            // The decay alone, simulated in double: AdamW w *= 1 - lr wd; SGD
            // buf = momentum buf + wd w, w -= lr buf. A dozen float32
            // roundings on values <= 100: relative 1e-6 covers them.
            double w = 100.0, buf = 0.0;
            for (int step = 0; step < 3; step++) {
                if (kinds[k] == OPTIMIZER_ADAMW) {
                    w *= 1.0 - 0.1 * 0.5;
                } else {
                    buf = (step == 0 ? 0.0 : 0.9 * buf) + 0.5 * w;
                    w -= 0.1 * buf;
                }
            }
            assert_true(fabs(host[0] - w) <= 1e-6 * w);
            assert_true(host[0] < 90.0f);  // ~86 (AdamW), ~73 (SGD): decay did happen
        }
        optimizer_free(opt);
        parameter_set_free(&set);
    }
}

// Per-parameter options: an lr scale s on a parameter steps it exactly as
// the step's lr x s does (the same float product reaches the update), a
// scale of 0 keeps it while its momentum / moments follow the gradient, and
// the weight decay switch replaces the kind rule both ways.
static void test_param_options(void **state) {
    TestState *test = *state;
    Backend *backend = test->backend;
    ErrorMessage err = {{0}};
    const OptimizerKind kinds[] = {OPTIMIZER_SGD, OPTIMIZER_ADAMW, OPTIMIZER_LARS};
    float *staging = backend->op.alloc(backend, MAX_PARAM_FLOATS * sizeof(float));
    assert_non_null(staging);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        ParameterSet scaled, plain;
        params_create(backend, &scaled);
        params_create(backend, &plain);
        const OptimizerConfig config = optimizer_config_default(kinds[k]);
        Optimizer *opt = optimizer_create(backend, &scaled, &config, &err);
        Optimizer *reference = optimizer_create(backend, &plain, &config, &err);
        assert_non_null(opt);
        assert_non_null(reference);
        assert_int_equal(optimizer_set_lr_scale(opt, 0, 0.25f, &err), 0);  // w
        assert_int_equal(optimizer_set_lr_scale(opt, 2, 0.0f, &err), 0);   // bias
        assert_true(optimizer_lr_scale(opt, 0) == 0.25f);
        assert_true(optimizer_lr_scale(opt, 1) == 1.0f);
        float bias_before[MAX_PARAM_FLOATS];
        download(backend, bias_before, scaled.params[2].value, scaled.params[2].count);
        for (int step = 1; step <= 3; step++) {
            load_step_gradients(backend, &scaled, step, 1, staging);
            load_step_gradients(backend, &plain, step, 1, staging);
            optimizer_step(opt, 0.1f, 0.01f, NULL);
            optimizer_step(reference, 0.1f * 0.25f, 0.01f, NULL);
        }
        float ours[MAX_PARAM_FLOATS], theirs[MAX_PARAM_FLOATS];
        download(backend, ours, scaled.params[0].value, scaled.params[0].count);
        download(backend, theirs, plain.params[0].value, plain.params[0].count);
        assert_memory_equal(ours, theirs, scaled.params[0].count * sizeof(float));
        download(backend, ours, scaled.params[2].value, scaled.params[2].count);
        assert_memory_equal(ours, bias_before, scaled.params[2].count * sizeof(float));
        size_t state_floats = 0;
        const float *moments = optimizer_state(opt, &state_floats);
        download(backend, ours, moments + scaled.params[2].offset, scaled.params[2].count);
        int moved = 0;
        for (size_t j = 0; j < scaled.params[2].count; j++) moved += ours[j] != 0.0f;
        assert_int_equal(moved, (int)scaled.params[2].count);  // the momentum followed
        optimizer_free(opt);
        optimizer_free(reference);
        parameter_set_free(&scaled);
        parameter_set_free(&plain);
    }
    backend->op.free(backend, staging);

    // Decay switched: on for bn.weight (a norm), off for w (a weight); AdamW
    // on zero gradients is the decay alone, param *= 1 - lr wd.
    ParameterSet set;
    params_create(backend, &set);
    const OptimizerConfig config = optimizer_config_default(OPTIMIZER_ADAMW);
    Optimizer *opt = optimizer_create(backend, &set, &config, &err);
    assert_non_null(opt);
    assert_int_equal(optimizer_weight_decays(opt, 0), 1);  // the kind rule by default
    assert_int_equal(optimizer_weight_decays(opt, 1), 0);
    assert_int_equal(optimizer_set_weight_decay(opt, 0, 0, &err), 0);
    assert_int_equal(optimizer_set_weight_decay(opt, 1, 1, &err), 0);
    assert_int_equal(optimizer_weight_decays(opt, 1), 1);
    for (int i = 0; i < set.count; i++)
        backend->op.fill(backend, set.params[i].value, 100.0f, set.params[i].count);
    parameter_set_zero_grads(&set);
    optimizer_step(opt, 0.1f, 0.5f, NULL);
    float host[MAX_PARAM_FLOATS];
    download(backend, host, set.params[0].value, set.params[0].count);
    for (size_t j = 0; j < set.params[0].count; j++) assert_true(host[j] == 100.0f);
    download(backend, host, set.params[1].value, set.params[1].count);
    for (size_t j = 0; j < set.params[1].count; j++) assert_true(fabsf(host[j] - 95.0f) <= 1e-4f);
    // bad options: a one-line message, nothing changed
    assert_int_equal(optimizer_set_lr_scale(opt, 3, 1.0f, &err), -1);
    assert_non_null(strstr(err.text, "parameter index 3 outside 0..2"));
    assert_int_equal(optimizer_set_lr_scale(opt, 0, -0.5f, &err), -1);
    assert_non_null(strstr(err.text, "lr scale -0.5 of 'w' must be finite and >= 0"));
    assert_int_equal(optimizer_set_lr_scale(opt, 0, NAN, &err), -1);
    assert_int_equal(optimizer_set_weight_decay(opt, -1, 1, &err), -1);
    assert_true(optimizer_lr_scale(opt, 0) == 1.0f);
    optimizer_free(opt);
    parameter_set_free(&set);
}

// LARS leaves BN parameters and biases unadapted and undecayed: with a
// gradient g on them the first step is param -= lr * g exactly. The weight
// moves by the trust-scaled, decayed direction; wd = 0.25 (far above the
// fixture's 1e-6) makes both places where decay enters visible.
static void test_lars_adaptation(void **state) {
    TestState *test = *state;
    Backend *backend = test->backend;
    ParameterSet set;
    params_create(backend, &set);
    ErrorMessage err = {{0}};
    const OptimizerConfig config = optimizer_config_default(OPTIMIZER_LARS);
    Optimizer *opt = optimizer_create(backend, &set, &config, &err);
    assert_non_null(opt);
    for (int i = 0; i < set.count; i++) {
        backend->op.fill(backend, set.params[i].value, 2.0f, set.params[i].count);
        backend->op.fill(backend, set.params[i].grad, 0.5f, set.params[i].count);
    }
    optimizer_step(opt, 0.1f, 0.25f, NULL);
    float host[MAX_PARAM_FLOATS];
    for (int i = 1; i < set.count; i++) {
        download(backend, host, set.params[i].value, set.params[i].count);
        // Within one ulp of values in [1, 2) (a backend may fuse the multiply-add).
        assert_true(fabsf(host[0] - (2.0f - 0.1f * 0.5f)) <= 1.2e-7f);
    }
    // w: p = ||w|| = 2 sqrt(128), g = 0.5 sqrt(128), so trust = 0.001 p /
    // (g + 0.25 p) = 0.002 and d = (0.5 + 0.25 * 2) * 0.002 = 0.002: the step
    // is 0.1 * 0.002 = 2e-4 (without decay in d: 1e-4; without it in the
    // denominator: 4e-4). 2 - w is known to one ulp of values in [1, 2).
    download(backend, host, set.params[0].value, set.params[0].count);
    const double moved = 2.0 - host[0];
    assert_true(fabs(moved - 2e-4) <= 1.2e-7);
    optimizer_free(opt);
    parameter_set_free(&set);
}

// clip_grad_norm_ through the gate: total = sqrt(sum of squares over every
// group), coef = max_norm / (total + 1e-6) in float32, applied (times the
// scale) only when below 1; an SGD step with lr 1, no momentum and no decay
// then moves each weight by exactly -multiplier * grad. A NaN gradient
// skips the step: nothing moves.
static void test_gate_clips_and_skips(void **state) {
    TestState *test = *state;
    Backend *backend = test->backend;
    ParameterSet set;
    params_create(backend, &set);
    ErrorMessage err = {{0}};
    OptimizerConfig config = optimizer_config_default(OPTIMIZER_SGD);
    config.momentum = 0.0f;
    Optimizer *opt = optimizer_create(backend, &set, &config, &err);
    assert_non_null(opt);
    StepGate gate;
    assert_int_equal(step_gate_create(&gate, backend, 2, &err), 0);
    // 3 in w[5] and 4 in bias[2]: global norm 5 across two parameters.
    const float three = 3.0f, four = 4.0f;
    parameter_set_zero_grads(&set);
    backend->op.upload(backend, set.params[0].grad + 5, &three, sizeof three);
    backend->op.upload(backend, set.params[2].grad + 2, &four, sizeof four);
    const float max_norms[3] = {10.0f, 1.0f, 0.0f};
    const float scales[3] = {1.0f, 1.0f, 0.5f};
    const float coefficient = 1.0f / (5.0f + 1e-6f);
    const float multipliers[3] = {1.0f, coefficient, 0.5f};
    for (int c = 0; c < 3; c++) {
        step_gate_open(&gate);
        step_gate_measure(&gate, 1, &set);  // group 0 unmeasured (frozen): adds 0
        step_gate_close(&gate, scales[c], NULL, max_norms[c]);
        StepGateReading reading;
        step_gate_read(&gate, scales[c], &reading);
        assert_false(reading.skipped);
        assert_int_equal(reading.nonfinite_group, -1);
        assert_true(reading.gradient_norm == 5.0 * scales[c]);  // 25 exact, sqrt exact
        assert_true(reading.multiplier == multipliers[c]);       // the same float32 product
        float w_before[MAX_PARAM_FLOATS], w_after[MAX_PARAM_FLOATS], bias_before[16],
            bias_after[16];
        download(backend, w_before, set.params[0].value, set.params[0].count);
        download(backend, bias_before, set.params[2].value, set.params[2].count);
        optimizer_step(opt, 1.0f, 0.0f, step_gate_values(&gate));
        download(backend, w_after, set.params[0].value, set.params[0].count);
        download(backend, bias_after, set.params[2].value, set.params[2].count);
        assert_true(w_after[5] == w_before[5] - multipliers[c] * 3.0f);
        assert_true(bias_after[2] == bias_before[2] - multipliers[c] * 4.0f);
        assert_true(w_after[4] == w_before[4]);  // zero gradient
    }
    // A NaN gradient: skipped, the group named, nothing changes.
    const float nan = NAN;
    backend->op.upload(backend, set.params[0].grad + 1, &nan, sizeof nan);
    step_gate_open(&gate);
    step_gate_measure(&gate, 0, &set);
    step_gate_close(&gate, 1.0f, NULL, 1.0f);
    StepGateReading reading;
    step_gate_read(&gate, 1.0f, &reading);
    assert_true(reading.skipped);
    assert_int_equal(reading.nonfinite_group, 0);
    float before[MAX_PARAM_FLOATS], after[MAX_PARAM_FLOATS];
    download(backend, before, set.params[0].value, set.params[0].count);
    optimizer_step(opt, 1.0f, 0.0f, step_gate_values(&gate));
    download(backend, after, set.params[0].value, set.params[0].count);
    assert_memory_equal(before, after, set.params[0].count * sizeof(float));
    // A non-finite loss counted into the gate skips too.
    float *loss = backend->op.alloc(backend, sizeof(float));
    const float infinite = INFINITY;
    backend->op.upload(backend, loss, &infinite, sizeof infinite);
    parameter_set_zero_grads(&set);
    step_gate_open(&gate);
    step_gate_measure(&gate, 0, &set);
    step_gate_count_nonfinite(&gate, 1, loss);
    step_gate_close(&gate, 1.0f, NULL, 0.0f);
    step_gate_read(&gate, 1.0f, &reading);
    assert_true(reading.skipped);
    assert_int_equal(reading.nonfinite_group, -1);
    backend->op.free(backend, loss);
    step_gate_free(&gate);
    optimizer_free(opt);
    parameter_set_free(&set);
}

// One arena per optimizer, sized by kind; a saved state plus step count
// restores the run exactly.
static void test_state_size_and_restore(void **state) {
    TestState *test = *state;
    Backend *backend = test->backend;
    ErrorMessage err = {{0}};
    ParameterSet set;
    params_create(backend, &set);
    assert_int_equal(set.total, 160);  // 128 + 16 + 16, each 16-float aligned

    // SGD and AdamW also hold the multi-tensor update's segment table: 3
    // segments of 24 bytes, 18 floats, 16-float aligned: 32.
    const struct { OptimizerKind kind; size_t state, bytes; } expected[] = {
        {OPTIMIZER_SGD, 160, (160 + 16 + 32) * 4},    // momentum + reduction slots + segments
        {OPTIMIZER_LARS, 160, (160 + 128 + 16) * 4},  // + scratch of the largest parameter
        {OPTIMIZER_ADAMW, 320, (320 + 16 + 32) * 4},  // m and v
    };
    for (size_t k = 0; k < sizeof expected / sizeof expected[0]; k++) {
        const OptimizerConfig config = optimizer_config_default(expected[k].kind);
        const int allocs = counting.allocs;
        Optimizer *opt = optimizer_create(backend, &set, &config, &err);
        assert_non_null(opt);
        assert_int_equal(counting.allocs, allocs + 1);  // one arena
        size_t floats = 0;
        assert_non_null(optimizer_state(opt, &floats));
        assert_int_equal(floats, expected[k].state);
        assert_int_equal(optimizer_memory_bytes(opt), expected[k].bytes);
        const int frees = counting.frees;
        optimizer_free(opt);
        assert_int_equal(counting.frees, frees + 1);
    }

    // AdamW (state and bias correction both matter): 3 steps, save, 3 more
    // steps; versus restore into a fresh optimizer and the same 3 steps.
    float *staging = backend->op.alloc(backend, MAX_PARAM_FLOATS * sizeof(float));
    const OptimizerConfig config = optimizer_config_default(OPTIMIZER_ADAMW);
    Optimizer *opt = optimizer_create(backend, &set, &config, &err);
    assert_non_null(opt);
    for (int step = 1; step <= 3; step++) {
        load_step_gradients(backend, &set, step, 1, staging);
        optimizer_step(opt, 1e-3f, 0.05f, NULL);
    }
    float saved_values[160], saved_state[320], continued[160], restored[160];
    size_t floats = 0;
    const float *device_state = optimizer_state(opt, &floats);
    download(backend, saved_state, device_state, floats);
    download(backend, saved_values, set.values, set.total);
    const long saved_steps = optimizer_step_count(opt);
    for (int step = 4; step <= 6; step++) {
        load_step_gradients(backend, &set, step, 1, staging);
        optimizer_step(opt, 1e-3f, 0.05f, NULL);
    }
    download(backend, continued, set.values, set.total);
    optimizer_free(opt);

    opt = optimizer_create(backend, &set, &config, &err);
    assert_non_null(opt);
    backend->op.upload(backend, optimizer_state(opt, NULL), saved_state, floats * sizeof(float));
    backend->op.upload(backend, set.values, saved_values, set.total * sizeof(float));
    optimizer_set_step_count(opt, saved_steps);
    for (int step = 4; step <= 6; step++) {
        load_step_gradients(backend, &set, step, 1, staging);
        optimizer_step(opt, 1e-3f, 0.05f, NULL);
    }
    download(backend, restored, set.values, set.total);
    assert_memory_equal(continued, restored, sizeof continued);  // exact: same operations
    optimizer_free(opt);
    backend->op.free(backend, staging);
    parameter_set_free(&set);
}

// A step the gate skips does not count (PyTorch does not call the
// optimizer's step when GradScaler skips): AdamW's bias correction then
// continues as if it never happened, and the applied count is what a
// checkpoint saves.
static void test_skipped_steps_do_not_count(void **state) {
    TestState *test = *state;
    Backend *backend = test->backend;
    ErrorMessage err = {{0}};
    ParameterSet set;
    params_create(backend, &set);
    float *staging = backend->op.alloc(backend, MAX_PARAM_FLOATS * sizeof(float));
    float initial[160], with_skip[160], without[160];
    download(backend, initial, set.values, set.total);
    const OptimizerConfig config = optimizer_config_default(OPTIMIZER_ADAMW);
    StepGate gate;
    assert_int_equal(step_gate_create(&gate, backend, 1, &err), 0);
    for (int skip = 1; skip >= 0; skip--) {
        backend->op.upload(backend, set.values, initial, sizeof initial);
        Optimizer *opt = optimizer_create(backend, &set, &config, &err);
        assert_non_null(opt);
        for (int step = 1; step <= 4; step++) {
            load_step_gradients(backend, &set, step, 1, staging);
            if (step == 3) {
                if (!skip) continue;
                const float nan = NAN;  // a step whose gradients overflowed
                backend->op.upload(backend, set.params[1].grad, &nan, sizeof nan);
            }
            step_gate_open(&gate);
            step_gate_measure(&gate, 0, &set);
            step_gate_close(&gate, 1.0f, NULL, 0.0f);
            optimizer_step(opt, 1e-3f, 0.05f, step_gate_values(&gate));
            assert_int_equal(optimizer_step_count(opt), step < 3 ? step : step - 1);
        }
        download(backend, skip ? with_skip : without, set.values, set.total);
        optimizer_free(opt);
    }
    assert_memory_equal(with_skip, without, sizeof without);  // exact: the same updates
    step_gate_free(&gate);
    backend->op.free(backend, staging);
    parameter_set_free(&set);
}

static void test_config_errors(void **state) {
    TestState *test = *state;
    ErrorMessage err = {{0}};
    OptimizerKind kind;
    assert_int_equal(optimizer_kind_parse("lars", &kind, &err), 0);
    assert_int_equal(kind, OPTIMIZER_LARS);
    assert_int_equal(optimizer_kind_parse("adam", &kind, &err), -1);
    assert_non_null(strstr(err.text, "adam"));

    ParameterSet set;
    params_create(test->backend, &set);
    OptimizerConfig config = optimizer_config_default(OPTIMIZER_SGD);
    config.momentum = 1.5f;
    assert_null(optimizer_create(test->backend, &set, &config, &err));
    assert_non_null(strstr(err.text, "momentum"));
    config = optimizer_config_default(OPTIMIZER_ADAMW);
    config.beta2 = 1.0f;
    assert_null(optimizer_create(test->backend, &set, &config, &err));
    assert_non_null(strstr(err.text, "betas"));

    ParameterSet buffers;  // no gradients: nothing to optimize
    parameter_set_init(&buffers, test->backend, 0);
    const int shape[1] = {4};
    assert_int_equal(
        parameter_declare(&buffers, "bn.running_mean", PARAM_BUFFER, 1, shape, NULL, &err), 0);
    assert_int_equal(parameter_set_allocate(&buffers, &err), 0);
    config = optimizer_config_default(OPTIMIZER_SGD);
    assert_null(optimizer_create(test->backend, &buffers, &config, &err));
    assert_non_null(strstr(err.text, "gradients"));
    parameter_set_free(&buffers);
    parameter_set_free(&set);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_init_matches),
        cmocka_unit_test(test_sgd),
        cmocka_unit_test(test_sgd_nesterov),
        cmocka_unit_test(test_sgd_clip),
        cmocka_unit_test(test_sgd_accumulate),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_lars),
        cmocka_unit_test(test_schedule_fixture),
        cmocka_unit_test(test_schedule_edges),
        cmocka_unit_test(test_weight_decay_groups),
        cmocka_unit_test(test_param_options),
        cmocka_unit_test(test_lars_adaptation),
        cmocka_unit_test(test_gate_clips_and_skips),
        cmocka_unit_test(test_state_size_and_restore),
        cmocka_unit_test(test_skipped_steps_do_not_count),
        cmocka_unit_test(test_config_errors),
    };
    int failed = cmocka_run_group_tests_name("optimizer[ref]", tests, group_setup, group_teardown);
    // The same tests on the optimised CPU backend when this build has it.
    ErrorMessage err = {{0}};
    Backend *cpu = backend_create("cpu", 1, &err);
    if (cpu) {
        backend_destroy(cpu);
        group_backend = "cpu";
        failed += cmocka_run_group_tests_name("optimizer[cpu]", tests, group_setup, group_teardown);
    } else {
        printf("optimizer[cpu] skipped: %s\n", err.text);
    }
    return failed;
}
