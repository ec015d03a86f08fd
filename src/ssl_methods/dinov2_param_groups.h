// LightlyTrain DINOv2's optimizer parameter groups on this program's
// parameter names: per parameter an lr multiplier and whether weight decay
// applies (lightly_train/_methods/dinov2/utils.py get_optimizer_with_decay
// and get_vit_lr_decay_rate, LightlyTrain's copy of DINOv2's
// param_groups.py). The tables feed MethodGroup.lr_scales and
// .weight_decays (method.h); the freeze windows (lr 0) are the groups'
// frozen_steps with frozen_at_zero_lr.
//
// Rules, as LightlyTrain's (its substring tests on DinoVisionTransformer's
// names, ours being timm's: "reg_token" for its "register_tokens"):
// - layer of a backbone parameter: 0 for names holding pos_embed,
//   patch_embed, mask_token, cls_token or reg_token; N + 1 for blocks.N.*;
//   depth + 1 for anything else (the final norm);
// - lr multiplier of a backbone parameter: layerwise_decay ^ (depth + 1 -
//   layer), and times patch_embed_lr_multiplier for patch_embed.* (so the
//   patch embedding gets both); head parameters: 1;
// - weight decay: off for names ending in ".bias" or holding "norm" or
//   "gamma" (biases, LayerNorms, LayerScale), on for everything else, the
//   tokens, positions, mask token and the last layer's weight_g included.
#ifndef LTC_SSL_METHODS_DINOV2_PARAM_GROUPS_H
#define LTC_SSL_METHODS_DINOV2_PARAM_GROUPS_H

#include "nn/parameters.h"
#include "util/error.h"

typedef struct Dinov2LrRules {
    int depth;                         // ViT blocks
    double layerwise_decay;            // 0.9
    double patch_embed_lr_multiplier;  // 0.2
} Dinov2LrRules;

// The layer of a backbone parameter (see above).
int dinov2_vit_layer(const char *name, int depth);
// The lr multiplier of a parameter; backbone: 1 for the backbone's (and
// mask token's) parameters, 0 for the heads'.
double dinov2_lr_scale(const char *name, int backbone, const Dinov2LrRules *rules);
// 1 when weight decay applies to the parameter.
int dinov2_weight_decays(const char *name);

// Both tables of one group, allocated for set->count parameters.
typedef struct Dinov2GroupTables {
    float *lr_scales;
    unsigned char *weight_decays;
} Dinov2GroupTables;

int dinov2_group_tables_make(Dinov2GroupTables *tables, const ParameterSet *set, int backbone,
                             const Dinov2LrRules *rules, ErrorMessage *err);
void dinov2_group_tables_free(Dinov2GroupTables *tables);

#endif
