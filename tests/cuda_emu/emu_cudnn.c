// The cuDNN of the CUDA emulation: the calls cuda_conv.c makes, with the
// three convolutions (forward, backward data, backward filter) as plain
// loops over NHWC tensors and KRSC filters (the only layout the backend
// uses; others are refused), fp32 sums in a fixed order, 16-bit data
// widened and results rounded to nearest even once. Two "algorithms" that
// compute alike (see FIND_ALGORITHM), with no workspace. Descriptors are checked against each
// other as cuDNN would (channels, output size, one data type). On a
// capturing stream a convolution is recorded (emu_blas.h) with its
// descriptors, alpha and beta as at the call; an algorithm search refuses.
#include <cudnn.h>
#include <stdlib.h>

#include "backend/cuda/cudnn_library.h"
#include "emu_cudnn_graph.h"
#include "emu_log.h"
#include "tests/cuda_emu/emu_blas.h"
#include "util/dynamic_library.h"
#include "util/half.h"

// The emulation is its own cuDNN: nothing to open (src/backend/cuda/
// cudnn_library.c, which opens the real one, is left out of this build).
int cudnn_library_open(ErrorMessage *err) { return 0; }
const char *cudnn_library_file(void) { return "cuDNN (CPU emulation)"; }
void cudnn_library_path(char *path, size_t size) {
    dynamic_library_file_of((const void *)cudnnGetVersion, path, size);
}

struct cudnnContext {
    cudaStream_t stream;
};
struct cudnnTensorStruct {
    cudnnDataType_t type;
    int n, c, h, w;  // NHWC
};
struct cudnnFilterStruct {
    cudnnDataType_t type;
    int k, c, r, s;  // KRSC
};
struct cudnnConvolutionStruct {
    int pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w;
};

#define NEW_DESCRIPTOR(out)                                  \
    do {                                                     \
        *(out) = calloc(1, sizeof **(out));                  \
        return *(out) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED; \
    } while (0)

// The version of the headers, or the one LTC_EMU_CUDNN_VERSION (cuDNN's
// encoding, 91900) and LTC_EMU_CUDNN_CUDART (13000) make it claim: the
// tests of the program's library check load "another" cuDNN that way.
static size_t version_or(const char *variable, size_t built) {
    const char *text = getenv(variable);
    return text && *text ? (size_t)strtoul(text, NULL, 10) : built;
}
size_t cudnnGetVersion(void) { return version_or("LTC_EMU_CUDNN_VERSION", CUDNN_VERSION); }
size_t cudnnGetCudartVersion(void) { return version_or("LTC_EMU_CUDNN_CUDART", CUDART_VERSION); }

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle) { NEW_DESCRIPTOR(handle); }
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
    free(handle);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
    handle->stream = stream;
    ltc_emu_stream_computes(stream);
    return CUDNN_STATUS_SUCCESS;
}
// An algorithm search on a capturing stream is refused (emu_blas.h): cuDNN
// times its candidates, which a capture cannot hold.
int emu_cudnn_refuses_capture(const char *call, cudnnHandle_t handle) {
    return ltc_emu_refuse_capture(call, handle->stream);
}
// An execution recorded while the handle's stream captures (emu_blas.h).
int emu_cudnn_capture_call(const char *call, cudnnHandle_t handle, int (*run)(const void *),
                           const void *arguments, size_t bytes) {
    return ltc_emu_capture_call(handle->stream, call, run, arguments, bytes);
}
const char *cudnnGetErrorString(cudnnStatus_t status) {
    switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM (cuda emulation)";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED (cuda emulation)";
    default: return "cuDNN error (cuda emulation)";
    }
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) { NEW_DESCRIPTOR(d); }
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) { NEW_DESCRIPTOR(d); }
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) {
    NEW_DESCRIPTOR(d);
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
    free(d);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
    free(d);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
    free(d);
    return CUDNN_STATUS_SUCCESS;
}

static int known_type(cudnnDataType_t type) {
    return type == CUDNN_DATA_FLOAT || type == CUDNN_DATA_HALF || type == CUDNN_DATA_BFLOAT16;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
    if (format != CUDNN_TENSOR_NHWC || !known_type(type)) return CUDNN_STATUS_NOT_SUPPORTED;
    if (n < 1 || c < 1 || h < 1 || w < 1) return CUDNN_STATUS_BAD_PARAM;
    *d = (struct cudnnTensorStruct){type, n, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
    if (format != CUDNN_TENSOR_NHWC || !known_type(type)) return CUDNN_STATUS_NOT_SUPPORTED;
    if (k < 1 || c < 1 || h < 1 || w < 1) return CUDNN_STATUS_BAD_PARAM;
    *d = (struct cudnnFilterStruct){type, k, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h,
                                              int pad_w, int u, int v, int dilation_h,
                                              int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
    if (mode != CUDNN_CROSS_CORRELATION || compute != CUDNN_DATA_FLOAT)
        return CUDNN_STATUS_NOT_SUPPORTED;
    if (pad_h < 0 || pad_w < 0 || u < 1 || v < 1 || dilation_h < 1 || dilation_w < 1)
        return CUDNN_STATUS_BAD_PARAM;
    *d = (struct cudnnConvolutionStruct){pad_h, pad_w, u, v, dilation_h, dilation_w};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
    return CUDNN_STATUS_SUCCESS;
}

static int output_size(int in, int pad, int kernel, int stride, int dilation) {
    return (in + 2 * pad - ((kernel - 1) * dilation + 1)) / stride + 1;
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t conv,
                                                    const cudnnTensorDescriptor_t x,
                                                    const cudnnFilterDescriptor_t w, int *n,
                                                    int *c, int *h, int *wd) {
    if (x->c != w->c) return CUDNN_STATUS_BAD_PARAM;
    *n = x->n;
    *c = w->k;
    *h = output_size(x->h, conv->pad_h, w->r, conv->stride_h, conv->dilation_h);
    *wd = output_size(x->w, conv->pad_w, w->s, conv->stride_w, conv->dilation_w);
    return *h > 0 && *wd > 0 ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

// The descriptors of one convolution agree: x (N, H, W, C), w (K, R, S, C),
// y (N, OH, OW, K), one data type.
static int consistent(const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
                      const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t y) {
    int n, c, h, wd;
    if (cudnnGetConvolution2dForwardOutputDim(conv, x, w, &n, &c, &h, &wd)) return 0;
    return y->n == n && y->c == c && y->h == h && y->w == wd && x->type == w->type &&
           y->type == x->type;
}

// A search finds two "algorithms", sorted by time as cuDNN sorts them: 1,
// the faster, not deterministic, then 0, deterministic (both compute the
// same here), so the backend's rule of picking shows in the algorithm file.
#define FIND_ALGORITHM(results, returned, wanted, x, w, conv, y)       \
    do {                                                               \
        if (!consistent(x, w, conv, y)) return CUDNN_STATUS_BAD_PARAM; \
        for (int i_ = 0; i_ < 2 && i_ < (wanted); i_++) {              \
            (results)[i_].algo = 1 - i_;                               \
            (results)[i_].status = CUDNN_STATUS_SUCCESS;               \
            (results)[i_].time = 1.0f + i_;                            \
            (results)[i_].memory = 0;                                  \
            (results)[i_].determinism =                                \
                i_ == 0 ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC; \
            (results)[i_].mathType = CUDNN_DEFAULT_MATH;               \
        }                                                              \
        *(returned) = (wanted) < 2 ? (wanted) : 2;                     \
        return CUDNN_STATUS_SUCCESS;                                   \
    } while (0)

cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t handle,
                                                   const cudnnTensorDescriptor_t x,
                                                   const cudnnFilterDescriptor_t w,
                                                   const cudnnConvolutionDescriptor_t conv,
                                                   const cudnnTensorDescriptor_t y, const int wanted,
                                                   int *returned,
                                                   cudnnConvolutionFwdAlgoPerf_t *results) {
    if (emu_cudnn_refuses_capture("cudnnFindConvolutionForwardAlgorithm", handle)) return CUDNN_STATUS_NOT_SUPPORTED;
    FIND_ALGORITHM(results, returned, wanted, x, w, conv, y);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t dx, const int wanted,
    int *returned, cudnnConvolutionBwdDataAlgoPerf_t *results) {
    if (emu_cudnn_refuses_capture("cudnnFindConvolutionBackwardDataAlgorithm", handle)) return CUDNN_STATUS_NOT_SUPPORTED;
    FIND_ALGORITHM(results, returned, wanted, dx, w, conv, dy);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dw, const int wanted,
    int *returned, cudnnConvolutionBwdFilterAlgoPerf_t *results) {
    if (emu_cudnn_refuses_capture("cudnnFindConvolutionBackwardFilterAlgorithm", handle)) return CUDNN_STATUS_NOT_SUPPORTED;
    FIND_ALGORITHM(results, returned, wanted, x, dw, conv, dy);
}

static float load(const void *p, cudnnDataType_t type, size_t i) {
    switch (type) {
    case CUDNN_DATA_HALF: return f16_to_float(((const float16 *)p)[i]);
    case CUDNN_DATA_BFLOAT16: return bf16_to_float(((const bfloat16 *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

// out[i] = alpha sum + beta out[i], out not read when beta is 0 (as cuDNN).
static void store(void *p, cudnnDataType_t type, size_t i, float alpha, float sum, float beta) {
    const float v = beta == 0.0f ? alpha * sum : alpha * sum + beta * load(p, type, i);
    switch (type) {
    case CUDNN_DATA_HALF: ((float16 *)p)[i] = float_to_f16(v); break;
    case CUDNN_DATA_BFLOAT16: ((bfloat16 *)p)[i] = float_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

// The input row (ih) or column (iw) that output position o and tap t read,
// -1 when it falls in the padding.
static int input_at(int o, int t, int stride, int pad, int dilation, int size) {
    const int i = o * stride - pad + t * dilation;
    return i >= 0 && i < size ? i : -1;
}

#define X_INDEX(b, i, j, ch) ((((size_t)(b) * x->h + (i)) * x->w + (j)) * x->c + (ch))
#define W_INDEX(o, r, s, ch) ((((size_t)(o) * w->r + (r)) * w->s + (s)) * w->c + (ch))
#define Y_INDEX(b, i, j, o) ((((size_t)(b) * y->h + (i)) * y->w + (j)) * y->c + (o))

// A convolution as the call gave it: the descriptors' contents, alpha and
// beta taken at the call (a capturing stream records it so: emu_blas.h),
// the data pointers kept. `a` and `b` are what it reads (forward: x and w;
// backward data: dy and w; backward filter: x and dy), `out` what it writes.
typedef struct ConvCall {
    struct cudnnTensorStruct x, y;
    struct cudnnFilterStruct w;
    struct cudnnConvolutionStruct conv;
    const void *a, *b;
    void *out;
    float alpha, beta;
} ConvCall;

// Runs `run` on the call now, or records it while the handle's stream
// captures; descriptors that do not fit each other are refused at the call.
static cudnnStatus_t submit(const char *call, cudnnHandle_t handle, int (*run)(const void *),
                            ConvCall *c) {
    ltc_emu_log("cudnn", call, 0);
    if (!consistent(&c->x, &c->w, &c->conv, &c->y)) return CUDNN_STATUS_BAD_PARAM;
    if (emu_cudnn_capture_call(call, handle, run, c, sizeof *c)) return CUDNN_STATUS_SUCCESS;
    return (cudnnStatus_t)run(c);
}

// The call's arguments in *c; -1 for a missing descriptor or scalar.
static int conv_call(ConvCall *c, const struct cudnnTensorStruct *x,
                     const struct cudnnFilterStruct *w, const struct cudnnConvolutionStruct *conv,
                     const struct cudnnTensorStruct *y, const void *a, const void *b, void *out,
                     const void *alpha, const void *beta) {
    if (!x || !w || !conv || !y || !alpha || !beta) return -1;
    *c = (ConvCall){*x, *y, *w, *conv, a, b, out, *(const float *)alpha, *(const float *)beta};
    return 0;
}

static int run_forward(const void *arguments) {
    const ConvCall *call = arguments;
    const struct cudnnTensorStruct *x = &call->x, *y = &call->y;
    const struct cudnnFilterStruct *w = &call->w;
    const struct cudnnConvolutionStruct *conv = &call->conv;
    const void *xp = call->a, *wp = call->b;
    void *yp = call->out;
    for (int b = 0; b < y->n; b++)
        for (int oh = 0; oh < y->h; oh++)
            for (int ow = 0; ow < y->w; ow++)
                for (int o = 0; o < y->c; o++) {
                    float sum = 0.0f;
                    for (int r = 0; r < w->r; r++) {
                        const int ih = input_at(oh, r, conv->stride_h, conv->pad_h,
                                                conv->dilation_h, x->h);
                        for (int s = 0; s < w->s && ih >= 0; s++) {
                            const int iw = input_at(ow, s, conv->stride_w, conv->pad_w,
                                                    conv->dilation_w, x->w);
                            for (int ch = 0; ch < x->c && iw >= 0; ch++)
                                sum += load(xp, x->type, X_INDEX(b, ih, iw, ch)) *
                                       load(wp, w->type, W_INDEX(o, r, s, ch));
                        }
                    }
                    store(yp, y->type, Y_INDEX(b, oh, ow, o), call->alpha, sum, call->beta);
                }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha,
                                      const cudnnTensorDescriptor_t x, const void *xp,
                                      const cudnnFilterDescriptor_t w, const void *wp,
                                      const cudnnConvolutionDescriptor_t conv,
                                      cudnnConvolutionFwdAlgo_t algo, void *workspace,
                                      size_t workspace_bytes, const void *beta,
                                      const cudnnTensorDescriptor_t y, void *yp) {
    ConvCall c;
    if (conv_call(&c, x, w, conv, y, xp, wp, yp, alpha, beta)) return CUDNN_STATUS_BAD_PARAM;
    return submit("cudnnConvolutionForward", handle, run_forward, &c);
}

// dx: every input element gathers the (output, tap) pairs that read it.
static int run_backward_data(const void *arguments) {
    const ConvCall *call = arguments;
    const struct cudnnTensorStruct *x = &call->x, *y = &call->y;
    const struct cudnnFilterStruct *w = &call->w;
    const struct cudnnConvolutionStruct *conv = &call->conv;
    const void *dyp = call->a, *wp = call->b;
    void *dxp = call->out;
    for (int b = 0; b < x->n; b++)
        for (int ih = 0; ih < x->h; ih++)
            for (int iw = 0; iw < x->w; iw++)
                for (int ch = 0; ch < x->c; ch++) {
                    float sum = 0.0f;
                    for (int oh = 0; oh < y->h; oh++)
                        for (int r = 0; r < w->r; r++) {
                            if (input_at(oh, r, conv->stride_h, conv->pad_h, conv->dilation_h,
                                         x->h) != ih)
                                continue;
                            for (int ow = 0; ow < y->w; ow++)
                                for (int s = 0; s < w->s; s++) {
                                    if (input_at(ow, s, conv->stride_w, conv->pad_w,
                                                 conv->dilation_w, x->w) != iw)
                                        continue;
                                    for (int o = 0; o < y->c; o++)
                                        sum += load(dyp, y->type, Y_INDEX(b, oh, ow, o)) *
                                               load(wp, w->type, W_INDEX(o, r, s, ch));
                                }
                        }
                    store(dxp, x->type, X_INDEX(b, ih, iw, ch), call->alpha, sum, call->beta);
                }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha,
                                           const cudnnFilterDescriptor_t w, const void *wp,
                                           const cudnnTensorDescriptor_t y, const void *dyp,
                                           const cudnnConvolutionDescriptor_t conv,
                                           cudnnConvolutionBwdDataAlgo_t algo, void *workspace,
                                           size_t workspace_bytes, const void *beta,
                                           const cudnnTensorDescriptor_t x, void *dxp) {
    ConvCall c;
    if (conv_call(&c, x, w, conv, y, dyp, wp, dxp, alpha, beta)) return CUDNN_STATUS_BAD_PARAM;
    return submit("cudnnConvolutionBackwardData", handle, run_backward_data, &c);
}

static int run_backward_filter(const void *arguments) {
    const ConvCall *call = arguments;
    const struct cudnnTensorStruct *x = &call->x, *y = &call->y;
    const struct cudnnFilterStruct *w = &call->w;
    const struct cudnnConvolutionStruct *conv = &call->conv;
    const void *xp = call->a, *dyp = call->b;
    void *dwp = call->out;
    for (int o = 0; o < w->k; o++)
        for (int r = 0; r < w->r; r++)
            for (int s = 0; s < w->s; s++)
                for (int ch = 0; ch < w->c; ch++) {
                    float sum = 0.0f;
                    for (int b = 0; b < y->n; b++)
                        for (int oh = 0; oh < y->h; oh++) {
                            const int ih = input_at(oh, r, conv->stride_h, conv->pad_h,
                                                    conv->dilation_h, x->h);
                            for (int ow = 0; ow < y->w && ih >= 0; ow++) {
                                const int iw = input_at(ow, s, conv->stride_w, conv->pad_w,
                                                        conv->dilation_w, x->w);
                                if (iw >= 0)
                                    sum += load(dyp, y->type, Y_INDEX(b, oh, ow, o)) *
                                           load(xp, x->type, X_INDEX(b, ih, iw, ch));
                            }
                        }
                    store(dwp, w->type, W_INDEX(o, r, s, ch), call->alpha, sum, call->beta);
                }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha,
                                             const cudnnTensorDescriptor_t x, const void *xp,
                                             const cudnnTensorDescriptor_t y, const void *dyp,
                                             const cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo,
                                             void *workspace, size_t workspace_bytes,
                                             const void *beta, const cudnnFilterDescriptor_t w,
                                             void *dwp) {
    ConvCall c;
    if (conv_call(&c, x, w, conv, y, xp, dyp, dwp, alpha, beta)) return CUDNN_STATUS_BAD_PARAM;
    return submit("cudnnConvolutionBackwardFilter", handle, run_backward_filter, &c);
}
