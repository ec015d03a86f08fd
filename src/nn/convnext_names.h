// ConvNeXt model names and parameter namings (nn/convnext.h).
//
// --model names, LightlyTrain's: torchvision/convnext_{tiny,small,base,large}
// (torchvision naming; a bare convnext_tiny is the same), timm/convnext_*
// (timm naming) and dinov3/convnext-{tiny,small,base,large} (DINOv3's
// naming and features; "_" for "-" and a -pretrain(ed) suffix accepted, as
// LightlyTrain's DINOv3 package does). Sizes: Tiny depths 3-3-9-3, widths
// 96-192-384-768; Small 3-3-27-3, 96...; Base 3-3-27-3, 128-256-512-1024;
// Large 3-3-27-3, 192-384-768-1536. Stochastic depth as each codebase's
// builder: torchvision 0.1 (Tiny), 0.4 (Small), 0.5 (Base, Large); timm
// and DINOv3 0.
//
// Parameter names per naming (stage S, block B, leaf weight / bias):
//   role          torchvision                timm                       DINOv3
//   stem conv     features.0.0               stem.0                     downsample_layers.0.0
//   stem norm     features.0.1               stem.1                     downsample_layers.0.1
//   down norm     features.{2S}.0            stages.S.downsample.0      downsample_layers.S.0
//   down conv     features.{2S}.1            stages.S.downsample.1      downsample_layers.S.1
//   dwconv        features.{2S+1}.B.block.0  stages.S.blocks.B.conv_dw  stages.S.B.dwconv
//   norm          ....block.2                ....norm                   ....norm
//   fc1, fc2      ....block.3, block.5       ....mlp.fc1, mlp.fc2       ....pwconv1, pwconv2
//   gamma         ....layer_scale (C, 1, 1)  ....gamma (C)              ....gamma (C)
//   final norm    classifier.0               head.norm                  norm (and norms.3)
// Skipped when loading: torchvision's classifier.2.* and timm's head.fc.*
// (classifiers), DINOv3's norms.* (norms.3 is norm itself; its state dict
// holds both).
#ifndef LTC_NN_CONVNEXT_NAMES_H
#define LTC_NN_CONVNEXT_NAMES_H

#include <stddef.h>

#include "nn/convnext.h"
#include "nn/safetensors.h"
#include "util/error.h"

extern const char *const convnext_naming_names[];  // "torchvision", "timm", "dinov3"

// 1 when name is a --model name of a ConvNeXt (any spelling above).
int convnext_is_preset_name(const char *name);
// The configuration of a --model name.
int convnext_config_preset(const char *name, ConvnextConfig *config, ErrorMessage *err);
// The size a (depths, dims) geometry is ("tiny", ...), or NULL.
const char *convnext_size_name(const ConvnextConfig *config);
// Fills config->name: the preset's name, else "<naming>/convnext_w<dims[0]>".
void convnext_config_name(ConvnextConfig *config);
// Checks the geometry (positive sizes, odd kernel).
int convnext_config_check(const ConvnextConfig *config, ErrorMessage *err);
// The stochastic depth a naming's builder gives the size (torchvision's
// defaults; timm's and DINOv3's 0).
float convnext_default_drop_path(const ConvnextConfig *config);

// out = the name of the tensor in `naming` (see the table above).
void convnext_tensor_name(ConvnextNaming naming, const ConvnextTensorRole *role, char *out,
                          size_t size);

// The naming of the ConvNeXt under prefix in file (by its stem conv), or
// -1 when none is there.
int convnext_naming_detect(const SafeTensors *file, const char *prefix);
// 1 when the tensor `name` of file is a ConvNeXt's stem conv weight (any
// naming, with the naming's first block beside it); prefix (size bytes)
// gets what precedes it.
int convnext_anchor_prefix(const SafeTensors *file, const char *name, char *prefix,
                           size_t size);
// 1 when the tensor key (after the prefix) is one loading skips in naming.
int convnext_name_skipped(ConvnextNaming naming, const char *key);

#endif
