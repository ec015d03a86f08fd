// What the Ultralytics checkpoint writer's files share (weights/
// ultralytics_export.h): the Exporter, the pickle helpers and the modules'
// writers (ultralytics_export_modules.c: leaves and blocks;
// ultralytics_export_heads.c: the heads; ultralytics_export_world.c:
// YOLO-World's modules; ultralytics_export.c: the model, its YAML and the
// checkpoint).
#ifndef LTC_WEIGHTS_ULTRALYTICS_EXPORT_INTERNAL_H
#define LTC_WEIGHTS_ULTRALYTICS_EXPORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "nn/yolo.h"
#include "weights/pt_writer.h"

#define CONV_MODULE "ultralytics.nn.modules.conv"
#define BLOCK_MODULE "ultralytics.nn.modules.block"
#define CONTAINER "torch.nn.modules.container"
#define NAME_SIZE 160

typedef struct Exporter {
    PtWriter w;
    const Yolo *model;
    float *host, *torch;  // scratch of the largest tensor
    int default_act;      // memo index of the one activation every Conv shares (SiLU;
                          // YOLOv6's ReLU), or -1
    int missing;          // a tensor not in the tables (a bug): the export fails
    char first_missing[NAME_SIZE];
} Exporter;

// A top-level layer's attributes (parse_model's i, f, type, np).
typedef struct LayerInfo {
    int index;
    const YoloYamlLine *line;
    const char *type;
    int64_t parameters;
} LayerInfo;

void ux_text_format(char *out, size_t size, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
void ux_key(Exporter *e, const char *name);
void ux_key_int(Exporter *e, const char *name, int64_t value);
void ux_empty_ordered_dict(Exporter *e, const char *name);
void ux_module_begin(Exporter *e, const char *module, const char *cls);
void ux_section_begin(Exporter *e, const char *name);
void ux_section_end(Exporter *e);
void ux_children_begin(Exporter *e);
const Parameter *ux_find(const Exporter *e, const char *name);
void ux_entry(Exporter *e, const char *key_name, const char *prefix, int parameter,
              int requires_grad);
void ux_conv_module(Exporter *e, const char *prefix, int stride, int padding, int bias,
                    int requires_grad, int transposed);
// A layer that is a bare nn.ConvTranspose2d (YOLOv6's neck), with its attributes.
void ux_conv_transpose_layer(Exporter *e, const char *prefix, int stride, const LayerInfo *info);
// A Conv row of n > 1 (YOLOv6): a Sequential of n Conv units, its attributes on it.
void ux_conv_row(Exporter *e, const char *prefix, const YoloModule *layer,
                 const LayerInfo *info);
void ux_conv2d(Exporter *e, const char *prefix, int stride, int bias, int requires_grad);
void ux_leaf(Exporter *e, const char *module, const char *cls);
// A module's _parameters, the Parameters `first` and `second` under prefix
// (weight and bias, ...), then its empty _buffers.
void ux_parameter_pair(Exporter *e, const char *prefix, const char *first, const char *second);
void ux_layer_attributes(Exporter *e, const LayerInfo *info);
void ux_conv_unit(Exporter *e, const char *prefix, const char *cls, int stride, int padding,
                  int act, const LayerInfo *info);
void ux_child_conv(Exporter *e, const char *prefix, const char *child, const char *cls,
                   int act);
void ux_container_begin(Exporter *e, const char *cls);
void ux_container_end(Exporter *e);
// key_name: Sequential("0": a cls0 Conv unit, "1": a cls1 one) of the units under path.
void ux_conv_pair(Exporter *e, const char *key_name, const char *path, const char *cls0, int act0,
                  const char *cls1, int act1);
void ux_c3_block(Exporter *e, const char *prefix, const char *cls, int count, int shortcut,
                 const LayerInfo *info);
void ux_a2c2f(Exporter *e, const char *prefix, const YoloModule *layer, const LayerInfo *info);
void ux_csp(Exporter *e, const char *prefix, const YoloModule *layer, const LayerInfo *info);
void ux_sppf(Exporter *e, const char *prefix, const YoloModule *layer, const LayerInfo *info);
void ux_put_stride(Exporter *e);
const char *ux_head_class(const YoloConfig *config);
void ux_put_kpt_shape(Exporter *e);
void ux_detect(Exporter *e, const char *prefix, const YoloModule *layer,
               const LayerInfo *info);
void ux_classify_head(Exporter *e, const char *prefix, const LayerInfo *info);
// The -sem and -depth models' heads and their models' stride tensor ([32]).
void ux_semantic_head(Exporter *e, const char *prefix, const YoloModule *layer,
                      const LayerInfo *info);
void ux_depth_head(Exporter *e, const char *prefix, const YoloModule *layer,
                   const LayerInfo *info);
void ux_put_model_stride(Exporter *e);
// torch's Linear and BatchNorm2d (initialize_weights' eps and momentum) under prefix.
void ux_linear(Exporter *e, const char *prefix);
void ux_batchnorm(Exporter *e, const char *prefix);
// YOLO-World (ultralytics_export_world.c): WorldModel's txt_feats, C2fAttn's
// MaxSigmoidAttnBlock, ImagePoolingAttn, WorldDetect's cv4.
void ux_put_text_features(Exporter *e);
void ux_max_sigmoid_attn(Exporter *e, const char *prefix, const YoloModule *layer);
void ux_image_pooling_attn(Exporter *e, const char *prefix, const YoloModule *layer,
                           const LayerInfo *info);
void ux_contrastive_heads(Exporter *e, const char *prefix, const YoloModule *layer);

#endif
