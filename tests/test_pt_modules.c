// Whole pickled models (weights/pt_modules.h, pt_pickle.h's module
// classes): a checkpoint dict holding a module tree, written opcode by
// opcode as torch.save writes one (NEWOBJ of the class, BUILD of its
// __dict__ with _parameters, _buffers, _non_persistent_buffers_set and
// _modules), reads as its state_dict() names its tensors, "ema" before
// "model" as Ultralytics loads; and what is not a module tree (classes
// outside torch.nn.modules and ultralytics, a class called, NEWOBJ with
// arguments, a second BUILD, a child that is no module, a parameter that is
// no tensor) refused in one line naming it.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "nn/safetensors.h"
#include "pickle_builder.h"
#include "weights/pt_reader.h"

static const TensorSpec WEIGHT = {"weight", 6, 0, 2, {2, 3}, {3, 1}};
static const TensorSpec MEAN = {"running_mean", 6, 1, 1, {2}, {1}};
static const TensorSpec SKIPPED = {"skip", 6, 0, 1, {1}, {1}};

// cls() with NEWOBJ, then MARK for its __dict__'s items.
static void begin_module(Bytes *b, const char *module, const char *cls) {
    put_global(b, module, cls);
    OPS(b, ")\x81}(");
}

// An empty OrderedDict-like dict entry: key: {}.
static void put_empty(Bytes *b, const char *key) {
    put_str(b, key);
    op(b, '}');
}

// A Conv2d-like leaf: weight, bias None; buffers running_mean and a
// non-persistent "skip".
static void put_leaf(Bytes *b) {
    begin_module(b, "torch.nn.modules.conv", "Conv2d");
    put_str(b, "_parameters");
    OPS(b, "}(");
    put_tensor_entry(b, &WEIGHT);
    put_str(b, "bias");
    OPS(b, "Nu");
    put_str(b, "_buffers");
    OPS(b, "}(");
    put_tensor_entry(b, &SKIPPED);
    put_tensor_entry(b, &MEAN);
    op(b, 'u');
    put_str(b, "_non_persistent_buffers_set");
    put_global(b, "builtins", "set");
    op(b, ']');
    put_str(b, "skip");
    OPS(b, "a\x85R");
    put_empty(b, "_modules");
    OPS(b, "ub");
}

// DetectionModel-like root whose child "model" is Sequential(leaf).
static void put_tree(Bytes *b) {
    begin_module(b, "ultralytics.nn.tasks", "DetectionModel");
    put_empty(b, "_parameters");
    put_empty(b, "_buffers");
    put_str(b, "_modules");
    OPS(b, "}(");
    put_str(b, "model");
    begin_module(b, "torch.nn.modules.container", "Sequential");
    put_empty(b, "_parameters");
    put_empty(b, "_buffers");
    put_str(b, "_modules");
    OPS(b, "}(");
    put_str(b, "0");
    put_leaf(b);
    OPS(b, "uub");  // Sequential's _modules, its __dict__, BUILD
    OPS(b, "uub");  // the root's
}

// {"ema": None, "model": tree} or (ema) {"ema": tree, "model": None}.
static void put_checkpoint(Bytes *b, int ema) {
    OPS(b, "\x80\x02}(");
    put_str(b, "ema");
    if (ema) put_tree(b);
    else op(b, 'N');
    put_str(b, "model");
    if (ema) op(b, 'N');
    else put_tree(b);
    OPS(b, "u.");
}

static int read_bytes(const Bytes *object, SafeTensors *out, ErrorMessage *err) {
    size_t size = 0;
    uint8_t *file = legacy_file(object, 6, &size);
    return pt_parse(file, size, out, err);  // takes the file
}

static void test_module_tree_reads(void **state) {
    for (int ema = 0; ema < 2; ema++) {  // under "model", then under "ema" (model None)
        Bytes b = {0};
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

static void assert_refused(const Bytes *object, const char *expected) {
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
    Bytes functional = {0};  // torch.nn.functional is not a module of classes
    OPS(&functional, "\x80\x02");
    put_global(&functional, "torch.nn.functional", "relu");
    op(&functional, '.');
    assert_refused(&functional, "global torch.nn.functional.relu is not allowed");

    Bytes lookalike = {0};
    OPS(&lookalike, "\x80\x02");
    put_global(&lookalike, "ultralyticsx", "Model");
    op(&lookalike, '.');
    assert_refused(&lookalike, "global ultralyticsx.Model is not allowed");

    Bytes called = {0};  // a class called (REDUCE runs its __init__)
    OPS(&called, "\x80\x02");
    put_global(&called, "torch.nn.modules.conv", "Conv2d");
    OPS(&called, ")R.");
    assert_refused(&called, "REDUCE of a torch.nn.modules.conv.Conv2d");

    Bytes arguments = {0};
    OPS(&arguments, "\x80\x02");
    put_global(&arguments, "torch.nn.modules.conv", "Conv2d");
    OPS(&arguments, "K\x01\x85\x81.");
    assert_refused(&arguments, "NEWOBJ with arguments");

    Bytes dict_new = {0};
    OPS(&dict_new, "\x80\x02})\x81.");
    assert_refused(&dict_new, "NEWOBJ of a dict");

    Bytes twice = {0};  // a second BUILD would replace the state
    OPS(&twice, "\x80\x02");
    put_global(&twice, "torch.nn.modules.conv", "Conv2d");
    OPS(&twice, ")\x81}b}b.");
    assert_refused(&twice, "BUILD of an object with other than one dict");

    Bytes child = {0};  // a child that is an int
    OPS(&child, "\x80\x02}(");
    put_str(&child, "model");
    begin_module(&child, "torch.nn.modules.container", "Sequential");
    put_empty(&child, "_parameters");
    put_empty(&child, "_buffers");
    put_str(&child, "_modules");
    OPS(&child, "}(");
    put_str(&child, "0");
    OPS(&child, "K\x07uub");
    OPS(&child, "u.");
    assert_refused(&child, "child \"0\" of torch.nn.modules.container.Sequential is a int");

    Bytes parameter = {0};  // a parameter that is a str
    OPS(&parameter, "\x80\x02}(");
    put_str(&parameter, "model");
    begin_module(&parameter, "torch.nn.modules.conv", "Conv2d");
    put_str(&parameter, "_parameters");
    OPS(&parameter, "}(");
    put_str(&parameter, "weight");
    put_str(&parameter, "not a tensor");
    op(&parameter, 'u');
    put_empty(&parameter, "_buffers");
    put_empty(&parameter, "_modules");
    OPS(&parameter, "ub");
    OPS(&parameter, "u.");
    assert_refused(&parameter, "\"weight\" of torch.nn.modules.conv.Conv2d is a str");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_module_tree_reads),
        cmocka_unit_test(test_not_a_module_tree_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
