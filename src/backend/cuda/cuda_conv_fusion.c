// Convolution fused with BatchNorm through cuDNN's graph API (cudnn_graph.h),
// cuDNN's ConvBNfprop and ConvBNwgrad patterns (layers.c
// conv_batchnorm_forward, resnet_blocks.c; backend.h conv2d_forward_stats):
// - conv + genstats: the forward convolution and a statistics generation
//   on its output in one graph, so the training-mode BatchNorm after it
//   needs no pass of its own over the output for the sums;
// - scale-bias-relu-conv-genstats: the same with the previous BatchNorm's
//   scale, shift and ReLU applied to the input in the convolution's
//   prologue, so that norm's output is never written (its apply pass goes);
// - scale-bias-relu-wgrad: the weight gradient with the same prologue on
//   its input, so the backward does not need that output either.
// The two prologue graphs are taken together or not at all: a forward with
// the prologue needs its weight gradient (sm90 has both; sm80 has no wgrad
// fusion and sm89 no ConvBNfprop: there the plan keeps conv + genstats).
//
// The graphs: X (N, C, H, W dimensions over NHWC memory), W (K, C, R, S
// over KRSC), Y (N, K, OH, OW over NHWC) in the 16-bit type, convolutions
// with fp32 accumulation (cross-correlation, the plan's stride and padding),
// sum and sum of squares of Y per channel into two float (1, K, 1, 1)
// tensors, the (2, K) sums of the op. The prologue (NVIDIA's cudnn-frontend
// samples SBRCS and scale-bias-relu-wgrad): the scale and shift are (1, C,
// 1, 1) tensors in the 16-bit type, MUL, ADD and RELU_FWD into virtual
// float tensors that the convolution reads. cuDNN's fused engines take fp16
// / bf16 NHWC with channel counts that are multiples of 8 (sm80 and later);
// fp32 and the padded stem are left to the separate ops. The prologue only
// in fp16: bf16 coefficients (8 bits) would move shift = beta - mean scale
// by up to 2^-9 of mean scale, several times the output's own rounding.
//
// Probed once per shape and cached like the algorithm choice
// (conv_algorithms.h; key suffixes "|conv-genstats" and "|conv-prologue",
// forward = 1 when cuDNN gave the plan(s), forward_bytes the workspace): a
// later process skips the graphs of a shape cuDNN refused.
// LTC_CUDA_CONV_FUSION=off leaves every convolution to the separate ops,
// =stats keeps conv + genstats without the prologues (the same-run
// comparisons).
//
// Workspace: an execution owns the backend's workspace (ops run one after
// another on the stream): cuDNN's need first, then the prologue's (2, C)
// coefficients, then the 16-bit weight gradient that is added into the
// fp32 one (as cuda_conv.c does for the legacy API).
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/conv_algorithms.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cudnn_graph.h"

enum { UID_X = 1, UID_W, UID_Y, UID_SUM, UID_SQSUM, UID_SCALE, UID_SHIFT, UID_SCALED,
       UID_SHIFTED, UID_RELU, UID_DY, UID_DW };

struct CudaConvStats {
    DnnPlan *plan;           // conv + genstats
    DnnPlan *prologue_plan;  // scale-bias-relu-conv-genstats, or NULL
    DnnPlan *wgrad_plan;     // scale-bias-relu-wgrad (with prologue_plan)
    ConvShape shape;
    size_t coefficients;     // workspace offsets: the prologue's (2, C) scale and shift,
    size_t weight_gradient;  // the 16-bit (K, R, S, C) weight gradient
};

static void *nhwc_tensor(DnnGraph *g, int64_t uid, int type, int64_t n, int64_t c, int64_t h,
                         int64_t w, unsigned flags) {
    const int64_t dims[4] = {n, c, h, w}, strides[4] = {h * w * c, 1, w * c, c};
    return dnn_graph_tensor(g, uid, type, 4, dims, strides, flags);
}

static void *channel_tensor(DnnGraph *g, int64_t uid, int type, int64_t channels) {
    return nhwc_tensor(g, uid, type, 1, channels, 1, 1, 0);
}

// relu(x scale + shift) per channel of x (s's input), a virtual float tensor.
static void *prologue(DnnGraph *g, const ConvShape *s, int type) {
    void *x = nhwc_tensor(g, UID_X, type, s->batch, s->in_channels, s->in_height, s->in_width, 0);
    void *scale = channel_tensor(g, UID_SCALE, type, s->in_channels);
    void *shift = channel_tensor(g, UID_SHIFT, type, s->in_channels);
    void *stage[3];
    const int64_t uids[3] = {UID_SCALED, UID_SHIFTED, UID_RELU};
    for (int i = 0; i < 3; i++)
        stage[i] = nhwc_tensor(g, uids[i], CUDNN_DATA_FLOAT, s->batch, s->in_channels,
                               s->in_height, s->in_width, DNN_VIRTUAL);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_MUL, x, scale, stage[0]);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_ADD, stage[0], shift, stage[1]);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_RELU_FWD, stage[1], NULL, stage[2]);
    return stage[2];
}

static void *filter_tensor(DnnGraph *g, int64_t uid, int type, const ConvShape *s) {
    return nhwc_tensor(g, uid, type, s->out_channels, s->in_channels, s->kernel, s->kernel, 0);
}

// y = conv(x, w), then its per-channel sums.
static void forward_with_stats(DnnGraph *g, const ConvShape *s, int type, void *x) {
    void *w = filter_tensor(g, UID_W, type, s);
    void *y = nhwc_tensor(g, UID_Y, type, s->batch, s->out_channels, s->out_height, s->out_width,
                          0);
    void *sum = channel_tensor(g, UID_SUM, CUDNN_DATA_FLOAT, s->out_channels);
    void *sqsum = channel_tensor(g, UID_SQSUM, CUDNN_DATA_FLOAT, s->out_channels);
    dnn_graph_conv_forward(g, dnn_graph_convolution(g, s->stride, s->padding), x, w, y);
    dnn_graph_genstats(g, y, sum, sqsum);
}

// dw = the correlation of x with dy (written, not added).
static void weight_gradient(DnnGraph *g, const ConvShape *s, int type, void *x) {
    void *dy = nhwc_tensor(g, UID_DY, type, s->batch, s->out_channels, s->out_height,
                           s->out_width, 0);
    void *dw = filter_tensor(g, UID_DW, type, s);
    dnn_graph_conv_filter_gradient(g, dnn_graph_convolution(g, s->stride, s->padding), x, dy, dw);
}

enum Pattern { CONV_GENSTATS, PROLOGUE_CONV_GENSTATS, PROLOGUE_WGRAD };

static DnnPlan *plan_pattern(Backend *backend, const ConvShape *s, enum Pattern pattern,
                             ErrorMessage *err) {
    const int type =
        backend->compute_dtype == COMPUTE_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    DnnGraph graph;
    dnn_graph_begin(&graph, cuda_state(backend)->cudnn);
    void *x = pattern == CONV_GENSTATS
                  ? nhwc_tensor(&graph, UID_X, type, s->batch, s->in_channels, s->in_height,
                                s->in_width, 0)
                  : prologue(&graph, s, type);
    if (pattern == PROLOGUE_WGRAD) weight_gradient(&graph, s, type, x);
    else forward_with_stats(&graph, s, type, x);
    return dnn_graph_plan(&graph, 1, err);
}

static const char *fusion_switch(void) {
    const char *value = getenv("LTC_CUDA_CONV_FUSION");
    return value ? value : "";
}

// What rules the fused path out before cuDNN is asked, or NULL.
static const char *unsupported(const Backend *backend, const ConvShape *s) {
    if (strcmp(fusion_switch(), "off") == 0) return "LTC_CUDA_CONV_FUSION=off";
    if (backend->compute_dtype == COMPUTE_F32) return "fp32 (cuDNN's fused engines are 16-bit)";
    if (s->in_channels % 8 || s->out_channels % 8) return "channels not multiples of 8";
    if (cuda_state(backend)->compute_major < 8) return "GPU older than sm80";
    return NULL;
}

// The same for the prologue graphs, given that conv + genstats fuses.
static const char *prologue_unsupported(const Backend *backend) {
    if (strcmp(fusion_switch(), "stats") == 0) return "LTC_CUDA_CONV_FUSION=stats";
    if (backend->compute_dtype != COMPUTE_F16) return "bf16 (the prologue is fp16 only)";
    return NULL;
}

// The plan(s) of a probe key: NULL (with the reason) where cuDNN refused
// them now or in an earlier process. The first of `count` patterns is
// planned first; all or none are kept.
static int plan_probed(Backend *backend, const ConvShape *s, const char *probe_key,
                       const enum Pattern *patterns, int count, DnnPlan **plans, char *reason,
                       size_t reason_size) {
    ConvAlgorithms cached = {0};
    const int known = conv_algorithms_lookup(probe_key, &cached);
    if (known && !cached.forward) {
        snprintf(reason, reason_size, "cuDNN refused the shape before (%s)", probe_key);
        return -1;
    }
    ErrorMessage err = {{0}};
    int planned = 0;
    size_t bytes = 0;
    for (; planned < count; planned++) {
        plans[planned] = plan_pattern(backend, s, patterns[planned], &err);
        if (!plans[planned]) break;
        if ((size_t)plans[planned]->workspace_bytes > bytes)
            bytes = (size_t)plans[planned]->workspace_bytes;
    }
    if (!known) {
        const ConvAlgorithms probe = {.forward = planned == count,
                                      .forward_bytes = planned == count ? bytes : 0};
        conv_algorithms_store(probe_key, &probe);
    }
    if (planned == count) return 0;
    snprintf(reason, reason_size, "%s", err.text);
    while (planned > 0) dnn_plan_free(plans[--planned]);
    return -1;
}

static size_t align_up(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

CudaConvStats *cuda_conv_stats_create(Backend *backend, const ConvShape *s, const char *key,
                                      char *reason, size_t reason_size,
                                      char *prologue_reason, size_t prologue_reason_size) {
    const char *ruled_out = unsupported(backend, s);
    snprintf(prologue_reason, prologue_reason_size, "%s", ruled_out ? ruled_out : "");
    if (ruled_out) {
        snprintf(reason, reason_size, "%s", ruled_out);
        return NULL;
    }
    CudaConvStats *stats = calloc(1, sizeof *stats);
    if (!stats) {
        snprintf(reason, reason_size, "out of memory");
        return NULL;
    }
    stats->shape = *s;
    char probe_key[600];
    snprintf(probe_key, sizeof probe_key, "%s|conv-genstats", key);
    const enum Pattern plain = CONV_GENSTATS;
    if (plan_probed(backend, s, probe_key, &plain, 1, &stats->plan, reason, reason_size)) {
        free(stats);
        return NULL;
    }
    const char *prologue_off = prologue_unsupported(backend);
    snprintf(prologue_reason, prologue_reason_size, "%s", prologue_off ? prologue_off : "");
    DnnPlan *pair[2] = {NULL, NULL};
    const enum Pattern fused[2] = {PROLOGUE_CONV_GENSTATS, PROLOGUE_WGRAD};
    snprintf(probe_key, sizeof probe_key, "%s|conv-prologue", key);
    if (!prologue_off && !plan_probed(backend, s, probe_key, fused, 2, pair, prologue_reason,
                                      prologue_reason_size)) {
        stats->prologue_plan = pair[0];
        stats->wgrad_plan = pair[1];
    }
    size_t graph_bytes = (size_t)stats->plan->workspace_bytes;
    for (int i = 0; i < 2; i++)
        if (pair[i] && (size_t)pair[i]->workspace_bytes > graph_bytes)
            graph_bytes = (size_t)pair[i]->workspace_bytes;
    const size_t element = backend->act_element_bytes;
    stats->coefficients = align_up(graph_bytes);
    stats->weight_gradient = align_up(stats->coefficients + 2 * (size_t)s->in_channels * element);
    const size_t total = stats->weight_gradient + (size_t)s->out_channels * s->kernel * s->kernel *
                                                      s->in_channels * element;
    ErrorMessage err = {{0}};
    if (cuda_reserve_workspace(cuda_state(backend), stats->wgrad_plan ? total : graph_bytes,
                               &err)) {
        snprintf(reason, reason_size, "%s", err.text);
        cuda_conv_stats_free(stats);
        return NULL;
    }
    return stats;
}

void cuda_conv_stats_free(CudaConvStats *stats) {
    if (!stats) return;
    dnn_plan_free(stats->plan);
    dnn_plan_free(stats->prologue_plan);
    dnn_plan_free(stats->wgrad_plan);
    free(stats);
}

int cuda_conv_stats_has_prologue(const CudaConvStats *stats) {
    return stats && stats->prologue_plan;
}

// The prologue's coefficients into the workspace; returns where they are.
static char *coefficients(Backend *backend, const CudaConvStats *stats,
                          const NormAffine *prologue) {
    CudaState *state = cuda_state(backend);
    char *at = (char *)state->workspace + stats->coefficients;
    cuda_prologue_coefficients_launch(state->stream, backend->compute_dtype,
                                      stats->shape.in_channels, prologue->gamma, prologue->beta,
                                      prologue->mean, prologue->inv_std, at);
    return at;
}

void cuda_conv_stats_forward(Backend *backend, const CudaConvStats *stats, const Act *x,
                             const NormAffine *prologue, const Act *w, Act *y, float *sums) {
    void *workspace = cuda_state(backend)->workspace;
    const int64_t uids[] = {UID_X, UID_W, UID_Y, UID_SUM, UID_SQSUM, UID_SCALE, UID_SHIFT};
    void *pointers[] = {(void *)x, (void *)w, y, sums, sums + stats->shape.out_channels, NULL,
                        NULL};
    if (!prologue) {
        dnn_plan_execute(stats->plan, 5, uids, pointers, workspace);
        return;
    }
    char *scale = coefficients(backend, stats, prologue);
    pointers[5] = scale;
    pointers[6] = scale + stats->shape.in_channels * backend->act_element_bytes;
    dnn_plan_execute(stats->prologue_plan, 7, uids, pointers, workspace);
}

void cuda_conv_stats_weights(Backend *backend, const CudaConvStats *stats, const Act *x,
                             const NormAffine *prologue, const Act *dy, float *dw) {
    CudaState *state = cuda_state(backend);
    char *scale = coefficients(backend, stats, prologue);
    void *gradient = (char *)state->workspace + stats->weight_gradient;
    const int64_t uids[] = {UID_X, UID_SCALE, UID_SHIFT, UID_DY, UID_DW};
    void *const pointers[] = {(void *)x, scale,
                              scale + stats->shape.in_channels * backend->act_element_bytes,
                              (void *)dy, gradient};
    dnn_plan_execute(stats->wgrad_plan, 5, uids, pointers, state->workspace);
    const ConvShape *s = &stats->shape;
    cuda_act_accumulate_launch(state->stream, backend->compute_dtype,
                               (size_t)s->out_channels * s->kernel * s->kernel, s->in_channels,
                               s->in_channels, gradient, dw);
}
