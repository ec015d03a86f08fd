// LightlyTrain DINOv2's parameter-group rules (see dinov2_param_groups.h).
#include "ssl_methods/dinov2_param_groups.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int dinov2_vit_layer(const char *name, int depth) {
    static const char *const first_layer[] = {"pos_embed", "patch_embed", "mask_token",
                                              "cls_token", "reg_token"};
    for (size_t i = 0; i < sizeof first_layer / sizeof first_layer[0]; i++)
        if (strstr(name, first_layer[i])) return 0;
    const char *blocks = strstr(name, "blocks.");
    if (blocks && !strstr(name, "residual.")) {
        char *end = NULL;
        const long index = strtol(blocks + strlen("blocks."), &end, 10);
        if (end != blocks + strlen("blocks.") && *end == '.' && index >= 0 && index < depth)
            return (int)index + 1;
    }
    return depth + 1;
}

double dinov2_lr_scale(const char *name, int backbone, const Dinov2LrRules *rules) {
    if (!backbone) return 1.0;
    const int layer = dinov2_vit_layer(name, rules->depth);
    double scale = pow(rules->layerwise_decay, (double)(rules->depth + 1 - layer));
    if (strstr(name, "patch_embed")) scale *= rules->patch_embed_lr_multiplier;
    return scale;
}

static int ends_with(const char *text, const char *suffix) {
    const size_t length = strlen(text), suffix_length = strlen(suffix);
    return length >= suffix_length && strcmp(text + length - suffix_length, suffix) == 0;
}

int dinov2_weight_decays(const char *name) {
    return !(ends_with(name, ".bias") || strstr(name, "norm") || strstr(name, "gamma"));
}

int dinov2_group_tables_make(Dinov2GroupTables *tables, const ParameterSet *set, int backbone,
                             const Dinov2LrRules *rules, ErrorMessage *err) {
    const size_t count = set->count > 0 ? (size_t)set->count : 1;
    tables->lr_scales = malloc(count * sizeof *tables->lr_scales);
    tables->weight_decays = malloc(count * sizeof *tables->weight_decays);
    if (!tables->lr_scales || !tables->weight_decays) {
        dinov2_group_tables_free(tables);
        return error_set(err, "out of memory");
    }
    for (int i = 0; i < set->count; i++) {
        const char *name = set->params[i].name;
        tables->lr_scales[i] = (float)dinov2_lr_scale(name, backbone, rules);
        tables->weight_decays[i] = (unsigned char)dinov2_weight_decays(name);
    }
    return 0;
}

void dinov2_group_tables_free(Dinov2GroupTables *tables) {
    free(tables->lr_scales);
    free(tables->weight_decays);
    tables->lr_scales = NULL;
    tables->weight_decays = NULL;
}
