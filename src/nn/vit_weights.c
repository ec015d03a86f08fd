// ViT weight files: the timm, DINOv2 and transformers namings mapped onto
// our (timm) parameter table, architecture detection, and timm export (see
// vit_weights.h).
#include "nn/vit_weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/weights.h"
#include "util/half.h"

#define VIT_MAX_BLOCKS 256
#define VIT_KEY SAFETENSORS_MAX_NAME

typedef enum VitNaming { NAMING_TIMM, NAMING_DINOV2, NAMING_HF } VitNaming;

static const char *const naming_names[] = {"timm", "DINOv2", "transformers"};

// How a file lays out one ViT.
typedef struct VitLayout {
    VitNaming naming;
    char prefix[160];             // before every key ("", "backbone.", "dinov2.", ...)
    int chunked;                  // DINOv2's blocks.C.N
    int chunk_of[VIT_MAX_BLOCKS]; // chunk C of block N
    int depth;
    int registers;
    int file_class_pos;           // the file's positions include the class token's
} VitLayout;

// Our name prefix -> the file's, per naming (first match wins; "" keeps the name).
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
static const char *const hf_qkv[3] = {"attention.attention.query.", "attention.attention.key.",
                                      "attention.attention.value."};

// File keys that are not part of a backbone: a classifier, DINOv2's mask token.
static int is_skipped(const VitLayout *layout, const char *name) {
    if (layout->naming == NAMING_HF) return strcmp(name, "embeddings.mask_token") == 0;
    return strcmp(name, "mask_token") == 0 || strncmp(name, "head.", 5) == 0;
}

static const SafeTensor *find(const SafeTensors *file, const char *prefix, const char *name) {
    char key[VIT_KEY];
    if (snprintf(key, sizeof key, "%s%s", prefix, name) >= (int)sizeof key) return NULL;
    return safetensors_find(file, key);
}

static const char *rename_key(const Rename *table, const char *name, char *out, size_t size) {
    for (int i = 0; table && table[i].ours; i++) {
        const size_t length = strlen(table[i].ours);
        if (strncmp(name, table[i].ours, length) == 0) {
            snprintf(out, size, "%s%s", table[i].file, name + length);
            return out;
        }
    }
    snprintf(out, size, "%s", name);
    return out;
}

// The file key(s) of our parameter `name` (prefix included); returns how
// many tensors stack into it: 3 for transformers' query, key, value.
static int source_keys(const VitLayout *layout, const char *name, char keys[3][VIT_KEY]) {
    int block, consumed = 0;
    char renamed[192];
    if (sscanf(name, "blocks.%d.%n", &block, &consumed) == 1 && consumed > 0) {
        const char *rest = name + consumed;
        char head[64];
        if (layout->naming == NAMING_HF) snprintf(head, sizeof head, "encoder.layer.%d.", block);
        else if (layout->chunked && block < VIT_MAX_BLOCKS)
            snprintf(head, sizeof head, "blocks.%d.%d.", layout->chunk_of[block], block);
        else snprintf(head, sizeof head, "blocks.%d.", block);
        if (layout->naming == NAMING_HF && strncmp(rest, "attn.qkv.", 9) == 0) {
            for (int part = 0; part < 3; part++)
                snprintf(keys[part], VIT_KEY, "%s%s%s%s", layout->prefix, head, hf_qkv[part],
                         rest + 9);
            return 3;
        }
        rename_key(layout->naming == NAMING_HF ? hf_block : NULL, rest, renamed, sizeof renamed);
        snprintf(keys[0], VIT_KEY, "%s%s%s", layout->prefix, head, renamed);
        return 1;
    }
    const Rename *table = layout->naming == NAMING_HF       ? hf_top
                          : layout->naming == NAMING_DINOV2 ? dinov2_top
                                                            : NULL;
    rename_key(table, name, renamed, sizeof renamed);
    snprintf(keys[0], VIT_KEY, "%s%s", layout->prefix, renamed);
    return 1;
}

// ---- layout detection --------------------------------------------------------------------

static int is_square(int64_t n, int64_t *side) {
    const int64_t root = (int64_t)llround(sqrt((double)n));
    if (root < 1 || root * root != n) return 0;
    *side = root;
    return 1;
}

static const SafeTensor *block_tensor(const SafeTensors *file, const VitLayout *layout,
                                      int block, const char *ours) {
    char keys[3][VIT_KEY], name[VIT_KEY];
    snprintf(name, sizeof name, "blocks.%d.%s", block, ours);
    source_keys(layout, name, keys);
    return safetensors_find(file, keys[0]);
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
        } else if (!block_tensor(file, layout, block, "norm1.weight")) {
            return;
        }
        layout->depth = block + 1;
    }
}

static int detect_layout(const SafeTensors *file, const char *prefix, VitLayout *layout,
                         ErrorMessage *err) {
    memset(layout, 0, sizeof *layout);
    const char *hf_prefixes[] = {"", "dinov2."};
    for (int i = 0; i < 2 && layout->naming != NAMING_HF; i++) {
        snprintf(layout->prefix, sizeof layout->prefix, "%s%s", prefix, hf_prefixes[i]);
        if (find(file, layout->prefix, "embeddings.cls_token")) layout->naming = NAMING_HF;
    }
    if (layout->naming != NAMING_HF) {
        snprintf(layout->prefix, sizeof layout->prefix, "%s", prefix);
        if (!find(file, prefix, "cls_token"))
            return error_set(err, "not a ViT: no \"%scls_token\" or \"%sembeddings.cls_token\" "
                                  "(%d tensors, the first \"%s\")", prefix, prefix, file->count,
                             file->count ? file->tensors[0].name : "");
        layout->chunked = find(file, prefix, "blocks.0.0.norm1.weight") != NULL;
        layout->naming = layout->chunked || find(file, prefix, "register_tokens") ||
                                 find(file, prefix, "mask_token")
                             ? NAMING_DINOV2
                             : NAMING_TIMM;
    }
    count_blocks(file, layout);
    if (layout->depth < 1)
        return error_set(err, "%s ViT without blocks under \"%s\"", naming_names[layout->naming],
                         prefix);
    char keys[3][VIT_KEY];
    source_keys(layout, "reg_token", keys);
    const SafeTensor *registers = safetensors_find(file, keys[0]);
    layout->registers = registers && registers->rank == 3 ? (int)registers->shape[1] : 0;
    source_keys(layout, "pos_embed", keys);
    const SafeTensor *pos = safetensors_find(file, keys[0]);
    int64_t side;
    if (!pos || pos->rank != 3) return error_set(err, "ViT without a rank-3 \"%s\"", keys[0]);
    // DINOv2 and transformers always keep the class token's position; timm
    // does unless the grid alone is a square (its no_embed_class models).
    layout->file_class_pos =
        layout->naming != NAMING_TIMM || !is_square(pos->shape[1], &side);
    return 0;
}

int vit_weights_detect(const SafeTensors *file, const char *prefix) {
    return find(file, prefix, "cls_token") || find(file, prefix, "embeddings.cls_token") ||
           find(file, prefix, "dinov2.embeddings.cls_token");
}

static const SafeTensor *layout_tensor(const SafeTensors *file, const VitLayout *layout,
                                       const char *ours) {
    char keys[3][VIT_KEY];
    source_keys(layout, ours, keys);
    return safetensors_find(file, keys[0]);
}

int vit_config_from_weights(const SafeTensors *file, const char *prefix, VitConfig *config,
                            ErrorMessage *err) {
    VitLayout layout;
    if (detect_layout(file, prefix, &layout, err)) return -1;
    const SafeTensor *cls = layout_tensor(file, &layout, "cls_token");
    const SafeTensor *patch = layout_tensor(file, &layout, "patch_embed.proj.weight");
    const SafeTensor *pos = layout_tensor(file, &layout, "pos_embed");
    const SafeTensor *fc1 = block_tensor(file, &layout, 0, "mlp.fc1.weight");
    if (!cls || cls->rank != 3 || !patch || patch->rank != 4 || patch->shape[1] != 3 ||
        patch->shape[2] != patch->shape[3] || !fc1 || fc1->rank != 2)
        return error_set(err, "%s ViT under \"%s\": the class token, patch embedding (D, 3, p, "
                              "p) or mlp.fc1 weight is missing or misshapen",
                         naming_names[layout.naming], prefix);
    int64_t grid;
    const int64_t positions = pos->shape[1] - (layout.file_class_pos ? 1 : 0);
    if (!is_square(positions, &grid))
        return error_set(err, "ViT position embeddings: %lld positions are not a square grid",
                         (long long)positions);
    memset(config, 0, sizeof *config);
    config->embed_dim = (int)cls->shape[2];
    config->patch_size = (int)patch->shape[2];
    config->depth = layout.depth;
    config->mlp_hidden = (int)fc1->shape[0];
    config->register_tokens = layout.registers;
    // timm's convention: the class token's position is kept only without registers.
    config->class_pos = layout.file_class_pos && layout.registers == 0;
    config->pos_grid = (int)grid;
    config->layer_scale = block_tensor(file, &layout, 0, "ls1.gamma") != NULL;
    config->layer_scale_init = 1e-5f;
    config->norm_eps = 1e-6f;
    const char *heads = safetensors_metadata(file, "num_heads");
    config->heads = heads ? atoi(heads) : config->embed_dim / 64;
    if (config->heads < 1) config->heads = 1;
    config->pos_interpolation =
        layout.registers ? VIT_POS_INTERP_ANTIALIAS : VIT_POS_INTERP_OFFSET;
    const char *interpolation = safetensors_metadata(file, "pos_interpolation");
    if (interpolation &&
        vit_pos_interpolation_parse(interpolation, &config->pos_interpolation, err))
        return -1;
    const char *pool = safetensors_metadata(file, "pool");
    config->pool = VIT_POOL_MEAN;
    if (pool && vit_pool_parse(pool, &config->pool, err)) return -1;
    vit_config_name(config);
    return vit_config_check(config, err);
}

// ---- loading -----------------------------------------------------------------------------

static void to_float(const SafeTensors *file, const SafeTensor *tensor, float *out) {
    const void *data = safetensors_data(file, tensor);
    const size_t n = (size_t)safe_tensor_elements(tensor);
    if (tensor->dtype == SAFE_F32) memcpy(out, data, n * sizeof *out);
    else if (tensor->dtype == SAFE_F16) convert_f16_to_f32(data, out, n);
    else convert_bf16_to_f32(data, out, n);
}

// Checks that `key` exists with the expected shape and a float dtype.
static const SafeTensor *expect_tensor(const SafeTensors *file, const char *key,
                                       const int64_t *shape, int rank, ErrorMessage *err) {
    const SafeTensor *tensor = safetensors_find(file, key);
    if (!tensor) {
        error_set(err, "weights do not match the model: \"%s\" is missing", key);
        return NULL;
    }
    if (tensor->dtype != SAFE_F32 && tensor->dtype != SAFE_F16 && tensor->dtype != SAFE_BF16) {
        error_set(err, "weights do not match the model: \"%s\" has dtype %s (F32, F16 or BF16 "
                       "needed)", key, safe_dtype_name(tensor->dtype));
        return NULL;
    }
    int same = tensor->rank == rank;
    for (int d = 0; same && d < rank; d++) same = tensor->shape[d] == shape[d];
    if (!same) {
        char want[96], got[96];
        weights_format_shape(shape, rank, want, sizeof want);
        weights_format_shape(tensor->shape, tensor->rank, got, sizeof got);
        error_set(err, "weights do not match the model: \"%s\" is %s in the file, the model "
                       "needs %s", key, got, want);
        return NULL;
    }
    return tensor;
}

// pos_embed into torch (the model's rows): the class token's position when
// the model keeps one, then the patch grid, resized when the file's grid
// differs from the model's as LightlyTrain's interpolate_pos_embed_hook does
// (bicubic to the new size, no antialias); marks the tensor used.
static int read_positions(const SafeTensors *file, const VitLayout *layout, const Vit *model,
                          const Parameter *param, float *torch, char *used, ErrorMessage *err) {
    const VitConfig *c = &model->config;
    const size_t dim = (size_t)c->embed_dim;
    char keys[3][VIT_KEY];
    source_keys(layout, param->name, keys);
    const SafeTensor *tensor = safetensors_find(file, keys[0]);
    int64_t grid = 0;
    const int64_t rows = tensor && tensor->rank == 3 ? tensor->shape[1] : 0;
    const int file_class = layout->file_class_pos;
    if (!tensor || tensor->rank != 3 || tensor->shape[0] != 1 || tensor->shape[2] != (int64_t)dim ||
        !is_square(rows - file_class, &grid) || (c->class_pos && !file_class)) {
        // Not a (1, [1 +] M^2, D) grid this model can take: the shape message,
        // or (the shape fits) the missing class-token position.
        int64_t shape[3] = {1, (int64_t)c->pos_grid * c->pos_grid + file_class, (int64_t)dim};
        if (!expect_tensor(file, keys[0], shape, 3, err)) return -1;
        return error_set(err, "weights do not match the model: \"%s\" holds no class-token "
                              "position, %s needs one", keys[0], c->name);
    }
    if (!expect_tensor(file, keys[0], tensor->shape, 3, err)) return -1;  // the dtype check
    used[tensor - file->tensors] = 1;
    float *all = malloc((size_t)rows * dim * sizeof *all);
    float *matrix = NULL;
    if (!all) return error_set(err, "out of memory");
    to_float(file, tensor, all);
    const float *patches = all + (file_class ? dim : 0);
    float *out = torch + (c->class_pos ? dim : 0);
    if (c->class_pos) memcpy(torch, all, dim * sizeof *torch);
    const size_t from = (size_t)(grid * grid), to = (size_t)c->pos_grid * c->pos_grid;
    int status = 0;
    if (grid == c->pos_grid) {
        memcpy(out, patches, to * dim * sizeof *out);
    } else {
        matrix = malloc(to * from * sizeof *matrix);
        status = matrix ? vit_pos_grid_matrix(VIT_POS_INTERP_BICUBIC, (int)grid, c->pos_grid,
                                              c->pos_grid, matrix, err)
                        : error_set(err, "out of memory");
        for (size_t p = 0; !status && p < to; p++)
            for (size_t d = 0; d < dim; d++) {
                double total = 0.0;
                for (size_t q = 0; q < from; q++)
                    total += (double)matrix[p * from + q] * patches[q * dim + d];
                out[p * dim + d] = (float)total;
            }
    }
    free(matrix);
    free(all);
    return status;
}

// One parameter in torch layout from the file into torch (count floats);
// marks the tensors used.
static int read_parameter(const SafeTensors *file, const VitLayout *layout, const Vit *model,
                          const Parameter *param, float *torch, char *used, ErrorMessage *err) {
    if (strcmp(param->name, "pos_embed") == 0)
        return read_positions(file, layout, model, param, torch, used, err);
    char keys[3][VIT_KEY];
    const int parts = source_keys(layout, param->name, keys);
    int64_t shape[PARAM_MAX_RANK];
    for (int d = 0; d < param->rank; d++) shape[d] = param->torch_shape[d];
    // The class token's position is in the file but not in the model: it is
    // folded into the class token.
    const int fold = layout->file_class_pos && !model->config.class_pos;
    if (parts == 3) shape[0] /= 3;
    const size_t dim = (size_t)model->config.embed_dim;
    for (int part = 0; part < parts; part++) {
        const SafeTensor *tensor = expect_tensor(file, keys[part], shape, param->rank, err);
        if (!tensor) return -1;
        used[tensor - file->tensors] = 1;
        to_float(file, tensor, torch + part * (param->count / parts));
    }
    if (fold && strcmp(param->name, "cls_token") == 0) {
        const SafeTensor *pos = layout_tensor(file, layout, "pos_embed");
        if (!pos) return error_set(err, "weights do not match the model: no position embeddings");
        float *row = malloc((size_t)safe_tensor_elements(pos) * sizeof *row);
        if (!row) return error_set(err, "out of memory");
        to_float(file, pos, row);
        for (size_t c = 0; c < dim; c++) torch[c] += row[c];
        free(row);
    }
    return 0;
}

int vit_load_from(Vit *model, const SafeTensors *file, const char *prefix, ErrorMessage *err) {
    VitLayout layout;
    if (detect_layout(file, prefix, &layout, err)) return -1;
    if (layout.depth != model->config.depth)
        return error_set(err, "weights do not match the model: %d blocks in the file, %d in %s",
                         layout.depth, model->config.depth, model->config.name);
    if (layout.registers != model->config.register_tokens)
        return error_set(err, "weights do not match the model: %d register tokens in the file, "
                              "%d in %s", layout.registers, model->config.register_tokens,
                         model->config.name);
    const ParameterSet *params = &model->params;
    size_t largest = 1;
    for (int i = 0; i < params->count; i++)
        if (params->params[i].count > largest) largest = params->params[i].count;
    float *torch = malloc(largest * sizeof *torch), *ours = malloc(largest * sizeof *ours);
    char *used = calloc((size_t)file->count + 1, 1);
    int status = torch && ours && used ? 0 : error_set(err, "out of memory loading weights");
    // Check everything first: a failing file changes no parameter.
    for (int i = 0; !status && i < params->count; i++)
        status = read_parameter(file, &layout, model, &params->params[i], torch, used, err);
    for (int t = 0; !status && t < file->count; t++) {
        const char *name = file->tensors[t].name;
        const size_t length = strlen(layout.prefix);
        if (used[t] || strncmp(name, layout.prefix, length) != 0) continue;
        if (!is_skipped(&layout, name + length))
            status = error_set(err, "weights do not match the model: \"%s\" is not part of %s",
                               name, model->config.name);
    }
    for (int i = 0; !status && i < params->count; i++) {
        const Parameter *param = &params->params[i];
        status = read_parameter(file, &layout, model, param, torch, used, err);
        weights_from_torch_layout(param, torch, ours);
        model->backend->op.upload(model->backend, param->value, ours,
                                  param->count * sizeof *ours);
    }
    free(torch);
    free(ours);
    free(used);
    return status ? error_prefix(err, "%s weights", naming_names[layout.naming]) : 0;
}

int vit_load(Vit *model, const char *path, ErrorMessage *err) {
    SafeTensors file;
    if (safetensors_read(path, &file, err)) return -1;
    const int status = vit_load_from(model, &file, "", err);
    safetensors_free(&file);
    return status ? error_prefix(err, "%s", path) : 0;
}

int vit_save(const Vit *model, const char *path, ErrorMessage *err) {
    char heads[16];
    snprintf(heads, sizeof heads, "%d", model->config.heads);
    const SafeMetadata metadata[] = {
        {.key = "format", .value = "pt"},
        {.key = "num_heads", .value = heads},
        {.key = "pos_interpolation",
         .value = (char *)vit_pos_interpolation_name(model->config.pos_interpolation)},
        {.key = "pool", .value = (char *)vit_pool_name(model->config.pool)},
    };
    return weights_save_with_metadata(path, &model->params, NULL, 0, metadata,
                                      (int)(sizeof metadata / sizeof metadata[0]), err);
}
