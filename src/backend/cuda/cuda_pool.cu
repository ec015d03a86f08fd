// Pooling on the GPU: max pooling (argmax kept for backward; ties keep the
// first element in window order, a NaN wins, as ref and PyTorch) and global
// average pooling. The max-pool backward gathers instead of scattering: each
// input element sums the gradients of the windows whose argmax it is, in
// window order, so no atomics and the same sums as ref. Activations in the
// storage type T of the compute dtype (cuda_act.cuh), rounded once.
#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_grid.cuh"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_launch.cuh"

namespace {

template <typename T>
__global__ void maxpool_forward_kernel(PoolShape s, const T *x, T *y, int32_t *argmax) {
    const size_t n_out = (size_t)s.batch * s.out_height * s.out_width * s.channels;
    const size_t in_sample = (size_t)s.in_height * s.in_width * s.channels;
    for (size_t o = blockIdx.x * (size_t)blockDim.x + threadIdx.x; o < n_out;
         o += (size_t)blockDim.x * gridDim.x) {
        const int c = (int)(o % s.channels);
        const size_t pixel = o / s.channels;
        const int ow = (int)(pixel % s.out_width);
        const int oh = (int)(pixel / s.out_width % s.out_height);
        const int n = (int)(pixel / ((size_t)s.out_width * s.out_height));
        const T *xn = x + n * in_sample;
        float best = -INFINITY;
        int32_t best_index = -1;
        for (int kh = 0; kh < s.window; kh++) {
            const int ih = oh * s.stride - s.padding + kh;
            if (ih < 0 || ih >= s.in_height) continue;
            for (int kw = 0; kw < s.window; kw++) {
                const int iw = ow * s.stride - s.padding + kw;
                if (iw < 0 || iw >= s.in_width) continue;
                const int32_t index = (int32_t)(((size_t)ih * s.in_width + iw) * s.channels + c);
                const float value = act_load(xn[index]);
                if (best_index < 0 || value > best || value != value) {
                    best = value;
                    best_index = index;
                }
            }
        }
        y[o] = act_store<T>(best);
        argmax[o] = best_index;
    }
}

template <typename T>
__global__ void maxpool_backward_kernel(PoolShape s, const T *dy, const int32_t *argmax, T *dx) {
    const size_t n_in = (size_t)s.batch * s.in_height * s.in_width * s.channels;
    const size_t out_sample = (size_t)s.out_height * s.out_width * s.channels;
    const size_t in_sample = (size_t)s.in_height * s.in_width * s.channels;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_in;
         i += (size_t)blockDim.x * gridDim.x) {
        const int c = (int)(i % s.channels);
        const size_t pixel = i / s.channels;
        const int iw = (int)(pixel % s.in_width);
        const int ih = (int)(pixel / s.in_width % s.in_height);
        const int n = (int)(pixel / ((size_t)s.in_width * s.in_height));
        const int32_t own = (int32_t)(i - (size_t)n * in_sample);
        // Windows containing row ih: oh * stride - padding <= ih <= that + window - 1.
        int oh_first = ih + s.padding - s.window + 1;
        oh_first = oh_first <= 0 ? 0 : (oh_first + s.stride - 1) / s.stride;
        int ow_first = iw + s.padding - s.window + 1;
        ow_first = ow_first <= 0 ? 0 : (ow_first + s.stride - 1) / s.stride;
        const int oh_last = min((ih + s.padding) / s.stride, s.out_height - 1);
        const int ow_last = min((iw + s.padding) / s.stride, s.out_width - 1);
        float total = 0.0f;
        for (int oh = oh_first; oh <= oh_last; oh++)
            for (int ow = ow_first; ow <= ow_last; ow++) {
                const size_t o = n * out_sample + ((size_t)oh * s.out_width + ow) * s.channels + c;
                if (argmax[o] == own) total += act_load(dy[o]);
            }
        dx[i] = act_store<T>(total);
    }
}

// One thread per (sample, channel); pixels are C apart, so neighbouring
// threads read neighbouring addresses.
template <typename T>
__global__ void avgpool_forward_kernel(int batch, int pixels, int channels, const T *x, T *y) {
    const size_t n_out = (size_t)batch * channels;
    for (size_t o = blockIdx.x * (size_t)blockDim.x + threadIdx.x; o < n_out;
         o += (size_t)blockDim.x * gridDim.x) {
        const size_t n = o / channels, c = o % channels;
        double total = 0.0;
        for (int p = 0; p < pixels; p++) total += act_load(x[(n * pixels + p) * channels + c]);
        y[o] = act_store<T>((float)(total / pixels));
    }
}

template <typename T>
__global__ void avgpool_backward_kernel(int batch, int pixels, int channels, const T *dy, T *dx) {
    const size_t n_in = (size_t)batch * pixels * channels;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_in;
         i += (size_t)blockDim.x * gridDim.x) {
        const size_t c = i % channels, n = i / ((size_t)pixels * channels);
        dx[i] = act_store<T>(act_load(dy[n * channels + c]) / (float)pixels);
    }
}

}  // namespace

extern "C" {

void cuda_maxpool_forward_launch(cudaStream_t stream, ComputeDtype dtype, const PoolShape *shape,
                                 const void *x_any, void *y_any, int32_t *argmax) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *x = (const T *)x_any;
        T *y = (T *)y_any;
        const size_t n =
            (size_t)shape->batch * shape->out_height * shape->out_width * shape->channels;
        LAUNCH(maxpool_forward_kernel<T>, n, stream, *shape, x, y, argmax);
    });
}

void cuda_maxpool_backward_launch(cudaStream_t stream, ComputeDtype dtype, const PoolShape *shape,
                                  const void *dy_any, const int32_t *argmax, void *dx_any) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *dy = (const T *)dy_any;
        T *dx = (T *)dx_any;
        const size_t n =
            (size_t)shape->batch * shape->in_height * shape->in_width * shape->channels;
        LAUNCH(maxpool_backward_kernel<T>, n, stream, *shape, dy, argmax, dx);
    });
}

void cuda_avgpool_forward_launch(cudaStream_t stream, ComputeDtype dtype, int batch, int pixels,
                                 int channels, const void *x_any, void *y_any) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *x = (const T *)x_any;
        T *y = (T *)y_any;
        const size_t n = (size_t)batch * channels;
        LAUNCH(avgpool_forward_kernel<T>, n, stream, batch, pixels, channels, x, y);
    });
}

void cuda_avgpool_backward_launch(cudaStream_t stream, ComputeDtype dtype, int batch, int pixels,
                                  int channels, const void *dy_any, void *dx_any) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *dy = (const T *)dy_any;
        T *dx = (T *)dx_any;
        const size_t n = (size_t)batch * pixels * channels;
        LAUNCH(avgpool_backward_kernel<T>, n, stream, batch, pixels, channels, dy, dx);
    });
}

}  // extern "C"
