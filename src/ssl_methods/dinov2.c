// DINOv2 (Oquab et al. 2023) as LightlyTrain's `dinov2` method, ViTs only:
// student and EMA teacher ViTs with one shared DINO/iBOT head (hidden 2048,
// bottleneck 256, output 65536, weight-normalised last layer with a trained
// weight_g, frozen for the first 1250 steps); the teacher (eval mode) sees
// the two global views, the student the global views with iBOT masks (a
// learnable mask token replaces the masked patch embeddings) and the local
// views. Loss (dinov2_loss.h):
// DINO on the class tokens + iBOT on the masked patch tokens + 0.1 KoLeo on
// the student's global class tokens, centred by softmax (default) or
// Sinkhorn-Knopp. Schedules: teacher temperature linear 0.04 -> 0.07 over
// 37500 steps, teacher momentum cosine 0.992 -> 1; the optimizer side
// (AdamW, lr 0.004 sqrt-scaled, weight decay cosine 0.04 -> 0.4, warmup,
// min lr, clip 3) is in method.c's defaults. Parameter groups as
// LightlyTrain's (dinov2_param_groups.h): layer-wise lr decay 0.9 over the
// ViT's blocks, the patch embedding at a further x 0.2, weight decay on
// everything but biases, norms and LayerScale; freezing (the last layer
// for student_freeze_last_layer_steps, backbone and mask token for
// student_freeze_backbone_steps) sets the groups' lr to 0, as
// LightlyTrain's on_before_optimizer_step, so AdamW's moments still
// follow their gradients. The exported backbone is the teacher. Method
// args: dinov2_arg_specs.
//
// DINOv31 (LightlyTrain's `dinov31`) is this step plus PaKA
// (dinov2_paka.h): the teacher's forward also takes the clean renders of
// the global views (global views 2, 3), the student's local forward also
// the PaKA local views (after DINOv2's), and PaKA's loss and gradients join
// DINOv2's; its arguments: dinov31_arg_specs.
//
// The head runs once per model over all its rows (class tokens, then the
// masked patches): it has no BatchNorm, so that equals LightlyTrain's
// separate dino_head / ibot_head calls with ibot_separate_head=False.
// With one rank, or when the steps are captured as CUDA graphs
// (Method.fixed_shapes), the masked patches' rows are padded to the most a
// step of the batch size can mask (dinov2_masks_capacity) with unmasked
// patches of weight 0, which the loss leaves out (dinov2_loss.h): every
// step of a batch size queues the same shapes, so a step can be captured
// as a CUDA graph and replayed, and the head's buffers need the bound, not
// the old masked crops x P/2. Several ranks op by op keep the masked count
// (their bound is 2 to 3.3 times it: dinov2_masks.h).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/staging.h"
#include "nn/schedule.h"
#include "ssl_methods/dinov2_loss.h"
#include "ssl_methods/dinov2_paka.h"
#include "ssl_methods/dinov2_masks.h"
#include "ssl_methods/dinov2_param_groups.h"
#include "ssl_methods/method_teacher.h"

// backbone, projection_head, mask_token, last_layer (, DINOv31's student_paka_head)
#define DINOV2_GROUPS 5

typedef struct Dinov2State {
    Head head;
    EmaTeacher teacher;
    Dinov2Loss *loss;
    Dinov2Paka *paka;  // DINOv31's PaKA, or NULL
    int local_views;   // DINOv2's local views (DINOv31's PaKA views follow them)
    Dinov2MaskConfig masks;
    ParameterSet mask_token;  // "mask_token" (1, D): DINOv2's, trained with the backbone
    Dinov2GroupTables tables[DINOV2_GROUPS];  // the method groups' lr multipliers and decay
    double teacher_temp_start, teacher_temp_end, momentum_start, momentum_end;
    long teacher_temp_warmup_steps, total_steps;
    uint64_t seed;
    int tokens, local_tokens, patches, max_masked;
    int masked_total;              // this step's masked patches over all ranks
    // host: this step's masks (2 B P), weights, validity and token indices
    // (up to 2 B P each) and 1 / masked_total in one staging buffer,
    // uploaded each step
    Staging mask_staging;
    size_t mask_cells;             // 2 B P of the largest batch: each part's room
    float *host_global_mask;       // (world 2 B P): the global batch's masks
    // backend; R = the patch rows: the M masked patches, then padding
    float *mask, *weight, *valid;  // (2 B P), (R) w_m or 0, (R) 1 or 0
    float *inv_masked_total;       // (1)
    int32_t *token_index;          // (R) rows of the (2 B T) token table
    Act *teacher_in;               // (2 B + R, D) class tokens, then the patch rows' tokens
    Act *student_in;               // ((2 + L) B + R, D) global, local class tokens, patches
    float *student_features;       // (2 B, D) fp32 copy of the global class tokens (KoLeo)
    float *dstudent_out;           // ((2 + L) B + R, K)
    Act *dstudent_in;              // ((2 + L) B + R, D)
    float *dfeatures;              // (2 B, D) KoLeo's gradient
    Act *dfeatures_act;            // (2 B, D) the same as activations
    Act *dtokens;                  // (max(2 B T, L B T_local), D)
    float *terms;                  // (DINOV2_TERMS) the loss's terms of the step
} Dinov2State;

static float dinov2_teacher_temp(const Dinov2State *state, long step) {
    if (step >= state->teacher_temp_warmup_steps) return (float)state->teacher_temp_end;
    return (float)(state->teacher_temp_start + (double)step / state->teacher_temp_warmup_steps *
                                                   (state->teacher_temp_end -
                                                    state->teacher_temp_start));
}

static float dinov2_momentum(const Dinov2State *state, long step) {
    return (float)schedule_cosine(step, state->total_steps, state->momentum_start,
                                  state->momentum_end);
}

// This step's masks in a staging buffer, then queued to the device: the
// mask, and for the *rows patch rows their token rows (class token and
// registers skipped), weights and validity: the masked patches, then
// distinct unmasked ones (gathered and scattered like them, weight and
// validity 0). One rank, or captured steps, pad to the bound of the batch
// size (every step the same shapes, so that it can be captured); several
// ranks op by op keep the masked count: a rank's bound covers its crops
// drawing the largest masks, 2 to 3.3 times its expected count. The
// masked count, or -1 past the bound (a bug).
static int upload_masks(Method *method, Dinov2State *state, long step, int batch, int *rows,
                        ErrorMessage *err) {
    const int crops = 2 * batch, patches = state->patches;
    const int world = comm_world_size(method->comm);
    const size_t n = (size_t)crops * patches, cells = state->mask_cells;
    float *mask = staging_take(&state->mask_staging), *weight = mask + cells;
    float *valid = weight + cells, *inv_total = valid + cells;
    int32_t *index = (int32_t *)(inv_total + 1);
    const int masked = dinov2_masks_make_rank(
        &state->masks, 2, batch, world, comm_rank(method->comm), state->seed, step,
        state->host_global_mask, mask, index, weight, &state->masked_total);
    *rows = world > 1 && !method->fixed_shapes ? masked
                                               : dinov2_masks_capacity(&state->masks, crops, world);
    int filled = masked;
    for (size_t cell = 0; cell < n && filled < *rows; cell++)
        if (mask[cell] == 0.0f) index[filled] = (int32_t)cell, weight[filled++] = 0.0f;
    if (masked > *rows || filled < *rows)
        return error_set(err, "internal: %d masked patches for %d padded rows", masked, *rows);
    const int first_patch = state->tokens - patches;
    for (int m = 0; m < *rows; m++) {
        const int crop = index[m] / patches, patch = index[m] % patches;
        index[m] = crop * state->tokens + first_patch + patch;
        valid[m] = m < masked ? 1.0f : 0.0f;
    }
    *inv_total = state->masked_total ? 1.0f / (float)state->masked_total : 0.0f;
    Staging *staging = &state->mask_staging;
    staging_upload(staging, state->mask, mask, n * sizeof *mask);
    staging_upload(staging, state->token_index, index, (size_t)*rows * sizeof *index);
    staging_upload(staging, state->weight, weight, (size_t)*rows * sizeof *weight);
    staging_upload(staging, state->valid, valid, (size_t)*rows * sizeof *valid);
    staging_upload(staging, state->inv_masked_total, inv_total, sizeof *inv_total);
    return masked;
}

// Class tokens (rows, D) of a slot's normalised tokens into out, then (when
// index) the patch rows' tokens after them.
static void collect_tokens(Backend *backend, const Vit *vit, int slot, int rows, int dim,
                           Act *out, int patch_rows, const int32_t *index, Act *patches_out) {
    const Act *tokens = vit_tokens(vit, slot);
    backend->op.token_pool_forward(backend, rows, vit_slot_tokens(vit, slot), dim, 0, 1, tokens,
                                   out);
    if (patch_rows) backend->op.gather_rows(backend, patch_rows, dim, index, tokens, patches_out);
}

static int dinov2_step(Method *method, long step, int batch, ErrorMessage *err) {
    Dinov2State *state = method->state;
    Backend *backend = method->backend;
    const int dim = method->backbone.feature_dim, global = 2 * batch;
    const int local = state->local_views * batch, all_local = method->local_views * batch;
    const size_t out = (size_t)head_spec_output_dim(&state->head.spec);
    int rows;
    const int masked = upload_masks(method, state, step, batch, &rows, err);
    if (masked < 0) return -1;
    const size_t cls_rows = (size_t)global + local;

    // teacher: global views (DINOv31: and their clean renders), no masks, eval mode
    Vit *teacher_vit = &state->teacher.backbone.model.vit;
    if (backbone_forward(&state->teacher.backbone, 0, state->paka ? 2 * global : global,
                         method->global_input, 0, err))
        return -1;
    collect_tokens(backend, teacher_vit, 0, global, dim, state->teacher_in, rows,
                   state->token_index, act_at(backend, state->teacher_in, (size_t)global * dim));
    const float *teacher_out =
        head_forward(&state->teacher.head, global + rows, state->teacher_in, 0, err);
    if (!teacher_out) return -1;

    // student: masked global views, then the local views
    Vit *vit = &method->backbone.model.vit;
    Parameter *token = &state->mask_token.params[0];
    vit_set_patch_mask(vit, 0, state->mask, token->value, token->grad);
    if (backbone_forward(&method->backbone, 0, global, method->global_input, 1, err)) return -1;
    Act *patches_in = act_at(backend, state->student_in, cls_rows * dim);
    collect_tokens(backend, vit, 0, global, dim, state->student_in, rows, state->token_index,
                   patches_in);
    if (all_local && backbone_forward(&method->backbone, 1, all_local, method->local_input, 1,
                                      err))
        return -1;
    if (local)
        collect_tokens(backend, vit, 1, local, dim,
                       act_at(backend, state->student_in, (size_t)global * dim), 0, NULL, NULL);
    backend->op.act_to_float(backend, (size_t)global * dim, state->student_in,
                             state->student_features);
    const float *student_out =
        head_forward(&state->head, (int)cls_rows + rows, state->student_in, 1, err);
    if (!student_out) return -1;

    const float teacher_temp = dinov2_teacher_temp(state, step);
    const Dinov2LossInputs inputs = {
        .batch = batch, .patch_rows = rows, .masked = masked,
        .masked_total = state->masked_total, .teacher_cls = teacher_out,
        .student_cls = student_out, .teacher_patches = teacher_out + (size_t)global * out,
        .student_patches = student_out + cls_rows * out, .patch_weights = state->weight,
        .patch_valid = state->valid, .inv_masked_total = state->inv_masked_total,
        .student_features = state->student_features, .teacher_temp = teacher_temp};
    float *terms = state->terms;
    if (dinov2_loss_forward(state->loss, &inputs, terms, err)) return -1;
    backend->op.copy(backend, method_loss(method), terms + DINOV2_TERM_TOTAL, sizeof(float));
    method_set_scalar(method, 1, teacher_temp);
    // ibot, koleo: adjacent in both
    backend->op.copy(backend, method_scalar(method, 2), terms + DINOV2_TERM_IBOT,
                     2 * sizeof(float));
    if (state->paka &&
        dinov2_paka_forward(state->paka, method, step, batch, vit, teacher_vit, 4, err))
        return -1;

    dinov2_loss_backward(state->loss, state->dstudent_out, state->dstudent_out + cls_rows * out,
                         state->dfeatures);
    method_scale_loss_gradient(method, (cls_rows + (size_t)rows) * out, state->dstudent_out);
    method_scale_loss_gradient(method, (size_t)global * dim, state->dfeatures);
    if (head_backward(&state->head, state->dstudent_out, state->dstudent_in, err)) return -1;
    backend->op.float_to_act(backend, (size_t)global * dim, state->dfeatures,
                             state->dfeatures_act);
    backend->op.act_axpby(backend, (size_t)global * dim, 1.0f, state->dfeatures_act, 1.0f,
                          state->dstudent_in);
    // global: class-token gradients into the token table, the patch rows' added (the
    // padding's are zeros)
    backend->op.token_pool_backward(backend, global, state->tokens, dim, 0, 1,
                                    state->dstudent_in, state->dtokens);
    if (rows)
        backend->op.scatter_add_rows(backend, rows, dim, state->token_index,
                                     act_at(backend, state->dstudent_in, cls_rows * dim),
                                     state->dtokens);
    parameter_set_hold_progress(method->backbone.params, all_local > 0);  // not the last pass
    if (vit_backward_tokens(vit, 0, state->dtokens, err)) return -1;
    parameter_set_hold_progress(method->backbone.params, 0);
    parameter_set_grads_final(&state->mask_token, 0);
    if (all_local) {
        if (local)
            backend->op.token_pool_backward(
                backend, local, state->local_tokens, dim, 0, 1,
                act_at(backend, state->dstudent_in, (size_t)global * dim), state->dtokens);
        if (state->paka &&
            dinov2_paka_backward(state->paka, method,
                                 act_at(backend, state->dtokens,
                                        (size_t)local * state->local_tokens * dim),
                                 err))
            return -1;
        if (vit_backward_tokens(vit, 1, state->dtokens, err)) return -1;
    }
    return 0;
}

Dinov2Paka *dinov2_method_paka(const Method *method) {
    return method->kind == METHOD_DINOV31 && method->state
               ? ((Dinov2State *)method->state)->paka
               : NULL;
}

static void dinov2_after_update(Method *method, long step) {
    Dinov2State *state = method->state;
    const float momentum = dinov2_momentum(state, step + 1);
    ema_teacher_update(&state->teacher, method, momentum);
    if (state->paka) dinov2_paka_after_update(state->paka, method, momentum);
    dinov2_loss_update_centers(state->loss);
    method_set_scalar(method, 0, momentum);
}

static int dinov2_save(Method *method, CheckpointWriter *writer, ErrorMessage *err) {
    Dinov2State *state = method->state;
    const size_t out = (size_t)head_spec_output_dim(&state->head.spec);
    if (ema_teacher_save(&state->teacher, writer, err) ||
        (state->paka && dinov2_paka_save(state->paka, writer, err)) ||
        checkpoint_add_floats(writer, "dinov2.cls_center", method->backend,
                              dinov2_loss_cls_center(state->loss), out, err))
        return -1;
    return checkpoint_add_floats(writer, "dinov2.patch_center", method->backend,
                                 dinov2_loss_patch_center(state->loss), out, err);
}

static int dinov2_load(Method *method, const Checkpoint *checkpoint, ErrorMessage *err) {
    Dinov2State *state = method->state;
    const size_t out = (size_t)head_spec_output_dim(&state->head.spec);
    if (ema_teacher_load(&state->teacher, checkpoint, err) ||
        (state->paka && dinov2_paka_load(state->paka, checkpoint, err)) ||
        checkpoint_get_floats(checkpoint, "dinov2.cls_center", method->backend,
                              dinov2_loss_cls_center(state->loss), out, err))
        return -1;
    return checkpoint_get_floats(checkpoint, "dinov2.patch_center", method->backend,
                                 dinov2_loss_patch_center(state->loss), out, err);
}

static Backbone *dinov2_teacher(Method *method) {
    return &((Dinov2State *)method->state)->teacher.backbone;
}

static void dinov2_destroy(Method *method) {
    Dinov2State *state = method->state;
    if (!state) return;
    Backend *backend = method->backend;
    ema_teacher_free(&state->teacher);
    dinov2_paka_free(state->paka);
    head_free(&state->head);
    parameter_set_free(&state->mask_token);
    for (int g = 0; g < DINOV2_GROUPS; g++) dinov2_group_tables_free(&state->tables[g]);
    if (state->loss) dinov2_loss_destroy(state->loss);
    void *device[] = {state->mask,          state->weight,           state->token_index,
                      state->valid,         state->inv_masked_total,
                      state->teacher_in,    state->student_in,       state->student_features,
                      state->dstudent_out,  state->dstudent_in,      state->dfeatures,
                      state->dfeatures_act, state->dtokens,          state->terms};
    for (size_t i = 0; i < sizeof device / sizeof device[0]; i++)
        if (device[i]) backend->op.free(backend, device[i]);
    staging_free(&state->mask_staging);
    free(state->host_global_mask);
    free(state);
    method->state = NULL;
}

static const MethodOps dinov2_ops = {
    .step = dinov2_step,
    .after_update = dinov2_after_update,
    .save = dinov2_save,
    .load = dinov2_load,
    .teacher = dinov2_teacher,
    .destroy = dinov2_destroy,
};

// The method args with LightlyTrain's DINOv2Args defaults.
typedef struct Dinov2Args {
    double hidden_dim, bottleneck_dim, output_dim, student_freeze_last_layer_steps;
    double student_freeze_backbone_steps, layerwise_decay, patch_embed_lr_multiplier;
    double dino_loss_weight, ibot_loss_weight, koleo_loss_weight, center_momentum;
    double momentum_start, momentum_end, student_temp, teacher_temp_start, teacher_temp_end;
    double teacher_temp_warmup_steps, mask_ratio_min, mask_ratio_max, mask_probability;
    double paka_weight, paka_start_step, paka_max_tokens;  // DINOv31's DINOv31Args
    int norm_last_layer;  // not a DINOv2Args field: LightlyTrain's DINOv2 trains weight_g
    Dinov2Centering centering;
} Dinov2Args;

// mask_ratio_max: a mask covers at most half the patches. Besides the
// ranges: mask_ratio_min <= mask_ratio_max and teacher_temp_start <=
// teacher_temp_end (LightlyTrain's linear_warmup_schedule), checked below.
#define DINOV2_ARG_SPECS \
    METHOD_ARG_DIM("hidden_dim"), METHOD_ARG_DIM("bottleneck_dim"), METHOD_ARG_DIM("output_dim"), \
    METHOD_ARG_STEPS("student_freeze_last_layer_steps"), \
    METHOD_ARG_STEPS("student_freeze_backbone_steps"), \
    METHOD_ARG_FRACTION("layerwise_decay"), \
    {"patch_embed_lr_multiplier", METHOD_ARG_NUMBER, 0, 100, 0, NULL}, \
    METHOD_ARG_FLAG("norm_last_layer"), \
    METHOD_ARG_WEIGHT("dino_loss_weight"), METHOD_ARG_WEIGHT("ibot_loss_weight"), \
    METHOD_ARG_WEIGHT("koleo_loss_weight"), \
    {"center_method", METHOD_ARG_CHOICE, 0, 0, 0, "softmax|sinkhorn_knopp"}, \
    METHOD_ARG_FRACTION("center_momentum"), METHOD_ARG_FRACTION("momentum_start"), \
    METHOD_ARG_FRACTION("momentum_end"), METHOD_ARG_TEMPERATURE("student_temp"), \
    METHOD_ARG_TEMPERATURE("teacher_temp_start"), METHOD_ARG_TEMPERATURE("teacher_temp_end"), \
    METHOD_ARG_STEPS("teacher_temp_warmup_steps"), \
    {"mask_ratio_min", METHOD_ARG_NUMBER, 0, 0.5, 0, NULL}, \
    {"mask_ratio_max", METHOD_ARG_NUMBER, 0, 0.5, 0, NULL}, \
    METHOD_ARG_FRACTION("mask_probability")

const MethodArgSpec dinov2_arg_specs[] = {DINOV2_ARG_SPECS, METHOD_ARG_END};

// DINOv31: DINOv2's and PaKA's (paka_num_local is read when the views are
// made: train_setup.c).
const MethodArgSpec dinov31_arg_specs[] = {
    DINOV2_ARG_SPECS,
    METHOD_ARG_WEIGHT("paka_weight"),
    METHOD_ARG_STEPS("paka_start_step"),
    {"paka_num_local", METHOD_ARG_INTEGER, 1, AUGMENT_MAX_VIEWS - 4, 0, NULL},
    {"paka_max_tokens", METHOD_ARG_INTEGER, 2, 1 << 20, 0, NULL},
    METHOD_ARG_END,
};

static int parse_args(const MethodSetup *setup, Dinov2Args *a, ErrorMessage *err) {
    const struct { const char *key; double fallback; double *value; } numbers[] = {
        {"hidden_dim", 2048, &a->hidden_dim},
        {"bottleneck_dim", 256, &a->bottleneck_dim},
        {"output_dim", 65536, &a->output_dim},
        {"student_freeze_last_layer_steps", 1250, &a->student_freeze_last_layer_steps},
        {"student_freeze_backbone_steps", 0, &a->student_freeze_backbone_steps},
        {"layerwise_decay", 0.9, &a->layerwise_decay},
        {"patch_embed_lr_multiplier", 0.2, &a->patch_embed_lr_multiplier},
        {"dino_loss_weight", 1.0, &a->dino_loss_weight},
        {"ibot_loss_weight", 1.0, &a->ibot_loss_weight},
        {"koleo_loss_weight", 0.1, &a->koleo_loss_weight},
        {"center_momentum", 0.9, &a->center_momentum},
        {"momentum_start", 0.992, &a->momentum_start},
        {"momentum_end", 1.0, &a->momentum_end},
        {"student_temp", 0.1, &a->student_temp},
        {"teacher_temp_start", 0.04, &a->teacher_temp_start},
        {"teacher_temp_end", 0.07, &a->teacher_temp_end},
        {"teacher_temp_warmup_steps", 37500, &a->teacher_temp_warmup_steps},
        {"mask_ratio_min", 0.1, &a->mask_ratio_min},
        {"mask_ratio_max", 0.5, &a->mask_ratio_max},
        {"mask_probability", 0.5, &a->mask_probability},
        {"paka_weight", 1.0, &a->paka_weight},
        {"paka_start_step", 0, &a->paka_start_step},
        {"paka_max_tokens", 512, &a->paka_max_tokens},
    };
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++)
        if (method_arg_double(setup, numbers[i].key, numbers[i].fallback, numbers[i].value, err))
            return -1;
    if (method_arg_bool(setup, "norm_last_layer", 0, &a->norm_last_layer, err)) return -1;
    const char *center = "softmax";
    method_arg_string(setup, "center_method", &center);
    if (dinov2_centering_parse(center, &a->centering, err)) return error_prefix(err, "--method-arg");
    if (a->teacher_temp_end < a->teacher_temp_start)
        return error_set(err, "--method-arg: need teacher_temp_start <= teacher_temp_end "
                              "(LightlyTrain's linear_warmup_schedule), got %g and %g",
                         a->teacher_temp_start, a->teacher_temp_end);
    if (a->mask_ratio_min > a->mask_ratio_max)
        return error_set(err, "--method-arg: need mask_ratio_min <= mask_ratio_max, got %g "
                              "and %g", a->mask_ratio_min, a->mask_ratio_max);
    return 0;
}

static int allocate_buffers(Method *method, Dinov2State *state, int batch, int out, int dim,
                            ErrorMessage *err) {
    Backend *backend = method->backend;
    const size_t crops = 2 * (size_t)batch, local = (size_t)state->local_views * batch;
    const size_t all_local = (size_t)method->local_views * batch;
    const size_t masked = (size_t)(state->max_masked ? state->max_masked : 1);
    const size_t cells = crops * state->patches, rows = crops + local + masked;
    size_t token_rows = crops * state->tokens;
    if (all_local * state->local_tokens > token_rows) token_rows = all_local * state->local_tokens;
    state->mask_cells = cells;
    if (staging_init(&state->mask_staging, backend,
                     cells * (3 * sizeof(float) + sizeof(int32_t)) + sizeof(float), err))
        return error_prefix(err, "iBOT masks");
    state->host_global_mask =
        malloc((size_t)comm_world_size(method->comm) * cells * sizeof(float));
    state->mask = backend->op.alloc(backend, cells * sizeof(float));
    state->weight = backend->op.alloc(backend, masked * sizeof(float));
    state->valid = backend->op.alloc(backend, masked * sizeof(float));
    state->inv_masked_total = backend->op.alloc(backend, sizeof(float));
    state->token_index = backend->op.alloc(backend, masked * sizeof(int32_t));
    state->teacher_in = backend->op.alloc(backend, act_bytes(backend, (crops + masked) * dim));
    state->student_in = backend->op.alloc(backend, act_bytes(backend, rows * dim));
    state->student_features = backend->op.alloc(backend, crops * dim * sizeof(float));
    state->dstudent_out = backend->op.alloc(backend, rows * (size_t)out * sizeof(float));
    state->dstudent_in = backend->op.alloc(backend, act_bytes(backend, rows * dim));
    state->dfeatures = backend->op.alloc(backend, crops * dim * sizeof(float));
    state->dfeatures_act = backend->op.alloc(backend, act_bytes(backend, crops * dim));
    state->dtokens = backend->op.alloc(backend, act_bytes(backend, token_rows * dim));
    state->terms = backend->op.alloc(backend, DINOV2_TERMS * sizeof(float));
    if (!state->terms ||
        !state->host_global_mask || !state->mask ||
        !state->weight || !state->valid || !state->inv_masked_total || !state->token_index ||
        !state->teacher_in || !state->student_in ||
        !state->student_features || !state->dstudent_out || !state->dstudent_in ||
        !state->dfeatures || !state->dfeatures_act || !state->dtokens)
        return error_set(err, "out of memory for %zu head rows of %d outputs", rows, out);
    return 0;
}

// DINOv2's mask token (1, D), PyTorch's zeros init as DINOv2's
// DinoVisionTransformer; a weight (weight decay applies, as LightlyTrain's
// param groups decay everything but biases, norms and LayerScale).
static int create_mask_token(Method *method, Dinov2State *state, int dim, ErrorMessage *err) {
    const int shape[2] = {1, dim};
    parameter_set_init(&state->mask_token, method->backend, 1);
    if (parameter_declare(&state->mask_token, "mask_token", PARAM_WEIGHT, 2, shape, NULL, err) < 0 ||
        parameter_set_allocate(&state->mask_token, err))
        return -1;
    method->backend->op.fill(method->backend, state->mask_token.params[0].value, 0.0f,
                             (size_t)dim);
    return 0;
}

// LightlyTrain's parameter groups on the method's groups: every parameter's
// lr multiplier and weight decay (dinov2_param_groups.h); backbone and mask
// token ("head" not in LightlyTrain's group name) frozen for
// student_freeze_backbone_steps, the last layer for
// student_freeze_last_layer_steps, both by lr 0.
static int configure_groups(Method *method, Dinov2State *state, const Dinov2Args *a,
                            ErrorMessage *err) {
    if (method->group_count > DINOV2_GROUPS) return error_set(err, "too many parameter groups");
    const Dinov2LrRules rules = {.depth = method->backbone.spec.vit.depth,
                                 .layerwise_decay = a->layerwise_decay,
                                 .patch_embed_lr_multiplier = a->patch_embed_lr_multiplier};
    for (int g = 0; g < method->group_count; g++) {
        MethodGroup *group = &method->groups[g];
        const int backbone =
            strcmp(group->name, "backbone") == 0 || strcmp(group->name, "mask_token") == 0;
        if (dinov2_group_tables_make(&state->tables[g], group->params, backbone, &rules, err))
            return -1;
        group->lr_scales = state->tables[g].lr_scales;
        group->weight_decays = state->tables[g].weight_decays;
        group->frozen_at_zero_lr = 1;
        if (backbone) group->frozen_steps = (long)a->student_freeze_backbone_steps;
    }
    return 0;
}

int dinov2_create(Method *method, const MethodSetup *setup, ErrorMessage *err) {
    if (setup->backbone.kind != BACKBONE_VIT)
        return error_set(err, "needs a ViT (--model vit_t16, vit_s14, ...): DINOv2 masks patch "
                              "tokens");
    if (method->global_views - method->teacher_views != 2)
        return error_set(err, "needs exactly 2 global views, got %d",
                         method->global_views - method->teacher_views);
    Dinov2Args a;
    if (parse_args(setup, &a, err)) return -1;
    Dinov2State *state = calloc(1, sizeof *state);
    if (!state) return error_set(err, "out of memory");
    method->state = state;
    method->ops = &dinov2_ops;
    method->export_part = "teacher_backbone";
    // DINOv31's PaKA views are not DINOv2's local views
    state->local_views = method->local_views - dinov2_paka_view_count(&method->views);
    const VitConfig *vit = &setup->backbone.vit;
    const int dim = method->backbone.feature_dim, batch = setup->batch;
    const int grid = method->global_size / vit->patch_size;
    state->patches = grid * grid;
    state->tokens = 1 + vit->register_tokens + state->patches;
    const int local_grid = method->local_views ? method->local_size / vit->patch_size : 0;
    state->local_tokens = 1 + vit->register_tokens + local_grid * local_grid;
    state->masks = (Dinov2MaskConfig){.grid = grid, .ratio_min = (float)a.mask_ratio_min,
                                      .ratio_max = (float)a.mask_ratio_max,
                                      .probability = (float)a.mask_probability};
    const int world = comm_world_size(method->comm);
    if (2 * batch * world > DINOV2_MASKS_MAX_CROPS || state->patches > DINOV2_MASKS_MAX_PATCHES)
        return error_set(err, "masks for at most %d global crops of %d patches (got %d of %d)",
                         DINOV2_MASKS_MAX_CROPS, DINOV2_MASKS_MAX_PATCHES, 2 * batch * world,
                         state->patches);
    state->max_masked = dinov2_masks_capacity(&state->masks, 2 * batch, world);
    state->teacher_temp_start = a.teacher_temp_start;
    state->teacher_temp_end = a.teacher_temp_end;
    state->teacher_temp_warmup_steps = (long)a.teacher_temp_warmup_steps;
    state->momentum_start = a.momentum_start;
    state->momentum_end = a.momentum_end;
    state->total_steps = setup->total_steps;
    state->seed = setup->seed;
    const int out = (int)a.output_dim;
    const int student_rows = (2 + state->local_views) * batch + state->max_masked;
    HeadSpec head = head_spec_dino(dim, (int)a.hidden_dim, (int)a.bottleneck_dim, out);
    head.weight_g_trained = !a.norm_last_layer;
    if (head_create(&state->head, method->backend, &head, "projection_head", student_rows,
                    setup->seed, err) ||
        ema_teacher_create_rows(&state->teacher, method, &state->head, "projection_head",
                                2 * batch + (state->max_masked ? state->max_masked : 1),
                                setup->seed, err) ||
        create_mask_token(method, state, dim, err) ||
        allocate_buffers(method, state, batch, out, dim, err))
        return -1;
    const Dinov2LossConfig loss = {
        .max_batch = batch, .local_views = state->local_views, .max_masked = state->max_masked,
        .out_dim = out, .feature_dim = dim, .student_temp = (float)a.student_temp,
        .center_momentum = (float)a.center_momentum, .centering = a.centering,
        .dino_weight = (float)a.dino_loss_weight, .ibot_weight = (float)a.ibot_loss_weight,
        .koleo_weight = (float)a.koleo_loss_weight};
    state->loss = dinov2_loss_create(method->backend, &loss, method->comm, err);
    if (!state->loss) return -1;
    method->scalar_count = 4;
    method->scalar_tags[0] = "schedule/momentum";
    method_set_scalar(method, 0, dinov2_momentum(state, 0));
    method->scalar_tags[1] = "schedule/teacher_temp";
    method_set_scalar(method, 1, dinov2_teacher_temp(state, 0));
    method->scalar_tags[2] = "train_loss/ibot_loss";
    method->scalar_tags[3] = "train_loss/koleo_loss";
    if (method_add_group(method, "projection_head", &state->head.params, &state->head.buffers,
                         &state->head.num_batches_tracked, 0, err) ||
        method_add_group(method, "mask_token", &state->mask_token, NULL, NULL, 0, err) ||
        method_add_group(method, "last_layer", &state->head.last_layer, NULL, NULL,
                         (long)a.student_freeze_last_layer_steps, err))
        return -1;
    if (method->kind == METHOD_DINOV31) {
        const Dinov2PakaArgs paka = {.weight = a.paka_weight,
                                     .start_step = (long)a.paka_start_step,
                                     .max_tokens = (int)a.paka_max_tokens};
        method->geometry = calloc((size_t)method->views.count * batch, sizeof *method->geometry);
        if (!method->geometry) return error_set(err, "out of memory");
        state->paka = dinov2_paka_create(method, vit, &paka, setup->seed, err);
        if (!state->paka) return -1;
        method->scalar_count = 5;
        method->scalar_tags[4] = "train_loss/paka_loss";
    }
    if (configure_groups(method, state, &a, err)) return -1;
    // LightlyTrain skips the PaKA head before paka_start_step: not stepped at lr 0
    if (state->paka) method->groups[method->group_count - 1].frozen_at_zero_lr = 0;
    return 0;
}
