// ViT weight files (safetensors) in the namings people have DINOv2 and
// DINOv3 weights in, and export in timm's:
//
// - timm (vit_small_patch14_dinov2, ...): cls_token, reg_token, pos_embed,
//   patch_embed.proj.*, blocks.N.{norm1, attn.qkv, attn.proj, ls1.gamma,
//   norm2, mlp.fc1, mlp.fc2, ls2.gamma}, norm.*; a classifier head.* is
//   skipped. Register models use timm's no_embed_class layout. Our own
//   checkpoints and exports of DINOv2 ViTs are in this naming, our
//   checkpoints of DINOv3 ViTs too (no pos_embed: RoPE; the periods as
//   rope.periods; a SwiGLU mlp.fc1 of 2 H rows, gate over value, as timm's
//   SwiGLUPacked, which DINOv2's ViT-g (vit_giant_patch14_dinov2) uses too).
// - DINOv2 (facebookresearch/dinov2 and LightlyTrain state dicts): timm's
//   block names, plus register_tokens, mask_token (skipped), a pos_embed that
//   always holds the class token's position, and blocks.C.N (chunked blocks,
//   LightlyTrain's default) as well as blocks.N. ViT-g's SwiGLU MLP is
//   mlp.w12 (2 H, D: the SiLU half first, as ours) and mlp.w3.
// - Hugging Face transformers Dinov2Model / Dinov2WithRegistersModel:
//   embeddings.{cls_token, mask_token, register_tokens, position_embeddings,
//   patch_embeddings.projection.*}, encoder.layer.N.{norm1,
//   attention.attention.{query, key, value}, attention.output.dense,
//   layer_scale1.lambda1, norm2, mlp.fc1, mlp.fc2 (use_swiglu_ffn:
//   mlp.weights_in (2 H, D), mlp.weights_out), layer_scale2.lambda1},
//   layernorm.*; a "dinov2." prefix (a classification model's backbone)
//   is accepted. query/key/value are stacked into attn.qkv.
// - DINOv3 (facebookresearch/dinov3's DinoVisionTransformer, LightlyTrain's
//   dinov3/* models): cls_token, storage_tokens, mask_token (skipped),
//   rope_embed.periods (used as the RoPE periods), patch_embed.proj.*,
//   blocks.N.{norm1, attn.qkv.{weight, bias, bias_mask}, attn.proj,
//   ls1.gamma, norm2, mlp.{fc1, fc2} or SwiGLU's mlp.{w1, w2, w3},
//   ls2.gamma}, norm.*; local_cls_norm.* (ViT-7B / SAT-493M training only)
//   is skipped, cls_norm (untied norms) refused. qkv.bias is multiplied by
//   bias_mask (mask_k_bias: the key part zero).
// - transformers DINOv3ViTModel (4.56 and later): embeddings.{cls_token,
//   mask_token, register_tokens, patch_embeddings.*}, layer.N or (5.x)
//   model.layer.N .{norm1, attention.{q_proj, k_proj, v_proj, o_proj},
//   layer_scale1.lambda1, norm2, mlp.{up_proj, down_proj} or mlp.{gate_proj,
//   up_proj, down_proj}, layer_scale2.lambda1}, norm.*; a missing
//   k_proj.bias (key_bias False, the default) is a zero key bias.
// - timm's vit_*_dinov3 (Eva): cls_token, reg_token, patch_embed.proj.*,
//   blocks.N.{norm1, attn.qkv.weight, attn.q_bias, attn.v_bias (the _qkvb
//   models), attn.proj, gamma_1, norm2, mlp.{fc1, fc2} or SwiGLU's
//   mlp.{fc1_g, fc1_x, fc2}, gamma_2}, norm.*.
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
// registers, LayerScale, MLP width and kind, RoPE or the position grid, the
// qkv bias from the tensors; heads from DINOv3's rope_embed.periods (Dh / 4
// of them), the metadata key "num_heads" (written by vit_save) or width / 64
// (every DINOv2, timm and released DINOv3 ViT but DINOv3's 7B); position
// interpolation and pooling from the metadata ("pos_interpolation", "pool")
// or the presets' defaults (DINOv3: class token).
int vit_config_from_weights(const SafeTensors *file, const char *prefix, VitConfig *config,
                            ErrorMessage *err);

// Loads every parameter of model from the tensors under prefix.
int vit_load_from(Vit *model, const SafeTensors *file, const char *prefix, ErrorMessage *err);
int vit_load(Vit *model, const char *path, ErrorMessage *err);

// timm state dict (F32, timm names; loads with
// timm.create_model("vit_small_patch14_dinov2", img_size=M * patch,
// num_classes=0).load_state_dict(...)) plus metadata num_heads,
// pos_interpolation and pool. RoPE (DINOv3) models: vit_save_eva. write:
// NULL, or another container of the same tensors (StateDictWrite).
int vit_save(const Vit *model, const char *path, StateDictWrite write, ErrorMessage *err);
// A DINOv3 ViT as timm's Eva state dict (vit_export_eva.c): loads with
// timm.create_model("vit_small_patch16_dinov3_qkvb", num_classes=0)
// .load_state_dict(...) (timm >= 1.0.20; the _qkvb model for a qkv bias,
// the plain one without), plus metadata num_heads, pool and timm_model
// (the timm name of a preset's architecture). A non-zero key bias (timm's
// DINOv3 attention has none) is refused naming the tensor.
int vit_save_eva(const Vit *model, const char *path, StateDictWrite write, ErrorMessage *err);

#endif
