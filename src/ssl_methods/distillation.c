// `--method distillation`: LightlyTrain's default distillation
// (DistillationV3). One view, mixed up; the frozen teacher's class token
// (global, a ResNet teacher's pooled features) and patch tokens (local, a
// ResNet teacher's last stage), both L2-normalised
// (distillation_teacher.h); the student's pooled features and its feature
// map each through a Linear head to the teacher's width (trunc-normal
// weights), the map's output resized to the teacher's grid, L2-normalised;
// the teacher's global features enter the queue, then
//   loss = KL over the queue (temperature_global) + loss_local_weight x
//          KL over each image's token similarities (temperature_local)
// (distillation_loss.h). Method arguments: DISTILL_COMMON_ARGS, queue_size
// (auto: by dataset size), temperature_global, temperature_local (0.07),
// loss_local_weight (1). The checkpoint holds the student, both heads and
// the queue; the teacher is read from teacher=PATH again on resume.
#include <stdlib.h>

#include "ssl_methods/distillation_loss.h"
#include "ssl_methods/distillation_teacher.h"

typedef struct DistillationV3 {
    DistillCommon common;  // first: the shared hooks read it
    DistillProjection global, local;
    DistillQueueLoss *global_loss;
    DistillLocalLoss *local_loss;
    float local_weight;
    float *teacher_global;  // (B, D) normalised
    float *teacher_local;   // (B, P, D) normalised
    float *norms;           // (B P) scratch
    float *dglobal;         // (B, D)
    float *dlocal;          // (B, P, D)
    Act *dfeatures;         // (B, C) student features' gradient
    Act *dmap;              // (B, h, w, C) student map's gradient
} DistillationV3;

static int v3_step(Method *method, long step, int batch, ErrorMessage *err) {
    DistillationV3 *state = method->state;
    DistillCommon *common = &state->common;
    const Act *input = distill_mixup_apply(&common->mixup, method, batch);
    if (distill_teacher_forward(&common->teacher, batch, input, err)) return -1;
    distill_teacher_normalized(&common->teacher, batch, state->teacher_global,
                               state->teacher_local, state->norms);

    if (backbone_forward(&method->backbone, 0, batch, input, 1, err)) return -1;
    int height, width;
    const Act *map = backbone_feature_map(&method->backbone, 0, &height, &width);
    const float *student_global = distill_projection_forward(
        &state->global, batch, backbone_features(&method->backbone, 0), err);
    const float *student_local = distill_projection_forward(&state->local, batch, map, err);
    if (!student_global || !student_local) return -1;

    distill_queue_update(&common->queue, method->batch_index, batch, state->teacher_global);
    // the two terms are the logged values; loss = global + local_weight x
    // local, one float operation per call (the product in the loss slot)
    Backend *backend = method->backend;
    float *global = method_scalar(method, 0), *local = method_scalar(method, 1);
    float *loss = method_loss(method);
    distill_queue_loss_forward(state->global_loss, batch, state->teacher_global, student_global,
                               common->queue.values, global);
    distill_local_loss_forward(state->local_loss, batch, state->teacher_local, student_local,
                               local);
    backend->op.scalar_combine(backend, state->local_weight, local, 0.0f, NULL, 1.0f, loss);
    backend->op.scalar_combine(backend, 1.0f, global, 1.0f, loss, 1.0f, loss);

    distill_queue_loss_backward(state->global_loss, 1.0f, state->dglobal);
    distill_local_loss_backward(state->local_loss, state->local_weight, state->dlocal);
    method_scale_loss_gradient(method, (size_t)batch * state->global.dim, state->dglobal);
    method_scale_loss_gradient(
        method, (size_t)batch * distill_projection_rows(&state->local) * state->local.dim,
        state->dlocal);
    if (distill_projection_backward(&state->global, state->dglobal, state->dfeatures, err) ||
        distill_projection_backward(&state->local, state->dlocal, state->dmap, err))
        return -1;
    return backbone_backward_map(&method->backbone, 0, state->dfeatures, state->dmap, err);
}

static void v3_destroy(Method *method) {
    DistillationV3 *state = method->state;
    if (!state) return;
    distill_common_free(&state->common);
    distill_projection_free(&state->global);
    distill_projection_free(&state->local);
    distill_queue_loss_destroy(state->global_loss);
    distill_local_loss_destroy(state->local_loss);
    void *buffers[] = {state->teacher_global, state->teacher_local, state->norms,
                       state->dglobal,         state->dlocal,        state->dfeatures,
                       state->dmap};
    distill_free_buffers(method->backend, buffers, sizeof buffers / sizeof buffers[0]);
    free(state);
    method->state = NULL;
}

static const MethodOps v3_ops = {
    .step = v3_step,
    .save = distill_method_save_queue,
    .load = distill_method_load_queue,
    .teacher = distill_method_teacher,
    .destroy = v3_destroy,
};

static int v3_buffers(DistillationV3 *state, Backend *backend, int batch, int student_dim,
                      int map_pixels, ErrorMessage *err) {
    const DistillTeacher *teacher = &state->common.teacher;
    const size_t b = (size_t)batch, d = (size_t)teacher->dim;
    const size_t tokens = (size_t)teacher->grid_h * teacher->grid_w;
    float **buffers[] = {&state->teacher_global, &state->teacher_local, &state->norms,
                         &state->dglobal, &state->dlocal};
    const size_t sizes[] = {b * d, b * tokens * d, b * tokens, b * d, b * tokens * d};
    Act **acts[] = {&state->dfeatures, &state->dmap};
    const size_t act_sizes[] = {b * student_dim, b * map_pixels * student_dim};
    return distill_alloc_buffers(backend, buffers, sizes, sizeof sizes / sizeof sizes[0], err) ||
                   distill_alloc_acts(backend, acts, act_sizes, 2, err)
               ? -1
               : 0;
}

const MethodArgSpec distillation_arg_specs[] = {
    DISTILL_COMMON_ARGS, DISTILL_QUEUE_SIZE_ARG, METHOD_ARG_TEMPERATURE("temperature_global"),
    METHOD_ARG_TEMPERATURE("temperature_local"), METHOD_ARG_WEIGHT("loss_local_weight"),
    METHOD_ARG_END,
};

int distillation_create(Method *method, const MethodSetup *setup, ErrorMessage *err) {
    double temperature_global, temperature_local, local_weight;
    int queue_size;
    if (distill_queue_size_arg(setup, &queue_size, err) ||
        method_arg_double(setup, "temperature_global", DISTILLATION_DEFAULT_TEMPERATURE,
                          &temperature_global, err) ||
        method_arg_double(setup, "temperature_local", DISTILLATION_DEFAULT_TEMPERATURE,
                          &temperature_local, err) ||
        method_arg_double(setup, "loss_local_weight", 1.0, &local_weight, err))
        return -1;
    DistillationV3 *state = calloc(1, sizeof *state);
    if (!state) return error_set(err, "out of memory");
    method->state = state;
    method->ops = &v3_ops;
    state->local_weight = (float)local_weight;
    method->scalar_count = 2;
    method->scalar_tags[0] = "train_loss/global_loss";
    method->scalar_tags[1] = "train_loss/local_loss";
    Backend *backend = method->backend;
    const int batch = method->max_batch;
    if (distill_setup(method, setup, &state->common, err)) return -1;
    const DistillTeacher *teacher = &state->common.teacher;
    const int student_dim = method->backbone.feature_dim, dim = teacher->dim;
    int height, width;
    backbone_feature_map_size(&method->backbone, 0, &height, &width);
    const HeadSpec head = head_spec_distillation(student_dim, dim);
    if (distill_projection_create(&state->global, backend, &head, "projection_head_global",
                                  batch, 0, 0, 0, 0, 1, setup->seed, err) ||
        distill_projection_create(&state->local, backend, &head, "projection_head_local", batch,
                                  height, width, teacher->grid_h, teacher->grid_w, 1,
                                  setup->seed, err) ||
        distill_queue_create(&state->common.queue, backend, queue_size, dim, err) ||
        v3_buffers(state, backend, batch, student_dim, height * width, err))
        return -1;
    state->global_loss = distill_queue_loss_create(backend, batch, dim, queue_size,
                                                   (float)temperature_global, err);
    if (!state->global_loss) return -1;
    state->local_loss = distill_local_loss_create(backend, batch, teacher->grid_h * teacher->grid_w,
                                                  dim, (float)temperature_local, err);
    if (!state->local_loss) return -1;
    Head *heads[2] = {&state->global.head, &state->local.head};
    for (int i = 0; i < 2; i++)
        if (method_add_group(method, heads[i]->name, &heads[i]->params, NULL, NULL, 0, err))
            return -1;
    return 0;
}
