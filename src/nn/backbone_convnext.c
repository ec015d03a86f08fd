// The ConvNeXt behind the backbone interface (backbone.h): thin adapters
// onto convnext.h and convnext_weights.h, and its allocation.
#include "nn/backbone_convnext.h"

#include "nn/convnext_weights.h"

static Convnext *convnext_of(Backbone *b) { return &b->model.convnext; }
static const Convnext *convnext_of_const(const Backbone *b) { return &b->model.convnext; }

static int convnext_backbone_forward(Backbone *b, int slot, int batch, const Act *input,
                                     int training, ErrorMessage *err) {
    return convnext_forward(convnext_of(b), slot, batch, input, training, err);
}
static const Act *convnext_backbone_features(const Backbone *b, int slot) {
    return convnext_features(convnext_of_const(b), slot);
}
static int convnext_backbone_backward(Backbone *b, int slot, const Act *dfeatures,
                                      ErrorMessage *err) {
    return convnext_backward_map(convnext_of(b), slot, dfeatures, NULL, err);
}
static const Act *convnext_backbone_feature_map(Backbone *b, int slot, int *height,
                                                  int *width) {
    return convnext_feature_map(convnext_of(b), slot, height, width);
}
static int convnext_backbone_backward_map(Backbone *b, int slot, const Act *dfeatures,
                                          const Act *dmap, ErrorMessage *err) {
    return convnext_backward_map(convnext_of(b), slot, dfeatures, dmap, err);
}
static int convnext_backbone_prepare(Backbone *b, int slot, int batch, ErrorMessage *err) {
    return convnext_prepare_batch(convnext_of(b), slot, batch, err);
}
static int convnext_backbone_init(Backbone *b, uint64_t seed, ErrorMessage *err) {
    return convnext_init(convnext_of(b), seed, err);
}
static int convnext_backbone_load(Backbone *b, const SafeTensors *file, const char *prefix,
                                  ErrorMessage *err) {
    return convnext_load_from(convnext_of(b), file, prefix, err);
}
static int convnext_backbone_save(const Backbone *b, const char *path, StateDictWrite write,
                                  ErrorMessage *err) {
    return convnext_save(convnext_of_const(b), path, write, err);
}
static void convnext_backbone_free(Backbone *b) { convnext_free(convnext_of(b)); }

const BackboneOps convnext_backbone_ops = {
    .forward = convnext_backbone_forward,
    .features = convnext_backbone_features,
    .backward = convnext_backbone_backward,
    .feature_map = convnext_backbone_feature_map,
    .backward_map = convnext_backbone_backward_map,
    .prepare_batch = convnext_backbone_prepare,
    .init = convnext_backbone_init,
    .load = convnext_backbone_load,
    .save = convnext_backbone_save,
    .free = convnext_backbone_free,
};

int backbone_allocate_convnext(Backbone *b, const BackboneInput *inputs, int count, int frozen,
                               ErrorMessage *err) {
    ConvnextInputShape shapes[BACKBONE_MAX_SLOTS];
    for (int i = 0; i < count; i++)
        shapes[i] = (ConvnextInputShape){inputs[i].batch, inputs[i].resolution};
    Convnext *model = convnext_of(b);
    ConvnextConfig config = b->spec.convnext;
    config.in_channels = b->spec.in_channels;
    if (convnext_declare(model, b->backend, &config, err)) return -1;
    model->frozen = frozen;
    if (convnext_allocate(model, shapes, count, err)) return -1;
    b->feature_dim = model->feature_dim;
    b->params = &model->params;
    b->buffers = &model->buffers;
    b->num_batches_tracked = &b->no_batches_tracked;
    return 0;
}
