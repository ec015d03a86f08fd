// The interface between the training loop and an SSL method (SimCLR, BYOL,
// DINO, VICReg, Barlow Twins, distillation v1/v2/v3). A method owns the student
// backbone, its heads, any teacher and the loss; the loop owns the data, the
// optimizers (one per parameter group), schedules, logging and checkpoints.
//
// One optimizer step with k micro-batches (gradient accumulation):
//   loop: zero every group's gradients
//   k x { method_normalize_views(batch on the device); ops->step(step): forward, loss,
//         backward; parameter gradients +=; the loss into the record }
//   loop: scale gradients by 1/k, clip (defaults.grad_clip), one optimizer
//         step per group active at this step (method_group_active), at the
//         scheduled lr x method_group_lr_factor
//   ops->after_update(step): EMA teacher, DINO centre
//
// The step record: a method never reads a value back from the backend.
// Its step writes the loss, and it writes the values it logs (schedules,
// loss terms), into `record` (backend memory); the loop copies it and reads
// the copy when it logs, one step later (docs/gpu.md). The backward pass
// starts from the loss gradient times *loss_scale when the loop sets one
// (16-mixed's loss scaler): method_scale_loss_gradient.
//
// Views: views with the resolution of view 0 ("global") are normalised into
// one concatenated input (global_views * batch, R, R, 3), the others
// ("local", DINO's small crops) into a second one, so the backbone runs one
// forward per resolution over all views, as LightlyTrain does
// (torch.cat(views)); BatchNorm statistics span all views.
//
// Checkpoints: the loop saves and restores every group (parameters,
// buffers, optimizer state) under "<group name>."; a method's ops->save and
// ops->load add what is not a group (teacher, DINO centre).
#ifndef LTC_SSL_METHODS_METHOD_H
#define LTC_SSL_METHODS_METHOD_H

#include <stddef.h>
#include <stdint.h>

#include "augment/augment.h"
#include "backend/backend.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "nn/optimizer.h"
#include "nn/parameters.h"
#include "nn/backbone.h"
#include "ssl_methods/embed_head.h"
#include "train/checkpoint.h"
#include "util/error.h"

typedef enum MethodKind {
    METHOD_SIMCLR,
    METHOD_BYOL,
    METHOD_DINO,
    METHOD_VICREG,
    METHOD_BARLOW_TWINS,
    METHOD_DISTILLATION,     // LightlyTrain's "distillation" = DistillationV3
    METHOD_DISTILLATION_V1,  // "distillationv1" = Distillation
    METHOD_DISTILLATION_V2,  // "distillationv2"
    METHOD_DINOV2,
    METHOD_DINOV31,          // DINOv2 + PaKA's patch kernel alignment (dinov2_paka.h)
    METHOD_KIND_COUNT,
} MethodKind;

// "simclr", "byol", "dino", "vicreg", "barlowtwins", "distillation"
// (also "distillationv3"), "distillationv1", "distillationv2", "dinov2", "dinov31".
int method_kind_parse(const char *name, MethodKind *kind, ErrorMessage *err);
const char *method_kind_name(MethodKind kind);

// Optimisation defaults of a method (LightlyTrain's where it has the method,
// otherwise the paper's); the lr is scaled by batch / reference_batch, or
// by its square root.
typedef struct MethodDefaults {
    OptimizerKind optimizer;  // what --optim auto picks
    double base_lr;
    int reference_batch;
    int sqrt_lr_scaling;  // 1: lr x sqrt(batch / reference), LightlyTrain's lr_scale_method "sqrt"
    double weight_decay;
    float grad_clip;  // max global gradient norm; 0: no clipping
    // 1: the method sets its own clipping (LightlyTrain's dino, dinov2 and
    // distillation override configure_gradient_clipping), so Lightning's
    // gradient_clip_val (--gradient-clip-val) does not change it.
    int grad_clip_fixed;
    // The method's own defaults for one other --optim (a method-specific
    // *Args class of LightlyTrain), when other_optimizer != optimizer; any
    // other optimizer gets LightlyTrain's generic defaults.
    OptimizerKind other_optimizer;
    double other_lr, other_weight_decay;
    // DINOv2's schedules (0: the generic ones): warmup_steps (at most total
    // - 1) instead of LightlyTrain's epoch rule; the cosine ends at min_lr
    // instead of 0.001 x lr; weight decay cosine from weight_decay to
    // weight_decay_end over the run.
    long warmup_steps;
    double min_lr;
    int weight_decay_schedule;
    double weight_decay_end;
} MethodDefaults;

// The defaults for a student of the given kind (distillation's weight
// decay depends on it, as LightlyTrain's "auto").
MethodDefaults method_defaults(MethodKind kind, BackboneKind student);
// The factor the base lr is multiplied by at this global batch.
double method_lr_scale(const MethodDefaults *defaults, double global_batch);
// --epochs auto, LightlyTrain's get_epochs: its methods' default_epochs,
// 100, except DINOv2's (and so DINOv31's), which is default_steps 125,000
// turned into epochs at the global batch (before any reduction to the
// dataset): ceil(125000 x batch / images), at most METHOD_MAX_EPOCHS (the
// most --epochs takes; only datasets of a few images reach it).
enum { METHOD_MAX_EPOCHS = 1000000 };
long method_default_epochs(MethodKind kind, size_t images, int global_batch);
// The methods LightlyTrain sets by steps: their default_steps (125,000), else 0.
long method_default_steps(MethodKind kind);
// The method's views at image_size (global views; DINO's locals stay 96 px).
void method_default_views(MethodKind kind, int image_size, ViewSet *views);

typedef struct MethodSetup {
    Backend *backend;
    BackboneSpec backbone;  // the student's architecture
    int batch;              // images per step on this device
    size_t dataset_size;    // DINO's output dimension and temperatures scale with it
    long total_steps;       // schedules (EMA momentum, teacher temperature)
    uint64_t seed;
    const char *initial_weights;    // --checkpoint: backbone weights, or NULL
    // The weights that also set what --model leaves open (a YOLO Detect
    // head's classes: method_yolo_head_from): --checkpoint, or the
    // run's last.ckpt on --resume; NULL: --model's defaults.
    const char *shape_weights;
    const char *const *args;        // --method-arg "key=value" entries
    int arg_count;
    // Data parallel: the ranks (NULL: one process). With several ranks,
    // losses that need the whole batch (SimCLR's negatives, DINO's centre)
    // communicate, and with sync_batchnorm every training-mode BatchNorm
    // uses the statistics of all ranks.
    Communicator *comm;
    int sync_batchnorm;
    // LightlyTrain's embed_dim (--embed-dim): > 0 puts an embedding head of
    // that width between the backbone and the method's heads
    // (ssl_methods/embed_head.h); 0: none. Refused for the methods without
    // one (embed_head_check).
    int embed_dim;
} MethodSetup;

#define METHOD_MAX_GROUPS 6
#define METHOD_MAX_SCALARS 5
#define METHOD_GROUP_NAME 32

// The layout of Method.record (floats of backend memory).
enum {
    METHOD_RECORD_LOSS,     // the loss of the last step (micro-batch)
    METHOD_RECORD_SCALARS,  // then the logged values, scalar_tags[i] at + i
    METHOD_RECORD_FLOATS = METHOD_RECORD_SCALARS + METHOD_MAX_SCALARS,
};

// A table of trainable parameters with its own optimizer.
typedef struct MethodGroup {
    char name[METHOD_GROUP_NAME];  // "backbone", "projection_head", ...
    ParameterSet *params;
    ParameterSet *buffers;         // BatchNorm running statistics or NULL
    int64_t *num_batches_tracked;  // or NULL
    long frozen_steps;             // not updated during steps [0, frozen_steps)
    // How the group is held during its frozen steps. 0: its optimizer is
    // skipped and its gradients are left out of clipping and of the
    // gradient average (lightly's DINO cancels the last layer's gradients).
    // 1: it steps at lr 0, so the parameters stay while AdamW's moments
    // and SGD's momentum follow the gradients, which count in the clipping
    // norm (LightlyTrain's DINOv2 sets the group's lr to 0).
    int frozen_at_zero_lr;
    // Per parameter (params->count), or NULL: lr multipliers (layer-wise
    // decay; NULL: all 1) and weight decay on or off (NULL: the optimizer's
    // kind rule). Owned by the method; method_group_configure hands them
    // to the group's optimizer.
    const float *lr_scales;
    const unsigned char *weight_decays;
} MethodGroup;

// The smallest view side in pixels (train's --image-size, --local-image-size).
#define METHOD_MIN_VIEW_SIZE 16

typedef struct Method Method;

typedef struct MethodOps {
    // Forward, loss and backward on the uploaded views of `batch` images;
    // parameter gradients +=; the loss and this step's logged values into
    // the record (nothing read back). A step that runs backward through a
    // parameter set more than once holds that set's progress reports in
    // every pass but the last (parameter_set_hold_progress, nn/parameters.h).
    int (*step)(Method *method, long step, int batch, ErrorMessage *err);
    // After the optimizer step `step`: EMA teacher, DINO centre. May be NULL.
    void (*after_update)(Method *method, long step);
    // State that is not a group (teacher, centre). May be NULL.
    int (*save)(Method *method, CheckpointWriter *writer, ErrorMessage *err);
    int (*load)(Method *method, const Checkpoint *checkpoint, ErrorMessage *err);
    // The teacher backbone, or NULL when the method has none.
    Backbone *(*teacher)(Method *method);
    void (*destroy)(Method *method);  // frees what the method added
} MethodOps;

struct Method {
    MethodKind kind;
    const MethodOps *ops;
    Backend *backend;
    MethodDefaults defaults;
    ViewSet views;
    int max_batch;
    Backbone backbone; // the student: trained, exported as "backbone"
    // The student's embedding head (--embed-dim), or off; the method's heads
    // read embed.dim wide rows (embed_head.h). Made by the method's create.
    EmbedHead embed;
    // slot 0: global views (global_views * max_batch at global_size);
    // slot 1: local views when there are any
    int global_views, local_views;
    int global_size, local_size;  // at least METHOD_MIN_VIEW_SIZE
    Act *global_input;     // (global_views * max_batch, global_size, global_size, 3)
    uint64_t batch_index;  // Batch.index of the uploaded views: keys per-batch draws
                           // (mixup) and updates (distillation's queue)
    Act *local_input;      // (local_views * max_batch, local_size, local_size, 3) or NULL
    // The last teacher_views global views are for a teacher only (ViewSet):
    // the student's slot 0 holds (global_views - teacher_views) * max_batch.
    int teacher_views;
    // Host: where each view of the uploaded batch came from (views.count x
    // max_batch, view after view; Batch.geometry), kept by
    // method_normalize_views when a method asks for it (sets it non-NULL).
    ViewGeometry *geometry;
    uint8_t *staging;      // backend memory for method_upload_views (made on first use)
    int adapted_input_layers;  // initial weights' first layers adapted from 3 channels
    int group_count;
    MethodGroup groups[METHOD_MAX_GROUPS];
    // Values to log, e.g. "schedule/momentum": their tags; the values of the
    // last step are in the record.
    int scalar_count;
    const char *scalar_tags[METHOD_MAX_SCALARS];
    float *record;             // backend memory (METHOD_RECORD_FLOATS), see the top
    const float *loss_scale;   // one float of backend memory, or NULL (1)
    // "teacher_backbone" when the exported backbone is the teacher (DINO),
    // else "backbone".
    const char *export_part;
    Communicator *comm;             // MethodSetup.comm
    // Every step of a batch size must queue the same shapes: its steps are
    // captured as CUDA graphs (set by the trainer, train_graphs_decide).
    int fixed_shapes;
    BatchNormSync *batchnorm_sync;  // set when BatchNorm is synchronised; attach it to
                                    // every model and head the method adds
    void *state;  // the method's own
};

// Builds the method for the given views (method_default_views plus the
// user's overrides): backbone with slots for the views, heads, teacher,
// loss, and loads setup->initial_weights into the backbone (and teacher).
int method_create(Method *method, MethodKind kind, const MethodSetup *setup,
                  const ViewSet *views, ErrorMessage *err);
void method_free(Method *method);

// Normalises the batch's uint8 views (ImageNet mean/std) into global_input
// and local_input: method_normalize_views when the views are in backend
// memory (queued on the device; the trainer's batches, train/batch_feed.h),
// method_upload_views when they are in host memory (uploaded first, with
// the host waiting: tests and one-off calls).
int method_normalize_views(Method *method, const Batch *batch, ErrorMessage *err);
int method_upload_views(Method *method, const Batch *batch, ErrorMessage *err);

// The record's loss (one float of backend memory), where the step's loss goes.
float *method_loss(Method *method);
// The record's slot of logged value `index` (backend memory).
float *method_scalar(Method *method, int index);
// Sets logged value `index` to a host value (a schedule); no read back.
void method_set_scalar(Method *method, int index, float value);
// The seed of the backward pass: gradient (n floats of backend memory, the
// loss's gradient w.r.t. an output) *= *loss_scale, when there is one.
void method_scale_loss_gradient(Method *method, size_t n, float *gradient);

// Adds a group (used by the methods' create functions).
int method_add_group(Method *method, const char *name, ParameterSet *params,
                     ParameterSet *buffers, int64_t *num_batches_tracked, long frozen_steps,
                     ErrorMessage *err);

// Whether the group takes part in step (its gradients averaged over ranks
// and measured for clipping, its optimizer stepped): unless it is frozen
// at step and not frozen_at_zero_lr.
int method_group_active(const MethodGroup *group, long step);
// The groups updated at step, a bit each (group g: bit g), e.g. to tell
// steps that queue the same work apart (CUDA graphs of the steps).
uint64_t method_active_groups(const Method *method, long step);
// What the scheduled lr is multiplied by for the group at step: 0 while it
// is frozen, else 1.
float method_group_lr_factor(const MethodGroup *group, long step);
// Sets the group's per-parameter options on its optimizer (created for
// group->params); again after every optimizer_create, resume included.
int method_group_configure(const MethodGroup *group, Optimizer *optimizer, ErrorMessage *err);

// ---- --method-arg ---------------------------------------------------------------------
// Every method declares its arguments and their ranges in a table
// (method_arg_specs); method_create checks the user's entries against it
// before building anything: an unknown key, a value that is not of the
// argument's kind (numbers: decimal only, as the options) or outside its
// range fails with one line naming the argument and its range (exit 2 in
// train). docs/training.md lists the same ranges.

typedef enum MethodArgKind {
    METHOD_ARG_NUMBER,   // a finite decimal number in [low, high] ((low, high] with low_open)
    METHOD_ARG_INTEGER,  // an integer in low..high, or the word in `words` ("auto")
    METHOD_ARG_BOOL,     // true / false (also 1 / 0, as Python's pydantic reads them)
    METHOD_ARG_CHOICE,   // one of `words`, separated by '|'
    METHOD_ARG_TEXT,     // any non-empty text (a path, a --model name): `words` says what
} MethodArgKind;

typedef struct MethodArgSpec {
    const char *key;
    MethodArgKind kind;
    double low, high;
    int low_open;
    const char *words;
} MethodArgSpec;

// The ranges the methods share.
#define METHOD_MAX_DIM (1 << 20)
#define METHOD_ARG_DIM(key) {key, METHOD_ARG_INTEGER, 1, METHOD_MAX_DIM, 0, NULL}
#define METHOD_ARG_TEMPERATURE(key) {key, METHOD_ARG_NUMBER, 1e-3, 100, 0, NULL}
#define METHOD_ARG_FRACTION(key) {key, METHOD_ARG_NUMBER, 0, 1, 0, NULL}  // momenta, probabilities
#define METHOD_ARG_WEIGHT(key) {key, METHOD_ARG_NUMBER, 0, 1e6, 0, NULL}  // loss weights
#define METHOD_ARG_STEPS(key) {key, METHOD_ARG_INTEGER, 0, 1e9, 0, NULL}
#define METHOD_ARG_FLAG(key) {key, METHOD_ARG_BOOL, 0, 0, 0, NULL}
#define METHOD_ARG_END {NULL, METHOD_ARG_TEXT, 0, 0, 0, NULL}

// The table of a method (ended by a NULL key).
const MethodArgSpec *method_arg_specs(MethodKind kind);
// Checks every --method-arg entry of setup against specs (see above).
int method_args_check(const MethodSetup *setup, const MethodArgSpec *specs, ErrorMessage *err);
// "a number in [0.001, 100]", "an integer in 1..1048576", "true or false",
// "sqrt or linear", ...: what spec accepts, as the messages and docs say it.
void method_arg_range_text(const MethodArgSpec *spec, char *out, size_t size);

// Lookups of checked entries: the value of key (fallback when absent).
int method_arg_double(const MethodSetup *setup, const char *key, double fallback, double *value,
                      ErrorMessage *err);
int method_arg_string(const MethodSetup *setup, const char *key, const char **value);
int method_arg_bool(const MethodSetup *setup, const char *key, int fallback, int *value,
                    ErrorMessage *err);

// Loads backbone weights from a .ckpt (its default export part) or a
// backbone .safetensors (torchvision / timm / DINOv2 / transformers) into model.
// A 3-channel first layer is adapted to the model's channels by timm's rule
// (nn/input_adapt.h); *adapted: how many tensors were (0: none).
int method_load_backbone_weights(Backbone *model, const char *path, int *adapted,
                                 ErrorMessage *err);
// A YOLO student takes the Detect head of its initial weights at path: its
// classes and class-stack width (nn/yolo.h: yolo_head_from_weights; kept
// when the file has none), so that a user's fine-tuned checkpoint loads and
// its export hands the same head back. Errors name the path.
int method_yolo_head_from(YoloConfig *config, const char *path, ErrorMessage *err);
// target parameters = momentum * target + (1 - momentum) * source (lightly's
// update_momentum: parameters only, buffers are the teacher's own).
void method_ema_update(Backend *backend, ParameterSet *target, const ParameterSet *source,
                       float momentum);
// Copies every parameter and buffer value of source into target (same structure).
void method_copy_parameters(Backend *backend, ParameterSet *target, const ParameterSet *source);

// The argument tables of each method (in its file).
extern const MethodArgSpec simclr_arg_specs[], byol_arg_specs[], dino_arg_specs[],
    vicreg_arg_specs[], barlow_twins_arg_specs[], distillation_arg_specs[],
    distillation_v1_arg_specs[], distillation_v2_arg_specs[], dinov2_arg_specs[],
    dinov31_arg_specs[];

// The create functions of each method (one file each).
int simclr_create(Method *method, const MethodSetup *setup, ErrorMessage *err);
int byol_create(Method *method, const MethodSetup *setup, ErrorMessage *err);
int dino_create(Method *method, const MethodSetup *setup, ErrorMessage *err);
int vicreg_create(Method *method, const MethodSetup *setup, ErrorMessage *err);
int barlow_twins_create(Method *method, const MethodSetup *setup, ErrorMessage *err);
int distillation_create(Method *method, const MethodSetup *setup, ErrorMessage *err);
int distillation_v1_create(Method *method, const MethodSetup *setup, ErrorMessage *err);
int distillation_v2_create(Method *method, const MethodSetup *setup, ErrorMessage *err);
int dinov2_create(Method *method, const MethodSetup *setup, ErrorMessage *err);  // and dinov31

#endif
