// ViT weight files: the architecture read from a file in any of the
// namings of vit_names.h, loading onto our (timm) parameter table, and
// export in timm's naming (see vit_weights.h).
#include "nn/vit_weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/vit_names.h"
#include "nn/weights.h"
#include "util/half.h"

static void to_float(const SafeTensors *file, const SafeTensor *tensor, float *out) {
    const void *data = safetensors_data(file, tensor);
    const size_t n = (size_t)safe_tensor_elements(tensor);
    if (tensor->dtype == SAFE_F32) memcpy(out, data, n * sizeof *out);
    else if (tensor->dtype == SAFE_F16) convert_f16_to_f32(data, out, n);
    else convert_bf16_to_f32(data, out, n);
}

static int is_float_dtype(SafeDType dtype) {
    return dtype == SAFE_F32 || dtype == SAFE_F16 || dtype == SAFE_BF16;
}

static int is_square(int64_t n, int64_t *side) {
    const int64_t root = (int64_t)llround(sqrt((double)n));
    if (root < 1 || root * root != n) return 0;
    *side = root;
    return 1;
}

int vit_weights_detect(const SafeTensors *file, const char *prefix) {
    return vit_names_present(file, prefix);
}

// ---- architecture --------------------------------------------------------------------------

// DINOv3's bias_mask of every block holds 1 on the query and value parts
// and 0 on the key part (mask_k_bias); anything else is applied as it is
// (a full, masked bias).
static int masks_hold_key_zero(const SafeTensors *file, const VitLayout *layout, int dim) {
    float *mask = malloc(3 * (size_t)dim * sizeof *mask);
    int standard = mask != NULL;
    for (int b = 0; standard && b < layout->depth; b++) {
        char ours[64];
        VitSource source;
        snprintf(ours, sizeof ours, "blocks.%d.attn.qkv.bias", b);
        vit_names_source(layout, ours, &source);
        const SafeTensor *tensor = safetensors_find(file, source.mask);
        standard = tensor && is_float_dtype(tensor->dtype) && tensor->rank == 1 &&
                   tensor->shape[0] == 3 * (int64_t)dim;
        if (standard) to_float(file, tensor, mask);
        for (int i = 0; standard && i < 3 * dim; i++)
            standard = mask[i] == (i / dim == 1 ? 0.0f : 1.0f);
    }
    free(mask);
    return standard;
}

// The heads of a RoPE ViT: DINOv3's periods (Dh / 4 of them) say them;
// else the "num_heads" metadata, else a head width of 64.
static int rope_heads(const SafeTensors *file, const VitLayout *layout, int dim) {
    char key[VIT_KEY];
    vit_names_periods_key(layout, key, sizeof key);
    const SafeTensor *periods = key[0] ? safetensors_find(file, key) : NULL;
    if (periods && periods->rank == 1 && periods->shape[0] > 0 &&
        dim % (4 * periods->shape[0]) == 0)
        return dim / (4 * (int)periods->shape[0]);
    const char *heads = safetensors_metadata(file, "num_heads");
    return heads ? atoi(heads) : dim / 64;
}

// The DINOv3 part of a configuration (vit.h): RoPE as DINOv3 trains it,
// LayerNorm eps 1e-5, the qkv bias and MLP the file has, class-token pooling.
static void rope_config(const SafeTensors *file, const VitLayout *layout, VitConfig *config) {
    config->rope = 1;
    config->rope_base = 100.0f;
    config->rope_rescale = 2.0f;
    config->norm_eps = 1e-5f;
    config->pool = VIT_POOL_CLS;
    config->heads = rope_heads(file, layout, config->embed_dim);
    config->qkv_bias = layout->qkv_bias;
    if (layout->bias_mask && !masks_hold_key_zero(file, layout, config->embed_dim))
        config->qkv_bias = VIT_QKV_BIAS;
}

int vit_config_from_weights(const SafeTensors *file, const char *prefix, VitConfig *config,
                            ErrorMessage *err) {
    VitLayout layout;
    if (vit_names_detect(file, prefix, &layout, err)) return -1;
    const SafeTensor *cls = vit_names_tensor(file, &layout, "cls_token");
    const SafeTensor *patch = vit_names_tensor(file, &layout, "patch_embed.proj.weight");
    const SafeTensor *fc1 = vit_names_block_tensor(file, &layout, 0, "mlp.fc1.weight");
    if (!cls || cls->rank != 3 || !patch || patch->rank != 4 || patch->shape[1] < 1 ||
        patch->shape[1] > 64 ||
        patch->shape[2] != patch->shape[3] || !fc1 || fc1->rank != 2)
        return error_set(err, "%s ViT under \"%s\": the class token, patch embedding (D, C, p, "
                              "p; C <= 64) or mlp.fc1 weight is missing or misshapen",
                         vit_naming_name(layout.naming), prefix);
    // SwiGLU: the gate half of a split file, half of a packed fc1.
    VitSource fc1_source;
    vit_names_source(&layout, "blocks.0.mlp.fc1.weight", &fc1_source);
    const int64_t hidden = layout.swiglu && fc1_source.parts == 1 ? fc1->shape[0] / 2
                                                                  : fc1->shape[0];
    memset(config, 0, sizeof *config);
    config->embed_dim = (int)cls->shape[2];
    config->patch_size = (int)patch->shape[2];
    config->in_channels = (int)patch->shape[1];
    config->depth = layout.depth;
    config->mlp_hidden = (int)hidden;
    config->swiglu = layout.swiglu;
    config->register_tokens = layout.registers;
    config->layer_scale = vit_names_block_tensor(file, &layout, 0, "ls1.gamma") != NULL;
    config->layer_scale_init = 1e-5f;
    const char *pool = safetensors_metadata(file, "pool");
    if (layout.rope) {
        rope_config(file, &layout, config);
    } else {
        const SafeTensor *pos = vit_names_tensor(file, &layout, "pos_embed");
        int64_t grid;
        const int64_t positions = pos->shape[1] - (layout.file_class_pos ? 1 : 0);
        if (!is_square(positions, &grid))
            return error_set(err, "ViT position embeddings: %lld positions are not a square "
                                  "grid", (long long)positions);
        // timm's convention: the class token's position is kept only without registers.
        config->class_pos = layout.file_class_pos && layout.registers == 0;
        config->pos_grid = (int)grid;
        config->norm_eps = 1e-6f;
        const char *heads = safetensors_metadata(file, "num_heads");
        config->heads = heads ? atoi(heads) : config->embed_dim / 64;
        config->pos_interpolation =
            layout.registers ? VIT_POS_INTERP_ANTIALIAS : VIT_POS_INTERP_OFFSET;
        const char *interpolation = safetensors_metadata(file, "pos_interpolation");
        if (interpolation &&
            vit_pos_interpolation_parse(interpolation, &config->pos_interpolation, err))
            return -1;
        config->pool = VIT_POOL_MEAN;
    }
    if (config->heads < 1) config->heads = 1;
    if (pool && vit_pool_parse(pool, &config->pool, err)) return -1;
    vit_config_name(config);
    return vit_config_check(config, err);
}

// ---- loading -----------------------------------------------------------------------------

// Checks that `key` exists with the expected shape and a float dtype.
static const SafeTensor *expect_tensor(const SafeTensors *file, const char *key,
                                       const int64_t *shape, int rank, ErrorMessage *err) {
    const SafeTensor *tensor = safetensors_find(file, key);
    return weights_check_tensor(tensor, key, shape, rank, 0, err) ? NULL : tensor;
}

// pos_embed into torch (the model's rows): the class token's position when
// the model keeps one, then the patch grid, resized when the file's grid
// differs from the model's as LightlyTrain's interpolate_pos_embed_hook does
// (bicubic to the new size, no antialias); marks the tensor used.
static int read_positions(const SafeTensors *file, const VitLayout *layout, const Vit *model,
                          const Parameter *param, float *torch, char *used, ErrorMessage *err) {
    const VitConfig *c = &model->config;
    const size_t dim = (size_t)c->embed_dim;
    VitSource source;
    vit_names_source(layout, param->name, &source);
    const char *key = source.keys[0];
    const SafeTensor *tensor = safetensors_find(file, key);
    int64_t grid = 0;
    const int64_t rows = tensor && tensor->rank == 3 ? tensor->shape[1] : 0;
    const int file_class = layout->file_class_pos;
    if (!tensor || tensor->rank != 3 || tensor->shape[0] != 1 || tensor->shape[2] != (int64_t)dim ||
        !is_square(rows - file_class, &grid) || (c->class_pos && !file_class)) {
        // Not a (1, [1 +] M^2, D) grid this model can take: the shape message,
        // or (the shape fits) the missing class-token position.
        int64_t shape[3] = {1, (int64_t)c->pos_grid * c->pos_grid + file_class, (int64_t)dim};
        if (!expect_tensor(file, key, shape, 3, err)) return -1;
        return error_set(err, "weights do not match the model: \"%s\" holds no class-token "
                              "position, %s needs one", key, c->name);
    }
    if (!expect_tensor(file, key, tensor->shape, 3, err)) return -1;  // the dtype check
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

// Multiplies torch (count) by the mask tensor `key` (the same shape); marks it used.
static int apply_mask(const SafeTensors *file, const char *key, const Parameter *param,
                      float *torch, char *used, ErrorMessage *err) {
    int64_t shape[PARAM_MAX_RANK];
    for (int d = 0; d < param->rank; d++) shape[d] = param->torch_shape[d];
    const SafeTensor *mask = expect_tensor(file, key, shape, param->rank, err);
    float *values = mask ? malloc(param->count * sizeof *values) : NULL;
    if (!values) return mask ? error_set(err, "out of memory") : -1;
    used[mask - file->tensors] = 1;
    to_float(file, mask, values);
    for (size_t i = 0; i < param->count; i++) torch[i] *= values[i];
    free(values);
    return 0;
}

// One parameter in torch layout from the file into torch (count floats):
// its parts stacked (a part the file lacks is zero), times its mask;
// marks the tensors used.
static int read_parameter(const SafeTensors *file, const VitLayout *layout, const Vit *model,
                          const Parameter *param, float *torch, char *used, ErrorMessage *err) {
    if (strcmp(param->name, "pos_embed") == 0)
        return read_positions(file, layout, model, param, torch, used, err);
    VitSource source;
    vit_names_source(layout, param->name, &source);
    int64_t shape[PARAM_MAX_RANK];
    for (int d = 0; d < param->rank; d++) shape[d] = param->torch_shape[d];
    shape[0] /= source.parts;
    const size_t part_count = param->count / (size_t)source.parts;
    for (int part = 0; part < source.parts; part++) {
        float *out = torch + part * part_count;
        if (!source.keys[part][0]) {
            memset(out, 0, part_count * sizeof *out);
            continue;
        }
        const SafeTensor *tensor = expect_tensor(file, source.keys[part], shape, param->rank, err);
        if (!tensor) return -1;
        used[tensor - file->tensors] = 1;
        to_float(file, tensor, out);
    }
    if (source.mask[0] && apply_mask(file, source.mask, param, torch, used, err)) return -1;
    // The class token's position is in the file but not in the model: it is
    // folded into the class token.
    if (layout->file_class_pos && !model->config.class_pos &&
        strcmp(param->name, "cls_token") == 0) {
        const SafeTensor *pos = vit_names_tensor(file, layout, "pos_embed");
        if (!pos) return error_set(err, "weights do not match the model: no position embeddings");
        float *row = malloc((size_t)safe_tensor_elements(pos) * sizeof *row);
        if (!row) return error_set(err, "out of memory");
        to_float(file, pos, row);
        for (int c = 0; c < model->config.embed_dim; c++) torch[c] += row[c];
        free(row);
    }
    return 0;
}

// The file's RoPE periods (DINOv3's rope_embed.periods, required; our
// checkpoints' rope.periods, optional) into periods (Dh / 4); *found 0
// without them.
static int read_periods(const SafeTensors *file, const VitLayout *layout, const Vit *model,
                        float *periods, char *used, int *found, ErrorMessage *err) {
    char key[VIT_KEY];
    vit_names_periods_key(layout, key, sizeof key);
    *found = 0;
    if (!key[0] || (layout->naming == NAMING_TIMM && !safetensors_find(file, key))) return 0;
    const VitConfig *c = &model->config;
    const int64_t count = c->embed_dim / c->heads / 4;
    const SafeTensor *tensor = expect_tensor(file, key, &count, 1, err);
    if (!tensor) return -1;
    used[tensor - file->tensors] = 1;
    to_float(file, tensor, periods);
    *found = 1;
    return 0;
}

// The file's architecture against the model's, before any tensor.
static int check_layout(const VitLayout *layout, const VitConfig *c, ErrorMessage *err) {
    if (layout->depth != c->depth)
        return error_set(err, "weights do not match the model: %d blocks in the file, %d in %s",
                         layout->depth, c->depth, c->name);
    if (layout->registers != c->register_tokens)
        return error_set(err, "weights do not match the model: %d register tokens in the file, "
                              "%d in %s", layout->registers, c->register_tokens, c->name);
    if (layout->rope != c->rope)
        return error_set(err, "weights do not match the model: %s in the file, %s in %s",
                         layout->rope ? "RoPE (no pos_embed)" : "position embeddings",
                         c->rope ? "RoPE" : "position embeddings", c->name);
    if (layout->swiglu != c->swiglu)
        return error_set(err, "weights do not match the model: a %s MLP in the file, %s in %s",
                         layout->swiglu ? "SwiGLU" : "GELU", c->swiglu ? "SwiGLU" : "GELU",
                         c->name);
    return 0;
}

int vit_load_from(Vit *model, const SafeTensors *file, const char *prefix, ErrorMessage *err) {
    VitLayout layout;
    if (vit_names_detect(file, prefix, &layout, err)) return -1;
    if (check_layout(&layout, &model->config, err))
        return error_prefix(err, "%s weights", vit_naming_name(layout.naming));
    const ParameterSet *params = &model->params;
    size_t largest = 1;
    for (int i = 0; i < params->count; i++)
        if (params->params[i].count > largest) largest = params->params[i].count;
    float *torch = malloc(largest * sizeof *torch), *ours = malloc(largest * sizeof *ours);
    float *periods = malloc(((size_t)model->config.embed_dim + 1) * sizeof *periods);
    char *used = calloc((size_t)file->count + 1, 1);
    int status = torch && ours && periods && used ? 0
                                                 : error_set(err, "out of memory loading weights");
    // Check everything first: a failing file changes no parameter.
    for (int i = 0; !status && i < params->count; i++)
        status = read_parameter(file, &layout, model, &params->params[i], torch, used, err);
    int periods_found = 0;
    if (!status) status = read_periods(file, &layout, model, periods, used, &periods_found, err);
    for (int t = 0; !status && t < file->count; t++) {
        const char *name = file->tensors[t].name;
        const size_t length = strlen(layout.prefix);
        if (used[t] || strncmp(name, layout.prefix, length) != 0) continue;
        if (!vit_names_skipped(&layout, &file->tensors[t], name + length))
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
    if (!status && periods_found) status = vit_set_rope_periods(model, periods, err);
    free(torch);
    free(ours);
    free(periods);
    free(used);
    return status ? error_prefix(err, "%s weights", vit_naming_name(layout.naming)) : 0;
}

int vit_load(Vit *model, const char *path, ErrorMessage *err) {
    SafeTensors file;
    if (safetensors_read_weights(path, &file, err)) return -1;
    const int status = vit_load_from(model, &file, "", err);
    safetensors_free(&file);
    return status ? error_prefix(err, "%s", path) : 0;
}

// ---- export --------------------------------------------------------------------------------

int vit_save(const Vit *model, const char *path, StateDictWrite write, ErrorMessage *err) {
    if (model->config.rope) return vit_save_eva(model, path, write, err);
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
                                      (int)(sizeof metadata / sizeof metadata[0]), write, err);
}
