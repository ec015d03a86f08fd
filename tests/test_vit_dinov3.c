// DINOv3 ViTs (src/nn/vit.h, config.rope) against transformers'
// DINOv3ViTModel and timm's vit_*_dinov3 (tests/fixtures/dinov3.safetensors,
// tools/make_dinov3_fixtures.py): two tiny random-weight models (GELU and
// SwiGLU MLPs, 4 registers, RoPE) loaded from each naming DINOv3 weights
// come in (DINOv3's own with its bf16 periods and masked key bias,
// transformers 4.56's and 5.x's, timm's Eva), their normalised tokens at the
// native size and at another multiple of the patch size, the gradients of
// sum(tokens * w); the timm (Eva) export and its reload; finite
// differences through a whole model with the training-time RoPE rescale
// and drop path on; the presets' parameter counts; the one-line errors of
// wrong files. Model tests run on the cpu backend (the fp32 target of the
// 1e-5 requirement) and on the ref backend.
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
#include "nn/vit.h"
#include "nn/vit_weights.h"
#include "nn/weights.h"
#include "vit_fixture.h"
#include "vit_parity.h"

#define DINOV3_FIXTURE_PATH "tests/fixtures/dinov3.safetensors"
#define BATCH VIT_PARITY_BATCH
#define FIXTURE_HEADS 2  // width 32: transformers' and timm's files do not say

VIT_PARITY_TEST_STATE(DINOV3_FIXTURE_PATH)

// The fixture models' sizes: gelu at 32 (grid 4) and 56 (7), swiglu at 32 and 48.
static int second_size(const char *model) { return strcmp(model, "gelu") == 0 ? 56 : 48; }

// A model of the file under `prefix` ("gelu/hf.", ...), slots at 32 px and
// the model's second size, the weights loaded by name. heads 0: as read.
static void build_from_file(Vit *model, const char *prefix, int heads, float rope_rescale,
                            VitConfig *config) {
    ErrorMessage err = {{0}};
    if (vit_config_from_weights(&fixture, prefix, config, &err)) fail_msg("%s", err.text);
    if (heads) config->heads = heads;
    config->rope_rescale = rope_rescale;
    const char *model_name = strncmp(prefix, "gelu", 4) == 0 ? "gelu" : "swiglu";
    const VitInputShape shapes[] = {{BATCH, 32}, {BATCH, second_size(model_name)}};
    if (vit_declare(model, backend, config, &err) || vit_allocate(model, shapes, 2, &err) ||
        vit_load_from(model, &fixture, prefix, &err))
        fail_msg("%s: %s", prefix, err.text);
}

// An eval forward of slot `slot`, its tokens against "<model>/<reference>/<size>/tokens".
static void check_eval(Vit *model, const char *model_name, const char *reference, int slot,
                       int size) {
    char input_name[32], name[96];
    snprintf(input_name, sizeof input_name, "dinov3_%s", model_name);
    snprintf(name, sizeof name, "%s/%s/%d/tokens", model_name, reference, size);
    backend->op.free(backend, vit_parity_forward(&parity, model, input_name, name, slot, size, 0));
}

// ---- transformers DINOv3ViTModel -------------------------------------------------------

// transformers' naming (gelu: 4.56's layer.N, swiglu: 5.x's model.layer.N):
// the architecture read, the tokens of both references at both sizes, then
// a training forward (rescale off) and every parameter's gradient.
static void check_transformers(const char *model_name) {
    char prefix[32], input_name[32], tokens_name[96], loss[64], grad_prefix[64];
    snprintf(prefix, sizeof prefix, "%s/hf.", model_name);
    VitConfig config;
    Vit model;
    build_from_file(&model, prefix, FIXTURE_HEADS, 0.0f, &config);
    const int swiglu = strcmp(model_name, "swiglu") == 0, size = second_size(model_name);
    assert_int_equal(config.rope, 1);
    assert_int_equal(config.swiglu, swiglu);
    assert_int_equal(config.mlp_hidden, swiglu ? 48 : 64);
    assert_int_equal(config.register_tokens, 4);
    assert_int_equal(config.embed_dim, 32);
    assert_int_equal(config.patch_size, 8);
    assert_int_equal(config.qkv_bias, VIT_QKV_BIAS_NO_KEY);
    assert_int_equal(config.layer_scale, 1);
    assert_int_equal(config.pool, VIT_POOL_CLS);
    assert_true(config.norm_eps == 1e-5f);
    check_eval(&model, model_name, "hf", 0, 32);
    check_eval(&model, model_name, "timm", 0, 32);
    check_eval(&model, model_name, "timm", 1, size);
    snprintf(input_name, sizeof input_name, "dinov3_%s", model_name);
    snprintf(tokens_name, sizeof tokens_name, "%s/hf/%d/tokens", model_name, size);
    snprintf(loss, sizeof loss, "loss/dinov3_%s/%d", model_name, size);
    snprintf(grad_prefix, sizeof grad_prefix, "%s/hf/%d", model_name, size);
    float *input = vit_parity_forward(&parity, &model, input_name, tokens_name, 1, size, 1);
    vit_parity_check_backward(&parity, &model, 1, loss, grad_prefix);
    backend->op.free(backend, input);
    vit_free(&model);
}

static void test_transformers_gelu(void **state) { check_transformers("gelu"); }
static void test_transformers_swiglu(void **state) { check_transformers("swiglu"); }

// ---- timm's Eva and DINOv3's own naming ---------------------------------------------------

// Both models of `naming` ("timm", "dinov3"), eval forwards (no rescale
// although the models have one) against that naming's reference.
static void check_naming(const char *naming, int heads) {
    const char *const models[] = {"gelu", "swiglu"};
    for (int m = 0; m < 2; m++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "%s/%s.", models[m], naming);
        VitConfig config;
        Vit model;
        build_from_file(&model, prefix, heads, 2.0f, &config);
        assert_int_equal(config.heads, 2);
        assert_int_equal(config.swiglu, m);
        assert_int_equal(config.qkv_bias, VIT_QKV_BIAS_NO_KEY);
        float bias[96];  // a key bias in the file (DINOv3's, masked) is not loaded
        const Parameter *param = parameter_find(&model.params, "blocks.1.attn.qkv.bias");
        backend->op.download(backend, bias, param->value, sizeof bias);
        for (int i = 32; i < 64; i++) assert_true(bias[i] == 0.0f);
        if (strcmp(naming, "dinov3") == 0) {  // the file's periods (bf16 values) are used
            const float expected_periods[4] = {1.0f, 3.15625f, 10.0f, 31.625f};
            assert_memory_equal(model.rope_periods, expected_periods, sizeof expected_periods);
        }
        check_eval(&model, models[m], naming, 0, 32);
        check_eval(&model, models[m], naming, 1, second_size(models[m]));
        vit_free(&model);
    }
}

static void test_timm_eva(void **state) { check_naming("timm", FIXTURE_HEADS); }

// DINOv3's naming: the heads from the number of periods, the mask token skipped.
static void test_dinov3_naming(void **state) { check_naming("dinov3", 0); }

// ---- export ----------------------------------------------------------------------------------

// vit_save writes timm's Eva names (gamma_1, q_bias / v_bias, fc1_g / fc1_x);
// the file loads back into the same tokens, bit for bit; a non-zero key bias
// is refused.
static void test_export_eva(void **state) {
    ErrorMessage err = {{0}};
    const char *path = "build/test_vit_dinov3_export.safetensors";
    VitConfig config;
    Vit model, loaded;
    build_from_file(&model, "swiglu/hf.", FIXTURE_HEADS, 0.0f, &config);
    if (vit_save(&model, path, NULL, &err)) fail_msg("%s", err.text);
    SafeTensors file;
    if (safetensors_read(path, &file, &err)) fail_msg("%s", err.text);
    const char *expected[] = {"blocks.0.gamma_1", "blocks.1.gamma_2", "blocks.0.attn.q_bias",
                              "blocks.0.attn.v_bias", "blocks.1.mlp.fc1_g.weight",
                              "blocks.1.mlp.fc1_x.bias", "blocks.1.mlp.fc2.weight",
                              "reg_token", "cls_token", "norm.bias"};
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
        if (!safetensors_find(&file, expected[i])) fail_msg("no \"%s\" in the export", expected[i]);
    assert_null(safetensors_find(&file, "blocks.0.attn.qkv.bias"));
    assert_null(safetensors_find(&file, "blocks.0.mlp.fc1.weight"));
    assert_string_equal(safetensors_metadata(&file, "num_heads"), "2");
    assert_null(safetensors_metadata(&file, "timm_model"));  // not a preset's size
    VitConfig reread;
    if (vit_config_from_weights(&file, "", &reread, &err)) fail_msg("%s", err.text);
    assert_int_equal(reread.heads, 2);
    assert_int_equal(reread.swiglu, 1);
    const VitInputShape shape = {BATCH, 32};
    if (vit_declare(&loaded, backend, &reread, &err) || vit_allocate(&loaded, &shape, 1, &err) ||
        vit_load_from(&loaded, &file, "", &err))
        fail_msg("%s", err.text);
    float *input = vit_fixture_input(backend, "dinov3_swiglu", 32, BATCH);
    const size_t n = (size_t)BATCH * vit_slot_tokens(&model, 0) * 32;
    float *before = malloc(n * sizeof *before), *after = malloc(n * sizeof *after);
    if (vit_forward(&model, 0, BATCH, (const Act *)input, 0, &err) ||
        vit_forward(&loaded, 0, BATCH, (const Act *)input, 0, &err))
        fail_msg("%s", err.text);
    backend->op.download(backend, before, vit_tokens(&model, 0), n * sizeof *before);
    backend->op.download(backend, after, vit_tokens(&loaded, 0), n * sizeof *after);
    assert_memory_equal(before, after, n * sizeof *before);
    // A key bias (a DINOv3 file without bias_mask may have one) cannot go to timm.
    const Parameter *bias = parameter_find(&model.params, "blocks.1.attn.qkv.bias");
    backend->op.fill(backend, bias->value + 40, 0.5f, 1);
    assert_int_equal(vit_save(&model, path, NULL, &err), -1);
    assert_non_null(strstr(err.text, "\"blocks.1.attn.qkv.bias\" has a non-zero key bias"));
    free(before);
    free(after);
    backend->op.free(backend, input);
    safetensors_free(&file);
    vit_free(&loaded);
    vit_free(&model);
    unlink(path);
}

// The periods live in the buffer rope.periods, which checkpoints keep: a
// DINOv3 file's (bf16) periods survive a save and a load into a model built
// from the architecture alone (what --checkpoint then --resume does), and
// the tables follow the buffer on the next forward.
static void test_periods_follow_the_buffer(void **state) {
    ErrorMessage err = {{0}};
    const char *path = "build/test_vit_dinov3_periods.safetensors";
    VitConfig config;
    Vit loaded, fresh;
    build_from_file(&loaded, "gelu/dinov3.", 0, 2.0f, &config);
    if (weights_save(path, &loaded.params, &loaded.buffers, 0, NULL, &err)) fail_msg("%s", err.text);
    const VitInputShape shapes[] = {{BATCH, 32}, {BATCH, 56}};
    if (vit_declare(&fresh, backend, &config, &err) || vit_allocate(&fresh, shapes, 2, &err) ||
        weights_load(path, &fresh.params, &fresh.buffers, NULL, NULL, &err))
        fail_msg("%s", err.text);
    check_eval(&fresh, "gelu", "dinov3", 1, 56);
    const float expected_periods[4] = {1.0f, 3.15625f, 10.0f, 31.625f};
    assert_memory_equal(fresh.rope_periods, expected_periods, sizeof expected_periods);
    // Our checkpoint naming (timm's, without pos_embed) reads the buffer back too.
    SafeTensors file;
    if (safetensors_read(path, &file, &err)) fail_msg("%s", err.text);
    VitConfig reread;
    if (vit_config_from_weights(&file, "", &reread, &err)) fail_msg("%s", err.text);
    assert_int_equal(reread.heads, 2);  // from the number of periods
    safetensors_free(&file);
    vit_free(&fresh);
    vit_free(&loaded);
    unlink(path);
}

// ---- finite differences, RoPE rescale and drop path on -----------------------------------

// A RoPE + SwiGLU model with trained key bias: finite differences of a
// training forward (per-block rescale draws and drop-path masks of forward
// 7) against backward; the same training forward twice gives the same
// tokens, and they differ from an eval forward's (rescale and drop path on).
static void test_whole_model_finite_differences(void **state) {
    ErrorMessage err = {{0}};
    VitConfig config = vit_fixture_config(4, 16, 2, 0, VIT_POS_INTERP_OFFSET);
    config.class_pos = 0;
    config.rope = 1;
    config.rope_base = 100.0f;
    config.rope_rescale = 2.0f;
    config.swiglu = 1;
    config.mlp_hidden = 24;
    config.norm_eps = 1e-5f;
    config.drop_path_rate = 0.5f;
    vit_config_name(&config);
    const int size = 12;  // grid 3
    const VitInputShape shape = {BATCH, size};
    VitWholeModel w = {.backend = backend};
    if (vit_declare(&w.model, backend, &config, &err) ||
        vit_allocate(&w.model, &shape, 1, &err) ||
        vit_fixture_init_weights(&w.model.params, &err))
        fail_msg("%s", err.text);
    const char *names[] = {"cls_token", "reg_token", "blocks.1.ls1.gamma",
                           "blocks.1.attn.qkv.weight", "blocks.0.attn.qkv.bias",
                           "blocks.0.mlp.fc1.weight", "blocks.1.mlp.fc2.weight",
                           "patch_embed.proj.weight"};
    vit_whole_model_check(&w, "dinov3_fd", size, names, (int)(sizeof names / sizeof names[0]));

    float *input = vit_fixture_input(backend, "dinov3_fd", size, BATCH);
    const size_t n = (size_t)BATCH * vit_slot_tokens(&w.model, 0) * 16;
    float *runs[3];
    for (int r = 0; r < 3; r++) {
        w.model.training_forwards = 3;
        if (vit_forward(&w.model, 0, BATCH, (const Act *)input, r < 2, &err))
            fail_msg("%s", err.text);
        runs[r] = malloc(n * sizeof *runs[r]);
        backend->op.download(backend, runs[r], vit_tokens(&w.model, 0), n * sizeof(float));
    }
    assert_memory_equal(runs[0], runs[1], n * sizeof(float));
    assert_true(memcmp(runs[0], runs[2], n * sizeof(float)) != 0);
    for (int r = 0; r < 3; r++) free(runs[r]);
    backend->op.free(backend, input);
    vit_free(&w.model);
}

// DINOv3's mask_k_bias: the key part of the qkv bias gets no gradient.
static void test_key_bias_gets_no_gradient(void **state) {
    ErrorMessage err = {{0}};
    VitConfig config;
    Vit model;
    build_from_file(&model, "gelu/hf.", FIXTURE_HEADS, 2.0f, &config);
    float *input = vit_fixture_input(backend, "dinov3_gelu", 32, BATCH);
    if (vit_forward(&model, 0, BATCH, (const Act *)input, 1, &err)) fail_msg("%s", err.text);
    const size_t n = (size_t)BATCH * vit_slot_tokens(&model, 0) * 32;
    float *dtokens = backend->op.alloc(backend, n * sizeof *dtokens);
    backend->op.fill(backend, dtokens, 1.0f, n);
    parameter_set_zero_grads(&model.params);
    if (vit_backward_tokens(&model, 0, (const Act *)dtokens, &err)) fail_msg("%s", err.text);
    float grad[96];
    const Parameter *bias = parameter_find(&model.params, "blocks.0.attn.qkv.bias");
    backend->op.download(backend, grad, bias->grad, sizeof grad);
    double query = 0.0, value = 0.0;
    for (int i = 0; i < 32; i++) {
        query += fabs(grad[i]);
        value += fabs(grad[64 + i]);
        assert_true(grad[32 + i] == 0.0f);
    }
    assert_true(query > 0.0 && value > 0.0);
    backend->op.free(backend, dtokens);
    backend->op.free(backend, input);
    vit_free(&model);
}

// ---- presets -------------------------------------------------------------------------------

// Parameter counts at 224 px: timm's vit_*_dinov3_qkvb (timm 1.0.31) plus
// the key biases timm does not store (depth x width); the two timm does not
// have from transformers' DINOv3ViTModel (5.23) minus its mask token plus
// the key biases. Each name survives vit_config_name.
static void test_dinov3_presets(void **state) {
    const struct { const char *name; size_t count; } presets[] = {
        {"dinov3/vitt16", 5491968},      {"dinov3/vitt16plus", 7266048},
        {"dinov3/vits16", 21600768},     {"dinov3/vits16plus", 28697088},
        {"dinov3/vitb16", 85668864},     {"dinov3/vitl16", 303153152},
        {"dinov3/vitl16plus", 403914752}, {"dinov3/vith16plus", 840632320},
    };
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        VitConfig config;
        Vit model;
        vit_parity_declare_preset(backend, presets[i].name, presets[i].count, &config, &model);
        assert_null(parameter_find(&model.params, "pos_embed"));
        VitConfig renamed = config;
        vit_config_name(&renamed);
        assert_string_equal(renamed.name, presets[i].name);
        assert_true(vit_is_preset_name(presets[i].name));
        vit_free(&model);
    }
    ErrorMessage err = {{0}};
    VitConfig config;
    assert_int_equal(vit_config_preset("dinov3/vits16", 100, &config, &err), -1);
    assert_non_null(strstr(err.text, "multiple of the patch size 16"));
    assert_int_equal(vit_config_preset("dinov3/vits14", 224, &config, &err), -1);
    assert_non_null(strstr(err.text, "unknown ViT 'dinov3/vits14'"));
}

// ---- wrong files ---------------------------------------------------------------------------

// Writes the tensors under `prefix` of the fixture (renamed without it) to
// path, except `drop`, with `rename_from` named `rename_to` (either may be NULL).
static void write_variant(const char *path, const char *prefix, const char *drop,
                          const char *rename_from, const char *rename_to) {
    vit_parity_write_variant(&fixture, path, prefix, drop, rename_from, rename_to);
}

// The one-line error of loading path into the fixture's GELU model
// (config read from the file itself when from_file).
static void expect_load_error(const char *path, int from_file, const char *expected) {
    ErrorMessage err = {{0}};
    SafeTensors file;
    if (safetensors_read(path, &file, &err)) fail_msg("%s", err.text);
    VitConfig config;
    Vit model;
    if (vit_config_from_weights(&fixture, "gelu/dinov3.", &config, &err)) fail_msg("%s", err.text);
    const VitInputShape shape = {BATCH, 32};
    int status = from_file ? vit_config_from_weights(&file, "", &config, &err) : 0;
    if (!status) {
        if (vit_declare(&model, backend, &config, &err) || vit_allocate(&model, &shape, 1, &err))
            fail_msg("%s", err.text);
        status = vit_load_from(&model, &file, "", &err);
        vit_free(&model);
    }
    assert_int_equal(status, -1);
    if (!strstr(err.text, expected)) fail_msg("expected \"%s\" in: %s", expected, err.text);
    assert_null(strchr(err.text, '\n'));
    safetensors_free(&file);
}

static void test_wrong_files(void **state) {
    const char *path = "build/test_vit_dinov3_wrong.safetensors";
    write_variant(path, "gelu/dinov3.", "blocks.1.attn.qkv.bias_mask", NULL, NULL);
    // a mask missing in one block: the names of block 0 say there are masks
    expect_load_error(path, 0, "\"blocks.1.attn.qkv.bias_mask\" is missing");
    write_variant(path, "gelu/dinov3.", "blocks.1.mlp.fc2.weight", NULL, NULL);
    expect_load_error(path, 0, "\"blocks.1.mlp.fc2.weight\" is missing");
    write_variant(path, "gelu/dinov3.", NULL, "norm.bias", "cls_norm.weight");
    expect_load_error(path, 1, "untied class-token norm (\"cls_norm.weight\"");
    write_variant(path, "gelu/dinov3.", NULL, "mask_token", "extra.weight");
    expect_load_error(path, 0, "\"extra.weight\" is not part of");
    write_variant(path, "swiglu/dinov3.", NULL, NULL, NULL);  // into the GELU model
    expect_load_error(path, 0, "a SwiGLU MLP in the file, GELU in");
    unlink(path);
}

int main(void) {
    const struct CMUnitTest once[] = {
        cmocka_unit_test(test_dinov3_presets),
        cmocka_unit_test(test_wrong_files),
        cmocka_unit_test(test_export_eva),
    };
    const struct CMUnitTest models[] = {
        cmocka_unit_test(test_transformers_gelu),
        cmocka_unit_test(test_transformers_swiglu),
        cmocka_unit_test(test_timm_eva),
        cmocka_unit_test(test_dinov3_naming),
        cmocka_unit_test(test_key_bias_gets_no_gradient),
        cmocka_unit_test(test_periods_follow_the_buffer),
        cmocka_unit_test(test_whole_model_finite_differences),
    };
    int failures = cmocka_run_group_tests_name("dinov3", once, setup_cpu, teardown);
    failures += cmocka_run_group_tests_name("dinov3 cpu", models, setup_cpu, teardown);
    failures += cmocka_run_group_tests_name("dinov3 ref", models, setup_ref, teardown);
    return failures;
}
