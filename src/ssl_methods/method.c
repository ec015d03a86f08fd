// What every SSL method shares: names and defaults, the backbone and its
// view inputs, parameter groups, initial weights and
// the EMA teacher update. The methods themselves are one file each.
#include "ssl_methods/method.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/batchnorm_sync.h"
#include "nn/input_adapt.h"
#include "nn/state_dict_backbone.h"
#include "nn/weights.h"
#include "weights/resolve.h"
#include "weights/weight_file.h"

static const char *const method_names[METHOD_KIND_COUNT] = {
    [METHOD_SIMCLR] = "simclr",   [METHOD_BYOL] = "byol",
    [METHOD_DINO] = "dino",       [METHOD_VICREG] = "vicreg",
    [METHOD_BARLOW_TWINS] = "barlowtwins", [METHOD_DISTILLATION] = "distillation",
    [METHOD_DISTILLATION_V1] = "distillationv1", [METHOD_DISTILLATION_V2] = "distillationv2",
    [METHOD_DINOV2] = "dinov2",   [METHOD_DINOV31] = "dinov31",
};

int method_kind_parse(const char *name, MethodKind *kind, ErrorMessage *err) {
    if (strcmp(name, "distillationv3") == 0) {  // LightlyTrain's other name for it
        *kind = METHOD_DISTILLATION;
        return 0;
    }
    for (int i = 0; i < METHOD_KIND_COUNT; i++) {
        if (strcmp(name, method_names[i]) == 0) {
            *kind = (MethodKind)i;
            return 0;
        }
    }
    return error_set(err,
                     "unknown method '%s' (simclr, byol, dino, vicreg, barlowtwins, "
                     "distillation, distillationv1, distillationv2, dinov2, dinov31)",
                     name);
}

const char *method_kind_name(MethodKind kind) {
    return kind >= 0 && kind < METHOD_KIND_COUNT ? method_names[kind] : "?";
}

// A method with one tuned optimizer, lr x batch / 256 (the others' generic defaults).
static MethodDefaults linear_defaults(OptimizerKind optimizer, double lr, double weight_decay,
                                      float grad_clip) {
    return (MethodDefaults){.optimizer = optimizer, .base_lr = lr, .reference_batch = 256,
                            .weight_decay = weight_decay, .grad_clip = grad_clip,
                            .other_optimizer = optimizer};
}

// LightlyTrain's distillation methods: lr x sqrt(batch / 1536), gradient
// clipping at norm 1.0, and the optimizer "auto" picks with a second tuned one.
static MethodDefaults distillation_defaults(OptimizerKind optimizer, double lr, double wd,
                                            OptimizerKind other, double other_lr,
                                            double other_wd) {
    return (MethodDefaults){.optimizer = optimizer, .base_lr = lr, .reference_batch = 1536,
                            .sqrt_lr_scaling = 1, .weight_decay = wd, .grad_clip = 1.0f,
                            .grad_clip_fixed = 1,
                            .other_optimizer = other, .other_lr = other_lr,
                            .other_weight_decay = other_wd};
}

MethodDefaults method_defaults(MethodKind kind, BackboneKind student) {
    switch (kind) {
    case METHOD_SIMCLR:  // LightlyTrain: SGD lr 0.3 x batch/256, wd 1e-4
        return linear_defaults(OPTIMIZER_SGD, 0.3, 1e-4, 0.0f);
    case METHOD_DINO: {  // LightlyTrain: SGD lr 0.03 x batch/256, wd 1e-4, clip 3
        MethodDefaults dino = linear_defaults(OPTIMIZER_SGD, 0.03, 1e-4, 3.0f);
        dino.grad_clip_fixed = 1;
        return dino;
    }
    case METHOD_DINOV2:   // LightlyTrain: AdamW
    case METHOD_DINOV31:  // (DINOv31Args inherits DINOv2Args') lr 0.004 x sqrt(batch/1024), wd 0.04 -> 0.4,
                         // clip 3, warmup 12500 steps, cosine to lr 1e-6
        return (MethodDefaults){.optimizer = OPTIMIZER_ADAMW, .base_lr = 0.004,
                                .reference_batch = 1024, .weight_decay = 0.04,
                                .grad_clip = 3.0f, .grad_clip_fixed = 1,
                                .sqrt_lr_scaling = 1, .warmup_steps = 12500,
                                .min_lr = 1e-6, .weight_decay_schedule = 1,
                                .weight_decay_end = 0.4, .other_optimizer = OPTIMIZER_ADAMW};
    case METHOD_BYOL:  // BYOL paper: LARS lr 0.2 x batch/256, wd 1.5e-6
        return linear_defaults(OPTIMIZER_LARS, 0.2, 1.5e-6, 0.0f);
    case METHOD_VICREG:  // VICReg paper: LARS lr 0.2 x batch/256, wd 1e-6
        return linear_defaults(OPTIMIZER_LARS, 0.2, 1e-6, 0.0f);
    case METHOD_BARLOW_TWINS:  // Barlow Twins paper: LARS lr 0.2 x batch/256, wd 1.5e-6
        return linear_defaults(OPTIMIZER_LARS, 0.2, 1.5e-6, 0.0f);
    case METHOD_DISTILLATION_V1:  // Distillation: auto LARS 1.8, wd 1e-6; AdamW 5e-4, wd 0
        return distillation_defaults(OPTIMIZER_LARS, 1.8, 1e-6, OPTIMIZER_ADAMW, 5e-4, 0.0);
    case METHOD_DISTILLATION_V2:  // DistillationV2: auto LARS 9.0, wd 1e-6
        return distillation_defaults(OPTIMIZER_LARS, 9.0, 1e-6, OPTIMIZER_LARS, 9.0, 1e-6);
    case METHOD_DISTILLATION:  // DistillationV3's LARS (lr 1.8, wd 1e-6) and AdamW (5e-4)
    default:
        // Issue 11: LARS for a convolutional student, AdamW (wd 0.04) for a
        // transformer. LightlyTrain 0.17's "auto" is AdamW for both, with wd
        // 1e-6 for a convolutional student: `--optim adamw` gives exactly that.
        if (student != BACKBONE_VIT)  // ResNets and YOLOs: convolutional
            return distillation_defaults(OPTIMIZER_LARS, 1.8, 1e-6, OPTIMIZER_ADAMW, 5e-4, 1e-6);
        return distillation_defaults(OPTIMIZER_ADAMW, 5e-4, 0.04, OPTIMIZER_LARS, 1.8, 1e-6);
    }
}

double method_lr_scale(const MethodDefaults *defaults, double global_batch) {
    const double ratio = global_batch / defaults->reference_batch;
    return defaults->sqrt_lr_scaling ? sqrt(ratio) : ratio;
}

long method_default_steps(MethodKind kind) {
    return kind == METHOD_DINOV2 || kind == METHOD_DINOV31 ? 125000 : 0;
}

long method_default_epochs(MethodKind kind, size_t images, int global_batch) {
    const long steps = method_default_steps(kind);
    if (steps == 0 || images == 0) return 100;
    const double epochs = ceil((double)steps * (double)global_batch / (double)images);
    return epochs < METHOD_MAX_EPOCHS ? (long)epochs : METHOD_MAX_EPOCHS;
}

// BYOL's asymmetric pair (lightly's BYOLTransform): blur always on view 0,
// rarely on view 1; solarize only on view 1; DINO-strength colour jitter.
// VICReg and Barlow Twins use the same augmentations as BYOL in their papers.
static void views_byol(ViewSet *views, int image_size) {
    view_set_simclr(views, image_size);
    for (int v = 0; v < 2; v++) {
        ViewTransform *t = &views->views[v];
        t->brightness = 0.4f;
        t->contrast = 0.4f;
        t->saturation = 0.2f;
        t->hue = 0.1f;
    }
    views->views[0].blur_p = 1.0f;
    views->views[1].blur_p = 0.1f;
    views->views[1].solarize_p = 0.2f;
}

// LightlyTrain's DistillationTransform (v1, v2, v3 alike): one view, crop
// scale (0.14, 1), colour jitter p 0.8 at strength 0.5 (brightness and
// contrast 0.4, saturation 0.2, hue 0.1), greyscale 0.2. Its Gaussian blur
// (p 1, sigma in (0, 0.1)) is left out: at sigma <= 0.1 a neighbour's
// weight is below e^-50, so it changes no pixel.
static void views_distillation(ViewSet *views, int image_size) {
    view_set_simclr(views, image_size);
    views->count = views->global_count = 1;
    ViewTransform *t = &views->views[0];
    t->scale_min = 0.14f;
    t->brightness = 0.4f;
    t->contrast = 0.4f;
    t->saturation = 0.2f;
    t->hue = 0.1f;
    t->blur_p = 0.0f;
}

void method_default_views(MethodKind kind, int image_size, ViewSet *views) {
    switch (kind) {
    case METHOD_DINO: view_set_dino(views, image_size, 96, 6); break;
    case METHOD_DISTILLATION:
    case METHOD_DISTILLATION_V1:
    case METHOD_DISTILLATION_V2: views_distillation(views, image_size); break;
    case METHOD_DINOV2: view_set_dinov2(views, image_size); break;
    case METHOD_DINOV31: view_set_dinov31(views, image_size, 98, 8, 8, NULL); break;
    case METHOD_BYOL:
    case METHOD_VICREG:
    case METHOD_BARLOW_TWINS: views_byol(views, image_size); break;
    default: view_set_simclr(views, image_size); break;
    }
}

static int method_check_views(const ViewSet *views, ErrorMessage *err) {
    if (views->count < 1 || views->global_count < 1 || views->global_count > views->count)
        return error_set(err, "the method needs at least one view");
    if (view_set_validate(views, err)) return -1;
    for (int v = 1; v < views->count; v++) {
        const int reference = v < views->global_count ? 0 : views->global_count;
        if (views->views[v].size != views->views[reference].size)
            return error_set(err, "view %d is %d px but view %d is %d px: views of one kind must "
                                  "share a size", v, views->views[v].size, reference,
                             views->views[reference].size);
    }
    return 0;
}

// A ViT needs every view size to be a multiple of its patch size.
static int method_check_sizes(const BackboneSpec *spec, const Method *method, ErrorMessage *err) {
    const int step = backbone_spec_size_step(spec);
    const int sizes[2] = {method->global_size, method->local_size};
    const char *const kinds[2] = {"global", "local"};
    char name[BACKBONE_MAX_NAME];
    backbone_spec_name(spec, name, sizeof name);
    // the nearest multiple, or the smallest one allowed
    const int smallest = (METHOD_MIN_VIEW_SIZE + step - 1) / step * step;
    for (int k = 0; k < 2; k++)
        if (sizes[k] && sizes[k] % step != 0) {
            const int nearest = (sizes[k] + step / 2) / step * step;
            return error_set(err, "%s views of %d px: %s needs a multiple of its patch size %d "
                                  "(e.g. %d px)", kinds[k], sizes[k], name, step,
                             nearest < smallest ? smallest : nearest);
        }
    return 0;
}

static int (*const method_create_functions[METHOD_KIND_COUNT])(Method *, const MethodSetup *,
                                                               ErrorMessage *) = {
    [METHOD_SIMCLR] = simclr_create,         [METHOD_BYOL] = byol_create,
    [METHOD_DINO] = dino_create,             [METHOD_VICREG] = vicreg_create,
    [METHOD_BARLOW_TWINS] = barlow_twins_create, [METHOD_DISTILLATION] = distillation_create,
    [METHOD_DISTILLATION_V1] = distillation_v1_create,
    [METHOD_DISTILLATION_V2] = distillation_v2_create,
    [METHOD_DINOV2] = dinov2_create,        [METHOD_DINOV31] = dinov2_create,
};

int method_create(Method *method, MethodKind kind, const MethodSetup *setup,
                  const ViewSet *views, ErrorMessage *err) {
    memset(method, 0, sizeof *method);
    if (kind < 0 || kind >= METHOD_KIND_COUNT) return error_set(err, "bad method kind");
    if (method_args_check(setup, method_arg_specs(kind), err))
        return error_prefix(err, "%s", method_kind_name(kind));
    if (method_check_views(views, err)) return -1;
    if (setup->batch < 2) return error_set(err, "batch size %d: SSL methods need at least 2 "
                                                "images per step", setup->batch);
    if (embed_head_check(kind, setup->embed_dim, err)) return -1;
    Backend *backend = setup->backend;
    method->kind = kind;
    method->backend = backend;
    method->defaults = method_defaults(kind, setup->backbone.kind);
    method->views = *views;
    method->max_batch = setup->batch;
    method->export_part = "backbone";
    method->global_views = views->global_count;
    method->local_views = views->count - views->global_count;
    method->global_size = views->views[0].size;
    method->local_size = method->local_views ? views->views[views->global_count].size : 0;
    method->teacher_views = views->teacher_views;

    const BackboneInput inputs[2] = {
        {(method->global_views - method->teacher_views) * setup->batch, method->global_size},
        {method->local_views * setup->batch, method->local_size},
    };
    BackboneSpec spec = setup->backbone;
    if (spec.kind == BACKBONE_YOLO && setup->shape_weights &&
        method_yolo_head_from(&spec.yolo, setup->shape_weights, err))
        return error_prefix(err, setup->initial_weights ? "--checkpoint" : "--resume");
    if (method_check_sizes(&spec, method, err)) return -1;
    if (backbone_create(&method->backbone, backend, &spec, inputs,
                        method->local_views ? 2 : 1, setup->seed, err))
        return error_prefix(err, "backbone"), -1;
    method->embed.dim = method->backbone.feature_dim;  // no embedding head until one is made
    if (setup->initial_weights &&
        method_load_backbone_weights(&method->backbone, setup->initial_weights,
                                     &method->adapted_input_layers, err)) {
        error_prefix(err, "--checkpoint");  // as embed and export name it
        goto fail;
    }
    method->comm = setup->comm;
    if (setup->sync_batchnorm && comm_world_size(setup->comm) > 1) {
        method->batchnorm_sync = batchnorm_sync_create(backend, setup->comm, err);
        if (!method->batchnorm_sync ||
            backbone_attach_batchnorm_sync(&method->backbone, method->batchnorm_sync, err))
            goto fail;
    }
    const size_t channels = (size_t)view_set_channels_out(views);
    const size_t global_elements = (size_t)method->global_views * setup->batch *
                                   method->global_size * method->global_size * channels;
    const size_t local_elements = (size_t)inputs[1].batch * method->local_size *
                                  method->local_size * channels;
    method->global_input = backend->op.alloc(backend, act_bytes(backend, global_elements));
    if (local_elements)
        method->local_input = backend->op.alloc(backend, act_bytes(backend, local_elements));
    method->record = backend->op.alloc(backend, METHOD_RECORD_FLOATS * sizeof(float));
    if (!method->global_input || (local_elements && !method->local_input) || !method->record) {
        error_set(err, "out of memory for the input views (batch %d, %d px)", setup->batch,
                  method->global_size);
        goto fail;
    }
    backend->op.fill(backend, method->record, 0.0f, METHOD_RECORD_FLOATS);
    if (method_add_group(method, "backbone", method->backbone.params, method->backbone.buffers,
                         method->backbone.num_batches_tracked, 0, err))
        goto fail;
    // The embedding head sees every student row: pooled features of both
    // slots, or every position of the map (distillation v2).
    int embed_rows = inputs[0].batch + inputs[1].batch;
    if (kind == METHOD_DISTILLATION_V2) {
        int height, width;
        backbone_feature_map_size(&method->backbone, 0, &height, &width);
        embed_rows = inputs[0].batch * height * width;
    }
    if (method_embed_create(method, setup->embed_dim, embed_rows, setup->seed, err)) goto fail;
    if (method_create_functions[kind](method, setup, err)) {
        error_prefix(err, "%s", method_kind_name(kind));
        goto fail;
    }
    return 0;
fail:
    method_free(method);
    return -1;
}

void method_free(Method *method) {
    if (method->ops && method->ops->destroy) method->ops->destroy(method);
    embed_head_free(&method->embed);
    Backend *backend = method->backend;
    if (backend) {
        if (method->global_input) backend->op.free(backend, method->global_input);
        if (method->local_input) backend->op.free(backend, method->local_input);
        if (method->staging) backend->op.free(backend, method->staging);
        if (method->record) backend->op.free(backend, method->record);
    }
    free(method->geometry);
    backbone_free(&method->backbone);
    batchnorm_sync_free(method->batchnorm_sync);
    memset(method, 0, sizeof *method);
}

static int method_check_batch(const Method *method, const Batch *batch, ErrorMessage *err) {
    if (batch->float_pixels != method->views.float_pixels ||
        (batch->float_pixels && batch->channels != view_set_channels_out(&method->views)))
        return error_set(err, "batch of %s views, the method expects %s views of %d channel(s)",
                         batch->float_pixels ? "float" : "8-bit",
                         method->views.float_pixels ? "float" : "8-bit",
                         view_set_channels_out(&method->views));
    if (batch->view_count != method->views.count || batch->size > method->max_batch)
        return error_set(err, "batch has %d views of %d images, the method expects %d views of "
                              "at most %d", batch->view_count, batch->size, method->views.count,
                         method->max_batch);
    for (int v = 0; v < batch->view_count; v++) {
        const int size = v < method->global_views ? method->global_size : method->local_size;
        if (batch->view_size[v] != size)
            return error_set(err, "view %d is %d px, expected %d", v, batch->view_size[v], size);
    }
    return 0;
}

int method_normalize_views(Method *method, const Batch *batch, ErrorMessage *err) {
    if (method_check_batch(method, batch, err)) return -1;
    Backend *backend = method->backend;
    if (method->geometry) {
        if (!batch->geometry)
            return error_set(err, "%s needs where each view came from: a batch without it",
                             method_kind_name(method->kind));
        for (int v = 0; v < batch->view_count; v++)
            memcpy(method->geometry + (size_t)v * method->max_batch,
                   batch->geometry + (size_t)v * batch->size,
                   (size_t)batch->size * sizeof *method->geometry);
    }
    method->batch_index = batch->index;
    backbone_set_draw_key(&method->backbone, batch->index);
    const int channels = view_set_channels_out(&method->views);
    float mean[AUGMENT_MAX_CHANNELS], std[AUGMENT_MAX_CHANNELS];
    view_set_normalization(&method->views, mean, std);
    for (int v = 0; v < batch->view_count; v++) {
        const int global = v < method->global_views;
        const int size = global ? method->global_size : method->local_size;
        const size_t pixels = (size_t)batch->size * size * size;
        const int index = global ? v : v - method->global_views;
        Act *target = act_at(backend, global ? method->global_input : method->local_input,
                             (size_t)index * pixels * (size_t)channels);
        if (method->views.float_pixels)
            backend->op.normalize_f32(backend, pixels, channels, (const float *)batch->views[v],
                                      mean, std, target);
        else
            backend->op.normalize_u8(backend, pixels, batch->views[v], mean, std, target);
    }
    return 0;
}

// The staging buffer is made on the first call (the trainer never calls
// this: its batches arrive through train/batch_feed.h).
int method_upload_views(Method *method, const Batch *batch, ErrorMessage *err) {
    if (method_check_batch(method, batch, err)) return -1;
    Backend *backend = method->backend;
    if (!method->staging) {
        size_t sample_bytes = 0;
        for (int v = 0; v < method->views.count; v++)
            sample_bytes += (size_t)method->views.views[v].size * method->views.views[v].size *
                            view_set_pixel_bytes(&method->views);
        method->staging = backend->op.alloc(backend, (size_t)method->max_batch * sample_bytes);
        if (!method->staging)
            return error_set(err, "out of memory for the uploaded views (batch %d)",
                             method->max_batch);
    }
    Batch on_device = *batch;
    uint8_t *cursor = method->staging;
    for (int v = 0; v < batch->view_count; v++) {
        const size_t bytes = (size_t)batch->size * batch->view_size[v] * batch->view_size[v] *
                             view_set_pixel_bytes(&method->views);
        backend->op.upload(backend, cursor, batch->views[v], bytes);
        on_device.views[v] = cursor;
        cursor += bytes;
    }
    return method_normalize_views(method, &on_device, err);
}

int method_add_group(Method *method, const char *name, ParameterSet *params,
                     ParameterSet *buffers, int64_t *num_batches_tracked, long frozen_steps,
                     ErrorMessage *err) {
    if (method->group_count >= METHOD_MAX_GROUPS)
        return error_set(err, "too many parameter groups");
    MethodGroup *group = &method->groups[method->group_count++];
    memset(group, 0, sizeof *group);
    snprintf(group->name, sizeof group->name, "%s", name);
    group->params = params;
    group->buffers = buffers && buffers->count ? buffers : NULL;
    group->num_batches_tracked = group->buffers ? num_batches_tracked : NULL;
    group->frozen_steps = frozen_steps;
    return 0;
}

int method_group_active(const MethodGroup *group, long step) {
    return step >= group->frozen_steps || group->frozen_at_zero_lr;
}

uint64_t method_active_groups(const Method *method, long step) {
    uint64_t active = 0;
    for (int g = 0; g < method->group_count; g++)
        if (method_group_active(&method->groups[g], step)) active |= (uint64_t)1 << g;
    return active;
}

float method_group_lr_factor(const MethodGroup *group, long step) {
    return step < group->frozen_steps ? 0.0f : 1.0f;
}

int method_group_configure(const MethodGroup *group, Optimizer *optimizer, ErrorMessage *err) {
    for (int i = 0; i < group->params->count; i++) {
        if (group->lr_scales && optimizer_set_lr_scale(optimizer, i, group->lr_scales[i], err))
            return error_prefix(err, "group %s", group->name);
        if (group->weight_decays &&
            optimizer_set_weight_decay(optimizer, i, group->weight_decays[i], err))
            return error_prefix(err, "group %s", group->name);
    }
    return 0;
}

// 3-channel first-layer weights of the file adapted to the model's channels
// (nn/input_adapt.h); *adapted: how many tensors were.
static int adapt_input_layer(const Backbone *model, SafeTensors *file, int *adapted,
                             ErrorMessage *err) {
    const Parameter *first = backbone_input_layer(model);
    *adapted = 0;
    if (!first || first->rank != 4) return 0;
    const int *shape = first->torch_shape;
    return input_adapt_file(file, shape[0], shape[2], shape[3], shape[1], adapted, err);
}

// The model loading initial weights, and where to count adapted tensors.
typedef struct InitialWeights {
    Backbone *model;
    int *adapted;
} InitialWeights;

// A state dict's backbone into the model (a StateDictBackboneLoader).
static int load_state_dict(void *context, SafeTensors *file, const char *prefix, int anchored,
                           ErrorMessage *err) {
    (void)anchored;  // no detection here: the load names what does not match
    InitialWeights *into = context;
    if (adapt_input_layer(into->model, file, into->adapted, err)) return -1;
    return into->model->ops->load(into->model, file, prefix, err);
}

// Our checkpoint's backbone to start from (its export part's tensors under
// prefix) to a loader.
typedef int (*CheckpointBackboneLoader)(void *context, Checkpoint *checkpoint, const char *prefix,
                                        ErrorMessage *err);

// Hands the initial weights at path (a weights name is downloaded first,
// weights/resolve.h) to load_dict, with its backbone's prefix, when
// they are a state dict of any kind, or to load_checkpoint when they are
// our checkpoint. Errors name the path.
static int visit_initial_weights(const char *path, StateDictBackboneLoader load_dict,
                                 CheckpointBackboneLoader load_checkpoint, void *context,
                                 ErrorMessage *err) {
    char local_path[4096];
    if (weights_local_path(path, local_path, sizeof local_path, err)) return -1;
    path = local_path;
    int is_checkpoint;
    WeightFileKind kind;
    if (checkpoint_sniff(path, &is_checkpoint, &kind, err)) return -1;  // names the path
    if (!is_checkpoint) {
        char prefix[SAFETENSORS_MAX_NAME];  // "module.", "backbone.", ...
        return weight_file_load_backbone(path, kind, load_dict, context, prefix, sizeof prefix,
                                         err);  // names the path
    }
    Checkpoint checkpoint;
    if (checkpoint_read(path, &checkpoint, err)) return -1;
    const char *part = checkpoint_meta(&checkpoint, "export_part");
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s.", part ? part : "backbone");
    const int status = load_checkpoint(context, &checkpoint, prefix, err);
    checkpoint_free(&checkpoint);
    if (status) error_prefix(err, "%s", path);
    return status ? -1 : 0;
}

// A CheckpointBackboneLoader of initial weights into the model.
static int load_checkpoint_backbone(void *context, Checkpoint *checkpoint, const char *prefix,
                                    ErrorMessage *err) {
    InitialWeights *into = context;
    Backbone *model = into->model;
    return adapt_input_layer(model, &checkpoint->tensors, into->adapted, err) ||
                   checkpoint_load_parameters(checkpoint, prefix, model->params, model->buffers,
                                              model->num_batches_tracked, err)
               ? -1
               : 0;
}

int method_load_backbone_weights(Backbone *model, const char *path, int *adapted,
                                 ErrorMessage *err) {
    InitialWeights into = {model, adapted};
    return visit_initial_weights(path, load_state_dict, load_checkpoint_backbone, &into, err);
}

// Loaders that read a YOLO Detect head's classes and width into a YoloConfig.
static int read_yolo_head(void *context, SafeTensors *file, const char *prefix, int anchored,
                          ErrorMessage *err) {
    (void)anchored, (void)err;
    yolo_head_from_weights(file, prefix, context);
    return 0;
}

static int read_checkpoint_yolo_head(void *context, Checkpoint *checkpoint, const char *prefix,
                                     ErrorMessage *err) {
    return read_yolo_head(context, &checkpoint->tensors, prefix, 1, err);
}

int method_yolo_head_from(YoloConfig *config, const char *path, ErrorMessage *err) {
    return visit_initial_weights(path, read_yolo_head, read_checkpoint_yolo_head, config, err);
}

float *method_loss(Method *method) { return method->record + METHOD_RECORD_LOSS; }

float *method_scalar(Method *method, int index) {
    return method->record + METHOD_RECORD_SCALARS + index;
}

void method_set_scalar(Method *method, int index, float value) {
    method->backend->op.fill(method->backend, method_scalar(method, index), value, 1);
}

// scale_rows with one row of n: every value times the one device float.
void method_scale_loss_gradient(Method *method, size_t n, float *gradient) {
    if (!method->loss_scale || n == 0) return;
    Backend *backend = method->backend;
    for (size_t done = 0; done < n; done += INT_MAX) {
        const size_t count = n - done < (size_t)INT_MAX ? n - done : (size_t)INT_MAX;
        backend->op.scale_rows(backend, 1, (int)count, gradient + done, method->loss_scale,
                               gradient + done);
    }
}

void method_ema_update(Backend *backend, ParameterSet *target, const ParameterSet *source,
                       float momentum) {
    backend->op.ema_update(backend, target->total, target->values, source->values, momentum);
}

void method_copy_parameters(Backend *backend, ParameterSet *target, const ParameterSet *source) {
    backend->op.copy(backend, target->values, source->values, source->total * sizeof(float));
    parameter_set_written(target);
}
