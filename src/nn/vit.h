// Vision Transformer backbones (ViT-S/B/L/g with patch 14 or 16) as DINOv2
// and timm build them, and DINOv3's ViTs (config.rope, below), with timm's
// parameter names:
//
//   patch_embed.proj: conv patch x patch, stride patch, bias -> (B, P, D) tokens
//   tokens = [cls_token (+ pos_embed[0]), reg_token[0..R-1], patches + pos_embed]
//   blocks.N (pre-norm):  x = x + ls1 * drop_path(attn.proj(attention(attn.qkv(norm1(x)))))
//                         x = x + ls2 * drop_path(mlp.fc2(gelu(mlp.fc1(norm2(x)))))
//   norm: the final LayerNorm -> normalised tokens (B, 1 + R + P, D)
//   features: the mean of the normalised patch tokens (LightlyTrain's DINOv2
//             ViT pooling) or the class token (config.pool)
//
// LayerNorm eps 1e-6, exact GELU (DINOv2's ViT-g: SwiGLU, config.swiglu,
// the layout below), qkv with bias, LayerScale (ls1.gamma,
// ls2.gamma) when config.layer_scale. Position embeddings: a grid of
// pos_grid x pos_grid patch positions (pos_embed (1, [1 +] M^2, D)). As in
// timm, models without registers keep the class token's position in
// pos_embed[0] (DINOv2's layout); models with registers do not (timm's
// no_embed_class: the class token has its position folded in, the registers
// have none; vit_weights.c converts DINOv2's and transformers' layouts). An
// input whose patch grid differs from pos_grid gets the grid resampled
// (vit_pos_embed.h: DINOv2's offset bicubic by default, antialiased bicubic
// for register models, as DINOv2's hub models do).
//
// DINOv3 (config.rope; facebookresearch/dinov3's DinoVisionTransformer,
// transformers' DINOv3ViTModel, timm's vit_*_dinov3): no pos_embed; the
// query and key of every patch token get a 2-D rotary position embedding
// after attn.qkv (vit_rope.h; the class and register ("storage") tokens
// none), then the same fused attention. Register tokens have no position.
// LayerNorm eps 1e-5. The MLP is GELU, or SwiGLU for the "plus" models
// (config.swiglu): mlp.fc1 packs DINOv3's w1 (the gate) over w2 (the
// value), 2 H rows, fc2 = w3: fc2(silu(gate) value) (timm's SwiGLUPacked
// layout). The qkv bias has its key part held at zero (DINOv3's
// mask_k_bias: with RoPE a key bias is not a no-op) unless the weights
// say otherwise (config.qkv_bias). Pooling: the class token, as
// LightlyTrain's DINOv3 wrapper. Training forwards rescale the RoPE
// coordinates as DINOv3 trains (config.rope_rescale); eval forwards do not.
//
// Memory by lifetime, as resnet.h: parameters and gradients (model->params,
// no buffers); one activation arena per input slot ((max batch, resolution)
// given at build time) holding everything backward needs; a gradient
// scratch shared by the slots; conv and attention plans per slot and batch
// size. Nothing is allocated in forward or backward.
//
// Gradient contract: parameter gradients accumulate (+=); no gradient for
// the input image.
#ifndef LTC_NN_VIT_H
#define LTC_NN_VIT_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/staging.h"
#include "nn/layers.h"
#include "nn/parameters.h"
#include "nn/vit_pos_embed.h"
#include "util/error.h"

#define VIT_MAX_NAME 48

typedef enum VitPool {
    VIT_POOL_MEAN,  // mean of the normalised patch tokens (LightlyTrain's default for DINOv2 ViTs)
    VIT_POOL_CLS,   // the normalised class token
} VitPool;

const char *vit_pool_name(VitPool pool);  // "mean" / "cls"
int vit_pool_parse(const char *name, VitPool *pool, ErrorMessage *err);

// The attention's qkv bias. Zero = the DINOv2 / timm default.
typedef enum VitQkvBias {
    VIT_QKV_BIAS,          // q, k and v biases, all trained
    VIT_QKV_BIAS_NO_KEY,   // q and v trained, the key part held at 0 (DINOv3's mask_k_bias)
    VIT_QKV_NO_BIAS,       // no bias (DINOv3 ViT-7B, timm's vit_*_dinov3 without _qkvb)
} VitQkvBias;

typedef struct VitConfig {
    char name[VIT_MAX_NAME];  // "vit_s16", ... (informational)
    int patch_size;
    int embed_dim;            // D
    int depth;                // blocks
    int heads;                // D / heads is the head dim (64 in every preset)
    int mlp_hidden;           // mlp.fc1 width (4 D)
    int register_tokens;      // R
    int class_pos;            // 1: pos_embed[0] is the class token's position (R = 0 in timm)
    int pos_grid;             // M: pos_embed covers M x M patches (native input M * patch px)
    int layer_scale;          // 1: ls1.gamma / ls2.gamma
    float layer_scale_init;   // their initial value (DINOv2 and timm's dinov2 models: 1e-5)
    float norm_eps;           // 1e-6
    float drop_path_rate;     // stochastic depth of the last block, linear from 0 (timm)
    VitPosInterpolation pos_interpolation;
    VitPool pool;
    // DINOv3 (all zero: a DINOv2 / timm ViT). A RoPE model has no pos_embed
    // (class_pos and pos_grid 0, pos_interpolation unused).
    int rope;                 // 1: DINOv3's RoPE on the patch tokens' q and k
    float rope_base;          // periods base^(4 j / Dh), j < Dh / 4 (DINOv3: 100)
    float rope_rescale;       // training forwards: coordinates times a log-uniform
                              // draw in [1/r, r] per block (DINOv3: 2); 0: off
    int swiglu;               // 1: SwiGLU MLP, mlp.fc1 (2 H, D) packed gate | value
    VitQkvBias qkv_bias;
    int in_channels;          // of the input images (patch_embed.proj); 0 means 3
} VitConfig;

// Presets, DINOv2's architectures (and timm's ViT-Ti): vit_t14, vit_t16 (D
// 192, 12 blocks, 3 heads), vit_s14, vit_s16 (384, 12, 6), vit_b14, vit_b16
// (768, 12, 12), vit_l14, vit_l16 (1024, 24, 16), vit_g14 (1536, 40, 24,
// DINOv2's ViT-g: a SwiGLU MLP of 4096, DINOv2's int(2/3 * 4 D) rounded up
// to a multiple of 8, mlp.fc1 (8192, D) packed gate | value as timm's
// vit_giant_patch14_dinov2). A "_reg4" suffix adds 4 register tokens.
// LayerScale 1e-5, pos_grid = image_size / patch.
// DINOv3's, named as LightlyTrain names them (patch 16, 4 registers,
// LayerScale 1e-5, RoPE base 100 with rescale 2, key bias held at 0, class
// token pooling): dinov3/vitt16 (192 wide, 12 blocks, 3 heads, GELU 768),
// dinov3/vitt16plus (192, 12, 3, GELU 1152), dinov3/vits16 (384, 12, 6,
// GELU 1536), dinov3/vits16plus (384, 12, 6, SwiGLU 1536), dinov3/vitb16
// (768, 12, 12, GELU 3072), dinov3/vitl16 (1024, 24, 16, GELU 4096),
// dinov3/vitl16plus (1024, 24, 16, SwiGLU 4096), dinov3/vith16plus (1280,
// 32, 20, SwiGLU 5120).
int vit_config_preset(const char *name, int image_size, VitConfig *config, ErrorMessage *err);
// 1 when name is a ViT preset name (with or without _reg4, or a dinov3/ one).
int vit_is_preset_name(const char *name);
// Fills config->name from the geometry ("vit_s14", "vit_b16_reg4",
// "dinov3/vits16plus", or "vit_d<D>_l<depth>_p<patch>" /
// "dinov3_d<D>_l<depth>_p<patch>" for other sizes).
void vit_config_name(VitConfig *config);
// Checks the geometry (sizes positive, heads divide D, ...).
int vit_config_check(const VitConfig *config, ErrorMessage *err);

typedef struct VitInputShape {
    int batch;
    int resolution;  // square images, a multiple of the patch size
} VitInputShape;

typedef struct VitBlock {
    LayerNorm norm1, norm2;
    Linear qkv, proj, fc1, fc2;  // attn.qkv, attn.proj, mlp.fc1, mlp.fc2
    int ls1_index, ls2_index;    // -1 without LayerScale
    float *ls1, *ls1_grad, *ls2, *ls2_grad;  // (D) or NULL
    float drop_path;             // this block's stochastic depth rate
} VitBlock;

// Plans for one batch size of a slot.
typedef struct VitPlans {
    int batch;
    ConvShape patch_shape;
    ConvPlan *patch_plan;
    AttentionPlan *attention_plan;
} VitPlans;

// What a block's backward needs (sizes at the slot's maximum).
typedef struct VitBlockActivations {
    Act *norm1_out;                                 // (B, T, D)
    float *norm1_mean, *norm1_inv_std;              // (B T), (B T)
    Act *qkv;                                       // (B, T, 3, H, Dh), q and k rotated (RoPE)
    Act *attention_out;                             // (B, T, D)
    float *lse;                                     // (B, H, T)
    Act *proj_out;                                  // (B, T, D)
    Act *mid;                                       // (B, T, D): x after the attention branch
    Act *norm2_out;
    float *norm2_mean, *norm2_inv_std;
    Act *fc1_out;                                   // (B, T, H) or SwiGLU's (B, T, 2 H)
    Act *act_out;                                   // (B, T, H): GELU / SwiGLU output
    Act *fc2_out;                                   // (B, T, D)
    Act *out;                                       // (B, T, D): the block's output
    float *drop_scale[2];                           // (B): sample scales of the two branches
} VitBlockActivations;

typedef struct VitSlot {
    VitInputShape max;
    int grid;                // patches per side
    int tokens;              // 1 + R + grid^2
    VitPlans *plans;         // [0] for max.batch, more from vit_prepare_batch
    int plans_count;
    void *arena;
    size_t arena_bytes;
    float *pos_matrix;       // (grid^2, M^2) resampling map, or NULL at the native grid
    float *patch_pos;        // (grid^2, D) resampled positions, or NULL
    // RoPE models: sin, cos (tables, grid^2, Dh / 2) of the rope ops; table
    // 0 serves every block of an eval forward, a training forward with
    // rope_rescale fills one per block (rope_tables = depth).
    float *rope_sin, *rope_cos;
    int rope_tables;
    int rope_scaled;         // the tables hold a training forward's draws
    float *dpatch_pos;       // (grid^2, D) backward scratch when patch_pos is used
    Act *patch_out;          // (B, P, D) patch embeddings
    Act *tokens_in;          // (B, T, D) block 0's input
    VitBlockActivations *blocks;
    Act *norm_out;           // (B, T, D): the normalised tokens
    float *norm_mean, *norm_inv_std;  // (B T)
    Act *features;           // (B, D)
    Act *patch_map;          // (B, grid, grid, D): vit_feature_map's copy of the patch tokens
    const VitPlans *last_plans;
    const Act *last_input;
    int backward_ready;      // 1 after a training forward
    int drop_path_active;    // the last forward drew drop-path masks
    // iBOT masking (vit_set_patch_mask), all backend memory or NULL: the
    // patch embeddings where mask (B P) is 1 are replaced by mask_token (D).
    const float *patch_mask;               // (B P): 1 where masked, else 0
    const float *mask_token;
    float *mask_token_grad;                // (D) +=
} VitSlot;

typedef struct Vit {
    Backend *backend;
    VitConfig config;
    int feature_dim;         // D
    ParameterSet params;     // timm names
    ParameterSet buffers;    // RoPE models: rope.periods; else empty
    int64_t training_forwards;  // keys the drop-path and RoPE rescale draws: counts
                                // training forwards from vit_set_draw_key's start
    uint64_t seed;
    Conv2d patch_embed;      // patch_embed.proj.weight
    int patch_bias_index;    // patch_embed.proj.bias
    float *patch_bias, *patch_bias_grad;
    int cls_index, reg_index, pos_index;  // cls_token, reg_token (-1), pos_embed
    float *cls_token, *cls_grad, *reg_token, *reg_grad, *pos_embed, *pos_grad;
    VitBlock *blocks;
    LayerNorm norm;
    int slot_count;
    VitSlot *slots;
    Act *scratch;            // backend memory: 3 (B, T, D) + one wide (B, T, .) of the largest slot
    size_t scratch_tokens;   // B T of the largest slot
    Staging drop_staging;    // (depth, 2, max batch) a training forward's drop-path draws
    // RoPE models: the periods (Dh / 4) are the buffer "rope.periods" (so
    // checkpoints keep a DINOv3 file's, which differ from rope_base's);
    // rope_periods is the host copy the tables were built from, and a
    // forward that finds the buffer changed (a checkpoint loaded into it)
    // rebuilds them.
    int periods_index;       // in buffers, or -1
    float *rope_periods;     // (Dh / 4) host
    float *rope_periods_seen;  // (Dh / 4) host: the buffer as last read
    unsigned long periods_writes_seen;  // buffers.writes when the buffer was last read
    Staging rope_staging;    // sin and cos tables of the largest slot, to upload
    // Set between vit_declare and vit_allocate for a model that only runs
    // eval forwards (a distillation teacher, embed): parameters without
    // gradients, no gradient scratch, and nothing kept for a backward: one
    // set of block tensors that every block reuses (buffers shared where
    // their lives do not overlap), the blocks' outputs alternating between
    // two buffers except the last kept_blocks blocks' (vit_block_tokens).
    // Its forwards compute the same values, bit for bit, as a trainable
    // model's; a training forward (an EMA teacher's) rescales RoPE as one
    // and draws no drop path (refused where the config asks for it).
    int frozen;
    int kept_blocks;         // frozen: 0 unless vit_keep_block_outputs says
    // Activation checkpointing (--activation-checkpointing; set between
    // vit_declare and vit_allocate, ignored for a frozen model): a slot
    // keeps only each block's output (the next block's input) and its
    // drop-path scales, plus one set of block tensors that every block
    // reuses; the backward recomputes each block's forward from its input
    // into that set before its backward (the last block's is still there
    // from the forward). The recompute reads the forward's drop-path
    // scales and RoPE tables, so it repeats the forward's draws, and gives
    // the same gradients bit for bit on a backend whose ops are
    // deterministic (all three are). The value N (>= 1) recomputes blocks
    // 0, N, 2N, ... (LightlyTrain's every_n_blocks), the others keeping their
    // own tensors; 0: off.
    int activation_checkpointing;
} Vit;

// Whether block b is recomputed in the backward (activation_checkpointing N:
// b a multiple of N).
int vit_block_checkpointed(const Vit *model, int block);

// Structure and parameter tables; allocates nothing on the backend.
int vit_declare(Vit *model, Backend *backend, const VitConfig *config, ErrorMessage *err);
// Parameters, a slot per input shape (plans, activations, resampling map) and
// the gradient scratch. Values are zero until vit_init or a load.
int vit_allocate(Vit *model, const VitInputShape *inputs, int input_count, ErrorMessage *err);
// vit_declare + vit_allocate + vit_init(seed).
int vit_create(Vit *model, Backend *backend, const VitConfig *config,
               const VitInputShape *inputs, int input_count, uint64_t seed, ErrorMessage *err);
void vit_free(Vit *model);
// Plans so that `slot` can also run a smaller batch. Call outside the step loop.
int vit_prepare_batch(Vit *model, int slot, int batch, ErrorMessage *err);

// timm's init (VisionTransformer.init_weights, DINOv2's too): Linear weights
// truncated normal std 0.02 (|x| <= 2), biases 0; pos_embed truncated normal
// 0.02; cls_token and reg_token normal std 1e-6; the patch conv PyTorch's
// default (uniform +-1/sqrt(fan_in), bias too); LayerNorm 1 / 0; LayerScale
// layer_scale_init. Draws keyed by (seed, parameter name). DINOv3's
// (init_weights) differs only in the class and register tokens: std 0.02.
int vit_init(Vit *model, uint64_t seed, ErrorMessage *err);

// features (batch, D) and the normalised tokens of input (batch, R, R, 3)
// NHWC on slot `slot`. training: drop path is active (when its rate > 0)
// and the slot keeps what backward needs. Fails only on a bad slot or batch.
int vit_forward(Vit *model, int slot, int batch, const Act *input, int training,
                ErrorMessage *err);
const Act *vit_features(const Vit *model, int slot);  // (batch, D)
// The normalised tokens (batch, 1 + R + P, D) of the slot's last forward:
// class token, registers, then the patches row-major over the grid.
const Act *vit_tokens(const Vit *model, int slot);
int vit_slot_tokens(const Vit *model, int slot);  // 1 + R + P
// DINOv2's student masking (its prepare_tokens_with_masks) for the
// following forwards of `slot` and their backward: patch embedding p of
// sample b (after the patch conv and its bias, before the positions) is
// replaced by mask_token (D) where mask[b P + p] is 1 (else 0). The
// token is not a ViT parameter (timm's ViT has none): its owner passes its
// value and gradient (+=). All (B P) / (D) backend memory that must stay
// unchanged until the backward; mask NULL turns masking off.
void vit_set_patch_mask(Vit *model, int slot, const float *mask, const float *mask_token,
                        float *mask_token_grad);
// The random draws of the following training forwards (drop path, RoPE
// rescale) start from key (a batch's global index): training_forwards =
// key * VIT_FORWARDS_PER_KEY, then counts up (a batch's views and slots
// each draw anew, up to VIT_FORWARDS_PER_KEY forwards per key).
#define VIT_FORWARDS_PER_KEY 64
void vit_set_draw_key(Vit *model, uint64_t key);
// RoPE models: replaces the periods (Dh / 4) that rope_base gave (a DINOv3
// checkpoint's rope_embed.periods) in the buffer and recomputes every
// slot's tables. Positive finite periods only.
int vit_set_rope_periods(Vit *model, const float *periods, ErrorMessage *err);
// Parameter gradients += given dfeatures (batch, D) of the slot's last
// training forward.
int vit_backward(Vit *model, int slot, const Act *dfeatures, ErrorMessage *err);
// The same given dtokens (batch, T, D) = d(loss)/d(normalised tokens) (for
// losses on patch tokens).
int vit_backward_tokens(Vit *model, int slot, const Act *dtokens, ErrorMessage *err);

// The normalised patch tokens of the slot's last forward as a feature map
// (batch, grid, grid, D), copied out of the tokens into slot->patch_map;
// *height = *width = grid.
const Act *vit_feature_map(Vit *model, int slot, int *height, int *width);
// Parameter gradients += given d(loss)/d(features) (batch, D) and
// d(loss)/d(feature map) (batch, grid, grid, D); either may be NULL (not both).
int vit_backward_map(Vit *model, int slot, const Act *dfeatures, const Act *dmap,
                     ErrorMessage *err);
// out (batch, T, D) = the output of block `block` (0-based) in the slot's
// last forward through the final norm, as DINOv2's
// get_intermediate_layers(norm=True); the last block's equals vit_tokens.
// Frozen models only (it uses the final norm's saved statistics as
// scratch), for the last kept_blocks blocks.
int vit_block_tokens(Vit *model, int slot, int block, Act *out, ErrorMessage *err);
// A frozen model keeps the outputs of its last `count` blocks (0..depth)
// for vit_block_tokens from the next forward on: every slot's arena is laid
// out again (allocation: call outside the step loop).
int vit_keep_block_outputs(Vit *model, int count, ErrorMessage *err);

#endif
