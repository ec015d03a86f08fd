// The YOLO graph (nn/yolo.h) in ONNX: the part LightlyTrain trains (YOLOv5's,
// YOLOv8's and YOLO12's layers 0-8, YOLO11's and YOLO26's 0-10) in eval mode, Ultralytics' forward of each
// block, then the global average pool of its last output -> (N, D), what
// yolo_forward computes for embed. The neck and Detect head are not in the
// graph: embed never runs them (the Ultralytics .pt export carries them).
//
// Ultralytics' blocks as its modules compute them: Conv = Conv + BN (+
// SiLU as x sigmoid(x), or YOLOv6's ReLU; a YOLOv6 row of n Convs in turn);
// C2f / C3k2 = cv1, Split in halves, the inner blocks on the second half,
// Concat of both halves and every inner output, cv2;
// C3 (YOLOv5's) and C3k = cv3(Concat(m(cv1(x)), cv2(x))); SPPF = cv2(Concat(y, m(y), m(m(y)),
// m(m(m(y))))) with m a 5x5 MaxPool of stride 1 and padding 2 (YOLO26's:
// cv1 without SiLU, + x); C2PSA =
// cv2(Concat(a, PSA blocks(b))); a PSA block x + attn(x), then + ffn, with
// Ultralytics' Attention: qkv viewed as (B, heads, 2 key_dim + head_dim,
// H W), split into q, k, v; softmax(q^T k * key_dim^-0.5) per head; v
// attn^T viewed as the image, plus pe(v) (a depthwise 3x3 conv), then proj;
// YOLO12's A2C2f = cv2(Concat(cv1(x), each ABlock pair's output)) (+ x
// gamma), an ABlock as a PSA block with AAttn: q, k, v of head_dim each
// within runs of H W / area tokens, pe 7x7.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "embed/onnx_families.h"
#include "embed/onnx_layers.h"
#include "nn/backbone.h"

// The module path of a unit ("model.2.cv1" of "model.2.cv1.conv.weight").
static void unit_scope(const OnnxBuilder *builder, const YoloConv *unit, const char *strip,
                       char *scope, size_t size) {
    snprintf(scope, size, "%s", builder->params->params[unit->conv.weight_index].name);
    char *end = strstr(scope, strip);
    if (end) *end = '\0';
}

// Ultralytics' Conv: conv -> BN (-> SiLU, or YOLOv6's ReLU).
static const char *unit_graph(const OnnxBuilder *builder, const YoloConv *unit, const char *x) {
    const char *y = onnx_batchnorm(builder, &unit->bn, onnx_conv2d(builder, &unit->conv, NULL, x));
    if (unit->act == YOLO_ACT_NONE) return y;
    char scope[PARAM_MAX_NAME];
    unit_scope(builder, unit, ".conv.weight", scope, sizeof scope);
    return onnx_activation(builder, unit->act == YOLO_ACT_RELU ? ONNX_ACT_RELU : ONNX_ACT_SILU,
                           scope, y);
}

static const char *bottleneck_graph(const OnnxBuilder *builder, const YoloBottleneck *b,
                                    const char *x) {
    const char *y = unit_graph(builder, &b->cv2, unit_graph(builder, &b->cv1, x));
    if (!b->add) return y;
    char scope[PARAM_MAX_NAME];
    unit_scope(builder, &b->cv1, ".cv1.conv.weight", scope, sizeof scope);
    return onnx_binary(builder->graph, "Add", scope, x, y);
}

// C3 (YOLOv5's layer) and C3k: cv3(Concat(m(cv1(x)), cv2(x))).
static const char *c3_graph(const OnnxBuilder *builder, const YoloConv *cv1, const YoloConv *cv2,
                            const YoloConv *cv3, const YoloBottleneck *m, int count,
                            const char *x) {
    const char *a = unit_graph(builder, cv1, x);
    for (int i = 0; i < count; i++) a = bottleneck_graph(builder, &m[i], a);
    const char *parts[2] = {a, unit_graph(builder, cv2, x)};
    char scope[PARAM_MAX_NAME];
    unit_scope(builder, cv1, ".cv1.conv.weight", scope, sizeof scope);
    return unit_graph(builder, cv3, onnx_concat(builder, scope, 2, parts, 1));
}

// v softmax(q^T k * scale)^T of q, k, v (B, heads, d, N) per head: (B, heads, d, N).
static const char *heads_attention(const OnnxBuilder *builder, const char *scope,
                                   const char *const qkv[3], float scale) {
    OnnxGraph *graph = builder->graph;
    const int64_t swap_last[4] = {0, 1, 3, 2};
    const char *scores = onnx_binary(graph, "MatMul", scope,
                                     onnx_transpose(builder, scope, qkv[0], 4, swap_last), qkv[1]);
    scores = onnx_binary(graph, "Mul", scope, scores, onnx_scalar(graph, "const.scale", scale));
    const OnnxAttr last_axis = onnx_attr_int("axis", -1);
    const char *attention = onnx_node(graph, "Softmax", scope, &scores, 1, &last_axis, 1);
    return onnx_binary(graph, "MatMul", scope, qkv[2],
                       onnx_transpose(builder, scope, attention, 4, swap_last));
}

// Ultralytics' Attention on x (B, C, H, W), its output before the block's residual.
static const char *attention_graph(const OnnxBuilder *builder, const YoloInner *inner,
                                   const char *scope, const char *x) {
    OnnxGraph *graph = builder->graph;
    const int64_t view[4] = {0, inner->heads, 2 * (int64_t)inner->key_dim + inner->head_dim, -1};
    const int64_t sizes[3] = {inner->key_dim, inner->key_dim, inner->head_dim};
    const char *qkv[3];
    onnx_split(builder, scope,
               onnx_reshape(builder, scope, unit_graph(builder, &inner->qkv, x), 4, view), 2, 3,
               sizes, qkv);
    const char *mixed =
        heads_attention(builder, scope, qkv, (float)(1.0 / sqrt(inner->key_dim)));
    const char *image_shape = onnx_unary(graph, "Shape", scope, x);  // (B, C, H, W)
    const char *v_image = onnx_binary(graph, "Reshape", scope, qkv[2], image_shape);
    const char *sum = onnx_binary(graph, "Add", scope,
                                  onnx_binary(graph, "Reshape", scope, mixed, image_shape),
                                  unit_graph(builder, &inner->pe, v_image));
    return unit_graph(builder, &inner->proj, sum);
}

// Ultralytics' AAttn on x (B, C, H, W) of a fixed H x W (the graph's input
// size is fixed): qkv as tokens (B, N, 3C) viewed as (B area, N / area,
// heads, 3 head_dim), per head q, k, v (B area, heads, head_dim, N / area);
// softmax(q^T k * head_dim^-0.5); v attn^T and v back to (B, C, H, W);
// proj(that + pe(v)).
static const char *area_attention_graph(const OnnxBuilder *builder, const YoloInner *inner,
                                        const char *scope, int height, int width, const char *x) {
    OnnxGraph *graph = builder->graph;
    const int64_t c = inner->channels, tokens = (int64_t)height * width;
    const int64_t flat[3] = {0, 3 * c, tokens}, to_tokens[3] = {0, 2, 1};
    const int64_t areas[4] = {-1, tokens / inner->area, inner->heads, 3 * (int64_t)inner->head_dim};
    const int64_t heads_first[4] = {0, 2, 3, 1};
    const int64_t sizes[3] = {inner->head_dim, inner->head_dim, inner->head_dim};
    const char *qkv_tokens = onnx_transpose(
        builder, scope, onnx_reshape(builder, scope, unit_graph(builder, &inner->qkv, x), 3, flat),
        3, to_tokens);
    const char *qkv[3];
    onnx_split(builder, scope,
               onnx_transpose(builder, scope, onnx_reshape(builder, scope, qkv_tokens, 4, areas), 4,
                              heads_first),
               2, 3, sizes, qkv);
    const char *mixed =
        heads_attention(builder, scope, qkv, (float)(1.0 / sqrt(inner->head_dim)));
    // (B area, heads, head_dim, N / area) -> (B area, N / area, heads, head_dim) -> (B, H, W, C)
    // -> (B, C, H, W)
    const int64_t tokens_first[4] = {0, 3, 1, 2}, image[4] = {-1, height, width, c};
    const int64_t channels_first[4] = {0, 3, 1, 2};
    const char *images[2];
    const char *per_head[2] = {mixed, qkv[2]};
    for (int i = 0; i < 2; i++)
        images[i] = onnx_transpose(
            builder, scope,
            onnx_reshape(builder, scope, onnx_transpose(builder, scope, per_head[i], 4, tokens_first),
                         4, image),
            4, channels_first);
    const char *sum = onnx_binary(graph, "Add", scope, images[0],
                                  unit_graph(builder, &inner->pe, images[1]));
    return unit_graph(builder, &inner->proj, sum);
}

// YOLO12's ABlock: x + attn(x), then + mlp.
static const char *area_block_graph(const OnnxBuilder *builder, const YoloInner *inner,
                                    int height, int width, const char *x) {
    char scope[PARAM_MAX_NAME], block[PARAM_MAX_NAME];
    unit_scope(builder, &inner->qkv, ".qkv.conv.weight", scope, sizeof scope);  // "...attn"
    unit_scope(builder, &inner->qkv, ".attn.qkv.conv.weight", block, sizeof block);
    OnnxGraph *graph = builder->graph;
    const char *x1 = onnx_binary(graph, "Add", block, x,
                                 area_attention_graph(builder, inner, scope, height, width, x));
    const char *mlp = unit_graph(builder, &inner->ffn1, unit_graph(builder, &inner->ffn0, x1));
    return onnx_binary(graph, "Add", block, x1, mlp);
}

static const char *psa_graph(const OnnxBuilder *builder, const YoloInner *inner, const char *x) {
    char scope[PARAM_MAX_NAME], block[PARAM_MAX_NAME];
    unit_scope(builder, &inner->qkv, ".qkv.conv.weight", scope, sizeof scope);  // "...attn"
    unit_scope(builder, &inner->qkv, ".attn.qkv.conv.weight", block, sizeof block);
    OnnxGraph *graph = builder->graph;
    const char *x1 = onnx_binary(graph, "Add", block, x, attention_graph(builder, inner, scope, x));
    const char *ffn = unit_graph(builder, &inner->ffn1, unit_graph(builder, &inner->ffn0, x1));
    return onnx_binary(graph, "Add", block, x1, ffn);
}

static const char *inner_graph(const OnnxBuilder *builder, const YoloInner *inner,
                               int height, int width, const char *x) {
    switch (inner->kind) {
    case YOLO_INNER_AREA: return area_block_graph(builder, inner, height, width, x);
    case YOLO_INNER_BOTTLENECK: return bottleneck_graph(builder, &inner->bottleneck, x);
    case YOLO_INNER_C3K:
        return c3_graph(builder, &inner->cv1, &inner->cv2, &inner->cv3, inner->m, inner->count, x);
    case YOLO_INNER_PSA: return psa_graph(builder, inner, x);
    case YOLO_INNER_BOTTLENECK_PSA:
        return psa_graph(builder, inner, bottleneck_graph(builder, &inner->bottleneck, x));
    }
    return x;
}

// C2f, C3k2 (every inner output concatenated), C2PSA (only the last) and
// YOLO12's A2C2f (cv1's whole output, then each ABlock pair's or C3k's
// output; y = x + gamma cv2(...) for the l and x sizes) on H x W.
static const char *csp_graph(const OnnxBuilder *builder, const YoloModule *layer, int keep_all,
                             int height, int width, const char *x) {
    char scope[PARAM_MAX_NAME];
    unit_scope(builder, &layer->cv1, ".cv1.conv.weight", scope, sizeof scope);
    const char *parts[2 + 16];
    const int whole = layer->kind == YOLO_A2C2F, head = whole ? 1 : 2;
    const char *t = unit_graph(builder, &layer->cv1, x);
    const int64_t halves[2] = {layer->hidden, layer->hidden};
    if (whole) parts[0] = t;
    else onnx_split(builder, scope, t, 1, 2, halves, parts);
    int count = head;
    const char *b = parts[head - 1];
    const int groups = layer->inner_count / layer->inner_group;
    for (int i = 0; i < layer->inner_count; i++) {
        b = inner_graph(builder, &layer->inner[i], height, width, b);
        if (keep_all && (i + 1) % layer->inner_group == 0 &&
            count < (int)(sizeof parts / sizeof *parts))
            parts[count++] = b;
    }
    if (!keep_all) parts[1] = b;
    if (keep_all && count != head + groups)
        onnx_graph_fail(builder->graph, "%s: %d inner blocks, more than the export takes", scope,
                        layer->inner_count);
    const char *y = unit_graph(builder, &layer->cv2, onnx_concat(builder, scope, count, parts, 1));
    if (layer->gamma_index < 0) return y;
    const Parameter *gamma = &builder->params->params[layer->gamma_index];
    const int64_t column[4] = {1, layer->out_channels, 1, 1};
    OnnxGraph *graph = builder->graph;
    return onnx_binary(graph, "Add", scope, x,
                       onnx_binary(graph, "Mul", scope, onnx_parameter_as(builder, gamma, 4, column),
                                   y));
}

static const char *sppf_graph(const OnnxBuilder *builder, const YoloModule *layer,
                              const char *x) {
    char scope[PARAM_MAX_NAME];
    unit_scope(builder, &layer->cv1, ".cv1.conv.weight", scope, sizeof scope);
    const char *pooled[4];
    pooled[0] = unit_graph(builder, &layer->cv1, x);
    for (int i = 1; i < 4; i++)  // MaxPool2d(k, stride 1, padding k // 2)
        pooled[i] = onnx_maxpool(builder, scope, pooled[i - 1], layer->kernel, 1,
                                 layer->kernel / 2);
    const char *y = unit_graph(builder, &layer->cv2, onnx_concat(builder, scope, 4, pooled, 1));
    return layer->shortcut ? onnx_binary(builder->graph, "Add", scope, y, x) : y;
}

int onnx_yolo_graph(const OnnxBuilder *builder, const Backbone *backbone, int image_size,
                    const char *input, const char **output, ErrorMessage *err) {
    const Yolo *model = &backbone->model.yolo;
    const char *x = input;
    int height = image_size, width = image_size;  // of x: YOLO12's area attention needs them
    for (int l = 0; l < model->backbone_layers; l++) {
        const YoloModule *layer = &model->layers[l];
        switch (layer->kind) {
        case YOLO_CONV:  // a row of n > 1 (YOLOv6): its Sequential, stride 1 after cv1
            x = unit_graph(builder, &layer->cv1, x);
            for (int i = 0; i < layer->repeats - 1; i++)
                x = unit_graph(builder, &layer->chain[i], x);
            height = (height + 2 * layer->padding - layer->kernel) / layer->stride + 1;
            width = (width + 2 * layer->padding - layer->kernel) / layer->stride + 1;
            break;
        case YOLO_C2F:
        case YOLO_C3K2:
        case YOLO_A2C2F: x = csp_graph(builder, layer, 1, height, width, x); break;
        case YOLO_SPPF: x = sppf_graph(builder, layer, x); break;
        case YOLO_C2PSA: x = csp_graph(builder, layer, 0, height, width, x); break;
        case YOLO_C3:
            x = c3_graph(builder, &layer->cv1, &layer->cv2, &layer->cv3, layer->m, layer->repeats,
                         x);
            break;
        default:
            return error_set(err, "%s: layer %d of the trained part is not a backbone block",
                             model->config.name, l);
        }
    }
    char scope[32];
    snprintf(scope, sizeof scope, "model.%d.pool", model->backbone_layers - 1);
    *output = onnx_global_average_pool(builder, scope, x);
    return 0;
}
