// Our layers (nn/layers.h) as ONNX nodes: each emitter takes a layer struct
// of a built model and the name of its input value, writes the layer's
// parameters as initializers (torchvision's / timm's layouts and names:
// conv weights OIHW, not our (Cout, K, K, Cin)) and its nodes, and returns
// the name of its output. Activations are NCHW for convolutions and (B, T,
// C) for token layers, as in PyTorch. Model builders (onnx_resnet.c,
// onnx_vit.c, and a new family's) are written with these; a layer kind
// another family needs gets its emitter here.
#ifndef LTC_EMBED_ONNX_LAYERS_H
#define LTC_EMBED_ONNX_LAYERS_H

#include <stdint.h>

#include "backend/backend.h"
#include "embed/onnx_graph.h"
#include "nn/layers.h"
#include "nn/parameters.h"

// Where the emitters read parameters from: the model's tables, in backend
// memory (downloaded as they are written).
typedef struct OnnxBuilder {
    OnnxGraph *graph;
    Backend *backend;
    const ParameterSet *params;   // trainable
    const ParameterSet *buffers;  // running statistics, RoPE periods
} OnnxBuilder;

// A host copy (malloc'ed, torchvision's layout) of a parameter, or NULL
// with the graph failed.
float *onnx_download(const OnnxBuilder *builder, const Parameter *param);
// The parameter as an initializer of its own name and torch shape.
const char *onnx_parameter(const OnnxBuilder *builder, const Parameter *param);
// The same in another shape of as many values (torchvision's (C, 1, 1)
// layer scale as (C)).
const char *onnx_parameter_as(const OnnxBuilder *builder, const Parameter *param, int rank,
                              const int64_t *dims);
// A constant of the given 1-D int64 values (shapes, axes, permutations).
const char *onnx_ints(const OnnxBuilder *builder, const char *name, int count,
                      const int64_t *values);

// ---- layers ------------------------------------------------------------------------------

// Conv (no bias, or bias: an initializer's name) on x (N, Cin, H, W):
// (N, Cout, OH, OW); grouped where the weight (Cout, Cin / groups, K, K)
// says so (depthwise).
const char *onnx_conv2d(const OnnxBuilder *builder, const Conv2d *conv, const char *bias,
                        const char *x);
// BatchNormalization in inference mode (the running statistics; ONNX
// Runtime and TensorRT fold it into the conv before it when they build).
const char *onnx_batchnorm(const OnnxBuilder *builder, const BatchNorm *bn, const char *x);
// y (.., out) = x (.., in) W^T + b as MatMul (W^T stored as "<name>.T",
// (in, out)) and Add.
const char *onnx_linear(const OnnxBuilder *builder, const Linear *linear, const char *x);
// LayerNormalization over the last axis.
const char *onnx_layernorm(const OnnxBuilder *builder, const LayerNorm *norm, const char *x);
// LayerNormalization over the channels of x (N, C, H, W): transposed to
// (N, H, W, C) and back (ConvNeXt's channels-first LayerNorm, exactly).
const char *onnx_layernorm_channels(const OnnxBuilder *builder, const LayerNorm *norm,
                                    const char *x);

// ---- activations, pooling, shapes --------------------------------------------------------

typedef enum OnnxActivation {
    ONNX_ACT_RELU,
    ONNX_ACT_GELU,  // exact (erf): the Gelu operator from opset 20, its formula before
    ONNX_ACT_SILU,  // x sigmoid(x)
} OnnxActivation;

const char *onnx_activation(const OnnxBuilder *builder, OnnxActivation activation,
                            const char *scope, const char *x);
// SwiGLU on a packed gate | value x (.., 2 hidden): silu(gate) value (.., hidden).
const char *onnx_swiglu(const OnnxBuilder *builder, const char *scope, int hidden,
                        const char *x);
// MaxPool of a square kernel (floor output size, padding ignored as PyTorch's).
const char *onnx_maxpool(const OnnxBuilder *builder, const char *scope, const char *x,
                         int kernel, int stride, int padding);
// Global average pool of x (N, C, H, W) flattened to (N, C).
const char *onnx_global_average_pool(const OnnxBuilder *builder, const char *scope,
                                     const char *x);
// The mean of x over the count axes, those axes dropped (ReduceMean, keepdims 0).
const char *onnx_reduce_mean(const OnnxBuilder *builder, const char *scope, const char *x,
                             int count, const int64_t *axes);
// Reshape to dims (0: that dimension of x, -1: inferred, ONNX's rules).
const char *onnx_reshape(const OnnxBuilder *builder, const char *scope, const char *x, int rank,
                         const int64_t *dims);
const char *onnx_transpose(const OnnxBuilder *builder, const char *scope, const char *x,
                           int rank, const int64_t *perm);
// x[start:end] along axis.
const char *onnx_slice(const OnnxBuilder *builder, const char *scope, const char *x, int axis,
                       int64_t start, int64_t end);
// x split along axis into count parts of sizes[i]: outputs[i] (ONNX Split,
// the sizes as an input); -1 when the graph failed.
int onnx_split(const OnnxBuilder *builder, const char *scope, const char *x, int axis,
               int count, const int64_t *sizes, const char **outputs);
// The count values x[i] concatenated along axis.
const char *onnx_concat(const OnnxBuilder *builder, const char *scope, int count,
                        const char *const *x, int axis);
// x[index] along axis (the axis dropped).
const char *onnx_gather(const OnnxBuilder *builder, const char *scope, const char *x, int axis,
                        int64_t index);

#endif
