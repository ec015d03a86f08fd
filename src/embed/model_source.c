// Backbone loading from a checkpoint or a safetensors state dict, with the
// architecture read from the tensor names (see model_source.h).
#include "embed/model_source.h"

#include <stdio.h>
#include <string.h>

#include "nn/vit_names.h"
#include "nn/vit_weights.h"
#include "nn/weights.h"
#include "train/checkpoint.h"
#include "weights/resolve.h"

#define RESNET_LAYERS 4
#define RESNET_MAX_BLOCKS 64  // more blocks in a layer than any ResNet has: stop counting

static const struct {
    int depth;
    int bottleneck;
    int blocks[RESNET_LAYERS];
} RESNET_LAYOUTS[] = {
    {18, 0, {2, 2, 2, 2}},  {34, 0, {3, 4, 6, 3}},   {50, 1, {3, 4, 6, 3}},
    {101, 1, {3, 4, 23, 3}}, {152, 1, {3, 8, 36, 3}},
};
enum { RESNET_LAYOUT_COUNT = sizeof RESNET_LAYOUTS / sizeof RESNET_LAYOUTS[0] };

static const SafeTensor *find_prefixed(const SafeTensors *file, const char *prefix,
                                       const char *name) {
    char key[SAFETENSORS_MAX_NAME];
    if ((size_t)snprintf(key, sizeof key, "%s%s", prefix, name) >= sizeof key) return NULL;
    return safetensors_find(file, key);
}

// 1 when tensor is a rank-4 conv weight (OIHW) with in_channels inputs and a
// kernel x kernel window (any output count).
static int is_conv(const SafeTensor *tensor, int64_t in_channels, int64_t kernel) {
    return tensor && tensor->rank == 4 && (in_channels < 0 || tensor->shape[1] == in_channels) &&
           tensor->shape[2] == kernel && tensor->shape[3] == kernel;
}

int model_source_detect_depth(const SafeTensors *file, const char *prefix, int *depth,
                              ErrorMessage *err) {
    const SafeTensor *stem = find_prefixed(file, prefix, "conv1.weight");
    if (!is_conv(stem, -1, 7) || stem->shape[0] != 64 || stem->shape[1] > 64)
        return error_set(err,
                         "not a ResNet backbone: %s \"%sconv1.weight\" of shape (64, C, 7, 7) "
                         "(%d tensors, the first \"%s\")",
                         stem ? "the stem conv is not" : "no stem conv", prefix, file->count,
                         file->count ? file->tensors[0].name : "");
    // Basic blocks: conv1 3x3, conv2 3x3. Bottlenecks: conv1 1x1, conv2 3x3, conv3 1x1.
    const int bottleneck = find_prefixed(file, prefix, "layer1.0.conv3.weight") != NULL;
    int blocks[RESNET_LAYERS];
    for (int layer = 0; layer < RESNET_LAYERS; layer++) {
        blocks[layer] = 0;
        for (int b = 0; b < RESNET_MAX_BLOCKS; b++) {
            char name[64];
            snprintf(name, sizeof name, "layer%d.%d.conv1.weight", layer + 1, b);
            const SafeTensor *conv = find_prefixed(file, prefix, name);
            if (!conv) break;
            if (!is_conv(conv, -1, bottleneck ? 1 : 3))
                return error_set(err,
                                 "not a ResNet backbone: \"%s%s\" is not a %dx%d conv as in a "
                                 "%s block",
                                 prefix, name, bottleneck ? 1 : 3, bottleneck ? 1 : 3,
                                 bottleneck ? "bottleneck" : "basic");
            blocks[layer]++;
        }
    }
    for (int i = 0; i < RESNET_LAYOUT_COUNT; i++) {
        if (RESNET_LAYOUTS[i].bottleneck != bottleneck) continue;
        if (memcmp(RESNET_LAYOUTS[i].blocks, blocks, sizeof blocks) != 0) continue;
        *depth = RESNET_LAYOUTS[i].depth;
        return 0;
    }
    return error_set(err,
                     "not a ResNet backbone: %d-%d-%d-%d %s blocks in layer1..layer4 (under "
                     "\"%s\") match none of resnet18/34 (basic 2-2-2-2, 3-4-6-3) and "
                     "resnet50/101/152 (bottleneck 3-4-6-3, 3-4-23-3, 3-8-36-3)",
                     blocks[0], blocks[1], blocks[2], blocks[3],
                     bottleneck ? "bottleneck" : "basic", prefix);
}

// The candidate prefix of `name` for anchor (name = prefix + anchor, the
// prefix empty or ending in '.'), else 0.
static int anchor_prefix(const char *name, const char *anchor, char *prefix, size_t size) {
    const size_t length = strlen(name), anchor_length = strlen(anchor);
    if (length < anchor_length || strcmp(name + length - anchor_length, anchor) != 0) return 0;
    const size_t kept = length - anchor_length;
    if ((kept && name[kept - 1] != '.') || kept >= size) return 0;
    snprintf(prefix, size, "%.*s", (int)kept, name);
    return 1;
}

// The prefix `name` is a backbone's anchor under: a ViT's class token (its
// longest naming first, so that "embeddings.cls_token" is found under "",
// not "embeddings.") or a ResNet's stem with its first block; else 0.
static int anchored_prefix(const SafeTensors *file, const char *name, char *prefix,
                           size_t size) {
    for (int i = 0; i < VIT_CLASS_TOKEN_NAME_COUNT; i++)
        if (anchor_prefix(name, VIT_CLASS_TOKEN_NAMES[i], prefix, size)) return 1;
    return anchor_prefix(name, "conv1.weight", prefix, size) &&
           find_prefixed(file, prefix, "layer1.0.conv1.weight");
}

int model_source_find_prefix(const SafeTensors *file, char *prefix, size_t size,
                             ErrorMessage *err) {
    char found[SAFETENSORS_MAX_NAME] = "";
    int count = 0;
    for (int t = 0; t < file->count; t++) {
        char candidate[SAFETENSORS_MAX_NAME];
        if (!anchored_prefix(file, file->tensors[t].name, candidate, sizeof candidate) ||
            (count && strcmp(candidate, found) == 0))
            continue;
        if (count++)  // a student and a teacher, say
            return error_set(err, "backbones under 2 prefixes (\"%s\", \"%s\"): save the one "
                                  "wanted alone", found, candidate);
        snprintf(found, sizeof found, "%s", candidate);
    }
    prefix[0] = '\0';
    if (count == 0) return 1;
    if (strlen(found) >= size)
        return error_set(err, "the backbone's prefix \"%.60s...\" is too long", found);
    snprintf(prefix, size, "%s", found);
    return 0;
}

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

int model_source_detect_spec(const SafeTensors *file, const char *prefix, BackboneSpec *spec,
                             ErrorMessage *err) {
    memset(spec, 0, sizeof *spec);
    if (vit_weights_detect(file, prefix)) {
        spec->kind = BACKBONE_VIT;
        if (vit_config_from_weights(file, prefix, &spec->vit, err)) return -1;
        spec->in_channels = spec->vit.in_channels;  // the image channels: the file's
        return 0;
    }
    spec->kind = BACKBONE_RESNET;
    if (model_source_detect_depth(file, prefix, &spec->resnet_depth, err) != 0)
        return error_prefix(err, "no ViT tokens (\"%scls_token\")", prefix);
    spec->in_channels = (int)find_prefixed(file, prefix, "conv1.weight")->shape[1];
    return 0;
}

// The named architecture where the file leaves something open (a ViT's
// heads), after checking that the two agree on everything the file says.
static int apply_arch(const char *arch, BackboneSpec *spec, ErrorMessage *err) {
    BackboneSpec named;
    if (backbone_spec_parse(arch, 224, &named, err)) return -1;
    char found[BACKBONE_MAX_NAME];
    backbone_spec_name(spec, found, sizeof found);
    if (named.kind != spec->kind || (spec->kind == BACKBONE_RESNET &&
                                     named.resnet_depth != spec->resnet_depth))
        return error_set(err, "%s does not match the file, which holds a %s", arch, found);
    if (spec->kind == BACKBONE_RESNET) return 0;
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

static int create_and_load(const SafeTensors *file, const char *prefix,
                           const ModelSourceOptions *options, Backend *backend,
                           const BackboneInput *inputs, int input_count, Backbone *model,
                           ErrorMessage *err) {
    BackboneSpec spec;
    if (model_source_detect_spec(file, prefix, &spec, err) != 0) return -1;
    if (options->arch && apply_arch(options->arch, &spec, err) != 0) return -1;
    if (input_count < 1 || input_count > BACKBONE_MAX_SLOTS)
        return error_set(err, "%d input shapes (1..%d)", input_count, BACKBONE_MAX_SLOTS);
    BackboneInput sized[BACKBONE_MAX_SLOTS];
    for (int i = 0; i < input_count; i++) {
        sized[i] = inputs[i];
        if (sized[i].resolution <= 0)  // the smallest input the architecture takes
            sized[i].resolution = spec.kind == BACKBONE_VIT ? spec.vit.patch_size : 32;
    }
    if ((options->frozen ? backbone_allocate_frozen : backbone_allocate)(
            model, backend, &spec, sized, input_count, err) != 0)
        return -1;
    if (model->ops->load(model, file, prefix, err) != 0) {
        backbone_free(model);
        return -1;
    }
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
    int status, is_checkpoint;
    SafeFileKind kind;
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
        status = checkpoint_part_prefix(&ckpt, part, info->prefix, sizeof info->prefix, err);
        if (status == 0)
            status = create_and_load(&ckpt.tensors, info->prefix, options, backend, inputs,
                                     input_count, model, err);
        checkpoint_free(&ckpt);
    } else {
        if (strcmp(part, "backbone") != 0 && strcmp(part, "student") != 0)
            return error_set(err, "%s: part \"%s\" needs a checkpoint; a safetensors file holds "
                                  "one backbone (part backbone)", path, part);
        SafeTensors file;
        if (safetensors_read_weights_as(path, kind, &file, err) != 0) return -1;  // names the path
        const int found = model_source_find_prefix(&file, info->prefix, sizeof info->prefix, err);
        status = found < 0 ? -1
                           : create_and_load(&file, info->prefix, options, backend, inputs,
                                             input_count, model, err);
        if (status != 0 && found == 1)  // tried at the root, for the detection to say why
            error_prefix(err, "no ViT class token nor ResNet stem (\"conv1.weight\" with "
                              "\"layer1.0.conv1.weight\") under any prefix");
        else if (status != 0 && found == 0 && info->prefix[0])
            error_prefix(err, "under \"%s\"", info->prefix);
        safetensors_free(&file);
    }
    if (status == 0) return 0;
    error_prefix(err, "%s", path);
    return strcmp(asked, path) != 0 ? error_prefix(err, "%s", asked) : -1;
}

int model_source_load_backbone(const char *path, const char *part, Backend *backend,
                               const BackboneInput *inputs, int input_count, Backbone *model,
                               ErrorMessage *err) {
    return model_source_load_backbone_info(path, part, backend, inputs, input_count, model,
                                           NULL, err);
}
