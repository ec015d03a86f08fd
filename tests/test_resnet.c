// ResNet backbones against PyTorch: fixture-init resnet18, resnet50 and
// wide_resnet50_2 at
// batch 2, 64x64 (tests/fixtures/*.safetensors from tools/make_fixtures.py):
// train-mode features, loss, every stored gradient, running statistics and
// eval-mode features. Also: parameter and key counts of every depth and width,
// torchvision-style init, and plans for a smaller batch. Weight files:
// test_resnet_weights.c.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "fixture_init.h"
#include "nn/backbone.h"
#include "resnet_test_values.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "nn/weights.h"

#define FIXTURE_DIR "tests/fixtures/"
#define FIXTURE_BATCH 2
#define FIXTURE_SIZE 64
#define GRAD_SAMPLES 256
#define SAMPLE_STRIDE 2654435761ull

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// ---- fixture access --------------------------------------------------------------

// A copy of F32 tensor `name` (expected elements), or NULL when absent.
static float *fixture_floats(const SafeTensors *file, const char *name, size_t expected) {
    const SafeTensor *tensor = safetensors_find(file, name);
    if (!tensor) return NULL;
    assert_int_equal(tensor->dtype, SAFE_F32);
    assert_int_equal((size_t)safe_tensor_elements(tensor), expected);
    float *copy = malloc(expected * sizeof *copy + 1);
    assert_non_null(copy);
    memcpy(copy, safetensors_data(file, tensor), expected * sizeof *copy);
    return copy;
}

// A copy of F64 tensor `name` (a float64 reference value), or NULL when absent.
static double *fixture_doubles(const SafeTensors *file, const char *name, size_t expected) {
    const SafeTensor *tensor = safetensors_find(file, name);
    if (!tensor) return NULL;
    assert_int_equal(tensor->dtype, SAFE_F64);
    assert_int_equal((size_t)safe_tensor_elements(tensor), expected);
    double *copy = malloc(expected * sizeof *copy + 1);
    assert_non_null(copy);
    memcpy(copy, safetensors_data(file, tensor), expected * sizeof *copy);
    return copy;
}

static double fixture_f64(const SafeTensors *file, const char *name) {
    double *value = fixture_doubles(file, name, 1);
    if (!value) fail_msg("fixture lacks %s", name);
    const double copy = *value;
    free(value);
    return copy;
}

static float max_abs(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

static double max_abs_f64(const double *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

// Counts |actual - expected| > atol + rtol |expected| (float against float).
static size_t count_bad(const char *label, const float *actual, const float *expected, size_t n,
                        double rtol, double atol) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const double allowed = atol + rtol * fabs((double)expected[i]);
        if (!(fabs((double)actual[i] - expected[i]) <= allowed)) {
            if (bad < 3)
                fprintf(stderr, "  %s[%zu]: %.8g, expected %.8g (allowed %.3g)\n", label, i,
                        actual[i], expected[i], allowed);
            bad++;
        }
    }
    return bad;
}

// ---- comparison with the float64 truth ----------------------------------------------

// The fixtures store the float64 run of the computation (the truth) and
// f32err/NAME: how far PyTorch's float32 run, taking the float64 run's
// branch decisions, lands from it (max over the tensor; for the gradient
// sums the bound on a sum of those per-element errors whatever their signs,
// since the errors of one gradient share causes; tests/fixtures/README.md).
// Train-mode BatchNorm over few rows makes the early and bias gradients
// ill-conditioned (f32err up to 2e-3 of max |grad| for resnet50, ~1e-5 for
// most tensors), so the tolerance follows f32err per tensor:
//   |ours - truth| <= F32ERR_FACTOR f32err + kinkerr + SCALE_FLOOR scale
// A correct float32 implementation with its own summation order has errors
// as large as PyTorch's but independent of them, so its largest error can
// exceed PyTorch's largest by chance: 4 allows for that. Measured (torch
// 1.13 fixtures): the ref backend stays within 0.9 f32err on every check;
// the cpu backend (oneDNN's AVX-512, AVX2 or SSE4.1 kernels, forced with
// ONEDNN_MAX_CPU_ISA) within 3.0 f32err on the element checks and 0.35 on
// the sums that no flipped branch reaches, and at 0.85 of the allowance
// where one does.
// kinkerr: where a value lies within 4 f32err of a ReLU's or the max pool's
// kink, such an implementation may take the other branch, which moves the
// gradients below coherently and far beyond rounding (resnet18: one ReLU
// input at 5.4e-7 that oneDNN's AVX2 and SSE4.1 kernels put at 0 moves
// layer1.0.bn1.bias by 1%); the fixture lists those decisions and what
// flipping all of them can do (kinkerr/NAME), added to gradient tolerances
// when this run took one of them the other way (count_kinks_taken).
// Floor: SCALE_FLOOR x scale (max |truth|, 4 x RMS for samples, the L1 / L2
// bound for the sums), ~100 float32 ulps of the scale. A wrong layout,
// formula or missing term gives errors O(scale): scaling one output channel
// of every conv's weight gradient by 1 + 1e-4 fails resnet18.
#define F32ERR_FACTOR 4.0
#define SCALE_FLOOR 1e-5

// The worst check of one kind, for the printed margins.
typedef struct Worst {
    double of_allowed;  // max |ours - truth| / allowed
    double of_f32err;   // max |ours - truth| / f32err
    char name[SAFETENSORS_MAX_NAME + 16];  // where of_f32err is reached
} Worst;

enum { WORST_FEATURES, WORST_LOSS, WORST_GRADIENTS, WORST_GRADIENT_SUMS, WORST_RUNNING_STATS,
       WORST_KINDS };
static const char *const worst_labels[WORST_KINDS] = {"features", "loss", "gradients",
                                                      "gradient sums", "running stats"};

// Compares ours[i] with truth[i] (n values of fixture entry `name`, whose
// f32err/name scales the tolerance; kinkerr: what branch decisions taken
// the other way may add, see FixtureRun); returns the number of violations.
static size_t compare_with_truth(const SafeTensors *file, const char *name, const double *ours,
                                 const double *truth, size_t n, double scale, double kinkerr,
                                 Worst *worst) {
    char key[SAFETENSORS_MAX_NAME + 16];
    snprintf(key, sizeof key, "f32err/%s", name);
    const double f32err = fixture_f64(file, key);
    const double allowed = F32ERR_FACTOR * f32err + kinkerr + SCALE_FLOOR * scale;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const double error = fabs(ours[i] - truth[i]);
        if (error / allowed > worst->of_allowed) worst->of_allowed = error / allowed;
        if (f32err > 0.0 && error / f32err > worst->of_f32err) {
            worst->of_f32err = error / f32err;
            snprintf(worst->name, sizeof worst->name, "%s", name);
        }
        if (!(error <= allowed)) {
            if (bad < 3)
                fprintf(stderr,
                        "  %s[%zu]: %.10g, truth %.10g (allowed %.3g, f32err %.3g, kinkerr %.3g)\n",
                        name, i, ours[i], truth[i], allowed, f32err, kinkerr);
            bad++;
        }
    }
    return bad;
}

// The same for float32 results.
static size_t compare_floats_with_truth(const SafeTensors *file, const char *name,
                                        const float *ours, const double *truth, size_t n,
                                        double scale, double kinkerr, Worst *worst) {
    double *widened = malloc(n * sizeof *widened + 1);
    for (size_t i = 0; i < n; i++) widened[i] = ours[i];
    const size_t bad = compare_with_truth(file, name, widened, truth, n, scale, kinkerr, worst);
    free(widened);
    return bad;
}

// ---- the fixture comparison -------------------------------------------------------

typedef struct FixtureRun {
    Backend *backend;
    Resnet model;
    SafeTensors file;
    float *input;  // backend memory (N, H, W, 3)
    size_t feature_count;
    // Branch decisions near a kink (tools/fixture_kinks.py): a correct float32
    // run may take the other branch there, which moves the gradients below by
    // up to kinkerr/NAME. That allowance applies only when this run did.
    int kinks, kinks_taken;
    double worst_norm_error;  // max over tensors of ||ours - truth|| / ||truth||
    char worst_norm_name[SAFETENSORS_MAX_NAME + 16];
    Worst worst[WORST_KINDS];
} FixtureRun;

// ||ours - truth||_2 / ||truth||_2, recorded as the run's worst when larger.
static double norm_error(FixtureRun *run, const char *name, const float *ours,
                         const double *truth, size_t n) {
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        diff += (ours[i] - truth[i]) * (ours[i] - truth[i]);
        norm += truth[i] * truth[i];
    }
    const double relative = norm > 0.0 ? sqrt(diff / norm) : sqrt(diff);
    if (relative > run->worst_norm_error) {
        run->worst_norm_error = relative;
        snprintf(run->worst_norm_name, sizeof run->worst_norm_name, "%s", name);
    }
    return relative;
}

// The fixture's "kinks" rows (call, element, float64 choice, alternative):
// call 0 is the stem ReLU, then the ReLUs of the blocks in forward order
// (one per stage; the last is the block output after the residual add),
// -1 the stem max pool. element is a flat NCHW index (of the ReLU input, or
// of the pool's output window); the choice is 1 (passes) / 0 (blocks) for a
// ReLU, the argmax as h * W + w within its channel for the pool. Counts the
// rows this run's last training forward decided differently.
static void count_kinks_taken(FixtureRun *run) {
    const SafeTensor *table = safetensors_find(&run->file, "kinks");
    if (!table) fail_msg("fixture lacks kinks (regenerate with tools/make_fixtures.py)");
    assert_int_equal(table->dtype, SAFE_I64);
    assert_int_equal(table->rank, 2);
    assert_int_equal(table->shape[1], 4);
    const int64_t *rows = safetensors_data(&run->file, table);
    const Resnet *model = &run->model;
    const ResnetSlot *slot = &model->slots[0];
    const ConvShape *shapes = slot->plans[0].conv_shapes;
    run->kinks = (int)table->shape[0];
    run->kinks_taken = 0;
    for (int k = 0; k < run->kinks; k++) {
        const int64_t call = rows[4 * k], element = rows[4 * k + 1], choice = rows[4 * k + 2];
        if (call < 0) {  // the max pool: compare the argmax
            const PoolShape *pool = &slot->plans[0].pool;
            const int64_t plane = (int64_t)pool->out_height * pool->out_width;
            const int64_t n = element / (pool->channels * plane), c = element / plane % pool->channels;
            int32_t argmax;
            model->backend->op.download(model->backend, &argmax,
                                        slot->pool_argmax + (n * plane + element % plane) *
                                                                pool->channels + c,
                                        sizeof argmax);
            run->kinks_taken += (argmax - c) / pool->channels != choice;
            continue;
        }
        const float *output = (const float *)slot->stem_out;
        const ConvShape *shape = &shapes[0];
        for (int b = 0, index = 1; b < model->block_count && call >= index; b++) {
            const ResnetBlock *block = &model->blocks[b];
            if (call < index + block->stage_count) {
                const int stage = (int)(call - index);
                shape = &shapes[block->first_conv + stage];
                output =
                    (const float *)(stage + 1 < block->stage_count ? slot->blocks[b].relu_out[stage]
                                                                   : slot->blocks[b].out);
            }
            index += block->stage_count;
        }
        const int64_t h = shape->out_height, w = shape->out_width, c = shape->out_channels;
        const int64_t n = element / (c * h * w), channel = element / (h * w) % c,
                      pixel = element % (h * w);
        float value;
        model->backend->op.download(model->backend, &value, output + (n * h * w + pixel) * c + channel,
                                    sizeof value);
        run->kinks_taken += (value > 0.0f) != (choice == 1);
    }
}

// kinkerr/NAME when this run took a fragile decision the other way, else 0.
static double kink_error(const FixtureRun *run, const char *name) {
    if (!run->kinks_taken) return 0.0;
    char key[SAFETENSORS_MAX_NAME + 32];
    snprintf(key, sizeof key, "kinkerr/%s", name);
    return fixture_f64(&run->file, key);
}

// Judges one gradient entry (full tensor or sample), element by element.
static void check_gradient_values(FixtureRun *run, const char *name, const float *ours,
                                  const double *truth, size_t n, double scale) {
    norm_error(run, name, ours, truth, n);
    if (compare_floats_with_truth(&run->file, name, ours, truth, n, scale, kink_error(run, name),
                                  &run->worst[WORST_GRADIENTS]))
        fail_msg("%s differs from the float64 reference", name);
}

// Returns -1 when the backend is not available (the test is then skipped).
static int fixture_setup(FixtureRun *run, const char *backend_name, int depth, int width) {
    ErrorMessage err = {{0}};
    run->backend = backend_create(backend_name, 0, &err);
    if (!run->backend) {
        if (strcmp(backend_name, "ref") == 0) fail_msg("%s", err.text);
        fprintf(stderr, "  skipped: %s\n", err.text);
        return -1;
    }
    char path[256];
    snprintf(path, sizeof path, FIXTURE_DIR "%sresnet%d%s.safetensors", width > 1 ? "wide_" : "",
             depth, width > 1 ? "_2" : "");
    if (safetensors_read(path, &run->file, &err)) fail_msg("%s", err.text);
    ResnetConfig config = resnet_config_default(depth);
    config.width_factor = width;
    const ResnetInputShape shape = {FIXTURE_BATCH, FIXTURE_SIZE};
    if (resnet_declare(&run->model, run->backend, &config, &err) ||
        resnet_allocate(&run->model, &shape, 1, &err) ||
        fixture_init_table(&run->model.params, &err) ||
        fixture_init_table(&run->model.buffers, &err))
        fail_msg("%s", err.text);
    run->feature_count = (size_t)FIXTURE_BATCH * run->model.feature_dim;

    // The formula against the stored values: u("check", i), the first conv
    // weights and the input must match bit for bit.
    float *check = fixture_floats(&run->file, "check/u", 16);
    assert_non_null(check);
    for (uint32_t i = 0; i < 16; i++) assert_true(fixture_u("check", i) == check[i]);
    free(check);
    const Parameter *conv1 = parameter_find(&run->model.params, "conv1.weight");
    float *ours = resnet_test_download(run->backend, conv1->value, conv1->count);
    float *torch = malloc(conv1->count * sizeof *torch);
    weights_to_torch_layout(conv1, ours, torch);
    float *stored = fixture_floats(&run->file, "init_sample/conv1.weight", 16);
    assert_non_null(stored);
    assert_memory_equal(torch, stored, 16 * sizeof *stored);
    free(ours), free(torch), free(stored);

    const size_t pixels = FIXTURE_SIZE * FIXTURE_SIZE, count = FIXTURE_BATCH * 3 * pixels;
    float *nchw = malloc(count * sizeof *nchw), *nhwc = malloc(count * sizeof *nhwc);
    fixture_fill("input", 0.0f, 1.0f, nchw, count);
    stored = fixture_floats(&run->file, "input", count);
    assert_non_null(stored);
    assert_memory_equal(nchw, stored, count * sizeof *nchw);
    for (size_t n = 0; n < FIXTURE_BATCH; n++)
        for (size_t c = 0; c < 3; c++)
            for (size_t p = 0; p < pixels; p++)
                nhwc[(n * pixels + p) * 3 + c] = nchw[(n * 3 + c) * pixels + p];
    run->input = run->backend->op.alloc(run->backend, count * sizeof(float));
    run->backend->op.upload(run->backend, run->input, nhwc, count * sizeof(float));
    free(nchw), free(nhwc), free(stored);
    return 0;
}

static void fixture_teardown(FixtureRun *run) {
    run->backend->op.free(run->backend, run->input);
    resnet_free(&run->model);
    safetensors_free(&run->file);
    backend_destroy(run->backend);
}

// Full gradients (scale max |truth|) or, for large tensors, 256 samples
// (scale 4 x RMS) plus the float64 sum (scale sqrt(n sumsq), the L1 bound)
// and sum of squares (scale sumsq) of the whole gradient.
static void check_gradient(FixtureRun *run, const Parameter *param) {
    char name[SAFETENSORS_MAX_NAME + 16];
    float *ours = resnet_test_download(run->backend, param->grad, param->count);
    float *torch = malloc(param->count * sizeof *torch);
    weights_to_torch_layout(param, ours, torch);
    snprintf(name, sizeof name, "grad/%s", param->name);
    double *full = fixture_doubles(&run->file, name, param->count);
    if (full) {
        check_gradient_values(run, name, torch, full, param->count,
                              max_abs_f64(full, param->count));
        free(full);
    } else {
        char sum_name[SAFETENSORS_MAX_NAME + 16];
        snprintf(sum_name, sizeof sum_name, "grad_sumsq/%s", param->name);
        const double ref_sumsq = fixture_f64(&run->file, sum_name);
        snprintf(name, sizeof name, "grad_sample/%s", param->name);
        double *sample = fixture_doubles(&run->file, name, GRAD_SAMPLES);
        if (!sample) fail_msg("fixture has no gradient for %s", param->name);
        float picked[GRAD_SAMPLES];
        for (size_t k = 0; k < GRAD_SAMPLES; k++)
            picked[k] = torch[(k * SAMPLE_STRIDE) % param->count];
        const double rms = sqrt(ref_sumsq / (double)param->count);
        check_gradient_values(run, name, picked, sample, GRAD_SAMPLES, 4.0 * rms);
        double sum = 0.0, sumsq = 0.0;
        for (size_t i = 0; i < param->count; i++) {
            sum += torch[i];
            sumsq += (double)torch[i] * torch[i];
        }
        Worst *sums = &run->worst[WORST_GRADIENT_SUMS];
        if (compare_with_truth(&run->file, sum_name, &sumsq, &ref_sumsq, 1, ref_sumsq,
                               kink_error(run, sum_name), sums))
            fail_msg("%s differs from the float64 reference", sum_name);
        snprintf(sum_name, sizeof sum_name, "grad_sum/%s", param->name);
        const double ref_sum = fixture_f64(&run->file, sum_name);
        if (compare_with_truth(&run->file, sum_name, &sum, &ref_sum, 1,
                               sqrt((double)param->count * ref_sumsq), kink_error(run, sum_name),
                               sums))
            fail_msg("%s differs from the float64 reference", sum_name);
        free(sample);
    }
    free(ours), free(torch);
}

// Features (N, D) against `name` (scale max |truth|): O(1) values after the
// whole network; f32err is ~4e-6 (resnet18) and ~1.5e-4 (resnet50) of
// max |features|.
static void check_features(FixtureRun *run, const char *name) {
    float *ours = resnet_test_download(
        run->backend, (const float *)(resnet_features(&run->model, 0)), run->feature_count);
    double *truth = fixture_doubles(&run->file, name, run->feature_count);
    assert_non_null(truth);
    if (compare_floats_with_truth(&run->file, name, ours, truth, run->feature_count,
                                  max_abs_f64(truth, run->feature_count), 0.0,
                                  &run->worst[WORST_FEATURES]))
        fail_msg("%s differ from the float64 reference", name);
    free(ours), free(truth);
}

// loss = sum(features * loss_weights), summed here in double from our
// float32 features (scale sum |f w|); returns dloss/dfeatures = loss_weights.
static float *check_loss(FixtureRun *run) {
    float *weights = fixture_floats(&run->file, "loss_weights", run->feature_count);
    assert_non_null(weights);
    float *features = resnet_test_download(
        run->backend, (const float *)(resnet_features(&run->model, 0)), run->feature_count);
    double loss = 0.0, loss_scale = 0.0;
    for (size_t i = 0; i < run->feature_count; i++) {
        loss += (double)features[i] * weights[i];
        loss_scale += fabs((double)features[i] * weights[i]);
    }
    const double truth = fixture_f64(&run->file, "loss");
    if (compare_with_truth(&run->file, "loss", &loss, &truth, 1, loss_scale, 0.0,
                           &run->worst[WORST_LOSS]))
        fail_msg("loss differs from the float64 reference");
    free(features);
    return weights;
}

// Running statistics after one momentum-0.1 update (0.9 init + 0.1 batch
// statistic; scale max |truth|).
static void check_running_stats(FixtureRun *run) {
    const ParameterSet *buffers = &run->model.buffers;
    for (int i = 0; i < buffers->count; i++) {
        const Parameter *buffer = &buffers->params[i];
        const char *dot = strrchr(buffer->name, '.');
        char name[SAFETENSORS_MAX_NAME];
        snprintf(name, sizeof name, "%s/%.*s", dot + 1, (int)(dot - buffer->name), buffer->name);
        double *truth = fixture_doubles(&run->file, name, buffer->count);
        if (!truth) fail_msg("fixture lacks %s", name);
        float *ours = resnet_test_download(run->backend, buffer->value, buffer->count);
        if (compare_floats_with_truth(&run->file, name, ours, truth, buffer->count,
                                      max_abs_f64(truth, buffer->count), 0.0,
                                      &run->worst[WORST_RUNNING_STATS]))
            fail_msg("%s differs from the float64 reference", name);
        free(ours), free(truth);
    }
    assert_int_equal(run->model.num_batches_tracked, 1);
}

// depth 50 and width 2: wide_resnet50_2.
static void run_fixture(const char *backend_name, int depth, int width) {
    const double start = now_seconds();
    FixtureRun run = {0};
    if (fixture_setup(&run, backend_name, depth, width)) skip();
    ErrorMessage err = {{0}};
    Backend *backend = run.backend;

    if (resnet_forward(&run.model, 0, FIXTURE_BATCH, (const Act *)run.input, 1, &err))
        fail_msg("%s", err.text);
    count_kinks_taken(&run);
    check_features(&run, "features");
    float *weights = check_loss(&run);

    float *dfeatures = backend->op.alloc(backend, run.feature_count * sizeof(float));
    backend->op.upload(backend, dfeatures, weights, run.feature_count * sizeof(float));
    parameter_set_zero_grads(&run.model.params);
    if (resnet_backward(&run.model, 0, (const Act *)dfeatures, &err)) fail_msg("%s", err.text);
    for (int i = 0; i < run.model.params.count; i++)
        check_gradient(&run, &run.model.params.params[i]);
    check_running_stats(&run);

    if (resnet_forward(&run.model, 0, FIXTURE_BATCH, (const Act *)run.input, 0, &err))
        fail_msg("%s", err.text);
    check_features(&run, "features_eval");
    assert_int_equal(run.model.num_batches_tracked, 1);  // eval forward does not count

    fprintf(stderr,
            "  %sresnet%d%s on %s: %.2f s; %d of %d fragile branch decisions taken the other way;\n"
            "  worst |ours - truth| / allowed, / f32err:\n",
            width > 1 ? "wide_" : "", depth, width > 1 ? "_2" : "", backend_name, now_seconds() - start, run.kinks_taken, run.kinks);
    for (int kind = 0; kind < WORST_KINDS; kind++)
        fprintf(stderr, "    %-13s %.3f  %.3f (%s)\n", worst_labels[kind],
                run.worst[kind].of_allowed, run.worst[kind].of_f32err, run.worst[kind].name);
    fprintf(stderr, "    worst gradient ||ours - truth|| / ||truth||: %.3g (%s)\n",
            run.worst_norm_error, run.worst_norm_name);
    backend->op.free(backend, dfeatures);
    free(weights);
    fixture_teardown(&run);
}

// The wide ResNet-50-2 (torchvision's wide_resnet50_2, the same as timm's)
// on the optimised backend: its bottlenecks twice as wide inside.
static void test_wide_resnet50_2_matches_pytorch_cpu(void **state) {
    run_fixture("cpu", 50, 2);
}
static void test_resnet18_matches_pytorch_ref(void **state) {
    run_fixture("ref", 18, 1);
}
static void test_resnet50_matches_pytorch_ref(void **state) {
    run_fixture("ref", 50, 1);
}
// The same on the optimised backend (skipped where it is not built).
static void test_resnet18_matches_pytorch_cpu(void **state) {
    run_fixture("cpu", 18, 1);
}
static void test_resnet50_matches_pytorch_cpu(void **state) {
    run_fixture("cpu", 50, 1);
}
// And on the GPU (fp32, cuDNN and cuBLAS without TF32): skipped without one.
static void test_resnet18_matches_pytorch_cuda(void **state) {
    run_fixture("cuda", 18, 1);
}
static void test_resnet50_matches_pytorch_cuda(void **state) {
    run_fixture("cuda", 50, 1);
}


// ---- structure, init, plans ----------------------------------------------------------

// torchvision (python3-torchvision 0.14): state_dict sizes including fc,
// which our backbone leaves out (fc: 513,000 for 512 features, 2,049,000
// for 2048; its 2 keys).
static void test_parameter_and_key_counts(void **state) {
    static const struct {
        int depth;
        size_t torchvision_total, fc, buffer_elements;
        int torchvision_keys, feature_dim, width;
    } expected[] = {
        {18, 11689512, 513000, 9600, 122, 512, 1},
        {34, 21797672, 513000, 17024, 218, 512, 1},
        {50, 25557032, 2049000, 53120, 320, 2048, 1},
        {101, 44549160, 2049000, 105344, 626, 2048, 1},
        {152, 60192808, 2049000, 151424, 932, 2048, 1},
        // timm 1.0's resnet26, resnet200 and torchvision 0.29's (= timm's)
        // wide_resnet50_2, wide_resnet101_2 (width 2)
        {26, 15995176, 2049000, 30848, 176, 2048, 1},
        {200, 64673832, 2049000, 176000, 1220, 2048, 1},
        {50, 68883240, 2049000, 68224, 320, 2048, 2},
        {101, 126886696, 2049000, 137856, 626, 2048, 2},
    };
    ErrorMessage err = {{0}};
    Backend *backend = backend_create("ref", 1, &err);
    assert_non_null(backend);
    for (size_t i = 0; i < sizeof expected / sizeof *expected; i++) {
        Resnet model;
        ResnetConfig config = resnet_config_default(expected[i].depth);
        config.width_factor = expected[i].width;
        if (resnet_declare(&model, backend, &config, &err)) fail_msg("%s", err.text);
        assert_int_equal(parameter_set_elements(&model.params),
                         expected[i].torchvision_total - expected[i].fc);
        assert_int_equal(parameter_set_elements(&model.buffers), expected[i].buffer_elements);
        assert_int_equal(weights_key_count(&model.params, &model.buffers),
                         expected[i].torchvision_keys - 2);
        assert_int_equal(model.feature_dim, expected[i].feature_dim);
        resnet_free(&model);
    }
    const ResnetConfig bad = resnet_config_default(42);
    Resnet model;
    assert_int_equal(resnet_declare(&model, backend, &bad, &err), -1);
    assert_non_null(strstr(err.text, "depth 42"));
    resnet_free(&model);
    ResnetConfig wide_basic = resnet_config_default(34);
    wide_basic.width_factor = 2;
    assert_int_equal(resnet_declare(&model, backend, &wide_basic, &err), -1);
    assert_non_null(strstr(err.text, "a wide resnet34 does not exist"));
    resnet_free(&model);
    backend_destroy(backend);
}

// The mean of the parameter's values.
static double backbone_param_mean(const Backbone *model, const char *name) {
    const Parameter *p = parameter_find(model->params, name);
    if (!p) fail_msg("no %s", name);
    float *values = resnet_test_download(model->backend, p->value, p->count);
    double sum = 0.0;
    for (size_t i = 0; i < p->count; i++) sum += values[i];
    free(values);
    return sum / (double)p->count;
}

// LightlyTrain's timm/resnetN is torchvision's model and names with timm's
// init (zero_init_last: each block's last BatchNorm starts at gamma 0); the
// same seed draws the same convolutions.
static void test_timm_names_init_as_timm(void **state) {
    (void)state;
    ErrorMessage err = {{0}};
    Backend *backend = backend_create("ref", 1, &err);
    assert_non_null(backend);
    const BackboneInput input = {1, 32};
    Backbone models[2];
    const char *names[2] = {"resnet50", "timm/resnet50"};
    for (int m = 0; m < 2; m++) {
        BackboneSpec spec;
        if (backbone_spec_parse(names[m], 32, &spec, &err) ||
            backbone_create(&models[m], backend, &spec, &input, 1, 7, &err))
            fail_msg("%s: %s", names[m], err.text);
        char name[BACKBONE_MAX_NAME];
        backbone_spec_name(&spec, name, sizeof name);
        assert_string_equal(name, "resnet50");  // what checkpoints and exports record
    }
    assert_true(backbone_param_mean(&models[0], "layer2.3.bn3.weight") == 1.0);
    assert_true(backbone_param_mean(&models[1], "layer2.3.bn3.weight") == 0.0);
    assert_true(backbone_param_mean(&models[1], "layer2.3.bn2.weight") == 1.0);
    assert_true(backbone_param_mean(&models[1], "layer1.0.downsample.1.weight") == 1.0);
    assert_true(backbone_param_mean(&models[0], "layer4.2.conv3.weight") ==
                backbone_param_mean(&models[1], "layer4.2.conv3.weight"));
    assert_int_equal(parameter_set_elements(models[0].params),
                     parameter_set_elements(models[1].params));
    for (int m = 0; m < 2; m++) backbone_free(&models[m]);
    backend_destroy(backend);
}

static void test_init_follows_torchvision(void **state) {
    ErrorMessage err = {{0}};
    Backend *backend = backend_create("ref", 1, &err);
    assert_non_null(backend);
    ResnetConfig config = resnet_config_default(18);
    config.zero_init_residual = 1;
    const ResnetInputShape shape = {1, 32};
    Resnet model;
    if (resnet_create(&model, backend, &config, &shape, 1, 7, &err)) fail_msg("%s", err.text);

    // kaiming_normal_(fan_out, relu): std sqrt(2 / (512 * 3 * 3)); 2.4M draws
    // give the sample std within 0.1% and the mean within 1e-3 std (5 sigma).
    const Parameter *conv = parameter_find(&model.params, "layer4.1.conv2.weight");
    float *w = resnet_test_download(backend, conv->value, conv->count);
    double sum = 0.0, sumsq = 0.0;
    for (size_t i = 0; i < conv->count; i++) sum += w[i], sumsq += (double)w[i] * w[i];
    const double mean = sum / conv->count, std = sqrt(sumsq / conv->count - mean * mean);
    const double expected_std = sqrt(2.0 / (512 * 9));
    assert_true(fabs(std / expected_std - 1.0) < 5e-3);
    assert_true(fabs(mean) < 5e-3 * expected_std);

    static const struct {
        const char *name;
        int buffer;
        float value;
    } constants[] = {
        {"bn1.weight", 0, 1.0f},          {"bn1.bias", 0, 0.0f},
        {"layer1.0.bn1.weight", 0, 1.0f}, {"layer1.0.bn2.weight", 0, 0.0f},  // zero_init_residual
        {"layer2.0.downsample.1.weight", 0, 1.0f},
        {"layer3.1.bn1.running_mean", 1, 0.0f}, {"layer3.1.bn1.running_var", 1, 1.0f},
    };
    for (size_t i = 0; i < sizeof constants / sizeof *constants; i++) {
        const Parameter *p =
            parameter_find(constants[i].buffer ? &model.buffers : &model.params, constants[i].name);
        assert_non_null(p);
        float *v = resnet_test_download(backend, p->value, p->count);
        for (size_t j = 0; j < p->count; j++) assert_true(v[j] == constants[i].value);
        free(v);
    }
    // Same seed, same weights; another seed, other weights.
    const Conv2d *layer = &model.blocks[7].conv[1];  // layer4.1.conv2
    float *again = NULL;
    if (conv2d_init_kaiming(backend, layer, &model.params, 7, &err)) fail_msg("%s", err.text);
    again = resnet_test_download(backend, conv->value, conv->count);
    assert_memory_equal(w, again, conv->count * sizeof *w);
    free(again);
    if (conv2d_init_kaiming(backend, layer, &model.params, 8, &err)) fail_msg("%s", err.text);
    again = resnet_test_download(backend, conv->value, conv->count);
    assert_memory_not_equal(w, again, conv->count * sizeof *w);
    free(again), free(w);
    resnet_free(&model);
    backend_destroy(backend);
}

// A slot built for batch 2 runs batch 1 only after resnet_prepare_batch; two
// slots (DINO: two resolutions) keep separate activations, so
// forward-forward-backward-backward gives the gradients of running each pair
// in turn.
static void test_smaller_batch_needs_plans(void **state) {
    ErrorMessage err = {{0}};
    Backend *backend = backend_create("ref", 1, &err);
    assert_non_null(backend);
    const ResnetConfig config = resnet_config_default(18);
    const ResnetInputShape shapes[2] = {{2, 16}, {2, 8}};
    Resnet model;
    if (resnet_create(&model, backend, &config, shapes, 2, 3, &err)) fail_msg("%s", err.text);
    float *big = resnet_test_input(backend, "big", 2, 16);
    float *small = resnet_test_input(backend, "small", 2, 8);

    assert_int_equal(resnet_forward(&model, 0, 1, (const Act *)big, 0, &err), -1);
    assert_non_null(strstr(err.text, "resnet_prepare_batch"));
    assert_int_equal(resnet_backward(&model, 1, (const Act *)big, &err),
                     -1); // no training forward yet
    if (resnet_prepare_batch(&model, 0, 1, &err)) fail_msg("%s", err.text);
    if (resnet_forward(&model, 0, 1, (const Act *)big, 0, &err)) fail_msg("%s", err.text);
    float *one = resnet_test_download(backend, (const float *)(resnet_features(&model, 0)), 512);
    if (resnet_forward(&model, 0, 2, (const Act *)big, 0, &err)) fail_msg("%s", err.text);
    float *two = resnet_test_download(backend, (const float *)(resnet_features(&model, 0)), 1024);
    // Eval mode treats images independently: the same arithmetic per image.
    assert_int_equal(count_bad("batch 1 vs 2", one, two, 512, 1e-6, 1e-7), 0);
    free(one), free(two);

    const size_t params = model.params.total;
    float *dfeatures = resnet_test_values(backend, "dfeatures", 2 * 512);
    float *interleaved, *sequential;
    parameter_set_zero_grads(&model.params);
    if (resnet_forward(&model, 0, 2, (const Act *)big, 1, &err) ||
        resnet_forward(&model, 1, 2, (const Act *)small, 1, &err) ||
        resnet_backward(&model, 1, (const Act *)dfeatures, &err) ||
        resnet_backward(&model, 0, (const Act *)dfeatures, &err))
        fail_msg("%s", err.text);
    interleaved = resnet_test_download(backend, model.params.grads, params);
    parameter_set_zero_grads(&model.params);
    if (resnet_forward(&model, 0, 2, (const Act *)big, 1, &err) ||
        resnet_backward(&model, 0, (const Act *)dfeatures, &err) ||
        resnet_forward(&model, 1, 2, (const Act *)small, 1, &err) ||
        resnet_backward(&model, 1, (const Act *)dfeatures, &err))
        fail_msg("%s", err.text);
    sequential = resnet_test_download(backend, model.params.grads, params);
    // Only the order of two additions per element differs.
    assert_int_equal(count_bad("grads", interleaved, sequential, params, 1e-5,
                               1e-6 * max_abs(sequential, params)), 0);
    assert_true(max_abs(sequential, params) > 0.0f);
    free(interleaved), free(sequential);
    backend->op.free(backend, dfeatures);
    backend->op.free(backend, big), backend->op.free(backend, small);
    resnet_free(&model);
    backend_destroy(backend);
}

int main(void) {
    const struct CMUnitTest model_tests[] = {
        cmocka_unit_test(test_parameter_and_key_counts),
        cmocka_unit_test(test_init_follows_torchvision),
        cmocka_unit_test(test_timm_names_init_as_timm),
        cmocka_unit_test(test_resnet18_matches_pytorch_ref),
        cmocka_unit_test(test_resnet50_matches_pytorch_ref),
        cmocka_unit_test(test_resnet18_matches_pytorch_cpu),
        cmocka_unit_test(test_resnet50_matches_pytorch_cpu),
        cmocka_unit_test(test_wide_resnet50_2_matches_pytorch_cpu),
        cmocka_unit_test(test_resnet18_matches_pytorch_cuda),
        cmocka_unit_test(test_resnet50_matches_pytorch_cuda),
        cmocka_unit_test(test_smaller_batch_needs_plans),
    };
    return cmocka_run_group_tests_name("resnet", model_tests, NULL, NULL);
}
