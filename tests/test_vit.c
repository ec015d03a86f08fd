// ViT backbones against timm and transformers (tests/fixtures/vit.safetensors,
// tools/make_vit_fixtures.py): the normalised tokens of tiny random-weight
// models at their native size and at resampled sizes, the gradients of
// sum(tokens * w), transformers' Dinov2Model weights loaded by name; the
// position-resampling matrices against torch.nn.functional.interpolate;
// finite differences through drop path; parameter counts of the presets.
// Every model test runs on the cpu backend (the fp32 target of the 1e-5
// requirement) and on the ref backend. Weight files: tests/test_vit_weights.c.
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
#include "fixture_init.h"
#include "fixture_tensors.h"
#include "gradcheck.h"
#include "nn/vit.h"
#include "nn/vit_weights.h"
#include "nn/weights.h"
#include "vit_fixture.h"
#include "vit_parity.h"

#define BATCH VIT_PARITY_BATCH

VIT_PARITY_TEST_STATE(VIT_FIXTURE_PATH)

// ---- resampling matrices -------------------------------------------------------------

static void test_interpolation_matrices(void **state) {
    int checked = 0;
    for (int t = 0; t < fixture.count; t++) {
        int in, out;
        char mode[16];
        if (sscanf(fixture.tensors[t].name, "interp/%15[a-z]/%d_%d", mode, &in, &out) != 3)
            continue;
        VitPosInterpolation chosen;
        assert_int_equal(vit_pos_interpolation_parse(mode, &chosen, NULL), 0);
        double *truth = vit_fixture_doubles(&fixture, fixture.tensors[t].name, (size_t)in * out);
        double *ours = malloc((size_t)in * out * sizeof *ours);
        assert_int_equal(vit_pos_axis_weights(chosen, in, out, ours, NULL), 0);
        for (int i = 0; i < in * out; i++)
            if (!(fabs(ours[i] - truth[i]) <= 1e-12))
                fail_msg("%s[%d]: %.17g, torch %.17g", fixture.tensors[t].name, i, ours[i],
                         truth[i]);
        free(truth);
        free(ours);
        checked++;
    }
    assert_int_equal(checked, 24);
}

// ---- parity with timm and transformers --------------------------------------------------

// Runs slot `slot` (size px) on the fixture input and checks its tokens
// against M/S/tokens; returns the input, freed by the caller.
static float *check_forward(Vit *model, const char *model_name, int slot, int size) {
    char name[128];
    snprintf(name, sizeof name, "%s/%d/tokens", model_name, size);
    return vit_parity_forward(&parity, model, model_name, name, slot, size, 1);
}

static void check_forward_only(Vit *model, const char *model_name, int slot, int size) {
    backend->op.free(backend, check_forward(model, model_name, slot, size));
}

// Backward of sum(tokens * w) on slot `slot`, every parameter's gradient checked.
static void check_backward(Vit *model, const char *model_name, int slot, int size) {
    char loss[64], prefix[64];
    snprintf(loss, sizeof loss, "loss/%s/%d", model_name, size);
    snprintf(prefix, sizeof prefix, "%s/%d", model_name, size);
    vit_parity_check_backward(&parity, model, slot, loss, prefix);
}

// A timm model of the fixture: slots at `sizes`, fixture-init weights.
static void build_timm_model(Vit *model, const VitConfig *config, const int *sizes, int count) {
    ErrorMessage err = {{0}};
    VitInputShape shapes[4];
    for (int i = 0; i < count; i++) shapes[i] = (VitInputShape){BATCH, sizes[i]};
    if (vit_declare(model, backend, config, &err) || vit_allocate(model, shapes, count, &err) ||
        vit_fixture_init_weights(&model->params, &err))
        fail_msg("%s", err.text);
}

// timm_p16: patch 16, no registers, antialiased resampling (timm's
// dynamic_img_size) up (80 px, grid 5) and down (48 px, grid 3).
static void test_timm_p16(void **state) {
    const VitConfig config = vit_fixture_config(16, 64, 0, 4, VIT_POS_INTERP_ANTIALIAS);
    const int sizes[] = {64, 80, 48};
    Vit model;
    build_timm_model(&model, &config, sizes, 3);
    for (int i = 0; i < 3; i++) check_forward_only(&model, "timm_p16", i, sizes[i]);
    // The gradient at the resampled size reaches pos_embed through the map.
    float *input = check_forward(&model, "timm_p16", 1, 80);
    check_backward(&model, "timm_p16", 1, 80);
    backend->op.free(backend, input);
    vit_free(&model);
}

// timm_p14_reg4: 4 registers, no class-token position (no_embed_class).
static void test_timm_p14_reg4(void **state) {
    const VitConfig config = vit_fixture_config(14, 64, 4, 4, VIT_POS_INTERP_ANTIALIAS);
    const int sizes[] = {56, 42};
    Vit model;
    build_timm_model(&model, &config, sizes, 2);
    check_forward_only(&model, "timm_p14_reg4", 1, 42);
    float *input = check_forward(&model, "timm_p14_reg4", 0, 56);
    check_backward(&model, "timm_p14_reg4", 0, 56);
    backend->op.free(backend, input);
    vit_free(&model);
}

// hf_p14: the architecture read from transformers' names, the weights loaded
// from them (F16, query/key/value stacked), DINOv2's offset resampling.
static void test_transformers_dinov2(void **state) {
    ErrorMessage err = {{0}};
    VitConfig config;
    if (vit_config_from_weights(&fixture, "hf_p14.", &config, &err)) fail_msg("%s", err.text);
    assert_int_equal(config.embed_dim, 32);
    assert_int_equal(config.depth, 2);
    assert_int_equal(config.patch_size, 14);
    assert_int_equal(config.pos_grid, 4);
    assert_int_equal(config.mlp_hidden, 128);
    assert_int_equal(config.register_tokens, 0);
    assert_int_equal(config.class_pos, 1);
    assert_int_equal(config.layer_scale, 1);
    assert_int_equal(config.pos_interpolation, VIT_POS_INTERP_OFFSET);
    config.heads = 2;  // safetensors files do not say; width / 64 is for real DINOv2 sizes
    const VitInputShape shapes[] = {{BATCH, 56}, {BATCH, 70}};
    Vit model;
    if (vit_declare(&model, backend, &config, &err) || vit_allocate(&model, shapes, 2, &err) ||
        vit_load_from(&model, &fixture, "hf_p14.", &err))
        fail_msg("%s", err.text);
    check_forward_only(&model, "hf_p14", 0, 56);
    check_forward_only(&model, "hf_p14", 1, 70);
    vit_free(&model);
}

// vit_features: the mean of the patch tokens or the class token, as pooled
// from the truth's tokens.
static void test_features_pooling(void **state) {
    ErrorMessage err = {{0}};
    const int size = 64;
    for (int pool = 0; pool < 2; pool++) {
        VitConfig config = vit_fixture_config(16, 64, 0, 4, VIT_POS_INTERP_ANTIALIAS);
        config.pool = pool ? VIT_POOL_CLS : VIT_POOL_MEAN;
        Vit model;
        build_timm_model(&model, &config, &size, 1);
        float *input = vit_fixture_input(backend, "timm_p16", size, BATCH);
        if (vit_forward(&model, 0, BATCH, (const Act *)input, 0, &err)) fail_msg("%s", err.text);
        const int tokens = vit_slot_tokens(&model, 0), dim = model.feature_dim;
        double *truth = vit_fixture_doubles(&fixture, "timm_p16/64/tokens",
                                            (size_t)BATCH * tokens * dim);
        float features[BATCH * 64];
        backend->op.download(backend, features, vit_features(&model, 0), sizeof features);
        for (int b = 0; b < BATCH; b++)
            for (int c = 0; c < dim; c++) {
                double expected = 0.0;
                const int first = pool ? 0 : 1, count = pool ? 1 : tokens - 1;
                for (int t = first; t < first + count; t++)
                    expected += truth[((size_t)b * tokens + t) * dim + c] / count;
                assert_float_equal(features[b * dim + c], expected, 2e-5);
            }
        free(truth);
        backend->op.free(backend, input);
        vit_free(&model);
    }
}

// ---- finite differences through the whole model, drop path on ------------------------------

// Parameters checked (a slice of each: finite differences cost two forwards
// per element): the resampled positions, class token, a LayerScale, the
// qkv and fc2 weights of the last block, the patch embedding.
static void test_whole_model_finite_differences(void **state) {
    VitConfig config = vit_fixture_config(4, 8, 2, 3, VIT_POS_INTERP_OFFSET);
    config.drop_path_rate = 0.5f;  // block 1 draws with keep 0.5: some samples dropped
    const int size = 16;           // grid 4 from a 3 x 3 position grid
    VitWholeModel w = {.backend = backend};
    build_timm_model(&w.model, &config, &size, 1);
    const char *names[] = {"pos_embed", "cls_token", "reg_token", "blocks.1.ls1.gamma",
                           "blocks.1.attn.qkv.weight", "blocks.1.mlp.fc2.weight",
                           "patch_embed.proj.weight"};
    vit_whole_model_check(&w, "timm_p16", size, names, (int)(sizeof names / sizeof names[0]));
    vit_free(&w.model);
}

// ---- the presets ----------------------------------------------------------------------------

// Parameter counts of the presets at 224 px against timm's
// (sum(p.numel()) of timm.create_model("vit_small_patch14_dinov2",
// img_size=224, num_classes=0), patch_size=16 for the /16 ones; ViT-g:
// vit_giant_patch14_dinov2, its SwiGLU MLP; timm 1.0.9), and of timm's
// names as LightlyTrain takes them (the same call with the name itself,
// timm 1.0.31): the plain ViTs have no LayerScale (2 D a block fewer than
// vit_s16's), the DINOv2 ones are our presets; all resample their
// positions as timm's dynamic_img_size does.
static void test_preset_parameter_counts(void **state) {
    const struct { const char *name; size_t count; int tokens, layer_scale; } presets[] = {
        {"vit_s14", 21628800, 257, 1},      {"vit_s16", 21674880, 197, 1},
        {"vit_b14", 85724928, 257, 1},      {"vit_b16", 85817088, 197, 1},
        {"vit_l14", 303227904, 257, 1},     {"vit_l16", 303350784, 197, 1},
        {"vit_s14_reg4", 21629952, 261, 1}, {"vit_b14_reg4", 85727232, 261, 1},
        {"vit_g14", 1134769664, 257, 1},
        {"timm/vit_tiny_patch16_224", 5524416, 197, 0},
        {"timm/vit_small_patch16_224", 21665664, 197, 0},
        {"timm/vit_base_patch16_384", 85798656, 197, 0},
        {"timm/vit_large_patch16_224", 303301632, 197, 0},
        {"timm/vit_small_patch14_dinov2", 21628800, 257, 1},
        {"timm/vit_base_patch14_reg4_dinov2", 85727232, 261, 1},
        {"timm/vit_giant_patch14_reg4_dinov2", 1134774272, 261, 1},
    };
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        VitConfig config;
        Vit model;
        vit_parity_declare_preset(backend, presets[i].name, presets[i].count, &config, &model);
        assert_int_equal(1 + config.register_tokens + config.pos_grid * config.pos_grid,
                         presets[i].tokens);
        assert_int_equal(config.layer_scale, presets[i].layer_scale);
        assert_string_equal(config.name, presets[i].name);
        if (strncmp(presets[i].name, "timm/", 5) == 0) {
            assert_true(vit_is_preset_name(presets[i].name));
            assert_int_equal(config.pos_interpolation, VIT_POS_INTERP_ANTIALIAS);
        }
        vit_free(&model);
    }
    ErrorMessage err = {{0}};
    VitConfig config;
    assert_int_equal(vit_config_preset("vit_s16", 100, &config, &err), -1);  // not a multiple
    assert_non_null(strstr(err.text, "multiple of the patch size"));
    assert_int_equal(vit_config_preset("vit_x16", 224, &config, &err), -1);
    assert_int_equal(vit_config_preset("vit_g16", 224, &config, &err), -1);
}

// A backend whose op table lacks a transformer op is refused with its name.
static void test_backend_without_vit_ops(void **state) {
    ErrorMessage err = {{0}};
    Backend *partial = backend_create("ref", 1, &err);
    assert_non_null(partial);
    partial->op.attention_backward = NULL;
    const VitConfig config = vit_fixture_config(16, 64, 0, 4, VIT_POS_INTERP_OFFSET);
    const VitInputShape shape = {BATCH, 64};
    Vit model;
    assert_int_equal(vit_create(&model, partial, &config, &shape, 1, 0, &err), -1);
    assert_non_null(strstr(err.text, "the ref backend has no attention_backward op yet"));
    backend_destroy(partial);
}

int main(void) {
    const struct CMUnitTest once[] = {
        cmocka_unit_test(test_interpolation_matrices),
        cmocka_unit_test(test_preset_parameter_counts),
        cmocka_unit_test(test_backend_without_vit_ops),
    };
    const struct CMUnitTest models[] = {
        cmocka_unit_test(test_timm_p16),
        cmocka_unit_test(test_timm_p14_reg4),
        cmocka_unit_test(test_transformers_dinov2),
        cmocka_unit_test(test_features_pooling),
        cmocka_unit_test(test_whole_model_finite_differences),
    };
    int failures = cmocka_run_group_tests_name("vit", once, setup_cpu, teardown);
    failures += cmocka_run_group_tests_name("vit cpu", models, setup_cpu, teardown);
    failures += cmocka_run_group_tests_name("vit ref", models, setup_ref, teardown);
    return failures;
}
