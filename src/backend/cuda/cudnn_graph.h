// cuDNN's graph (backend) API from C, the small part the cuda backend uses
// for its fused paths (cuda_sdpa.c: attention; cuda_conv_fusion.c:
// convolution with BatchNorm): tensors, operations (pointwise, matmul,
// reduction, reshape, convolution forward and filter gradient, statistics
// generation and the ones a caller makes itself), an operation
// graph, the first engine configuration of cuDNN's heuristics whose
// execution plan finalizes, and its execution with a variant pack.
//
// Building never ends the process: every call after the first failure does
// nothing, and dnn_graph_plan reports the first failure (the call, the
// attribute, cuDNN's status) as the reason the fused path is not taken; the
// caller then runs its fallback. A failure while executing a finalized plan
// is fatal (cuda_fatal), as every other op's.
//
// Descriptors are cudnnBackendDescriptor_t, passed as void * so that
// callers need not include cudnn.h.
#ifndef LTC_BACKEND_CUDA_CUDNN_GRAPH_H
#define LTC_BACKEND_CUDA_CUDNN_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DNN_MAX_RANK 8
#define DNN_MAX_DESCRIPTORS 192

// Tensor flags.
enum { DNN_VIRTUAL = 1, DNN_BY_VALUE = 2 };

// A graph being built: the descriptors made for it (freed with its plan, or
// by dnn_graph_abandon) and the first failure.
typedef struct DnnGraph {
    void *handle;  // cudnnHandle_t
    void *descriptors[DNN_MAX_DESCRIPTORS];
    int count;
    void *ops[DNN_MAX_DESCRIPTORS / 2];
    int op_count;
    int failed;
    char reason[200];
} DnnGraph;

void dnn_graph_begin(DnnGraph *graph, void *handle);
// A tensor (rank <= DNN_MAX_RANK) of cuDNN data type `type` (a
// cudnnDataType_t), 16-byte aligned. NULL after a failure.
void *dnn_graph_tensor(DnnGraph *graph, int64_t uid, int type, int rank, const int64_t *dims,
                       const int64_t *strides, unsigned flags);
// y = mode(x[, b]) with fp32 math (mode: a cudnnPointwiseMode_t; b NULL for
// one input).
void dnn_graph_pointwise(DnnGraph *graph, int mode, void *x, void *b, void *y);
// The same with the operation's alpha1 and alpha2: y = mode(alpha1 x,
// alpha2 b) (ADD with alpha2 -1: x - b, as DgradDreluBNBwdWeight asks).
void dnn_graph_pointwise_scaled(DnnGraph *graph, int mode, void *x, float alpha1, void *b,
                                float alpha2, void *y);
// c = a b over the last two dimensions (batch dimensions broadcast), fp32.
void dnn_graph_matmul(DnnGraph *graph, void *a, void *b, void *c);
// y = x reduced (op: a cudnnReduceTensorOp_t) over the dimensions where y has 1.
void dnn_graph_reduction(DnnGraph *graph, int op, void *x, void *y);
// y = x's memory seen through y's dimensions and strides.
void dnn_graph_reshape(DnnGraph *graph, void *x, void *y);

// A 2-d cross-correlation descriptor: fp32 accumulation, dilation 1, the
// stride and the padding on both sides.
void *dnn_graph_convolution(DnnGraph *graph, int64_t stride, int64_t padding);
// y = conv(x, w) with that descriptor (alpha 1, beta 0).
void dnn_graph_conv_forward(DnnGraph *graph, void *conv, void *x, void *w, void *y);
// dw = the filter gradient of conv(x, .) for dy (alpha 1, beta 0: written).
void dnn_graph_conv_filter_gradient(DnnGraph *graph, void *conv, void *x, void *dy, void *dw);
// sum and sqsum (1, K, 1, 1, float) = y's per-channel sum and sum of squares.
void dnn_graph_genstats(DnnGraph *graph, void *y, void *sum, void *sqsum);
// dx = the data gradient of conv(., w) for dy (alpha 1, beta 0: written).
void dnn_graph_conv_data_gradient(DnnGraph *graph, void *conv, void *dy, void *w, void *dx);
// dx = dy where x > 0, else 0 (pointwise RELU_BWD, fp32 math).
void dnn_graph_relu_backward(DnnGraph *graph, void *x, void *dy, void *dx);
// A BatchNorm's weight gradient (cuDNN's BN_BWD_WEIGHTS, fp32 math) and the
// equivalent coefficients of its data gradient: with xhat = (x - mean)
// inv_std per channel, dscale = sum dy xhat, dbias = sum dy, and dx =
// eq_dy_scale dy + eq_x_scale x + eq_bias. x and dy (N, C, H, W); the rest
// (1, C, 1, 1) float.
typedef struct DnnNormWeightsGradient {
    void *x, *dy, *mean, *inv_std, *scale;                       // read
    void *dscale, *dbias, *eq_dy_scale, *eq_x_scale, *eq_bias;  // written
} DnnNormWeightsGradient;
void dnn_graph_bn_backward_weights(DnnGraph *graph, const DnnNormWeightsGradient *tensors);
// For operations the helpers above do not make: a new descriptor of
// `descriptor_type` (a cudnnBackendDescriptorType_t), its attributes set one
// by one, finalized, and (operations) added to the graph.
void *dnn_graph_descriptor(DnnGraph *graph, int descriptor_type, const char *what);
void dnn_graph_set(DnnGraph *graph, void *descriptor, int attribute, int attribute_type,
                   int64_t count, const void *values, const char *what);
void dnn_graph_finalize(DnnGraph *graph, void *descriptor, const char *what);
void dnn_graph_add_operation(DnnGraph *graph, void *operation);

#define DNN_PACK_SLOTS 16    // variant packs a plan keeps
#define DNN_PACK_TENSORS 16  // tensors a kept variant pack binds at most

// A finalized variant pack and what it binds.
typedef struct DnnPack {
    void *pack;  // NULL: a free slot
    int count;
    int64_t uids[DNN_PACK_TENSORS];
    void *pointers[DNN_PACK_TENSORS];
    void *workspace;
} DnnPack;

// The plan of a built graph.
typedef struct DnnPlan {
    void *handle;
    void *plan;       // the execution plan
    int64_t workspace_bytes;
    int deterministic;
    void *descriptors[DNN_MAX_DESCRIPTORS + 2];
    int count;
    // The variant packs of its last executions, made once per set of
    // pointers (a step binds the same buffers every step), the oldest
    // replaced by a new one.
    DnnPack packs[DNN_PACK_SLOTS];
    int next_pack;
} DnnPlan;

// Finalizes the graph's operation graph and takes the first configuration
// of cuDNN's heuristics (mode A) whose plan finalizes, skipping those whose
// engine notes say non-deterministic when `deterministic` (none left: the
// first of any kind, plan->deterministic 0). NULL with the reason in err
// (the graph's descriptors are freed either way).
DnnPlan *dnn_graph_plan(DnnGraph *graph, int deterministic, ErrorMessage *err);
// Frees what a graph made when no plan is wanted from it.
void dnn_graph_abandon(DnnGraph *graph);
// Runs the plan on the handle's stream: uids[i] bound to pointers[i]
// (device memory; host memory for by-value tensors, read by the call), the
// workspace (plan->workspace_bytes, device memory) or NULL. Nothing is
// allocated on the device and the host does not wait, so an execution can
// be captured into a CUDA graph, which keeps the pointers as they were.
void dnn_plan_execute(DnnPlan *plan, int count, const int64_t *uids, void *const *pointers,
                      void *workspace);
void dnn_plan_free(DnnPlan *plan);

#ifdef __cplusplus
}
#endif

#endif
