// Writes a freshly initialised backbone for the end-to-end tests (a
// distillation teacher, nothing downloaded):
//   make_backbone OUT MODEL SEED [IMAGE_SIZE [LAYER_SCALE|CLASSES [random-norms|calibrated]]]
// MODEL is a --model name (resnet18, vit_t14, vit_s14_reg4, ...), SEED its
// initialisation, IMAGE_SIZE a ViT's position grid (default 224),
// LAYER_SCALE a ViT's initial LayerScale gammas (default, or "-", the
// preset's 1e-5, which leaves the class token almost the same for every
// image), CLASSES a YOLO's Detect head's class count (default, or "-", 80:
// another stands for a user's fine-tuned checkpoint). random-norms: BatchNorm / LayerNorm weights, biases and running
// statistics, linear biases (a key bias held at zero stays zero) and the
// class and register tokens drawn at random instead of their initial 1, 0
// and tiny values (a ConvNeXt's layer scales too), so that an export that
// mixes any of them up, or leaves a block's branch out, shows
// (tests/e2e/onnx.sh). calibrated (YOLOs): random-norms, then the running
// statistics of a training forward of IMAGE_SIZE images
// (calibrate_statistics). Without it a random YOLO's deep features shrink
// by ~3x a conv (PyTorch's default init, statistics that do not fit)
// until they are the same at every position, where C2PSA's attention is a
// uniform average whatever q and k are: an export that swaps them passes.
// The file is what export writes: a ResNet in torchvision's names, a ViT
// in timm's (with our num_heads / pool metadata), a YOLO in Ultralytics', a
// ConvNeXt in its naming's.
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
            // A ConvNeXt's layer scale (1e-6, which would hide each block's
            // branch) drawn in [0.2, 1].
            const int layer_scale = s == 0 && backbone->spec.kind == BACKBONE_CONVNEXT &&
                                    backbone->model.convnext.roles[i].role == CONVNEXT_GAMMA;
            int changed = 1;
            for (size_t k = 0; k < param->count && changed; k++)
                if (layer_scale) values[k] = rng_range(&rng, 0.2f, 1.0f);
                else changed = random_norm_value(param, &rng, &values[k]);
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

// Running statistics = one training forward's batch statistics (the model
// was built with momentum 1) of images like tools/check_onnx.py's (a
// gradient plus noise, ImageNet's normalisation): statistics of plain
// noise, whose deep features average out, leave such images' activations
// hundreds of times larger than normalised.
static int calibrate_statistics(Backbone *backbone, int batch, int image_size, uint64_t seed,
                                ErrorMessage *err) {
    Backend *backend = backbone->backend;
    const size_t count = (size_t)batch * image_size * image_size * 3;
    float *pixels = malloc(count * sizeof *pixels);
    Act *input = backend->op.alloc(backend, act_bytes(backend, count));
    int status = pixels && input ? 0 : error_set(err, "out of memory");
    Rng rng = rng_make(seed, 1, 0, 0x43414c00u);
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    const float step = 160.0f / (float)(image_size > 1 ? image_size - 1 : 1);
    for (size_t i = 0; !status && i < count; i++) {  // (N, H, W, 3)
        const size_t pixel = i / 3, x = pixel % (size_t)image_size;
        const size_t y = pixel / (size_t)image_size % (size_t)image_size;
        const size_t b = pixel / ((size_t)image_size * (size_t)image_size);
        const float value = step * (float)x + step * (float)(image_size - 1 - y) * (float)(b % 3) / 2 +
                            rng_range(&rng, 0.0f, 95.0f);
        pixels[i] = (value / 255.0f - mean[i % 3]) / std[i % 3];
    }
    if (!status) {
        backend->op.upload(backend, input, pixels, count * sizeof *pixels);
        status = backbone_forward(backbone, 0, batch, input, 1, err);
    }
    free(pixels);
    if (input) backend->op.free(backend, input);
    return status;
}

int main(int argc, char **argv) {
    if (argc < 4 || argc > 7 ||
        (argc == 7 && strcmp(argv[6], "random-norms") != 0 && strcmp(argv[6], "calibrated") != 0)) {
        fprintf(stderr, "usage: %s OUT MODEL SEED [IMAGE_SIZE [LAYER_SCALE|CLASSES "
                        "[random-norms|calibrated]]]\n", argv[0]);
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
    if (argc >= 6 && strcmp(argv[5], "-") != 0 && spec.kind == BACKBONE_YOLO) {
        spec.yolo.classes = atoi(argv[5]);
        if (spec.yolo.classes < 1 || spec.yolo.classes > YOLO_MAX_CLASSES) {
            fprintf(stderr, "make_backbone: CLASSES: %s is not 1 .. %d\n", argv[5],
                    YOLO_MAX_CLASSES);
            return 2;
        }
    } else if (argc >= 6 && strcmp(argv[5], "-") != 0) {
        if (spec.kind != BACKBONE_VIT || !spec.vit.layer_scale) {
            fprintf(stderr, "make_backbone: LAYER_SCALE: %s has no LayerScale\n", argv[2]);
            return 2;
        }
        spec.vit.layer_scale_init = strtof(argv[5], NULL);
    }
    const int random_norms = argc == 7, calibrate = argc == 7 && strcmp(argv[6], "calibrated") == 0;
    if (calibrate && spec.kind != BACKBONE_YOLO) {
        fprintf(stderr, "make_backbone: calibrated: for YOLOs only\n");
        return 2;
    }
    if (calibrate) spec.yolo.bn_momentum = 1.0f;  // running statistics = the batch's
    const BackboneInput input = {calibrate ? 4 : 1, image_size};
    const uint64_t seed = strtoull(argv[3], NULL, 10);
    Backbone backbone;
    int status = backbone_create(&backbone, backend, &spec, &input, 1, seed, &err);
    if (!status) {
        if (random_norms) randomize_norms(&backbone, seed);
        if (calibrate) status = calibrate_statistics(&backbone, 4, image_size, seed, &err);
        if (!status) status = backbone_save(&backbone, argv[1], &err);
        backbone_free(&backbone);
    }
    if (status) fprintf(stderr, "make_backbone: %s\n", err.text);
    backend_destroy(backend);
    return status ? 1 : 0;
}
