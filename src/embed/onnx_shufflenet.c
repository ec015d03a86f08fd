// The ShuffleNetV2 graph (nn/shufflenet.h) in ONNX, torchvision's forward
// in eval mode: conv1 -> maxpool -> stage2..4 -> conv5 -> global average
// pool -> (N, 1024 or 2048), what shufflenet_forward computes for embed.
// The channel shuffle is torchvision's own formula: Reshape to (N, 2, C/2,
// H W), Transpose of the two channel axes, Reshape back to (N, C, H, W),
// with H and W known from the export's fixed image size.
#include <stdio.h>

#include "embed/onnx_families.h"
#include "embed/onnx_layers.h"
#include "nn/backbone.h"

// A unit: conv (depthwise where its weight says so) -> BatchNorm (-> ReLU).
static const char *unit_graph(const OnnxBuilder *builder, const ShufflenetUnit *unit,
                              const char *scope, const char *x) {
    x = onnx_batchnorm(builder, &unit->bn, onnx_conv2d(builder, &unit->conv, NULL, x));
    return unit->act == LAYER_ACT_RELU ? onnx_activation(builder, ONNX_ACT_RELU, scope, x) : x;
}

static const char *branch_graph(const OnnxBuilder *builder, const ShufflenetUnit *units,
                                int count, const char *scope, const char *x) {
    for (int i = 0; i < count; i++) x = unit_graph(builder, &units[i], scope, x);
    return x;
}

// The output size of a 3x3 window of stride 2 and padding 1 (conv1, the
// max pool, a stage's first block).
static int halved(int size) { return (size + 2 - 3) / 2 + 1; }

int onnx_shufflenet_graph(const OnnxBuilder *builder, const Backbone *backbone, int image_size,
                          const char *input, const char **output, ErrorMessage *err) {
    (void)err;
    const Shufflenet *model = &backbone->model.shufflenet;
    const char *x = unit_graph(builder, &model->conv1, "conv1", input);
    x = onnx_maxpool(builder, "maxpool", x, 3, 2, 1);
    int size = halved(halved(image_size));
    for (int b = 0, s = 0, i = 0; b < model->block_count; b++, i++) {
        if (i == model->config.repeats[s]) s++, i = 0;
        const ShufflenetBlock *block = &model->blocks[b];
        char scope[32];
        snprintf(scope, sizeof scope, "stage%d.%d", s + 2, i);
        const int64_t h = block->half, c = block->out_channels;
        const char *parts[2];
        if (block->stride > 1) {
            size = halved(size);
            parts[0] = branch_graph(builder, block->branch1, 2, scope, x);
            parts[1] = branch_graph(builder, block->branch2, 3, scope, x);
        } else {
            const int64_t halves[2] = {h, h};
            const char *split[2] = {x, x};  // (kept where the graph failed: it reports that)
            onnx_split(builder, scope, x, 1, 2, halves, split);
            parts[0] = split[0];
            parts[1] = branch_graph(builder, block->branch2, 3, scope, split[1]);
        }
        x = onnx_concat(builder, scope, 2, parts, 1);
        const int64_t grouped[4] = {0, 2, h, (int64_t)size * size}, swap[4] = {0, 2, 1, 3};
        const int64_t back[4] = {0, c, size, size};
        x = onnx_reshape(builder, scope, x, 4, grouped);
        x = onnx_transpose(builder, scope, x, 4, swap);
        x = onnx_reshape(builder, scope, x, 4, back);
    }
    x = unit_graph(builder, &model->conv5, "conv5", x);
    *output = onnx_global_average_pool(builder, "avgpool", x);
    return 0;
}
