// ResNet forward and backward: the stem, the residual blocks (BasicBlock and
// Bottleneck share one code path: a chain of conv-BN(-ReLU) stages plus a
// shortcut) and the pooled head, each backward written out in reverse order
// of its forward. Buffers come from the slot's activation arena and the
// model's gradient scratch (see resnet.h); nothing is allocated here.
#include <stdlib.h>

#include "nn/resnet.h"

static size_t conv_rows(const ConvShape *shape) {
    return (size_t)shape->batch * shape->out_height * shape->out_width;
}

static size_t conv_input_elements(const ConvShape *shape) {
    return (size_t)shape->batch * shape->in_height * shape->in_width * shape->in_channels;
}

// ---- one residual block ---------------------------------------------------------------
//
//   shortcut = x, or downsample_bn(downsample_conv(x))
//   stage s: conv_out[s] = conv_s(in_s);
//            relu_out[s] = relu(bn_s(conv_out[s])), the next stage's input (not for the last stage)
//   out = relu(bn_last(conv_out[last]) + shortcut)
//
// Each BN runs fused with the ReLU (and, last, the shortcut add) after it:
// one pass over the activation instead of three; backward applies the ReLU
// mask inside the BN backward. Where the backend fuses a convolution with
// the statistics of the norm after it and with the previous norm + ReLU as
// its input prologue (cuDNN's ConvBNfprop and ConvBNwgrad), a stage's norm
// is applied by the next stage's convolution, forward and weight gradient,
// and relu_out[s] is never written; the norm's backward then takes its
// ReLU mask from conv_out[s] (saved->prologue), or, where the backend also
// fuses the next stage's data gradient with that ReLU's backward and the
// norm's reduction (cuDNN's DgradDreluBNBwdWeight), is its apply pass alone.

// The norm of stage s - 1 with its saved statistics: stage s's prologue.
static NormAffine previous_norm(const ResnetBlock *block, const ResnetBlockActivations *saved,
                                int s) {
    return batchnorm_affine(&block->bn[s - 1], saved->bn_mean[s - 1], saved->bn_inv_std[s - 1]);
}

// relu_out[s - 1] = relu(bn_{s-1}(conv_out[s - 1])) from the saved statistics:
// the norm a prologue did not take, or its output again for the backward
// where that memory is shared (relu_out_shared).
static void apply_previous_norm(Backend *backend, const ResnetBlock *block,
                                const ResnetBlockActivations *saved, const ResnetPlans *plans,
                                int s) {
    const NormAffine previous = previous_norm(block, saved, s);
    backend->op.batchnorm_forward_apply(
        backend, conv_rows(&plans->conv_shapes[block->first_conv + s - 1]),
        block->bn[s - 1].channels, saved->conv_out[s - 1], NULL, 1, previous.gamma, previous.beta,
        previous.mean, previous.inv_std, saved->relu_out[s - 1]);
}

// x (N, H, W, Cin) -> saved->out (N, OH, OW, Cout). shortcut_scratch holds the
// downsample branch's output (only needed until the add).
// bn_sums: the model's (layers.h conv_batchnorm_forward), or NULL.
static void block_forward(Backend *backend, const ResnetBlock *block,
                          ResnetBlockActivations *saved, const ResnetPlans *plans, int training,
                          const Act *x, Act *shortcut_scratch, float *bn_sums) {
    // The shortcut first: the last stage's fused BN adds it.
    const Act *shortcut = x;
    if (block->has_downsample) {
        const int c = block->first_conv + block->stage_count;
        conv_batchnorm_forward(backend, &block->downsample_conv, plans->conv_plans[c],
                               &block->downsample_bn, training, 0,
                               conv_rows(&plans->conv_shapes[c]), x, saved->downsample_conv_out,
                               NULL, shortcut_scratch, saved->bn_mean[block->stage_count],
                               saved->bn_inv_std[block->stage_count], bn_sums);
        shortcut = shortcut_scratch;
    }
    const Act *stage_in = x;
    int deferred = 0;  // the previous stage's norm + ReLU not applied yet
    for (int s = 0; s < block->stage_count; s++) {
        const int c = block->first_conv + s;
        const int last = s == block->stage_count - 1;
        const size_t rows = conv_rows(&plans->conv_shapes[c]);
        const Conv2d *conv = &block->conv[s];
        const BatchNorm *bn = &block->bn[s];
        Act *y = last ? saved->out : saved->relu_out[s];
        saved->prologue[s] = 0;
        if (deferred) {  // that norm as this convolution's prologue, or applied now
            const NormAffine previous = previous_norm(block, saved, s);
            saved->prologue[s] = conv_batchnorm_statistics(
                backend, conv, plans->conv_plans[c], bn, rows, saved->conv_out[s - 1], &previous,
                saved->conv_out[s], saved->bn_mean[s], saved->bn_inv_std[s], bn_sums);
            if (!saved->prologue[s]) apply_previous_norm(backend, block, saved, plans, s);
        }
        const int statistics =
            saved->prologue[s] ||
            (training && conv_batchnorm_statistics(backend, conv, plans->conv_plans[c], bn, rows,
                                                   stage_in, NULL, saved->conv_out[s],
                                                   saved->bn_mean[s], saved->bn_inv_std[s],
                                                   bn_sums));
        deferred = statistics && !last;
        if (statistics && last)
            backend->op.batchnorm_forward_apply(backend, rows, bn->channels, saved->conv_out[s],
                                                shortcut, 1, bn->weight, bn->bias,
                                                saved->bn_mean[s], saved->bn_inv_std[s], y);
        else if (!statistics)  // the separate ops
            conv_batchnorm_forward(backend, conv, plans->conv_plans[c], bn, training, 1, rows,
                                   stage_in, saved->conv_out[s], last ? shortcut : NULL, y,
                                   saved->bn_mean[s], saved->bn_inv_std[s], NULL);
        stage_in = y;
    }
}

// dout (N, OH, OW, Cout): dL/d(out), consumed (overwritten). dx (N, H, W, Cin) =
// dL/dx through both paths. work: scratch for the BN input gradients.
// bn_sums: the model's, for a norm reduced by the next data gradient.
static void block_backward(Backend *backend, const ResnetBlock *block,
                           const ResnetBlockActivations *saved, const ResnetPlans *plans,
                           const Act *x, Act *dout, Act *work, Act *dx, float *bn_sums) {
    const int last = block->stage_count - 1;
    const size_t in_elements = conv_input_elements(&plans->conv_shapes[block->first_conv]);

    // Residual branch, last stage first; dx carries the running gradient.
    // Each BN backward masks its incoming gradient with its ReLU's output;
    // the last one also leaves the masked gradient dL/d(y_last + shortcut)
    // in dout, for the shortcut.
    const Act *d_stage_out = dout;
    int reduced = 0;  // the next stage's data gradient took this norm's ReLU and reduction
    for (int s = last; s >= 0; s--) {
        const int c = block->first_conv + s;
        const ConvShape *shape = &plans->conv_shapes[c];
        const Act *stage_in = s > 0 ? saved->relu_out[s - 1] : x;
        // NULL where the next convolution applied this norm (its prologue)
        const Act *stage_out = s == last              ? saved->out
                               : saved->prologue[s + 1] ? NULL
                                                        : saved->relu_out[s];
        if (reduced)
            batchnorm_backward_from_sums(backend, &block->bn[s], conv_rows(shape),
                                         saved->conv_out[s], d_stage_out, saved->bn_mean[s],
                                         saved->bn_inv_std[s], bn_sums, work);
        else
            batchnorm_relu_backward(backend, &block->bn[s], conv_rows(shape), saved->conv_out[s],
                                    stage_out, d_stage_out, saved->bn_mean[s],
                                    saved->bn_inv_std[s], work, s == last ? dout : NULL);
        reduced = 0;
        if (saved->prologue[s]) {
            const NormAffine previous = previous_norm(block, saved, s);
            reduced = conv2d_backward_prologue(backend, &block->conv[s], plans->conv_plans[c],
                                               saved->conv_out[s - 1], &block->bn[s - 1],
                                               &previous, work, dx, bn_sums);
        } else {
            if (s > 0 && saved->relu_out_shared[s - 1])  // later blocks wrote over it
                apply_previous_norm(backend, block, saved, plans, s);
            conv2d_backward(backend, &block->conv[s], plans->conv_plans[c], stage_in, work, dx);
        }
        d_stage_out = dx;
    }

    // Shortcut: its gradient w.r.t. x is added to the branch's.
    if (block->has_downsample) {
        const int c = block->first_conv + block->stage_count;
        const ConvShape *shape = &plans->conv_shapes[c];
        batchnorm_backward(backend, &block->downsample_bn, conv_rows(shape),
                           saved->downsample_conv_out, dout, saved->bn_mean[block->stage_count],
                           saved->bn_inv_std[block->stage_count], work);
        // dout is no longer needed: it takes the shortcut's dL/dx.
        conv2d_backward(backend, &block->downsample_conv, plans->conv_plans[c], x, work, dout);
    }
    backend->op.act_axpby(backend, in_elements, 1.0f, dout, 1.0f, dx);  // dx += shortcut gradient
}

// ---- the whole backbone ---------------------------------------------------------------

static int find_slot(const Resnet *model, int slot_index, ErrorMessage *err) {
    if (slot_index < 0 || slot_index >= model->slot_count)
        return error_set(err, "resnet: no input slot %d (%d slots)", slot_index,
                         model->slot_count);
    return 0;
}

// The shape of the last block's output (what the global pool averages).
static const ConvShape *final_shape(const Resnet *model, const ResnetPlans *plans) {
    const ResnetBlock *block = &model->blocks[model->block_count - 1];
    return &plans->conv_shapes[block->first_conv + block->stage_count - 1];
}

static int final_pixels(const Resnet *model, const ResnetPlans *plans) {
    const ConvShape *shape = final_shape(model, plans);
    return shape->out_height * shape->out_width;
}

int resnet_forward(Resnet *model, int slot_index, int batch, const Act *input, int training,
                   ErrorMessage *err) {
    if (find_slot(model, slot_index, err)) return -1;
    ResnetSlot *slot = &model->slots[slot_index];
    const ResnetPlans *plans = NULL;
    for (int i = 0; i < slot->plans_count && !plans; i++)
        if (slot->plans[i].batch == batch) plans = &slot->plans[i];
    if (!plans)
        return error_set(err, "resnet: slot %d (batch <= %d, %d px) has no plans for batch %d "
                              "(see resnet_prepare_batch)",
                         slot_index, slot->max.batch, slot->max.resolution, batch);
    Backend *backend = model->backend;
    Act *shortcut_scratch = model->scratch;  // free during forward
    parameter_set_refresh_compute(&model->params);

    // Stem: conv1 -> bn1 + relu (fused) -> maxpool.
    const size_t stem_rows = conv_rows(&plans->conv_shapes[0]);
    conv_batchnorm_forward(backend, &model->stem_conv, plans->conv_plans[0], &model->stem_bn,
                           training, 1, stem_rows, input, slot->stem_conv_out, NULL,
                           slot->stem_out, slot->stem_bn_mean, slot->stem_bn_inv_std,
                           model->bn_sums);
    maxpool_forward(backend, &plans->pool, slot->stem_out, slot->pool_out, slot->pool_argmax);

    // layer1..layer4.
    const Act *x = slot->pool_out;
    for (int b = 0; b < model->block_count; b++) {
        block_forward(backend, &model->blocks[b], &slot->blocks[b], plans, training, x,
                      shortcut_scratch, model->bn_sums);
        x = slot->blocks[b].out;
    }

    // Global average pool.
    avgpool_forward(backend, batch, final_pixels(model, plans), model->feature_dim, x,
                    slot->features);

    if (training) model->num_batches_tracked++;
    slot->last_plans = plans;
    slot->last_input = input;
    slot->backward_ready = training && !model->frozen;
    return 0;
}

const Act *resnet_features(const Resnet *model, int slot) {
    return model->slots[slot].features;
}

void resnet_feature_map_size(const Resnet *model, int slot, int *height, int *width) {
    const ConvShape *shape = final_shape(model, &model->slots[slot].plans[0]);
    *height = shape->out_height;
    *width = shape->out_width;
}

const Act *resnet_feature_map(const Resnet *model, int slot, int *height, int *width) {
    resnet_feature_map_size(model, slot, height, width);
    return model->slots[slot].blocks[model->block_count - 1].out;
}

int resnet_backward(Resnet *model, int slot_index, const Act *dfeatures, ErrorMessage *err) {
    return resnet_backward_map(model, slot_index, dfeatures, NULL, err);
}

int resnet_backward_map(Resnet *model, int slot_index, const Act *dfeatures, const Act *dmap,
                        ErrorMessage *err) {
    if (find_slot(model, slot_index, err)) return -1;
    if (!dfeatures && !dmap) return error_set(err, "resnet: backward without a gradient");
    if (model->frozen)
        return error_set(err, "resnet: a frozen model (a teacher) keeps nothing for backward");
    ResnetSlot *slot = &model->slots[slot_index];
    if (!slot->backward_ready)
        return error_set(err, "resnet: backward on slot %d without a training forward before it",
                         slot_index);
    Backend *backend = model->backend;
    const ResnetPlans *plans = slot->last_plans;
    const int batch = plans->batch;
    // Three gradient buffers: A holds the gradient flowing into a block's
    // output, C receives the gradient w.r.t. its input, B is BN scratch.
    Act *grad_a = model->scratch;
    Act *grad_b = act_at(backend, model->scratch, model->scratch_elements);
    Act *grad_c = act_at(backend, model->scratch, 2 * model->scratch_elements);

    // Global average pool, plus the gradient of the map itself.
    const int pixels = final_pixels(model, plans);
    const size_t map_elements = (size_t)batch * pixels * model->feature_dim;
    if (dfeatures) avgpool_backward(backend, batch, pixels, model->feature_dim, dfeatures, grad_a);
    if (dmap)
        backend->op.act_axpby(backend, map_elements, 1.0f, dmap, dfeatures ? 1.0f : 0.0f, grad_a);

    // layer4..layer1, each block in reverse; the input gradient feeds the block before.
    for (int b = model->block_count - 1; b >= 0; b--) {
        const Act *x = b > 0 ? slot->blocks[b - 1].out : slot->pool_out;
        block_backward(backend, &model->blocks[b], &slot->blocks[b], plans, x, grad_a, grad_b,
                       grad_c, model->bn_sums);
        parameter_grads_final_from(&model->params, model->blocks[b].conv[0].weight_index);
        Act *swap = grad_a;
        grad_a = grad_c;
        grad_c = swap;
    }

    // Stem in reverse: maxpool, relu + bn1 (fused), conv1 (weights only: no
    // image gradient).
    const size_t stem_rows = conv_rows(&plans->conv_shapes[0]);
    maxpool_backward(backend, &plans->pool, grad_a, slot->pool_argmax, grad_c);
    batchnorm_relu_backward(backend, &model->stem_bn, stem_rows, slot->stem_conv_out,
                            slot->stem_out, grad_c, slot->stem_bn_mean, slot->stem_bn_inv_std,
                            grad_b, NULL);
    conv2d_backward(backend, &model->stem_conv, plans->conv_plans[0], slot->last_input, grad_b,
                    NULL);
    parameter_set_grads_final(&model->params, 0);
    return 0;
}

const Act *resnet_block_pass(Resnet *model, int block_index, int batch, const Act *x,
                             const Act *dout) {
    Backend *backend = model->backend;
    ResnetSlot *slot = &model->slots[0];
    const ResnetPlans *plans = &slot->plans[0];
    for (int i = 0; i < slot->plans_count; i++)
        if (slot->plans[i].batch == batch) plans = &slot->plans[i];
    const ResnetBlock *block = &model->blocks[block_index];
    ResnetBlockActivations *saved = &slot->blocks[block_index];
    parameter_set_refresh_compute(&model->params);
    block_forward(backend, block, saved, plans, 1, x, model->scratch, model->bn_sums);
    Act *grad_a = model->scratch;  // as resnet_backward_map uses the three buffers
    Act *grad_b = act_at(backend, model->scratch, model->scratch_elements);
    Act *grad_c = act_at(backend, model->scratch, 2 * model->scratch_elements);
    const size_t out_elements =
        conv_rows(&plans->conv_shapes[block->first_conv + block->stage_count - 1]) *
        (size_t)block->bn[block->stage_count - 1].channels;
    backend->op.copy(backend, grad_a, dout, act_bytes(backend, out_elements));
    block_backward(backend, block, saved, plans, x, grad_a, grad_b, grad_c, model->bn_sums);
    return grad_c;
}

