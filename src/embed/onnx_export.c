// The ONNX export of a backbone (see onnx_export.h): the table of model
// families, the graph's input and output, and the metadata.
#include "embed/onnx_export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed/onnx_families.h"
#include "embed/onnx_layers.h"

typedef struct OnnxFamily {
    BackboneKind kind;
    OnnxSizeCheck check;
    OnnxGraphBuild build;
} OnnxFamily;

// One row per model family (onnx_families.h).
static const OnnxFamily onnx_families[] = {
    {BACKBONE_RESNET, onnx_any_size_check, onnx_resnet_graph},
    {BACKBONE_VIT, onnx_vit_check, onnx_vit_graph},
    {BACKBONE_YOLO, onnx_any_size_check, onnx_yolo_graph},
    {BACKBONE_CONVNEXT, onnx_convnext_check, onnx_convnext_graph},
    {BACKBONE_SHUFFLENET, onnx_any_size_check, onnx_shufflenet_graph},
};

int onnx_any_size_check(const Backbone *backbone, int image_size, ErrorMessage *err) {
    (void)backbone;
    return image_size >= 1 ? 0 : error_set(err, "image size %d: at least 1", image_size);
}

static const OnnxFamily *family_of(const Backbone *backbone, ErrorMessage *err) {
    for (size_t i = 0; i < sizeof onnx_families / sizeof *onnx_families; i++)
        if (onnx_families[i].kind == backbone->spec.kind) return &onnx_families[i];
    char name[BACKBONE_MAX_NAME];
    backbone_spec_name(&backbone->spec, name, sizeof name);
    error_set(err, "ONNX export of %s is not supported yet (ResNets, ViTs, YOLOs, "
                   "ConvNeXts and ShuffleNetV2s are)", name);
    return NULL;
}

int onnx_export_check(const Backbone *backbone, const OnnxExportOptions *options,
                      ErrorMessage *err) {
    const OnnxFamily *family = family_of(backbone, err);
    if (!family) return -1;
    const int opset = options->opset ? options->opset : ONNX_OPSET_DEFAULT;
    if (opset < ONNX_OPSET_MIN || opset > ONNX_OPSET_MAX)
        return error_set(err, "ONNX opset %d is outside %d..%d", opset, ONNX_OPSET_MIN,
                         ONNX_OPSET_MAX);
    return family->check(backbone, options->image_size, err);
}

int onnx_export_external(const Backbone *backbone, const OnnxExportOptions *options) {
    const size_t elements = parameter_set_elements(backbone->params) +
                            (backbone->buffers ? parameter_set_elements(backbone->buffers) : 0);
    const size_t bytes = elements * (options->precision == ONNX_FP16 ? 2 : 4);
    return options->external_data || bytes > ONNX_INLINE_LIMIT;
}

// What the model's embedding is, in words (metadata "pooling").
static const char *pooling_text(const Backbone *backbone) {
    if (backbone->spec.kind == BACKBONE_YOLO)
        return "global average pool of the trained part's last layer";
    if (backbone->spec.kind == BACKBONE_CONVNEXT &&
        convnext_norm_features(&backbone->model.convnext.config))
        return "mean of the final norm over the last stage's positions";
    if (backbone->spec.kind != BACKBONE_VIT) return "global average pool of the last stage";
    return backbone->model.vit.config.pool == VIT_POOL_CLS
               ? "the normalised class token"
               : "mean of the normalised patch tokens";
}

// The shortest decimal that reads back as value (0.485, not 0.485000014).
static void shortest_float(float value, char *out, size_t size) {
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(out, size, "%.*g", digits, (double)value);
        if (strtof(out, NULL) == value) return;
    }
}

// {"mean": [...], "std": [...]}: LightlyTrain's image_normalize metadata.
static void normalize_json(const OnnxExportOptions *options, char *out, size_t size) {
    size_t used = (size_t)snprintf(out, size, "{\"mean\": [");
    for (int part = 0; part < 2; part++) {
        const float *values = part ? options->std : options->mean;
        for (int c = 0; c < options->channels && used < size; c++) {
            char number[32];
            shortest_float(values[c], number, sizeof number);
            used += (size_t)snprintf(out + used, size - used, "%s%s", c ? ", " : "", number);
        }
        if (used < size)
            used += (size_t)snprintf(out + used, size - used, part ? "]}" : "], \"std\": [");
    }
}

// The pooled features through the embedding head: Gemm(x, W, b, transB=1).
static const char *embedding_head_gemm(OnnxGraph *graph, const EmbeddingHead *head,
                                       const char *features) {
    const int64_t weight_dims[2] = {head->out, head->in}, bias_dims[1] = {head->out};
    const char *inputs[3] = {
        features, onnx_weight_copy(graph, "embed_head.weight", 2, weight_dims, head->weight),
        onnx_weight_copy(graph, "embed_head.bias", 1, bias_dims, head->bias)};
    const OnnxAttr transpose = onnx_attr_int("transB", 1);
    return onnx_node(graph, "Gemm", "embed_head", inputs, 3, &transpose, 1);
}

int onnx_export_backbone(const Backbone *backbone, const OnnxExportOptions *options,
                         const char *path, OnnxExportSummary *summary, ErrorMessage *err) {
    if (onnx_export_check(backbone, options, err)) return -1;
    const OnnxFamily *family = family_of(backbone, err);
    const int opset = options->opset ? options->opset : ONNX_OPSET_DEFAULT;
    char name[BACKBONE_MAX_NAME];
    backbone_spec_name(&backbone->spec, name, sizeof name);
    OnnxGraph *graph = onnx_graph_create(name, options->precision, opset, err);
    if (!graph) return -1;
    const Parameter *first = backbone_input_layer(backbone);
    const int channels = first ? first->torch_shape[1] : 3, size = options->image_size;
    const int64_t input_dims[4] = {ONNX_BATCH_DIM, channels, size, size};
    const EmbeddingHead *head = options->head && options->head->out ? options->head : NULL;
    const int dim = head ? head->out : backbone->feature_dim;
    const int64_t output_dims[2] = {ONNX_BATCH_DIM, dim};
    onnx_graph_input(graph, "images", 4, input_dims);
    const OnnxBuilder builder = {graph, backbone->backend, backbone->params, backbone->buffers};
    const char *output = NULL;
    int status = family->build(&builder, backbone, size, "images", &output, err);
    if (!status && head) output = embedding_head_gemm(graph, head, output);
    if (!status) onnx_graph_output(graph, output, "embeddings", 2, output_dims);

    char normalize[2 * 64 * 18 + 32], size_text[16], dim_text[16], input_text[160];
    normalize_json(options, normalize, sizeof normalize);
    snprintf(size_text, sizeof size_text, "%d", size);
    snprintf(dim_text, sizeof dim_text, "%d", dim);
    snprintf(input_text, sizeof input_text,
             "images (batch, %d, %d, %d) %s NCHW, (pixel / 255 - mean) / std: image_normalize",
             channels, size, size, options->precision == ONNX_FP16 ? "float16" : "float32");
    const OnnxMetadata metadata[] = {
        {"model_name", name},
        {"image_normalize", normalize},
        {"image_size", size_text},
        {"input", input_text},
        {"pooling", pooling_text(backbone)},
        {"embedding_dim", dim_text},
        {"precision", onnx_precision_name(options->precision)},
        {"lightly_train_c_version", LTC_VERSION},
    };
    const OnnxWriteOptions write = {
        .doc = "A lightly-train-c backbone: normalised images (batch, C, H, W) to their "
               "embeddings (batch, D), as lightly-train-c embed computes them.",
        .metadata = metadata,
        .metadata_count = (int)(sizeof metadata / sizeof *metadata),
        .external_data = onnx_export_external(backbone, options),
    };
    OnnxWriteSummary written = {0};
    if (!status) status = onnx_graph_write(graph, path, &write, &written, err);
    onnx_graph_free(graph);
    if (!status && summary)
        *summary = (OnnxExportSummary){written, opset, dim};
    return status;
}
