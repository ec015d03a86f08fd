// A YOLO as Ultralytics' checkpoint (see export_ultralytics.h): the module
// tree emitted module by module from the model's layer table and tensors.
#include "weights/ultralytics_export.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn/weights.h"
#include "weights/pt_writer.h"

#define CONV_MODULE "ultralytics.nn.modules.conv"
#define BLOCK_MODULE "ultralytics.nn.modules.block"
#define CONTAINER "torch.nn.modules.container"
#define NAME_SIZE 160

// out (size bytes) = the formatted text, cut where longer (names of
// Ultralytics' models are short).
static void text_format(char *out, size_t size, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(out, size, format, args);
    va_end(args);
}

typedef struct Exporter {
    PtWriter w;
    const Yolo *model;
    float *host, *torch;  // scratch of the largest tensor
    int silu;             // memo index of the one SiLU every Conv shares, or -1
    int missing;          // a tensor not in the tables (a bug): the export fails
    char first_missing[NAME_SIZE];
} Exporter;

static void key(Exporter *e, const char *name) { pt_put_str(&e->w, name); }

static void key_int(Exporter *e, const char *name, int64_t value) {
    key(e, name);
    pt_put_int(&e->w, value);
}

static void key_pair(Exporter *e, const char *name, int64_t value, int count) {
    const int64_t values[4] = {value, value, value, value};
    key(e, name);
    pt_put_int_tuple(&e->w, values, count);
}

static void empty_ordered_dict(Exporter *e, const char *name) {
    key(e, name);
    pt_ordered_dict_begin(&e->w);
    pt_dict_end(&e->w);
}

// NEWOBJ of the class, then the __dict__ entries every module carries.
static void module_begin(Exporter *e, const char *module, const char *cls) {
    pt_object_begin(&e->w, module, cls);
    key(e, "training");  // as Ultralytics saves them (its loader calls .eval())
    pt_put_bool(&e->w, 1);
    empty_ordered_dict(e, "_backward_hooks");
    empty_ordered_dict(e, "_forward_hooks");
}

static void section_begin(Exporter *e, const char *name) {
    key(e, name);
    pt_ordered_dict_begin(&e->w);
}
static void section_end(Exporter *e) { pt_dict_end(&e->w); }

// A module without parameters or buffers: its children follow.
static void children_begin(Exporter *e) {
    empty_ordered_dict(e, "_parameters");
    empty_ordered_dict(e, "_buffers");
    section_begin(e, "_modules");
}

static const Parameter *find(const Exporter *e, const char *name) {
    const Parameter *p = parameter_find(&e->model->params, name);
    return p ? p : parameter_find(&e->model->buffers, name);
}

// The tensor named `name` (torch layout, F32), a Parameter when parameter.
static void put_tensor(Exporter *e, const char *name, int parameter, int requires_grad) {
    const Parameter *p = find(e, name);
    if (!p) {
        if (!e->missing++) text_format(e->first_missing, sizeof e->first_missing, "%s", name);
        pt_put_none(&e->w);
        return;
    }
    Backend *backend = e->model->backend;
    backend->op.download(backend, e->host, p->value, p->count * sizeof *e->host);
    weights_to_torch_layout(p, e->host, e->torch);
    int64_t shape[PARAM_MAX_RANK];
    for (int d = 0; d < p->rank; d++) shape[d] = p->torch_shape[d];
    pt_put_tensor(&e->w, SAFE_F32, e->torch, p->rank, shape, parameter, requires_grad);
}

// "model.<layer>" of a tensor name: 1 when that layer runs (its BNs count).
static int trained_name(const Exporter *e, const char *name) {
    int layer = -1;
    return sscanf(name, "model.%d.", &layer) == 1 && layer < e->model->backbone_layers;
}

static void entry(Exporter *e, const char *key_name, const char *prefix, int parameter,
                  int requires_grad) {
    char name[NAME_SIZE];
    text_format(name, sizeof name, "%s.%s", prefix, key_name);
    key(e, key_name);
    put_tensor(e, name, parameter, requires_grad);
}

// ---- leaves ---------------------------------------------------------------------------------

// A Conv2d (padding: k / 2 when negative; depthwise when one input channel
// per group) or, transposed, Segment's ConvTranspose2d (weight (in, out, k,
// k), padding 0).
static void conv_module(Exporter *e, const char *prefix, int stride, int padding, int bias,
                        int requires_grad, int transposed) {
    char name[NAME_SIZE];
    text_format(name, sizeof name, "%s.weight", prefix);
    const Parameter *weight = find(e, name);
    const int dim0 = weight ? weight->torch_shape[0] : 1;
    const int dim1 = weight ? weight->torch_shape[1] : 1;
    const int kernel = weight ? weight->torch_shape[2] : 1;
    if (transposed) padding = 0;
    else if (padding < 0) padding = kernel / 2;
    const int groups = !transposed && dim1 == 1 && dim0 > 1 ? dim0 : 1;  // depthwise
    module_begin(e, "torch.nn.modules.conv", transposed ? "ConvTranspose2d" : "Conv2d");
    key_int(e, "in_channels", transposed ? dim0 : (int64_t)dim1 * groups);
    key_int(e, "out_channels", transposed ? dim1 : dim0);
    key_pair(e, "kernel_size", kernel, 2);
    key_pair(e, "stride", stride, 2);
    key_pair(e, "padding", padding, 2);
    key_pair(e, "dilation", 1, 2);
    key(e, "transposed");
    pt_put_bool(&e->w, transposed);
    key_pair(e, "output_padding", 0, 2);
    key_int(e, "groups", groups);
    key(e, "padding_mode");
    pt_put_str(&e->w, "zeros");
    key_pair(e, "_reversed_padding_repeated_twice", padding, 4);
    section_begin(e, "_parameters");
    entry(e, "weight", prefix, 1, requires_grad);
    if (bias) entry(e, "bias", prefix, 1, 1);
    else {
        key(e, "bias");
        pt_put_none(&e->w);
    }
    section_end(e);
    empty_ordered_dict(e, "_buffers");
    empty_ordered_dict(e, "_modules");
    pt_object_end(&e->w);
}

static void conv2d(Exporter *e, const char *prefix, int stride, int bias, int requires_grad) {
    conv_module(e, prefix, stride, -1, bias, requires_grad, 0);
}

static void batchnorm(Exporter *e, const char *prefix) {
    char name[NAME_SIZE];
    text_format(name, sizeof name, "%s.weight", prefix);
    const Parameter *weight = find(e, name);
    module_begin(e, "torch.nn.modules.batchnorm", "BatchNorm2d");
    key_int(e, "num_features", weight ? weight->torch_shape[0] : 0);
    // initialize_weights' eps and momentum, as Python writes them; a -cls
    // model's are PyTorch's defaults (ClassificationModel does not call it)
    const int classify = e->model->config.task == YOLO_TASK_CLASSIFY;
    key(e, "eps");
    pt_put_float(&e->w, classify ? 1e-5 : 1e-3);
    key(e, "momentum");
    pt_put_float(&e->w, classify ? 0.1 : 0.03);
    key(e, "affine");
    pt_put_bool(&e->w, 1);
    key(e, "track_running_stats");
    pt_put_bool(&e->w, 1);
    section_begin(e, "_parameters");
    entry(e, "weight", prefix, 1, 1);
    entry(e, "bias", prefix, 1, 1);
    section_end(e);
    section_begin(e, "_buffers");
    entry(e, "running_mean", prefix, 0, 0);
    entry(e, "running_var", prefix, 0, 0);
    key(e, "num_batches_tracked");
    const int64_t counter = trained_name(e, prefix) ? e->model->num_batches_tracked : 0;
    pt_put_tensor(&e->w, SAFE_I64, &counter, 0, NULL, 0, 0);
    section_end(e);
    empty_ordered_dict(e, "_modules");
    pt_object_end(&e->w);
}

static void leaf(Exporter *e, const char *module, const char *cls) {
    module_begin(e, module, cls);
    empty_ordered_dict(e, "_parameters");
    empty_ordered_dict(e, "_buffers");
    empty_ordered_dict(e, "_modules");
}

// ---- Ultralytics' blocks ----------------------------------------------------------------------

// A top-level layer's attributes (parse_model's i, f, type, np).
typedef struct LayerInfo {
    int index;
    const YoloYamlLine *line;
    const char *type;
    int64_t parameters;
} LayerInfo;

static void layer_attributes(Exporter *e, const LayerInfo *info) {
    if (!info) return;
    key_int(e, "np", info->parameters);
    key_int(e, "i", info->index);
    key(e, "f");
    if (info->line->from_count == 1) pt_put_int(&e->w, info->line->from[0]);
    else {
        pt_list_begin(&e->w);
        for (int f = 0; f < info->line->from_count; f++) pt_put_int(&e->w, info->line->from[f]);
        pt_list_end(&e->w);
    }
    key(e, "type");
    pt_put_str(&e->w, info->type);
}

// padding: negative for Ultralytics' autopad (k / 2).
static void conv_unit(Exporter *e, const char *prefix, const char *cls, int stride, int padding,
                      int act, const LayerInfo *info) {
    char name[NAME_SIZE];
    module_begin(e, CONV_MODULE, cls);
    layer_attributes(e, info);
    children_begin(e);
    key(e, "conv");
    text_format(name, sizeof name, "%s.conv", prefix);
    conv_module(e, name, stride, padding, 0, 1, 0);
    key(e, "bn");
    text_format(name, sizeof name, "%s.bn", prefix);
    batchnorm(e, name);
    key(e, "act");
    if (act && e->silu >= 0) {
        pt_memo_get(&e->w, e->silu);  // Conv.default_act: one module for every Conv
    } else if (act) {
        leaf(e, "torch.nn.modules.activation", "SiLU");
        key(e, "inplace");
        pt_put_bool(&e->w, 1);
        pt_object_end(&e->w);
        e->silu = pt_memo_put(&e->w);
    } else {
        leaf(e, "torch.nn.modules.linear", "Identity");
        pt_object_end(&e->w);
    }
    section_end(e);
    pt_object_end(&e->w);
}

// A child conv unit "<prefix>.<child>".
static void child_conv(Exporter *e, const char *prefix, const char *child, const char *cls,
                       int act) {
    char name[NAME_SIZE];
    text_format(name, sizeof name, "%s.%s", prefix, child);
    key(e, child);
    conv_unit(e, name, cls, 1, -1, act, NULL);
}

static void container_begin(Exporter *e, const char *cls) {
    module_begin(e, CONTAINER, cls);
    children_begin(e);
}
static void container_end(Exporter *e) {
    section_end(e);
    pt_object_end(&e->w);
}

static void bottleneck(Exporter *e, const char *prefix, int add) {
    module_begin(e, BLOCK_MODULE, "Bottleneck");
    key(e, "add");
    pt_put_bool(&e->w, add);
    children_begin(e);
    child_conv(e, prefix, "cv1", "Conv", 1);
    child_conv(e, prefix, "cv2", "Conv", 1);
    container_end(e);
}

// C3 (YOLOv5's layer) and C3k (C3k2's inner block): cv1, cv2, cv3 and the
// Bottlenecks under m.
static void c3_block(Exporter *e, const char *prefix, const char *cls, int count, int shortcut,
                     const LayerInfo *info) {
    char name[NAME_SIZE], index[16];
    module_begin(e, BLOCK_MODULE, cls);
    layer_attributes(e, info);
    children_begin(e);
    child_conv(e, prefix, "cv1", "Conv", 1);
    child_conv(e, prefix, "cv2", "Conv", 1);
    child_conv(e, prefix, "cv3", "Conv", 1);
    key(e, "m");
    container_begin(e, "Sequential");
    for (int i = 0; i < count; i++) {
        text_format(index, sizeof index, "%d", i);
        text_format(name, sizeof name, "%s.m.%d", prefix, i);
        key(e, index);
        bottleneck(e, name, shortcut);
    }
    container_end(e);
    container_end(e);
}

// PSABlock (Attention, ffn) or, area, YOLO12's ABlock (AAttn, mlp).
static void attention_block(Exporter *e, const char *prefix, const YoloInner *inner, int area) {
    char name[NAME_SIZE];
    module_begin(e, BLOCK_MODULE, area ? "ABlock" : "PSABlock");
    if (!area) {
        key(e, "add");
        pt_put_bool(&e->w, 1);
    }
    children_begin(e);
    key(e, "attn");
    module_begin(e, BLOCK_MODULE, area ? "AAttn" : "Attention");
    key_int(e, "num_heads", inner->heads);
    key_int(e, "head_dim", inner->head_dim);
    if (area) {
        key_int(e, "area", inner->area);
        key_int(e, "all_head_dim", (int64_t)inner->heads * inner->head_dim);
    } else {
        key_int(e, "key_dim", inner->key_dim);
        key(e, "scale");
        pt_put_float(&e->w, pow((double)inner->key_dim, -0.5));
    }
    children_begin(e);
    text_format(name, sizeof name, "%s.attn", prefix);
    child_conv(e, name, "qkv", "Conv", 0);
    child_conv(e, name, "proj", "Conv", 0);
    child_conv(e, name, "pe", "Conv", 0);
    container_end(e);
    const char *mlp = area ? "mlp" : "ffn";
    key(e, mlp);
    container_begin(e, "Sequential");
    text_format(name, sizeof name, "%s.%s", prefix, mlp);
    child_conv(e, name, "0", "Conv", 1);
    child_conv(e, name, "1", "Conv", 0);
    container_end(e);
    container_end(e);
}

static void psa_block(Exporter *e, const char *prefix, const YoloInner *inner) {
    attention_block(e, prefix, inner, 0);
}

// YOLO12's A2C2f: gamma (a Parameter for the l and x sizes' attention
// layers, else None), cv1, cv2, m: Sequential(ABlock, ABlock) or C3k each.
static void a2c2f(Exporter *e, const char *prefix, const YoloModule *layer, const LayerInfo *info) {
    char name[NAME_SIZE], index[16];
    module_begin(e, BLOCK_MODULE, "A2C2f");
    layer_attributes(e, info);
    if (layer->gamma_index < 0) {
        key(e, "gamma");
        pt_put_none(&e->w);
        empty_ordered_dict(e, "_parameters");
    } else {
        section_begin(e, "_parameters");
        entry(e, "gamma", prefix, 1, 1);
        section_end(e);
    }
    empty_ordered_dict(e, "_buffers");
    section_begin(e, "_modules");
    child_conv(e, prefix, "cv1", "Conv", 1);
    child_conv(e, prefix, "cv2", "Conv", 1);
    key(e, "m");
    container_begin(e, "ModuleList");
    const int groups = layer->inner_count / layer->inner_group;
    for (int i = 0; i < groups; i++) {
        text_format(index, sizeof index, "%d", i);
        key(e, index);
        text_format(name, sizeof name, "%s.m.%d", prefix, i);
        if (!layer->area) {
            c3_block(e, name, "C3k", layer->inner[i].count, 1, NULL);
            continue;
        }
        container_begin(e, "Sequential");
        for (int j = 0; j < 2; j++) {
            char block[NAME_SIZE];
            text_format(index, sizeof index, "%d", j);
            text_format(block, sizeof block, "%s.%d", name, j);
            key(e, index);
            attention_block(e, block, &layer->inner[2 * i + j], 1);
        }
        container_end(e);
    }
    container_end(e);
    container_end(e);
}

// YOLO26's attention C3k2 block: Sequential(Bottleneck, PSABlock).
static void bottleneck_psa(Exporter *e, const char *prefix, const YoloInner *inner) {
    char name[NAME_SIZE];
    container_begin(e, "Sequential");
    key(e, "0");
    text_format(name, sizeof name, "%s.0", prefix);
    bottleneck(e, name, inner->bottleneck.add);
    key(e, "1");
    text_format(name, sizeof name, "%s.1", prefix);
    psa_block(e, name, inner);
    container_end(e);
}

// C2f, C3k2 and C2PSA: cv1, cv2 and the inner blocks under m.
static void csp(Exporter *e, const char *prefix, const YoloModule *layer, const LayerInfo *info) {
    const char *cls = layer->kind == YOLO_C2F ? "C2f" : layer->kind == YOLO_C3K2 ? "C3k2" : "C2PSA";
    char name[NAME_SIZE], index[16];
    module_begin(e, BLOCK_MODULE, cls);
    key_int(e, "c", layer->hidden);
    layer_attributes(e, info);
    children_begin(e);
    child_conv(e, prefix, "cv1", "Conv", 1);
    child_conv(e, prefix, "cv2", "Conv", 1);
    key(e, "m");
    container_begin(e, layer->kind == YOLO_C2PSA ? "Sequential" : "ModuleList");
    for (int i = 0; i < layer->inner_count; i++) {
        const YoloInner *inner = &layer->inner[i];
        text_format(index, sizeof index, "%d", i);
        text_format(name, sizeof name, "%s.m.%d", prefix, i);
        key(e, index);
        if (inner->kind == YOLO_INNER_C3K) c3_block(e, name, "C3k", inner->count, 1, NULL);
        else if (inner->kind == YOLO_INNER_PSA) psa_block(e, name, inner);
        else if (inner->kind == YOLO_INNER_BOTTLENECK_PSA) bottleneck_psa(e, name, inner);
        else bottleneck(e, name, inner->bottleneck.add);
    }
    container_end(e);
    container_end(e);
}

static void sppf(Exporter *e, const char *prefix, const YoloModule *layer, const LayerInfo *info) {
    module_begin(e, BLOCK_MODULE, "SPPF");
    key_int(e, "n", 3);
    key(e, "add");
    pt_put_bool(&e->w, layer->shortcut);
    layer_attributes(e, info);
    children_begin(e);
    child_conv(e, prefix, "cv1", "Conv", !layer->plain_cv1);
    child_conv(e, prefix, "cv2", "Conv", 1);
    key(e, "m");
    leaf(e, "torch.nn.modules.pooling", "MaxPool2d");
    key_int(e, "kernel_size", layer->kernel);
    key_int(e, "stride", 1);
    key_int(e, "padding", layer->kernel / 2);
    key_int(e, "dilation", 1);
    key(e, "return_indices");
    pt_put_bool(&e->w, 0);
    key(e, "ceil_mode");
    pt_put_bool(&e->w, 0);
    pt_object_end(&e->w);
    container_end(e);
}

static void put_stride(Exporter *e) {
    const float strides[3] = {8.0f, 16.0f, 32.0f};
    const int64_t shape[1] = {3};
    pt_put_tensor(&e->w, SAFE_F32, strides, 1, shape, 0, 0);
}

// One head stack (cv2: box, cv3: class) of one level.
static void head_stack(Exporter *e, const char *prefix, int legacy, int last) {
    char name[NAME_SIZE];
    container_begin(e, "Sequential");
    for (int i = 0; i < 2; i++) {
        char index[16];
        text_format(index, sizeof index, "%d", i);
        if (legacy) {
            child_conv(e, prefix, index, "Conv", 1);
            continue;
        }
        key(e, index);
        container_begin(e, "Sequential");
        text_format(name, sizeof name, "%s.%d", prefix, i);
        child_conv(e, name, "0", "DWConv", 1);
        child_conv(e, name, "1", "Conv", 1);
        container_end(e);
    }
    if (last) {  // all but Pose26's keypoint stacks (its Conv2d heads are apart)
        key(e, "2");
        text_format(name, sizeof name, "%s.2", prefix);
        conv2d(e, name, 1, 1, 1);
    }
    container_end(e);
}

// What a head ModuleList holds per level: a stack (head_stack) with or
// without its final Conv2d, or only a biased Conv2d (Pose26's cv4_kpts,
// cv4_sigma and their one2one copies).
typedef enum LevelModule { STACK_WITH_CONV2D, STACK_WITHOUT_CONV2D, CONV2D_ONLY } LevelModule;

// One head ModuleList "<prefix>.<list>", a module per level. copy: one of
// YOLO26's one2one lists, a deep copy with its own one SiLU.
static void head_list_of(Exporter *e, const char *prefix, const YoloModule *layer,
                         const char *list, int legacy, int copy, LevelModule level_module) {
    char name[NAME_SIZE], index[16];
    const int shared_silu = e->silu;
    if (copy) e->silu = -1;  // the copy's SiLU: made and memoised at its first Conv
    key(e, list);
    container_begin(e, "ModuleList");
    for (int level = 0; level < layer->from_count; level++) {
        text_format(index, sizeof index, "%d", level);
        text_format(name, sizeof name, "%s.%s.%d", prefix, list, level);
        key(e, index);
        if (level_module == CONV2D_ONLY) conv2d(e, name, 1, 1, 1);
        else head_stack(e, name, legacy, level_module == STACK_WITH_CONV2D);
    }
    container_end(e);
    e->silu = shared_silu;
}

static void head_list(Exporter *e, const char *prefix, const YoloModule *layer, const char *list,
                      int legacy, int copy) {
    head_list_of(e, prefix, layer, list, legacy, copy, STACK_WITH_CONV2D);
}

// torch.nn.Linear "<prefix>" (weight (out, in), bias).
static void linear(Exporter *e, const char *prefix) {
    char name[NAME_SIZE];
    text_format(name, sizeof name, "%s.weight", prefix);
    const Parameter *weight = find(e, name);
    module_begin(e, "torch.nn.modules.linear", "Linear");
    key_int(e, "in_features", weight ? weight->torch_shape[1] : 0);
    key_int(e, "out_features", weight ? weight->torch_shape[0] : 0);
    section_begin(e, "_parameters");
    entry(e, "weight", prefix, 1, 1);
    entry(e, "bias", prefix, 1, 1);
    section_end(e);
    empty_ordered_dict(e, "_buffers");
    empty_ordered_dict(e, "_modules");
    pt_object_end(&e->w);
}

// An activation module of its own (not Conv's shared SiLU): RealNVP's.
static void activation(Exporter *e, const char *cls, int inplace_attribute) {
    leaf(e, "torch.nn.modules.activation", cls);
    if (inplace_attribute) {
        key(e, "inplace");
        pt_put_bool(&e->w, 0);
    }
    pt_object_end(&e->w);
}

// Pose26's RealNVP (yolo.c, declare_flow): its buffers, then ModuleLists s
// and t of 6 Sequential(Linear, SiLU, Linear, SiLU, Linear (, Tanh)).
static void flow_model(Exporter *e, const char *prefix) {
    char name[NAME_SIZE], index[16];
    module_begin(e, BLOCK_MODULE, "RealNVP");
    empty_ordered_dict(e, "_parameters");
    section_begin(e, "_buffers");
    entry(e, "loc", prefix, 0, 0);
    entry(e, "cov", prefix, 0, 0);
    entry(e, "mask", prefix, 0, 0);
    section_end(e);
    section_begin(e, "_modules");
    for (int net = 0; net < 2; net++) {
        key(e, net ? "t" : "s");
        container_begin(e, "ModuleList");
        for (int i = 0; i < 6; i++) {
            text_format(index, sizeof index, "%d", i);
            key(e, index);
            container_begin(e, "Sequential");
            for (int l = 0; l < 6 - net; l++) {
                text_format(index, sizeof index, "%d", l);
                key(e, index);
                text_format(name, sizeof name, "%s.%c.%d.%d", prefix, "st"[net], i, l);
                if (l % 2 == 0) linear(e, name);
                else if (l == 5) activation(e, "Tanh", 0);
                else activation(e, "SiLU", 1);
            }
            container_end(e);
        }
        container_end(e);
    }
    section_end(e);
    pt_object_end(&e->w);
}

// Segment's mask prototypes: Proto, or YOLO26's Proto26 (yolo.c, declare_segment).
static void proto(Exporter *e, const char *prefix, const YoloModule *layer, int proto26) {
    char name[NAME_SIZE], index[16];
    module_begin(e, BLOCK_MODULE, proto26 ? "Proto26" : "Proto");
    children_begin(e);
    child_conv(e, prefix, "cv1", "Conv", 1);
    key(e, "upsample");
    text_format(name, sizeof name, "%s.upsample", prefix);
    conv_module(e, name, 2, -1, 1, 1, 1);
    child_conv(e, prefix, "cv2", "Conv", 1);
    child_conv(e, prefix, "cv3", "Conv", 1);
    if (proto26) {
        key(e, "feat_refine");
        container_begin(e, "ModuleList");
        text_format(name, sizeof name, "%s.feat_refine", prefix);
        for (int level = 1; level < layer->from_count; level++) {
            text_format(index, sizeof index, "%d", level - 1);
            child_conv(e, name, index, "Conv", 1);
        }
        container_end(e);
        child_conv(e, prefix, "feat_fuse", "Conv", 1);
        key(e, "semseg");
        container_begin(e, "Sequential");
        text_format(name, sizeof name, "%s.semseg", prefix);
        child_conv(e, name, "0", "Conv", 1);
        child_conv(e, name, "1", "Conv", 1);
        key(e, "2");
        text_format(name, sizeof name, "%s.semseg.2", prefix);
        conv2d(e, name, 1, 1, 1);
        container_end(e);
    }
    container_end(e);
}

// The head's class: Detect, Segment, Pose, OBB, or YOLO26's Segment26, Pose26, OBB26.
static const char *head_class(const YoloConfig *config) {
    static const char *const classes[2][4] = {{"Detect", "Segment", "Pose", "OBB"},
                                              {"Detect", "Segment26", "Pose26", "OBB26"}};
    return classes[config->family == YOLO_26][config->task];
}

// Pose's kpt_shape, [17, 3].
static void put_kpt_shape(Exporter *e) {
    pt_list_begin(&e->w);
    pt_put_int(&e->w, YOLO_KEYPOINTS);
    pt_put_int(&e->w, YOLO_KEYPOINT_DIMS);
    pt_list_end(&e->w);
}

static void detect(Exporter *e, const char *prefix, const YoloModule *layer,
                   const LayerInfo *info) {
    const YoloConfig *config = &e->model->config;
    const YoloFamily family = config->family;
    const int classes = config->classes, reg_max = yolo_reg_max(family);
    const int segment = config->task == YOLO_TASK_SEGMENT;
    char name[NAME_SIZE];
    module_begin(e, "ultralytics.nn.modules.head", head_class(config));
    key_int(e, "nc", classes);
    key_int(e, "nl", layer->from_count);
    key_int(e, "reg_max", reg_max);
    key_int(e, "no", classes + 4 * reg_max);
    key(e, "stride");
    put_stride(e);
    const float none = 0.0f;
    const int64_t empty[1] = {0};
    key(e, "anchors");  // made by the first inference; empty until then
    pt_put_tensor(&e->w, SAFE_F32, &none, 1, empty, 0, 0);
    key(e, "strides");
    pt_put_tensor(&e->w, SAFE_F32, &none, 1, empty, 0, 0);
    if (segment) {
        key_int(e, "nm", YOLO_MASKS);
        key_int(e, "npr", layer->hidden);
    } else if (config->task == YOLO_TASK_POSE) {
        key(e, "kpt_shape");
        put_kpt_shape(e);
        key_int(e, "nk", YOLO_KEYPOINTS * YOLO_KEYPOINT_DIMS);
        if (family == YOLO_26) key_int(e, "nk_sigma", 2 * YOLO_KEYPOINTS);
    } else if (config->task == YOLO_TASK_OBB) {
        key_int(e, "ne", 1);
    }
    layer_attributes(e, info);
    key(e, "inplace");
    pt_put_bool(&e->w, 1);
    children_begin(e);
    head_list(e, prefix, layer, "cv2", 1, 0);
    head_list(e, prefix, layer, "cv3", yolo_legacy_head(family), 0);
    key(e, "dfl");
    if (reg_max > 1) {
        module_begin(e, BLOCK_MODULE, "DFL");
        key_int(e, "c1", reg_max);
        children_begin(e);
        key(e, "conv");
        text_format(name, sizeof name, "%s.dfl.conv", prefix);
        conv2d(e, name, 1, 0, 0);  // fixed (requires_grad False, as Ultralytics' DFL)
        container_end(e);
    } else {
        leaf(e, "torch.nn.modules.linear", "Identity");
        pt_object_end(&e->w);
    }
    // YOLO26's end-to-end head: its one-to-one copies of both stacks
    if (yolo_end2end(family)) {
        head_list(e, prefix, layer, "one2one_cv2", 1, 1);
        head_list(e, prefix, layer, "one2one_cv3", 0, 1);
    }
    if (segment) {
        key(e, "proto");
        text_format(name, sizeof name, "%s.proto", prefix);
        proto(e, name, layer, family == YOLO_26);
        head_list(e, prefix, layer, "cv4", 1, 0);
        if (yolo_end2end(family)) head_list(e, prefix, layer, "one2one_cv4", 1, 1);
    } else if (config->task == YOLO_TASK_POSE || config->task == YOLO_TASK_OBB) {
        const int pose26 = config->task == YOLO_TASK_POSE && family == YOLO_26;
        const LevelModule cv4 = pose26 ? STACK_WITHOUT_CONV2D : STACK_WITH_CONV2D;
        head_list_of(e, prefix, layer, "cv4", 1, 0, cv4);
        if (yolo_end2end(family)) head_list_of(e, prefix, layer, "one2one_cv4", 1, 1, cv4);
        if (pose26) {
            key(e, "flow_model");
            text_format(name, sizeof name, "%s.flow_model", prefix);
            flow_model(e, name);
            const char *const lists[4] = {"cv4_kpts", "cv4_sigma", "one2one_cv4_kpts",
                                          "one2one_cv4_sigma"};
            for (int i = 0; i < 4; i++) head_list_of(e, prefix, layer, lists[i], 1, 0, CONV2D_ONLY);
        }
    }
    container_end(e);
}

// Classify: conv (a Conv to 1280), pool (global), drop (p 0), linear.
static void classify_head(Exporter *e, const char *prefix, const LayerInfo *info) {
    char name[NAME_SIZE];
    module_begin(e, "ultralytics.nn.modules.head", "Classify");
    layer_attributes(e, info);
    children_begin(e);
    child_conv(e, prefix, "conv", "Conv", 1);
    key(e, "pool");
    leaf(e, "torch.nn.modules.pooling", "AdaptiveAvgPool2d");
    key_int(e, "output_size", 1);
    pt_object_end(&e->w);
    key(e, "drop");
    leaf(e, "torch.nn.modules.dropout", "Dropout");
    key(e, "p");
    pt_put_float(&e->w, 0.0);
    key(e, "inplace");
    pt_put_bool(&e->w, 1);
    pt_object_end(&e->w);
    key(e, "linear");
    text_format(name, sizeof name, "%s.linear", prefix);
    linear(e, name);
    container_end(e);
}

// ---- the DetectionModel and the checkpoint ----------------------------------------------------

static const char *module_name(YoloModuleKind kind) {
    static const char *const names[] = {"Conv", "C2f", "C3k2", "SPPF", "C2PSA", "nn.Upsample",
                                        "Concat", "Detect", "Classify", "C3", "A2C2f"};
    return names[kind];
}

// parse_model's m.type of a layer (the head's: its class, head_class).
static void type_name(const YoloConfig *config, YoloModuleKind kind, char *out, size_t size) {
    static const char *const names[] = {
        CONV_MODULE ".Conv", BLOCK_MODULE ".C2f", BLOCK_MODULE ".C3k2", BLOCK_MODULE ".SPPF",
        BLOCK_MODULE ".C2PSA", "torch.nn.modules.upsampling.Upsample", CONV_MODULE ".Concat",
        "", "ultralytics.nn.modules.head.Classify", BLOCK_MODULE ".C3", BLOCK_MODULE ".A2C2f"};
    if (kind == YOLO_DETECT)
        text_format(out, size, "ultralytics.nn.modules.head.%s", head_class(config));
    else text_format(out, size, "%s", names[kind]);
}

// One YAML line's args list.
static void yaml_args(Exporter *e, const YoloYamlLine *line) {
    pt_list_begin(&e->w);
    switch (line->kind) {
    case YOLO_CONV:
        pt_put_int(&e->w, line->channels), pt_put_int(&e->w, line->kernel);
        pt_put_int(&e->w, line->stride);
        if (line->padding) pt_put_int(&e->w, line->padding);
        break;
    case YOLO_C3:
        pt_put_int(&e->w, line->channels);
        if (!line->flag) pt_put_bool(&e->w, 0);  // the neck's [c2, False]
        break;
    case YOLO_A2C2F:  // [c2, a2, area]
        pt_put_int(&e->w, line->channels), pt_put_bool(&e->w, line->flag);
        pt_put_int(&e->w, line->attn);
        break;
    case YOLO_C2F:
        pt_put_int(&e->w, line->channels);
        if (line->flag) pt_put_bool(&e->w, 1);
        break;
    case YOLO_C3K2:
        pt_put_int(&e->w, line->channels), pt_put_bool(&e->w, line->flag);
        if (line->expansion > 0) pt_put_float(&e->w, line->expansion);
        if (line->attn) pt_put_bool(&e->w, 1);
        break;
    case YOLO_SPPF:
        pt_put_int(&e->w, line->channels), pt_put_int(&e->w, line->kernel);
        if (line->flag) pt_put_int(&e->w, 3), pt_put_bool(&e->w, 1);  // YOLO26: n, shortcut
        break;
    case YOLO_C2PSA: pt_put_int(&e->w, line->channels); break;
    case YOLO_UPSAMPLE:
        pt_put_str(&e->w, "None"), pt_put_int(&e->w, 2), pt_put_str(&e->w, "nearest");
        break;
    case YOLO_CONCAT: pt_put_int(&e->w, 1); break;
    case YOLO_CLASSIFY: pt_put_str(&e->w, "nc"); break;
    case YOLO_DETECT:
        pt_put_str(&e->w, "nc");
        if (e->model->config.task == YOLO_TASK_SEGMENT)  // nm, npr before scaling
            pt_put_int(&e->w, YOLO_MASKS), pt_put_int(&e->w, 256);
        if (e->model->config.task == YOLO_TASK_POSE) pt_put_str(&e->w, "kpt_shape");
        if (e->model->config.task == YOLO_TASK_OBB) pt_put_int(&e->w, 1);  // ne
        break;
    }
    pt_list_end(&e->w);
}

static void yaml_lines(Exporter *e, const YoloYamlLine *lines, int first, int end) {
    pt_list_begin(&e->w);
    for (int i = first; i < end; i++) {
        const YoloYamlLine *line = &lines[i];
        pt_list_begin(&e->w);
        if (line->from_count == 1) pt_put_int(&e->w, line->from[0]);
        else {
            pt_list_begin(&e->w);
            for (int f = 0; f < line->from_count; f++) pt_put_int(&e->w, line->from[f]);
            pt_list_end(&e->w);
        }
        pt_put_int(&e->w, line->repeats);
        pt_put_str(&e->w, line->kind == YOLO_DETECT ? head_class(&e->model->config)
                                                    : module_name(line->kind));
        yaml_args(e, line);
        pt_list_end(&e->w);
    }
    pt_list_end(&e->w);
}

// DetectionModel.yaml: the family's YAML as Ultralytics' yaml_model_load reads it.
static void yaml_dict(Exporter *e, const YoloYamlLine *lines, int count) {
    const YoloConfig *config = &e->model->config;
    const YoloScale *scales = yolo_yaml_scales(config->family, config->task);
    char text[32];
    pt_dict_begin(&e->w);
    key_int(e, "nc", config->classes);
    if (yolo_end2end(config->family) && config->task != YOLO_TASK_CLASSIFY) {  // YOLO26's
        key(e, "end2end");
        pt_put_bool(&e->w, 1);
        key_int(e, "reg_max", yolo_reg_max(config->family));
    }
    if (config->task == YOLO_TASK_POSE) {
        key(e, "kpt_shape");
        put_kpt_shape(e);
    }
    key(e, "scales");
    pt_dict_begin(&e->w);
    for (int s = 0; s < 5; s++) {
        text_format(text, sizeof text, "%c", scales[s].scale);
        key(e, text);
        pt_list_begin(&e->w);
        pt_put_float(&e->w, scales[s].depth), pt_put_float(&e->w, scales[s].width);
        pt_put_int(&e->w, scales[s].max_channels);
        pt_list_end(&e->w);
    }
    pt_dict_end(&e->w);
    // the YAML's backbone section ends with SPPF (v5, v8), C2PSA (11, 26) or A2C2f (12):
    // LightlyTrain's cut plus SPPF for v5 and v8
    const int backbone = config->task == YOLO_TASK_CLASSIFY ? count - 1  // all but Classify
                         : yolo_legacy_head(config->family) ? 10
                                                            : yolo_backbone_layers(config->family);
    key(e, "backbone");
    yaml_lines(e, lines, 0, backbone);
    key(e, "head");
    yaml_lines(e, lines, backbone, count);
    key(e, "scale");
    text_format(text, sizeof text, "%c", config->scale);
    pt_put_str(&e->w, text);
    key(e, "yaml_file");
    text_format(text, sizeof text, "%s.yaml", config->name);
    pt_put_str(&e->w, text);
    key_int(e, "channels", 3);
    pt_dict_end(&e->w);
}

// parse_model's m.np: the elements of the layer's parameters.
static int64_t layer_parameters(const Yolo *model, int layer) {
    char prefix[32];
    text_format(prefix, sizeof prefix, "model.%d.", layer);
    const ParameterSet *sets[2] = {&model->params, &model->buffers};
    int64_t total = 0;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sets[s]->count; i++) {
            const char *name = sets[s]->params[i].name;
            if (strncmp(name, prefix, strlen(prefix)) || strstr(name, ".running_")) continue;
            total += (int64_t)sets[s]->params[i].count;
        }
    return total;
}

static void detection_model(Exporter *e) {
    const Yolo *model = e->model;
    int count;
    const YoloYamlLine *lines = yolo_yaml_lines(model->config.family, model->config.task, &count);
    static const char *const tasks[5] = {"detect", "segment", "pose", "obb", "classify"};
    static const char *const models[5] = {"DetectionModel", "SegmentationModel", "PoseModel",
                                          "OBBModel", "ClassificationModel"};
    const int classify = model->config.task == YOLO_TASK_CLASSIFY;
    const char *task = tasks[model->config.task];
    module_begin(e, "ultralytics.nn.tasks", models[model->config.task]);
    key(e, "yaml");
    yaml_dict(e, lines, count);
    key(e, "save");  // every layer read from elsewhere than the previous one
    pt_list_begin(&e->w);
    for (int i = 0; i < count; i++) {
        int read = 0;
        for (int j = 0; j < count && !read; j++)
            for (int f = 0; f < lines[j].from_count; f++) read |= lines[j].from[f] == i;
        if (read) pt_put_int(&e->w, i);
    }
    pt_list_end(&e->w);
    key(e, "names");
    pt_dict_begin(&e->w);
    for (int c = 0; c < model->config.classes; c++) {
        char text[16];
        text_format(text, sizeof text, "%d", c);
        pt_put_int(&e->w, c);
        pt_put_str(&e->w, text);
    }
    pt_dict_end(&e->w);
    if (!classify) {  // ClassificationModel has no inplace, and a stride of 1
        key(e, "inplace");
        pt_put_bool(&e->w, 1);
    }
    key(e, "stride");
    if (classify) {
        const float one = 1.0f;
        const int64_t shape[1] = {1};
        pt_put_tensor(&e->w, SAFE_F32, &one, 1, shape, 0, 0);
    } else {
        put_stride(e);
    }
    if (model->config.task == YOLO_TASK_POSE) {  // PoseModel keeps its YAML's kpt_shape
        key(e, "kpt_shape");
        put_kpt_shape(e);
    }
    key(e, "task");
    pt_put_str(&e->w, task);
    key(e, "args");  // Ultralytics' loader merges its defaults under these
    pt_dict_begin(&e->w);
    key(e, "task");
    pt_put_str(&e->w, task);
    key(e, "model");
    char yaml[32];
    text_format(yaml, sizeof yaml, "%s.yaml", model->config.name);
    pt_put_str(&e->w, yaml);
    pt_dict_end(&e->w);
    children_begin(e);
    key(e, "model");
    container_begin(e, "Sequential");
    for (int i = 0; i < model->layer_count; i++) {
        const YoloModule *layer = &model->layers[i];
        char type[96];
        type_name(&model->config, layer->kind, type, sizeof type);
        const LayerInfo info = {i, &lines[i], type, layer_parameters(model, i)};
        char index[16], prefix[32];
        text_format(index, sizeof index, "%d", i);
        text_format(prefix, sizeof prefix, "model.%d", i);
        key(e, index);
        switch (layer->kind) {
        case YOLO_CONV:
            conv_unit(e, prefix, "Conv", layer->stride, layer->padding, 1, &info);
            break;
        case YOLO_C3: c3_block(e, prefix, "C3", layer->repeats, layer->shortcut, &info); break;
        case YOLO_A2C2F: a2c2f(e, prefix, layer, &info); break;
        case YOLO_C2F:
        case YOLO_C3K2:
        case YOLO_C2PSA: csp(e, prefix, layer, &info); break;
        case YOLO_SPPF: sppf(e, prefix, layer, &info); break;
        case YOLO_UPSAMPLE:
            leaf(e, "torch.nn.modules.upsampling", "Upsample");
            key(e, "name");
            pt_put_str(&e->w, "Upsample");
            key(e, "size");
            pt_put_none(&e->w);
            key(e, "scale_factor");
            pt_put_float(&e->w, 2.0);
            key(e, "mode");
            pt_put_str(&e->w, "nearest");
            key(e, "align_corners");
            pt_put_none(&e->w);
            key(e, "recompute_scale_factor");
            pt_put_none(&e->w);
            layer_attributes(e, &info);
            pt_object_end(&e->w);
            break;
        case YOLO_CONCAT:
            leaf(e, CONV_MODULE, "Concat");
            key_int(e, "d", 1);
            layer_attributes(e, &info);
            pt_object_end(&e->w);
            break;
        case YOLO_DETECT: detect(e, prefix, layer, &info); break;
        case YOLO_CLASSIFY: classify_head(e, prefix, &info); break;
        }
    }
    container_end(e);
    container_end(e);
}

int export_ultralytics(const Yolo *model, const char *path, ErrorMessage *err) {
    Exporter e = {.model = model, .silu = -1};
    size_t largest = 1;
    const ParameterSet *sets[2] = {&model->params, &model->buffers};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sets[s]->count; i++)
            if (sets[s]->params[i].count > largest) largest = sets[s]->params[i].count;
    e.host = malloc(largest * sizeof *e.host);
    e.torch = malloc(largest * sizeof *e.torch);
    if (!e.host || !e.torch) {
        free(e.host);
        free(e.torch);
        return error_set(err, "out of memory exporting %s", model->config.name);
    }
    pt_writer_init(&e.w);
    char date[32];
    const time_t now = time(NULL);
    struct tm utc;
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", gmtime_r(&now, &utc));
    pt_dict_begin(&e.w);
    key(&e, "date");
    pt_put_str(&e.w, date);
    key(&e, "version");
    pt_put_str(&e.w, ULTRALYTICS_CHECKED_VERSION);
    key(&e, "license");
    pt_put_str(&e.w, "AGPL-3.0 License (https://ultralytics.com/license)");
    key(&e, "docs");
    pt_put_str(&e.w, "https://docs.ultralytics.com");
    key(&e, "ema");
    pt_put_none(&e.w);
    key(&e, "modelopt");
    pt_put_none(&e.w);
    key(&e, "model");
    detection_model(&e);
    pt_dict_end(&e.w);
    int status = 0;
    if (e.missing)
        status = error_set(err, "%s: %d tensors missing from the model, the first %s", path,
                           e.missing, e.first_missing);
    else
        status = pt_writer_save(&e.w, path, "exported_last", err);
    pt_writer_free(&e.w);
    free(e.host);
    free(e.torch);
    return status;
}
