// The geometry of backend ops and the handles of the plans made for it.
//
// Each op family with a shape-dependent setup (convolution, depthwise
// convolution, max-pool, attention) has a shape struct here, filled and
// checked by its *_shape_make helper (backend.c); a backend prepares an
// opaque plan per shape (algorithm choice, workspace) when the model is
// built. Included by backend.h, which declares the ops that take them.
#ifndef LTC_BACKEND_BACKEND_SHAPES_H
#define LTC_BACKEND_BACKEND_SHAPES_H

#include "util/error.h"

// Convolution geometry: square kernel, stride and zero padding (what the
// ResNet family needs); groups = 1, dilation = 1.
typedef struct ConvShape {
    int batch;
    int in_height, in_width, in_channels;
    int out_channels;
    int kernel, stride, padding;
    int out_height, out_width;  // derived by conv_shape_make
} ConvShape;

// Fills a ConvShape and its output size; -1 when the output would be empty.
int conv_shape_make(ConvShape *shape, int batch, int in_height, int in_width, int in_channels,
                    int out_channels, int kernel, int stride, int padding, ErrorMessage *err);

// A backend's prepared convolution for one ConvShape (algorithm choice,
// primitives, workspace need). Made when the model is built, once per
// shape it will see (DINO: global and local view sizes).
typedef struct ConvPlan ConvPlan;

// Depthwise convolution geometry (ConvNeXt's 7x7, YOLO's 3x3 position
// encoding in C2PSA): groups = channels, each
// channel filtered by its own square kernel with stride and zero padding.
typedef struct DepthwiseShape {
    int batch, in_height, in_width, channels;
    int kernel, stride, padding;
    int out_height, out_width;  // derived by depthwise_shape_make
} DepthwiseShape;

// Fills a DepthwiseShape and its output size; -1 when the output would be empty.
int depthwise_shape_make(DepthwiseShape *shape, int batch, int in_height, int in_width,
                         int channels, int kernel, int stride, int padding, ErrorMessage *err);

// A backend's prepared depthwise convolution for one DepthwiseShape (its
// workspace for the weight gradient's partial sums). Made with the model.
typedef struct DepthwisePlan DepthwisePlan;

// A backend's prepared linear layer for one (rows, in, out), GELU after it or not.
typedef struct LinearPlan LinearPlan;

// Max-pool geometry (square window, zero... i.e. -inf padding).
typedef struct PoolShape {
    int batch, in_height, in_width, channels;
    int window, stride, padding;
    int out_height, out_width;  // derived by pool_shape_make
} PoolShape;

int pool_shape_make(PoolShape *shape, int batch, int in_height, int in_width, int channels,
                    int window, int stride, int padding, ErrorMessage *err);

// Multi-head attention geometry: per (batch, head), tokens queries attend to
// the same tokens' keys, each vector head_dim long.
typedef struct AttentionShape {
    int batch, heads, tokens, head_dim;
} AttentionShape;

// Fills an AttentionShape; -1 when a size is not positive.
int attention_shape_make(AttentionShape *shape, int batch, int heads, int tokens, int head_dim,
                         ErrorMessage *err);

// A backend's prepared attention for one AttentionShape (its workspace for
// the score rows it recomputes). Made when the model is built.
typedef struct AttentionPlan AttentionPlan;

#endif
