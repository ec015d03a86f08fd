// ResNet-18/34/50/101/152 backbones (timm's 26 and 200, and the wide
// ResNet-50-2 / 101-2) with exactly torchvision's architecture
// and parameter names (torchvision.models.resnetXX, v1.5: in bottlenecks the
// stride sits on the 3x3 conv), up to and including the global average
// pool: the backbone outputs pooled features (512 or 2048 per image). There
// is no fc: heads belong to the SSL methods. Weight files may still carry
// torchvision's fc.weight/fc.bias: resnet_load skips them (see below).
//
//   stem:   conv1 7x7/2 -> bn1 -> relu -> maxpool 3x3/2 pad 1
//   layer1..layer4: BasicBlock (3x3, 3x3) 2-2-2-2 / 3-4-6-3, or Bottleneck
//           (1x1, 3x3 stride s, 1x1 x4) 3-4-6-3 / 3-4-23-3 / 3-8-36-3;
//           block L.0 of layers 2..4 has stride 2; a block whose shape changes
//           has downsample = 1x1 conv stride s + BN on the shortcut.
//   head:   global average pool -> features (N, D)
//
// Memory by lifetime, all allocated by resnet_create for the input shapes
// given there, none inside forward/backward:
// - parameters + gradients: model->params (ParameterSet, torchvision names);
// - buffers (BN running_mean, running_var): model->buffers;
//   num_batches_tracked is one host counter per model (torchvision updates
//   every BN's counter on every training forward, so they are all equal);
// - activations: one arena per input slot (each (max_batch, resolution)
//   given at build time), holding everything its backward needs: conv
//   outputs (BN inputs), ReLU outputs, block outputs, BN saved mean and
//   1/std, max-pool argmax, the features. Separate slots let DINO run the
//   global (224 px) and local (96 px) views forward, then backward both;
// - gradient scratch: three buffers of the largest activation, shared by
//   all slots (backward runs one slot at a time);
// - conv plans (backend workspace) per slot and batch size.
//
// Gradient contract: parameter gradients accumulate (+=) over backward calls
// (zero them with parameter_set_zero_grads); no gradient is produced for the
// input image (the stem conv's data gradient is skipped).
#ifndef LTC_NN_RESNET_H
#define LTC_NN_RESNET_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "nn/layers.h"
#include "nn/parameters.h"
#include "nn/safetensors.h"
#include "util/error.h"

#define RESNET_MAX_STAGES 3  // convs on a block's residual branch

// A depth's blocks: basic (3x3, 3x3) or bottleneck (1x1, 3x3, 1x1), and how
// many in layer1..layer4 (torchvision's 18 ... 152; timm's 26 and 200).
#define RESNET_LAYERS 4
typedef struct ResnetArchitecture {
    int depth;
    int bottleneck;
    int blocks[RESNET_LAYERS];
} ResnetArchitecture;
extern const ResnetArchitecture resnet_architectures[];
extern const int resnet_architecture_count;

typedef struct ResnetConfig {
    int depth;               // 18, 26, 34, 50, 101, 152 or 200
    // 2: the wide ResNets (wide_resnet50_2, wide_resnet101_2): a bottleneck's
    // 1x1 and 3x3 twice as wide (torchvision's width_per_group 128); 0 or 1: not
    int width_factor;
    int zero_init_residual;  // torchvision's option: the last BN of each block starts at gamma 0
    float bn_momentum;       // PyTorch default 0.1
    float bn_eps;            // PyTorch default 1e-5
    int in_channels;         // of the input images (conv1); 0 means 3
    // 1: resnet_attach_batchnorm_sync will follow, so every norm's output
    // keeps memory of its own (the separate ops write it; see
    // relu_out_shared) instead of a recompute in each backward
    int batchnorm_synchronised;
} ResnetConfig;

ResnetConfig resnet_config_default(int depth);

// One activation slot: forward on up to `batch` images of resolution x
// resolution pixels.
typedef struct ResnetInputShape {
    int batch;
    int resolution;
} ResnetInputShape;

typedef struct ResnetBlock {
    int bottleneck;   // 0: BasicBlock, 1: Bottleneck
    int stage_count;  // convs on the residual branch: 2 (basic) or 3 (bottleneck)
    Conv2d conv[RESNET_MAX_STAGES];
    BatchNorm bn[RESNET_MAX_STAGES];
    int has_downsample;
    Conv2d downsample_conv;  // layerL.0.downsample.0
    BatchNorm downsample_bn; // layerL.0.downsample.1
    int first_conv;  // model-wide index of conv[0]; the downsample conv follows the stages
} ResnetBlock;

// Conv plans for one batch size of a slot. Identical conv shapes share one plan.
typedef struct ResnetPlans {
    int batch;
    ConvShape *conv_shapes;  // (conv_count)
    ConvPlan **conv_plans;   // (conv_count), may repeat
    ConvPlan **owned;        // distinct plans, freed with the model
    int owned_count;
    PoolShape pool;
} ResnetPlans;

// What a block's backward needs, saved by its forward (sizes at the slot's maximum).
typedef struct ResnetBlockActivations {
    Act *conv_out[RESNET_MAX_STAGES];        // (N, OH, OW, C) each: the BN inputs
    Act *relu_out[RESNET_MAX_STAGES - 1];    // (N, OH, OW, C): relu(bn(conv_out)), next conv input
    Act *out;                                // (N, OH, OW, Cout): relu(bn_last + shortcut)
    Act *downsample_conv_out;                // (N, OH, OW, Cout) or NULL
    float *bn_mean[RESNET_MAX_STAGES + 1];   // (C) saved batch mean; [stage_count] is downsample's
    float *bn_inv_std[RESNET_MAX_STAGES + 1];
    // 1: stage s's convolution read relu(bn_{s-1}(conv_out[s-1])) through its
    // prologue (layers.h conv_batchnorm_statistics), relu_out[s-1] unwritten
    int prologue[RESNET_MAX_STAGES];
    // 1: relu_out[s] is the slot's stage_scratch, not memory of its own (the
    // next convolution's plan takes the prologue; what writes it anyway, an
    // evaluation forward or a fallback, is consumed at once or recomputed
    // by the backward)
    int relu_out_shared[RESNET_MAX_STAGES - 1];
} ResnetBlockActivations;

typedef struct ResnetSlot {
    ResnetInputShape max;  // largest batch and the resolution
    ResnetPlans *plans;    // [0] for max.batch, more from resnet_prepare_batch
    int plans_count;
    void *arena;           // backend memory, arena_bytes
    size_t arena_bytes;
    Act *stem_conv_out;    // (N, R/2, R/2, 64) BN input
    Act *stem_out;         // (N, R/2, R/2, 64) relu(bn(conv))
    float *stem_bn_mean, *stem_bn_inv_std;  // (64)
    Act *pool_out;         // (N, R/4, R/4, 64) input of layer1
    int32_t *pool_argmax;  // (N, R/4, R/4, 64)
    ResnetBlockActivations *blocks;  // (block_count)
    Act *stage_scratch;    // the shared relu_out (relu_out_shared), or NULL
    Act *features;         // (N, D)
    // state of the last forward on this slot
    const ResnetPlans *last_plans;
    const Act *last_input;  // the caller's input; must be unchanged until backward
    int backward_ready;       // 1 after a training forward
} ResnetSlot;

typedef struct Resnet {
    Backend *backend;
    ResnetConfig config;
    int feature_dim;          // 512 (18, 34) or 2048 (50, 101, 152)
    ParameterSet params;      // trainable, with gradients
    ParameterSet buffers;     // running statistics, no gradients
    int64_t num_batches_tracked;
    Conv2d stem_conv;         // conv1
    BatchNorm stem_bn;        // bn1
    int block_count;
    ResnetBlock *blocks;
    int conv_count;
    Conv2d **convs;           // (conv_count) every conv in plan order
    int slot_count;
    ResnetSlot *slots;
    Act *scratch;             // backend memory: 3 * scratch_elements (frozen: 1 *)
    float *bn_sums;           // (2, widest BatchNorm): conv_batchnorm_forward's sums, or
                              // NULL where the backend fuses none (layers.h)
    size_t scratch_elements;  // the largest activation tensor over all slots
    // Set between resnet_declare and resnet_allocate for a model that never
    // runs a backward (a distillation teacher, embed, the EMA teacher of
    // BYOL and DINO): parameters without gradients, no backward scratch,
    // and the slots keep nothing for backward (the blocks' outputs
    // alternate between two buffers, their other tensors share one region).
    // Its training forwards (batch statistics, running statistics updated)
    // compute what a trainable model's do; its backward is refused.
    int frozen;
} Resnet;

// Builds the structure and declares the parameter tables; allocates nothing
// on the backend (enough to count parameters). resnet_free releases it.
int resnet_declare(Resnet *model, Backend *backend, const ResnetConfig *config, ErrorMessage *err);
// Allocates parameters, buffers, a slot per input shape (plans and
// activations) and the gradient scratch. Values are zero until resnet_init
// or resnet_load.
int resnet_allocate(Resnet *model, const ResnetInputShape *inputs, int input_count,
                    ErrorMessage *err);
// resnet_declare + resnet_allocate + resnet_init(seed).
int resnet_create(Resnet *model, Backend *backend, const ResnetConfig *config,
                  const ResnetInputShape *inputs, int input_count, uint64_t seed,
                  ErrorMessage *err);
void resnet_free(Resnet *model);

// Makes conv plans so that `slot` can also run a smaller batch (e.g. the last
// partial batch when embedding). Call outside the step loop.
int resnet_prepare_batch(Resnet *model, int slot, int batch, ErrorMessage *err);

// torchvision's init: convs kaiming_normal_(fan_out, relu) from the
// counter-based RNG keyed by (seed, parameter name); BN weight 1 (0 for the
// last BN of each block with zero_init_residual), bias 0, running mean 0,
// running var 1; num_batches_tracked 0.
int resnet_init(Resnet *model, uint64_t seed, ErrorMessage *err);

// features (batch, D) = backbone(input (batch, R, R, 3) NHWC, backend memory)
// on slot `slot` (R = its resolution, batch <= its batch, plans prepared).
// training: BN uses batch statistics, updates the running ones and
// num_batches_tracked, and the slot keeps what backward needs; otherwise BN
// uses the running statistics. Fails only on a bad slot or batch.
int resnet_forward(Resnet *model, int slot, int batch, const Act *input, int training,
                   ErrorMessage *err);
// The slot's features (batch, D) from its last forward.
const Act *resnet_features(const Resnet *model, int slot);
// Parameter gradients += d(loss)/d(params) given dfeatures (batch, D) =
// d(loss)/d(features) of the slot's last (training) forward.
int resnet_backward(Resnet *model, int slot, const Act *dfeatures, ErrorMessage *err);
// The slot's last stage before the pool, (batch, h, w, D) from its last
// forward; *height, *width = its size (resnet_feature_map_size).
const Act *resnet_feature_map(const Resnet *model, int slot, int *height, int *width);
// The size of that map at the slot's resolution (R / 32 rounded up).
void resnet_feature_map_size(const Resnet *model, int slot, int *height, int *width);
// resnet_backward given d(loss)/d(features) and d(loss)/d(feature map)
// (batch, h, w, D); either may be NULL (not both).
int resnet_backward_map(Resnet *model, int slot, const Act *dfeatures, const Act *dmap,
                        ErrorMessage *err);

// Training-mode BatchNorm of every layer over all ranks of sync's
// communicator (nn/batchnorm_sync.h); NULL turns it off again.
// Tests: block block_index's training forward from x (its input at slot
// 0's batch, which resnet_prepare_batch prepared; the block's output is
// then slot 0's blocks[].out) and its backward from dout, as resnet_forward
// and resnet_backward run them, the gradients added to the model's.
// Returns dL/dx (the model's scratch).
const Act *resnet_block_pass(Resnet *model, int block_index, int batch, const Act *x,
                             const Act *dout);

int resnet_attach_batchnorm_sync(Resnet *model, BatchNormSync *sync, ErrorMessage *err);

// Weights as a torchvision state dict in safetensors (F32, conv weights
// OIHW, num_batches_tracked I64 scalars), without fc: loadable with
// torchvision.models.resnetXX().load_state_dict(..., strict=False) (only
// fc.weight and fc.bias reported missing). write: NULL, or another container
// of the same tensors (nn/safetensors.h, StateDictWrite).
int resnet_save(const Resnet *model, const char *path, StateDictWrite write, ErrorMessage *err);
// Loads a torchvision state dict saved as safetensors (F32, F16 or BF16).
// fc.* keys are skipped (a classifier checkpoint loads into the backbone);
// any other missing or unexpected key, or a shape mismatch, fails and the
// message names them. A missing num_batches_tracked is allowed (as PyTorch
// does for old checkpoints) and leaves the counter at 0.
int resnet_load(Resnet *model, const char *path, ErrorMessage *err);

#endif
