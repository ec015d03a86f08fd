// The cuda backend's DINOv2 ops (backend.h): row scaling, row gather and
// scatter for the masked patch tokens, the Sinkhorn-Knopp steps and
// KoLeo's nearest-neighbour distances, with their Backend entry points
// (the op table in cuda_backend.c points here). Deterministic: every sum
// runs in a fixed order (one thread per column, or one block per row with
// block_sum), the scatter writes distinct rows, no atomics. Written and
// compiled without a GPU at hand: not yet run on one (make test-gpu). The
// ops on activations (mask tokens, gather, scatter) are templates on the
// storage type of the compute dtype (cuda_act.cuh).
#include <math.h>

#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_grid.cuh"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_reduce.cuh"

namespace {

__global__ void scale_rows_kernel(size_t n, int channels, const float *x, const float *scale,
                                  float *y) {
    GRID_STRIDE(i, n) y[i] = x[i] * scale[i / channels];
}

template <typename T>
__global__ void gather_rows_kernel(size_t n, int channels, const int32_t *index, const T *x,
                                   T *y) {
    GRID_STRIDE(i, n) y[i] = x[(size_t)index[i / channels] * channels + i % channels];
}

// Distinct indices: each element of dx has at most one writer.
template <typename T>
__global__ void scatter_add_rows_kernel(size_t n, int channels, const int32_t *index,
                                        const T *dy, T *dx) {
    GRID_STRIDE(i, n) {
        T *target = dx + (size_t)index[i / channels] * channels + i % channels;
        *target = act_store<T>(act_load(*target) + act_load(dy[i]));
    }
}

// One thread per column, the rows in order (a warp reads one row's
// neighbouring columns: coalesced).
__global__ void column_max_kernel(size_t rows, int channels, const float *x, float *max) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= channels) return;
    float m = -INFINITY;
    for (size_t r = 0; r < rows; r++) m = nan_max(m, x[r * channels + k]);
    max[k] = m;
}

// scale = 1 / the teacher temperature, per step: in device memory.
__global__ void sinkhorn_exp_kernel(size_t n, int channels, const float *x, const float *scale_at,
                                    const float *max, float *q) {
    const float scale = *scale_at;
    GRID_STRIDE(i, n) q[i] = (float)exp((double)scale * x[i] - (double)scale * max[i % channels]);
}

// One block per row: the column division, the row sum (block_sum, fixed
// order), the row division.
__global__ void sinkhorn_normalize_kernel(int channels, const float *column_sum, float *q) {
    float *row = q + (size_t)blockIdx.x * channels;
    double sum = 0.0;
    for (int k = threadIdx.x; k < channels; k += blockDim.x) {
        const float v = column_sum[k] > 0.0f ? (float)((double)row[k] / column_sum[k]) : 0.0f;
        row[k] = v;
        sum += v;
    }
    sum = block_sum(sum);
    for (int k = threadIdx.x; k < channels; k += blockDim.x)
        row[k] = sum > 0.0 ? (float)(row[k] / sum) : 0.0f;
}

// One block per row i: the dots with every other row in row order, the
// first maximum kept (by thread 0, then shared), then the distance.
__global__ void koleo_forward_kernel(int rows, int dim, const float *y, float eps,
                                     int32_t *neighbor, float *distance, float *log_distance) {
    __shared__ int best_shared;
    const int i = blockIdx.x;
    const float *yi = y + (size_t)i * dim;
    int best = i;
    double best_dot = -INFINITY;
    for (int j = 0; j < rows; j++) {
        if (j == i) continue;
        const float *yj = y + (size_t)j * dim;
        double dot = 0.0;
        for (int d = threadIdx.x; d < dim; d += blockDim.x) dot += (double)yi[d] * yj[d];
        dot = block_sum(dot);
        if (dot > best_dot) best_dot = dot, best = j;
    }
    if (threadIdx.x == 0) best_shared = best;
    __syncthreads();
    const float *yn = y + (size_t)best_shared * dim;
    double squares = 0.0;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        const double diff = (double)yi[d] - yn[d] + eps;
        squares += diff * diff;
    }
    const double length = sqrt(block_sum(squares));
    if (threadIdx.x == 0) {
        neighbor[i] = best_shared;
        distance[i] = (float)length;
        log_distance[i] = (float)log(length + eps);
    }
}

// One block per row k: its own term and those of the rows whose neighbour
// it is, in row order.
__global__ void koleo_backward_kernel(int rows, int dim, const float *y, const int32_t *neighbor,
                                      const float *distance, float eps, float dlog, float *dy) {
    const int k = blockIdx.x;
    float *dk = dy + (size_t)k * dim;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        float total = 0.0f;
        for (int i = 0; i < rows; i++) {
            const int own = i == k, theirs = neighbor[i] == k;
            const double length = distance[i];
            if ((!own && !theirs) || length == 0.0) continue;
            const float g = (float)((own - theirs) * (double)dlog / ((length + eps) * length));
            total += g * (y[(size_t)i * dim + d] - y[(size_t)neighbor[i] * dim + d] + eps);
        }
        dk[d] = total;
    }
}

// y = token on the masked rows, x elsewhere; one thread per element.
template <typename T>
__global__ void mask_tokens_forward_kernel(size_t n, int channels, const T *x, const float *mask,
                                           const float *token, T *y) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const size_t row = i / channels;
    y[i] = mask[row] != 0.0f ? act_store<T>(token[i % channels]) : x[i];
}

// dtoken[c] += the sum over the masked rows of dy[., c], rows in order (one
// thread per column: deterministic, no atomics).
template <typename T>
__global__ void mask_tokens_token_grad_kernel(size_t rows, int channels, const float *mask,
                                              const T *dy, float *dtoken) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    double total = 0.0;
    for (size_t r = 0; r < rows; r++)
        if (mask[r] != 0.0f) total += act_load(dy[r * channels + c]);
    dtoken[c] += (float)total;
}

// dx = dy with the masked rows 0 (dx may alias dy).
template <typename T>
__global__ void mask_tokens_backward_kernel(size_t n, int channels, const float *mask,
                                            const T *dy, T *dx) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    dx[i] = mask[i / channels] != 0.0f ? act_store<T>(0.0f) : dy[i];
}

cudaStream_t stream_of(Backend *backend) { return cuda_state(backend)->stream; }

}  // namespace

extern "C" {

void cuda_mask_tokens_forward(Backend *backend, size_t rows, int channels, const Act *x,
                              const float *mask, const float *token, Act *y) {
    const size_t n = rows * (size_t)channels;
    if (n == 0) return;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        if (cuda_queue_point())
            mask_tokens_forward_kernel<ACT_T><<<blocks_for(n), kThreads, 0, stream_of(backend)>>>(
                n, channels, (const ACT_T *)x, mask, token, (ACT_T *)y);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_mask_tokens_backward(Backend *backend, size_t rows, int channels, const float *mask,
                               const Act *dy, Act *dx, float *dtoken) {
    const size_t n = rows * (size_t)channels;
    if (n == 0) return;
    cudaStream_t stream = stream_of(backend);
    const unsigned int column_blocks = (unsigned int)((channels + kThreads - 1) / kThreads);
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        if (cuda_queue_point())
            mask_tokens_token_grad_kernel<ACT_T><<<column_blocks, kThreads, 0, stream>>>(
                rows, channels, mask, (const ACT_T *)dy, dtoken);
        CUDA_CHECK_LAUNCH();
        if (cuda_queue_point())
            mask_tokens_backward_kernel<ACT_T><<<blocks_for(n), kThreads, 0, stream>>>(
                n, channels, mask, (const ACT_T *)dy, (ACT_T *)dx);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_scale_rows(Backend *backend, size_t rows, int channels, const float *x,
                     const float *scale, float *y) {
    const size_t n = rows * (size_t)channels;
    if (n == 0) return;
    if (cuda_queue_point())
        scale_rows_kernel<<<blocks_for(n), kThreads, 0, stream_of(backend)>>>(n, channels, x, scale,
                                                                              y);
    CUDA_CHECK_LAUNCH();
}

void cuda_gather_rows(Backend *backend, int count, int channels, const int32_t *index,
                      const Act *x, Act *y) {
    const size_t n = (size_t)count * channels;
    if (n == 0) return;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        if (cuda_queue_point())
            gather_rows_kernel<ACT_T><<<blocks_for(n), kThreads, 0, stream_of(backend)>>>(
                n, channels, index, (const ACT_T *)x, (ACT_T *)y);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_scatter_add_rows(Backend *backend, int count, int channels, const int32_t *index,
                           const Act *dy, Act *dx) {
    const size_t n = (size_t)count * channels;
    if (n == 0) return;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        if (cuda_queue_point())
            scatter_add_rows_kernel<ACT_T><<<blocks_for(n), kThreads, 0, stream_of(backend)>>>(
                n, channels, index, (const ACT_T *)dy, (ACT_T *)dx);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_column_max(Backend *backend, size_t rows, int channels, const float *x, float *max) {
    if (channels == 0) return;
    if (cuda_queue_point())
        column_max_kernel<<<(unsigned int)((channels + kThreads - 1) / kThreads), kThreads, 0,
                            stream_of(backend)>>>(rows, channels, x, max);
    CUDA_CHECK_LAUNCH();
}

void cuda_sinkhorn_exp(Backend *backend, int rows, int channels, const float *x, float scale,
                       const float *max, float *q) {
    const size_t n = (size_t)rows * channels;
    if (n == 0) return;
    const float *scale_at = cuda_step_params_put(cuda_state(backend), &scale, 1);
    if (cuda_queue_point())
        sinkhorn_exp_kernel<<<blocks_for(n), kThreads, 0, stream_of(backend)>>>(n, channels, x,
                                                                                scale_at, max, q);
    CUDA_CHECK_LAUNCH();
}

void cuda_sinkhorn_normalize(Backend *backend, int rows, int channels, const float *column_sum,
                             float *q) {
    if (rows == 0 || channels == 0) return;
    if (cuda_queue_point())
        sinkhorn_normalize_kernel<<<rows, kThreads, 0, stream_of(backend)>>>(channels, column_sum,
                                                                             q);
    CUDA_CHECK_LAUNCH();
}

void cuda_koleo_forward(Backend *backend, int rows, int dim, const float *y, float eps,
                        int32_t *neighbor, float *distance, float *log_distance) {
    if (rows == 0) return;
    if (cuda_queue_point())
        koleo_forward_kernel<<<rows, kThreads, 0, stream_of(backend)>>>(rows, dim, y, eps, neighbor,
                                                                        distance, log_distance);
    CUDA_CHECK_LAUNCH();
}

void cuda_koleo_backward(Backend *backend, int rows, int dim, const float *y,
                         const int32_t *neighbor, const float *distance, float eps, float dlog,
                         float *dy) {
    if (rows == 0) return;
    if (cuda_queue_point())
        koleo_backward_kernel<<<rows, kThreads, 0, stream_of(backend)>>>(rows, dim, y, neighbor,
                                                                         distance, eps, dlog, dy);
    CUDA_CHECK_LAUNCH();
}

}  // extern "C"
