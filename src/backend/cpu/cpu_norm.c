// The cpu backend's per-channel reductions over rows of a (rows, C) matrix:
// batch norm (training, evaluation, backward), bias gradient, column sums
// and global average pooling. Threads split the channels into blocks (see
// cpu_channel_block); each walks every row over its contiguous block, so no
// partial sums need scratch memory. Statistics accumulate in double (two
// passes for the variance, as ref); the per-element maps are fp32, centred first.
#include <math.h>

#include "backend/cpu/cpu_internal.h"

// Channel block b of a (rows, C) matrix: [first, first + width).
typedef struct ChannelBlock {
    int first, width;
} ChannelBlock;

static ChannelBlock channel_block(int block_size, int channels, int b) {
    ChannelBlock block = {b * block_size, channels - b * block_size};
    if (block.width > block_size) block.width = block_size;
    return block;
}

// Runs the loop body once per channel block, blocks split across threads.
// Declares block_size, blocks, team and b (the block index).
#define CPU_FOR_CHANNEL_BLOCKS(rows, channels)                                    \
    const int block_size = cpu_channel_block(backend, channels);                  \
    const int blocks = (channels + block_size - 1) / block_size;                  \
    const int team = cpu_team(backend, (rows) * (size_t)(channels));              \
    _Pragma("omp parallel for num_threads(team) schedule(static)")                \
    for (int b = 0; b < blocks; b++)

// sums (width) = sum over rows of x (rows, C) in the block.
static void block_sums(size_t rows, int channels, const float *x, ChannelBlock block,
                       double *sums) {
    for (int j = 0; j < block.width; j++) sums[j] = 0.0;
    for (size_t r = 0; r < rows; r++) {
        const float *x_row = x + r * channels + block.first;
#pragma omp simd
        for (int j = 0; j < block.width; j++) sums[j] += x_row[j];
    }
}

// y = (x - center) * scale + shift over the block's channels (all: width).
// Centering first keeps the result accurate when scale is large (a channel
// of near-constant values): x - center is exact for x close to center.
// center_low carries the part of a double mean that fp32 center lost.
static void block_normalize(size_t rows, int channels, const float *x, ChannelBlock block,
                            const float *center, const float *center_low, const float *scale,
                            const float *shift, float *y) {
    for (size_t r = 0; r < rows; r++) {
        const float *x_row = x + r * channels + block.first;
        float *y_row = y + r * channels + block.first;
#pragma omp simd
        for (int j = 0; j < block.width; j++)
            y_row[j] = ((x_row[j] - center[j]) - center_low[j]) * scale[j] + shift[j];
    }
}

void cpu_batchnorm_forward_train(Backend *backend, size_t rows, int channels, const float *x,
                                 const float *gamma, const float *beta, float momentum, float eps,
                                 float *y, float *save_mean, float *save_inv_std,
                                 float *running_mean, float *running_var) {
    CPU_FOR_CHANNEL_BLOCKS(rows, channels) {
        const ChannelBlock block = channel_block(block_size, channels, b);
        double mean[CPU_CHANNEL_BLOCK], squares[CPU_CHANNEL_BLOCK];
        float center[CPU_CHANNEL_BLOCK], center_low[CPU_CHANNEL_BLOCK];
        float scale[CPU_CHANNEL_BLOCK], shift[CPU_CHANNEL_BLOCK];
        block_sums(rows, channels, x, block, mean);
        for (int j = 0; j < block.width; j++) {
            mean[j] /= (double)rows;
            squares[j] = 0.0;
        }
        for (size_t r = 0; r < rows; r++) {
            const float *x_row = x + r * channels + block.first;
#pragma omp simd
            for (int j = 0; j < block.width; j++) {
                const double d = x_row[j] - mean[j];
                squares[j] += d * d;
            }
        }
        for (int j = 0; j < block.width; j++) {
            const int c = block.first + j;
            const double variance = squares[j] / (double)rows;
            const double inv_std = 1.0 / sqrt(variance + eps);
            center[j] = (float)mean[j];
            center_low[j] = (float)(mean[j] - center[j]);
            scale[j] = (float)(gamma[c] * inv_std);
            shift[j] = beta[c];
            save_mean[c] = (float)mean[j];
            save_inv_std[c] = (float)inv_std;
            // Unbiased variance for the running statistic; with one row it is
            // undefined, so (like ref) the biased one is kept.
            const double unbiased =
                rows > 1 ? variance * (double)rows / (double)(rows - 1) : variance;
            running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean[j]);
            running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
        }
        block_normalize(rows, channels, x, block, center, center_low, scale, shift, y);
    }
}

void cpu_batchnorm_forward_eval(Backend *backend, size_t rows, int channels, const float *x,
                                const float *gamma, const float *beta, const float *running_mean,
                                const float *running_var, float eps, float *y) {
    CPU_FOR_CHANNEL_BLOCKS(rows, channels) {
        const ChannelBlock block = channel_block(block_size, channels, b);
        float zero[CPU_CHANNEL_BLOCK], scale[CPU_CHANNEL_BLOCK];
        for (int j = 0; j < block.width; j++) {
            const int c = block.first + j;
            zero[j] = 0.0f;
            scale[j] = (float)(gamma[c] / sqrt((double)running_var[c] + eps));
        }
        block_normalize(rows, channels, x, block, running_mean + block.first, zero, scale,
                        beta + block.first, y);
    }
}

// With xhat = (x - mean) inv_std over R rows: dbeta = sum dy,
// dgamma = sum dy xhat, dx = gamma inv_std / R (R dy - dbeta - xhat dgamma)
// = a (dy - mean(dy)) - b (x - mean): both differences are taken first so
// dx stays accurate when inv_std is large.
void cpu_batchnorm_backward(Backend *backend, size_t rows, int channels, const float *x,
                            const float *dy, const float *gamma, const float *save_mean,
                            const float *save_inv_std, float *dx, float *dgamma, float *dbeta) {
    CPU_FOR_CHANNEL_BLOCKS(rows, channels) {
        const ChannelBlock block = channel_block(block_size, channels, b);
        const float *mean = save_mean + block.first, *inv_std = save_inv_std + block.first;
        double sum_dy[CPU_CHANNEL_BLOCK], sum_dy_xhat[CPU_CHANNEL_BLOCK];
        float a[CPU_CHANNEL_BLOCK], bx[CPU_CHANNEL_BLOCK], mean_dy[CPU_CHANNEL_BLOCK];
        for (int j = 0; j < block.width; j++) sum_dy[j] = sum_dy_xhat[j] = 0.0;
        for (size_t r = 0; r < rows; r++) {
            const float *x_row = x + r * channels + block.first;
            const float *dy_row = dy + r * channels + block.first;
#pragma omp simd
            for (int j = 0; j < block.width; j++) {
                sum_dy[j] += dy_row[j];
                sum_dy_xhat[j] += dy_row[j] * ((double)x_row[j] - mean[j]) * inv_std[j];
            }
        }
        for (int j = 0; j < block.width; j++) {
            const int c = block.first + j;
            a[j] = (float)((double)gamma[c] * inv_std[j]);
            bx[j] = (float)((double)gamma[c] * inv_std[j] * inv_std[j] * sum_dy_xhat[j] /
                            (double)rows);
            mean_dy[j] = (float)(sum_dy[j] / (double)rows);
            dgamma[c] += (float)sum_dy_xhat[j];
            dbeta[c] += (float)sum_dy[j];
        }
        for (size_t r = 0; r < rows; r++) {
            const float *x_row = x + r * channels + block.first;
            const float *dy_row = dy + r * channels + block.first;
            float *dx_row = dx + r * channels + block.first;
#pragma omp simd
            for (int j = 0; j < block.width; j++)
                dx_row[j] = a[j] * (dy_row[j] - mean_dy[j]) - bx[j] * (x_row[j] - mean[j]);
        }
    }
}

void cpu_bias_backward(Backend *backend, size_t rows, int channels, const float *dy,
                       float *dbias) {
    CPU_FOR_CHANNEL_BLOCKS(rows, channels) {
        const ChannelBlock block = channel_block(block_size, channels, b);
        double sums[CPU_CHANNEL_BLOCK];
        block_sums(rows, channels, dy, block, sums);
        for (int j = 0; j < block.width; j++) dbias[block.first + j] += (float)sums[j];
    }
}

void cpu_column_sum(Backend *backend, size_t rows, int channels, const float *x, float *y) {
    CPU_FOR_CHANNEL_BLOCKS(rows, channels) {
        const ChannelBlock block = channel_block(block_size, channels, b);
        double sums[CPU_CHANNEL_BLOCK];
        block_sums(rows, channels, x, block, sums);
        for (int j = 0; j < block.width; j++) y[block.first + j] = (float)sums[j];
    }
}

// y (N, C) = mean over the P pixels of x (N, P, C): one (sample, block)
// pair per task.
void cpu_avgpool_forward(Backend *backend, int batch, int pixels, int channels, const float *x,
                         float *y) {
    const int block_size = cpu_channel_block(backend, channels);
    const int blocks = (channels + block_size - 1) / block_size;
    const int tasks = batch * blocks;
    const int team = cpu_team(backend, (size_t)batch * pixels * channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int t = 0; t < tasks; t++) {
        const int n = t / blocks;
        const ChannelBlock block = channel_block(block_size, channels, t % blocks);
        const float *x_sample = x + (size_t)n * pixels * channels;
        double sums[CPU_CHANNEL_BLOCK];
        block_sums((size_t)pixels, channels, x_sample, block, sums);
        for (int j = 0; j < block.width; j++)
            y[(size_t)n * channels + block.first + j] = (float)(sums[j] / pixels);
    }
}
