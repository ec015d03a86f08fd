// ViT construction: parameter declaration with timm names, plans and
// activation arenas per input slot, RoPE tables, initialisation (see
// vit.h). Presets are in vit_presets.c, forward and backward in
// vit_blocks.c, weight files in vit_weights.c.
#include "nn/vit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/activations.h"
#include "nn/vit_rope.h"

// ---- structure and parameters ------------------------------------------------------------

static int declare_embedding(ParameterSet *params, const char *name, int rows, int dim,
                             ErrorMessage *err) {
    const int shape[3] = {1, rows, dim};
    return parameter_declare(params, name, PARAM_EMBEDDING, 3, shape, NULL, err);
}

// mlp.fc1's width: H, or SwiGLU's packed gate and value (2 H).
static int fc1_width(const VitConfig *c) { return c->swiglu ? 2 * c->mlp_hidden : c->mlp_hidden; }

static int declare_block(Vit *model, VitBlock *block, int index, ErrorMessage *err) {
    const VitConfig *c = &model->config;
    const int dim = c->embed_dim, qkv_bias = c->qkv_bias != VIT_QKV_NO_BIAS;
    char name[PARAM_MAX_NAME];
#define BLOCK_NAME(suffix) (snprintf(name, sizeof name, "blocks.%d." suffix, index), name)
    if (layernorm_declare(&block->norm1, &model->params, BLOCK_NAME("norm1"), dim, c->norm_eps,
                          err) ||
        linear_declare(&block->qkv, &model->params, BLOCK_NAME("attn.qkv"), dim, 3 * dim,
                       qkv_bias, err) ||
        linear_declare(&block->proj, &model->params, BLOCK_NAME("attn.proj"), dim, dim, 1, err) ||
        layernorm_declare(&block->norm2, &model->params, BLOCK_NAME("norm2"), dim, c->norm_eps,
                          err) ||
        linear_declare(&block->fc1, &model->params, BLOCK_NAME("mlp.fc1"), dim, fc1_width(c), 1,
                       err) ||
        linear_declare(&block->fc2, &model->params, BLOCK_NAME("mlp.fc2"), c->mlp_hidden, dim, 1,
                       err))
        return -1;
    block->ls1_index = block->ls2_index = -1;
    if (c->layer_scale) {
        block->ls1_index =
            parameter_declare(&model->params, BLOCK_NAME("ls1.gamma"), PARAM_EMBEDDING, 1, &dim,
                              NULL, err);
        block->ls2_index =
            parameter_declare(&model->params, BLOCK_NAME("ls2.gamma"), PARAM_EMBEDDING, 1, &dim,
                              NULL, err);
        if (block->ls1_index < 0 || block->ls2_index < 0) return -1;
    }
#undef BLOCK_NAME
    // timm's stochastic depth decay rule: linear from 0 to the rate over the blocks.
    block->drop_path =
        c->depth > 1 ? c->drop_path_rate * (float)index / (float)(c->depth - 1) : c->drop_path_rate;
    return 0;
}

int vit_declare(Vit *model, Backend *backend, const VitConfig *config, ErrorMessage *err) {
    memset(model, 0, sizeof *model);
    model->backend = backend;
    model->config = *config;
    parameter_set_init(&model->params, backend, 1);
    parameter_set_init(&model->buffers, backend, 0);
    if (vit_config_check(config, err)) return -1;
    const VitConfig *c = &model->config;
    const int dim = c->embed_dim, positions = c->pos_grid * c->pos_grid + (c->class_pos ? 1 : 0);
    model->feature_dim = dim;
    model->cls_index = declare_embedding(&model->params, "cls_token", 1, dim, err);
    model->reg_index = -1;
    if (c->register_tokens)
        model->reg_index = declare_embedding(&model->params, "reg_token", c->register_tokens, dim,
                                             err);
    model->pos_index = -1;
    if (!c->rope)
        model->pos_index = declare_embedding(&model->params, "pos_embed", positions, dim, err);
    if (model->cls_index < 0 || (c->register_tokens && model->reg_index < 0) ||
        (!c->rope && model->pos_index < 0))
        return error_prefix(err, "%s", c->name);
    model->periods_index = -1;
    if (c->rope) {
        const int head_dim = dim / c->heads, count = head_dim / 4;
        model->periods_index = parameter_declare(&model->buffers, "rope.periods", PARAM_BUFFER, 1,
                                                 &count, NULL, err);
        if (model->periods_index < 0) return error_prefix(err, "%s", c->name);
        model->rope_periods = malloc(2 * (size_t)count * sizeof *model->rope_periods);
        if (!model->rope_periods) return error_set(err, "out of memory");
        model->rope_periods_seen = model->rope_periods + count;
        vit_rope_periods(c->rope_base, head_dim, model->rope_periods);
    }
    const int image_channels = c->in_channels > 0 ? c->in_channels : 3;
    if (conv2d_declare(&model->patch_embed, &model->params, "patch_embed.proj.weight",
                       image_channels, dim,
                       c->patch_size, c->patch_size, 0, err))
        return error_prefix(err, "%s", c->name);
    model->patch_bias_index = parameter_declare(&model->params, "patch_embed.proj.bias",
                                                PARAM_BIAS, 1, &dim, NULL, err);
    if (model->patch_bias_index < 0) return error_prefix(err, "%s", c->name);
    model->blocks = calloc((size_t)c->depth, sizeof *model->blocks);
    if (!model->blocks) return error_set(err, "out of memory");
    for (int b = 0; b < c->depth; b++)
        if (declare_block(model, &model->blocks[b], b, err))
            return error_prefix(err, "%s", c->name);
    if (layernorm_declare(&model->norm, &model->params, "norm", dim, c->norm_eps, err))
        return error_prefix(err, "%s", c->name);
    return 0;
}

static void bind_parameter(const ParameterSet *params, int index, float **value, float **grad) {
    *value = index >= 0 ? params->params[index].value : NULL;
    *grad = index >= 0 ? params->params[index].grad : NULL;
}

static void bind_layers(Vit *model) {
    const ParameterSet *params = &model->params;
    bind_parameter(params, model->cls_index, &model->cls_token, &model->cls_grad);
    bind_parameter(params, model->reg_index, &model->reg_token, &model->reg_grad);
    bind_parameter(params, model->pos_index, &model->pos_embed, &model->pos_grad);
    bind_parameter(params, model->patch_bias_index, &model->patch_bias, &model->patch_bias_grad);
    conv2d_bind(&model->patch_embed, params);
    for (int b = 0; b < model->config.depth; b++) {
        VitBlock *block = &model->blocks[b];
        layernorm_bind(&block->norm1, params);
        layernorm_bind(&block->norm2, params);
        linear_bind(&block->qkv, params);
        linear_bind(&block->proj, params);
        linear_bind(&block->fc1, params);
        linear_bind(&block->fc2, params);
        bind_parameter(params, block->ls1_index, &block->ls1, &block->ls1_grad);
        bind_parameter(params, block->ls2_index, &block->ls2, &block->ls2_grad);
    }
    layernorm_bind(&model->norm, params);
}

// ---- plans -----------------------------------------------------------------------------

static void plans_free(Backend *backend, VitPlans *plans) {
    if (plans->patch_plan) backend->op.conv2d_plan_free(backend, plans->patch_plan);
    if (plans->attention_plan) backend->op.attention_plan_free(backend, plans->attention_plan);
    memset(plans, 0, sizeof *plans);
}

static int plans_make(Vit *model, const VitSlot *slot, int batch, VitPlans *plans,
                      ErrorMessage *err) {
    Backend *backend = model->backend;
    const VitConfig *c = &model->config;
    memset(plans, 0, sizeof *plans);
    plans->batch = batch;
    AttentionShape attention;
    if (conv2d_shape(&model->patch_embed, batch, slot->max.resolution, slot->max.resolution,
                     &plans->patch_shape, err) ||
        attention_shape_make(&attention, batch, c->heads, slot->tokens, c->embed_dim / c->heads,
                             err))
        return -1;
    plans->patch_plan = backend->op.conv2d_plan(backend, &plans->patch_shape, err);
    if (!plans->patch_plan) return error_prefix(err, "patch_embed.proj");
    plans->attention_plan = backend->op.attention_plan(backend, &attention, err);
    return plans->attention_plan ? 0 : -1;
}

int vit_prepare_batch(Vit *model, int slot_index, int batch, ErrorMessage *err) {
    if (slot_index < 0 || slot_index >= model->slot_count)
        return error_set(err, "vit: no input slot %d (%d slots)", slot_index, model->slot_count);
    VitSlot *slot = &model->slots[slot_index];
    if (batch < 1 || batch > slot->max.batch)
        return error_set(err, "vit: batch %d outside 1..%d of slot %d", batch, slot->max.batch,
                         slot_index);
    for (int i = 0; i < slot->plans_count; i++)
        if (slot->plans[i].batch == batch) return 0;
    VitPlans *grown = realloc(slot->plans, (size_t)(slot->plans_count + 1) * sizeof *grown);
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

// ---- activation arenas ---------------------------------------------------------------------

// A frozen model's block outputs: the last kept_blocks blocks' each their
// own (vit_block_tokens reads them), the others' alternating between two
// buffers (block b reads block b - 1's output and writes its own).
static void take_frozen_outputs(const Vit *model, VitSlot *slot, ActivationArena *arena,
                                size_t elements) {
    const int depth = model->config.depth, first_kept = depth - model->kept_blocks;
    Act *alternate[2] = {NULL, NULL};
    for (int i = 0; i < 2 && i < first_kept; i++) alternate[i] = activation_take(arena, elements);
    for (int b = 0; b < depth; b++)
        slot->blocks[b].out = b < first_kept ? alternate[b % 2] : activation_take(arena, elements);
}

// A frozen model's block tensors besides the output: one set that every
// block uses, each buffer shared by tensors whose lives do not overlap in
// block_forward (vit_blocks.c): norm1_out (read by qkv), proj_out (until
// mid), norm2_out (until fc1), fc2_out (until out) in one; attention_out
// (until proj) and mid (until out) in another; norm2's statistics in
// norm1's.
static void take_frozen_block(const Vit *model, VitSlot *slot, ActivationArena *arena,
                              size_t rows) {
    const VitConfig *c = &model->config;
    const size_t dim = (size_t)c->embed_dim;
    VitBlockActivations shared = {0};
    shared.norm1_out = shared.proj_out = shared.norm2_out = shared.fc2_out =
        activation_take(arena, rows * dim);
    shared.norm1_mean = shared.norm2_mean = activation_take_float(arena, rows);
    shared.norm1_inv_std = shared.norm2_inv_std = activation_take_float(arena, rows);
    shared.qkv = activation_take(arena, rows * 3 * dim);
    shared.attention_out = shared.mid = activation_take(arena, rows * dim);
    shared.lse = activation_take_float(arena, rows * c->heads);
    shared.fc1_out = activation_take(arena, rows * fc1_width(c));
    shared.act_out = activation_take(arena, rows * c->mlp_hidden);
    for (int b = 0; b < c->depth; b++) {
        shared.out = slot->blocks[b].out;
        slot->blocks[b] = shared;  // drop_scale NULL: frozen forwards draw no drop path
    }
}

// One block's tensors for the backward (norm1_out .. fc2_out, all live at
// once), laid out into *saved; out and drop_scale are left to the caller.
static void take_block_tensors(const Vit *model, VitBlockActivations *saved,
                               ActivationArena *arena, size_t rows) {
    const VitConfig *c = &model->config;
    const size_t dim = (size_t)c->embed_dim;
    saved->norm1_out = activation_take(arena, rows * dim);
    saved->norm1_mean = activation_take_float(arena, rows);
    saved->norm1_inv_std = activation_take_float(arena, rows);
    saved->qkv = activation_take(arena, rows * 3 * dim);
    saved->attention_out = activation_take(arena, rows * dim);
    saved->lse = activation_take_float(arena, rows * c->heads);
    saved->proj_out = activation_take(arena, rows * dim);
    saved->mid = activation_take(arena, rows * dim);
    saved->norm2_out = activation_take(arena, rows * dim);
    saved->norm2_mean = activation_take_float(arena, rows);
    saved->norm2_inv_std = activation_take_float(arena, rows);
    saved->fc1_out = activation_take(arena, rows * fc1_width(c));
    saved->act_out = activation_take(arena, rows * c->mlp_hidden);
    saved->fc2_out = activation_take(arena, rows * dim);
}

int vit_block_checkpointed(const Vit *model, int block) {
    return model->activation_checkpointing > 0 && block % model->activation_checkpointing == 0;
}

// A training model's blocks: each its own tensors, or with activation
// checkpointing one set that every recomputed block reuses (the
// recompute's), such a block keeping only its output and drop-path scales.
static void take_training_blocks(const Vit *model, VitSlot *slot, ActivationArena *arena,
                                 size_t rows) {
    const int depth = model->config.depth;
    const size_t dim = (size_t)model->config.embed_dim, batch = (size_t)slot->max.batch;
    VitBlockActivations shared = {0};
    if (model->activation_checkpointing) take_block_tensors(model, &shared, arena, rows);
    for (int b = 0; b < depth; b++) {
        VitBlockActivations *saved = &slot->blocks[b];
        if (vit_block_checkpointed(model, b)) *saved = shared;
        else take_block_tensors(model, saved, arena, rows);
        saved->out = activation_take(arena, rows * dim);
        saved->drop_scale[0] = activation_take_float(arena, batch);
        saved->drop_scale[1] = activation_take_float(arena, batch);
    }
}

// Lays out (sizing pass: base NULL) or wires a slot's arena; returns its size in bytes.
static size_t layout_slot(const Vit *model, VitSlot *slot, void *base) {
    const VitConfig *c = &model->config;
    ActivationArena arena = activation_arena_begin(model->backend, base);
    const size_t batch = (size_t)slot->max.batch, rows = batch * slot->tokens;
    const size_t dim = (size_t)c->embed_dim, patches = (size_t)slot->grid * slot->grid;
    const size_t positions = (size_t)c->pos_grid * c->pos_grid;
    const int resampled = !c->rope && slot->grid != c->pos_grid;
    slot->pos_matrix = resampled ? activation_take_float(&arena, patches * positions) : NULL;
    slot->patch_pos = resampled ? activation_take_float(&arena, patches * dim) : NULL;
    slot->dpatch_pos =
        resampled && !model->frozen ? activation_take_float(&arena, patches * dim) : NULL;
    const size_t rope_floats = (size_t)slot->rope_tables * vit_rope_slot_floats(model, slot);
    slot->rope_sin = c->rope ? activation_take_float(&arena, rope_floats) : NULL;
    slot->rope_cos = c->rope ? activation_take_float(&arena, rope_floats) : NULL;
    slot->patch_out = activation_take(&arena, batch * patches * dim);
    slot->tokens_in = activation_take(&arena, rows * dim);
    if (model->frozen) {
        take_frozen_outputs(model, slot, &arena, rows * dim);
        take_frozen_block(model, slot, &arena, rows);
    } else {
        take_training_blocks(model, slot, &arena, rows);
    }
    slot->norm_out = activation_take(&arena, rows * dim);
    slot->norm_mean = activation_take_float(&arena, rows);
    slot->norm_inv_std = activation_take_float(&arena, rows);
    slot->features = activation_take(&arena, batch * dim);
    slot->patch_map = activation_take(&arena, batch * patches * dim);
    return arena.used;
}

// The resampling map of a slot whose grid differs from the model's, uploaded once.
static int upload_pos_matrix(Vit *model, VitSlot *slot, ErrorMessage *err) {
    if (!slot->pos_matrix) return 0;
    const VitConfig *c = &model->config;
    const size_t floats = (size_t)slot->grid * slot->grid * c->pos_grid * c->pos_grid;
    float *host = malloc(floats * sizeof *host);
    if (!host) return error_set(err, "out of memory for the position resampling map");
    int status = vit_pos_grid_matrix(c->pos_interpolation, c->pos_grid, slot->grid, slot->grid,
                                     host, err);
    if (!status)
        model->backend->op.upload(model->backend, slot->pos_matrix, host, floats * sizeof *host);
    free(host);
    return status;
}

// The slot's arena, laid out and wired, with the resampling map uploaded
// (RoPE tables: prepare_rope, vit_rope_upload_eval).
static int allocate_arena(Vit *model, VitSlot *slot, ErrorMessage *err) {
    Backend *backend = model->backend;
    slot->arena_bytes = layout_slot(model, slot, NULL);
    slot->arena = backend->op.alloc(backend, slot->arena_bytes);
    if (!slot->arena)
        return error_set(err, "out of memory for %zu MB of activations (batch %d at %d px)",
                         slot->arena_bytes >> 20, slot->max.batch, slot->max.resolution);
    layout_slot(model, slot, slot->arena);
    return upload_pos_matrix(model, slot, err);
}

static int allocate_slot(Vit *model, VitSlot *slot, VitInputShape shape, ErrorMessage *err) {
    const VitConfig *c = &model->config;
    if (shape.batch < 1 || shape.resolution < c->patch_size ||
        shape.resolution % c->patch_size != 0)
        return error_set(err, "%d px is not a positive multiple of the patch size %d",
                         shape.resolution, c->patch_size);
    slot->max = shape;
    slot->grid = shape.resolution / c->patch_size;
    slot->tokens = 1 + c->register_tokens + slot->grid * slot->grid;
    // One RoPE table, or one per block for training forwards that rescale
    // (a frozen EMA teacher's too; about 1 MB for a ViT-B/16 at 224 px).
    slot->rope_tables = c->rope_rescale > 0.0f ? c->depth : 1;
    slot->blocks = calloc((size_t)c->depth, sizeof *slot->blocks);
    slot->plans = calloc(1, sizeof *slot->plans);
    if (!slot->blocks || !slot->plans) return error_set(err, "out of memory");
    slot->plans_count = 1;
    if (plans_make(model, slot, shape.batch, &slot->plans[0], err)) return -1;
    return allocate_arena(model, slot, err);
}

// The periods buffer, the RoPE staging buffer (the largest slot's tables)
// and every slot's eval tables.
static int prepare_rope(Vit *model, ErrorMessage *err) {
    if (!model->config.rope) return 0;
    const Parameter *periods = &model->buffers.params[model->periods_index];
    model->backend->op.upload(model->backend, periods->value, model->rope_periods,
                              periods->count * sizeof(float));
    size_t largest = 1;
    for (int i = 0; i < model->slot_count; i++) {
        const VitSlot *slot = &model->slots[i];
        const size_t floats = (size_t)slot->rope_tables * vit_rope_slot_floats(model, slot);
        if (floats > largest) largest = floats;
    }
    if (staging_init(&model->rope_staging, model->backend, 2 * largest * sizeof(float), err))
        return error_prefix(err, "%s: RoPE tables", model->config.name);
    for (int i = 0; i < model->slot_count; i++) vit_rope_upload_eval(model, &model->slots[i]);
    return 0;
}

// A backend whose table lacks an op the ViT calls (a new backend not yet
// given its transformer kernels) is refused here rather than crashing later.
static int check_backend_ops(const Backend *backend, ErrorMessage *err) {
    const BackendOps *op = &backend->op;
    const struct { int present; const char *name; } needed[] = {
        {op->layernorm_forward != NULL, "layernorm_forward"},
        {op->layernorm_backward != NULL, "layernorm_backward"},
        {op->attention_plan != NULL, "attention_plan"},
        {op->attention_plan_free != NULL, "attention_plan_free"},
        {op->attention_forward != NULL, "attention_forward"},
        {op->attention_backward != NULL, "attention_backward"},
        {op->vit_tokens_forward != NULL, "vit_tokens_forward"},
        {op->vit_tokens_backward != NULL, "vit_tokens_backward"},
        {op->residual_scale_add_forward != NULL, "residual_scale_add_forward"},
        {op->residual_layernorm_forward != NULL, "residual_layernorm_forward"},
        {op->residual_scale_add_backward != NULL, "residual_scale_add_backward"},
        {op->token_pool_forward != NULL, "token_pool_forward"},
        {op->token_pool_backward != NULL, "token_pool_backward"},
        {op->gelu_forward != NULL, "gelu_forward"},
        {op->gelu_backward != NULL, "gelu_backward"},
        {op->rope_forward != NULL, "rope_forward"},
        {op->rope_backward != NULL, "rope_backward"},
        {op->swiglu_forward != NULL, "swiglu_forward"},
        {op->swiglu_backward != NULL, "swiglu_backward"},
    };
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++)
        if (!needed[i].present)
            return error_set(err, "the %s backend has no %s op yet, which ViTs need (use the cpu "
                                  "backend)", backend->name, needed[i].name);
    return 0;
}

int vit_allocate(Vit *model, const VitInputShape *inputs, int input_count, ErrorMessage *err) {
    Backend *backend = model->backend;
    const VitConfig *c = &model->config;
    if (input_count < 1) return error_set(err, "vit: no input shape given");
    if (check_backend_ops(backend, err)) return error_prefix(err, "%s", c->name);
    model->params.with_grads = !model->frozen;
    if (model->frozen) model->activation_checkpointing = 0;  // nothing kept to recompute from
    if (parameter_set_allocate(&model->params, err) ||
        parameter_set_allocate(&model->buffers, err))
        return error_prefix(err, "%s", c->name);
    bind_layers(model);
    model->slots = calloc((size_t)input_count, sizeof *model->slots);
    if (!model->slots) return error_set(err, "out of memory");
    int max_batch = 1;
    for (int i = 0; i < input_count; i++) {
        model->slot_count = i + 1;  // so vit_free releases a half-built slot
        if (allocate_slot(model, &model->slots[i], inputs[i], err))
            return error_prefix(err, "%s, input %d (batch %d, %d px)", c->name, i,
                                inputs[i].batch, inputs[i].resolution);
        const size_t rows = (size_t)inputs[i].batch * model->slots[i].tokens;
        if (rows > model->scratch_tokens) model->scratch_tokens = rows;
        if (inputs[i].batch > max_batch) max_batch = inputs[i].batch;
    }
    // The wide gradient buffer: dqkv (3 D), or the MLP's (H; SwiGLU: dH and d fc1 = 3 H).
    const size_t mlp = (size_t)c->mlp_hidden * (c->swiglu ? 3 : 1);
    const size_t wide = mlp > 3 * (size_t)c->embed_dim ? mlp : 3 * (size_t)c->embed_dim;
    const size_t elements =
        model->frozen ? 1 : model->scratch_tokens * (3 * (size_t)c->embed_dim + wide);
    model->scratch = backend->op.alloc(backend, act_bytes(backend, elements));
    if (!model->scratch)
        return error_set(err, "%s: out of memory for %zu MB of gradient scratch", c->name,
                         act_bytes(backend, elements) >> 20);
    if (staging_init(&model->drop_staging, backend,
                     (size_t)c->depth * 2 * max_batch * sizeof(float), err))
        return error_prefix(err, "%s: drop-path draws", c->name);
    return prepare_rope(model, err);
}

int vit_create(Vit *model, Backend *backend, const VitConfig *config,
               const VitInputShape *inputs, int input_count, uint64_t seed, ErrorMessage *err) {
    if (vit_declare(model, backend, config, err) || vit_allocate(model, inputs, input_count, err) ||
        vit_init(model, seed, err)) {
        vit_free(model);
        return -1;
    }
    return 0;
}

int vit_keep_block_outputs(Vit *model, int count, ErrorMessage *err) {
    const VitConfig *c = &model->config;
    if (!model->frozen) return error_set(err, "%s: only a frozen model chooses which block "
                                              "outputs it keeps (a training one keeps all)",
                                         c->name);
    if (count < 0 || count > c->depth)
        return error_set(err, "%s: cannot keep the outputs of the last %d blocks (%d blocks)",
                         c->name, count, c->depth);
    if (count == model->kept_blocks) return 0;
    model->kept_blocks = count;
    for (int i = 0; i < model->slot_count; i++) {
        VitSlot *slot = &model->slots[i];
        model->backend->op.free(model->backend, slot->arena);
        slot->arena = NULL;
        slot->last_plans = NULL;  // the last forward's tensors are gone
        if (allocate_arena(model, slot, err)) return error_prefix(err, "%s", c->name);
        if (c->rope) vit_rope_upload_eval(model, slot);
    }
    return 0;
}

void vit_free(Vit *model) {
    Backend *backend = model->backend;
    for (int i = 0; model->slots && i < model->slot_count; i++) {
        VitSlot *slot = &model->slots[i];
        for (int p = 0; slot->plans && p < slot->plans_count; p++)
            plans_free(backend, &slot->plans[p]);
        free(slot->plans);
        free(slot->blocks);
        if (slot->arena) backend->op.free(backend, slot->arena);
    }
    free(model->slots);
    if (model->scratch) backend->op.free(backend, model->scratch);
    staging_free(&model->drop_staging);
    free(model->rope_periods);
    staging_free(&model->rope_staging);
    parameter_set_free(&model->params);
    parameter_set_free(&model->buffers);
    free(model->blocks);
    memset(model, 0, sizeof *model);
}

// ---- initialisation ----------------------------------------------------------------------

// timm's trunc_normal_(std=0.02) cuts at +-2 (absolute): 100 standard
// deviations, so a plain normal draw is the same distribution in practice.
#define VIT_INIT_STD 0.02f

static int init_linear(Backend *backend, const Linear *linear, const ParameterSet *params,
                       uint64_t seed, ErrorMessage *err) {
    if (linear->bias) backend->op.fill(backend, linear->bias, 0.0f, (size_t)linear->out_features);
    return layer_init_parameter(backend, &params->params[linear->weight_index], seed, INIT_NORMAL,
                                VIT_INIT_STD, err);
}

int vit_init(Vit *model, uint64_t seed, ErrorMessage *err) {
    Backend *backend = model->backend;
    const ParameterSet *params = &model->params;
    const VitConfig *c = &model->config;
    model->seed = seed;
    model->training_forwards = 0;
    const int image_channels = c->in_channels > 0 ? c->in_channels : 3;  // the fan-in's
    const float patch_bound =
        (float)(1.0 / sqrt((double)image_channels * c->patch_size * c->patch_size));
    // DINOv3's init_weights draws the class and storage tokens with std 0.02.
    const float token_std = c->rope ? VIT_INIT_STD : 1e-6f;
    if ((model->pos_index >= 0 &&
         layer_init_parameter(backend, &params->params[model->pos_index], seed, INIT_NORMAL,
                              VIT_INIT_STD, err)) ||
        layer_init_parameter(backend, &params->params[model->cls_index], seed, INIT_NORMAL,
                             token_std, err) ||
        (model->reg_index >= 0 &&
         layer_init_parameter(backend, &params->params[model->reg_index], seed, INIT_NORMAL,
                              token_std, err)) ||
        layer_init_parameter(backend, &params->params[model->patch_embed.weight_index], seed,
                             INIT_UNIFORM, patch_bound, err) ||
        layer_init_parameter(backend, &params->params[model->patch_bias_index], seed,
                             INIT_UNIFORM, patch_bound, err))
        return -1;
    for (int b = 0; b < c->depth; b++) {
        const VitBlock *block = &model->blocks[b];
        layernorm_init(backend, &block->norm1);
        layernorm_init(backend, &block->norm2);
        if (init_linear(backend, &block->qkv, params, seed, err) ||
            init_linear(backend, &block->proj, params, seed, err) ||
            init_linear(backend, &block->fc1, params, seed, err) ||
            init_linear(backend, &block->fc2, params, seed, err))
            return -1;
        if (block->ls1) {
            backend->op.fill(backend, block->ls1, c->layer_scale_init, (size_t)c->embed_dim);
            backend->op.fill(backend, block->ls2, c->layer_scale_init, (size_t)c->embed_dim);
        }
    }
    layernorm_init(backend, &model->norm);
    return 0;
}
