// `export --format torch_model` (LightlyTrain's torch_model: torch.save of the
// model itself, which `torch.load(path, weights_only=False)` returns as a
// module ready to run): a torchvision ResNet (any depth, the wide ones, and
// timm's ResNets, which share torchvision's layout), ShuffleNetV2 or
// ConvNeXt (torchvision's naming) as the pickled module tree torchvision
// builds, its classes and the attributes their __init__ sets (checked
// against torchvision 0.29: tests/fixtures/torchvision_structure.txt), its
// tensors those of the state dict `--format torch` writes, bit for bit.
// The classifier (ResNet's and ShuffleNetV2's fc, ConvNeXt's
// classifier[2]) is an nn.Identity: a pretrained backbone has none, and the
// model returns the features embed computes. ViTs, YOLOs and timm's or
// DINOv3's ConvNeXts are refused (their classes are timm's, LightlyTrain's
// or Ultralytics').
#ifndef LTC_WEIGHTS_TORCH_MODULE_EXPORT_H
#define LTC_WEIGHTS_TORCH_MODULE_EXPORT_H

#include "nn/backbone.h"
#include "util/error.h"

// 1 when export_torch_module writes the backbone, else 0 with err naming why.
int torch_module_supported(const BackboneSpec *spec, ErrorMessage *err);

// Writes the module at path atomically. -1 with err.
int export_torch_module(const Backbone *model, const char *path, ErrorMessage *err);

#endif
