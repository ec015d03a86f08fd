// ViT weight files (src/nn/vit_weights.h): timm export and reload, the
// DINOv2 layout (register_tokens, chunked blocks, mask_token, positions that
// include the class token's) giving the same model as timm's, architecture
// detection, a position grid resized at load (LightlyTrain's hook), and
// one-line errors that name the first mismatching tensor.
// The transformers naming is checked against transformers itself in
// tests/test_vit.c.
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
#include "gradcheck.h"
#include "nn/vit.h"
#include "nn/vit_weights.h"
#include "nn/weights.h"
#include "vit_fixture.h"

#define BATCH 2
#define SIZE 56

static Backend *backend;

static int setup(void **state) {
    ErrorMessage err = {{0}};
    backend = backend_create("cpu", 2, &err);
    return backend ? 0 : -1;
}

static int teardown(void **state) {
    backend_destroy(backend);
    return 0;
}

static void temp_path(char *path, size_t size, const char *what) {
    snprintf(path, size, "/tmp/ltc-test-vit-%d-%s.safetensors", (int)getpid(), what);
}

// The fixture's register model (4 registers, no class-token position), one
// 56 px slot, fixture-init weights.
static void make_model(Vit *model, int with_weights) {
    ErrorMessage err = {{0}};
    const VitConfig config = vit_fixture_config(14, 64, 4, 4, VIT_POS_INTERP_ANTIALIAS);
    const VitInputShape shape = {BATCH, SIZE};
    if (vit_declare(model, backend, &config, &err) || vit_allocate(model, &shape, 1, &err) ||
        (with_weights && vit_fixture_init_weights(&model->params, &err)))
        fail_msg("%s", err.text);
}

static float *download_tokens(Vit *model) {
    ErrorMessage err = {{0}};
    float *input = vit_fixture_input(backend, "timm_p14_reg4", SIZE, BATCH);
    if (vit_forward(model, 0, BATCH, (const Act *)input, 0, &err)) fail_msg("%s", err.text);
    const size_t n = (size_t)BATCH * vit_slot_tokens(model, 0) * model->feature_dim;
    float *tokens = malloc(n * sizeof *tokens);
    backend->op.download(backend, tokens, vit_tokens(model, 0), n * sizeof *tokens);
    backend->op.free(backend, input);
    return tokens;
}

// Our own tables' values, host copies in our layout.
static float *download_parameters(const Vit *model) {
    const ParameterSet *params = &model->params;
    float *values = malloc(params->total * sizeof *values);
    backend->op.download(backend, values, params->values, params->total * sizeof *values);
    return values;
}

// Export, then load into a fresh model: every value the same, and the
// architecture read back from the file.
static void test_save_reload(void **state) {
    ErrorMessage err = {{0}};
    char path[128];
    temp_path(path, sizeof path, "timm");
    Vit saved, loaded;
    make_model(&saved, 1);
    if (vit_save(&saved, path, NULL, &err)) fail_msg("%s", err.text);
    SafeTensors file;
    if (safetensors_read(path, &file, &err)) fail_msg("%s", err.text);
    VitConfig config;
    if (vit_config_from_weights(&file, "", &config, &err)) fail_msg("%s", err.text);
    assert_int_equal(config.heads, 2);  // from the metadata
    assert_int_equal(config.register_tokens, 4);
    assert_int_equal(config.class_pos, 0);
    assert_int_equal(config.pos_grid, 4);
    assert_int_equal(config.embed_dim, 64);
    assert_int_equal(config.pos_interpolation, VIT_POS_INTERP_ANTIALIAS);
    // timm's names and order: the state dict of vit_small_patch14_reg4_dinov2.
    assert_string_equal(file.tensors[0].name, "cls_token");
    assert_non_null(safetensors_find(&file, "blocks.1.ls2.gamma"));
    assert_non_null(safetensors_find(&file, "reg_token"));
    const SafeTensor *patch = safetensors_find(&file, "patch_embed.proj.weight");
    assert_int_equal(patch->shape[1], 3);  // OIHW
    safetensors_free(&file);
    make_model(&loaded, 0);
    if (vit_load(&loaded, path, &err)) fail_msg("%s", err.text);
    float *a = download_parameters(&saved), *b = download_parameters(&loaded);
    assert_memory_equal(a, b, saved.params.total * sizeof *a);
    free(a);
    free(b);
    vit_free(&saved);
    vit_free(&loaded);
    unlink(path);
}

// Writes the model's weights in DINOv2's layout: register_tokens, blocks.0.N
// (LightlyTrain's one chunk), mask_token, and pos_embed with a class-token
// row r, cls_token - r in place of the folded class token.
static void save_dinov2_layout(const Vit *model, const char *path) {
    const ParameterSet *params = &model->params;
    float *values = download_parameters(model);
    const int dim = model->feature_dim;
    SafeTensorWrite *entries = calloc((size_t)params->count + 1, sizeof *entries);
    char (*names)[96] = calloc((size_t)params->count + 1, sizeof *names);
    float *torch = malloc(params->total * sizeof *torch);
    float *pos = NULL, *cls = NULL, mask[64] = {0};
    for (int i = 0; i < params->count; i++) {
        const Parameter *param = &params->params[i];
        SafeTensorWrite *entry = &entries[i];
        float *data = torch + param->offset;
        weights_to_torch_layout(param, values + param->offset, data);
        int block = 0, consumed = 0;
        if (sscanf(param->name, "blocks.%d.%n", &block, &consumed) == 1 && consumed)
            snprintf(names[i], sizeof names[i], "blocks.0.%d.%s", block, param->name + consumed);
        else if (!strcmp(param->name, "reg_token"))
            snprintf(names[i], sizeof names[i], "register_tokens");
        else snprintf(names[i], sizeof names[i], "%s", param->name);
        *entry = (SafeTensorWrite){.name = names[i], .dtype = SAFE_F32, .rank = param->rank,
                                   .data = data};
        for (int d = 0; d < param->rank; d++) entry->shape[d] = param->torch_shape[d];
        if (!strcmp(param->name, "pos_embed")) {
            pos = malloc((param->count + dim) * sizeof *pos);
            for (int c = 0; c < dim; c++) pos[c] = 0.25f - 0.01f * c;  // the class token's row
            memcpy(pos + dim, data, param->count * sizeof *pos);
            entry->data = pos;
            entry->shape[1] += 1;
        }
        if (!strcmp(param->name, "cls_token")) cls = data;
    }
    for (int c = 0; c < dim; c++) cls[c] -= 0.25f - 0.01f * c;
    entries[params->count] = (SafeTensorWrite){.name = "mask_token", .dtype = SAFE_F32, .rank = 2,
                                               .shape = {1, dim}, .data = mask};
    ErrorMessage err = {{0}};
    if (safetensors_write(path, entries, params->count + 1, NULL, 0, &err))
        fail_msg("%s", err.text);
    free(values);
    free(entries);
    free(names);
    free(torch);
    free(pos);
}

// The DINOv2 layout loads into the same model as timm's: the same tokens up
// to the rounding of cls - r + r (one ulp of the class token, which
// LayerNorm and attention carry to ~1e-6 of the tokens).
static void test_dinov2_layout(void **state) {
    ErrorMessage err = {{0}};
    char path[128];
    temp_path(path, sizeof path, "dinov2");
    Vit reference, loaded;
    make_model(&reference, 1);
    save_dinov2_layout(&reference, path);
    SafeTensors file;
    if (safetensors_read(path, &file, &err)) fail_msg("%s", err.text);
    VitConfig config;
    if (vit_config_from_weights(&file, "", &config, &err)) fail_msg("%s", err.text);
    assert_int_equal(config.register_tokens, 4);
    assert_int_equal(config.class_pos, 0);
    assert_int_equal(config.pos_grid, 4);
    assert_int_equal(config.depth, 2);
    safetensors_free(&file);
    make_model(&loaded, 0);
    if (vit_load(&loaded, path, &err)) fail_msg("%s", err.text);
    float *expected = download_tokens(&reference), *actual = download_tokens(&loaded);
    const size_t n = (size_t)BATCH * vit_slot_tokens(&reference, 0) * reference.feature_dim;
    assert_int_equal(gradcheck_count_mismatches("dinov2 layout tokens", n, actual, expected, 1e-5,
                                                1e-5),
                     0);
    free(expected);
    free(actual);
    vit_free(&reference);
    vit_free(&loaded);
    unlink(path);
}

// A file with a 4 x 4 position grid into a model with a 6 x 6 one (as a
// DINOv2 checkpoint at 518 px into a 224 px model): the positions are
// resized at load with PyTorch's bicubic to the new size (the matrices are
// checked against torch in test_vit.c), everything else loads as it is.
static void test_load_resizes_position_grid(void **state) {
    ErrorMessage err = {{0}};
    char path[128];
    temp_path(path, sizeof path, "grid4");
    Vit small, large;
    make_model(&small, 1);
    if (vit_save(&small, path, NULL, &err)) fail_msg("%s", err.text);
    VitConfig config = small.config;
    config.pos_grid = 6;
    const VitInputShape shape = {BATCH, SIZE};
    if (vit_declare(&large, backend, &config, &err) || vit_allocate(&large, &shape, 1, &err) ||
        vit_load(&large, path, &err))
        fail_msg("%s", err.text);
    const int dim = small.feature_dim;
    float before[16 * 64], after[36 * 64];
    backend->op.download(backend, before, small.pos_embed, sizeof before);
    backend->op.download(backend, after, large.pos_embed, sizeof after);
    double rows[6 * 4];
    assert_int_equal(vit_pos_axis_weights(VIT_POS_INTERP_BICUBIC, 4, 6, rows, NULL), 0);
    for (int oy = 0; oy < 6; oy++)
        for (int ox = 0; ox < 6; ox++)
            for (int c = 0; c < dim; c++) {
                double expected = 0.0;
                for (int iy = 0; iy < 4; iy++)
                    for (int ix = 0; ix < 4; ix++)
                        expected += rows[oy * 4 + iy] * rows[ox * 4 + ix] *
                                    before[(iy * 4 + ix) * dim + c];
                assert_float_equal(after[(oy * 6 + ox) * dim + c], expected, 1e-5);
            }
    float cls_small[64], cls_large[64];
    backend->op.download(backend, cls_small, small.cls_token, sizeof cls_small);
    backend->op.download(backend, cls_large, large.cls_token, sizeof cls_large);
    assert_memory_equal(cls_small, cls_large, sizeof cls_small);
    vit_free(&small);
    vit_free(&large);
    unlink(path);
}

// Rewrites the exported file with one change; returns the load's message.
typedef enum { DROP, RESHAPE, EXTRA, RETYPE } Damage;

static void load_damaged(const char *victim, Damage damage, char *message, size_t size) {
    ErrorMessage err = {{0}};
    char path[128];
    temp_path(path, sizeof path, "damaged");
    Vit model;
    make_model(&model, 1);
    if (vit_save(&model, path, NULL, &err)) fail_msg("%s", err.text);
    SafeTensors file;
    if (safetensors_read(path, &file, &err)) fail_msg("%s", err.text);
    SafeTensorWrite entries[64];
    int count = 0;
    static int64_t extra[4] = {1, 2, 3, 4};
    for (int t = 0; t < file.count && count < 62; t++) {
        const SafeTensor *tensor = &file.tensors[t];
        const int hit = !strcmp(tensor->name, victim);
        if (hit && damage == DROP) continue;
        SafeTensorWrite *entry = &entries[count++];
        *entry = (SafeTensorWrite){.name = tensor->name, .dtype = tensor->dtype,
                                   .rank = tensor->rank, .data = safetensors_data(&file, tensor)};
        memcpy(entry->shape, tensor->shape, sizeof entry->shape);
        if (hit && damage == RESHAPE) {  // the same bytes, another shape
            entry->shape[0] = tensor->shape[0] * tensor->shape[1];
            entry->rank = tensor->rank - 1;
            for (int d = 1; d < entry->rank; d++) entry->shape[d] = tensor->shape[d + 1];
        }
        if (hit && damage == RETYPE) {  // I64 over the same bytes (half the elements)
            entry->dtype = SAFE_I64;
            entry->shape[entry->rank - 1] /= 2;
        }
    }
    if (damage == EXTRA)
        entries[count++] = (SafeTensorWrite){.name = victim, .dtype = SAFE_I64, .rank = 1,
                                             .shape = {4}, .data = extra};
    if (safetensors_write(path, entries, count, NULL, 0, &err)) fail_msg("%s", err.text);
    safetensors_free(&file);
    vit_free(&model);
    make_model(&model, 0);
    assert_int_equal(vit_load(&model, path, &err), -1);
    snprintf(message, size, "%s", err.text);
    vit_free(&model);
    unlink(path);
}

static void expect_message(const char *victim, Damage damage, const char *expected) {
    char message[1024];
    load_damaged(victim, damage, message, sizeof message);
    fprintf(stderr, "  %s\n", message);
    if (!strstr(message, expected)) fail_msg("message lacks \"%s\": %s", expected, message);
    assert_null(strchr(message, '\n'));
}

static void test_load_errors(void **state) {
    expect_message("blocks.1.attn.qkv.bias", DROP, "\"blocks.1.attn.qkv.bias\" is missing");
    expect_message("blocks.0.mlp.fc1.weight", RESHAPE,
                   "\"blocks.0.mlp.fc1.weight\" is (16384) in the file, the model needs (256, 64)");
    expect_message("blocks.0.norm2.bias", RETYPE, "\"blocks.0.norm2.bias\" has dtype I64");
    expect_message("blocks.0.attn.extra", EXTRA, "\"blocks.0.attn.extra\" is not part of");
    expect_message("blocks.1.norm1.weight", DROP, "1 blocks in the file, 2 in");
    // A ResNet file is not a ViT.
    ErrorMessage err = {{0}};
    SafeTensors file;
    if (safetensors_read("tests/fixtures/resnet18.safetensors", &file, &err))
        fail_msg("%s", err.text);
    VitConfig config;
    assert_int_equal(vit_config_from_weights(&file, "", &config, &err), -1);
    assert_non_null(strstr(err.text, "not a ViT"));
    assert_int_equal(vit_weights_detect(&file, ""), 0);
    safetensors_free(&file);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_reload),
        cmocka_unit_test(test_dinov2_layout),
        cmocka_unit_test(test_load_resizes_position_grid),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
