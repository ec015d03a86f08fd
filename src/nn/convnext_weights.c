// ConvNeXt weight files: the architecture read from a file in any naming,
// loading with the names translated to the model's, and export (see
// convnext_weights.h).
#include "nn/convnext_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/convnext_names.h"
#include "nn/weights.h"

// The tensor of `role` in the file's naming under prefix; NULL when absent.
static const SafeTensor *find_role(const SafeTensors *file, const char *prefix,
                                   ConvnextNaming naming, ConvnextTensorRole role, char *key,
                                   size_t size) {
    char name[SAFETENSORS_MAX_NAME];
    convnext_tensor_name(naming, &role, name, sizeof name);
    snprintf(key, size, "%s%s", prefix, name);
    return safetensors_find(file, key);
}

static ConvnextTensorRole block_role(ConvnextRole role, int stage, int block, const char *leaf) {
    ConvnextTensorRole r = {.role = role, .stage = stage, .block = block};
    snprintf(r.leaf, sizeof r.leaf, "%s", leaf);
    return r;
}

int convnext_weights_detect(const SafeTensors *file, const char *prefix) {
    return convnext_naming_detect(file, prefix) >= 0;
}

// ---- architecture --------------------------------------------------------------------------

#define CONVNEXT_MAX_BLOCKS 256  // more blocks in a stage than any ConvNeXt has: stop counting

int convnext_config_from_weights(const SafeTensors *file, const char *prefix,
                                 ConvnextConfig *config, ErrorMessage *err) {
    const int naming = convnext_naming_detect(file, prefix);
    if (naming < 0)
        return error_set(err, "not a ConvNeXt: no stem conv with a first block (torchvision, "
                              "timm or DINOv3 naming) under \"%s\"", prefix);
    memset(config, 0, sizeof *config);
    config->naming = (ConvnextNaming)naming;
    const char *family = convnext_naming_names[naming];
    char key[SAFETENSORS_MAX_NAME];
    const SafeTensor *stem = find_role(file, prefix, config->naming,
                                       block_role(CONVNEXT_STEM_CONV, 0, 0, "weight"), key,
                                       sizeof key);
    if (stem->rank != 4 || stem->shape[1] < 1 || stem->shape[1] > 64 || stem->shape[2] != 4 ||
        stem->shape[3] != 4)
        return error_set(err, "%s ConvNeXt: the stem conv \"%s\" is not (C, channels <= 64, 4, 4)",
                         family, key);
    config->in_channels = (int)stem->shape[1];
    for (int s = 0; s < CONVNEXT_STAGES; s++) {
        for (int b = 0; b < CONVNEXT_MAX_BLOCKS; b++) {
            const SafeTensor *dw = find_role(file, prefix, config->naming,
                                             block_role(CONVNEXT_DWCONV, s, b, "weight"), key,
                                             sizeof key);
            if (!dw) break;
            if (dw->rank != 4 || dw->shape[1] != 1 || dw->shape[2] != dw->shape[3] ||
                dw->shape[2] % 2 == 0 || (b > 0 && dw->shape[0] != config->dims[s]))
                return error_set(err, "%s ConvNeXt: \"%s\" is not a depthwise (C, 1, K, K) "
                                      "conv of an odd K and the stage's width",
                                 family, key);
            config->dims[s] = (int)dw->shape[0];
            config->kernel = (int)dw->shape[2];
            config->depths[s]++;
        }
        if (!config->depths[s])
            return error_set(err, "%s ConvNeXt: stage %d has no blocks (no \"%s\")", family, s,
                             key);
    }
    if (stem->shape[0] != config->dims[0])
        return error_set(err, "%s ConvNeXt: the stem makes %lld channels, stage 0 takes %d",
                         family, (long long)stem->shape[0], config->dims[0]);
    config->norm_eps = 1e-6f;
    config->layer_scale_init = 1e-6f;
    config->drop_path_rate = convnext_default_drop_path(config);
    convnext_config_name(config);
    return convnext_config_check(config, err);
}

// ---- loading ---------------------------------------------------------------------------------

// The file's tensor for param (role in the file's naming) checked against
// it: a float dtype and torch's shape (a layer scale may be (C) or (C, 1,
// 1), the namings differ there). NULL with err, or NULL without (err
// untouched) when it is a final norm the model may go without.
static const SafeTensor *expect_tensor(const Convnext *model, const SafeTensors *file,
                                       const char *prefix, ConvnextNaming naming, int index,
                                       int *failed, ErrorMessage *err) {
    const Parameter *param = &model->params.params[index];
    const ConvnextTensorRole *role = &model->roles[index];
    char key[SAFETENSORS_MAX_NAME];
    const SafeTensor *tensor = find_role(file, prefix, naming, *role, key, sizeof key);
    *failed = 1;
    if (!tensor && role->role == CONVNEXT_HEAD_NORM && !convnext_norm_features(&model->config)) {
        *failed = 0;  // unused by these features: it keeps its value
        return NULL;
    }
    int64_t shape[PARAM_MAX_RANK];
    for (int d = 0; d < param->rank; d++) shape[d] = param->torch_shape[d];
    if (weights_check_tensor(tensor, key, shape, param->rank, role->role == CONVNEXT_GAMMA, err))
        return NULL;
    *failed = 0;
    return tensor;
}

static int check_geometry(const ConvnextConfig *file_config, const ConvnextConfig *c,
                          ErrorMessage *err) {
    for (int s = 0; s < CONVNEXT_STAGES; s++)
        if (file_config->depths[s] != c->depths[s] || file_config->dims[s] != c->dims[s])
            return error_set(err, "weights do not match the model: stage %d has %d blocks of "
                                  "width %d in the file, %d of width %d in %s",
                             s, file_config->depths[s], file_config->dims[s], c->depths[s],
                             c->dims[s], c->name);
    if (file_config->kernel != c->kernel)
        return error_set(err, "weights do not match the model: a %dx%d depthwise kernel in the "
                              "file, %dx%d in %s", file_config->kernel, file_config->kernel,
                         c->kernel, c->kernel, c->name);
    const int channels = c->in_channels > 0 ? c->in_channels : 3;
    if (file_config->in_channels != channels)
        return error_set(err, "weights do not match the model: the stem takes %d channels in "
                              "the file, %d in %s", file_config->in_channels, channels, c->name);
    return 0;
}

// Every tensor under prefix must be used or one the naming skips.
static int check_unused(const SafeTensors *file, const char *prefix, ConvnextNaming naming,
                        const char *used, const char *model_name, ErrorMessage *err) {
    const size_t length = strlen(prefix);
    for (int t = 0; t < file->count; t++) {
        const char *name = file->tensors[t].name;
        if (used[t] || strncmp(name, prefix, length) != 0) continue;
        if (!convnext_name_skipped(naming, name + length))
            return error_set(err, "weights do not match the model: \"%s\" is not part of %s",
                             name, model_name);
    }
    return 0;
}

int convnext_load_from(Convnext *model, const SafeTensors *file, const char *prefix,
                       ErrorMessage *err) {
    ConvnextConfig file_config;
    if (convnext_config_from_weights(file, prefix, &file_config, err)) return -1;
    const ConvnextNaming naming = file_config.naming;
    const char *family = convnext_naming_names[naming];
    if (check_geometry(&file_config, &model->config, err))
        return error_prefix(err, "%s weights", family);
    const ParameterSet *params = &model->params;
    size_t largest = 1;
    for (int i = 0; i < params->count; i++)
        if (params->params[i].count > largest) largest = params->params[i].count;
    float *torch = malloc(largest * sizeof *torch), *ours = malloc(largest * sizeof *ours);
    char *used = calloc((size_t)file->count + 1, 1);
    int status = torch && ours && used ? 0 : error_set(err, "out of memory loading weights");
    // Check everything first: a failing file changes no parameter.
    for (int i = 0; !status && i < params->count; i++) {
        int failed;
        const SafeTensor *tensor = expect_tensor(model, file, prefix, naming, i, &failed, err);
        if (failed) status = -1;
        else if (tensor) used[tensor - file->tensors] = 1;
    }
    if (!status) status = check_unused(file, prefix, naming, used, model->config.name, err);
    for (int i = 0; !status && i < params->count; i++) {
        int failed;
        const SafeTensor *tensor = expect_tensor(model, file, prefix, naming, i, &failed, err);
        if (!tensor) continue;
        const Parameter *param = &params->params[i];
        weights_tensor_to_float(file, tensor, torch);
        weights_from_torch_layout(param, torch, ours);
        model->backend->op.upload(model->backend, param->value, ours,
                                  param->count * sizeof *ours);
    }
    free(torch);
    free(ours);
    free(used);
    if (!status) parameter_set_written(&model->params);
    return status ? error_prefix(err, "%s weights", family) : 0;
}

// ---- export ----------------------------------------------------------------------------------

int convnext_save(const Convnext *model, const char *path, StateDictWrite write,
                  ErrorMessage *err) {
    const ParameterSet *params = &model->params;
    Backend *backend = model->backend;
    const int duplicates = model->config.naming == CONVNEXT_DINOV3 ? 2 : 0;  // norms.3.*
    const int count = params->count + duplicates;
    const size_t total = parameter_set_elements(params);
    SafeTensorWrite *entries = calloc((size_t)count, sizeof *entries);
    float *staging = malloc((total + 1) * sizeof *staging);
    float *ours = malloc((total + 1) * sizeof *ours);
    if (!entries || !staging || !ours) {
        free(entries);
        free(staging);
        free(ours);
        return error_set(err, "out of memory exporting %s", model->config.name);
    }
    size_t offset = 0;
    for (int i = 0; i < params->count; i++) {
        const Parameter *param = &params->params[i];
        backend->op.download(backend, ours, param->value, param->count * sizeof *ours);
        weights_to_torch_layout(param, ours, staging + offset);
        SafeTensorWrite *entry = &entries[i];
        entry->name = param->name;
        entry->dtype = SAFE_F32;
        entry->rank = param->rank;
        for (int d = 0; d < param->rank; d++) entry->shape[d] = param->torch_shape[d];
        entry->data = staging + offset;
        offset += param->count;
    }
    // DINOv3's norms[3] is its final norm: the state dict lists both names.
    static const char *const duplicate_names[2] = {"norms.3.weight", "norms.3.bias"};
    const int norm_indices[2] = {model->head_norm.weight_index, model->head_norm.bias_index};
    for (int d = 0; d < duplicates; d++) {
        entries[params->count + d] = entries[norm_indices[d]];
        entries[params->count + d].name = duplicate_names[d];
    }
    const SafeMetadata metadata[] = {{.key = "format", .value = "pt"}};
    const int status = (write ? write : safetensors_write)(path, entries, count, metadata, 1, err);
    free(entries);
    free(staging);
    free(ours);
    return status;
}
