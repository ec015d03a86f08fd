// Finding, identifying and loading the backbone of a state dict (see
// state_dict_backbone.h).
#include "nn/state_dict_backbone.h"

#include <stdio.h>
#include <string.h>

#include "nn/convnext_names.h"
#include "nn/convnext_weights.h"
#include "nn/vit_names.h"
#include "nn/vit_weights.h"

#define RESNET_MAX_BLOCKS 64  // more blocks in a layer than any ResNet has: stop counting

const SafeTensor *state_dict_find(const SafeTensors *file, const char *prefix, const char *name) {
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

int state_dict_resnet_depth(const SafeTensors *file, const char *prefix, int *depth,
                            ErrorMessage *err) {
    const SafeTensor *stem = state_dict_find(file, prefix, "conv1.weight");
    if (!is_conv(stem, -1, 7) || stem->shape[0] != 64 || stem->shape[1] > 64)
        return error_set(err,
                         "not a ResNet backbone: %s \"%sconv1.weight\" of shape (64, C, 7, 7) "
                         "(%d tensors, the first \"%s\")",
                         stem ? "the stem conv is not" : "no stem conv", prefix, file->count,
                         file->count ? file->tensors[0].name : "");
    // Basic blocks: conv1 3x3, conv2 3x3. Bottlenecks: conv1 1x1, conv2 3x3, conv3 1x1.
    const int bottleneck = state_dict_find(file, prefix, "layer1.0.conv3.weight") != NULL;
    int blocks[RESNET_LAYERS];
    for (int layer = 0; layer < RESNET_LAYERS; layer++) {
        blocks[layer] = 0;
        for (int b = 0; b < RESNET_MAX_BLOCKS; b++) {
            char name[64];
            snprintf(name, sizeof name, "layer%d.%d.conv1.weight", layer + 1, b);
            const SafeTensor *conv = state_dict_find(file, prefix, name);
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
    for (int i = 0; i < resnet_architecture_count; i++) {
        if (resnet_architectures[i].bottleneck != bottleneck) continue;
        if (memcmp(resnet_architectures[i].blocks, blocks, sizeof blocks) != 0) continue;
        *depth = resnet_architectures[i].depth;
        return 0;
    }
    return error_set(err,
                     "not a ResNet backbone: %d-%d-%d-%d %s blocks in layer1..layer4 (under "
                     "\"%s\") match none of resnet18/34 (basic 2-2-2-2, 3-4-6-3) and "
                     "resnet26/50/101/152/200 (bottleneck 2-2-2-2, 3-4-6-3, 3-4-23-3, 3-8-36-3, "
                     "3-24-36-3)",
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
// not "embeddings."), a ConvNeXt's stem conv with its first block, an
// Ultralytics model's first two convs, or a ResNet's stem with its first
// block; else 0.
static int anchored_prefix(const SafeTensors *file, const char *name, char *prefix,
                           size_t size) {
    for (int i = 0; i < VIT_CLASS_TOKEN_NAME_COUNT; i++)
        if (anchor_prefix(name, VIT_CLASS_TOKEN_NAMES[i], prefix, size)) return 1;
    if (anchor_prefix(name, YOLO_ANCHOR, prefix, size))
        return state_dict_find(file, prefix, YOLO_ANCHOR_NEXT) != NULL;
    if (convnext_anchor_prefix(file, name, prefix, size)) return 1;
    return anchor_prefix(name, "conv1.weight", prefix, size) &&
           state_dict_find(file, prefix, "layer1.0.conv1.weight");
}

int state_dict_backbone_prefix(const SafeTensors *file, char *prefix, size_t size,
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

int state_dict_backbone_spec(const SafeTensors *file, const char *prefix, BackboneSpec *spec,
                             ErrorMessage *err) {
    memset(spec, 0, sizeof *spec);
    if (convnext_weights_detect(file, prefix)) {
        spec->kind = BACKBONE_CONVNEXT;
        if (convnext_config_from_weights(file, prefix, &spec->convnext, err)) return -1;
        spec->in_channels = spec->convnext.in_channels;
        return 0;
    }
    if (vit_weights_detect(file, prefix)) {
        spec->kind = BACKBONE_VIT;
        if (vit_config_from_weights(file, prefix, &spec->vit, err)) return -1;
        spec->in_channels = spec->vit.in_channels;  // the image channels: the file's
        return 0;
    }
    if (state_dict_find(file, prefix, YOLO_ANCHOR) &&
        state_dict_find(file, prefix, YOLO_ANCHOR_NEXT)) {
        spec->kind = BACKBONE_YOLO;
        spec->in_channels = 3;
        return yolo_config_from_weights(file, prefix, &spec->yolo, err);
    }
    if (shufflenet_config_from_weights(file, prefix, &spec->shufflenet) == 0) {
        spec->kind = BACKBONE_SHUFFLENET;
        spec->in_channels = spec->shufflenet.in_channels;
        return 0;
    }
    spec->kind = BACKBONE_RESNET;
    if (state_dict_resnet_depth(file, prefix, &spec->resnet_depth, err) != 0)
        return error_prefix(err, "no ViT tokens (\"%scls_token\")", prefix);
    spec->in_channels = (int)state_dict_find(file, prefix, "conv1.weight")->shape[1];
    // a wide ResNet's first bottleneck: 128 channels inside, not 64
    const SafeTensor *inner = state_dict_find(file, prefix, "layer1.0.conv1.weight");
    spec->resnet_width = state_dict_find(file, prefix, "layer1.0.conv3.weight") && inner &&
                                 inner->shape[0] == 128
                             ? 2 : 1;
    return 0;
}
