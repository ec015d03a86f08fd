// ViT weight namings (see vit_names.h and vit_weights.h): detection of the
// naming a file uses and the file key(s) of each of our parameters.
#include "nn/vit_names.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const naming_names[] = {"timm",   "DINOv2",              "transformers",
                                           "DINOv3", "transformers DINOv3", "timm Eva"};

const char *vit_naming_name(VitNaming naming) { return naming_names[naming]; }

// Our name prefix -> the file's, per naming (first match wins; no match keeps the name).
typedef struct Rename {
    const char *ours, *file;
} Rename;

static const Rename hf_top[] = {
    {"cls_token", "embeddings.cls_token"},
    {"reg_token", "embeddings.register_tokens"},
    {"pos_embed", "embeddings.position_embeddings"},
    {"patch_embed.proj.", "embeddings.patch_embeddings.projection."},
    {"norm.", "layernorm."},
    {NULL, NULL},
};
static const Rename hf_block[] = {
    {"attn.proj.", "attention.output.dense."},
    {"ls1.gamma", "layer_scale1.lambda1"},
    {"ls2.gamma", "layer_scale2.lambda1"},
    {NULL, NULL},
};
static const Rename dinov2_top[] = {{"reg_token", "register_tokens"}, {NULL, NULL}};
static const Rename dinov3_top[] = {{"reg_token", "storage_tokens"}, {NULL, NULL}};
static const Rename hf_dinov3_top[] = {
    {"cls_token", "embeddings.cls_token"},
    {"reg_token", "embeddings.register_tokens"},
    {"patch_embed.proj.", "embeddings.patch_embeddings."},
    {NULL, NULL},
};
static const Rename hf_dinov3_block[] = {
    {"attn.proj.", "attention.o_proj."},
    {"ls1.gamma", "layer_scale1.lambda1"},
    {"ls2.gamma", "layer_scale2.lambda1"},
    {"mlp.fc1.", "mlp.up_proj."},
    {"mlp.fc2.", "mlp.down_proj."},
    {NULL, NULL},
};
static const Rename eva_block[] = {{"ls1.gamma", "gamma_1"}, {"ls2.gamma", "gamma_2"}, {NULL, NULL}};

static const char *const hf_qkv[3] = {"attention.attention.query.", "attention.attention.key.",
                                      "attention.attention.value."};
static const char *const hf_dinov3_qkv[3] = {"attention.q_proj.", "attention.k_proj.",
                                             "attention.v_proj."};
// SwiGLU's gate and value halves of our packed mlp.fc1, and fc2, per naming.
static const char *const dinov3_swiglu[3] = {"mlp.w1.", "mlp.w2.", "mlp.w3."};
static const char *const hf_dinov3_swiglu[3] = {"mlp.gate_proj.", "mlp.up_proj.",
                                                "mlp.down_proj."};
static const char *const eva_swiglu[3] = {"mlp.fc1_g.", "mlp.fc1_x.", "mlp.fc2."};
// DINOv2's ViT-g SwiGLU, packed as ours (gate rows over value rows): only renamed.
static const Rename dinov2_packed_swiglu[] = {
    {"mlp.fc1.", "mlp.w12."}, {"mlp.fc2.", "mlp.w3."}, {NULL, NULL}};
static const Rename hf_packed_swiglu[] = {
    {"mlp.fc1.", "mlp.weights_in."}, {"mlp.fc2.", "mlp.weights_out."}, {NULL, NULL}};

// The renames of a packed SwiGLU MLP in a naming that has its own names for it, or NULL.
static const Rename *packed_swiglu_table(VitNaming naming) {
    return naming == NAMING_DINOV2 ? dinov2_packed_swiglu
           : naming == NAMING_HF   ? hf_packed_swiglu
                                   : NULL;
}

static const SafeTensor *find(const SafeTensors *file, const char *prefix, const char *name) {
    char key[VIT_KEY];
    if (snprintf(key, sizeof key, "%s%s", prefix, name) >= (int)sizeof key) return NULL;
    return safetensors_find(file, key);
}

static void rename_key(const Rename *table, const char *name, char *out, size_t size) {
    for (int i = 0; table && table[i].ours; i++) {
        const size_t length = strlen(table[i].ours);
        if (strncmp(name, table[i].ours, length) == 0) {
            snprintf(out, size, "%s%s", table[i].file, name + length);
            return;
        }
    }
    snprintf(out, size, "%s", name);
}

static const Rename *top_table(VitNaming naming) {
    switch (naming) {
    case NAMING_HF: return hf_top;
    case NAMING_DINOV2: return dinov2_top;
    case NAMING_DINOV3: return dinov3_top;
    case NAMING_HF_DINOV3: return hf_dinov3_top;
    default: return NULL;
    }
}

static const Rename *block_table(VitNaming naming) {
    switch (naming) {
    case NAMING_HF: return hf_block;
    case NAMING_HF_DINOV3: return hf_dinov3_block;
    case NAMING_EVA: return eva_block;
    default: return NULL;
    }
}

// Fills `parts` keys head + names[part] + leaf.
static void split_source(VitSource *source, int parts, const char *head,
                         const char *const *names, const char *leaf) {
    source->parts = parts;
    for (int part = 0; part < parts; part++)
        snprintf(source->keys[part], VIT_KEY, "%s%s%s", head, names[part], leaf);
}

// A block parameter (`rest` after "blocks.N."), head = prefix + the file's block path.
static void block_source(const VitLayout *layout, const char *head, const char *rest,
                         VitSource *source) {
    const VitNaming naming = layout->naming;
    const int qkv = strncmp(rest, "attn.qkv.", 9) == 0, bias = qkv && !strcmp(rest + 9, "bias");
    if (qkv && naming == NAMING_HF) return split_source(source, 3, head, hf_qkv, rest + 9);
    if (qkv && naming == NAMING_HF_DINOV3) {
        split_source(source, 3, head, hf_dinov3_qkv, rest + 9);
        if (bias && !layout->key_bias) source->keys[1][0] = '\0';  // no key bias: zero
        return;
    }
    if (bias && naming == NAMING_EVA) {
        const char *const eva_bias[3] = {"attn.q_bias", "", "attn.v_bias"};
        split_source(source, 3, head, eva_bias, "");
        source->keys[1][0] = '\0';
        return;
    }
    if (bias && naming == NAMING_DINOV3 && layout->bias_mask)
        snprintf(source->mask, VIT_KEY, "%sattn.qkv.bias_mask", head);
    const char *const *swiglu = naming == NAMING_DINOV3      ? dinov3_swiglu
                                : naming == NAMING_HF_DINOV3 ? hf_dinov3_swiglu
                                : naming == NAMING_EVA       ? eva_swiglu
                                                             : NULL;
    if (layout->swiglu && swiglu && !strncmp(rest, "mlp.fc1.", 8))
        return split_source(source, 2, head, swiglu, rest + 8);
    if (layout->swiglu && swiglu && !strncmp(rest, "mlp.fc2.", 8))
        return split_source(source, 1, head, swiglu + 2, rest + 8);
    const Rename *table = block_table(naming);
    if (layout->swiglu && packed_swiglu_table(naming) && !strncmp(rest, "mlp.", 4))
        table = packed_swiglu_table(naming);
    char renamed[192];
    rename_key(table, rest, renamed, sizeof renamed);
    source->parts = 1;
    snprintf(source->keys[0], VIT_KEY, "%s%s", head, renamed);
}

void vit_names_source(const VitLayout *layout, const char *name, VitSource *source) {
    memset(source, 0, sizeof *source);
    int block, consumed = 0;
    if (sscanf(name, "blocks.%d.%n", &block, &consumed) == 1 && consumed > 0) {
        char head[256];  // prefix (< 160) + the block path
        if (layout->naming == NAMING_HF)
            snprintf(head, sizeof head, "%sencoder.layer.%d.", layout->prefix, block);
        else if (layout->naming == NAMING_HF_DINOV3)
            snprintf(head, sizeof head, "%s%s%d.", layout->prefix, layout->block_prefix, block);
        else if (layout->chunked && block < VIT_MAX_BLOCKS)
            snprintf(head, sizeof head, "%sblocks.%d.%d.", layout->prefix,
                     layout->chunk_of[block], block);
        else snprintf(head, sizeof head, "%sblocks.%d.", layout->prefix, block);
        return block_source(layout, head, name + consumed, source);
    }
    char renamed[192];
    rename_key(top_table(layout->naming), name, renamed, sizeof renamed);
    source->parts = 1;
    snprintf(source->keys[0], VIT_KEY, "%s%s", layout->prefix, renamed);
}

const SafeTensor *vit_names_tensor(const SafeTensors *file, const VitLayout *layout,
                                   const char *name) {
    VitSource source;
    vit_names_source(layout, name, &source);
    return safetensors_find(file, source.keys[0]);
}

const SafeTensor *vit_names_block_tensor(const SafeTensors *file, const VitLayout *layout,
                                         int block, const char *name) {
    char ours[VIT_KEY];
    snprintf(ours, sizeof ours, "blocks.%d.%s", block, name);
    return vit_names_tensor(file, layout, ours);
}

void vit_names_periods_key(const VitLayout *layout, char *key, size_t size) {
    if (layout->naming == NAMING_DINOV3) snprintf(key, size, "%srope_embed.periods", layout->prefix);
    else if (layout->naming == NAMING_TIMM && layout->rope)
        snprintf(key, size, "%srope.periods", layout->prefix);
    else if (size) key[0] = '\0';
}

// ---- detection -----------------------------------------------------------------------------

static int is_square(int64_t n) {
    const int64_t root = (int64_t)llround(sqrt((double)n));
    return root >= 1 && root * root == n;
}

// Chunk of each block for DINOv2's blocks.C.N, and the depth.
static void count_blocks(const SafeTensors *file, VitLayout *layout) {
    layout->depth = 0;
    for (int block = 0; block < VIT_MAX_BLOCKS; block++) {
        if (layout->chunked) {
            char key[64];
            int found = 0;
            for (int chunk = 0; chunk <= block && !found; chunk++) {
                snprintf(key, sizeof key, "blocks.%d.%d.norm1.weight", chunk, block);
                if (find(file, layout->prefix, key)) {
                    layout->chunk_of[block] = chunk;
                    found = 1;
                }
            }
            if (!found) return;
        } else if (!vit_names_block_tensor(file, layout, block, "norm1.weight")) {
            return;
        }
        layout->depth = block + 1;
    }
}

// The naming of a file with cls_token under prefix (not transformers').
static VitNaming timm_like_naming(const SafeTensors *file, const char *prefix) {
    if (find(file, prefix, "rope_embed.periods")) return NAMING_DINOV3;
    if (find(file, prefix, "blocks.0.0.norm1.weight") || find(file, prefix, "register_tokens") ||
        find(file, prefix, "mask_token") || find(file, prefix, "blocks.0.mlp.w12.weight"))
        return NAMING_DINOV2;
    if (!find(file, prefix, "pos_embed") &&
        (find(file, prefix, "blocks.0.gamma_1") || find(file, prefix, "blocks.0.attn.q_bias") ||
         find(file, prefix, "blocks.0.mlp.fc1_g.weight")))
        return NAMING_EVA;
    return NAMING_TIMM;
}

// transformers' namings: Dinov2Model (also under "dinov2.") or DINOv3ViTModel
// (blocks under "layer." (4.56) or "model.layer." (5.x)); 0 when neither.
static int detect_transformers(const SafeTensors *file, const char *prefix, VitLayout *layout) {
    const char *const dinov3_blocks[] = {"layer.", "model.layer."};
    for (int i = 0; i < 2; i++) {
        char key[64];
        snprintf(key, sizeof key, "%s0.norm1.weight", dinov3_blocks[i]);
        if (find(file, prefix, "embeddings.cls_token") && find(file, prefix, key)) {
            layout->naming = NAMING_HF_DINOV3;
            snprintf(layout->prefix, sizeof layout->prefix, "%s", prefix);
            snprintf(layout->block_prefix, sizeof layout->block_prefix, "%s", dinov3_blocks[i]);
            return 1;
        }
    }
    const char *const dinov2_prefixes[] = {"", "dinov2."};
    for (int i = 0; i < 2; i++) {
        snprintf(layout->prefix, sizeof layout->prefix, "%s%s", prefix, dinov2_prefixes[i]);
        if (find(file, layout->prefix, "embeddings.cls_token")) {
            layout->naming = NAMING_HF;
            return 1;
        }
    }
    return 0;
}

// SwiGLU: its halves by name, DINOv2's and transformers' packed names
// (mlp.w12, mlp.weights_in), or (packed, our and timm's layout) an mlp.fc1
// twice as wide as mlp.fc2's input.
static int detect_swiglu(const SafeTensors *file, const VitLayout *layout) {
    if (packed_swiglu_table(layout->naming)) {
        VitLayout packed = *layout;
        packed.swiglu = 1;
        if (vit_names_block_tensor(file, &packed, 0, "mlp.fc1.weight")) return 1;
    }
    const char *gate = layout->naming == NAMING_DINOV3      ? "blocks.0.mlp.w1.weight"
                       : layout->naming == NAMING_EVA       ? "blocks.0.mlp.fc1_g.weight"
                       : layout->naming == NAMING_HF_DINOV3 ? "0.mlp.gate_proj.weight"
                                                            : NULL;
    if (layout->naming == NAMING_HF_DINOV3) {
        char key[64];
        snprintf(key, sizeof key, "%s%s", layout->block_prefix, gate);
        return find(file, layout->prefix, key) != NULL;
    }
    if (gate) return find(file, layout->prefix, gate) != NULL;
    const SafeTensor *fc1 = vit_names_block_tensor(file, layout, 0, "mlp.fc1.weight");
    const SafeTensor *fc2 = vit_names_block_tensor(file, layout, 0, "mlp.fc2.weight");
    return fc1 && fc2 && fc1->rank == 2 && fc2->rank == 2 && fc1->shape[0] == 2 * fc2->shape[1];
}

// The qkv bias the names say (vit_weights.c checks a DINOv3 bias mask's values).
static int detect_qkv_bias(const SafeTensors *file, VitLayout *layout, ErrorMessage *err) {
    layout->qkv_bias = VIT_QKV_BIAS;
    if (layout->naming == NAMING_HF_DINOV3) {
        const char *const names[3] = {"q_proj", "k_proj", "v_proj"};
        int present[3];
        for (int i = 0; i < 3; i++) {
            char key[96];
            snprintf(key, sizeof key, "%s0.attention.%s.bias", layout->block_prefix, names[i]);
            present[i] = find(file, layout->prefix, key) != NULL;
        }
        if (present[0] != present[2] || (present[1] && !present[0]))
            return error_set(err, "transformers DINOv3 ViT with biases on %s%s%s only: a query "
                                  "and a value bias (and optionally a key bias) or none are "
                                  "supported", present[0] ? "q_proj " : "",
                             present[1] ? "k_proj " : "", present[2] ? "v_proj" : "");
        layout->key_bias = present[1];
        layout->qkv_bias = !present[0]  ? VIT_QKV_NO_BIAS
                           : present[1] ? VIT_QKV_BIAS
                                        : VIT_QKV_BIAS_NO_KEY;
    } else if (layout->naming == NAMING_EVA) {
        layout->qkv_bias = find(file, layout->prefix, "blocks.0.attn.q_bias") ? VIT_QKV_BIAS_NO_KEY
                                                                              : VIT_QKV_NO_BIAS;
    } else if (layout->naming == NAMING_TIMM || layout->naming == NAMING_DINOV3) {
        if (!vit_names_block_tensor(file, layout, 0, "attn.qkv.bias"))
            layout->qkv_bias = VIT_QKV_NO_BIAS;
        else if (layout->naming == NAMING_DINOV3 &&
                 find(file, layout->prefix, "blocks.0.attn.qkv.bias_mask")) {
            layout->bias_mask = 1;
            layout->qkv_bias = VIT_QKV_BIAS_NO_KEY;
        }
    }
    return 0;
}

const char *const VIT_CLASS_TOKEN_NAMES[VIT_CLASS_TOKEN_NAME_COUNT] = {
    "dinov2.embeddings.cls_token", "embeddings.cls_token", "cls_token"};

int vit_names_present(const SafeTensors *file, const char *prefix) {
    for (int i = 0; i < VIT_CLASS_TOKEN_NAME_COUNT; i++)
        if (find(file, prefix, VIT_CLASS_TOKEN_NAMES[i])) return 1;
    return 0;
}

int vit_names_detect(const SafeTensors *file, const char *prefix, VitLayout *layout,
                     ErrorMessage *err) {
    memset(layout, 0, sizeof *layout);
    if (!detect_transformers(file, prefix, layout)) {
        snprintf(layout->prefix, sizeof layout->prefix, "%s", prefix);
        if (!find(file, prefix, "cls_token"))
            return error_set(err, "not a ViT: no \"%scls_token\" or \"%sembeddings.cls_token\" "
                                  "(%d tensors, the first \"%s\")", prefix, prefix, file->count,
                             file->count ? file->tensors[0].name : "");
        layout->chunked = find(file, prefix, "blocks.0.0.norm1.weight") != NULL;
        layout->naming = timm_like_naming(file, prefix);
    }
    const VitNaming naming = layout->naming;
    if (naming == NAMING_DINOV3 && find(file, prefix, "cls_norm.weight"))
        return error_set(err, "DINOv3 ViT with an untied class-token norm (\"%scls_norm.weight\", "
                              "untie_cls_and_patch_norms) is not supported", prefix);
    count_blocks(file, layout);
    if (layout->depth < 1)
        return error_set(err, "%s ViT without blocks under \"%s\"", naming_names[naming], prefix);
    const SafeTensor *registers = vit_names_tensor(file, layout, "reg_token");
    layout->registers = registers && registers->rank == 3 ? (int)registers->shape[1] : 0;
    const SafeTensor *pos = vit_names_tensor(file, layout, "pos_embed");
    layout->rope = naming == NAMING_DINOV3 || naming == NAMING_HF_DINOV3 ||
                   naming == NAMING_EVA || (naming == NAMING_TIMM && !pos);
    layout->swiglu = detect_swiglu(file, layout);
    if (detect_qkv_bias(file, layout, err)) return -1;
    if (layout->rope) return 0;
    if (!pos || pos->rank != 3) {
        VitSource source;
        vit_names_source(layout, "pos_embed", &source);
        return error_set(err, "ViT without a rank-3 \"%s\"", source.keys[0]);
    }
    // DINOv2 and transformers always keep the class token's position; timm
    // does unless the grid alone is a square (its no_embed_class models).
    layout->file_class_pos = naming != NAMING_TIMM || !is_square(pos->shape[1]);
    return 0;
}

int vit_names_skipped(const VitLayout *layout, const SafeTensor *tensor, const char *name) {
    // An empty register tensor (transformers writes one for 0 registers).
    if (tensor->rank == 3 && tensor->shape[1] == 0 && layout->registers == 0) return 1;
    switch (layout->naming) {
    case NAMING_HF:
    case NAMING_HF_DINOV3: return strcmp(name, "embeddings.mask_token") == 0;
    case NAMING_DINOV3:
        return strcmp(name, "mask_token") == 0 || strncmp(name, "local_cls_norm.", 15) == 0;
    case NAMING_EVA: return strncmp(name, "head.", 5) == 0;
    default: return strcmp(name, "mask_token") == 0 || strncmp(name, "head.", 5) == 0;
    }
}
