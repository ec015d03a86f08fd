// YOLOv5u, YOLOv8, YOLO11, YOLO12 and YOLO26 (src/nn/yolo.h) against
// Ultralytics 8.4.190 through tests/fixtures/yolo.safetensors
// (tools/make_yolo_fixtures.py): for every size of the five families the full state_dict structure (every key and torch
// shape, neck and head included), the train-mode outputs of layers 4, 6 and
// the backbone's last (P3, P4, P5) and the eval-mode last output, each
// within 1e-5 + 2 x PyTorch's own float32 error (its largest over three
// summation orders) relative (L2) of the
// float64 truth; for yolov5nu, yolov8n, yolo11n, yolo12n, yolo12l, yolo26n
// and yolo11n-cls one training step's gradients of every backbone parameter and the first
// BatchNorm's running variance. Fixture init (tests/fixtures/README.md)
// sets weights and inputs on both sides. The name parser, the model's own
// init and the weight file round trip: test_yolo_init.c.
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
#include "backend/ref/ref_backend.h"
#include "backend_fixture.h"
#include "fixture_init.h"
#include "fixture_tensors.h"
#include "nn/safetensors.h"
#include "nn/weights.h"
#include "nn/yolo.h"

#define FIXTURE "tests/fixtures/yolo.safetensors"
#define BATCH 2
// A map's relative L2 error may be 1e-5 (the bound) plus twice the
// error of PyTorch's own float32 runs (f32err: the largest of three
// summation orders), which train-mode BatchNorm over P5's few values per
// channel amplifies past 1e-5 for some models. LTC_TEST_YOLO_VERBOSE=1
// prints every map's error and bound.
#define MAP_TOLERANCE 1e-5
#define GRAD_TOLERANCE 1e-4  // relative L2 error of 256 gradient samples; of a sum of squares
// Norms below which the errors are absolute: BatchNorm biases whose true
// gradient is 0 (a per-channel constant that the next train-mode norm
// removes) get fp32 rounding (~1e-9) instead.
#define GRAD_FLOOR 0.1  // every other gradient's samples: norm >= 0.8

static SafeTensors fixture;

// Group setup: the cpu backend (2 threads) and the fixture file.
static int setup(void **state) {
    ErrorMessage err;
    if (fixture_backend_create_cpu(state)) return -1;
    if (safetensors_read(FIXTURE, &fixture, &err)) {
        fprintf(stderr, "%s\n", err.text);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    safetensors_free(&fixture);
    return fixture_backend_destroy(state);
}

#define SIDE 96  // px: P5 is 3 x 3 (tools/make_yolo_fixtures.py says why)
#define SAMPLES 1024
#define SAMPLE_STRIDE 2654435761ull

// fixture_rule plus the Detect head's plain conv biases (0, 0.1),
// Classify's Linear weight (0, sqrt(6 / out)) and YOLO12's A2C2f gamma
// (0.5, 0.25), as make_yolo_fixtures.py's.
static int yolo_rule(const Parameter *param, float *offset, float *scale) {
    if (fixture_rule(param, offset, scale) == 0) return 0;
    const size_t length = strlen(param->name);
    if (param->kind == PARAM_EMBEDDING && length > 6 && !strcmp(param->name + length - 6, ".gamma")) {
        *offset = 0.5f;
        *scale = 0.25f;
        return 0;
    }
    if (param->rank == 2 && param->kind == PARAM_WEIGHT) {
        *offset = 0.0f;
        *scale = (float)sqrt(6.0 / param->torch_shape[0]);
        return 0;
    }
    if (param->kind == PARAM_BIAS) {
        *offset = 0.0f;
        *scale = 0.1f;
        return 0;
    }
    return -1;
}

typedef struct Built {
    Backend *backend;
    Yolo model;
    float *input;  // backend memory (N, S, S, 3)
} Built;

static void build(Built *built, Backend *backend, const char *name, int side) {
    ErrorMessage err;
    YoloConfig config;
    int pretrained;
    built->backend = backend;
    if (yolo_parse_name(name, &config, &pretrained, &err)) fail_msg("%s", err.text);
    const YoloInputShape shape = {BATCH, side};
    if (yolo_declare(&built->model, backend, &config, &err) ||
        yolo_allocate(&built->model, &shape, 1, &err) ||
        fixture_init_table_by(&built->model.params, yolo_rule, &err) ||
        fixture_init_table_by(&built->model.buffers, yolo_rule, &err))
        fail_msg("%s: %s", name, err.text);
    char input_name[32];
    snprintf(input_name, sizeof input_name, "input/yolo/%d", side);
    const size_t pixels = (size_t)side * side, count = BATCH * 3 * pixels;
    float *nchw = malloc(count * sizeof *nchw), *nhwc = malloc(count * sizeof *nhwc);
    fixture_fill(input_name, 0.0f, 1.0f, nchw, count);
    for (int n = 0; n < BATCH; n++)
        for (size_t p = 0; p < pixels; p++)
            for (int c = 0; c < 3; c++)
                nhwc[(n * pixels + p) * 3 + c] = nchw[(n * 3 + c) * pixels + p];
    built->input = backend->op.alloc(backend, count * sizeof(float));
    backend->op.upload(backend, built->input, nhwc, count * sizeof(float));
    free(nchw);
    free(nhwc);
}

static void unbuild(Built *built) {
    built->backend->op.free(built->backend, built->input);
    yolo_free(&built->model);
}

// The relative L2 error ||actual - expected|| / ||expected|| of a map
// against the fixture: the whole map, or (the larger models) its samples
// and its sum of squares. Prints and counts a failure.
static int expect_map(Built *built, int layer, const char *key) {
    int height, width, channels;
    const Act *map = yolo_layer_output(&built->model, 0, layer, &height, &width, &channels);
    const size_t n = (size_t)BATCH * height * width * channels;
    float *actual = malloc(n * sizeof *actual);
    built->backend->op.download(built->backend, actual, map, n * sizeof *actual);
    char name[96];
    snprintf(name, sizeof name, "%s/sample", key);
    const int sampled = safetensors_find(&fixture, name) != NULL;
    const size_t count = sampled ? SAMPLES : n;
    const float *expected = safetensors_data(
        &fixture, fixture_find_tensor(&fixture, sampled ? name : key, SAFE_F32, (int64_t)count));
    double diff = 0.0, norm = 0.0, sumsq = 0.0;
    for (size_t i = 0; i < count; i++) {
        const double value = actual[sampled ? (size_t)(i * SAMPLE_STRIDE % n) : i];
        diff += (value - expected[i]) * (value - expected[i]);
        norm += (double)expected[i] * expected[i];
    }
    for (size_t i = 0; i < n; i++) sumsq += (double)actual[i] * actual[i];
    free(actual);
    double relative = sqrt(diff / (norm > 0 ? norm : 1.0));
    if (sampled) {
        snprintf(name, sizeof name, "%s/sumsq", key);
        const double expected_sumsq = fixture_read_f64(&fixture, name);
        const double sumsq_error = fabs(sumsq - expected_sumsq) / expected_sumsq;
        if (sumsq_error > relative) relative = sumsq_error;
    }
    snprintf(name, sizeof name, "%s/f32err", key);
    const double tolerance = MAP_TOLERANCE + 2.0 * fixture_read_f64(&fixture, name);
    if (getenv("LTC_TEST_YOLO_VERBOSE")) printf("%s: %.3g (tolerance %.3g)\n", key, relative, tolerance);
    if (!(relative <= tolerance)) {
        print_error("%s: relative error %.3g (tolerance %.3g)\n", key, relative, tolerance);
        return 1;
    }
    return 0;
}

static void check_forward(const char *name) {
    Backend *backend = fixture_backend;
    Built built;
    ErrorMessage err;
    build(&built, backend, name, SIDE);
    const int last = built.model.backbone_layers - 1;
    char key[64];
    if (yolo_forward(&built.model, 0, BATCH, (const Act *)built.input, 0, &err))
        fail_msg("%s", err.text);
    snprintf(key, sizeof key, "%s/eval/p5", name);
    int failures = expect_map(&built, last, key);
    if (yolo_forward(&built.model, 0, BATCH, (const Act *)built.input, 1, &err))
        fail_msg("%s", err.text);
    const int layers[3] = {4, 6, last};
    const char *labels[3] = {"p3", "p4", "p5"};
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof key, "%s/train/%s", name, labels[i]);
        failures += expect_map(&built, layers[i], key);
    }
    unbuild(&built);
    assert_int_equal(failures, 0);
}

// Every size of the family whose names start with prefix and end with
// suffix ("" for the detection models; a -seg, -pose or -obb model runs its
// detection model's trained part: test_structure checks its head).
static void check_family(const char *prefix, const char *suffix) {
    for (int i = 0; yolo_model_names[i]; i++) {
        const char *name = yolo_model_names[i], *dash = strchr(name, '-');
        if (strncmp(name, prefix, strlen(prefix)) == 0 && strcmp(dash ? dash : "", suffix) == 0)
            check_forward(name);
    }
}

// YOLOv5u under its released names (yolov5n ... are the same models: test_structure).
static void test_forward_yolov5(void **state) {
    for (int i = 0; yolo_model_names[i]; i++) {
        const char *name = yolo_model_names[i];
        if (strncmp(name, "yolov5", 6) == 0 && name[strlen(name) - 1] == 'u') check_forward(name);
    }
}
static void test_forward_yolov8(void **state) { check_family("yolov8", ""); }
static void test_forward_yolo11(void **state) { check_family("yolo11", ""); }
static void test_forward_yolo12(void **state) { check_family("yolo12", ""); }
static void test_forward_yolo26(void **state) { check_family("yolo26", ""); }
static void test_forward_yolov6(void **state) { check_family("yolov6", ""); }
// The 4-level models: yolo26-p6.yaml (a P6/64 stage, layers 0-12), yolo26-p2.yaml
// (yolo26's backbone) and yolov8-pose-p6.yaml (a P6/64 stage, layers 0-10).
static void test_forward_levels(void **state) {
    check_family("yolo26", "-p6");
    check_family("yolo26", "-p2");
    check_family("yolov8", "-pose-p6");
}
// The -cls models: no SPPF (YOLO11's and YOLO26's C2PSA at layer 9), trained up to Classify.
static void test_forward_classify(void **state) { check_family("yolo", "-cls"); }

// ---- one training step's gradients ---------------------------------------------------------------

// Relative L2 error of 256 samples of the gradient of param (torch layout)
// and of its sum of squares.
static int expect_gradient(Built *built, const char *model, const Parameter *param) {
    float *ours = malloc(param->count * sizeof *ours), *torch = malloc(param->count * sizeof *torch);
    built->backend->op.download(built->backend, ours, param->grad, param->count * sizeof *ours);
    weights_to_torch_layout(param, ours, torch);
    char key[160];
    snprintf(key, sizeof key, "%s/grad_sample/%s", model, param->name);
    const float *expected =
        safetensors_data(&fixture, fixture_find_tensor(&fixture, key, SAFE_F32, 256));
    double diff = 0.0, norm = 0.0, sumsq = 0.0;
    for (size_t k = 0; k < 256; k++) {
        const double value = torch[k * SAMPLE_STRIDE % param->count];
        diff += (value - expected[k]) * (value - expected[k]);
        norm += (double)expected[k] * expected[k];
    }
    for (size_t i = 0; i < param->count; i++) sumsq += (double)torch[i] * torch[i];
    free(ours);
    free(torch);
    snprintf(key, sizeof key, "%s/grad_sumsq/%s", model, param->name);
    const double expected_sumsq = fixture_read_f64(&fixture, key);
    const double sample_error = sqrt(diff) / fmax(sqrt(norm), GRAD_FLOOR);
    const double sumsq_error =
        fabs(sumsq - expected_sumsq) / fmax(expected_sumsq, GRAD_FLOOR * GRAD_FLOOR);
    if (sample_error <= GRAD_TOLERANCE && sumsq_error <= GRAD_TOLERANCE) return 0;
    print_error("%s %s: gradient samples %.3g, sum of squares %.3g off (tolerance %g)\n", model,
                param->name, sample_error, sumsq_error, GRAD_TOLERANCE);
    return 1;
}

static void check_gradients(const char *name) {
    Backend *backend = fixture_backend;
    Built built;
    ErrorMessage err;
    build(&built, backend, name, SIDE);
    Yolo *model = &built.model;
    const size_t count = (size_t)BATCH * model->feature_dim;
    float *weights = malloc(count * sizeof *weights);
    fixture_fill("loss_weights/yolo", 0.0f, 1.0f, weights, count);
    float *dfeatures = backend->op.alloc(backend, count * sizeof *dfeatures);
    backend->op.upload(backend, dfeatures, weights, count * sizeof *weights);
    parameter_set_zero_grads(&model->params);
    if (yolo_forward(model, 0, BATCH, (const Act *)built.input, 1, &err) ||
        yolo_backward_map(model, 0, (const Act *)dfeatures, NULL, &err))
        fail_msg("%s: %s", name, err.text);
    int failures = 0;
    for (int i = 0; i < model->params.count; i++)
        failures += expect_gradient(&built, name, &model->params.params[i]);
    // the first BatchNorm's running variance after the step (momentum 0.03)
    const Parameter *running = parameter_find(&model->buffers, "model.0.bn.running_var");
    float ours[64];
    assert_true(running && running->count <= 64);
    backend->op.download(backend, ours, running->value, running->count * sizeof *ours);
    char key[64];
    snprintf(key, sizeof key, "%s/running_var/model.0.bn", name);
    const float *expected = safetensors_data(
        &fixture, fixture_find_tensor(&fixture, key, SAFE_F32, (int64_t)running->count));
    for (size_t i = 0; i < running->count; i++)
        if (fabsf(ours[i] - expected[i]) > 1e-5f * fabsf(expected[i]) + 1e-6f) failures++;
    backend->op.free(backend, dfeatures);
    free(weights);
    unbuild(&built);
    assert_int_equal(failures, 0);
}

static void test_gradients(void **state) {
    check_gradients("yolov5nu");  // C3 blocks, the 6x6 stem of padding 2
    check_gradients("yolov8n");
    check_gradients("yolo11n");
    check_gradients("yolo12n");  // A2C2f: ABlock pairs (area 4 and 1), C3k
    check_gradients("yolo12l");  // A2C2f's gamma residual, MLP ratio 1.2
    check_gradients("yolo26n");  // SPPF's unactivated cv1 and shortcut
    check_gradients("yolo11n-cls");  // C2PSA straight after C3k2
    check_gradients("yolov6n");  // ReLU, rows of Convs (a Sequential)
}

// ---- structure --------------------------------------------------------------------------------

// Our tables' keys with torch shapes, in the fixture's "key=d0xd1" form;
// a BN's num_batches_tracked has the empty shape.
static int has_key(const Yolo *model, const char *entry) {
    char key[PARAM_MAX_NAME + 32], shape[64];
    const char *equals = strchr(entry, '=');
    snprintf(key, sizeof key, "%.*s", (int)(equals - entry), entry);
    snprintf(shape, sizeof shape, "%s", equals + 1);
    const size_t length = strlen(key);
    const char *counter = ".num_batches_tracked";
    if (length > strlen(counter) && strcmp(key + length - strlen(counter), counter) == 0) {
        char mean[PARAM_MAX_NAME + 32];
        snprintf(mean, sizeof mean, "%.*s.running_mean", (int)(length - strlen(counter)), key);
        return shape[0] == '\0' && parameter_find(&model->buffers, mean) != NULL;
    }
    const Parameter *param = parameter_find(&model->params, key);
    if (!param) param = parameter_find(&model->buffers, key);
    if (!param) return 0;
    char ours[64] = "";
    for (int d = 0; d < param->rank; d++) {
        const size_t used = strlen(ours);
        snprintf(ours + used, sizeof ours - used, "%s%d", d ? "x" : "", param->torch_shape[d]);
    }
    return strcmp(ours, shape) == 0;
}

static void check_structure(const char *name) {
    ErrorMessage err;
    YoloConfig config;
    int pretrained;
    Yolo model;
    if (yolo_parse_name(name, &config, &pretrained, &err) ||
        yolo_declare(&model, NULL, &config, &err))
        fail_msg("%s: %s", name, err.text);
    char key[64];
    snprintf(key, sizeof key, "%s/state_dict", name);
    const char *list = safetensors_metadata(&fixture, key);
    if (!list) fail_msg("fixture has no metadata %s", key);
    int entries = 0, missing = 0;
    char first_missing[256] = "";
    for (const char *entry = list; *entry;) {
        const char *end = strchr(entry, ';');
        const size_t length = end ? (size_t)(end - entry) : strlen(entry);
        char one[256];
        snprintf(one, sizeof one, "%.*s", (int)length, entry);
        if (!has_key(&model, one)) {
            if (!missing++) snprintf(first_missing, sizeof first_missing, "%s", one);
        }
        entries++;
        entry += length + (end ? 1 : 0);
    }
    const int ours = weights_key_count(&model.params, &model.buffers);
    yolo_free(&model);
    if (missing) fail_msg("%s: %d of %d keys not ours, first %s", name, missing, entries, first_missing);
    if (ours != entries) fail_msg("%s: %d keys, Ultralytics has %d", name, ours, entries);
}

static void test_structure(void **state) {
    for (int i = 0; yolo_model_names[i]; i++) check_structure(yolo_model_names[i]);
}

// ---- 16-bit activations ------------------------------------------------------------------------

// The pooled features of a training forward of `name` on backend (fixture
// weights, or after them `shift` added to every parameter: what an
// optimizer step does), at 64 px.
static void mixed_features(Backend *backend, const char *name, float shift, float *features,
                           int *dim) {
    ErrorMessage err;
    YoloConfig config;
    int pretrained;
    Yolo model;
    const YoloInputShape shape = {BATCH, 64};
    if (yolo_parse_name(name, &config, &pretrained, &err) ||
        yolo_declare(&model, backend, &config, &err) || yolo_allocate(&model, &shape, 1, &err) ||
        fixture_init_table_by(&model.params, yolo_rule, &err) ||
        fixture_init_table_by(&model.buffers, yolo_rule, &err))
        fail_msg("%s: %s", name, err.text);
    const size_t count = (size_t)BATCH * 64 * 64 * 3;
    float *host = malloc(count * sizeof *host);
    fixture_fill("input/yolo/mixed", 0.0f, 1.0f, host, count);
    float *staged = backend->op.alloc(backend, count * sizeof *staged);
    Act *input = backend->op.alloc(backend, act_bytes(backend, count));
    backend->op.upload(backend, staged, host, count * sizeof *host);
    backend->op.float_to_act(backend, count, staged, input);
    for (int run = 0; run < (shift != 0.0f ? 2 : 1); run++) {
        if (run == 1) {  // the fp32 values move as an update moves them; nothing else is told
            float *values = malloc(model.params.total * sizeof *values);
            backend->op.download(backend, values, model.params.values,
                                 model.params.total * sizeof *values);
            for (size_t i = 0; i < model.params.total; i++) values[i] += shift * values[i];
            backend->op.upload(backend, model.params.values, values,
                               model.params.total * sizeof *values);
            free(values);
        }
        if (yolo_forward(&model, 0, BATCH, input, 1, &err)) fail_msg("%s", err.text);
    }
    *dim = model.feature_dim;
    const size_t n = (size_t)BATCH * model.feature_dim;
    float *pooled = backend->op.alloc(backend, n * sizeof *pooled);
    backend->op.act_to_float(backend, n, yolo_features(&model, 0), pooled);
    backend->op.download(backend, features, pooled, n * sizeof *features);
    backend->op.free(backend, pooled);
    backend->op.free(backend, staged);
    backend->op.free(backend, input);
    free(host);
    yolo_free(&model);
}

// 16-mixed (the GPU's default) on the ref backend, which rounds every
// stored activation to fp16 as the GPU does: the features of yolov8n and
// yolo12n (attention) within 2e-2 of fp32's, also after the weights moved
// (the convs' fp16 copy of the weights follows them: without it every
// feature was the same and a run's loss stuck at its uniform value).
static void test_mixed_precision(void **state) {
    const char *names[3] = {"yolov8n", "yolo12n", "yolov6n"};  // yolov6n: ReLU
    for (int m = 0; m < 3; m++)
        for (int moved = 0; moved < 2; moved++) {
            ErrorMessage err;
            Backend *single = ref_backend_create(&err), *half = ref_backend_create(&err);
            if (!single || !half || backend_set_compute_dtype(half, COMPUTE_F16, &err))
                fail_msg("%s", err.text);
            static float a[BATCH * 1024], b[BATCH * 1024];
            int dim;
            mixed_features(single, names[m], moved ? 0.1f : 0.0f, a, &dim);
            mixed_features(half, names[m], moved ? 0.1f : 0.0f, b, &dim);
            double diff = 0.0, norm = 0.0;
            for (int i = 0; i < BATCH * dim; i++) {
                diff += (double)(a[i] - b[i]) * (a[i] - b[i]);
                norm += (double)a[i] * a[i];
            }
            const double relative = sqrt(diff / norm);
            if (!(relative < 2e-2))
                fail_msg("%s%s: fp16 features %.3g from fp32's", names[m],
                         moved ? " after the weights moved" : "", relative);
            backend_destroy(single);
            backend_destroy(half);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_structure),
        cmocka_unit_test(test_forward_yolov5),
        cmocka_unit_test(test_forward_yolov8),
        cmocka_unit_test(test_forward_yolo11),
        cmocka_unit_test(test_forward_yolo12),
        cmocka_unit_test(test_forward_yolo26),
        cmocka_unit_test(test_forward_levels),
        cmocka_unit_test(test_forward_yolov6),
        cmocka_unit_test(test_forward_classify),
        cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_mixed_precision),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
