// What LightlyTrain's three distillation methods share: the frozen teacher,
// the mixup of the one view both networks see, and the student's side of
// the losses after its backbone.
//
// Teacher (--method-arg teacher=PATH, required): a backbone file in any
// naming model_source.h reads (a ViT in timm / DINOv2 / transformers
// naming, a torchvision ResNet, a ConvNeXt in torchvision / timm / DINOv3
// naming: DINOv3's ConvNeXts) or one of our checkpoints (teacher_part=
// backbone | student | teacher picks the part); teacher_arch=NAME (a
// --model name) supplies what the file cannot say (a ViT's heads). It is
// loaded frozen (backbone_allocate_frozen: no gradients, nothing kept for
// backward), runs eval forwards only and is never written to checkpoints:
// a resumed run reads it from the same path again. Its features, as
// LightlyTrain's teacher wrappers give them:
//   global: a ViT's normalised class token (DINOv2/DINOv3 forward_pool), a
//           ResNet's pooled features, a DINOv3 ConvNeXt's mean of its
//           normalised map (DINOv3VConvNeXtModelWrapper.forward_pool);
//   map:    a ViT's normalised patch tokens on the patch grid, a ResNet's
//           last stage before the pool, a DINOv3 ConvNeXt's last stage
//           through its final norm (backbone_feature_map).
//
// Mixup (LightlyTrain's _mixup_data): x' = lambda x + (1 - lambda)
// x[permutation], lambda ~ U(0, 1) and a uniform random permutation of the
// batch, both drawn from the run's seed and the batch's number (the same
// draws on resume, and for every repeat of a step on one batch).
#ifndef LTC_SSL_METHODS_DISTILLATION_TEACHER_H
#define LTC_SSL_METHODS_DISTILLATION_TEACHER_H

#include <stdint.h>

#include "backend/staging.h"
#include "ssl_methods/distillation_loss.h"
#include "ssl_methods/heads.h"
#include "ssl_methods/method.h"

// The --method-arg entries every version reads (distill_setup): the
// teacher's and LightlyTrain's lr scaling (lr_scale_method sqrt | linear,
// reference_batch_size 1536); and the queue size of v1 and v3 (auto: by
// dataset size; it must also be smaller than the dataset).
#define DISTILL_COMMON_ARGS                                                            \
    {"teacher", METHOD_ARG_TEXT, 0, 0, 0, "a path"},                                   \
    {"teacher_part", METHOD_ARG_CHOICE, 0, 0, 0, "backbone|student|teacher"},          \
    {"teacher_arch", METHOD_ARG_TEXT, 0, 0, 0, "a --model name"},                      \
    {"lr_scale_method", METHOD_ARG_CHOICE, 0, 0, 0, "sqrt|linear"},                    \
    {"reference_batch_size", METHOD_ARG_INTEGER, 1, 1e9, 0, NULL}
#define DISTILL_QUEUE_SIZE_ARG {"queue_size", METHOD_ARG_INTEGER, 1, 1 << 24, 0, "auto"}

typedef struct DistillTeacher {
    Backbone backbone;  // frozen
    int dim;            // D: width of the global features and of the map
    int grid_h, grid_w; // the map's size at the view size
    float *map_f32;     // (max_batch, grid_h, grid_w, D) fp32 copy for the losses
} DistillTeacher;

// Loads the teacher for batches of method->max_batch views of
// method->global_size px. Errors start with "teacher".
int distill_teacher_load(DistillTeacher *teacher, const Method *method,
                         const MethodSetup *setup, ErrorMessage *err);
void distill_teacher_free(DistillTeacher *teacher);
// A ViT teacher keeps the outputs of its last `blocks` blocks for
// vit_block_tokens (distillationv2's n_teacher_blocks > 1); by default it
// keeps none (vit.h: frozen). Nothing to do for a ResNet or blocks < 2.
int distill_teacher_keep_blocks(DistillTeacher *teacher, int blocks, ErrorMessage *err);
// Eval forward on input (batch, R, R, 3).
int distill_teacher_forward(DistillTeacher *teacher, int batch, const Act *input,
                            ErrorMessage *err);
// (batch, D) and (batch, grid_h, grid_w, D) of the last forward.
const Act *distill_teacher_global(DistillTeacher *teacher);
const Act *distill_teacher_map(DistillTeacher *teacher);
// The same L2-normalised (F.normalize, as LightlyTrain) into global
// (batch, D) and local (batch, grid_h grid_w, D), either NULL to skip;
// norms (batch grid_h grid_w) is scratch.
void distill_teacher_normalized(DistillTeacher *teacher, int batch, float *global, float *local,
                                float *norms);

// A DINOv3 ConvNeXt teacher (its features through the final norm): its
// stage outputs serve distillationv2's n_teacher_blocks.
int distill_teacher_has_stages(const DistillTeacher *teacher);
// The width of its last `stages` stages side by side.
int distill_teacher_stage_width(const DistillTeacher *teacher, int stages);
// out (batch, grid_h, grid_w, width) = its last `stages` stages of the last
// forward side by side, as LightlyTrain's DINOv3 ConvNeXt wrapper
// (forward_features with n_blocks): the last stage's map through the final
// norm, each earlier stage's output as it is (DINOv3's norms[0..2] are
// identities) resized bilinearly (align_corners false) to the last grid.
// scratch (batch, grid_h, grid_w, widest stage).
void distill_teacher_stage_features(DistillTeacher *teacher, int batch, int stages, Act *scratch,
                                    Act *out);

typedef struct DistillMixup {
    Backend *backend;
    uint64_t seed;
    Act *mixed;             // (max_batch, R, R, 3)
    int32_t *permutation;   // backend memory (max_batch)
    Staging staging;        // the step's permutation (max_batch int32) to upload
} DistillMixup;

// What every version's state starts with (method->state points to it, so
// the shared MethodOps hooks below can read it).
typedef struct DistillCommon {
    DistillTeacher teacher;
    DistillMixup mixup;
    DistillQueue queue;  // v1 and v3 (distillation_loss.h); v2 leaves it empty
} DistillCommon;

// What every version does first: checks that the views are one size and
// one view, applies the lr scaling arguments to method->defaults, loads the
// teacher and makes the mixup buffers.
int distill_setup(Method *method, const MethodSetup *setup, DistillCommon *common,
                  ErrorMessage *err);
// Frees the teacher, the mixup buffers and the queue.
void distill_common_free(DistillCommon *common);
// queue_size=auto|N: LightlyTrain's size for the dataset, or N (1 <= N <
// the dataset size).
int distill_queue_size_arg(const MethodSetup *setup, int *size, ErrorMessage *err);

// MethodOps hooks on a DistillCommon state: the frozen teacher, and the
// queue into and out of the checkpoint (distill_queue_save / _load).
Backbone *distill_method_teacher(Method *method);
int distill_method_save_queue(Method *method, CheckpointWriter *writer, ErrorMessage *err);
int distill_method_load_queue(Method *method, const Checkpoint *checkpoint, ErrorMessage *err);

// Backend buffers of sizes[i] floats (distill_alloc_buffers) or sizes[i]
// activations (distill_alloc_acts) into *targets[i] (a size of 0 leaves
// NULL), and their release (NULL entries skipped).
int distill_alloc_buffers(Backend *backend, float **const *targets, const size_t *sizes,
                          size_t count, ErrorMessage *err);
int distill_alloc_acts(Backend *backend, Act **const *targets, const size_t *sizes, size_t count,
                       ErrorMessage *err);
void distill_free_buffers(Backend *backend, void *const *buffers, size_t count);

int distill_mixup_create(DistillMixup *mixup, const Method *method, uint64_t seed,
                         ErrorMessage *err);
void distill_mixup_free(DistillMixup *mixup);
// The mixed global views of the uploaded batch (method->batch_index keys the draws).
const Act *distill_mixup_apply(DistillMixup *mixup, const Method *method, int batch);

// The student's side of a loss after its backbone, as LightlyTrain's
// _forward_student: a head on pooled features (batch, C), or on every
// position of a feature map (batch, h, w, C) followed by the bilinear
// resize of its output to the teacher's grid (out_h, out_w); then, when
// `normalize`, every row L2-normalised (F.normalize, eps 1e-12).
typedef struct DistillProjection {
    Backend *backend;
    Head head;
    int map;                    // 1: input is a map, resized
    int in_h, in_w, out_h, out_w;
    int normalize;
    int dim;                    // output width
    int batch;                  // of the last forward
    Act *resized_act;           // (max_batch, out_h, out_w, dim) (map)
    float *resized;             // the same in fp32 (map)
    float *normalized, *norms;  // (rows, dim), (rows) (normalize)
    float *dresized;            // (rows, dim): gradient before the normalisation
    Act *dresized_act;          // the same as activations (map)
    Act *dhead;                 // (max_batch, in_h, in_w, dim) (map)
} DistillProjection;

// in_h = in_w = 0 for pooled features (out_h, out_w ignored).
int distill_projection_create(DistillProjection *projection, Backend *backend,
                              const HeadSpec *spec, const char *name, int max_batch, int in_h,
                              int in_w, int out_h, int out_w, int normalize, uint64_t seed,
                              ErrorMessage *err);
void distill_projection_free(DistillProjection *projection);
// Rows of the output per image: out_h * out_w for a map, else 1.
int distill_projection_rows(const DistillProjection *projection);
// (batch, rows, dim) of x; NULL with a message on a bad batch.
const float *distill_projection_forward(DistillProjection *projection, int batch, const Act *x,
                                        ErrorMessage *err);
// Head gradients +=; dx (the input's shape) = given dout (batch, rows, dim).
int distill_projection_backward(DistillProjection *projection, const float *dout, Act *dx,
                                ErrorMessage *err);

#endif
