// The ShuffleNetV2 behind the backbone interface (backbone.h): thin adapters
// onto shufflenet.h, and its allocation.
#include "nn/backbone_shufflenet.h"

static Shufflenet *shufflenet_of(Backbone *b) { return &b->model.shufflenet; }
static const Shufflenet *shufflenet_of_const(const Backbone *b) { return &b->model.shufflenet; }

static int shufflenet_backbone_forward(Backbone *b, int slot, int batch, const Act *input,
                                       int training, ErrorMessage *err) {
    return shufflenet_forward(shufflenet_of(b), slot, batch, input, training, err);
}
static const Act *shufflenet_backbone_features(const Backbone *b, int slot) {
    return shufflenet_features(shufflenet_of_const(b), slot);
}
static int shufflenet_backbone_backward(Backbone *b, int slot, const Act *dfeatures,
                                        ErrorMessage *err) {
    return shufflenet_backward_map(shufflenet_of(b), slot, dfeatures, NULL, err);
}
static const Act *shufflenet_backbone_feature_map(Backbone *b, int slot, int *height,
                                                    int *width) {
    return shufflenet_feature_map(shufflenet_of(b), slot, height, width);
}
static int shufflenet_backbone_backward_map(Backbone *b, int slot, const Act *dfeatures,
                                            const Act *dmap, ErrorMessage *err) {
    return shufflenet_backward_map(shufflenet_of(b), slot, dfeatures, dmap, err);
}
static int shufflenet_backbone_prepare(Backbone *b, int slot, int batch, ErrorMessage *err) {
    return shufflenet_prepare_batch(shufflenet_of(b), slot, batch, err);
}
static int shufflenet_backbone_init(Backbone *b, uint64_t seed, ErrorMessage *err) {
    return shufflenet_init(shufflenet_of(b), seed, err);
}
static int shufflenet_backbone_load(Backbone *b, const SafeTensors *file, const char *prefix,
                                    ErrorMessage *err) {
    return shufflenet_load_from(shufflenet_of(b), file, prefix, err);
}
static int shufflenet_backbone_save(const Backbone *b, const char *path, StateDictWrite write,
                                    ErrorMessage *err) {
    return shufflenet_save(shufflenet_of_const(b), path, write, err);
}
static void shufflenet_backbone_free(Backbone *b) { shufflenet_free(shufflenet_of(b)); }

const BackboneOps shufflenet_backbone_ops = {
    .forward = shufflenet_backbone_forward,
    .features = shufflenet_backbone_features,
    .backward = shufflenet_backbone_backward,
    .feature_map = shufflenet_backbone_feature_map,
    .backward_map = shufflenet_backbone_backward_map,
    .prepare_batch = shufflenet_backbone_prepare,
    .init = shufflenet_backbone_init,
    .load = shufflenet_backbone_load,
    .save = shufflenet_backbone_save,
    .free = shufflenet_backbone_free,
};

int backbone_allocate_shufflenet(Backbone *b, const BackboneInput *inputs, int count, int frozen,
                                 ErrorMessage *err) {
    ShufflenetInputShape shapes[BACKBONE_MAX_SLOTS];
    for (int i = 0; i < count; i++)
        shapes[i] = (ShufflenetInputShape){inputs[i].batch, inputs[i].resolution};
    Shufflenet *model = shufflenet_of(b);
    ShufflenetConfig config = b->spec.shufflenet;
    config.in_channels = b->spec.in_channels;
    if (shufflenet_declare(model, b->backend, &config, err)) return -1;
    model->frozen = frozen;
    if (shufflenet_allocate(model, shapes, count, err)) return -1;
    b->feature_dim = model->feature_dim;
    b->params = &model->params;
    b->buffers = &model->buffers;
    b->num_batches_tracked = &model->num_batches_tracked;
    return 0;
}
