// cuDNN's graph (backend) API from C (see cudnn_graph.h). The calls follow
// cuDNN 9's backend descriptor protocol: create a descriptor, set its
// attributes, finalize it; an operation graph of finalized operations; an
// engine heuristics descriptor (mode A) whose results are engine
// configurations; an execution plan per configuration until one finalizes;
// a variant pack (unique ids, data pointers, workspace) per set of
// bindings, kept with the plan (made once, not at every execution).
#include "backend/cuda/cudnn_graph.h"

#include <cudnn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"

static void fail(DnnGraph *graph, const char *what, cudnnStatus_t status) {
    if (graph->failed) return;
    graph->failed = 1;
    snprintf(graph->reason, sizeof graph->reason, "cuDNN %s: %s", what,
             cudnnGetErrorString(status));
}

void dnn_graph_begin(DnnGraph *graph, void *handle) {
    memset(graph, 0, sizeof *graph);
    graph->handle = handle;
}

void *dnn_graph_descriptor(DnnGraph *graph, int descriptor_type, const char *what) {
    if (graph->failed) return NULL;
    if (graph->count == DNN_MAX_DESCRIPTORS) {
        graph->failed = 1;
        snprintf(graph->reason, sizeof graph->reason, "%s: over %d cuDNN descriptors", what,
                 DNN_MAX_DESCRIPTORS);
        return NULL;
    }
    cudnnBackendDescriptor_t descriptor = NULL;
    const cudnnStatus_t status =
        cudnnBackendCreateDescriptor((cudnnBackendDescriptorType_t)descriptor_type, &descriptor);
    if (status != CUDNN_STATUS_SUCCESS) {
        fail(graph, what, status);
        return NULL;
    }
    graph->descriptors[graph->count++] = descriptor;
    return descriptor;
}

void dnn_graph_set(DnnGraph *graph, void *descriptor, int attribute, int attribute_type,
                   int64_t count, const void *values, const char *what) {
    if (graph->failed || !descriptor) return;
    const cudnnStatus_t status = cudnnBackendSetAttribute(
        (cudnnBackendDescriptor_t)descriptor, (cudnnBackendAttributeName_t)attribute,
        (cudnnBackendAttributeType_t)attribute_type, count, values);
    if (status != CUDNN_STATUS_SUCCESS) fail(graph, what, status);
}

void dnn_graph_finalize(DnnGraph *graph, void *descriptor, const char *what) {
    if (graph->failed || !descriptor) return;
    const cudnnStatus_t status = cudnnBackendFinalize((cudnnBackendDescriptor_t)descriptor);
    if (status != CUDNN_STATUS_SUCCESS) fail(graph, what, status);
}

void dnn_graph_add_operation(DnnGraph *graph, void *operation) {
    if (graph->failed || !operation) return;
    if (graph->op_count == (int)(sizeof graph->ops / sizeof graph->ops[0])) {
        graph->failed = 1;
        snprintf(graph->reason, sizeof graph->reason, "over %d operations in one graph",
                 graph->op_count);
        return;
    }
    graph->ops[graph->op_count++] = operation;
}

#define SET(graph, d, name, type, count, values) \
    dnn_graph_set(graph, d, name, type, count, values, #name)

void *dnn_graph_tensor(DnnGraph *graph, int64_t uid, int type, int rank, const int64_t *dims,
                       const int64_t *strides, unsigned flags) {
    void *t = dnn_graph_descriptor(graph, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
    const cudnnDataType_t data_type = (cudnnDataType_t)type;
    const int64_t alignment = 16;
    const bool is_virtual = (flags & DNN_VIRTUAL) != 0, by_value = (flags & DNN_BY_VALUE) != 0;
    SET(graph, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    SET(graph, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &data_type);
    SET(graph, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, dims);
    SET(graph, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, strides);
    SET(graph, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    SET(graph, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) SET(graph, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    dnn_graph_finalize(graph, t, "tensor");
    return graph->failed ? NULL : t;
}

// A pointwise operation descriptor of `mode` (fp32 math) with its
// pointwise descriptor set; the caller sets its tensors.
static void *pointwise_operation(DnnGraph *graph, int mode, const char *what) {
    void *pw = dnn_graph_descriptor(graph, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
    const cudnnPointwiseMode_t pointwise_mode = (cudnnPointwiseMode_t)mode;
    const cudnnDataType_t math = CUDNN_DATA_FLOAT;
    SET(graph, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &pointwise_mode);
    SET(graph, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
    dnn_graph_finalize(graph, pw, "pointwise");
    void *op = dnn_graph_descriptor(graph, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
    SET(graph, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &pw);
    return op;
}

// The operation's tensors and, where given (alphas), its alpha1 and alpha2.
static void pointwise_node(DnnGraph *graph, int mode, void *x, void *b, void *y,
                          const float *alphas) {
    void *op = pointwise_operation(graph, mode, "pointwise operation");
    SET(graph, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b)
        SET(graph, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &b);
    SET(graph, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    if (alphas) {
        SET(graph, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &alphas[0]);
        SET(graph, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &alphas[1]);
    }
    dnn_graph_finalize(graph, op, "pointwise operation");
    dnn_graph_add_operation(graph, op);
}

void dnn_graph_pointwise(DnnGraph *graph, int mode, void *x, void *b, void *y) {
    pointwise_node(graph, mode, x, b, y, NULL);
}

void dnn_graph_pointwise_scaled(DnnGraph *graph, int mode, void *x, float alpha1, void *b,
                                float alpha2, void *y) {
    const float alphas[2] = {alpha1, alpha2};
    pointwise_node(graph, mode, x, b, y, alphas);
}

void dnn_graph_matmul(DnnGraph *graph, void *a, void *b, void *c) {
    void *mm = dnn_graph_descriptor(graph, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    SET(graph, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    dnn_graph_finalize(graph, mm, "matmul");
    void *op = dnn_graph_descriptor(graph, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR,
                                    "matmul operation");
    SET(graph, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    SET(graph, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    SET(graph, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    SET(graph, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    dnn_graph_finalize(graph, op, "matmul operation");
    dnn_graph_add_operation(graph, op);
}

void dnn_graph_reduction(DnnGraph *graph, int op_type, void *x, void *y) {
    void *red = dnn_graph_descriptor(graph, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
    const cudnnReduceTensorOp_t reduce = (cudnnReduceTensorOp_t)op_type;
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    SET(graph, red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce);
    SET(graph, red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    dnn_graph_finalize(graph, red, "reduction");
    void *op = dnn_graph_descriptor(graph, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR,
                                    "reduction operation");
    SET(graph, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SET(graph, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    SET(graph, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &red);
    dnn_graph_finalize(graph, op, "reduction operation");
    dnn_graph_add_operation(graph, op);
}

void dnn_graph_reshape(DnnGraph *graph, void *x, void *y) {
    void *op = dnn_graph_descriptor(graph, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR,
                                    "reshape operation");
    SET(graph, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SET(graph, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    dnn_graph_finalize(graph, op, "reshape operation");
    dnn_graph_add_operation(graph, op);
}

void *dnn_graph_convolution(DnnGraph *graph, int64_t stride, int64_t padding) {
    void *conv = dnn_graph_descriptor(graph, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "convolution");
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t spatial = 2, ones[2] = {1, 1}, strides[2] = {stride, stride};
    const int64_t paddings[2] = {padding, padding};
    SET(graph, conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    SET(graph, conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    SET(graph, conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial);
    SET(graph, conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, ones);
    SET(graph, conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, strides);
    SET(graph, conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, paddings);
    SET(graph, conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, paddings);
    dnn_graph_finalize(graph, conv, "convolution");
    return conv;
}

// The three convolution operations: the descriptor type, what it is
// called in errors, and the attributes of its three tensors, the
// convolution descriptor, alpha and beta.
typedef struct ConvolutionKind {
    int type;
    const char *what;
    cudnnBackendAttributeName_t names[6];
} ConvolutionKind;

static const ConvolutionKind kForward = {
    CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
    "convolution forward",
    {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA}};
static const ConvolutionKind kFilterGradient = {
    CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
    "convolution filter gradient",
    {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
static const ConvolutionKind kDataGradient = {
    CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
    "convolution data gradient",
    {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA}};

// A convolution operation of `kind` with its three tensors (in the order
// of kind->names), the convolution descriptor, alpha 1 and beta 0.
static void convolution_operation(DnnGraph *graph, const ConvolutionKind *kind, void *a, void *b,
                                  void *c, void *conv) {
    void *op = dnn_graph_descriptor(graph, kind->type, kind->what);
    void *const tensors[3] = {a, b, c};
    const float alpha = 1.0f, beta = 0.0f;
    for (int i = 0; i < 3; i++)
        dnn_graph_set(graph, op, kind->names[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tensors[i],
                      kind->what);
    dnn_graph_set(graph, op, kind->names[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv, kind->what);
    dnn_graph_set(graph, op, kind->names[4], CUDNN_TYPE_FLOAT, 1, &alpha, kind->what);
    dnn_graph_set(graph, op, kind->names[5], CUDNN_TYPE_FLOAT, 1, &beta, kind->what);
    dnn_graph_finalize(graph, op, kind->what);
    dnn_graph_add_operation(graph, op);
}

void dnn_graph_conv_forward(DnnGraph *graph, void *conv, void *x, void *w, void *y) {
    convolution_operation(graph, &kForward, x, w, y, conv);
}

void dnn_graph_conv_filter_gradient(DnnGraph *graph, void *conv, void *x, void *dy, void *dw) {
    convolution_operation(graph, &kFilterGradient, x, dy, dw, conv);
}

void dnn_graph_conv_data_gradient(DnnGraph *graph, void *conv, void *dy, void *w, void *dx) {
    convolution_operation(graph, &kDataGradient, dy, w, dx, conv);
}

void dnn_graph_genstats(DnnGraph *graph, void *y, void *sum, void *sqsum) {
    void *op = dnn_graph_descriptor(graph, CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR,
                                    "statistics generation");
    const cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
    const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
    SET(graph, op, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode);
    SET(graph, op, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision);
    SET(graph, op, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    SET(graph, op, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum);
    SET(graph, op, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &sqsum);
    dnn_graph_finalize(graph, op, "statistics generation");
    dnn_graph_add_operation(graph, op);
}

void dnn_graph_relu_backward(DnnGraph *graph, void *x, void *dy, void *dx) {
    void *op = pointwise_operation(graph, CUDNN_POINTWISE_RELU_BWD, "ReLU backward operation");
    SET(graph, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SET(graph, op, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dy);
    SET(graph, op, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dx);
    dnn_graph_finalize(graph, op, "ReLU backward operation");
    dnn_graph_add_operation(graph, op);
}

void dnn_graph_bn_backward_weights(DnnGraph *graph, const DnnNormWeightsGradient *t) {
    void *op = dnn_graph_descriptor(graph, CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR,
                                    "BatchNorm weight gradient");
    const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
    SET(graph, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1,
        &precision);
    const struct {
        cudnnBackendAttributeName_t name;
        void *tensor;
    } bound[] = {
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC, t->x},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC, t->dy},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, t->mean},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC, t->inv_std},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC, t->scale},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC, t->dscale},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC, t->dbias},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC, t->eq_dy_scale},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC, t->eq_x_scale},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS, t->eq_bias},
    };
    for (size_t i = 0; i < sizeof bound / sizeof bound[0]; i++)
        dnn_graph_set(graph, op, bound[i].name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                      &bound[i].tensor, "BatchNorm weight gradient");
    dnn_graph_finalize(graph, op, "BatchNorm weight gradient");
    dnn_graph_add_operation(graph, op);
}

void dnn_graph_abandon(DnnGraph *graph) {
    for (int i = graph->count - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor((cudnnBackendDescriptor_t)graph->descriptors[i]);
    graph->count = 0;
}

// Whether an engine's numerical notes say it is not deterministic.
static int nondeterministic(cudnnBackendDescriptor_t engine) {
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t count = 0;
    if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                 CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                 &count, notes) != CUDNN_STATUS_SUCCESS)
        return 1;  // unknown: treated as not deterministic
    for (int64_t i = 0; i < count; i++)
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return 1;
    return 0;
}

enum { MAX_CONFIGS = 16 };

// The plan of configuration `config`, or NULL where it does not finalize.
static cudnnBackendDescriptor_t plan_of(void *handle, cudnnBackendDescriptor_t config) {
    cudnnBackendDescriptor_t plan = NULL;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) !=
        CUDNN_STATUS_SUCCESS)
        return NULL;
    if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                 &handle) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS) {
        cudnnBackendDestroyDescriptor(plan);
        return NULL;
    }
    return plan;
}

DnnPlan *dnn_graph_plan(DnnGraph *graph, int deterministic, ErrorMessage *err) {
    void *op_graph = dnn_graph_descriptor(graph, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
                                          "operation graph");
    SET(graph, op_graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &graph->handle);
    SET(graph, op_graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        graph->op_count, graph->ops);
    dnn_graph_finalize(graph, op_graph, "operation graph");
    void *heuristics = dnn_graph_descriptor(graph, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR,
                                            "engine heuristics");
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    SET(graph, heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &op_graph);
    SET(graph, heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    dnn_graph_finalize(graph, heuristics, "engine heuristics");
    cudnnBackendDescriptor_t configs[MAX_CONFIGS] = {0};
    int64_t found = 0;
    for (int i = 0; !graph->failed && i < MAX_CONFIGS; i++)
        configs[i] = dnn_graph_descriptor(graph, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                                          "engine configuration");
    if (!graph->failed) {
        const cudnnStatus_t status = cudnnBackendGetAttribute(
            heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, MAX_CONFIGS,
            &found, configs);
        if (status != CUDNN_STATUS_SUCCESS) fail(graph, "heuristics' results", status);
    }
    if (graph->failed) {
        error_set(err, "%s", graph->reason);
        dnn_graph_abandon(graph);
        return NULL;
    }
    cudnnBackendDescriptor_t chosen = NULL;
    int chosen_deterministic = 0;
    // deterministic engines first; then, where none finalizes, any
    for (int pass = deterministic ? 0 : 1; pass < 2 && !chosen; pass++)
        for (int64_t i = 0; i < found && i < MAX_CONFIGS && !chosen; i++) {
            cudnnBackendDescriptor_t engine = NULL;
            int64_t got = 0;
            if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) !=
                CUDNN_STATUS_SUCCESS)
                continue;
            const int exact =
                cudnnBackendGetAttribute(configs[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &engine) ==
                    CUDNN_STATUS_SUCCESS &&
                !nondeterministic(engine);
            cudnnBackendDestroyDescriptor(engine);
            if (pass == 0 && !exact) continue;
            chosen = plan_of(graph->handle, configs[i]);
            chosen_deterministic = exact;
        }
    if (!chosen) {
        error_set(err, "cuDNN has no engine for this graph (%lld configurations, none finalized)",
                  (long long)found);
        dnn_graph_abandon(graph);
        return NULL;
    }
    DnnPlan *plan = calloc(1, sizeof *plan);
    int64_t workspace = 0, got = 0;
    if (!plan || cudnnBackendGetAttribute(chosen, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                          CUDNN_TYPE_INT64, 1, &got, &workspace) !=
                     CUDNN_STATUS_SUCCESS) {
        free(plan);
        cudnnBackendDestroyDescriptor(chosen);
        dnn_graph_abandon(graph);
        error_set(err, "cuDNN plan: no workspace size");
        return NULL;
    }
    plan->handle = graph->handle;
    plan->plan = chosen;
    plan->workspace_bytes = workspace;
    plan->deterministic = chosen_deterministic;
    memcpy(plan->descriptors, graph->descriptors, (size_t)graph->count * sizeof(void *));
    plan->count = graph->count;
    graph->count = 0;  // the plan owns them now
    return plan;
}

// A finalized variant pack binding uids to pointers, and the workspace.
static cudnnBackendDescriptor_t pack_make(int count, const int64_t *uids, void *const *pointers,
                                          void *workspace) {
    cudnnBackendDescriptor_t pack = NULL;
    CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    CUDNN_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                         CUDNN_TYPE_INT64, count, uids));
    CUDNN_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                         CUDNN_TYPE_VOID_PTR, count, pointers));
    CUDNN_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                         CUDNN_TYPE_VOID_PTR, 1, &workspace));
    CUDNN_CHECK(cudnnBackendFinalize(pack));
    return pack;
}

// The plan's kept pack for these bindings, made (in the oldest slot) when
// none is; NULL for more tensors than a kept pack binds.
static cudnnBackendDescriptor_t pack_for(DnnPlan *plan, int count, const int64_t *uids,
                                         void *const *pointers, void *workspace) {
    if (count > DNN_PACK_TENSORS) return NULL;
    for (int i = 0; i < DNN_PACK_SLOTS; i++) {
        const DnnPack *kept = &plan->packs[i];
        if (kept->pack && kept->count == count && kept->workspace == workspace &&
            memcmp(kept->uids, uids, (size_t)count * sizeof *uids) == 0 &&
            memcmp(kept->pointers, pointers, (size_t)count * sizeof *pointers) == 0)
            return (cudnnBackendDescriptor_t)kept->pack;
    }
    DnnPack *slot = &plan->packs[plan->next_pack];
    plan->next_pack = (plan->next_pack + 1) % DNN_PACK_SLOTS;
    if (slot->pack) CUDNN_CHECK(cudnnBackendDestroyDescriptor((cudnnBackendDescriptor_t)slot->pack));
    slot->pack = pack_make(count, uids, pointers, workspace);
    slot->count = count;
    memcpy(slot->uids, uids, (size_t)count * sizeof *uids);
    memcpy(slot->pointers, pointers, (size_t)count * sizeof *pointers);
    slot->workspace = workspace;
    return (cudnnBackendDescriptor_t)slot->pack;
}

void dnn_plan_execute(DnnPlan *plan, int count, const int64_t *uids, void *const *pointers,
                      void *workspace) {
    cudnnBackendDescriptor_t kept = pack_for(plan, count, uids, pointers, workspace);
    cudnnBackendDescriptor_t pack = kept ? kept : pack_make(count, uids, pointers, workspace);
    if (cuda_queue_point())
        CUDNN_CHECK(cudnnBackendExecute((cudnnHandle_t)plan->handle,
                                        (cudnnBackendDescriptor_t)plan->plan, pack));
    if (!kept) CUDNN_CHECK(cudnnBackendDestroyDescriptor(pack));
}

void dnn_plan_free(DnnPlan *plan) {
    if (!plan) return;
    for (int i = 0; i < DNN_PACK_SLOTS; i++)
        if (plan->packs[i].pack)
            cudnnBackendDestroyDescriptor((cudnnBackendDescriptor_t)plan->packs[i].pack);
    cudnnBackendDestroyDescriptor((cudnnBackendDescriptor_t)plan->plan);
    for (int i = plan->count - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor((cudnnBackendDescriptor_t)plan->descriptors[i]);
    free(plan);
}
