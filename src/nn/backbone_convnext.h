// The ConvNeXt's part of the backbone interface (backbone.c dispatches to
// it): its function table and its allocation.
#ifndef LTC_NN_BACKBONE_CONVNEXT_H
#define LTC_NN_BACKBONE_CONVNEXT_H

#include "nn/backbone.h"

extern const BackboneOps convnext_backbone_ops;

// Declares and allocates b->model.convnext for b->spec (frozen: nothing
// kept for backward) and fills b's tables; on failure the caller frees.
int backbone_allocate_convnext(Backbone *b, const BackboneInput *inputs, int count, int frozen,
                               ErrorMessage *err);

#endif
