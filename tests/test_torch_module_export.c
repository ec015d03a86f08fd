// `export --format torch_model` (weights/torch_module_export.h) against the
// module trees torchvision 0.29 builds (tests/fixtures/
// torchvision_structure.txt, tools/make_torchvision_structure.py): for
// ResNet-18, ResNet-50, Wide ResNet-50-2, ShuffleNetV2 x0.5 and x2.0 and
// ConvNeXt-T, module by module in named_modules() order, each
// module's class, every attribute with its value (strides, paddings,
// groups, eps, the ConvNeXt blocks' stochastic depth rates, ...) and its
// parameter and buffer names, read back from our file with the restricted
// reader. Then the file's tensors (read as a checkpoint is) equal those of
// the state dict `--format torch` writes, bit for bit; and the models the
// writer does not know are refused by name. That torch.load returns a
// module computing what torchvision's computes is
// tools/check_torch_export.py's.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_fixture.h"
#include "nn/backbone.h"
#include "pt_bases.h"
#include "pt_structure.h"
#include "weights/pt_writer.h"
#include "weights/torch_module_export.h"
#include "weights/weight_file.h"

#define FIXTURE "tests/fixtures/torchvision_structure.txt"

// The fixture's section name and our --model name of each model.
static const char *const MODELS[][2] = {
    {"resnet18", "resnet18"},
    {"resnet50", "resnet50"},
    {"wide_resnet50_2", "wide_resnet50_2"},
    {"shufflenet_v2_x0_5", "torchvision/shufflenet_v2_x0_5"},
    {"shufflenet_v2_x2_0", "torchvision/shufflenet_v2_x2_0"},
    {"convnext_tiny", "torchvision/convnext_tiny"},
};

static void make_backbone(const char *name, Backbone *model) {
    BackboneSpec spec;
    ErrorMessage err;
    const BackboneInput input = {1, 32};
    if (backbone_spec_parse(name, 32, &spec, &err) ||
        backbone_create(model, fixture_backend, &spec, &input, 1, 5, &err))
        fail_msg("%s: %s", name, err.text);
}

// Every tensor of a equals b's of its name; the same count.
static void expect_same_tensors(const char *model, const SafeTensors *a, const SafeTensors *b) {
    assert_int_equal(a->count, b->count);
    for (int i = 0; i < b->count; i++) {
        const SafeTensor *want = &b->tensors[i];
        const SafeTensor *got = safetensors_find(a, want->name);
        if (!got) fail_msg("%s: %s is not in the module", model, want->name);
        assert_int_equal(got->dtype, want->dtype);
        assert_int_equal(got->rank, want->rank);
        assert_memory_equal(got->shape, want->shape, (size_t)want->rank * sizeof *want->shape);
        if (memcmp(safetensors_data(a, got), safetensors_data(b, want), want->size) != 0)
            fail_msg("%s: %s differs", model, want->name);
    }
}

// Writes model's torch_model file at path and its structure lines into out.
static void export_and_describe(const Backbone *model, const char *path, Lines *out) {
    ErrorMessage err;
    if (export_torch_module(model, path, &err)) fail_msg("%s", err.text);
    char entry[80];  // torch.save's folder: the file's name without .pt
    snprintf(entry, sizeof entry, "ltc-test-torch-module-%d/data.pkl", (int)getpid());
    PtPickle pickle;
    pt_zip_pickle(path, entry, &pickle);
    pt_structure_describe(pickle.root, "", 1, out);
    pt_pickle_free(&pickle);
}

static void check_model(const char *fixture_name, const char *name) {
    char path[64], state_dict[64];
    snprintf(path, sizeof path, "/tmp/ltc-test-torch-module-%d.pt", (int)getpid());
    snprintf(state_dict, sizeof state_dict, "/tmp/ltc-test-torch-module-%d-sd.pt", (int)getpid());
    Backbone model;
    make_backbone(name, &model);
    ErrorMessage err;
    if (backbone_save_as(&model, state_dict, pt_state_dict_write, &err))
        fail_msg("%s: %s", name, err.text);
    Lines expected = {0}, ours = {0};
    fixture_section(FIXTURE, fixture_name, &expected);
    export_and_describe(&model, path, &ours);
    pt_structure_expect(fixture_name, &expected, &ours);
    lines_free(&expected);
    lines_free(&ours);

    SafeTensors module_file, state_dict_file;
    if (weight_file_read(path, &module_file, &err) ||
        weight_file_read(state_dict, &state_dict_file, &err))
        fail_msg("%s: %s", name, err.text);
    expect_same_tensors(name, &module_file, &state_dict_file);
    safetensors_free(&module_file);
    safetensors_free(&state_dict_file);
    unlink(path);
    unlink(state_dict);
    backbone_free(&model);
}

static void test_structure_matches_torchvision(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof MODELS / sizeof MODELS[0]; i++)
        check_model(MODELS[i][0], MODELS[i][1]);
}

// A 1-channel ResNet: conv1 takes one channel in one group (not depthwise).
static void test_grey_resnet_stem(void **state) {
    (void)state;
    BackboneSpec spec;
    ErrorMessage err;
    Backbone model;
    const BackboneInput input = {1, 32};
    assert_int_equal(backbone_spec_parse("resnet18", 32, &spec, &err), 0);
    spec.in_channels = 1;
    if (backbone_create(&model, fixture_backend, &spec, &input, 1, 5, &err)) fail_msg("%s", err.text);
    char path[64];
    snprintf(path, sizeof path, "/tmp/ltc-test-torch-module-%d.pt", (int)getpid());
    Lines ours = {0};
    export_and_describe(&model, path, &ours);
    assert_non_null(strstr(ours.items[1], " groups=1 in_channels=1 "));
    lines_free(&ours);
    unlink(path);
    backbone_free(&model);
}

static void test_other_models_refused(void **state) {
    (void)state;
    const char *const refused[][2] = {
        {"vit_t14", "a ViT"},
        {"timm/convnext_tiny", "a ConvNeXt of timm's or DINOv3's naming"},
        {"yolov8n", "a YOLO"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        BackboneSpec spec;
        ErrorMessage err = {{0}};
        if (backbone_spec_parse(refused[i][0], 224, &spec, &err)) fail_msg("%s", err.text);
        assert_int_equal(torch_module_supported(&spec, &err), 0);
        if (!strstr(err.text, refused[i][1]) || !strstr(err.text, "--format torch"))
            fail_msg("%s: %s", refused[i][0], err.text);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_structure_matches_torchvision),
        cmocka_unit_test(test_grey_resnet_stem),
        cmocka_unit_test(test_other_models_refused),
    };
    return cmocka_run_group_tests(tests, fixture_backend_create_ref, fixture_backend_destroy);
}
