// ViT weight files (safetensors) in the three namings people have DINOv2
// weights in, and export in timm's:
//
// - timm (vit_small_patch14_dinov2, ...): cls_token, reg_token, pos_embed,
//   patch_embed.proj.*, blocks.N.{norm1, attn.qkv, attn.proj, ls1.gamma,
//   norm2, mlp.fc1, mlp.fc2, ls2.gamma}, norm.*; a classifier head.* is
//   skipped. Register models use timm's no_embed_class layout.
// - DINOv2 (facebookresearch/dinov2 and LightlyTrain state dicts): timm's
//   block names, plus register_tokens, mask_token (skipped), a pos_embed that
//   always holds the class token's position, and blocks.C.N (chunked blocks,
//   LightlyTrain's default) as well as blocks.N.
// - Hugging Face transformers Dinov2Model / Dinov2WithRegistersModel:
//   embeddings.{cls_token, mask_token, register_tokens, position_embeddings,
//   patch_embeddings.projection.*}, encoder.layer.N.{norm1,
//   attention.attention.{query, key, value}, attention.output.dense,
//   layer_scale1.lambda1, norm2, mlp.fc1, mlp.fc2, layer_scale2.lambda1},
//   layernorm.*; a "dinov2." prefix (a classification model's backbone)
//   is accepted. query/key/value are stacked into attn.qkv.
//
// A register model from a layout whose position embeddings include the class
// token's gets timm's: cls_token + pos_embed[0], pos_embed[1:].
//
// Files F32, F16 or BF16. Loading is strict: the first tensor that is
// missing, of another shape or dtype, or not part of the model fails with a
// one-line message naming it.
#ifndef LTC_NN_VIT_WEIGHTS_H
#define LTC_NN_VIT_WEIGHTS_H

#include "nn/safetensors.h"
#include "nn/vit.h"
#include "util/error.h"

// 1 when the file holds ViT tensors under prefix (any of the three namings).
int vit_weights_detect(const SafeTensors *file, const char *prefix);

// The architecture of the ViT under prefix: width, depth, patch size,
// registers, LayerScale, MLP width and the position grid from the tensors;
// heads from the metadata key "num_heads" (written by vit_save) or width / 64
// (every DINOv2 and timm ViT); position interpolation and pooling from the
// metadata ("pos_interpolation", "pool") or the presets' defaults.
int vit_config_from_weights(const SafeTensors *file, const char *prefix, VitConfig *config,
                            ErrorMessage *err);

// Loads every parameter of model from the tensors under prefix.
int vit_load_from(Vit *model, const SafeTensors *file, const char *prefix, ErrorMessage *err);
int vit_load(Vit *model, const char *path, ErrorMessage *err);

// timm state dict (F32, timm names; loads with
// timm.create_model("vit_small_patch14_dinov2", img_size=M * patch,
// num_classes=0).load_state_dict(...)) plus metadata num_heads,
// pos_interpolation and pool.
int vit_save(const Vit *model, const char *path, ErrorMessage *err);

#endif
