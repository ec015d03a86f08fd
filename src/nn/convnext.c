// ConvNeXt construction: parameter declaration in the configured naming,
// plans and activation arenas per input slot, initialisation (see
// convnext.h). Names and presets: convnext_names.c; forward and backward:
// convnext_blocks.c; weight files: convnext_weights.c.
#include "nn/convnext.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/activations.h"
#include "nn/convnext_names.h"

#define CONVNEXT_STEM_KERNEL 4
#define CONVNEXT_DOWN_KERNEL 2
#define CONVNEXT_MLP_RATIO 4
#define CONVNEXT_INIT_STD 0.02f  // trunc_normal_(std=0.02): cut at +-2, so a plain normal

// ---- structure and parameters ------------------------------------------------------------

typedef struct Declarer {
    Convnext *model;
    ErrorMessage *err;
} Declarer;

static ConvnextTensorRole role_of(ConvnextRole role, int stage, int block, const char *leaf) {
    ConvnextTensorRole r = {.role = role, .stage = stage, .block = block};
    snprintf(r.leaf, sizeof r.leaf, "%s", leaf);
    return r;
}

// Records what parameter `index` is; returns index (or -1 passed through).
static int remember(Convnext *model, int index, ConvnextTensorRole role) {
    if (index >= 0) model->roles[index] = role;
    return index;
}

static void module(const Convnext *model, ConvnextRole role, int stage, int block, char *out,
                   size_t size) {
    const ConvnextTensorRole r = role_of(role, stage, block, "");
    convnext_tensor_name(model->config.naming, &r, out, size);
}

static int declare_norm(Convnext *model, LayerNorm *norm, ConvnextRole role, int stage,
                        int block, int channels, ErrorMessage *err) {
    char name[PARAM_MAX_NAME];
    module(model, role, stage, block, name, sizeof name);
    if (layernorm_declare(norm, &model->params, name, channels, model->config.norm_eps, err))
        return -1;
    remember(model, norm->weight_index, role_of(role, stage, block, "weight"));
    remember(model, norm->bias_index, role_of(role, stage, block, "bias"));
    return 0;
}

static int declare_bias(Convnext *model, ConvnextRole role, int stage, int block, int channels,
                        ErrorMessage *err) {
    const ConvnextTensorRole r = role_of(role, stage, block, "bias");
    char name[PARAM_MAX_NAME];
    convnext_tensor_name(model->config.naming, &r, name, sizeof name);
    return remember(model, parameter_declare(&model->params, name, PARAM_BIAS, 1, &channels,
                                             NULL, err),
                    r);
}

// The stem (stage 0: conv then norm) or a downsampling (norm then conv).
static int declare_entry(Convnext *model, ConvnextStage *stage, int s, ErrorMessage *err) {
    const ConvnextConfig *c = &model->config;
    const int in = s == 0 ? (c->in_channels > 0 ? c->in_channels : 3) : c->dims[s - 1];
    const int kernel = s == 0 ? CONVNEXT_STEM_KERNEL : CONVNEXT_DOWN_KERNEL;
    const ConvnextRole conv_role = s == 0 ? CONVNEXT_STEM_CONV : CONVNEXT_DOWN_CONV;
    const ConvnextRole norm_role = s == 0 ? CONVNEXT_STEM_NORM : CONVNEXT_DOWN_NORM;
    if (s > 0 && declare_norm(model, &stage->norm, norm_role, s, 0, in, err)) return -1;
    const ConvnextTensorRole weight = role_of(conv_role, s, 0, "weight");
    char name[PARAM_MAX_NAME];
    convnext_tensor_name(c->naming, &weight, name, sizeof name);
    if (conv2d_declare(&stage->conv, &model->params, name, in, c->dims[s], kernel, kernel, 0, err))
        return -1;
    remember(model, stage->conv.weight_index, weight);
    stage->conv_bias_index = declare_bias(model, conv_role, s, 0, c->dims[s], err);
    if (stage->conv_bias_index < 0) return -1;
    return s == 0 ? declare_norm(model, &stage->norm, norm_role, s, 0, c->dims[s], err) : 0;
}

static int declare_block(Convnext *model, ConvnextBlock *block, int s, int b, ErrorMessage *err) {
    const ConvnextConfig *c = &model->config;
    const int dim = c->dims[s], k = c->kernel;
    char name[PARAM_MAX_NAME];
    // Our (1, K, K, C) is the (K, K, C) the depthwise ops take; torch's (C, 1, K, K).
    const ConvnextTensorRole dw = role_of(CONVNEXT_DWCONV, s, b, "weight");
    const int dw_shape[4] = {1, k, k, dim}, dw_torch[4] = {dim, 1, k, k};
    convnext_tensor_name(c->naming, &dw, name, sizeof name);
    block->dw_weight_index = remember(
        model, parameter_declare(&model->params, name, PARAM_WEIGHT, 4, dw_shape, dw_torch, err),
        dw);
    block->dw_bias_index = declare_bias(model, CONVNEXT_DWCONV, s, b, dim, err);
    if (block->dw_weight_index < 0 || block->dw_bias_index < 0 ||
        declare_norm(model, &block->norm, CONVNEXT_NORM, s, b, dim, err))
        return -1;
    const ConvnextRole roles[2] = {CONVNEXT_FC1, CONVNEXT_FC2};
    Linear *linears[2] = {&block->fc1, &block->fc2};
    for (int i = 0; i < 2; i++) {
        module(model, roles[i], s, b, name, sizeof name);
        const int in = i == 0 ? dim : CONVNEXT_MLP_RATIO * dim;
        const int out = i == 0 ? CONVNEXT_MLP_RATIO * dim : dim;
        if (linear_declare(linears[i], &model->params, name, in, out, 1, err)) return -1;
        remember(model, linears[i]->weight_index, role_of(roles[i], s, b, "weight"));
        remember(model, linears[i]->bias_index, role_of(roles[i], s, b, "bias"));
    }
    // torchvision's layer_scale is (C, 1, 1); timm's and DINOv3's gamma (C).
    const ConvnextTensorRole gamma = role_of(CONVNEXT_GAMMA, s, b, "");
    const int gamma_shape[3] = {dim, 1, 1};
    convnext_tensor_name(c->naming, &gamma, name, sizeof name);
    block->gamma_index = remember(
        model, parameter_declare(&model->params, name, PARAM_EMBEDDING,
                                 c->naming == CONVNEXT_TORCHVISION ? 3 : 1, gamma_shape, NULL,
                                 err),
        gamma);
    return block->gamma_index < 0 ? -1 : 0;
}

int convnext_declare(Convnext *model, Backend *backend, const ConvnextConfig *config,
                     ErrorMessage *err) {
    memset(model, 0, sizeof *model);
    model->backend = backend;
    model->config = *config;
    model->head_norm_index = -1;
    parameter_set_init(&model->params, backend, 1);
    parameter_set_init(&model->buffers, backend, 0);
    if (convnext_config_check(config, err)) return -1;
    const ConvnextConfig *c = &model->config;
    int blocks = 0;
    for (int s = 0; s < CONVNEXT_STAGES; s++) blocks += c->depths[s];
    model->block_count = blocks;
    model->feature_dim = c->dims[CONVNEXT_STAGES - 1];
    // 4 per stem or downsampling, 9 per block, the final norm's 2
    model->roles = calloc((size_t)(4 * CONVNEXT_STAGES + 9 * blocks + 2), sizeof *model->roles);
    if (!model->roles) return error_set(err, "out of memory");
    int index = 0;
    for (int s = 0; s < CONVNEXT_STAGES; s++) {
        ConvnextStage *stage = &model->stages[s];
        stage->dim = c->dims[s];
        stage->depth = c->depths[s];
        stage->blocks = calloc((size_t)stage->depth, sizeof *stage->blocks);
        if (!stage->blocks) return error_set(err, "out of memory");
        if (declare_entry(model, stage, s, err)) return error_prefix(err, "%s", c->name);
        for (int b = 0; b < stage->depth; b++, index++) {
            if (declare_block(model, &stage->blocks[b], s, b, err))
                return error_prefix(err, "%s", c->name);
            // Stochastic depth: linear from 0 at the first block to the rate at the last.
            stage->blocks[b].drop_path =
                blocks > 1 ? c->drop_path_rate * (float)index / (float)(blocks - 1) : 0.0f;
        }
    }
    if (declare_norm(model, &model->head_norm, CONVNEXT_HEAD_NORM, 0, 0, model->feature_dim,
                     err))
        return error_prefix(err, "%s", c->name);
    model->head_norm_index = model->head_norm.weight_index;
    return 0;
}

static void bind_value(const ParameterSet *params, int index, float **value, float **grad) {
    *value = params->params[index].value;
    *grad = params->params[index].grad;
}

static void bind_layers(Convnext *model) {
    const ParameterSet *params = &model->params;
    for (int s = 0; s < CONVNEXT_STAGES; s++) {
        ConvnextStage *stage = &model->stages[s];
        conv2d_bind(&stage->conv, params);
        bind_value(params, stage->conv_bias_index, &stage->conv_bias, &stage->conv_bias_grad);
        layernorm_bind(&stage->norm, params);
        for (int b = 0; b < stage->depth; b++) {
            ConvnextBlock *block = &stage->blocks[b];
            block->dw_weight = params->params[block->dw_weight_index].compute;
            block->dw_weight_grad = params->params[block->dw_weight_index].grad;
            bind_value(params, block->dw_bias_index, &block->dw_bias, &block->dw_bias_grad);
            layernorm_bind(&block->norm, params);
            linear_bind(&block->fc1, params);
            linear_bind(&block->fc2, params);
            bind_value(params, block->gamma_index, &block->gamma, &block->gamma_grad);
        }
    }
    layernorm_bind(&model->head_norm, params);
}

// ---- plans -------------------------------------------------------------------------------

static void plans_free(Backend *backend, ConvnextPlans *plans) {
    for (int s = 0; s < CONVNEXT_STAGES; s++) {
        if (plans->conv_plans[s]) backend->op.conv2d_plan_free(backend, plans->conv_plans[s]);
        if (plans->dw_plans[s]) backend->op.depthwise_plan_free(backend, plans->dw_plans[s]);
        if (plans->fc1_plans[s]) backend->op.linear_plan_free(backend, plans->fc1_plans[s]);
        if (plans->fc2_plans[s]) backend->op.linear_plan_free(backend, plans->fc2_plans[s]);
    }
    memset(plans, 0, sizeof *plans);
}

static int plans_make(Convnext *model, const ConvnextSlot *slot, int batch, ConvnextPlans *plans,
                      ErrorMessage *err) {
    Backend *backend = model->backend;
    const ConvnextConfig *c = &model->config;
    memset(plans, 0, sizeof *plans);
    plans->batch = batch;
    int height = slot->max.resolution, width = slot->max.resolution;
    for (int s = 0; s < CONVNEXT_STAGES; s++) {
        ConvShape *shape = &plans->conv_shapes[s];
        if (conv2d_shape(&model->stages[s].conv, batch, height, width, shape, err)) return -1;
        height = shape->out_height;
        width = shape->out_width;
        plans->conv_plans[s] = backend->op.conv2d_plan(backend, shape, err);
        if (!plans->conv_plans[s]) return error_prefix(err, "stage %d conv", s);
        DepthwiseShape dw;
        if (depthwise_shape_make(&dw, batch, height, width, c->dims[s], c->kernel, 1,
                                 c->kernel / 2, err))
            return -1;
        plans->dw_plans[s] = backend->op.depthwise_plan(backend, &dw, err);
        if (!plans->dw_plans[s]) return error_prefix(err, "stage %d depthwise conv", s);
        const int rows = batch * height * width, dim = c->dims[s];
        const int hidden = model->stages[s].blocks[0].fc1.out_features;
        plans->fc1_plans[s] = backend->op.linear_plan(backend, rows, dim, hidden, model->frozen,
                                                      err);
        if (!plans->fc1_plans[s]) return error_prefix(err, "stage %d fc1", s);
        plans->fc2_plans[s] = backend->op.linear_plan(backend, rows, hidden, dim, 0, err);
        if (!plans->fc2_plans[s]) return error_prefix(err, "stage %d fc2", s);
    }
    return 0;
}

int convnext_prepare_batch(Convnext *model, int slot_index, int batch, ErrorMessage *err) {
    if (slot_index < 0 || slot_index >= model->slot_count)
        return error_set(err, "convnext: no input slot %d (%d slots)", slot_index,
                         model->slot_count);
    ConvnextSlot *slot = &model->slots[slot_index];
    if (batch < 1 || batch > slot->max.batch)
        return error_set(err, "convnext: batch %d outside 1..%d of slot %d", batch,
                         slot->max.batch, slot_index);
    for (int i = 0; i < slot->plans_count; i++)
        if (slot->plans[i].batch == batch) return 0;
    ConvnextPlans *grown = realloc(slot->plans, (size_t)(slot->plans_count + 1) * sizeof *grown);
    if (!grown) return error_set(err, "out of memory");
    slot->plans = grown;
    if (plans_make(model, slot, batch, &slot->plans[slot->plans_count], err)) {
        plans_free(model->backend, &slot->plans[slot->plans_count]);
        return error_prefix(err, "%s, batch %d", model->config.name, batch);
    }
    slot->last_plans = NULL;  // the realloc may have moved what it pointed to
    slot->backward_ready = 0;
    slot->plans_count++;
    return 0;
}

// ---- activation arenas -------------------------------------------------------------------

// A trainable model's block tensors, each its own.
static void take_block(ActivationArena *arena, ConvnextBlockActivations *saved, size_t rows,
                       size_t dim, size_t batch) {
    saved->dw_out = activation_take(arena, rows * dim);
    saved->norm_mean = activation_take_float(arena, rows);
    saved->norm_inv_std = activation_take_float(arena, rows);
    saved->norm_out = activation_take(arena, rows * dim);
    saved->fc1_out = activation_take(arena, rows * CONVNEXT_MLP_RATIO * dim);
    saved->act_out = activation_take(arena, rows * CONVNEXT_MLP_RATIO * dim);
    saved->fc2_out = activation_take(arena, rows * dim);
    saved->out = activation_take(arena, rows * dim);
    saved->drop_scale = activation_take_float(arena, batch);
}

// A frozen model's block tensors: one set sized for the largest stage that
// every block uses, the buffer of dw_out (read by the norm) reused for
// fc2_out (written after it), no fc1_out (its plan writes GELU(fc1) into
// act_out directly), the outputs alternating between two buffers
// but for each stage's last block's, which keeps its own
// (convnext_stage_output); each block keeps only its drop-path scales (an
// EMA teacher's training forwards draw them).
static void take_frozen_blocks(const Convnext *model, ConvnextSlot *slot, ActivationArena *arena,
                               size_t largest_rows, size_t largest) {
    ConvnextBlockActivations shared = {0};
    shared.dw_out = shared.fc2_out = activation_take(arena, largest);
    shared.norm_out = activation_take(arena, largest);
    shared.norm_mean = activation_take_float(arena, largest_rows);
    shared.norm_inv_std = activation_take_float(arena, largest_rows);
    shared.act_out = activation_take(arena, CONVNEXT_MLP_RATIO * largest);
    Act *alternate[2] = {activation_take(arena, largest), activation_take(arena, largest)};
    int index = 0;
    for (int s = 0; s < CONVNEXT_STAGES; s++)
        for (int b = 0; b < model->stages[s].depth; b++, index++) {
            ConvnextBlockActivations *saved = &slot->stages[s].blocks[b];
            const ConvnextStageActivations *stage = &slot->stages[s];
            *saved = shared;
            saved->out = b < model->stages[s].depth - 1
                             ? alternate[index % 2]
                             : activation_take(arena, (size_t)slot->max.batch * stage->height *
                                                          stage->width * model->stages[s].dim);
            saved->drop_scale = activation_take_float(arena, (size_t)slot->max.batch);
        }
}

// Lays out (sizing pass: base NULL) or wires a slot's arena; returns its size in bytes.
static size_t layout_slot(const Convnext *model, ConvnextSlot *slot, void *base) {
    const ConvnextConfig *c = &model->config;
    ActivationArena arena = activation_arena_begin(model->backend, base);
    const size_t batch = (size_t)slot->max.batch;
    size_t largest_rows = 0, largest = 0, previous_rows = 0;
    for (int s = 0; s < CONVNEXT_STAGES; s++) {
        ConvnextStageActivations *stage = &slot->stages[s];
        const size_t rows = batch * stage->height * stage->width, dim = (size_t)c->dims[s];
        const size_t norm_rows = s == 0 ? rows : previous_rows;
        const size_t norm_dim = s == 0 ? dim : (size_t)c->dims[s - 1];
        stage->conv_out = activation_take(&arena, rows * dim);
        stage->norm_out = activation_take(&arena, norm_rows * norm_dim);
        stage->norm_mean = activation_take_float(&arena, norm_rows);
        stage->norm_inv_std = activation_take_float(&arena, norm_rows);
        for (int b = 0; !model->frozen && b < c->depths[s]; b++)
            take_block(&arena, &stage->blocks[b], rows, dim, batch);
        if (rows > largest_rows) largest_rows = rows;
        if (rows * dim > largest) largest = rows * dim;
        previous_rows = rows;
    }
    if (model->frozen) take_frozen_blocks(model, slot, &arena, largest_rows, largest);
    const size_t dim = (size_t)model->feature_dim;
    slot->head_out = NULL;
    if (convnext_norm_features(c)) {
        slot->head_out = activation_take(&arena, previous_rows * dim);
        slot->head_mean = activation_take_float(&arena, previous_rows);
        slot->head_inv_std = activation_take_float(&arena, previous_rows);
    }
    slot->features = activation_take(&arena, batch * dim);
    return arena.used;
}

static int allocate_slot(Convnext *model, ConvnextSlot *slot, ConvnextInputShape shape,
                         ErrorMessage *err) {
    if (shape.batch < 1 || shape.resolution < 32)
        return error_set(err, "a ConvNeXt takes images of at least 32 px (%d px given)",
                         shape.resolution);
    slot->max = shape;
    for (int s = 0; s < CONVNEXT_STAGES; s++) {
        slot->stages[s].blocks = calloc((size_t)model->config.depths[s],
                                        sizeof *slot->stages[s].blocks);
        if (!slot->stages[s].blocks) return error_set(err, "out of memory");
    }
    slot->plans = calloc(1, sizeof *slot->plans);
    if (!slot->plans) return error_set(err, "out of memory");
    slot->plans_count = 1;
    if (plans_make(model, slot, shape.batch, &slot->plans[0], err)) return -1;
    for (int s = 0; s < CONVNEXT_STAGES; s++) {
        slot->stages[s].height = slot->plans[0].conv_shapes[s].out_height;
        slot->stages[s].width = slot->plans[0].conv_shapes[s].out_width;
    }
    Backend *backend = model->backend;
    slot->arena_bytes = layout_slot(model, slot, NULL);
    slot->arena = backend->op.alloc(backend, slot->arena_bytes);
    if (!slot->arena)
        return error_set(err, "out of memory for %zu MB of activations (batch %d at %d px)",
                         slot->arena_bytes >> 20, shape.batch, shape.resolution);
    layout_slot(model, slot, slot->arena);
    return 0;
}

// A backend whose table lacks an op the model calls is refused here rather
// than crashing later.
static int check_backend_ops(const Backend *backend, ErrorMessage *err) {
    const BackendOps *op = &backend->op;
    const struct { int present; const char *name; } needed[] = {
        {op->depthwise_plan != NULL, "depthwise_plan"},
        {op->depthwise_forward != NULL, "depthwise_forward"},
        {op->depthwise_backward_data != NULL, "depthwise_backward_data"},
        {op->depthwise_backward_weights != NULL, "depthwise_backward_weights"},
        {op->linear_plan != NULL, "linear_plan"},
        {op->linear_planned_forward != NULL, "linear_planned_forward"},
        {op->layernorm_forward != NULL, "layernorm_forward"},
        {op->layernorm_backward != NULL, "layernorm_backward"},
        {op->gelu_forward != NULL, "gelu_forward"},
        {op->gelu_backward != NULL, "gelu_backward"},
        {op->residual_scale_add_forward != NULL, "residual_scale_add_forward"},
        {op->residual_scale_add_backward != NULL, "residual_scale_add_backward"},
    };
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++)
        if (!needed[i].present)
            return error_set(err, "the %s backend has no %s op yet, which ConvNeXts need",
                             backend->name, needed[i].name);
    return 0;
}

int convnext_allocate(Convnext *model, const ConvnextInputShape *inputs, int input_count,
                      ErrorMessage *err) {
    Backend *backend = model->backend;
    const ConvnextConfig *c = &model->config;
    if (input_count < 1) return error_set(err, "convnext: no input shape given");
    if (check_backend_ops(backend, err)) return error_prefix(err, "%s", c->name);
    model->params.with_grads = !model->frozen;
    if (parameter_set_allocate(&model->params, err) ||
        parameter_set_allocate(&model->buffers, err))
        return error_prefix(err, "%s", c->name);
    bind_layers(model);
    model->slots = calloc((size_t)input_count, sizeof *model->slots);
    if (!model->slots) return error_set(err, "out of memory");
    int max_batch = 1;
    for (int i = 0; i < input_count; i++) {
        model->slot_count = i + 1;  // so convnext_free releases a half-built slot
        if (allocate_slot(model, &model->slots[i], inputs[i], err))
            return error_prefix(err, "%s, input %d (batch %d, %d px)", c->name, i,
                                inputs[i].batch, inputs[i].resolution);
        for (int s = 0; s < CONVNEXT_STAGES; s++) {
            const ConvnextStageActivations *stage = &model->slots[i].stages[s];
            const size_t elements =
                (size_t)inputs[i].batch * stage->height * stage->width * c->dims[s];
            if (elements > model->scratch_elements) model->scratch_elements = elements;
        }
        if (inputs[i].batch > max_batch) max_batch = inputs[i].batch;
    }
    // Backward: three (B H W C) buffers and one (B H W 4 C) at the largest stage.
    const size_t elements =
        model->frozen ? 1 : model->scratch_elements * (3 + CONVNEXT_MLP_RATIO);
    model->scratch = backend->op.alloc(backend, act_bytes(backend, elements));
    if (!model->scratch)
        return error_set(err, "%s: out of memory for %zu MB of gradient scratch", c->name,
                         act_bytes(backend, elements) >> 20);
    if (staging_init(&model->drop_staging, backend,
                     (size_t)model->block_count * max_batch * sizeof(float), err))
        return error_prefix(err, "%s: drop-path draws", c->name);
    return 0;
}

int convnext_create(Convnext *model, Backend *backend, const ConvnextConfig *config,
                    const ConvnextInputShape *inputs, int input_count, uint64_t seed,
                    ErrorMessage *err) {
    if (convnext_declare(model, backend, config, err) ||
        convnext_allocate(model, inputs, input_count, err) || convnext_init(model, seed, err)) {
        convnext_free(model);
        return -1;
    }
    return 0;
}

void convnext_free(Convnext *model) {
    Backend *backend = model->backend;
    for (int i = 0; model->slots && i < model->slot_count; i++) {
        ConvnextSlot *slot = &model->slots[i];
        for (int p = 0; slot->plans && p < slot->plans_count; p++)
            plans_free(backend, &slot->plans[p]);
        free(slot->plans);
        for (int s = 0; s < CONVNEXT_STAGES; s++) free(slot->stages[s].blocks);
        if (slot->arena) backend->op.free(backend, slot->arena);
    }
    free(model->slots);
    if (model->scratch) backend->op.free(backend, model->scratch);
    staging_free(&model->drop_staging);
    parameter_set_free(&model->params);
    parameter_set_free(&model->buffers);
    for (int s = 0; s < CONVNEXT_STAGES; s++) free(model->stages[s].blocks);
    free(model->roles);
    memset(model, 0, sizeof *model);
}

// ---- initialisation ----------------------------------------------------------------------

static int init_weight(Convnext *model, int index, uint64_t seed, ErrorMessage *err) {
    return layer_init_parameter(model->backend, &model->params.params[index], seed, INIT_NORMAL,
                                CONVNEXT_INIT_STD, err);
}

int convnext_init(Convnext *model, uint64_t seed, ErrorMessage *err) {
    Backend *backend = model->backend;
    model->seed = seed;
    model->training_forwards = 0;
    for (int s = 0; s < CONVNEXT_STAGES; s++) {
        ConvnextStage *stage = &model->stages[s];
        if (init_weight(model, stage->conv.weight_index, seed, err)) return -1;
        backend->op.fill(backend, stage->conv_bias, 0.0f, (size_t)stage->dim);
        layernorm_init(backend, &stage->norm);
        for (int b = 0; b < stage->depth; b++) {
            ConvnextBlock *block = &stage->blocks[b];
            if (init_weight(model, block->dw_weight_index, seed, err) ||
                init_weight(model, block->fc1.weight_index, seed, err) ||
                init_weight(model, block->fc2.weight_index, seed, err))
                return -1;
            backend->op.fill(backend, block->dw_bias, 0.0f, (size_t)stage->dim);
            backend->op.fill(backend, block->fc1.bias, 0.0f, (size_t)block->fc1.out_features);
            backend->op.fill(backend, block->fc2.bias, 0.0f, (size_t)block->fc2.out_features);
            layernorm_init(backend, &block->norm);
            backend->op.fill(backend, block->gamma, model->config.layer_scale_init,
                             (size_t)stage->dim);
        }
    }
    layernorm_init(backend, &model->head_norm);
    return 0;
}
