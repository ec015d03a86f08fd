// Ultralytics' YOLOv5u, YOLOv8, YOLO11, YOLO12 and YOLO26 detection models
// (sizes n, s, m, l, x) and the segmentation, pose, oriented-box and
// classification models ("-seg", "-pose", "-obb", "-cls") of YOLOv8, YOLO11
// and YOLO26, with Ultralytics' architecture,
// parameter names (the model's state_dict: "model.<layer>.<module path>")
// and widths and depths scaled from the model's YAML as Ultralytics'
// parse_model scales them (yolo_config.c). Blocks: Conv (conv without bias
// + BatchNorm eps 1e-3, momentum 0.03 (-cls: 1e-5, 0.1) + SiLU; YOLOv5's
// stem a 6x6 of padding 2), C3 (YOLOv5's), C2f, C3k2 (Bottlenecks, C3k, or YOLO26's
// Bottleneck + PSABlock pairs), SPPF (max pool 5, stride 1, three times;
// YOLOv8's and YOLO11's cv1 with SiLU, as parse_model keeps it for their
// YAML rows; YOLO26's unactivated, with a shortcut), C2PSA
// (position-sensitive attention: PSA blocks), A2C2f (YOLO12's: area
// attention blocks (ABlock) in pairs, or C3k, with a LayerScale-like gamma
// residual for the l and x sizes), then the neck (nearest
// upsample, concat, C2f / C3k2, Conv) and the Detect head (YOLO26's: 4 box
// outputs per level (reg_max 1, no DFL) and the end-to-end one-to-one
// copies of both stacks), or the head of the model's task (YoloTask; the
// -cls models have no SPPF and no neck, then Classify); YOLO-World's
// (YOLO_V8_WORLD*) neck and WorldDetect head.
//
// What runs and what is trained is what LightlyTrain 0.18 trains
// (lightly_train/_models/ultralytics/ultralytics.py, _get_backbone): the
// backbone up to the last layer before SPPF (YOLOv5, YOLOv8: layers 0-8), the
// last A2C2f before the first Upsample (YOLO12: 0-8) or before
// the first Upsample (YOLO11, YOLO26: layers 0-10, SPPF and C2PSA included);
// of a -cls model every layer before Classify (YOLOv8: 0-8, else 0-9). Its
// last output is the feature map the SSL methods and distillation read
// (P5/32; feature_dim = its channels), the features its global average
// pool. The neck and the head are kept as initialised (LightlyTrain's
// optimizer never sees them) and exported with the rest, so that
// Ultralytics fine-tunes the whole model: their tensors live in the buffer
// table (no gradients, saved and loaded with the weights), never run.
//
// Memory by lifetime as in resnet.h: parameters + gradients (the backbone),
// buffers (its BatchNorm statistics, and every tensor of the neck and
// head), one activation arena per input slot (what backward needs), one
// backward arena shared by the slots (the gradients of one layer at a time
// plus two of the layer outputs), conv and attention plans per slot and
// batch size. Gradient contract: parameter gradients accumulate (+=); no
// gradient for the input image.
#ifndef LTC_NN_YOLO_H
#define LTC_NN_YOLO_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "nn/layers.h"
#include "nn/parameters.h"
#include "nn/safetensors.h"
#include "util/error.h"

#define YOLO_MAX_NAME 16
#define YOLO_MAX_LAYERS 40
#define YOLO_MAX_CLASSES 65536  // a Detect head's nc and width (yolo_head_from_weights)

// YOLOv5u: Ultralytics' anchor-free YOLOv5 (yolov5.yaml: C3 blocks, YOLOv8's
// Detect head), detection only.
// YOLO12: YOLO11's stem with A2C2f (area attention) blocks, no SPPF, no C2PSA;
// detection only.
// YOLO_V5_P6: yolov5-p6.yaml (the released yolov5n6u.pt ...: a P6/64 stage, 4-level Detect)
// YOLO_26_P6: yolo26-p6.yaml (YOLO26's blocks with a P6/64 stage, Detect over P3 ... P6);
// YOLO_26_P2: yolo26-p2.yaml (YOLO26's backbone, the neck one level up, Detect over P2 ... P5);
// detection only, no released weights.
// YOLO_V8_P6: yolov8-pose-p6.yaml (yolov8x-pose-p6.pt: YOLOv8's blocks with a P6/64
// stage, a neck of C2 blocks, a 4-level Pose head); pose only.
// YOLO_V6: yolov6.yaml (Meituan's YOLOv6 as Ultralytics builds it: plain Convs, several
// in a row as a Sequential, every Conv with ReLU (the YAML's activation), a neck of
// ConvTranspose2d upsamplings, YOLOv8's Detect); detection only, no released weights.
// YOLO_V8_WORLD, YOLO_V8_WORLDV2: yolov8-world.yaml and yolov8-worldv2.yaml (YOLO-World,
// open-vocabulary detection: Ultralytics' WorldModel, task detect; sizes s ... x as
// LightlyTrain lists them): YOLOv8's backbone, a neck of C2fAttn blocks guided by the
// class names' text embeddings (v1 also an ImagePoolingAttn), a WorldDetect head whose
// class stacks end in 512-wide embeddings scored by a ContrastiveHead (v2: a
// BNContrastiveHead) per level.
typedef enum YoloFamily {
    YOLO_V5, YOLO_V8, YOLO_11, YOLO_12, YOLO_26, YOLO_V5_P6, YOLO_26_P6, YOLO_26_P2, YOLO_V8_P6,
    YOLO_V6, YOLO_V8_WORLD, YOLO_V8_WORLDV2
} YoloFamily;

// The model's head (its YAML's last line), each Detect's stacks plus its
// task's: Detect; Segment for the "-seg" models (YOLO26: Segment26), the
// mask prototypes (proto) and mask coefficient stacks (cv4); Pose for
// "-pose" (Pose26: its keypoint stacks split in cv4, cv4_kpts, cv4_sigma,
// and a RealNVP flow_model), 17 keypoints of (x, y, visible) per anchor;
// OBB for "-obb" (OBB26), one angle per anchor (cv4). The "-cls" models
// are other YAMLs (yolov8-cls.yaml, yolo11-cls.yaml; YOLO26's is YOLO11's):
// the backbone without SPPF (YOLO11's keeps C2PSA) and no neck, then
// Classify: a 1x1 Conv to 1280, the global pool, a Linear to the classes.
// YOLO26's "-sem" and "-depth" models are yolo26.yaml's backbone with
// other heads: SemanticSegment (per-pixel classes, 19 in its YAML:
// Cityscapes') on the neck's P3 and P4 (the neck cut after P3), and Depth
// (monocular depth) on the whole neck's P3 ... P5.
typedef enum YoloTask {
    YOLO_TASK_DETECT,
    YOLO_TASK_SEGMENT,
    YOLO_TASK_POSE,
    YOLO_TASK_OBB,
    YOLO_TASK_CLASSIFY,
    YOLO_TASK_SEMANTIC,
    YOLO_TASK_DEPTH,
} YoloTask;
#define YOLO_DEPTH_WIDTH 256  // yolo26-depth.yaml's Depth [256]: c_mid, not scaled
#define YOLO_CLASSIFY_HIDDEN 1280  // Classify's c_ (EfficientNet-B0's width)
#define YOLO_MASKS 32        // Segment's nm: the YAMLs' [nc, 32, 256]
#define YOLO_KEYPOINTS 17    // Pose's kpt_shape: the YAMLs' [17, 3]
#define YOLO_KEYPOINT_DIMS 3
// YOLO-World: the text embeddings' width (CLIP ViT-B/32's: WorldDetect's embed,
// MaxSigmoidAttnBlock's guide channels gc, ImagePoolingAttn's ct), and
// ImagePoolingAttn's heads and pooled grid (k x k per level), none scaled.
#define YOLO_WORLD_EMBED 512
#define YOLO_WORLD_POOL_HEADS 8
#define YOLO_WORLD_POOL_GRID 3
// The suffix of a task's model names ("", "-seg", "-pose", "-obb", "-cls", "-sem",
// "-depth").
const char *yolo_task_suffix(YoloTask task);

typedef struct YoloConfig {
    YoloFamily family;
    char scale;                  // 'n', 's', 'm', 'l' or 'x'
    YoloTask task;
    char name[YOLO_MAX_NAME];    // "yolov8s", "yolo11m", "yolo26n-seg", "yolov5su" (the YAML stem)
    int classes;                 // the YAML's nc: 80, or the initial weights' (yolo_head_from_weights)
    int class_width;             // the Detect head's class-stack width: 0 for Ultralytics'
                                 // max(ch0, min(nc, 100)), or the initial weights'
    float bn_momentum, bn_eps;   // 0.03, 1e-3 (Ultralytics' initialize_weights); -cls: 0.1, 1e-5
} YoloConfig;

// "yolov5nu" ... "yolov5xu", "yolov5n" ... "yolov5x" (the same models),
// "yolov8n" ... "yolo26x", and each with "-seg", "-pose", "-obb", "-cls",
// "yolov8s-world" ... "yolov8x-worldv2" (a
// ".yaml" or ".pt" suffix and an "ultralytics/"
// prefix as LightlyTrain writes them are the caller's: yolo_parse_name).
extern const char *const yolo_model_names[];
// Parses "ultralytics/yolov8s.yaml", "yolov8s.yaml", "yolo11m.pt", "yolo11m":
// *config for that model (80 classes), *pretrained
// = 1 for a ".pt" name (Ultralytics' released weights; YOLOv5's are only
// "yolov5nu.pt" ...). -1 with a message for any other name.
int yolo_parse_name(const char *text, YoloConfig *config, int *pretrained, ErrorMessage *err);
// 1 when text names a YOLO model as yolo_parse_name takes it.
int yolo_is_model_name(const char *text);

typedef enum YoloModuleKind {
    YOLO_CONV,
    YOLO_C2F,
    YOLO_C3K2,
    YOLO_SPPF,
    YOLO_C2PSA,
    YOLO_UPSAMPLE,
    YOLO_CONCAT,
    YOLO_DETECT,    // the head of the detection, segmentation, pose and OBB models
    YOLO_CLASSIFY,  // the head of the -cls models
    YOLO_C3,        // YOLOv5's CSP block
    YOLO_A2C2F,     // YOLO12's area-attention CSP block
    YOLO_C2,        // yolov8-pose-p6's neck: C2f's parts, cv2 on cv1's halves only (never runs)
    YOLO_CONV_TRANSPOSE,  // YOLOv6's neck: a bare nn.ConvTranspose2d (k 2, s 2, bias; never runs)
    YOLO_SEMANTIC,  // the head of the -sem models (SemanticSegment)
    YOLO_DEPTH,     // the head of the -depth models (Depth)
    YOLO_C2F_ATTN,  // YOLO-World's neck: C2f + a MaxSigmoidAttnBlock (never runs)
    YOLO_IMAGE_POOLING_ATTN,  // YOLO-World v1's neck: text embeddings from image features
                              // (never runs)
    YOLO_WORLD_DETECT,  // YOLO-World's head (WorldDetect)
} YoloModuleKind;

// A Conv's activation: none (act=False), Ultralytics' default SiLU, or the
// ReLU of a YAML whose `activation` is torch.nn.ReLU() (YOLOv6).
enum { YOLO_ACT_NONE = LAYER_ACT_NONE, YOLO_ACT_SILU = LAYER_ACT_SILU, YOLO_ACT_RELU = LAYER_ACT_RELU };

// Ultralytics' Conv: conv (no bias; depthwise for DWConv and PSA's pe, on
// the depthwise ops with weights (1, K, K, C)) + BN (+ SiLU).
typedef struct YoloConv {
    Conv2d conv;
    BatchNorm bn;
    int act;        // after the norm: YOLO_ACT_NONE, _SILU or _RELU
    int depthwise;  // groups = channels
    int id;         // index into the slot's per-conv state (backbone convs)
} YoloConv;

typedef struct YoloBottleneck {
    YoloConv cv1, cv2;
    int add;  // shortcut and c1 == c2
} YoloBottleneck;

typedef enum YoloInnerKind {
    YOLO_INNER_BOTTLENECK,
    YOLO_INNER_C3K,
    YOLO_INNER_PSA,
    YOLO_INNER_BOTTLENECK_PSA,  // YOLO26's C3k2(attn=True): Sequential(Bottleneck, PSABlock)
    YOLO_INNER_AREA,            // YOLO12's ABlock: PSABlock's layout with key_dim = head_dim,
                                // 32-channel heads, a 7x7 pe, `area` token groups, "mlp"
} YoloInnerKind;

// One repeated block of a C2f / C3k2 (a Bottleneck, a C3k, or a Bottleneck
// then a PSABlock) or of a C2PSA (a PSABlock).
typedef struct YoloInner {
    YoloInnerKind kind;
    int channels;                 // in = out
    YoloBottleneck bottleneck;    // YOLO_INNER_BOTTLENECK and _BOTTLENECK_PSA
    YoloConv cv1, cv2, cv3;       // C3k: 1x1 to hidden, 1x1 to hidden, 1x1 from the concat
    int count;                    // C3k's bottlenecks
    YoloBottleneck *m;
    int hidden;                   // C3k's c_
    YoloConv qkv, pe, proj, ffn0, ffn1;  // PSABlock (_PSA, _BOTTLENECK_PSA), ABlock (_AREA):
                                         // attention, MLP
    int heads, key_dim, head_dim;
    int area;                     // ABlock: attention within each of `area` runs of H W / area
                                  // tokens (row-major), 1: over the whole map
    int id;                       // index into the slot's per-inner state
} YoloInner;

typedef struct YoloModule {
    YoloModuleKind kind;
    int from[4], from_count;  // the layers it reads (absolute indices; Detect: 3 or 4 levels)
    int in_channels, out_channels;
    int hidden;               // C2f / C3k2 / C2PSA's self.c, SPPF's c_, Segment's npr
    int repeats;              // n after the depth gain
    int kernel, stride;       // Conv's; SPPF's pool window in kernel
    int padding;              // Conv's (k / 2 but for YOLOv5's 6x6 stem: 2)
    int shortcut, c3k;        // C2f / C3k2 arguments; SPPF: shortcut (YOLO26's y + x);
                              // A2C2f: residual (y = x + gamma * cv2(...))
    int attn;                 // C3k2: YOLO26's Bottleneck + PSABlock inner blocks
    int heads;                // C2fAttn: its MaxSigmoidAttnBlock's nh (scaled)
    int plain_cv1;            // SPPF: YOLO26's cv1 without SiLU
    float expansion;          // C2f / C3k2's e
    YoloConv cv1, cv2;        // Conv: cv1
    YoloConv cv3;             // C3: 1x1 from the concat of its two branches
    YoloBottleneck *m;        // C3: its `repeats` Bottlenecks (1x1, 3x3, e=1)
    YoloConv *chain;          // a Conv row of n > 1 (YOLOv6: Sequential of n Convs, c1 = c2):
                              // its Convs after the first (cv1), repeats - 1 of them
    int inner_count;
    YoloInner *inner;
    int inner_group;          // inner blocks per entry of m: 1, or A2C2f's ABlock pairs: 2
    int area;                 // A2C2f: its ABlocks' area (a2), 0: C3k blocks
    float mlp_ratio;          // A2C2f: its ABlocks' MLP width / channels (2.0; l, x: 1.2)
    int gamma_index;          // A2C2f of the l and x sizes: y = x + gamma * cv2(...) (else -1)
    float *gamma, *gamma_grad;
    int trained;              // 1: backbone (runs, parameters); 0: neck and head (buffers)
} YoloModule;

typedef struct YoloInputShape {
    int batch;
    int resolution;
} YoloInputShape;

typedef struct YoloConvState YoloConvState;
typedef struct YoloInnerState YoloInnerState;
typedef struct YoloModuleState YoloModuleState;

// Plans for one batch size of a slot.
typedef struct YoloPlans {
    int batch;
    ConvShape *shapes;             // (conv_count)
    ConvPlan **plans;              // (conv_count), may repeat; NULL for depthwise convs
    ConvPlan **owned;
    int owned_count;
    DepthwisePlan **depthwise;     // (conv_count), NULL but for depthwise convs (PSA's pe)
    AttentionPlan **attention;     // (inner_count), NULL but for PSA blocks
    PoolShape pool;                // SPPF's (one SPPF per model)
} YoloPlans;

typedef struct YoloSlot {
    YoloInputShape max;
    YoloPlans *plans;
    int plans_count;
    void *arena;
    size_t arena_bytes;
    YoloConvState *convs;      // (conv_count)
    YoloInnerState *inners;    // (inner_count)
    YoloModuleState *modules;  // (backbone layers)
    Act *features;             // (N, D)
    Act *grad_conv[2];         // backward arena: one conv's norm and conv gradients
    Act *grad_layer[2];        // backward arena: a layer's output gradient, its input's
    const YoloPlans *last_plans;
    int backward_ready;
} YoloSlot;

typedef struct Yolo {
    Backend *backend;
    YoloConfig config;
    int feature_dim;
    ParameterSet params;    // the backbone's trainable tensors, with gradients
    ParameterSet buffers;   // BN statistics; every tensor of the neck and head
    int64_t num_batches_tracked;
    int layer_count;        // all layers, head included
    int head_strides[4];    // the Detect head's levels' strides in pixels (8, 16, 32; P6: 64 too;
                            // P2: 4 ... 32), from the layers it reads
    int backbone_layers;    // the ones that run (0 .. backbone_layers - 1)
    YoloModule layers[YOLO_MAX_LAYERS];
    int conv_count;         // backbone convs, in forward order
    YoloConv **convs;
    int inner_count;        // backbone inner blocks
    YoloInner **inners;
    int slot_count;
    YoloSlot *slots;
    void *backward_arena;   // the gradients of one backward (see yolo.h top)
    size_t backward_bytes;
    int frozen;             // set before yolo_allocate: no gradients, no backward
} Yolo;

// Builds the structure and declares the tables; allocates nothing.
int yolo_declare(Yolo *model, Backend *backend, const YoloConfig *config, ErrorMessage *err);
// Allocates tables, slots (plans, activations) and the backward arena.
int yolo_allocate(Yolo *model, const YoloInputShape *inputs, int input_count, ErrorMessage *err);
void yolo_free(Yolo *model);
int yolo_prepare_batch(Yolo *model, int slot, int batch, ErrorMessage *err);

// Ultralytics' initialisation of a model built from its YAML: convs
// PyTorch's default (kaiming_uniform a = sqrt(5): uniform in +-1/sqrt(fan_in),
// biases too), BatchNorm weight 1, bias 0, running mean 0, var 1; the
// Detect head's last biases as Detect.bias_init sets them (box 2.0, class
// log(5 / nc / (640 / stride)^2); WorldDetect's: box 1.0, class stacks
// left at PyTorch's default); the DFL conv's weight 0 .. 15. Draws from
// the counter-based RNG keyed by (seed, name).
int yolo_init(Yolo *model, uint64_t seed, ErrorMessage *err);

// features (batch, D) = pool(backbone(input (batch, R, R, 3))) on slot; as
// resnet_forward (training: batch statistics, running ones updated).
int yolo_forward(Yolo *model, int slot, int batch, const Act *input, int training,
                 ErrorMessage *err);
const Act *yolo_features(const Yolo *model, int slot);
// The output of backbone layer `layer` (batch, *height, *width, C) of the
// slot's last forward; *channels its C. NULL for a layer that does not run.
const Act *yolo_layer_output(const Yolo *model, int slot, int layer, int *height, int *width,
                             int *channels);
// The backbone's last output: the feature map.
const Act *yolo_feature_map(const Yolo *model, int slot, int *height, int *width);
void yolo_feature_map_size(const Yolo *model, int slot, int *height, int *width);
// Parameter gradients += given d(loss)/d(features) and/or d(loss)/d(feature
// map) (batch, h, w, D) of the slot's last training forward.
int yolo_backward_map(Yolo *model, int slot, const Act *dfeatures, const Act *dmap,
                      ErrorMessage *err);

// The Detect head of config's family under prefix in file into config:
// its classes and class-stack width, the out and in channels of its first
// level's class conv ("model.<detect>.cv3.0.2.weight"). 1 when found, 0
// (config unchanged) when the file has none. A model fine-tuned by its
// user has the nc of their dataset, and when it was fine-tuned from an
// 80-class one (Ultralytics 8.4) the old head's width of 80 with it; one
// of Ultralytics' other releases (Open Images: 601) has its own.
int yolo_head_from_weights(const SafeTensors *file, const char *prefix, YoloConfig *config);
// The model whose state dict (Ultralytics' names, torch shapes) lies under
// prefix in file: every tensor of its tables present with its shape (extra
// tensors are the loader's to refuse), its classes the file's.
int yolo_config_from_weights(const SafeTensors *file, const char *prefix, YoloConfig *config,
                             ErrorMessage *err);
// The state dict's anchor: "model.0.conv.weight" with "model.1.conv.weight".
#define YOLO_ANCHOR "model.0.conv.weight"
#define YOLO_ANCHOR_NEXT "model.1.conv.weight"

// Ultralytics' DetectionModel state dict in safetensors (F32, conv weights
// OIHW, num_batches_tracked I64): every layer, neck and head included;
// write: NULL, or another container (StateDictWrite).
int yolo_save(const Yolo *model, const char *path, StateDictWrite write, ErrorMessage *err);

// One line of the family's YAML, [from, repeats, module, args], before
// scaling (export_ultralytics.c writes the model's yaml dict from them).
typedef struct YoloYamlLine {
    int from[4];     // -1: the previous layer; absolute indices otherwise
    int from_count;
    int repeats;
    YoloModuleKind kind;
    int channels;    // args[0] (c2) before scaling; 0 where the module has none
    int kernel, stride;  // YOLO-World's rows keep their widths in kernel: C2fAttn's ec
                         // ([c2, ec, nh]), ImagePoolingAttn's ec ([ec]), WorldDetect's embed
                         // ([nc, embed, with_bn])
    int flag;        // C2f, C3, C2: shortcut; C3k2: c3k; SPPF: YOLO26's rows [c2, 5, 3, True]
                     // (1: n = 3 pools, shortcut, an unactivated cv1) and [c2, 5, 3, False]
                     // (2: yolo26-p6's, no shortcut); 0: [c2, 5] (cv1 with SiLU);
                     // WorldDetect: with_bn (BNContrastiveHead)
    float expansion; // C3k2's e (0: the default 0.5)
    int attn;        // C3k2: YOLO26's attn argument (its 4th); A2C2f: area (a2 in flag);
                     // C2fAttn: nh
    int padding;     // Conv: the row's p (YOLOv5's stem [64, 6, 2, 2]); 0: none given (k / 2)
} YoloYamlLine;
const YoloYamlLine *yolo_yaml_lines(YoloFamily family, YoloTask task, int *count);

// The Detect head's reg_max (DFL bins: 16, YOLO26's 1) and end2end (the
// one-to-one copies of the box and class stacks: YOLO26) of a family;
// legacy: its class stacks of two 3x3 Convs (YOLOv5, YOLOv8), not DWConv
// pairs (parse_model's legacy: no C3k2 in the YAML).
int yolo_reg_max(YoloFamily family);
int yolo_end2end(YoloFamily family);
int yolo_legacy_head(YoloFamily family);
// YOLO26's blocks and heads (yolo26.yaml and its -p6, -p2 variants).
int yolo_is_26(YoloFamily family);
// YOLO-World (yolov8-world.yaml, yolov8-worldv2.yaml).
int yolo_is_world(YoloFamily family);
// The activation of the family's Convs (parse_model's Conv.default_act).
int yolo_default_act(YoloFamily family);
// The layers LightlyTrain's backbone keeps of a (non -cls) family's model:
// 9 (YOLOv5, YOLOv8: before SPPF) or 11 (before the first Upsample); the
// P6 variants one stage more (11, 13).
int yolo_backbone_layers(YoloFamily family);
// The rows of the YAML's backbone section (up to SPPF, C2PSA or A2C2f).
int yolo_yaml_backbone_rows(YoloFamily family);

// The YAML's scales: depth, width, max_channels of n, s, m, l, x (5 entries).
typedef struct YoloScale {
    char scale;
    double depth, width;
    int max_channels;
} YoloScale;
const YoloScale *yolo_yaml_scales(YoloFamily family, YoloTask task);

// Internal to yolo*.c. Fills model->layers from the YAML tables (yolo_config.c).
int yolo_build_layers(Yolo *model, ErrorMessage *err);
// The blocks' forward and backward (yolo_blocks.c).
void yolo_run_forward(Yolo *model, YoloSlot *slot, const YoloPlans *plans, const Act *input,
                      int training);
void yolo_run_backward(Yolo *model, YoloSlot *slot, const YoloPlans *plans, const Act *dmap);
// Lays out a slot's activations (base NULL: sizing pass), returns bytes.
size_t yolo_layout_slot(Yolo *model, YoloSlot *slot, void *base);
// Lays out the backward arena for slot (base NULL: sizing), returns bytes.
size_t yolo_layout_backward(Yolo *model, YoloSlot *slot, void *base);

#endif
