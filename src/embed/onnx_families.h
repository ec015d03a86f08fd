// The model families the ONNX exporter writes (embed/onnx_export.c keeps
// the table: a BackboneKind, its check of the export size, its graph).
// A new family adds a file with these two functions
// and one row to that table; the layer emitters it needs go to
// onnx_layers.h.
#ifndef LTC_EMBED_ONNX_FAMILIES_H
#define LTC_EMBED_ONNX_FAMILIES_H

#include "embed/onnx_layers.h"
#include "nn/backbone.h"
#include "util/error.h"

// Whether the backbone takes image_size x image_size inputs; -1 with a
// message saying what it takes.
typedef int (*OnnxSizeCheck)(const Backbone *backbone, int image_size, ErrorMessage *err);

// Builds the backbone's forward from input (N, C, image_size, image_size)
// to the pooled embedding (N, D) the embed command computes: *output =
// its value's name. Nodes and weights go to builder->graph (whose failure
// onnx_graph_write reports); -1 with err for anything else.
typedef int (*OnnxGraphBuild)(const OnnxBuilder *builder, const Backbone *backbone,
                              int image_size, const char *input, const char **output,
                              ErrorMessage *err);

// Convolutional networks pooled globally: every size from 1 pixel on gives
// a 1 x 1 (or larger) last map.
int onnx_any_size_check(const Backbone *backbone, int image_size, ErrorMessage *err);
int onnx_resnet_graph(const OnnxBuilder *builder, const Backbone *backbone, int image_size,
                      const char *input, const char **output, ErrorMessage *err);
int onnx_vit_check(const Backbone *backbone, int image_size, ErrorMessage *err);
int onnx_vit_graph(const OnnxBuilder *builder, const Backbone *backbone, int image_size,
                   const char *input, const char **output, ErrorMessage *err);
int onnx_convnext_check(const Backbone *backbone, int image_size, ErrorMessage *err);
int onnx_convnext_graph(const OnnxBuilder *builder, const Backbone *backbone, int image_size,
                        const char *input, const char **output, ErrorMessage *err);
int onnx_shufflenet_graph(const OnnxBuilder *builder, const Backbone *backbone, int image_size,
                          const char *input, const char **output, ErrorMessage *err);
int onnx_yolo_graph(const OnnxBuilder *builder, const Backbone *backbone, int image_size,
                    const char *input, const char **output, ErrorMessage *err);

#endif
