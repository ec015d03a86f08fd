// ConvNeXt weight files (safetensors, or PyTorch .pt/.pth state dicts
// through nn/safetensors.h's reader) in torchvision's, timm's and DINOv3's
// namings (nn/convnext_names.h), and export in the model's own naming.
//
// A file in any naming loads into a model of any naming (the names are
// translated role by role: a timm copy of DINOv3's weights loads into a
// dinov3/convnext-* model). Files F32, F16 or BF16. Loading is strict: a
// tensor that is missing, of another shape or dtype, or not part of the
// model fails with a one-line message naming it; only the classifiers
// (torchvision's classifier.2, timm's head.fc) and DINOv3's duplicate
// norms.* are skipped, and the final norm may be missing where the model's
// features do not use it (torchvision and timm namings).
#ifndef LTC_NN_CONVNEXT_WEIGHTS_H
#define LTC_NN_CONVNEXT_WEIGHTS_H

#include "nn/convnext.h"
#include "nn/safetensors.h"
#include "util/error.h"

// 1 when the file holds a ConvNeXt under prefix (any naming).
int convnext_weights_detect(const SafeTensors *file, const char *prefix);

// The architecture under prefix: the naming, blocks and widths per stage,
// the depthwise kernel and the image channels from the tensors; the
// naming's default stochastic depth.
int convnext_config_from_weights(const SafeTensors *file, const char *prefix,
                                 ConvnextConfig *config, ErrorMessage *err);

// Loads every parameter of model from the tensors under prefix.
int convnext_load_from(Convnext *model, const SafeTensors *file, const char *prefix,
                       ErrorMessage *err);

// The model's state dict in its own naming, F32, with metadata format "pt":
//   torchvision: torchvision.models.convnext_tiny().load_state_dict(state,
//     strict=False) (only classifier.2.* missing: our backbone ends before
//     the classifier's linear layer);
//   timm: timm.create_model("convnext_tiny", num_classes=0).load_state_dict(state);
//   DINOv3: facebookresearch/dinov3's ConvNeXt (LightlyTrain's
//     dinov3/convnext-*) .load_state_dict(state) with strict=True, as its
//     own checkpoints load: norm.* is written again as norms.3.* (its state
//     dict lists the final norm under both names).
// write: NULL (safetensors), or another container (StateDictWrite).
int convnext_save(const Convnext *model, const char *path, StateDictWrite write,
                  ErrorMessage *err);

#endif
