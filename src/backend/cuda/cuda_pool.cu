// Pooling on the GPU: max pooling (argmax kept for backward; ties keep the
// first element in window order, a NaN wins, as ref and PyTorch; V channels
// per thread) and global average pooling. The max-pool backward gathers
// instead of scattering: each input element sums the gradients of the
// windows whose argmax it is, in window order, so no atomics and the same
// sums as ref. Activations in the storage type T of the compute dtype
// (cuda_act.cuh), rounded once.
#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_grid.cuh"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_launch.cuh"

namespace {

// Each thread takes V consecutive channels of one pixel (cuda_act.cuh: 16
// bytes per load where the channels and pointers allow, else 1), its
// window walk and index arithmetic shared by the V channels: the stem's
// pool moves 0.8 GB of input a step at batch 512 in 16 bits.
template <typename T, int V>
__global__ void maxpool_forward_kernel(PoolShape s, const T *x, T *y, int32_t *argmax) {
    const int vectors = s.channels / V;
    const size_t n_out = (size_t)s.batch * s.out_height * s.out_width * vectors;
    const size_t in_sample = (size_t)s.in_height * s.in_width * s.channels;
    for (size_t o = blockIdx.x * (size_t)blockDim.x + threadIdx.x; o < n_out;
         o += (size_t)blockDim.x * gridDim.x) {
        const int c0 = (int)(o % vectors) * V;
        const size_t pixel = o / vectors;
        const int ow = (int)(pixel % s.out_width);
        const int oh = (int)(pixel / s.out_width % s.out_height);
        const int n = (int)(pixel / ((size_t)s.out_width * s.out_height));
        const T *xn = x + n * in_sample;
        float best[V];
        ActVector<int32_t, V> best_index;
        for (int v = 0; v < V; v++) {
            best[v] = -INFINITY;
            best_index.value[v] = -1;
        }
        for (int kh = 0; kh < s.window; kh++) {
            const int ih = oh * s.stride - s.padding + kh;
            if (ih < 0 || ih >= s.in_height) continue;
            for (int kw = 0; kw < s.window; kw++) {
                const int iw = ow * s.stride - s.padding + kw;
                if (iw < 0 || iw >= s.in_width) continue;
                const int32_t index = (int32_t)(((size_t)ih * s.in_width + iw) * s.channels + c0);
                float values[V];
                act_load_vector<T, V>(xn + index, values);
                for (int v = 0; v < V; v++)
                    if (best_index.value[v] < 0 || values[v] > best[v] || values[v] != values[v]) {
                        best[v] = values[v];
                        best_index.value[v] = index + v;
                    }
            }
        }
        act_store_vector<T, V>(y + pixel * s.channels + c0, best);
        store_packed<int32_t, V>(argmax + pixel * s.channels + c0, best_index);
    }
}

template <typename T, int V>
__global__ void maxpool_backward_kernel(PoolShape s, const T *dy, const int32_t *argmax, T *dx) {
    const int vectors = s.channels / V;
    const size_t n_in = (size_t)s.batch * s.in_height * s.in_width * vectors;
    const size_t out_sample = (size_t)s.out_height * s.out_width * s.channels;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_in;
         i += (size_t)blockDim.x * gridDim.x) {
        const int c0 = (int)(i % vectors) * V;
        const size_t pixel = i / vectors;
        const int iw = (int)(pixel % s.in_width);
        const int ih = (int)(pixel / s.in_width % s.in_height);
        const int n = (int)(pixel / ((size_t)s.in_width * s.in_height));
        const int32_t own = (int32_t)(((size_t)ih * s.in_width + iw) * s.channels + c0);
        // Windows containing row ih: oh * stride - padding <= ih <= that + window - 1.
        int oh_first = ih + s.padding - s.window + 1;
        oh_first = oh_first <= 0 ? 0 : (oh_first + s.stride - 1) / s.stride;
        int ow_first = iw + s.padding - s.window + 1;
        ow_first = ow_first <= 0 ? 0 : (ow_first + s.stride - 1) / s.stride;
        const int oh_last = min((ih + s.padding) / s.stride, s.out_height - 1);
        const int ow_last = min((iw + s.padding) / s.stride, s.out_width - 1);
        float total[V];
        for (int v = 0; v < V; v++) total[v] = 0.0f;
        for (int oh = oh_first; oh <= oh_last; oh++)
            for (int ow = ow_first; ow <= ow_last; ow++) {
                const size_t o = n * out_sample + ((size_t)oh * s.out_width + ow) * s.channels + c0;
                const ActVector<int32_t, V> winners = load_packed<int32_t, V>(argmax + o);
                float gradients[V];
                act_load_vector<T, V>(dy + o, gradients);
                for (int v = 0; v < V; v++)
                    if (winners.value[v] == own + v) total[v] += gradients[v];
            }
        act_store_vector<T, V>(dx + pixel * s.channels + c0, total);
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

// launch(Width<V>{}, count) for a max-pool kernel over `pixels` pixels of
// `channels`, V channels per thread: the widest vector where the channels,
// the activations (as act_vector_fits) and the int32 indices (aligned to as
// many) allow it, else 1; count = pixels x channels / V threads.
template <typename T, typename Launch>
void over_pool_vectors(size_t pixels, int channels, std::initializer_list<const void *> acts,
                       const int32_t *argmax, Launch &&launch) {
    const int width = act_vector_width<T>();
    const bool fits = act_vector_fits<T>((size_t)channels, width, acts) &&
                      (uintptr_t)argmax % (width * sizeof(int32_t)) == 0;
    act_width_dispatch<T>(fits, [&](auto vector) {
        launch(vector, pixels * (size_t)(channels / decltype(vector)::value));
    });
}

}  // namespace

extern "C" {

void cuda_maxpool_forward_launch(cudaStream_t stream, ComputeDtype dtype, const PoolShape *shape,
                                 const void *x_any, void *y_any, int32_t *argmax) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *x = (const T *)x_any;
        T *y = (T *)y_any;
        const size_t pixels = (size_t)shape->batch * shape->out_height * shape->out_width;
        over_pool_vectors<T>(pixels, shape->channels, {x, y}, argmax, [&](auto width, size_t n) {
            auto kernel = maxpool_forward_kernel<T, decltype(width)::value>;
            LAUNCH(kernel, n, stream, *shape, x, y, argmax);
        });
    });
}

void cuda_maxpool_backward_launch(cudaStream_t stream, ComputeDtype dtype, const PoolShape *shape,
                                  const void *dy_any, const int32_t *argmax, void *dx_any) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *dy = (const T *)dy_any;
        T *dx = (T *)dx_any;
        const size_t pixels = (size_t)shape->batch * shape->in_height * shape->in_width;
        over_pool_vectors<T>(pixels, shape->channels, {dy, dx}, argmax, [&](auto width, size_t n) {
            auto kernel = maxpool_backward_kernel<T, decltype(width)::value>;
            LAUNCH(kernel, n, stream, *shape, dy, argmax, dx);
        });
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
