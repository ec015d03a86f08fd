// The distillation methods' teacher, mixup and student projection (see
// distillation_teacher.h).
#include "ssl_methods/distillation_teacher.h"

#include <stdlib.h>
#include <string.h>

#include "ssl_methods/distillation_loss.h"
#include "train/model_source.h"
#include "util/rng.h"

#define DISTILL_MIXUP_STREAM 0x4D495855u  // "MIXU": apart from the input pipeline's streams
#define DISTILL_NORMALIZE_EPS 1e-12f      // F.normalize's default

// ---- what every version shares -----------------------------------------------------------

static int scaling_args(Method *method, const MethodSetup *setup, ErrorMessage *err) {
    const char *scaling = NULL;  // sqrt or linear (checked: DISTILL_COMMON_ARGS)
    if (method_arg_string(setup, "lr_scale_method", &scaling))
        method->defaults.sqrt_lr_scaling = strcmp(scaling, "sqrt") == 0;
    double reference;
    if (method_arg_double(setup, "reference_batch_size", method->defaults.reference_batch,
                          &reference, err))
        return -1;
    method->defaults.reference_batch = (int)reference;
    return 0;
}

static const char no_teacher[] = "needs a teacher: --method-arg teacher=PATH (a backbone "
                                 ".safetensors, e.g. DINOv2 weights, or a lightly-train-c .ckpt)";

int distill_setup(Method *method, const MethodSetup *setup, DistillCommon *common,
                  ErrorMessage *err) {
    const char *path;
    if (!method_arg_string(setup, "teacher", &path)) return error_set(err, "%s", no_teacher);
    if (method->global_views != 1 || method->local_views != 0)
        return error_set(err, "needs exactly one view (%d global, %d local given)",
                         method->global_views, method->local_views);
    if (scaling_args(method, setup, err) ||
        distill_teacher_load(&common->teacher, method, setup, err))
        return -1;
    return distill_mixup_create(&common->mixup, method, setup->seed, err);
}

void distill_common_free(DistillCommon *common) {
    distill_teacher_free(&common->teacher);
    distill_mixup_free(&common->mixup);
    distill_queue_free(&common->queue);
}

Backbone *distill_method_teacher(Method *method) {
    return &((DistillCommon *)method->state)->teacher.backbone;
}

int distill_method_save_queue(Method *method, CheckpointWriter *writer, ErrorMessage *err) {
    return distill_queue_save(&((DistillCommon *)method->state)->queue, writer, err);
}

int distill_method_load_queue(Method *method, const Checkpoint *checkpoint, ErrorMessage *err) {
    return distill_queue_load(&((DistillCommon *)method->state)->queue, checkpoint, err);
}

// NULL for 0 bytes; -1 with a message when out of memory.
static int alloc_bytes(Backend *backend, size_t bytes, void **out, ErrorMessage *err) {
    *out = bytes ? backend->op.alloc(backend, bytes) : NULL;
    if (bytes && !*out) return error_set(err, "out of memory for %zu MB", bytes >> 20);
    return 0;
}

int distill_alloc_buffers(Backend *backend, float **const *targets, const size_t *sizes,
                          size_t count, ErrorMessage *err) {
    for (size_t i = 0; i < count; i++) {
        void *buffer;
        if (alloc_bytes(backend, sizes[i] * sizeof(float), &buffer, err)) return -1;
        *targets[i] = buffer;
    }
    return 0;
}

int distill_alloc_acts(Backend *backend, Act **const *targets, const size_t *sizes, size_t count,
                       ErrorMessage *err) {
    for (size_t i = 0; i < count; i++) {
        void *buffer;
        if (alloc_bytes(backend, act_bytes(backend, sizes[i]), &buffer, err)) return -1;
        *targets[i] = buffer;
    }
    return 0;
}

void distill_free_buffers(Backend *backend, void *const *buffers, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (buffers[i]) backend->op.free(backend, buffers[i]);
}

int distill_queue_size_arg(const MethodSetup *setup, int *size, ErrorMessage *err) {
    const char *text = "auto";
    method_arg_string(setup, "queue_size", &text);
    if (strcmp(text, "auto") == 0) {
        *size = distill_queue_size_for(setup->dataset_size);
        return 0;
    }
    const long value = strtol(text, NULL, 10);  // 1..2^24 (checked: DISTILL_QUEUE_SIZE_ARG)
    if ((size_t)value >= setup->dataset_size)
        return error_set(err, "--method-arg queue_size=%ld must be smaller than the dataset "
                              "(%zu images)", value, setup->dataset_size);
    *size = (int)value;
    return 0;
}

// ---- teacher ----------------------------------------------------------------------------

int distill_teacher_load(DistillTeacher *teacher, const Method *method,
                         const MethodSetup *setup, ErrorMessage *err) {
    memset(teacher, 0, sizeof *teacher);
    ModelSourceOptions options = {.part = "backbone", .frozen = 1};
    const char *path = NULL;
    if (!method_arg_string(setup, "teacher", &path)) return error_set(err, "%s", no_teacher);
    method_arg_string(setup, "teacher_part", &options.part);
    // A known name's architecture is taken by model_source itself.
    method_arg_string(setup, "teacher_arch", &options.arch);
    const BackboneInput input = {method->max_batch, method->global_size};
    if (model_source_load_backbone_with(path, &options, method->backend, &input, 1,
                                        &teacher->backbone, NULL, err))
        return error_prefix(err, "teacher");
    // The teacher reads the student's views: the same channels (3 for the
    // pretrained teachers; distillation refuses other views before this).
    const Parameter *first = backbone_input_layer(&teacher->backbone);
    const int channels = view_set_channels_out(&method->views);
    if (first && first->torch_shape[1] != channels)
        return error_set(err, "teacher %s takes %d input channel(s), the views have %d", path,
                         first->torch_shape[1], channels);
    // LightlyTrain's DINOv2/DINOv3 teachers pool their class token.
    if (teacher->backbone.spec.kind == BACKBONE_VIT)
        teacher->backbone.model.vit.config.pool = VIT_POOL_CLS;
    teacher->dim = teacher->backbone.feature_dim;
    backbone_feature_map_size(&teacher->backbone, 0, &teacher->grid_h, &teacher->grid_w);
    const size_t map = (size_t)method->max_batch * teacher->grid_h * teacher->grid_w;
    float **buffers[] = {&teacher->map_f32};
    const size_t sizes[] = {map * teacher->dim};
    return distill_alloc_buffers(method->backend, buffers, sizes, 1, err);
}

void distill_teacher_free(DistillTeacher *teacher) {
    if (teacher->map_f32) teacher->backbone.backend->op.free(teacher->backbone.backend,
                                                              teacher->map_f32);
    backbone_free(&teacher->backbone);
}

int distill_teacher_keep_blocks(DistillTeacher *teacher, int blocks, ErrorMessage *err) {
    if (teacher->backbone.spec.kind != BACKBONE_VIT || blocks < 2) return 0;
    if (vit_keep_block_outputs(&teacher->backbone.model.vit, blocks, err))
        return error_prefix(err, "teacher");
    return 0;
}

int distill_teacher_forward(DistillTeacher *teacher, int batch, const Act *input,
                            ErrorMessage *err) {
    if (backbone_forward(&teacher->backbone, 0, batch, input, 0, err))
        return error_prefix(err, "teacher");
    return 0;
}

const Act *distill_teacher_global(DistillTeacher *teacher) {
    return backbone_features(&teacher->backbone, 0);
}

const Act *distill_teacher_map(DistillTeacher *teacher) {
    int height, width;
    return backbone_feature_map(&teacher->backbone, 0, &height, &width);
}

void distill_teacher_normalized(DistillTeacher *teacher, int batch, float *global, float *local,
                                float *norms) {
    Backend *backend = teacher->backbone.backend;
    const int tokens = teacher->grid_h * teacher->grid_w;
    // map_f32 holds the fp32 copy of each in turn
    if (global) {
        backend->op.act_to_float(backend, (size_t)batch * teacher->dim,
                                 distill_teacher_global(teacher), teacher->map_f32);
        backend->op.l2_normalize_forward(backend, batch, teacher->dim, teacher->map_f32,
                                         DISTILL_NORMALIZE_EPS, global, norms);
    }
    if (local) {
        backend->op.act_to_float(backend, (size_t)batch * tokens * teacher->dim,
                                 distill_teacher_map(teacher), teacher->map_f32);
        backend->op.l2_normalize_forward(backend, batch * tokens, teacher->dim, teacher->map_f32,
                                         DISTILL_NORMALIZE_EPS, local, norms);
    }
}

int distill_teacher_has_stages(const DistillTeacher *teacher) {
    const Backbone *backbone = &teacher->backbone;
    return backbone->spec.kind == BACKBONE_CONVNEXT &&
           convnext_norm_features(&backbone->spec.convnext);
}

int distill_teacher_stage_width(const DistillTeacher *teacher, int stages) {
    const ConvnextConfig *c = &teacher->backbone.spec.convnext;
    int width = 0;
    for (int s = CONVNEXT_STAGES - stages; s < CONVNEXT_STAGES; s++) width += c->dims[s];
    return width;
}

void distill_teacher_stage_features(DistillTeacher *teacher, int batch, int stages, Act *scratch,
                                    Act *out) {
    Backend *backend = teacher->backbone.backend;
    const Convnext *convnext = &teacher->backbone.model.convnext;
    const size_t rows = (size_t)batch * teacher->grid_h * teacher->grid_w;
    const size_t width = (size_t)distill_teacher_stage_width(teacher, stages);
    size_t column = 0;
    for (int stage = CONVNEXT_STAGES - stages; stage < CONVNEXT_STAGES; stage++) {
        const size_t dim = (size_t)convnext->config.dims[stage];
        const Act *source = distill_teacher_map(teacher);  // the last stage, normalised
        if (stage < CONVNEXT_STAGES - 1) {
            int height, stage_width;
            const Act *output = convnext_stage_output(convnext, 0, stage, &height, &stage_width);
            backend->op.resize_bilinear_forward(backend, batch, height, stage_width, (int)dim,
                                                output, teacher->grid_h, teacher->grid_w,
                                                scratch);
            source = scratch;
        }
        backend->op.copy_2d(backend, rows, dim, source, dim, act_at(backend, out, column), width);
        column += dim;
    }
}

// ---- mixup ---------------------------------------------------------------------------------

int distill_mixup_create(DistillMixup *mixup, const Method *method, uint64_t seed,
                         ErrorMessage *err) {
    Backend *backend = method->backend;
    const size_t elements =
        (size_t)method->max_batch * method->global_size * method->global_size * 3;
    *mixup = (DistillMixup){.backend = backend, .seed = seed};
    mixup->mixed = backend->op.alloc(backend, act_bytes(backend, elements));
    mixup->permutation = backend->op.alloc(backend, (size_t)method->max_batch * sizeof(int32_t));
    if (!mixup->mixed || !mixup->permutation)
        return error_set(err, "out of memory for the mixed views");
    return staging_init(&mixup->staging, backend, (size_t)method->max_batch * sizeof(int32_t),
                        err);
}

void distill_mixup_free(DistillMixup *mixup) {
    if (mixup->mixed) mixup->backend->op.free(mixup->backend, mixup->mixed);
    if (mixup->permutation) mixup->backend->op.free(mixup->backend, mixup->permutation);
    staging_free(&mixup->staging);
    memset(mixup, 0, sizeof *mixup);
}

const Act *distill_mixup_apply(DistillMixup *mixup, const Method *method, int batch) {
    Rng rng = rng_make(mixup->seed, 0, method->batch_index, DISTILL_MIXUP_STREAM);
    const float lambda = rng_uniform(&rng);
    int32_t *host = staging_take(&mixup->staging);
    for (int i = 0; i < batch; i++) host[i] = i;
    for (int i = batch - 1; i > 0; i--) {  // Fisher-Yates: a uniform permutation
        const int j = (int)rng_below(&rng, (uint32_t)i + 1);
        const int32_t swap = host[i];
        host[i] = host[j];
        host[j] = swap;
    }
    Backend *backend = mixup->backend;
    staging_upload(&mixup->staging, mixup->permutation, host, (size_t)batch * sizeof *host);
    const size_t sample = (size_t)method->global_size * method->global_size * 3;
    backend->op.mixup(backend, batch, sample, method->global_input, mixup->permutation, lambda,
                      mixup->mixed);
    return mixup->mixed;
}

// ---- student projection ------------------------------------------------------------------

int distill_projection_rows(const DistillProjection *projection) {
    return projection->map ? projection->out_h * projection->out_w : 1;
}

int distill_projection_create(DistillProjection *projection, Backend *backend,
                              const HeadSpec *spec, const char *name, int max_batch, int in_h,
                              int in_w, int out_h, int out_w, int normalize, uint64_t seed,
                              ErrorMessage *err) {
    memset(projection, 0, sizeof *projection);
    const int map = in_h > 0;
    *projection = (DistillProjection){.backend = backend, .map = map, .in_h = in_h,
                                      .in_w = in_w, .out_h = out_h, .out_w = out_w,
                                      .normalize = normalize,
                                      .dim = head_spec_output_dim(spec)};
    const size_t in_rows = (size_t)max_batch * (map ? (size_t)in_h * in_w : 1);
    const size_t rows = (size_t)max_batch * distill_projection_rows(projection);
    if (head_create(&projection->head, backend, spec, name, (int)in_rows, seed, err)) return -1;
    const size_t dim = (size_t)projection->dim;
    float **buffers[] = {&projection->dresized, &projection->resized, &projection->normalized,
                         &projection->norms};
    const size_t sizes[] = {rows * dim, map ? rows * dim : 0, normalize ? rows * dim : 0,
                            normalize ? rows : 0};
    Act **acts[] = {&projection->resized_act, &projection->dresized_act, &projection->dhead};
    const size_t act_sizes[] = {map ? rows * dim : 0, map ? rows * dim : 0,
                                map ? in_rows * dim : 0};
    if (distill_alloc_buffers(backend, buffers, sizes, sizeof sizes / sizeof sizes[0], err) ||
        distill_alloc_acts(backend, acts, act_sizes, sizeof act_sizes / sizeof act_sizes[0], err))
        return error_prefix(err, "%s", name);
    return 0;
}

void distill_projection_free(DistillProjection *projection) {
    void *buffers[] = {projection->dresized,    projection->resized,      projection->dhead,
                       projection->normalized,  projection->norms,        projection->resized_act,
                       projection->dresized_act};
    distill_free_buffers(projection->backend, buffers, sizeof buffers / sizeof buffers[0]);
    head_free(&projection->head);
    memset(projection, 0, sizeof *projection);
}

const float *distill_projection_forward(DistillProjection *projection, int batch, const Act *x,
                                        ErrorMessage *err) {
    Backend *backend = projection->backend;
    const int in_rows = batch * (projection->map ? projection->in_h * projection->in_w : 1);
    const float *y = head_forward(&projection->head, in_rows, x, 1, err);
    if (!y) return NULL;
    projection->batch = batch;
    if (projection->map) {
        const size_t n = (size_t)batch * distill_projection_rows(projection) * projection->dim;
        backend->op.resize_bilinear_forward(backend, batch, projection->in_h, projection->in_w,
                                            projection->dim, head_output_act(&projection->head),
                                            projection->out_h, projection->out_w,
                                            projection->resized_act);
        backend->op.act_to_float(backend, n, projection->resized_act, projection->resized);
        y = projection->resized;
    }
    if (!projection->normalize) return y;
    backend->op.l2_normalize_forward(backend, batch * distill_projection_rows(projection),
                                     projection->dim, y, DISTILL_NORMALIZE_EPS,
                                     projection->normalized, projection->norms);
    return projection->normalized;
}

int distill_projection_backward(DistillProjection *projection, const float *dout, Act *dx,
                                ErrorMessage *err) {
    Backend *backend = projection->backend;
    const int batch = projection->batch;
    const float *d = dout;
    if (projection->normalize) {
        backend->op.l2_normalize_backward(backend, batch * distill_projection_rows(projection),
                                          projection->dim, projection->normalized,
                                          projection->norms, dout, DISTILL_NORMALIZE_EPS,
                                          projection->dresized);
        d = projection->dresized;
    }
    if (projection->map) {
        const size_t n = (size_t)batch * distill_projection_rows(projection) * projection->dim;
        backend->op.float_to_act(backend, n, d, projection->dresized_act);
        backend->op.resize_bilinear_backward(backend, batch, projection->in_h, projection->in_w,
                                             projection->dim, projection->dresized_act,
                                             projection->out_h, projection->out_w,
                                             projection->dhead);
        return head_backward_act(&projection->head, projection->dhead, dx, err);
    }
    return head_backward(&projection->head, d, dx, err);
}
