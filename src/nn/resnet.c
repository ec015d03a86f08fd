// ResNet construction: the architecture table, parameter declaration with
// torchvision names, conv plans per input slot, the activation arenas,
// initialisation and weight files (see resnet.h). Forward and backward are in
// resnet_blocks.c.
#include "nn/resnet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/activations.h"
#include "nn/batchnorm_sync.h"
#include "nn/weights.h"

#define RESNET_STEM_CHANNELS 64

const ResnetArchitecture resnet_architectures[] = {
    {18, 0, {2, 2, 2, 2}},   {26, 1, {2, 2, 2, 2}},  {34, 0, {3, 4, 6, 3}},
    {50, 1, {3, 4, 6, 3}},   {101, 1, {3, 4, 23, 3}}, {152, 1, {3, 8, 36, 3}},
    {200, 1, {3, 24, 36, 3}},
};
const int resnet_architecture_count =
    (int)(sizeof resnet_architectures / sizeof resnet_architectures[0]);

ResnetConfig resnet_config_default(int depth) {
    return (ResnetConfig){.depth = depth, .zero_init_residual = 0, .bn_momentum = 0.1f,
                          .bn_eps = 1e-5f};
}

// ---- structure and parameters ---------------------------------------------------

typedef struct StageSpec {
    int in, out, kernel, stride;
} StageSpec;

static int declare_block(Resnet *model, ResnetBlock *block, int layer, int index, int bottleneck,
                         int in_channels, int planes, int stride, ErrorMessage *err) {
    const ResnetConfig *config = &model->config;
    const int expansion = bottleneck ? 4 : 1, out_channels = planes * expansion;
    const int width = planes * (config->width_factor > 1 ? config->width_factor : 1);
    memset(block, 0, sizeof *block);
    block->bottleneck = bottleneck;
    block->stage_count = bottleneck ? 3 : 2;
    // The residual branch, stage by stage (v1.5: the 3x3 conv carries the stride).
    StageSpec stages[RESNET_MAX_STAGES];
    if (bottleneck) {
        stages[0] = (StageSpec){in_channels, width, 1, 1};
        stages[1] = (StageSpec){width, width, 3, stride};
        stages[2] = (StageSpec){width, out_channels, 1, 1};
    } else {
        stages[0] = (StageSpec){in_channels, width, 3, stride};
        stages[1] = (StageSpec){width, width, 3, 1};
    }
    char name[PARAM_MAX_NAME];
    for (int s = 0; s < block->stage_count; s++) {
        snprintf(name, sizeof name, "layer%d.%d.conv%d.weight", layer, index, s + 1);
        if (conv2d_declare(&block->conv[s], &model->params, name, stages[s].in, stages[s].out,
                           stages[s].kernel, stages[s].stride, stages[s].kernel / 2, err))
            return -1;
        snprintf(name, sizeof name, "layer%d.%d.bn%d", layer, index, s + 1);
        if (batchnorm_declare(&block->bn[s], &model->params, &model->buffers, name, stages[s].out,
                              config->bn_momentum, config->bn_eps, err))
            return -1;
    }
    block->has_downsample = stride != 1 || in_channels != out_channels;
    if (block->has_downsample) {
        snprintf(name, sizeof name, "layer%d.%d.downsample.0.weight", layer, index);
        if (conv2d_declare(&block->downsample_conv, &model->params, name, in_channels,
                           out_channels, 1, stride, 0, err))
            return -1;
        snprintf(name, sizeof name, "layer%d.%d.downsample.1", layer, index);
        if (batchnorm_declare(&block->downsample_bn, &model->params, &model->buffers, name,
                              out_channels, config->bn_momentum, config->bn_eps, err))
            return -1;
    }
    return 0;
}

// Numbers every conv in forward order: stem, then per block its stages and downsample.
static int number_convs(Resnet *model, ErrorMessage *err) {
    int count = 1;
    for (int b = 0; b < model->block_count; b++)
        count += model->blocks[b].stage_count + model->blocks[b].has_downsample;
    model->convs = calloc((size_t)count, sizeof *model->convs);
    if (!model->convs) return error_set(err, "out of memory");
    model->conv_count = count;
    int c = 0;
    model->convs[c++] = &model->stem_conv;
    for (int b = 0; b < model->block_count; b++) {
        ResnetBlock *block = &model->blocks[b];
        block->first_conv = c;
        for (int s = 0; s < block->stage_count; s++) model->convs[c++] = &block->conv[s];
        if (block->has_downsample) model->convs[c++] = &block->downsample_conv;
    }
    return 0;
}

int resnet_declare(Resnet *model, Backend *backend, const ResnetConfig *config, ErrorMessage *err) {
    memset(model, 0, sizeof *model);
    model->backend = backend;
    model->config = *config;
    parameter_set_init(&model->params, backend, 1);
    parameter_set_init(&model->buffers, backend, 0);
    const ResnetArchitecture *arch = NULL;
    for (int i = 0; i < resnet_architecture_count; i++)
        if (resnet_architectures[i].depth == config->depth) arch = &resnet_architectures[i];
    if (!arch)
        return error_set(err, "resnet: depth %d not supported (18, 26, 34, 50, 101, 152 or 200)",
                         config->depth);
    if (config->width_factor > 1 && config->depth != 50 && config->depth != 101)
        return error_set(err, "resnet: a wide resnet%d does not exist (50 and 101 do)",
                         config->depth);
    model->feature_dim = 512 * (arch->bottleneck ? 4 : 1);
    for (int l = 0; l < 4; l++) model->block_count += arch->blocks[l];
    model->blocks = calloc((size_t)model->block_count, sizeof *model->blocks);
    if (!model->blocks) return error_set(err, "out of memory");

    const int image_channels = config->in_channels > 0 ? config->in_channels : 3;
    if (conv2d_declare(&model->stem_conv, &model->params, "conv1.weight", image_channels,
                       RESNET_STEM_CHANNELS,
                       7, 2, 3, err) ||
        batchnorm_declare(&model->stem_bn, &model->params, &model->buffers, "bn1",
                          RESNET_STEM_CHANNELS, config->bn_momentum, config->bn_eps, err))
        goto fail;
    int in_channels = RESNET_STEM_CHANNELS, b = 0;
    for (int l = 0; l < 4; l++) {
        const int width = 64 << l;
        for (int i = 0; i < arch->blocks[l]; i++, b++) {
            const int stride = (l > 0 && i == 0) ? 2 : 1;
            if (declare_block(model, &model->blocks[b], l + 1, i, arch->bottleneck, in_channels,
                              width, stride, err))
                goto fail;
            in_channels = width * (arch->bottleneck ? 4 : 1);
        }
    }
    if (number_convs(model, err)) goto fail;
    return 0;
fail:
    return error_prefix(err, "resnet%d", config->depth);
}

// ---- conv plans ---------------------------------------------------------------------

static void plans_free(Backend *backend, ResnetPlans *plans) {
    for (int i = 0; i < plans->owned_count; i++)
        backend->op.conv2d_plan_free(backend, plans->owned[i]);
    free(plans->conv_shapes);
    free(plans->conv_plans);
    free(plans->owned);
    memset(plans, 0, sizeof *plans);
}

static const char *conv_name(const Resnet *model, int c) {
    return model->params.params[model->convs[c]->weight_index].name;
}

// Walks the network's geometry for batch x resolution and makes a plan per
// distinct conv shape.
static int plans_make(Resnet *model, int batch, int resolution, ResnetPlans *plans,
                      ErrorMessage *err) {
    memset(plans, 0, sizeof *plans);
    plans->batch = batch;
    const size_t n = (size_t)model->conv_count;
    plans->conv_shapes = calloc(n, sizeof *plans->conv_shapes);
    plans->conv_plans = calloc(n, sizeof *plans->conv_plans);
    plans->owned = calloc(n, sizeof *plans->owned);
    if (!plans->conv_shapes || !plans->conv_plans || !plans->owned)
        return error_set(err, "out of memory");
    ConvShape *shapes = plans->conv_shapes;
    if (conv2d_shape(&model->stem_conv, batch, resolution, resolution, &shapes[0], err) ||
        pool_shape_make(&plans->pool, batch, shapes[0].out_height, shapes[0].out_width,
                        RESNET_STEM_CHANNELS, 3, 2, 1, err))
        return error_prefix(err, "stem at %d px", resolution);
    int height = plans->pool.out_height, width = plans->pool.out_width;
    for (int b = 0; b < model->block_count; b++) {
        const ResnetBlock *block = &model->blocks[b];
        int h = height, w = width;
        for (int s = 0; s < block->stage_count; s++) {
            ConvShape *shape = &shapes[block->first_conv + s];
            if (conv2d_shape(&block->conv[s], batch, h, w, shape, err))
                return error_prefix(err, "%s at %d px", conv_name(model, block->first_conv + s),
                                    resolution);
            h = shape->out_height, w = shape->out_width;
        }
        if (block->has_downsample) {
            const int c = block->first_conv + block->stage_count;
            if (conv2d_shape(&block->downsample_conv, batch, height, width, &shapes[c], err))
                return error_prefix(err, "%s at %d px", conv_name(model, c), resolution);
        }
        height = h, width = w;
    }
    for (int c = 0; c < model->conv_count; c++) {
        for (int earlier = 0; earlier < c && !plans->conv_plans[c]; earlier++)
            if (memcmp(&shapes[earlier], &shapes[c], sizeof *shapes) == 0)
                plans->conv_plans[c] = plans->conv_plans[earlier];
        if (plans->conv_plans[c]) continue;
        ConvPlan *plan = model->backend->op.conv2d_plan(model->backend, &shapes[c], err);
        if (!plan) return error_prefix(err, "%s at %d px", conv_name(model, c), resolution);
        plans->owned[plans->owned_count++] = plan;
        plans->conv_plans[c] = plan;
    }
    return 0;
}

int resnet_prepare_batch(Resnet *model, int slot_index, int batch, ErrorMessage *err) {
    if (slot_index < 0 || slot_index >= model->slot_count)
        return error_set(err, "resnet: no input slot %d (%d slots)", slot_index,
                         model->slot_count);
    ResnetSlot *slot = &model->slots[slot_index];
    if (batch < 1 || batch > slot->max.batch)
        return error_set(err, "resnet: batch %d outside 1..%d of slot %d", batch, slot->max.batch,
                         slot_index);
    for (int i = 0; i < slot->plans_count; i++)
        if (slot->plans[i].batch == batch) return 0;
    ResnetPlans *grown = realloc(slot->plans, (size_t)(slot->plans_count + 1) * sizeof *grown);
    if (!grown) return error_set(err, "out of memory");
    slot->plans = grown;
    ResnetPlans *plans = &slot->plans[slot->plans_count];
    if (plans_make(model, batch, slot->max.resolution, plans, err)) {
        plans_free(model->backend, plans);
        return error_prefix(err, "resnet%d", model->config.depth);
    }
    // Forward keeps a pointer into the array; the realloc may have moved it.
    slot->last_plans = NULL;
    slot->backward_ready = 0;
    slot->plans_count++;
    return 0;
}

// ---- activation arenas ---------------------------------------------------------------

static size_t conv_output_elements(const ConvShape *shape) {
    return (size_t)shape->batch * shape->out_height * shape->out_width * shape->out_channels;
}

static void track_max(size_t *largest, size_t elements) {
    if (elements > *largest) *largest = elements;
}

// The output of block b (its last stage's conv output size).
static size_t block_output_elements(const ResnetBlock *block, const ConvShape *shapes) {
    return conv_output_elements(&shapes[block->first_conv + block->stage_count - 1]);
}

// Whether stage s's norm output can share the slot's stage scratch: a
// trained model whose plans (at the slot's largest batch) fuse stage s's
// statistics and take the next stage's prologue, so a training step never
// writes it (resnet_blocks.c recomputes it where one does).
static int relu_out_shared(const Resnet *model, const ResnetPlans *plans,
                           const ResnetBlock *block, int s) {
    Backend *backend = model->backend;
    if (model->frozen || model->config.batchnorm_synchronised || s + 1 >= block->stage_count ||
        !backend->op.conv2d_fusions)
        return 0;
    const int c = block->first_conv + s;
    return (backend->op.conv2d_fusions(backend, plans->conv_plans[c]) & CONV_FUSES_STATISTICS) &&
           (backend->op.conv2d_fusions(backend, plans->conv_plans[c + 1]) & CONV_FUSES_PROLOGUE);
}

// Lays out (sizing pass: base NULL) or wires a slot's arena; returns its size
// in bytes and raises *largest to its largest tensor (in elements).
// A frozen model keeps nothing for backward: the blocks' outputs alternate
// between two buffers and their other tensors share one region, rewound
// for every block (the arena's `used` is set back to where it began).
static size_t layout_slot(Resnet *model, ResnetSlot *slot, void *base, size_t *largest) {
    ActivationArena arena = activation_arena_begin(model->backend, base);
    const ResnetPlans *plans = &slot->plans[0];  // at the slot's maximum batch
    const ConvShape *shapes = plans->conv_shapes;
    const size_t stem = conv_output_elements(&shapes[0]);
    const PoolShape *pool = &plans->pool;
    const size_t pooled = (size_t)pool->batch * pool->out_height * pool->out_width * pool->channels;
    slot->stem_conv_out = activation_take(&arena, stem);
    slot->stem_out = activation_take(&arena, stem);
    slot->stem_bn_mean = activation_take_float(&arena, RESNET_STEM_CHANNELS);
    slot->stem_bn_inv_std = activation_take_float(&arena, RESNET_STEM_CHANNELS);
    slot->pool_out = activation_take(&arena, pooled);
    slot->pool_argmax = activation_take_int32(&arena, pooled);
    track_max(largest, stem);
    size_t stage_scratch = 0;  // the largest relu_out that shares
    for (int b = 0; b < model->block_count; b++)
        for (int s = 0; s < model->blocks[b].stage_count; s++)
            if (relu_out_shared(model, plans, &model->blocks[b], s))
                track_max(&stage_scratch,
                          conv_output_elements(&shapes[model->blocks[b].first_conv + s]));
    slot->stage_scratch = stage_scratch ? activation_take(&arena, stage_scratch) : NULL;
    Act *outputs[2] = {NULL, NULL};
    size_t shared_start = 0, shared_end = 0;
    if (model->frozen) {
        size_t widest = 0;
        for (int b = 0; b < model->block_count; b++)
            track_max(&widest, block_output_elements(&model->blocks[b], shapes));
        outputs[0] = activation_take(&arena, widest);
        outputs[1] = activation_take(&arena, widest);
        shared_start = shared_end = arena.used;
    }
    for (int b = 0; b < model->block_count; b++) {
        const ResnetBlock *block = &model->blocks[b];
        ResnetBlockActivations *saved = &slot->blocks[b];
        if (model->frozen) arena.used = shared_start;
        for (int s = 0; s < block->stage_count; s++) {
            const size_t elements = conv_output_elements(&shapes[block->first_conv + s]);
            saved->conv_out[s] = activation_take(&arena, elements);
            const int shared = relu_out_shared(model, plans, block, s);
            if (s + 1 < block->stage_count) {
                saved->relu_out_shared[s] = shared;
                saved->relu_out[s] = shared ? slot->stage_scratch : activation_take(&arena, elements);
            } else if (model->frozen) saved->out = base ? outputs[b % 2] : NULL;
            else saved->out = activation_take(&arena, elements);
            saved->bn_mean[s] = activation_take_float(&arena, (size_t)block->bn[s].channels);
            saved->bn_inv_std[s] = activation_take_float(&arena, (size_t)block->bn[s].channels);
            track_max(largest, elements);
        }
        if (block->has_downsample) {
            const int c = block->first_conv + block->stage_count;
            saved->downsample_conv_out = activation_take(&arena, conv_output_elements(&shapes[c]));
            const size_t channels = (size_t)block->downsample_bn.channels;
            saved->bn_mean[block->stage_count] = activation_take_float(&arena, channels);
            saved->bn_inv_std[block->stage_count] = activation_take_float(&arena, channels);
        }
        if (arena.used > shared_end) shared_end = arena.used;
    }
    if (model->frozen) arena.used = shared_end;
    slot->features = activation_take(&arena, (size_t)slot->max.batch * model->feature_dim);
    return arena.used;
}

static int allocate_slot(Resnet *model, ResnetSlot *slot, ResnetInputShape shape,
                         size_t *largest, ErrorMessage *err) {
    Backend *backend = model->backend;
    slot->max = shape;
    slot->blocks = calloc((size_t)model->block_count, sizeof *slot->blocks);
    slot->plans = calloc(1, sizeof *slot->plans);
    if (!slot->blocks || !slot->plans) return error_set(err, "out of memory");
    slot->plans_count = 1;
    if (plans_make(model, shape.batch, shape.resolution, &slot->plans[0], err)) return -1;
    slot->arena_bytes = layout_slot(model, slot, NULL, largest);
    slot->arena = backend->op.alloc(backend, slot->arena_bytes);
    if (!slot->arena)
        return error_set(err, "out of memory for %zu MB of activations (batch %d at %d px)",
                         slot->arena_bytes >> 20, shape.batch, shape.resolution);
    layout_slot(model, slot, slot->arena, largest);
    return 0;
}

static void bind_layers(Resnet *model) {
    conv2d_bind(&model->stem_conv, &model->params);
    batchnorm_bind(&model->stem_bn, &model->params, &model->buffers);
    for (int b = 0; b < model->block_count; b++) {
        ResnetBlock *block = &model->blocks[b];
        for (int s = 0; s < block->stage_count; s++) {
            conv2d_bind(&block->conv[s], &model->params);
            batchnorm_bind(&block->bn[s], &model->params, &model->buffers);
        }
        if (block->has_downsample) {
            conv2d_bind(&block->downsample_conv, &model->params);
            batchnorm_bind(&block->downsample_bn, &model->params, &model->buffers);
        }
    }
}

int resnet_attach_batchnorm_sync(Resnet *model, BatchNormSync *sync, ErrorMessage *err) {
    if (batchnorm_sync_attach(sync, &model->stem_bn, err)) return -1;
    for (int b = 0; b < model->block_count; b++) {
        ResnetBlock *block = &model->blocks[b];
        for (int s = 0; s < block->stage_count; s++)
            if (batchnorm_sync_attach(sync, &block->bn[s], err)) return -1;
        if (block->has_downsample &&
            batchnorm_sync_attach(sync, &block->downsample_bn, err))
            return -1;
    }
    return 0;
}

int resnet_allocate(Resnet *model, const ResnetInputShape *inputs, int input_count,
                    ErrorMessage *err) {
    Backend *backend = model->backend;
    if (input_count < 1) return error_set(err, "resnet: no input shape given");
    model->params.with_grads = !model->frozen;
    if (parameter_set_allocate(&model->params, err) ||
        parameter_set_allocate(&model->buffers, err))
        return error_prefix(err, "resnet%d", model->config.depth);
    bind_layers(model);
    model->slots = calloc((size_t)input_count, sizeof *model->slots);
    if (!model->slots) return error_set(err, "out of memory");
    size_t largest = 0;
    for (int i = 0; i < input_count; i++) {
        model->slot_count = i + 1;  // so resnet_free releases a half-built slot
        if (allocate_slot(model, &model->slots[i], inputs[i], &largest, err))
            return error_prefix(err, "resnet%d, input %d (batch %d, %d px)", model->config.depth,
                                i, inputs[i].batch, inputs[i].resolution);
    }
    // Backward's three gradient buffers; a frozen model needs only the
    // forward's shortcut scratch (the first of them).
    const size_t buffers = model->frozen ? 1 : 3;
    model->scratch_elements = largest;
    model->scratch = backend->op.alloc(backend, act_bytes(backend, buffers * largest));
    if (!model->scratch)
        return error_set(err, "resnet: out of memory for %zu MB of gradient scratch",
                         act_bytes(backend, buffers * largest) >> 20);
    if (backend->op.conv2d_forward_stats) {  // 2 sums per channel of the widest norm
        model->bn_sums = backend->op.alloc(backend, 2 * (size_t)model->feature_dim * sizeof(float));
        if (!model->bn_sums) return error_set(err, "resnet: out of memory for BatchNorm sums");
    }
    return 0;
}

int resnet_create(Resnet *model, Backend *backend, const ResnetConfig *config,
                  const ResnetInputShape *inputs, int input_count, uint64_t seed,
                  ErrorMessage *err) {
    if (resnet_declare(model, backend, config, err) ||
        resnet_allocate(model, inputs, input_count, err) || resnet_init(model, seed, err)) {
        resnet_free(model);
        return -1;
    }
    return 0;
}

void resnet_free(Resnet *model) {
    Backend *backend = model->backend;
    for (int i = 0; model->slots && i < model->slot_count; i++) {
        ResnetSlot *slot = &model->slots[i];
        for (int p = 0; slot->plans && p < slot->plans_count; p++)
            plans_free(backend, &slot->plans[p]);
        free(slot->plans);
        free(slot->blocks);
        if (slot->arena) backend->op.free(backend, slot->arena);
    }
    free(model->slots);
    if (model->scratch) backend->op.free(backend, model->scratch);
    if (model->bn_sums) backend->op.free(backend, model->bn_sums);
    parameter_set_free(&model->params);
    parameter_set_free(&model->buffers);
    free(model->blocks);
    free(model->convs);
    memset(model, 0, sizeof *model);
}

// ---- initialisation and weight files ------------------------------------------------

int resnet_init(Resnet *model, uint64_t seed, ErrorMessage *err) {
    Backend *backend = model->backend;
    for (int c = 0; c < model->conv_count; c++)
        if (conv2d_init_kaiming(backend, model->convs[c], &model->params, seed, err)) return -1;
    batchnorm_init(backend, &model->stem_bn, 1.0f);
    for (int b = 0; b < model->block_count; b++) {
        const ResnetBlock *block = &model->blocks[b];
        for (int s = 0; s < block->stage_count; s++) {
            const int last = s == block->stage_count - 1;
            batchnorm_init(backend, &block->bn[s],
                           last && model->config.zero_init_residual ? 0.0f : 1.0f);
        }
        if (block->has_downsample) batchnorm_init(backend, &block->downsample_bn, 1.0f);
    }
    model->num_batches_tracked = 0;
    return 0;
}

int resnet_save(const Resnet *model, const char *path, StateDictWrite write, ErrorMessage *err) {
    return weights_save(path, &model->params, &model->buffers, model->num_batches_tracked, write,
                        err);
}

int resnet_load(Resnet *model, const char *path, ErrorMessage *err) {
    const WeightsLoadOptions options = {.ignore_prefix = "fc."};
    if (weights_load(path, &model->params, &model->buffers, &model->num_batches_tracked, &options,
                     err))
        return error_prefix(err, "resnet%d", model->config.depth);
    return 0;
}
