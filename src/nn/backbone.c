// Backbones behind one interface (see backbone.h): the model names, and the
// function tables of the two architectures, thin adapters onto resnet.h and
// vit.h.
#include "nn/backbone.h"

#include <stdio.h>
#include <string.h>

#include "nn/backbone_convnext.h"
#include "nn/convnext_names.h"
#include "nn/vit_weights.h"
#include "nn/weights.h"

const char *const backbone_model_names[] = {
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
    "vit_t14", "vit_t16", "vit_s14", "vit_s16", "vit_b14", "vit_b16", "vit_l14", "vit_l16",
    "vit_g14", "vit_s14_reg4", "vit_b14_reg4", "vit_l14_reg4", "vit_g14_reg4",
    "dinov3/vitt16", "dinov3/vitt16plus", "dinov3/vits16", "dinov3/vits16plus", "dinov3/vitb16",
    "dinov3/vitl16", "dinov3/vitl16plus", "dinov3/vith16plus",
    // ConvNeXts (convnext_names.h)
    "torchvision/convnext_tiny", "torchvision/convnext_small", "torchvision/convnext_base",
    "torchvision/convnext_large", "timm/convnext_tiny", "timm/convnext_small",
    "timm/convnext_base", "timm/convnext_large", "dinov3/convnext-tiny", "dinov3/convnext-small",
    "dinov3/convnext-base", "dinov3/convnext-large", NULL};

int backbone_spec_parse(const char *name, int image_size, BackboneSpec *spec, ErrorMessage *err) {
    memset(spec, 0, sizeof *spec);
    int depth = 0, consumed = 0;
    if (sscanf(name, "resnet%d%n", &depth, &consumed) == 1 && name[consumed] == '\0') {
        spec->kind = BACKBONE_RESNET;
        spec->resnet_depth = depth;
        const ResnetConfig config = resnet_config_default(depth);
        Resnet probe;  // checks the depth without allocating anything
        const int status = resnet_declare(&probe, NULL, &config, err);
        resnet_free(&probe);
        return status;
    }
    if (vit_is_preset_name(name)) {
        spec->kind = BACKBONE_VIT;
        return vit_config_preset(name, image_size, &spec->vit, err);
    }
    if (convnext_is_preset_name(name)) {
        spec->kind = BACKBONE_CONVNEXT;
        return convnext_config_preset(name, &spec->convnext, err);
    }
    return error_set(err, "unknown model '%s' (resnet18/34/50/101/152, vit_t16, vit_s14, "
                          "vit_s16, vit_b14, vit_b16, vit_l14, vit_l16, vit_g14, ..._reg4, "
                          "dinov3/vits16, dinov3/vitb16, ..., torchvision/convnext_tiny, "
                          "timm/convnext_tiny, dinov3/convnext-tiny, ...)", name);
}

void backbone_spec_name(const BackboneSpec *spec, char *out, size_t size) {
    if (spec->kind == BACKBONE_VIT) snprintf(out, size, "%s", spec->vit.name);
    else if (spec->kind == BACKBONE_CONVNEXT) snprintf(out, size, "%s", spec->convnext.name);
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
static int resnet_backbone_save(const Backbone *b, const char *path, ErrorMessage *err) {
    return resnet_save(resnet_of_const(b), path, err);
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
static int vit_backbone_save(const Backbone *b, const char *path, ErrorMessage *err) {
    return vit_save(vit_of_const(b), path, err);
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

// ---- lifetime ----------------------------------------------------------------------------

static int allocate_resnet(Backbone *b, const BackboneInput *inputs, int count, int frozen,
                           ErrorMessage *err) {
    ResnetConfig config = resnet_config_default(b->spec.resnet_depth);
    config.in_channels = b->spec.in_channels;
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
    if (vit_allocate(model, shapes, count, err)) return -1;
    b->feature_dim = model->feature_dim;
    b->params = &model->params;
    b->buffers = &model->buffers;
    b->num_batches_tracked = &b->no_batches_tracked;
    return 0;
}

static int allocate(Backbone *backbone, Backend *backend, const BackboneSpec *spec,
                    const BackboneInput *inputs, int input_count, int frozen, ErrorMessage *err) {
    memset(backbone, 0, sizeof *backbone);
    backbone->spec = *spec;
    backbone->backend = backend;
    backbone->ops = spec->kind == BACKBONE_VIT        ? &vit_backbone_ops
                    : spec->kind == BACKBONE_CONVNEXT ? &convnext_backbone_ops
                                                      : &resnet_backbone_ops;
    if (input_count < 1 || input_count > BACKBONE_MAX_SLOTS)
        return error_set(err, "backbone: %d inputs (1..%d)", input_count, BACKBONE_MAX_SLOTS);
    backbone->slot_count = input_count;
    memcpy(backbone->slots, inputs, (size_t)input_count * sizeof *inputs);
    const int status =
        spec->kind == BACKBONE_VIT ? allocate_vit(backbone, inputs, input_count, frozen, err)
        : spec->kind == BACKBONE_CONVNEXT
            ? backbone_allocate_convnext(backbone, inputs, input_count, frozen, err)
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
    if (backbone->spec.kind != BACKBONE_RESNET) return 0;
    return resnet_attach_batchnorm_sync(&backbone->model.resnet, sync, err);
}

const Parameter *backbone_input_layer(const Backbone *backbone) {
    if (backbone->spec.kind == BACKBONE_CONVNEXT)
        return &backbone->params->params[backbone->model.convnext.stages[0].conv.weight_index];
    return parameter_find(backbone->params, backbone->spec.kind == BACKBONE_VIT
                                                ? "patch_embed.proj.weight"
                                                : "conv1.weight");
}

int backbone_load_file(Backbone *backbone, const char *path, ErrorMessage *err) {
    SafeTensors file;
    if (safetensors_read_weights(path, &file, err)) return -1;
    const int status = backbone->ops->load(backbone, &file, "", err);
    safetensors_free(&file);
    return status ? error_prefix(err, "%s", path) : 0;
}

void backbone_feature_map_size(const Backbone *b, int slot, int *height, int *width) {
    if (b->spec.kind == BACKBONE_VIT)
        *height = *width = b->model.vit.slots[slot].grid;
    else if (b->spec.kind == BACKBONE_CONVNEXT)
        convnext_feature_map_size(&b->model.convnext, slot, height, width);
    else
        resnet_feature_map_size(&b->model.resnet, slot, height, width);
}
