// The ResNet graph (nn/resnet.h) in ONNX, torchvision's forward in eval
// mode: conv1 -> bn1 -> relu -> maxpool -> layer1..4 -> global average
// pool -> (N, 512 or 2048), what resnet_forward computes for embed.
#include <stdio.h>
#include <string.h>

#include "embed/onnx_families.h"
#include "embed/onnx_layers.h"
#include "nn/backbone.h"

// A residual block: the branch's conv-BN(-ReLU) stages, the shortcut
// (downsample conv + BN, or the input), their sum through a ReLU.
static const char *block_graph(const OnnxBuilder *builder, const ResnetBlock *block,
                               const char *scope, const char *x) {
    const char *branch = x;
    for (int s = 0; s < block->stage_count; s++) {
        branch = onnx_batchnorm(builder, &block->bn[s],
                                onnx_conv2d(builder, &block->conv[s], NULL, branch));
        if (s + 1 < block->stage_count)
            branch = onnx_activation(builder, ONNX_ACT_RELU, scope, branch);
    }
    const char *shortcut =
        block->has_downsample
            ? onnx_batchnorm(builder, &block->downsample_bn,
                             onnx_conv2d(builder, &block->downsample_conv, NULL, x))
            : x;
    return onnx_activation(builder, ONNX_ACT_RELU, scope,
                           onnx_binary(builder->graph, "Add", scope, branch, shortcut));
}

int onnx_resnet_graph(const OnnxBuilder *builder, const Backbone *backbone, int image_size,
                      const char *input, const char **output, ErrorMessage *err) {
    (void)image_size;  // any size: the pool is global
    (void)err;
    const Resnet *model = &backbone->model.resnet;
    const char *x = onnx_batchnorm(builder, &model->stem_bn,
                                   onnx_conv2d(builder, &model->stem_conv, NULL, input));
    x = onnx_activation(builder, ONNX_ACT_RELU, "stem", x);
    x = onnx_maxpool(builder, "maxpool", x, 3, 2, 1);  // resnet.c's stem pool
    for (int b = 0; b < model->block_count; b++) {
        const ResnetBlock *block = &model->blocks[b];
        // The block's torchvision name: "layer1.0" of "layer1.0.conv1.weight".
        char scope[PARAM_MAX_NAME];
        const Parameter *conv1 = &builder->params->params[block->conv[0].weight_index];
        snprintf(scope, sizeof scope, "%s", conv1->name);
        char *conv = strstr(scope, ".conv");
        if (conv) *conv = '\0';
        x = block_graph(builder, block, scope, x);
    }
    *output = onnx_global_average_pool(builder, "avgpool", x);
    return 0;
}
