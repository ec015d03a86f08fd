// Convolution fused with BatchNorm's statistics through cuDNN's graph API
// (cudnn_graph.h): the forward convolution and a statistics generation on
// its output in one graph (cuDNN's ConvBNfprop pattern, its "conv +
// genstats" part), so the training-mode BatchNorm after it needs no pass
// of its own over the output for the sums (layers.c conv_batchnorm_forward,
// backend.h conv2d_forward_stats).
//
// The graph: X (N, C, H, W dimensions over NHWC memory), W (K, C, R, S over
// KRSC), Y (N, K, OH, OW over NHWC) in the 16-bit type, a convolution with
// fp32 accumulation (cross-correlation, the plan's stride and padding),
// then sum and sum of squares of Y per channel into two float (1, K, 1, 1)
// tensors, the (2, K) sums of the op. cuDNN's fused engines take fp16 /
// bf16 NHWC with channel counts that are multiples of 8 (sm80 and later);
// fp32 and the padded stem are left to the separate ops.
//
// Probed once per shape and cached like the algorithm choice
// (conv_algorithms.h; key suffix "|conv-genstats", forward = 1 when cuDNN
// gave a plan, forward_bytes its workspace): a later process skips the
// graph of a shape cuDNN refused. LTC_CUDA_CONV_FUSION=off leaves every
// convolution to the separate ops (the same-run comparison).
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/conv_algorithms.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cudnn_graph.h"

enum { UID_X = 1, UID_W, UID_Y, UID_SUM, UID_SQSUM };

struct CudaConvStats {
    DnnPlan *plan;
    int out_channels;
};

static void *nhwc_tensor(DnnGraph *g, int64_t uid, int type, int64_t n, int64_t c, int64_t h,
                         int64_t w) {
    const int64_t dims[4] = {n, c, h, w}, strides[4] = {h * w * c, 1, w * c, c};
    return dnn_graph_tensor(g, uid, type, 4, dims, strides, 0);
}

static void build(DnnGraph *g, const ConvShape *s, int type) {
    void *x = nhwc_tensor(g, UID_X, type, s->batch, s->in_channels, s->in_height, s->in_width);
    void *w = nhwc_tensor(g, UID_W, type, s->out_channels, s->in_channels, s->kernel, s->kernel);
    void *y = nhwc_tensor(g, UID_Y, type, s->batch, s->out_channels, s->out_height, s->out_width);
    const int64_t sum_dims[4] = {1, s->out_channels, 1, 1};
    const int64_t sum_strides[4] = {s->out_channels, 1, s->out_channels, s->out_channels};
    void *sum = dnn_graph_tensor(g, UID_SUM, CUDNN_DATA_FLOAT, 4, sum_dims, sum_strides, 0);
    void *sqsum = dnn_graph_tensor(g, UID_SQSUM, CUDNN_DATA_FLOAT, 4, sum_dims, sum_strides, 0);

    void *conv = dnn_graph_descriptor(g, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "convolution");
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t spatial = 2, ones[2] = {1, 1}, strides[2] = {s->stride, s->stride};
    const int64_t padding[2] = {s->padding, s->padding};
    dnn_graph_set(g, conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute,
                  "convolution compute type");
    dnn_graph_set(g, conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1,
                  &mode, "convolution mode");
    dnn_graph_set(g, conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial,
                  "convolution spatial dims");
    dnn_graph_set(g, conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, ones,
                  "convolution dilations");
    dnn_graph_set(g, conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, strides,
                  "convolution strides");
    dnn_graph_set(g, conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, padding,
                  "convolution pre-paddings");
    dnn_graph_set(g, conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, padding,
                  "convolution post-paddings");
    dnn_graph_finalize(g, conv, "convolution");

    void *op = dnn_graph_descriptor(g, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                                    "convolution forward");
    const float alpha = 1.0f, beta = 0.0f;
    dnn_graph_set(g, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "convolution x");
    dnn_graph_set(g, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w, "convolution w");
    dnn_graph_set(g, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "convolution y");
    dnn_graph_set(g, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv, "convolution descriptor");
    dnn_graph_set(g, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1,
                  &alpha, "convolution alpha");
    dnn_graph_set(g, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1,
                  &beta, "convolution beta");
    dnn_graph_finalize(g, op, "convolution forward");
    dnn_graph_add_operation(g, op);

    void *stats = dnn_graph_descriptor(g, CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR,
                                       "statistics generation");
    const cudnnGenStatsMode_t stats_mode = CUDNN_GENSTATS_SUM_SQSUM;
    dnn_graph_set(g, stats, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1,
                  &stats_mode, "statistics mode");
    dnn_graph_set(g, stats, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1,
                  &compute, "statistics precision");
    dnn_graph_set(g, stats, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                  &y, "statistics input");
    dnn_graph_set(g, stats, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC,
                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum, "statistics sum");
    dnn_graph_set(g, stats, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC,
                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sqsum, "statistics sum of squares");
    dnn_graph_finalize(g, stats, "statistics generation");
    dnn_graph_add_operation(g, stats);
}

static int fusion_off(void) {
    const char *value = getenv("LTC_CUDA_CONV_FUSION");
    return value && strcmp(value, "off") == 0;
}

// What rules the fused path out before cuDNN is asked, or NULL.
static const char *unsupported(const Backend *backend, const ConvShape *s) {
    if (fusion_off()) return "LTC_CUDA_CONV_FUSION=off";
    if (backend->compute_dtype == COMPUTE_F32) return "fp32 (cuDNN's fused engines are 16-bit)";
    if (s->in_channels % 8 || s->out_channels % 8) return "channels not multiples of 8";
    if (cuda_state(backend)->compute_major < 8) return "GPU older than sm80";
    return NULL;
}

CudaConvStats *cuda_conv_stats_create(Backend *backend, const ConvShape *s, const char *key,
                                      char *reason, size_t reason_size) {
    const char *ruled_out = unsupported(backend, s);
    if (ruled_out) {
        snprintf(reason, reason_size, "%s", ruled_out);
        return NULL;
    }
    char probe_key[600];
    snprintf(probe_key, sizeof probe_key, "%s|conv-genstats", key);
    ConvAlgorithms cached = {0};
    const int known = conv_algorithms_lookup(probe_key, &cached);
    if (known && !cached.forward) {
        snprintf(reason, reason_size, "cuDNN refused the shape before (%s)", probe_key);
        return NULL;
    }
    DnnGraph graph;
    dnn_graph_begin(&graph, cuda_state(backend)->cudnn);
    build(&graph, s, backend->compute_dtype == COMPUTE_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF);
    ErrorMessage err = {{0}};
    DnnPlan *plan = dnn_graph_plan(&graph, 1, &err);
    if (!known) {
        const ConvAlgorithms probe = {.forward = plan != NULL,
                                      .forward_bytes = plan ? (size_t)plan->workspace_bytes : 0};
        conv_algorithms_store(probe_key, &probe);
    }
    CudaConvStats *stats = plan ? calloc(1, sizeof *stats) : NULL;
    if (!stats || cuda_reserve_workspace(cuda_state(backend), (size_t)plan->workspace_bytes, &err)) {
        snprintf(reason, reason_size, "%s", plan ? "out of memory" : err.text);
        dnn_plan_free(plan);
        free(stats);
        return NULL;
    }
    stats->plan = plan;
    stats->out_channels = s->out_channels;
    return stats;
}

void cuda_conv_stats_free(CudaConvStats *stats) {
    if (!stats) return;
    dnn_plan_free(stats->plan);
    free(stats);
}

void cuda_conv_stats_forward(Backend *backend, const CudaConvStats *stats, const Act *x,
                             const Act *w, Act *y, float *sums) {
    const int64_t uids[] = {UID_X, UID_W, UID_Y, UID_SUM, UID_SQSUM};
    void *const pointers[] = {(void *)x, (void *)w, y, sums, sums + stats->out_channels};
    dnn_plan_execute(stats->plan, 5, uids, pointers, cuda_state(backend)->workspace);
}
