// DINOv2's ViT-g (vit_g14, src/nn/vit.h: a SwiGLU MLP packed in one
// projection) against timm and transformers (tests/fixtures/vit_giant.safetensors,
// tools/make_vit_giant_fixtures.py): a reduced-size model (width 32, 2
// blocks, SwiGLU width 88 by DINOv2's formula) in each naming its weights
// come in: timm's mlp.fc1 / fc2 (fixture-init weights, tokens at the native
// and a resampled size, the gradients of sum(tokens * w)), transformers'
// mlp.weights_in / weights_out, DINOv2's mlp.w12 / w3 with registers (the
// reference is timm's own conversion of that file); the timm export and its
// reload; one-line errors of wrong files; the full-size presets by their
// geometry and parameter counts only (declared, never allocated: 1.1 B
// parameters). Model tests run on the cpu backend (the fp32 target of the
// 1e-5 requirement) and on the ref backend.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "nn/vit.h"
#include "nn/vit_weights.h"
#include "nn/weights.h"
#include "vit_fixture.h"
#include "vit_parity.h"

#define GIANT_FIXTURE_PATH "tests/fixtures/vit_giant.safetensors"
#define BATCH VIT_PARITY_BATCH
#define DIM 32
#define HIDDEN 88        // (int(2/3 * 4 * 32) + 7) / 8 * 8
#define FIXTURE_HEADS 2  // width 32: the files do not say (width / 64 is for real sizes)

VIT_PARITY_TEST_STATE(GIANT_FIXTURE_PATH)

// ---- the full-size presets ---------------------------------------------------------------

// vit_g14 and vit_g14_reg4 at 224 px, declared only: DINOv2's SwiGLU width,
// mlp.fc1 (8192, 1536) and fc2 (1536, 4096) as timm's
// vit_giant_patch14_dinov2 has them, and its parameter count
// (sum(p.numel()) of timm.create_model("vit_giant_patch14_dinov2",
// img_size=224, num_classes=0), and of the _reg4 one, timm 1.0.9).
static void test_giant_presets(void **state) {
    const struct { const char *name; size_t count; int registers; } presets[] = {
        {"vit_g14", 1134769664, 0},
        {"vit_g14_reg4", 1134774272, 4},
    };
    for (int i = 0; i < 2; i++) {
        VitConfig config;
        Vit model;
        vit_parity_declare_preset(backend, presets[i].name, presets[i].count, &config, &model);
        assert_int_equal(config.swiglu, 1);
        assert_int_equal(config.mlp_hidden, 4096);
        assert_int_equal(config.register_tokens, presets[i].registers);
        const Parameter *fc1 = parameter_find(&model.params, "blocks.39.mlp.fc1.weight");
        const Parameter *fc2 = parameter_find(&model.params, "blocks.39.mlp.fc2.weight");
        assert_non_null(fc1);
        assert_non_null(fc2);
        assert_int_equal(fc1->torch_shape[0], 8192);
        assert_int_equal(fc1->torch_shape[1], 1536);
        assert_int_equal(fc2->torch_shape[0], 1536);
        assert_int_equal(fc2->torch_shape[1], 4096);
        assert_null(parameter_find(&model.params, "blocks.40.norm1.weight"));
        // The name of the geometry is the preset's again.
        config.name[0] = '\0';
        vit_config_name(&config);
        assert_string_equal(config.name, presets[i].name);
        vit_free(&model);
    }
    // A GELU MLP of this geometry is no longer vit_g14.
    VitConfig gelu;
    ErrorMessage err = {{0}};
    assert_int_equal(vit_config_preset("vit_g14", 224, &gelu, &err), 0);
    gelu.swiglu = 0;
    gelu.mlp_hidden = 6144;
    vit_config_name(&gelu);
    assert_string_equal(gelu.name, "vit_d1536_l40_p14");
}

// ---- parity -----------------------------------------------------------------------------

// The fixture's timm_g: the reduced ViT-g, fixture-init weights of timm's
// names, slots at `sizes`.
static void build_timm_giant(Vit *model, const int *sizes, int count) {
    ErrorMessage err = {{0}};
    VitConfig config = vit_fixture_config(14, DIM, 0, 4, VIT_POS_INTERP_ANTIALIAS);
    config.swiglu = 1;
    config.mlp_hidden = HIDDEN;
    VitInputShape shapes[2];
    for (int i = 0; i < count; i++) shapes[i] = (VitInputShape){BATCH, sizes[i]};
    if (vit_declare(model, backend, &config, &err) || vit_allocate(model, shapes, count, &err) ||
        vit_fixture_init_weights(&model->params, &err))
        fail_msg("%s", err.text);
}

// A model of the weights under `prefix`, architecture read from them
// (checked: SwiGLU 88, registers), slots at `sizes`.
static void build_from_file(Vit *model, const char *prefix, int registers, const int *sizes,
                            VitConfig *config) {
    ErrorMessage err = {{0}};
    if (vit_config_from_weights(&fixture, prefix, config, &err)) fail_msg("%s", err.text);
    assert_int_equal(config->embed_dim, DIM);
    assert_int_equal(config->depth, 2);
    assert_int_equal(config->patch_size, 14);
    assert_int_equal(config->swiglu, 1);
    assert_int_equal(config->mlp_hidden, HIDDEN);
    assert_int_equal(config->register_tokens, registers);
    assert_int_equal(config->class_pos, registers == 0);
    assert_int_equal(config->pos_grid, 4);
    config->heads = FIXTURE_HEADS;
    const VitInputShape shapes[] = {{BATCH, sizes[0]}, {BATCH, sizes[1]}};
    if (vit_declare(model, backend, config, &err) || vit_allocate(model, shapes, 2, &err) ||
        vit_load_from(model, &fixture, prefix, &err))
        fail_msg("%s: %s", prefix, err.text);
}

// An eval forward of slot `slot`, its tokens against "<model>/<size>/tokens".
static void check_eval(Vit *model, const char *model_name, int slot, int size) {
    char name[96];
    snprintf(name, sizeof name, "%s/%d/tokens", model_name, size);
    backend->op.free(backend, vit_parity_forward(&parity, model, model_name, name, slot, size, 0));
}

// timm's vit_giant_patch14_dinov2 (SwiGLUPacked): tokens at 56 and at 42
// px (antialiased resampling of the positions), every gradient at 56.
static void test_timm_giant(void **state) {
    const int sizes[] = {56, 42};
    Vit model;
    build_timm_giant(&model, sizes, 2);
    check_eval(&model, "timm_g", 1, 42);
    float *input = vit_parity_forward(&parity, &model, "timm_g", "timm_g/56/tokens", 0, 56, 1);
    vit_parity_check_backward(&parity, &model, 0, "loss/timm_g/56", "timm_g/56");
    backend->op.free(backend, input);
    vit_free(&model);
}

// The model of the weights under "<model_name>." at both of its sizes
// against "<model_name>/<size>/tokens", resampling the positions by
// `interpolation` (the default the file's layout gives).
static void check_file_model(const char *model_name, int registers, const int *sizes,
                             VitPosInterpolation interpolation) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s.", model_name);
    VitConfig config;
    Vit model;
    build_from_file(&model, prefix, registers, sizes, &config);
    assert_int_equal(config.pos_interpolation, interpolation);
    for (int slot = 0; slot < 2; slot++) check_eval(&model, model_name, slot, sizes[slot]);
    vit_free(&model);
}

// transformers' Dinov2Model with use_swiglu_ffn (mlp.weights_in /
// weights_out, F16), DINOv2's offset resampling at 70 px.
static void test_transformers_giant(void **state) {
    const int sizes[] = {56, 70};
    check_file_model("hf_g", 0, sizes, VIT_POS_INTERP_OFFSET);
}

// DINOv2's own names (mlp.w12 / w3, register_tokens, mask_token, a
// pos_embed holding the class token's row) against timm's conversion of
// the same file; antialiased resampling at 42 px.
static void test_dinov2_giant_reg4(void **state) {
    const int sizes[] = {56, 42};
    check_file_model("dinov2_g_reg4", 4, sizes, VIT_POS_INTERP_ANTIALIAS);
}

// ---- export and wrong files --------------------------------------------------------------

// The timm export of timm_g: packed mlp.fc1 (2 H, D) and mlp.fc2 (D, H)
// under timm's names, the architecture read back, every value reloaded.
static void test_export_reload(void **state) {
    ErrorMessage err = {{0}};
    char path[128];
    snprintf(path, sizeof path, "/tmp/ltc-test-vit-giant-%d.safetensors", (int)getpid());
    const int size = 56;
    Vit saved, loaded;
    build_timm_giant(&saved, &size, 1);
    if (vit_save(&saved, path, NULL, &err)) fail_msg("%s", err.text);
    SafeTensors file;
    if (safetensors_read(path, &file, &err)) fail_msg("%s", err.text);
    const SafeTensor *fc1 = safetensors_find(&file, "blocks.1.mlp.fc1.weight");
    const SafeTensor *fc2 = safetensors_find(&file, "blocks.1.mlp.fc2.weight");
    assert_non_null(fc1);
    assert_non_null(fc2);
    assert_int_equal(fc1->shape[0], 2 * HIDDEN);
    assert_int_equal(fc2->shape[1], HIDDEN);
    VitConfig config;
    if (vit_config_from_weights(&file, "", &config, &err)) fail_msg("%s", err.text);
    assert_int_equal(config.swiglu, 1);
    assert_int_equal(config.mlp_hidden, HIDDEN);
    assert_int_equal(config.heads, FIXTURE_HEADS);  // the metadata
    safetensors_free(&file);
    const VitInputShape shape = {BATCH, size};
    if (vit_declare(&loaded, backend, &config, &err) || vit_allocate(&loaded, &shape, 1, &err) ||
        vit_load(&loaded, path, &err))
        fail_msg("%s", err.text);
    const size_t total = saved.params.total;
    float *a = malloc(total * sizeof *a), *b = malloc(total * sizeof *b);
    backend->op.download(backend, a, saved.params.values, total * sizeof *a);
    backend->op.download(backend, b, loaded.params.values, total * sizeof *b);
    assert_memory_equal(a, b, total * sizeof *a);
    free(a);
    free(b);
    vit_free(&saved);
    vit_free(&loaded);
    unlink(path);
}

// Loading path into the model of `prefix`'s weights (or, gelu, the same
// geometry with a GELU MLP of 88) fails with one line holding `expected`.
static void expect_load_error(const char *path, const char *prefix, int gelu,
                              const char *expected) {
    ErrorMessage err = {{0}};
    VitConfig config;
    Vit model;
    if (vit_config_from_weights(&fixture, prefix, &config, &err)) fail_msg("%s", err.text);
    config.heads = FIXTURE_HEADS;
    if (gelu) config.swiglu = 0;
    const VitInputShape shape = {BATCH, 56};
    if (vit_declare(&model, backend, &config, &err) || vit_allocate(&model, &shape, 1, &err))
        fail_msg("%s", err.text);
    assert_int_equal(vit_load(&model, path, &err), -1);
    vit_free(&model);
    if (!strstr(err.text, expected)) fail_msg("expected \"%s\" in: %s", expected, err.text);
    assert_null(strchr(err.text, '\n'));
}

static void test_wrong_files(void **state) {
    const char *path = "build/test_vit_giant_wrong.safetensors";
    vit_parity_write_variant(&fixture, path, "dinov2_g_reg4.", "blocks.1.mlp.w3.bias", NULL,
                             NULL);
    expect_load_error(path, "dinov2_g_reg4.", 0, "\"blocks.1.mlp.w3.bias\" is missing");
    vit_parity_write_variant(&fixture, path, "hf_g.", "encoder.layer.0.mlp.weights_out.weight",
                             NULL, NULL);
    expect_load_error(path, "hf_g.", 0,
                      "\"encoder.layer.0.mlp.weights_out.weight\" is missing");
    // A SwiGLU file into a GELU model.
    vit_parity_write_variant(&fixture, path, "dinov2_g_reg4.", NULL, NULL, NULL);
    expect_load_error(path, "dinov2_g_reg4.", 1, "a SwiGLU MLP in the file, GELU in");
    unlink(path);
}

int main(void) {
    const struct CMUnitTest once[] = {
        cmocka_unit_test(test_giant_presets),
        cmocka_unit_test(test_export_reload),
        cmocka_unit_test(test_wrong_files),
    };
    const struct CMUnitTest models[] = {
        cmocka_unit_test(test_timm_giant),
        cmocka_unit_test(test_transformers_giant),
        cmocka_unit_test(test_dinov2_giant_reg4),
    };
    int failures = cmocka_run_group_tests_name("vit giant", once, setup_cpu, teardown);
    failures += cmocka_run_group_tests_name("vit giant cpu", models, setup_cpu, teardown);
    failures += cmocka_run_group_tests_name("vit giant ref", models, setup_ref, teardown);
    return failures;
}
