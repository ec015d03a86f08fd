// Convolutions on cuDNN (all cuDNN calls of the backend live here, so the
// API can be switched to the graph API in one place). NHWC activations and
// KRSC (our OHWI) filters, fp32 with FMA math (no TF32). A plan holds the
// descriptors and, per direction, the fastest deterministic algorithm found
// by cuDNN for its shape, measured once when the plan is made; the backend
// keeps one workspace, grown to the largest need of any plan. Backward
// weights uses beta = 1, which is the += of the contract.
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_internal.h"

#define CUDNN_CHECK(call)                                                                    \
    do {                                                                                     \
        cudnnStatus_t cudnn_status_ = (call);                                                \
        if (cudnn_status_ != CUDNN_STATUS_SUCCESS)                                           \
            cuda_fatal("cuDNN", #call, cudnnGetErrorString(cudnn_status_), __FILE__,         \
                       __LINE__, cuda_current_device());                                     \
    } while (0)

struct ConvPlan {
    ConvShape shape;
    cudnnTensorDescriptor_t input, output;
    cudnnFilterDescriptor_t filter;
    cudnnConvolutionDescriptor_t convolution;
    cudnnConvolutionFwdAlgo_t forward;
    cudnnConvolutionBwdDataAlgo_t backward_data;
    cudnnConvolutionBwdFilterAlgo_t backward_filter;
    size_t workspace_bytes;  // the largest of the three algorithms' needs
};

int cuda_dnn_create(CudaState *state, ErrorMessage *err) {
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

// pick = the fastest successful deterministic result of a cuDNN search
// (results come sorted by time), -1 when none. A macro: the three searches
// return three struct types with the same fields.
#define PICK_DETERMINISTIC(results, count, pick)                                        \
    do {                                                                                \
        (pick) = -1;                                                                    \
        for (int i_ = 0; i_ < (count) && (pick) < 0; i_++)                              \
            if ((results)[i_].status == CUDNN_STATUS_SUCCESS &&                         \
                (results)[i_].determinism == CUDNN_DETERMINISTIC)                       \
                (pick) = i_;                                                            \
    } while (0)

// Grows the backend's workspace to at least `bytes` (outside the step loop:
// plans are made when the model is built).
static int reserve_workspace(CudaState *state, size_t bytes, ErrorMessage *err) {
    if (bytes <= state->workspace_bytes) return 0;
    if (state->workspace) CUDA_CHECK(cudaFree(state->workspace));
    state->workspace = NULL;
    state->workspace_bytes = 0;
    if (cudaMalloc(&state->workspace, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return error_set(err, "out of GPU memory for a %zu MB convolution workspace", bytes >> 20);
    }
    state->workspace_bytes = bytes;
    return 0;
}

static int find_algorithms(cudnnHandle_t handle, ConvPlan *plan, ErrorMessage *err) {
    enum { TRIES = 8 };
    int found = 0;
    cudnnConvolutionFwdAlgoPerf_t forward[TRIES];
    DNN_TRY(cudnnFindConvolutionForwardAlgorithm(handle, plan->input, plan->filter,
                                                 plan->convolution, plan->output, TRIES, &found,
                                                 forward),
            "find forward algorithm");
    int pick;
    PICK_DETERMINISTIC(forward, found, pick);
    if (pick < 0) return error_set(err, "cuDNN has no deterministic forward algorithm");
    plan->forward = forward[pick].algo;
    plan->workspace_bytes = forward[pick].memory;

    cudnnConvolutionBwdDataAlgoPerf_t data[TRIES];
    DNN_TRY(cudnnFindConvolutionBackwardDataAlgorithm(handle, plan->filter, plan->output,
                                                      plan->convolution, plan->input, TRIES,
                                                      &found, data),
            "find backward data algorithm");
    PICK_DETERMINISTIC(data, found, pick);
    if (pick < 0) return error_set(err, "cuDNN has no deterministic backward data algorithm");
    plan->backward_data = data[pick].algo;
    if (data[pick].memory > plan->workspace_bytes) plan->workspace_bytes = data[pick].memory;

    cudnnConvolutionBwdFilterAlgoPerf_t filter[TRIES];
    DNN_TRY(cudnnFindConvolutionBackwardFilterAlgorithm(handle, plan->input, plan->output,
                                                        plan->convolution, plan->filter, TRIES,
                                                        &found, filter),
            "find backward filter algorithm");
    PICK_DETERMINISTIC(filter, found, pick);
    if (pick < 0) return error_set(err, "cuDNN has no deterministic backward filter algorithm");
    plan->backward_filter = filter[pick].algo;
    if (filter[pick].memory > plan->workspace_bytes) plan->workspace_bytes = filter[pick].memory;
    return 0;
fail:
    return -1;
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
    CUDA_CHECK(cudaSetDevice(state->device));
    DNN_TRY(cudnnCreateTensorDescriptor(&plan->input), "create tensor descriptor");
    DNN_TRY(cudnnCreateTensorDescriptor(&plan->output), "create tensor descriptor");
    DNN_TRY(cudnnCreateFilterDescriptor(&plan->filter), "create filter descriptor");
    DNN_TRY(cudnnCreateConvolutionDescriptor(&plan->convolution), "create convolution descriptor");
    DNN_TRY(cudnnSetTensor4dDescriptor(plan->input, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT,
                                       s->batch, s->in_channels, s->in_height, s->in_width),
            "set input descriptor");
    DNN_TRY(cudnnSetTensor4dDescriptor(plan->output, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT,
                                       s->batch, s->out_channels, s->out_height, s->out_width),
            "set output descriptor");
    DNN_TRY(cudnnSetFilter4dDescriptor(plan->filter, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC,
                                       s->out_channels, s->in_channels, s->kernel, s->kernel),
            "set filter descriptor");
    DNN_TRY(cudnnSetConvolution2dDescriptor(plan->convolution, s->padding, s->padding, s->stride,
                                            s->stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT),
            "set convolution descriptor");
    DNN_TRY(cudnnSetConvolutionMathType(plan->convolution, CUDNN_FMA_MATH), "set math type");
    int n, c, h, w;
    DNN_TRY(cudnnGetConvolution2dForwardOutputDim(plan->convolution, plan->input, plan->filter, &n,
                                                  &c, &h, &w),
            "output size");
    if (n != s->batch || c != s->out_channels || h != s->out_height || w != s->out_width) {
        error_set(err, "cuDNN output %dx%dx%dx%d differs from the plan's %dx%dx%dx%d", n, h, w, c,
                  s->batch, s->out_height, s->out_width, s->out_channels);
        goto fail;
    }
    if (find_algorithms((cudnnHandle_t)state->cudnn, plan, err) ||
        reserve_workspace(state, plan->workspace_bytes, err))
        goto fail;
    return plan;
fail:
    error_prefix(err, "conv %dx%dx%d -> %d, kernel %d, stride %d, padding %d", s->in_height,
                 s->in_width, s->in_channels, s->out_channels, s->kernel, s->stride, s->padding);
    cuda_conv2d_plan_free(backend, plan);
    return NULL;
}

void cuda_conv2d_plan_free(Backend *backend, ConvPlan *plan) {
    if (!plan) return;
    if (plan->input) cudnnDestroyTensorDescriptor(plan->input);
    if (plan->output) cudnnDestroyTensorDescriptor(plan->output);
    if (plan->filter) cudnnDestroyFilterDescriptor(plan->filter);
    if (plan->convolution) cudnnDestroyConvolutionDescriptor(plan->convolution);
    free(plan);
}

void cuda_conv2d_forward(Backend *backend, const ConvPlan *plan, const Act *x_act, const Act *w_act,
                         Act *y_act) {
    const float *x = (const float *)x_act;
    const float *w = (const float *)w_act;
    float *y = (float *)y_act;
    CudaState *state = cuda_state(backend);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionForward((cudnnHandle_t)state->cudnn, &one, plan->input, x,
                                        plan->filter, w, plan->convolution, plan->forward,
                                        state->workspace, state->workspace_bytes, &zero,
                                        plan->output, y));
}

void cuda_conv2d_backward_data(Backend *backend, const ConvPlan *plan, const Act *dy_act,
                               const Act *w_act, Act *dx_act) {
    const float *dy = (const float *)dy_act;
    const float *w = (const float *)w_act;
    float *dx = (float *)dx_act;
    CudaState *state = cuda_state(backend);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardData((cudnnHandle_t)state->cudnn, &one, plan->filter, w,
                                             plan->output, dy, plan->convolution,
                                             plan->backward_data, state->workspace,
                                             state->workspace_bytes, &zero, plan->input, dx));
}

void cuda_conv2d_backward_weights(Backend *backend, const ConvPlan *plan, const Act *x_act,
                                  const Act *dy_act, float *dw) {
    const float *x = (const float *)x_act;
    const float *dy = (const float *)dy_act;
    CudaState *state = cuda_state(backend);
    const float one = 1.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardFilter((cudnnHandle_t)state->cudnn, &one, plan->input, x,
                                               plan->output, dy, plan->convolution,
                                               plan->backward_filter, state->workspace,
                                               state->workspace_bytes, &one, plan->filter, dw));
}
