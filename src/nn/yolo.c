// YOLO construction (see yolo.h): conv and attention plans per slot and
// batch size, the activation and backward arenas, initialisation and the
// weight file. The tables are declared in yolo_declare.c, forward and
// backward are in yolo_blocks.c, the YAML tables in yolo_config.c.
#include "nn/yolo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/weights.h"
#include "nn/yolo_internal.h"

// ---- plans ----------------------------------------------------------------------------------

static void plans_free(const Yolo *model, YoloPlans *plans) {
    Backend *backend = model->backend;
    for (int i = 0; i < plans->owned_count; i++)
        backend->op.conv2d_plan_free(backend, plans->owned[i]);
    for (int i = 0; plans->attention && i < model->inner_count; i++)
        if (plans->attention[i]) backend->op.attention_plan_free(backend, plans->attention[i]);
    for (int c = 0; plans->depthwise && c < model->conv_count; c++)
        if (plans->depthwise[c]) backend->op.depthwise_plan_free(backend, plans->depthwise[c]);
    free(plans->shapes);
    free(plans->plans);
    free(plans->owned);
    free(plans->depthwise);
    free(plans->attention);
    memset(plans, 0, sizeof *plans);
}

// The shape of a conv of the backbone on an input of height x width; the
// output size follows. Depthwise convs get a depthwise plan in plans_make.
static int unit_shape(YoloPlans *plans, const YoloConv *unit, int batch, int *height, int *width,
                      ErrorMessage *err) {
    ConvShape *shape = &plans->shapes[unit->id];
    if (conv_shape_make(shape, batch, *height, *width, unit->conv.in_channels,
                        unit->conv.out_channels, unit->conv.kernel, unit->conv.stride,
                        unit->conv.padding, err))
        return -1;
    *height = shape->out_height;
    *width = shape->out_width;
    return 0;
}

static int bottleneck_shapes(YoloPlans *plans, const YoloBottleneck *b, int batch, int h, int w,
                             ErrorMessage *err) {
    return unit_shape(plans, &b->cv1, batch, &h, &w, err) ||
           unit_shape(plans, &b->cv2, batch, &h, &w, err);
}

static int inner_shapes(Yolo *model, YoloPlans *plans, const YoloInner *inner, int batch, int h,
                        int w, ErrorMessage *err) {
    int hh = h, ww = w;
    switch (inner->kind) {
    case YOLO_INNER_BOTTLENECK: return bottleneck_shapes(plans, &inner->bottleneck, batch, h, w, err);
    case YOLO_INNER_C3K:
        for (int i = 0; i < inner->count; i++)
            if (bottleneck_shapes(plans, &inner->m[i], batch, h, w, err)) return -1;
        return unit_shape(plans, &inner->cv1, batch, &hh, &ww, err) ||
               unit_shape(plans, &inner->cv2, batch, &hh, &ww, err) ||
               unit_shape(plans, &inner->cv3, batch, &hh, &ww, err);
    case YOLO_INNER_PSA:
    case YOLO_INNER_AREA: {
        const YoloConv *units[] = {&inner->qkv, &inner->proj, &inner->pe, &inner->ffn0,
                                   &inner->ffn1};
        for (int i = 0; i < 5; i++) {
            hh = h, ww = w;
            if (unit_shape(plans, units[i], batch, &hh, &ww, err)) return -1;
        }
        // ABlock: each run of H W / area tokens of a sample attends within itself
        if ((h * w) % inner->area)
            return error_set(err, "%s: area attention over %dx%d positions: %d is not a multiple "
                                  "of its %d areas (Ultralytics' reshape fails alike); choose "
                                  "another image size", model->config.name, h, w, h * w,
                             inner->area);
        AttentionShape shape;
        if (attention_shape_make(&shape, batch * inner->area, inner->heads, h * w / inner->area,
                                 inner->head_dim, err))
            return -1;
        plans->attention[inner->id] = model->backend->op.attention_plan(model->backend, &shape, err);
        return plans->attention[inner->id] ? 0 : -1;
    }
    case YOLO_INNER_BOTTLENECK_PSA:  // YOLO26's neck only (yolo_build_layers)
        return error_set(err, "%s: an attention C3k2 block does not run", model->config.name);
    }
    return 0;
}

// The depthwise plan of a depthwise conv's shape (in = out = C).
static DepthwisePlan *depthwise_plan_make(Backend *backend, const ConvShape *s,
                                          ErrorMessage *err) {
    DepthwiseShape shape;
    if (depthwise_shape_make(&shape, s->batch, s->in_height, s->in_width, s->in_channels,
                             s->kernel, s->stride, s->padding, err))
        return NULL;
    return backend->op.depthwise_plan(backend, &shape, err);
}

static int plans_make(Yolo *model, int batch, int resolution, YoloPlans *plans,
                      ErrorMessage *err) {
    memset(plans, 0, sizeof *plans);
    plans->batch = batch;
    const size_t n = (size_t)model->conv_count + 1;
    plans->shapes = calloc(n, sizeof *plans->shapes);
    plans->plans = calloc(n, sizeof *plans->plans);
    plans->owned = calloc(n, sizeof *plans->owned);
    plans->attention = calloc((size_t)model->inner_count + 1, sizeof *plans->attention);
    plans->depthwise = calloc(n, sizeof *plans->depthwise);
    if (!plans->shapes || !plans->plans || !plans->owned || !plans->attention ||
        !plans->depthwise)
        return error_set(err, "out of memory");
    int h = resolution, w = resolution;
    for (int l = 0; l < model->backbone_layers; l++) {
        const YoloModule *layer = &model->layers[l];
        if (unit_shape(plans, &layer->cv1, batch, &h, &w, err)) return -1;
        if (layer->kind == YOLO_CONV) {  // and the rest of a Conv row of n > 1
            for (int i = 0; i < layer->repeats - 1; i++)
                if (unit_shape(plans, &layer->chain[i], batch, &h, &w, err)) return -1;
            continue;
        }
        for (int i = 0; i < layer->inner_count; i++)
            if (inner_shapes(model, plans, &layer->inner[i], batch, h, w, err)) return -1;
        if (layer->kind == YOLO_C3) {  // its Bottlenecks and cv3, at cv1's size
            for (int i = 0; i < layer->repeats; i++)
                if (bottleneck_shapes(plans, &layer->m[i], batch, h, w, err)) return -1;
            int h3 = h, w3 = w;
            if (unit_shape(plans, &layer->cv3, batch, &h3, &w3, err)) return -1;
        }
        if (layer->kind == YOLO_SPPF &&
            pool_shape_make(&plans->pool, batch, h, w, layer->hidden, layer->kernel, 1,
                            layer->kernel / 2, err))
            return -1;
        int hh = h, ww = w;
        if (unit_shape(plans, &layer->cv2, batch, &hh, &ww, err)) return -1;
    }
    for (int c = 0; c < model->conv_count; c++) {
        if (model->convs[c]->depthwise) {
            plans->depthwise[c] = depthwise_plan_make(model->backend, &plans->shapes[c], err);
            if (!plans->depthwise[c]) return -1;
            continue;
        }
        plans->plans[c] = conv_plan_shared(model->backend, plans->shapes, plans->plans, c,
                                           plans->owned, &plans->owned_count, err);
        if (!plans->plans[c]) return -1;
    }
    return 0;
}

int yolo_prepare_batch(Yolo *model, int slot_index, int batch, ErrorMessage *err) {
    if (slot_index < 0 || slot_index >= model->slot_count)
        return error_set(err, "%s: no input slot %d", model->config.name, slot_index);
    YoloSlot *slot = &model->slots[slot_index];
    if (batch < 1 || batch > slot->max.batch)
        return error_set(err, "%s: batch %d outside 1..%d of slot %d", model->config.name, batch,
                         slot->max.batch, slot_index);
    for (int i = 0; i < slot->plans_count; i++)
        if (slot->plans[i].batch == batch) return 0;
    YoloPlans *grown = realloc(slot->plans, (size_t)(slot->plans_count + 1) * sizeof *grown);
    if (!grown) return error_set(err, "out of memory");
    slot->plans = grown;
    YoloPlans *plans = &slot->plans[slot->plans_count];
    if (plans_make(model, batch, slot->max.resolution, plans, err)) {
        plans_free(model, plans);
        return error_prefix(err, "%s", model->config.name);
    }
    slot->last_plans = NULL;
    slot->backward_ready = 0;
    slot->plans_count++;
    return 0;
}

// ---- allocation ------------------------------------------------------------------------------

static void bind_unit(Yolo *model, YoloConv *unit, int trained) {
    const ParameterSet *set = trained ? &model->params : &model->buffers;
    conv2d_bind(&unit->conv, set);
    batchnorm_bind(&unit->bn, set, &model->buffers);
}

static int allocate_slot(Yolo *model, YoloSlot *slot, YoloInputShape shape, ErrorMessage *err) {
    Backend *backend = model->backend;
    slot->max = shape;
    slot->convs = calloc((size_t)model->conv_count + 1, sizeof *slot->convs);
    slot->inners = calloc((size_t)model->inner_count + 1, sizeof *slot->inners);
    slot->modules = calloc((size_t)model->backbone_layers, sizeof *slot->modules);
    slot->plans = calloc(1, sizeof *slot->plans);
    if (!slot->convs || !slot->inners || !slot->modules || !slot->plans)
        return error_set(err, "out of memory");
    slot->plans_count = 1;
    if (plans_make(model, shape.batch, shape.resolution, &slot->plans[0], err)) return -1;
    slot->arena_bytes = yolo_layout_slot(model, slot, NULL);
    slot->arena = backend->op.alloc(backend, slot->arena_bytes);
    if (!slot->arena)
        return error_set(err, "out of memory for %zu MB of activations (batch %d at %d px)",
                         slot->arena_bytes >> 20, shape.batch, shape.resolution);
    yolo_layout_slot(model, slot, slot->arena);
    return 0;
}

int yolo_allocate(Yolo *model, const YoloInputShape *inputs, int input_count, ErrorMessage *err) {
    Backend *backend = model->backend;
    if (input_count < 1) return error_set(err, "%s: no input shape given", model->config.name);
    model->params.with_grads = !model->frozen;
    if (parameter_set_allocate(&model->params, err) ||
        parameter_set_allocate(&model->buffers, err))
        return error_prefix(err, "%s", model->config.name);
    for (int c = 0; c < model->conv_count; c++) bind_unit(model, model->convs[c], 1);
    for (int l = 0; l < model->layer_count; l++) {  // A2C2f's gamma
        YoloModule *layer = &model->layers[l];
        if (layer->gamma_index < 0) continue;
        const Parameter *gamma =
            &(layer->trained ? &model->params : &model->buffers)->params[layer->gamma_index];
        layer->gamma = gamma->value;
        layer->gamma_grad = gamma->grad;
    }
    model->slots = calloc((size_t)input_count, sizeof *model->slots);
    if (!model->slots) return error_set(err, "out of memory");
    for (int i = 0; i < input_count; i++) {
        model->slot_count = i + 1;
        if (allocate_slot(model, &model->slots[i], inputs[i], err))
            return error_prefix(err, "%s, input %d (batch %d, %d px)", model->config.name, i,
                                inputs[i].batch, inputs[i].resolution);
    }
    if (model->frozen) return 0;
    for (int i = 0; i < model->slot_count; i++) {
        const size_t bytes = yolo_layout_backward(model, &model->slots[i], NULL);
        if (bytes > model->backward_bytes) model->backward_bytes = bytes;
    }
    model->backward_arena = backend->op.alloc(backend, model->backward_bytes);
    if (!model->backward_arena)
        return error_set(err, "%s: out of memory for %zu MB of gradients", model->config.name,
                         model->backward_bytes >> 20);
    for (int i = 0; i < model->slot_count; i++)
        yolo_layout_backward(model, &model->slots[i], model->backward_arena);
    return 0;
}

void yolo_free(Yolo *model) {
    Backend *backend = model->backend;
    for (int i = 0; model->slots && i < model->slot_count; i++) {
        YoloSlot *slot = &model->slots[i];
        for (int p = 0; slot->plans && p < slot->plans_count; p++)
            plans_free(model, &slot->plans[p]);
        free(slot->plans);
        free(slot->convs);
        free(slot->inners);
        free(slot->modules);
        if (slot->arena) backend->op.free(backend, slot->arena);
    }
    free(model->slots);
    if (model->backward_arena) backend->op.free(backend, model->backward_arena);
    for (int l = 0; l < model->layer_count; l++) {
        YoloModule *layer = &model->layers[l];
        for (int i = 0; layer->inner && i < layer->inner_count; i++) free(layer->inner[i].m);
        free(layer->inner);
        free(layer->m);
        free(layer->chain);
    }
    parameter_set_free(&model->params);
    parameter_set_free(&model->buffers);
    free(model->convs);
    free(model->inners);
    memset(model, 0, sizeof *model);
}

// ---- initialisation and the weight file --------------------------------------------------------

static int has_suffix(const char *name, const char *suffix) {
    const size_t n = strlen(name), m = strlen(suffix);
    return n >= m && strcmp(name + n - m, suffix) == 0;
}

// Pose26's RealNVP as it starts: loc 0, cov the identity, mask rows (0, 1),
// (1, 0) three times; Linear weights xavier_uniform with gain 0.01 (its
// init_weights), biases PyTorch's Linear default, +-1/sqrt(fan_in).
static int init_flow(Yolo *model, const Parameter *param, uint64_t seed, ErrorMessage *err) {
    Backend *backend = model->backend;
    float values[12] = {0};
    if (has_suffix(param->name, ".loc") || has_suffix(param->name, ".cov") ||
        has_suffix(param->name, ".mask")) {
        if (has_suffix(param->name, ".cov")) values[0] = values[3] = 1.0f;
        if (has_suffix(param->name, ".mask"))
            for (int row = 0; row < 6; row++) values[2 * row + (row % 2 == 0)] = 1.0f;
        backend->op.upload(backend, param->value, values, param->count * sizeof *values);
        return 0;
    }
    // Linear(in, out): in is 2 for each net's first Linear (index 0), else 64
    const char *index = strrchr(param->name, '.') - 1;  // the "0" of ".0.weight"
    const double bound = param->rank == 2
                             ? 0.01 * sqrt(6.0 / (param->torch_shape[0] + param->torch_shape[1]))
                             : 1.0 / sqrt(*index == '0' ? 2.0 : 64.0);
    return layer_init_parameter(backend, param, seed, INIT_UNIFORM, (float)bound, err);
}

// One tensor as Ultralytics' DetectionModel starts it (yolo_init).
static int init_tensor(Yolo *model, const ParameterSet *set, const Parameter *param,
                       uint64_t seed, ErrorMessage *err) {
    Backend *backend = model->backend;
    const char *copy = strstr(param->name, ".one2one_");
    if (copy) {
        // Detect's one2one_cv2 / one2one_cv3 are deep copies of cv2 / cv3
        // (bias_init then sets both alike): the values of the tensor without
        // "one2one_", initialised before it (declared first).
        char original[PARAM_MAX_NAME];
        yolo_name_format(original, "%.*s.%s", (int)(copy - param->name), param->name,
                         copy + strlen(".one2one_"));
        const Parameter *source = parameter_find(set, original);
        if (!source || source->count != param->count)
            return error_set(err, "%s: '%s' has no copy source", model->config.name, param->name);
        backend->op.copy(backend, param->value, source->value, param->count * sizeof(float));
        return 0;
    }
    if (strstr(param->name, ".flow_model.")) return init_flow(model, param, seed, err);
    int layer = -1;
    const int a2c2f = sscanf(param->name, "model.%d.", &layer) == 1 && layer >= 0 &&
                      layer < model->layer_count && model->layers[layer].kind == YOLO_A2C2F;
    if (a2c2f && has_suffix(param->name, ".gamma")) {  // 0.01 * torch.ones(c2)
        backend->op.fill(backend, param->value, 0.01f, param->count);
        return 0;
    }
    // ABlock._init_weights: its convs trunc_normal_(std 0.02) (cut at +-2, 100 std: never)
    if (a2c2f && model->layers[layer].area && has_suffix(param->name, ".conv.weight") &&
        (strstr(param->name, ".attn.") || strstr(param->name, ".mlp.")))
        return layer_init_parameter(backend, param, seed, INIT_NORMAL, 0.02f, err);
    // Depth: its calibration the identity (cal_a 1, cal_b 0), its last bias
    // 0.182 (log 1.2: about 1.2 m at the start)
    const int depth = layer >= 0 && layer < model->layer_count &&
                      model->layers[layer].kind == YOLO_DEPTH;
    if (depth && (has_suffix(param->name, ".cal_a") || has_suffix(param->name, ".cal_b") ||
                  has_suffix(param->name, ".head.3.bias"))) {
        const float value = has_suffix(param->name, ".cal_a")   ? 1.0f
                            : has_suffix(param->name, ".cal_b") ? 0.0f
                                                                : 0.182f;
        backend->op.fill(backend, param->value, value, param->count);
        return 0;
    }
    // YOLO-World: C2fAttn's MaxSigmoidAttnBlock bias 0; WorldDetect's
    // ContrastiveHeads bias -10, logit_scale log(1 / 0.07) as float32 (v1)
    // or -1 (v2's BNContrastiveHead)
    const YoloModuleKind kind = layer >= 0 && layer < model->layer_count
                                    ? model->layers[layer].kind
                                    : YOLO_CONV;
    const int world_head = kind == YOLO_WORLD_DETECT;
    if (kind == YOLO_C2F_ATTN && has_suffix(param->name, ".attn.bias")) {
        backend->op.fill(backend, param->value, 0.0f, param->count);
        return 0;
    }
    if (world_head && strstr(param->name, ".cv4.") && !strstr(param->name, ".norm.")) {
        const float value = has_suffix(param->name, ".bias") ? -10.0f
                            : model->config.family == YOLO_V8_WORLDV2
                                ? -1.0f
                                : logf((float)(1.0 / 0.07));
        backend->op.fill(backend, param->value, value, param->count);
        return 0;
    }
    // Norms: BatchNorm (Conv's bn, BNContrastiveHead's norm) and
    // ImagePoolingAttn's LayerNorms (query.0, key.0, value.0): weight 1,
    // bias 0, running mean 0, running var 1.
    const int layer_norm = kind == YOLO_IMAGE_POOLING_ATTN &&
                           (strstr(param->name, ".query.0.") || strstr(param->name, ".key.0.") ||
                            strstr(param->name, ".value.0."));
    if (strstr(param->name, ".bn.") || (world_head && strstr(param->name, ".norm.")) ||
        layer_norm) {
        const float value = has_suffix(param->name, ".weight") || has_suffix(param->name, ".running_var");
        backend->op.fill(backend, param->value, value, param->count);
        return 0;
    }
    if (has_suffix(param->name, "dfl.conv.weight")) {  // reg_max 16
        float arange[16];
        for (int i = 0; i < 16; i++) arange[i] = (float)i;
        backend->op.upload(backend, param->value, arange, sizeof arange);
        return 0;
    }
    // Conv2d and Linear (Classify's): kaiming_uniform(a = sqrt(5)) = uniform in
    // +-1/sqrt(fan_in); a bias the same bound, then Detect.bias_init for the
    // head's last biases.
    if (param->rank == 2)
        return layer_init_parameter(backend, param, seed, INIT_UNIFORM,
                                    (float)(1.0 / sqrt((double)param->torch_shape[1])), err);
    if (param->rank == 4) {
        const double fan_in = (double)param->torch_shape[1] * param->torch_shape[2] *
                              param->torch_shape[3];
        return layer_init_parameter(backend, param, seed, INIT_UNIFORM,
                                    (float)(1.0 / sqrt(fan_in)), err);
    }
    // (WorldDetect.bias_init: box 1.0; its class stacks keep PyTorch's
    // default, their scores coming from the text embeddings)
    int level = -1;
    const char *cv = strstr(param->name, ".cv2.");
    if (!cv && !world_head) cv = strstr(param->name, ".cv3.");
    if (cv && sscanf(cv + 5, "%d", &level) == 1 && has_suffix(param->name, ".2.bias")) {
        if (level < 0 || level >= 4)
            return error_set(err, "%s: no head level %d", param->name, level);
        const double stride = model->head_strides[level];
        const float value = cv[3] == '2' ? (world_head ? 1.0f : 2.0f)
                                         : (float)log(5.0 / model->config.classes /
                                                      pow(640.0 / stride, 2.0));
        backend->op.fill(backend, param->value, value, param->count);
        return 0;
    }
    // Any other bias (Segment's mask stacks, prototypes' upsample, semseg):
    // PyTorch's default, uniform in +-1/sqrt(fan_in) of its weight.
    char weight_name[PARAM_MAX_NAME];
    const Parameter *weight = NULL;
    if (has_suffix(param->name, ".bias")) {
        yolo_name_format(weight_name, "%.*s.weight",
                         (int)(strlen(param->name) - strlen(".bias")), param->name);
        weight = parameter_find(set, weight_name);
    }
    if (weight && (weight->rank == 4 || weight->rank == 2)) {
        double fan_in = weight->torch_shape[1];
        if (weight->rank == 4) fan_in *= (double)weight->torch_shape[2] * weight->torch_shape[3];
        return layer_init_parameter(backend, param, seed, INIT_UNIFORM,
                                    (float)(1.0 / sqrt(fan_in)), err);
    }
    return error_set(err, "%s: no initialisation for '%s'", model->config.name, param->name);
}

int yolo_init(Yolo *model, uint64_t seed, ErrorMessage *err) {
    const ParameterSet *sets[2] = {&model->params, &model->buffers};
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < sets[s]->count; i++)
            if (init_tensor(model, sets[s], &sets[s]->params[i], seed, err)) return -1;
        parameter_set_written((ParameterSet *)sets[s]);
    }
    model->num_batches_tracked = 0;
    return 0;
}

// 1 when every tensor of model's tables is in file under prefix with its
// torch shape.
static int tables_match(const Yolo *model, const SafeTensors *file, const char *prefix) {
    const ParameterSet *sets[2] = {&model->params, &model->buffers};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sets[s]->count; i++) {
            const Parameter *param = &sets[s]->params[i];
            char key[SAFETENSORS_MAX_NAME];
            snprintf(key, sizeof key, "%s%s", prefix, param->name);
            const SafeTensor *t = safetensors_find(file, key);
            if (!t || t->rank != param->rank) return 0;
            for (int d = 0; d < param->rank; d++)
                if (t->shape[d] != param->torch_shape[d]) return 0;
        }
    return 1;
}

int yolo_head_from_weights(const SafeTensors *file, const char *prefix, YoloConfig *config) {
    int count;
    yolo_yaml_lines(config->family, config->task, &count);  // the head is the YAML's last line
    char key[SAFETENSORS_MAX_NAME];
    // Detect's first class conv (classes, width, 1, 1), Classify's Linear (classes, 1280),
    // SemanticSegment's classifier conv (classes, width, 1, 1); Depth has no classes, and
    // no tensor of WorldDetect's has its count (its class stacks end in text embeddings)
    if (config->task == YOLO_TASK_DEPTH || yolo_is_world(config->family)) return 0;
    if (config->task == YOLO_TASK_CLASSIFY)
        snprintf(key, sizeof key, "%smodel.%d.linear.weight", prefix, count - 1);
    else if (config->task == YOLO_TASK_SEMANTIC)
        snprintf(key, sizeof key, "%smodel.%d.classifier.1.weight", prefix, count - 1);
    else
        snprintf(key, sizeof key, "%smodel.%d.cv3.0.2.weight", prefix, count - 1);
    const SafeTensor *conv = safetensors_find(file, key);
    if (!conv || conv->rank != (config->task == YOLO_TASK_CLASSIFY ? 2 : 4)) return 0;
    // (a bound far above any dataset's: LVIS has 1203 classes, Open Images 601)
    for (int d = 0; d < 2; d++)
        if (conv->shape[d] < 1 || conv->shape[d] > YOLO_MAX_CLASSES) return 0;
    config->classes = (int)conv->shape[0];
    if (config->task != YOLO_TASK_CLASSIFY && config->task != YOLO_TASK_SEMANTIC)
        config->class_width = (int)conv->shape[1];
    return 1;
}

// The task of the head at layer `head` under prefix in file: Classify's
// Linear, Segment's prototypes, SemanticSegment's classifier, Depth's
// calibration, Pose26's keypoint heads, or cv4's last conv of 51 outputs
// (Pose) or 1 (OBB); none of them: Detect.
static YoloTask task_from_weights(const SafeTensors *file, const char *prefix, int head) {
    char key[SAFETENSORS_MAX_NAME];
    snprintf(key, sizeof key, "%smodel.%d.linear.weight", prefix, head);
    if (safetensors_find(file, key)) return YOLO_TASK_CLASSIFY;
    snprintf(key, sizeof key, "%smodel.%d.proto.cv3.conv.weight", prefix, head);
    if (safetensors_find(file, key)) return YOLO_TASK_SEGMENT;
    snprintf(key, sizeof key, "%smodel.%d.classifier.1.weight", prefix, head);
    if (safetensors_find(file, key)) return YOLO_TASK_SEMANTIC;
    snprintf(key, sizeof key, "%smodel.%d.cal_a", prefix, head);
    if (safetensors_find(file, key)) return YOLO_TASK_DEPTH;
    snprintf(key, sizeof key, "%smodel.%d.cv4_kpts.0.weight", prefix, head);
    if (safetensors_find(file, key)) return YOLO_TASK_POSE;
    snprintf(key, sizeof key, "%smodel.%d.cv4.0.2.weight", prefix, head);
    const SafeTensor *last = safetensors_find(file, key);
    if (last && last->rank == 4)
        return last->shape[0] == YOLO_KEYPOINTS * YOLO_KEYPOINT_DIMS ? YOLO_TASK_POSE
                                                                    : YOLO_TASK_OBB;
    return YOLO_TASK_DETECT;
}

int yolo_config_from_weights(const SafeTensors *file, const char *prefix, YoloConfig *config,
                             ErrorMessage *err) {
    for (int i = 0; yolo_model_names[i]; i++) {
        int pretrained;
        Yolo probe;
        if (yolo_parse_name(yolo_model_names[i], config, &pretrained, err)) return -1;
        // another name of an earlier name's model (yolov8n-oiv7: yolov8n's, the
        // classes taken from the file) was probed as that one
        if (strcmp(config->name, yolo_model_names[i]) != 0) continue;
        yolo_head_from_weights(file, prefix, config);
        // a Segment's, Pose's or OBB's tensors hold a Detect's: the head decides
        int count;
        yolo_yaml_lines(config->family, config->task, &count);
        if (task_from_weights(file, prefix, count - 1) != config->task) continue;
        if (yolo_declare(&probe, NULL, config, err)) {
            yolo_free(&probe);
            return -1;
        }
        const int match = tables_match(&probe, file, prefix);
        yolo_free(&probe);
        if (match) return 0;
    }
    return error_set(err, "the Ultralytics model under \"%s\" is none of yolov8n..x, "
                          "yolo11n..x, yolo26n..x or their -seg, -pose (17 keypoints), -obb and "
                          "-cls models, yolo26's -sem and -depth models, yolov5nu..xu, "
                          "yolo12n..x, or yolov8s..x-world(v2) (its tensors match no size's "
                          "names and shapes)", prefix);
}

int yolo_save(const Yolo *model, const char *path, StateDictWrite write, ErrorMessage *err) {
    const SafeMetadata metadata[] = {
        {.key = "format", .value = "pt"},
        {.key = "model", .value = (char *)model->config.name},
    };
    return weights_save_with_metadata(path, &model->params, &model->buffers,
                                      model->num_batches_tracked, metadata, 2, write, err);
}

// ---- forward and backward entry points ----------------------------------------------------------

static const YoloPlans *find_plans(const YoloSlot *slot, int batch) {
    for (int i = 0; i < slot->plans_count; i++)
        if (slot->plans[i].batch == batch) return &slot->plans[i];
    return NULL;
}

int yolo_forward(Yolo *model, int slot_index, int batch, const Act *input, int training,
                 ErrorMessage *err) {
    if (slot_index < 0 || slot_index >= model->slot_count)
        return error_set(err, "%s: no input slot %d", model->config.name, slot_index);
    YoloSlot *slot = &model->slots[slot_index];
    const YoloPlans *plans = find_plans(slot, batch);
    if (!plans)
        return error_set(err, "%s: batch %d not prepared on slot %d (yolo_prepare_batch)",
                         model->config.name, batch, slot_index);
    // 16-bit activations: the convs read the weights' compute copy, which
    // must follow every update (the optimizer writes the fp32 values)
    parameter_set_refresh_compute(&model->params);
    yolo_run_forward(model, slot, plans, input, training);
    if (training) model->num_batches_tracked++;
    slot->last_plans = plans;
    slot->backward_ready = training && !model->frozen;
    return 0;
}

const Act *yolo_features(const Yolo *model, int slot) { return model->slots[slot].features; }

const Act *yolo_layer_output(const Yolo *model, int slot, int layer, int *height, int *width,
                             int *channels) {
    if (layer < 0 || layer >= model->backbone_layers) return NULL;
    const YoloModuleState *state = &model->slots[slot].modules[layer];
    *height = state->height;
    *width = state->width;
    *channels = model->layers[layer].out_channels;
    return state->out;
}

const Act *yolo_feature_map(const Yolo *model, int slot, int *height, int *width) {
    int channels;
    return yolo_layer_output(model, slot, model->backbone_layers - 1, height, width, &channels);
}

void yolo_feature_map_size(const Yolo *model, int slot, int *height, int *width) {
    const YoloModuleState *state = &model->slots[slot].modules[model->backbone_layers - 1];
    *height = state->height;
    *width = state->width;
}

int yolo_backward_map(Yolo *model, int slot_index, const Act *dfeatures, const Act *dmap,
                      ErrorMessage *err) {
    if (model->frozen)
        return error_set(err, "%s: a frozen model runs no backward", model->config.name);
    YoloSlot *slot = &model->slots[slot_index];
    if (!slot->backward_ready)
        return error_set(err, "%s: backward without a training forward on slot %d",
                         model->config.name, slot_index);
    if (!dfeatures && !dmap) return error_set(err, "%s: backward with no gradient", model->config.name);
    Backend *backend = model->backend;
    const YoloPlans *plans = slot->last_plans;
    int height, width;
    yolo_feature_map_size(model, slot_index, &height, &width);
    const size_t pixels = (size_t)height * width, n = (size_t)plans->batch * pixels * model->feature_dim;
    Act *dtop = slot->grad_layer[0];
    if (dfeatures) {
        backend->op.avgpool_backward(backend, plans->batch, (int)pixels, model->feature_dim,
                                     dfeatures, dtop);
        if (dmap) backend->op.act_axpby(backend, n, 1.0f, dmap, 1.0f, dtop);
    } else {
        backend->op.copy(backend, dtop, dmap, act_bytes(backend, n));
    }
    yolo_run_backward(model, slot, plans, dtop);
    slot->backward_ready = 0;
    return 0;
}
