// YOLO memory layouts (yolo.h): a slot's activation arena (what forward
// writes and backward reads) and the backward arena (the gradients of one
// layer at a time, shared by the layers and the slots). Each runs twice:
// a sizing pass without base, then the same calls wiring pointers
// (nn/activations.h).
#include <string.h>

#include "nn/activations.h"
#include "nn/yolo_internal.h"

// rows (N H W at the slot's maximum batch) of a unit's output.
static size_t unit_rows(const YoloSlot *slot, const YoloConv *unit) {
    const ConvShape *shape = &slot->plans[0].shapes[unit->id];
    return (size_t)shape->batch * shape->out_height * shape->out_width;
}

static void layout_unit(ActivationArena *arena, YoloSlot *slot, const YoloConv *unit) {
    YoloConvState *state = &slot->convs[unit->id];
    const ConvShape *shape = &slot->plans[0].shapes[unit->id];
    const size_t n = unit_rows(slot, unit) * unit->conv.out_channels;
    state->height = shape->out_height;
    state->width = shape->out_width;
    state->conv_out = activation_take(arena, n);
    state->out = activation_take(arena, n);
    state->mean = activation_take_float(arena, (size_t)unit->conv.out_channels);
    state->inv_std = activation_take_float(arena, (size_t)unit->conv.out_channels);
}

static void layout_bottleneck(ActivationArena *arena, YoloSlot *slot, const YoloBottleneck *b) {
    layout_unit(arena, slot, &b->cv1);
    layout_unit(arena, slot, &b->cv2);
}

static void layout_inner(ActivationArena *arena, YoloSlot *slot, const YoloInner *inner) {
    YoloInnerState *state = &slot->inners[inner->id];
    switch (inner->kind) {
    case YOLO_INNER_BOTTLENECK: layout_bottleneck(arena, slot, &inner->bottleneck); return;
    case YOLO_INNER_C3K: {
        const YoloConv *units[3] = {&inner->cv1, &inner->cv2, &inner->cv3};
        for (int i = 0; i < 3; i++) layout_unit(arena, slot, units[i]);
        for (int i = 0; i < inner->count; i++) layout_bottleneck(arena, slot, &inner->m[i]);
        state->cat = activation_take(arena, unit_rows(slot, &inner->cv1) * 2 * inner->hidden);
        return;
    }
    case YOLO_INNER_PSA:
    case YOLO_INNER_AREA: {
        const YoloConv *units[5] = {&inner->qkv, &inner->proj, &inner->pe, &inner->ffn0,
                                    &inner->ffn1};
        for (int i = 0; i < 5; i++) layout_unit(arena, slot, units[i]);
        const ConvShape *shape = &slot->plans[0].shapes[inner->qkv.id];
        const size_t rows = unit_rows(slot, &inner->qkv), c = (size_t)inner->channels;
        state->height = shape->out_height;
        state->width = shape->out_width;
        state->packed = activation_take(arena, rows * 3 * c);
        state->attention_out = activation_take(arena, rows * c);
        state->v = activation_take(arena, rows * c);
        state->lse = activation_take_float(arena, rows * inner->heads);
        return;
    }
    case YOLO_INNER_BOTTLENECK_PSA: return;  // YOLO26's neck only: never runs (yolo_build_layers)
    }
}

size_t yolo_layout_slot(Yolo *model, YoloSlot *slot, void *base) {
    ActivationArena arena = activation_arena_begin(model->backend, base);
    for (int l = 0; l < model->backbone_layers; l++) {
        const YoloModule *layer = &model->layers[l];
        YoloModuleState *state = &slot->modules[l];
        layout_unit(&arena, slot, &layer->cv1);
        const size_t rows = unit_rows(slot, &layer->cv1), c = (size_t)layer->hidden;
        const YoloConvState *first = &slot->convs[layer->cv1.id];
        state->height = first->height;
        state->width = first->width;
        if (layer->kind == YOLO_CONV) {  // the rest of a Conv row (stride 1: cv1's size)
            for (int i = 0; i < layer->repeats - 1; i++)
                layout_unit(&arena, slot, &layer->chain[i]);
            continue;
        }
        layout_unit(&arena, slot, &layer->cv2);
        for (int i = 0; i < layer->inner_count; i++) layout_inner(&arena, slot, &layer->inner[i]);
        switch (layer->kind) {
        case YOLO_C2F:
        case YOLO_C3K2:
            state->cat = activation_take(&arena, rows * (2 + (size_t)layer->inner_count) * c);
            state->split = activation_take(&arena, rows * c);
            break;
        case YOLO_SPPF:
            state->cat = activation_take(&arena, rows * 4 * c);
            for (int i = 0; i < 3; i++) {
                state->pool[i] = activation_take(&arena, rows * c);
                state->argmax[i] = activation_take_int32(&arena, rows * c);
            }
            break;
        case YOLO_C2PSA:
            state->cat = activation_take(&arena, rows * 2 * c);
            state->split = activation_take(&arena, rows * c);
            break;
        case YOLO_A2C2F:  // cat(cv1's output, each group's last output); y = x + gamma cv2(..)
            state->cat = activation_take(
                &arena, rows * (1 + (size_t)(layer->inner_count / layer->inner_group)) * c);
            if (layer->gamma)
                state->residual = activation_take(&arena, rows * (size_t)layer->out_channels);
            break;
        case YOLO_C3:
            layout_unit(&arena, slot, &layer->cv3);
            for (int i = 0; i < layer->repeats; i++) layout_bottleneck(&arena, slot, &layer->m[i]);
            state->cat = activation_take(&arena, rows * 2 * c);
            break;
        default: break;
        }
    }
    slot->features = activation_take(&arena, (size_t)slot->max.batch * model->feature_dim);
    return arena.used;
}

// ---- backward arena -----------------------------------------------------------------------------

static void take_grads(ActivationArena *arena, Act **grads, const size_t *sizes, int count) {
    for (int i = 0; i < count; i++) grads[i] = activation_take(arena, sizes[i]);
}

// The gradients one inner block's backward uses (yolo_blocks.c names them).
static void layout_inner_grads(ActivationArena *arena, YoloSlot *slot, const YoloInner *inner) {
    YoloInnerState *state = &slot->inners[inner->id];
    const size_t c = (size_t)inner->channels;
    switch (inner->kind) {
    case YOLO_INNER_BOTTLENECK: {
        const YoloConv *cv1 = &inner->bottleneck.cv1;
        const size_t sizes[1] = {unit_rows(slot, cv1) * cv1->conv.out_channels};
        take_grads(arena, state->grad, sizes, 1);
        return;
    }
    case YOLO_INNER_C3K: {
        const size_t rows = unit_rows(slot, &inner->cv1), h = (size_t)inner->hidden;
        const size_t sizes[5] = {rows * 2 * h, rows * h, rows * h, rows * c, rows * h};
        take_grads(arena, state->grad, sizes, 5);
        return;
    }
    case YOLO_INNER_PSA:
    case YOLO_INNER_AREA: {
        const size_t rows = unit_rows(slot, &inner->qkv);
        const size_t mlp = (size_t)inner->ffn0.conv.out_channels;  // then the values' gradient
        const size_t sizes[6] = {rows * (mlp > c ? mlp : c), rows * c, rows * c, rows * c, rows * 3 * c,
                                 rows * inner->qkv.conv.out_channels};
        take_grads(arena, state->grad, sizes, 6);
        return;
    }
    case YOLO_INNER_BOTTLENECK_PSA: return;  // never runs (above)
    }
}

static size_t largest_unit(const Yolo *model, const YoloSlot *slot) {
    size_t largest = 0;
    for (int c = 0; c < model->conv_count; c++) {
        const size_t n = unit_rows(slot, model->convs[c]) * model->convs[c]->conv.out_channels;
        if (n > largest) largest = n;
    }
    return largest;
}

size_t yolo_layout_backward(Yolo *model, YoloSlot *slot, void *base) {
    ActivationArena arena = activation_arena_begin(model->backend, base);
    const size_t largest = largest_unit(model, slot);  // layer outputs are conv outputs too
    for (int i = 0; i < 2; i++) slot->grad_conv[i] = activation_take(&arena, largest);
    for (int i = 0; i < 2; i++) slot->grad_layer[i] = activation_take(&arena, largest);
    // One layer's gradients at a time: every layer starts at `shared`.
    const size_t shared = arena.used;
    size_t end = shared;
    for (int l = 0; l < model->backbone_layers; l++) {
        const YoloModule *layer = &model->layers[l];
        YoloModuleState *state = &slot->modules[l];
        arena.used = shared;
        const size_t rows = unit_rows(slot, &layer->cv1), c = (size_t)layer->hidden;
        const size_t n = (size_t)layer->inner_count;
        switch (layer->kind) {
        case YOLO_CONV:  // a Conv row of n > 1: the gradients between its units
            if (layer->repeats > 1) {
                const size_t between = rows * (size_t)layer->out_channels;
                const size_t sizes[2] = {between, between};
                take_grads(&arena, state->grad, sizes, 2);
            }
            break;
        case YOLO_C2F:
        case YOLO_C3K2: {
            const size_t sizes[4] = {rows * (2 + n) * c, rows * c, rows * c, rows * 2 * c};
            take_grads(&arena, state->grad, sizes, 4);
            break;
        }
        case YOLO_SPPF: {
            const size_t sizes[3] = {rows * 4 * c, rows * c, rows * c};
            take_grads(&arena, state->grad, sizes, 3);
            break;
        }
        case YOLO_C2PSA: {
            const size_t sizes[4] = {rows * 2 * c, rows * c, rows * c, rows * 2 * c};
            take_grads(&arena, state->grad, sizes, 4);
            break;
        }
        case YOLO_A2C2F: {  // csp_backward's, then the gamma branch's gradient
            const size_t groups = (size_t)(layer->inner_count / layer->inner_group);
            const size_t sizes[5] = {rows * (1 + groups) * c, rows * c, rows * c, rows * c,
                                     layer->gamma ? rows * (size_t)layer->out_channels : 0};
            take_grads(&arena, state->grad, sizes, 5);
            break;
        }
        case YOLO_C3: {  // as C3k's (layout_inner_grads), cv2's input gradient of c1 channels
            const size_t sizes[5] = {rows * 2 * c, rows * c, rows * c,
                                     rows * (size_t)layer->in_channels, rows * c};
            take_grads(&arena, state->grad, sizes, 5);
            break;
        }
        default: break;
        }
        // the inner blocks run their backward one after another: one region
        const size_t inner_start = arena.used;
        for (int i = 0; i < layer->inner_count; i++) {
            arena.used = inner_start;
            layout_inner_grads(&arena, slot, &layer->inner[i]);
            if (arena.used > end) end = arena.used;
        }
        if (arena.used > end) end = arena.used;
    }
    arena.used = end;
    return arena.used;
}
