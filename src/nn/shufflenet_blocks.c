// ShuffleNetV2 forward and backward (shufflenet.h) on the backend ops. The
// halves of a block's channels and the concat of its branches are strided
// copies (copy_2d) into and out of contiguous buffers; the shuffle is the
// channel_shuffle op, whose backward is the same op with C / 2 groups.
//
// Backward runs on six scratch tensors of the largest activation (G0..G5):
// the block gradients alternate between G0 and G1, G2 holds the concat's
// gradient, G3 and G4 a branch's alternating gradients, G5 a unit's
// gradient before its conv. Activation gradients `=`, parameter gradients
// `+=`.
#include "nn/shufflenet.h"

typedef struct Run {
    Shufflenet *model;
    Backend *backend;
    ShufflenetSlot *slot;
    const ShufflenetPlans *plans;
    int training;
} Run;

static size_t unit_rows(const Run *run, const ShufflenetUnit *unit) {
    const ConvShape *shape = &run->plans->shapes[unit->id];
    return (size_t)shape->batch * shape->out_height * shape->out_width;
}

static void copy_cols(const Run *run, size_t rows, int cols, const Act *x, size_t x_stride, Act *y,
                      size_t y_stride) {
    run->backend->op.copy_2d(run->backend, rows, (size_t)cols, x, x_stride, y, y_stride);
}

static Act *scratch(const Run *run, int index) {
    return act_at(run->backend, run->model->scratch, (size_t)index * run->model->scratch_elements);
}

// ---- a unit: conv (or depthwise) -> BN (-> ReLU): layers.h conv_unit_* ---------------------

static ConvUnitStep unit_step(const Run *run, const ShufflenetUnit *unit) {
    return (ConvUnitStep){&unit->conv, &unit->bn, unit->act,
                          unit->depthwise ? NULL : run->plans->plans[unit->id],
                          unit->depthwise ? run->plans->depthwise[unit->id] : NULL,
                          unit_rows(run, unit)};
}

static const Act *unit_forward(const Run *run, const ShufflenetUnit *unit, const Act *x) {
    ShufflenetUnitState *state = &run->slot->units[unit->id];
    const ConvUnitStep step = unit_step(run, unit);
    state->input = x;
    conv_unit_forward(run->backend, &step, run->training, x, state->conv_out, state->out,
                      state->mean, state->inv_std);
    return state->out;
}

// dx = d(loss)/d(input) of dy (NULL: none); the conv's gradient goes through G5.
static void unit_backward(const Run *run, const ShufflenetUnit *unit, const Act *dy, Act *dx) {
    const ShufflenetUnitState *state = &run->slot->units[unit->id];
    const ConvUnitStep step = unit_step(run, unit);
    // (out as the forward left it: the blocks only copy the units' outputs)
    conv_unit_backward(run->backend, &step, state->input, state->conv_out, state->out,
                       state->mean, state->inv_std, dy, NULL, scratch(run, 5), dx);
}

// A branch of `count` units in a row; returns the last one's output.
static const Act *branch_forward(const Run *run, const ShufflenetUnit *units, int count,
                                 const Act *x) {
    for (int i = 0; i < count; i++) x = unit_forward(run, &units[i], x);
    return x;
}

// ---- blocks ----------------------------------------------------------------------------------

static const Act *block_forward(const Run *run, const ShufflenetBlock *block, int index,
                                const Act *x) {
    Backend *backend = run->backend;
    ShufflenetBlockState *state = &run->slot->blocks[index];
    const int h = block->half, c = block->out_channels;
    const size_t rows = unit_rows(run, &block->branch2[2]);
    Act *upper = act_at(backend, state->cat, (size_t)h);
    if (block->stride > 1) {
        const Act *a = branch_forward(run, block->branch1, 2, x);
        const Act *b = branch_forward(run, block->branch2, 3, x);
        copy_cols(run, rows, h, a, (size_t)h, state->cat, (size_t)c);
        copy_cols(run, rows, h, b, (size_t)h, upper, (size_t)c);
    } else {  // x1 passes, x2 (the upper half) goes through branch2
        copy_cols(run, rows, h, act_at_const(backend, x, (size_t)h), (size_t)c, state->split,
                  (size_t)h);
        const Act *b = branch_forward(run, block->branch2, 3, state->split);
        copy_cols(run, rows, h, x, (size_t)c, state->cat, (size_t)c);
        copy_cols(run, rows, h, b, (size_t)h, upper, (size_t)c);
    }
    backend->op.channel_shuffle(backend, rows, c, 2, state->cat, state->out);
    return state->out;
}

// dx (the block's input) = d(loss)/dx of dy (its output).
static void block_backward(const Run *run, const ShufflenetBlock *block, const Act *dy, Act *dx) {
    Backend *backend = run->backend;
    const int h = block->half, c = block->out_channels;
    const size_t rows = unit_rows(run, &block->branch2[2]);
    Act *dcat = scratch(run, 2), *g3 = scratch(run, 3), *g4 = scratch(run, 4);
    const Act *dupper = act_at_const(backend, dcat, (size_t)h);
    backend->op.channel_shuffle(backend, rows, c, c / 2, dy, dcat);
    // branch2: dy in G3, units alternate G3 -> G4 -> G3 -> G4
    copy_cols(run, rows, h, dupper, (size_t)c, g3, (size_t)h);
    unit_backward(run, &block->branch2[2], g3, g4);
    unit_backward(run, &block->branch2[1], g4, g3);
    unit_backward(run, &block->branch2[0], g3, g4);
    if (block->stride == 1) {  // dx = [d x1 | d x2]
        copy_cols(run, rows, h, dcat, (size_t)c, dx, (size_t)c);
        copy_cols(run, rows, h, g4, (size_t)h, act_at(backend, dx, (size_t)h), (size_t)c);
        return;
    }
    // branch1 reads x too: dx = its gradient + branch2's (in G4); G2 is free
    // once its lower half is in G3
    copy_cols(run, rows, h, dcat, (size_t)c, g3, (size_t)h);
    unit_backward(run, &block->branch1[1], g3, dcat);
    unit_backward(run, &block->branch1[0], dcat, dx);
    const ConvShape *in = &run->plans->shapes[block->branch1[0].id];
    const size_t n = (size_t)in->batch * in->in_height * in->in_width * in->in_channels;
    backend->op.act_axpby(backend, n, 1.0f, g4, 1.0f, dx);
}

// ---- the model -------------------------------------------------------------------------------

void shufflenet_run_forward(Shufflenet *model, ShufflenetSlot *slot, const ShufflenetPlans *plans,
                            const Act *input, int training) {
    const Run run = {model, model->backend, slot, plans, training};
    Backend *backend = model->backend;
    const Act *x = unit_forward(&run, &model->conv1, input);
    maxpool_forward(backend, &plans->pool, x, slot->pool_out, slot->pool_argmax);
    x = slot->pool_out;
    for (int b = 0; b < model->block_count; b++) x = block_forward(&run, &model->blocks[b], b, x);
    x = unit_forward(&run, &model->conv5, x);
    backend->op.avgpool_forward(backend, plans->batch, slot->map_height * slot->map_width,
                                model->feature_dim, x, slot->features);
}

void shufflenet_run_backward(Shufflenet *model, ShufflenetSlot *slot, const ShufflenetPlans *plans,
                             Act *dmap) {
    const Run run = {model, model->backend, slot, plans, 1};
    Act *dy = scratch(&run, 1), *dx = scratch(&run, 0);  // dmap is G0
    unit_backward(&run, &model->conv5, dmap, dy);
    for (int b = model->block_count - 1; b >= 0; b--) {
        block_backward(&run, &model->blocks[b], dy, dx);
        Act *swap = dy;
        dy = dx;
        dx = swap;
    }
    maxpool_backward(model->backend, &plans->pool, dy, slot->pool_argmax, dx);
    unit_backward(&run, &model->conv1, dx, NULL);
}
