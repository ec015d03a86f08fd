// ShuffleNetV2 construction (shufflenet.h): the presets, parameter
// declaration in torchvision's names and order, plans and activation arenas
// per input slot, initialisation, weight files. Forward and backward:
// shufflenet_blocks.c.
#include "nn/shufflenet.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/activations.h"
#include "nn/state_dict_backbone.h"
#include "nn/weights.h"

// ---- presets -------------------------------------------------------------------------------

typedef struct ShufflenetPreset {
    const char *name;  // torchvision's builder
    int widths[SHUFFLENET_STAGES + 2];
} ShufflenetPreset;

// torchvision.models.shufflenetv2's stages_out_channels
static const ShufflenetPreset presets[] = {
    {"shufflenet_v2_x0_5", {24, 48, 96, 192, 1024}},
    {"shufflenet_v2_x1_0", {24, 116, 232, 464, 1024}},
    {"shufflenet_v2_x1_5", {24, 176, 352, 704, 1024}},
    {"shufflenet_v2_x2_0", {24, 244, 488, 976, 2048}},
};
static const int stage_repeats[SHUFFLENET_STAGES] = {4, 8, 4};

const char *const shufflenet_model_names[] = {
    "torchvision/shufflenet_v2_x0_5", "torchvision/shufflenet_v2_x1_0",
    "torchvision/shufflenet_v2_x1_5", "torchvision/shufflenet_v2_x2_0", NULL};

static const ShufflenetPreset *find_preset(const char *name) {
    if (strncmp(name, "torchvision/", 12) == 0) name += 12;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(name, presets[i].name) == 0) return &presets[i];
    return NULL;
}

int shufflenet_is_model_name(const char *name) { return find_preset(name) != NULL; }

static void config_make(ShufflenetConfig *config, const char *name, const int *widths) {
    memset(config, 0, sizeof *config);
    snprintf(config->name, sizeof config->name, "torchvision/%s", name);
    memcpy(config->widths, widths, sizeof config->widths);
    memcpy(config->repeats, stage_repeats, sizeof config->repeats);
    config->bn_momentum = 0.1f;
    config->bn_eps = 1e-5f;
}

int shufflenet_config_preset(const char *name, ShufflenetConfig *config, ErrorMessage *err) {
    const ShufflenetPreset *preset = find_preset(name);
    if (!preset)
        return error_set(err, "unknown ShuffleNetV2 '%s' (torchvision/shufflenet_v2_x0_5, "
                              "_x1_0, _x1_5, _x2_0)", name);
    config_make(config, preset->name, preset->widths);
    return 0;
}

int shufflenet_config_from_weights(const SafeTensors *file, const char *prefix,
                                   ShufflenetConfig *config) {
    const SafeTensor *stem = state_dict_find(file, prefix, "conv1.0.weight");
    const SafeTensor *head = state_dict_find(file, prefix, "conv5.0.weight");
    if (!stem || !head || stem->rank != 4 || head->rank != 4) return -1;
    int widths[SHUFFLENET_STAGES + 2] = {(int)stem->shape[0], 0, 0, 0, (int)head->shape[0]};
    for (int s = 0; s < SHUFFLENET_STAGES; s++) {
        // the last 1x1 of branch2 in a stage's first block: half the stage's width
        char name[64];
        snprintf(name, sizeof name, "stage%d.0.branch2.5.weight", s + 2);
        const SafeTensor *t = state_dict_find(file, prefix, name);
        if (!t || t->rank != 4) return -1;
        widths[s + 1] = 2 * (int)t->shape[0];
    }
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (memcmp(widths, presets[i].widths, sizeof widths) == 0) {
            config_make(config, presets[i].name, widths);
            config->in_channels = (int)stem->shape[1];
            return 0;
        }
    return -1;
}

// ---- structure and parameters --------------------------------------------------------------

static int declare_unit(Shufflenet *model, ShufflenetUnit *unit, const char *conv_name,
                        const char *bn_name, int in, int out, int kernel, int stride,
                        int depthwise, int relu, ErrorMessage *err) {
    const ShufflenetConfig *c = &model->config;
    const int padding = kernel / 2;
    const int status =
        depthwise ? conv2d_declare_depthwise(&unit->conv, &model->params, conv_name, in, kernel,
                                             stride, padding, err)
                  : conv2d_declare(&unit->conv, &model->params, conv_name, in, out, kernel,
                                   stride, padding, err);
    if (status || batchnorm_declare(&unit->bn, &model->params, &model->buffers, bn_name, out,
                                    c->bn_momentum, c->bn_eps, err))
        return -1;
    unit->depthwise = depthwise;
    unit->act = relu ? LAYER_ACT_RELU : LAYER_ACT_NONE;
    unit->id = model->unit_count;
    model->units[model->unit_count++] = unit;
    return 0;
}

// A Sequential's conv (index i) and the BatchNorm after it (i + 1) under prefix.
static int declare_seq(Shufflenet *model, ShufflenetUnit *unit, const char *prefix, int index,
                       int in, int out, int kernel, int stride, int depthwise, int relu,
                       ErrorMessage *err) {
    char conv_name[PARAM_MAX_NAME], bn_name[PARAM_MAX_NAME];
    snprintf(conv_name, sizeof conv_name, "%s.%d.weight", prefix, index);
    snprintf(bn_name, sizeof bn_name, "%s.%d", prefix, index + 1);
    return declare_unit(model, unit, conv_name, bn_name, in, out, kernel, stride, depthwise,
                        relu, err);
}

static int declare_block(Shufflenet *model, ShufflenetBlock *block, int stage, int index,
                         int in, int out, ErrorMessage *err) {
    char prefix[PARAM_MAX_NAME];
    block->stride = index == 0 ? 2 : 1;
    block->in_channels = in;
    block->out_channels = out;
    block->half = out / 2;
    const int h = block->half, branch_in = block->stride > 1 ? in : h;
    if (block->stride > 1) {
        snprintf(prefix, sizeof prefix, "stage%d.%d.branch1", stage + 2, index);
        if (declare_seq(model, &block->branch1[0], prefix, 0, in, in, 3, 2, 1, 0, err) ||
            declare_seq(model, &block->branch1[1], prefix, 2, in, h, 1, 1, 0, 1, err))
            return -1;
    }
    snprintf(prefix, sizeof prefix, "stage%d.%d.branch2", stage + 2, index);
    return declare_seq(model, &block->branch2[0], prefix, 0, branch_in, h, 1, 1, 0, 1, err) ||
           declare_seq(model, &block->branch2[1], prefix, 3, h, h, 3, block->stride, 1, 0,
                       err) ||
           declare_seq(model, &block->branch2[2], prefix, 5, h, h, 1, 1, 0, 1, err);
}

int shufflenet_declare(Shufflenet *model, Backend *backend, const ShufflenetConfig *config,
                       ErrorMessage *err) {
    memset(model, 0, sizeof *model);
    model->backend = backend;
    model->config = *config;
    parameter_set_init(&model->params, backend, 1);
    parameter_set_init(&model->buffers, backend, 0);
    const ShufflenetConfig *c = &model->config;
    for (int s = 0; s < SHUFFLENET_STAGES; s++) {
        if (c->repeats[s] < 1 || c->widths[s + 1] % 2)
            return error_set(err, "%s: stage %d: %d blocks of width %d", c->name, s + 2,
                             c->repeats[s], c->widths[s + 1]);
        model->block_count += c->repeats[s];
    }
    model->feature_dim = c->widths[SHUFFLENET_STAGES + 1];
    model->blocks = calloc((size_t)model->block_count, sizeof *model->blocks);
    model->units = calloc((size_t)(5 * model->block_count + 2), sizeof *model->units);
    if (!model->blocks || !model->units) return error_set(err, "out of memory");
    const int in = c->in_channels > 0 ? c->in_channels : 3;
    if (declare_seq(model, &model->conv1, "conv1", 0, in, c->widths[0], 3, 2, 0, 1, err))
        return error_prefix(err, "%s", c->name);
    int b = 0, width = c->widths[0];
    for (int s = 0; s < SHUFFLENET_STAGES; s++)
        for (int i = 0; i < c->repeats[s]; i++, b++) {
            if (declare_block(model, &model->blocks[b], s, i, width, c->widths[s + 1], err))
                return error_prefix(err, "%s", c->name);
            width = c->widths[s + 1];
        }
    if (declare_seq(model, &model->conv5, "conv5", 0, width, model->feature_dim, 1, 1, 0, 1,
                    err))
        return error_prefix(err, "%s", c->name);
    return 0;
}

// ---- plans ---------------------------------------------------------------------------------

static void plans_free(const Shufflenet *model, ShufflenetPlans *plans) {
    Backend *backend = model->backend;
    for (int i = 0; i < plans->owned_count; i++)
        backend->op.conv2d_plan_free(backend, plans->owned[i]);
    for (int u = 0; plans->depthwise && u < model->unit_count; u++)
        if (plans->depthwise[u]) backend->op.depthwise_plan_free(backend, plans->depthwise[u]);
    free(plans->shapes);
    free(plans->plans);
    free(plans->owned);
    free(plans->depthwise);
    memset(plans, 0, sizeof *plans);
}

// The unit's shape on an input of *height x *width; the output size follows.
static int unit_shape(ShufflenetPlans *plans, const ShufflenetUnit *unit, int batch, int *height,
                      int *width, ErrorMessage *err) {
    ConvShape *shape = &plans->shapes[unit->id];
    if (conv_shape_make(shape, batch, *height, *width, unit->conv.in_channels,
                        unit->conv.out_channels, unit->conv.kernel, unit->conv.stride,
                        unit->conv.padding, err))
        return -1;
    *height = shape->out_height;
    *width = shape->out_width;
    return 0;
}

static int plans_make(Shufflenet *model, int batch, int resolution, ShufflenetPlans *plans,
                      ErrorMessage *err) {
    memset(plans, 0, sizeof *plans);
    plans->batch = batch;
    const size_t n = (size_t)model->unit_count;
    plans->shapes = calloc(n, sizeof *plans->shapes);
    plans->plans = calloc(n, sizeof *plans->plans);
    plans->owned = calloc(n, sizeof *plans->owned);
    plans->depthwise = calloc(n, sizeof *plans->depthwise);
    if (!plans->shapes || !plans->plans || !plans->owned || !plans->depthwise)
        return error_set(err, "out of memory");
    int h = resolution, w = resolution;
    if (unit_shape(plans, &model->conv1, batch, &h, &w, err) ||
        pool_shape_make(&plans->pool, batch, h, w, model->conv1.conv.out_channels, 3, 2, 1, err))
        return -1;
    h = plans->pool.out_height;
    w = plans->pool.out_width;
    for (int b = 0; b < model->block_count; b++) {
        const ShufflenetBlock *block = &model->blocks[b];
        int hh = h, ww = w;
        for (int i = 0; block->stride > 1 && i < 2; i++)
            if (unit_shape(plans, &block->branch1[i], batch, &hh, &ww, err)) return -1;
        for (int i = 0; i < 3; i++)
            if (unit_shape(plans, &block->branch2[i], batch, &h, &w, err)) return -1;
    }
    if (unit_shape(plans, &model->conv5, batch, &h, &w, err)) return -1;
    for (int u = 0; u < model->unit_count; u++) {
        const ConvShape *s = &plans->shapes[u];
        if (model->units[u]->depthwise) {
            DepthwiseShape shape;
            if (depthwise_shape_make(&shape, s->batch, s->in_height, s->in_width, s->in_channels,
                                     s->kernel, s->stride, s->padding, err))
                return -1;
            plans->depthwise[u] = model->backend->op.depthwise_plan(model->backend, &shape, err);
            if (!plans->depthwise[u]) return -1;
            continue;
        }
        // identical shapes (a stage's 1x1 convs) share one plan
        plans->plans[u] = conv_plan_shared(model->backend, plans->shapes, plans->plans, u,
                                           plans->owned, &plans->owned_count, err);
        if (!plans->plans[u]) return -1;
    }
    return 0;
}

int shufflenet_prepare_batch(Shufflenet *model, int slot_index, int batch, ErrorMessage *err) {
    if (slot_index < 0 || slot_index >= model->slot_count)
        return error_set(err, "%s: no input slot %d", model->config.name, slot_index);
    ShufflenetSlot *slot = &model->slots[slot_index];
    if (batch < 1 || batch > slot->max.batch)
        return error_set(err, "%s: batch %d outside 1..%d of slot %d", model->config.name, batch,
                         slot->max.batch, slot_index);
    for (int i = 0; i < slot->plans_count; i++)
        if (slot->plans[i].batch == batch) return 0;
    ShufflenetPlans *grown = realloc(slot->plans, (size_t)(slot->plans_count + 1) * sizeof *grown);
    if (!grown) return error_set(err, "out of memory");
    slot->plans = grown;
    if (plans_make(model, batch, slot->max.resolution, &slot->plans[slot->plans_count], err)) {
        plans_free(model, &slot->plans[slot->plans_count]);
        return error_prefix(err, "%s, batch %d", model->config.name, batch);
    }
    slot->last_plans = NULL;  // the realloc may have moved what it pointed to
    slot->backward_ready = 0;
    slot->plans_count++;
    return 0;
}

// ---- activation arenas ---------------------------------------------------------------------

static size_t elements_out(const ConvShape *s) {
    return (size_t)s->batch * s->out_height * s->out_width * s->out_channels;
}
static size_t elements_in(const ConvShape *s) {
    return (size_t)s->batch * s->in_height * s->in_width * s->in_channels;
}

// A frozen model's tensors (it runs no backward): every unit's conv output
// in one buffer (read only by its own norm), the units' outputs in three
// (branch1's result stays in the second while branch2 runs in the first
// and third), one split and one concat for every block, the blocks'
// outputs alternating between two; conv5's output (the feature map) its own.
static void layout_frozen(const Shufflenet *model, ShufflenetSlot *slot, ActivationArena *arena) {
    const size_t n = slot->largest;
    Act *conv_out = activation_take(arena, n), *unit_out[3], *block_out[2];
    for (int i = 0; i < 3; i++) unit_out[i] = activation_take(arena, n);
    for (int i = 0; i < 2; i++) block_out[i] = activation_take(arena, n);
    Act *split = activation_take(arena, n), *cat = activation_take(arena, n);
    for (int u = 0; u < model->unit_count; u++) slot->units[u].conv_out = conv_out;
    slot->units[model->conv1.id].out = unit_out[0];
    for (int b = 0; b < model->block_count; b++) {
        const ShufflenetBlock *block = &model->blocks[b];
        static const int branch1_out[2] = {0, 1}, branch2_out[3] = {0, 2, 0};
        for (int i = 0; block->stride > 1 && i < 2; i++)
            slot->units[block->branch1[i].id].out = unit_out[branch1_out[i]];
        for (int i = 0; i < 3; i++)
            slot->units[block->branch2[i].id].out = unit_out[branch2_out[i]];
        slot->blocks[b].split = block->stride == 1 ? split : NULL;
        slot->blocks[b].cat = cat;
        slot->blocks[b].out = block_out[b % 2];
    }
    slot->units[model->conv5.id].out =
        activation_take(arena, elements_out(&slot->plans[0].shapes[model->conv5.id]));
}

// A trainable model's tensors: each its own (backward reads them).
static void layout_each(const Shufflenet *model, ShufflenetSlot *slot, ActivationArena *arena) {
    const ShufflenetPlans *plans = &slot->plans[0];
    for (int u = 0; u < model->unit_count; u++) {
        const size_t n = elements_out(&plans->shapes[u]);
        slot->units[u].conv_out = activation_take(arena, n);
        slot->units[u].out = activation_take(arena, n);
    }
    for (int b = 0; b < model->block_count; b++) {
        const ShufflenetBlock *block = &model->blocks[b];
        const ConvShape *last = &plans->shapes[block->branch2[2].id];
        const size_t rows = (size_t)last->batch * last->out_height * last->out_width;
        ShufflenetBlockState *state = &slot->blocks[b];
        state->split = block->stride == 1 ? activation_take(arena, rows * block->half) : NULL;
        state->cat = activation_take(arena, rows * block->out_channels);
        state->out = activation_take(arena, rows * block->out_channels);
    }
}

// Lays out (sizing pass: base NULL) or wires a slot's arena at its plans[0]
// (the largest batch); returns its size in bytes.
static size_t layout_slot(const Shufflenet *model, ShufflenetSlot *slot, void *base) {
    ActivationArena arena = activation_arena_begin(model->backend, base);
    const ShufflenetPlans *plans = &slot->plans[0];
    // the largest tensor: any unit's input or output (a block's concat and
    // output are its branch2's last output, doubled, its next block's input)
    slot->largest = 0;
    for (int u = 0; u < model->unit_count; u++) {
        const ConvShape *s = &plans->shapes[u];
        const size_t n = elements_out(s) > elements_in(s) ? elements_out(s) : elements_in(s);
        if (n > slot->largest) slot->largest = n;
        slot->units[u].mean = activation_take_float(&arena, (size_t)s->out_channels);
        slot->units[u].inv_std = activation_take_float(&arena, (size_t)s->out_channels);
    }
    for (int b = 0; b < model->block_count; b++) {
        const ConvShape *last = &plans->shapes[model->blocks[b].branch2[2].id];
        slot->blocks[b].height = last->out_height;
        slot->blocks[b].width = last->out_width;
        if (2 * elements_out(last) > slot->largest) slot->largest = 2 * elements_out(last);
    }
    if (model->frozen) layout_frozen(model, slot, &arena);
    else layout_each(model, slot, &arena);
    const PoolShape *pool = &plans->pool;
    const size_t pooled = (size_t)pool->batch * pool->out_height * pool->out_width * pool->channels;
    slot->pool_out = activation_take(&arena, pooled);
    slot->pool_argmax = activation_take_int32(&arena, pooled);
    const ConvShape *head = &plans->shapes[model->conv5.id];
    slot->map_height = head->out_height;
    slot->map_width = head->out_width;
    slot->features = activation_take(&arena, (size_t)slot->max.batch * model->feature_dim);
    return arena.used;
}

static int allocate_slot(Shufflenet *model, ShufflenetSlot *slot, ShufflenetInputShape shape,
                         ErrorMessage *err) {
    Backend *backend = model->backend;
    slot->max = shape;
    slot->units = calloc((size_t)model->unit_count, sizeof *slot->units);
    slot->blocks = calloc((size_t)model->block_count, sizeof *slot->blocks);
    slot->plans = calloc(1, sizeof *slot->plans);
    if (!slot->units || !slot->blocks || !slot->plans) return error_set(err, "out of memory");
    slot->plans_count = 1;
    if (plans_make(model, shape.batch, shape.resolution, &slot->plans[0], err)) return -1;
    slot->arena_bytes = layout_slot(model, slot, NULL);
    slot->arena = backend->op.alloc(backend, slot->arena_bytes);
    if (!slot->arena)
        return error_set(err, "out of memory for %zu MB of activations (batch %d at %d px)",
                         slot->arena_bytes >> 20, shape.batch, shape.resolution);
    layout_slot(model, slot, slot->arena);
    return 0;
}

int shufflenet_allocate(Shufflenet *model, const ShufflenetInputShape *inputs, int input_count,
                        ErrorMessage *err) {
    Backend *backend = model->backend;
    const char *name = model->config.name;
    if (input_count < 1) return error_set(err, "%s: no input shape given", name);
    if (!backend->op.channel_shuffle)
        return error_set(err, "%s: the %s backend has no channel_shuffle op", name,
                         backend->name);
    model->params.with_grads = !model->frozen;
    if (parameter_set_allocate(&model->params, err) ||
        parameter_set_allocate(&model->buffers, err))
        return error_prefix(err, "%s", name);
    for (int u = 0; u < model->unit_count; u++) {
        conv2d_bind(&model->units[u]->conv, &model->params);
        batchnorm_bind(&model->units[u]->bn, &model->params, &model->buffers);
    }
    model->slots = calloc((size_t)input_count, sizeof *model->slots);
    if (!model->slots) return error_set(err, "out of memory");
    for (int i = 0; i < input_count; i++) {
        model->slot_count = i + 1;  // so shufflenet_free releases a half-built slot
        if (allocate_slot(model, &model->slots[i], inputs[i], err))
            return error_prefix(err, "%s, input %d (batch %d, %d px)", name, i, inputs[i].batch,
                                inputs[i].resolution);
        if (model->slots[i].largest > model->scratch_elements)
            model->scratch_elements = model->slots[i].largest;
    }
    if (model->frozen) return 0;
    const size_t bytes = act_bytes(backend, 6 * model->scratch_elements);
    model->scratch = backend->op.alloc(backend, bytes);
    if (!model->scratch)
        return error_set(err, "%s: out of memory for %zu MB of gradients", name, bytes >> 20);
    return 0;
}

int shufflenet_create(Shufflenet *model, Backend *backend, const ShufflenetConfig *config,
                      const ShufflenetInputShape *inputs, int input_count, uint64_t seed,
                      ErrorMessage *err) {
    if (shufflenet_declare(model, backend, config, err) ||
        shufflenet_allocate(model, inputs, input_count, err) ||
        shufflenet_init(model, seed, err)) {
        shufflenet_free(model);
        return -1;
    }
    return 0;
}

void shufflenet_free(Shufflenet *model) {
    Backend *backend = model->backend;
    for (int i = 0; model->slots && i < model->slot_count; i++) {
        ShufflenetSlot *slot = &model->slots[i];
        for (int p = 0; slot->plans && p < slot->plans_count; p++)
            plans_free(model, &slot->plans[p]);
        free(slot->plans);
        free(slot->units);
        free(slot->blocks);
        if (slot->arena) backend->op.free(backend, slot->arena);
    }
    free(model->slots);
    if (model->scratch) backend->op.free(backend, model->scratch);
    parameter_set_free(&model->params);
    parameter_set_free(&model->buffers);
    free(model->blocks);
    free(model->units);
    memset(model, 0, sizeof *model);
}

// ---- initialisation and weight files ---------------------------------------------------------

int shufflenet_init(Shufflenet *model, uint64_t seed, ErrorMessage *err) {
    for (int u = 0; u < model->unit_count; u++) {
        const ShufflenetUnit *unit = model->units[u];
        const Conv2d *conv = &unit->conv;
        const int fan_in = (unit->depthwise ? 1 : conv->in_channels) * conv->kernel * conv->kernel;
        if (layer_init_parameter(model->backend, &model->params.params[conv->weight_index], seed,
                                 INIT_UNIFORM, 1.0f / sqrtf((float)fan_in), err))
            return -1;
        batchnorm_init(model->backend, &unit->bn, 1.0f);
    }
    model->num_batches_tracked = 0;
    return 0;
}

int shufflenet_load_from(Shufflenet *model, const SafeTensors *file, const char *prefix,
                         ErrorMessage *err) {
    const WeightsLoadOptions options = {.key_prefix = prefix, .ignore_prefix = "fc."};
    if (weights_load_from(file, &model->params, &model->buffers, &model->num_batches_tracked,
                          &options, err))
        return error_prefix(err, "%s", model->config.name);
    return 0;
}

int shufflenet_save(const Shufflenet *model, const char *path, StateDictWrite write,
                    ErrorMessage *err) {
    return weights_save(path, &model->params, &model->buffers, model->num_batches_tracked, write,
                        err);
}

// ---- forward and backward entries -------------------------------------------------------------

static const ShufflenetPlans *find_plans(const ShufflenetSlot *slot, int batch) {
    for (int i = 0; i < slot->plans_count; i++)
        if (slot->plans[i].batch == batch) return &slot->plans[i];
    return NULL;
}

int shufflenet_forward(Shufflenet *model, int slot_index, int batch, const Act *input,
                       int training, ErrorMessage *err) {
    if (slot_index < 0 || slot_index >= model->slot_count)
        return error_set(err, "%s: no input slot %d", model->config.name, slot_index);
    ShufflenetSlot *slot = &model->slots[slot_index];
    const ShufflenetPlans *plans = find_plans(slot, batch);
    if (!plans)
        return error_set(err, "%s: batch %d not prepared on slot %d (shufflenet_prepare_batch)",
                         model->config.name, batch, slot_index);
    // 16-bit activations: the convs read the weights' compute copy
    parameter_set_refresh_compute(&model->params);
    shufflenet_run_forward(model, slot, plans, input, training);
    if (training) model->num_batches_tracked++;
    slot->last_plans = plans;
    slot->backward_ready = training && !model->frozen;
    return 0;
}

const Act *shufflenet_features(const Shufflenet *model, int slot) {
    return model->slots[slot].features;
}

const Act *shufflenet_feature_map(const Shufflenet *model, int slot, int *height, int *width) {
    shufflenet_feature_map_size(model, slot, height, width);
    return model->slots[slot].units[model->conv5.id].out;
}

void shufflenet_feature_map_size(const Shufflenet *model, int slot, int *height, int *width) {
    *height = model->slots[slot].map_height;
    *width = model->slots[slot].map_width;
}

int shufflenet_backward_map(Shufflenet *model, int slot_index, const Act *dfeatures,
                            const Act *dmap, ErrorMessage *err) {
    const char *name = model->config.name;
    if (model->frozen) return error_set(err, "%s: a frozen model runs no backward", name);
    if (slot_index < 0 || slot_index >= model->slot_count)
        return error_set(err, "%s: no input slot %d", name, slot_index);
    ShufflenetSlot *slot = &model->slots[slot_index];
    if (!slot->backward_ready)
        return error_set(err, "%s: backward without a training forward on slot %d", name,
                         slot_index);
    if (!dfeatures && !dmap) return error_set(err, "%s: backward with no gradient", name);
    Backend *backend = model->backend;
    const ShufflenetPlans *plans = slot->last_plans;
    const size_t pixels = (size_t)slot->map_height * slot->map_width;
    const size_t n = (size_t)plans->batch * pixels * model->feature_dim;
    Act *dtop = model->scratch;  // the first of the scratch tensors (shufflenet_blocks.c)
    if (dfeatures) {
        backend->op.avgpool_backward(backend, plans->batch, (int)pixels, model->feature_dim,
                                     dfeatures, dtop);
        if (dmap) backend->op.act_axpby(backend, n, 1.0f, dmap, 1.0f, dtop);
    } else {
        backend->op.copy(backend, dtop, dmap, act_bytes(backend, n));
    }
    shufflenet_run_backward(model, slot, plans, dtop);
    slot->backward_ready = 0;
    return 0;
}
