// Backbones loaded from a file (train/model_source.h, nn/state_dict_backbone.h):
// ResNet depth detection for all five depths (and what is no ResNet), and
// backbones loaded from a .ckpt (student / teacher / the default part) and
// from a torchvision safetensors with fc.* giving the same features as the
// source model; a checkpoint's recorded model and input checked against its
// weights. The checkpoint format itself: test_checkpoint.c.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend_fixture.h"
#include "image_fixtures.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "nn/state_dict_backbone.h"
#include "train/checkpoint.h"
#include "train/model_source.h"
#include "util/rng.h"

#define ASSERT_OK(call, err)                                   \
    do {                                                       \
        if ((call) != 0) fail_msg("%s: %s", #call, (err).text); \
    } while (0)

// ---- ResNet depth detection -------------------------------------------------------------

// The tensor list a state dict of `depth` would have (names and torch shapes
// only: detection reads no data), with a name prefix.
static SafeTensors declared_wide_tensors(int depth, int width, const char *prefix,
                                         const char *skip) {
    Resnet model;
    ErrorMessage err = {{0}};
    ResnetConfig config = resnet_config_default(depth);
    config.width_factor = width;
    ASSERT_OK(resnet_declare(&model, fixture_backend, &config, &err), err);
    SafeTensors file = {0};
    file.tensors = calloc((size_t)(model.params.count + model.buffers.count), sizeof *file.tensors);
    assert_non_null(file.tensors);
    const ParameterSet *sets[2] = {&model.params, &model.buffers};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sets[s]->count; i++) {
            const Parameter *p = &sets[s]->params[i];
            if (skip && strncmp(p->name, skip, strlen(skip)) == 0) continue;
            SafeTensor *t = &file.tensors[file.count++];
            snprintf(t->name, sizeof t->name, "%s%s", prefix, p->name);
            t->dtype = SAFE_F32;
            t->rank = p->rank;
            for (int d = 0; d < p->rank; d++) t->shape[d] = p->torch_shape[d];
        }
    resnet_free(&model);
    return file;
}
static SafeTensors declared_tensors(int depth, const char *prefix, const char *skip) {
    return declared_wide_tensors(depth, 1, prefix, skip);
}

static void test_detects_all_depths(void **state) {
    (void)state;
    const int depths[] = {18, 26, 34, 50, 101, 152, 200};
    ErrorMessage err = {{0}};
    for (int i = 0; i < 7; i++) {
        for (int prefixed = 0; prefixed < 2; prefixed++) {
            const char *prefix = prefixed ? "teacher_backbone." : "";
            SafeTensors file = declared_tensors(depths[i], prefix, NULL);
            int depth = 0;
            ASSERT_OK(state_dict_resnet_depth(&file, prefix, &depth, &err), err);
            assert_int_equal(depth, depths[i]);
            // Under another prefix there is no backbone.
            assert_int_equal(state_dict_resnet_depth(&file, "backbone.", &depth, &err), -1);
            assert_non_null(strstr(err.text, "no stem conv \"backbone.conv1.weight\""));
            free(file.tensors);
        }
    }
    // A block missing: 2-2-1-2 is no ResNet.
    SafeTensors broken = declared_tensors(18, "", "layer3.1.");
    int depth = 0;
    assert_int_equal(state_dict_resnet_depth(&broken, "", &depth, &err), -1);
    assert_non_null(strstr(err.text, "2-2-1-2 basic blocks"));
    free(broken.tensors);
    // The wide ResNets: depth from the blocks, width from the first bottleneck.
    for (int wide = 1; wide <= 2; wide++) {
        SafeTensors file = declared_wide_tensors(101, wide, "", NULL);
        BackboneSpec spec;
        ASSERT_OK(state_dict_backbone_spec(&file, "", &spec, &err), err);
        assert_int_equal(spec.kind, BACKBONE_RESNET);
        assert_int_equal(spec.resnet_depth, 101);
        assert_int_equal(spec.resnet_width, wide);
        char name[BACKBONE_MAX_NAME];
        backbone_spec_name(&spec, name, sizeof name);
        assert_string_equal(name, wide == 2 ? "wide_resnet101_2" : "resnet101");
        free(file.tensors);
    }
    // The names: timm's with timm's init (zero_init_last), torchvision's without.
    BackboneSpec spec;
    ASSERT_OK(backbone_spec_parse("timm/wide_resnet50_2", 224, &spec, &err), err);
    assert_true(spec.resnet_depth == 50 && spec.resnet_width == 2 && spec.resnet_zero_init_last);
    ASSERT_OK(backbone_spec_parse("wide_resnet101_2", 224, &spec, &err), err);
    assert_true(spec.resnet_depth == 101 && spec.resnet_width == 2 && !spec.resnet_zero_init_last);
    ASSERT_OK(backbone_spec_parse("timm/resnet200", 224, &spec, &err), err);
    assert_true(spec.resnet_depth == 200 && spec.resnet_width == 1);
    assert_int_equal(backbone_spec_parse("wide_resnet34_2", 224, &spec, &err), -1);
    assert_non_null(strstr(err.text, "a wide resnet34 does not exist"));
}

static void test_rejects_a_vit(void **state) {
    (void)state;
    SafeTensor tensors[3] = {
        {.name = "cls_token", .dtype = SAFE_F32, .rank = 3, .shape = {1, 1, 384}},
        {.name = "patch_embed.proj.weight", .dtype = SAFE_F32, .rank = 4, .shape = {384, 3, 16, 16}},
        {.name = "blocks.0.attn.qkv.weight", .dtype = SAFE_F32, .rank = 2, .shape = {1152, 384}},
    };
    SafeTensors file = {.count = 3, .tensors = tensors};
    int depth = 0;
    ErrorMessage err = {{0}};
    assert_int_equal(state_dict_resnet_depth(&file, "", &depth, &err), -1);
    assert_non_null(strstr(err.text, "not a ResNet backbone"));
    assert_non_null(strstr(err.text, "\"cls_token\""));
    // A 7x7 stem that is not ResNet's (e.g. 96 outputs).
    SafeTensor stem = {.name = "conv1.weight", .dtype = SAFE_F32, .rank = 4, .shape = {96, 3, 7, 7}};
    file = (SafeTensors){.count = 1, .tensors = &stem};
    assert_int_equal(state_dict_resnet_depth(&file, "", &depth, &err), -1);
    assert_non_null(strstr(err.text, "the stem conv is not"));
}

// ---- loading backbones -------------------------------------------------------------------

#define MODEL_BATCH 2
#define MODEL_SIZE 16  // the smallest input every stage of a ResNet accepts

static float *model_input(void) {
    const size_t n = (size_t)MODEL_BATCH * MODEL_SIZE * MODEL_SIZE * 3;
    float *host = malloc(n * sizeof *host);
    Rng rng = rng_make(9, 0, 0, 0);
    for (size_t i = 0; i < n; i++) host[i] = rng_range(&rng, -1.0f, 1.0f);
    float *device = fixture_backend->op.alloc(fixture_backend, n * sizeof *device);
    fixture_backend->op.upload(fixture_backend, device, host, n * sizeof *host);
    free(host);
    return device;
}

// A resnet18 with non-trivial running stats (mean in [-0.2, 0.2), var in
// [0.5, 1.5)) and BN counter, so that loading them is part of what the
// features check.
static void trained_model(Resnet *model, uint64_t seed, int64_t counter) {
    ErrorMessage err = {{0}};
    const ResnetConfig config = resnet_config_default(18);
    const ResnetInputShape shape = {MODEL_BATCH, MODEL_SIZE};
    ASSERT_OK(resnet_create(model, fixture_backend, &config, &shape, 1, seed, &err), err);
    Rng rng = rng_make(seed, 1, 0, 0);
    for (int i = 0; i < model->buffers.count; i++) {
        const Parameter *buffer = &model->buffers.params[i];
        const int is_var = strstr(buffer->name, "running_var") != NULL;
        float host[2048];
        assert_true(buffer->count <= 2048);
        for (size_t k = 0; k < buffer->count; k++)
            host[k] = is_var ? rng_range(&rng, 0.5f, 1.5f) : rng_range(&rng, -0.2f, 0.2f);
        fixture_backend->op.upload(fixture_backend, buffer->value, host, buffer->count * sizeof *host);
    }
    model->num_batches_tracked = counter;
}

// Eval-mode features (host copy).
static float *eval_features(Resnet *model, const float *input) {
    ErrorMessage err = {{0}};
    ASSERT_OK(resnet_forward(model, 0, MODEL_BATCH, (const Act *)input, 0, &err), err);
    const size_t count = (size_t)MODEL_BATCH * model->feature_dim;
    float *host = malloc(count * sizeof *host);
    assert_non_null(host);
    fixture_backend->op.download(fixture_backend, host, resnet_features(model, 0),
                                 count * sizeof *host);
    return host;
}

// Loads path/part and checks its eval features equal `want` exactly: the same
// weights through the same backend give the same bits.
static void assert_loads_features(const char *path, const char *part, const float *want,
                                  int64_t counter, const float *input) {
    Backbone loaded;
    ErrorMessage err = {{0}};
    const BackboneInput shape = {MODEL_BATCH, MODEL_SIZE};
    ASSERT_OK(model_source_load_backbone(path, part, fixture_backend, &shape, 1, &loaded, &err),
              err);
    assert_int_equal(loaded.spec.kind, BACKBONE_RESNET);
    assert_int_equal(loaded.spec.resnet_depth, 18);
    assert_int_equal(*loaded.num_batches_tracked, counter);
    float *got = eval_features(&loaded.model.resnet, input);
    assert_memory_equal(got, want, (size_t)MODEL_BATCH * loaded.feature_dim * sizeof *got);
    free(got);
    backbone_free(&loaded);
}

static void test_loads_backbones_from_checkpoints(void **state) {
    (void)state;
    float *input = model_input();
    Resnet student, teacher;
    trained_model(&student, 1, 1);
    trained_model(&teacher, 2, 2);
    ErrorMessage err = {{0}};
    float *student_features = eval_features(&student, input);
    float *teacher_features = eval_features(&teacher, input);
    // The check below can only fail when the features carry information.
    const size_t feature_count = (size_t)MODEL_BATCH * student.feature_dim;
    size_t nonzero = 0;
    for (size_t i = 0; i < feature_count; i++) nonzero += student_features[i] != 0.0f;
    assert_true(nonzero > feature_count / 4);
    assert_memory_not_equal(student_features, teacher_features, feature_count * sizeof(float));

    char path[256], plain[256];
    fixture_temp_path(path, sizeof path, "dino.ckpt");
    fixture_temp_path(plain, sizeof plain, "simclr.ckpt");
    CheckpointWriter *writer = checkpoint_writer_create();
    ASSERT_OK(checkpoint_add_parameters(writer, "backbone.", &student.params, &student.buffers,
                                        student.num_batches_tracked, &err), err);
    ASSERT_OK(checkpoint_set_meta(writer, "method", "simclr", &err), err);
    ASSERT_OK(checkpoint_write(writer, plain, &err), err);
    ASSERT_OK(checkpoint_add_parameters(writer, "teacher_backbone.", &teacher.params,
                                        &teacher.buffers, teacher.num_batches_tracked, &err), err);
    ASSERT_OK(checkpoint_set_meta(writer, "method", "dino", &err), err);
    ASSERT_OK(checkpoint_set_meta(writer, "export_part", "teacher_backbone", &err), err);
    ASSERT_OK(checkpoint_write(writer, path, &err), err);
    checkpoint_writer_free(writer);

    assert_loads_features(path, "student", student_features, 1, input);
    assert_loads_features(path, "teacher", teacher_features, 2, input);
    assert_loads_features(path, "backbone", teacher_features, 2, input);  // export_part
    assert_loads_features(plain, "backbone", student_features, 1, input);

    Backbone none;
    const BackboneInput shape = {MODEL_BATCH, MODEL_SIZE};
    assert_int_equal(model_source_load_backbone(plain, "teacher", fixture_backend, &shape, 1, &none,
                                                &err), -1);
    assert_non_null(strstr(err.text, plain));
    assert_non_null(strstr(err.text, "no teacher backbone (method simclr)"));
    assert_int_equal(model_source_load_backbone(plain, "head", fixture_backend, &shape, 1, &none,
                                                &err), -1);
    assert_non_null(strstr(err.text, "unknown part \"head\""));

    free(student_features);
    free(teacher_features);
    resnet_free(&student);
    resnet_free(&teacher);
    fixture_backend->op.free(fixture_backend, input);
}

// The input train recorded beside a checkpoint's weights, rewritten
// consistently (the file's CRC-32s recorded anew, as a tool that knows the
// format would write them): a model, channels or normalisation that
// disagrees with the weights is refused in one line naming the field (they
// were accepted and ignored); the values train writes load.
static void test_recorded_metadata_checked_against_weights(void **state) {
    (void)state;
    Resnet model;
    trained_model(&model, 3, 1);
    char path[256];
    fixture_temp_path(path, sizeof path, "metadata.ckpt");
    const struct {
        const char *key, *value, *refusal;  // refusal NULL: loads
    } cases[] = {
        {"model", "resnet18", NULL},
        {"model", "resnet50", "checkpoint metadata model=resnet50 disagrees with its weights: "
                              "resnet50 does not match the file, which holds a resnet18"},
        {"model", "vit_s14", "checkpoint metadata model=vit_s14 disagrees with its weights"},
        {"model", "vit_x9", "unknown model 'vit_x9'"},
        {"channels", "1", "checkpoint metadata channels=1 disagrees with its weights, whose "
                          "first layer takes 3 channel(s)"},
        {"channels", "three", "checkpoint metadata channels=three disagrees"},
        {"normalize", "0.5:0.25", "checkpoint metadata normalize=0.5:0.25 holds 1 channel(s), "
                                  "its weights' first layer takes 3"},
        {"normalize", "0.5,0.5,0.5:0.2,0,0.2", "is not MEAN1,...:STD1,... with positive stds"},
        {"pixels", "int16", "checkpoint metadata pixels=int16 is neither uint8 nor float"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ErrorMessage err = {{0}};
        CheckpointWriter *writer = checkpoint_writer_create();
        ASSERT_OK(checkpoint_add_parameters(writer, "backbone.", &model.params, &model.buffers,
                                            model.num_batches_tracked, &err), err);
        ASSERT_OK(checkpoint_set_meta(writer, "model", "resnet18", &err), err);
        ASSERT_OK(checkpoint_set_meta(writer, "channels", "3", &err), err);
        ASSERT_OK(checkpoint_set_meta(writer, "pixels", "uint8", &err), err);
        ASSERT_OK(checkpoint_set_meta(writer, "normalize", "0.485,0.456,0.406:0.229,0.224,0.225",
                                      &err), err);
        ASSERT_OK(checkpoint_set_meta(writer, cases[i].key, cases[i].value, &err), err);
        ASSERT_OK(checkpoint_write(writer, path, &err), err);
        checkpoint_writer_free(writer);
        Backbone loaded;
        const BackboneInput shape = {MODEL_BATCH, MODEL_SIZE};
        const int status = model_source_load_backbone(path, "backbone", fixture_backend, &shape,
                                                      1, &loaded, &err);
        if (!cases[i].refusal) {
            if (status != 0) fail_msg("%s=%s: %s", cases[i].key, cases[i].value, err.text);
            backbone_free(&loaded);
            continue;
        }
        if (status == 0) {
            backbone_free(&loaded);
            fail_msg("%s=%s was accepted", cases[i].key, cases[i].value);
        }
        if (!strstr(err.text, path) || !strstr(err.text, cases[i].refusal) ||
            strchr(err.text, '\n'))
            fail_msg("%s=%s: %s", cases[i].key, cases[i].value, err.text);
    }
    resnet_free(&model);
}

static void test_loads_torchvision_safetensors_with_fc(void **state) {
    (void)state;
    float *input = model_input();
    Resnet source;
    trained_model(&source, 3, 1);
    float *want = eval_features(&source, input);
    char saved[256], with_fc[256];
    fixture_temp_path(saved, sizeof saved, "resnet18.safetensors");
    fixture_temp_path(with_fc, sizeof with_fc, "resnet18_fc.safetensors");
    ErrorMessage err = {{0}};
    ASSERT_OK(resnet_save(&source, saved, NULL, &err), err);

    // torchvision's classifier added, as in an ImageNet checkpoint.
    SafeTensors file;
    ASSERT_OK(safetensors_read(saved, &file, &err), err);
    SafeTensorWrite *entries = calloc((size_t)file.count + 2, sizeof *entries);
    for (int i = 0; i < file.count; i++) {
        const SafeTensor *t = &file.tensors[i];
        entries[i] = (SafeTensorWrite){.name = t->name, .dtype = t->dtype, .rank = t->rank,
                                       .data = safetensors_data(&file, t)};
        memcpy(entries[i].shape, t->shape, sizeof t->shape);
    }
    static float fc_weight[10 * 512], fc_bias[10];
    entries[file.count] = (SafeTensorWrite){"fc.weight", SAFE_F32, 2, {10, 512}, fc_weight};
    entries[file.count + 1] = (SafeTensorWrite){"fc.bias", SAFE_F32, 1, {10}, fc_bias};
    ASSERT_OK(safetensors_write(with_fc, entries, file.count + 2, NULL, 0, &err), err);
    free(entries);
    safetensors_free(&file);

    assert_loads_features(saved, "backbone", want, 1, input);
    assert_loads_features(with_fc, "backbone", want, 1, input);
    assert_loads_features(with_fc, "student", want, 1, input);
    Backbone none;
    const BackboneInput shape = {MODEL_BATCH, MODEL_SIZE};
    assert_int_equal(model_source_load_backbone(with_fc, "teacher", fixture_backend, &shape, 1,
                                                &none, &err), -1);
    assert_non_null(strstr(err.text, "needs a checkpoint"));

    free(want);
    resnet_free(&source);
    fixture_backend->op.free(fixture_backend, input);
}

static int group_setup(void **state) {
    return fixture_tempdir_setup(state) || fixture_backend_create_ref(state);
}

static int group_teardown(void **state) {
    fixture_backend_destroy(state);
    return fixture_tempdir_teardown(state);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detects_all_depths),
        cmocka_unit_test(test_rejects_a_vit),
        cmocka_unit_test(test_loads_backbones_from_checkpoints),
        cmocka_unit_test(test_recorded_metadata_checked_against_weights),
        cmocka_unit_test(test_loads_torchvision_safetensors_with_fc),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
