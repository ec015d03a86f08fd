// A backbone as an ONNX model (docs/onnx.md): the embedding model the
// embed command runs, from the normalised image to the pooled embedding.
//
//   input  "images"     (batch, C, H, W), H = W = the export's image size,
//                       float32 (fp16: float16), NCHW, RGB for 3 channels,
//                       already normalised: (pixel / 255 - mean) / std
//                       (the normalisation is not in the graph; the model's
//                       mean and std are in its metadata, "image_normalize")
//   output "embeddings" (batch, D): what embed writes for the same image
//                       (through the checkpoint's embedding head when it has
//                       one, train's --embed-dim: (batch, embed_dim))
//
// The batch is dynamic; H and W are fixed (a ViT's positions and RoPE
// tables are computed for them). Written with protobuf-c (onnx.proto),
// nothing else needed.
#ifndef LTC_EMBED_ONNX_EXPORT_H
#define LTC_EMBED_ONNX_EXPORT_H

#include <stddef.h>

#include "embed/embedding_head.h"
#include "embed/onnx_graph.h"
#include "nn/backbone.h"
#include "util/error.h"

typedef struct OnnxExportOptions {
    int image_size;           // H = W of the input
    OnnxPrecision precision;
    int opset;                // ONNX_OPSET_MIN..ONNX_OPSET_MAX (0: ONNX_OPSET_DEFAULT)
    int external_data;        // 1: weights in "<path>.data" (always above 2 GB)
    // The normalisation of the model's input, for the metadata (the
    // embed command's: the checkpoint's, --normalize, or ImageNet's):
    // channels means and stds.
    int channels;
    const float *mean, *std;
    // The checkpoint's embedding head (embed/embedding_head.h), a Gemm
    // after the pooled features, or NULL (or out 0): none.
    const EmbeddingHead *head;
} OnnxExportOptions;

typedef struct OnnxExportSummary {
    OnnxWriteSummary write;
    int opset;
    int embedding_dim;
} OnnxExportSummary;

// Whether the backbone can be exported at options->image_size (its family
// is supported; a ViT: a multiple of the patch whose position grid can be
// resampled); -1 with a message naming the problem. Cheap: call before
// the work whose result would be lost.
int onnx_export_check(const Backbone *backbone, const OnnxExportOptions *options,
                      ErrorMessage *err);

// 1 when the weights go to the external data file "<path>.data": asked
// for, or too large for protobuf (ONNX_INLINE_LIMIT).
int onnx_export_external(const Backbone *backbone, const OnnxExportOptions *options);

// Writes the backbone (parameters read from its backend) to path
// atomically (onnx_graph_write). summary may be NULL.
int onnx_export_backbone(const Backbone *backbone, const OnnxExportOptions *options,
                         const char *path, OnnxExportSummary *summary, ErrorMessage *err);

#endif
