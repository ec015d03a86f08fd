// The cuda backend's ops of Ultralytics' YOLO models (backend.h): SiLU and
// the depthwise convolution of C2PSA's position encoding, with their Backend
// entry points (the op table in cuda_backend.c points here). One thread per
// output element, each evaluating ref's double expression in ref's order.
// Written and compiled without a GPU at hand: run on the CPU emulation of
// CUDA (tests/cuda_emu) and not yet on a GPU. x, y, dy, dx and w are
// activations in the storage type T of the compute dtype (cuda_act.cuh).
#include <math.h>

#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_grid.cuh"
#include "backend/cuda/cuda_internal.h"

namespace {

__device__ double silu_sigmoid(double a) { return 1.0 / (1.0 + exp(-a)); }

template <typename T>
__global__ void silu_forward_kernel(size_t n, const T *x, T *y) {
    GRID_STRIDE(i, n) {
        const double a = act_load(x[i]);
        y[i] = act_store<T>((float)(a * silu_sigmoid(a)));
    }
}

template <typename T>
__global__ void silu_backward_kernel(size_t n, const T *x, const T *dy, T *dx) {
    GRID_STRIDE(i, n) {
        const double a = act_load(x[i]), s = silu_sigmoid(a);
        dx[i] = act_store<T>((float)(act_load(dy[i]) * s * (1.0 + a * (1.0 - s))));
    }
}

// The geometry the kernels need (ConvShape by value).
struct Depthwise {
    int batch, in_height, in_width, channels, kernel, stride, padding, out_height, out_width;
};

Depthwise depthwise_of(const ConvShape *s) {
    return Depthwise{s->batch,  s->in_height, s->in_width,   s->in_channels, s->kernel,
                     s->stride, s->padding,   s->out_height, s->out_width};
}

template <typename T>
__global__ void depthwise_forward_kernel(size_t n, Depthwise s, const T *x, const T *w, T *y) {
    GRID_STRIDE(index, n) {
        const int c = (int)(index % s.channels);
        const size_t pixel = index / s.channels;
        const int ow = (int)(pixel % s.out_width), oh = (int)(pixel / s.out_width % s.out_height);
        const size_t b = pixel / s.out_width / s.out_height;
        double sum = 0.0;
        for (int kh = 0; kh < s.kernel; kh++) {
            const int ih = oh * s.stride - s.padding + kh;
            if (ih < 0 || ih >= s.in_height) continue;
            for (int kw = 0; kw < s.kernel; kw++) {
                const int iw = ow * s.stride - s.padding + kw;
                if (iw < 0 || iw >= s.in_width) continue;
                sum += (double)act_load(x[((b * s.in_height + ih) * s.in_width + iw) * s.channels +
                                          c]) *
                       act_load(w[((size_t)c * s.kernel + kh) * s.kernel + kw]);
            }
        }
        y[index] = act_store<T>((float)sum);
    }
}

template <typename T>
__global__ void depthwise_data_kernel(size_t n, Depthwise s, const T *dy, const T *w, T *dx) {
    GRID_STRIDE(index, n) {
        const int c = (int)(index % s.channels);
        const size_t pixel = index / s.channels;
        const int iw = (int)(pixel % s.in_width), ih = (int)(pixel / s.in_width % s.in_height);
        const size_t b = pixel / s.in_width / s.in_height;
        double sum = 0.0;
        for (int kh = 0; kh < s.kernel; kh++) {
            const int row = ih + s.padding - kh;
            if (row < 0 || row % s.stride || row / s.stride >= s.out_height) continue;
            for (int kw = 0; kw < s.kernel; kw++) {
                const int col = iw + s.padding - kw;
                if (col < 0 || col % s.stride || col / s.stride >= s.out_width) continue;
                sum += (double)act_load(dy[((b * s.out_height + row / s.stride) * s.out_width +
                                            col / s.stride) * s.channels + c]) *
                       act_load(w[((size_t)c * s.kernel + kh) * s.kernel + kw]);
            }
        }
        dx[index] = act_store<T>((float)sum);
    }
}

// One thread per weight (c, kh, kw): the sum over every output pixel.
template <typename T>
__global__ void depthwise_weights_kernel(size_t n, Depthwise s, const T *x, const T *dy,
                                         float *dw) {
    GRID_STRIDE(index, n) {
        const int kw = (int)(index % s.kernel), kh = (int)(index / s.kernel % s.kernel);
        const int c = (int)(index / s.kernel / s.kernel);
        double sum = 0.0;
        for (int b = 0; b < s.batch; b++)
            for (int oh = 0; oh < s.out_height; oh++) {
                const int ih = oh * s.stride - s.padding + kh;
                if (ih < 0 || ih >= s.in_height) continue;
                for (int ow = 0; ow < s.out_width; ow++) {
                    const int iw = ow * s.stride - s.padding + kw;
                    if (iw < 0 || iw >= s.in_width) continue;
                    sum += (double)act_load(
                               x[(((size_t)b * s.in_height + ih) * s.in_width + iw) * s.channels +
                                 c]) *
                           act_load(dy[(((size_t)b * s.out_height + oh) * s.out_width + ow) *
                                           s.channels + c]);
                }
            }
        dw[index] += (float)sum;
    }
}

}  // namespace

extern "C" {

void cuda_silu_forward(Backend *backend, size_t n, const Act *x, Act *y) {
    if (n == 0) return;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        silu_forward_kernel<ACT_T><<<blocks_for(n), kThreads, 0, cuda_state(backend)->stream>>>(
            n, (const ACT_T *)x, (ACT_T *)y);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_silu_backward(Backend *backend, size_t n, const Act *x, const Act *dy, Act *dx) {
    if (n == 0) return;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        silu_backward_kernel<ACT_T><<<blocks_for(n), kThreads, 0, cuda_state(backend)->stream>>>(
            n, (const ACT_T *)x, (const ACT_T *)dy, (ACT_T *)dx);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_depthwise_conv2d_forward(Backend *backend, const ConvShape *shape, const Act *x,
                                   const Act *w, Act *y) {
    const size_t n = (size_t)shape->batch * shape->out_height * shape->out_width *
                     shape->in_channels;
    if (n == 0) return;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        depthwise_forward_kernel<ACT_T>
            <<<blocks_for(n), kThreads, 0, cuda_state(backend)->stream>>>(
                n, depthwise_of(shape), (const ACT_T *)x, (const ACT_T *)w, (ACT_T *)y);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_depthwise_conv2d_backward_data(Backend *backend, const ConvShape *shape, const Act *dy,
                                         const Act *w, Act *dx) {
    const size_t n = (size_t)shape->batch * shape->in_height * shape->in_width *
                     shape->in_channels;
    if (n == 0) return;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        depthwise_data_kernel<ACT_T><<<blocks_for(n), kThreads, 0, cuda_state(backend)->stream>>>(
            n, depthwise_of(shape), (const ACT_T *)dy, (const ACT_T *)w, (ACT_T *)dx);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_depthwise_conv2d_backward_weights(Backend *backend, const ConvShape *shape,
                                            const Act *x, const Act *dy, float *dw) {
    const size_t n = (size_t)shape->in_channels * shape->kernel * shape->kernel;
    if (n == 0) return;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        depthwise_weights_kernel<ACT_T>
            <<<blocks_for(n), kThreads, 0, cuda_state(backend)->stream>>>(
                n, depthwise_of(shape), (const ACT_T *)x, (const ACT_T *)dy, dw);
        CUDA_CHECK_LAUNCH();
    });
}

}  // extern "C"
