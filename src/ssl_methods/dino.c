// DINO (Caron et al. 2021) with LightlyTrain's defaults: 2 global + 6 local
// views; student and EMA teacher with a projection head (hidden 2048,
// bottleneck 256, weight-normalised last layer frozen for the first 1250
// steps, output dimension by dataset size); the teacher sees the global
// views only; centring (momentum 0.9); teacher temperature warmed up
// linearly; teacher momentum cosine from 0.99-0.996 (by dataset size) to 1.
// The exported backbone is the teacher. Method args: hidden_dim,
// bottleneck_dim, output_dim, student_temp, teacher_temp,
// warmup_teacher_temp, warmup_teacher_temp_steps, center_momentum,
// momentum_start, momentum_end, freeze_last_layer_steps, norm_last_layer
// (true: the last layer's weight_g fixed at 1, LightlyTrain's default;
// false: weight_g trained, the parameter "last_layer.weight_g").
//
// The student head has no BatchNorm, so running it once on the global and
// local features concatenated equals LightlyTrain's two head calls.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/schedule.h"
#include "ssl_methods/dino_loss.h"
#include "ssl_methods/method_teacher.h"

#define IMAGENET_SIZE 1281167.0

typedef struct DinoState {
    Head head;
    EmaTeacher teacher;
    DinoLoss *loss;
    double teacher_temp, warmup_teacher_temp, momentum_start, momentum_end;
    long warmup_teacher_temp_steps, total_steps;
    Act *features;      // (views batch, D): global then local features, the head input
                        // (through the embedding head, --embed-dim)
    float *dprojection; // (views batch, out)
    Act *dembedding;    // (views batch, embedding width)
} DinoState;

// LightlyTrain's _scaling.interpolate: linear in input between the two
// points, clamped, rounded to `digits` decimals.
static double dino_interpolate(double input, double input_start, double input_end,
                               double value_start, double value_end, int digits) {
    double t = (input - input_start) / (input_end - input_start);
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    const double value = value_start + t * (value_end - value_start);
    const double scale = pow(10.0, digits);
    return round(value * scale) / scale;
}

static int dino_output_dim(size_t dataset_size) {
    static const struct { double below; int dim; } buckets[] = {
        {20000, 1024}, {50000, 2048}, {100000, 4096}, {200000, 16384}, {500000, 32768},
    };
    for (size_t i = 0; i < sizeof buckets / sizeof buckets[0]; i++)
        if ((double)dataset_size < buckets[i].below) return buckets[i].dim;
    return 65536;
}

static float dino_teacher_temp(const DinoState *state, long step) {
    if (step >= state->warmup_teacher_temp_steps) return (float)state->teacher_temp;
    const double t = (double)step / (double)state->warmup_teacher_temp_steps;
    return (float)(state->warmup_teacher_temp +
                   t * (state->teacher_temp - state->warmup_teacher_temp));
}

static float dino_momentum(const DinoState *state, long step) {
    return (float)schedule_cosine(step, state->total_steps, state->momentum_start,
                                  state->momentum_end);
}

static int dino_step(Method *method, long step, int batch, ErrorMessage *err) {
    DinoState *state = method->state;
    Backend *backend = method->backend;
    const int global_rows = method->global_views * batch;
    const int local_rows = method->local_views * batch;
    const int dim = method->backbone.feature_dim;
    const size_t out = (size_t)head_spec_output_dim(&state->head.spec);
    const float *teacher = ema_teacher_forward(&state->teacher, method, global_rows, err);
    if (!teacher) return -1;
    if (backbone_forward(&method->backbone, 0, global_rows, method->global_input, 1, err))
        return -1;
    backend->op.copy(backend, state->features, backbone_features(&method->backbone, 0),
                     act_bytes(backend, (size_t)global_rows * dim));
    if (local_rows) {
        if (backbone_forward(&method->backbone, 1, local_rows, method->local_input, 1, err))
            return -1;
        backend->op.copy(backend, act_at(backend, state->features, (size_t)global_rows * dim),
                         backbone_features(&method->backbone, 1),
                         act_bytes(backend, (size_t)local_rows * dim));
    }
    const Act *embedding =
        embed_head_forward(&method->embed, global_rows + local_rows, state->features, 1, err);
    const float *student =
        embedding ? head_forward(&state->head, global_rows + local_rows, embedding, 1, err) : NULL;
    if (!student) return -1;
    const float *teacher_views[AUGMENT_MAX_VIEWS], *student_views[AUGMENT_MAX_VIEWS];
    float *dstudent_views[AUGMENT_MAX_VIEWS];
    const int views = method->global_views + method->local_views;
    for (int v = 0; v < views; v++) {
        if (v < method->global_views) teacher_views[v] = teacher + (size_t)v * batch * out;
        student_views[v] = student + (size_t)v * batch * out;
        dstudent_views[v] = state->dprojection + (size_t)v * batch * out;
    }
    const float temperature = dino_teacher_temp(state, step);
    dino_loss_forward(state->loss, batch, teacher_views, student_views, temperature,
                      method_loss(method));
    method_set_scalar(method, 1, temperature);
    dino_loss_backward(state->loss, 1.0f, dstudent_views);
    method_scale_loss_gradient(method, (size_t)views * batch * out, state->dprojection);
    if (head_backward(&state->head, state->dprojection, state->dembedding, err)) return -1;
    Act *dfeatures = embed_head_backward(&method->embed, state->dembedding, err);
    if (!dfeatures) return -1;
    parameter_set_hold_progress(method->backbone.params, local_rows > 0);  // not the last pass
    if (backbone_backward(&method->backbone, 0, dfeatures, err)) return -1;
    parameter_set_hold_progress(method->backbone.params, 0);
    if (local_rows &&
        backbone_backward(&method->backbone, 1,
                          act_at(backend, dfeatures, (size_t)global_rows * dim), err))
        return -1;
    return 0;
}

static void dino_after_update(Method *method, long step) {
    DinoState *state = method->state;
    const float momentum = dino_momentum(state, step + 1);
    ema_teacher_update(&state->teacher, method, momentum);
    dino_loss_update_center(state->loss);
    method_set_scalar(method, 0, momentum);
}

static int dino_save(Method *method, CheckpointWriter *writer, ErrorMessage *err) {
    DinoState *state = method->state;
    if (ema_teacher_save(&state->teacher, writer, err)) return -1;
    return checkpoint_add_floats(writer, "dino.center", method->backend,
                                 dino_loss_center(state->loss),
                                 (size_t)head_spec_output_dim(&state->head.spec), err);
}

static int dino_load(Method *method, const Checkpoint *checkpoint, ErrorMessage *err) {
    DinoState *state = method->state;
    if (ema_teacher_load(&state->teacher, checkpoint, err)) return -1;
    return checkpoint_get_floats(checkpoint, "dino.center", method->backend,
                                 dino_loss_center(state->loss),
                                 (size_t)head_spec_output_dim(&state->head.spec), err);
}

static Backbone *dino_teacher(Method *method) {
    return &((DinoState *)method->state)->teacher.backbone;
}

static void dino_destroy(Method *method) {
    DinoState *state = method->state;
    if (!state) return;
    Backend *backend = method->backend;
    ema_teacher_free(&state->teacher);
    head_free(&state->head);
    if (state->loss) dino_loss_destroy(state->loss);
    void *buffers[] = {state->features, state->dprojection, state->dembedding};
    for (int i = 0; i < 3; i++)
        if (buffers[i]) backend->op.free(backend, buffers[i]);
    free(state);
    method->state = NULL;
}

static const MethodOps dino_ops = {
    .step = dino_step,
    .after_update = dino_after_update,
    .save = dino_save,
    .load = dino_load,
    .teacher = dino_teacher,
    .destroy = dino_destroy,
};

const MethodArgSpec dino_arg_specs[] = {
    METHOD_ARG_DIM("hidden_dim"), METHOD_ARG_DIM("bottleneck_dim"), METHOD_ARG_DIM("output_dim"),
    METHOD_ARG_TEMPERATURE("student_temp"), METHOD_ARG_TEMPERATURE("teacher_temp"),
    METHOD_ARG_TEMPERATURE("warmup_teacher_temp"), METHOD_ARG_STEPS("warmup_teacher_temp_steps"),
    METHOD_ARG_FRACTION("center_momentum"), METHOD_ARG_FRACTION("momentum_start"),
    METHOD_ARG_FRACTION("momentum_end"), METHOD_ARG_STEPS("freeze_last_layer_steps"),
    METHOD_ARG_FLAG("norm_last_layer"), METHOD_ARG_END,
};

int dino_create(Method *method, const MethodSetup *setup, ErrorMessage *err) {
    const double size = (double)setup->dataset_size;
    const double teacher_temp_auto = dino_interpolate(size, 20000, IMAGENET_SIZE, 0.02, 0.07, 2);
    double hidden, bottleneck, out, student_temp, teacher_temp, warmup_temp, warmup_steps;
    double center_momentum, momentum_start, momentum_end, freeze_steps;
    int norm_last_layer;
    if (method_arg_bool(setup, "norm_last_layer", 1, &norm_last_layer, err) ||
        method_arg_double(setup, "hidden_dim", 2048, &hidden, err) ||
        method_arg_double(setup, "bottleneck_dim", 256, &bottleneck, err) ||
        method_arg_double(setup, "output_dim", dino_output_dim(setup->dataset_size), &out, err) ||
        method_arg_double(setup, "student_temp", 0.1, &student_temp, err) ||
        method_arg_double(setup, "teacher_temp", teacher_temp_auto, &teacher_temp, err))
        return -1;
    const double warmup_temp_auto =
        fmin(teacher_temp, dino_interpolate(teacher_temp, 0.02, 0.07, 0.02, 0.04, 2));
    // LightlyTrain: 37500 steps, at most 30% of training.
    const double warmup_steps_auto = fmin(37500.0, floor(0.3 * (double)setup->total_steps));
    if (method_arg_double(setup, "warmup_teacher_temp", warmup_temp_auto, &warmup_temp, err) ||
        method_arg_double(setup, "warmup_teacher_temp_steps", warmup_steps_auto, &warmup_steps,
                          err) ||
        method_arg_double(setup, "center_momentum", 0.9, &center_momentum, err) ||
        method_arg_double(setup, "momentum_start",
                          dino_interpolate(size, 20000, IMAGENET_SIZE, 0.99, 0.996, 3),
                          &momentum_start, err) ||
        method_arg_double(setup, "momentum_end", 1.0, &momentum_end, err) ||
        method_arg_double(setup, "freeze_last_layer_steps", 1250, &freeze_steps, err))
        return -1;
    if (method->global_views < 1 || method->global_views + method->local_views < 2)
        return error_set(err, "needs at least one global view and two views in all");
    DinoState *state = calloc(1, sizeof *state);
    if (!state) return error_set(err, "out of memory");
    method->state = state;
    method->ops = &dino_ops;
    method->export_part = "teacher_backbone";
    state->teacher_temp = teacher_temp;
    state->warmup_teacher_temp = warmup_temp;
    state->warmup_teacher_temp_steps = (long)warmup_steps;
    state->momentum_start = momentum_start;
    state->momentum_end = momentum_end;
    state->total_steps = setup->total_steps;
    const int views = method->global_views + method->local_views;
    const int rows = views * setup->batch, dim = method->backbone.feature_dim;
    HeadSpec head = head_spec_dino(method->embed.dim, (int)hidden, (int)bottleneck, (int)out);
    head.weight_g_trained = !norm_last_layer;
    if (head_create(&state->head, method->backend, &head, "projection_head", rows, setup->seed,
                    err) ||
        ema_teacher_create(&state->teacher, method, &state->head, "projection_head",
                           setup->seed, err))
        return -1;
    state->loss = dino_loss_create(method->backend, setup->batch, (int)out, method->global_views,
                                   views, (float)student_temp, (float)center_momentum,
                                   method->comm, err);
    if (!state->loss) return -1;
    Backend *backend = method->backend;
    state->features = backend->op.alloc(backend, act_bytes(backend, (size_t)rows * dim));
    state->dprojection = backend->op.alloc(backend, (size_t)rows * (size_t)out * sizeof(float));
    state->dembedding =
        backend->op.alloc(backend, act_bytes(backend, (size_t)rows * method->embed.dim));
    if (!state->features || !state->dprojection || !state->dembedding)
        return error_set(err, "out of memory");
    method->scalar_count = 2;
    method->scalar_tags[0] = "schedule/momentum";
    method_set_scalar(method, 0, dino_momentum(state, 0));
    method->scalar_tags[1] = "schedule/teacher_temp";
    method_set_scalar(method, 1, dino_teacher_temp(state, 0));
    if (method_add_group(method, "projection_head", &state->head.params, &state->head.buffers,
                         &state->head.num_batches_tracked, 0, err))
        return -1;
    return method_add_group(method, "last_layer", &state->head.last_layer, NULL, NULL,
                            (long)freeze_steps, err);
}
