// Tests of the ONNX graph builder and writer (embed/onnx_graph.h) read back
// with protobuf-c: the model's header (IR version, opset, producer), unique
// value and initializer names, shared constants, the graph output renamed,
// the dynamic batch dimension, weights in float16 (and one beyond its range
// refused, nothing written), external data at 4096-byte offsets, the opset
// range. ONNX's checker and ONNX Runtime read the real exports in
// tests/e2e/onnx.sh.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embed/onnx_graph.h"
#include "image_fixtures.h"
#include "onnx.pb-c.h"
#include "util/file.h"
#include "util/half.h"

enum { ROWS = 16, COLUMNS = 32 };  // a weight of 2 KiB in fp32: external with --external-data

static char *folder;

static int setup(void **state) {
    (void)state;
    folder = fixture_tempdir();
    return folder ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    fixture_remove_tree(folder);
    free(folder);
    return 0;
}

static float weight_value(int i) { return (float)(i % 7) * 0.25f - 0.5f; }

// x (batch, ROWS) -> MatMul W (ROWS, COLUMNS) -> Add b -> MatMul again: two
// nodes of one scope and op; two int64 constants of the same values.
static OnnxGraph *small_graph(OnnxPrecision precision, float big_value) {
    ErrorMessage err = {{0}};
    OnnxGraph *graph = onnx_graph_create("small", precision, 25, &err);
    assert_non_null(graph);
    const int64_t input_dims[2] = {ONNX_BATCH_DIM, ROWS};
    onnx_graph_input(graph, "x", 2, input_dims);
    float *weight = malloc(ROWS * COLUMNS * sizeof *weight);
    for (int i = 0; i < ROWS * COLUMNS; i++) weight[i] = weight_value(i);
    weight[3] = big_value;
    const int64_t weight_dims[2] = {ROWS, COLUMNS};
    const char *w = onnx_weight(graph, "layer.weight", 2, weight_dims, weight);
    const char *y = onnx_binary(graph, "MatMul", "layer", "x", w);
    y = onnx_binary(graph, "Add", "layer", y, onnx_scalar(graph, "const.one", 1.0f));
    const int64_t shape[2] = {0, -1};
    const char *first = onnx_int64s(graph, "const.shape", 1, 2, shape);
    const char *again = onnx_int64s(graph, "const.shape", 1, 2, shape);
    assert_string_equal(first, again);  // one constant, used twice
    const char *reshape_inputs[2] = {y, again};
    y = onnx_node(graph, "Reshape", "layer", reshape_inputs, 2, NULL, 0);
    const OnnxAttr attr = onnx_attr_int("axis", -1);
    y = onnx_node(graph, "Softmax", "layer", &y, 1, &attr, 1);
    const char *second = onnx_binary(graph, "MatMul", "layer", y, y);
    if (big_value < 65504.0f) assert_string_equal(second, "layer/MatMul_2");  // else: failed
    const int64_t output_dims[2] = {ONNX_BATCH_DIM, COLUMNS};
    onnx_graph_output(graph, second, "out", 2, output_dims);
    return graph;
}

static Onnx__ModelProto *read_model(const char *path) {
    ByteBuffer buffer = {0};
    ErrorMessage err = {{0}};
    assert_int_equal(file_read_all(path, &buffer, 1u << 30, &err), 0);
    Onnx__ModelProto *model = onnx__model_proto__unpack(NULL, buffer.size, buffer.data);
    byte_buffer_free(&buffer);
    assert_non_null(model);
    return model;
}

static const Onnx__TensorProto *find_initializer(const Onnx__GraphProto *graph,
                                                 const char *name) {
    for (size_t i = 0; i < graph->n_initializer; i++)
        if (strcmp(graph->initializer[i]->name, name) == 0) return graph->initializer[i];
    fail_msg("no initializer %s", name);
    return NULL;
}

static void test_round_trip(void **state) {
    (void)state;
    char path[4200];
    snprintf(path, sizeof path, "%s/small.onnx", folder);
    OnnxGraph *graph = small_graph(ONNX_FP32, weight_value(3));
    const OnnxMetadata metadata[1] = {{"image_size", "64"}};
    const OnnxWriteOptions options = {.doc = "doc", .metadata = metadata, .metadata_count = 1};
    OnnxWriteSummary summary;
    ErrorMessage err = {{0}};
    assert_int_equal(onnx_graph_write(graph, path, &options, &summary, &err), 0);
    onnx_graph_free(graph);
    assert_int_equal(summary.nodes, 5);
    assert_int_equal(summary.initializers, 3);
    assert_int_equal(summary.data_bytes, 0);

    Onnx__ModelProto *model = read_model(path);
    assert_int_equal(model->ir_version, 13);  // opset 25's (onnx 1.20)
    assert_int_equal(model->n_opset_import, 1);
    assert_string_equal(model->opset_import[0]->domain, "");
    assert_int_equal(model->opset_import[0]->version, 25);
    assert_string_equal(model->producer_name, "lightly-train-c");
    assert_string_equal(model->metadata_props[0]->key, "image_size");
    assert_string_equal(model->metadata_props[0]->value, "64");
    const Onnx__GraphProto *g = model->graph;
    assert_string_equal(g->name, "small");
    assert_int_equal(g->n_node, 5);
    assert_string_equal(g->node[0]->op_type, "MatMul");
    assert_string_equal(g->node[0]->output[0], "layer/MatMul");
    assert_string_equal(g->node[4]->output[0], "out");  // renamed graph output
    assert_string_equal(g->node[3]->attribute[0]->name, "axis");
    assert_int_equal(g->node[3]->attribute[0]->i, -1);
    assert_int_equal(g->n_input, 1);
    const Onnx__TensorShapeProto *shape = g->input[0]->type->tensor_type->shape;
    assert_int_equal(shape->dim[0]->value_case,
                     ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM);
    assert_string_equal(shape->dim[0]->dim_param, "batch");
    assert_int_equal(shape->dim[1]->dim_value, ROWS);
    assert_string_equal(g->output[0]->name, "out");
    const Onnx__TensorProto *w = find_initializer(g, "layer.weight");
    assert_int_equal(w->data_type, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    assert_int_equal(w->raw_data.len, ROWS * COLUMNS * sizeof(float));
    for (int i = 0; i < ROWS * COLUMNS; i++) {
        float value;
        memcpy(&value, w->raw_data.data + i * sizeof value, sizeof value);
        assert_true(value == weight_value(i));
    }
    const Onnx__TensorProto *one = find_initializer(g, "const.one");
    assert_int_equal(one->n_dims, 0);
    onnx__model_proto__free_unpacked(model, NULL);
}

static void test_fp16_weights_and_range(void **state) {
    (void)state;
    char path[4200];
    snprintf(path, sizeof path, "%s/half.onnx", folder);
    OnnxGraph *graph = small_graph(ONNX_FP16, weight_value(3));
    const OnnxWriteOptions options = {0};
    ErrorMessage err = {{0}};
    assert_int_equal(onnx_graph_write(graph, path, &options, NULL, &err), 0);
    onnx_graph_free(graph);
    Onnx__ModelProto *model = read_model(path);
    const Onnx__GraphProto *g = model->graph;
    assert_int_equal(g->input[0]->type->tensor_type->elem_type,
                     ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16);
    const Onnx__TensorProto *w = find_initializer(g, "layer.weight");
    assert_int_equal(w->data_type, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16);
    assert_int_equal(w->raw_data.len, ROWS * COLUMNS * sizeof(float16));
    for (int i = 0; i < ROWS * COLUMNS; i++) {
        float16 value;
        memcpy(&value, w->raw_data.data + i * sizeof value, sizeof value);
        assert_int_equal(value, float_to_f16(weight_value(i)));
    }
    onnx__model_proto__free_unpacked(model, NULL);

    // A weight float16 cannot hold: the write is refused, naming it; no file.
    snprintf(path, sizeof path, "%s/overflow.onnx", folder);
    graph = small_graph(ONNX_FP16, 70000.0f);
    assert_int_equal(onnx_graph_write(graph, path, &options, NULL, &err), -1);
    onnx_graph_free(graph);
    assert_string_equal(err.text, "fp16: layer.weight holds 70000, beyond float16's range (65504)");
    assert_int_equal(access(path, F_OK), -1);
}

static void test_external_data(void **state) {
    (void)state;
    char path[4200], data_path[4300];
    snprintf(path, sizeof path, "%s/external.onnx", folder);
    snprintf(data_path, sizeof data_path, "%s.data", path);
    OnnxGraph *graph = small_graph(ONNX_FP32, weight_value(3));
    const OnnxWriteOptions options = {.external_data = 1};
    OnnxWriteSummary summary;
    ErrorMessage err = {{0}};
    assert_int_equal(onnx_graph_write(graph, path, &options, &summary, &err), 0);
    onnx_graph_free(graph);
    assert_int_equal(summary.data_bytes, ROWS * COLUMNS * sizeof(float));
    Onnx__ModelProto *model = read_model(path);
    const Onnx__TensorProto *w = find_initializer(model->graph, "layer.weight");
    assert_int_equal(w->data_location, ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL);
    assert_false(w->has_raw_data);
    assert_int_equal(w->n_external_data, 3);
    assert_string_equal(w->external_data[0]->key, "location");
    assert_string_equal(w->external_data[0]->value, "external.onnx.data");  // beside the model
    assert_string_equal(w->external_data[1]->key, "offset");
    assert_int_equal(atoll(w->external_data[1]->value) % 4096, 0);
    assert_string_equal(w->external_data[2]->value, "2048");
    // Small constants stay in the model.
    assert_true(find_initializer(model->graph, "const.one")->has_raw_data);
    ByteBuffer data = {0};
    assert_int_equal(file_read_all(data_path, &data, 1u << 20, &err), 0);
    const size_t offset = (size_t)atoll(w->external_data[1]->value);
    for (int i = 0; i < ROWS * COLUMNS; i++) {
        float value;
        memcpy(&value, data.data + offset + i * sizeof value, sizeof value);
        assert_true(value == weight_value(i));
    }
    byte_buffer_free(&data);
    onnx__model_proto__free_unpacked(model, NULL);
}

// A node of several outputs (Split): "<scope>/<op>", then ":1", ":2"; a
// second one in the same scope gets its own first name, and so its own
// others; written with every output.
static void test_several_outputs(void **state) {
    (void)state;
    ErrorMessage err = {{0}};
    OnnxGraph *graph = onnx_graph_create("split", ONNX_FP32, 25, &err);
    assert_non_null(graph);
    const int64_t input_dims[2] = {ONNX_BATCH_DIM, 6};
    onnx_graph_input(graph, "x", 2, input_dims);
    const int64_t sizes[3] = {1, 2, 3};
    const OnnxAttr axis = onnx_attr_int("axis", 1);
    const char *inputs[2] = {"x", onnx_int64s(graph, "const.split", 1, 3, sizes)};
    const char *first[3], *second[2];
    assert_int_equal(onnx_node_outputs(graph, "Split", "block", inputs, 2, &axis, 1, 3, first), 0);
    assert_string_equal(first[0], "block/Split");
    assert_string_equal(first[1], "block/Split:1");
    assert_string_equal(first[2], "block/Split:2");
    const char *halves[2] = {first[2], onnx_int64s(graph, "const.halves", 1, 2, (int64_t[]){1, 2})};
    assert_int_equal(onnx_node_outputs(graph, "Split", "block", halves, 2, &axis, 1, 2, second), 0);
    assert_string_equal(second[0], "block/Split_2");
    assert_string_equal(second[1], "block/Split_2:1");
    const char *sum = onnx_binary(graph, "Add", "block", first[1], second[1]);
    const int64_t output_dims[2] = {ONNX_BATCH_DIM, 2};
    onnx_graph_output(graph, sum, "out", 2, output_dims);
    char path[4200];
    snprintf(path, sizeof path, "%s/split.onnx", folder);
    const OnnxWriteOptions options = {0};
    assert_int_equal(onnx_graph_write(graph, path, &options, NULL, &err), 0);
    onnx_graph_free(graph);
    Onnx__ModelProto *model = read_model(path);
    const Onnx__NodeProto *split = model->graph->node[0];
    assert_string_equal(split->op_type, "Split");
    assert_int_equal(split->n_output, 3);
    assert_string_equal(split->output[2], "block/Split:2");
    assert_string_equal(model->graph->node[1]->input[0], "block/Split:2");
    onnx__model_proto__free_unpacked(model, NULL);
}

static void test_opset_range(void **state) {
    (void)state;
    ErrorMessage err = {{0}};
    assert_null(onnx_graph_create("m", ONNX_FP32, ONNX_OPSET_MIN - 1, &err));
    assert_string_equal(err.text, "ONNX opset 17 is outside 18..28");
    assert_null(onnx_graph_create("m", ONNX_FP32, ONNX_OPSET_MAX + 1, &err));
    OnnxGraph *graph = onnx_graph_create("m", ONNX_FP32, ONNX_OPSET_MIN, &err);
    assert_non_null(graph);
    onnx_graph_free(graph);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_fp16_weights_and_range),
        cmocka_unit_test(test_external_data),
        cmocka_unit_test(test_several_outputs),
        cmocka_unit_test(test_opset_range),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
