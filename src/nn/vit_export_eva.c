// Export of a DINOv3 (RoPE) ViT as timm's Eva state dict, the naming of
// timm's vit_*_dinov3 models (see vit_weights.h): our parameters renamed
// (ls1.gamma -> gamma_1, ...), the qkv bias split into q_bias and v_bias
// (timm holds the key bias at zero), a packed SwiGLU mlp.fc1 split into
// fc1_g (gate) and fc1_x (value).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/vit_weights.h"
#include "nn/weights.h"

// timm's model name of a DINOv3 preset's architecture, without "_qkvb".
static const struct {
    const char *ours, *timm;
} timm_names[] = {
    {"dinov3/vitt16", "vit_tiny_patch16_dinov3"},
    {"dinov3/vits16", "vit_small_patch16_dinov3"},
    {"dinov3/vits16plus", "vit_small_plus_patch16_dinov3"},
    {"dinov3/vitb16", "vit_base_patch16_dinov3"},
    {"dinov3/vitl16", "vit_large_patch16_dinov3"},
    {"dinov3/vith16plus", "vit_huge_plus_patch16_dinov3"},
};

// One tensor of the export: rows [first, first + rows) of a parameter.
typedef struct EvaTensor {
    char name[PARAM_MAX_NAME + 16];
    const Parameter *param;
    int64_t first, rows;
} EvaTensor;

// The tensor(s) of one parameter; returns how many were added.
static int eva_tensors(const Vit *model, const Parameter *param, EvaTensor *out) {
    const VitConfig *c = &model->config;
    const int64_t rows = param->torch_shape[0];
    int block = -1, consumed = 0;
    const char *rest = param->name;
    if (sscanf(param->name, "blocks.%d.%n", &block, &consumed) == 1 && consumed > 0)
        rest = param->name + consumed;
    char head[32] = "";
    if (block >= 0) snprintf(head, sizeof head, "blocks.%d.", block);
    if (!strcmp(rest, "attn.qkv.bias")) {  // q_bias, v_bias: the first and last third
        out[0] = (EvaTensor){.param = param, .first = 0, .rows = rows / 3};
        out[1] = (EvaTensor){.param = param, .first = 2 * rows / 3, .rows = rows / 3};
        snprintf(out[0].name, sizeof out[0].name, "%sattn.q_bias", head);
        snprintf(out[1].name, sizeof out[1].name, "%sattn.v_bias", head);
        return 2;
    }
    if (c->swiglu && !strncmp(rest, "mlp.fc1.", 8)) {  // fc1_g (gate), fc1_x (value)
        out[0] = (EvaTensor){.param = param, .first = 0, .rows = rows / 2};
        out[1] = (EvaTensor){.param = param, .first = rows / 2, .rows = rows / 2};
        snprintf(out[0].name, sizeof out[0].name, "%smlp.fc1_g.%s", head, rest + 8);
        snprintf(out[1].name, sizeof out[1].name, "%smlp.fc1_x.%s", head, rest + 8);
        return 2;
    }
    out[0] = (EvaTensor){.param = param, .first = 0, .rows = rows};
    if (!strcmp(rest, "ls1.gamma") || !strcmp(rest, "ls2.gamma"))
        snprintf(out[0].name, sizeof out[0].name, "%sgamma_%c", head, rest[2]);
    else snprintf(out[0].name, sizeof out[0].name, "%s", param->name);
    return 1;
}

// Every parameter downloaded into torch (params->total floats, torch
// layout, at each parameter's offset); a non-zero key bias is refused.
static int download_torch(const Vit *model, float *torch, ErrorMessage *err) {
    const ParameterSet *params = &model->params;
    size_t largest = 1;
    for (int i = 0; i < params->count; i++)
        if (params->params[i].count > largest) largest = params->params[i].count;
    float *ours = malloc(largest * sizeof *ours);
    if (!ours) return error_set(err, "out of memory exporting %s", model->config.name);
    int status = 0;
    for (int i = 0; !status && i < params->count; i++) {
        const Parameter *param = &params->params[i];
        model->backend->op.download(model->backend, ours, param->value,
                                    param->count * sizeof *ours);
        float *values = torch + param->offset;
        weights_to_torch_layout(param, ours, values);
        const size_t length = strlen(param->name);
        if (length < 13 || strcmp(param->name + length - 13, "attn.qkv.bias") != 0) continue;
        const size_t dim = param->count / 3;
        for (size_t k = dim; !status && k < 2 * dim; k++)
            if (values[k] != 0.0f)
                status = error_set(err, "\"%s\" has a non-zero key bias (%g at %zu), which timm's "
                                        "DINOv3 (Eva) attention does not have",
                                   param->name, (double)values[k], k);
    }
    free(ours);
    return status;
}

int vit_save_eva(const Vit *model, const char *path, StateDictWrite write, ErrorMessage *err) {
    const ParameterSet *params = &model->params;
    const VitConfig *c = &model->config;
    float *torch = malloc((params->total + 1) * sizeof *torch);
    EvaTensor *tensors = calloc(2 * (size_t)params->count + 1, sizeof *tensors);
    SafeTensorWrite *entries = calloc(2 * (size_t)params->count + 1, sizeof *entries);
    int status = torch && tensors && entries ? download_torch(model, torch, err)
                                             : error_set(err, "out of memory exporting %s",
                                                         c->name);
    int count = 0;
    for (int i = 0; !status && i < params->count; i++)
        count += eva_tensors(model, &params->params[i], tensors + count);
    for (int t = 0; !status && t < count; t++) {
        const Parameter *param = tensors[t].param;
        const size_t row_floats = param->count / (size_t)param->torch_shape[0];
        SafeTensorWrite *entry = &entries[t];
        entry->name = tensors[t].name;
        entry->dtype = SAFE_F32;
        entry->rank = param->rank;
        for (int d = 0; d < param->rank; d++) entry->shape[d] = param->torch_shape[d];
        entry->shape[0] = tensors[t].rows;
        entry->data = torch + param->offset + (size_t)tensors[t].first * row_floats;
    }
    char heads[16], timm_model[64] = "";
    snprintf(heads, sizeof heads, "%d", c->heads);
    for (size_t i = 0; i < sizeof timm_names / sizeof timm_names[0]; i++)
        if (!strcmp(c->name, timm_names[i].ours))
            snprintf(timm_model, sizeof timm_model, "%s%s", timm_names[i].timm,
                     c->qkv_bias == VIT_QKV_NO_BIAS ? "" : "_qkvb");
    const SafeMetadata metadata[] = {
        {.key = "format", .value = "pt"},
        {.key = "num_heads", .value = heads},
        {.key = "pool", .value = (char *)vit_pool_name(c->pool)},
        {.key = "timm_model", .value = timm_model},
    };
    const int metadata_count = timm_model[0] ? 4 : 3;
    if (!status)
        status = (write ? write : safetensors_write)(path, entries, count, metadata, metadata_count,
                                                     err);
    free(torch);
    free(tensors);
    free(entries);
    return status;
}
