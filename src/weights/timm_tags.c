// timm's default pretrained tags (see timm_tags.h). The table is what
// tools/timm_default_tags.py prints for timm 1.0.31: timm's own rule
// (generate_default_cfgs: the first tag with weights of each architecture)
// applied to its model files. Every default below is on the Hugging Face Hub
// as timm/ARCH.TAG, which weights by name downloads.
#include "weights/timm_tags.h"

#include <string.h>

typedef struct TimmTag {
    const char *architecture, *tag;
} TimmTag;

static const TimmTag tags[] = {
    {"resnet18", "a1_in1k"},
    {"resnet26", "bt_in1k"},
    {"resnet34", "a1_in1k"},
    {"resnet50", "a1_in1k"},
    {"resnet101", "a1h_in1k"},
    {"resnet152", "a1h_in1k"},
    {"resnet200", ""},  // timm's "untrained": no weights
    {"wide_resnet50_2", "racm_in1k"},
    {"wide_resnet101_2", "tv_in1k"},
    {"vit_tiny_patch16_224", "augreg_in21k_ft_in1k"},
    {"vit_small_patch16_224", "augreg_in21k_ft_in1k"},
    {"vit_base_patch16_224", "augreg2_in21k_ft_in1k"},
    {"vit_large_patch16_224", "augreg_in21k_ft_in1k"},
    {"vit_tiny_patch16_384", "augreg_in21k_ft_in1k"},
    {"vit_small_patch16_384", "augreg_in21k_ft_in1k"},
    {"vit_base_patch16_384", "augreg_in21k_ft_in1k"},
    {"vit_large_patch16_384", "augreg_in21k_ft_in1k"},
    {"vit_small_patch14_dinov2", "lvd142m"},
    {"vit_base_patch14_dinov2", "lvd142m"},
    {"vit_large_patch14_dinov2", "lvd142m"},
    {"vit_giant_patch14_dinov2", "lvd142m"},
    {"vit_small_patch14_reg4_dinov2", "lvd142m"},
    {"vit_base_patch14_reg4_dinov2", "lvd142m"},
    {"vit_large_patch14_reg4_dinov2", "lvd142m"},
    {"vit_giant_patch14_reg4_dinov2", "lvd142m"},
    {"convnext_tiny", "in12k_ft_in1k"},
    {"convnext_small", "in12k_ft_in1k"},
    {"convnext_base", "fb_in22k_ft_in1k"},
    {"convnext_large", "fb_in22k_ft_in1k"},
};

enum { TAG_COUNT = (int)(sizeof tags / sizeof tags[0]) };

const char *timm_default_tag(const char *architecture) {
    for (int i = 0; i < TAG_COUNT; i++)
        if (strcmp(tags[i].architecture, architecture) == 0) return tags[i].tag;
    return NULL;
}

const char *timm_tag_architecture(int index) {
    return index >= 0 && index < TAG_COUNT ? tags[index].architecture : NULL;
}

int timm_split_tag(const char *name, char *model, size_t size, const char **tag) {
    if (strncmp(name, "timm/", 5) != 0) return 0;
    const char *dot = strchr(name + 5, '.');
    if (!dot || dot == name + 5 || !dot[1] || (size_t)(dot - name) >= size) return 0;
    for (const char *c = dot + 1; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_')) return 0;
    memcpy(model, name, (size_t)(dot - name));
    model[dot - name] = '\0';
    *tag = dot + 1;
    return 1;
}
