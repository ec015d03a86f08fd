// ConvNeXt forward and backward: the stem, the downsamplings, the blocks
// and the features, each backward written out in reverse order of its
// forward (see convnext.h). Buffers come from the slot's activation arena
// and the model's gradient scratch; nothing is allocated here.
#include "nn/convnext.h"
#include "util/rng.h"

// Drop-path draws: a stream per block, keyed by the training-forward count
// and the sample, so they do not depend on threads or batch order.
#define CONVNEXT_DROP_PATH_STREAM 0x43445000u

// The blocks of a forward in order, with their stage.
#define FOR_EACH_BLOCK(model, s, b) \
    for (int s = 0; s < CONVNEXT_STAGES; s++) for (int b = 0; b < (model)->stages[s].depth; b++)

static int find_plans(Convnext *model, int slot_index, int batch, const ConvnextPlans **plans,
                      ErrorMessage *err) {
    if (slot_index < 0 || slot_index >= model->slot_count)
        return error_set(err, "convnext: no input slot %d (%d slots)", slot_index,
                         model->slot_count);
    const ConvnextSlot *slot = &model->slots[slot_index];
    for (int i = 0; i < slot->plans_count; i++)
        if (slot->plans[i].batch == batch) *plans = &slot->plans[i];
    if (!*plans)
        return error_set(err, "convnext: slot %d (batch <= %d, %d px) has no plans for batch %d "
                              "(see convnext_prepare_batch)", slot_index, slot->max.batch,
                         slot->max.resolution, batch);
    return 0;
}

// Rows (B H W) of stage s's blocks in a forward of plans' batch.
static size_t stage_rows(const ConvnextPlans *plans, int s) {
    const ConvShape *shape = &plans->conv_shapes[s];
    return (size_t)plans->batch * shape->out_height * shape->out_width;
}

// The sample scales of every block's residual branch for this training
// forward: 0 (dropped) or 1 / keep probability, drawn into one staging
// buffer and queued into the blocks' drop_scale (B) buffers. Nothing when
// drop path is off (evaluation, or a rate of 0).
static void drop_path_upload(Convnext *model, const ConvnextSlot *slot, int batch, int training) {
    if (!training || model->config.drop_path_rate <= 0.0f) return;
    float *host = staging_take(&model->drop_staging);
    int index = 0;
    FOR_EACH_BLOCK(model, s, b) {
        const float rate = model->stages[s].blocks[b].drop_path;
        const int block = index++;
        float *scale = host + (size_t)block * batch;
        if (rate <= 0.0f) continue;
        const float keep = 1.0f - rate;
        for (int n = 0; n < batch; n++) {
            Rng rng = rng_make(model->seed, (uint32_t)model->training_forwards, (uint64_t)n,
                               CONVNEXT_DROP_PATH_STREAM + (uint32_t)block);
            scale[n] = rng_uniform(&rng) < keep ? 1.0f / keep : 0.0f;
        }
        staging_upload(&model->drop_staging, slot->stages[s].blocks[b].drop_scale, scale,
                       (size_t)batch * sizeof *scale);
    }
}

static const float *drop_scales(const ConvnextBlock *block, const ConvnextBlockActivations *saved,
                                int drop_active) {
    return drop_active && block->drop_path > 0.0f ? saved->drop_scale : NULL;
}

// ---- forward -------------------------------------------------------------------------------

static void planned_forward(Backend *backend, const LinearPlan *plan, const Linear *linear,
                            const Act *x, Act *y) {
    backend->op.linear_planned_forward(backend, plan, x, linear->weight_compute,
                                       linear->has_bias ? linear->bias : NULL, y);
}

static void block_forward(Convnext *model, const ConvnextPlans *plans, int s, int b,
                          const ConvnextSlot *slot, int drop_active, const Act *x) {
    Backend *backend = model->backend;
    const ConvnextBlock *block = &model->stages[s].blocks[b];
    ConvnextBlockActivations *saved = &slot->stages[s].blocks[b];
    const size_t rows = stage_rows(plans, s);
    const int dim = model->stages[s].dim;
    const ConvShape *shape = &plans->conv_shapes[s];

    backend->op.depthwise_forward(backend, plans->dw_plans[s], x, block->dw_weight,
                                  block->dw_bias, saved->dw_out);
    layernorm_forward(backend, &block->norm, rows, saved->dw_out, saved->norm_out,
                      saved->norm_mean, saved->norm_inv_std);
    // fc1 and GELU (fused in a frozen model's plan: it keeps no pre-activation), fc2
    if (model->frozen) {
        planned_forward(backend, plans->fc1_plans[s], &block->fc1, saved->norm_out,
                        saved->act_out);
    } else {
        planned_forward(backend, plans->fc1_plans[s], &block->fc1, saved->norm_out,
                        saved->fc1_out);
        backend->op.gelu_forward(backend, rows * block->fc1.out_features, saved->fc1_out,
                                 saved->act_out);
    }
    planned_forward(backend, plans->fc2_plans[s], &block->fc2, saved->act_out, saved->fc2_out);
    backend->op.residual_scale_add_forward(
        backend, plans->batch, (size_t)shape->out_height * shape->out_width, dim, x,
        saved->fc2_out, block->gamma, drop_scales(block, saved, drop_active), saved->out);
}

// The stem (s = 0: conv, bias, norm) or a downsampling (norm, conv, bias)
// of x; returns the stage's input.
static const Act *entry_forward(Convnext *model, const ConvnextPlans *plans, int s,
                                const ConvnextSlot *slot, const Act *x) {
    Backend *backend = model->backend;
    const ConvnextStage *stage = &model->stages[s];
    const ConvnextStageActivations *saved = &slot->stages[s];
    const ConvShape *shape = &plans->conv_shapes[s];
    const size_t in_rows = (size_t)plans->batch * shape->in_height * shape->in_width;
    const size_t out_rows = stage_rows(plans, s);
    if (s > 0) {
        layernorm_forward(backend, &stage->norm, in_rows, x, saved->norm_out, saved->norm_mean,
                          saved->norm_inv_std);
        x = saved->norm_out;
    }
    conv2d_forward(backend, &stage->conv, plans->conv_plans[s], x, saved->conv_out);
    backend->op.bias_add(backend, out_rows, stage->dim, stage->conv_bias, saved->conv_out);
    if (s > 0) return saved->conv_out;
    layernorm_forward(backend, &stage->norm, out_rows, saved->conv_out, saved->norm_out,
                      saved->norm_mean, saved->norm_inv_std);
    return saved->norm_out;
}

static const Act *last_stage_output(const Convnext *model, const ConvnextSlot *slot) {
    const int last = CONVNEXT_STAGES - 1;
    return slot->stages[last].blocks[model->stages[last].depth - 1].out;
}

int convnext_forward(Convnext *model, int slot_index, int batch, const Act *input, int training,
                     ErrorMessage *err) {
    const ConvnextPlans *plans = NULL;
    if (find_plans(model, slot_index, batch, &plans, err)) return -1;
    ConvnextSlot *slot = &model->slots[slot_index];
    Backend *backend = model->backend;
    parameter_set_refresh_compute(&model->params);
    drop_path_upload(model, slot, batch, training);
    const int drop_active = training && model->config.drop_path_rate > 0.0f;
    const Act *x = input;
    for (int s = 0; s < CONVNEXT_STAGES; s++) {
        x = entry_forward(model, plans, s, slot, x);
        for (int b = 0; b < model->stages[s].depth; b++) {
            block_forward(model, plans, s, b, slot, drop_active, x);
            x = slot->stages[s].blocks[b].out;
        }
    }
    const int last = CONVNEXT_STAGES - 1, dim = model->feature_dim;
    const int pixels = plans->conv_shapes[last].out_height * plans->conv_shapes[last].out_width;
    if (slot->head_out) {  // DINOv3: the final norm on every position, then the mean
        layernorm_forward(backend, &model->head_norm, (size_t)batch * pixels, x, slot->head_out,
                          slot->head_mean, slot->head_inv_std);
        x = slot->head_out;
    }
    backend->op.avgpool_forward(backend, batch, pixels, dim, x, slot->features);
    if (training) model->training_forwards++;
    slot->last_plans = plans;
    slot->last_input = input;
    slot->backward_ready = training && !model->frozen;
    slot->drop_path_active = drop_active;
    return 0;
}

void convnext_set_draw_key(Convnext *model, uint64_t key) {
    model->training_forwards = (int64_t)(key * CONVNEXT_FORWARDS_PER_KEY);
}

const Act *convnext_features(const Convnext *model, int slot) {
    return model->slots[slot].features;
}

void convnext_feature_map_size(const Convnext *model, int slot, int *height, int *width) {
    const ConvnextStageActivations *last = &model->slots[slot].stages[CONVNEXT_STAGES - 1];
    *height = last->height;
    *width = last->width;
}

const Act *convnext_feature_map(const Convnext *model, int slot_index, int *height, int *width) {
    const ConvnextSlot *slot = &model->slots[slot_index];
    convnext_feature_map_size(model, slot_index, height, width);
    return slot->head_out ? slot->head_out : last_stage_output(model, slot);
}

const Act *convnext_stage_output(const Convnext *model, int slot_index, int stage, int *height,
                                 int *width) {
    const ConvnextSlot *slot = &model->slots[slot_index];
    *height = slot->stages[stage].height;
    *width = slot->stages[stage].width;
    return slot->stages[stage].blocks[model->stages[stage].depth - 1].out;
}

// ---- backward ------------------------------------------------------------------------------

// Gradient buffers of one backward: three (B H W C) and one (B H W 4 C) of
// the largest stage.
typedef struct ConvnextGradients {
    Act *residual;  // dL/d(the residual stream) flowing down the blocks
    Act *branch, *other, *wide;
} ConvnextGradients;

static ConvnextGradients gradient_buffers(const Convnext *model) {
    const Backend *backend = model->backend;
    const size_t step = model->scratch_elements;
    Act *base = model->scratch;
    return (ConvnextGradients){.residual = base, .branch = act_at(backend, base, step),
                               .other = act_at(backend, base, 2 * step),
                               .wide = act_at(backend, base, 3 * step)};
}

// g->residual: dL/d(block output) in, dL/d(block input x) out.
static void block_backward(Convnext *model, const ConvnextPlans *plans, int s, int b,
                           const ConvnextSlot *slot, const Act *x, const ConvnextGradients *g) {
    Backend *backend = model->backend;
    const ConvnextBlock *block = &model->stages[s].blocks[b];
    const ConvnextBlockActivations *saved = &slot->stages[s].blocks[b];
    const size_t rows = stage_rows(plans, s);
    const int dim = model->stages[s].dim;
    const ConvShape *shape = &plans->conv_shapes[s];

    // out = x + gamma * drop * fc2(gelu(fc1(norm(dwconv(x)))))
    backend->op.residual_scale_add_backward(
        backend, plans->batch, (size_t)shape->out_height * shape->out_width, dim, saved->fc2_out,
        g->residual, block->gamma, drop_scales(block, saved, slot->drop_path_active), g->branch,
        block->gamma_grad);
    linear_backward(backend, &block->fc2, (int)rows, saved->act_out, g->branch, g->wide);
    backend->op.gelu_backward(backend, rows * block->fc1.out_features, saved->fc1_out, g->wide,
                              g->wide);
    linear_backward(backend, &block->fc1, (int)rows, saved->norm_out, g->wide, g->branch);
    layernorm_backward(backend, &block->norm, rows, saved->dw_out, g->branch, saved->norm_mean,
                       saved->norm_inv_std, g->other, 0);
    backend->op.depthwise_backward_weights(backend, plans->dw_plans[s], x, g->other,
                                           block->dw_weight_grad, block->dw_bias_grad);
    backend->op.depthwise_backward_data(backend, plans->dw_plans[s], g->other, block->dw_weight,
                                        g->branch);
    backend->op.act_axpby(backend, rows * dim, 1.0f, g->branch, 1.0f, g->residual);  // dL/dx
}

// g->residual: dL/d(stage s's input) in; out (s > 0): dL/d(stage s - 1's
// output), x_prev that output. The stem takes the image (no gradient).
static void entry_backward(Convnext *model, const ConvnextPlans *plans, int s,
                           const ConvnextSlot *slot, const Act *x_prev,
                           const ConvnextGradients *g) {
    Backend *backend = model->backend;
    const ConvnextStage *stage = &model->stages[s];
    const ConvnextStageActivations *saved = &slot->stages[s];
    const ConvShape *shape = &plans->conv_shapes[s];
    const size_t in_rows = (size_t)plans->batch * shape->in_height * shape->in_width;
    const size_t out_rows = stage_rows(plans, s);
    if (s > 0) {  // stage input = conv(norm(x_prev)) + bias
        backend->op.bias_backward(backend, out_rows, stage->dim, g->residual,
                                  stage->conv_bias_grad);
        conv2d_backward(backend, &stage->conv, plans->conv_plans[s], saved->norm_out, g->residual,
                        g->branch);
        layernorm_backward(backend, &stage->norm, in_rows, x_prev, g->branch, saved->norm_mean,
                           saved->norm_inv_std, g->residual, 0);
        return;
    }
    // stage input = norm(conv(image) + bias)
    layernorm_backward(backend, &stage->norm, out_rows, saved->conv_out, g->residual,
                       saved->norm_mean, saved->norm_inv_std, g->branch, 0);
    backend->op.bias_backward(backend, out_rows, stage->dim, g->branch, stage->conv_bias_grad);
    conv2d_backward(backend, &stage->conv, plans->conv_plans[s], slot->last_input, g->branch,
                    NULL);
}

static int check_backward(const Convnext *model, int slot_index, ErrorMessage *err) {
    if (slot_index < 0 || slot_index >= model->slot_count)
        return error_set(err, "convnext: no input slot %d (%d slots)", slot_index,
                         model->slot_count);
    if (model->frozen)
        return error_set(err, "convnext: a frozen model (a teacher) keeps nothing for backward");
    if (!model->slots[slot_index].backward_ready)
        return error_set(err, "convnext: backward on slot %d without a training forward before "
                              "it", slot_index);
    return 0;
}

// The input of block b of stage s: the previous block's output or the stage's input.
static const Act *block_input(const Convnext *model, const ConvnextSlot *slot, int s, int b) {
    if (b > 0) return slot->stages[s].blocks[b - 1].out;
    return s == 0 ? slot->stages[0].norm_out : slot->stages[s].conv_out;
}

int convnext_backward_map(Convnext *model, int slot_index, const Act *dfeatures, const Act *dmap,
                          ErrorMessage *err) {
    if (check_backward(model, slot_index, err)) return -1;
    if (!dfeatures && !dmap) return error_set(err, "convnext: backward without a gradient");
    ConvnextSlot *slot = &model->slots[slot_index];
    Backend *backend = model->backend;
    const ConvnextPlans *plans = slot->last_plans;
    const int last = CONVNEXT_STAGES - 1, batch = plans->batch, dim = model->feature_dim;
    const int pixels = plans->conv_shapes[last].out_height * plans->conv_shapes[last].out_width;
    const size_t elements = (size_t)batch * pixels * dim;
    const ConvnextGradients g = gradient_buffers(model);
    // dL/d(the map): the pool's gradient plus dmap
    Act *dmap_total = slot->head_out ? g.other : g.residual;
    if (dfeatures)
        backend->op.avgpool_backward(backend, batch, pixels, dim, dfeatures, dmap_total);
    else
        backend->op.zero(backend, dmap_total, act_bytes(backend, elements));
    if (dmap) backend->op.act_axpby(backend, elements, 1.0f, dmap, 1.0f, dmap_total);
    if (slot->head_out)
        layernorm_backward(backend, &model->head_norm, (size_t)batch * pixels,
                           last_stage_output(model, slot), g.other, slot->head_mean,
                           slot->head_inv_std, g.residual, 0);
    for (int s = last; s >= 0; s--) {
        for (int b = model->stages[s].depth - 1; b >= 0; b--) {
            block_backward(model, plans, s, b, slot, block_input(model, slot, s, b), &g);
            parameter_grads_final_from(&model->params, model->stages[s].blocks[b].dw_weight_index);
        }
        const Act *x_prev = s > 0 ? slot->stages[s - 1].blocks[model->stages[s - 1].depth - 1].out
                                  : NULL;
        entry_backward(model, plans, s, slot, x_prev, &g);
        parameter_grads_final_from(&model->params, s > 0 ? model->stages[s].norm.weight_index : 0);
    }
    return 0;
}
