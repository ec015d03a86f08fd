// ConvNeXt backbones (Tiny, Small, Base, Large) as torchvision, timm and
// DINOv3 (facebookresearch/dinov3's ConvNeXt, LightlyTrain's dinov3/convnext-*)
// build them: one architecture, three parameter namings (convnext_names.h),
// NHWC throughout:
//
//   stem:        conv 4x4 stride 4 (+ bias) -> LayerNorm over channels
//   stage s:     (s > 0) LayerNorm -> conv 2x2 stride 2 (+ bias), then
//                depths[s] blocks of width dims[s]:
//   block:       x = x + gamma * drop_path(fc2(gelu(fc1(norm(dwconv(x))))))
//                dwconv: depthwise 7x7, padding 3, with bias; norm: LayerNorm
//                over channels (the rows of the NHWC map); fc1 (4 C, C) and fc2
//                (C, 4 C): linear layers with bias; gelu exact; gamma (C):
//                layer scale (init 1e-6); drop path per sample
//   final norm:  LayerNorm of dims[3] (torchvision's classifier.0, timm's
//                head.norm, DINOv3's norm)
//
// Features, as LightlyTrain's model wrappers give them:
//   torchvision / timm naming: the last stage's map (B, R/32, R/32, D) and
//     its global mean (B, D) (its ConvNeXtModelWrapper and TIMMModelWrapper
//     pool model.features / forward_features; the final norm is kept for
//     export but unused);
//   DINOv3 naming: the final norm applied to every position of that map
//     (x_norm_patchtokens) and the mean of the normalised map
//     (DINOv3VConvNeXtModelWrapper.forward_pool), what the DINOv3
//     distillation teachers pass on.
//
// LayerNorm eps 1e-6 everywhere. Stochastic depth: linear from 0 at the
// first block to drop_path_rate at the last (all three codebases).
//
// Memory by lifetime, as vit.h: parameters and gradients (model->params, no
// buffers); one activation arena per input slot holding what backward
// needs; one gradient scratch shared by the slots; conv and depthwise plans
// per slot and batch size. Nothing is allocated in forward or backward.
//
// Gradient contract: parameter gradients accumulate (+=); no gradient for
// the input image.
#ifndef LTC_NN_CONVNEXT_H
#define LTC_NN_CONVNEXT_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/staging.h"
#include "nn/layers.h"
#include "nn/parameters.h"
#include "util/error.h"

#define CONVNEXT_STAGES 4
#define CONVNEXT_MAX_NAME 32

// Whose parameter names the model carries (and exports in).
typedef enum ConvnextNaming {
    CONVNEXT_TORCHVISION,  // features.0.0.weight ... classifier.0.weight
    CONVNEXT_TIMM,         // stem.0.weight, stages.S.blocks.B.conv_dw.weight ... head.norm.weight
    CONVNEXT_DINOV3,       // downsample_layers.0.0.weight, stages.S.B.dwconv.weight ... norm.weight
} ConvnextNaming;

// What a parameter is, whatever its name: the module role, its stage and
// block, and the leaf ("weight", "bias"; "" for gamma).
typedef enum ConvnextRole {
    CONVNEXT_STEM_CONV, CONVNEXT_STEM_NORM,         // stage 0
    CONVNEXT_DOWN_NORM, CONVNEXT_DOWN_CONV,         // stages 1..3
    CONVNEXT_DWCONV, CONVNEXT_NORM, CONVNEXT_FC1, CONVNEXT_FC2, CONVNEXT_GAMMA,  // blocks
    CONVNEXT_HEAD_NORM,
} ConvnextRole;

typedef struct ConvnextTensorRole {
    ConvnextRole role;
    int stage, block;
    char leaf[8];
} ConvnextTensorRole;

typedef struct ConvnextConfig {
    char name[CONVNEXT_MAX_NAME];  // "torchvision/convnext_tiny", ... (informational)
    int depths[CONVNEXT_STAGES];   // blocks per stage
    int dims[CONVNEXT_STAGES];     // width per stage
    ConvnextNaming naming;
    int kernel;                    // the depthwise kernel (7)
    float norm_eps;                // 1e-6
    float layer_scale_init;        // 1e-6
    float drop_path_rate;          // the last block's stochastic depth rate
    int in_channels;               // of the input images (the stem conv); 0 means 3
} ConvnextConfig;

// 1 when the features are the DINOv3 wrapper's (final norm on the map).
static inline int convnext_norm_features(const ConvnextConfig *c) {
    return c->naming == CONVNEXT_DINOV3;
}

typedef struct ConvnextInputShape {
    int batch;
    int resolution;  // square images, at least 32 px
} ConvnextInputShape;

typedef struct ConvnextBlock {
    int dw_weight_index, dw_bias_index;  // dwconv: (1, K, K, C) ours, (C, 1, K, K) torch
    const Act *dw_weight;                // (K, K, C) in the compute dtype
    float *dw_weight_grad;
    float *dw_bias, *dw_bias_grad;       // (C)
    LayerNorm norm;
    Linear fc1, fc2;
    int gamma_index;
    float *gamma, *gamma_grad;           // (C)
    float drop_path;                     // this block's stochastic depth rate
} ConvnextBlock;

typedef struct ConvnextStage {
    int dim, depth;
    // The stem (stage 0: conv then norm) or the downsampling (norm then conv).
    Conv2d conv;
    int conv_bias_index;
    float *conv_bias, *conv_bias_grad;   // (dim)
    LayerNorm norm;
    ConvnextBlock *blocks;
} ConvnextStage;

// Plans for one batch size of a slot.
typedef struct ConvnextPlans {
    int batch;
    ConvShape conv_shapes[CONVNEXT_STAGES];   // stem, then each downsampling conv
    ConvPlan *conv_plans[CONVNEXT_STAGES];
    DepthwisePlan *dw_plans[CONVNEXT_STAGES];
    // Each stage's fc1 (with the GELU fused for a frozen model: no
    // pre-activation is kept) and fc2.
    LinearPlan *fc1_plans[CONVNEXT_STAGES], *fc2_plans[CONVNEXT_STAGES];
} ConvnextPlans;

// What a block's backward needs (sizes at the slot's maximum).
typedef struct ConvnextBlockActivations {
    Act *dw_out;                        // (B, H, W, C): the norm's input
    float *norm_mean, *norm_inv_std;    // (B H W)
    Act *norm_out;                      // (B H W, C)
    Act *fc1_out;                       // (B H W, 4 C): GELU's input
    Act *act_out;                       // (B H W, 4 C)
    Act *fc2_out;                       // (B H W, C)
    Act *out;                           // (B H W, C): the block's output
    float *drop_scale;                  // (B): sample scales of the residual branch
} ConvnextBlockActivations;

typedef struct ConvnextStageActivations {
    int height, width;                  // of the stage's blocks
    Act *conv_out;                      // (B, H, W, C): the conv's output
    Act *norm_out;                      // stem: (B, H, W, C) its output; downsampling: the
                                        // norm's output (B, 2H, 2W, C_prev), the conv's input
    float *norm_mean, *norm_inv_std;    // the norm's row statistics
    ConvnextBlockActivations *blocks;
} ConvnextStageActivations;

typedef struct ConvnextSlot {
    ConvnextInputShape max;
    ConvnextPlans *plans;    // [0] for max.batch, more from convnext_prepare_batch
    int plans_count;
    void *arena;
    size_t arena_bytes;
    ConvnextStageActivations stages[CONVNEXT_STAGES];
    Act *head_out;           // DINOv3: (B, h, w, D) the normalised map; else NULL
    float *head_mean, *head_inv_std;  // (B h w)
    Act *features;           // (B, D)
    const ConvnextPlans *last_plans;
    const Act *last_input;
    int backward_ready;      // 1 after a training forward
    int drop_path_active;    // the last forward drew drop-path scales
} ConvnextSlot;

typedef struct Convnext {
    Backend *backend;
    ConvnextConfig config;
    int feature_dim;           // dims[3]
    ParameterSet params;       // the naming's names
    ConvnextTensorRole *roles; // (params.count): what each parameter is, for other namings
    ParameterSet buffers;      // empty (LayerNorm keeps no statistics)
    uint64_t seed;
    int64_t training_forwards; // keys the drop-path draws (convnext_set_draw_key)
    ConvnextStage stages[CONVNEXT_STAGES];
    int head_norm_index;
    LayerNorm head_norm;
    int block_count;           // over all stages
    int slot_count;
    ConvnextSlot *slots;
    Act *scratch;              // backend memory: 3 (B H W C) + one (B H W 4 C) of stage 0's
    size_t scratch_elements;   // B H W C of the largest stage of the largest slot
    Staging drop_staging;      // (blocks, max batch) a training forward's drop-path draws
    // Set between convnext_declare and convnext_allocate for a model that
    // runs no backward (a teacher, embed, an EMA teacher): no gradients, no
    // scratch, one set of block tensors shared by every block and the
    // blocks' outputs alternating between two buffers (each stage's last its
// own). Its forwards compute
    // what a trainable model's do; training forwards draw no drop path
    // (refused where the config asks for it).
    int frozen;
} Convnext;

// Structure and parameter tables; allocates nothing on the backend.
int convnext_declare(Convnext *model, Backend *backend, const ConvnextConfig *config,
                     ErrorMessage *err);
// Parameters, a slot per input shape (plans, activations) and the gradient
// scratch. Values are zero until convnext_init or a load.
int convnext_allocate(Convnext *model, const ConvnextInputShape *inputs, int input_count,
                      ErrorMessage *err);
// convnext_declare + convnext_allocate + convnext_init(seed).
int convnext_create(Convnext *model, Backend *backend, const ConvnextConfig *config,
                    const ConvnextInputShape *inputs, int input_count, uint64_t seed,
                    ErrorMessage *err);
void convnext_free(Convnext *model);
// Plans so that `slot` can also run a smaller batch. Call outside the step loop.
int convnext_prepare_batch(Convnext *model, int slot, int batch, ErrorMessage *err);

// The init of all three codebases: conv and linear weights truncated normal
// std 0.02 (cut at +-2, i.e. never), biases 0, LayerNorm 1 / 0, gamma
// layer_scale_init. Draws keyed by (seed, parameter name).
int convnext_init(Convnext *model, uint64_t seed, ErrorMessage *err);

// features (batch, D) and the map of input (batch, R, R, C) NHWC on slot
// `slot`. training: drop path is active (when its rate > 0) and the slot
// keeps what backward needs. Fails only on a bad slot or batch.
int convnext_forward(Convnext *model, int slot, int batch, const Act *input, int training,
                     ErrorMessage *err);
const Act *convnext_features(const Convnext *model, int slot);  // (batch, D)
// The map (batch, *height, *width, D) of the slot's last forward (see the
// top of this file); valid until the next forward on the slot.
const Act *convnext_feature_map(const Convnext *model, int slot, int *height, int *width);
// Its size at the slot's resolution (before any forward).
void convnext_feature_map_size(const Convnext *model, int slot, int *height, int *width);
// The output (batch, *height, *width, dims[stage]) of the last block of
// stage `stage` in the slot's last forward, before any final norm: what
// DINOv3's get_intermediate_layers(norm=True) gives for stages 0..2 (its
// norms[0..2] are identities). Every model keeps it (a frozen one too).
const Act *convnext_stage_output(const Convnext *model, int slot, int stage, int *height,
                                 int *width);
// Parameter gradients += given d(loss)/d(features) (batch, D) and
// d(loss)/d(map) (batch, h, w, D) of the slot's last training forward;
// either may be NULL (not both).
int convnext_backward_map(Convnext *model, int slot, const Act *dfeatures, const Act *dmap,
                          ErrorMessage *err);
// The draws of the following training forwards start from key (a batch's
// global index), CONVNEXT_FORWARDS_PER_KEY forwards per key (as vit.h).
#define CONVNEXT_FORWARDS_PER_KEY 64
void convnext_set_draw_key(Convnext *model, uint64_t key);

#endif
