// The cuda backend's transformer ops besides attention (cuda_attention.cu):
// layer norm, the ViT token sequence, the LayerScale / drop-path residual
// add and token pooling, with the ref backend's formulas (backend.h).
// Row statistics, sums over rows and over the batch accumulate in double as
// ref's do; sums of parameter gradients over rows are the two-pass column
// sums of cuda_reduce.cuh (fixed order, no atomics), so runs repeat bit for
// bit. The copies, the residual add and the pooling evaluate ref's
// expressions in ref's order and give its results exactly. Activations in
// the storage type T of the compute dtype (cuda_act.cuh), each output
// rounded once.
#include <math.h>

#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_reduce.cuh"

namespace {

// ---- layer norm ------------------------------------------------------------------

// One warp per row, V channels per lane and load (cuda_act.cuh; ViT widths
// 384 .. 1536 give each lane 12 .. 48 channels), the row's sums combined
// with warp shuffles: a block per row waited on three block-wide barriers
// for a few loads per thread. The row is read from memory once; the later
// passes find it in L1.
constexpr int kRowsPerBlock = kThreads / 32;

unsigned int row_blocks(size_t rows) {
    return (unsigned int)clamp_blocks((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

// The rows of the calling warp, and its lane's first channel.
#define WARP_ROWS(r, rows)                                                                   \
    for (size_t r = blockIdx.x * (size_t)kRowsPerBlock + threadIdx.x / 32; r < (rows);      \
         r += (size_t)gridDim.x * kRowsPerBlock)
#define LANE_CHANNELS(c, channels) for (int c = (int)(threadIdx.x % 32) * V; c < (channels); c += 32 * V)

// The mean, then the sum of squared deviations (two passes, double), then
// y in double as ref.
template <typename T, int V>
__global__ void layernorm_forward_kernel(size_t rows, int channels, const T *x,
                                         const float *gamma, const float *beta, float eps, T *y,
                                         float *mean, float *inv_std) {
    WARP_ROWS(r, rows) {
        const T *x_row = x + r * channels;
        double total = 0.0;
        LANE_CHANNELS(c, channels) {
            float xv[V];
            act_load_vector<T, V>(x_row + c, xv);
            for (int v = 0; v < V; v++) total += xv[v];
        }
        const double m = warp_sum(total) / channels;
        double squares = 0.0;
        LANE_CHANNELS(c, channels) {
            float xv[V];
            act_load_vector<T, V>(x_row + c, xv);
            for (int v = 0; v < V; v++) squares += (xv[v] - m) * (xv[v] - m);
        }
        const double inverse = 1.0 / sqrt(warp_sum(squares) / channels + eps);
        LANE_CHANNELS(c, channels) {
            float xv[V], out[V];
            act_load_vector<T, V>(x_row + c, xv);
            for (int v = 0; v < V; v++)
                out[v] = (float)((xv[v] - m) * inverse * gamma[c + v] + beta[c + v]);
            act_store_vector<T, V>(y + r * channels + c, out);
        }
        if (threadIdx.x % 32 == 0) {
            mean[r] = (float)m;
            inv_std[r] = (float)inverse;
        }
    }
}

// dx = inv_std (g - mean(g) - xhat mean(g xhat)) with g = dy gamma and
// xhat = (x - mean) inv_std (ref's expression); accumulate adds it to dx's
// value in double, rounded once (ref's).
template <typename T, int V>
__global__ void layernorm_backward_kernel(size_t rows, int channels, const T *x, const T *dy,
                                          const float *gamma, const float *mean,
                                          const float *inv_std, T *dx, int accumulate) {
    WARP_ROWS(r, rows) {
        const T *x_row = x + r * channels, *dy_row = dy + r * channels;
        double sum_g = 0.0, sum_g_xhat = 0.0;
        LANE_CHANNELS(c, channels) {
            float xv[V], dyv[V];
            act_load_vector<T, V>(x_row + c, xv);
            act_load_vector<T, V>(dy_row + c, dyv);
            for (int v = 0; v < V; v++) {
                const double xhat = (xv[v] - (double)mean[r]) * inv_std[r];
                const double g = (double)dyv[v] * gamma[c + v];
                sum_g += g;
                sum_g_xhat += g * xhat;
            }
        }
        sum_g = warp_sum(sum_g);
        sum_g_xhat = warp_sum(sum_g_xhat);
        LANE_CHANNELS(c, channels) {
            float xv[V], dyv[V], before[V] = {0}, out[V];
            act_load_vector<T, V>(x_row + c, xv);
            act_load_vector<T, V>(dy_row + c, dyv);
            if (accumulate) act_load_vector<T, V>(dx + r * channels + c, before);
            for (int v = 0; v < V; v++) {
                const double xhat = (xv[v] - (double)mean[r]) * inv_std[r];
                const double g = (double)dyv[v] * gamma[c + v];
                const double value =
                    inv_std[r] * (g - sum_g / channels - xhat * sum_g_xhat / channels);
                out[v] = (float)(accumulate ? before[v] + value : value);
            }
            act_store_vector<T, V>(dx + r * channels + c, out);
        }
    }
}

// dy xhat at (r, c): the terms of dgamma.
template <typename T>
struct XhatGradient {
    const T *x, *dy;
    const float *mean, *inv_std;
    int channels;
    __device__ double operator()(size_t r, int c) const {
        const size_t i = r * channels + c;
        return act_load(dy[i]) * ((act_load(x[i]) - (double)mean[r]) * inv_std[r]);
    }
};

// ---- ViT token sequence -------------------------------------------------------------

// One element of tokens (B, 1 + R + P, C) per iteration.
template <typename T>
__global__ void vit_tokens_forward_kernel(size_t n, int registers, int patches, int channels,
                                          const T *patch_embeddings, const float *cls,
                                          const float *cls_pos, const float *register_tokens,
                                          const float *patch_pos, T *tokens) {
    const int per_sample = 1 + registers + patches;
    GRID_STRIDE(i, n) {
        const int c = (int)(i % channels);
        const size_t row = i / channels;
        const int t = (int)(row % per_sample);
        const size_t b = row / per_sample;
        if (t == 0) {
            tokens[i] = act_store<T>(cls_pos ? cls[c] + cls_pos[c] : cls[c]);
        } else if (t <= registers) {
            tokens[i] = act_store<T>(register_tokens[(size_t)(t - 1) * channels + c]);
        } else {
            const size_t p = (size_t)(t - 1 - registers);
            const float embedding = act_load(patch_embeddings[(b * patches + p) * channels + c]);
            tokens[i] =
                act_store<T>(patch_pos ? embedding + patch_pos[p * channels + c] : embedding);
        }
    }
}

// dpatches (B, P, C) = the patch rows of dtokens.
template <typename T>
__global__ void patch_gradient_kernel(size_t n, int registers, int patches, int channels,
                                      const T *dtokens, T *dpatch_embeddings) {
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

// y = x + factor branch (y may alias x: each thread reads its own x first),
// V channels a thread on a ChannelGrid (cuda_grid.cuh): the sample's index
// once a row, no division per element.
template <typename T, int V>
__global__ void residual_forward_kernel(size_t rows, size_t rows_per_sample, int channels,
                                        const T *x, const T *branch, const float *gamma,
                                        const float *sample_scale, T *y) {
    const int column = blockIdx.x * blockDim.x + threadIdx.x;
    if (column >= channels / V) return;
    const int c0 = column * V;
    CHANNEL_ROWS(r, rows) {
        const size_t b = r / rows_per_sample, i = r * channels + c0;
        float xv[V], bv[V], out[V];
        act_load_vector<T, V>(x + i, xv);
        act_load_vector<T, V>(branch + i, bv);
        for (int v = 0; v < V; v++)
            out[v] = (float)(xv[v] + branch_factor(gamma, sample_scale, b, c0 + v) * bv[v]);
        act_store_vector<T, V>(y + i, out);
    }
}

// residual_forward_kernel's y, then layernorm_forward_kernel over it: a
// warp per row writes y (each element rounded as the residual kernel rounds
// it) and sums it in its first pass; the norm's other passes read back the
// lane's own stores (cached), so y goes to memory once and is not read again.
template <typename T, int V>
__global__ void residual_layernorm_forward_kernel(size_t rows, size_t rows_per_sample,
                                                  int channels, const T *x, const T *branch,
                                                  const float *gamma, const float *sample_scale,
                                                  T *y, const float *ln_gamma,
                                                  const float *ln_beta, float eps, T *norm_out,
                                                  float *mean, float *inv_std) {
    WARP_ROWS(r, rows) {
        const size_t b = r / rows_per_sample, row = r * channels;
        double total = 0.0;
        LANE_CHANNELS(c, channels) {
            float xv[V], bv[V], yv[V];
            act_load_vector<T, V>(x + row + c, xv);
            act_load_vector<T, V>(branch + row + c, bv);
            for (int v = 0; v < V; v++)
                yv[v] = act_load(act_store<T>(
                    (float)(xv[v] + branch_factor(gamma, sample_scale, b, c + v) * bv[v])));
            act_store_vector<T, V>(y + row + c, yv);
            for (int v = 0; v < V; v++) total += yv[v];
        }
        const double m = warp_sum(total) / channels;
        double squares = 0.0;
        LANE_CHANNELS(c, channels) {
            float yv[V];
            act_load_vector<T, V>(y + row + c, yv);
            for (int v = 0; v < V; v++) squares += (yv[v] - m) * (yv[v] - m);
        }
        const double inverse = 1.0 / sqrt(warp_sum(squares) / channels + eps);
        LANE_CHANNELS(c, channels) {
            float yv[V], out[V];
            act_load_vector<T, V>(y + row + c, yv);
            for (int v = 0; v < V; v++)
                out[v] = (float)((yv[v] - m) * inverse * ln_gamma[c + v] + ln_beta[c + v]);
            act_store_vector<T, V>(norm_out + row + c, out);
        }
        if (threadIdx.x % 32 == 0) {
            mean[r] = (float)m;
            inv_std[r] = (float)inverse;
        }
    }
}

// dbranch = factor dy, as residual_forward_kernel walks its grid.
template <typename T, int V>
__global__ void residual_backward_kernel(size_t rows, size_t rows_per_sample, int channels,
                                         const T *dy, const float *gamma,
                                         const float *sample_scale, T *dbranch) {
    const int column = blockIdx.x * blockDim.x + threadIdx.x;
    if (column >= channels / V) return;
    const int c0 = column * V;
    CHANNEL_ROWS(r, rows) {
        const size_t b = r / rows_per_sample, i = r * channels + c0;
        float dyv[V], out[V];
        act_load_vector<T, V>(dy + i, dyv);
        for (int v = 0; v < V; v++)
            out[v] = (float)(branch_factor(gamma, sample_scale, b, c0 + v) * dyv[v]);
        act_store_vector<T, V>(dbranch + i, out);
    }
}

// One launch of a residual kernel over (rows, channels): V channels a
// thread where channels and the pointers allow.
template <typename T, typename Launch>
void residual_grid_launch(size_t rows, int channels, std::initializer_list<const void *> pointers,
                          Launch &&launch) {
    if (rows == 0 || channels == 0) return;
    act_width_dispatch<T>(act_vector_fits<T>(channels, act_vector_width<T>(), pointers),
                          [&](auto width) {
                              const ChannelGrid grid =
                                  channel_grid(channels, decltype(width)::value);
                              if (cuda_queue_point())
                                  launch(width, channel_row_blocks(grid, rows), grid.block);
                              CUDA_CHECK_LAUNCH();
                          });
}

// sample_scale[b] dy branch at (r, c): the terms of dgamma.
template <typename T>
struct ScaledProduct {
    const T *dy, *branch;
    const float *sample_scale;
    size_t rows_per_sample;
    int channels;
    __device__ double operator()(size_t r, int c) const {
        const size_t i = r * channels + c;
        return branch_factor(nullptr, sample_scale, r / rows_per_sample, c) * act_load(dy[i]) *
               act_load(branch[i]);
    }
};

// ---- token pooling -------------------------------------------------------------------

// One (sample, channel) per iteration: the tokens in order, in double.
template <typename T>
__global__ void token_pool_forward_kernel(size_t n, int tokens, int channels, int first,
                                          int count, const T *x, T *y) {
    GRID_STRIDE(i, n) {
        const size_t b = i / channels, c = i % channels;
        double total = 0.0;
        for (int t = first; t < first + count; t++)
            total += act_load(x[(b * tokens + t) * channels + c]);
        y[i] = act_store<T>((float)(total / count));
    }
}

template <typename T>
__global__ void token_pool_backward_kernel(size_t n, int tokens, int channels, int first,
                                           int count, const T *dy, T *dx) {
    GRID_STRIDE(i, n) {
        const size_t row = i / channels;
        const int t = (int)(row % tokens);
        const int pooled = t >= first && t < first + count;
        dx[i] = act_store<T>(
            pooled ? (float)((double)act_load(dy[row / tokens * channels + i % channels]) / count)
                   : 0.0f);
    }
}

}  // namespace

extern "C" {

void cuda_layernorm_forward_launch(cudaStream_t stream, ComputeDtype dtype, size_t rows,
                                   int channels, const void *x_any, const float *gamma,
                                   const float *beta, float eps, void *y_any, float *mean,
                                   float *inv_std) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *x = (const T *)x_any;
        T *y = (T *)y_any;
        if (rows == 0) return;
        act_width_dispatch<T>(act_vector_fits<T>(channels, act_vector_width<T>(), {x, y}),
                              [&](auto width) {
                                  constexpr int V = decltype(width)::value;
                                  if (cuda_queue_point())
                                      layernorm_forward_kernel<T, V>
                                          <<<row_blocks(rows), kThreads, 0, stream>>>(
                                              rows, channels, x, gamma, beta, eps, y, mean,
                                              inv_std);
                                  CUDA_CHECK_LAUNCH();
                              });
    });
}

void cuda_layernorm_backward_launch(cudaStream_t stream, ComputeDtype dtype, double *scratch,
                                    size_t rows, int channels, const void *x_any,
                                    const void *dy_any, const float *gamma, const float *mean,
                                    const float *inv_std, void *dx_any, int accumulate,
                                    float *dgamma, float *dbeta) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *x = (const T *)x_any;
        const T *dy = (const T *)dy_any;
        T *dx = (T *)dx_any;
        if (rows == 0) return;
        act_width_dispatch<T>(act_vector_fits<T>(channels, act_vector_width<T>(), {x, dy, dx}),
                              [&](auto width) {
                                  constexpr int V = decltype(width)::value;
                                  if (cuda_queue_point())
                                      layernorm_backward_kernel<T, V>
                                          <<<row_blocks(rows), kThreads, 0, stream>>>(
                                              rows, channels, x, dy, gamma, mean, inv_std, dx,
                                              accumulate);
                                  CUDA_CHECK_LAUNCH();
                              });
        cuda_column_sums(stream, scratch, rows, channels,
                         XhatGradient<T>{x, dy, mean, inv_std, channels}, dgamma, 1);
        cuda_column_sums(stream, scratch, rows, channels, StridedColumns<T>{dy, (size_t)channels},
                         dbeta, 1);
    });
}

void cuda_vit_tokens_forward_launch(cudaStream_t stream, ComputeDtype dtype, int batch,
                                    int registers, int patches, int channels,
                                    const void *patch_embeddings_any, const float *cls,
                                    const float *cls_pos, const float *register_tokens,
                                    const float *patch_pos, void *tokens_any) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *patch_embeddings = (const T *)patch_embeddings_any;
        T *tokens = (T *)tokens_any;
        const size_t n = (size_t)batch * (1 + registers + patches) * channels;
        LAUNCH(vit_tokens_forward_kernel<T>, n, stream, n, registers, patches, channels,
               patch_embeddings, cls, cls_pos, register_tokens, patch_pos, tokens);
    });
}

// The batch sums are column sums of dtokens seen as (B, (1 + R + P) C):
// one per destination, over its stretch of columns.
void cuda_vit_tokens_backward_launch(cudaStream_t stream, ComputeDtype dtype, double *scratch,
                                     int batch, int registers, int patches, int channels,
                                     const void *dtokens_any, void *dpatch_embeddings_any,
                                     float *dcls, float *dcls_pos, float *dregister_tokens,
                                     float *dpatch_pos) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *dtokens = (const T *)dtokens_any;
        T *dpatch_embeddings = (T *)dpatch_embeddings_any;
        const size_t stride = (size_t)(1 + registers + patches) * channels;
        cuda_column_sums(stream, scratch, batch, channels, StridedColumns<T>{dtokens, stride}, dcls,
                         1);
        if (dcls_pos)
            cuda_column_sums(stream, scratch, batch, channels, StridedColumns<T>{dtokens, stride},
                             dcls_pos, 1);
        if (registers)
            cuda_column_sums(stream, scratch, batch, registers * channels,
                             StridedColumns<T>{dtokens + channels, stride}, dregister_tokens, 1);
        const T *patch_rows = dtokens + (size_t)(1 + registers) * channels;
        if (dpatch_pos)
            cuda_column_sums(stream, scratch, batch, patches * channels,
                             StridedColumns<T>{patch_rows, stride}, dpatch_pos, 1);
        const size_t n = (size_t)batch * patches * channels;
        LAUNCH(patch_gradient_kernel<T>, n, stream, n, registers, patches, channels, dtokens,
               dpatch_embeddings);
    });
}

void cuda_residual_scale_add_forward_launch(cudaStream_t stream, ComputeDtype dtype, int batch,
                                            size_t rows_per_sample, int channels, const void *x_any,
                                            const void *branch_any, const float *gamma,
                                            const float *sample_scale, void *y_any) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *x = (const T *)x_any;
        const T *branch = (const T *)branch_any;
        T *y = (T *)y_any;
        residual_grid_launch<T>((size_t)batch * rows_per_sample, channels, {x, branch, y},
                                [&](auto width, dim3 blocks, dim3 block) {
                                    residual_forward_kernel<T, decltype(width)::value>
                                        <<<blocks, block, 0, stream>>>(
                                            (size_t)batch * rows_per_sample, rows_per_sample,
                                            channels, x, branch, gamma, sample_scale, y);
                                });
    });
}

void cuda_residual_layernorm_forward_launch(cudaStream_t stream, ComputeDtype dtype, int batch,
                                            size_t rows_per_sample, int channels,
                                            const void *x_any, const void *branch_any,
                                            const float *gamma, const float *sample_scale,
                                            void *y_any, const float *ln_gamma,
                                            const float *ln_beta, float eps, void *norm_out_any,
                                            float *mean, float *inv_std) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *x = (const T *)x_any, *branch = (const T *)branch_any;
        T *y = (T *)y_any, *norm_out = (T *)norm_out_any;
        const size_t rows = (size_t)batch * rows_per_sample;
        if (rows == 0) return;
        const bool fits =
            act_vector_fits<T>(channels, act_vector_width<T>(), {x, branch, y, norm_out});
        act_width_dispatch<T>(fits, [&](auto width) {
            constexpr int V = decltype(width)::value;
            if (cuda_queue_point())
                residual_layernorm_forward_kernel<T, V><<<row_blocks(rows), kThreads, 0, stream>>>(
                    rows, rows_per_sample, channels, x, branch, gamma, sample_scale, y, ln_gamma,
                    ln_beta, eps, norm_out, mean, inv_std);
            CUDA_CHECK_LAUNCH();
        });
    });
}

void cuda_residual_scale_add_backward_launch(cudaStream_t stream, ComputeDtype dtype,
                                             double *scratch, int batch, size_t rows_per_sample,
                                             int channels, const void *branch_any,
                                             const void *dy_any, const float *gamma,
                                             const float *sample_scale, void *dbranch_any,
                                             float *dgamma) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *branch = (const T *)branch_any;
        const T *dy = (const T *)dy_any;
        T *dbranch = (T *)dbranch_any;
        if (gamma)
            cuda_column_sums(stream, scratch, (size_t)batch * rows_per_sample, channels,
                             ScaledProduct<T>{dy, branch, sample_scale, rows_per_sample, channels},
                             dgamma, 1);
        residual_grid_launch<T>((size_t)batch * rows_per_sample, channels, {dy, dbranch},
                                [&](auto width, dim3 blocks, dim3 block) {
                                    residual_backward_kernel<T, decltype(width)::value>
                                        <<<blocks, block, 0, stream>>>(
                                            (size_t)batch * rows_per_sample, rows_per_sample,
                                            channels, dy, gamma, sample_scale, dbranch);
                                });
    });
}

void cuda_token_pool_forward_launch(cudaStream_t stream, ComputeDtype dtype, int batch, int tokens,
                                    int channels, int first, int count, const void *x_any,
                                    void *y_any) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *x = (const T *)x_any;
        T *y = (T *)y_any;
        const size_t n = (size_t)batch * channels;
        LAUNCH(token_pool_forward_kernel<T>, n, stream, n, tokens, channels, first, count, x, y);
    });
}

void cuda_token_pool_backward_launch(cudaStream_t stream, ComputeDtype dtype, int batch, int tokens,
                                     int channels, int first, int count, const void *dy_any,
                                     void *dx_any) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        const T *dy = (const T *)dy_any;
        T *dx = (T *)dx_any;
        const size_t n = (size_t)batch * tokens * channels;
        LAUNCH(token_pool_backward_kernel<T>, n, stream, n, tokens, channels, first, count, dy, dx);
    });
}

}  // extern "C"
