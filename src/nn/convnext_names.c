// ConvNeXt model names, sizes and the three parameter namings (see
// convnext_names.h).
#include "nn/convnext_names.h"

#include <stdio.h>
#include <string.h>

const char *const convnext_naming_names[] = {"torchvision", "timm", "dinov3"};

static const struct {
    const char *size;
    int depths[CONVNEXT_STAGES], dims[CONVNEXT_STAGES];
    float torchvision_drop_path;  // torchvision's stochastic_depth_prob default
} SIZES[] = {
    {"tiny", {3, 3, 9, 3}, {96, 192, 384, 768}, 0.1f},
    {"small", {3, 3, 27, 3}, {96, 192, 384, 768}, 0.4f},
    {"base", {3, 3, 27, 3}, {128, 256, 512, 1024}, 0.5f},
    {"large", {3, 3, 27, 3}, {192, 384, 768, 1536}, 0.5f},
};
enum { SIZE_COUNT = sizeof SIZES / sizeof SIZES[0] };

// ---- model names -------------------------------------------------------------------------

static int strip_prefix(const char **name, const char *prefix) {
    const size_t length = strlen(prefix);
    if (strncmp(*name, prefix, length) != 0) return 0;
    *name += length;
    return 1;
}

static int has_suffix(const char *text, const char *suffix) {
    const size_t n = strlen(text), m = strlen(suffix);
    return n >= m && strcmp(text + n - m, suffix) == 0;
}

// The naming and size index of a --model name, or -1.
static int parse_name(const char *name, ConvnextNaming *naming) {
    char rest[64];
    *naming = CONVNEXT_TORCHVISION;
    if (strip_prefix(&name, "timm/")) *naming = CONVNEXT_TIMM;
    else if (strip_prefix(&name, "dinov3/")) *naming = CONVNEXT_DINOV3;
    else strip_prefix(&name, "torchvision/");
    if (strlen(name) >= sizeof rest) return -1;
    snprintf(rest, sizeof rest, "%s", name);
    if (*naming == CONVNEXT_DINOV3) {  // LightlyTrain's DINOv3 spellings
        for (char *c = rest; *c; c++)
            if (*c == '_') *c = '-';
        static const char *const suffixes[] = {"-pretrained", "-pretrain"};
        for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++)
            if (has_suffix(rest, suffixes[i])) {
                rest[strlen(rest) - strlen(suffixes[i])] = '\0';
                break;
            }
    }
    const char *separator = *naming == CONVNEXT_DINOV3 ? "convnext-" : "convnext_";
    const char *size = rest;
    if (!strip_prefix(&size, separator)) return -1;
    for (int i = 0; i < SIZE_COUNT; i++)
        if (strcmp(size, SIZES[i].size) == 0) return i;
    return -1;
}

int convnext_is_preset_name(const char *name) {
    ConvnextNaming naming;
    return parse_name(name, &naming) >= 0;
}

float convnext_default_drop_path(const ConvnextConfig *config) {
    const char *size = convnext_size_name(config);
    if (config->naming != CONVNEXT_TORCHVISION || !size) return 0.0f;
    for (int i = 0; i < SIZE_COUNT; i++)
        if (strcmp(SIZES[i].size, size) == 0) return SIZES[i].torchvision_drop_path;
    return 0.0f;
}

int convnext_config_preset(const char *name, ConvnextConfig *config, ErrorMessage *err) {
    ConvnextNaming naming;
    const int size = parse_name(name, &naming);
    if (size < 0)
        return error_set(err, "unknown ConvNeXt '%s' (torchvision/convnext_tiny, _small, _base, "
                              "_large; timm/convnext_*; dinov3/convnext-tiny, ...)", name);
    memset(config, 0, sizeof *config);
    memcpy(config->depths, SIZES[size].depths, sizeof config->depths);
    memcpy(config->dims, SIZES[size].dims, sizeof config->dims);
    config->naming = naming;
    config->kernel = 7;
    config->norm_eps = 1e-6f;
    config->layer_scale_init = 1e-6f;
    config->drop_path_rate = convnext_default_drop_path(config);
    convnext_config_name(config);
    return 0;
}

const char *convnext_size_name(const ConvnextConfig *config) {
    for (int i = 0; i < SIZE_COUNT; i++)
        if (memcmp(SIZES[i].depths, config->depths, sizeof config->depths) == 0 &&
            memcmp(SIZES[i].dims, config->dims, sizeof config->dims) == 0)
            return SIZES[i].size;
    return NULL;
}

void convnext_config_name(ConvnextConfig *config) {
    const char *size = convnext_size_name(config);
    const char *naming = convnext_naming_names[config->naming];
    if (size)
        snprintf(config->name, sizeof config->name, "%s/convnext%s%s", naming,
                 config->naming == CONVNEXT_DINOV3 ? "-" : "_", size);
    else
        snprintf(config->name, sizeof config->name, "%s/convnext_w%d", naming, config->dims[0]);
}

int convnext_config_check(const ConvnextConfig *c, ErrorMessage *err) {
    for (int s = 0; s < CONVNEXT_STAGES; s++)
        if (c->depths[s] < 1 || c->dims[s] < 1)
            return error_set(err, "ConvNeXt: stage %d has %d blocks of width %d", s, c->depths[s],
                             c->dims[s]);
    if (c->kernel < 1 || c->kernel % 2 == 0)
        return error_set(err, "ConvNeXt: depthwise kernel %d is not odd", c->kernel);
    if (!(c->drop_path_rate >= 0.0f && c->drop_path_rate < 1.0f))
        return error_set(err, "ConvNeXt: drop path rate %g outside [0, 1)",
                         (double)c->drop_path_rate);
    if ((int)c->naming < 0 || c->naming > CONVNEXT_DINOV3)
        return error_set(err, "ConvNeXt: unknown naming %d", (int)c->naming);
    return 0;
}

// ---- parameter namings -------------------------------------------------------------------

// The module of the role without the leaf: "features.1.0.block.0", ...
static void module_name(ConvnextNaming naming, const ConvnextTensorRole *r, char *out,
                        size_t size) {
    static const char *const torchvision_block[] = {"block.0", "block.2", "block.3", "block.5",
                                                    "layer_scale"};
    static const char *const timm_block[] = {"conv_dw", "norm", "mlp.fc1", "mlp.fc2", "gamma"};
    static const char *const dinov3_block[] = {"dwconv", "norm", "pwconv1", "pwconv2", "gamma"};
    const int s = r->stage, b = r->block;
    const int in_block = r->role >= CONVNEXT_DWCONV && r->role <= CONVNEXT_GAMMA;
    const int part = in_block ? (int)(r->role - CONVNEXT_DWCONV) : 0;
    // 0 / 1: the conv and norm of the stem (conv first) or a downsampling (norm first)
    const int index = r->role == CONVNEXT_STEM_NORM || r->role == CONVNEXT_DOWN_CONV;
    switch (naming) {
    case CONVNEXT_TORCHVISION:
        if (r->role == CONVNEXT_HEAD_NORM) snprintf(out, size, "classifier.0");
        else if (in_block)
            snprintf(out, size, "features.%d.%d.%s", 2 * s + 1, b, torchvision_block[part]);
        else snprintf(out, size, "features.%d.%d", 2 * s, index);
        return;
    case CONVNEXT_TIMM:
        if (r->role == CONVNEXT_HEAD_NORM) snprintf(out, size, "head.norm");
        else if (in_block) snprintf(out, size, "stages.%d.blocks.%d.%s", s, b, timm_block[part]);
        else if (s == 0) snprintf(out, size, "stem.%d", index);
        else snprintf(out, size, "stages.%d.downsample.%d", s, index);
        return;
    case CONVNEXT_DINOV3:
        if (r->role == CONVNEXT_HEAD_NORM) snprintf(out, size, "norm");
        else if (in_block) snprintf(out, size, "stages.%d.%d.%s", s, b, dinov3_block[part]);
        else snprintf(out, size, "downsample_layers.%d.%d", s, index);
        return;
    }
}

void convnext_tensor_name(ConvnextNaming naming, const ConvnextTensorRole *role, char *out,
                          size_t size) {
    char module[96];
    module_name(naming, role, module, sizeof module);
    if (role->leaf[0]) snprintf(out, size, "%s.%s", module, role->leaf);
    else snprintf(out, size, "%s", module);
}

// Each naming's stem conv weight, and a tensor only a ConvNeXt has next to
// it (torchvision's MobileNets share features.0.0, timm's other nets stem.0).
static const struct {
    const char *stem, *witness;
} ANCHORS[] = {
    [CONVNEXT_TORCHVISION] = {"features.0.0.weight", "features.1.0.layer_scale"},
    [CONVNEXT_TIMM] = {"stem.0.weight", "stages.0.blocks.0.conv_dw.weight"},
    [CONVNEXT_DINOV3] = {"downsample_layers.0.0.weight", "stages.0.0.dwconv.weight"},
};

static int has_tensor(const SafeTensors *file, const char *prefix, const char *name) {
    char key[SAFETENSORS_MAX_NAME];
    if ((size_t)snprintf(key, sizeof key, "%s%s", prefix, name) >= sizeof key) return 0;
    return safetensors_find(file, key) != NULL;
}

int convnext_naming_detect(const SafeTensors *file, const char *prefix) {
    for (int n = 0; n <= CONVNEXT_DINOV3; n++)
        if (has_tensor(file, prefix, ANCHORS[n].stem) &&
            has_tensor(file, prefix, ANCHORS[n].witness))
            return n;
    return -1;
}

int convnext_anchor_prefix(const SafeTensors *file, const char *name, char *prefix,
                           size_t size) {
    const size_t length = strlen(name);
    for (int n = 0; n <= CONVNEXT_DINOV3; n++) {
        const size_t anchor = strlen(ANCHORS[n].stem);
        if (length < anchor || strcmp(name + length - anchor, ANCHORS[n].stem) != 0) continue;
        const size_t kept = length - anchor;
        if ((kept && name[kept - 1] != '.') || kept >= size) continue;
        snprintf(prefix, size, "%.*s", (int)kept, name);
        if (has_tensor(file, prefix, ANCHORS[n].witness)) return 1;
    }
    return 0;
}

int convnext_name_skipped(ConvnextNaming naming, const char *key) {
    switch (naming) {
    case CONVNEXT_TORCHVISION: return strncmp(key, "classifier.2.", 13) == 0;
    case CONVNEXT_TIMM: return strncmp(key, "head.fc.", 8) == 0;
    case CONVNEXT_DINOV3: return strncmp(key, "norms.", 6) == 0;
    }
    return 0;
}
