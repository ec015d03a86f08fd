// The ONNX graph builder and model writer (see onnx_graph.h). The protobuf
// messages and their strings live in one arena freed with the graph; the
// weights are malloc'ed buffers the graph owns. The writer streams the
// packed model into file chunks that point at the weights themselves, so a
// model is never held twice in memory.
#include "embed/onnx_graph.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"
#include "util/file.h"
#include "util/half.h"

// ---- arena -------------------------------------------------------------------------------

#define ARENA_BLOCK 65536

typedef struct ArenaBlock {
    struct ArenaBlock *next;
    size_t used, size;
    max_align_t data[];
} ArenaBlock;

// A growable array of pointers.
typedef struct PointerList {
    void **items;
    size_t count, capacity;
} PointerList;

struct OnnxGraph {
    ArenaBlock *arena;
    OnnxPrecision precision;
    int opset;
    int failed;
    ErrorMessage failure;
    char *name;
    PointerList nodes, initializers, inputs, outputs;
    PointerList owned;  // weight buffers
};

// The name every builder call returns once the graph has failed (the first
// failure is kept and reported when the graph is written), so that exporters
// chain calls without checking each one.
static const char failed_name[] = "(failed)";

void onnx_graph_fail(OnnxGraph *graph, const char *format, ...) {
    if (graph->failed) return;
    graph->failed = 1;
    va_list args;
    va_start(args, format);
    vsnprintf(graph->failure.text, sizeof graph->failure.text, format, args);
    va_end(args);
}

static void *arena_alloc(OnnxGraph *graph, size_t size) {
    size = (size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    ArenaBlock *block = graph->arena;
    if (!block || block->size - block->used < size) {
        const size_t capacity = size > ARENA_BLOCK ? size : ARENA_BLOCK;
        block = malloc(sizeof *block + capacity);
        if (!block) {
            onnx_graph_fail(graph, "out of memory building the ONNX graph");
            return NULL;
        }
        block->size = capacity;
        block->used = 0;
        block->next = graph->arena;
        graph->arena = block;
    }
    void *memory = (char *)block->data + block->used;
    block->used += size;
    memset(memory, 0, size);
    return memory;
}

static char *arena_string(OnnxGraph *graph, const char *text) {
    const size_t length = strlen(text);
    char *copy = arena_alloc(graph, length + 1);
    if (copy) memcpy(copy, text, length + 1);
    return copy;
}

static int list_push(OnnxGraph *graph, PointerList *list, void *item) {
    if (!item) return -1;
    if (list->count == list->capacity) {
        const size_t capacity = list->capacity ? 2 * list->capacity : 64;
        void **grown = realloc(list->items, capacity * sizeof *grown);
        if (!grown) {
            onnx_graph_fail(graph, "out of memory building the ONNX graph");
            return -1;
        }
        list->items = grown;
        list->capacity = capacity;
    }
    list->items[list->count++] = item;
    return 0;
}

const char *onnx_precision_name(OnnxPrecision precision) {
    return precision == ONNX_FP16 ? "fp16" : "fp32";
}

OnnxGraph *onnx_graph_create(const char *name, OnnxPrecision precision, int opset,
                             ErrorMessage *err) {
    if (opset < ONNX_OPSET_MIN || opset > ONNX_OPSET_MAX) {
        error_set(err, "ONNX opset %d is outside %d..%d", opset, ONNX_OPSET_MIN, ONNX_OPSET_MAX);
        return NULL;
    }
    OnnxGraph *graph = calloc(1, sizeof *graph);
    if (!graph) {
        error_set(err, "out of memory for the ONNX graph");
        return NULL;
    }
    graph->precision = precision;
    graph->opset = opset;
    graph->name = arena_string(graph, name);
    if (graph->failed) {
        error_set(err, "%s", graph->failure.text);
        onnx_graph_free(graph);
        return NULL;
    }
    return graph;
}

void onnx_graph_free(OnnxGraph *graph) {
    if (!graph) return;
    for (size_t i = 0; i < graph->owned.count; i++) free(graph->owned.items[i]);
    PointerList *lists[] = {&graph->nodes, &graph->initializers, &graph->inputs, &graph->outputs,
                            &graph->owned};
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) free(lists[i]->items);
    while (graph->arena) {
        ArenaBlock *next = graph->arena->next;
        free(graph->arena);
        graph->arena = next;
    }
    free(graph);
}

OnnxPrecision onnx_graph_precision(const OnnxGraph *graph) { return graph->precision; }
int onnx_graph_opset(const OnnxGraph *graph) { return graph->opset; }

int onnx_graph_failed(const OnnxGraph *graph, ErrorMessage *err) {
    if (!graph->failed) return 0;
    error_set(err, "%s", graph->failure.text);
    return 1;
}

// ---- initializers ------------------------------------------------------------------------

static int float_type(const OnnxGraph *graph) {
    return graph->precision == ONNX_FP16 ? ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16
                                         : ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
}

static int initializer_taken(const OnnxGraph *graph, const char *name) {
    for (size_t t = 0; t < graph->initializers.count; t++)
        if (strcmp(((const Onnx__TensorProto *)graph->initializers.items[t])->name, name) == 0)
            return 1;
    return 0;
}

// An existing small constant of the same type, shape and bytes, or NULL.
static const char *find_constant(const OnnxGraph *graph, int data_type, int rank,
                                 const int64_t *dims, const void *data, size_t bytes) {
    for (size_t t = 0; t < graph->initializers.count; t++) {
        const Onnx__TensorProto *tensor = graph->initializers.items[t];
        if (tensor->data_type == data_type && tensor->n_dims == (size_t)rank &&
            tensor->raw_data.len == bytes &&
            (rank == 0 || memcmp(tensor->dims, dims, (size_t)rank * sizeof *dims) == 0) &&
            memcmp(tensor->raw_data.data, data, bytes) == 0)
            return tensor->name;
    }
    return NULL;
}

// A tensor message named `name` (made unique with a suffix) of data_type
// and dims whose raw data is bytes at data (owned elsewhere). NULL when
// failed.
static Onnx__TensorProto *tensor_message(OnnxGraph *graph, const char *name, int data_type,
                                         int rank, const int64_t *dims, void *data,
                                         size_t bytes) {
    char unique[256];
    snprintf(unique, sizeof unique, "%s", name);
    const size_t base = strlen(unique);
    for (int suffix = 2; initializer_taken(graph, unique); suffix++)
        snprintf(unique + base, sizeof unique - base, "_%d", suffix);
    Onnx__TensorProto *tensor = arena_alloc(graph, sizeof *tensor);
    int64_t *dims_copy = rank ? arena_alloc(graph, (size_t)rank * sizeof *dims_copy) : NULL;
    char *name_copy = arena_string(graph, unique);
    if (!tensor || (rank && !dims_copy) || !name_copy) return NULL;
    onnx__tensor_proto__init(tensor);
    if (rank) memcpy(dims_copy, dims, (size_t)rank * sizeof *dims_copy);
    tensor->n_dims = (size_t)rank;
    tensor->dims = dims_copy;
    tensor->has_data_type = 1;
    tensor->data_type = data_type;
    tensor->name = name_copy;
    tensor->has_raw_data = 1;
    tensor->raw_data.data = data;
    tensor->raw_data.len = bytes;
    return list_push(graph, &graph->initializers, tensor) ? NULL : tensor;
}

static size_t element_count(int rank, const int64_t *dims) {
    size_t count = 1;
    for (int d = 0; d < rank; d++) count *= (size_t)dims[d];
    return count;
}

const char *onnx_weight(OnnxGraph *graph, const char *name, int rank, const int64_t *dims,
                        float *values) {
    if (!values) onnx_graph_fail(graph, "out of memory for the ONNX weight %s", name);
    if (!values || graph->failed || list_push(graph, &graph->owned, values)) {
        free(values);
        return failed_name;
    }
    const size_t count = element_count(rank, dims);
    size_t bytes = count * sizeof(float);
    if (graph->precision == ONNX_FP16) {
        // In place: element i's 2 bytes land at or before its 4 bytes (byte
        // copies, so that the two types' accesses stay in program order).
        unsigned char *bytes_at = (unsigned char *)values;
        for (size_t i = 0; i < count; i++) {
            float value;
            memcpy(&value, bytes_at + i * sizeof value, sizeof value);
            if (value > 65504.0f || value < -65504.0f) {
                onnx_graph_fail(graph, "fp16: %s holds %g, beyond float16's range (65504)",
                                name, (double)value);
                return failed_name;
            }
            const float16 half = float_to_f16(value);
            memcpy(bytes_at + i * sizeof half, &half, sizeof half);
        }
        bytes = count * sizeof(float16);
    }
    const Onnx__TensorProto *tensor =
        tensor_message(graph, name, float_type(graph), rank, dims, values, bytes);
    return tensor ? tensor->name : failed_name;
}

const char *onnx_weight_copy(OnnxGraph *graph, const char *name, int rank, const int64_t *dims,
                             const float *values) {
    const size_t count = element_count(rank, dims);
    float *copy = malloc(count * sizeof *copy);
    if (copy) memcpy(copy, values, count * sizeof *copy);
    return onnx_weight(graph, name, rank, dims, copy);
}

const char *onnx_scalar(OnnxGraph *graph, const char *name, float value) {
    if (graph->failed) return failed_name;
    const float16 half = float_to_f16(value);
    const char *existing =
        graph->precision == ONNX_FP16
            ? find_constant(graph, float_type(graph), 0, NULL, &half, sizeof half)
            : find_constant(graph, float_type(graph), 0, NULL, &value, sizeof value);
    return existing ? existing : onnx_weight_copy(graph, name, 0, NULL, &value);
}

const char *onnx_int64s(OnnxGraph *graph, const char *name, int rank, int count,
                        const int64_t *values) {
    if (graph->failed) return failed_name;
    const int64_t dims[1] = {count};
    const char *existing = find_constant(graph, ONNX__TENSOR_PROTO__DATA_TYPE__INT64,
                                         rank ? 1 : 0, dims, values,
                                         (size_t)count * sizeof *values);
    if (existing) return existing;
    int64_t *copy = arena_alloc(graph, (size_t)count * sizeof *copy);
    if (!copy) return failed_name;
    memcpy(copy, values, (size_t)count * sizeof *copy);
    const Onnx__TensorProto *tensor =
        tensor_message(graph, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, rank ? 1 : 0, dims,
                       copy, (size_t)count * sizeof *copy);
    return tensor ? tensor->name : failed_name;
}

// ---- nodes -------------------------------------------------------------------------------

// Whether a node already produces the value `name`.
static int value_taken(const OnnxGraph *graph, const char *name) {
    for (size_t n = 0; n < graph->nodes.count; n++) {
        const Onnx__NodeProto *node = graph->nodes.items[n];
        if (strcmp(node->output[0], name) == 0) return 1;
    }
    return 0;
}

// "<scope>/<op>", or with "_2", "_3", ... when taken.
static char *unique_output_name(OnnxGraph *graph, const char *op, const char *scope) {
    char name[256];
    snprintf(name, sizeof name, "%s/%s", scope, op);
    const size_t base = strlen(name);
    for (int suffix = 2; value_taken(graph, name); suffix++)
        snprintf(name + base, sizeof name - base, "_%d", suffix);
    return arena_string(graph, name);
}

static Onnx__AttributeProto *attribute_message(OnnxGraph *graph, const OnnxAttr *attr) {
    Onnx__AttributeProto *message = arena_alloc(graph, sizeof *message);
    if (!message) return NULL;
    onnx__attribute_proto__init(message);
    message->name = arena_string(graph, attr->name);
    message->has_type = 1;
    switch (attr->type) {
    case ONNX_ATTR_INT:
        message->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        message->has_i = 1;
        message->i = attr->i;
        break;
    case ONNX_ATTR_INTS:
        message->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        message->ints = arena_alloc(graph, (size_t)attr->count * sizeof *message->ints);
        if (!message->ints) return NULL;
        memcpy(message->ints, attr->ints, (size_t)attr->count * sizeof *message->ints);
        message->n_ints = (size_t)attr->count;
        break;
    case ONNX_ATTR_FLOAT:
        message->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
        message->has_f = 1;
        message->f = attr->f;
        break;
    case ONNX_ATTR_STRING:
        message->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
        message->has_s = 1;
        message->s.data = (uint8_t *)arena_string(graph, attr->s);
        message->s.len = strlen(attr->s);
        break;
    }
    return message->name ? message : NULL;
}

int onnx_node_outputs(OnnxGraph *graph, const char *op, const char *scope,
                      const char *const *inputs, int input_count, const OnnxAttr *attrs,
                      int attr_count, int output_count, const char **outputs) {
    for (int o = 0; o < output_count; o++) outputs[o] = failed_name;
    if (graph->failed) return -1;
    Onnx__NodeProto *node = arena_alloc(graph, sizeof *node);
    char **input_names = arena_alloc(graph, (size_t)(input_count + 1) * sizeof *input_names);
    char **output_names = arena_alloc(graph, (size_t)output_count * sizeof *output_names);
    Onnx__AttributeProto **attributes =
        arena_alloc(graph, (size_t)(attr_count + 1) * sizeof *attributes);
    if (!node || !input_names || !output_names || !attributes) return -1;
    onnx__node_proto__init(node);
    for (int i = 0; i < input_count; i++) input_names[i] = arena_string(graph, inputs[i]);
    for (int a = 0; a < attr_count; a++) attributes[a] = attribute_message(graph, &attrs[a]);
    output_names[0] = unique_output_name(graph, op, scope);
    for (int o = 1; o < output_count && !graph->failed; o++) {  // unique as the first is
        char name[300];
        snprintf(name, sizeof name, "%s:%d", output_names[0], o);
        output_names[o] = arena_string(graph, name);
    }
    node->op_type = arena_string(graph, op);
    if (graph->failed) return -1;
    node->name = output_names[0];
    node->n_input = (size_t)input_count;
    node->input = input_names;
    node->n_output = (size_t)output_count;
    node->output = output_names;
    node->n_attribute = (size_t)attr_count;
    node->attribute = attributes;
    if (list_push(graph, &graph->nodes, node)) return -1;
    for (int o = 0; o < output_count; o++) outputs[o] = output_names[o];
    return 0;
}

const char *onnx_node(OnnxGraph *graph, const char *op, const char *scope,
                      const char *const *inputs, int input_count, const OnnxAttr *attrs,
                      int attr_count) {
    const char *output;
    onnx_node_outputs(graph, op, scope, inputs, input_count, attrs, attr_count, 1, &output);
    return output;
}

// ---- graph inputs and outputs ------------------------------------------------------------

static Onnx__ValueInfoProto *value_info(OnnxGraph *graph, const char *name, int rank,
                                        const int64_t *dims) {
    Onnx__ValueInfoProto *info = arena_alloc(graph, sizeof *info);
    Onnx__TypeProto *type = arena_alloc(graph, sizeof *type);
    Onnx__TypeProto__Tensor *tensor = arena_alloc(graph, sizeof *tensor);
    Onnx__TensorShapeProto *shape = arena_alloc(graph, sizeof *shape);
    Onnx__TensorShapeProto__Dimension **dim_list =
        arena_alloc(graph, (size_t)rank * sizeof *dim_list);
    if (!info || !type || !tensor || !shape || !dim_list) return NULL;
    onnx__value_info_proto__init(info);
    onnx__type_proto__init(type);
    onnx__type_proto__tensor__init(tensor);
    onnx__tensor_shape_proto__init(shape);
    for (int d = 0; d < rank; d++) {
        Onnx__TensorShapeProto__Dimension *dim = arena_alloc(graph, sizeof *dim);
        if (!dim) return NULL;
        onnx__tensor_shape_proto__dimension__init(dim);
        if (dims[d] == ONNX_BATCH_DIM) {
            dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dim->dim_param = arena_string(graph, "batch");
        } else {
            dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dim->dim_value = dims[d];
        }
        dim_list[d] = dim;
    }
    shape->n_dim = (size_t)rank;
    shape->dim = dim_list;
    tensor->has_elem_type = 1;
    tensor->elem_type = float_type(graph);
    tensor->shape = shape;
    type->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    type->tensor_type = tensor;
    info->name = arena_string(graph, name);
    info->type = type;
    return graph->failed ? NULL : info;
}

void onnx_graph_input(OnnxGraph *graph, const char *name, int rank, const int64_t *dims) {
    if (graph->failed) return;
    list_push(graph, &graph->inputs, value_info(graph, name, rank, dims));
}

void onnx_graph_output(OnnxGraph *graph, const char *value, const char *name, int rank,
                       const int64_t *dims) {
    if (graph->failed) return;
    Onnx__NodeProto *producer = NULL;
    for (size_t n = 0; n < graph->nodes.count && !producer; n++) {
        Onnx__NodeProto *node = graph->nodes.items[n];
        if (strcmp(node->output[0], value) == 0) producer = node;
    }
    if (!producer) {
        onnx_graph_fail(graph, "ONNX graph output %s: no node produces %s", name, value);
        return;
    }
    producer->output[0] = arena_string(graph, name);
    list_push(graph, &graph->outputs, value_info(graph, name, rank, dims));
}

// ---- the file ----------------------------------------------------------------------------

// The IR version that goes with the opset (onnx.helper.VERSION_TABLE: the
// release that introduced it), the oldest readers of that opset accept.
static int64_t ir_version(int opset) {
    static const int versions[][2] = {{18, 8}, {19, 9}, {21, 10}, {23, 11}, {24, 12},
                                      {25, 13}, {28, 14}};
    int64_t version = 8;
    for (size_t i = 0; i < sizeof versions / sizeof *versions; i++)
        if (opset >= versions[i][0]) version = versions[i][1];
    return version;
}

static Onnx__StringStringEntryProto *entry(OnnxGraph *graph, const char *key, const char *value) {
    Onnx__StringStringEntryProto *message = arena_alloc(graph, sizeof *message);
    if (!message) return NULL;
    onnx__string_string_entry_proto__init(message);
    message->key = arena_string(graph, key);
    message->value = arena_string(graph, value);
    return graph->failed ? NULL : message;
}

// A list of file chunks: pieces copied into a growing scratch buffer
// (referenced by offset, since it moves) and large pieces referenced where
// they are.
typedef struct ChunkList {
    ProtobufCBuffer base;  // first: protobuf-c calls append on it
    OnnxGraph *graph;
    FileChunk *chunks;
    size_t count, capacity;
    uint8_t *scratch;
    size_t scratch_used, scratch_capacity;
    size_t total;
    size_t next_tensor;  // initializers are packed in order: where to look for the next
    int failed;
} ChunkList;

// FileChunk.data of a piece in the scratch buffer until chunks_resolve: the
// scratch pieces lie there back to back, in chunk order.
#define CHUNK_SCRATCH ((const void *)1)

static int chunk_push(ChunkList *list, const void *data, size_t size) {
    if (list->count == list->capacity) {
        const size_t capacity = list->capacity ? 2 * list->capacity : 256;
        FileChunk *grown = realloc(list->chunks, capacity * sizeof *grown);
        if (!grown) return -1;
        list->chunks = grown;
        list->capacity = capacity;
    }
    list->chunks[list->count++] = (FileChunk){data, size};
    list->total += size;
    return 0;
}

// protobuf-c's append: the raw data of an initializer (the next one in
// packing order) is referenced; anything else is copied (protobuf-c may pass
// its own stack buffers for tags and lengths).
static void chunk_append(ProtobufCBuffer *buffer, size_t size, const uint8_t *data) {
    ChunkList *list = (ChunkList *)buffer;
    if (list->failed || size == 0) return;
    const PointerList *tensors = &list->graph->initializers;
    for (size_t t = list->next_tensor; size >= 1024 && t < tensors->count; t++) {
        const Onnx__TensorProto *tensor = tensors->items[t];
        if (tensor->has_raw_data && tensor->raw_data.data == data && tensor->raw_data.len == size) {
            list->next_tensor = t + 1;
            if (chunk_push(list, data, size)) list->failed = 1;
            return;
        }
    }
    if (list->scratch_used + size > list->scratch_capacity) {
        size_t capacity = list->scratch_capacity ? 2 * list->scratch_capacity : 65536;
        while (capacity < list->scratch_used + size) capacity *= 2;
        uint8_t *grown = realloc(list->scratch, capacity);
        if (!grown) {
            list->failed = 1;
            return;
        }
        list->scratch = grown;
        list->scratch_capacity = capacity;
    }
    memcpy(list->scratch + list->scratch_used, data, size);
    // Consecutive copied pieces share one chunk; its data is resolved after packing.
    FileChunk *last = list->count ? &list->chunks[list->count - 1] : NULL;
    if (last && last->data == CHUNK_SCRATCH) {
        last->size += size;
        list->total += size;
    } else if (chunk_push(list, CHUNK_SCRATCH, size)) {
        list->failed = 1;
    }
    list->scratch_used += size;
}

// Points the scratch chunks at the scratch buffer (in order, back to back).
static void chunks_resolve(ChunkList *list) {
    size_t offset = 0;
    for (size_t i = 0; i < list->count; i++)
        if (list->chunks[i].data == CHUNK_SCRATCH) {
            list->chunks[i].data = list->scratch + offset;
            offset += list->chunks[i].size;
        }
}

#define EXTERNAL_ALIGN 4096
#define EXTERNAL_MIN_BYTES 1024

// Moves the raw data of initializers of EXTERNAL_MIN_BYTES or more to the
// data file's chunks (data), each at a multiple of EXTERNAL_ALIGN.
static int externalize(OnnxGraph *graph, const char *data_name, ChunkList *data) {
    static const uint8_t zeros[EXTERNAL_ALIGN];
    size_t offset = 0;
    for (size_t t = 0; t < graph->initializers.count; t++) {
        Onnx__TensorProto *tensor = graph->initializers.items[t];
        const size_t bytes = tensor->raw_data.len;
        if (bytes < EXTERNAL_MIN_BYTES) continue;
        const size_t pad = (EXTERNAL_ALIGN - offset % EXTERNAL_ALIGN) % EXTERNAL_ALIGN;
        if ((pad && chunk_push(data, zeros, pad)) || chunk_push(data, tensor->raw_data.data, bytes))
            return -1;
        offset += pad;
        char offset_text[32], length_text[32];
        snprintf(offset_text, sizeof offset_text, "%zu", offset);
        snprintf(length_text, sizeof length_text, "%zu", bytes);
        Onnx__StringStringEntryProto **entries = arena_alloc(graph, 3 * sizeof *entries);
        if (!entries) return -1;
        entries[0] = entry(graph, "location", data_name);
        entries[1] = entry(graph, "offset", offset_text);
        entries[2] = entry(graph, "length", length_text);
        if (graph->failed) return -1;
        tensor->n_external_data = 3;
        tensor->external_data = entries;
        tensor->has_data_location = 1;
        tensor->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
        tensor->has_raw_data = 0;
        offset += bytes;
    }
    return 0;
}

static Onnx__GraphProto *graph_message(OnnxGraph *graph) {
    Onnx__GraphProto *message = arena_alloc(graph, sizeof *message);
    if (!message) return NULL;
    onnx__graph_proto__init(message);
    message->name = graph->name;
    message->n_node = graph->nodes.count;
    message->node = (Onnx__NodeProto **)graph->nodes.items;
    message->n_initializer = graph->initializers.count;
    message->initializer = (Onnx__TensorProto **)graph->initializers.items;
    message->n_input = graph->inputs.count;
    message->input = (Onnx__ValueInfoProto **)graph->inputs.items;
    message->n_output = graph->outputs.count;
    message->output = (Onnx__ValueInfoProto **)graph->outputs.items;
    return message;
}

static Onnx__ModelProto *model_message(OnnxGraph *graph, const OnnxWriteOptions *options) {
    Onnx__ModelProto *model = arena_alloc(graph, sizeof *model);
    Onnx__OperatorSetIdProto *opset = arena_alloc(graph, sizeof *opset);
    Onnx__OperatorSetIdProto **opsets = arena_alloc(graph, sizeof *opsets);
    Onnx__StringStringEntryProto **metadata =
        arena_alloc(graph, (size_t)(options->metadata_count + 1) * sizeof *metadata);
    if (!model || !opset || !opsets || !metadata) return NULL;
    onnx__model_proto__init(model);
    onnx__operator_set_id_proto__init(opset);
    opset->domain = arena_string(graph, "");  // the default domain, ai.onnx
    opset->has_version = 1;
    opset->version = graph->opset;
    opsets[0] = opset;
    for (int m = 0; m < options->metadata_count; m++)
        metadata[m] = entry(graph, options->metadata[m].key, options->metadata[m].value);
    model->has_ir_version = 1;
    model->ir_version = ir_version(graph->opset);
    model->n_opset_import = 1;
    model->opset_import = opsets;
    model->producer_name = arena_string(graph, "lightly-train-c");
    model->producer_version = arena_string(graph, LTC_VERSION);
    if (options->doc) model->doc_string = arena_string(graph, options->doc);
    model->graph = graph_message(graph);
    model->n_metadata_props = (size_t)options->metadata_count;
    model->metadata_props = metadata;
    return graph->failed ? NULL : model;
}

int onnx_graph_write(OnnxGraph *graph, const char *path, const OnnxWriteOptions *options,
                     OnnxWriteSummary *summary, ErrorMessage *err) {
    if (onnx_graph_failed(graph, err)) return -1;
    size_t weight_bytes = 0;
    for (size_t t = 0; t < graph->initializers.count; t++)
        weight_bytes += ((const Onnx__TensorProto *)graph->initializers.items[t])->raw_data.len;
    const int external = options->external_data || weight_bytes > ONNX_INLINE_LIMIT;
    char data_path[4200];
    const int length = snprintf(data_path, sizeof data_path, "%s.data", path);
    if (length < 0 || (size_t)length >= sizeof data_path)
        return error_set(err, "%s: path too long", path);
    const char *slash = strrchr(data_path, '/');
    ChunkList model = {.base.append = chunk_append, .graph = graph};
    ChunkList data = {.graph = graph};
    int status = 0;
    if (external && externalize(graph, slash ? slash + 1 : data_path, &data))
        status = error_set(err, "out of memory for the ONNX external data of %s", path);
    const Onnx__ModelProto *message = status ? NULL : model_message(graph, options);
    if (!status && !message) {
        if (!onnx_graph_failed(graph, err)) error_set(err, "out of memory writing %s", path);
        status = -1;
    }
    if (!status) {
        protobuf_c_message_pack_to_buffer(&message->base, &model.base);
        chunks_resolve(&model);
        if (model.failed) status = error_set(err, "out of memory writing %s", path);
    }
    if (!status && model.total > ONNX_INLINE_LIMIT + 100000000ull)
        status = error_set(err, "%s: the ONNX graph alone is %zu bytes, beyond protobuf's 2 GB",
                           path, model.total);
    if (!status) {
        const FileWrite files[2] = {
            {.path = data_path, .chunks = data.chunks, .count = (int)data.count},
            {.path = path, .chunks = model.chunks, .count = (int)model.count}};
        status = external ? file_write_atomic_group(files, 2, err)
                          : file_write_atomic(path, model.chunks, (int)model.count, err);
    }
    if (!status && summary)
        *summary = (OnnxWriteSummary){.model_bytes = model.total,
                                      .data_bytes = external ? data.total : 0,
                                      .nodes = (int)graph->nodes.count,
                                      .initializers = (int)graph->initializers.count};
    free(model.chunks);
    free(model.scratch);
    free(data.chunks);
    return status;
}
