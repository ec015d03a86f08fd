// The tensor namings ViT weight files come in, mapped onto our parameter
// table (timm's names, vit.h), for vit_weights.c: which naming a file
// uses, where its blocks are, and for each of our parameters the file
// tensor(s) it is read from. The namings themselves are listed in
// vit_weights.h.
#ifndef LTC_NN_VIT_NAMES_H
#define LTC_NN_VIT_NAMES_H

#include "nn/safetensors.h"
#include "nn/vit.h"
#include "util/error.h"

#define VIT_MAX_BLOCKS 256
#define VIT_KEY SAFETENSORS_MAX_NAME
#define VIT_MAX_PARTS 3

typedef enum VitNaming {
    NAMING_TIMM,       // timm's VisionTransformer (and our checkpoints, RoPE models too)
    NAMING_DINOV2,     // facebookresearch/dinov2, LightlyTrain's DINOv2 state dicts
    NAMING_HF,         // transformers' Dinov2Model / Dinov2WithRegistersModel
    NAMING_DINOV3,     // facebookresearch/dinov3, LightlyTrain's DINOv3 state dicts
    NAMING_HF_DINOV3,  // transformers' DINOv3ViTModel
    NAMING_EVA,        // timm's vit_*_dinov3 (its Eva class)
} VitNaming;

// "timm", "DINOv2", "transformers", "DINOv3", "transformers DINOv3", "timm Eva".
const char *vit_naming_name(VitNaming naming);

// How a file lays out one ViT.
typedef struct VitLayout {
    VitNaming naming;
    char prefix[160];              // before every key ("", "backbone.", "dinov2.", ...)
    char block_prefix[32];         // transformers DINOv3: "layer." or "model.layer."
    int chunked;                   // DINOv2's blocks.C.N
    int chunk_of[VIT_MAX_BLOCKS];  // chunk C of block N
    int depth;
    int registers;
    int rope;                      // no learned positions: DINOv3's RoPE
    int swiglu;                    // a SwiGLU MLP (packed fc1 of ours, or its two halves)
    VitQkvBias qkv_bias;           // as the names say
    int key_bias;                  // transformers DINOv3: the file has k_proj.bias
    int bias_mask;                 // DINOv3: qkv.bias_mask tensors (multiplied into qkv.bias)
    int file_class_pos;            // the file's positions include the class token's
} VitLayout;

// Where one of our parameters comes from: `parts` tensors stacked along
// dim 0 (transformers' query, key, value; SwiGLU's gate and value), each
// key empty where the file has no such part (a key bias it lacks: zero),
// and optionally a tensor multiplied in elementwise (DINOv3's
// qkv.bias_mask). Keys include the prefix.
typedef struct VitSource {
    int parts;
    char keys[VIT_MAX_PARTS][VIT_KEY];
    char mask[VIT_KEY];
} VitSource;

// The naming, prefix, depth, registers, RoPE and MLP kind of the ViT under
// prefix; an error names what is missing.
int vit_names_detect(const SafeTensors *file, const char *prefix, VitLayout *layout,
                     ErrorMessage *err);
// 1 when the file holds a ViT under prefix, in any naming.
int vit_names_present(const SafeTensors *file, const char *prefix);
// The class token's names under a ViT's prefix in the namings known
// (transformers' DINOv2, transformers', timm's), longest first.
enum { VIT_CLASS_TOKEN_NAME_COUNT = 3 };
extern const char *const VIT_CLASS_TOKEN_NAMES[VIT_CLASS_TOKEN_NAME_COUNT];
// The source of our parameter `name`.
void vit_names_source(const VitLayout *layout, const char *name, VitSource *source);
// The first tensor of our parameter `name`, or NULL.
const SafeTensor *vit_names_tensor(const SafeTensors *file, const VitLayout *layout,
                                   const char *name);
// A tensor of block `block`, by our name within the block ("norm1.weight").
const SafeTensor *vit_names_block_tensor(const SafeTensors *file, const VitLayout *layout,
                                         int block, const char *name);
// 1 when a file tensor (name after the layout's prefix) is no part of a
// backbone and is skipped: a classifier, a mask token, DINOv3's
// training-only local_cls_norm, an empty register tensor.
int vit_names_skipped(const VitLayout *layout, const SafeTensor *tensor, const char *name);
// The key of the RoPE periods: DINOv3's rope_embed.periods (NAMING_DINOV3,
// required), our checkpoints' rope.periods buffer (NAMING_TIMM without
// pos_embed, optional: timm-style files lack it), else "".
void vit_names_periods_key(const VitLayout *layout, char *key, size_t size);

#endif
