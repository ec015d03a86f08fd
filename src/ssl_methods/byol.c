// BYOL (Grill et al. 2020): the online network (backbone, projection head
// 4096-256, prediction head 4096-256) predicts the projections an EMA target
// network makes of the other view; symmetric normalised-MSE loss
// (byol_loss.h); target momentum cosine from 0.99 to 1.0 over training.
// Method args: hidden_dim, output_dim, momentum_start, momentum_end.
#include <stdlib.h>

#include "nn/schedule.h"
#include "ssl_methods/byol_loss.h"
#include "ssl_methods/method_teacher.h"

typedef struct ByolState {
    Head projection, prediction;
    EmaTeacher target;
    ByolLoss *loss;
    double momentum_start, momentum_end;
    long total_steps;
    float *dprediction;  // (2 batch, out)
    Act *dprojection;    // (2 batch, out)
    Act *dembedding;     // (2 batch, embedding width)
} ByolState;

static int byol_step(Method *method, long step, int batch, ErrorMessage *err) {
    ByolState *state = method->state;
    const int rows = 2 * batch;
    const size_t half = (size_t)batch * head_spec_output_dim(&state->prediction.spec);
    const float *target = ema_teacher_forward(&state->target, method, rows, err);
    if (!target) return -1;
    if (backbone_forward(&method->backbone, 0, rows, method->global_input, 1, err)) return -1;
    const Act *embedding =
        embed_head_forward(&method->embed, rows, backbone_features(&method->backbone, 0), 1, err);
    if (!embedding || !head_forward(&state->projection, rows, embedding, 1, err)) return -1;
    const float *prediction =
        head_forward(&state->prediction, rows, head_output_act(&state->projection), 1, err);
    if (!prediction) return -1;
    byol_loss_forward(state->loss, batch, prediction, prediction + half, target, target + half,
                      method_loss(method));
    byol_loss_backward(state->loss, 1.0f, state->dprediction, state->dprediction + half);
    method_scale_loss_gradient(method, 2 * half, state->dprediction);
    if (head_backward(&state->prediction, state->dprediction, state->dprojection, err) ||
        head_backward_act(&state->projection, state->dprojection, state->dembedding, err))
        return -1;
    const Act *dfeatures = embed_head_backward(&method->embed, state->dembedding, err);
    return dfeatures ? backbone_backward(&method->backbone, 0, dfeatures, err) : -1;
}

// The momentum of the step after `step` (lightly updates the target at the
// start of each training step, i.e. after the previous optimizer step).
static float byol_momentum(const ByolState *state, long step) {
    return (float)schedule_cosine(step, state->total_steps, state->momentum_start,
                                  state->momentum_end);
}

static void byol_after_update(Method *method, long step) {
    ByolState *state = method->state;
    const float momentum = byol_momentum(state, step + 1);
    ema_teacher_update(&state->target, method, momentum);
    method_set_scalar(method, 0, momentum);
}

static int byol_save(Method *method, CheckpointWriter *writer, ErrorMessage *err) {
    return ema_teacher_save(&((ByolState *)method->state)->target, writer, err);
}

static int byol_load(Method *method, const Checkpoint *checkpoint, ErrorMessage *err) {
    return ema_teacher_load(&((ByolState *)method->state)->target, checkpoint, err);
}

static Backbone *byol_teacher(Method *method) {
    return &((ByolState *)method->state)->target.backbone;
}

static void byol_destroy(Method *method) {
    ByolState *state = method->state;
    if (!state) return;
    Backend *backend = method->backend;
    ema_teacher_free(&state->target);
    head_free(&state->projection);
    head_free(&state->prediction);
    if (state->loss) byol_loss_destroy(state->loss);
    void *buffers[] = {state->dprediction, state->dprojection, state->dembedding};
    for (int i = 0; i < 3; i++)
        if (buffers[i]) backend->op.free(backend, buffers[i]);
    free(state);
    method->state = NULL;
}

static const MethodOps byol_ops = {
    .step = byol_step,
    .after_update = byol_after_update,
    .save = byol_save,
    .load = byol_load,
    .teacher = byol_teacher,
    .destroy = byol_destroy,
};

const MethodArgSpec byol_arg_specs[] = {
    METHOD_ARG_DIM("hidden_dim"), METHOD_ARG_DIM("output_dim"),
    METHOD_ARG_FRACTION("momentum_start"), METHOD_ARG_FRACTION("momentum_end"), METHOD_ARG_END,
};

int byol_create(Method *method, const MethodSetup *setup, ErrorMessage *err) {
    double hidden, out, momentum_start, momentum_end;
    if (method_arg_double(setup, "hidden_dim", 4096, &hidden, err) ||
        method_arg_double(setup, "output_dim", 256, &out, err) ||
        method_arg_double(setup, "momentum_start", 0.99, &momentum_start, err) ||
        method_arg_double(setup, "momentum_end", 1.0, &momentum_end, err))
        return -1;
    if (method->global_views != 2 || method->local_views != 0)
        return error_set(err, "needs exactly 2 views of one size");
    ByolState *state = calloc(1, sizeof *state);
    if (!state) return error_set(err, "out of memory");
    method->state = state;
    method->ops = &byol_ops;
    state->momentum_start = momentum_start;
    state->momentum_end = momentum_end;
    state->total_steps = setup->total_steps;
    const int rows = 2 * setup->batch, dim = method->embed.dim;
    const HeadSpec projection = head_spec_byol_projection(dim, (int)hidden, (int)out);
    const HeadSpec prediction = head_spec_byol_prediction((int)out, (int)hidden, (int)out);
    if (head_create(&state->projection, method->backend, &projection, "projection_head", rows,
                    setup->seed, err) ||
        head_create(&state->prediction, method->backend, &prediction, "prediction_head", rows,
                    setup->seed, err) ||
        head_attach_batchnorm_sync(&state->projection, method->batchnorm_sync, err) ||
        head_attach_batchnorm_sync(&state->prediction, method->batchnorm_sync, err) ||
        ema_teacher_create(&state->target, method, &state->projection, "projection_head",
                           setup->seed, err))
        return -1;
    state->loss = byol_loss_create(method->backend, setup->batch, (int)out, err);
    if (!state->loss) return -1;
    Backend *backend = method->backend;
    state->dprediction = backend->op.alloc(backend, (size_t)rows * (size_t)out * sizeof(float));
    state->dprojection = backend->op.alloc(backend, act_bytes(backend, (size_t)rows * out));
    state->dembedding = backend->op.alloc(backend, act_bytes(backend, (size_t)rows * dim));
    if (!state->dprediction || !state->dprojection || !state->dembedding)
        return error_set(err, "out of memory");
    method->scalar_count = 1;
    method->scalar_tags[0] = "schedule/momentum";
    method_set_scalar(method, 0, byol_momentum(state, 0));
    if (method_add_group(method, "projection_head", &state->projection.params,
                         &state->projection.buffers, &state->projection.num_batches_tracked, 0,
                         err))
        return -1;
    return method_add_group(method, "prediction_head", &state->prediction.params,
                            &state->prediction.buffers, &state->prediction.num_batches_tracked, 0,
                            err);
}
