// Batch norm over the rows of (rows, C) NHWC matrices on the GPU, training
// (batch statistics, running-statistics update), evaluation and backward,
// each optionally fused with the ReLU and residual add after it: the same
// formulas as the ref backend (backend.h). The training forward's
// statistics take one read of x: double column sums of d = x - shift and
// d^2, shift a channel's value in the first row (the shifted-data
// algorithm; see moments_kernel for why it is as exact as ref's two passes),
// with double partials in the scratch; the elementwise pass is fp32 (double
// where ref is). Every pass reads 16 bytes of a tensor per load
// where it can (V channels per thread, geometry below): these kernels move
// most of a ResNet step's activation bytes, and one 2-byte load per thread
// reaches a fraction of the GPU's bandwidth.
//
// Geometry: the per-element passes give each thread V consecutive channels
// of a row (ChannelGrid, cuda_grid.cuh); the statistics passes too, with
// their own row-block count.
//
// Scratch layout (doubles): [0, B*C) and [B*C, 2*B*C) column partials of
// the B row blocks (sum d and sum d^2, or sum dz and sum dz * xhat), then C
// per-channel results (the mean, or sum dz) and C more (1/std, or sum dz *
// xhat). Per-channel kernels combine a channel's B
// partials with one warp, in a fixed order.
//
// The split ops of synchronised BatchNorm (backend.h: centered squares,
// finish statistics, apply, backward reduce and apply) reuse the same
// column passes with the statistics given as floats, widened to double
// where ref widens them. Activations (x, y, dy, dx, residual, relu_out,
// dz_out) are in the storage type T of the compute dtype (cuda_act.cuh),
// each output rounded once, after the residual and ReLU.
#include <math.h>

#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_grid.cuh"

#include "backend/cuda/cuda_internal.h"
#include "backend/scalar_rules.h"
#include "backend/cuda/cuda_reduce.cuh"

namespace {

// Per-channel kernels run one warp per channel (whole warps return together).
unsigned channel_warp_blocks(int channels) {
    return (unsigned)(((size_t)channels * 32 + kThreads - 1) / kThreads);
}

__device__ int warp_channel() { return (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32); }

__device__ bool warp_leader() { return threadIdx.x % 32 == 0; }

// ---- the statistics passes -------------------------------------------------------------

enum class Sum { kMoments, kDeviation, kGradient };

// The V values of the ReLU output at element i (1 where there is none).
template <typename T, int V>
__device__ void load_mask(const T *relu_out, size_t i, float mask[V]) {
    if (relu_out) {
        act_load_vector<T, V>(relu_out + i, mask);
    } else {
        for (int v = 0; v < V; v++) mask[v] = 1.0f;
    }
}

// The coefficients of a convolution prologue's BatchNorm + ReLU (backend.h
// NormAffine), each rounded to T: where the ReLU's output was never stored,
// its mask is fmaf(x, scale, shift) > 0 (batchnorm_relu_backward, y NULL).
template <typename T, int V>
__device__ void prologue_coefficients(const float *gamma, const float *beta, const float *mean,
                                      const float *inv_std, int c0, float scale[V],
                                      float shift[V]) {
    for (int v = 0; v < V; v++) {
        const int c = c0 + v;
        scale[v] = act_load(act_store<T>(prologue_scale_rule(gamma[c], inv_std[c])));
        shift[v] = act_load(act_store<T>(prologue_shift_rule(beta[c], mean[c], scale[v])));
    }
}

// out (2, C): the scale, then the shift (conv2d_forward_stats' prologue), in T.
template <typename T>
__global__ void prologue_coefficients_kernel(int channels, const float *gamma, const float *beta,
                                             const float *mean, const float *inv_std, T *out) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    float scale[1], shift[1];
    prologue_coefficients<T, 1>(gamma, beta, mean, inv_std, c, scale, shift);
    out[c] = act_store<T>(scale[0]);
    out[channels + c] = act_store<T>(shift[0]);
}

// dbeta += sums[0 .. C), dgamma += sums[C .. 2C): a reduction's outputs
// added to the gradients (cudnn's BN_BWD_WEIGHTS writes them).
__global__ void gradients_add_kernel(int channels, const float *sums, float *dgamma,
                                     float *dbeta) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    dbeta[c] += sums[c];
    dgamma[c] += sums[channels + c];
}

// Column partials, per row block. kMoments: both d = x - shift and d^2
// (into partials and partials2), shift the channel's value in row 0;
// kDeviation: (x - center)^2; kGradient: both dz and dz * (x - center) *
// inv_std (xhat), dz = dy masked by the ReLU output when there is one (a
// NaN in it keeps dy), or kFromInput: by the ReLU input fmaf(x, scale,
// shift) of mask_gamma, mask_beta's prologue. The per-element arithmetic is double (ref's); the
// centers are floats (the saved or all-reduced mean), kept as floats to
// spare registers. The block's row lanes combine in lane order.
template <Sum kind, typename T, int V, bool kFromInput>
__global__ void __launch_bounds__(kThreads, kind == Sum::kGradient ? 2 : 3)
    partials_kernel(size_t rows, int channels, const T *x, const T *relu_out, const T *dy,
                    const float *center_of, const float *inv_std_of, const float *mask_gamma,
                    const float *mask_beta, double *partials, double *partials2) {
    constexpr int kSums = kind == Sum::kDeviation ? 1 : 2;
    const int column = blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = column < channels / V;
    const int c0 = column * V;
    double total[kSums][V];
    for (int k = 0; k < kSums; k++)
        for (int v = 0; v < V; v++) total[k][v] = 0.0;
    if (active) {
        float center[V], inv_std[V], mask_scale[V], mask_shift[V];
        if (kFromInput)
            prologue_coefficients<T, V>(mask_gamma, mask_beta, center_of, inv_std_of, c0,
                                        mask_scale, mask_shift);
        if (kind == Sum::kMoments) act_load_vector<T, V>(x + c0, center);
        for (int v = 0; v < V; v++) {
            if (kind != Sum::kMoments) center[v] = center_of[c0 + v];
            inv_std[v] = kind == Sum::kGradient ? inv_std_of[c0 + v] : 0.0f;
        }
        CHANNEL_ROWS(r, rows) {
            const size_t i = r * channels + c0;
            float xv[V];
            act_load_vector<T, V>(x + i, xv);
            if (kind == Sum::kMoments) {
                for (int v = 0; v < V; v++) {
                    const double d = (double)xv[v] - center[v];
                    total[0][v] += d;
                    total[1][v] += d * d;
                }
            } else if (kind == Sum::kDeviation) {
                for (int v = 0; v < V; v++) {
                    const double d = (double)xv[v] - center[v];
                    total[0][v] += d * d;
                }
            } else {
                float dyv[V], mask[V];
                act_load_vector<T, V>(dy + i, dyv);
                load_mask<T, V>(relu_out, i, mask);
                if (kFromInput)
                    for (int v = 0; v < V; v++) mask[v] = fmaf(xv[v], mask_scale[v], mask_shift[v]);
                for (int v = 0; v < V; v++) {
                    const double dz = !(mask[v] <= 0.0f) ? dyv[v] : 0.0;
                    total[0][v] += dz;
                    total[kSums - 1][v] += dz * ((double)xv[v] - center[v]) * inv_std[v];
                }
            }
        }
    }
    __shared__ double lanes[kSums][kThreads * V];
    const int own = (threadIdx.y * blockDim.x + threadIdx.x) * V;
    for (int v = 0; v < V; v++)
        for (int k = 0; k < kSums; k++) lanes[k][own + v] = total[k][v];
    __syncthreads();
    if (threadIdx.y != 0 || !active) return;
    for (int lane = 1; lane < (int)blockDim.y; lane++) {
        const int other = (lane * blockDim.x + threadIdx.x) * V;
        for (int v = 0; v < V; v++)
            for (int k = 0; k < kSums; k++) total[k][v] += lanes[k][other + v];
    }
    double *const out[2] = {partials, partials2};
    for (int v = 0; v < V; v++)
        for (int k = 0; k < kSums; k++)
            out[k][(size_t)blockIdx.y * channels + c0 + v] = total[k][v];
}

// One statistics pass over (rows, channels) into the scratch: partials of
// row block b at [b * C, (b + 1) * C), the second sum (kMoments,
// kGradient) after all B of them, at [B * C, 2 * B * C). Returns B.
// mask_beta: the mask from the input (kGradient; partials_kernel's kFromInput).
template <Sum kind, typename T>
int partials_launch(cudaStream_t stream, double *scratch, size_t rows, int channels,
                    const T *x, const T *relu_out, const T *dy, const float *center,
                    const float *inv_std, const float *mask_gamma = nullptr,
                    const float *mask_beta = nullptr) {
    int row_blocks = 0;
    const bool fits =
        act_vector_fits<T>(channels, act_vector_width<T>(), {x, relu_out, dy});
    act_width_dispatch<T>(fits, [&](auto width) {
        constexpr int V = decltype(width)::value;
        const ChannelGrid grid = channel_grid(channels, V);
        // at least 8 rows per thread
        row_blocks = cuda_row_blocks(rows, channels, grid.column_blocks, (size_t)grid.block.y * 8);
        const dim3 blocks(grid.column_blocks, (unsigned)row_blocks);
        double *partials2 = scratch + (size_t)row_blocks * channels;
        if (mask_beta && cuda_queue_point())
            partials_kernel<kind, T, V, true><<<blocks, grid.block, 0, stream>>>(
                rows, channels, x, relu_out, dy, center, inv_std, mask_gamma, mask_beta, scratch,
                partials2);
        else if (!mask_beta && cuda_queue_point())
            partials_kernel<kind, T, V, false><<<blocks, grid.block, 0, stream>>>(
                rows, channels, x, relu_out, dy, center, inv_std, nullptr, nullptr, scratch,
                partials2);
        CUDA_CHECK_LAUNCH();
    });
    return row_blocks;
}

// From the shifted sums S1 = sum d and S2 = sum d^2 over the rows (d = x -
// shift, in double): mean = shift + S1 / R, variance = (S2 - S1^2 / R) / R.
// As exact as ref's two passes: d and d^2 of 16-bit or fp32 values are
// exact in double, and the shift is one of the channel's values, so the
// cancellation in S2 - S1^2 / R costs digits only in proportion to how far
// that value lies in the tail (100 standard deviations: 4 of double's 16
// digits), where unshifted sums lose them all once the mean is 1e8
// standard deviations (tests/test_backend_fast_norm.c's offset case).
// Saves mean and 1/std (1/std also in double, for the forward's own
// normalisation), updates the running statistics (unbiased variance;
// biased with one row, as ref).
template <typename T>
__global__ void statistics_kernel(size_t rows, int channels, int row_blocks, const T *x,
                                  const double *partials, const double *partials2,
                                  float momentum, float eps, double *mean, double *inv_std,
                                  float *save_mean, float *save_inv_std, float *running_mean,
                                  float *running_var) {
    const int c = warp_channel();
    if (c >= channels) return;
    const double sum = combine_partials(partials, row_blocks, channels, c);
    const double squares = combine_partials(partials2, row_blocks, channels, c);
    if (!warp_leader()) return;
    const double count = (double)rows;
    const double centered = squares - sum * (sum / count);
    const double variance = (centered < 0.0 ? 0.0 : centered) / count;  // NaN stays NaN
    mean[c] = (double)act_load(x[c]) + sum / count;
    inv_std[c] = 1.0 / sqrt(variance + eps);
    save_mean[c] = (float)mean[c];
    save_inv_std[c] = (float)inv_std[c];
    const double unbiased = rows > 1 ? variance * count / (double)(rows - 1) : variance;
    running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean[c]);
    running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
}

// sums (2, C) = this rank's sum dz and sum dz * xhat (double for the
// plain backward, float for synchronised BatchNorm's all-reduce), then
// dbeta, dgamma += them as floats.
template <typename S>
__global__ void gradient_sums_kernel(int channels, int row_blocks, const double *partials,
                                     const double *partials2, S *sums, float *dgamma,
                                     float *dbeta) {
    const int c = warp_channel();
    if (c >= channels) return;
    const double sum_dz = combine_partials(partials, row_blocks, channels, c);
    const double sum_dz_xhat = combine_partials(partials2, row_blocks, channels, c);
    if (!warp_leader()) return;
    sums[c] = (S)sum_dz;
    sums[channels + c] = (S)sum_dz_xhat;
    dgamma[c] += (float)sum_dz_xhat;
    dbeta[c] += (float)sum_dz;
}

// squares (C) = the combined partials, as float (ref: the double sum rounded once).
__global__ void combine_to_float_kernel(int channels, int row_blocks, const double *partials,
                                        float *out) {
    const int c = warp_channel();
    if (c >= channels) return;
    const double total = combine_partials(partials, row_blocks, channels, c);
    if (warp_leader()) out[c] = (float)total;
}

// Widens n floats to doubles (the given mean and 1/std of the split ops).
__global__ void widen_kernel(int n, const float *from, double *to) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) to[i] = from[i];
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

// One thread per channel (scalar_rules.h batchnorm_sums_rule).
__global__ void statistics_from_sums_kernel(int channels, size_t total_rows, const float *sums,
                                            float *mean, float *squares) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < channels)
        batchnorm_sums_rule(sums[c], sums[channels + c], total_rows, &mean[c], &squares[c]);
}

// ---- the elementwise passes ------------------------------------------------------------
// Both maps are fp32, with per-channel constants formed in double and
// rounded once, as the cpu backend's (cpu_batchnorm.c): y = ((x - center)
// - center_low) * scale + shift, where x - center is exact for x near the
// mean and center_low carries what the float mean lost; dx = a (dz -
// mean_dz) - b (x - mean), both differences taken first. The constants'
// registers (4 floats a channel, not 2-5 doubles) raise the blocks of 256
// threads a multiprocessor holds, and so the loads in flight in these
// bandwidth-bound passes (ptxas -v, sm_90, 16-bit: apply_kernel 124 -> at
// most 80 registers, 2 -> 3 blocks; gradient_apply_kernel 128 -> 64, 2 ->
// 4 blocks). Not yet timed on a GPU (docs/performance.md).

// y = gamma (x - mean) inv_std + beta (+ residual) (then ReLU), with the
// batch statistics (training: batch_mean, batch_inv_std in double) or the
// running ones (evaluation).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads, 3) apply_kernel(size_t rows, int channels, const T *x, const T *residual,
                             int relu, const float *gamma, const float *beta,
                             const double *batch_mean, const double *batch_inv_std,
                             const float *running_mean, const float *running_var, float eps,
                             T *y) {
    const int column = blockIdx.x * blockDim.x + threadIdx.x;
    if (column >= channels / V) return;
    const int c0 = column * V;
    float center[V], center_low[V], scale[V], shift[V];
    for (int v = 0; v < V; v++) {
        const int c = c0 + v;
        const double mean = batch_mean ? batch_mean[c] : (double)running_mean[c];
        const double inv_std =
            batch_inv_std ? batch_inv_std[c] : 1.0 / sqrt((double)running_var[c] + eps);
        center[v] = (float)mean;
        center_low[v] = (float)(mean - center[v]);
        scale[v] = (float)(gamma[c] * inv_std);
        shift[v] = beta[c];
    }
    // Two of the thread's rows per iteration, both loaded before either is
    // stored (the stores may not be moved above later loads: y could alias
    // x), so twice the bytes are in flight; held as stored (16-bit values
    // take half the registers) until used.
    const size_t stride = (size_t)blockDim.y * gridDim.y;
    for (size_t r = blockIdx.y * (size_t)blockDim.y + threadIdx.y; r < rows; r += 2 * stride) {
        const int count = r + stride < rows ? 2 : 1;
        ActVector<T, V> xv[2], added[2];
        for (int k = 0; k < 2; k++)
            if (k < count) {
                const size_t i = (r + k * stride) * channels + c0;
                xv[k] = load_packed<T, V>(x + i);
                if (residual) added[k] = load_packed<T, V>(residual + i);
            }
        for (int k = 0; k < 2; k++)
            if (k < count) {
                float out[V];
                for (int v = 0; v < V; v++) {
                    float value = ((act_load(xv[k].value[v]) - center[v]) - center_low[v]) *
                                      scale[v] +
                                  shift[v];
                    if (residual) value += act_load(added[k].value[v]);
                    if (relu) value = value <= 0.0f ? 0.0f : value;  // NaN stays NaN
                    out[v] = value;
                }
                act_store_vector<T, V>(y + (r + k * stride) * channels + c0, out);
            }
    }
}

// dx = gamma inv_std (dz - sum dz / R - xhat sum dz xhat / R), R the rows
// of all ranks (total_rows), from the sums (2, C) of dz and dz * xhat:
// this rank's in double (the plain backward) or the all-reduced floats
// (synchronised BatchNorm); dz = dy masked by the ReLU output. dresidual
// = dz (written after dy is read: dresidual may alias dy), or nothing.
// kFromInput: the mask from the prologue's ReLU input (partials_kernel).
template <typename T, int V, typename S, bool kFromInput>
__global__ void gradient_apply_kernel(size_t rows, size_t total_rows, int channels, const T *x,
                                      const T *relu_out, const T *dy, const float *gamma,
                                      const float *beta, const float *mean, const float *inv_std,
                                      const S *sums, T *dx, T *dresidual) {
    const int column = blockIdx.x * blockDim.x + threadIdx.x;
    if (column >= channels / V) return;
    const int c0 = column * V;
    float a[V], b[V], mean_dz[V], center[V];
    for (int v = 0; v < V; v++) {
        const int c = c0 + v;
        const double weight = (double)gamma[c] * inv_std[c], count = (double)total_rows;
        a[v] = (float)weight;
        b[v] = (float)(weight * inv_std[c] * (double)sums[channels + c] / count);
        mean_dz[v] = (float)((double)sums[c] / count);
        center[v] = mean[c];
    }
    float mask_scale[V], mask_shift[V];
    if (kFromInput)
        prologue_coefficients<T, V>(gamma, beta, mean, inv_std, c0, mask_scale, mask_shift);
    CHANNEL_ROWS(r, rows) {
        const size_t i = r * channels + c0;
        float xv[V], dyv[V], mask[V], dxv[V], dzv[V];
        act_load_vector<T, V>(x + i, xv);
        act_load_vector<T, V>(dy + i, dyv);
        load_mask<T, V>(relu_out, i, mask);
        if (kFromInput)
            for (int v = 0; v < V; v++) mask[v] = fmaf(xv[v], mask_scale[v], mask_shift[v]);
        for (int v = 0; v < V; v++) {
            dzv[v] = !(mask[v] <= 0.0f) ? dyv[v] : 0.0f;
            dxv[v] = a[v] * (dzv[v] - mean_dz[v]) - b[v] * (xv[v] - center[v]);
        }
        act_store_vector<T, V>(dx + i, dxv);
        if (dresidual) act_store_vector<T, V>(dresidual + i, dzv);
    }
}

// dz_out = dy masked by the ReLU output (may alias dy: each element reads its own).
template <typename T>
__global__ void masked_gradient_kernel(size_t n, const T *relu_out, const T *dy, T *dz_out) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)blockDim.x * gridDim.x)
        dz_out[i] = !relu_out || !(act_load(relu_out[i]) <= 0.0f) ? dy[i] : act_store<T>(0.0f);
}

// apply_kernel over rows x channels (nothing for none).
template <typename T>
void apply_launch(cudaStream_t stream, size_t rows, int channels, const void *x,
                  const void *residual, int relu, const float *gamma, const float *beta,
                  const double *batch_mean, const double *batch_inv_std,
                  const float *running_mean, const float *running_var, float eps, void *y) {
    if (rows == 0 || channels == 0) return;
    const bool fits = act_vector_fits<T>(channels, act_vector_width<T>(), {x, residual, y});
    act_width_dispatch<T>(fits, [&](auto width) {
        constexpr int V = decltype(width)::value;
        const ChannelGrid grid = channel_grid(channels, V);
        if (cuda_queue_point())
            apply_kernel<T, V><<<channel_row_blocks(grid, rows), grid.block, 0, stream>>>(
                rows, channels, (const T *)x, (const T *)residual, relu, gamma, beta, batch_mean,
                batch_inv_std, running_mean, running_var, eps, (T *)y);
        CUDA_CHECK_LAUNCH();
    });
}

// gradient_apply_kernel over rows x channels.
// beta: the mask from the input (gradient_apply_kernel's kFromInput), or NULL.
template <typename T, typename S>
void gradient_apply_launch(cudaStream_t stream, size_t rows, size_t total_rows, int channels,
                           const T *x, const T *relu_out, const T *dy, const float *gamma,
                           const float *beta, const float *mean, const float *inv_std,
                           const S *sums, T *dx, T *dresidual) {
    const bool fits =
        act_vector_fits<T>(channels, act_vector_width<T>(), {x, relu_out, dy, dx, dresidual});
    act_width_dispatch<T>(fits, [&](auto width) {
        constexpr int V = decltype(width)::value;
        const ChannelGrid grid = channel_grid(channels, V);
        const dim3 blocks = channel_row_blocks(grid, rows);
        if (beta && cuda_queue_point())
            gradient_apply_kernel<T, V, S, true><<<blocks, grid.block, 0, stream>>>(
                rows, total_rows, channels, x, relu_out, dy, gamma, beta, mean, inv_std, sums, dx,
                dresidual);
        else if (!beta && cuda_queue_point())
            gradient_apply_kernel<T, V, S, false><<<blocks, grid.block, 0, stream>>>(
                rows, total_rows, channels, x, relu_out, dy, gamma, nullptr, mean, inv_std, sums,
                dx, dresidual);
        CUDA_CHECK_LAUNCH();
    });
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
        if (rows == 0 || channels == 0) return;
        check_channels(channels);
        const int row_blocks = partials_launch<Sum::kMoments, T>(
            stream, scratch, rows, channels, x, nullptr, nullptr, nullptr, nullptr);
        double *partials = scratch, *partials2 = scratch + (size_t)row_blocks * channels;
        double *mean = scratch + 2 * (size_t)row_blocks * channels, *inv_std = mean + channels;
        if (cuda_queue_point())
            statistics_kernel<T><<<channel_warp_blocks(channels), kThreads, 0, stream>>>(
                rows, channels, row_blocks, x, partials, partials2, momentum, eps, mean, inv_std,
                save_mean, save_inv_std, running_mean, running_var);
        CUDA_CHECK_LAUNCH();
        apply_launch<T>(stream, rows, channels, x, residual_any, relu, gamma, beta, mean, inv_std,
                        nullptr, nullptr, eps, y_any);
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
                                    const float *gamma, const float *mask_beta,
                                    const float *save_mean, const float *save_inv_std,
                                    void *dx_any, float *dgamma, float *dbeta,
                                    void *dresidual_any) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *x = (const T *)x_any;
        const T *relu_out = (const T *)relu_out_any;
        const T *dy = (const T *)dy_any;
        T *dx = (T *)dx_any;
        T *dresidual = (T *)dresidual_any;
        if (rows == 0 || channels == 0) return;
        check_channels(channels);
        const int row_blocks = partials_launch<Sum::kGradient, T>(
            stream, scratch, rows, channels, x, relu_out, dy, save_mean, save_inv_std, gamma,
            mask_beta);
        double *partials = scratch, *partials2 = scratch + (size_t)row_blocks * channels;
        double *sums = scratch + 2 * (size_t)row_blocks * channels;
        if (cuda_queue_point())
            gradient_sums_kernel<double><<<channel_warp_blocks(channels), kThreads, 0, stream>>>(
                channels, row_blocks, partials, partials2, sums, dgamma, dbeta);
        CUDA_CHECK_LAUNCH();
        gradient_apply_launch<T, double>(stream, rows, rows, channels, x, relu_out, dy, gamma,
                                         mask_beta, save_mean, save_inv_std, sums, dx, dresidual);
    });
}

void cuda_batchnorm_centered_squares_launch(cudaStream_t stream, ComputeDtype dtype,
                                            double *scratch, size_t rows, int channels,
                                            const void *x_any, const float *mean, float *squares) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        if (channels == 0) return;
        check_channels(channels);
        const int row_blocks = partials_launch<Sum::kDeviation, T>(
            stream, scratch, rows, channels, (const T *)x_any, nullptr, nullptr, mean, nullptr);
        if (cuda_queue_point())
            combine_to_float_kernel<<<channel_warp_blocks(channels), kThreads, 0, stream>>>(
                channels, row_blocks, scratch, squares);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_batchnorm_finish_statistics_launch(cudaStream_t stream, int channels,
                                             size_t total_rows, float momentum, float eps,
                                             const float *mean, float *squares_to_inv_std,
                                             float *running_mean, float *running_var) {
    if (channels == 0) return;
    if (cuda_queue_point())
        finish_statistics_kernel<<<(unsigned)((channels + kThreads - 1) / kThreads), kThreads, 0,
                                   stream>>>(channels, total_rows, momentum, eps, mean,
                                             squares_to_inv_std, running_mean, running_var);
    CUDA_CHECK_LAUNCH();
}

void cuda_batchnorm_statistics_from_sums_launch(cudaStream_t stream, int channels,
                                                size_t total_rows, const float *sums,
                                                float *mean, float *squares) {
    if (channels == 0) return;
    if (cuda_queue_point())
        statistics_from_sums_kernel<<<(unsigned)((channels + kThreads - 1) / kThreads), kThreads, 0,
                                      stream>>>(channels, total_rows, sums, mean, squares);
    CUDA_CHECK_LAUNCH();
}

void cuda_norm_gradients_add_launch(cudaStream_t stream, int channels, const float *sums,
                                    float *dgamma, float *dbeta) {
    if (channels == 0) return;
    if (cuda_queue_point())
        gradients_add_kernel<<<(unsigned)((channels + kThreads - 1) / kThreads), kThreads, 0,
                               stream>>>(channels, sums, dgamma, dbeta);
    CUDA_CHECK_LAUNCH();
}

void cuda_prologue_coefficients_launch(cudaStream_t stream, ComputeDtype dtype, int channels,
                                       const float *gamma, const float *beta, const float *mean,
                                       const float *inv_std, void *out) {
    if (channels == 0) return;
    const unsigned blocks = (unsigned)((channels + kThreads - 1) / kThreads);
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        if (cuda_queue_point())
            prologue_coefficients_kernel<T><<<blocks, kThreads, 0, stream>>>(
                channels, gamma, beta, mean, inv_std, (T *)out);
        CUDA_CHECK_LAUNCH();
    });
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
    if (cuda_queue_point())
        widen_kernel<<<channel_blocks, kThreads, 0, stream>>>(channels, mean, mean_wide);
    CUDA_CHECK_LAUNCH();
    if (cuda_queue_point())
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
        const T *relu_out = (const T *)relu_out_any;
        const T *dy = (const T *)dy_any;
        T *dz_out = (T *)dz_out_any;
        if (channels == 0) return;
        check_channels(channels);
        const int row_blocks = partials_launch<Sum::kGradient, T>(
            stream, scratch, rows, channels, (const T *)x_any, relu_out, dy, mean, inv_std);
        double *partials = scratch, *partials2 = scratch + (size_t)row_blocks * channels;
        if (cuda_queue_point())
            gradient_sums_kernel<float><<<channel_warp_blocks(channels), kThreads, 0, stream>>>(
                channels, row_blocks, partials, partials2, sums, dgamma, dbeta);
        CUDA_CHECK_LAUNCH();
        const size_t n = rows * (size_t)channels;
        if (!dz_out || n == 0) return;
        if (cuda_queue_point())
            masked_gradient_kernel<T>
                <<<blocks_for(n), kThreads, 0, stream>>>(n, relu_out, dy, dz_out);
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
        if (rows == 0 || channels == 0) return;
        gradient_apply_launch<T, float>(stream, rows, total_rows, channels, (const T *)x_any,
                                        (const T *)relu_out_any, (const T *)dy_any, gamma, nullptr,
                                        mean, inv_std, sums, (T *)dx_any, (T *)nullptr);
    });
}

}  // extern "C"
