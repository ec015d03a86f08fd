// The ShuffleNetV2's part of the backbone interface (backbone.c dispatches
// to it): its function table and its allocation.
#ifndef LTC_NN_BACKBONE_SHUFFLENET_H
#define LTC_NN_BACKBONE_SHUFFLENET_H

#include "nn/backbone.h"

extern const BackboneOps shufflenet_backbone_ops;

// Declares and allocates b->model.shufflenet for b->spec (frozen: no
// gradients) and fills b's tables; on failure the caller frees.
int backbone_allocate_shufflenet(Backbone *b, const BackboneInput *inputs, int count, int frozen,
                                 ErrorMessage *err);

#endif
