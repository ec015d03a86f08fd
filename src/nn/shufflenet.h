// ShuffleNetV2 backbones (x0.5, x1.0, x1.5, x2.0) with exactly torchvision's
// architecture and parameter names (torchvision.models.shufflenet_v2_x1_0,
// ...), NHWC throughout, as LightlyTrain 0.18 trains them
// (torchvision/shufflenet_v2_x1_0: its ShuffleNetV2ModelWrapper runs conv1,
// maxpool, stage2..4 and conv5; the features are conv5's map and its
// global mean; fc is not part of the backbone):
//
//   conv1:   conv 3x3 stride 2 (no bias) -> BN -> ReLU      (3 -> widths[0])
//   maxpool: 3x3 stride 2 padding 1
//   stageS (S = 2, 3, 4): repeats 4, 8, 4 InvertedResidual blocks of width
//            widths[S - 1]; the first of each has stride 2:
//     stride 2: cat(branch1(x), branch2(x))
//     stride 1: x1, x2 = the two halves of x's channels; cat(x1, branch2(x2))
//     then the channel shuffle of 2 groups (backend.h channel_shuffle)
//     branch1: depthwise 3x3 stride 2 -> BN, 1x1 -> BN -> ReLU
//     branch2: 1x1 -> BN -> ReLU, depthwise 3x3 (the block's stride) -> BN,
//              1x1 -> BN -> ReLU     (each branch: half the block's width)
//   conv5:   1x1 (no bias) -> BN -> ReLU                    (-> widths[4])
//
// Memory by lifetime as resnet.h: parameters + gradients (torchvision's
// names), buffers (BN running statistics; num_batches_tracked one counter),
// one activation arena per input slot (every unit's conv output, norm
// output and statistics, every block's concat and output), one gradient
// scratch shared by the slots (six tensors of the largest activation),
// conv and depthwise plans per slot and batch size. Gradient contract:
// parameter gradients accumulate (+=); no gradient for the input image.
#ifndef LTC_NN_SHUFFLENET_H
#define LTC_NN_SHUFFLENET_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "nn/layers.h"
#include "nn/parameters.h"
#include "nn/safetensors.h"
#include "util/error.h"

#define SHUFFLENET_STAGES 3
#define SHUFFLENET_MAX_NAME 40

typedef struct ShufflenetConfig {
    char name[SHUFFLENET_MAX_NAME];  // "torchvision/shufflenet_v2_x1_0"
    int widths[SHUFFLENET_STAGES + 2];   // torchvision's stages_out_channels
    int repeats[SHUFFLENET_STAGES];      // 4, 8, 4
    float bn_momentum, bn_eps;           // PyTorch's 0.1, 1e-5
    int in_channels;                     // of the input images (conv1); 0 means 3
} ShufflenetConfig;

// The --model names (NULL-terminated) and their configs.
extern const char *const shufflenet_model_names[];
// 1 when name is one of them ("torchvision/" prefix optional).
int shufflenet_is_model_name(const char *name);
int shufflenet_config_preset(const char *name, ShufflenetConfig *config, ErrorMessage *err);

// A conv (or depthwise conv) without bias, its BatchNorm and maybe a ReLU.
typedef struct ShufflenetUnit {
    Conv2d conv;
    BatchNorm bn;
    int act;        // LAYER_ACT_RELU or LAYER_ACT_NONE (layers.h)
    int depthwise;
    int id;  // index into the plans' and the slot's per-unit tables
} ShufflenetUnit;

typedef struct ShufflenetBlock {
    int stride, in_channels, out_channels, half;  // half: each branch's width
    ShufflenetUnit branch1[2];                    // stride 2 only
    ShufflenetUnit branch2[3];
} ShufflenetBlock;

typedef struct ShufflenetInputShape {
    int batch;
    int resolution;
} ShufflenetInputShape;

typedef struct ShufflenetPlans {
    int batch;
    ConvShape *shapes;             // (unit_count)
    ConvPlan **plans;              // (unit_count), may repeat; NULL for depthwise units
    ConvPlan **owned;              // distinct plans
    int owned_count;
    DepthwisePlan **depthwise;     // (unit_count), NULL but for depthwise units
    PoolShape pool;
} ShufflenetPlans;

typedef struct ShufflenetUnitState {
    const Act *input;        // the last forward's input
    Act *conv_out;           // (rows, Cout): the norm's input
    Act *out;                // the norm's (ReLU's) output
    float *mean, *inv_std;   // (Cout) batch statistics
} ShufflenetUnitState;

typedef struct ShufflenetBlockState {
    int height, width;       // output size
    Act *split;              // stride 1: x2 (rows, half), contiguous
    Act *cat;                // (rows, out): the concat before the shuffle
    Act *out;                // (rows, out): the block's output
} ShufflenetBlockState;

typedef struct ShufflenetSlot {
    ShufflenetInputShape max;
    ShufflenetPlans *plans;  // [0] for max.batch, more from shufflenet_prepare_batch
    int plans_count;
    void *arena;
    size_t arena_bytes;
    ShufflenetUnitState *units;    // (unit_count)
    ShufflenetBlockState *blocks;  // (block_count)
    Act *pool_out;                 // the maxpool's output: stage2's input
    int32_t *pool_argmax;
    int map_height, map_width;     // conv5's output size
    Act *features;                 // (N, widths[4])
    size_t largest;                // elements of the slot's largest tensor (max batch)
    const ShufflenetPlans *last_plans;
    int backward_ready;
} ShufflenetSlot;

typedef struct Shufflenet {
    Backend *backend;
    ShufflenetConfig config;
    int feature_dim;               // widths[4]
    ParameterSet params;           // torchvision's names, with gradients
    ParameterSet buffers;          // running statistics
    int64_t num_batches_tracked;
    ShufflenetUnit conv1, conv5;
    int block_count;
    ShufflenetBlock *blocks;
    int unit_count;
    ShufflenetUnit **units;        // (unit_count) by id, in forward order
    int slot_count;
    ShufflenetSlot *slots;
    Act *scratch;                  // backward: 6 tensors of scratch_elements
    size_t scratch_elements;
    // Set between shufflenet_declare and shufflenet_allocate for a model that
    // runs no backward (a teacher, embed, an EMA teacher): no gradients, no
    // scratch, the units' and blocks' tensors in a few shared buffers
    // (shufflenet.c layout_frozen); its training forwards use and update
    // batch statistics.
    int frozen;
} Shufflenet;

// Structure and parameter tables; allocates nothing on the backend.
int shufflenet_declare(Shufflenet *model, Backend *backend, const ShufflenetConfig *config,
                       ErrorMessage *err);
// Parameters, buffers, a slot per input shape and the gradient scratch
// (values zero until shufflenet_init or a load).
int shufflenet_allocate(Shufflenet *model, const ShufflenetInputShape *inputs, int input_count,
                        ErrorMessage *err);
// shufflenet_declare + shufflenet_allocate + shufflenet_init(seed).
int shufflenet_create(Shufflenet *model, Backend *backend, const ShufflenetConfig *config,
                      const ShufflenetInputShape *inputs, int input_count, uint64_t seed,
                      ErrorMessage *err);
void shufflenet_free(Shufflenet *model);
// Plans so that `slot` can also run a smaller batch. Outside the step loop.
int shufflenet_prepare_batch(Shufflenet *model, int slot, int batch, ErrorMessage *err);

// torchvision's init, which for ShuffleNetV2 is PyTorch's default: conv
// weights uniform in +-1 / sqrt(fan_in) (kaiming_uniform_ with a = sqrt(5)),
// drawn keyed by (seed, parameter name); BN weight 1, bias 0, running mean
// 0, running var 1; num_batches_tracked 0.
int shufflenet_init(Shufflenet *model, uint64_t seed, ErrorMessage *err);

// features (batch, D) and conv5's map of input (batch, R, R, C) NHWC on
// `slot`. training: BN uses (and updates) batch statistics and the slot
// keeps what backward needs; otherwise the running statistics.
int shufflenet_forward(Shufflenet *model, int slot, int batch, const Act *input, int training,
                       ErrorMessage *err);
const Act *shufflenet_features(const Shufflenet *model, int slot);  // (batch, D)
// conv5's output (batch, *height, *width, D) of the slot's last forward.
const Act *shufflenet_feature_map(const Shufflenet *model, int slot, int *height, int *width);
void shufflenet_feature_map_size(const Shufflenet *model, int slot, int *height, int *width);
// Parameter gradients += given d(loss)/d(features) (batch, D) and
// d(loss)/d(map); either may be NULL (not both).
int shufflenet_backward_map(Shufflenet *model, int slot, const Act *dfeatures, const Act *dmap,
                            ErrorMessage *err);

// torchvision's state dict (fc.* skipped when reading, never written).
int shufflenet_load_from(Shufflenet *model, const SafeTensors *file, const char *prefix,
                         ErrorMessage *err);
int shufflenet_save(const Shufflenet *model, const char *path, StateDictWrite write,
                    ErrorMessage *err);
// The config of the ShuffleNetV2 under prefix in a state dict (widths from
// its tensors), or -1 when the file holds none.
int shufflenet_config_from_weights(const SafeTensors *file, const char *prefix,
                                   ShufflenetConfig *config);

// Runs the model's forward / backward on a slot (shufflenet_blocks.c).
void shufflenet_run_forward(Shufflenet *model, ShufflenetSlot *slot,
                            const ShufflenetPlans *plans, const Act *input, int training);
void shufflenet_run_backward(Shufflenet *model, ShufflenetSlot *slot,
                             const ShufflenetPlans *plans, Act *dmap);

#endif
