// torch.save-style state dicts (weights/pt_writer.h, pt_state_dict_write):
// every model family saved through backbone_save_as holds, read back by the
// .pt reader, the same tensors as its safetensors export: the same names,
// dtypes, shapes and bytes (DINOv3's ConvNeXt with its final norm under two
// names, a DINOv3 ViT in timm's Eva names, a YOLO's BatchNorm counters),
// in an archive named after the file as torch.save names it.
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
#include "nn/backbone.h"
#include "pt_bases.h"
#include "weights/pt_writer.h"
#include "weights/weight_file.h"

enum { IMAGE = 64 };

// The two files hold the same tensors, byte for byte.
static void assert_same_tensors(const SafeTensors *pt, const SafeTensors *safetensors) {
    assert_int_equal(pt->count, safetensors->count);
    for (int i = 0; i < safetensors->count; i++) {
        const SafeTensor *want = &safetensors->tensors[i];
        const SafeTensor *got = safetensors_find(pt, want->name);
        if (!got) fail_msg("%s is not in the .pt", want->name);
        assert_int_equal(got->dtype, want->dtype);
        assert_int_equal(got->rank, want->rank);
        for (int d = 0; d < want->rank; d++) assert_int_equal(got->shape[d], want->shape[d]);
        const size_t bytes = (size_t)safe_tensor_elements(want) * safe_dtype_size(want->dtype);
        if (memcmp(safetensors_data(pt, got), safetensors_data(safetensors, want), bytes) != 0)
            fail_msg("%s: other values in the .pt", want->name);
    }
}

// The model `name` (a ViT made small) saved both ways and compared.
static void check_model(const char *name, int small_vit) {
    ErrorMessage err = {{0}};
    BackboneSpec spec;
    if (backbone_spec_parse(name, IMAGE, &spec, &err)) fail_msg("%s", err.text);
    if (small_vit) {
        VitConfig *c = &spec.vit;
        c->embed_dim = 32, c->heads = 2, c->depth = 2, c->mlp_hidden = 64;
        if (!c->rope) c->pos_grid = IMAGE / c->patch_size;
        vit_config_name(c);
    }
    const BackboneInput input = {1, IMAGE};
    Backbone model;
    if (backbone_create(&model, fixture_backend, &spec, &input, 1, 7, &err))
        fail_msg("%s: %s", name, err.text);
    char safetensors_path[4096], pt_path[4096];
    fixture_temp_path(safetensors_path, sizeof safetensors_path, "model.safetensors");
    fixture_temp_path(pt_path, sizeof pt_path, "model.pt");
    if (backbone_save(&model, safetensors_path, &err) ||
        backbone_save_as(&model, pt_path, pt_state_dict_write, &err))
        fail_msg("%s: %s", name, err.text);
    backbone_free(&model);
    SafeTensors pt, safetensors;
    if (weight_file_read(pt_path, &pt, &err) ||
        weight_file_read(safetensors_path, &safetensors, &err))
        fail_msg("%s: %s", name, err.text);
    uint8_t head[WEIGHT_FILE_SNIFF_BYTES];
    size_t size;
    WeightFileKind kind;
    if (weight_file_sniff(pt_path, head, &size, &kind, &err)) fail_msg("%s", err.text);
    assert_int_equal(kind, WEIGHT_FILE_PYTORCH);
    assert_same_tensors(&pt, &safetensors);
    safetensors_free(&pt);
    safetensors_free(&safetensors);
    free(pt_zip_entry(pt_path, "model/data.pkl", &size));  // torch.save's archive name
}

static void test_resnet(void **state) {
    (void)state;
    check_model("resnet18", 0);
}

static void test_vit(void **state) {
    (void)state;
    check_model("vit_s16", 1);
    check_model("dinov3/vits16", 1);  // RoPE: timm's Eva names (vit_save_eva)
}

static void test_convnext(void **state) {
    (void)state;
    check_model("dinov3/convnext-tiny", 0);  // norms.3 beside norm: one tensor, two names
    check_model("torchvision/convnext_tiny", 0);
}

static void test_yolo(void **state) {
    (void)state;
    check_model("ultralytics/yolov8n.yaml", 0);
}

static int setup(void **state) {
    return fixture_backend_create_ref(state) || fixture_tempdir_setup(state);
}

static int teardown(void **state) {
    return fixture_tempdir_teardown(state) | fixture_backend_destroy(state);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resnet),
        cmocka_unit_test(test_vit),
        cmocka_unit_test(test_convnext),
        cmocka_unit_test(test_yolo),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
