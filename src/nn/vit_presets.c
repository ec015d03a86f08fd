// ViT configurations: the DINOv2 / timm presets (vit_s14, ..., vit_g14, _reg4), the
// DINOv3 presets as LightlyTrain names them (dinov3/vits16, ...), names
// from a geometry, and the geometry check (see vit.h).
#include <stdio.h>
#include <string.h>

#include "nn/vit.h"

typedef struct VitSize {
    char letter;  // t, s, b, l, g
    int embed_dim, depth, heads;
    int swiglu;   // DINOv2's ViT-g: a SwiGLU MLP (ffn_layer "swiglufused")
} VitSize;

static const VitSize vit_sizes[] = {
    {'t', 192, 12, 3, 0}, {'s', 384, 12, 6, 0}, {'b', 768, 12, 12, 0}, {'l', 1024, 24, 16, 0},
    {'g', 1536, 40, 24, 1},
};
enum { VIT_SIZE_COUNT = sizeof vit_sizes / sizeof vit_sizes[0] };

// DINOv3's ViTs (facebookresearch/dinov3 hub/backbones.py, LightlyTrain's
// dinov3_vitt16*): patch 16, 4 storage tokens, LayerScale 1e-5, RoPE base
// 100 with rescale_coords 2, mask_k_bias. The SwiGLU widths are
// SwiGLUFFN's int(2/3 ratio D) rounded up to a multiple of 8.
typedef struct Dinov3Size {
    const char *name;  // LightlyTrain's model name
    int embed_dim, depth, heads, mlp_hidden, swiglu;
} Dinov3Size;

static const Dinov3Size dinov3_sizes[] = {
    {"dinov3/vitt16", 192, 12, 3, 768, 0},      {"dinov3/vitt16plus", 192, 12, 3, 1152, 0},
    {"dinov3/vits16", 384, 12, 6, 1536, 0},     {"dinov3/vits16plus", 384, 12, 6, 1536, 1},
    {"dinov3/vitb16", 768, 12, 12, 3072, 0},    {"dinov3/vitl16", 1024, 24, 16, 4096, 0},
    {"dinov3/vitl16plus", 1024, 24, 16, 4096, 1}, {"dinov3/vith16plus", 1280, 32, 20, 5120, 1},
};
enum { DINOV3_SIZE_COUNT = sizeof dinov3_sizes / sizeof dinov3_sizes[0] };
#define DINOV3_PATCH 16
#define DINOV3_REGISTERS 4

// timm's ViT names as LightlyTrain takes them (its timm package:
// timm.create_model(name, pretrained=False, dynamic_img_size=True)): the
// plain ViTs (vit_base_patch16_224: no LayerScale, the class token's
// position in pos_embed; _384 differs only in timm's default image size)
// and the DINOv2 ones (our vit_*14 and _reg4 presets), their positions
// resampled as timm's dynamic_img_size does (antialiased bicubic). As for
// our presets, the grid is the image size over the patch
// (timm.create_model(name, img_size=S) holds the same tensors).
typedef struct TimmVit {
    const char *name;
    char letter;
    int patch, registers, layer_scale;
} TimmVit;

static const TimmVit timm_vits[] = {
    {"timm/vit_tiny_patch16_224", 't', 16, 0, 0},  {"timm/vit_tiny_patch16_384", 't', 16, 0, 0},
    {"timm/vit_small_patch16_224", 's', 16, 0, 0}, {"timm/vit_small_patch16_384", 's', 16, 0, 0},
    {"timm/vit_base_patch16_224", 'b', 16, 0, 0},  {"timm/vit_base_patch16_384", 'b', 16, 0, 0},
    {"timm/vit_large_patch16_224", 'l', 16, 0, 0}, {"timm/vit_large_patch16_384", 'l', 16, 0, 0},
    {"timm/vit_small_patch14_dinov2", 's', 14, 0, 1},
    {"timm/vit_base_patch14_dinov2", 'b', 14, 0, 1},
    {"timm/vit_large_patch14_dinov2", 'l', 14, 0, 1},
    {"timm/vit_giant_patch14_dinov2", 'g', 14, 0, 1},
    {"timm/vit_small_patch14_reg4_dinov2", 's', 14, 4, 1},
    {"timm/vit_base_patch14_reg4_dinov2", 'b', 14, 4, 1},
    {"timm/vit_large_patch14_reg4_dinov2", 'l', 14, 4, 1},
    {"timm/vit_giant_patch14_reg4_dinov2", 'g', 14, 4, 1},
};
enum { TIMM_VIT_COUNT = sizeof timm_vits / sizeof timm_vits[0] };

static const TimmVit *find_timm(const char *name) {
    for (int i = 0; i < TIMM_VIT_COUNT; i++)
        if (strcmp(timm_vits[i].name, name) == 0) return &timm_vits[i];
    return NULL;
}

// The MLP width of a DINOv2 size: 4 D, or for SwiGLU DINOv2's
// SwiGLUFFNFused width int(2/3 * 4 D) rounded up to a multiple of 8 (4096
// for ViT-g's 1536).
static int dinov2_mlp_hidden(const VitSize *size) {
    const int gelu = 4 * size->embed_dim;
    return size->swiglu ? (2 * gelu / 3 + 7) / 8 * 8 : gelu;
}

const char *vit_pool_name(VitPool pool) { return pool == VIT_POOL_CLS ? "cls" : "mean"; }

int vit_pool_parse(const char *name, VitPool *pool, ErrorMessage *err) {
    if (strcmp(name, "mean") == 0) *pool = VIT_POOL_MEAN;
    else if (strcmp(name, "cls") == 0) *pool = VIT_POOL_CLS;
    else return error_set(err, "unknown ViT pooling '%s' (mean, cls)", name);
    return 0;
}

// Parses "vit_<size><patch>[_reg4]" or a timm name (*timm set, else NULL);
// 0 when it is neither.
static int parse_preset(const char *name, const VitSize **size, int *patch, int *registers,
                        const TimmVit **timm) {
    *timm = find_timm(name);
    if (*timm) {
        for (int i = 0; i < VIT_SIZE_COUNT; i++)
            if (vit_sizes[i].letter == (*timm)->letter) *size = &vit_sizes[i];
        *patch = (*timm)->patch;
        *registers = (*timm)->registers;
        return 1;
    }
    char letter = 0, tail[16] = "";
    int p = 0, consumed = 0;
    if (sscanf(name, "vit_%c%d%n", &letter, &p, &consumed) != 2) return 0;
    snprintf(tail, sizeof tail, "%s", name + consumed);
    if (tail[0] && strcmp(tail, "_reg4") != 0) return 0;
    if (p != 14 && p != 16) return 0;
    for (int i = 0; i < VIT_SIZE_COUNT; i++)
        if (vit_sizes[i].letter == letter) *size = &vit_sizes[i];
    if (!*size || (letter == 'g' && p != 14)) return 0;
    *patch = p;
    *registers = tail[0] ? 4 : 0;
    return 1;
}

static const Dinov3Size *find_dinov3(const char *name) {
    for (int i = 0; i < DINOV3_SIZE_COUNT; i++)
        if (strcmp(dinov3_sizes[i].name, name) == 0) return &dinov3_sizes[i];
    return NULL;
}

int vit_is_preset_name(const char *name) {
    const VitSize *size = NULL;
    const TimmVit *timm;
    int patch, registers;
    return parse_preset(name, &size, &patch, &registers, &timm) || find_dinov3(name) != NULL;
}

// The DINOv3 preset a geometry is, or NULL.
static const Dinov3Size *dinov3_of(const VitConfig *c) {
    if (c->patch_size != DINOV3_PATCH || c->register_tokens != DINOV3_REGISTERS) return NULL;
    for (int i = 0; i < DINOV3_SIZE_COUNT; i++) {
        const Dinov3Size *size = &dinov3_sizes[i];
        if (size->embed_dim == c->embed_dim && size->depth == c->depth &&
            size->heads == c->heads && size->mlp_hidden == c->mlp_hidden &&
            size->swiglu == c->swiglu)
            return size;
    }
    return NULL;
}

void vit_config_name(VitConfig *config) {
    if (config->rope) {
        const Dinov3Size *size = dinov3_of(config);
        if (size) snprintf(config->name, sizeof config->name, "%s", size->name);
        else snprintf(config->name, sizeof config->name, "dinov3_d%d_l%d_p%d", config->embed_dim,
                      config->depth, config->patch_size);
        return;
    }
    for (int i = 0; i < VIT_SIZE_COUNT; i++) {
        const VitSize *size = &vit_sizes[i];
        if (size->embed_dim == config->embed_dim && size->depth == config->depth &&
            size->heads == config->heads && config->mlp_hidden == dinov2_mlp_hidden(size) &&
            config->swiglu == size->swiglu) {
            snprintf(config->name, sizeof config->name, "vit_%c%d%s", size->letter,
                     config->patch_size, config->register_tokens == 4 ? "_reg4" : "");
            if (config->register_tokens == 0 || config->register_tokens == 4) return;
        }
    }
    snprintf(config->name, sizeof config->name, "vit_d%d_l%d_p%d", config->embed_dim,
             config->depth, config->patch_size);
}

// A DINOv3 preset: RoPE instead of positions, so any multiple of the patch
// size is native.
static void dinov3_preset(const Dinov3Size *size, VitConfig *config) {
    *config = (VitConfig){
        .patch_size = DINOV3_PATCH,
        .embed_dim = size->embed_dim,
        .depth = size->depth,
        .heads = size->heads,
        .mlp_hidden = size->mlp_hidden,
        .register_tokens = DINOV3_REGISTERS,
        .layer_scale = 1,
        .layer_scale_init = 1e-5f,
        .norm_eps = 1e-5f,  // DINOv3's "layernormbf16"
        .pool = VIT_POOL_CLS,
        .rope = 1,
        .rope_base = 100.0f,
        .rope_rescale = 2.0f,
        .swiglu = size->swiglu,
        .qkv_bias = VIT_QKV_BIAS_NO_KEY,
    };
    snprintf(config->name, sizeof config->name, "%s", size->name);
}

int vit_config_preset(const char *name, int image_size, VitConfig *config, ErrorMessage *err) {
    const VitSize *size = NULL;
    const TimmVit *timm = NULL;
    const Dinov3Size *dinov3 = find_dinov3(name);
    int patch, registers;
    if (!dinov3 && !parse_preset(name, &size, &patch, &registers, &timm))
        return error_set(err, "unknown ViT '%s' (vit_t14, vit_t16, vit_s14, vit_s16, vit_b14, "
                              "vit_b16, vit_l14, vit_l16, vit_g14, each also with _reg4; "
                              "timm/vit_base_patch16_224, timm/vit_base_patch14_dinov2, ...; "
                              "dinov3/vitt16, dinov3/vits16, dinov3/vits16plus, dinov3/vitb16, "
                              "dinov3/vitl16, dinov3/vitl16plus, dinov3/vith16plus, ...)", name);
    if (dinov3) patch = DINOV3_PATCH;
    if (image_size < patch || image_size % patch != 0)
        return error_set(err, "%s: image size %d is not a multiple of the patch size %d", name,
                         image_size, patch);
    if (dinov3) {
        dinov3_preset(dinov3, config);
        return 0;
    }
    *config = (VitConfig){
        .patch_size = patch,
        .embed_dim = size->embed_dim,
        .depth = size->depth,
        .heads = size->heads,
        .mlp_hidden = dinov2_mlp_hidden(size),
        .register_tokens = registers,
        .class_pos = registers == 0,
        .pos_grid = image_size / patch,
        .layer_scale = 1,
        .layer_scale_init = 1e-5f,
        .norm_eps = 1e-6f,
        .drop_path_rate = 0.0f,
        .pos_interpolation = registers ? VIT_POS_INTERP_ANTIALIAS : VIT_POS_INTERP_OFFSET,
        .pool = VIT_POOL_MEAN,
        .swiglu = size->swiglu,
    };
    if (timm) {
        config->layer_scale = timm->layer_scale;
        config->layer_scale_init = timm->layer_scale ? 1e-5f : 0.0f;
        config->pos_interpolation = VIT_POS_INTERP_ANTIALIAS;
    }
    snprintf(config->name, sizeof config->name, "%s", name);
    return 0;
}

int vit_config_check(const VitConfig *c, ErrorMessage *err) {
    if (c->patch_size < 1 || c->embed_dim < 1 || c->depth < 1 || c->heads < 1 ||
        c->mlp_hidden < 1 || c->register_tokens < 0 || (!c->rope && c->pos_grid < 1))
        return error_set(err, "ViT: invalid geometry (patch %d, dim %d, depth %d, %d heads, mlp "
                              "%d, %d registers, grid %d)", c->patch_size, c->embed_dim, c->depth,
                         c->heads, c->mlp_hidden, c->register_tokens, c->pos_grid);
    if (c->embed_dim % c->heads != 0)
        return error_set(err, "ViT: %d heads do not divide the width %d", c->heads, c->embed_dim);
    if (c->rope && (c->embed_dim / c->heads) % 4 != 0)
        return error_set(err, "ViT: RoPE needs a head width that is a multiple of 4 (width %d, "
                              "%d heads)", c->embed_dim, c->heads);
    if (c->rope && !(c->rope_base > 0.0f && c->rope_rescale >= 0.0f &&
                     (c->rope_rescale == 0.0f || c->rope_rescale >= 1.0f)))
        return error_set(err, "ViT: RoPE base %g must be positive, its rescale %g 0 (off) or >= 1",
                         (double)c->rope_base, (double)c->rope_rescale);
    if (!(c->drop_path_rate >= 0.0f && c->drop_path_rate < 1.0f))
        return error_set(err, "ViT: drop path rate %g outside [0, 1)", (double)c->drop_path_rate);
    return 0;
}
