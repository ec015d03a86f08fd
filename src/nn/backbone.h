// A backbone whatever its architecture: the training loop, the SSL methods,
// embed and export see ResNets and ViTs through one struct and a small table
// of functions (forward to pooled features, backward from their gradient,
// parameter tables, weight files). The models themselves: resnet.h, vit.h.
//
// Features: ResNets' globally pooled last stage; ViTs' pooled normalised
// tokens (mean of the patch tokens by default, or the class token: VitPool);
// Ultralytics YOLOs' globally pooled last backbone layer (nn/yolo.h);
// ConvNeXts' pooled last stage (DINOv3's: of the normalised map, convnext.h);
// ShuffleNetV2s' pooled conv5 (shufflenet.h).
#ifndef LTC_NN_BACKBONE_H
#define LTC_NN_BACKBONE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "nn/convnext.h"
#include "nn/parameters.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "nn/shufflenet.h"
#include "nn/vit.h"
#include "nn/yolo.h"
#include "util/error.h"

#define BACKBONE_MAX_SLOTS 4
#define BACKBONE_MAX_NAME 48

typedef enum BackboneKind {
    BACKBONE_RESNET,
    BACKBONE_VIT,
    BACKBONE_YOLO,
    BACKBONE_CONVNEXT,
    BACKBONE_SHUFFLENET
} BackboneKind;

// What to build.
typedef struct BackboneSpec {
    BackboneKind kind;
    int resnet_depth;  // 18, 26, 34, 50, 101, 152, 200
    int resnet_width;  // 2: wide_resnet50_2 / 101_2 (resnet.h width_factor); 0 or 1: not
    // timm's ResNets ("timm/resnet50"): torchvision's model and names, but
    // the last BatchNorm of each block starts at gamma 0 (timm's
    // zero_init_last, ResnetConfig.zero_init_residual)
    int resnet_zero_init_last;
    VitConfig vit;
    YoloConfig yolo;   // BACKBONE_YOLO (nn/yolo.h)
    ConvnextConfig convnext;  // BACKBONE_CONVNEXT (nn/convnext.h)
    ShufflenetConfig shufflenet;  // BACKBONE_SHUFFLENET (nn/shufflenet.h)
    // Channels of the input images: the first conv / patch embedding takes
    // this many (0 means 3; --num-channels).
    int in_channels;
    // ViTs: recompute blocks 0, N, 2N, ... in the backward instead of keeping
    // their activations (vit.h: activation_checkpointing; 0: off, 1: every
    // block; --activation-checkpointing). A frozen backbone (a teacher)
    // ignores it; a ResNet has none.
    int activation_checkpointing;
    // BatchNorm statistics over all ranks will be attached
    // (backbone_attach_batchnorm_sync; a ResNet lays out for it).
    int batchnorm_synchronised;
} BackboneSpec;

// The --model names: resnet18 / 34 / 50 / 101 / 152, the ViT presets of
// vit.h (vit_t16, vit_s14, ... with _reg4; dinov3/vits16, ...) and the
// Ultralytics YOLOs as LightlyTrain names them (ultralytics/yolov8s.yaml,
// ultralytics/yolo11m.yaml, ...: yolo.h), the ConvNeXts of convnext_names.h
// (torchvision/convnext_tiny, timm/..., dinov3/convnext-tiny, ...) and the
// ShuffleNetV2s of shufflenet.h (torchvision/shufflenet_v2_x1_0, ...);
// image_size sets a new ViT's position grid. NULL-terminated list for option
// tables.
extern const char *const backbone_model_names[];
int backbone_spec_parse(const char *name, int image_size, BackboneSpec *spec, ErrorMessage *err);
// One of LightlyTrain's model_args ("KEY=VALUE", --model-arg): the keyword
// arguments its timm and torchvision packages pass to the model's
// constructor, those this program has: drop_path_rate (ViTs, timm's and
// DINOv3's ConvNeXts; stochastic depth of the last block, linear from 0),
// stochastic_depth_prob (torchvision's ConvNeXts, the same), and
// zero_init_residual (torchvision's ResNets) or zero_init_last (timm's):
// true or false. Any other key, or one the spec's model does not take, is
// an error naming what it takes.
int backbone_spec_apply_arg(BackboneSpec *spec, const char *entry, ErrorMessage *err);
// "resnet50", "vit_s16", ... (out of BACKBONE_MAX_NAME bytes).
void backbone_spec_name(const BackboneSpec *spec, char *out, size_t size);
// The smallest input side the architecture takes and the multiple it needs
// (ViT: the patch size; ResNet, ConvNeXt: 1).
int backbone_spec_size_step(const BackboneSpec *spec);

typedef struct BackboneInput {
    int batch;
    int resolution;
} BackboneInput;

typedef struct Backbone Backbone;

typedef struct BackboneOps {
    int (*forward)(Backbone *backbone, int slot, int batch, const Act *input, int training,
                   ErrorMessage *err);
    const Act *(*features)(const Backbone *backbone, int slot);
    int (*backward)(Backbone *backbone, int slot, const Act *dfeatures, ErrorMessage *err);
    const Act *(*feature_map)(Backbone *backbone, int slot, int *height, int *width);
    int (*backward_map)(Backbone *backbone, int slot, const Act *dfeatures, const Act *dmap,
                        ErrorMessage *err);
    int (*prepare_batch)(Backbone *backbone, int slot, int batch, ErrorMessage *err);
    int (*init)(Backbone *backbone, uint64_t seed, ErrorMessage *err);
    // Weights under prefix of a state-dict file (ResNet: torchvision's
    // names, fc.* skipped without a prefix; ViT: vit_weights.h's namings).
    int (*load)(Backbone *backbone, const SafeTensors *file, const char *prefix,
                ErrorMessage *err);
    // The architecture's interchange file: torchvision / timm state dict,
    // written by `write` (NULL: safetensors_write).
    int (*save)(const Backbone *backbone, const char *path, StateDictWrite write,
                ErrorMessage *err);
    void (*free)(Backbone *backbone);
} BackboneOps;

struct Backbone {
    BackboneSpec spec;
    const BackboneOps *ops;
    Backend *backend;
    int feature_dim;
    ParameterSet *params;          // trainable, with gradients
    ParameterSet *buffers;         // running statistics (empty for ViTs)
    int64_t *num_batches_tracked;  // ResNet's BatchNorm counter (a ViT keeps a 0)
    int slot_count;
    BackboneInput slots[BACKBONE_MAX_SLOTS];
    union {
        Resnet resnet;
        Vit vit;
        Yolo yolo;
        Convnext convnext;
        Shufflenet shufflenet;
    } model;
    int64_t no_batches_tracked;
};

// Builds the structure and allocates parameters and a slot per input
// (values zero until backbone_init or a load).
int backbone_allocate(Backbone *backbone, Backend *backend, const BackboneSpec *spec,
                      const BackboneInput *inputs, int input_count, ErrorMessage *err);
// backbone_allocate for a model that never runs a backward (a teacher):
// no gradients, nothing kept for backward (resnet.h, vit.h: `frozen`);
// backward fails. Training forwards compute what a trainable model's do
// (a ResNet's batch statistics, a ViT's RoPE rescale: an EMA teacher's).
int backbone_allocate_frozen(Backbone *backbone, Backend *backend, const BackboneSpec *spec,
                             const BackboneInput *inputs, int input_count, ErrorMessage *err);
// backbone_allocate, then the architecture's initialisation from seed.
int backbone_create(Backbone *backbone, Backend *backend, const BackboneSpec *spec,
                    const BackboneInput *inputs, int input_count, uint64_t seed,
                    ErrorMessage *err);
// backbone_allocate_frozen, then the same initialisation (and, for a ViT,
// the seed its training forwards' draws are keyed by).
int backbone_create_frozen(Backbone *backbone, Backend *backend, const BackboneSpec *spec,
                           const BackboneInput *inputs, int input_count, uint64_t seed,
                           ErrorMessage *err);
void backbone_free(Backbone *backbone);

// The architecture of the backbone under prefix in a state-dict file: a
// ResNet (depth from its block names) or a ViT (vit_weights.h).
int backbone_spec_from_weights(const SafeTensors *file, const char *prefix, BackboneSpec *spec,
                               ErrorMessage *err);
// The first layer (ResNet conv1, ViT patch_embed.proj), torchvision's OIHW
// shape: shape[1] is the image channels the backbone takes.
const Parameter *backbone_input_layer(const Backbone *backbone);

// Keys the random draws of the following training forwards (a ViT's drop
// path and DINOv3's RoPE rescale) by `key`, the global index of the batch
// (Batch.index), so that a resumed run draws what the uninterrupted one
// did. A ResNet draws nothing.
void backbone_set_draw_key(Backbone *backbone, uint64_t key);

// Synchronised BatchNorm (nn/batchnorm_sync.h) for every BatchNorm of the
// backbone; NULL turns it off again. A ViT has none (LayerNorm needs no
// statistics across the batch): nothing to attach.
int backbone_attach_batchnorm_sync(Backbone *backbone, BatchNormSync *sync, ErrorMessage *err);

static inline int backbone_forward(Backbone *b, int slot, int batch, const Act *input,
                                   int training, ErrorMessage *err) {
    return b->ops->forward(b, slot, batch, input, training, err);
}
// (batch, feature_dim) of the slot's last forward.
static inline const Act *backbone_features(const Backbone *b, int slot) {
    return b->ops->features(b, slot);
}
// Parameter gradients += given dfeatures (batch, D) of the slot's last training forward.
static inline int backbone_backward(Backbone *b, int slot, const Act *dfeatures,
                                    ErrorMessage *err) {
    return b->ops->backward(b, slot, dfeatures, err);
}
// The spatial feature map (batch, *height, *width, D) of the slot's last
// forward (backend memory, valid until the next forward on the slot): a
// ResNet's last stage before the pool, a ViT's normalised patch tokens on
// the patch grid.
static inline const Act *backbone_feature_map(Backbone *b, int slot, int *height,
                                                int *width) {
    return b->ops->feature_map(b, slot, height, width);
}
// The size of that map for the slot's resolution (before any forward).
void backbone_feature_map_size(const Backbone *b, int slot, int *height, int *width);
// Parameter gradients += given dfeatures (batch, D) and dmap (batch, h, w,
// D) = d(loss)/d(feature map), either NULL (not both), of the slot's last
// training forward: one backward for losses on both.
static inline int backbone_backward_map(Backbone *b, int slot, const Act *dfeatures,
                                        const Act *dmap, ErrorMessage *err) {
    return b->ops->backward_map(b, slot, dfeatures, dmap, err);
}
// Plans so that slot can also run a smaller batch. Outside the step loop.
static inline int backbone_prepare_batch(Backbone *b, int slot, int batch, ErrorMessage *err) {
    return b->ops->prepare_batch(b, slot, batch, err);
}
static inline int backbone_save(const Backbone *b, const char *path, ErrorMessage *err) {
    return b->ops->save(b, path, NULL, err);
}
// The same tensors, names and order written by `write` (a torch state dict:
// weights/pt_writer.h, pt_state_dict_write) instead of as safetensors.
static inline int backbone_save_as(const Backbone *b, const char *path, StateDictWrite write,
                                   ErrorMessage *err) {
    return b->ops->save(b, path, write, err);
}

#endif
