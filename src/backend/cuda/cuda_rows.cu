// Row-wise ops of the cuda backend for heads and losses: L2 normalisation
// and softmax / log-softmax with their gradients, one block per row, row
// sums in double (as ref), NaN kept (backend.h); combine_rows (a sparse
// matrix times rows, DINOv31's ROI-align), one thread per output row and
// channel vector, no atomics; and ShuffleNetV2's channel_shuffle, one
// thread per output element.
#include <math.h>

#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_grid.cuh"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_reduce.cuh"

namespace {

__global__ void l2_forward_kernel(int dim, const float *x, float eps, float *y, float *norm) {
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    double squares = 0.0;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) squares += (double)xr[d] * xr[d];
    const double length = sqrt(block_sum(squares));
    const double divisor = length < eps ? (double)eps : length;  // NaN stays NaN
    for (int d = threadIdx.x; d < dim; d += blockDim.x) yr[d] = (float)(xr[d] / divisor);
    if (threadIdx.x == 0) norm[blockIdx.x] = (float)length;
}

// Where the norm was clamped, y = x / eps is linear: dx = dy / eps.
__global__ void l2_backward_kernel(int dim, const float *y, const float *norm, const float *dy,
                                   float eps, float *dx) {
    const size_t offset = (size_t)blockIdx.x * dim;
    const float *yr = y + offset, *dyr = dy + offset;
    float *dxr = dx + offset;
    const float row_norm = norm[blockIdx.x];
    if (row_norm < eps) {
        for (int d = threadIdx.x; d < dim; d += blockDim.x) dxr[d] = (float)((double)dyr[d] / eps);
        return;
    }
    double dot = 0.0;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) dot += (double)yr[d] * dyr[d];
    dot = block_sum(dot);
    for (int d = threadIdx.x; d < dim; d += blockDim.x)
        dxr[d] = (float)((dyr[d] - yr[d] * dot) / (double)row_norm);
}

// softmax (log = 0) or log_softmax (log = 1) of scale * x, shifted by the
// row maximum.
// scale in device memory: DINO's and DINOv2's teacher temperature changes
// every step (cuda_step_params.c).
__global__ void softmax_forward_kernel(int dim, const float *x, const float *scale_at, int log,
                                       float *y) {
    const float scale = *scale_at;
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    double max = -INFINITY;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) max = nan_max(max, (double)scale * xr[d]);
    max = block_max(max);
    double total = 0.0;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) total += exp((double)scale * xr[d] - max);
    const double log_sum = ::log(block_sum(total));
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        const double shifted = (double)scale * xr[d] - max - log_sum;
        yr[d] = (float)(log ? shifted : exp(shifted));
    }
}

// softmax: dx = scale y (dy - <dy, y>); log_softmax: dx = scale (dy - exp(y) sum dy).
__global__ void softmax_backward_kernel(int dim, const float *y, const float *dy, float scale,
                                        int log, float *dx) {
    const size_t offset = (size_t)blockIdx.x * dim;
    const float *yr = y + offset, *dyr = dy + offset;
    float *dxr = dx + offset;
    double total = 0.0;
    for (int d = threadIdx.x; d < dim; d += blockDim.x)
        total += log ? (double)dyr[d] : (double)dyr[d] * yr[d];
    total = block_sum(total);
    for (int d = threadIdx.x; d < dim; d += blockDim.x)
        dxr[d] = log ? (float)((double)scale * (dyr[d] - exp((double)yr[d]) * total))
                     : (float)((double)scale * yr[d] * (dyr[d] - total));
}

// y[r] = the sum over t of weight[t] x[index[t]]: each thread owns V
// channels of its rows (ChannelGrid) and adds the entries of a row in t
// order in fp32, as ref does, so the bits match ref's in every dtype. The
// row's entry range is read here: the grid depends on rows only.
template <typename T, int V>
__global__ void combine_rows_kernel(size_t rows, int channels, int vectors,
                                    const int32_t *row_start, const int32_t *index,
                                    const float *weight, const T *x, T *y) {
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= vectors) return;
    const size_t c = (size_t)v * V;
    CHANNEL_ROWS(r, rows) {
        float total[V];
        UNROLL_LOOP
        for (int k = 0; k < V; k++) total[k] = 0.0f;
        const int32_t end = row_start[r + 1];
        for (int32_t t = row_start[r]; t < end; t++) {
            float values[V];
            act_load_vector<T, V>(x + (size_t)index[t] * channels + c, values);
            const float w = weight[t];
            UNROLL_LOOP
            for (int k = 0; k < V; k++) total[k] += w * values[k];
        }
        act_store_vector<T, V>(y + r * channels + c, total);
    }
}

// y[r, k groups + g] = x[r, g per_group + k] (backend.h): each thread
// writes one element of y (consecutive threads, consecutive addresses) and
// copies its value as stored, so every bit stays (NaN payloads too).
template <typename T>
__global__ void channel_shuffle_kernel(size_t n, int channels, int groups, const T *x, T *y) {
    const int per_group = channels / groups;
    GRID_STRIDE(i, n) {
        const size_t row = i / channels;
        const int c = (int)(i - row * channels);
        const int k = c / groups, g = c - k * groups;
        y[i] = x[row * channels + (size_t)g * per_group + k];
    }
}

}  // namespace

extern "C" {

void cuda_combine_rows_launch(cudaStream_t stream, ComputeDtype dtype, int rows, int channels,
                              const int32_t *row_start, const int32_t *index,
                              const float *weight, const void *x_any, void *y_any) {
    if (rows == 0 || channels == 0) return;
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const bool fits = act_vector_fits<T>(channels, act_vector_width<T>(), {x_any, y_any});
        act_width_dispatch<T>(fits, [&](auto width) {
            constexpr int V = decltype(width)::value;
            const ChannelGrid grid = channel_grid(channels, V);
            if (cuda_queue_point())
                combine_rows_kernel<T, V>
                    <<<channel_row_blocks(grid, rows), grid.block, 0, stream>>>(
                        rows, channels, grid.vectors, row_start, index, weight,
                        (const T *)x_any, (T *)y_any);
            CUDA_CHECK_LAUNCH();
        });
    });
}

void cuda_channel_shuffle_launch(cudaStream_t stream, ComputeDtype dtype, size_t rows,
                                 int channels, int groups, const void *x_any, void *y_any) {
    const size_t n = rows * (size_t)channels;
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        LAUNCH(channel_shuffle_kernel<T>, n, stream, n, channels, groups, (const T *)x_any,
               (T *)y_any);
    });
}

void cuda_l2_normalize_forward_launch(cudaStream_t stream, int rows, int dim, const float *x,
                                      float eps, float *y, float *norm) {
    if (rows == 0) return;
    if (cuda_queue_point()) l2_forward_kernel<<<rows, kThreads, 0, stream>>>(dim, x, eps, y, norm);
    CUDA_CHECK_LAUNCH();
}

void cuda_l2_normalize_backward_launch(cudaStream_t stream, int rows, int dim, const float *y,
                                       const float *norm, const float *dy, float eps, float *dx) {
    if (rows == 0) return;
    if (cuda_queue_point())
        l2_backward_kernel<<<rows, kThreads, 0, stream>>>(dim, y, norm, dy, eps, dx);
    CUDA_CHECK_LAUNCH();
}

void cuda_softmax_forward_launch(cudaStream_t stream, int rows, int dim, const float *x,
                                 const float *scale, int log, float *y) {
    if (rows == 0) return;
    if (cuda_queue_point())
        softmax_forward_kernel<<<rows, kThreads, 0, stream>>>(dim, x, scale, log, y);
    CUDA_CHECK_LAUNCH();
}

void cuda_softmax_backward_launch(cudaStream_t stream, int rows, int dim, const float *y,
                                  const float *dy, float scale, int log, float *dx) {
    if (rows == 0) return;
    if (cuda_queue_point())
        softmax_backward_kernel<<<rows, kThreads, 0, stream>>>(dim, y, dy, scale, log, dx);
    CUDA_CHECK_LAUNCH();
}

}  // extern "C"
