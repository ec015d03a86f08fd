// The cuda backend's transformer ops besides attention (cuda_attention.cu):
// layer norm, the ViT token sequence, the LayerScale / drop-path residual
// add and token pooling, with the ref backend's formulas (backend.h).
// Row statistics, sums over rows and over the batch accumulate in double as
// ref's do; sums of parameter gradients over rows are the two-pass column
// sums of cuda_reduce.cuh (fixed order, no atomics), so runs repeat bit for
// bit. The copies, the residual add and the pooling evaluate ref's
// expressions in ref's order and give its results exactly.
#include <math.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_reduce.cuh"

namespace {

// ---- layer norm ------------------------------------------------------------------

// Threads of a layer-norm row block: ViT widths (384 .. 1536) give each
// thread 3 .. 12 channels.
constexpr int kRowThreads = 128;

unsigned int row_blocks(size_t rows) { return (unsigned int)(rows < 65535 ? rows : 65535); }

// One block per row: the mean, then the sum of squared deviations (two
// passes, double), then y in double as ref.
__global__ void layernorm_forward_kernel(size_t rows, int channels, const float *x,
                                         const float *gamma, const float *beta, float eps,
                                         float *y, float *mean, float *inv_std) {
    for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *x_row = x + r * channels;
        double total = 0.0;
        for (int c = threadIdx.x; c < channels; c += blockDim.x) total += x_row[c];
        const double m = block_sum(total) / channels;
        double squares = 0.0;
        for (int c = threadIdx.x; c < channels; c += blockDim.x)
            squares += (x_row[c] - m) * (x_row[c] - m);
        const double inverse = 1.0 / sqrt(block_sum(squares) / channels + eps);
        for (int c = threadIdx.x; c < channels; c += blockDim.x)
            y[r * channels + c] = (float)((x_row[c] - m) * inverse * gamma[c] + beta[c]);
        if (threadIdx.x == 0) {
            mean[r] = (float)m;
            inv_std[r] = (float)inverse;
        }
    }
}

// dx = inv_std (g - mean(g) - xhat mean(g xhat)) with g = dy gamma and
// xhat = (x - mean) inv_std, one block per row (ref's expression).
__global__ void layernorm_backward_kernel(size_t rows, int channels, const float *x,
                                          const float *dy, const float *gamma, const float *mean,
                                          const float *inv_std, float *dx) {
    for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *x_row = x + r * channels, *dy_row = dy + r * channels;
        double sum_g = 0.0, sum_g_xhat = 0.0;
        for (int c = threadIdx.x; c < channels; c += blockDim.x) {
            const double xhat = (x_row[c] - (double)mean[r]) * inv_std[r];
            const double g = (double)dy_row[c] * gamma[c];
            sum_g += g;
            sum_g_xhat += g * xhat;
        }
        sum_g = block_sum(sum_g);
        sum_g_xhat = block_sum(sum_g_xhat);
        for (int c = threadIdx.x; c < channels; c += blockDim.x) {
            const double xhat = (x_row[c] - (double)mean[r]) * inv_std[r];
            const double g = (double)dy_row[c] * gamma[c];
            dx[r * channels + c] =
                (float)(inv_std[r] * (g - sum_g / channels - xhat * sum_g_xhat / channels));
        }
    }
}

// dy xhat at (r, c): the terms of dgamma.
struct XhatGradient {
    const float *x, *dy, *mean, *inv_std;
    int channels;
    __device__ double operator()(size_t r, int c) const {
        const size_t i = r * channels + c;
        return dy[i] * ((x[i] - (double)mean[r]) * inv_std[r]);
    }
};

// ---- ViT token sequence -------------------------------------------------------------

// One element of tokens (B, 1 + R + P, C) per iteration.
__global__ void vit_tokens_forward_kernel(size_t n, int registers, int patches, int channels,
                                          const float *patch_embeddings, const float *cls,
                                          const float *cls_pos, const float *register_tokens,
                                          const float *patch_pos, float *tokens) {
    const int per_sample = 1 + registers + patches;
    GRID_STRIDE(i, n) {
        const int c = (int)(i % channels);
        const size_t row = i / channels;
        const int t = (int)(row % per_sample);
        const size_t b = row / per_sample;
        if (t == 0) {
            tokens[i] = cls_pos ? cls[c] + cls_pos[c] : cls[c];
        } else if (t <= registers) {
            tokens[i] = register_tokens[(size_t)(t - 1) * channels + c];
        } else {
            const size_t p = (size_t)(t - 1 - registers);
            const float embedding = patch_embeddings[(b * patches + p) * channels + c];
            tokens[i] = patch_pos ? embedding + patch_pos[p * channels + c] : embedding;
        }
    }
}

// dpatches (B, P, C) = the patch rows of dtokens.
__global__ void patch_gradient_kernel(size_t n, int registers, int patches, int channels,
                                      const float *dtokens, float *dpatch_embeddings) {
    const size_t sample_floats = (size_t)(1 + registers + patches) * channels;
    const size_t patch_floats = (size_t)patches * channels;
    GRID_STRIDE(i, n) {
        const size_t b = i / patch_floats;
        dpatch_embeddings[i] =
            dtokens[b * sample_floats + (size_t)(1 + registers) * channels + i % patch_floats];
    }
}

// ---- residual add with LayerScale and drop path ---------------------------------------

// The factor on element (b, c): sample_scale[b] gamma[c] in double, either
// absent (1), as ref.
__device__ double branch_factor(const float *gamma, const float *sample_scale, size_t b, int c) {
    return (gamma ? (double)gamma[c] : 1.0) * (sample_scale ? (double)sample_scale[b] : 1.0);
}

// y = x + factor branch (y may alias x: each element reads its own x first).
__global__ void residual_forward_kernel(size_t n, size_t rows_per_sample, int channels,
                                        const float *x, const float *branch, const float *gamma,
                                        const float *sample_scale, float *y) {
    GRID_STRIDE(i, n) {
        const size_t b = i / (rows_per_sample * channels);
        const double factor = branch_factor(gamma, sample_scale, b, (int)(i % channels));
        y[i] = (float)(x[i] + factor * branch[i]);
    }
}

__global__ void residual_backward_kernel(size_t n, size_t rows_per_sample, int channels,
                                         const float *dy, const float *gamma,
                                         const float *sample_scale, float *dbranch) {
    GRID_STRIDE(i, n) {
        const size_t b = i / (rows_per_sample * channels);
        const double factor = branch_factor(gamma, sample_scale, b, (int)(i % channels));
        dbranch[i] = (float)(factor * dy[i]);
    }
}

// sample_scale[b] dy branch at (r, c): the terms of dgamma.
struct ScaledProduct {
    const float *dy, *branch, *sample_scale;
    size_t rows_per_sample;
    int channels;
    __device__ double operator()(size_t r, int c) const {
        const size_t i = r * channels + c;
        return branch_factor(nullptr, sample_scale, r / rows_per_sample, c) * dy[i] * branch[i];
    }
};

// ---- token pooling -------------------------------------------------------------------

// One (sample, channel) per iteration: the tokens in order, in double.
__global__ void token_pool_forward_kernel(size_t n, int tokens, int channels, int first,
                                          int count, const float *x, float *y) {
    GRID_STRIDE(i, n) {
        const size_t b = i / channels, c = i % channels;
        double total = 0.0;
        for (int t = first; t < first + count; t++) total += x[(b * tokens + t) * channels + c];
        y[i] = (float)(total / count);
    }
}

__global__ void token_pool_backward_kernel(size_t n, int tokens, int channels, int first,
                                           int count, const float *dy, float *dx) {
    GRID_STRIDE(i, n) {
        const size_t row = i / channels;
        const int t = (int)(row % tokens);
        const int pooled = t >= first && t < first + count;
        dx[i] = pooled ? (float)((double)dy[row / tokens * channels + i % channels] / count)
                       : 0.0f;
    }
}

}  // namespace

extern "C" {

void cuda_layernorm_forward_launch(cudaStream_t stream, size_t rows, int channels,
                                   const float *x, const float *gamma, const float *beta,
                                   float eps, float *y, float *mean, float *inv_std) {
    if (rows == 0) return;
    layernorm_forward_kernel<<<row_blocks(rows), kRowThreads, 0, stream>>>(
        rows, channels, x, gamma, beta, eps, y, mean, inv_std);
    CUDA_CHECK_LAUNCH();
}

void cuda_layernorm_backward_launch(cudaStream_t stream, double *scratch, size_t rows,
                                    int channels, const float *x, const float *dy,
                                    const float *gamma, const float *mean, const float *inv_std,
                                    float *dx, float *dgamma, float *dbeta) {
    if (rows == 0) return;
    layernorm_backward_kernel<<<row_blocks(rows), kRowThreads, 0, stream>>>(
        rows, channels, x, dy, gamma, mean, inv_std, dx);
    CUDA_CHECK_LAUNCH();
    cuda_column_sums(stream, scratch, rows, channels,
                     XhatGradient{x, dy, mean, inv_std, channels}, dgamma, 1);
    cuda_column_sums(stream, scratch, rows, channels, StridedColumns{dy, (size_t)channels}, dbeta,
                     1);
}

void cuda_vit_tokens_forward_launch(cudaStream_t stream, int batch, int registers, int patches,
                                    int channels, const float *patch_embeddings,
                                    const float *cls, const float *cls_pos,
                                    const float *register_tokens, const float *patch_pos,
                                    float *tokens) {
    const size_t n = (size_t)batch * (1 + registers + patches) * channels;
    LAUNCH(vit_tokens_forward_kernel, n, stream, n, registers, patches, channels,
           patch_embeddings, cls, cls_pos, register_tokens, patch_pos, tokens);
}

// The batch sums are column sums of dtokens seen as (B, (1 + R + P) C):
// one per destination, over its stretch of columns.
void cuda_vit_tokens_backward_launch(cudaStream_t stream, double *scratch, int batch,
                                     int registers, int patches, int channels,
                                     const float *dtokens, float *dpatch_embeddings, float *dcls,
                                     float *dcls_pos, float *dregister_tokens,
                                     float *dpatch_pos) {
    const size_t stride = (size_t)(1 + registers + patches) * channels;
    cuda_column_sums(stream, scratch, batch, channels, StridedColumns{dtokens, stride}, dcls, 1);
    if (dcls_pos)
        cuda_column_sums(stream, scratch, batch, channels, StridedColumns{dtokens, stride},
                         dcls_pos, 1);
    if (registers)
        cuda_column_sums(stream, scratch, batch, registers * channels,
                         StridedColumns{dtokens + channels, stride}, dregister_tokens, 1);
    const float *patch_rows = dtokens + (size_t)(1 + registers) * channels;
    if (dpatch_pos)
        cuda_column_sums(stream, scratch, batch, patches * channels,
                         StridedColumns{patch_rows, stride}, dpatch_pos, 1);
    const size_t n = (size_t)batch * patches * channels;
    LAUNCH(patch_gradient_kernel, n, stream, n, registers, patches, channels, dtokens,
           dpatch_embeddings);
}

void cuda_residual_scale_add_forward_launch(cudaStream_t stream, int batch,
                                            size_t rows_per_sample, int channels, const float *x,
                                            const float *branch, const float *gamma,
                                            const float *sample_scale, float *y) {
    const size_t n = (size_t)batch * rows_per_sample * channels;
    LAUNCH(residual_forward_kernel, n, stream, n, rows_per_sample, channels, x, branch, gamma,
           sample_scale, y);
}

void cuda_residual_scale_add_backward_launch(cudaStream_t stream, double *scratch, int batch,
                                             size_t rows_per_sample, int channels,
                                             const float *branch, const float *dy,
                                             const float *gamma, const float *sample_scale,
                                             float *dbranch, float *dgamma) {
    if (gamma)
        cuda_column_sums(stream, scratch, (size_t)batch * rows_per_sample, channels,
                         ScaledProduct{dy, branch, sample_scale, rows_per_sample, channels},
                         dgamma, 1);
    const size_t n = (size_t)batch * rows_per_sample * channels;
    LAUNCH(residual_backward_kernel, n, stream, n, rows_per_sample, channels, dy, gamma,
           sample_scale, dbranch);
}

void cuda_token_pool_forward_launch(cudaStream_t stream, int batch, int tokens, int channels,
                                    int first, int count, const float *x, float *y) {
    const size_t n = (size_t)batch * channels;
    LAUNCH(token_pool_forward_kernel, n, stream, n, tokens, channels, first, count, x, y);
}

void cuda_token_pool_backward_launch(cudaStream_t stream, int batch, int tokens, int channels,
                                     int first, int count, const float *dy, float *dx) {
    const size_t n = (size_t)batch * tokens * channels;
    LAUNCH(token_pool_backward_kernel, n, stream, n, tokens, channels, first, count, dy, dx);
}

}  // extern "C"
