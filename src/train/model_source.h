// Where a backbone comes from for embed, export and distillation: a path to
// either one of our checkpoints (.ckpt, train/checkpoint.h) or a backbone
// state dict in safetensors: torchvision's ResNet (with or without fc.*) or
// a ViT in timm's, DINOv2's, DINOv3's or transformers' naming (DINOv2 and
// DINOv3, nn/vit_weights.h); F32, F16 or BF16. The architecture is read from
// the tensor names and shapes (nn/state_dict_backbone.h), so the user never
// has to repeat it.
#ifndef LTC_TRAIN_MODEL_SOURCE_H
#define LTC_TRAIN_MODEL_SOURCE_H

#include "backend/backend.h"
#include "nn/backbone.h"
#include "nn/safetensors.h"
#include "util/error.h"

// Loads a backbone from path. part: "backbone" (the file's default: the
// checkpoint's export_part, or the safetensors file itself), "student"
// ("backbone." of a checkpoint) or "teacher" ("teacher_backbone."; an error
// naming the method when the checkpoint has none); safetensors files accept
// only "backbone"/"student". Creates *model (backbone_allocate) for the input
// shapes given (input_count >= 1; a resolution of 0: the smallest the
// architecture takes, for a model that runs no forward) and loads every
// parameter, buffer and the BN counter. Errors name the path; on failure *model holds nothing to free.
int model_source_load_backbone(const char *path, const char *part, Backend *backend,
                               const BackboneInput *inputs, int input_count, Backbone *model,
                               ErrorMessage *err);

// What model_source_load_backbone_info loaded.
typedef struct ModelSourceInfo {
    int is_checkpoint;       // 1: a .ckpt, 0: a safetensors state dict
    char prefix[SAFETENSORS_MAX_NAME];  // the tensor-name prefix used: "backbone.",
                                        // "teacher_backbone.", a state dict's
                                        // (state_dict_backbone_prefix) or ""
    char method[64];         // the checkpoint's "method" metadata, "" when absent
    // The model's input as train recorded it (checkpoints only; "" when
    // absent): "uint8" or "float" pixels, the normalisation
    // "MEAN1,...:STD1,...". Its channels are the first layer's
    // (backbone_input_layer).
    char pixels[8];
    char normalize[2400];
    int image_size;          // the training size (metadata run.image_size); 0 when absent
    int embed_dim;           // train's --embed-dim (run.embed_dim): the checkpoint has an
                             // embedding head (embed/embedding_head.h); 0: none
} ModelSourceInfo;

// model_source_load_backbone that also says what it loaded (info may be NULL).
int model_source_load_backbone_info(const char *path, const char *part, Backend *backend,
                                    const BackboneInput *inputs, int input_count,
                                    Backbone *model, ModelSourceInfo *info, ErrorMessage *err);

// How model_source_load_backbone_with loads.
typedef struct ModelSourceOptions {
    const char *part;  // as model_source_load_backbone's
    // A --model name (backbone_spec_parse) for what the file cannot say (a
    // ViT's number of heads without "num_heads" metadata), or NULL. It must
    // agree with what the file says (ResNet depth; ViT width, depth, patch,
    // registers, MLP width), else a one-line error names the difference.
    const char *arch;
    int frozen;        // backbone_allocate_frozen: nothing kept for backward (a teacher, embed)
} ModelSourceOptions;

int model_source_load_backbone_with(const char *path, const ModelSourceOptions *options,
                                    Backend *backend, const BackboneInput *inputs,
                                    int input_count, Backbone *model, ModelSourceInfo *info,
                                    ErrorMessage *err);

#endif
