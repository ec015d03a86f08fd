// YOLO forward and backward (yolo.h): Ultralytics' Conv, Bottleneck, C3,
// C2f, C3k2 (with C3k), A2C2f (ABlock), SPPF (YOLO26's with its shortcut), C2PSA (PSABlock) on
// the backend ops. Concats and
// splits along channels are strided copies (copy_2d) into and out of
// contiguous buffers; a gradient that reaches a tensor along two paths is
// summed with act_axpby. PSA's attention runs on the fused attention op:
// its q and k (key_dim = head_dim / 2 per head) are copied into the op's
// (B, T, 3, H, head_dim) layout with zeros after key_dim (q . k unchanged),
// the scale key_dim^-0.5 passed as it is. YOLO12's ABlock is the same block
// with key_dim = head_dim and its attention within runs of H W / area
// tokens: the op's batch is N x area (a sample's rows are contiguous).
//
// Tensors are (rows, C) with rows = N H W at the plans' batch; each conv
// unit keeps its input pointer, conv output, norm output and statistics.
// Backward: activation gradients `=`, parameter gradients `+=`.
#include <math.h>
#include <string.h>

#include "nn/yolo_internal.h"

typedef struct Run {
    Yolo *model;
    Backend *backend;
    YoloSlot *slot;
    const YoloPlans *plans;
    int training;
} Run;

static size_t unit_rows(const Run *run, const YoloConv *unit) {
    const ConvShape *shape = &run->plans->shapes[unit->id];
    return (size_t)shape->batch * shape->out_height * shape->out_width;
}

// rows of a block at the spatial size of its unit's output.
static size_t block_rows(const Run *run, const YoloConv *unit) { return unit_rows(run, unit); }

// Copies `cols` channels from (rows, x_stride) at x to (rows, y_stride) at y.
static void copy_cols(const Run *run, size_t rows, int cols, const Act *x, size_t x_stride, Act *y,
                      size_t y_stride) {
    run->backend->op.copy_2d(run->backend, rows, (size_t)cols, x, x_stride, y, y_stride);
}

static const Act *at(const Run *run, const Act *base, size_t elements) {
    return act_at_const(run->backend, base, elements);
}
static Act *at_mut(const Run *run, Act *base, size_t elements) {
    return act_at(run->backend, base, elements);
}

// ---- conv unit: conv -> BN -> SiLU or ReLU (fused: the norm's output is not kept) -------------

// The unit's step description at the run's plans.
static ConvUnitStep unit_step(const Run *run, const YoloConv *unit) {
    return (ConvUnitStep){&unit->conv, &unit->bn, unit->act,
                          unit->depthwise ? NULL : run->plans->plans[unit->id],
                          unit->depthwise ? run->plans->depthwise[unit->id] : NULL,
                          unit_rows(run, unit)};
}

static Act *unit_forward(const Run *run, const YoloConv *unit, const Act *x) {
    YoloConvState *state = &run->slot->convs[unit->id];
    const ConvUnitStep step = unit_step(run, unit);
    state->input = x;
    conv_unit_forward(run->backend, &step, run->training, x, state->conv_out, state->out,
                      state->mean, state->inv_std);
    return state->out;
}

// dx (input) = d(loss)/d(input) of dy (rows, Cout); NULL dx: no data gradient.
static void unit_backward(const Run *run, const YoloConv *unit, const Act *dy, Act *dx) {
    const YoloConvState *state = &run->slot->convs[unit->id];
    const ConvUnitStep step = unit_step(run, unit);
    // (out NULL: a Bottleneck's shortcut is added onto its cv2's output in place)
    conv_unit_backward(run->backend, &step, state->input, state->conv_out, NULL, state->mean,
                       state->inv_std, dy, run->slot->grad_conv[0], run->slot->grad_conv[1], dx);
}

// ---- Bottleneck, C3k, PSABlock ----------------------------------------------------------------

static Act *bottleneck_forward(const Run *run, const YoloBottleneck *b, const Act *x) {
    Act *hidden = unit_forward(run, &b->cv1, x);
    Act *out = unit_forward(run, &b->cv2, hidden);  // SiLU's output: backward does not read it
    if (b->add)
        run->backend->op.act_axpby(run->backend, unit_rows(run, &b->cv2) * b->cv2.conv.out_channels,
                                   1.0f, x, 1.0f, out);
    return out;
}

// dx = d(loss)/dx of dy; dhidden (rows, hidden) scratch.
static void bottleneck_backward(const Run *run, const YoloBottleneck *b, const Act *dy, Act *dx,
                                Act *dhidden) {
    unit_backward(run, &b->cv2, dy, dhidden);
    unit_backward(run, &b->cv1, dhidden, dx);
    if (b->add)
        run->backend->op.act_axpby(run->backend, unit_rows(run, &b->cv2) * b->cv2.conv.out_channels,
                                   1.0f, dy, 1.0f, dx);
}

// The parts of a C3 (YOLOv5's layer) or C3k (an inner block of C3k2):
// cv3(cat(m(cv1(x)), cv2(x))).
typedef struct C3Parts {
    const YoloConv *cv1, *cv2, *cv3;
    const YoloBottleneck *m;
    int count;
    Act *cat;           // (rows, 2 hidden)
    Act *const *grad;   // dcat, two chain gradients, cv2's input gradient, a bottleneck's hidden
} C3Parts;

static C3Parts inner_c3(const Run *run, const YoloInner *inner) {
    const YoloInnerState *state = &run->slot->inners[inner->id];
    return (C3Parts){&inner->cv1, &inner->cv2, &inner->cv3, inner->m, inner->count, state->cat,
                     state->grad};
}

static C3Parts layer_c3(const Run *run, const YoloModule *layer) {
    const YoloModuleState *state = &run->slot->modules[layer - run->model->layers];
    return (C3Parts){&layer->cv1, &layer->cv2, &layer->cv3, layer->m, layer->repeats, state->cat,
                     state->grad};
}

static Act *c3_forward(const Run *run, const C3Parts *p, const Act *x) {
    const size_t rows = unit_rows(run, p->cv1);
    const int h = p->cv1->conv.out_channels;
    const Act *a = unit_forward(run, p->cv1, x);
    for (int i = 0; i < p->count; i++) a = bottleneck_forward(run, &p->m[i], a);
    const Act *b = unit_forward(run, p->cv2, x);
    copy_cols(run, rows, h, a, (size_t)h, p->cat, 2 * (size_t)h);
    copy_cols(run, rows, h, b, (size_t)h, at_mut(run, p->cat, (size_t)h), 2 * (size_t)h);
    return unit_forward(run, p->cv3, p->cat);
}

static void c3_backward(const Run *run, const C3Parts *p, const Act *dy, Act *dx) {
    Backend *backend = run->backend;
    const size_t rows = unit_rows(run, p->cv1);
    const int h = p->cv1->conv.out_channels, in_channels = p->cv1->conv.in_channels;
    Act *dcat = p->grad[0], *current = p->grad[1], *next = p->grad[2];
    Act *dbranch = p->grad[3], *dhidden = p->grad[4];
    unit_backward(run, p->cv3, dy, dcat);
    copy_cols(run, rows, h, dcat, 2 * (size_t)h, current, (size_t)h);
    for (int i = p->count - 1; i >= 0; i--) {
        bottleneck_backward(run, &p->m[i], current, next, dhidden);
        Act *swap = current;
        current = next;
        next = swap;
    }
    unit_backward(run, p->cv1, current, dx);
    copy_cols(run, rows, h, at(run, dcat, (size_t)h), 2 * (size_t)h, next, (size_t)h);
    unit_backward(run, p->cv2, next, dbranch);
    backend->op.act_axpby(backend, rows * (size_t)in_channels, 1.0f, dbranch, 1.0f, dx);
}

// The (B, T, 3, H, Dh) offsets of q, k and v of head h, and their source
// offsets in Ultralytics' qkv channels (per head: key_dim q, key_dim k,
// head_dim v).
static size_t packed_offset(const YoloInner *inner, int part, int head) {
    return ((size_t)part * inner->heads + head) * inner->head_dim;
}
static size_t qkv_offset(const YoloInner *inner, int part, int head) {
    return (size_t)head * (2 * inner->key_dim + inner->head_dim) + (size_t)part * inner->key_dim;
}

static Act *psa_forward(const Run *run, const YoloInner *inner, const Act *x) {
    Backend *backend = run->backend;
    YoloInnerState *state = &run->slot->inners[inner->id];
    const size_t rows = unit_rows(run, &inner->qkv);
    const int c = inner->channels, width = 3 * c, qkv_width = inner->qkv.conv.out_channels;
    const Act *qkv = unit_forward(run, &inner->qkv, x);
    if (inner->key_dim < inner->head_dim)  // PSA: q and k zero-padded to head_dim
        backend->op.zero(backend, state->packed, act_bytes(backend, rows * width));
    for (int h = 0; h < inner->heads; h++)
        for (int part = 0; part < 3; part++)
            copy_cols(run, rows, part < 2 ? inner->key_dim : inner->head_dim,
                      at(run, qkv, qkv_offset(inner, part, h)), (size_t)qkv_width,
                      at_mut(run, state->packed, packed_offset(inner, part, h)), (size_t)width);
    const float scale = (float)(1.0 / sqrt((double)inner->key_dim));
    backend->op.attention_forward(backend, run->plans->attention[inner->id], state->packed, scale,
                                  state->attention_out, state->lse);
    copy_cols(run, rows, c, at(run, state->packed, packed_offset(inner, 2, 0)), (size_t)width,
              state->v, (size_t)c);
    Act *sum = unit_forward(run, &inner->pe, state->v);  // the norm's output (no SiLU)
    backend->op.act_axpby(backend, rows * c, 1.0f, state->attention_out, 1.0f, sum);
    Act *x1 = unit_forward(run, &inner->proj, sum);
    backend->op.act_axpby(backend, rows * c, 1.0f, x, 1.0f, x1);
    Act *x2 = unit_forward(run, &inner->ffn1, unit_forward(run, &inner->ffn0, x1));
    backend->op.act_axpby(backend, rows * c, 1.0f, x1, 1.0f, x2);
    return x2;
}

static void psa_backward(const Run *run, const YoloInner *inner, const Act *dy, Act *dx) {
    Backend *backend = run->backend;
    const YoloInnerState *state = &run->slot->inners[inner->id];
    const size_t rows = unit_rows(run, &inner->qkv);
    const int c = inner->channels, width = 3 * c, qkv_width = inner->qkv.conv.out_channels;
    Act *dhidden = state->grad[0], *dx1 = state->grad[1], *dsum = state->grad[2];
    Act *dv = state->grad[3], *dpacked = state->grad[4], *dqkv = state->grad[5];
    unit_backward(run, &inner->ffn1, dy, dhidden);
    unit_backward(run, &inner->ffn0, dhidden, dx1);
    backend->op.act_axpby(backend, rows * c, 1.0f, dy, 1.0f, dx1);
    unit_backward(run, &inner->proj, dx1, dsum);
    unit_backward(run, &inner->pe, dsum, dv);
    const float scale = (float)(1.0 / sqrt((double)inner->key_dim));
    backend->op.attention_backward(backend, run->plans->attention[inner->id], state->packed,
                                   state->attention_out, dsum, state->lse, scale, dpacked);
    // the values' whole gradient: the attention's plus pe's (dhidden is free again)
    copy_cols(run, rows, c, at(run, dpacked, packed_offset(inner, 2, 0)), (size_t)width, dhidden,
              (size_t)c);
    backend->op.act_axpby(backend, rows * c, 1.0f, dv, 1.0f, dhidden);
    for (int h = 0; h < inner->heads; h++)
        for (int part = 0; part < 3; part++) {
            const Act *source = part < 2 ? at(run, dpacked, packed_offset(inner, part, h))
                                         : at(run, dhidden, (size_t)h * inner->head_dim);
            copy_cols(run, rows, part < 2 ? inner->key_dim : inner->head_dim, source,
                      part < 2 ? (size_t)width : (size_t)c,
                      at_mut(run, dqkv, qkv_offset(inner, part, h)), (size_t)qkv_width);
        }
    unit_backward(run, &inner->qkv, dqkv, dx);
    backend->op.act_axpby(backend, rows * c, 1.0f, dx1, 1.0f, dx);
}

static Act *inner_forward(const Run *run, const YoloInner *inner, const Act *x) {
    switch (inner->kind) {
    case YOLO_INNER_BOTTLENECK: return bottleneck_forward(run, &inner->bottleneck, x);
    case YOLO_INNER_C3K: {
        const C3Parts parts = inner_c3(run, inner);
        return c3_forward(run, &parts, x);
    }
    case YOLO_INNER_PSA:
    case YOLO_INNER_AREA: return psa_forward(run, inner, x);
    case YOLO_INNER_BOTTLENECK_PSA: break;  // YOLO26's neck only: never runs (yolo_build_layers)
    }
    return NULL;
}

static void inner_backward(const Run *run, const YoloInner *inner, const Act *dy, Act *dx) {
    switch (inner->kind) {
    case YOLO_INNER_BOTTLENECK:
        bottleneck_backward(run, &inner->bottleneck, dy, dx, run->slot->inners[inner->id].grad[0]);
        return;
    case YOLO_INNER_C3K: {
        const C3Parts parts = inner_c3(run, inner);
        c3_backward(run, &parts, dy, dx);
        return;
    }
    case YOLO_INNER_PSA:
    case YOLO_INNER_AREA: psa_backward(run, inner, dy, dx); return;
    case YOLO_INNER_BOTTLENECK_PSA: return;  // never runs (above)
    }
}

// ---- layers ------------------------------------------------------------------------------------

// C2f and C3k2: cv1 -> (a, b); b -> m[0] -> ... -> m[n-1]; cv2(cat(a, b, m
// outputs)). A2C2f: cv1 -> t; t -> m[0] -> ...; cv2(cat(t, m outputs)),
// each m an ABlock pair (inner_group 2) or a C3k, then x + gamma y for the
// l and x sizes' attention layers.
static size_t csp_head_slots(const YoloModule *layer) { return layer->kind == YOLO_A2C2F ? 1 : 2; }

static Act *csp_forward(const Run *run, const YoloModule *layer, const Act *x) {
    YoloModuleState *state = &run->slot->modules[layer - run->model->layers];
    const size_t rows = block_rows(run, &layer->cv1), c = (size_t)layer->hidden;
    const size_t head = csp_head_slots(layer), group = (size_t)layer->inner_group;
    const size_t width = (head + (size_t)layer->inner_count / group) * c;
    const Act *t0 = unit_forward(run, &layer->cv1, x);
    copy_cols(run, rows, (int)(head * c), t0, head * c, state->cat, width);
    const Act *b = t0;
    if (head == 2) {
        copy_cols(run, rows, (int)c, at(run, t0, c), 2 * c, state->split, c);
        b = state->split;
    }
    for (size_t i = 0; i < (size_t)layer->inner_count; i++) {
        b = inner_forward(run, &layer->inner[i], b);
        if ((i + 1) % group == 0)
            copy_cols(run, rows, (int)c, b, c, at_mut(run, state->cat, (head + i / group) * c),
                      width);
    }
    Act *y = unit_forward(run, &layer->cv2, state->cat);
    if (!layer->gamma) return y;
    run->backend->op.residual_scale_add_forward(run->backend, 1, rows, layer->out_channels, x, y,
                                                layer->gamma, NULL, state->residual);
    return state->residual;
}

static void csp_backward(const Run *run, const YoloModule *layer, const Act *dy, Act *dx) {
    Backend *backend = run->backend;
    const YoloModuleState *state = &run->slot->modules[layer - run->model->layers];
    const size_t rows = block_rows(run, &layer->cv1), c = (size_t)layer->hidden;
    const size_t head = csp_head_slots(layer), group = (size_t)layer->inner_group;
    const size_t n = (size_t)layer->inner_count, width = (head + n / group) * c;
    Act *dcat = state->grad[0], *g = state->grad[1], *din = state->grad[2], *dt0 = state->grad[3];
    const Act *dy_branch = dy;
    if (layer->gamma) {  // y = x + gamma cv2(...): x's share is dy itself (added last)
        backend->op.residual_scale_add_backward(backend, 1, rows, layer->out_channels,
                                                run->slot->convs[layer->cv2.id].out, dy,
                                                layer->gamma, NULL, state->grad[4],
                                                layer->gamma_grad);
        dy_branch = state->grad[4];
    }
    unit_backward(run, &layer->cv2, dy_branch, dcat);
    copy_cols(run, rows, (int)c, at(run, dcat, width - c), width, g, c);
    for (size_t i = n; i-- > 0;) {
        inner_backward(run, &layer->inner[i], g, din);
        if (i % group) {  // within an ABlock pair: the first's output feeds only the second
            Act *swap = g;
            g = din;
            din = swap;
            continue;
        }
        // the input of m[i / group] (m[i-1]'s output, or cv1's b or t) is also in the concat
        copy_cols(run, rows, (int)c, at(run, dcat, (head - 1 + i / group) * c), width, g, c);
        backend->op.act_axpby(backend, rows * c, 1.0f, din, 1.0f, g);
    }
    if (head == 2) {
        copy_cols(run, rows, (int)c, dcat, width, dt0, 2 * c);
        copy_cols(run, rows, (int)c, g, c, at_mut(run, dt0, c), 2 * c);
        unit_backward(run, &layer->cv1, dt0, dx);
    } else {
        unit_backward(run, &layer->cv1, g, dx);
    }
    if (layer->gamma) backend->op.act_axpby(backend, rows * layer->out_channels, 1.0f, dy, 1.0f, dx);
}

static Act *sppf_forward(const Run *run, const YoloModule *layer, const Act *x) {
    Backend *backend = run->backend;
    YoloModuleState *state = &run->slot->modules[layer - run->model->layers];
    const size_t rows = block_rows(run, &layer->cv1), c = (size_t)layer->hidden;
    const Act *pooled = unit_forward(run, &layer->cv1, x);
    copy_cols(run, rows, (int)c, pooled, c, state->cat, 4 * c);
    for (int i = 0; i < 3; i++) {
        backend->op.maxpool_forward(backend, &run->plans->pool, pooled, state->pool[i],
                                    state->argmax[i]);
        pooled = state->pool[i];
        copy_cols(run, rows, (int)c, pooled, c, at_mut(run, state->cat, (1 + (size_t)i) * c),
                  4 * c);
    }
    Act *out = unit_forward(run, &layer->cv2, state->cat);  // backward reads not this SiLU output
    if (layer->shortcut)
        backend->op.act_axpby(backend, rows * layer->out_channels, 1.0f, x, 1.0f, out);
    return out;
}

static void sppf_backward(const Run *run, const YoloModule *layer, const Act *dy, Act *dx) {
    Backend *backend = run->backend;
    const YoloModuleState *state = &run->slot->modules[layer - run->model->layers];
    const size_t rows = block_rows(run, &layer->cv1), c = (size_t)layer->hidden;
    Act *dcat = state->grad[0], *g = state->grad[1], *dprevious = state->grad[2];
    unit_backward(run, &layer->cv2, dy, dcat);
    copy_cols(run, rows, (int)c, at(run, dcat, 3 * c), 4 * c, g, c);
    for (int i = 2; i >= 0; i--) {
        backend->op.maxpool_backward(backend, &run->plans->pool, g, state->argmax[i], dprevious);
        copy_cols(run, rows, (int)c, at(run, dcat, (size_t)i * c), 4 * c, g, c);
        backend->op.act_axpby(backend, rows * c, 1.0f, dprevious, 1.0f, g);
    }
    unit_backward(run, &layer->cv1, g, dx);
    if (layer->shortcut)
        backend->op.act_axpby(backend, rows * layer->out_channels, 1.0f, dy, 1.0f, dx);
}

// C2PSA: cv1 -> (a, b); b -> PSA blocks; cv2(cat(a, b')).
static Act *c2psa_forward(const Run *run, const YoloModule *layer, const Act *x) {
    YoloModuleState *state = &run->slot->modules[layer - run->model->layers];
    const size_t rows = block_rows(run, &layer->cv1), c = (size_t)layer->hidden;
    const Act *t0 = unit_forward(run, &layer->cv1, x);
    copy_cols(run, rows, (int)c, at(run, t0, c), 2 * c, state->split, c);
    const Act *b = state->split;
    for (int i = 0; i < layer->inner_count; i++) b = inner_forward(run, &layer->inner[i], b);
    copy_cols(run, rows, (int)c, t0, 2 * c, state->cat, 2 * c);
    copy_cols(run, rows, (int)c, b, c, at_mut(run, state->cat, c), 2 * c);
    return unit_forward(run, &layer->cv2, state->cat);
}

static void c2psa_backward(const Run *run, const YoloModule *layer, const Act *dy, Act *dx) {
    const YoloModuleState *state = &run->slot->modules[layer - run->model->layers];
    const size_t rows = block_rows(run, &layer->cv1), c = (size_t)layer->hidden;
    Act *dcat = state->grad[0], *g = state->grad[1], *din = state->grad[2], *dt0 = state->grad[3];
    unit_backward(run, &layer->cv2, dy, dcat);
    copy_cols(run, rows, (int)c, at(run, dcat, c), 2 * c, g, c);
    for (int i = layer->inner_count - 1; i >= 0; i--) {
        inner_backward(run, &layer->inner[i], g, din);
        Act *swap = g;
        g = din;
        din = swap;
    }
    copy_cols(run, rows, (int)c, dcat, 2 * c, dt0, 2 * c);
    copy_cols(run, rows, (int)c, g, c, at_mut(run, dt0, c), 2 * c);
    unit_backward(run, &layer->cv1, dt0, dx);
}

// A Conv row: cv1, then for n > 1 the rest of its Sequential.
static Act *conv_row_forward(const Run *run, const YoloModule *layer, const Act *x) {
    Act *out = unit_forward(run, &layer->cv1, x);
    for (int i = 0; i < layer->repeats - 1; i++) out = unit_forward(run, &layer->chain[i], out);
    return out;
}

// Its backward: the gradients between the units alternate in grad[0] and grad[1].
static void conv_row_backward(const Run *run, const YoloModule *layer, const Act *dy, Act *dx) {
    const YoloModuleState *state = &run->slot->modules[layer - run->model->layers];
    const Act *g = dy;
    for (int i = layer->repeats - 2; i >= 0; i--) {
        Act *below = state->grad[i % 2];
        unit_backward(run, &layer->chain[i], g, below);
        g = below;
    }
    unit_backward(run, &layer->cv1, g, dx);
}

void yolo_run_forward(Yolo *model, YoloSlot *slot, const YoloPlans *plans, const Act *input,
                      int training) {
    const Run run = {model, model->backend, slot, plans, training};
    const Act *x = input;
    for (int l = 0; l < model->backbone_layers; l++) {
        const YoloModule *layer = &model->layers[l];
        Act *out = NULL;
        switch (layer->kind) {
        case YOLO_CONV: out = conv_row_forward(&run, layer, x); break;
        case YOLO_C2F:
        case YOLO_C3K2:
        case YOLO_A2C2F: out = csp_forward(&run, layer, x); break;
        case YOLO_SPPF: out = sppf_forward(&run, layer, x); break;
        case YOLO_C2PSA: out = c2psa_forward(&run, layer, x); break;
        case YOLO_C3: {
            const C3Parts parts = layer_c3(&run, layer);
            out = c3_forward(&run, &parts, x);
            break;
        }
        default: break;  // the neck and head never run (yolo.h)
        }
        slot->modules[l].out = out;
        x = out;
    }
    const YoloModuleState *last = &slot->modules[model->backbone_layers - 1];
    model->backend->op.avgpool_forward(model->backend, plans->batch, last->height * last->width,
                                       model->feature_dim, x, slot->features);
}

void yolo_run_backward(Yolo *model, YoloSlot *slot, const YoloPlans *plans, const Act *dmap) {
    const Run run = {model, model->backend, slot, plans, 1};
    const Act *dy = dmap;
    for (int l = model->backbone_layers - 1; l >= 0; l--) {
        const YoloModule *layer = &model->layers[l];
        Act *dx = l > 0 ? (dy == slot->grad_layer[0] ? slot->grad_layer[1] : slot->grad_layer[0])
                        : NULL;
        switch (layer->kind) {
        case YOLO_CONV: conv_row_backward(&run, layer, dy, dx); break;
        case YOLO_C2F:
        case YOLO_C3K2:
        case YOLO_A2C2F: csp_backward(&run, layer, dy, dx); break;
        case YOLO_SPPF: sppf_backward(&run, layer, dy, dx); break;
        case YOLO_C2PSA: c2psa_backward(&run, layer, dy, dx); break;
        case YOLO_C3: {
            const C3Parts parts = layer_c3(&run, layer);
            c3_backward(&run, &parts, dy, dx);
            break;
        }
        default: break;
        }
        dy = dx;
    }
}
