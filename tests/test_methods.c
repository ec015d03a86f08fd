// The SSL methods end to end on one fixed batch: for every method and every
// parameter group, the gradient the method's step produces equals the
// directional finite difference of its loss (so forward, loss, head and
// backbone backward and their plumbing agree), and a few optimizer steps on
// that batch lower the loss. Students: resnet18, and a tiny ViT for SimCLR,
// DINO (two input sizes: the local views resample the position grid) and
// distillation, a tiny ConvNeXt (each naming) for SimCLR, BYOL, DINO and
// distillation. Distillation v1, v2 and v3 from a tiny ViT teacher, v3
// from a ResNet teacher too, v3 and v2 from a tiny DINOv3 ConvNeXt
// teacher (the frozen teacher, the queue and the losses
// against PyTorch: tests/test_distillation.c). Also: the EMA teacher
// follows the student, DINO's frozen last layer, --method-arg checks, view
// sizes a ViT cannot take, and a loss scale seeding the backward exactly.
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

#include "nn/convnext_names.h"
#include "ssl_methods/method.h"
#include "train/checkpoint.h"
#include "util/rng.h"

#define BATCH 6
#define IMAGE 24
#define LOCAL_IMAGE 16
// Distillation's views: resnet18's last stage is 2 x 2 there (1 x 1 at
// IMAGE px, where every token of the student's map would be the same and
// v3's local loss would have no gradient), the tiny ViT's grid 6 x 6.
#define DISTILLATION_IMAGE 48
// The finite-difference checks retry with steps FD_SHRINK_FACTOR times
// smaller, up to FD_SHRINKS times, where the first step is off.
#define FD_SHRINKS 2
#define FD_SHRINK_FACTOR 3.0

static Backend *backend;

// The student's architecture for method_make: resnet18 unless a test sets it.
static const BackboneSpec resnet18_spec = {.kind = BACKBONE_RESNET, .resnet_depth = 18};
static BackboneSpec student_spec = {.kind = BACKBONE_RESNET, .resnet_depth = 18};

// A ViT small enough for finite differences: patch 8, width 32, 2 blocks, a
// 3 x 3 position grid (IMAGE px); LayerScale 0.1 so the blocks matter.
static BackboneSpec tiny_vit(void) {
    BackboneSpec spec = {.kind = BACKBONE_VIT};
    spec.vit = (VitConfig){.patch_size = 8, .embed_dim = 32, .depth = 2, .heads = 2,
                           .mlp_hidden = 64, .class_pos = 1, .pos_grid = 3, .layer_scale = 1,
                           .layer_scale_init = 0.1f, .norm_eps = 1e-6f,
                           .pos_interpolation = VIT_POS_INTERP_OFFSET, .pool = VIT_POOL_MEAN};
    vit_config_name(&spec.vit);
    return spec;
}

// A ConvNeXt small enough for finite differences (depths 1-1-2-1, widths
// 8-16-24-32), at CONVNEXT_IMAGE px (its last stage 1 x 1); gamma 0.1 so
// the blocks matter. DINOv3's naming: its features through the final norm.
#define CONVNEXT_IMAGE 32
#define CONVNEXT_DISTILLATION_IMAGE 64  // the last stage 2 x 2
static BackboneSpec tiny_convnext(ConvnextNaming naming) {
    BackboneSpec spec = {.kind = BACKBONE_CONVNEXT};
    spec.convnext = (ConvnextConfig){.depths = {1, 1, 2, 1}, .dims = {8, 16, 24, 32},
                                     .naming = naming, .kernel = 7, .norm_eps = 1e-6f,
                                     .layer_scale_init = 0.1f};
    convnext_config_name(&spec.convnext);
    return spec;
}

static int group_setup(void **state) {
    ErrorMessage err = {{0}};
    backend = backend_create("cpu", 2, &err);
    return backend ? 0 : -1;
}

static int group_teardown(void **state) {
    backend_destroy(backend);
    return 0;
}

// Random uint8 views for the method's view set, and the Batch around them.
typedef struct TestBatch {
    Batch batch;
    uint8_t *pixels[AUGMENT_MAX_VIEWS];
} TestBatch;

static void test_batch_make(TestBatch *test, const ViewSet *views, int batch, uint64_t seed) {
    memset(test, 0, sizeof *test);
    test->batch.size = batch;
    test->batch.view_count = views->count;
    for (int v = 0; v < views->count; v++) {
        const int size = views->views[v].size;
        const size_t bytes = (size_t)batch * size * size * 3;
        test->pixels[v] = malloc(bytes);
        assert_non_null(test->pixels[v]);
        Rng rng = rng_make(seed, 0, (uint64_t)v, 0);
        for (size_t i = 0; i < bytes; i++) test->pixels[v][i] = (uint8_t)rng_below(&rng, 256);
        test->batch.views[v] = test->pixels[v];
        test->batch.view_size[v] = size;
    }
}

static void test_batch_free(TestBatch *test) {
    for (int v = 0; v < AUGMENT_MAX_VIEWS; v++) free(test->pixels[v]);
}

// Small heads so that the tests run in a second or two.
static int is_distillation(MethodKind kind) {
    return kind == METHOD_DISTILLATION || kind == METHOD_DISTILLATION_V1 ||
           kind == METHOD_DISTILLATION_V2;
}

static void method_make_with_views(Method *method, MethodKind kind, const char *teacher_path,
                                   const ViewSet *views);

// The views' sizes for method_make: a ConvNeXt takes 32 px at the least.
static int image = IMAGE, local_image = LOCAL_IMAGE, distillation_image = DISTILLATION_IMAGE;

static void method_make(Method *method, MethodKind kind, const char *teacher_path) {
    ViewSet views;
    if (kind == METHOD_DINO)
        view_set_dino(&views, image, local_image, 2);
    else
        method_default_views(kind, is_distillation(kind) ? distillation_image : image, &views);
    method_make_with_views(method, kind, teacher_path, &views);
}

// One more DINO argument for the next method_make (NULL: none).
static const char *dino_extra_arg;

static void method_make_with_views(Method *method, MethodKind kind, const char *teacher_path,
                                   const ViewSet *views) {
    static const char *small[] = {"hidden_dim=32", "output_dim=16"};
    const char *dino[] = {"hidden_dim=32", "bottleneck_dim=8", "output_dim=24",
                          "freeze_last_layer_steps=2", "warmup_teacher_temp_steps=0",
                          dino_extra_arg};
    char teacher_arg[600];
    const char *distillation[1] = {teacher_arg};
    snprintf(teacher_arg, sizeof teacher_arg, "teacher=%s", teacher_path ? teacher_path : "");
    MethodSetup setup = {
        .backend = backend, .backbone = student_spec, .batch = BATCH, .dataset_size = 100,
        .total_steps = 10, .seed = 3,
    };
    if (kind == METHOD_DINO) {
        setup.args = dino;
        setup.arg_count = dino_extra_arg ? 6 : 5;
    } else if (is_distillation(kind)) {
        setup.args = distillation;
        setup.arg_count = 1;
    } else {
        setup.args = small;
        setup.arg_count = 2;
    }
    ErrorMessage err = {{0}};
    if (method_create(method, kind, &setup, views, &err)) fail_msg("%s", err.text);
}

// One step's loss (written into the method's record, read back here).
static float step_loss(Method *method, long step) {
    ErrorMessage err = {{0}};
    for (int g = 0; g < method->group_count; g++)
        parameter_set_zero_grads(method->groups[g].params);
    if (method->ops->step(method, step, BATCH, &err)) fail_msg("%s", err.text);
    return backend_read_scalar(backend, method_loss(method));
}

static double host_norm(const float *device, size_t n) {
    float *host = malloc(n * sizeof *host);
    assert_non_null(host);
    backend->op.download(backend, host, device, n * sizeof *host);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += (double)host[i] * host[i];
    free(host);
    return sqrt(sum);
}

// The parameter of the group with the largest gradient: its partial
// derivative by central difference must equal the gradient. Unlike the
// directional check below, this also sees a missing gradient path whose
// contribution is orthogonal to the computed gradient (the direction check
// only measures the true gradient's projection on the computed one).
static void check_largest_coordinate(Method *method, MethodKind kind, const MethodGroup *group) {
    ParameterSet *params = group->params;
    float *grads = malloc(params->total * sizeof *grads);
    assert_non_null(grads);
    const float loss0 = step_loss(method, 5);
    backend->op.download(backend, grads, params->grads, params->total * sizeof(float));
    size_t best = 0;
    for (size_t i = 1; i < params->total; i++)
        if (fabsf(grads[i]) > fabsf(grads[best])) best = i;
    const double gradient = grads[best];
    free(grads);
    float value;
    backend->op.download(backend, &value, params->values + best, sizeof value);
    // A step that changes the loss by about 0.03%: one weight of the stem
    // moved further makes the network visibly nonlinear (distillation: 24%
    // off at 0.3%, 9% at 0.1%, within 5% at 0.03% and 0.01%). Where the
    // loss curves more (distillation's local loss through the L2
    // normalisation of a small head output), FD_SHRINKS smaller steps.
    double h = 0.0003 * fmax(1.0, fabs((double)loss0)) / fabs(gradient), numeric = 0;
    for (int attempt = 0; attempt <= FD_SHRINKS; attempt++, h /= FD_SHRINK_FACTOR) {
        float shifted = (float)(value + h);
        backend->op.upload(backend, params->values + best, &shifted, sizeof shifted);
        const float plus = step_loss(method, 5);
        const double step_up = (double)shifted - value;
        shifted = (float)(value - h);
        backend->op.upload(backend, params->values + best, &shifted, sizeof shifted);
        const float minus = step_loss(method, 5);
        const double step_down = value - (double)shifted;
        backend->op.upload(backend, params->values + best, &value, sizeof value);
        numeric = ((double)plus - (double)minus) / (step_up + step_down);
        if (fabs(numeric - gradient) <= 0.05 * fabs(gradient)) return;  // 5%, as below
    }
    fail_msg("%s group %s parameter %zu: gradient %.6g, finite difference %.6g (smallest step "
             "%.3g)", method_kind_name(kind), group->name, best, gradient, numeric,
             h * FD_SHRINK_FACTOR);
}

// For each group: d/dt loss(params + t g/|g|) at t = 0 (central difference)
// must equal |g|, the gradient's norm, when the step's gradient is right.
static void check_directional_gradients(Method *created, MethodKind kind) {
    Method *method = created;
    TestBatch test;
    test_batch_make(&test, &method->views, BATCH, 11);
    ErrorMessage err = {{0}};
    assert_int_equal(method_upload_views(method, &test.batch, &err), 0);
    for (int g = 0; g < method->group_count; g++) {
        ParameterSet *params = method->groups[g].params;
        const float loss0 = step_loss(method, 5);
        const double norm = host_norm(params->grads, params->total);
        assert_true(norm > 0);
        float *direction = backend->op.alloc(backend, params->total * sizeof(float));
        float *saved = backend->op.alloc(backend, params->total * sizeof(float));
        backend->op.copy(backend, direction, params->grads, params->total * sizeof(float));
        backend->op.copy(backend, saved, params->values, params->total * sizeof(float));
        // A step along the unit direction that changes the loss by about
        // 0.3%: small enough for the second-order error (distillation's
        // loss curves most: 12% off at 1%, 4% at 0.3%, 0.5% at 0.1%), large
        // against the float32 rounding of the loss, which BatchNorm over a
        // few rows amplifies (simclr is 5% off at 0.1%, 20% at 0.03%). The
        // second-order error shrinks with the step, a wrong gradient does
        // not: up to FD_SHRINKS smaller steps where the first is off
        // (distillation from a ResNet teacher into a ViT: 9% at 0.3%,
        // within 1% at 0.1%).
        double h = 0.003 * fmax(1.0, fabs((double)loss0)) / norm, numeric = 0;
        int close = 0;
        for (int attempt = 0; attempt <= FD_SHRINKS && !close; attempt++, h /= FD_SHRINK_FACTOR) {
            backend->op.axpby(backend, params->total, (float)(h / norm), direction, 1.0f,
                              params->values);
            const float plus = step_loss(method, 5);
            backend->op.copy(backend, params->values, saved, params->total * sizeof(float));
            backend->op.axpby(backend, params->total, (float)(-h / norm), direction, 1.0f,
                              params->values);
            const float minus = step_loss(method, 5);
            backend->op.copy(backend, params->values, saved, params->total * sizeof(float));
            numeric = ((double)plus - (double)minus) / (2 * h);
            // 5% relative: the two errors above; a wrong or missing
            // gradient path is off by far more (a broken backbone path gave 4x).
            close = fabs(numeric - norm) <= 0.05 * norm;
        }
        if (!close)
            fail_msg("%s group %s: |g| %.6g, finite difference %.6g (smallest step %.3g)",
                     method_kind_name(kind), method->groups[g].name, norm, numeric,
                     h * FD_SHRINK_FACTOR);
        backend->op.free(backend, direction);
        backend->op.free(backend, saved);
        check_largest_coordinate(method, kind, &method->groups[g]);
    }
    test_batch_free(&test);
}

// The SGD learning rate of check_loss_decreases.
static float descent_lr = 0.02f;

// Plain SGD on one fixed batch must lower the loss.
static void check_loss_decreases(Method *created, MethodKind kind) {
    Method *method = created;
    TestBatch test;
    test_batch_make(&test, &method->views, BATCH, 12);
    ErrorMessage err = {{0}};
    assert_int_equal(method_upload_views(method, &test.batch, &err), 0);
    OptimizerConfig config = optimizer_config_default(OPTIMIZER_SGD);
    Optimizer *optimizers[METHOD_MAX_GROUPS] = {0};
    for (int g = 0; g < method->group_count; g++) {
        optimizers[g] = optimizer_create(backend, method->groups[g].params, &config, &err);
        assert_non_null(optimizers[g]);
        assert_int_equal(method_group_configure(&method->groups[g], optimizers[g], &err), 0);
    }
    float first = 0, last = 0;
    for (long step = 0; step < 6; step++) {
        last = step_loss(method, step);
        if (step == 0) first = last;
        for (int g = 0; g < method->group_count; g++)
            if (method_group_active(&method->groups[g], step))
                optimizer_step(optimizers[g],
                               descent_lr * method_group_lr_factor(&method->groups[g], step), 0,
                               NULL);
        if (method->ops->after_update) method->ops->after_update(method, step);
    }
    // A clear drop, not noise: the same batch every step.
    if (!(last < first - 0.02f * fabsf(first)))
        fail_msg("%s: loss %.5f -> %.5f after 6 steps", method_kind_name(kind), first, last);
    for (int g = 0; g < method->group_count; g++) optimizer_free(optimizers[g]);
    test_batch_free(&test);
}

// With a loss scale (16-mixed's loss scaler) the backward starts from the
// scaled loss gradient: every parameter gradient is the unscaled one times
// the scale, exactly for a power of two, and the loss itself is unscaled.
static void check_loss_scale_seeds_backward(Method *method, MethodKind kind) {
    TestBatch test;
    test_batch_make(&test, &method->views, BATCH, 13);
    ErrorMessage err = {{0}};
    assert_int_equal(method_upload_views(method, &test.batch, &err), 0);
    float *scale = backend->op.alloc(backend, sizeof(float));
    backend->op.fill(backend, scale, 1024.0f, 1);
    float *unscaled[METHOD_MAX_GROUPS];
    const float loss = step_loss(method, 3);
    for (int g = 0; g < method->group_count; g++) {
        const ParameterSet *params = method->groups[g].params;
        unscaled[g] = malloc(params->total * sizeof(float));
        assert_non_null(unscaled[g]);
        backend->op.download(backend, unscaled[g], params->grads, params->total * sizeof(float));
    }
    method->loss_scale = scale;
    assert_true(step_loss(method, 3) == loss);
    method->loss_scale = NULL;
    for (int g = 0; g < method->group_count; g++) {
        const ParameterSet *params = method->groups[g].params;
        float *scaled = malloc(params->total * sizeof(float));
        assert_non_null(scaled);
        backend->op.download(backend, scaled, params->grads, params->total * sizeof(float));
        for (size_t i = 0; i < params->total; i++)
            if (scaled[i] != 1024.0f * unscaled[g][i])
                fail_msg("%s group %s [%zu]: %g with scale 1024, %g without",
                         method_kind_name(kind), method->groups[g].name, i, scaled[i],
                         unscaled[g][i]);
        free(scaled);
        free(unscaled[g]);
    }
    backend->op.free(backend, scale);
    test_batch_free(&test);
}

// The checks on one method (building a method costs more than the checks).
static void check_method(MethodKind kind, const char *teacher_path) {
    Method method;
    method_make(&method, kind, teacher_path);
    check_directional_gradients(&method, kind);
    check_loss_scale_seeds_backward(&method, kind);
    check_loss_decreases(&method, kind);
    method_free(&method);
}

// Teacher files for distillation: a resnet18 and the tiny ViT, saved with
// other seeds (the ViT in timm names, as export writes it).
static char teacher_file[256], vit_teacher_file[256];
static void make_teacher_file(void) {
    if (teacher_file[0]) return;
    snprintf(teacher_file, sizeof teacher_file, "/tmp/ltc_test_methods_teacher_%d.safetensors",
             (int)getpid());
    Resnet teacher;
    ErrorMessage err = {{0}};
    ResnetConfig config = resnet_config_default(18);
    const ResnetInputShape input = {2, IMAGE};
    assert_int_equal(resnet_create(&teacher, backend, &config, &input, 1, 99, &err), 0);
    assert_int_equal(resnet_save(&teacher, teacher_file, NULL, &err), 0);
    resnet_free(&teacher);
}

static void make_vit_teacher_file(void) {
    if (vit_teacher_file[0]) return;
    snprintf(vit_teacher_file, sizeof vit_teacher_file,
             "/tmp/ltc_test_methods_vit_teacher_%d.safetensors", (int)getpid());
    Backbone teacher;
    ErrorMessage err = {{0}};
    const BackboneSpec spec = tiny_vit();
    const BackboneInput input = {2, IMAGE};
    assert_int_equal(backbone_create(&teacher, backend, &spec, &input, 1, 98, &err), 0);
    assert_int_equal(backbone_save(&teacher, vit_teacher_file, &err), 0);
    backbone_free(&teacher);
}

static void test_simclr(void **state) { check_method(METHOD_SIMCLR, NULL); }
static void test_byol(void **state) { check_method(METHOD_BYOL, NULL); }
static void test_dino(void **state) { check_method(METHOD_DINO, NULL); }
// norm_last_layer=false (LightlyTrain's DINO option): the last layer's
// weight_g is a trained parameter of the last_layer group, its gradient
// checked with the others; by default it does not exist (fixed at 1).
static void test_dino_trained_weight_g(void **state) {
    Method method;
    method_make(&method, METHOD_DINO, NULL);
    const ParameterSet *fixed = method.groups[method.group_count - 1].params;
    assert_null(parameter_find(fixed, "projection_head.last_layer.weight_g"));
    assert_null(parameter_find(fixed, "last_layer.weight_g"));
    method_free(&method);
    dino_extra_arg = "norm_last_layer=false";
    method_make(&method, METHOD_DINO, NULL);
    dino_extra_arg = NULL;
    const ParameterSet *last = method.groups[method.group_count - 1].params;
    assert_string_equal(method.groups[method.group_count - 1].name, "last_layer");
    assert_int_equal(last->count, 2);
    check_directional_gradients(&method, METHOD_DINO);
    check_loss_decreases(&method, METHOD_DINO);
    method_free(&method);
}
static void test_vicreg(void **state) { check_method(METHOD_VICREG, NULL); }
static void test_barlow_twins(void **state) { check_method(METHOD_BARLOW_TWINS, NULL); }
// LightlyTrain's default: distillation v3 from a ViT teacher, into a
// resnet18 (its 1 x 1 last stage resized to the 3 x 3 patch grid) and into
// a ViT (its patch tokens as the map).
static void test_distillation(void **state) {
    make_vit_teacher_file();
    check_method(METHOD_DISTILLATION, vit_teacher_file);
}

static void test_distillation_vit_student(void **state) {
    make_vit_teacher_file();
    student_spec = tiny_vit();
    check_method(METHOD_DISTILLATION, vit_teacher_file);
    student_spec = resnet18_spec;
}

// v1's loss sees pooled features only: the (cheaper) ViT student.
static void test_distillation_v1(void **state) {
    make_vit_teacher_file();
    student_spec = tiny_vit();
    check_method(METHOD_DISTILLATION_V1, vit_teacher_file);
    student_spec = resnet18_spec;
}

// The teacher's last two blocks through its final norm, side by side.
static void test_distillation_v2(void **state) {
    make_vit_teacher_file();
    check_method(METHOD_DISTILLATION_V2, vit_teacher_file);
}

// A ViT student: SimCLR (one size) and DINO (16 px local views: a 2 x 2 grid
// resampled from the 3 x 3 position grid).
static void test_simclr_vit(void **state) {
    student_spec = tiny_vit();
    check_method(METHOD_SIMCLR, NULL);
    student_spec = resnet18_spec;
}

static void test_dino_vit(void **state) {
    student_spec = tiny_vit();
    check_method(METHOD_DINO, NULL);
    student_spec = resnet18_spec;
}

// A ResNet teacher (the earlier ResNet-teacher path, now a teacher kind):
// pooled features as the global, its 2 x 2 last stage as the local
// features (the ViT student's 6 x 6 map resized down to it).
static void test_distillation_resnet_teacher(void **state) {
    make_teacher_file();
    student_spec = tiny_vit();
    check_method(METHOD_DISTILLATION, teacher_file);
    student_spec = resnet18_spec;
}

// ---- ConvNeXt students and DINOv3 ConvNeXt teachers ---------------------------------------

// The tiny ConvNeXt as the student of the next method_make, at its sizes;
// naming < 0 puts resnet18 back.
static void convnext_student(int naming) {
    student_spec = naming < 0 ? resnet18_spec : tiny_convnext((ConvnextNaming)naming);
    image = naming < 0 ? IMAGE : CONVNEXT_IMAGE;
    local_image = naming < 0 ? LOCAL_IMAGE : CONVNEXT_IMAGE;
    distillation_image = naming < 0 ? DISTILLATION_IMAGE : CONVNEXT_DISTILLATION_IMAGE;
}

// A tiny DINOv3 ConvNeXt teacher, saved in DINOv3's names as export writes one.
static char convnext_teacher_file[256];
static void make_convnext_teacher_file(void) {
    if (convnext_teacher_file[0]) return;
    snprintf(convnext_teacher_file, sizeof convnext_teacher_file,
             "/tmp/ltc_test_methods_convnext_teacher_%d.safetensors", (int)getpid());
    Backbone teacher;
    ErrorMessage err = {{0}};
    const BackboneSpec spec = tiny_convnext(CONVNEXT_DINOV3);
    const BackboneInput input = {2, CONVNEXT_IMAGE};
    assert_int_equal(backbone_create(&teacher, backend, &spec, &input, 1, 97, &err), 0);
    assert_int_equal(backbone_save(&teacher, convnext_teacher_file, &err), 0);
    backbone_free(&teacher);
}

// SimCLR, BYOL and DINO (EMA teachers: frozen ConvNeXts) with ConvNeXt
// students in each naming (DINOv3's: the features through its final norm).
static void test_simclr_convnext(void **state) {
    convnext_student(CONVNEXT_TORCHVISION);
    check_method(METHOD_SIMCLR, NULL);
    convnext_student(-1);
}

static void test_byol_convnext(void **state) {
    convnext_student(CONVNEXT_DINOV3);
    check_method(METHOD_BYOL, NULL);
    convnext_student(-1);
}

static void test_dino_convnext(void **state) {
    convnext_student(CONVNEXT_TIMM);
    check_method(METHOD_DINO, NULL);
    convnext_student(-1);
}

// Distillation (v3) from a DINOv3 ConvNeXt teacher into a ConvNeXt student
// (both maps 2 x 2 at 64 px); v2 from the same teacher's last two stages
// (its default n_teacher_blocks) side by side.
static void test_distillation_convnext(void **state) {
    make_convnext_teacher_file();
    convnext_student(CONVNEXT_TORCHVISION);
    check_method(METHOD_DISTILLATION, convnext_teacher_file);
    descent_lr = 0.1f;  // v2's MSE falls slowly here: 1.3% in 6 steps at 0.02
    check_method(METHOD_DISTILLATION_V2, convnext_teacher_file);
    descent_lr = 0.02f;
    convnext_student(-1);
}

// View sizes that are not multiples of a ViT's patch size are refused,
// naming the size and a fitting one.
static void test_vit_view_sizes_are_checked(void **state) {
    ViewSet views;
    view_set_dino(&views, IMAGE, 20, 2);  // 20 px local views, patch 8
    const char *small[] = {"hidden_dim=32", "bottleneck_dim=8", "output_dim=24"};
    MethodSetup setup = {.backend = backend, .backbone = tiny_vit(), .batch = 4,
                         .dataset_size = 10, .total_steps = 1, .args = small, .arg_count = 3};
    Method method;
    ErrorMessage err = {{0}};
    assert_int_equal(method_create(&method, METHOD_DINO, &setup, &views, &err), -1);
    assert_non_null(strstr(err.text, "local views of 20 px"));
    assert_non_null(strstr(err.text, "patch size 8 (e.g. 24 px)"));
}

// The teacher starts as a copy of the student and moves towards it by
// (1 - momentum) of the difference after each update.
// Local views larger than the global ones (DINO at a small global size
// keeps its 96 px local crops): each view is normalised into its place
// (under make asan this also checks the upload staging buffer is large
// enough for the largest view).
static void test_dino_local_views_larger_than_global(void **state) {
    ViewSet views;
    view_set_dino(&views, LOCAL_IMAGE, IMAGE, 2);
    Method method;
    method_make_with_views(&method, METHOD_DINO, NULL, &views);
    TestBatch test;
    test_batch_make(&test, &method.views, BATCH, 13);
    ErrorMessage err = {{0}};
    assert_int_equal(method_upload_views(&method, &test.batch, &err), 0);
    const size_t local_floats = (size_t)2 * BATCH * IMAGE * IMAGE * 3;
    float *local = malloc(local_floats * sizeof *local);
    assert_non_null(local);
    backend->op.download(backend, local, method.local_input, local_floats * sizeof *local);
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    const size_t per_view = (size_t)BATCH * IMAGE * IMAGE * 3;
    for (int v = 0; v < 2; v++)
        for (size_t i = 0; i < per_view; i += 211) {
            const float pixel = test.pixels[2 + v][i] / 255.0f;
            const float expected = (pixel - mean[i % 3]) / std[i % 3];
            assert_float_equal(local[v * per_view + i], expected, 1e-5f);
        }
    free(local);
    test_batch_free(&test);
    method_free(&method);
}

static void test_ema_teacher_follows_student(void **state) {
    Method method;
    method_make(&method, METHOD_BYOL, NULL);
    Backbone *teacher = method.ops->teacher(&method);
    assert_non_null(teacher);
    const size_t n = method.backbone.params->total;
    float *student = malloc(n * sizeof *student), *before = malloc(n * sizeof *before);
    float *after = malloc(n * sizeof *after);
    backend->op.download(backend, student, method.backbone.params->values, n * sizeof(float));
    backend->op.download(backend, before, teacher->params->values, n * sizeof(float));
    assert_memory_equal(student, before, n * sizeof(float));
    // move the student, then one EMA update with the momentum of step 1
    backend->op.fill(backend, method.backbone.params->values, 0.5f, n);
    method.ops->after_update(&method, 0);
    backend->op.download(backend, after, teacher->params->values, n * sizeof(float));
    const float momentum = backend_read_scalar(backend, method_scalar(&method, 0));
    assert_true(momentum > 0.98f && momentum < 1.0f);  // cosine 0.99 -> 1 over 10 steps
    for (size_t i = 0; i < n; i += 997) {
        const float expected = momentum * before[i] + (1 - momentum) * 0.5f;
        assert_float_equal(after[i], expected, 1e-6f + 1e-6f * fabsf(expected));
    }
    free(student);
    free(before);
    free(after);
    method_free(&method);
}

// The EMA teacher never runs a backward, so it keeps only the frozen
// layout (block outputs in turn), not every activation as the student's
// slot of the same shape does; its backward is refused. BYOL and DINO on
// ResNet-18, DINO on the tiny ViT. Its training forward is the trainable
// model's (test_byol and test_dino compare the steps with PyTorch;
// tests/test_vit_frozen.c a frozen ViT's training forward with a trainable
// one's).
static void test_ema_teacher_keeps_nothing_for_backward(void **state) {
    const MethodKind kinds[3] = {METHOD_BYOL, METHOD_DINO, METHOD_DINO};
    for (int k = 0; k < 3; k++) {
        if (k == 2) student_spec = tiny_vit();
        Method method;
        method_make(&method, kinds[k], NULL);
        Backbone *teacher = method.ops->teacher(&method);
        const int vit = teacher->spec.kind == BACKBONE_VIT;
        assert_int_equal(vit, k == 2);
        const size_t kept = vit ? teacher->model.vit.slots[0].arena_bytes
                                : teacher->model.resnet.slots[0].arena_bytes;
        const size_t student = vit ? method.backbone.model.vit.slots[0].arena_bytes
                                   : method.backbone.model.resnet.slots[0].arena_bytes;
        assert_int_equal(vit ? teacher->model.vit.slots[0].max.batch
                             : teacher->model.resnet.slots[0].max.batch,
                         vit ? method.backbone.model.vit.slots[0].max.batch
                             : method.backbone.model.resnet.slots[0].max.batch);
        // (at these 24 px the ResNet's stem, kept by both, is much of either)
        assert_true(kept < student);
        ErrorMessage err = {0};
        const Act *features = backbone_features(teacher, 0);
        assert_int_equal(backbone_backward(teacher, 0, features, &err), -1);
        assert_non_null(strstr(err.text, "keeps nothing for backward"));
        method_free(&method);
        student_spec = resnet18_spec;
    }
}

static void test_dino_last_layer_group_is_frozen_at_first(void **state) {
    Method method;
    method_make(&method, METHOD_DINO, NULL);
    assert_string_equal(method.export_part, "teacher_backbone");
    int found = 0;
    for (int g = 0; g < method.group_count; g++)
        if (strcmp(method.groups[g].name, "last_layer") == 0) {
            assert_int_equal(method.groups[g].frozen_steps, 2);
            found = 1;
        }
    assert_true(found);
    method_free(&method);
}

static void test_method_args_are_checked(void **state) {
    ViewSet views;
    method_default_views(METHOD_SIMCLR, IMAGE, &views);
    const char *bad[] = {"temprature=0.2"};
    MethodSetup setup = {.backend = backend, .backbone = resnet18_spec, .batch = 4,
                         .dataset_size = 10, .total_steps = 1, .args = bad, .arg_count = 1};
    Method method;
    ErrorMessage err = {{0}};
    assert_int_equal(method_create(&method, METHOD_SIMCLR, &setup, &views, &err), -1);
    assert_non_null(strstr(err.text, "unknown key 'temprature'"));
    const char *not_number[] = {"temperature=warm"};
    setup.args = not_number;
    assert_int_equal(method_create(&method, METHOD_SIMCLR, &setup, &views, &err), -1);
    assert_non_null(strstr(err.text, "temperature=warm: expected a number in [0.001, 100]"));
    const char *negative[] = {"temperature=-1"};  // was trained with before issue 22
    setup.args = negative;
    assert_int_equal(method_create(&method, METHOD_SIMCLR, &setup, &views, &err), -1);
    assert_string_equal(err.text, "simclr: --method-arg temperature=-1: expected a number in "
                                  "[0.001, 100]");
    // an integer beyond long long's range: refused by the range, not cast (UBSan)
    const char *huge[] = {"hidden_dim=1e300"};
    setup.args = huge;
    assert_int_equal(method_create(&method, METHOD_SIMCLR, &setup, &views, &err), -1);
    assert_non_null(strstr(err.text, "--method-arg hidden_dim=1e300: expected"));
    const char *twice[] = {"temperature=0.2", "hidden_dim=64", "temperature=0.5"};
    setup.args = twice;
    setup.arg_count = 3;
    assert_int_equal(method_create(&method, METHOD_SIMCLR, &setup, &views, &err), -1);
    assert_string_equal(err.text, "simclr: --method-arg temperature given twice (0.2 and 0.5)");
    setup.arg_count = 0;
    assert_int_equal(method_create(&method, METHOD_DISTILLATION, &setup, &views, &err), -1);
    assert_non_null(strstr(err.text, "teacher=PATH"));
    MethodKind kind;
    assert_int_equal(method_kind_parse("mocov3", &kind, &err), -1);
    assert_non_null(strstr(err.text, "mocov3"));
}

// Every argument of every method: values just outside its range, of the
// wrong kind or not decimal fail naming the argument and its range; its
// bounds pass. Through method_args_check (method_create runs it first, as
// the test above shows), so that no method is built at its largest sizes.
static void check_arg(MethodKind kind, const MethodArgSpec *spec, const char *value, int ok) {
    char entry[160];
    snprintf(entry, sizeof entry, "%s=%s", spec->key, value);
    const char *args[1] = {entry};
    const MethodSetup setup = {.args = args, .arg_count = 1};
    ErrorMessage err = {{0}};
    const int status = method_args_check(&setup, method_arg_specs(kind), &err);
    if (ok && status != 0) fail_msg("%s %s refused: %s", method_kind_name(kind), entry, err.text);
    if (ok) return;
    char range[160], expected[400];
    method_arg_range_text(spec, range, sizeof range);
    snprintf(expected, sizeof expected, "--method-arg %s: expected %s", entry, range);
    if (status == 0 || strcmp(err.text, expected) != 0)
        fail_msg("%s %s: got '%s', expected '%s'", method_kind_name(kind), entry,
                 status ? err.text : "accepted", expected);
}

static void test_method_arg_ranges(void **state) {
    (void)state;
    for (int kind = 0; kind < METHOD_KIND_COUNT; kind++) {
        const MethodArgSpec *specs = method_arg_specs((MethodKind)kind);
        assert_non_null(specs);
        for (const MethodArgSpec *spec = specs; spec->key; spec++) {
            char low[64], high[64], below[64], above[64];
            snprintf(low, sizeof low, "%.17g", spec->low);
            snprintf(high, sizeof high, "%.17g", spec->high);
            snprintf(below, sizeof below, "%.17g", spec->low - (spec->low > 0 ? spec->low / 2 : 1));
            snprintf(above, sizeof above, "%.17g", spec->high * 2 + 1);
            switch (spec->kind) {
            case METHOD_ARG_NUMBER:
                check_arg((MethodKind)kind, spec, low, !spec->low_open);
                check_arg((MethodKind)kind, spec, high, 1);
                check_arg((MethodKind)kind, spec, below, 0);
                check_arg((MethodKind)kind, spec, above, 0);
                check_arg((MethodKind)kind, spec, "nan", 0);
                check_arg((MethodKind)kind, spec, "inf", 0);
                check_arg((MethodKind)kind, spec, "0x1", 0);
                break;
            case METHOD_ARG_INTEGER:
                check_arg((MethodKind)kind, spec, low, 1);
                check_arg((MethodKind)kind, spec, high, 1);
                check_arg((MethodKind)kind, spec, below, 0);
                check_arg((MethodKind)kind, spec, above, 0);
                check_arg((MethodKind)kind, spec, "1.5", 0);
                check_arg((MethodKind)kind, spec, "many", 0);
                break;
            case METHOD_ARG_BOOL:
                check_arg((MethodKind)kind, spec, "true", 1);
                check_arg((MethodKind)kind, spec, "0", 1);
                check_arg((MethodKind)kind, spec, "yes", 0);
                break;
            case METHOD_ARG_CHOICE:
                check_arg((MethodKind)kind, spec, "none_of_them", 0);
                break;
            case METHOD_ARG_TEXT:
                check_arg((MethodKind)kind, spec, "", 0);
                break;
            }
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simclr),
        cmocka_unit_test(test_byol),
        cmocka_unit_test(test_dino),
        cmocka_unit_test(test_dino_trained_weight_g),
        cmocka_unit_test(test_dino_local_views_larger_than_global),
        cmocka_unit_test(test_vicreg),
        cmocka_unit_test(test_barlow_twins),
        cmocka_unit_test(test_distillation),
        cmocka_unit_test(test_distillation_v1),
        cmocka_unit_test(test_distillation_v2),
        cmocka_unit_test(test_distillation_resnet_teacher),
        cmocka_unit_test(test_simclr_vit),
        cmocka_unit_test(test_dino_vit),
        cmocka_unit_test(test_distillation_vit_student),
        cmocka_unit_test(test_simclr_convnext),
        cmocka_unit_test(test_byol_convnext),
        cmocka_unit_test(test_dino_convnext),
        cmocka_unit_test(test_distillation_convnext),
        cmocka_unit_test(test_vit_view_sizes_are_checked),
        cmocka_unit_test(test_ema_teacher_follows_student),
        cmocka_unit_test(test_ema_teacher_keeps_nothing_for_backward),
        cmocka_unit_test(test_dino_last_layer_group_is_frozen_at_first),
        cmocka_unit_test(test_method_args_are_checked),
        cmocka_unit_test(test_method_arg_ranges),
    };
    const int failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
    if (teacher_file[0]) remove(teacher_file);
    if (vit_teacher_file[0]) remove(vit_teacher_file);
    if (convnext_teacher_file[0]) remove(convnext_teacher_file);
    return failed;
}
