// Backend selection by name and the shape helpers shared by every backend.
#include "backend/backend.h"

#include <stdio.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#ifdef LTC_WITH_CUDA
#include "backend/cuda/cublaslt_library.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cudnn_library.h"
#endif
#include "backend/ref/ref_backend.h"

static int window_output(int in, int window, int stride, int padding) {
    return (in + 2 * padding - window) / stride + 1;
}

int conv_shape_make(ConvShape *shape, int batch, int in_height, int in_width, int in_channels,
                    int out_channels, int kernel, int stride, int padding, ErrorMessage *err) {
    if (batch < 1 || in_height < 1 || in_width < 1 || in_channels < 1 || out_channels < 1 ||
        kernel < 1 || stride < 1 || padding < 0)
        return error_set(err, "conv: invalid geometry (batch %d, %dx%dx%d -> %d, kernel %d, "
                              "stride %d, padding %d)",
                         batch, in_height, in_width, in_channels, out_channels, kernel, stride,
                         padding);
    *shape = (ConvShape){
        .batch = batch, .in_height = in_height, .in_width = in_width,
        .in_channels = in_channels, .out_channels = out_channels, .kernel = kernel,
        .stride = stride, .padding = padding,
        .out_height = window_output(in_height, kernel, stride, padding),
        .out_width = window_output(in_width, kernel, stride, padding),
    };
    if (in_height + 2 * padding < kernel || in_width + 2 * padding < kernel ||
        shape->out_height < 1 || shape->out_width < 1)
        return error_set(err, "conv: %dx%d input with kernel %d, padding %d has no output",
                         in_height, in_width, kernel, padding);
    return 0;
}

int depthwise_shape_make(DepthwiseShape *shape, int batch, int in_height, int in_width,
                         int channels, int kernel, int stride, int padding, ErrorMessage *err) {
    if (batch < 1 || in_height < 1 || in_width < 1 || channels < 1 || kernel < 1 || stride < 1 ||
        padding < 0 || padding >= kernel)
        return error_set(err, "depthwise conv: invalid geometry (batch %d, %dx%dx%d, kernel %d, "
                              "stride %d, padding %d)",
                         batch, in_height, in_width, channels, kernel, stride, padding);
    *shape = (DepthwiseShape){
        .batch = batch, .in_height = in_height, .in_width = in_width, .channels = channels,
        .kernel = kernel, .stride = stride, .padding = padding,
        .out_height = window_output(in_height, kernel, stride, padding),
        .out_width = window_output(in_width, kernel, stride, padding),
    };
    if (in_height + 2 * padding < kernel || in_width + 2 * padding < kernel)
        return error_set(err, "depthwise conv: %dx%d input with kernel %d, padding %d has no "
                              "output", in_height, in_width, kernel, padding);
    return 0;
}

int pool_shape_make(PoolShape *shape, int batch, int in_height, int in_width, int channels,
                    int window, int stride, int padding, ErrorMessage *err) {
    if (batch < 1 || in_height < 1 || in_width < 1 || channels < 1 || window < 1 || stride < 1 ||
        padding < 0 || 2 * padding > window)
        return error_set(err, "pool: invalid geometry (%dx%dx%d, window %d, stride %d, "
                              "padding %d)",
                         in_height, in_width, channels, window, stride, padding);
    *shape = (PoolShape){
        .batch = batch, .in_height = in_height, .in_width = in_width, .channels = channels,
        .window = window, .stride = stride, .padding = padding,
        .out_height = window_output(in_height, window, stride, padding),
        .out_width = window_output(in_width, window, stride, padding),
    };
    if (in_height + 2 * padding < window || in_width + 2 * padding < window)
        return error_set(err, "pool: %dx%d input smaller than window %d", in_height, in_width,
                         window);
    return 0;
}

int attention_shape_make(AttentionShape *shape, int batch, int heads, int tokens, int head_dim,
                         ErrorMessage *err) {
    if (batch < 1 || heads < 1 || tokens < 1 || head_dim < 1)
        return error_set(err, "attention: invalid geometry (batch %d, %d heads, %d tokens, head "
                              "dim %d)", batch, heads, tokens, head_dim);
    *shape = (AttentionShape){.batch = batch, .heads = heads, .tokens = tokens,
                              .head_dim = head_dim};
    return 0;
}

Backend *backend_create(const char *name, int threads, ErrorMessage *err) {
    if (strcmp(name, "ref") == 0) return ref_backend_create(err);
    if (strcmp(name, "cpu") == 0) return cpu_backend_create(threads, err);
#ifdef LTC_WITH_CUDA
    if (strcmp(name, "cuda") == 0) return cuda_backend_create(0, err);
    error_set(err, "unknown backend '%s' (available: ref, cpu, cuda)", name);
#else
    if (strcmp(name, "cuda") == 0)
        error_set(err, "backend 'cuda': this build has no CUDA (made with CUDA=0, or where "
                       "the toolkit, cuDNN or NCCL was missing; see `make info`)");
    else
        error_set(err, "unknown backend '%s' (available: ref, cpu)", name);
#endif
    return NULL;
}

const char *compute_dtype_name(ComputeDtype dtype) {
    return dtype == COMPUTE_F16 ? "fp16" : dtype == COMPUTE_BF16 ? "bf16" : "fp32";
}

// ref rounds and keeps 4-byte storage; cuda stores 2-byte halves or bfloat16s.
int backend_set_compute_dtype(Backend *backend, ComputeDtype dtype, ErrorMessage *err) {
    const int is_ref = strcmp(backend->name, "ref") == 0;
    const int is_cuda = strcmp(backend->name, "cuda") == 0;
    if (dtype != COMPUTE_F32 && !is_ref && !is_cuda)
        return error_set(err, "the %s backend stores activations in fp32 only (%s asked)",
                         backend->name, compute_dtype_name(dtype));
    backend->compute_dtype = dtype;
    backend->act_element_bytes = is_cuda && dtype != COMPUTE_F32 ? 2 : sizeof(float);
    return 0;
}

int backend_gpu_count(char *why, size_t size) {
#ifdef LTC_WITH_CUDA
    const int count = cuda_device_count(why, size);
    if (count == 0) return 0;
    // GPUs whose libraries this build cannot use are no usable GPUs: auto
    // stays on the CPU, saying why.
    CudaLibraries found;
    ErrorMessage err = {{0}};
    if (cuda_libraries_read(&found, &err) || cuda_libraries_check(&found, &err)) {
        snprintf(why, size, "%s", err.text);
        return 0;
    }
    return count;
#else
    snprintf(why, size, "this build has no CUDA (made with CUDA=0, or where the toolkit, cuDNN "
                        "or NCCL was missing; see `make info`)");
    return 0;
#endif
}

int backend_gpu_libraries(char *text, size_t size, ErrorMessage *err) {
#ifdef LTC_WITH_CUDA
    CudaLibraries found;
    text[0] = '\0';
    if (cuda_libraries_read(&found, err)) return -1;
    cuda_libraries_describe(&found, text, size);
    return cuda_libraries_check(&found, err);
#else
    snprintf(text, size, "none (CPU build)");
    (void)err;
    return 0;
#endif
}

static Backend *gpu_backend_create(int gpu, ErrorMessage *err) {
#ifdef LTC_WITH_CUDA
    return cuda_backend_create(gpu, err);
#else
    (void)gpu;
    return backend_create("cuda", 0, err);  // says why not
#endif
}

Backend *backend_choose(const char *accelerator, const char *cpu_backend, int gpu, int threads,
                        char *why, size_t size, ErrorMessage *err) {
    if (strcmp(accelerator, "cpu") != 0) {
        ErrorMessage gpu_err = {{0}};
        Backend *gpu_backend = gpu_backend_create(gpu, &gpu_err);
        if (gpu_backend) {
            snprintf(why, size, "%s, %s (--accelerator %s)", gpu_backend->name,
                     gpu_backend->device, accelerator);
            return gpu_backend;
        }
        if (strcmp(accelerator, "gpu") == 0) {
            error_set(err, "--accelerator gpu: %s", gpu_err.text);
            return NULL;
        }
        snprintf(why, size, "%s (--accelerator auto: %s)", cpu_backend, gpu_err.text);
    } else {
        snprintf(why, size, "%s (--accelerator cpu)", cpu_backend);
    }
    return backend_create(cpu_backend, threads, err);
}

void backend_destroy(Backend *backend) {
    if (backend && backend->destroy) backend->destroy(backend);
}

float backend_read_scalar(Backend *backend, const float *device_value) {
    float value = 0.0f;
    backend->op.download(backend, &value, device_value, sizeof value);
    return value;
}

int backend_cuda_built(void) {
#ifdef LTC_WITH_CUDA
    return 1;
#else
    return 0;
#endif
}

int backend_cuda_libraries(const char **names, const char **files, int max) {
#ifdef LTC_WITH_CUDA
    const char *known_names[] = {"cuDNN", "cuBLAS", "cuBLASLt"};
    const char *known_files[] = {cudnn_library_file(), cuda_blas_library_file(),
                                 cublaslt_library_file()};
    int count = 0;
    for (; count < 3 && count < max; count++) {
        names[count] = known_names[count];
        files[count] = known_files[count];
    }
    return count;
#else
    return 0;
#endif
}
