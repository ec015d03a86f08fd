// `--method distillationv1`: LightlyTrain's first distillation (its
// Distillation class), a global loss only. One view, mixed up; the frozen
// teacher's class token (a ResNet teacher's pooled features),
// L2-normalised, enters the queue; the student's pooled features through a
// Linear head to the teacher's width (trunc-normal weights), L2-normalised;
//   loss = KL over the queue (temperature)
// (distillation_loss.h, distillation_teacher.h). Method arguments:
// DISTILL_COMMON_ARGS, queue_size (auto: by dataset size), temperature
// (0.07). The checkpoint holds the student, the head and the queue.
#include <stdlib.h>

#include "ssl_methods/distillation_loss.h"
#include "ssl_methods/distillation_teacher.h"

typedef struct DistillationV1 {
    DistillCommon common;  // first: the shared hooks read it
    DistillProjection head;
    DistillQueueLoss *loss;
    float *teacher_global;  // (B, D) normalised
    float *norms;           // (B)
    float *dglobal;         // (B, D)
    Act *dembedding;        // (B, embedding width)
} DistillationV1;

static int v1_step(Method *method, long step, int batch, ErrorMessage *err) {
    DistillationV1 *state = method->state;
    DistillCommon *common = &state->common;
    const Act *input = distill_mixup_apply(&common->mixup, method, batch);
    if (distill_teacher_forward(&common->teacher, batch, input, err)) return -1;
    distill_teacher_normalized(&common->teacher, batch, state->teacher_global, NULL, state->norms);
    if (backbone_forward(&method->backbone, 0, batch, input, 1, err)) return -1;
    const Act *embedding =
        embed_head_forward(&method->embed, batch, backbone_features(&method->backbone, 0), 1, err);
    const float *student =
        embedding ? distill_projection_forward(&state->head, batch, embedding, err) : NULL;
    if (!student) return -1;
    distill_queue_update(&common->queue, method->batch_index, batch, state->teacher_global);
    distill_queue_loss_forward(state->loss, batch, state->teacher_global, student,
                               common->queue.values, method_loss(method));
    distill_queue_loss_backward(state->loss, 1.0f, state->dglobal);
    method_scale_loss_gradient(method, (size_t)batch * state->head.dim, state->dglobal);
    if (distill_projection_backward(&state->head, state->dglobal, state->dembedding, err))
        return -1;
    const Act *dfeatures = embed_head_backward(&method->embed, state->dembedding, err);
    return dfeatures ? backbone_backward(&method->backbone, 0, dfeatures, err) : -1;
}

static void v1_destroy(Method *method) {
    DistillationV1 *state = method->state;
    if (!state) return;
    distill_common_free(&state->common);
    distill_projection_free(&state->head);
    distill_queue_loss_destroy(state->loss);
    void *buffers[] = {state->teacher_global, state->norms, state->dglobal, state->dembedding};
    distill_free_buffers(method->backend, buffers, sizeof buffers / sizeof buffers[0]);
    free(state);
    method->state = NULL;
}

static const MethodOps v1_ops = {
    .step = v1_step,
    .save = distill_method_save_queue,
    .load = distill_method_load_queue,
    .teacher = distill_method_teacher,
    .destroy = v1_destroy,
};

const MethodArgSpec distillation_v1_arg_specs[] = {
    DISTILL_COMMON_ARGS, DISTILL_QUEUE_SIZE_ARG, METHOD_ARG_TEMPERATURE("temperature"),
    METHOD_ARG_END,
};

int distillation_v1_create(Method *method, const MethodSetup *setup, ErrorMessage *err) {
    double temperature;
    int queue_size;
    if (distill_queue_size_arg(setup, &queue_size, err) ||
        method_arg_double(setup, "temperature", DISTILLATION_DEFAULT_TEMPERATURE, &temperature,
                          err))
        return -1;
    DistillationV1 *state = calloc(1, sizeof *state);
    if (!state) return error_set(err, "out of memory");
    method->state = state;
    method->ops = &v1_ops;
    Backend *backend = method->backend;
    const int batch = method->max_batch;
    if (distill_setup(method, setup, &state->common, err)) return -1;
    const int dim = state->common.teacher.dim, student_dim = method->embed.dim;
    const HeadSpec head = head_spec_distillation(student_dim, dim);
    if (distill_projection_create(&state->head, backend, &head, "projection_head", batch, 0, 0,
                                  0, 0, 1, setup->seed, err) ||
        distill_queue_create(&state->common.queue, backend, queue_size, dim, err))
        return -1;
    state->loss = distill_queue_loss_create(backend, batch, dim, queue_size, (float)temperature,
                                            err);
    if (!state->loss) return -1;
    const size_t b = (size_t)batch;
    float **buffers[] = {&state->teacher_global, &state->norms, &state->dglobal};
    const size_t sizes[] = {b * dim, b, b * dim};
    Act **acts[] = {&state->dembedding};
    const size_t act_sizes[] = {b * student_dim};
    if (distill_alloc_buffers(backend, buffers, sizes, sizeof sizes / sizeof sizes[0], err) ||
        distill_alloc_acts(backend, acts, act_sizes, 1, err))
        return -1;
    return method_add_group(method, "projection_head", &state->head.head.params, NULL, NULL, 0,
                            err);
}
