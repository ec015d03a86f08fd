// ConvNeXts (src/nn/convnext.h) against torchvision, timm and DINOv3's
// layout (tests/fixtures/convnext.safetensors, tools/make_convnext_fixtures.py):
// Tiny, Small, Base and Large with fixture-init weights, their features
// and maps against torchvision's and timm's (and DINOv3's features for
// Tiny) within 1e-5 relative; a small ConvNeXt loaded from each naming's
// file (and DINOv3's .pth through the restricted unpickler) at two sizes;
// its gradients (features and map) in timm's and DINOv3's features; the
// export of each naming and its reload; the one-line errors of wrong files;
// finite differences through a whole model with drop path on; the presets'
// parameter counts. The model tests run on the cpu backend (the fp32
// target of the requirement) and on the ref backend.
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
#include "convnext_fixture.h"
#include "nn/convnext_weights.h"
#include "nn/safetensors.h"
#include "nn/state_dict_backbone.h"
#include "ssl_methods/distillation_teacher.h"
#include "weights/weight_file.h"

VIT_PARITY_TEST_STATE(CONVNEXT_FIXTURE_PATH)

static const char *const namings[] = {"torchvision", "timm", "dinov3"};

// ---- every size against torchvision and timm ------------------------------------------------

// The size's model (timm naming, frozen) at its fixture input against
// timm's and torchvision's features and maps (the same model: the two
// libraries compute the same function, and our namings differ only in
// names); Tiny's DINOv3 features from a model in DINOv3's naming.
static void check_size(const char *size, int pixels) {
    char name[64], prefix[64];
    snprintf(name, sizeof name, "timm/convnext_%s", size);
    ConvnextConfig config;
    ErrorMessage err = {{0}};
    if (convnext_config_preset(name, &config, &err)) fail_msg("%s", err.text);
    Convnext model;
    convnext_fixture_build(&model, backend, &config, &pixels, 1, 1);
    for (int reference = 0; reference < 2; reference++) {
        snprintf(prefix, sizeof prefix, "%s/%s", size, reference ? "torchvision" : "timm");
        backend->op.free(backend, convnext_fixture_forward(&parity, &model, 0, pixels, 0, prefix));
    }
    convnext_free(&model);
}

static void test_tiny(void **state) {
    check_size("tiny", 64);
    ConvnextConfig config;
    ErrorMessage err = {{0}};
    if (convnext_config_preset("dinov3/convnext-tiny", &config, &err)) fail_msg("%s", err.text);
    Convnext model;
    const int pixels = 64;
    convnext_fixture_build(&model, backend, &config, &pixels, 1, 1);
    backend->op.free(backend, convnext_fixture_forward(&parity, &model, 0, 64, 0, "tiny/dinov3"));
    convnext_free(&model);
}
static void test_small(void **state) { check_size("small", 32); }
static void test_base(void **state) { check_size("base", 32); }
static void test_large(void **state) { check_size("large", 32); }

// ---- the small model in each naming --------------------------------------------------------

// A model of what the file holds under "small/<naming>.", slots at 32 and
// 48 px, loaded; the geometry read from the file checked.
static void build_small(Convnext *model, const SafeTensors *file, const char *file_prefix,
                        int naming, int frozen) {
    ErrorMessage err = {{0}};
    ConvnextConfig config;
    if (convnext_config_from_weights(file, file_prefix, &config, &err)) fail_msg("%s", err.text);
    const ConvnextConfig expected = convnext_fixture_small((ConvnextNaming)naming);
    assert_memory_equal(config.depths, expected.depths, sizeof config.depths);
    assert_memory_equal(config.dims, expected.dims, sizeof config.dims);
    assert_int_equal(config.naming, naming);
    assert_int_equal(config.kernel, 7);
    assert_int_equal(config.in_channels, 3);
    assert_string_equal(config.name, expected.name);
    const ConvnextInputShape shapes[2] = {{CONVNEXT_FIXTURE_BATCH, 32},
                                          {CONVNEXT_FIXTURE_BATCH, 48}};
    if (convnext_declare(model, backend, &config, &err)) fail_msg("%s", err.text);
    model->frozen = frozen;
    if (convnext_allocate(model, shapes, 2, &err) ||
        convnext_load_from(model, file, file_prefix, &err))
        fail_msg("%s: %s", file_prefix, err.text);
}

static void check_small_outputs(Convnext *model, const char *naming) {
    const int sizes[2] = {32, 48};
    for (int s = 0; s < 2; s++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "small/%s/%d", naming, sizes[s]);
        backend->op.free(backend,
                         convnext_fixture_forward(&parity, model, s, sizes[s], 0, prefix));
    }
}

static void test_small_namings(void **state) {
    for (int n = 0; n < 3; n++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "small/%s.", namings[n]);
        Convnext model;
        build_small(&model, &fixture, prefix, n, 1);
        check_small_outputs(&model, namings[n]);
        convnext_free(&model);
    }
}

// DINOv3's own checkpoint format: a state dict saved by torch.save (F16
// here), read through the weight-file front door and the restricted unpickler.
static void test_dinov3_pth(void **state) {
    ErrorMessage err = {{0}};
    SafeTensors file;
    if (weight_file_read_weights(CONVNEXT_FIXTURE_PTH, &file, &err)) fail_msg("%s", err.text);
    assert_non_null(safetensors_find(&file, "norms.3.weight"));
    Convnext model;
    build_small(&model, &file, "", CONVNEXT_DINOV3, 1);
    check_small_outputs(&model, "dinov3");
    convnext_free(&model);
    safetensors_free(&file);
}

// The gradients of sum(features * w) + sum(map * v) at 48 px for timm's
// features (the last stage) and DINOv3's (its final norm on the map).
static void test_small_gradients(void **state) {
    ErrorMessage err = {{0}};
    for (int n = 1; n < 3; n++) {
        char prefix[64], loss_prefix[64];
        snprintf(prefix, sizeof prefix, "small/%s.", namings[n]);
        snprintf(loss_prefix, sizeof loss_prefix, "small/%s/48", namings[n]);
        Convnext model;
        build_small(&model, &fixture, prefix, n, 0);
        float *input = convnext_fixture_forward(&parity, &model, 1, 48, 1, loss_prefix);
        int height, width;
        convnext_feature_map_size(&model, 1, &height, &width);
        const size_t n_features = CONVNEXT_FIXTURE_BATCH * (size_t)model.feature_dim;
        const size_t n_map = n_features * height * width;
        float *host = malloc(n_map * sizeof *host);
        float *dfeatures = backend->op.alloc(backend, n_features * sizeof *dfeatures);
        float *dmap = backend->op.alloc(backend, n_map * sizeof *dmap);
        fixture_fill("loss/small/features", 0.0f, 1.0f, host, n_features);
        backend->op.upload(backend, dfeatures, host, n_features * sizeof *host);
        fixture_fill("loss/small/map", 0.0f, 1.0f, host, n_map);
        backend->op.upload(backend, dmap, host, n_map * sizeof *host);
        parameter_set_zero_grads(&model.params);
        if (convnext_backward_map(&model, 1, (const Act *)dfeatures, (const Act *)dmap, &err))
            fail_msg("%s", err.text);
        for (int i = 0; i < model.params.count; i++) {
            const Parameter *param = &model.params.params[i];
            float *ours = malloc(param->count * sizeof *ours);
            float *torch = malloc(param->count * sizeof *torch);
            backend->op.download(backend, ours, param->grad, param->count * sizeof *ours);
            weights_to_torch_layout(param, ours, torch);
            const int unused = model.roles[i].role == CONVNEXT_HEAD_NORM &&
                               !convnext_norm_features(&model.config);
            if (unused) {
                // Not in timm's graph (no gradient in torch): ours stays 0.
                for (size_t k = 0; k < param->count; k++) assert_true(torch[k] == 0.0f);
            } else {
                vit_parity_check_parameter(&parity, loss_prefix, param, torch);
            }
            free(ours);
            free(torch);
        }
        free(host);
        backend->op.free(backend, dfeatures);
        backend->op.free(backend, dmap);
        backend->op.free(backend, input);
        convnext_free(&model);
    }
}

// distillationv2's teacher features of a DINOv3 ConvNeXt (n_teacher_blocks
// 3) at 64 px: stages 1 and 2 resized to stage 3's 2 x 2 grid, then its
// normalised map, side by side, against LightlyTrain's wrapper.
static void test_stage_features(void **state) {
    ErrorMessage err = {{0}};
    DistillTeacher teacher = {0};
    BackboneSpec spec;
    const BackboneInput input_shape = {CONVNEXT_FIXTURE_BATCH, 64};
    if (state_dict_backbone_spec(&fixture, "small/dinov3.", &spec, &err) ||
        backbone_allocate_frozen(&teacher.backbone, backend, &spec, &input_shape, 1, &err) ||
        teacher.backbone.ops->load(&teacher.backbone, &fixture, "small/dinov3.", &err))
        fail_msg("%s", err.text);
    teacher.dim = teacher.backbone.feature_dim;
    backbone_feature_map_size(&teacher.backbone, 0, &teacher.grid_h, &teacher.grid_w);
    assert_true(distill_teacher_has_stages(&teacher));
    assert_int_equal(distill_teacher_stage_width(&teacher, 3), 16 + 24 + 32);
    float *input = vit_fixture_input(backend, "convnext", 64, CONVNEXT_FIXTURE_BATCH);
    if (backbone_forward(&teacher.backbone, 0, CONVNEXT_FIXTURE_BATCH, (const Act *)input, 0,
                         &err))
        fail_msg("%s", err.text);
    const size_t rows = CONVNEXT_FIXTURE_BATCH * (size_t)teacher.grid_h * teacher.grid_w;
    float *scratch = backend->op.alloc(backend, rows * 32 * sizeof(float));
    float *out = backend->op.alloc(backend, rows * 72 * sizeof(float));
    distill_teacher_stage_features(&teacher, CONVNEXT_FIXTURE_BATCH, 3, (Act *)scratch,
                                   (Act *)out);
    float ours[CONVNEXT_FIXTURE_BATCH * 2 * 2 * 72];
    assert_int_equal(rows * 72, sizeof ours / sizeof ours[0]);
    backend->op.download(backend, ours, out, sizeof ours);
    convnext_fixture_check(&parity, "small/dinov3/64/stages3", ours, rows * 72);
    backend->op.free(backend, scratch);
    backend->op.free(backend, out);
    backend->op.free(backend, input);
    backbone_free(&teacher.backbone);
}

// ---- export ----------------------------------------------------------------------------

// Each naming's export holds its names (DINOv3: norms.3.* beside norm.*,
// torchvision: no classifier.2), loads back by itself, and gives the same
// features, bit for bit.
static void test_export(void **state) {
    ErrorMessage err = {{0}};
    const char *path = "build/test_convnext_export.safetensors";
    static const char *const expected[3][3] = {
        {"features.0.0.weight", "features.7.0.layer_scale", "classifier.0.bias"},
        {"stem.1.weight", "stages.3.blocks.0.gamma", "head.norm.weight"},
        {"downsample_layers.3.1.weight", "stages.2.1.pwconv2.bias", "norms.3.weight"},
    };
    for (int n = 0; n < 3; n++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "small/%s.", namings[n]);
        Convnext model, loaded;
        build_small(&model, &fixture, prefix, n, 1);
        if (convnext_save(&model, path, NULL, &err)) fail_msg("%s", err.text);
        SafeTensors file;
        if (safetensors_read(path, &file, &err)) fail_msg("%s", err.text);
        for (int e = 0; e < 3; e++)
            if (!safetensors_find(&file, expected[n][e]))
                fail_msg("%s export has no \"%s\"", namings[n], expected[n][e]);
        assert_null(safetensors_find(&file, "classifier.2.weight"));
        const int extra = n == CONVNEXT_DINOV3 ? 2 : 0;
        assert_int_equal(file.count, model.params.count + extra);
        build_small(&loaded, &file, "", n, 1);
        float *input = vit_fixture_input(backend, "convnext", 48, CONVNEXT_FIXTURE_BATCH);
        const size_t count = CONVNEXT_FIXTURE_BATCH * (size_t)model.feature_dim;
        float before[64], after[64];
        assert_true(count <= 64);
        if (convnext_forward(&model, 1, CONVNEXT_FIXTURE_BATCH, (const Act *)input, 0, &err) ||
            convnext_forward(&loaded, 1, CONVNEXT_FIXTURE_BATCH, (const Act *)input, 0, &err))
            fail_msg("%s", err.text);
        backend->op.download(backend, before, convnext_features(&model, 1), count * sizeof(float));
        backend->op.download(backend, after, convnext_features(&loaded, 1), count * sizeof(float));
        assert_memory_equal(before, after, count * sizeof(float));
        // A frozen model (a teacher, embed) refuses a backward.
        assert_int_equal(convnext_backward_map(&model, 1, convnext_features(&model, 1), NULL,
                                               &err), -1);
        assert_non_null(strstr(err.text, "keeps nothing for backward"));
        backend->op.free(backend, input);
        safetensors_free(&file);
        convnext_free(&loaded);
        convnext_free(&model);
    }
    unlink(path);
}

// ---- wrong files ---------------------------------------------------------------------------

// A small timm file with one thing wrong fails to load with one line
// naming it; the model keeps its values.
static void expect_load_error(const char *drop, const char *rename_from, const char *rename_to,
                              const char *message) {
    ErrorMessage err = {{0}};
    const char *path = "build/test_convnext_variant.safetensors";
    vit_parity_write_variant(&fixture, path, "small/timm.", drop, rename_from, rename_to);
    SafeTensors file;
    if (safetensors_read(path, &file, &err)) fail_msg("%s", err.text);
    const ConvnextConfig config = convnext_fixture_small(CONVNEXT_TIMM);
    const int sizes[1] = {32};
    Convnext model;
    convnext_fixture_build(&model, backend, &config, sizes, 1, 1);
    const int status = convnext_load_from(&model, &file, "", &err);
    if (status == 0 || !strstr(err.text, message) || strchr(err.text, '\n'))
        fail_msg("expected one line with \"%s\", got %d: %s", message, status, err.text);
    convnext_free(&model);
    safetensors_free(&file);
    unlink(path);
}

static void test_wrong_files(void **state) {
    expect_load_error("stages.2.blocks.1.mlp.fc1.bias", NULL, NULL,
                      "\"stages.2.blocks.1.mlp.fc1.bias\" is missing");
    // (the final norm may be missing for timm's features: only the extra tensor is wrong)
    expect_load_error(NULL, "head.norm.weight", "head.extra.weight",
                      "\"head.extra.weight\" is not part of timm/convnext_w8");
    expect_load_error(NULL, "stages.1.blocks.0.gamma", "stages.1.blocks.0.extra",
                      "\"stages.1.blocks.0.gamma\" is missing");
    expect_load_error("stages.2.blocks.1.conv_dw.weight", NULL, NULL,
                      "stage 2 has 1 blocks of width 24 in the file, 2 of width 24");
    // The final norm is not used by timm's features: a file without it loads.
    ErrorMessage err = {{0}};
    const char *path = "build/test_convnext_variant.safetensors";
    vit_parity_write_variant(&fixture, path, "small/timm.", "head.norm.weight", NULL, NULL);
    SafeTensors file;
    if (safetensors_read(path, &file, &err)) fail_msg("%s", err.text);
    Convnext model;
    build_small(&model, &file, "", CONVNEXT_TIMM, 1);
    convnext_free(&model);
    safetensors_free(&file);
    unlink(path);
}

// ---- drop path and the whole model ------------------------------------------------------------

typedef struct WholeConvnext {
    Convnext model;
    float *input, *projection, *dfeatures;
    size_t n_features;
} WholeConvnext;

// <projection, features> of a training forward with the draws of forward 7.
static double whole_loss(void *context, const float *unused) {
    WholeConvnext *w = context;
    ErrorMessage err = {{0}};
    w->model.training_forwards = 7;
    if (convnext_forward(&w->model, 0, CONVNEXT_FIXTURE_BATCH, (const Act *)w->input, 1, &err))
        fail_msg("%s", err.text);
    float features[64];
    backend->op.download(backend, features, convnext_features(&w->model, 0),
                         w->n_features * sizeof(float));
    return gradcheck_project(w->n_features, features, w->projection);
}

// With drop path at 0.6 (stochastic depth of each block up to it) the
// gradients of a training forward, draws fixed, against central
// differences, on the ref backend; the draws drop some samples' branches.
static void test_drop_path_fd(void **state) {
    ErrorMessage err = {{0}};
    WholeConvnext w = {0};
    ConvnextConfig config = convnext_fixture_small(CONVNEXT_TIMM);
    config.drop_path_rate = 0.6f;
    const int size = 32;
    convnext_fixture_build(&w.model, backend, &config, &size, 1, 0);
    w.input = vit_fixture_input(backend, "convnext", size, CONVNEXT_FIXTURE_BATCH);
    w.n_features = CONVNEXT_FIXTURE_BATCH * (size_t)w.model.feature_dim;
    w.projection = malloc(w.n_features * sizeof *w.projection);
    fixture_fill("fd/projection", 0.0f, 1.0f, w.projection, w.n_features);
    w.dfeatures = backend->op.alloc(backend, w.n_features * sizeof(float));
    backend->op.upload(backend, w.dfeatures, w.projection, w.n_features * sizeof(float));
    whole_loss(&w, NULL);
    float scales[CONVNEXT_FIXTURE_BATCH];
    int dropped = 0;
    for (int b = 0; b < w.model.stages[2].depth; b++) {
        backend->op.download(backend, scales, w.model.slots[0].stages[2].blocks[b].drop_scale,
                             sizeof scales);
        for (int n = 0; n < CONVNEXT_FIXTURE_BATCH; n++) dropped += scales[n] == 0.0f;
    }
    assert_true(dropped > 0);  // draws of forward 7 drop a branch (else this tests no drop)
    parameter_set_zero_grads(&w.model.params);
    if (convnext_backward_map(&w.model, 0, (const Act *)w.dfeatures, NULL, &err))
        fail_msg("%s", err.text);
    const GradcheckTolerance tolerance = {.step = 1e-2f, .rtol = 1e-2, .atol = 2e-3};
    const char *const names[] = {"stem.0.weight", "stages.1.downsample.1.bias",
                                 "stages.2.blocks.0.conv_dw.weight", "stages.2.blocks.1.gamma",
                                 "stages.2.blocks.1.mlp.fc1.weight", "stages.3.blocks.0.norm.bias"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const Parameter *param = parameter_find(&w.model.params, names[i]);
        assert_non_null(param);
        const size_t n = param->count < 40 ? param->count : 40;
        float analytic[40];
        backend->op.download(backend, analytic, param->grad, n * sizeof(float));
        assert_int_equal(gradcheck_compare(names[i], whole_loss, &w, param->value, n, analytic,
                                           tolerance),
                         0);
    }
    free(w.projection);
    backend->op.free(backend, w.input);
    backend->op.free(backend, w.dfeatures);
    convnext_free(&w.model);
}

// ---- presets ---------------------------------------------------------------------------------

// Parameter counts of the presets (torchvision's convnext_* without
// classifier.2: 28,589,128 - 769,000 for Tiny, ...), and LightlyTrain's
// spellings of the names.
static void test_presets(void **state) {
    static const struct { const char *name; size_t count; } presets[] = {
        {"torchvision/convnext_tiny", 27820128}, {"timm/convnext_small", 49454688},
        {"dinov3/convnext-base", 87566464},      {"convnext_large", 196230336},
    };
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        ErrorMessage err = {{0}};
        ConvnextConfig config;
        Convnext model;
        if (convnext_config_preset(presets[i].name, &config, &err) ||
            convnext_declare(&model, backend, &config, &err))
            fail_msg("%s: %s", presets[i].name, err.text);
        if (parameter_set_elements(&model.params) != presets[i].count)
            fail_msg("%s: %zu parameters, expected %zu", presets[i].name,
                     parameter_set_elements(&model.params), presets[i].count);
        convnext_free(&model);
    }
    static const char *const spellings[][2] = {
        {"dinov3/convnext_tiny", "dinov3/convnext-tiny"},
        {"dinov3/convnext-small-pretrain", "dinov3/convnext-small"},
        {"convnext_base", "torchvision/convnext_base"},
        {"timm/convnext_large", "timm/convnext_large"},
    };
    for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++) {
        ErrorMessage err = {{0}};
        ConvnextConfig config;
        if (convnext_config_preset(spellings[i][0], &config, &err)) fail_msg("%s", err.text);
        assert_string_equal(config.name, spellings[i][1]);
    }
    ConvnextConfig config;
    assert_false(convnext_is_preset_name("convnext_huge"));
    assert_false(convnext_is_preset_name("timm/convnext-tiny"));
    assert_int_equal(convnext_config_preset("torchvision/convnext_tiny", &config, NULL), 0);
    assert_true(config.drop_path_rate == 0.1f);  // torchvision's default stochastic depth
}

int main(void) {
    const struct CMUnitTest cpu_tests[] = {
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_tiny),
        cmocka_unit_test(test_small),
        cmocka_unit_test(test_base),
        cmocka_unit_test(test_large),
        cmocka_unit_test(test_small_namings),
        cmocka_unit_test(test_dinov3_pth),
        cmocka_unit_test(test_small_gradients),
        cmocka_unit_test(test_stage_features),
        cmocka_unit_test(test_export),
        cmocka_unit_test(test_wrong_files),
    };
    // The ref backend (plain loops): the small model's outputs and
    // gradients, and the finite differences.
    const struct CMUnitTest ref_tests[] = {
        cmocka_unit_test(test_small_namings),
        cmocka_unit_test(test_small_gradients),
        cmocka_unit_test(test_drop_path_fd),
    };
    return cmocka_run_group_tests_name("cpu", cpu_tests, setup_cpu, teardown) +
           cmocka_run_group_tests_name("ref", ref_tests, setup_ref, teardown);
}
