// The cuDNN functions the cuda backend calls, forwarded into the library
// opened at run time (see util/dynamic_library.h). The CUDA emulation
// (tests/cuda_emu) builds without this file: it defines these functions.
// A cuDNN function called elsewhere but missing from the list below is an
// undefined reference when the program is linked: add it here.
#include "backend/cuda/cudnn_library.h"

#include <cudnn.h>
#include <dlfcn.h>

#include "util/dynamic_library.h"

#define STRINGIFY(x) #x
#define SONAME(major) "libcudnn.so." STRINGIFY(major)

typedef cudnnTensorDescriptor_t Tensor;
typedef cudnnFilterDescriptor_t Filter;
typedef cudnnConvolutionDescriptor_t Convolution;

#define CUDNN_FUNCTIONS(X)                                                                     \
    X(const char *, cudnnGetErrorString, (cudnnStatus_t s), (s))                               \
    X(size_t, cudnnGetVersion, (void), ())                                                     \
    X(size_t, cudnnGetCudartVersion, (void), ())                                               \
    X(cudnnStatus_t, cudnnCreate, (cudnnHandle_t * h), (h))                                    \
    X(cudnnStatus_t, cudnnDestroy, (cudnnHandle_t h), (h))                                     \
    X(cudnnStatus_t, cudnnSetStream, (cudnnHandle_t h, cudaStream_t s), (h, s))                \
    X(cudnnStatus_t, cudnnCreateTensorDescriptor, (Tensor * d), (d))                           \
    X(cudnnStatus_t, cudnnDestroyTensorDescriptor, (Tensor d), (d))                            \
    X(cudnnStatus_t, cudnnSetTensor4dDescriptor,                                               \
      (Tensor d, cudnnTensorFormat_t f, cudnnDataType_t t, int n, int c, int h, int w),        \
      (d, f, t, n, c, h, w))                                                                   \
    X(cudnnStatus_t, cudnnCreateFilterDescriptor, (Filter * d), (d))                           \
    X(cudnnStatus_t, cudnnDestroyFilterDescriptor, (Filter d), (d))                            \
    X(cudnnStatus_t, cudnnSetFilter4dDescriptor,                                               \
      (Filter d, cudnnDataType_t t, cudnnTensorFormat_t f, int k, int c, int h, int w),        \
      (d, t, f, k, c, h, w))                                                                   \
    X(cudnnStatus_t, cudnnCreateConvolutionDescriptor, (Convolution * d), (d))                 \
    X(cudnnStatus_t, cudnnDestroyConvolutionDescriptor, (Convolution d), (d))                  \
    X(cudnnStatus_t, cudnnSetConvolution2dDescriptor,                                          \
      (Convolution d, int ph, int pw, int u, int v, int dh, int dw, cudnnConvolutionMode_t m,  \
       cudnnDataType_t t),                                                                     \
      (d, ph, pw, u, v, dh, dw, m, t))                                                         \
    X(cudnnStatus_t, cudnnSetConvolutionMathType, (Convolution d, cudnnMathType_t m), (d, m))  \
    X(cudnnStatus_t, cudnnGetConvolution2dForwardOutputDim,                                    \
      (const Convolution d, const Tensor x, const Filter w, int *n, int *c, int *h, int *wd),  \
      (d, x, w, n, c, h, wd))                                                                  \
    X(cudnnStatus_t, cudnnFindConvolutionForwardAlgorithm,                                     \
      (cudnnHandle_t h, const Tensor x, const Filter w, const Convolution d, const Tensor y,   \
       const int requested, int *returned, cudnnConvolutionFwdAlgoPerf_t *perf),               \
      (h, x, w, d, y, requested, returned, perf))                                              \
    X(cudnnStatus_t, cudnnFindConvolutionBackwardDataAlgorithm,                                \
      (cudnnHandle_t h, const Filter w, const Tensor dy, const Convolution d, const Tensor dx, \
       const int requested, int *returned, cudnnConvolutionBwdDataAlgoPerf_t *perf),           \
      (h, w, dy, d, dx, requested, returned, perf))                                            \
    X(cudnnStatus_t, cudnnFindConvolutionBackwardFilterAlgorithm,                              \
      (cudnnHandle_t h, const Tensor x, const Tensor dy, const Convolution d, const Filter dw, \
       const int requested, int *returned, cudnnConvolutionBwdFilterAlgoPerf_t *perf),         \
      (h, x, dy, d, dw, requested, returned, perf))                                            \
    X(cudnnStatus_t, cudnnConvolutionForward,                                                  \
      (cudnnHandle_t h, const void *alpha, const Tensor xd, const void *x, const Filter wd,    \
       const void *w, const Convolution d, cudnnConvolutionFwdAlgo_t a, void *ws,              \
       size_t ws_bytes, const void *beta, const Tensor yd, void *y),                           \
      (h, alpha, xd, x, wd, w, d, a, ws, ws_bytes, beta, yd, y))                               \
    X(cudnnStatus_t, cudnnConvolutionBackwardData,                                             \
      (cudnnHandle_t h, const void *alpha, const Filter wd, const void *w, const Tensor dyd,   \
       const void *dy, const Convolution d, cudnnConvolutionBwdDataAlgo_t a, void *ws,         \
       size_t ws_bytes, const void *beta, const Tensor dxd, void *dx),                         \
      (h, alpha, wd, w, dyd, dy, d, a, ws, ws_bytes, beta, dxd, dx))                           \
    X(cudnnStatus_t, cudnnConvolutionBackwardFilter,                                           \
      (cudnnHandle_t h, const void *alpha, const Tensor xd, const void *x, const Tensor dyd,   \
       const void *dy, const Convolution d, cudnnConvolutionBwdFilterAlgo_t a, void *ws,       \
       size_t ws_bytes, const void *beta, const Filter dwd, void *dw),                         \
      (h, alpha, xd, x, dyd, dy, d, a, ws, ws_bytes, beta, dwd, dw))                           \
    X(cudnnStatus_t, cudnnBackendCreateDescriptor,                                             \
      (cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t * d), (t, d))                  \
    X(cudnnStatus_t, cudnnBackendDestroyDescriptor, (cudnnBackendDescriptor_t d), (d))         \
    X(cudnnStatus_t, cudnnBackendFinalize, (cudnnBackendDescriptor_t d), (d))                  \
    X(cudnnStatus_t, cudnnBackendSetAttribute,                                                 \
      (cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t n,                              \
       cudnnBackendAttributeType_t t, int64_t c, const void *v),                               \
      (d, n, t, c, v))                                                                         \
    X(cudnnStatus_t, cudnnBackendGetAttribute,                                                 \
      (cudnnBackendDescriptor_t const d, cudnnBackendAttributeName_t n,                        \
       cudnnBackendAttributeType_t t, int64_t r, int64_t *c, void *v),                         \
      (d, n, t, r, c, v))                                                                      \
    X(cudnnStatus_t, cudnnBackendExecute,                                                      \
      (cudnnHandle_t h, cudnnBackendDescriptor_t p, cudnnBackendDescriptor_t v), (h, p, v))

const char *cudnn_library_file(void) { return SONAME(CUDNN_MAJOR); }

DYNAMIC_LIBRARY(CUDNN_FUNCTIONS, cudnn_library_open, "cuDNN", cudnn_library_file(),
                RTLD_NOW | RTLD_LOCAL, CUDA_LIBRARIES_HINT)

void cudnn_library_path(char *path, size_t size) {
    dynamic_library_file_of((const void *)loaded.cudnnGetVersion, path, size);
}
