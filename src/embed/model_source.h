// Where a backbone comes from for embed, export and distillation: a path to
// either one of our checkpoints (.ckpt, train/checkpoint.h) or a
// torchvision-style state dict in safetensors (with or without fc.*; F32,
// F16 or BF16). The ResNet depth is read from the tensor names, so the user
// never has to repeat it.
#ifndef LTC_EMBED_MODEL_SOURCE_H
#define LTC_EMBED_MODEL_SOURCE_H

#include "backend/backend.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "util/error.h"

// Detects the ResNet depth (18/34/50/101/152) from the names and shapes of
// the prefix + torchvision-name tensors: basic (conv1, conv2) or bottleneck
// (conv1..conv3) blocks and the number of blocks per layer. Anything else
// (e.g. a ViT) fails with a message saying what was found.
int model_source_detect_depth(const SafeTensors *file, const char *prefix, int *depth,
                              ErrorMessage *err);

// Loads a backbone from path. part: "backbone" (the file's default: the
// checkpoint's export_part, or the safetensors file itself), "student"
// ("backbone." of a checkpoint) or "teacher" ("teacher_backbone."; an error
// naming the method when the checkpoint has none); safetensors files accept
// only "backbone"/"student". Creates *model with resnet_declare +
// resnet_allocate for the input shapes given (input_count >= 1) and loads
// every parameter, buffer and the BN counter. Errors name the path; on
// failure *model holds nothing to free.
int model_source_load_resnet(const char *path, const char *part, Backend *backend,
                             const ResnetInputShape *inputs, int input_count, Resnet *model,
                             ErrorMessage *err);

// What model_source_load_resnet_info loaded.
typedef struct ModelSourceInfo {
    int is_checkpoint;       // 1: a .ckpt, 0: a safetensors state dict
    char prefix[32];         // the tensor-name prefix used: "backbone.", "teacher_backbone." or ""
    char method[64];         // the checkpoint's "method" metadata, "" when absent
} ModelSourceInfo;

// model_source_load_resnet that also says what it loaded (info may be NULL).
int model_source_load_resnet_info(const char *path, const char *part, Backend *backend,
                                  const ResnetInputShape *inputs, int input_count, Resnet *model,
                                  ModelSourceInfo *info, ErrorMessage *err);

#endif
