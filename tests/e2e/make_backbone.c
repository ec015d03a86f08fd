// Writes a freshly initialised backbone for the end-to-end tests (a
// distillation teacher, nothing downloaded):
//   make_backbone OUT MODEL SEED [IMAGE_SIZE [LAYER_SCALE [random-norms]]]
// MODEL is a --model name (resnet18, vit_t14, vit_s14_reg4, ...), SEED its
// initialisation, IMAGE_SIZE a ViT's position grid (default 224),
// LAYER_SCALE a ViT's initial LayerScale gammas (default, or "-", the
// preset's 1e-5, which leaves the class token almost the same for every
// image). random-norms: BatchNorm / LayerNorm weights, biases and running
// statistics, linear biases (a key bias held at zero stays zero) and the
// class and register tokens drawn at random instead of their initial 1, 0
// and tiny values, so that an export that mixes any of them up shows
// (tests/e2e/onnx.sh). The file is what export writes: a ResNet in
// torchvision's names, a ViT in timm's (with our num_heads / pool
// metadata).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "nn/backbone.h"
#include "util/rng.h"

// The value a random-norms parameter gets, by its name and kind: BN / LN
// weights around 1, running variances in [0.5, 2], the rest (biases,
// means, tokens) normal with std 0.1. 0 for a parameter left as it is.
static int random_norm_value(const Parameter *param, Rng *rng, float *value) {
    const char *dot = strrchr(param->name, '.');
    const char *leaf = dot ? dot + 1 : param->name;
    if (strcmp(leaf, "running_var") == 0) *value = rng_range(rng, 0.5f, 2.0f);
    else if (param->kind == PARAM_NORM && strcmp(leaf, "weight") == 0)
        *value = rng_range(rng, 0.5f, 1.5f);
    else if (param->kind == PARAM_NORM || param->kind == PARAM_BIAS ||
             strcmp(leaf, "running_mean") == 0 || strcmp(param->name, "cls_token") == 0 ||
             strcmp(param->name, "reg_token") == 0)
        *value = 0.1f * rng_normal(rng);
    else
        return 0;
    return 1;
}

static void randomize_norms(Backbone *backbone, uint64_t seed) {
    Backend *backend = backbone->backend;
    ParameterSet *sets[2] = {backbone->params, backbone->buffers};
    for (int s = 0; s < 2; s++)
        for (int i = 0; sets[s] && i < sets[s]->count; i++) {
            const Parameter *param = &sets[s]->params[i];
            float *values = malloc(param->count * sizeof *values);
            if (!values) continue;
            Rng rng = rng_make(seed, 0, (uint64_t)i, 0x4e4f0000u + (uint32_t)s);
            int changed = 1;
            for (size_t k = 0; k < param->count && changed; k++)
                changed = random_norm_value(param, &rng, &values[k]);
            const size_t length = strlen(param->name);
            if (changed && backbone->spec.kind == BACKBONE_VIT &&
                backbone->spec.vit.qkv_bias == VIT_QKV_BIAS_NO_KEY && length > 13 &&
                strcmp(param->name + length - 13, "attn.qkv.bias") == 0)  // (q | k | v)
                memset(values + param->count / 3, 0, param->count / 3 * sizeof *values);
            if (changed)
                backend->op.upload(backend, param->value, values, param->count * sizeof *values);
            free(values);
        }
    parameter_set_written(backbone->params);
    parameter_set_written(backbone->buffers);
}

int main(int argc, char **argv) {
    if (argc < 4 || argc > 7 || (argc == 7 && strcmp(argv[6], "random-norms") != 0)) {
        fprintf(stderr, "usage: %s OUT MODEL SEED [IMAGE_SIZE [LAYER_SCALE [random-norms]]]\n",
                argv[0]);
        return 2;
    }
    const int image_size = argc >= 5 ? atoi(argv[4]) : 224;
    ErrorMessage err = {{0}};
    BackboneSpec spec;
    Backend *backend = backend_create("cpu", 1, &err);
    if (!backend || backbone_spec_parse(argv[2], image_size, &spec, &err)) {
        fprintf(stderr, "make_backbone: %s\n", err.text);
        return 2;
    }
    if (argc >= 6 && strcmp(argv[5], "-") != 0) {
        if (spec.kind != BACKBONE_VIT || !spec.vit.layer_scale) {
            fprintf(stderr, "make_backbone: LAYER_SCALE: %s has no LayerScale\n", argv[2]);
            return 2;
        }
        spec.vit.layer_scale_init = strtof(argv[5], NULL);
    }
    const BackboneInput input = {1, image_size};
    Backbone backbone;
    int status = backbone_create(&backbone, backend, &spec, &input, 1,
                                 strtoull(argv[3], NULL, 10), &err);
    if (!status && argc == 7) randomize_norms(&backbone, strtoull(argv[3], NULL, 10));
    if (!status) {
        status = backbone_save(&backbone, argv[1], &err);
        backbone_free(&backbone);
    }
    if (status) fprintf(stderr, "make_backbone: %s\n", err.text);
    backend_destroy(backend);
    return status ? 1 : 0;
}
