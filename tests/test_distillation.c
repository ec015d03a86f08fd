// LightlyTrain's distillation methods (src/ssl_methods/distillation*.h)
// against tests/fixtures/distillation.safetensors
// (tools/make_distillation_fixtures.py: LightlyTrain's own
// DistillationLoss, DistillationV2Loss and DistillationV3Loss, run in
// float64): the teacher queue's update, each loss and its gradient, and the
// student's side as each method's training step composes it (heads, the
// bilinear resize to the teacher's grid, L2 normalisation, the queue), on
// the ref and cpu backends, every value within 1e-5 absolute + 1e-5
// relative of the float64 reference. Then, on a tiny ViT teacher file: the
// teacher is frozen (no gradients, values unchanged by training steps,
// training forwards refused) and left out of the checkpoint while the queue
// is in it, teacher_arch must agree with the file, and the optimisation
// defaults and queue sizes by dataset size are LightlyTrain's.
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

#include "backend_fixture.h"
#include "fixture_tensors.h"
#include "nn/optimizer.h"
#include "ssl_methods/distillation_loss.h"
#include "ssl_methods/distillation_teacher.h"
#include "train/train_state.h"
#include "vit_fixture.h"

#define FIXTURE "tests/fixtures/distillation.safetensors"
// The tolerance: |ours - PyTorch's float64| <= ATOL + RTOL |PyTorch's|.
#define ATOL 1e-5
#define RTOL 1e-5
#define NORMALIZE_EPS 1e-12f  // F.normalize's, as the methods use

static SafeTensors fixture;
static double worst_abs, worst_ratio;  // over the group, reported at its end

static int load_fixture(void) {
    ErrorMessage err = {{0}};
    worst_abs = worst_ratio = 0;
    if (safetensors_read(FIXTURE, &fixture, &err)) {
        fprintf(stderr, "%s\n", err.text);
        return -1;
    }
    return 0;
}

static int group_ref(void **state) {
    return fixture_backend_create_ref(state) ? -1 : load_fixture();
}

static int group_cpu(void **state) {
    return fixture_backend_create_cpu(state) ? -1 : load_fixture();
}

static int group_end(void **state) {
    fprintf(stderr, "  %s: largest |diff| to PyTorch's float64 %.3g, largest |diff| / (atol + "
            "rtol |value|) %.3g\n", fixture_backend->name, worst_abs, worst_ratio);
    safetensors_free(&fixture);
    return fixture_backend_destroy(state);
}

// The F32 input prefix/key (n values) in a new backend tensor.
static float *input(const char *prefix, const char *key, size_t n) {
    char name[192];
    snprintf(name, sizeof name, "%s/%s", prefix, key);
    float *x = fixture_tensor(n);
    fixture_backend->op.upload(
        fixture_backend, x,
        safetensors_data(&fixture, fixture_find_tensor(&fixture, name, SAFE_F32, (int64_t)n)),
        n * sizeof(float));
    return x;
}

static float input_scalar(const char *prefix, const char *key) {
    char name[192];
    snprintf(name, sizeof name, "%s/%s", prefix, key);
    return fixture_read_f32(&fixture, name);
}

// ours (n values, backend memory) against the F64 reference prefix/key.
static void expect_reference(const char *prefix, const char *key, size_t n, const float *ours) {
    char name[192];
    snprintf(name, sizeof name, "%s/%s", prefix, key);
    const SafeTensor *tensor = fixture_find_tensor(&fixture, name, SAFE_F64, (int64_t)n);
    double *truth = malloc(n * sizeof *truth);  // no alignment promise per tensor
    float *host = malloc(n * sizeof *host);
    assert_true(truth && host);
    memcpy(truth, safetensors_data(&fixture, tensor), n * sizeof *truth);
    fixture_backend->op.download(fixture_backend, host, ours, n * sizeof *host);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const double diff = fabs((double)host[i] - truth[i]);
        const double allowed = ATOL + RTOL * fabs(truth[i]);
        worst_abs = fmax(worst_abs, diff);
        worst_ratio = fmax(worst_ratio, diff / allowed);
        if (!(diff <= allowed) && bad++ < 4)
            fprintf(stderr, "%s %s[%zu]: ours %.9g, PyTorch %.9g\n", fixture_backend->name, name,
                    i, (double)host[i], truth[i]);
    }
    free(truth);
    free(host);
    assert_int_equal(bad, 0);
}

static void expect_reference_value(const char *prefix, const char *key, float value) {
    float *device = fixture_tensor(1);
    fixture_backend->op.upload(fixture_backend, device, &value, sizeof value);
    expect_reference(prefix, key, 1, device);
}

// Calls run(prefix) for every case whose tensor "<kind>/<case>/<probe>"
// exists; returns how many.
static int each_case(const char *kind, const char *probe, void (*run)(const char *prefix)) {
    int cases = 0;
    const size_t kind_length = strlen(kind), probe_length = strlen(probe);
    for (int t = 0; t < fixture.count; t++) {
        const char *name = fixture.tensors[t].name;
        const size_t length = strlen(name);
        if (strncmp(name, kind, kind_length) != 0 || name[kind_length] != '/' ||
            length <= kind_length + probe_length + 1 ||
            strcmp(name + length - probe_length, probe) != 0 ||
            name[length - probe_length - 1] != '/')
            continue;
        char prefix[160];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(length - probe_length - 1), name);
        run(prefix);
        fixture_tensors_free(NULL);
        cases++;
    }
    return cases;
}

// ---- the queue and the three losses -----------------------------------------------------

// A queue holding prefix/`key` (size x dim) as the queue before a batch.
static void queue_from_fixture(DistillQueue *queue, int size, int dim, const char *prefix,
                               const char *key) {
    ErrorMessage err = {{0}};
    if (distill_queue_create(queue, fixture_backend, size, dim, &err)) fail_msg("%s", err.text);
    const float *before = input(prefix, key, (size_t)size * dim);
    fixture_backend->op.copy(fixture_backend, queue->values, before,
                             (size_t)size * dim * sizeof(float));
}

static void run_queue_case(const char *prefix) {
    int b, q, d;
    assert_int_equal(sscanf(prefix, "queue/b%d_q%d_d%d", &b, &q, &d), 3);
    DistillQueue queue;
    queue_from_fixture(&queue, q, d, prefix, "before");
    const float *teacher = input(prefix, "teacher", (size_t)b * d);
    distill_queue_update(&queue, 7, b, teacher);
    expect_reference(prefix, "after", (size_t)q * d, queue.values);
    // The same batch again (a repeated step, as a finite-difference check
    // makes): still one update, not two.
    distill_queue_update(&queue, 7, b, teacher);
    expect_reference(prefix, "after", (size_t)q * d, queue.values);
    distill_queue_free(&queue);
}

static void test_queue_update(void **state) {
    assert_int_equal(each_case("queue", "after", run_queue_case), 3);
}

static DistillQueueLoss *queue_loss(int batch, int dim, int queue_size, float temperature) {
    ErrorMessage err = {{0}};
    // capacity above the batch: the loss must not depend on it
    DistillQueueLoss *loss = distill_queue_loss_create(fixture_backend, batch + 2, dim,
                                                       queue_size, temperature, &err);
    if (!loss) fail_msg("%s", err.text);
    return loss;
}

static DistillLocalLoss *local_loss(int batch, int tokens, int dim, float temperature) {
    ErrorMessage err = {{0}};
    DistillLocalLoss *loss = distill_local_loss_create(fixture_backend, batch + 1, tokens, dim,
                                                       temperature, &err);
    if (!loss) fail_msg("%s", err.text);
    return loss;
}

static void run_v1_case(const char *prefix) {
    int b, d, q;
    assert_int_equal(sscanf(prefix, "v1/b%d_d%d_q%d", &b, &d, &q), 3);
    DistillQueueLoss *loss = queue_loss(b, d, q, input_scalar(prefix, "temperature"));
    float value = NAN;  // backend memory: host memory on ref and cpu
    distill_queue_loss_forward(loss, b, input(prefix, "teacher", b * d),
                               input(prefix, "student", b * d), input(prefix, "queue", q * d),
                               &value);
    float *grad = fixture_tensor((size_t)b * d);
    distill_queue_loss_backward(loss, 1.0f, grad);
    expect_reference_value(prefix, "loss", value);
    expect_reference(prefix, "grad_student", (size_t)b * d, grad);
    distill_queue_loss_destroy(loss);
}

static void test_v1_loss(void **state) {
    assert_int_equal(each_case("v1", "loss", run_v1_case), 3);
}

static void run_v3_case(const char *prefix) {
    int b, p, d, q;
    assert_int_equal(sscanf(prefix, "v3/b%d_p%d_d%d_q%d", &b, &p, &d, &q), 4);
    const float *temperatures = input(prefix, "temperatures", 2);
    DistillQueueLoss *global = queue_loss(b, d, q, temperatures[0]);
    DistillLocalLoss *local = local_loss(b, p, d, temperatures[1]);
    float global_value = NAN;  // backend memory: host memory on ref and cpu
    distill_queue_loss_forward(global, b, input(prefix, "teacher_global", b * d),
                               input(prefix, "student_global", b * d),
                               input(prefix, "queue", q * d), &global_value);
    float local_value = NAN;  // backend memory: host memory on ref and cpu
    distill_local_loss_forward(local, b, input(prefix, "teacher_local", b * p * d),
                               input(prefix, "student_local", b * p * d), &local_value);
    float *grad_global = fixture_tensor((size_t)b * d), *grad_local = fixture_tensor((size_t)b * p * d);
    distill_queue_loss_backward(global, 1.0f, grad_global);
    distill_local_loss_backward(local, 1.0f, grad_local);
    expect_reference_value(prefix, "global_loss", global_value);
    expect_reference_value(prefix, "local_loss", local_value);
    expect_reference(prefix, "grad_global", (size_t)b * d, grad_global);
    expect_reference(prefix, "grad_local", (size_t)b * p * d, grad_local);
    distill_queue_loss_destroy(global);
    distill_local_loss_destroy(local);
}

static void test_v3_loss(void **state) {
    assert_int_equal(each_case("v3", "global_loss", run_v3_case), 3);
}

static DistillMseLoss *mse_loss(size_t n) {
    ErrorMessage err = {{0}};
    DistillMseLoss *loss = distill_mse_loss_create(fixture_backend, n + 5, &err);
    if (!loss) fail_msg("%s", err.text);
    return loss;
}

static void run_v2_case(const char *prefix) {
    int b, p, d;
    assert_int_equal(sscanf(prefix, "v2/b%d_p%d_d%d", &b, &p, &d), 3);
    const size_t n = (size_t)b * p * d;
    DistillMseLoss *loss = mse_loss(n);
    float value = NAN;  // backend memory: host memory on ref and cpu
    distill_mse_loss_forward(loss, n, input(prefix, "teacher", n), input(prefix, "student", n),
                             &value);
    float *grad = fixture_tensor(n);
    distill_mse_loss_backward(loss, 1.0f, grad);
    expect_reference_value(prefix, "loss", value);
    expect_reference(prefix, "grad_student", n, grad);
    distill_mse_loss_destroy(loss);
}

static void test_v2_loss(void **state) {
    assert_int_equal(each_case("v2", "loss", run_v2_case), 2);
}

// ---- the student's side of each method ------------------------------------------------------

static void projection(DistillProjection *out, const HeadSpec *spec, int batch, int in_h,
                       int in_w, int out_h, int out_w, int normalize) {
    ErrorMessage err = {{0}};
    if (distill_projection_create(out, fixture_backend, spec, "head", batch, in_h, in_w, out_h,
                                  out_w, normalize, 5, &err))
        fail_msg("%s", err.text);
    parameter_set_zero_grads(&out->head.params);
}

// The head's parameter `param` set to the fixture's prefix/key.
static void set_parameter(DistillProjection *head, const char *param, const char *prefix,
                          const char *key) {
    const Parameter *p = parameter_find(&head->head.params, param);
    assert_non_null(p);
    fixture_backend->op.copy(fixture_backend, p->value, input(prefix, key, p->count),
                             p->count * sizeof(float));
}

static void expect_parameter_grad(DistillProjection *head, const char *param, const char *prefix,
                                  const char *key) {
    const Parameter *p = parameter_find(&head->head.params, param);
    assert_non_null(p);
    expect_reference(prefix, key, p->count, p->grad);
}

// The teacher's features L2-normalised as distill_teacher_normalized does.
static float *normalized_input(const char *prefix, const char *key, int rows, int dim) {
    float *y = fixture_tensor((size_t)rows * dim), *norms = fixture_tensor((size_t)rows);
    fixture_backend->op.l2_normalize_forward(fixture_backend, rows, dim,
                                             input(prefix, key, (size_t)rows * dim),
                                             NORMALIZE_EPS, y, norms);
    return y;
}

// distillationv1's step after the backbones (distillation_v1.c).
static void run_pipe_v1_case(const char *prefix) {
    int b, c, d, q;
    assert_int_equal(sscanf(prefix, "pipe_v1/b%d_c%d_d%d_q%d", &b, &c, &d, &q), 4);
    ErrorMessage err = {{0}};
    DistillProjection head;
    const HeadSpec spec = head_spec_distillation(c, d);
    projection(&head, &spec, b, 0, 0, 0, 0, 1);
    set_parameter(&head, "layers.0.weight", prefix, "head.weight");
    set_parameter(&head, "layers.0.bias", prefix, "head.bias");
    const float *teacher = normalized_input(prefix, "teacher", b, d);
    DistillQueue queue;
    queue_from_fixture(&queue, q, d, prefix, "queue_before");
    const float *features = input(prefix, "features", (size_t)b * c);
    const float *student = distill_projection_forward(&head, b, (const Act *)features, &err);
    if (!student) fail_msg("%s", err.text);
    distill_queue_update(&queue, 1, b, teacher);
    DistillQueueLoss *loss = queue_loss(b, d, q, input_scalar(prefix, "temperature"));
    float value = NAN;  // backend memory: host memory on ref and cpu
    distill_queue_loss_forward(loss, b, teacher, student, queue.values, &value);
    float *dstudent = fixture_tensor((size_t)b * d), *dfeatures = fixture_tensor((size_t)b * c);
    distill_queue_loss_backward(loss, 1.0f, dstudent);
    if (distill_projection_backward(&head, dstudent, (Act *)dfeatures, &err))
        fail_msg("%s", err.text);
    expect_reference(prefix, "queue_after", (size_t)q * d, queue.values);
    expect_reference_value(prefix, "loss", value);
    expect_reference(prefix, "grad_features", (size_t)b * c, dfeatures);
    expect_parameter_grad(&head, "layers.0.weight", prefix, "grad_head.weight");
    expect_parameter_grad(&head, "layers.0.bias", prefix, "grad_head.bias");
    distill_queue_loss_destroy(loss);
    distill_queue_free(&queue);
    distill_projection_free(&head);
}

static void test_distillation_v1_step(void **state) {
    assert_int_equal(each_case("pipe_v1", "loss", run_pipe_v1_case), 2);
}

// distillation's (v3) step after the backbones (distillation.c): a
// student map of h x w resized to the teacher's th x tw grid.
static void run_pipe_v3_case(const char *prefix) {
    int b, c, h, w, d, th, tw, q;
    assert_int_equal(sscanf(prefix, "pipe_v3/b%d_c%d_%dx%d_d%d_%dx%d_q%d", &b, &c, &h, &w, &d,
                            &th, &tw, &q),
                     8);
    ErrorMessage err = {{0}};
    const float *config = input(prefix, "config", 5);  // th, tw, t global, t local, local weight
    assert_true(config[0] == th && config[1] == tw);
    const int tokens = th * tw;
    const HeadSpec spec = head_spec_distillation(c, d);
    DistillProjection global, local;
    projection(&global, &spec, b, 0, 0, 0, 0, 1);
    projection(&local, &spec, b, h, w, th, tw, 1);
    const char *heads[2] = {"global_head", "local_head"};
    DistillProjection *projections[2] = {&global, &local};
    char key[64];
    for (int i = 0; i < 2; i++) {
        snprintf(key, sizeof key, "%s.weight", heads[i]);
        set_parameter(projections[i], "layers.0.weight", prefix, key);
        snprintf(key, sizeof key, "%s.bias", heads[i]);
        set_parameter(projections[i], "layers.0.bias", prefix, key);
    }
    const float *teacher_global = normalized_input(prefix, "teacher_global", b, d);
    const float *teacher_local = normalized_input(prefix, "teacher_local", b * tokens, d);
    DistillQueue queue;
    queue_from_fixture(&queue, q, d, prefix, "queue_before");
    const float *student_global = distill_projection_forward(
        &global, b, (const Act *)(input(prefix, "features", (size_t)b * c)), &err);
    const float *student_local = distill_projection_forward(
        &local, b, (const Act *)(input(prefix, "map", (size_t)b * h * w * c)), &err);
    if (!student_global || !student_local) fail_msg("%s", err.text);
    distill_queue_update(&queue, 1, b, teacher_global);
    DistillQueueLoss *global_loss = queue_loss(b, d, q, config[2]);
    DistillLocalLoss *local_loss_ = local_loss(b, tokens, d, config[3]);
    float global_value = NAN;  // backend memory: host memory on ref and cpu
    distill_queue_loss_forward(global_loss, b, teacher_global, student_global, queue.values,
                               &global_value);
    float local_value = NAN;  // backend memory: host memory on ref and cpu
    distill_local_loss_forward(local_loss_, b, teacher_local, student_local, &local_value);
    float *dglobal = fixture_tensor((size_t)b * d), *dlocal = fixture_tensor((size_t)b * tokens * d);
    float *dfeatures = fixture_tensor((size_t)b * c), *dmap = fixture_tensor((size_t)b * h * w * c);
    distill_queue_loss_backward(global_loss, 1.0f, dglobal);
    distill_local_loss_backward(local_loss_, config[4], dlocal);
    if (distill_projection_backward(&global, dglobal, (Act *)dfeatures, &err) ||
        distill_projection_backward(&local, dlocal, (Act *)dmap, &err))
        fail_msg("%s", err.text);
    expect_reference(prefix, "queue_after", (size_t)q * d, queue.values);
    expect_reference_value(prefix, "global_loss", global_value);
    expect_reference_value(prefix, "local_loss", local_value);
    expect_reference_value(prefix, "loss", global_value + config[4] * local_value);
    expect_reference(prefix, "grad_features", (size_t)b * c, dfeatures);
    expect_reference(prefix, "grad_map", (size_t)b * h * w * c, dmap);
    for (int i = 0; i < 2; i++) {
        snprintf(key, sizeof key, "grad_%s.weight", heads[i]);
        expect_parameter_grad(projections[i], "layers.0.weight", prefix, key);
        snprintf(key, sizeof key, "grad_%s.bias", heads[i]);
        expect_parameter_grad(projections[i], "layers.0.bias", prefix, key);
    }
    distill_queue_loss_destroy(global_loss);
    distill_local_loss_destroy(local_loss_);
    distill_queue_free(&queue);
    distill_projection_free(&global);
    distill_projection_free(&local);
}

static void test_distillation_v3_step(void **state) {
    assert_int_equal(each_case("pipe_v3", "loss", run_pipe_v3_case), 2);
}

// distillationv2's step after the backbones (distillation_v2.c): its head
// (one Linear, or Linear-LayerNorm-GELU-Linear), resized, no normalisation.
static void run_pipe_v2_case(const char *prefix) {
    int b, c, h, w, d, th, tw, layers;
    assert_int_equal(sscanf(prefix, "pipe_v2/b%d_c%d_%dx%d_d%d_%dx%d_l%d", &b, &c, &h, &w, &d,
                            &th, &tw, &layers),
                     8);
    ErrorMessage err = {{0}};
    char name[192];
    snprintf(name, sizeof name, "%s/head.layers.0.weight", prefix);
    const SafeTensor *first = safetensors_find(&fixture, name);
    assert_non_null(first);
    const int hidden = (int)first->shape[0];  // d for one layer
    DistillProjection head;
    const HeadSpec spec = head_spec_distillation_v2(c, hidden, d, layers);
    projection(&head, &spec, b, h, w, th, tw, 0);
    // torch's Sequential indices: Linear 0, LayerNorm 1, GELU 2, Linear 3
    const char *params[] = {"layers.0.weight", "layers.0.bias", "layers.1.weight",
                            "layers.1.bias",   "layers.3.weight", "layers.3.bias"};
    const int param_count = layers == 1 ? 2 : 6;
    char key[64];
    for (int i = 0; i < param_count; i++) {
        snprintf(key, sizeof key, "head.%s", params[i]);
        set_parameter(&head, params[i], prefix, key);
    }
    const size_t n = (size_t)b * th * tw * d;
    const float *student = distill_projection_forward(
        &head, b, (const Act *)(input(prefix, "map", (size_t)b * h * w * c)), &err);
    if (!student) fail_msg("%s", err.text);
    DistillMseLoss *loss = mse_loss(n);
    float value = NAN;  // backend memory: host memory on ref and cpu
    distill_mse_loss_forward(loss, n, input(prefix, "teacher", n), student, &value);
    float *dstudent = fixture_tensor(n), *dmap = fixture_tensor((size_t)b * h * w * c);
    distill_mse_loss_backward(loss, 1.0f, dstudent);
    if (distill_projection_backward(&head, dstudent, (Act *)dmap, &err)) fail_msg("%s", err.text);
    expect_reference_value(prefix, "loss", value);
    expect_reference(prefix, "grad_map", (size_t)b * h * w * c, dmap);
    for (int i = 0; i < param_count; i++) {
        snprintf(key, sizeof key, "grad_head.%s", params[i]);
        expect_parameter_grad(&head, params[i], prefix, key);
    }
    distill_mse_loss_destroy(loss);
    distill_projection_free(&head);
}

static void test_distillation_v2_step(void **state) {
    assert_int_equal(each_case("pipe_v2", "loss", run_pipe_v2_case), 2);
}

// ---- the methods on a teacher file (cpu) ------------------------------------------------------

#define IMAGE 48  // the tiny ViTs' 6 x 6 patch grid
#define BATCH 4

static Backend *backend;
static char teacher_path[256];

// A tiny ViT (patch 8, width 32, 2 blocks, 4 registers) saved in timm's
// names, as export writes one.
static int methods_setup(void **state) {
    ErrorMessage err = {{0}};
    backend = backend_create("cpu", 2, &err);
    if (!backend) return -1;
    snprintf(teacher_path, sizeof teacher_path, "/tmp/ltc_test_distillation_%d.safetensors",
             (int)getpid());
    BackboneSpec spec = {.kind = BACKBONE_VIT};
    spec.vit = vit_fixture_config(8, 32, 4, 6, VIT_POS_INTERP_ANTIALIAS);
    const BackboneInput input_shape = {2, IMAGE};
    Backbone teacher;
    if (backbone_create(&teacher, backend, &spec, &input_shape, 1, 17, &err) ||
        backbone_save(&teacher, teacher_path, &err)) {
        fprintf(stderr, "%s\n", err.text);
        return -1;
    }
    backbone_free(&teacher);
    return 0;
}

static int methods_teardown(void **state) {
    unlink(teacher_path);
    backend_destroy(backend);
    return 0;
}

static int make_method(Method *method, MethodKind kind, const char *const *args, int arg_count,
                       ErrorMessage *err) {
    ViewSet views;
    method_default_views(kind, IMAGE, &views);
    MethodSetup setup = {.backend = backend, .batch = BATCH, .dataset_size = 60,
                         .total_steps = 4, .seed = 2, .args = args, .arg_count = arg_count};
    setup.backbone = (BackboneSpec){.kind = BACKBONE_VIT};
    setup.backbone.vit = vit_fixture_config(8, 24, 0, 6, VIT_POS_INTERP_OFFSET);
    return method_create(method, kind, &setup, &views, err);
}

static uint8_t *upload_random_views(Method *method, uint64_t seed) {
    const size_t bytes = (size_t)BATCH * IMAGE * IMAGE * 3;
    uint8_t *pixels = malloc(bytes);
    assert_non_null(pixels);
    for (size_t i = 0; i < bytes; i++) pixels[i] = (uint8_t)((i * 2654435761u + seed) >> 7);
    Batch batch = {.size = BATCH, .view_count = 1, .index = seed};
    batch.views[0] = pixels;
    batch.view_size[0] = IMAGE;
    ErrorMessage err = {{0}};
    assert_int_equal(method_upload_views(method, &batch, &err), 0);
    return pixels;
}

// Three SGD steps of every group: the teacher has no gradients, is none of
// the groups, does not change and refuses a backward (it keeps nothing for
// one).
static void test_teacher_is_frozen(void **state) {
    char teacher_arg[300];
    snprintf(teacher_arg, sizeof teacher_arg, "teacher=%s", teacher_path);
    const char *args[] = {teacher_arg};
    const MethodKind kinds[] = {METHOD_DISTILLATION, METHOD_DISTILLATION_V1,
                                METHOD_DISTILLATION_V2};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        Method method;
        ErrorMessage err = {{0}};
        if (make_method(&method, kinds[k], args, 1, &err)) fail_msg("%s", err.text);
        Backbone *teacher = method.ops->teacher(&method);
        assert_non_null(teacher);
        assert_null(teacher->params->grads);
        const size_t n = teacher->params->total;
        float *before = malloc(n * sizeof *before), *after = malloc(n * sizeof *after);
        assert_true(before && after);
        backend->op.download(backend, before, teacher->params->values, n * sizeof(float));
        OptimizerConfig config = optimizer_config_default(OPTIMIZER_SGD);
        Optimizer *optimizers[METHOD_MAX_GROUPS] = {0};
        for (int g = 0; g < method.group_count; g++) {
            assert_ptr_not_equal(method.groups[g].params, teacher->params);
            optimizers[g] = optimizer_create(backend, method.groups[g].params, &config, &err);
            assert_non_null(optimizers[g]);
        }
        for (int step = 0; step < 3; step++) {
            uint8_t *pixels = upload_random_views(&method, (uint64_t)step);
            for (int g = 0; g < method.group_count; g++)
                parameter_set_zero_grads(method.groups[g].params);
            if (method.ops->step(&method, step, BATCH, &err)) fail_msg("%s", err.text);
            assert_true(isfinite(backend_read_scalar(backend, method_loss(&method))));
            for (int g = 0; g < method.group_count; g++) optimizer_step(optimizers[g], 0.05f, 0, NULL);
            free(pixels);
        }
        backend->op.download(backend, after, teacher->params->values, n * sizeof(float));
        assert_memory_equal(before, after, n * sizeof(float));
        assert_int_equal(backbone_backward(teacher, 0, backbone_features(teacher, 0), &err), -1);
        assert_non_null(strstr(err.text, "keeps nothing for backward"));
        for (int g = 0; g < method.group_count; g++) optimizer_free(optimizers[g]);
        free(before);
        free(after);
        method_free(&method);
    }
}

// The run checkpoint holds the student, the heads and the queue; the
// teacher is read from teacher=PATH again on resume.
static void test_checkpoint_leaves_the_teacher_out(void **state) {
    char teacher_arg[300], path[300];
    snprintf(teacher_arg, sizeof teacher_arg, "teacher=%s", teacher_path);
    snprintf(path, sizeof path, "/tmp/ltc_test_distillation_%d.ckpt", (int)getpid());
    const char *args[] = {teacher_arg};
    Method method;
    ErrorMessage err = {{0}};
    if (make_method(&method, METHOD_DISTILLATION, args, 1, &err)) fail_msg("%s", err.text);
    OptimizerConfig config = optimizer_config_default(OPTIMIZER_ADAMW);
    Optimizer *optimizers[METHOD_MAX_GROUPS] = {0};
    for (int g = 0; g < method.group_count; g++)
        assert_non_null(optimizers[g] = optimizer_create(backend, method.groups[g].params,
                                                          &config, &err));
    uint8_t *pixels = upload_random_views(&method, 3);
    assert_int_equal(method.ops->step(&method, 0, BATCH, &err), 0);
    free(pixels);
    const RunIdentity identity = {.model = "vit", .method = "distillation", .batch_size = BATCH,
                                  .image_size = IMAGE, .total_steps = 4, .dataset_size = 60,
                                  .accumulate = 1, .optimizer = "AdamW", .lr = 1e-3,
                                  .method_args = teacher_arg, .transforms = ""};
    if (train_state_save(path, &method, optimizers, NULL, &identity, 1, 0, NULL, &err))
        fail_msg("%s", err.text);
    Checkpoint checkpoint;
    if (checkpoint_read(path, &checkpoint, &err)) fail_msg("%s", err.text);
    int queue = 0, heads = 0;
    for (int t = 0; t < checkpoint.tensors.count; t++) {
        const char *name = checkpoint.tensors.tensors[t].name;
        if (strstr(name, "teacher_backbone") || strncmp(name, "teacher", 7) == 0)
            fail_msg("the checkpoint holds the teacher: %s", name);
        queue += strcmp(name, "distillation.teacher_queue") == 0;
        heads += strcmp(name, "projection_head_local.layers.0.weight") == 0;
    }
    assert_int_equal(queue, 1);
    assert_int_equal(heads, 1);
    checkpoint_free(&checkpoint);
    unlink(path);
    for (int g = 0; g < method.group_count; g++) optimizer_free(optimizers[g]);
    method_free(&method);
}

// teacher_arch names what the file leaves open; it must agree with what
// the file says (a one-line message with both values); a file that is no
// backbone is refused naming it, a DINOv3 file without blocks saying so.
static void test_teacher_files_are_checked(void **state) {
    char teacher_arg[300];
    snprintf(teacher_arg, sizeof teacher_arg, "teacher=%s", teacher_path);
    const char *wrong_arch[] = {teacher_arg, "teacher_arch=vit_s14"};
    Method method;
    ErrorMessage err = {{0}};
    assert_int_equal(make_method(&method, METHOD_DISTILLATION, wrong_arch, 2, &err), -1);
    assert_non_null(strstr(err.text, "teacher"));
    assert_non_null(strstr(err.text, "vit_s14 does not match the file: width 384, the file's 32"));
    assert_null(strchr(err.text, '\n'));
    const char *resnet_arch[] = {teacher_arg, "teacher_arch=resnet50"};
    assert_int_equal(make_method(&method, METHOD_DISTILLATION, resnet_arch, 2, &err), -1);
    assert_non_null(strstr(err.text, "resnet50 does not match the file"));
    char bad_path[300], bad_arg[320];
    snprintf(bad_path, sizeof bad_path, "/tmp/ltc_test_distillation_bad_%d.safetensors",
             (int)getpid());
    FILE *file = fopen(bad_path, "w");
    assert_non_null(file);
    fputs("not a safetensors file\n", file);
    fclose(file);
    snprintf(bad_arg, sizeof bad_arg, "teacher=%s", bad_path);
    const char *bad[] = {bad_arg};
    assert_int_equal(make_method(&method, METHOD_DISTILLATION_V2, bad, 1, &err), -1);
    assert_non_null(strstr(err.text, bad_path));
    assert_null(strchr(err.text, '\n'));
    // DINOv3's naming (RoPE, no position embeddings) without its blocks.
    const float zeros[8] = {0};
    const SafeTensorWrite dinov3[] = {
        {.name = "cls_token", .dtype = SAFE_F32, .rank = 3, .shape = {1, 1, 8}, .data = zeros},
        {.name = "rope_embed.periods", .dtype = SAFE_F32, .rank = 1, .shape = {2}, .data = zeros},
    };
    if (safetensors_write(bad_path, dinov3, 2, NULL, 0, &err)) fail_msg("%s", err.text);
    assert_int_equal(make_method(&method, METHOD_DISTILLATION, bad, 1, &err), -1);
    assert_non_null(strstr(err.text, "DINOv3 ViT without blocks"));
    assert_null(strchr(err.text, '\n'));
    unlink(bad_path);
    const char *blocks[] = {teacher_arg, "n_teacher_blocks=3"};
    assert_int_equal(make_method(&method, METHOD_DISTILLATION_V2, blocks, 2, &err), -1);
    assert_non_null(strstr(err.text, "n_teacher_blocks=3"));
}

// ---- defaults ---------------------------------------------------------------------------------

// LightlyTrain's queue sizes by dataset size (DistillationArgs.resolve_auto).
static void test_queue_size_follows_dataset_size(void **state) {
    const struct { size_t images; int queue; } table[] = {
        {1, 16},       {49, 16},      {50, 32},       {99, 32},     {100, 64},
        {249, 64},     {250, 128},    {499, 128},     {500, 256},   {999, 256},
        {1000, 512},   {1999, 512},   {2000, 1024},   {3999, 1024}, {4000, 2048},
        {9999, 2048},  {10000, 4096}, {19999, 4096},  {20000, 8192}, {1281167, 8192},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (distill_queue_size_for(table[i].images) != table[i].queue)
            fail_msg("%zu images: queue %d, LightlyTrain's %d", table[i].images,
                     distill_queue_size_for(table[i].images), table[i].queue);
}

// Optimizer, lr (at the reference batch 1536, square-root scaled), weight
// decay and clipping: LightlyTrain's Distillation*Args, with issue 11's
// choice of LARS for a convolutional student of `distillation`.
static void test_optimisation_defaults(void **state) {
    const struct {
        MethodKind kind;
        BackboneKind student;
        OptimizerKind optimizer, other;
        double lr, weight_decay, other_lr, other_weight_decay;
    } table[] = {
        {METHOD_DISTILLATION, BACKBONE_RESNET, OPTIMIZER_LARS, OPTIMIZER_ADAMW, 1.8, 1e-6, 5e-4,
         1e-6},
        {METHOD_DISTILLATION, BACKBONE_VIT, OPTIMIZER_ADAMW, OPTIMIZER_LARS, 5e-4, 0.04, 1.8,
         1e-6},
        {METHOD_DISTILLATION_V1, BACKBONE_VIT, OPTIMIZER_LARS, OPTIMIZER_ADAMW, 1.8, 1e-6, 5e-4,
         0.0},
        {METHOD_DISTILLATION_V2, BACKBONE_RESNET, OPTIMIZER_LARS, OPTIMIZER_LARS, 9.0, 1e-6, 9.0,
         1e-6},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const MethodDefaults d = method_defaults(table[i].kind, table[i].student);
        assert_int_equal(d.optimizer, table[i].optimizer);
        assert_int_equal(d.other_optimizer, table[i].other);
        assert_float_equal(d.base_lr, table[i].lr, 1e-12);
        assert_float_equal(d.weight_decay, table[i].weight_decay, 1e-12);
        assert_float_equal(d.other_lr, table[i].other_lr, 1e-12);
        assert_float_equal(d.other_weight_decay, table[i].other_weight_decay, 1e-12);
        assert_int_equal(d.reference_batch, 1536);
        assert_true(d.sqrt_lr_scaling);
        assert_float_equal(d.grad_clip, 1.0, 0);
        assert_float_equal(method_lr_scale(&d, 384), 0.5, 1e-12);  // sqrt(384 / 1536)
    }
}

int main(void) {
    const struct CMUnitTest fixture_tests[] = {
        cmocka_unit_test_teardown(test_queue_update, fixture_tensors_free),
        cmocka_unit_test_teardown(test_v1_loss, fixture_tensors_free),
        cmocka_unit_test_teardown(test_v3_loss, fixture_tensors_free),
        cmocka_unit_test_teardown(test_v2_loss, fixture_tensors_free),
        cmocka_unit_test_teardown(test_distillation_v1_step, fixture_tensors_free),
        cmocka_unit_test_teardown(test_distillation_v3_step, fixture_tensors_free),
        cmocka_unit_test_teardown(test_distillation_v2_step, fixture_tensors_free),
    };
    const struct CMUnitTest method_tests[] = {
        cmocka_unit_test(test_teacher_is_frozen),
        cmocka_unit_test(test_checkpoint_leaves_the_teacher_out),
        cmocka_unit_test(test_teacher_files_are_checked),
        cmocka_unit_test(test_queue_size_follows_dataset_size),
        cmocka_unit_test(test_optimisation_defaults),
    };
    int failures = cmocka_run_group_tests_name("ref", fixture_tests, group_ref, group_end);
    failures += cmocka_run_group_tests_name("cpu", fixture_tests, group_cpu, group_end);
    return failures +
           cmocka_run_group_tests_name("methods", method_tests, methods_setup, methods_teardown);
}
