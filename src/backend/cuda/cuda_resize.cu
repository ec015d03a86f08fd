// Distillation ops on the GPU: the bilinear feature-map resize and mixup.
// The resize taps come from resize_taps.h, the same fp32 operations as the
// C backends (built without FMA contraction), so the forward equals ref's.
// The backward gathers instead of scattering: each input element walks the
// few output pixels whose taps can reach it (a range from the inverse of
// the source-index map, one wider on each side for rounding) and sums
// their weighted gradients in output order: no atomics, the same bits on
// every run. Activations in the storage type T of the compute dtype
// (cuda_act.cuh), each output rounded once.
#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/resize_taps.h"

namespace {

struct ResizeShape {
    int batch, in_height, in_width, channels, out_height, out_width;
};

template <typename T>
__global__ void resize_forward_kernel(ResizeShape s, const T *x, T *y) {
    const size_t n_out = (size_t)s.batch * s.out_height * s.out_width * s.channels;
    const size_t row = (size_t)s.in_width * s.channels;
    for (size_t o = blockIdx.x * (size_t)blockDim.x + threadIdx.x; o < n_out;
         o += (size_t)blockDim.x * gridDim.x) {
        const int c = (int)(o % s.channels);
        const size_t pixel = o / s.channels;
        const int j = (int)(pixel % s.out_width);
        const int i = (int)(pixel / s.out_width % s.out_height);
        const size_t b = pixel / ((size_t)s.out_width * s.out_height);
        const ResizeTap ty = resize_tap(i, s.in_height, s.out_height);
        const ResizeTap tx = resize_tap(j, s.in_width, s.out_width);
        const T *xb = x + b * s.in_height * row + c;
        y[o] =
            act_store<T>(resize_mix(ty, tx, act_load(xb[ty.i0 * row + (size_t)tx.i0 * s.channels]),
                                    act_load(xb[ty.i0 * row + (size_t)tx.i1 * s.channels]),
                                    act_load(xb[ty.i1 * row + (size_t)tx.i0 * s.channels]),
                                    act_load(xb[ty.i1 * row + (size_t)tx.i1 * s.channels])));
    }
}

template <typename T>
__global__ void resize_backward_kernel(ResizeShape s, const T *dy, T *dx) {
    const size_t n_in = (size_t)s.batch * s.in_height * s.in_width * s.channels;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n_in;
         e += (size_t)blockDim.x * gridDim.x) {
        const int c = (int)(e % s.channels);
        const size_t pixel = e / s.channels;
        const int ix = (int)(pixel % s.in_width);
        const int iy = (int)(pixel / s.in_width % s.in_height);
        const size_t b = pixel / ((size_t)s.in_width * s.in_height);
        int i_first, i_last, j_first, j_last;
        resize_output_range(iy, s.in_height, s.out_height, &i_first, &i_last);
        resize_output_range(ix, s.in_width, s.out_width, &j_first, &j_last);
        const T *g = dy + b * s.out_height * s.out_width * s.channels + c;
        float total = 0.0f;
        for (int i = i_first; i <= i_last; i++) {
            const float wy = resize_tap_weight(resize_tap(i, s.in_height, s.out_height), iy);
            if (wy == 0.0f) continue;
            for (int j = j_first; j <= j_last; j++) {
                const float wx = resize_tap_weight(resize_tap(j, s.in_width, s.out_width), ix);
                if (wx == 0.0f) continue;
                total += (wy * wx) * act_load(g[((size_t)i * s.out_width + j) * s.channels]);
            }
        }
        dx[e] = act_store<T>(total);
    }
}

template <typename T>
__global__ void mixup_kernel(int batch, size_t sample, const T *x, const int32_t *permutation,
                             const float *lambda_at, T *y) {
    const size_t total = (size_t)batch * sample;
    const float lambda = *lambda_at, other = 1.0f - lambda;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)blockDim.x * gridDim.x) {
        const size_t b = i / sample, k = i % sample;
        y[i] = act_store<T>(lambda * act_load(x[i]) +
                            other * act_load(x[(size_t)permutation[b] * sample + k]));
    }
}

}  // namespace

extern "C" {

void cuda_resize_bilinear_forward_launch(cudaStream_t stream, ComputeDtype dtype, int batch,
                                         int in_height, int in_width, int channels,
                                         const void *x_any, int out_height, int out_width,
                                         void *y_any) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *x = (const T *)x_any;
        T *y = (T *)y_any;
        const ResizeShape s = {batch, in_height, in_width, channels, out_height, out_width};
        const size_t n = (size_t)batch * out_height * out_width * channels;
        LAUNCH(resize_forward_kernel<T>, n, stream, s, x, y);
    });
}

void cuda_resize_bilinear_backward_launch(cudaStream_t stream, ComputeDtype dtype, int batch,
                                          int in_height, int in_width, int channels,
                                          const void *dy_any, int out_height, int out_width,
                                          void *dx_any) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *dy = (const T *)dy_any;
        T *dx = (T *)dx_any;
        const ResizeShape s = {batch, in_height, in_width, channels, out_height, out_width};
        const size_t n = (size_t)batch * in_height * in_width * channels;
        LAUNCH(resize_backward_kernel<T>, n, stream, s, dy, dx);
    });
}

void cuda_mixup_launch(cudaStream_t stream, ComputeDtype dtype, int batch, size_t sample,
                       const void *x_any, const int32_t *permutation, const float *lambda,
                       void *y_any) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *x = (const T *)x_any;
        T *y = (T *)y_any;
        const size_t n = (size_t)batch * sample;
        LAUNCH(mixup_kernel<T>, n, stream, batch, sample, x, permutation, lambda, y);
    });
}

}  // extern "C"
