// Writes a freshly initialised backbone for the end-to-end tests (a
// distillation teacher, nothing downloaded):
//   make_backbone OUT MODEL SEED [IMAGE_SIZE [LAYER_SCALE]]
// MODEL is a --model name (resnet18, vit_t14, vit_s14_reg4, ...), SEED its
// initialisation, IMAGE_SIZE a ViT's position grid (default 224),
// LAYER_SCALE a ViT's initial LayerScale gammas (default the preset's 1e-5,
// which leaves the class token almost the same for every image). The file
// is what export writes: a ResNet in torchvision's names, a ViT in timm's
// (with our num_heads / pool metadata).
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "nn/backbone.h"

int main(int argc, char **argv) {
    if (argc < 4 || argc > 6) {
        fprintf(stderr, "usage: %s OUT MODEL SEED [IMAGE_SIZE [LAYER_SCALE]]\n", argv[0]);
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
    if (argc == 6) {
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
    if (!status) {
        status = backbone_save(&backbone, argv[1], &err);
        backbone_free(&backbone);
    }
    if (status) fprintf(stderr, "make_backbone: %s\n", err.text);
    backend_destroy(backend);
    return status ? 1 : 0;
}
