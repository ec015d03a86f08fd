// The Ultralytics checkpoint writer's leaves and blocks (see
// ultralytics_export_internal.h): the pickle helpers, Conv2d, BatchNorm2d,
// Conv, Bottleneck, C3 / C3k, PSABlock / ABlock, A2C2f, C2f / C3k2 / C2PSA /
// C2fAttn, SPPF.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "nn/weights.h"
#include "weights/pt_nn_modules.h"
#include "weights/ultralytics_export_internal.h"

// out (size bytes) = the formatted text, cut where longer (names of
// Ultralytics' models are short).
void ux_text_format(char *out, size_t size, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(out, size, format, args);
    va_end(args);
}


void ux_key(Exporter *e, const char *name) { pt_put_str(&e->w, name); }

void ux_key_int(Exporter *e, const char *name, int64_t value) {
    pt_nn_key_int(&e->w, name, value);
}

void ux_empty_ordered_dict(Exporter *e, const char *name) {
    pt_nn_empty_ordered_dict(&e->w, name);
}

// NEWOBJ of the class, then the __dict__ entries every module carries
// (training=True, as Ultralytics saves them: its loader calls .eval()).
void ux_module_begin(Exporter *e, const char *module, const char *cls) {
    pt_nn_module_begin(&e->w, module, cls);
}

void ux_section_begin(Exporter *e, const char *name) {
    ux_key(e, name);
    pt_ordered_dict_begin(&e->w);
}
void ux_section_end(Exporter *e) { pt_dict_end(&e->w); }

// A module without parameters or buffers: its children follow.
void ux_children_begin(Exporter *e) {
    ux_empty_ordered_dict(e, "_parameters");
    ux_empty_ordered_dict(e, "_buffers");
    ux_section_begin(e, "_modules");
}

const Parameter *ux_find(const Exporter *e, const char *name) {
    const Parameter *p = parameter_find(&e->model->params, name);
    return p ? p : parameter_find(&e->model->buffers, name);
}

// The tensor named `name` (torch layout, F32), a Parameter when parameter.
static void put_tensor(Exporter *e, const char *name, int parameter, int requires_grad) {
    const Parameter *p = ux_find(e, name);
    if (!p) {
        if (!e->missing++) ux_text_format(e->first_missing, sizeof e->first_missing, "%s", name);
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

void ux_entry(Exporter *e, const char *key_name, const char *prefix, int parameter,
              int requires_grad) {
    char name[NAME_SIZE];
    ux_text_format(name, sizeof name, "%s.%s", prefix, key_name);
    ux_key(e, key_name);
    put_tensor(e, name, parameter, requires_grad);
}

// ---- leaves ---------------------------------------------------------------------------------

// A Conv2d (padding: k / 2 when negative; depthwise when one input channel
// per group) or, transposed, Segment's ConvTranspose2d (weight (in, out, k,
// k), padding 0).
static void conv_module(Exporter *e, const char *prefix, int stride, int padding, int bias,
                        int requires_grad, int transposed, const LayerInfo *info) {
    char name[NAME_SIZE];
    ux_text_format(name, sizeof name, "%s.weight", prefix);
    const Parameter *weight = ux_find(e, name);
    const int dim0 = weight ? weight->torch_shape[0] : 1;
    const int dim1 = weight ? weight->torch_shape[1] : 1;
    const int kernel = weight ? weight->torch_shape[2] : 1;
    if (transposed) padding = 0;
    else if (padding < 0) padding = kernel / 2;
    const int groups = !transposed && dim1 == 1 && dim0 > 1 ? dim0 : 1;  // depthwise
    ux_module_begin(e, "torch.nn.modules.conv", transposed ? "ConvTranspose2d" : "Conv2d");
    ux_layer_attributes(e, info);
    const PtConv2d conv = {.in_channels = transposed ? dim0 : dim1 * groups,
                           .out_channels = transposed ? dim1 : dim0,
                           .kernel = kernel,
                           .stride = stride,
                           .padding = padding,
                           .groups = groups,
                           .transposed = transposed};
    pt_nn_conv2d_attributes(&e->w, &conv);
    ux_section_begin(e, "_parameters");
    ux_entry(e, "weight", prefix, 1, requires_grad);
    if (bias) ux_entry(e, "bias", prefix, 1, 1);
    else {
        ux_key(e, "bias");
        pt_put_none(&e->w);
    }
    ux_section_end(e);
    ux_empty_ordered_dict(e, "_buffers");
    ux_empty_ordered_dict(e, "_modules");
    pt_object_end(&e->w);
}

void ux_conv_module(Exporter *e, const char *prefix, int stride, int padding, int bias,
                    int requires_grad, int transposed) {
    conv_module(e, prefix, stride, padding, bias, requires_grad, transposed, NULL);
}

void ux_conv_transpose_layer(Exporter *e, const char *prefix, int stride, const LayerInfo *info) {
    conv_module(e, prefix, stride, 0, 1, 1, 1, info);
}

void ux_conv2d(Exporter *e, const char *prefix, int stride, int bias, int requires_grad) {
    ux_conv_module(e, prefix, stride, -1, bias, requires_grad, 0);
}

void ux_batchnorm(Exporter *e, const char *prefix) {
    char name[NAME_SIZE];
    ux_text_format(name, sizeof name, "%s.weight", prefix);
    const Parameter *weight = ux_find(e, name);
    ux_module_begin(e, "torch.nn.modules.batchnorm", "BatchNorm2d");
    // initialize_weights' eps and momentum, as Python writes them; a -cls
    // model's are PyTorch's defaults (ClassificationModel does not call it)
    const int classify = e->model->config.task == YOLO_TASK_CLASSIFY;
    pt_nn_batchnorm_attributes(&e->w, weight ? weight->torch_shape[0] : 0, classify ? 1e-5 : 1e-3,
                               classify ? 0.1 : 0.03);
    ux_section_begin(e, "_parameters");
    ux_entry(e, "weight", prefix, 1, 1);
    ux_entry(e, "bias", prefix, 1, 1);
    ux_section_end(e);
    ux_section_begin(e, "_buffers");
    ux_entry(e, "running_mean", prefix, 0, 0);
    ux_entry(e, "running_var", prefix, 0, 0);
    ux_key(e, "num_batches_tracked");
    const int64_t counter = trained_name(e, prefix) ? e->model->num_batches_tracked : 0;
    pt_put_tensor(&e->w, SAFE_I64, &counter, 0, NULL, 0, 0);
    ux_section_end(e);
    ux_empty_ordered_dict(e, "_modules");
    pt_object_end(&e->w);
}

void ux_parameter_pair(Exporter *e, const char *prefix, const char *first, const char *second) {
    ux_section_begin(e, "_parameters");
    ux_entry(e, first, prefix, 1, 1);
    ux_entry(e, second, prefix, 1, 1);
    ux_section_end(e);
    ux_empty_ordered_dict(e, "_buffers");
}

void ux_leaf(Exporter *e, const char *module, const char *cls) {
    ux_module_begin(e, module, cls);
    ux_empty_ordered_dict(e, "_parameters");
    ux_empty_ordered_dict(e, "_buffers");
    ux_empty_ordered_dict(e, "_modules");
}

// ---- Ultralytics' blocks ----------------------------------------------------------------------


void ux_layer_attributes(Exporter *e, const LayerInfo *info) {
    if (!info) return;
    ux_key_int(e, "np", info->parameters);
    ux_key_int(e, "i", info->index);
    ux_key(e, "f");
    if (info->line->from_count == 1) pt_put_int(&e->w, info->line->from[0]);
    else {
        pt_list_begin(&e->w);
        for (int f = 0; f < info->line->from_count; f++) pt_put_int(&e->w, info->line->from[f]);
        pt_list_end(&e->w);
    }
    ux_key(e, "type");
    pt_put_str(&e->w, info->type);
}

// padding: negative for Ultralytics' autopad (k / 2).
void ux_conv_unit(Exporter *e, const char *prefix, const char *cls, int stride, int padding,
                  int act, const LayerInfo *info) {
    char name[NAME_SIZE];
    ux_module_begin(e, CONV_MODULE, cls);
    ux_layer_attributes(e, info);
    ux_children_begin(e);
    ux_key(e, "conv");
    ux_text_format(name, sizeof name, "%s.conv", prefix);
    ux_conv_module(e, name, stride, padding, 0, 1, 0);
    ux_key(e, "bn");
    ux_text_format(name, sizeof name, "%s.bn", prefix);
    ux_batchnorm(e, name);
    ux_key(e, "act");
    if (act && e->default_act >= 0) {
        pt_memo_get(&e->w, e->default_act);  // Conv.default_act: one module for every Conv
    } else if (act) {  // inplace: initialize_weights sets it
        const int relu = yolo_default_act(e->model->config.family) == YOLO_ACT_RELU;
        ux_leaf(e, "torch.nn.modules.activation", relu ? "ReLU" : "SiLU");
        ux_key(e, "inplace");
        pt_put_bool(&e->w, 1);
        pt_object_end(&e->w);
        e->default_act = pt_memo_put(&e->w);
    } else {
        ux_leaf(e, "torch.nn.modules.linear", "Identity");
        pt_object_end(&e->w);
    }
    ux_section_end(e);
    pt_object_end(&e->w);
}

void ux_conv_row(Exporter *e, const char *prefix, const YoloModule *layer,
                 const LayerInfo *info) {
    char name[NAME_SIZE], index[16];
    ux_module_begin(e, CONTAINER, "Sequential");
    ux_layer_attributes(e, info);
    ux_children_begin(e);
    for (int i = 0; i < layer->repeats; i++) {
        ux_text_format(index, sizeof index, "%d", i);
        ux_text_format(name, sizeof name, "%s.%d", prefix, i);
        ux_key(e, index);
        ux_conv_unit(e, name, "Conv", layer->stride, layer->padding, 1, NULL);
    }
    ux_container_end(e);
}

// A child conv unit "<prefix>.<child>".
void ux_child_conv(Exporter *e, const char *prefix, const char *child, const char *cls,
                   int act) {
    char name[NAME_SIZE];
    ux_text_format(name, sizeof name, "%s.%s", prefix, child);
    ux_key(e, child);
    ux_conv_unit(e, name, cls, 1, -1, act, NULL);
}

void ux_container_begin(Exporter *e, const char *cls) {
    ux_module_begin(e, CONTAINER, cls);
    ux_children_begin(e);
}
void ux_container_end(Exporter *e) {
    ux_section_end(e);
    pt_object_end(&e->w);
}

void ux_conv_pair(Exporter *e, const char *key_name, const char *path, const char *cls0, int act0,
                  const char *cls1, int act1) {
    ux_key(e, key_name);
    ux_container_begin(e, "Sequential");
    ux_child_conv(e, path, "0", cls0, act0);
    ux_child_conv(e, path, "1", cls1, act1);
    ux_container_end(e);
}

static void bottleneck(Exporter *e, const char *prefix, int add) {
    ux_module_begin(e, BLOCK_MODULE, "Bottleneck");
    ux_key(e, "add");
    pt_put_bool(&e->w, add);
    ux_children_begin(e);
    ux_child_conv(e, prefix, "cv1", "Conv", 1);
    ux_child_conv(e, prefix, "cv2", "Conv", 1);
    ux_container_end(e);
}

// C3 (YOLOv5's layer) and C3k (C3k2's inner block): cv1, cv2, cv3 and the
// Bottlenecks under m.
void ux_c3_block(Exporter *e, const char *prefix, const char *cls, int count, int shortcut,
                 const LayerInfo *info) {
    char name[NAME_SIZE], index[16];
    ux_module_begin(e, BLOCK_MODULE, cls);
    ux_layer_attributes(e, info);
    ux_children_begin(e);
    ux_child_conv(e, prefix, "cv1", "Conv", 1);
    ux_child_conv(e, prefix, "cv2", "Conv", 1);
    ux_child_conv(e, prefix, "cv3", "Conv", 1);
    ux_key(e, "m");
    ux_container_begin(e, "Sequential");
    for (int i = 0; i < count; i++) {
        ux_text_format(index, sizeof index, "%d", i);
        ux_text_format(name, sizeof name, "%s.m.%d", prefix, i);
        ux_key(e, index);
        bottleneck(e, name, shortcut);
    }
    ux_container_end(e);
    ux_container_end(e);
}

// PSABlock (Attention, ffn) or, area, YOLO12's ABlock (AAttn, mlp).
static void attention_block(Exporter *e, const char *prefix, const YoloInner *inner, int area) {
    char name[NAME_SIZE];
    ux_module_begin(e, BLOCK_MODULE, area ? "ABlock" : "PSABlock");
    if (!area) {
        ux_key(e, "add");
        pt_put_bool(&e->w, 1);
    }
    ux_children_begin(e);
    ux_key(e, "attn");
    ux_module_begin(e, BLOCK_MODULE, area ? "AAttn" : "Attention");
    ux_key_int(e, "num_heads", inner->heads);
    ux_key_int(e, "head_dim", inner->head_dim);
    if (area) {
        ux_key_int(e, "area", inner->area);
        ux_key_int(e, "all_head_dim", (int64_t)inner->heads * inner->head_dim);
    } else {
        ux_key_int(e, "key_dim", inner->key_dim);
        ux_key(e, "scale");
        pt_put_float(&e->w, pow((double)inner->key_dim, -0.5));
    }
    ux_children_begin(e);
    ux_text_format(name, sizeof name, "%s.attn", prefix);
    ux_child_conv(e, name, "qkv", "Conv", 0);
    ux_child_conv(e, name, "proj", "Conv", 0);
    ux_child_conv(e, name, "pe", "Conv", 0);
    ux_container_end(e);
    const char *mlp = area ? "mlp" : "ffn";
    ux_text_format(name, sizeof name, "%s.%s", prefix, mlp);
    ux_conv_pair(e, mlp, name, "Conv", 1, "Conv", 0);
    ux_container_end(e);
}

static void psa_block(Exporter *e, const char *prefix, const YoloInner *inner) {
    attention_block(e, prefix, inner, 0);
}

// YOLO12's A2C2f: gamma (a Parameter for the l and x sizes' attention
// layers, else None), cv1, cv2, m: Sequential(ABlock, ABlock) or C3k each.
void ux_a2c2f(Exporter *e, const char *prefix, const YoloModule *layer, const LayerInfo *info) {
    char name[NAME_SIZE], index[16];
    ux_module_begin(e, BLOCK_MODULE, "A2C2f");
    ux_layer_attributes(e, info);
    if (layer->gamma_index < 0) {
        ux_key(e, "gamma");
        pt_put_none(&e->w);
        ux_empty_ordered_dict(e, "_parameters");
    } else {
        ux_section_begin(e, "_parameters");
        ux_entry(e, "gamma", prefix, 1, 1);
        ux_section_end(e);
    }
    ux_empty_ordered_dict(e, "_buffers");
    ux_section_begin(e, "_modules");
    ux_child_conv(e, prefix, "cv1", "Conv", 1);
    ux_child_conv(e, prefix, "cv2", "Conv", 1);
    ux_key(e, "m");
    ux_container_begin(e, "ModuleList");
    const int groups = layer->inner_count / layer->inner_group;
    for (int i = 0; i < groups; i++) {
        ux_text_format(index, sizeof index, "%d", i);
        ux_key(e, index);
        ux_text_format(name, sizeof name, "%s.m.%d", prefix, i);
        if (!layer->area) {
            ux_c3_block(e, name, "C3k", layer->inner[i].count, 1, NULL);
            continue;
        }
        ux_container_begin(e, "Sequential");
        for (int j = 0; j < 2; j++) {
            char block[NAME_SIZE];
            ux_text_format(index, sizeof index, "%d", j);
            ux_text_format(block, sizeof block, "%s.%d", name, j);
            ux_key(e, index);
            attention_block(e, block, &layer->inner[2 * i + j], 1);
        }
        ux_container_end(e);
    }
    ux_container_end(e);
    ux_container_end(e);
}

// YOLO26's attention C3k2 block: Sequential(Bottleneck, PSABlock).
static void bottleneck_psa(Exporter *e, const char *prefix, const YoloInner *inner) {
    char name[NAME_SIZE];
    ux_container_begin(e, "Sequential");
    ux_key(e, "0");
    ux_text_format(name, sizeof name, "%s.0", prefix);
    bottleneck(e, name, inner->bottleneck.add);
    ux_key(e, "1");
    ux_text_format(name, sizeof name, "%s.1", prefix);
    psa_block(e, name, inner);
    ux_container_end(e);
}

// C2f, C3k2, C2PSA and C2fAttn: cv1, cv2 and the inner blocks under m
// (C2fAttn: then its attn).
void ux_csp(Exporter *e, const char *prefix, const YoloModule *layer, const LayerInfo *info) {
    const char *cls = layer->kind == YOLO_C2F      ? "C2f"
                      : layer->kind == YOLO_C3K2   ? "C3k2"
                      : layer->kind == YOLO_C2     ? "C2"
                      : layer->kind == YOLO_C2PSA ? "C2PSA"
                                                   : "C2fAttn";
    char name[NAME_SIZE], index[16];
    ux_module_begin(e, BLOCK_MODULE, cls);
    ux_key_int(e, "c", layer->hidden);
    ux_layer_attributes(e, info);
    ux_children_begin(e);
    ux_child_conv(e, prefix, "cv1", "Conv", 1);
    ux_child_conv(e, prefix, "cv2", "Conv", 1);
    ux_key(e, "m");
    ux_container_begin(e, layer->kind == YOLO_C2PSA || layer->kind == YOLO_C2 ? "Sequential"
                                                                               : "ModuleList");
    for (int i = 0; i < layer->inner_count; i++) {
        const YoloInner *inner = &layer->inner[i];
        ux_text_format(index, sizeof index, "%d", i);
        ux_text_format(name, sizeof name, "%s.m.%d", prefix, i);
        ux_key(e, index);
        if (inner->kind == YOLO_INNER_C3K) ux_c3_block(e, name, "C3k", inner->count, 1, NULL);
        else if (inner->kind == YOLO_INNER_PSA) psa_block(e, name, inner);
        else if (inner->kind == YOLO_INNER_BOTTLENECK_PSA) bottleneck_psa(e, name, inner);
        else bottleneck(e, name, inner->bottleneck.add);
    }
    ux_container_end(e);
    if (layer->kind == YOLO_C2F_ATTN) {
        ux_key(e, "attn");
        ux_max_sigmoid_attn(e, prefix, layer);
    }
    ux_container_end(e);
}

void ux_sppf(Exporter *e, const char *prefix, const YoloModule *layer, const LayerInfo *info) {
    ux_module_begin(e, BLOCK_MODULE, "SPPF");
    ux_key_int(e, "n", 3);
    ux_key(e, "add");
    pt_put_bool(&e->w, layer->shortcut);
    ux_layer_attributes(e, info);
    ux_children_begin(e);
    ux_child_conv(e, prefix, "cv1", "Conv", !layer->plain_cv1);
    ux_child_conv(e, prefix, "cv2", "Conv", 1);
    ux_key(e, "m");
    ux_leaf(e, "torch.nn.modules.pooling", "MaxPool2d");
    ux_key_int(e, "kernel_size", layer->kernel);
    ux_key_int(e, "stride", 1);
    ux_key_int(e, "padding", layer->kernel / 2);
    ux_key_int(e, "dilation", 1);
    ux_key(e, "return_indices");
    pt_put_bool(&e->w, 0);
    ux_key(e, "ceil_mode");
    pt_put_bool(&e->w, 0);
    pt_object_end(&e->w);
    ux_container_end(e);
}
