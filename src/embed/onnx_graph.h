// A small builder of ONNX models over the protobuf-c messages of
// onnx.proto: initializers (weights in the graph's float type, int64
// constants), nodes with attributes, typed graph inputs and outputs, and
// the writer of the model file (inline weights, or an external data file
// beside it: ONNX's convention for models over protobuf's 2 GB).
//
// Building never fails call by call: an allocation failure (or a weight
// that float16 cannot hold) marks the graph failed, the calls after it
// return a placeholder name, and onnx_graph_write reports the first
// failure. So the model builders (onnx_resnet.c, onnx_vit.c) chain calls
// without checking each one.
//
// Value names: a node's output is "<scope>/<Op>" ("layer1.0.conv1/Conv"),
// made unique with a suffix; the graph output is renamed to what the
// caller asks for.
#ifndef LTC_EMBED_ONNX_GRAPH_H
#define LTC_EMBED_ONNX_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

// Operator sets written: from 18 (ReduceMean's axes as an input) to 28,
// the newest ONNX Runtime 1.32 supports officially. The default, 25, is the
// newest TensorRT 11's ONNX parser reads (docs/onnx.md); every operator the
// exporter writes means the same from 18 to 28 (Gelu, from 20, is written
// as its erf formula below that).
#define ONNX_OPSET_MIN 18
#define ONNX_OPSET_MAX 28
#define ONNX_OPSET_DEFAULT 25

// In a graph input or output shape: the dynamic batch dimension ("batch").
#define ONNX_BATCH_DIM (-1)

typedef enum OnnxPrecision {
    ONNX_FP32,  // float32 weights, activations, input and output
    ONNX_FP16,  // float16 throughout (input and output included), as LightlyTrain's fp16 export
} OnnxPrecision;

// "fp32" / "fp16".
const char *onnx_precision_name(OnnxPrecision precision);

typedef struct OnnxGraph OnnxGraph;

typedef enum OnnxAttrType {
    ONNX_ATTR_INT,
    ONNX_ATTR_INTS,
    ONNX_ATTR_FLOAT,
    ONNX_ATTR_STRING,
} OnnxAttrType;

typedef struct OnnxAttr {
    const char *name;
    OnnxAttrType type;
    int64_t i;
    float f;
    const char *s;
    const int64_t *ints;  // (count)
    int count;
} OnnxAttr;

static inline OnnxAttr onnx_attr_int(const char *name, int64_t value) {
    return (OnnxAttr){.name = name, .type = ONNX_ATTR_INT, .i = value};
}
static inline OnnxAttr onnx_attr_ints(const char *name, const int64_t *values, int count) {
    return (OnnxAttr){.name = name, .type = ONNX_ATTR_INTS, .ints = values, .count = count};
}
static inline OnnxAttr onnx_attr_float(const char *name, float value) {
    return (OnnxAttr){.name = name, .type = ONNX_ATTR_FLOAT, .f = value};
}
static inline OnnxAttr onnx_attr_string(const char *name, const char *value) {
    return (OnnxAttr){.name = name, .type = ONNX_ATTR_STRING, .s = value};
}

// An empty graph named `name` (the model's name) for the opset
// (ONNX_OPSET_MIN..ONNX_OPSET_MAX) and precision; NULL with err when out of
// memory or the opset is outside the range.
OnnxGraph *onnx_graph_create(const char *name, OnnxPrecision precision, int opset,
                             ErrorMessage *err);
void onnx_graph_free(OnnxGraph *graph);
OnnxPrecision onnx_graph_precision(const OnnxGraph *graph);
int onnx_graph_opset(const OnnxGraph *graph);

// ---- initializers ------------------------------------------------------------------------

// A weight (rank dims, row-major floats) stored in the graph's float type,
// named `name`; the graph takes `values` (malloc'ed; freed with the graph,
// or at once on failure). Returns its name.
const char *onnx_weight(OnnxGraph *graph, const char *name, int rank, const int64_t *dims,
                        float *values);
// The same from a copy of values.
const char *onnx_weight_copy(OnnxGraph *graph, const char *name, int rank, const int64_t *dims,
                             const float *values);
// A float scalar (rank 0) in the graph's float type.
const char *onnx_scalar(OnnxGraph *graph, const char *name, float value);
// An int64 constant: a 1-D tensor of count values, or a scalar (rank 0,
// count 1): shapes, axes, indices.
const char *onnx_int64s(OnnxGraph *graph, const char *name, int rank, int count,
                        const int64_t *values);

// ---- nodes -------------------------------------------------------------------------------

// A node of operator op ("Conv") in scope ("layer1.0.conv1"): its inputs
// ("" for an optional input left out) and attributes. Returns its output's name.
const char *onnx_node(OnnxGraph *graph, const char *op, const char *scope,
                      const char *const *inputs, int input_count, const OnnxAttr *attrs,
                      int attr_count);
// A node of several outputs (Split): their names in outputs (count; the
// first "<scope>/<op>", then "<first>:1", ...); -1 when the graph failed.
int onnx_node_outputs(OnnxGraph *graph, const char *op, const char *scope,
                      const char *const *inputs, int input_count, const OnnxAttr *attrs,
                      int attr_count, int output_count, const char **outputs);
static inline const char *onnx_unary(OnnxGraph *graph, const char *op, const char *scope,
                                     const char *x) {
    return onnx_node(graph, op, scope, &x, 1, NULL, 0);
}
static inline const char *onnx_binary(OnnxGraph *graph, const char *op, const char *scope,
                                      const char *a, const char *b) {
    const char *inputs[2] = {a, b};
    return onnx_node(graph, op, scope, inputs, 2, NULL, 0);
}

// ---- graph inputs, outputs, failure -----------------------------------------------------

// A graph input `name` in the graph's float type; dims may hold ONNX_BATCH_DIM.
void onnx_graph_input(OnnxGraph *graph, const char *name, int rank, const int64_t *dims);
// Makes value (a node's output) the graph output `name` of the given shape.
void onnx_graph_output(OnnxGraph *graph, const char *value, const char *name, int rank,
                       const int64_t *dims);
// Marks the graph failed with a message (the first one is kept).
void onnx_graph_fail(OnnxGraph *graph, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
// 1 (err = the first failure) when building failed, else 0.
int onnx_graph_failed(const OnnxGraph *graph, ErrorMessage *err);

// ---- the file ----------------------------------------------------------------------------

typedef struct OnnxMetadata {
    const char *key, *value;
} OnnxMetadata;

typedef struct OnnxWriteOptions {
    const char *doc;               // the model's doc_string, or NULL
    const OnnxMetadata *metadata;  // metadata_props (count)
    int metadata_count;
    int external_data;  // 1: weights in "<path>.data"; 0: only above ONNX_INLINE_LIMIT
} OnnxWriteOptions;

// Protobuf readers refuse messages over 2 GiB: weights beyond this many
// bytes go to the external data file whatever the options say.
#define ONNX_INLINE_LIMIT 2000000000ull

typedef struct OnnxWriteSummary {
    size_t model_bytes;  // the .onnx file
    size_t data_bytes;   // the external data file (0: none)
    int nodes, initializers;
} OnnxWriteSummary;

// Writes the model atomically (util/file.h: temporary names, renamed
// complete; the data file first): path, and with external data
// "<path>.data" (initializers of 1 KiB or more, each at a multiple of 4096
// bytes, ONNX's external data layout). 0, or -1 with err (a failure while
// building, or the write's).
int onnx_graph_write(OnnxGraph *graph, const char *path, const OnnxWriteOptions *options,
                     OnnxWriteSummary *summary, ErrorMessage *err);

#endif
