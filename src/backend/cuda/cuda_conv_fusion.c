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
//   its input, so the backward does not need that output either;
// - dgrad-drelu-bn-bwd-weight (DgradDreluBNBwdWeight, cuDNN 9.8+): the data
//   gradient masked by the prologue's ReLU with the previous BatchNorm's
//   reduction on it, so that norm's backward is its apply pass alone.
// The two prologue graphs are taken together or not at all: a forward with
// the prologue needs its weight gradient (sm90 has both; sm80 has no wgrad
// fusion and sm89 no ConvBNfprop: there the plan keeps conv + genstats).
// The data-gradient graph is optional on top of them (older cuDNN: the
// separate data gradient and batchnorm_relu_backward).
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
// The data-gradient graph, cuDNN's DgradDreluBNBwdWeight (a pre-compiled
// engine) in the form its documentation gives: dy and W as above, the data
// gradient into a virtual float (N, C, H, W) tensor, RELU_BWD into dz
// (16-bit, written) with the norm's output as its x, BN_BWD_WEIGHTS of x
// and dz with the norm's float mean, 1/std and gamma into the float (1, C,
// 1, 1) sums and the three equivalent coefficients (scratch: the apply pass
// takes the sums, as the split backward does). The norm's output is the
// chain ADD mean with alpha2 = -1 (the documented subtraction), MUL 1/std,
// MUL gamma, ADD beta, on the same mean, 1/std and gamma tensors as
// BN_BWD_WEIGHTS ("the inputs on the left and right are exactly the same"),
// so the mask is ((x - mean) 1/std) gamma + beta in float, which can
// differ from the forward's rounded coefficients where that is within
// rounding of 0. An earlier form gave the chain tensors of its own (0, 1
// and the prologue's rounded scale and shift, SUB for the mean): an H200's
// cuDNN took it and gave a wrong mask (docs/gpu-runs/2026-11-30-a7cdfb0-2
// .jsonl:4), as an engine that reads the pattern's mean, 1/std and gamma
// from one place would.
//
// Probed once per shape and cached like the algorithm choice
// (conv_algorithms.h; key suffixes "|conv-genstats", "|conv-prologue" and
// "|conv-dgrad-bn",
// forward = 1 when cuDNN gave the plan(s), forward_bytes the workspace): a
// later process skips the graphs of a shape cuDNN refused.
// By default only conv + genstats fuses: on an H200 (first light of
// 2026-11-30, docs/gpu-runs/2026-11-30-a7cdfb0-2.jsonl) the
// data-gradient graph's dL/dx was wrong in its earlier, undocumented form
// (ReLU masks off in 7% of a test's elements, a ResNet-18 block's dx 0.68
// from the separate ops', relative L2), and the prologues gained 0.4% over
// conv + genstats alone: they wait for a GPU run that checks them at the
// block level. LTC_CUDA_CONV_FUSION=off
// leaves every convolution to the separate ops, =prologue adds the prologues
// without the data-gradient graph, =dgrad the data-gradient graph too;
// =stats (or unset) is the default.
//
// Workspace: an execution owns the backend's workspace (ops run one after
// another on the stream): cuDNN's need first, then the prologue's (2, C)
// coefficients, then the 16-bit weight gradient that is added into the
// fp32 one (as cuda_conv.c does for the legacy API) or the data-gradient
// graph's float (3, C) equivalent coefficients.
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/conv_algorithms.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cudnn_graph.h"

enum { UID_X = 1, UID_W, UID_Y, UID_SUM, UID_SQSUM, UID_SCALE, UID_SHIFT, UID_SCALED,
       UID_SHIFTED, UID_RELU, UID_DY, UID_DW, UID_DGRAD, UID_DZ, UID_MEAN, UID_INV_STD,
       UID_GAMMA, UID_BETA, UID_DBIAS, UID_DSCALE, UID_EQ_DY, UID_EQ_X, UID_EQ_BIAS,
       UID_CHAIN_STAGE };  // 4 uids: the norm chain's virtual outputs

struct CudaConvStats {
    DnnPlan *plan;           // conv + genstats
    DnnPlan *prologue_plan;  // scale-bias-relu-conv-genstats, or NULL
    DnnPlan *wgrad_plan;     // scale-bias-relu-wgrad (with prologue_plan)
    DnnPlan *dgrad_plan;     // dgrad-drelu-bn-bwd-weight, or NULL
    ConvShape shape;
    size_t coefficients;     // workspace offsets: the prologue's (2, C) scale and shift,
    size_t weight_gradient;  // the 16-bit (K, R, S, C) weight gradient, or the float
                             // (3, C) equivalent coefficients
};

static void *nhwc_tensor(DnnGraph *g, int64_t uid, int type, int64_t n, int64_t c, int64_t h,
                         int64_t w, unsigned flags) {
    const int64_t dims[4] = {n, c, h, w}, strides[4] = {h * w * c, 1, w * c, c};
    return dnn_graph_tensor(g, uid, type, 4, dims, strides, flags);
}

static void *channel_tensor(DnnGraph *g, int64_t uid, int type, int64_t channels) {
    return nhwc_tensor(g, uid, type, 1, channels, 1, 1, 0);
}

// A tensor of the shape of s's input (N, C, H, W over NHWC).
static void *input_shaped(DnnGraph *g, int64_t uid, int type, const ConvShape *s,
                          unsigned flags) {
    return nhwc_tensor(g, uid, type, s->batch, s->in_channels, s->in_height, s->in_width, flags);
}

// relu(x scale + shift) per channel of x (s's input), a virtual float tensor.
static void *prologue(DnnGraph *g, const ConvShape *s, int type) {
    void *x = input_shaped(g, UID_X, type, s, 0);
    void *scale = channel_tensor(g, UID_SCALE, type, s->in_channels);
    void *shift = channel_tensor(g, UID_SHIFT, type, s->in_channels);
    void *scaled = input_shaped(g, UID_SCALED, CUDNN_DATA_FLOAT, s, DNN_VIRTUAL);
    void *shifted = input_shaped(g, UID_SHIFTED, CUDNN_DATA_FLOAT, s, DNN_VIRTUAL);
    void *relu = input_shaped(g, UID_RELU, CUDNN_DATA_FLOAT, s, DNN_VIRTUAL);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_MUL, x, scale, scaled);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_ADD, scaled, shift, shifted);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_RELU_FWD, shifted, NULL, relu);
    return relu;
}

static void *output_gradient(DnnGraph *g, const ConvShape *s, int type) {
    return nhwc_tensor(g, UID_DY, type, s->batch, s->out_channels, s->out_height, s->out_width,
                       0);
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
    void *dy = output_gradient(g, s, type);
    void *dw = filter_tensor(g, UID_DW, type, s);
    dnn_graph_conv_filter_gradient(g, dnn_graph_convolution(g, s->stride, s->padding), x, dy, dw);
}

// dz = the data gradient for dy where the norm's output > 0, and the norm's
// weight gradient of dz (sums) with its equivalent coefficients.
static void data_gradient_reduced(DnnGraph *g, const ConvShape *s, int type) {
    const int c = s->in_channels;
    void *mean = channel_tensor(g, UID_MEAN, CUDNN_DATA_FLOAT, c);
    void *inv_std = channel_tensor(g, UID_INV_STD, CUDNN_DATA_FLOAT, c);
    void *gamma = channel_tensor(g, UID_GAMMA, CUDNN_DATA_FLOAT, c);
    void *beta = channel_tensor(g, UID_BETA, CUDNN_DATA_FLOAT, c);
    // the norm's output: ((x - mean) inv_std) gamma + beta, virtual float
    void *x = input_shaped(g, UID_X, type, s, 0);
    void *stage[4];
    for (int i = 0; i < 4; i++)
        stage[i] = input_shaped(g, UID_CHAIN_STAGE + i, CUDNN_DATA_FLOAT, s, DNN_VIRTUAL);
    dnn_graph_pointwise_scaled(g, CUDNN_POINTWISE_ADD, x, 1.0f, mean, -1.0f, stage[0]);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_MUL, stage[0], inv_std, stage[1]);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_MUL, stage[1], gamma, stage[2]);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_ADD, stage[2], beta, stage[3]);
    void *const mask = stage[3];
    void *w = filter_tensor(g, UID_W, type, s);
    void *dgrad = input_shaped(g, UID_DGRAD, CUDNN_DATA_FLOAT, s, DNN_VIRTUAL);
    void *dz = input_shaped(g, UID_DZ, type, s, 0);
    dnn_graph_conv_data_gradient(g, dnn_graph_convolution(g, s->stride, s->padding),
                                 output_gradient(g, s, type), w, dgrad);
    dnn_graph_relu_backward(g, mask, dgrad, dz);
    const DnnNormWeightsGradient norm = {
        .x = x,
        .dy = dz,
        .mean = mean,
        .inv_std = inv_std,
        .scale = gamma,
        .dscale = channel_tensor(g, UID_DSCALE, CUDNN_DATA_FLOAT, c),
        .dbias = channel_tensor(g, UID_DBIAS, CUDNN_DATA_FLOAT, c),
        .eq_dy_scale = channel_tensor(g, UID_EQ_DY, CUDNN_DATA_FLOAT, c),
        .eq_x_scale = channel_tensor(g, UID_EQ_X, CUDNN_DATA_FLOAT, c),
        .eq_bias = channel_tensor(g, UID_EQ_BIAS, CUDNN_DATA_FLOAT, c)};
    dnn_graph_bn_backward_weights(g, &norm);
}

enum Pattern { CONV_GENSTATS, PROLOGUE_CONV_GENSTATS, PROLOGUE_WGRAD, PROLOGUE_DGRAD };

static DnnPlan *plan_pattern(Backend *backend, const ConvShape *s, enum Pattern pattern,
                             ErrorMessage *err) {
    const int type =
        backend->compute_dtype == COMPUTE_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    DnnGraph graph;
    dnn_graph_begin(&graph, cuda_state(backend)->cudnn);
    if (pattern == PROLOGUE_DGRAD) {
        data_gradient_reduced(&graph, s, type);
        return dnn_graph_plan(&graph, 1, err);
    }
    void *x = pattern == CONV_GENSTATS ? input_shaped(&graph, UID_X, type, s, 0)
                                       : prologue(&graph, s, type);
    if (pattern == PROLOGUE_WGRAD) weight_gradient(&graph, s, type, x);
    else forward_with_stats(&graph, s, type, x);
    return dnn_graph_plan(&graph, 1, err);
}

static const char *fusion_switch(void) {
    const char *value = getenv("LTC_CUDA_CONV_FUSION");
    return value ? value : "";
}
static int switch_is(const char *name) { return strcmp(fusion_switch(), name) == 0; }

// What rules the fused path out before cuDNN is asked, or NULL.
static const char *unsupported(const Backend *backend, const ConvShape *s) {
    if (switch_is("off")) return "LTC_CUDA_CONV_FUSION=off";
    if (backend->compute_dtype == COMPUTE_F32) return "fp32 (cuDNN's fused engines are 16-bit)";
    if (s->in_channels % 8 || s->out_channels % 8) return "channels not multiples of 8";
    if (cuda_state(backend)->compute_major < 8) return "GPU older than sm80";
    return NULL;
}

// The same for the prologue graphs, given that conv + genstats fuses: asked
// for only (the top says why).
static const char *prologue_unsupported(const Backend *backend) {
    if (!switch_is("prologue") && !switch_is("dgrad"))
        return "not by default: LTC_CUDA_CONV_FUSION=prologue or =dgrad";
    if (backend->compute_dtype != COMPUTE_F16) return "bf16 (the prologue is fp16 only)";
    return NULL;
}

// The same for the data-gradient graph, given the prologue graphs.
static const char *data_prologue_unsupported(void) {
    return switch_is("dgrad") ? NULL
                              : "not by default (unchecked on a GPU): LTC_CUDA_CONV_FUSION=dgrad";
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

// Sets *reason to `why` ("" for NULL); returns whether there was one.
static int ruled_out(char *reason, size_t size, const char *why) {
    snprintf(reason, size, "%s", why ? why : "");
    return why != NULL;
}

CudaConvStats *cuda_conv_stats_create(Backend *backend, const ConvShape *s, const char *key,
                                      ConvFusionReasons *why) {
    memset(why, 0, sizeof *why);
    if (ruled_out(why->stats, sizeof why->stats, unsupported(backend, s))) {
        snprintf(why->prologue, sizeof why->prologue, "%s", why->stats);
        snprintf(why->data, sizeof why->data, "%s", why->stats);
        return NULL;
    }
    CudaConvStats *stats = calloc(1, sizeof *stats);
    if (!stats) {
        snprintf(why->stats, sizeof why->stats, "out of memory");
        return NULL;
    }
    stats->shape = *s;
    char probe_key[600];
    snprintf(probe_key, sizeof probe_key, "%s|conv-genstats", key);
    const enum Pattern plain = CONV_GENSTATS;
    if (plan_probed(backend, s, probe_key, &plain, 1, &stats->plan, why->stats,
                    sizeof why->stats)) {
        free(stats);
        return NULL;
    }
    DnnPlan *pair[2] = {NULL, NULL};
    const enum Pattern fused[2] = {PROLOGUE_CONV_GENSTATS, PROLOGUE_WGRAD};
    snprintf(probe_key, sizeof probe_key, "%s|conv-prologue", key);
    if (!ruled_out(why->prologue, sizeof why->prologue, prologue_unsupported(backend)) &&
        !plan_probed(backend, s, probe_key, fused, 2, pair, why->prologue,
                     sizeof why->prologue)) {
        stats->prologue_plan = pair[0];
        stats->wgrad_plan = pair[1];
    }
    if (!stats->prologue_plan)
        snprintf(why->data, sizeof why->data, "no prologue graphs");
    else if (!ruled_out(why->data, sizeof why->data, data_prologue_unsupported())) {
        const enum Pattern data = PROLOGUE_DGRAD;
        snprintf(probe_key, sizeof probe_key, "%s|conv-dgrad-bn", key);
        (void)plan_probed(backend, s, probe_key, &data, 1, &stats->dgrad_plan, why->data,
                          sizeof why->data);
    }
    size_t graph_bytes = 0;
    const DnnPlan *plans[4] = {stats->plan, stats->prologue_plan, stats->wgrad_plan,
                               stats->dgrad_plan};
    for (int i = 0; i < 4; i++)
        if (plans[i] && (size_t)plans[i]->workspace_bytes > graph_bytes)
            graph_bytes = (size_t)plans[i]->workspace_bytes;
    const size_t element = backend->act_element_bytes;
    const size_t filter_bytes =
        (size_t)s->out_channels * s->kernel * s->kernel * s->in_channels * element;
    const size_t equivalent_bytes = 3 * (size_t)s->in_channels * sizeof(float);
    stats->coefficients = align_up(graph_bytes);
    stats->weight_gradient = align_up(stats->coefficients + 2 * (size_t)s->in_channels * element);
    const size_t total = stats->weight_gradient +
                         (filter_bytes > equivalent_bytes ? filter_bytes : equivalent_bytes);
    ErrorMessage err = {{0}};
    if (cuda_reserve_workspace(cuda_state(backend), stats->wgrad_plan ? total : graph_bytes,
                               &err)) {
        snprintf(why->stats, sizeof why->stats, "%s", err.text);
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
    dnn_plan_free(stats->dgrad_plan);
    free(stats);
}

int cuda_conv_stats_has_prologue(const CudaConvStats *stats) {
    return stats && stats->prologue_plan;
}

int cuda_conv_stats_has_data_prologue(const CudaConvStats *stats) {
    return stats && stats->dgrad_plan;
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

void cuda_conv_stats_data(Backend *backend, const CudaConvStats *stats, const Act *dy,
                          const Act *w, const Act *x, const NormAffine *prologue, Act *dz,
                          float *dgamma, float *dbeta, float *sums) {
    CudaState *state = cuda_state(backend);
    const int channels = stats->shape.in_channels;
    float *equivalent = (float *)((char *)state->workspace + stats->weight_gradient);
    const int64_t uids[] = {UID_DY,    UID_W,     UID_X,      UID_MEAN,  UID_INV_STD,
                            UID_GAMMA, UID_BETA,  UID_DZ,     UID_DBIAS, UID_DSCALE,
                            UID_EQ_DY, UID_EQ_X,  UID_EQ_BIAS};
    void *const pointers[] = {(void *)dy,
                              (void *)w,
                              (void *)x,
                              (void *)prologue->mean,
                              (void *)prologue->inv_std,
                              (void *)prologue->gamma,
                              (void *)prologue->beta,
                              dz,
                              sums,
                              sums + channels,
                              equivalent,
                              equivalent + channels,
                              equivalent + 2 * channels};
    const int count = (int)(sizeof uids / sizeof uids[0]);
    dnn_plan_execute(stats->dgrad_plan, count, uids, pointers, state->workspace);
    cuda_norm_gradients_add_launch(state->stream, channels, sums, dgamma, dbeta);
}
