// ONNX emitters of our layers (see onnx_layers.h).
#include "embed/onnx_layers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/weights.h"

// ---- parameters --------------------------------------------------------------------------

float *onnx_download(const OnnxBuilder *builder, const Parameter *param) {
    float *ours = malloc(param->count * sizeof *ours);
    float *torch = malloc(param->count * sizeof *torch);
    if (!ours || !torch) {
        free(ours);
        free(torch);
        onnx_graph_fail(builder->graph, "out of memory for the ONNX weight %s", param->name);
        return NULL;
    }
    builder->backend->op.download(builder->backend, ours, param->value,
                                  param->count * sizeof *ours);
    weights_to_torch_layout(param, ours, torch);
    free(ours);
    return torch;
}

const char *onnx_parameter(const OnnxBuilder *builder, const Parameter *param) {
    int64_t dims[PARAM_MAX_RANK];
    for (int d = 0; d < param->rank; d++) dims[d] = param->torch_shape[d];
    return onnx_weight(builder->graph, param->name, param->rank, dims,
                       onnx_download(builder, param));
}

const char *onnx_parameter_as(const OnnxBuilder *builder, const Parameter *param, int rank,
                              const int64_t *dims) {
    size_t count = 1;
    for (int d = 0; d < rank; d++) count *= (size_t)dims[d];
    if (count != param->count)  // on a failed graph onnx_weight returns the failed name
        onnx_graph_fail(builder->graph, "%s: %zu values, not the %zu of the shape asked for",
                        param->name, param->count, count);
    return onnx_weight(builder->graph, param->name, rank, dims, onnx_download(builder, param));
}

const char *onnx_ints(const OnnxBuilder *builder, const char *name, int count,
                      const int64_t *values) {
    return onnx_int64s(builder->graph, name, 1, count, values);
}

// The scope of a parameter: its name without the last component
// ("layer1.0.conv1.weight" -> "layer1.0.conv1").
static void scope_of(const Parameter *param, char *scope, size_t size) {
    snprintf(scope, size, "%s", param->name);
    char *dot = strrchr(scope, '.');
    if (dot) *dot = '\0';
}

// ---- layers ------------------------------------------------------------------------------

const char *onnx_conv2d(const OnnxBuilder *builder, const Conv2d *conv, const char *bias,
                        const char *x) {
    const Parameter *weight = &builder->params->params[conv->weight_index];
    char scope[PARAM_MAX_NAME];
    scope_of(weight, scope, sizeof scope);
    const int64_t kernel[2] = {conv->kernel, conv->kernel};
    const int64_t strides[2] = {conv->stride, conv->stride};
    const int64_t pads[4] = {conv->padding, conv->padding, conv->padding, conv->padding};
    // Grouped (depthwise: weight (C, 1, K, K)) when the weight takes fewer
    // input channels than the conv has.
    const int64_t groups = conv->in_channels / weight->torch_shape[1];
    const OnnxAttr attrs[] = {onnx_attr_ints("kernel_shape", kernel, 2),
                              onnx_attr_ints("strides", strides, 2),
                              onnx_attr_ints("pads", pads, 4), onnx_attr_int("group", groups)};
    const char *inputs[3] = {x, onnx_parameter(builder, weight), bias};
    return onnx_node(builder->graph, "Conv", scope, inputs, bias ? 3 : 2, attrs,
                     groups > 1 ? 4 : 3);
}

const char *onnx_batchnorm(const OnnxBuilder *builder, const BatchNorm *bn, const char *x) {
    const Parameter *weight = &builder->params->params[bn->weight_index];
    char scope[PARAM_MAX_NAME];
    scope_of(weight, scope, sizeof scope);
    const char *inputs[5] = {
        x, onnx_parameter(builder, weight),
        onnx_parameter(builder, &builder->params->params[bn->bias_index]),
        onnx_parameter(builder, &builder->buffers->params[bn->running_mean_index]),
        onnx_parameter(builder, &builder->buffers->params[bn->running_var_index])};
    const OnnxAttr epsilon = onnx_attr_float("epsilon", bn->eps);
    return onnx_node(builder->graph, "BatchNormalization", scope, inputs, 5, &epsilon, 1);
}

const char *onnx_linear(const OnnxBuilder *builder, const Linear *linear, const char *x) {
    const Parameter *weight = &builder->params->params[linear->weight_index];
    char scope[PARAM_MAX_NAME], name[PARAM_MAX_NAME + 4];
    scope_of(weight, scope, sizeof scope);
    snprintf(name, sizeof name, "%s.T", weight->name);
    // MatMul's (in, out) is PyTorch's (out, in) transposed.
    const int rows = linear->out_features, columns = linear->in_features;
    float *values = onnx_download(builder, weight);
    float *transposed = values ? malloc((size_t)rows * columns * sizeof *transposed) : NULL;
    if (values && !transposed) onnx_graph_fail(builder->graph, "out of memory for %s", name);
    for (int r = 0; transposed && r < rows; r++)
        for (int c = 0; c < columns; c++)
            transposed[(size_t)c * rows + r] = values[(size_t)r * columns + c];
    free(values);
    const int64_t dims[2] = {columns, rows};
    const char *y = onnx_binary(builder->graph, "MatMul", scope, x,
                                onnx_weight(builder->graph, name, 2, dims, transposed));
    if (!linear->has_bias) return y;
    return onnx_binary(builder->graph, "Add", scope, y,
                       onnx_parameter(builder, &builder->params->params[linear->bias_index]));
}

const char *onnx_layernorm(const OnnxBuilder *builder, const LayerNorm *norm, const char *x) {
    const Parameter *weight = &builder->params->params[norm->weight_index];
    char scope[PARAM_MAX_NAME];
    scope_of(weight, scope, sizeof scope);
    const char *inputs[3] = {x, onnx_parameter(builder, weight),
                             onnx_parameter(builder, &builder->params->params[norm->bias_index])};
    const OnnxAttr attrs[] = {onnx_attr_int("axis", -1), onnx_attr_float("epsilon", norm->eps)};
    return onnx_node(builder->graph, "LayerNormalization", scope, inputs, 3, attrs, 2);
}

const char *onnx_layernorm_channels(const OnnxBuilder *builder, const LayerNorm *norm,
                                    const char *x) {
    char scope[PARAM_MAX_NAME];
    scope_of(&builder->params->params[norm->weight_index], scope, sizeof scope);
    const int64_t channels_last[4] = {0, 2, 3, 1}, channels_first[4] = {0, 3, 1, 2};
    const char *y =
        onnx_layernorm(builder, norm, onnx_transpose(builder, scope, x, 4, channels_last));
    return onnx_transpose(builder, scope, y, 4, channels_first);
}

// ---- activations -------------------------------------------------------------------------

// The exact GELU as ONNX's Gelu defines it, for opsets before 20:
// x * 0.5 * (1 + erf(x / sqrt(2))).
static const char *gelu_formula(const OnnxBuilder *builder, const char *scope, const char *x) {
    OnnxGraph *graph = builder->graph;
    const char *scaled =
        onnx_binary(graph, "Div", scope, x, onnx_scalar(graph, "const.sqrt2", (float)M_SQRT2));
    const char *erf = onnx_unary(graph, "Erf", scope, scaled);
    const char *one = onnx_scalar(graph, "const.one", 1);
    const char *one_plus = onnx_binary(graph, "Add", scope, erf, one);
    const char *product = onnx_binary(graph, "Mul", scope, x, one_plus);
    return onnx_binary(graph, "Mul", scope, product, onnx_scalar(graph, "const.half", 0.5f));
}

const char *onnx_activation(const OnnxBuilder *builder, OnnxActivation activation,
                            const char *scope, const char *x) {
    OnnxGraph *graph = builder->graph;
    switch (activation) {
    case ONNX_ACT_RELU:
        return onnx_unary(graph, "Relu", scope, x);
    case ONNX_ACT_GELU:
        return onnx_graph_opset(graph) >= 20 ? onnx_unary(graph, "Gelu", scope, x)
                                              : gelu_formula(builder, scope, x);
    case ONNX_ACT_SILU:
        return onnx_binary(graph, "Mul", scope, x, onnx_unary(graph, "Sigmoid", scope, x));
    }
    return x;
}

const char *onnx_swiglu(const OnnxBuilder *builder, const char *scope, int hidden,
                        const char *x) {
    const char *gate = onnx_slice(builder, scope, x, -1, 0, hidden);
    const char *value = onnx_slice(builder, scope, x, -1, hidden, 2 * (int64_t)hidden);
    return onnx_binary(builder->graph, "Mul", scope,
                       onnx_activation(builder, ONNX_ACT_SILU, scope, gate), value);
}

// ---- pooling and shapes ------------------------------------------------------------------

const char *onnx_maxpool(const OnnxBuilder *builder, const char *scope, const char *x,
                         int kernel, int stride, int padding) {
    const int64_t kernel_shape[2] = {kernel, kernel}, strides[2] = {stride, stride};
    const int64_t pads[4] = {padding, padding, padding, padding};
    const OnnxAttr attrs[] = {onnx_attr_ints("kernel_shape", kernel_shape, 2),
                              onnx_attr_ints("strides", strides, 2),
                              onnx_attr_ints("pads", pads, 4)};
    return onnx_node(builder->graph, "MaxPool", scope, &x, 1, attrs, 3);
}

const char *onnx_global_average_pool(const OnnxBuilder *builder, const char *scope,
                                     const char *x) {
    const char *pooled = onnx_unary(builder->graph, "GlobalAveragePool", scope, x);
    const OnnxAttr axis = onnx_attr_int("axis", 1);
    return onnx_node(builder->graph, "Flatten", scope, &pooled, 1, &axis, 1);
}

const char *onnx_reduce_mean(const OnnxBuilder *builder, const char *scope, const char *x,
                             int count, const int64_t *axes) {
    const char *inputs[2] = {x, onnx_ints(builder, "const.axes", count, axes)};
    const OnnxAttr keep = onnx_attr_int("keepdims", 0);
    return onnx_node(builder->graph, "ReduceMean", scope, inputs, 2, &keep, 1);
}

const char *onnx_reshape(const OnnxBuilder *builder, const char *scope, const char *x, int rank,
                         const int64_t *dims) {
    return onnx_binary(builder->graph, "Reshape", scope, x,
                       onnx_ints(builder, "const.shape", rank, dims));
}

const char *onnx_transpose(const OnnxBuilder *builder, const char *scope, const char *x,
                           int rank, const int64_t *perm) {
    const OnnxAttr attr = onnx_attr_ints("perm", perm, rank);
    return onnx_node(builder->graph, "Transpose", scope, &x, 1, &attr, 1);
}

const char *onnx_slice(const OnnxBuilder *builder, const char *scope, const char *x, int axis,
                       int64_t start, int64_t end) {
    const int64_t axes = axis;
    const char *inputs[4] = {x, onnx_ints(builder, "const.start", 1, &start),
                             onnx_ints(builder, "const.end", 1, &end),
                             onnx_ints(builder, "const.axes", 1, &axes)};
    return onnx_node(builder->graph, "Slice", scope, inputs, 4, NULL, 0);
}

int onnx_split(const OnnxBuilder *builder, const char *scope, const char *x, int axis,
               int count, const int64_t *sizes, const char **outputs) {
    const OnnxAttr attr = onnx_attr_int("axis", axis);
    const char *inputs[2] = {x, onnx_ints(builder, "const.split", count, sizes)};
    return onnx_node_outputs(builder->graph, "Split", scope, inputs, 2, &attr, 1, count, outputs);
}

const char *onnx_concat(const OnnxBuilder *builder, const char *scope, int count,
                        const char *const *x, int axis) {
    const OnnxAttr attr = onnx_attr_int("axis", axis);
    return onnx_node(builder->graph, "Concat", scope, x, count, &attr, 1);
}

const char *onnx_gather(const OnnxBuilder *builder, const char *scope, const char *x, int axis,
                        int64_t index) {
    const OnnxAttr attr = onnx_attr_int("axis", axis);
    const char *inputs[2] = {x, onnx_int64s(builder->graph, "const.index", 0, 1, &index)};
    return onnx_node(builder->graph, "Gather", scope, inputs, 2, &attr, 1);
}
