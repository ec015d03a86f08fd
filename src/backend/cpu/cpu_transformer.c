// The cpu backend's transformer ops besides attention (cpu_attention.c):
// layer norm, the ViT token sequence, the LayerScale / drop-path residual
// add and token pooling. Row-wise work is split across threads by rows;
// per-channel sums over all rows (parameter gradients) by channel blocks,
// each thread walking every row over its block (as cpu_norm.c), so no
// partial results need scratch memory. Sums accumulate in double, as in ref.
#include <math.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_vector_math.h"
#include "util/cpu.h"

// Declares team and r (the row index); rows split across threads.
#define CPU_FOR_ROWS(rows, channels)                                              \
    const int team = cpu_team(backend, (size_t)(rows) * (size_t)(channels));     \
    _Pragma("omp parallel for num_threads(team) schedule(static)")                \
    for (size_t r = 0; r < (size_t)(rows); r++)

// Declares block_size, blocks, team and b (the block index of channels
// [b * block_size, min(C, (b + 1) * block_size))).
#define CPU_FOR_CHANNEL_BLOCKS(rows, channels)                                    \
    const int block_size = cpu_channel_block(backend, channels);                  \
    const int blocks = (channels + block_size - 1) / block_size;                  \
    const int team = cpu_team(backend, (size_t)(rows) * (size_t)(channels));     \
    _Pragma("omp parallel for num_threads(team) schedule(static)")                \
    for (int b = 0; b < blocks; b++)

static int block_width(int block_size, int channels, int b) {
    const int width = channels - b * block_size;
    return width < block_size ? width : block_size;
}

// ---- layer norm ----------------------------------------------------------------------
// With AVX2 (channels a multiple of 8: ConvNeXt's rows, ViTs' tokens) the
// row sums run four doubles wide (the portable loops two), in the same
// double precision; the rest is the same fp32 arithmetic.

// The sum of x (n) and of (x - center)^2, in double.
VECTOR_MATH_TARGET static double row_sum_avx2(int n, const float *x, double center, int squares) {
    __m256d low = _mm256_setzero_pd(), high = _mm256_setzero_pd();
    const __m256d shift = _mm256_set1_pd(center);
    for (int c = 0; c < n; c += 8) {
        const __m256 v = _mm256_loadu_ps(x + c);
        __m256d a = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), shift);
        __m256d b = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), shift);
        if (squares) {
            a = _mm256_mul_pd(a, a);
            b = _mm256_mul_pd(b, b);
        }
        low = _mm256_add_pd(low, a);
        high = _mm256_add_pd(high, b);
    }
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(low, high));
    return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

// sum g and sum g xhat with g = dy gamma, xhat = (x - mean) inverse (each
// factor in fp32 as the portable loop rounds it), in double.
VECTOR_MATH_TARGET static void row_backward_sums_avx2(int n, const float *x, const float *dy,
                                                      const float *gamma, float mean,
                                                      float inverse, double *sum_g,
                                                      double *sum_g_xhat) {
    __m256d g_low = _mm256_setzero_pd(), g_high = g_low, gx_low = g_low, gx_high = g_low;
    const __m256 m = _mm256_set1_ps(mean), inv = _mm256_set1_ps(inverse);
    for (int c = 0; c < n; c += 8) {
        const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(dy + c), _mm256_loadu_ps(gamma + c));
        const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + c), m), inv);
        const __m256d g0 = _mm256_cvtps_pd(_mm256_castps256_ps128(g));
        const __m256d g1 = _mm256_cvtps_pd(_mm256_extractf128_ps(g, 1));
        g_low = _mm256_add_pd(g_low, g0);
        g_high = _mm256_add_pd(g_high, g1);
        gx_low = _mm256_add_pd(gx_low,
                               _mm256_mul_pd(g0, _mm256_cvtps_pd(_mm256_castps256_ps128(xhat))));
        gx_high = _mm256_add_pd(gx_high,
                                _mm256_mul_pd(g1, _mm256_cvtps_pd(_mm256_extractf128_ps(xhat, 1))));
    }
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(g_low, g_high));
    *sum_g = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    _mm256_storeu_pd(lanes, _mm256_add_pd(gx_low, gx_high));
    *sum_g_xhat = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

// One row of a channel block into the sums of dbeta (dy) and dgamma (dy xhat).
VECTOR_MATH_TARGET static void channel_sums_avx2(int width, const float *x, const float *dy,
                                                 float mean, float inverse, double *sum_dy,
                                                 double *sum_dy_xhat) {
    const __m256 m = _mm256_set1_ps(mean), inv = _mm256_set1_ps(inverse);
    for (int j = 0; j < width; j += 8) {
        const __m256 g = _mm256_loadu_ps(dy + j);
        const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), m), inv);
        const __m256d g0 = _mm256_cvtps_pd(_mm256_castps256_ps128(g));
        const __m256d g1 = _mm256_cvtps_pd(_mm256_extractf128_ps(g, 1));
        const __m256d x0 = _mm256_cvtps_pd(_mm256_castps256_ps128(xhat));
        const __m256d x1 = _mm256_cvtps_pd(_mm256_extractf128_ps(xhat, 1));
        _mm256_storeu_pd(sum_dy + j, _mm256_add_pd(_mm256_loadu_pd(sum_dy + j), g0));
        _mm256_storeu_pd(sum_dy + j + 4, _mm256_add_pd(_mm256_loadu_pd(sum_dy + j + 4), g1));
        _mm256_storeu_pd(sum_dy_xhat + j,
                         _mm256_add_pd(_mm256_loadu_pd(sum_dy_xhat + j), _mm256_mul_pd(g0, x0)));
        _mm256_storeu_pd(sum_dy_xhat + j + 4, _mm256_add_pd(_mm256_loadu_pd(sum_dy_xhat + j + 4),
                                                            _mm256_mul_pd(g1, x1)));
    }
}

void cpu_layernorm_forward(Backend *backend, size_t rows, int channels, const Act *x_act,
                           const float *gamma, const float *beta, float eps, Act *y_act,
                           float *mean, float *inv_std) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const int avx2 = channels % 8 == 0 && cpu_has_avx2();
    CPU_FOR_ROWS(rows, channels) {
        const float *x_row = x + r * channels;
        float *y_row = y + r * channels;
        double total = 0.0, squares = 0.0;
        if (avx2) {
            total = row_sum_avx2(channels, x_row, 0.0, 0);
        } else {
#pragma omp simd reduction(+ : total)
            for (int c = 0; c < channels; c++) total += x_row[c];
        }
        const double m = total / channels;
        if (avx2) {
            squares = row_sum_avx2(channels, x_row, m, 1);
        } else {
#pragma omp simd reduction(+ : squares)
            for (int c = 0; c < channels; c++) squares += (x_row[c] - m) * (x_row[c] - m);
        }
        const float row_mean = (float)m, inverse = (float)(1.0 / sqrt(squares / channels + eps));
#pragma omp simd
        for (int c = 0; c < channels; c++)
            y_row[c] = (x_row[c] - row_mean) * inverse * gamma[c] + beta[c];
        mean[r] = row_mean;
        inv_std[r] = inverse;
    }
}

// dx per row (rows split), then dgamma / dbeta per channel block (see ref).
void cpu_layernorm_backward(Backend *backend, size_t rows, int channels, const Act *x_act,
                            const Act *dy_act, const float *gamma, const float *mean,
                            const float *inv_std, Act *dx_act, int accumulate, float *dgamma,
                            float *dbeta) {
    const float *x = (const float *)x_act;
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    const int avx2 = channels % 8 == 0 && cpu_has_avx2();
    {
        CPU_FOR_ROWS(rows, channels) {
            const float *x_row = x + r * channels, *dy_row = dy + r * channels;
            float *dx_row = dx + r * channels;
            const float row_mean = mean[r], inverse = inv_std[r];
            double sum_g = 0.0, sum_g_xhat = 0.0;
            if (avx2) {
                row_backward_sums_avx2(channels, x_row, dy_row, gamma, row_mean, inverse, &sum_g,
                                       &sum_g_xhat);
            } else {
#pragma omp simd reduction(+ : sum_g, sum_g_xhat)
                for (int c = 0; c < channels; c++) {
                    const float g = dy_row[c] * gamma[c];
                    sum_g += g;
                    sum_g_xhat += (double)g * ((x_row[c] - row_mean) * inverse);
                }
            }
            const float mean_g = (float)(sum_g / channels);
            const float mean_g_xhat = (float)(sum_g_xhat / channels);
            if (accumulate) {
#pragma omp simd
                for (int c = 0; c < channels; c++) {
                    const float xhat = (x_row[c] - row_mean) * inverse;
                    dx_row[c] += inverse * (dy_row[c] * gamma[c] - mean_g - xhat * mean_g_xhat);
                }
            } else {
#pragma omp simd
                for (int c = 0; c < channels; c++) {
                    const float xhat = (x_row[c] - row_mean) * inverse;
                    dx_row[c] = inverse * (dy_row[c] * gamma[c] - mean_g - xhat * mean_g_xhat);
                }
            }
        }
    }
    CPU_FOR_CHANNEL_BLOCKS(rows, channels) {
        const int first = b * block_size, width = block_width(block_size, channels, b);
        double sum_dy[CPU_CHANNEL_BLOCK] = {0}, sum_dy_xhat[CPU_CHANNEL_BLOCK] = {0};
        for (size_t r = 0; r < rows; r++) {
            const float *x_row = x + r * channels + first, *dy_row = dy + r * channels + first;
            const float row_mean = mean[r], inverse = inv_std[r];
            if (avx2) {
                channel_sums_avx2(width, x_row, dy_row, row_mean, inverse, sum_dy, sum_dy_xhat);
                continue;
            }
#pragma omp simd
            for (int j = 0; j < width; j++) {
                sum_dy[j] += dy_row[j];
                sum_dy_xhat[j] += (double)dy_row[j] * ((x_row[j] - row_mean) * inverse);
            }
        }
        for (int j = 0; j < width; j++) {
            dgamma[first + j] += (float)sum_dy_xhat[j];
            dbeta[first + j] += (float)sum_dy[j];
        }
    }
}

// ---- ViT token sequence --------------------------------------------------------------

// One row (sample b, token t) of the token sequence per iteration.
void cpu_vit_tokens_forward(Backend *backend, int batch, int registers, int patches,
                            int channels, const Act *patch_embeddings_act, const float *cls,
                            const float *cls_pos, const float *register_tokens,
                            const float *patch_pos, Act *tokens_act) {
    const float *patch_embeddings = (const float *)patch_embeddings_act;
    float *tokens = (float *)tokens_act;
    const int per_sample = 1 + registers + patches;
    CPU_FOR_ROWS((size_t)batch * per_sample, channels) {
        const int b = (int)(r / per_sample), t = (int)(r % per_sample);
        float *out = tokens + r * channels;
        if (t == 0) {
#pragma omp simd
            for (int c = 0; c < channels; c++) out[c] = cls_pos ? cls[c] + cls_pos[c] : cls[c];
        } else if (t <= registers) {
            const float *reg = register_tokens + (size_t)(t - 1) * channels;
#pragma omp simd
            for (int c = 0; c < channels; c++) out[c] = reg[c];
        } else {
            const size_t p = (size_t)(t - 1 - registers);
            const float *in = patch_embeddings + ((size_t)b * patches + p) * channels;
            if (!patch_pos) {  // RoPE models: no learned positions
#pragma omp simd
                for (int c = 0; c < channels; c++) out[c] = in[c];
                continue;
            }
            const float *pos = patch_pos + p * channels;
#pragma omp simd
            for (int c = 0; c < channels; c++) out[c] = in[c] + pos[c];
        }
    }
}

// The batch sums of the positions' gradients: one task per (token, channel
// block), summing over the batch in double.
void cpu_vit_tokens_backward(Backend *backend, int batch, int registers, int patches,
                             int channels, const Act *dtokens_act, Act *dpatch_embeddings_act,
                             float *dcls, float *dcls_pos, float *dregister_tokens,
                             float *dpatch_pos) {
    const float *dtokens = (const float *)dtokens_act;
    float *dpatch_embeddings = (float *)dpatch_embeddings_act;
    const int per_sample = 1 + registers + patches;
    const size_t sample_floats = (size_t)per_sample * channels;
    {
        CPU_FOR_ROWS((size_t)batch * patches, channels) {
            const size_t b = r / patches, p = r % patches;
            const float *in = dtokens + b * sample_floats + (1 + registers + p) * channels;
            float *out = dpatch_embeddings + r * channels;
#pragma omp simd
            for (int c = 0; c < channels; c++) out[c] = in[c];
        }
    }
    // Without patch positions only the class and register rows are summed.
    CPU_FOR_ROWS(dpatch_pos ? per_sample : 1 + registers, channels) {
        double sums[CPU_CHANNEL_BLOCK];
        for (int first = 0; first < channels; first += CPU_CHANNEL_BLOCK) {
            const int width = block_width(CPU_CHANNEL_BLOCK, channels, first / CPU_CHANNEL_BLOCK);
            for (int j = 0; j < width; j++) sums[j] = 0.0;
            for (int b = 0; b < batch; b++) {
                const float *row = dtokens + b * sample_floats + r * channels + first;
#pragma omp simd
                for (int j = 0; j < width; j++) sums[j] += row[j];
            }
            for (int j = 0; j < width; j++) {
                const float total = (float)sums[j];
                const int c = first + j;
                if (r == 0) {
                    dcls[c] += total;
                    if (dcls_pos) dcls_pos[c] += total;
                } else if ((int)r <= registers) {
                    dregister_tokens[(r - 1) * channels + c] += total;
                } else {
                    dpatch_pos[(r - 1 - registers) * channels + c] += total;
                }
            }
        }
    }
}

// ---- residual add with LayerScale and drop path ----------------------------------------

// sums (width) += (scale dy) branch per channel, the product in double.
VECTOR_MATH_TARGET static void scaled_product_sums_avx2(int width, float scale, const float *dy,
                                                        const float *branch, double *sums) {
    const __m256 s = _mm256_set1_ps(scale);
    for (int j = 0; j < width; j += 8) {
        const __m256 g = _mm256_mul_ps(s, _mm256_loadu_ps(dy + j));
        const __m256 v = _mm256_loadu_ps(branch + j);
        const __m256d low = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(g)),
                                          _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
        const __m256d high = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(g, 1)),
                                           _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
        _mm256_storeu_pd(sums + j, _mm256_add_pd(_mm256_loadu_pd(sums + j), low));
        _mm256_storeu_pd(sums + j + 4, _mm256_add_pd(_mm256_loadu_pd(sums + j + 4), high));
    }
}

void cpu_residual_scale_add_forward(Backend *backend, int batch, size_t rows_per_sample,
                                    int channels, const Act *x_act, const Act *branch_act,
                                    const float *gamma, const float *sample_scale, Act *y_act) {
    const float *x = (const float *)x_act;
    const float *branch = (const float *)branch_act;
    float *y = (float *)y_act;
    CPU_FOR_ROWS((size_t)batch * rows_per_sample, channels) {
        const float scale = sample_scale ? sample_scale[r / rows_per_sample] : 1.0f;
        const float *x_row = x + r * channels, *branch_row = branch + r * channels;
        float *y_row = y + r * channels;
        if (gamma) {
#pragma omp simd
            for (int c = 0; c < channels; c++)
                y_row[c] = x_row[c] + (gamma[c] * scale) * branch_row[c];
        } else {
#pragma omp simd
            for (int c = 0; c < channels; c++) y_row[c] = x_row[c] + scale * branch_row[c];
        }
    }
}

void cpu_residual_scale_add_backward(Backend *backend, int batch, size_t rows_per_sample,
                                     int channels, const Act *branch_act, const Act *dy_act,
                                     const float *gamma, const float *sample_scale,
                                     Act *dbranch_act, float *dgamma) {
    const float *branch = (const float *)branch_act;
    const float *dy = (const float *)dy_act;
    float *dbranch = (float *)dbranch_act;
    const size_t rows = (size_t)batch * rows_per_sample;
    {
        CPU_FOR_ROWS(rows, channels) {
            const float scale = sample_scale ? sample_scale[r / rows_per_sample] : 1.0f;
            const float *dy_row = dy + r * channels;
            float *dbranch_row = dbranch + r * channels;
#pragma omp simd
            for (int c = 0; c < channels; c++)
                dbranch_row[c] = (gamma ? gamma[c] * scale : scale) * dy_row[c];
        }
    }
    if (!gamma) return;
    CPU_FOR_CHANNEL_BLOCKS(rows, channels) {
        const int first = b * block_size, width = block_width(block_size, channels, b);
        double sums[CPU_CHANNEL_BLOCK] = {0};
        const int avx2 = width % 8 == 0 && cpu_has_avx2();
        for (size_t r = 0; r < rows; r++) {
            const float scale = sample_scale ? sample_scale[r / rows_per_sample] : 1.0f;
            if (scale == 0.0f) continue;  // a dropped sample adds nothing
            const float *dy_row = dy + r * channels + first;
            const float *branch_row = branch + r * channels + first;
            if (avx2) {
                scaled_product_sums_avx2(width, scale, dy_row, branch_row, sums);
                continue;
            }
#pragma omp simd
            for (int j = 0; j < width; j++) sums[j] += (double)(scale * dy_row[j]) * branch_row[j];
        }
        for (int j = 0; j < width; j++) dgamma[first + j] += (float)sums[j];
    }
}

// ---- token pooling -----------------------------------------------------------------------

void cpu_token_pool_forward(Backend *backend, int batch, int tokens, int channels, int first,
                            int count, const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    CPU_FOR_ROWS(batch, (size_t)count * channels) {
        double sums[CPU_CHANNEL_BLOCK];
        for (int start = 0; start < channels; start += CPU_CHANNEL_BLOCK) {
            const int width = block_width(CPU_CHANNEL_BLOCK, channels, start / CPU_CHANNEL_BLOCK);
            for (int j = 0; j < width; j++) sums[j] = 0.0;
            for (int t = first; t < first + count; t++) {
                const float *row = x + (r * tokens + t) * channels + start;
#pragma omp simd
                for (int j = 0; j < width; j++) sums[j] += row[j];
            }
            for (int j = 0; j < width; j++) y[r * channels + start + j] = (float)(sums[j] / count);
        }
    }
}

void cpu_token_pool_backward(Backend *backend, int batch, int tokens, int channels, int first,
                             int count, const Act *dy_act, Act *dx_act) {
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    const float divisor = (float)count;
    CPU_FOR_ROWS((size_t)batch * tokens, channels) {
        const int t = (int)(r % tokens);
        const float *dy_row = dy + (r / tokens) * channels;
        float *dx_row = dx + r * channels;
        if (t >= first && t < first + count) {
#pragma omp simd
            for (int c = 0; c < channels; c++) dx_row[c] = dy_row[c] / divisor;
        } else {
#pragma omp simd
            for (int c = 0; c < channels; c++) dx_row[c] = 0.0f;
        }
    }
}
