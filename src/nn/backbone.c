// Backbones behind one interface (see backbone.h): the model names, and the
// function tables of the two architectures, thin adapters onto resnet.h and
// vit.h.
#include "nn/backbone.h"

#include <stdio.h>
#include <string.h>

#include "nn/backbone_convnext.h"
#include "nn/backbone_shufflenet.h"
#include "nn/batchnorm_sync.h"
#include "nn/convnext_names.h"
#include "nn/vit_weights.h"
#include "nn/weights.h"
#include "util/number.h"

const char *const backbone_model_names[] = {
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
    "timm/resnet18", "timm/resnet34", "timm/resnet50", "timm/resnet101", "timm/resnet152",
    "timm/resnet26", "timm/resnet200", "wide_resnet50_2", "wide_resnet101_2",
    "timm/wide_resnet50_2", "timm/wide_resnet101_2",
    "vit_t14", "vit_t16", "vit_s14", "vit_s16", "vit_b14", "vit_b16", "vit_l14", "vit_l16",
    "vit_g14", "vit_s14_reg4", "vit_b14_reg4", "vit_l14_reg4", "vit_g14_reg4",
    "dinov3/vitt16", "dinov3/vitt16plus", "dinov3/vits16", "dinov3/vits16plus", "dinov3/vitb16",
    "dinov3/vitl16", "dinov3/vitl16plus", "dinov3/vith16plus",
    // timm's ViTs (vit_presets.c)
    "timm/vit_tiny_patch16_224", "timm/vit_small_patch16_224", "timm/vit_base_patch16_224",
    "timm/vit_large_patch16_224", "timm/vit_tiny_patch16_384", "timm/vit_small_patch16_384",
    "timm/vit_base_patch16_384", "timm/vit_large_patch16_384", "timm/vit_small_patch14_dinov2",
    "timm/vit_base_patch14_dinov2", "timm/vit_large_patch14_dinov2",
    "timm/vit_giant_patch14_dinov2", "timm/vit_small_patch14_reg4_dinov2",
    "timm/vit_base_patch14_reg4_dinov2", "timm/vit_large_patch14_reg4_dinov2",
    "timm/vit_giant_patch14_reg4_dinov2",
    // Ultralytics (yolo.h)
    "ultralytics/yolov8n.yaml", "ultralytics/yolov8s.yaml", "ultralytics/yolov8m.yaml",
    "ultralytics/yolov8l.yaml", "ultralytics/yolov8x.yaml", "ultralytics/yolo11n.yaml",
    "ultralytics/yolo11s.yaml", "ultralytics/yolo11m.yaml", "ultralytics/yolo11l.yaml",
    "ultralytics/yolo11x.yaml", "ultralytics/yolov8n.pt", "ultralytics/yolov8s.pt",
    "ultralytics/yolov8m.pt", "ultralytics/yolov8l.pt", "ultralytics/yolov8x.pt",
    "ultralytics/yolo11n.pt", "ultralytics/yolo11s.pt", "ultralytics/yolo11m.pt",
    "ultralytics/yolo11l.pt", "ultralytics/yolo11x.pt", "ultralytics/yolo26n.yaml",
    "ultralytics/yolo26s.yaml", "ultralytics/yolo26m.yaml", "ultralytics/yolo26l.yaml",
    "ultralytics/yolo26x.yaml", "ultralytics/yolo26n.pt", "ultralytics/yolo26s.pt",
    "ultralytics/yolo26m.pt", "ultralytics/yolo26l.pt", "ultralytics/yolo26x.pt",
    "ultralytics/yolov8n-seg.yaml", "ultralytics/yolov8s-seg.yaml",
    "ultralytics/yolov8m-seg.yaml", "ultralytics/yolov8l-seg.yaml",
    "ultralytics/yolov8x-seg.yaml", "ultralytics/yolo11n-seg.yaml",
    "ultralytics/yolo11s-seg.yaml", "ultralytics/yolo11m-seg.yaml",
    "ultralytics/yolo11l-seg.yaml", "ultralytics/yolo11x-seg.yaml",
    "ultralytics/yolo26n-seg.yaml", "ultralytics/yolo26s-seg.yaml",
    "ultralytics/yolo26m-seg.yaml", "ultralytics/yolo26l-seg.yaml",
    "ultralytics/yolo26x-seg.yaml", "ultralytics/yolov8n-seg.pt", "ultralytics/yolov8s-seg.pt",
    "ultralytics/yolov8m-seg.pt", "ultralytics/yolov8l-seg.pt", "ultralytics/yolov8x-seg.pt",
    "ultralytics/yolo11n-seg.pt", "ultralytics/yolo11s-seg.pt", "ultralytics/yolo11m-seg.pt",
    "ultralytics/yolo11l-seg.pt", "ultralytics/yolo11x-seg.pt", "ultralytics/yolo26n-seg.pt",
    "ultralytics/yolo26s-seg.pt", "ultralytics/yolo26m-seg.pt", "ultralytics/yolo26l-seg.pt",
    "ultralytics/yolo26x-seg.pt", "ultralytics/yolov8n-pose.yaml",
    "ultralytics/yolov8s-pose.yaml", "ultralytics/yolov8m-pose.yaml",
    "ultralytics/yolov8l-pose.yaml", "ultralytics/yolov8x-pose.yaml",
    "ultralytics/yolo11n-pose.yaml", "ultralytics/yolo11s-pose.yaml",
    "ultralytics/yolo11m-pose.yaml", "ultralytics/yolo11l-pose.yaml",
    "ultralytics/yolo11x-pose.yaml", "ultralytics/yolo26n-pose.yaml",
    "ultralytics/yolo26s-pose.yaml", "ultralytics/yolo26m-pose.yaml",
    "ultralytics/yolo26l-pose.yaml", "ultralytics/yolo26x-pose.yaml",
    "ultralytics/yolov8n-pose.pt", "ultralytics/yolov8s-pose.pt", "ultralytics/yolov8m-pose.pt",
    "ultralytics/yolov8l-pose.pt", "ultralytics/yolov8x-pose.pt", "ultralytics/yolo11n-pose.pt",
    "ultralytics/yolo11s-pose.pt", "ultralytics/yolo11m-pose.pt", "ultralytics/yolo11l-pose.pt",
    "ultralytics/yolo11x-pose.pt", "ultralytics/yolo26n-pose.pt", "ultralytics/yolo26s-pose.pt",
    "ultralytics/yolo26m-pose.pt", "ultralytics/yolo26l-pose.pt", "ultralytics/yolo26x-pose.pt",
    "ultralytics/yolov8n-obb.yaml", "ultralytics/yolov8s-obb.yaml",
    "ultralytics/yolov8m-obb.yaml", "ultralytics/yolov8l-obb.yaml",
    "ultralytics/yolov8x-obb.yaml", "ultralytics/yolo11n-obb.yaml",
    "ultralytics/yolo11s-obb.yaml", "ultralytics/yolo11m-obb.yaml",
    "ultralytics/yolo11l-obb.yaml", "ultralytics/yolo11x-obb.yaml",
    "ultralytics/yolo26n-obb.yaml", "ultralytics/yolo26s-obb.yaml",
    "ultralytics/yolo26m-obb.yaml", "ultralytics/yolo26l-obb.yaml",
    "ultralytics/yolo26x-obb.yaml", "ultralytics/yolov8n-obb.pt", "ultralytics/yolov8s-obb.pt",
    "ultralytics/yolov8m-obb.pt", "ultralytics/yolov8l-obb.pt", "ultralytics/yolov8x-obb.pt",
    "ultralytics/yolo11n-obb.pt", "ultralytics/yolo11s-obb.pt", "ultralytics/yolo11m-obb.pt",
    "ultralytics/yolo11l-obb.pt", "ultralytics/yolo11x-obb.pt", "ultralytics/yolo26n-obb.pt",
    "ultralytics/yolo26s-obb.pt", "ultralytics/yolo26m-obb.pt", "ultralytics/yolo26l-obb.pt",
    "ultralytics/yolo26x-obb.pt", "ultralytics/yolov8n-cls.yaml", "ultralytics/yolov8s-cls.yaml",
    "ultralytics/yolov8m-cls.yaml", "ultralytics/yolov8l-cls.yaml",
    "ultralytics/yolov8x-cls.yaml", "ultralytics/yolo11n-cls.yaml",
    "ultralytics/yolo11s-cls.yaml", "ultralytics/yolo11m-cls.yaml",
    "ultralytics/yolo11l-cls.yaml", "ultralytics/yolo11x-cls.yaml",
    "ultralytics/yolo26n-cls.yaml", "ultralytics/yolo26s-cls.yaml",
    "ultralytics/yolo26m-cls.yaml", "ultralytics/yolo26l-cls.yaml",
    "ultralytics/yolo26x-cls.yaml", "ultralytics/yolov8n-cls.pt", "ultralytics/yolov8s-cls.pt",
    "ultralytics/yolov8m-cls.pt", "ultralytics/yolov8l-cls.pt", "ultralytics/yolov8x-cls.pt",
    "ultralytics/yolo11n-cls.pt", "ultralytics/yolo11s-cls.pt", "ultralytics/yolo11m-cls.pt",
    "ultralytics/yolo11l-cls.pt", "ultralytics/yolo11x-cls.pt", "ultralytics/yolo26n-cls.pt",
    "ultralytics/yolo26s-cls.pt", "ultralytics/yolo26m-cls.pt", "ultralytics/yolo26l-cls.pt",
    "ultralytics/yolo26x-cls.pt", "ultralytics/yolov5nu.yaml", "ultralytics/yolov5su.yaml",
    "ultralytics/yolov5mu.yaml", "ultralytics/yolov5lu.yaml", "ultralytics/yolov5xu.yaml",
    "ultralytics/yolov5n.yaml", "ultralytics/yolov5s.yaml", "ultralytics/yolov5m.yaml",
    "ultralytics/yolov5l.yaml", "ultralytics/yolov5x.yaml", "ultralytics/yolov5nu.pt",
    "ultralytics/yolov5su.pt", "ultralytics/yolov5mu.pt", "ultralytics/yolov5lu.pt",
    "ultralytics/yolov5xu.pt", "ultralytics/yolo12n.yaml", "ultralytics/yolo12s.yaml",
    "ultralytics/yolo12m.yaml", "ultralytics/yolo12l.yaml", "ultralytics/yolo12x.yaml",
    "ultralytics/yolo12n.pt", "ultralytics/yolo12s.pt", "ultralytics/yolo12m.pt",
    "ultralytics/yolo12l.pt", "ultralytics/yolo12x.pt", "ultralytics/yolov8n-oiv7.pt",
    "ultralytics/yolov8s-oiv7.pt", "ultralytics/yolov8m-oiv7.pt", "ultralytics/yolov8l-oiv7.pt",
    "ultralytics/yolov8x-oiv7.pt", "ultralytics/yolov5n6u.pt", "ultralytics/yolov5s6u.pt",
    "ultralytics/yolov5m6u.pt", "ultralytics/yolov5l6u.pt", "ultralytics/yolov5x6u.pt",
    "ultralytics/yolo26n-p6.yaml", "ultralytics/yolo26s-p6.yaml", "ultralytics/yolo26m-p6.yaml",
    "ultralytics/yolo26l-p6.yaml", "ultralytics/yolo26x-p6.yaml", "ultralytics/yolo26n-p2.yaml",
    "ultralytics/yolo26s-p2.yaml", "ultralytics/yolo26m-p2.yaml", "ultralytics/yolo26l-p2.yaml",
    "ultralytics/yolo26x-p2.yaml", "ultralytics/yolov8n-pose-p6.yaml",
    "ultralytics/yolov8s-pose-p6.yaml", "ultralytics/yolov8m-pose-p6.yaml",
    "ultralytics/yolov8l-pose-p6.yaml", "ultralytics/yolov8x-pose-p6.yaml",
    "ultralytics/yolov8x-pose-p6.pt",
    "ultralytics/yolov6n.yaml", "ultralytics/yolov6s.yaml", "ultralytics/yolov6m.yaml",
    "ultralytics/yolov6l.yaml", "ultralytics/yolov6x.yaml",
    "ultralytics/yolo26n-sem.yaml", "ultralytics/yolo26s-sem.yaml", "ultralytics/yolo26m-sem.yaml",
    "ultralytics/yolo26l-sem.yaml", "ultralytics/yolo26x-sem.yaml", "ultralytics/yolo26n-sem.pt",
    "ultralytics/yolo26s-sem.pt", "ultralytics/yolo26m-sem.pt", "ultralytics/yolo26l-sem.pt",
    "ultralytics/yolo26x-sem.pt", "ultralytics/yolo26n-sem-ade20k.pt",
    "ultralytics/yolo26s-sem-ade20k.pt", "ultralytics/yolo26m-sem-ade20k.pt",
    "ultralytics/yolo26l-sem-ade20k.pt", "ultralytics/yolo26x-sem-ade20k.pt",
    "ultralytics/yolo26n-depth.yaml", "ultralytics/yolo26s-depth.yaml",
    "ultralytics/yolo26m-depth.yaml", "ultralytics/yolo26l-depth.yaml",
    "ultralytics/yolo26x-depth.yaml", "ultralytics/yolo26n-depth.pt",
    "ultralytics/yolo26s-depth.pt", "ultralytics/yolo26m-depth.pt", "ultralytics/yolo26l-depth.pt",
    "ultralytics/yolo26x-depth.pt",
    "ultralytics/yolov8s-world.yaml", "ultralytics/yolov8m-world.yaml",
    "ultralytics/yolov8l-world.yaml", "ultralytics/yolov8x-world.yaml",
    "ultralytics/yolov8s-world.pt", "ultralytics/yolov8m-world.pt", "ultralytics/yolov8l-world.pt",
    "ultralytics/yolov8x-world.pt", "ultralytics/yolov8s-worldv2.yaml",
    "ultralytics/yolov8m-worldv2.yaml", "ultralytics/yolov8l-worldv2.yaml",
    "ultralytics/yolov8x-worldv2.yaml", "ultralytics/yolov8s-worldv2.pt",
    "ultralytics/yolov8m-worldv2.pt", "ultralytics/yolov8l-worldv2.pt",
    "ultralytics/yolov8x-worldv2.pt",
    // ConvNeXts (convnext_names.h)
    "torchvision/convnext_tiny", "torchvision/convnext_small", "torchvision/convnext_base",
    "torchvision/convnext_large", "timm/convnext_tiny", "timm/convnext_small",
    "timm/convnext_base", "timm/convnext_large", "dinov3/convnext-tiny", "dinov3/convnext-small",
    "dinov3/convnext-base", "dinov3/convnext-large",
    // ShuffleNetV2s (shufflenet.h)
    "torchvision/shufflenet_v2_x0_5", "torchvision/shufflenet_v2_x1_0",
    "torchvision/shufflenet_v2_x1_5", "torchvision/shufflenet_v2_x2_0", NULL};

// "resnet50", "timm/resnet26", "wide_resnet50_2", "timm/wide_resnet101_2"
// ("torchvision/": the plain names); 0 when name is none of these forms.
static int parse_resnet_name(const char *name, BackboneSpec *spec) {
    const int timm = strncmp(name, "timm/", 5) == 0;
    if (timm) name += 5;
    else if (strncmp(name, "torchvision/", 12) == 0) name += 12;
    int depth = 0, consumed = 0, wide = strncmp(name, "wide_", 5) == 0;
    if (wide) name += 5;
    if (sscanf(name, "resnet%d%n", &depth, &consumed) != 1) return 0;
    if (strcmp(name + consumed, wide ? "_2" : "") != 0) return 0;
    spec->kind = BACKBONE_RESNET;
    spec->resnet_depth = depth;
    spec->resnet_width = wide ? 2 : 1;
    spec->resnet_zero_init_last = timm;
    return 1;
}

// A rate in [0, 1) from text; -1 when it is not one.
static float rate_value(const char *text) {
    double rate = 0;
    return number_parse_decimal(text, &rate) == 0 && rate >= 0.0 && rate < 1.0 ? (float)rate
                                                                               : -1.0f;
}

int backbone_spec_apply_arg(BackboneSpec *spec, const char *entry, ErrorMessage *err) {
    const char *equals = strchr(entry, '=');
    if (!equals || equals == entry || !equals[1])
        return error_set(err, "--model-arg %.200s: expected KEY=VALUE", entry);
    const size_t length = (size_t)(equals - entry);
    const char *value = equals + 1;
    const int torchvision_convnext =
        spec->kind == BACKBONE_CONVNEXT && spec->convnext.naming == CONVNEXT_TORCHVISION;
    const int drop_path = length == 14 && strncmp(entry, "drop_path_rate", 14) == 0;
    const int stochastic = length == 21 && strncmp(entry, "stochastic_depth_prob", 21) == 0;
    if (drop_path || stochastic) {
        const int takes = stochastic ? torchvision_convnext
                                     : spec->kind == BACKBONE_VIT ||
                                           (spec->kind == BACKBONE_CONVNEXT && !torchvision_convnext);
        if (!takes)
            return error_set(err, "--model-arg %.200s: %s", entry,
                             torchvision_convnext ? "torchvision's ConvNeXts take "
                                                    "stochastic_depth_prob"
                             : stochastic ? "stochastic_depth_prob is torchvision's ConvNeXt's "
                                            "(ViTs and timm's ConvNeXts: drop_path_rate)"
                                          : "drop_path_rate applies to ViTs and ConvNeXts");
        const float rate = rate_value(value);
        if (rate < 0) return error_set(err, "--model-arg %.200s: expected a rate in [0, 1)", entry);
        if (spec->kind == BACKBONE_VIT) spec->vit.drop_path_rate = rate;
        else spec->convnext.drop_path_rate = rate;
        return 0;
    }
    const int zero_init = (length == 18 && strncmp(entry, "zero_init_residual", 18) == 0) ||
                          (length == 14 && strncmp(entry, "zero_init_last", 14) == 0);
    if (zero_init) {
        if (spec->kind != BACKBONE_RESNET)
            return error_set(err, "--model-arg %.200s: applies to ResNets", entry);
        if (strcmp(value, "true") && strcmp(value, "True") && strcmp(value, "false") &&
            strcmp(value, "False"))
            return error_set(err, "--model-arg %.200s: expected true or false", entry);
        spec->resnet_zero_init_last = value[0] == 't' || value[0] == 'T';
        return 0;
    }
    return error_set(err, "--model-arg %.200s: the model arguments here are drop_path_rate "
                          "(ViTs, timm's and DINOv3's ConvNeXts), stochastic_depth_prob "
                          "(torchvision's ConvNeXts), zero_init_residual / zero_init_last "
                          "(ResNets), and the initial weights' weights (torchvision's ResNets), "
                          "pretrained and checkpoint_path (timm's models)", entry);
}

int backbone_spec_parse(const char *name, int image_size, BackboneSpec *spec, ErrorMessage *err) {
    memset(spec, 0, sizeof *spec);
    if (parse_resnet_name(name, spec)) {
        ResnetConfig config = resnet_config_default(spec->resnet_depth);
        config.width_factor = spec->resnet_width;
        Resnet probe;  // checks the depth without allocating anything
        const int status = resnet_declare(&probe, NULL, &config, err);
        resnet_free(&probe);
        return status;
    }
    if (vit_is_preset_name(name)) {
        spec->kind = BACKBONE_VIT;
        return vit_config_preset(name, image_size, &spec->vit, err);
    }
    if (yolo_is_model_name(name)) {
        int pretrained;
        spec->kind = BACKBONE_YOLO;
        return yolo_parse_name(name, &spec->yolo, &pretrained, err);
    }
    if (convnext_is_preset_name(name)) {
        spec->kind = BACKBONE_CONVNEXT;
        return convnext_config_preset(name, &spec->convnext, err);
    }
    if (shufflenet_is_model_name(name)) {
        spec->kind = BACKBONE_SHUFFLENET;
        return shufflenet_config_preset(name, &spec->shufflenet, err);
    }
    return error_set(err, "unknown model '%s' (resnet18/34/50/101/152, wide_resnet50_2, vit_t16, vit_s14, "
                          "vit_s16, vit_b14, vit_b16, vit_l14, vit_l16, vit_g14, ..._reg4, "
                          "dinov3/vits16, dinov3/vitb16, ..., ultralytics/yolov8s.yaml, "
                          "ultralytics/yolo11s.yaml, ..., torchvision/convnext_tiny, "
                          "timm/convnext_tiny, dinov3/convnext-tiny, ..., "
                          "torchvision/shufflenet_v2_x1_0, ...)", name);
}

void backbone_spec_name(const BackboneSpec *spec, char *out, size_t size) {
    if (spec->kind == BACKBONE_VIT) snprintf(out, size, "%s", spec->vit.name);
    else if (spec->kind == BACKBONE_YOLO) snprintf(out, size, "%s", spec->yolo.name);
    else if (spec->kind == BACKBONE_CONVNEXT) snprintf(out, size, "%s", spec->convnext.name);
    else if (spec->kind == BACKBONE_SHUFFLENET)
        snprintf(out, size, "%s", spec->shufflenet.name);
    else if (spec->resnet_width > 1) snprintf(out, size, "wide_resnet%d_2", spec->resnet_depth);
    else snprintf(out, size, "resnet%d", spec->resnet_depth);
}

int backbone_spec_size_step(const BackboneSpec *spec) {
    return spec->kind == BACKBONE_VIT ? spec->vit.patch_size : 1;
}

// ---- ResNet ------------------------------------------------------------------------------

static Resnet *resnet_of(Backbone *b) { return &b->model.resnet; }
static const Resnet *resnet_of_const(const Backbone *b) { return &b->model.resnet; }

static int resnet_backbone_forward(Backbone *b, int slot, int batch, const Act *input,
                                   int training, ErrorMessage *err) {
    return resnet_forward(resnet_of(b), slot, batch, input, training, err);
}
static const Act *resnet_backbone_features(const Backbone *b, int slot) {
    return resnet_features(resnet_of_const(b), slot);
}
static int resnet_backbone_backward(Backbone *b, int slot, const Act *dfeatures,
                                    ErrorMessage *err) {
    return resnet_backward(resnet_of(b), slot, dfeatures, err);
}
static const Act *resnet_backbone_feature_map(Backbone *b, int slot, int *height,
                                                int *width) {
    return resnet_feature_map(resnet_of(b), slot, height, width);
}
static int resnet_backbone_backward_map(Backbone *b, int slot, const Act *dfeatures,
                                        const Act *dmap, ErrorMessage *err) {
    return resnet_backward_map(resnet_of(b), slot, dfeatures, dmap, err);
}
static int resnet_backbone_prepare(Backbone *b, int slot, int batch, ErrorMessage *err) {
    return resnet_prepare_batch(resnet_of(b), slot, batch, err);
}
static int resnet_backbone_init(Backbone *b, uint64_t seed, ErrorMessage *err) {
    return resnet_init(resnet_of(b), seed, err);
}
// A state dict may carry torchvision's classifier (fc.*, also under a
// prefix such as DDP's "module.") and lack num_batches_tracked (as
// resnet_load allows); our checkpoints hold no fc.
static int resnet_backbone_load(Backbone *b, const SafeTensors *file, const char *prefix,
                                ErrorMessage *err) {
    Resnet *model = resnet_of(b);
    const WeightsLoadOptions options = {.key_prefix = prefix, .ignore_prefix = "fc."};
    if (weights_load_from(file, &model->params, &model->buffers, &model->num_batches_tracked,
                          &options, err))
        return error_prefix(err, "resnet%d", model->config.depth);
    return 0;
}
static int resnet_backbone_save(const Backbone *b, const char *path, StateDictWrite write,
                                ErrorMessage *err) {
    return resnet_save(resnet_of_const(b), path, write, err);
}
static void resnet_backbone_free(Backbone *b) { resnet_free(resnet_of(b)); }

static const BackboneOps resnet_backbone_ops = {
    .forward = resnet_backbone_forward,
    .features = resnet_backbone_features,
    .backward = resnet_backbone_backward,
    .feature_map = resnet_backbone_feature_map,
    .backward_map = resnet_backbone_backward_map,
    .prepare_batch = resnet_backbone_prepare,
    .init = resnet_backbone_init,
    .load = resnet_backbone_load,
    .save = resnet_backbone_save,
    .free = resnet_backbone_free,
};

// ---- ViT -------------------------------------------------------------------------------

static Vit *vit_of(Backbone *b) { return &b->model.vit; }
static const Vit *vit_of_const(const Backbone *b) { return &b->model.vit; }

static int vit_backbone_forward(Backbone *b, int slot, int batch, const Act *input,
                                int training, ErrorMessage *err) {
    return vit_forward(vit_of(b), slot, batch, input, training, err);
}
static const Act *vit_backbone_features(const Backbone *b, int slot) {
    return vit_features(vit_of_const(b), slot);
}
static int vit_backbone_backward(Backbone *b, int slot, const Act *dfeatures,
                                 ErrorMessage *err) {
    return vit_backward(vit_of(b), slot, dfeatures, err);
}
static const Act *vit_backbone_feature_map(Backbone *b, int slot, int *height, int *width) {
    return vit_feature_map(vit_of(b), slot, height, width);
}
static int vit_backbone_backward_map(Backbone *b, int slot, const Act *dfeatures,
                                     const Act *dmap, ErrorMessage *err) {
    return vit_backward_map(vit_of(b), slot, dfeatures, dmap, err);
}
static int vit_backbone_prepare(Backbone *b, int slot, int batch, ErrorMessage *err) {
    return vit_prepare_batch(vit_of(b), slot, batch, err);
}
static int vit_backbone_init(Backbone *b, uint64_t seed, ErrorMessage *err) {
    return vit_init(vit_of(b), seed, err);
}
static int vit_backbone_load(Backbone *b, const SafeTensors *file, const char *prefix,
                             ErrorMessage *err) {
    return vit_load_from(vit_of(b), file, prefix, err);
}
static int vit_backbone_save(const Backbone *b, const char *path, StateDictWrite write,
                             ErrorMessage *err) {
    return vit_save(vit_of_const(b), path, write, err);
}
static void vit_backbone_free(Backbone *b) { vit_free(vit_of(b)); }

static const BackboneOps vit_backbone_ops = {
    .forward = vit_backbone_forward,
    .features = vit_backbone_features,
    .backward = vit_backbone_backward,
    .feature_map = vit_backbone_feature_map,
    .backward_map = vit_backbone_backward_map,
    .prepare_batch = vit_backbone_prepare,
    .init = vit_backbone_init,
    .load = vit_backbone_load,
    .save = vit_backbone_save,
    .free = vit_backbone_free,
};

// ---- YOLO (Ultralytics) ---------------------------------------------------------------------

static Yolo *yolo_of(Backbone *b) { return &b->model.yolo; }

static int yolo_backbone_forward(Backbone *b, int slot, int batch, const Act *input,
                                 int training, ErrorMessage *err) {
    return yolo_forward(yolo_of(b), slot, batch, input, training, err);
}
static const Act *yolo_backbone_features(const Backbone *b, int slot) {
    return yolo_features(&b->model.yolo, slot);
}
static int yolo_backbone_backward(Backbone *b, int slot, const Act *dfeatures,
                                  ErrorMessage *err) {
    return yolo_backward_map(yolo_of(b), slot, dfeatures, NULL, err);
}
static const Act *yolo_backbone_feature_map(Backbone *b, int slot, int *height, int *width) {
    return yolo_feature_map(yolo_of(b), slot, height, width);
}
static int yolo_backbone_backward_map(Backbone *b, int slot, const Act *dfeatures,
                                      const Act *dmap, ErrorMessage *err) {
    return yolo_backward_map(yolo_of(b), slot, dfeatures, dmap, err);
}
static int yolo_backbone_prepare(Backbone *b, int slot, int batch, ErrorMessage *err) {
    return yolo_prepare_batch(yolo_of(b), slot, batch, err);
}
static int yolo_backbone_init(Backbone *b, uint64_t seed, ErrorMessage *err) {
    return yolo_init(yolo_of(b), seed, err);
}
// Every tensor of Ultralytics' state dict (neck and head included) under prefix.
static int yolo_backbone_load(Backbone *b, const SafeTensors *file, const char *prefix,
                              ErrorMessage *err) {
    Yolo *model = yolo_of(b);
    const WeightsLoadOptions options = {.key_prefix = prefix};
    if (weights_load_from(file, &model->params, &model->buffers, &model->num_batches_tracked,
                          &options, err))
        return error_prefix(err, "%s", model->config.name);
    return 0;
}
static int yolo_backbone_save(const Backbone *b, const char *path, StateDictWrite write,
                              ErrorMessage *err) {
    return yolo_save(&b->model.yolo, path, write, err);
}
static void yolo_backbone_free(Backbone *b) { yolo_free(yolo_of(b)); }

static const BackboneOps yolo_backbone_ops = {
    .forward = yolo_backbone_forward,
    .features = yolo_backbone_features,
    .backward = yolo_backbone_backward,
    .feature_map = yolo_backbone_feature_map,
    .backward_map = yolo_backbone_backward_map,
    .prepare_batch = yolo_backbone_prepare,
    .init = yolo_backbone_init,
    .load = yolo_backbone_load,
    .save = yolo_backbone_save,
    .free = yolo_backbone_free,
};

// ---- lifetime ----------------------------------------------------------------------------

static int allocate_resnet(Backbone *b, const BackboneInput *inputs, int count, int frozen,
                           ErrorMessage *err) {
    ResnetConfig config = resnet_config_default(b->spec.resnet_depth);
    config.zero_init_residual = b->spec.resnet_zero_init_last;
    config.width_factor = b->spec.resnet_width;
    config.in_channels = b->spec.in_channels;
    config.batchnorm_synchronised = b->spec.batchnorm_synchronised;
    ResnetInputShape shapes[BACKBONE_MAX_SLOTS];
    for (int i = 0; i < count; i++) shapes[i] = (ResnetInputShape){inputs[i].batch,
                                                                   inputs[i].resolution};
    Resnet *model = resnet_of(b);
    if (resnet_declare(model, b->backend, &config, err)) return -1;
    model->frozen = frozen;
    if (resnet_allocate(model, shapes, count, err)) return -1;
    b->feature_dim = model->feature_dim;
    b->params = &model->params;
    b->buffers = &model->buffers;
    b->num_batches_tracked = &model->num_batches_tracked;
    return 0;
}

static int allocate_vit(Backbone *b, const BackboneInput *inputs, int count, int frozen,
                        ErrorMessage *err) {
    VitInputShape shapes[BACKBONE_MAX_SLOTS];
    for (int i = 0; i < count; i++) shapes[i] = (VitInputShape){inputs[i].batch,
                                                                inputs[i].resolution};
    Vit *model = vit_of(b);
    VitConfig config = b->spec.vit;
    config.in_channels = b->spec.in_channels;
    if (vit_declare(model, b->backend, &config, err)) return -1;
    model->frozen = frozen;
    model->activation_checkpointing = b->spec.activation_checkpointing;
    if (vit_allocate(model, shapes, count, err)) return -1;
    b->feature_dim = model->feature_dim;
    b->params = &model->params;
    b->buffers = &model->buffers;
    b->num_batches_tracked = &b->no_batches_tracked;
    return 0;
}

// Ultralytics' models take RGB images only (as LightlyTrain's package says).
static int allocate_yolo(Backbone *b, const BackboneInput *inputs, int count, int frozen,
                         ErrorMessage *err) {
    if (b->spec.in_channels && b->spec.in_channels != 3)
        return error_set(err, "%s takes 3 input channels, not %d", b->spec.yolo.name,
                         b->spec.in_channels);
    YoloInputShape shapes[BACKBONE_MAX_SLOTS];
    for (int i = 0; i < count; i++) shapes[i] = (YoloInputShape){inputs[i].batch,
                                                                 inputs[i].resolution};
    Yolo *model = yolo_of(b);
    if (yolo_declare(model, b->backend, &b->spec.yolo, err)) return -1;
    model->frozen = frozen;
    if (yolo_allocate(model, shapes, count, err)) return -1;
    b->feature_dim = model->feature_dim;
    b->params = &model->params;
    b->buffers = &model->buffers;
    b->num_batches_tracked = &model->num_batches_tracked;
    return 0;
}

static int allocate(Backbone *backbone, Backend *backend, const BackboneSpec *spec,
                    const BackboneInput *inputs, int input_count, int frozen, ErrorMessage *err) {
    memset(backbone, 0, sizeof *backbone);
    backbone->spec = *spec;
    backbone->backend = backend;
    backbone->ops = spec->kind == BACKBONE_VIT        ? &vit_backbone_ops
                    : spec->kind == BACKBONE_YOLO     ? &yolo_backbone_ops
                    : spec->kind == BACKBONE_CONVNEXT   ? &convnext_backbone_ops
                    : spec->kind == BACKBONE_SHUFFLENET ? &shufflenet_backbone_ops
                                                        : &resnet_backbone_ops;
    if (input_count < 1 || input_count > BACKBONE_MAX_SLOTS)
        return error_set(err, "backbone: %d inputs (1..%d)", input_count, BACKBONE_MAX_SLOTS);
    backbone->slot_count = input_count;
    memcpy(backbone->slots, inputs, (size_t)input_count * sizeof *inputs);
    const int status =
        spec->kind == BACKBONE_VIT    ? allocate_vit(backbone, inputs, input_count, frozen, err)
        : spec->kind == BACKBONE_YOLO ? allocate_yolo(backbone, inputs, input_count, frozen, err)
        : spec->kind == BACKBONE_CONVNEXT
            ? backbone_allocate_convnext(backbone, inputs, input_count, frozen, err)
        : spec->kind == BACKBONE_SHUFFLENET
            ? backbone_allocate_shufflenet(backbone, inputs, input_count, frozen, err)
            : allocate_resnet(backbone, inputs, input_count, frozen, err);
    if (status) backbone_free(backbone);
    return status;
}

int backbone_allocate(Backbone *backbone, Backend *backend, const BackboneSpec *spec,
                      const BackboneInput *inputs, int input_count, ErrorMessage *err) {
    return allocate(backbone, backend, spec, inputs, input_count, 0, err);
}

int backbone_allocate_frozen(Backbone *backbone, Backend *backend, const BackboneSpec *spec,
                             const BackboneInput *inputs, int input_count, ErrorMessage *err) {
    return allocate(backbone, backend, spec, inputs, input_count, 1, err);
}

static int create(Backbone *backbone, Backend *backend, const BackboneSpec *spec,
                  const BackboneInput *inputs, int input_count, int frozen, uint64_t seed,
                  ErrorMessage *err) {
    if (allocate(backbone, backend, spec, inputs, input_count, frozen, err)) return -1;
    if (backbone->ops->init(backbone, seed, err)) {
        backbone_free(backbone);
        return -1;
    }
    return 0;
}

int backbone_create(Backbone *backbone, Backend *backend, const BackboneSpec *spec,
                    const BackboneInput *inputs, int input_count, uint64_t seed,
                    ErrorMessage *err) {
    return create(backbone, backend, spec, inputs, input_count, 0, seed, err);
}

int backbone_create_frozen(Backbone *backbone, Backend *backend, const BackboneSpec *spec,
                           const BackboneInput *inputs, int input_count, uint64_t seed,
                           ErrorMessage *err) {
    return create(backbone, backend, spec, inputs, input_count, 1, seed, err);
}

void backbone_free(Backbone *backbone) {
    if (backbone->ops) backbone->ops->free(backbone);
    memset(backbone, 0, sizeof *backbone);
}

void backbone_set_draw_key(Backbone *backbone, uint64_t key) {
    if (backbone->spec.kind == BACKBONE_VIT) vit_set_draw_key(&backbone->model.vit, key);
    if (backbone->spec.kind == BACKBONE_CONVNEXT)
        convnext_set_draw_key(&backbone->model.convnext, key);
}

int backbone_attach_batchnorm_sync(Backbone *backbone, BatchNormSync *sync, ErrorMessage *err) {
    if (backbone->spec.kind == BACKBONE_YOLO) {
        const Yolo *model = &backbone->model.yolo;
        for (int c = 0; c < model->conv_count; c++)
            if (batchnorm_sync_attach(sync, &model->convs[c]->bn, err)) return -1;
        return 0;
    }
    if (backbone->spec.kind == BACKBONE_SHUFFLENET) {
        const Shufflenet *model = &backbone->model.shufflenet;
        for (int u = 0; u < model->unit_count; u++)
            if (batchnorm_sync_attach(sync, &model->units[u]->bn, err)) return -1;
        return 0;
    }
    if (backbone->spec.kind != BACKBONE_RESNET) return 0;
    return resnet_attach_batchnorm_sync(&backbone->model.resnet, sync, err);
}

const Parameter *backbone_input_layer(const Backbone *backbone) {
    if (backbone->spec.kind == BACKBONE_CONVNEXT)
        return &backbone->params->params[backbone->model.convnext.stages[0].conv.weight_index];
    const char *name = backbone->spec.kind == BACKBONE_VIT    ? "patch_embed.proj.weight"
                       : backbone->spec.kind == BACKBONE_YOLO ? "model.0.conv.weight"
                       : backbone->spec.kind == BACKBONE_SHUFFLENET ? "conv1.0.weight"
                                                                    : "conv1.weight";
    return parameter_find(backbone->params, name);
}

void backbone_feature_map_size(const Backbone *b, int slot, int *height, int *width) {
    if (b->spec.kind == BACKBONE_VIT)
        *height = *width = b->model.vit.slots[slot].grid;
    else if (b->spec.kind == BACKBONE_YOLO)
        yolo_feature_map_size(&b->model.yolo, slot, height, width);
    else if (b->spec.kind == BACKBONE_CONVNEXT)
        convnext_feature_map_size(&b->model.convnext, slot, height, width);
    else if (b->spec.kind == BACKBONE_SHUFFLENET)
        shufflenet_feature_map_size(&b->model.shufflenet, slot, height, width);
    else
        resnet_feature_map_size(&b->model.resnet, slot, height, width);
}
