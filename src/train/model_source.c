// Backbone loading from a checkpoint or a safetensors state dict, with the
// architecture read from the tensor names (see model_source.h).
#include "train/model_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "nn/state_dict_backbone.h"
#include "nn/weights.h"
#include "train/checkpoint.h"
#include "weights/resolve.h"
#include "weights/weight_file.h"

// The checkpoint prefix of `part` (see model_source.h).
static int checkpoint_part_prefix(const Checkpoint *ckpt, const char *part, char *prefix,
                                  size_t size, ErrorMessage *err) {
    const char *method = checkpoint_meta(ckpt, "method");
    const char *chosen;
    if (strcmp(part, "student") == 0) {
        chosen = "backbone";
    } else if (strcmp(part, "teacher") == 0) {
        chosen = "teacher_backbone";
    } else if (strcmp(part, "backbone") == 0) {
        const char *export_part = checkpoint_meta(ckpt, "export_part");
        chosen = export_part ? export_part : "backbone";
        if (strcmp(chosen, "backbone") != 0 && strcmp(chosen, "teacher_backbone") != 0)
            return error_set(err, "checkpoint metadata export_part \"%s\" is neither backbone nor "
                                  "teacher_backbone", chosen);
    } else {
        return error_set(err, "unknown part \"%s\" (backbone, student or teacher)", part);
    }
    snprintf(prefix, size, "%s.", chosen);
    if (!checkpoint_has_prefix(ckpt, prefix)) {
        if (strcmp(chosen, "teacher_backbone") == 0)
            return error_set(err, "the checkpoint has no teacher backbone (method %s)",
                             method ? method : "unknown");
        return error_set(err, "the checkpoint has no \"%s*\" tensors", prefix);
    }
    return 0;
}

// A ConvNeXt name on a ConvNeXt file: the same blocks and widths; the
// name's naming and features are taken (dinov3/convnext-tiny on timm's copy
// of its weights is a DINOv3 ConvNeXt, loaded with its names translated).
static int apply_convnext_arch(const char *arch, const BackboneSpec *named, BackboneSpec *spec,
                               ErrorMessage *err) {
    const ConvnextConfig *a = &named->convnext, *b = &spec->convnext;
    for (int s = 0; s < CONVNEXT_STAGES; s++)
        if (a->depths[s] != b->depths[s] || a->dims[s] != b->dims[s])
            return error_set(err, "%s does not match the file: stage %d has %d blocks of width "
                                  "%d, the file's %d of width %d", arch, s, a->depths[s],
                             a->dims[s], b->depths[s], b->dims[s]);
    const int in_channels = b->in_channels;
    spec->convnext = *a;
    spec->convnext.in_channels = in_channels;
    return 0;
}

// The named architecture where the file leaves something open (a ViT's
// heads), after checking that the two agree on everything the file says.
static int apply_arch(const char *arch, BackboneSpec *spec, ErrorMessage *err) {
    BackboneSpec named;
    if (backbone_spec_parse(arch, 224, &named, err)) return -1;
    char found[BACKBONE_MAX_NAME];
    backbone_spec_name(spec, found, sizeof found);
    if (named.kind != spec->kind ||
        (spec->kind == BACKBONE_RESNET &&
         (named.resnet_depth != spec->resnet_depth ||
          (named.resnet_width > 1) != (spec->resnet_width > 1))) ||
        (spec->kind == BACKBONE_YOLO && strcmp(named.yolo.name, spec->yolo.name) != 0) ||
        (spec->kind == BACKBONE_SHUFFLENET &&
         strcmp(named.shufflenet.name, spec->shufflenet.name) != 0))
        return error_set(err, "%s does not match the file, which holds a %s", arch, found);
    if (spec->kind == BACKBONE_RESNET || spec->kind == BACKBONE_YOLO ||
        spec->kind == BACKBONE_SHUFFLENET)
        return 0;
    if (spec->kind == BACKBONE_CONVNEXT) return apply_convnext_arch(arch, &named, spec, err);
    const VitConfig *a = &named.vit, *b = &spec->vit;
    const struct { const char *what; int named, file; } checks[] = {
        {"width", a->embed_dim, b->embed_dim},        {"depth", a->depth, b->depth},
        {"patch size", a->patch_size, b->patch_size}, {"registers", a->register_tokens, b->register_tokens},
        {"MLP width", a->mlp_hidden, b->mlp_hidden},  {"RoPE (DINOv3)", a->rope, b->rope},
        {"SwiGLU", a->swiglu, b->swiglu},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++)
        if (checks[i].named != checks[i].file)
            return error_set(err, "%s does not match the file: %s %d, the file's %d", arch,
                             checks[i].what, checks[i].named, checks[i].file);
    spec->vit.heads = a->heads;
    return 0;
}

// What create_and_load needs besides the state dict.
typedef struct CreateAndLoad {
    const ModelSourceOptions *options;
    Backend *backend;
    const BackboneInput *inputs;
    int input_count;
    Backbone *model;
    const char *recorded_model;  // a checkpoint's "model" metadata, or NULL
} CreateAndLoad;

// A model for what file holds under prefix, with its weights; on failure
// *model holds nothing to free.
static int create_and_load(CreateAndLoad *how, const SafeTensors *file, const char *prefix,
                           ErrorMessage *err) {
    const ModelSourceOptions *options = how->options;
    Backbone *model = how->model;
    BackboneSpec spec;
    if (state_dict_backbone_spec(file, prefix, &spec, err) != 0) return -1;
    if (options->arch && apply_arch(options->arch, &spec, err) != 0) return -1;
    if (how->recorded_model && apply_arch(how->recorded_model, &spec, err) != 0)
        return error_prefix(err, "checkpoint metadata model=%s disagrees with its weights",
                            how->recorded_model);
    if (how->input_count < 1 || how->input_count > BACKBONE_MAX_SLOTS)
        return error_set(err, "%d input shapes (1..%d)", how->input_count, BACKBONE_MAX_SLOTS);
    BackboneInput sized[BACKBONE_MAX_SLOTS];
    for (int i = 0; i < how->input_count; i++) {
        sized[i] = how->inputs[i];
        if (sized[i].resolution <= 0)  // the smallest input the architecture takes (ResNet,
                                       // ConvNeXt: 32 px)
            sized[i].resolution = spec.kind == BACKBONE_VIT ? spec.vit.patch_size : 32;
    }
    if ((options->frozen ? backbone_allocate_frozen : backbone_allocate)(
            model, how->backend, &spec, sized, how->input_count, err) != 0)
        return -1;
    if (model->ops->load(model, file, prefix, err) != 0) {
        backbone_free(model);
        return -1;
    }
    return 0;
}

// create_and_load for a state dict (a StateDictBackboneLoader).
static int create_from_state_dict(void *context, SafeTensors *file, const char *prefix,
                                  int anchored, ErrorMessage *err) {
    if (create_and_load(context, file, prefix, err) == 0) return 0;
    if (!anchored)  // tried at the root, for the detection to say why
        error_prefix(err, "no ViT class token, ConvNeXt stem nor ResNet stem (\"conv1.weight\" "
                          "with \"layer1.0.conv1.weight\") under any prefix");
    return -1;
}

// The input train recorded beside a checkpoint's weights (channels,
// normalize, pixels) must fit the weights loaded: one line naming the
// field otherwise. (Version 2 checkpoints also record a CRC-32 of all their
// metadata, train/checkpoint.h: this catches values that were rewritten
// consistently, and version 1 files.)
static int check_recorded_input(const Checkpoint *ckpt, const Backbone *model,
                                ErrorMessage *err) {
    const Parameter *first = backbone_input_layer(model);
    const long long channels = first ? first->torch_shape[1] : 3;
    const char *recorded = checkpoint_meta(ckpt, "channels");
    if (recorded) {
        char *end = NULL;
        const long long value = strtoll(recorded, &end, 10);
        if (end == recorded || *end != '\0' || value != channels)
            return error_set(err, "checkpoint metadata channels=%.40s disagrees with its weights, "
                                  "whose first layer takes %lld channel(s)", recorded, channels);
    }
    const char *normalize = checkpoint_meta(ckpt, "normalize");
    ChannelSettings settings = {0};
    ErrorMessage ignored;
    if (normalize && channel_normalize_parse(normalize, &settings, &ignored) != 0)
        return error_set(err, "checkpoint metadata normalize=%.80s is not MEAN1,...:STD1,... with "
                              "positive stds", normalize);
    if (normalize && settings.normalize_count != channels)
        return error_set(err, "checkpoint metadata normalize=%.80s holds %d channel(s), its "
                              "weights' first layer takes %lld", normalize,
                         settings.normalize_count, channels);
    const char *pixels = checkpoint_meta(ckpt, "pixels");
    if (pixels && strcmp(pixels, "uint8") != 0 && strcmp(pixels, "float") != 0)
        return error_set(err, "checkpoint metadata pixels=%.40s is neither uint8 nor float",
                         pixels);
    return 0;
}

int model_source_load_backbone_info(const char *path, const char *part, Backend *backend,
                                    const BackboneInput *inputs, int input_count,
                                    Backbone *model, ModelSourceInfo *info, ErrorMessage *err) {
    const ModelSourceOptions options = {.part = part};
    return model_source_load_backbone_with(path, &options, backend, inputs, input_count, model,
                                           info, err);
}

int model_source_load_backbone_with(const char *path, const ModelSourceOptions *options,
                                    Backend *backend, const BackboneInput *inputs,
                                    int input_count, Backbone *model, ModelSourceInfo *info,
                                    ErrorMessage *err) {
    const char *part = options->part;
    // A known name's file must hold the name's model (a file put in the
    // cache by hand, or damaged, could hold anything).
    ModelSourceOptions named = *options;
    if (!named.arch) named.arch = weights_known_arch(path);
    options = &named;
    char local_path[4096];  // a weights name's downloaded file (weights/resolve.h)
    if (weights_local_path(path, local_path, sizeof local_path, err)) return -1;
    const char *asked = path;
    path = local_path;
    ModelSourceInfo local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    memset(model, 0, sizeof *model);
    CreateAndLoad how = {options, backend, inputs, input_count, model, NULL};
    int status, is_checkpoint;
    WeightFileKind kind;
    if (checkpoint_sniff(path, &is_checkpoint, &kind, err)) return -1;  // names the path
    if (is_checkpoint) {
        info->is_checkpoint = 1;
        Checkpoint ckpt;
        if (checkpoint_read(path, &ckpt, err) != 0) return -1;  // names the path
        const char *method = checkpoint_meta(&ckpt, "method");
        const char *pixels = checkpoint_meta(&ckpt, "pixels");
        const char *normalize = checkpoint_meta(&ckpt, "normalize");
        snprintf(info->method, sizeof info->method, "%s", method ? method : "");
        snprintf(info->pixels, sizeof info->pixels, "%s", pixels ? pixels : "");
        snprintf(info->normalize, sizeof info->normalize, "%s", normalize ? normalize : "");
        const char *image_size = checkpoint_meta(&ckpt, "run.image_size");
        info->image_size = image_size ? atoi(image_size) : 0;
        if (info->image_size < 0) info->image_size = 0;
        const char *embed_dim = checkpoint_meta(&ckpt, "run.embed_dim");
        info->embed_dim = embed_dim ? atoi(embed_dim) : 0;
        if (info->embed_dim < 0) info->embed_dim = 0;
        how.recorded_model = checkpoint_meta(&ckpt, "model");
        status = checkpoint_part_prefix(&ckpt, part, info->prefix, sizeof info->prefix, err);
        if (status == 0) status = create_and_load(&how, &ckpt.tensors, info->prefix, err);
        if (status == 0 && check_recorded_input(&ckpt, model, err) != 0) {
            backbone_free(model);
            status = -1;
        }
        checkpoint_free(&ckpt);
        if (status != 0) error_prefix(err, "%s", path);
    } else {
        if (strcmp(part, "backbone") != 0 && strcmp(part, "student") != 0)
            return error_set(err, "%s: part \"%s\" needs a checkpoint; a safetensors file holds "
                                  "one backbone (part backbone)", path, part);
        status = weight_file_load_backbone(path, kind, create_from_state_dict, &how,
                                           info->prefix, sizeof info->prefix, err);  // names the path
    }
    if (status == 0) return 0;
    return strcmp(asked, path) != 0 ? error_prefix(err, "%s", asked) : -1;
}

int model_source_load_backbone(const char *path, const char *part, Backend *backend,
                               const BackboneInput *inputs, int input_count, Backbone *model,
                               ErrorMessage *err) {
    return model_source_load_backbone_info(path, part, backend, inputs, input_count, model,
                                           NULL, err);
}
