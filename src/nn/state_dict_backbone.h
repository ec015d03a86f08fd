// A backbone inside a state dict (safetensors or PyTorch, read by
// weights/weight_file.h into nn/safetensors.h's SafeTensors):
// where it sits (the key prefix: "" for a bare one, "backbone." of DINOv2's
// teacher_checkpoint.pth and LightlyTrain's wrapped models, "module." of
// DDP, ...), what it is (torchvision's ResNet, with or without fc.*, a
// ViT in timm's, DINOv2's, DINOv3's or transformers' naming,
// nn/vit_weights.h, or a ConvNeXt in torchvision's, timm's or DINOv3's,
// nn/convnext_weights.h), and what the load of such a file
// (weights/weight_file.h weight_file_load_backbone) hands a loader, shared by the
// initial weights of training (ssl_methods/method.h) and the backbones of
// embed, export and distillation teachers (train/model_source.h).
#ifndef LTC_NN_STATE_DICT_BACKBONE_H
#define LTC_NN_STATE_DICT_BACKBONE_H

#include <stddef.h>

#include "nn/backbone.h"
#include "nn/safetensors.h"
#include "util/error.h"

// The tensor prefix + name; NULL when absent.
const SafeTensor *state_dict_find(const SafeTensors *file, const char *prefix, const char *name);

// The prefix of the one backbone of a state dict: "" for a bare one, else
// what precedes its anchor key ("cls_token" of a ViT in any of its namings,
// a ConvNeXt's stem conv with its first block in any of its namings,
// "conv1.weight" with "layer1.0.conv1.weight" of a ResNet). An error when
// backbones sit under two prefixes (a student and a teacher). 0 when found;
// 1 with prefix "" when no anchor is found (the architecture's detection at
// the root then says what is missing).
int state_dict_backbone_prefix(const SafeTensors *file, char *prefix, size_t size,
                               ErrorMessage *err);

// Detects the ResNet depth (18/26/34/50/101/152/200) from the names and shapes of
// the prefix + torchvision-name tensors: basic (conv1, conv2) or bottleneck
// (conv1..conv3) blocks and the number of blocks per layer. Anything else
// (e.g. a ViT) fails with a message saying what was found.
int state_dict_resnet_depth(const SafeTensors *file, const char *prefix, int *depth,
                            ErrorMessage *err);

// The architecture under prefix: a ConvNeXt when its stem and first block
// are there, a ViT when its tokens are, else a ResNet of the detected depth
// (in_channels: the file's), or the Ultralytics model whose tables match
// (nn/yolo.h yolo_config_from_weights).
int state_dict_backbone_spec(const SafeTensors *file, const char *prefix, BackboneSpec *spec,
                             ErrorMessage *err);

// What a caller does with the state dict and its backbone's prefix: make
// and load a model, or load into one it has. anchored: 1 when the prefix is
// where a backbone's anchor was found, 0 when none was and the root is
// tried. 0 or -1 with err.
typedef int (*StateDictBackboneLoader)(void *context, SafeTensors *file, const char *prefix,
                                       int anchored, ErrorMessage *err);

#endif
