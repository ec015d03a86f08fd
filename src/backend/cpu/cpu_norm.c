// The cpu backend's simple per-channel reductions over rows of a (rows, C)
// matrix: bias gradient, column sums and global average pooling (batch norm
// is in cpu_batchnorm.c). Threads split the channels into blocks (see
// cpu_channel_block); each walks every row over its contiguous block, so no
// partial sums need scratch memory. Sums accumulate in double, as in ref
// (with AVX2, 8 channels at a time).
#include <math.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_vector_math.h"
#include "util/cpu.h"

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

// block_sums with AVX2, 8 channels at a time widened to double (the
// portable loop below is vectorised two doubles wide): the same sums.
VECTOR_MATH_TARGET static void block_sums_avx2(size_t rows, int channels, const float *x,
                                               ChannelBlock block, double *sums) {
    for (int j = 0; j < block.width; j += 8) {
        __m256d low = _mm256_setzero_pd(), high = _mm256_setzero_pd();
        const float *column = x + block.first + j;
        for (size_t r = 0; r < rows; r++) {
            const __m256 v = _mm256_loadu_ps(column + r * channels);
            low = _mm256_add_pd(low, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
            high = _mm256_add_pd(high, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
        }
        _mm256_storeu_pd(sums + j, low);
        _mm256_storeu_pd(sums + j + 4, high);
    }
}

// sums (width) = sum over rows of x (rows, C) in the block.
static void block_sums(size_t rows, int channels, const float *x, ChannelBlock block,
                       double *sums) {
    if (block.width % 8 == 0 && cpu_has_avx2()) {
        block_sums_avx2(rows, channels, x, block, sums);
        return;
    }
    for (int j = 0; j < block.width; j++) sums[j] = 0.0;
    for (size_t r = 0; r < rows; r++) {
        const float *x_row = x + r * channels + block.first;
#pragma omp simd
        for (int j = 0; j < block.width; j++) sums[j] += x_row[j];
    }
}

void cpu_bias_backward(Backend *backend, size_t rows, int channels, const Act *dy_act,
                       float *dbias) {
    const float *dy = (const float *)dy_act;
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
void cpu_avgpool_forward(Backend *backend, int batch, int pixels, int channels, const Act *x_act,
                         Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
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

// ---- statistics of synchronised batch norm (the per-channel finish is ref's) ------------------------------------------------

void cpu_batchnorm_centered_squares(Backend *backend, size_t rows, int channels, const Act *x_act,
                                    const float *mean, float *squares) {
    const float *x = (const float *)x_act;
    CPU_FOR_CHANNEL_BLOCKS(rows, channels) {
        const ChannelBlock block = channel_block(block_size, channels, b);
        double sums[CPU_CHANNEL_BLOCK];
        for (int j = 0; j < block.width; j++) sums[j] = 0.0;
        const float *center = mean + block.first;
        for (size_t r = 0; r < rows; r++) {
            const float *x_row = x + r * channels + block.first;
#pragma omp simd
            for (int j = 0; j < block.width; j++) {
                const double d = (double)x_row[j] - center[j];
                sums[j] += d * d;
            }
        }
        for (int j = 0; j < block.width; j++) squares[block.first + j] = (float)sums[j];
    }
}
