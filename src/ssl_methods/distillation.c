// Distillation from a frozen teacher backbone: the student backbone plus a
// linear projection (student dim -> teacher dim) regresses the teacher's
// pooled features of the same views, after L2 normalisation of both:
// loss = sum over the two views of mean_i || p_i/|p_i| - t_i/|t_i| ||^2
// (byol_loss.h with the teacher features as targets). LightlyTrain distils
// from DINOv2 ViTs; our teacher is any backbone (a ResNet or a ViT, e.g.
// DINOv2's weights in timm or transformers naming) the user gives as
// safetensors or as one of our checkpoints
// (--method-arg teacher=PATH, required; teacher_part=backbone|student|teacher
// picks the part of a checkpoint). The teacher runs in eval mode (running
// BatchNorm statistics) and never changes. (LightlyTrain's own distillation
// with a ViT teacher, on its patch tokens, is a later step of issue 11.)
#include <stdlib.h>

#include "embed/model_source.h"
#include "ssl_methods/byol_loss.h"
#include "ssl_methods/heads.h"
#include "ssl_methods/method.h"

typedef struct DistillationState {
    Backbone teacher;
    Head head;
    ByolLoss *loss;
    float *dprojection;  // (2 batch, teacher D)
    float *dfeatures;    // (2 batch, student D)
} DistillationState;

static int distillation_step(Method *method, long step, int batch, float *loss,
                             ErrorMessage *err) {
    DistillationState *state = method->state;
    const int rows = 2 * batch;
    const size_t half = (size_t)batch * state->teacher.feature_dim;
    if (backbone_forward(&state->teacher, 0, rows, method->global_input, 0, err)) return -1;
    const float *target = backbone_features(&state->teacher, 0);
    if (backbone_forward(&method->backbone, 0, rows, method->global_input, 1, err)) return -1;
    const float *projection =
        head_forward(&state->head, rows, backbone_features(&method->backbone, 0), 1, err);
    if (!projection) return -1;
    // byol_loss pairs p0 with z1 and p1 with z0: pass the targets swapped so
    // that each view is compared with the teacher's features of itself.
    *loss = byol_loss_forward(state->loss, batch, projection, projection + half, target + half,
                              target);
    byol_loss_backward(state->loss, 1.0f, state->dprojection, state->dprojection + half);
    if (head_backward(&state->head, state->dprojection, state->dfeatures, err)) return -1;
    return backbone_backward(&method->backbone, 0, state->dfeatures, err);
}

static int distillation_save(Method *method, CheckpointWriter *writer, ErrorMessage *err) {
    DistillationState *state = method->state;
    return checkpoint_add_parameters(writer, "teacher_backbone.", state->teacher.params,
                                     state->teacher.buffers,
                                     *state->teacher.num_batches_tracked, err);
}

static Backbone *distillation_teacher(Method *method) {
    return &((DistillationState *)method->state)->teacher;
}

static void distillation_destroy(Method *method) {
    DistillationState *state = method->state;
    if (!state) return;
    Backend *backend = method->backend;
    backbone_free(&state->teacher);
    head_free(&state->head);
    if (state->loss) byol_loss_destroy(state->loss);
    if (state->dprojection) backend->op.free(backend, state->dprojection);
    if (state->dfeatures) backend->op.free(backend, state->dfeatures);
    free(state);
    method->state = NULL;
}

// The teacher is frozen and comes from --method-arg teacher=PATH on resume
// as well, so load has nothing to restore beyond the groups.
static const MethodOps distillation_ops = {
    .step = distillation_step,
    .save = distillation_save,
    .teacher = distillation_teacher,
    .destroy = distillation_destroy,
};

int distillation_create(Method *method, const MethodSetup *setup, ErrorMessage *err) {
    static const char *const known[] = {"teacher", "teacher_part", NULL};
    const char *teacher_path = NULL, *teacher_part = "backbone";
    if (method_args_check(setup, known, err)) return -1;
    if (!method_arg_string(setup, "teacher", &teacher_path))
        return error_set(err, "needs a teacher: --method-arg teacher=PATH (a .safetensors "
                              "backbone or a lightly-train-c .ckpt)");
    method_arg_string(setup, "teacher_part", &teacher_part);
    if (method->global_views != 2 || method->local_views != 0)
        return error_set(err, "needs exactly 2 views of one size");
    DistillationState *state = calloc(1, sizeof *state);
    if (!state) return error_set(err, "out of memory");
    method->state = state;
    method->ops = &distillation_ops;
    const int rows = 2 * setup->batch;
    const BackboneInput input = {rows, method->global_size};
    if (model_source_load_backbone(teacher_path, teacher_part, method->backend, &input, 1,
                                   &state->teacher, err))
        return error_prefix(err, "teacher"), -1;
    const int student_dim = method->backbone.feature_dim, teacher_dim = state->teacher.feature_dim;
    const HeadSpec head = head_spec_linear(student_dim, teacher_dim);
    if (head_create(&state->head, method->backend, &head, "projection_head", rows, setup->seed,
                    err))
        return -1;
    state->loss = byol_loss_create(method->backend, setup->batch, teacher_dim, err);
    if (!state->loss) return -1;
    Backend *backend = method->backend;
    state->dprojection = backend->op.alloc(backend, (size_t)rows * teacher_dim * sizeof(float));
    state->dfeatures = backend->op.alloc(backend, (size_t)rows * student_dim * sizeof(float));
    if (!state->dprojection || !state->dfeatures) return error_set(err, "out of memory");
    return method_add_group(method, "projection_head", &state->head.params, &state->head.buffers,
                            &state->head.num_batches_tracked, 0, err);
}
