// Whole pickled models (weights/pt_modules.h, pt_pickle.h's module
// classes): a checkpoint dict holding a module tree, written opcode by
// opcode as torch.save writes one (NEWOBJ of the class, BUILD of its
// __dict__ with _parameters, _buffers, _non_persistent_buffers_set and
// _modules), reads as its state_dict() names its tensors, "ema" before
// "model" as Ultralytics loads (with what else Ultralytics' released
// checkpoints keep in a Detect head's __dict__: its last input shape, a
// torch.Size, and tensors that are neither parameters nor buffers, which
// state_dict() leaves out); and what is not a module tree (classes
// outside torch.nn.modules and ultralytics, a class called, NEWOBJ with
// arguments, a second BUILD, a child that is no module, a parameter that is
// no tensor) refused in one line naming it. And a checkpoint Ultralytics'
// own training wrote (tools/make_ultralytics_pt_fixture.py: fine-tuned to 1
// class from an 80-class model) reads to the tensors torch saved and loads
// as a yolov8n with that head.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "backend_fixture.h"
#include "nn/safetensors.h"
#include "pickle_builder.h"
#include "pt_bases.h"
#include "train/model_source.h"
#include "weights/pt_reader.h"
#include "weights/weight_file.h"

#define FIXTURES "tests/fixtures/pt/"

static const PickleTensor WEIGHT = {"weight", 6, 0, 2, {2, 3}, {3, 1}};
static const PickleTensor MEAN = {"running_mean", 6, 1, 1, {2}, {1}};
static const PickleTensor SKIPPED = {"skip", 6, 0, 1, {1}, {1}};

// cls() with NEWOBJ, then MARK for its __dict__'s items.
static void begin_module(PickleBytes *b, const char *module, const char *cls) {
    pickle_global(b, module, cls);
    PICKLE_OPS(b, ")\x81}(");
}

// An empty OrderedDict-like dict entry: key: {}.
static void put_empty(PickleBytes *b, const char *key) {
    pickle_str(b, key);
    pickle_op(b, '}');
}

// torch.Size((1, 144, 8, 8)), as pickled (REDUCE of the class on a tuple).
static void put_size(PickleBytes *b) {
    pickle_global(b, "torch", "Size");
    pickle_op(b, '(');
    const int64_t dims[] = {1, 144, 8, 8};
    for (int i = 0; i < 4; i++) pickle_int(b, dims[i]);
    PICKLE_OPS(b, "t\x85R");
}

// torchvision's Compose([Resize(interpolation=InterpolationMode("bilinear"))]),
// as a -cls checkpoint keeps its transforms: objects, an enum REDUCEd on its value.
static void put_transforms(PickleBytes *b) {
    begin_module(b, "torchvision.transforms.transforms", "Compose");
    pickle_str(b, "transforms");
    PICKLE_OPS(b, "](");
    begin_module(b, "torchvision.transforms.transforms", "Resize");
    pickle_str(b, "interpolation");
    pickle_global(b, "torchvision.transforms.functional", "InterpolationMode");
    pickle_str(b, "bilinear");
    PICKLE_OPS(b, "\x85Rub");  // (value,) REDUCE, Resize's __dict__, BUILD
    PICKLE_OPS(b, "eub");      // the list, Compose's __dict__, BUILD
}

// A Conv2d-like leaf: weight, bias None; buffers running_mean and a
// non-persistent "skip"; a Detect head's "shape" (torch.Size),
// "anchors" (a tensor attribute, in no state dict) and "transforms".
static void put_leaf(PickleBytes *b) {
    begin_module(b, "torch.nn.modules.conv", "Conv2d");
    pickle_str(b, "_parameters");
    PICKLE_OPS(b, "}(");
    pickle_tensor_entry(b, &WEIGHT);
    pickle_str(b, "bias");
    PICKLE_OPS(b, "Nu");
    pickle_str(b, "_buffers");
    PICKLE_OPS(b, "}(");
    pickle_tensor_entry(b, &SKIPPED);
    pickle_tensor_entry(b, &MEAN);
    pickle_op(b, 'u');
    pickle_str(b, "_non_persistent_buffers_set");
    pickle_global(b, "builtins", "set");
    pickle_op(b, ']');
    pickle_str(b, "skip");
    PICKLE_OPS(b, "a\x85R");
    put_empty(b, "_modules");
    pickle_str(b, "shape");
    put_size(b);
    pickle_str(b, "anchors");
    pickle_tensor(b, &WEIGHT);
    pickle_str(b, "transforms");
    put_transforms(b);
    PICKLE_OPS(b, "ub");
}

// DetectionModel-like root whose child "model" is Sequential(leaf).
static void put_tree(PickleBytes *b) {
    begin_module(b, "ultralytics.nn.tasks", "DetectionModel");
    put_empty(b, "_parameters");
    put_empty(b, "_buffers");
    pickle_str(b, "_modules");
    PICKLE_OPS(b, "}(");
    pickle_str(b, "model");
    begin_module(b, "torch.nn.modules.container", "Sequential");
    put_empty(b, "_parameters");
    put_empty(b, "_buffers");
    pickle_str(b, "_modules");
    PICKLE_OPS(b, "}(");
    pickle_str(b, "0");
    put_leaf(b);
    PICKLE_OPS(b, "uub");  // Sequential's _modules, its __dict__, BUILD
    PICKLE_OPS(b, "uub");  // the root's
}

// {"ema": None, "model": tree} or (ema) {"ema": tree, "model": None}.
static void put_checkpoint(PickleBytes *b, int ema) {
    PICKLE_OPS(b, "\x80\x02}(");
    pickle_str(b, "ema");
    if (ema) put_tree(b);
    else pickle_op(b, 'N');
    pickle_str(b, "model");
    if (ema) pickle_op(b, 'N');
    else put_tree(b);
    PICKLE_OPS(b, "u.");
}

static int read_bytes(const PickleBytes *object, SafeTensors *out, ErrorMessage *err) {
    size_t size = 0;
    uint8_t *file = pickle_legacy_file(object, 6, &size);
    return pt_parse(file, size, out, err);  // takes the file
}

static void test_module_tree_reads(void **state) {
    for (int ema = 0; ema < 2; ema++) {  // under "model", then under "ema" (model None)
        PickleBytes b = {0};
        put_checkpoint(&b, ema);
        SafeTensors out;
        ErrorMessage err = {{0}};
        if (read_bytes(&b, &out, &err)) fail_msg("%s", err.text);
        assert_int_equal(out.count, 2);  // no bias (None), no non-persistent buffer
        assert_string_equal(out.tensors[0].name, "model.0.weight");
        assert_string_equal(out.tensors[1].name, "model.0.running_mean");
        const float *mean = safetensors_data(&out, &out.tensors[1]);
        assert_true(mean[0] == 1.0f && mean[1] == 2.0f);  // storage offset 1
        safetensors_free(&out);
    }
}

static void assert_refused(const PickleBytes *object, const char *expected) {
    SafeTensors out;
    ErrorMessage err = {{0}};
    if (read_bytes(object, &out, &err) == 0) {
        safetensors_free(&out);
        fail_msg("accepted; expected \"%s\"", expected);
    }
    if (!strstr(err.text, expected)) fail_msg("\"%s\" does not say \"%s\"", err.text, expected);
    if (strchr(err.text, '\n')) fail_msg("not one line: %s", err.text);
}

static void test_not_a_module_tree_refused(void **state) {
    PickleBytes functional = {0};  // torch.nn.functional is not a module of classes
    PICKLE_OPS(&functional, "\x80\x02");
    pickle_global(&functional, "torch.nn.functional", "relu");
    pickle_op(&functional, '.');
    assert_refused(&functional, "global torch.nn.functional.relu is not allowed");

    PickleBytes lookalike = {0};
    PICKLE_OPS(&lookalike, "\x80\x02");
    pickle_global(&lookalike, "ultralyticsx", "Model");
    pickle_op(&lookalike, '.');
    assert_refused(&lookalike, "global ultralyticsx.Model is not allowed");

    PickleBytes called = {0};  // a class called (REDUCE runs its __init__)
    PICKLE_OPS(&called, "\x80\x02");
    pickle_global(&called, "torch.nn.modules.conv", "Conv2d");
    PICKLE_OPS(&called, ")R.");
    assert_refused(&called, "REDUCE of a torch.nn.modules.conv.Conv2d");

    PickleBytes transform_list = {0};  // a transforms enum REDUCEd on other than one value
    PICKLE_OPS(&transform_list, "\x80\x02");
    pickle_global(&transform_list, "torchvision.transforms.functional", "InterpolationMode");
    PICKLE_OPS(&transform_list, "]\x85R.");
    assert_refused(&transform_list, "REDUCE of a torchvision.transforms.functional.InterpolationMode");

    PickleBytes arguments = {0};
    PICKLE_OPS(&arguments, "\x80\x02");
    pickle_global(&arguments, "torch.nn.modules.conv", "Conv2d");
    PICKLE_OPS(&arguments, "K\x01\x85\x81.");
    assert_refused(&arguments, "NEWOBJ with arguments");

    PickleBytes size_of_str = {0};  // torch.Size of other than ints
    PICKLE_OPS(&size_of_str, "\x80\x02");
    pickle_global(&size_of_str, "torch", "Size");
    pickle_op(&size_of_str, '(');
    pickle_str(&size_of_str, "1");
    PICKLE_OPS(&size_of_str, "t\x85R.");
    assert_refused(&size_of_str, "torch.Size called with other than one tuple of ints");

    PickleBytes dict_new = {0};
    PICKLE_OPS(&dict_new, "\x80\x02})\x81.");
    assert_refused(&dict_new, "NEWOBJ of a dict");

    PickleBytes twice = {0};  // a second BUILD would replace the state
    PICKLE_OPS(&twice, "\x80\x02");
    pickle_global(&twice, "torch.nn.modules.conv", "Conv2d");
    PICKLE_OPS(&twice, ")\x81}b}b.");
    assert_refused(&twice, "BUILD of an object with other than one dict");

    PickleBytes child = {0};  // a child that is an int
    PICKLE_OPS(&child, "\x80\x02}(");
    pickle_str(&child, "model");
    begin_module(&child, "torch.nn.modules.container", "Sequential");
    put_empty(&child, "_parameters");
    put_empty(&child, "_buffers");
    pickle_str(&child, "_modules");
    PICKLE_OPS(&child, "}(");
    pickle_str(&child, "0");
    PICKLE_OPS(&child, "K\x07uub");
    PICKLE_OPS(&child, "u.");
    assert_refused(&child, "child \"0\" of torch.nn.modules.container.Sequential is a int");

    PickleBytes parameter = {0};  // a parameter that is a str
    PICKLE_OPS(&parameter, "\x80\x02}(");
    pickle_str(&parameter, "model");
    begin_module(&parameter, "torch.nn.modules.conv", "Conv2d");
    pickle_str(&parameter, "_parameters");
    PICKLE_OPS(&parameter, "}(");
    pickle_str(&parameter, "weight");
    pickle_str(&parameter, "not a tensor");
    pickle_op(&parameter, 'u');
    put_empty(&parameter, "_buffers");
    put_empty(&parameter, "_modules");
    PICKLE_OPS(&parameter, "ub");
    PICKLE_OPS(&parameter, "u.");
    assert_refused(&parameter, "\"weight\" of torch.nn.modules.conv.Conv2d is a str");
}

static void read_file(const char *path, SafeTensors *file) {
    ErrorMessage err = {{0}};
    if (weight_file_read(path, file, &err) != 0) fail_msg("%s", err.text);
}

// The fixture's F16 tensors are stride-0 expands of per-channel bases (its
// twin); the tensor attributes are left out; it loads as its head says.
static void test_ultralytics_checkpoint_reads(void **state) {
    SafeTensors pt, bases;
    read_file(FIXTURES "yolov8n_finetuned.pt", &pt);
    read_file(FIXTURES "yolov8n_finetuned_bases.safetensors", &bases);
    assert_int_equal(assert_channel_bases(&pt, &bases), 57);  // yolov8n's BatchNorms' counters
    assert_non_null(safetensors_find(&pt, "model.22.dfl.conv.weight"));
    assert_null(safetensors_find(&pt, "model.22.anchors"));  // an attribute, in no state dict
    safetensors_free(&pt);
    safetensors_free(&bases);

    Backbone model;
    ErrorMessage err = {{0}};
    const BackboneInput input = {1, 32};
    const ModelSourceOptions options = {.part = "backbone", .frozen = 1};
    if (model_source_load_backbone_with(FIXTURES "yolov8n_finetuned.pt", &options,
                                        fixture_backend, &input, 1, &model, NULL, &err))
        fail_msg("%s", err.text);
    assert_int_equal(model.spec.kind, BACKBONE_YOLO);
    assert_string_equal(model.spec.yolo.name, "yolov8n");
    assert_int_equal(model.spec.yolo.classes, 1);
    assert_int_equal(model.spec.yolo.class_width, 80);  // the 80-class model's it was tuned from
    backbone_free(&model);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_module_tree_reads),
        cmocka_unit_test(test_not_a_module_tree_refused),
    };
    const struct CMUnitTest files[] = {
        cmocka_unit_test(test_ultralytics_checkpoint_reads),
    };
    return cmocka_run_group_tests_name("module trees", tests, NULL, NULL) +
           cmocka_run_group_tests_name("Ultralytics' files", files, fixture_backend_create_ref,
                                       fixture_backend_destroy);
}
