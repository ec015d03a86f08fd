// Batch norm over the rows of (rows, C) NHWC matrices on the GPU, training
// (batch statistics, running-statistics update), evaluation and backward,
// each optionally fused with the ReLU and residual add after it: the same
// formulas as the ref backend (backend.h). Statistics take two column
// passes (mean, then the sum of squared deviations) with double partials in
// the scratch, as ref's two-pass double loops; the elementwise pass is fp32.
//
// Scratch layout (doubles): [0, B*C) and [B*C, 2*B*C) column partials of
// the B row blocks, then C per-channel results (the mean, or sum dz) and C
// more (1/std, or sum dz * xhat).
//
// The split ops of synchronised BatchNorm (backend.h: centered squares,
// finish statistics, apply, backward reduce and apply) reuse the same
// column passes with the statistics given as floats, widened to double
// where ref widens them. Activations (x, y, dy, dx, residual, relu_out,
// dz_out) are in the storage type T of the compute dtype (cuda_act.cuh),
// each output rounded once, after the residual and ReLU.
#include <math.h>

#include "backend/cuda/cuda_act.cuh"

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_reduce.cuh"

namespace {

constexpr int kThreads = 256;

// The kernels that need per-channel values on every element walk (rows,
// channels) as a block of 32 channels x 8 row lanes, grid.y row blocks: each
// thread keeps its channel's values in registers and has no division per
// element (a 64-bit `i % channels` costs dozens of instructions).
#define CHANNEL_ROWS(r, rows)                                                    \
    for (size_t r = blockIdx.y * (size_t)blockDim.y + threadIdx.y; r < (rows); \
         r += (size_t)blockDim.y * gridDim.y)
const dim3 kChannelRowsBlock(32, 8);

// The grid of a CHANNEL_ROWS kernel: at least 8 rows per thread.
dim3 channel_rows_grid(size_t rows, int channels) {
    const size_t wanted = (rows + 63) / 64;
    return dim3((unsigned)((channels + 31) / 32),
                (unsigned)(wanted < 1 ? 1 : wanted < 65535 ? wanted : 65535));
}

enum class Sum { kPlain, kDeviation, kGradient };

// Column partials of one per-element quantity; block (32 columns) x (8 row
// lanes), grid.y row blocks. kPlain: x; kDeviation: (x - mean)^2;
// kGradient: both dz and dz * xhat (into partials and partials2), dz = dy
// masked by the ReLU output when there is one.
template <Sum kind, typename T>
__global__ void partials_kernel(size_t rows, int channels, const T *x, const T *relu_out,
                                const T *dy, const double *mean, const float *save_mean,
                                const float *save_inv_std, double *partials, double *partials2) {
    const int c = blockIdx.x * 32 + threadIdx.x;
    double total = 0.0, total2 = 0.0;
    if (c < channels) {
        for (size_t r = blockIdx.y * (size_t)blockDim.y + threadIdx.y; r < rows;
             r += (size_t)blockDim.y * gridDim.y) {
            const size_t i = r * channels + c;
            const float xi = act_load(x[i]);
            if (kind == Sum::kPlain) {
                total += xi;
            } else if (kind == Sum::kDeviation) {
                const double d = xi - mean[c];
                total += d * d;
            } else {
                const double dz = !relu_out || !(act_load(relu_out[i]) <= 0.0f) ? act_load(dy[i])
                                                                                 : 0.0;
                total += dz;
                total2 += dz * (xi - (double)save_mean[c]) * save_inv_std[c];
            }
        }
    }
    __shared__ double lanes[8][33], lanes2[8][33];
    lanes[threadIdx.y][threadIdx.x] = total;
    lanes2[threadIdx.y][threadIdx.x] = total2;
    __syncthreads();
    if (threadIdx.y == 0 && c < channels) {
        for (int k = 1; k < (int)blockDim.y; k++) {
            total += lanes[k][threadIdx.x];
            total2 += lanes2[k][threadIdx.x];
        }
        partials[(size_t)blockIdx.y * channels + c] = total;
        if (kind == Sum::kGradient) partials2[(size_t)blockIdx.y * channels + c] = total2;
    }
}

__device__ double combine(const double *partials, int row_blocks, int channels, int c) {
    double total = 0.0;
    for (int b = 0; b < row_blocks; b++) total += partials[(size_t)b * channels + c];
    return total;
}

__global__ void mean_kernel(size_t rows, int channels, int row_blocks, const double *partials,
                            double *mean) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < channels) mean[c] = combine(partials, row_blocks, channels, c) / (double)rows;
}

// Saves mean and 1/std (also 1/std in double, for the forward's own
// normalisation), updates the running statistics (unbiased variance; biased
// with one row, as ref).
__global__ void statistics_kernel(size_t rows, int channels, int row_blocks,
                                  const double *partials, const double *mean, float momentum,
                                  float eps, double *inv_std, float *save_mean,
                                  float *save_inv_std, float *running_mean, float *running_var) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    const double variance = combine(partials, row_blocks, channels, c) / (double)rows;
    inv_std[c] = 1.0 / sqrt(variance + eps);
    save_mean[c] = (float)mean[c];
    save_inv_std[c] = (float)inv_std[c];
    const double unbiased = rows > 1 ? variance * (double)rows / (double)(rows - 1) : variance;
    running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean[c]);
    running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
}

// y = gamma (x - mean) inv_std + beta (+ residual) (then ReLU), with the
// batch statistics in double (training: batch_mean, batch_inv_std) or the
// running ones (evaluation), as ref computes them.
template <typename T>
__global__ void apply_kernel(size_t rows, int channels, const T *x, const T *residual,
                             int relu, const float *gamma, const float *beta,
                             const double *batch_mean, const double *batch_inv_std,
                             const float *running_mean, const float *running_var, float eps,
                             T *y) {
    const int c = blockIdx.x * 32 + threadIdx.x;
    if (c >= channels) return;
    const double mean = batch_mean ? batch_mean[c] : (double)running_mean[c];
    const double scale =
        batch_inv_std ? batch_inv_std[c] : 1.0 / sqrt((double)running_var[c] + eps);
    const float weight = gamma[c], shift = beta[c];
    CHANNEL_ROWS(r, rows) {
        const size_t i = r * channels + c;
        float value = (float)((act_load(x[i]) - mean) * scale * weight + shift);
        if (residual) value += act_load(residual[i]);
        if (relu) value = value <= 0.0f ? 0.0f : value;  // NaN stays NaN
        y[i] = act_store<T>(value);
    }
}

__global__ void gradient_sums_kernel(int channels, int row_blocks, const double *partials,
                                     const double *partials2, double *sums, float *dgamma,
                                     float *dbeta) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    const double sum_dz = combine(partials, row_blocks, channels, c);
    const double sum_dz_xhat = combine(partials2, row_blocks, channels, c);
    sums[c] = sum_dz;
    sums[channels + c] = sum_dz_xhat;
    dgamma[c] += (float)sum_dz_xhat;
    dbeta[c] += (float)sum_dz;
}

// dx = gamma inv_std / R (R dz - sum dz - xhat sum dz xhat); dresidual = dz
// (written after dy is read: dresidual may alias dy).
template <typename T>
__global__ void gradient_apply_kernel(size_t rows, int channels, const T *x, const T *relu_out,
                                      const T *dy, const float *gamma, const float *save_mean,
                                      const float *save_inv_std, const double *sums, T *dx,
                                      T *dresidual) {
    const int c = blockIdx.x * 32 + threadIdx.x;
    if (c >= channels) return;
    const double inv_std = save_inv_std[c], mean = save_mean[c];
    const double scale = gamma[c] * inv_std / (double)rows;
    const double sum_dz = sums[c], sum_dz_xhat = sums[channels + c];
    CHANNEL_ROWS(r, rows) {
        const size_t i = r * channels + c;
        const double dz = !relu_out || !(act_load(relu_out[i]) <= 0.0f) ? act_load(dy[i]) : 0.0;
        const double xhat = (act_load(x[i]) - mean) * inv_std;
        dx[i] = act_store<T>((float)(scale * ((double)rows * dz - sum_dz - xhat * sum_dz_xhat)));
        if (dresidual) dresidual[i] = act_store<T>((float)dz);
    }
}

// Widens n floats to doubles (the given mean and 1/std of the split ops).
__global__ void widen_kernel(int n, const float *from, double *to) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) to[i] = from[i];
}

// squares (C) = the combined partials, as float (ref: the double sum rounded once).
__global__ void combine_to_float_kernel(int channels, int row_blocks, const double *partials,
                                        float *out) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < channels) out[c] = (float)combine(partials, row_blocks, channels, c);
}

// From the all-reduced mean and squares of total_rows rows: 1/std in place
// of the squares, and the running statistics (unbiased; biased for one row).
__global__ void finish_statistics_kernel(int channels, size_t total_rows, float momentum,
                                         float eps, const float *mean, float *squares_to_inv_std,
                                         float *running_mean, float *running_var) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    const double squares = squares_to_inv_std[c];
    const double variance = squares / (double)total_rows;
    const double unbiased = total_rows > 1 ? squares / (double)(total_rows - 1) : variance;
    squares_to_inv_std[c] = (float)(1.0 / sqrt(variance + eps));
    running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean[c]);
    running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
}

// This rank's gradient sums (2, C) as floats, then dbeta, dgamma += them.
__global__ void rank_gradient_sums_kernel(int channels, int row_blocks, const double *partials,
                                          const double *partials2, float *sums, float *dgamma,
                                          float *dbeta) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    sums[c] = (float)combine(partials, row_blocks, channels, c);
    sums[channels + c] = (float)combine(partials2, row_blocks, channels, c);
    dbeta[c] += sums[c];
    dgamma[c] += sums[channels + c];
}

// dz_out = dy masked by the ReLU output (may alias dy: each element reads its own).
template <typename T>
__global__ void masked_gradient_kernel(size_t n, const T *relu_out, const T *dy, T *dz_out) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)blockDim.x * gridDim.x)
        dz_out[i] = !relu_out || !(act_load(relu_out[i]) <= 0.0f) ? dy[i] : act_store<T>(0.0f);
}

// dx = gamma inv_std (dz - sum dz / R - xhat sum dz xhat / R), R the rows
// of all ranks, with the all-reduced float sums (2, C).
template <typename T>
__global__ void sync_gradient_apply_kernel(size_t rows, size_t total_rows, int channels,
                                           const T *x, const T *relu_out, const T *dy,
                                           const float *gamma, const float *mean,
                                           const float *inv_std, const float *sums, T *dx) {
    const int c = blockIdx.x * 32 + threadIdx.x;
    if (c >= channels) return;
    const double mean_dz = sums[c] / (double)total_rows;
    const double mean_dz_xhat = sums[channels + c] / (double)total_rows;
    const double mean_c = mean[c], inv_std_c = inv_std[c];
    const double scale = (double)gamma[c] * inv_std_c;
    CHANNEL_ROWS(r, rows) {
        const size_t i = r * channels + c;
        const double xhat = ((double)act_load(x[i]) - mean_c) * inv_std_c;
        const double dz = !relu_out || !(act_load(relu_out[i]) <= 0.0f) ? act_load(dy[i]) : 0.0;
        dx[i] = act_store<T>((float)(scale * (dz - mean_dz - xhat * mean_dz_xhat)));
    }
}

unsigned int element_blocks(size_t n) {
    const size_t blocks = (n + kThreads - 1) / kThreads;
    return (unsigned int)(blocks < 1 ? 1 : blocks < 65535 ? blocks : 65535);
}

// apply_kernel over rows x channels (nothing for none).
template <typename T>
void apply_launch(cudaStream_t stream, size_t rows, int channels, const void *x,
                  const void *residual, int relu, const float *gamma, const float *beta,
                  const double *batch_mean, const double *batch_inv_std,
                  const float *running_mean, const float *running_var, float eps, void *y) {
    const size_t n = rows * (size_t)channels;
    if (n == 0) return;
    apply_kernel<T><<<channel_rows_grid(rows, channels), kChannelRowsBlock, 0, stream>>>(
        rows, channels, (const T *)x, (const T *)residual, relu, gamma, beta, batch_mean,
        batch_inv_std, running_mean, running_var, eps, (T *)y);
    CUDA_CHECK_LAUNCH();
}

// The row blocks' partial sums of dz (scratch [0, B*C)) and dz xhat
// (scratch [B*C, 2*B*C)); returns B.
template <typename T>
int gradient_partials(cudaStream_t stream, double *scratch, size_t rows, int channels,
                      const T *x, const T *relu_out, const T *dy, const float *mean,
                      const float *inv_std) {
    const int row_blocks = cuda_row_blocks(rows, channels);
    const dim3 grid((unsigned)((channels + 31) / 32), (unsigned)row_blocks), block(32, 8);
    partials_kernel<Sum::kGradient, T><<<grid, block, 0, stream>>>(
        rows, channels, x, relu_out, dy, nullptr, mean, inv_std, scratch,
        scratch + (size_t)row_blocks * channels);
    CUDA_CHECK_LAUNCH();
    return row_blocks;
}

void check_channels(int channels) {
    if (channels > CUDA_MAX_COLUMNS)
        cuda_fatal("CUDA", "batch norm", "more channels than the scratch holds", __FILE__,
                   __LINE__, cuda_current_device());
}

}  // namespace

extern "C" {

void cuda_batchnorm_forward_train_launch(cudaStream_t stream, ComputeDtype dtype, double *scratch,
                                         size_t rows, int channels, const void *x_any,
                                         const void *residual_any, int relu, const float *gamma,
                                         const float *beta, float momentum, float eps, void *y_any,
                                         float *save_mean, float *save_inv_std, float *running_mean,
                                         float *running_var) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *x = (const T *)x_any;
        const T *residual = (const T *)residual_any;
        T *y = (T *)y_any;
        if (rows == 0 || channels == 0) return;
        check_channels(channels);
        const int row_blocks = cuda_row_blocks(rows, channels);
        double *partials = scratch, *mean = scratch + 2 * (size_t)row_blocks * channels;
        double *inv_std = mean + channels;
        const dim3 grid((unsigned)((channels + 31) / 32), (unsigned)row_blocks), block(32, 8);
        const unsigned channel_blocks = (unsigned)((channels + kThreads - 1) / kThreads);
        partials_kernel<Sum::kPlain, T><<<grid, block, 0, stream>>>(
            rows, channels, x, nullptr, nullptr, nullptr, nullptr, nullptr, partials, nullptr);
        CUDA_CHECK_LAUNCH();
        mean_kernel<<<channel_blocks, kThreads, 0, stream>>>(rows, channels, row_blocks, partials,
                                                             mean);
        CUDA_CHECK_LAUNCH();
        partials_kernel<Sum::kDeviation, T><<<grid, block, 0, stream>>>(
            rows, channels, x, nullptr, nullptr, mean, nullptr, nullptr, partials, nullptr);
        CUDA_CHECK_LAUNCH();
        statistics_kernel<<<channel_blocks, kThreads, 0, stream>>>(
            rows, channels, row_blocks, partials, mean, momentum, eps, inv_std, save_mean,
            save_inv_std, running_mean, running_var);
        CUDA_CHECK_LAUNCH();
        apply_launch<T>(stream, rows, channels, x, residual, relu, gamma, beta, mean, inv_std,
                        nullptr, nullptr, eps, y);
    });
}

void cuda_batchnorm_forward_eval_launch(cudaStream_t stream, ComputeDtype dtype, size_t rows,
                                        int channels, const void *x_any, const void *residual_any,
                                        int relu, const float *gamma, const float *beta,
                                        const float *running_mean, const float *running_var,
                                        float eps, void *y_any) {
    act_dispatch(dtype, [&](auto tag) {
        apply_launch<ACT_T>(stream, rows, channels, x_any, residual_any, relu, gamma, beta,
                            nullptr, nullptr, running_mean, running_var, eps, y_any);
    });
}

void cuda_batchnorm_backward_launch(cudaStream_t stream, ComputeDtype dtype, double *scratch,
                                    size_t rows, int channels, const void *x_any,
                                    const void *relu_out_any, const void *dy_any,
                                    const float *gamma, const float *save_mean,
                                    const float *save_inv_std, void *dx_any, float *dgamma,
                                    float *dbeta, void *dresidual_any) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *x = (const T *)x_any;
        const T *relu_out = (const T *)relu_out_any;
        const T *dy = (const T *)dy_any;
        T *dx = (T *)dx_any;
        T *dresidual = (T *)dresidual_any;
        if (rows == 0 || channels == 0) return;
        check_channels(channels);
        const int row_blocks = gradient_partials(stream, scratch, rows, channels, x, relu_out, dy,
                                                 save_mean, save_inv_std);
        double *partials = scratch, *partials2 = scratch + (size_t)row_blocks * channels;
        double *sums = scratch + 2 * (size_t)row_blocks * channels;
        gradient_sums_kernel<<<(unsigned)((channels + kThreads - 1) / kThreads), kThreads, 0,
                               stream>>>(channels, row_blocks, partials, partials2, sums, dgamma,
                                         dbeta);
        CUDA_CHECK_LAUNCH();
        gradient_apply_kernel<T>
            <<<channel_rows_grid(rows, channels), kChannelRowsBlock, 0, stream>>>(
                rows, channels, x, relu_out, dy, gamma, save_mean, save_inv_std, sums, dx,
                dresidual);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_batchnorm_centered_squares_launch(cudaStream_t stream, ComputeDtype dtype,
                                            double *scratch, size_t rows, int channels,
                                            const void *x_any, const float *mean, float *squares) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *x = (const T *)x_any;
        if (channels == 0) return;
        check_channels(channels);
        const int row_blocks = cuda_row_blocks(rows, channels);
        double *partials = scratch, *mean_wide = scratch + 2 * (size_t)row_blocks * channels;
        const unsigned channel_blocks = (unsigned)((channels + kThreads - 1) / kThreads);
        widen_kernel<<<channel_blocks, kThreads, 0, stream>>>(channels, mean, mean_wide);
        CUDA_CHECK_LAUNCH();
        const dim3 grid((unsigned)((channels + 31) / 32), (unsigned)row_blocks), block(32, 8);
        partials_kernel<Sum::kDeviation, T><<<grid, block, 0, stream>>>(
            rows, channels, x, nullptr, nullptr, mean_wide, nullptr, nullptr, partials, nullptr);
        CUDA_CHECK_LAUNCH();
        combine_to_float_kernel<<<channel_blocks, kThreads, 0, stream>>>(channels, row_blocks,
                                                                         partials, squares);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_batchnorm_finish_statistics_launch(cudaStream_t stream, int channels,
                                             size_t total_rows, float momentum, float eps,
                                             const float *mean, float *squares_to_inv_std,
                                             float *running_mean, float *running_var) {
    if (channels == 0) return;
    finish_statistics_kernel<<<(unsigned)((channels + kThreads - 1) / kThreads), kThreads, 0,
                               stream>>>(channels, total_rows, momentum, eps, mean,
                                         squares_to_inv_std, running_mean, running_var);
    CUDA_CHECK_LAUNCH();
}

void cuda_batchnorm_forward_apply_launch(cudaStream_t stream, ComputeDtype dtype, double *scratch,
                                         size_t rows, int channels, const void *x_any,
                                         const void *residual_any, int relu, const float *gamma,
                                         const float *beta, const float *mean, const float *inv_std,
                                         void *y_any) {
    if (rows == 0 || channels == 0) return;
    check_channels(channels);
    double *mean_wide = scratch, *inv_std_wide = scratch + channels;
    const unsigned channel_blocks = (unsigned)((channels + kThreads - 1) / kThreads);
    widen_kernel<<<channel_blocks, kThreads, 0, stream>>>(channels, mean, mean_wide);
    CUDA_CHECK_LAUNCH();
    widen_kernel<<<channel_blocks, kThreads, 0, stream>>>(channels, inv_std, inv_std_wide);
    CUDA_CHECK_LAUNCH();
    act_dispatch(dtype, [&](auto tag) {
        apply_launch<ACT_T>(stream, rows, channels, x_any, residual_any, relu, gamma, beta,
                            mean_wide, inv_std_wide, nullptr, nullptr, 0.0f, y_any);
    });
}

void cuda_batchnorm_backward_reduce_launch(cudaStream_t stream, ComputeDtype dtype, double *scratch,
                                           size_t rows, int channels, const void *x_any,
                                           const void *relu_out_any, const void *dy_any,
                                           void *dz_out_any, const float *mean,
                                           const float *inv_std, float *dgamma, float *dbeta,
                                           float *sums) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *x = (const T *)x_any;
        const T *relu_out = (const T *)relu_out_any;
        const T *dy = (const T *)dy_any;
        T *dz_out = (T *)dz_out_any;
        if (channels == 0) return;
        check_channels(channels);
        const int row_blocks =
            gradient_partials(stream, scratch, rows, channels, x, relu_out, dy, mean, inv_std);
        double *partials = scratch, *partials2 = scratch + (size_t)row_blocks * channels;
        rank_gradient_sums_kernel<<<(unsigned)((channels + kThreads - 1) / kThreads), kThreads, 0,
                                    stream>>>(channels, row_blocks, partials, partials2, sums,
                                              dgamma, dbeta);
        CUDA_CHECK_LAUNCH();
        const size_t n = rows * (size_t)channels;
        if (!dz_out || n == 0) return;
        masked_gradient_kernel<T>
            <<<element_blocks(n), kThreads, 0, stream>>>(n, relu_out, dy, dz_out);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_batchnorm_backward_apply_launch(cudaStream_t stream, ComputeDtype dtype, size_t rows,
                                          size_t total_rows, int channels, const void *x_any,
                                          const void *relu_out_any, const void *dy_any,
                                          const float *gamma, const float *mean,
                                          const float *inv_std, const float *sums, void *dx_any) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *x = (const T *)x_any;
        const T *relu_out = (const T *)relu_out_any;
        const T *dy = (const T *)dy_any;
        T *dx = (T *)dx_any;
        const size_t n = rows * (size_t)channels;
        if (n == 0) return;
        sync_gradient_apply_kernel<T>
            <<<channel_rows_grid(rows, channels), kChannelRowsBlock, 0, stream>>>(
            rows, total_rows, channels, x, relu_out, dy, gamma, mean, inv_std, sums, dx);
        CUDA_CHECK_LAUNCH();
    });
}

}  // extern "C"
