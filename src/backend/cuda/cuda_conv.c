// Convolutions on cuDNN (all cuDNN calls of the backend live here, so the
// API can be switched to the graph API in one place). NHWC activations and
// KRSC (our OHWI) filters in the activations' dtype: fp32 with FMA math (no
// TF32), or fp16 / bf16 data with fp32 compute on tensor cores
// (PSEUDO_HALF / PSEUDO_BFLOAT16 configurations). A plan holds the
// descriptors and, per direction, the fastest deterministic algorithm found
// by cuDNN for its shape (the fastest of any kind, said on stderr, where
// none is deterministic), measured once per machine: the first plan of a
// shape searches and keeps its choice in a file that later processes read
// (conv_algorithms.h), so runs of one seed repeat across processes; the backend
// keeps one workspace, grown to the largest need of any plan. A 16-bit
// plan whose channels need no padding also gets, where cuDNN offers it, its
// forward fused with BatchNorm's statistics (cuda_conv_fusion.c).
//
// In 16 bits:
// - channel counts that are not multiples of 8 (the 3-channel images, odd
//   test shapes) are padded with zero channels to the next multiple of 8 in
//   the workspace before each call (cuDNN's tensor-core kernels want
//   multiples of 8): the input and the output gradient, and the weights in
//   both dimensions; a padded output or input gradient is cut back after
//   the call. Zeros add nothing, so the results are the unpadded
//   convolution's.
// - the weight gradient goes through a 16-bit scratch in the workspace
//   (beta = 0), then one kernel adds it into the fp32 gradient arena: the
//   legacy API's half and bfloat16 configurations need dw in the type of x
//   and dy, so cuDNN cannot accumulate into fp32 itself. Each step's weight
//   gradient is so rounded to 16 bits once before the fp32 sum (as PyTorch's
//   autocast, whose conv weight gradient is fp16 / bf16), where the ref
//   backend keeps it fp32: tests allow for that rounding.
// In fp32 backward weights uses beta = 1, which is the += of the contract.
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/conv_algorithms.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cudnn_library.h"

void cuda_dnn_check(int status, const char *call, const char *file, int line) {
    if (status != CUDNN_STATUS_SUCCESS)
        cuda_fatal("cuDNN", call, cudnnGetErrorString((cudnnStatus_t)status), file, line,
                   cuda_current_device());
}

struct ConvPlan {
    ConvShape shape;
    cudnnTensorDescriptor_t input, output;
    cudnnFilterDescriptor_t filter;
    cudnnConvolutionDescriptor_t convolution;
    cudnnConvolutionFwdAlgo_t forward;
    cudnnConvolutionBwdDataAlgo_t backward_data;
    cudnnConvolutionBwdFilterAlgo_t backward_filter;
    size_t workspace_bytes;  // the algorithms' largest need, then the 16-bit regions below
    ComputeDtype dtype;      // the activations' dtype when the plan was made
    // The channel counts as cuDNN sees them: in_channels and out_channels,
    // in 16 bits rounded up to multiples of 8 (a 3 becomes 8).
    int channels, out_channels;
    // Byte offsets in the workspace (16 bits only): the padded input (N, H,
    // W, channels), output or output gradient (N, OH, OW, out_channels) and
    // weights (out_channels, K, K, channels), where padded; the weight
    // gradient scratch (out_channels, K, K, channels).
    size_t padded_input, padded_output, padded_weights, weight_gradient;
    size_t algorithm_bytes;  // the algorithms' part, at the start of the workspace
    int nondeterministic;    // an algorithm was not deterministic (none was for the shape)
    CudaConvStats *stats;    // the forward fused with BatchNorm's statistics, or NULL
};

static size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

static int round_up_8(int channels) { return (channels + 7) / 8 * 8; }

static size_t input_pixels(const ConvShape *s) {
    return (size_t)s->batch * s->in_height * s->in_width;
}

static size_t output_pixels(const ConvShape *s) {
    return (size_t)s->batch * s->out_height * s->out_width;
}

// Rows of the weights (out_channels, K, K, in_channels): one per (o, kh, kw).
static size_t filter_rows(const ConvShape *s) {
    return (size_t)s->out_channels * s->kernel * s->kernel;
}

int cuda_dnn_create(CudaState *state, ErrorMessage *err) {
    if (cudnn_library_open(err)) return -1;
    cudnnHandle_t handle = NULL;
    cudnnStatus_t status = cudnnCreate(&handle);
    if (status == CUDNN_STATUS_SUCCESS) status = cudnnSetStream(handle, state->stream);
    if (status != CUDNN_STATUS_SUCCESS) {
        if (handle) cudnnDestroy(handle);
        return error_set(err, "cuDNN: %s", cudnnGetErrorString(status));
    }
    state->cudnn = handle;
    return 0;
}

void cuda_dnn_destroy(CudaState *state) {
    if (state->cudnn) cudnnDestroy((cudnnHandle_t)state->cudnn);
    state->cudnn = NULL;
}

static int dnn_failed(cudnnStatus_t status, const char *call, ErrorMessage *err) {
    if (status == CUDNN_STATUS_SUCCESS) return 0;
    return error_set(err, "cuDNN %s: %s", call, cudnnGetErrorString(status));
}
#define DNN_TRY(call, what)                                  \
    do {                                                     \
        if (dnn_failed((call), what, err)) goto fail;        \
    } while (0)

// Whether the search may pick algorithms that are not deterministic:
// LTC_CUDNN_DETERMINISTIC=0 (default 1). A measurement switch: PyTorch's
// cudnn.benchmark takes the fastest of any kind, and the benchmark against
// it says what keeping runs repeatable costs (split-K weight gradients, for
// one, sum with atomics). Such runs repeat only up to rounding.
static int any_algorithm(void) {
    const char *value = getenv("LTC_CUDNN_DETERMINISTIC");
    return value && strcmp(value, "0") == 0;
}

// pick = the fastest successful deterministic result of a cuDNN search
// (results come sorted by time), or the fastest of any kind with `any`;
// where cuDNN offers no deterministic one for the shape, the fastest
// successful one; *nondeterministic = 1 when the pick is not deterministic
// (runs then repeat only up to rounding); -1 when none succeeded. A macro:
// the three searches return three struct types with the same fields.
#define PICK_ALGORITHM(results, count, any, pick, nondeterministic)                     \
    do {                                                                                \
        (pick) = -1;                                                                    \
        for (int i_ = 0; i_ < (count) && (pick) < 0 && !(any); i_++)                    \
            if ((results)[i_].status == CUDNN_STATUS_SUCCESS &&                         \
                (results)[i_].determinism == CUDNN_DETERMINISTIC)                       \
                (pick) = i_;                                                            \
        for (int i_ = 0; i_ < (count) && (pick) < 0; i_++)                              \
            if ((results)[i_].status == CUDNN_STATUS_SUCCESS) {                         \
                (pick) = i_;                                                            \
                if ((results)[i_].determinism != CUDNN_DETERMINISTIC)                   \
                    *(nondeterministic) = 1;                                            \
            }                                                                           \
    } while (0)

// cuDNN's timed search for plan's shape, its picks in *chosen.
static int search_algorithms(cudnnHandle_t handle, const ConvPlan *plan, int any,
                             ConvAlgorithms *chosen, ErrorMessage *err) {
    enum { TRIES = 8 };
    int found = 0;
    cudnnConvolutionFwdAlgoPerf_t forward[TRIES];
    DNN_TRY(cudnnFindConvolutionForwardAlgorithm(handle, plan->input, plan->filter,
                                                 plan->convolution, plan->output, TRIES, &found,
                                                 forward),
            "find forward algorithm");
    int pick;
    PICK_ALGORITHM(forward, found, any, pick, &chosen->nondeterministic);
    if (pick < 0) return error_set(err, "cuDNN has no forward algorithm for it");
    chosen->forward = forward[pick].algo;
    chosen->forward_bytes = forward[pick].memory;

    cudnnConvolutionBwdDataAlgoPerf_t data[TRIES];
    DNN_TRY(cudnnFindConvolutionBackwardDataAlgorithm(handle, plan->filter, plan->output,
                                                      plan->convolution, plan->input, TRIES,
                                                      &found, data),
            "find backward data algorithm");
    PICK_ALGORITHM(data, found, any, pick, &chosen->nondeterministic);
    if (pick < 0) return error_set(err, "cuDNN has no backward data algorithm for it");
    chosen->backward_data = data[pick].algo;
    chosen->data_bytes = data[pick].memory;

    cudnnConvolutionBwdFilterAlgoPerf_t filter[TRIES];
    DNN_TRY(cudnnFindConvolutionBackwardFilterAlgorithm(handle, plan->input, plan->output,
                                                        plan->convolution, plan->filter, TRIES,
                                                        &found, filter),
            "find backward filter algorithm");
    PICK_ALGORITHM(filter, found, any, pick, &chosen->nondeterministic);
    if (pick < 0) return error_set(err, "cuDNN has no backward filter algorithm for it");
    chosen->backward_filter = filter[pick].algo;
    chosen->filter_bytes = filter[pick].memory;
    return 0;
fail:
    return -1;
}

// The algorithms for plan's shape: those the algorithm file holds for it
// (conv_algorithms.h), else cuDNN's timed search, whose choice is then
// appended to the file.
// The plan's key in the algorithm file (conv_algorithms.h); "|any": the
// choice among all algorithms, kept apart.
static void plan_key(const CudaState *state, const ConvPlan *plan, int any, char *key,
                     size_t size) {
    const ConvShape *s = &plan->shape;
    snprintf(key, size,
             "%s|sm%d%d|cudnn%zu|%s|n%d h%d w%d c%d -> h%d w%d k%d|kernel%d stride%d pad%d%s",
             state->device_name, state->compute_major, state->compute_minor, cudnnGetVersion(),
             compute_dtype_name(plan->dtype), s->batch, s->in_height, s->in_width, plan->channels,
             s->out_height, s->out_width, plan->out_channels, s->kernel, s->stride, s->padding,
             any ? "|any" : "");
}

static int find_algorithms(const CudaState *state, ConvPlan *plan, int any, ErrorMessage *err) {
    char key[512];
    plan_key(state, plan, any, key, sizeof key);
    ConvAlgorithms chosen = {0};
    if (!conv_algorithms_lookup(key, &chosen)) {
        if (search_algorithms((cudnnHandle_t)state->cudnn, plan, any, &chosen, err)) return -1;
        conv_algorithms_store(key, &chosen);
    }
    plan->forward = (cudnnConvolutionFwdAlgo_t)chosen.forward;
    plan->backward_data = (cudnnConvolutionBwdDataAlgo_t)chosen.backward_data;
    plan->backward_filter = (cudnnConvolutionBwdFilterAlgo_t)chosen.backward_filter;
    plan->workspace_bytes = chosen.forward_bytes;
    if (chosen.data_bytes > plan->workspace_bytes) plan->workspace_bytes = chosen.data_bytes;
    if (chosen.filter_bytes > plan->workspace_bytes) plan->workspace_bytes = chosen.filter_bytes;
    plan->nondeterministic = chosen.nondeterministic;
    return 0;
}

// The first reason of a kind, with the shape it was given for.
static void keep_reason(char *kept, size_t size, const ConvShape *s, const char *reason) {
    if (!kept[0])
        snprintf(kept, size, "%dx%dx%d -> %d, kernel %d: %s", s->in_height, s->in_width,
                 s->in_channels, s->out_channels, s->kernel, reason);
}

// The plan's forward fused with BatchNorm's statistics where cuDNN offers
// it (cuda_conv_fusion.c), counted and explained for train.log.
static void choose_fusion(Backend *backend, ConvPlan *plan) {
    CudaState *state = cuda_state(backend);
    char key[512];
    ConvFusionReasons why;
    plan_key(state, plan, 0, key, sizeof key);
    plan->stats = cuda_conv_stats_create(backend, &plan->shape, key, &why);
    const int prologue = cuda_conv_stats_has_prologue(plan->stats);
    const int data = cuda_conv_stats_has_data_prologue(plan->stats);
    state->conv_plans++;
    state->conv_stats_plans += plan->stats != NULL;
    state->conv_prologue_plans += prologue;
    state->conv_data_prologue_plans += data;
    if (!plan->stats)
        keep_reason(state->conv_fallback_reason, sizeof state->conv_fallback_reason,
                    &plan->shape, why.stats);
    else if (!prologue)
        keep_reason(state->conv_prologue_reason, sizeof state->conv_prologue_reason,
                    &plan->shape, why.prologue);
    else if (!data)
        keep_reason(state->conv_data_prologue_reason, sizeof state->conv_data_prologue_reason,
                    &plan->shape, why.data);
}

ConvPlan *cuda_conv2d_plan(Backend *backend, const ConvShape *shape, ErrorMessage *err) {
    CudaState *state = cuda_state(backend);
    const ConvShape *s = shape;
    ConvPlan *plan = calloc(1, sizeof *plan);
    if (!plan) {
        error_set(err, "cuda conv: out of memory for a plan");
        return NULL;
    }
    plan->shape = *shape;
    plan->dtype = backend->compute_dtype;
    const int half = plan->dtype != COMPUTE_F32;
    plan->channels = half ? round_up_8(s->in_channels) : s->in_channels;
    plan->out_channels = half ? round_up_8(s->out_channels) : s->out_channels;
    const cudnnDataType_t data = plan->dtype == COMPUTE_F16    ? CUDNN_DATA_HALF
                                 : plan->dtype == COMPUTE_BF16 ? CUDNN_DATA_BFLOAT16
                                                               : CUDNN_DATA_FLOAT;
    CUDA_CHECK(cudaSetDevice(state->device));
    DNN_TRY(cudnnCreateTensorDescriptor(&plan->input), "create tensor descriptor");
    DNN_TRY(cudnnCreateTensorDescriptor(&plan->output), "create tensor descriptor");
    DNN_TRY(cudnnCreateFilterDescriptor(&plan->filter), "create filter descriptor");
    DNN_TRY(cudnnCreateConvolutionDescriptor(&plan->convolution), "create convolution descriptor");
    DNN_TRY(cudnnSetTensor4dDescriptor(plan->input, CUDNN_TENSOR_NHWC, data, s->batch,
                                       plan->channels, s->in_height, s->in_width),
            "set input descriptor");
    DNN_TRY(cudnnSetTensor4dDescriptor(plan->output, CUDNN_TENSOR_NHWC, data, s->batch,
                                       plan->out_channels, s->out_height, s->out_width),
            "set output descriptor");
    DNN_TRY(cudnnSetFilter4dDescriptor(plan->filter, data, CUDNN_TENSOR_NHWC, plan->out_channels,
                                       plan->channels, s->kernel, s->kernel),
            "set filter descriptor");
    // fp32 accumulation in every dtype
    DNN_TRY(cudnnSetConvolution2dDescriptor(plan->convolution, s->padding, s->padding, s->stride,
                                            s->stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT),
            "set convolution descriptor");
    DNN_TRY(cudnnSetConvolutionMathType(plan->convolution,
                                        half ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
            "set math type");
    int n, c, h, w;
    DNN_TRY(cudnnGetConvolution2dForwardOutputDim(plan->convolution, plan->input, plan->filter, &n,
                                                  &c, &h, &w),
            "output size");
    if (n != s->batch || c != plan->out_channels || h != s->out_height || w != s->out_width) {
        error_set(err, "cuDNN output %dx%dx%dx%d differs from the plan's %dx%dx%dx%d", n, h, w, c,
                  s->batch, s->out_height, s->out_width, plan->out_channels);
        goto fail;
    }
    const int any = any_algorithm();
    if (find_algorithms(state, plan, any, err)) goto fail;
    if (plan->nondeterministic && !any)  // said once per shape, when the model is built
        fprintf(stderr, "lightly-train-c: cuDNN has no deterministic algorithm for conv "
                        "%dx%dx%d -> %d, kernel %d, stride %d in %s: a non-deterministic one "
                        "runs (results repeat up to rounding)\n",
                s->in_height, s->in_width, s->in_channels, s->out_channels, s->kernel,
                s->stride, compute_dtype_name(plan->dtype));
    plan->algorithm_bytes = plan->workspace_bytes;
    if (half) {
        const size_t element = backend->act_element_bytes;
        const size_t filter = (size_t)plan->out_channels * s->kernel * s->kernel * plan->channels;
        size_t end = align_up(plan->algorithm_bytes);
        if (plan->channels != s->in_channels) {
            plan->padded_input = end;
            end = align_up(end + input_pixels(s) * plan->channels * element);
        }
        if (plan->out_channels != s->out_channels) {
            plan->padded_output = end;
            end = align_up(end + output_pixels(s) * plan->out_channels * element);
        }
        if (plan->channels != s->in_channels || plan->out_channels != s->out_channels) {
            plan->padded_weights = end;
            end = align_up(end + filter * element);
        }
        plan->weight_gradient = end;
        plan->workspace_bytes = end + filter * element;
    }
    if (cuda_reserve_workspace(state, plan->workspace_bytes, err)) goto fail;
    choose_fusion(backend, plan);
    return plan;
fail:
    error_prefix(err, "conv %dx%dx%d -> %d, kernel %d, stride %d, padding %d", s->in_height,
                 s->in_width, s->in_channels, s->out_channels, s->kernel, s->stride, s->padding);
    cuda_conv2d_plan_free(backend, plan);
    return NULL;
}

void cuda_conv2d_plan_free(Backend *backend, ConvPlan *plan) {
    if (!plan) return;
    cuda_conv_stats_free(plan->stats);
    if (plan->input) cudnnDestroyTensorDescriptor(plan->input);
    if (plan->output) cudnnDestroyTensorDescriptor(plan->output);
    if (plan->filter) cudnnDestroyFilterDescriptor(plan->filter);
    if (plan->convolution) cudnnDestroyConvolutionDescriptor(plan->convolution);
    free(plan);
}

// The workspace region at offset bytes.
static void *workspace_at(const CudaState *state, size_t offset) {
    return (char *)state->workspace + offset;
}

// y (rows, to) = x (rows, from): channels padded with zeros or cut back.
static void channels_copy(Backend *backend, size_t rows, int from, int to, const void *x,
                          void *y) {
    cuda_channels_copy_launch(cuda_state(backend)->stream, backend->compute_dtype, rows, from, to,
                              x, y);
}


// x as cuDNN reads it: the padded copy when the plan pads.
static const void *padded_input(Backend *backend, const ConvPlan *plan, const Act *x) {
    if (plan->channels == plan->shape.in_channels) return x;
    void *padded = workspace_at(cuda_state(backend), plan->padded_input);
    channels_copy(backend, input_pixels(&plan->shape), plan->shape.in_channels, plan->channels, x,
                  padded);
    return padded;
}

// dy as cuDNN reads it.
static const void *padded_output_gradient(Backend *backend, const ConvPlan *plan,
                                          const Act *dy) {
    if (plan->out_channels == plan->shape.out_channels) return dy;
    void *padded = workspace_at(cuda_state(backend), plan->padded_output);
    channels_copy(backend, output_pixels(&plan->shape), plan->shape.out_channels,
                  plan->out_channels, dy, padded);
    return padded;
}

// w as cuDNN reads it: (out_channels, K, K, channels) of the plan, the
// rows past the real output channels zero.
static const void *padded_weights(Backend *backend, const ConvPlan *plan, const Act *w) {
    const ConvShape *s = &plan->shape;
    if (plan->channels == s->in_channels && plan->out_channels == s->out_channels) return w;
    void *padded = workspace_at(cuda_state(backend), plan->padded_weights);
    if (plan->out_channels != s->out_channels && cuda_queue_point())
        CUDA_CHECK(cudaMemsetAsync(padded, 0,
                                   act_bytes(backend, (size_t)plan->out_channels * s->kernel *
                                                          s->kernel * plan->channels),
                                   cuda_state(backend)->stream));
    channels_copy(backend, filter_rows(s), s->in_channels, plan->channels, w, padded);
    return padded;
}

void cuda_conv2d_forward(Backend *backend, const ConvPlan *plan, const Act *x, const Act *w,
                         Act *y) {
    CudaState *state = cuda_state(backend);
    const ConvShape *s = &plan->shape;
    const int padded = plan->out_channels != s->out_channels;
    const void *x_used = padded_input(backend, plan, x);
    const void *w_used = padded_weights(backend, plan, w);
    void *y_used = padded ? workspace_at(state, plan->padded_output) : (void *)y;
    const float one = 1.0f, zero = 0.0f;
    if (cuda_queue_point())
        CUDNN_CHECK(cudnnConvolutionForward((cudnnHandle_t)state->cudnn, &one, plan->input, x_used,
                                            plan->filter, w_used, plan->convolution, plan->forward,
                                            state->workspace, plan->algorithm_bytes, &zero,
                                            plan->output, y_used));
    if (padded)
        channels_copy(backend, output_pixels(s), plan->out_channels, s->out_channels, y_used, y);
}

int cuda_conv2d_forward_stats(Backend *backend, const ConvPlan *plan, const Act *x,
                              const NormAffine *prologue, const Act *w, Act *y, float *sums) {
    if (!plan->stats || plan->dtype != backend->compute_dtype ||
        (prologue && !cuda_conv_stats_has_prologue(plan->stats)))
        return 0;
    cuda_conv_stats_forward(backend, plan->stats, x, prologue, w, y, sums);
    return 1;
}

int cuda_conv2d_fusions(Backend *backend, const ConvPlan *plan) {
    if (!plan->stats || plan->dtype != backend->compute_dtype) return 0;
    return CONV_FUSES_STATISTICS |
           (cuda_conv_stats_has_prologue(plan->stats) ? CONV_FUSES_PROLOGUE : 0) |
           (cuda_conv_stats_has_data_prologue(plan->stats) ? CONV_FUSES_DATA_PROLOGUE : 0);
}

void cuda_conv2d_backward_weights_prologue(Backend *backend, const ConvPlan *plan, const Act *x,
                                           const NormAffine *prologue, const Act *dy,
                                           float *dw) {
    if (!cuda_conv_stats_has_prologue(plan->stats))
        cuda_fatal("cuDNN", "conv2d_backward_weights_prologue",
                   "the plan has no prologue graph (its forward took none)", __FILE__, __LINE__,
                   cuda_current_device());
    cuda_conv_stats_weights(backend, plan->stats, x, prologue, dy, dw);
}

int cuda_conv2d_backward_data_prologue(Backend *backend, const ConvPlan *plan, const Act *dy,
                                       const Act *w, const Act *x, const NormAffine *prologue,
                                       Act *dz, float *dgamma, float *dbeta, float *sums) {
    if (!cuda_conv_stats_has_data_prologue(plan->stats) || plan->dtype != backend->compute_dtype)
        return 0;
    cuda_conv_stats_data(backend, plan->stats, dy, w, x, prologue, dz, dgamma, dbeta, sums);
    return 1;
}

void cuda_conv2d_backward_data(Backend *backend, const ConvPlan *plan, const Act *dy,
                               const Act *w, Act *dx) {
    CudaState *state = cuda_state(backend);
    const ConvShape *s = &plan->shape;
    const int padded = plan->channels != s->in_channels;
    const void *w_used = padded_weights(backend, plan, w);
    const void *dy_used = padded_output_gradient(backend, plan, dy);
    void *dx_used = padded ? workspace_at(state, plan->padded_input) : (void *)dx;
    const float one = 1.0f, zero = 0.0f;
    if (cuda_queue_point())
        CUDNN_CHECK(cudnnConvolutionBackwardData(
            (cudnnHandle_t)state->cudnn, &one, plan->filter, w_used, plan->output, dy_used,
            plan->convolution, plan->backward_data, state->workspace, plan->algorithm_bytes, &zero,
            plan->input, dx_used));
    if (padded)
        channels_copy(backend, input_pixels(s), plan->channels, s->in_channels, dx_used, dx);
}

void cuda_conv2d_backward_weights(Backend *backend, const ConvPlan *plan, const Act *x,
                                  const Act *dy, float *dw) {
    CudaState *state = cuda_state(backend);
    const float one = 1.0f, zero = 0.0f;
    if (plan->dtype == COMPUTE_F32) {
        if (cuda_queue_point())
            CUDNN_CHECK(cudnnConvolutionBackwardFilter(
                (cudnnHandle_t)state->cudnn, &one, plan->input, x, plan->output, dy,
                plan->convolution, plan->backward_filter, state->workspace, plan->algorithm_bytes,
                &one, plan->filter, dw));
        return;
    }
    const void *x_used = padded_input(backend, plan, x);
    const void *dy_used = padded_output_gradient(backend, plan, dy);
    void *scratch = workspace_at(state, plan->weight_gradient);
    if (cuda_queue_point())
        CUDNN_CHECK(cudnnConvolutionBackwardFilter(
            (cudnnHandle_t)state->cudnn, &one, plan->input, x_used, plan->output, dy_used,
            plan->convolution, plan->backward_filter, state->workspace, plan->algorithm_bytes,
            &zero, plan->filter, scratch));
    // the real output channels' rows come first: (o, kh, kw) for o < out_channels
    cuda_act_accumulate_launch(state->stream, plan->dtype, filter_rows(&plan->shape),
                               plan->channels, plan->shape.in_channels, scratch, dw);
}
