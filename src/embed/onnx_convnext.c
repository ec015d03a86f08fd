// The ConvNeXt graph (nn/convnext.h: torchvision's, timm's and DINOv3's
// namings) in ONNX, what convnext_forward computes for embed, NCHW as
// torchvision's modules run it:
//
//   stem: Conv 4x4 stride 4 (+ bias) -> LayerNorm over channels
//   stage s > 0: LayerNorm over channels -> Conv 2x2 stride 2 (+ bias)
//   block: x + Transpose back(gamma * fc2(GELU(fc1(LayerNorm(Transpose to
//          NHWC(dwconv(x)))))))), dwconv a Conv 7x7 of padding 3 with
//          group = channels; fc1 / fc2 MatMul + Add on the last axis
//   embedding: torchvision / timm naming: the global average pool of the
//          last stage; DINOv3 naming: the final norm on every position of
//          that map, then its mean (convnext_norm_features).
//
// A LayerNorm over channels is ONNX's LayerNormalization on the last axis
// between two Transposes (onnx_layernorm_channels): exact (on axis 1 it
// would normalise over C, H and W). Stochastic depth is off in eval, so
// not here.
#include <stdio.h>
#include <string.h>

#include "embed/onnx_families.h"
#include "embed/onnx_layers.h"
#include "nn/backbone.h"

// The smallest input convnext_allocate takes.
#define ONNX_CONVNEXT_MIN_SIZE 32

int onnx_convnext_check(const Backbone *backbone, int image_size, ErrorMessage *err) {
    if (image_size >= ONNX_CONVNEXT_MIN_SIZE) return 0;
    return error_set(err, "image size %d: %s takes images of at least %d px", image_size,
                     backbone->spec.convnext.name, ONNX_CONVNEXT_MIN_SIZE);
}

static const Parameter *param_at(const OnnxBuilder *builder, int index) {
    return &builder->params->params[index];
}

// A block on x (N, C, H, W): x + its branch, the branch's MLP channels last.
static const char *block_graph(const OnnxBuilder *builder, const ConvnextBlock *block, int dim,
                               int kernel, const char *x) {
    OnnxGraph *graph = builder->graph;
    // The block's module path: "stages.0.1" of "stages.0.1.dwconv.weight".
    char scope[PARAM_MAX_NAME];
    snprintf(scope, sizeof scope, "%s", param_at(builder, block->dw_weight_index)->name);
    for (int cut = 0; cut < 2; cut++) {
        char *dot = strrchr(scope, '.');
        if (dot) *dot = '\0';
    }
    // Depthwise: the weight (C, 1, K, K) makes onnx_conv2d's group C.
    const Conv2d dwconv = {.in_channels = dim, .out_channels = dim, .kernel = kernel,
                           .stride = 1, .padding = kernel / 2,
                           .weight_index = block->dw_weight_index};
    const char *y = onnx_conv2d(builder, &dwconv,
                                onnx_parameter(builder, param_at(builder, block->dw_bias_index)),
                                x);
    const int64_t channels_last[4] = {0, 2, 3, 1}, channels_first[4] = {0, 3, 1, 2};
    y = onnx_layernorm(builder, &block->norm, onnx_transpose(builder, scope, y, 4, channels_last));
    y = onnx_activation(builder, ONNX_ACT_GELU, scope, onnx_linear(builder, &block->fc1, y));
    y = onnx_linear(builder, &block->fc2, y);
    const int64_t gamma_dims[1] = {dim};  // torchvision's (C, 1, 1) too
    y = onnx_binary(graph, "Mul", scope, y,
                    onnx_parameter_as(builder, param_at(builder, block->gamma_index), 1,
                                      gamma_dims));
    return onnx_binary(graph, "Add", scope, x,
                       onnx_transpose(builder, scope, y, 4, channels_first));
}

// The stem (s = 0: conv, norm) or a downsampling (norm, conv) of x.
static const char *entry_graph(const OnnxBuilder *builder, const ConvnextStage *stage, int s,
                               const char *x) {
    const char *bias = onnx_parameter(builder, param_at(builder, stage->conv_bias_index));
    if (s > 0) return onnx_conv2d(builder, &stage->conv, bias,
                                  onnx_layernorm_channels(builder, &stage->norm, x));
    return onnx_layernorm_channels(builder, &stage->norm,
                                   onnx_conv2d(builder, &stage->conv, bias, x));
}

int onnx_convnext_graph(const OnnxBuilder *builder, const Backbone *backbone, int image_size,
                        const char *input, const char **output, ErrorMessage *err) {
    if (onnx_convnext_check(backbone, image_size, err)) return -1;
    const Convnext *model = &backbone->model.convnext;
    const char *x = input;
    for (int s = 0; s < CONVNEXT_STAGES; s++) {
        const ConvnextStage *stage = &model->stages[s];
        x = entry_graph(builder, stage, s, x);
        for (int b = 0; b < stage->depth; b++)
            x = block_graph(builder, &stage->blocks[b], stage->dim, model->config.kernel, x);
    }
    if (!convnext_norm_features(&model->config)) {
        *output = onnx_global_average_pool(builder, "pool", x);
        return 0;
    }
    // DINOv3: the final norm on every position (N, H, W, D), then the mean.
    const int64_t channels_last[4] = {0, 2, 3, 1}, positions[2] = {1, 2};
    x = onnx_layernorm(builder, &model->head_norm, onnx_transpose(builder, "norm", x, 4,
                                                                  channels_last));
    *output = onnx_reduce_mean(builder, "pool", x, 2, positions);
    return 0;
}
