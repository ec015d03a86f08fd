// The cpu backend's batch norm over rows of a (rows, C) matrix: training,
// evaluation and backward, plain and fused with the ReLU (and residual add)
// that follow it in ResNets or the SiLU of Ultralytics' Conv. These are
// memory-bound passes over whole activations, so the work is arranged to
// read each tensor as few times as possible:
//
// - forward (train): one pass for the statistics, one for y; the ReLU and
//   the residual add, or the SiLU, happen in the second (unfused: 4 passes,
//   6 with ReLU; with SiLU the norm's output is not even written);
// - backward: one pass for the two sums, one for dx; the ReLU mask is
//   applied to dy on the fly (no separate relu_backward pass); SiLU's
//   derivative is taken in the first pass from the norm's output
//   recomputed from x, and dz written there for the second.
//
// Threads split the rows (each reads whole contiguous rows); each keeps
// per-channel partial results in double, merged in thread order afterwards
// (deterministic for a given thread count). Within a thread, rows go in
// chunks of CPU_NORM_CHUNK: a chunk's sums are fp32 (vectorised across
// channels), folded into the double totals after every chunk, which keeps
// the accuracy of double accumulation. The statistics use Chan et al.'s
// pairwise update (chunk mean and squared deviations about it, merged), so
// a single pass over memory still gives the two-pass variance's accuracy.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_internal.h"
#include "backend/ref/ref_ops.h"
#include "backend/scalar_rules.h"

// Rows per chunk: a chunk's sums are fp32, merged into double after every
// chunk. 8 keeps the fp32 part of the error below that of PyTorch's fp32
// batch norm: with 32, tests/test_resnet's gradient sums drifted to 4x
// PyTorch's error from the float64 truth (resnet18), with 8 they sit at
// 0.3 of the allowance (double everywhere: 0.5).
#define CPU_NORM_CHUNK 8
// Channels of a chunk processed together (its fp32 accumulators and the
// chunk's rows stay in L1 while the chunk is read twice).
#define CPU_NORM_STRIP 256

// ---- per-thread partial results ------------------------------------------------------

// The rows of chunk range [first_chunk, end_chunk), clipped to the matrix.
typedef struct RowRange {
    size_t first, end;
} RowRange;

// Chunks of thread `thread` of `team`, as rows.
static RowRange thread_rows(size_t rows, int thread, int team) {
    const size_t chunks = (rows + CPU_NORM_CHUNK - 1) / CPU_NORM_CHUNK;
    RowRange range = {chunks * thread / team * CPU_NORM_CHUNK,
                      chunks * (thread + 1) / team * CPU_NORM_CHUNK};
    if (range.end > rows) range.end = rows;
    if (range.first > range.end) range.first = range.end;
    return range;
}

// Thread t's two partial vectors (each CPU_NORM_GROUP doubles) in the
// backend's scratch.
static double *thread_partials(const Backend *backend, int thread) {
    const CpuState *state = backend->impl;
    return state->norm_partials + (size_t)thread * 2 * CPU_NORM_GROUP;
}

// Threads for a reduction over `rows` rows of `width` channels: at most one
// per chunk, at most the scratch's capacity.
static int reduction_team(const Backend *backend, size_t rows, int width) {
    const size_t chunks = (rows + CPU_NORM_CHUNK - 1) / CPU_NORM_CHUNK;
    int team = cpu_team(backend, rows * (size_t)width);
    if ((size_t)team > chunks) team = (int)chunks;
    const CpuState *state = backend->impl;
    if (team > state->norm_partial_threads) team = state->norm_partial_threads;
    return team < 1 ? 1 : team;
}

// ---- statistics ---------------------------------------------------------------------------

// Folds `count` rows of x (row stride `stride`, `width` <= CPU_NORM_STRIP
// channels) into the running statistics of `seen` earlier rows: mean, m2
// (width) = mean and sum of squared deviations. The chunk's sums are fp32
// about the chunk's own (fp32) mean, then merged in double (Chan et al.).
static void chunk_moments(const float *x, size_t stride, int count, int width, double seen,
                          double *mean, double *m2) {
    float sum[CPU_NORM_STRIP], center[CPU_NORM_STRIP];
    float deviation[CPU_NORM_STRIP], squares[CPU_NORM_STRIP];
    for (int j = 0; j < width; j++) sum[j] = deviation[j] = squares[j] = 0.0f;
    for (int r = 0; r < count; r++) {
        const float *x_row = x + r * stride;
#pragma omp simd
        for (int j = 0; j < width; j++) sum[j] += x_row[j];
    }
    for (int j = 0; j < width; j++) center[j] = sum[j] / (float)count;
    for (int r = 0; r < count; r++) {
        const float *x_row = x + r * stride;
#pragma omp simd
        for (int j = 0; j < width; j++) {
            const float d = x_row[j] - center[j];
            deviation[j] += d;
            squares[j] += d * d;
        }
    }
    const double n = count, inv_n = 1.0 / n, weight = n / (seen + n), cross = seen * weight;
    for (int j = 0; j < width; j++) {
        // Exact moments of the chunk about `center`, corrected to its mean.
        const double chunk_mean = center[j] + (double)deviation[j] * inv_n;
        const double chunk_m2 = squares[j] - (double)deviation[j] * deviation[j] * inv_n;
        const double delta = chunk_mean - mean[j];
        mean[j] += delta * weight;
        m2[j] += chunk_m2 + delta * delta * cross;
    }
}

// mean, variance (width) = batch mean and biased variance of channels
// [first, first + width) of x (rows, C); width <= CPU_NORM_GROUP.
static void batch_moments(Backend *backend, size_t rows, int channels, const float *x,
                          int first, int width, double *mean, double *variance) {
    const int requested = reduction_team(backend, rows, width);
    int team = 1;
#pragma omp parallel num_threads(requested)
    {
        const int t = cpu_thread_index(), size = cpu_thread_count();
        if (t == 0) team = size;
        double *t_mean = thread_partials(backend, t), *t_m2 = t_mean + CPU_NORM_GROUP;
        for (int j = 0; j < width; j++) t_mean[j] = t_m2[j] = 0.0;
        const RowRange range = thread_rows(rows, t, size);
        for (size_t r = range.first; r < range.end; r += CPU_NORM_CHUNK) {
            const int count = (int)(range.end - r < CPU_NORM_CHUNK ? range.end - r
                                                                   : CPU_NORM_CHUNK);
            const double seen = (double)(r - range.first);
            for (int s = 0; s < width; s += CPU_NORM_STRIP)
                chunk_moments(x + r * channels + first + s, (size_t)channels, count,
                              width - s < CPU_NORM_STRIP ? width - s : CPU_NORM_STRIP, seen,
                              t_mean + s, t_m2 + s);
        }
    }
    // Merge the threads' (count, mean, m2) in thread order.
    for (int j = 0; j < width; j++) mean[j] = variance[j] = 0.0;
    double seen = 0.0;
    for (int t = 0; t < team; t++) {
        const RowRange range = thread_rows(rows, t, team);
        const double n = (double)(range.end - range.first);
        if (n == 0.0) continue;
        const double *t_mean = thread_partials(backend, t), *t_m2 = t_mean + CPU_NORM_GROUP;
        const double total = seen + n;
        for (int j = 0; j < width; j++) {
            const double delta = t_mean[j] - mean[j];
            mean[j] += delta * n / total;
            variance[j] += t_m2[j] + delta * delta * seen * n / total;  // m2 until divided
        }
        seen = total;
    }
    for (int j = 0; j < width; j++) variance[j] /= (double)rows;
}

// ---- the per-element maps ----------------------------------------------------------------

// What follows the norm in the same pass.
typedef enum NormAct { NORM_LINEAR, NORM_RELU, NORM_SILU } NormAct;

// Per-channel affine map of the forward pass: y = ((x - center) - center_low)
// * scale + shift. Centering first keeps y accurate when scale is large (a
// channel of near-constant values): x - center is exact for x close to
// center; center_low carries the part of a double mean that fp32 lost.
typedef struct NormMap {
    float center[CPU_NORM_GROUP], center_low[CPU_NORM_GROUP];
    float scale[CPU_NORM_GROUP], shift[CPU_NORM_GROUP];
} NormMap;

// y (rows, C) = act(map(x) (+ residual)) over channels [first, first +
// width); threads split the rows.
static void apply_map(Backend *backend, size_t rows, int channels, const float *x,
                      const float *residual, NormAct act, int first, int width,
                      const NormMap *map, float *y) {
    const int team = cpu_team(backend, rows * (size_t)width);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float *x_row = x + r * channels + first;
        float *y_row = y + r * channels + first;
#pragma omp simd
        for (int j = 0; j < width; j++)
            y_row[j] = ((x_row[j] - map->center[j]) - map->center_low[j]) * map->scale[j] +
                       map->shift[j];
        if (residual) {  // the row is in L1: extra loops cost no memory traffic
            const float *residual_row = residual + r * channels + first;
#pragma omp simd
            for (int j = 0; j < width; j++) y_row[j] += residual_row[j];
        }
        if (act == NORM_RELU) {
#pragma omp simd
            for (int j = 0; j < width; j++) y_row[j] = y_row[j] <= 0.0f ? 0.0f : y_row[j];
        } else if (act == NORM_SILU) {
            cpu_silu_row(y_row, y_row, (size_t)width);
        }
    }
}

// Columns [first, first + width) of the next group: the channels handled
// per reduction (the scratch's capacity, CPU_NORM_GROUP).
static int group_width(int channels, int first) {
    return channels - first < CPU_NORM_GROUP ? channels - first : CPU_NORM_GROUP;
}

static void forward_train(Backend *backend, size_t rows, int channels, const float *x,
                          const float *residual, NormAct act, const float *gamma, const float *beta,
                          float momentum, float eps, float *y, float *save_mean,
                          float *save_inv_std, float *running_mean, float *running_var) {
    cpu_set_threads(backend);
    NormMap map;
    double mean[CPU_NORM_GROUP], variance[CPU_NORM_GROUP];
    for (int first = 0; first < channels; first += CPU_NORM_GROUP) {
        const int width = group_width(channels, first);
        batch_moments(backend, rows, channels, x, first, width, mean, variance);
        for (int j = 0; j < width; j++) {
            const int c = first + j;
            const double inv_std = 1.0 / sqrt(variance[j] + eps);
            save_mean[c] = (float)mean[j];
            save_inv_std[c] = (float)inv_std;
            map.center[j] = save_mean[c];
            map.center_low[j] = (float)(mean[j] - map.center[j]);
            map.scale[j] = (float)(gamma[c] * inv_std);
            map.shift[j] = beta[c];
            if (act == NORM_SILU) {  // the map the backward recomputes the norm's output with
                map.center_low[j] = 0.0f;
                map.scale[j] = (float)((double)gamma[c] * save_inv_std[c]);
            }
            // Unbiased variance for the running statistic; with one row it is
            // undefined, so (like ref) the biased one is kept.
            const double unbiased =
                rows > 1 ? variance[j] * (double)rows / (double)(rows - 1) : variance[j];
            running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean[j]);
            running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
        }
        apply_map(backend, rows, channels, x, residual, act, first, width, &map, y);
    }
}

static void forward_eval(Backend *backend, size_t rows, int channels, const float *x,
                         const float *residual, NormAct act, const float *gamma, const float *beta,
                         const float *running_mean, const float *running_var, float eps,
                         float *y) {
    NormMap map;
    for (int first = 0; first < channels; first += CPU_NORM_GROUP) {
        const int width = group_width(channels, first);
        for (int j = 0; j < width; j++) {
            const int c = first + j;
            map.center[j] = running_mean[c];
            map.center_low[j] = 0.0f;
            map.scale[j] = (float)(gamma[c] / sqrt((double)running_var[c] + eps));
            map.shift[j] = beta[c];
        }
        apply_map(backend, rows, channels, x, residual, act, first, width, &map, y);
    }
}

void cpu_batchnorm_forward_train_f32(Backend *backend, size_t rows, int channels, const float *x,
                                 const float *gamma, const float *beta, float momentum, float eps,
                                 float *y, float *save_mean, float *save_inv_std,
                                 float *running_mean, float *running_var) {
    forward_train(backend, rows, channels, x, NULL, NORM_LINEAR, gamma, beta, momentum, eps, y,
                  save_mean, save_inv_std, running_mean, running_var);
}

void cpu_batchnorm_forward_train(Backend *backend, size_t rows, int channels, const Act *x_act,
                                 const float *gamma, const float *beta, float momentum, float eps,
                                 Act *y_act, float *save_mean, float *save_inv_std,
                                 float *running_mean, float *running_var) {
    cpu_batchnorm_forward_train_f32(backend, rows, channels, (const float *)x_act, gamma, beta,
                                    momentum, eps, (float *)y_act, save_mean, save_inv_std,
                                    running_mean, running_var);
}

void cpu_batchnorm_relu_forward_train(Backend *backend, size_t rows, int channels,
                                      const Act *x_act, const Act *residual_act, const float *gamma,
                                      const float *beta, float momentum, float eps, Act *y_act,
                                      float *save_mean, float *save_inv_std, float *running_mean,
                                      float *running_var) {
    const float *x = (const float *)x_act;
    const float *residual = (const float *)residual_act;
    float *y = (float *)y_act;
    forward_train(backend, rows, channels, x, residual, NORM_RELU, gamma, beta, momentum, eps, y,
                  save_mean, save_inv_std, running_mean, running_var);
}

void cpu_batchnorm_silu_forward_train(Backend *backend, size_t rows, int channels,
                                      const Act *x_act, const float *gamma, const float *beta,
                                      float momentum, float eps, Act *y_act, float *save_mean,
                                      float *save_inv_std, float *running_mean,
                                      float *running_var) {
    forward_train(backend, rows, channels, (const float *)x_act, NULL, NORM_SILU, gamma, beta,
                  momentum, eps, (float *)y_act, save_mean, save_inv_std, running_mean,
                  running_var);
}

void cpu_batchnorm_forward_eval(Backend *backend, size_t rows, int channels, const Act *x_act,
                                const float *gamma, const float *beta, const float *running_mean,
                                const float *running_var, float eps, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    forward_eval(backend, rows, channels, x, NULL, NORM_LINEAR, gamma, beta, running_mean,
                 running_var, eps, y);
}

void cpu_batchnorm_silu_forward_eval(Backend *backend, size_t rows, int channels,
                                     const Act *x_act, const float *gamma, const float *beta,
                                     const float *running_mean, const float *running_var,
                                     float eps, Act *y_act) {
    forward_eval(backend, rows, channels, (const float *)x_act, NULL, NORM_SILU, gamma, beta,
                 running_mean, running_var, eps, (float *)y_act);
}

void cpu_batchnorm_relu_forward_eval(Backend *backend, size_t rows, int channels,
                                     const Act *x_act, const Act *residual_act, const float *gamma,
                                     const float *beta, const float *running_mean,
                                     const float *running_var, float eps, Act *y_act) {
    const float *x = (const float *)x_act;
    const float *residual = (const float *)residual_act;
    float *y = (float *)y_act;
    forward_eval(backend, rows, channels, x, residual, NORM_RELU, gamma, beta, running_mean,
                 running_var, eps, y);
}

// ---- backward --------------------------------------------------------------------------

// The SiLU after a batch norm, for its backward: the norm's output a =
// (x - mean) scale + shift per channel (the forward's map), NULL for none.
typedef struct SiluInput {
    const float *scale, *shift;
} SiluInput;

// Folds `count` rows (row stride `stride`, `width` <= CPU_NORM_STRIP
// channels) into sum_dz, sum_dz_centered (width) += sums of dz and
// dz (x - mean), fp32 within the chunk. dz = dy, or with a ReLU after the
// batch norm (relu_out not NULL) dy where relu_out > 0, else 0, or with a
// SiLU (silu not NULL) dy silu'(a); then dz is also written to dz_out
// unless NULL (dz_out may alias dy; with a SiLU it is required).
static void chunk_gradient_sums(const float *x, const float *relu_out, const SiluInput *silu,
                                const float *dy, float *dz_out, size_t stride, int count,
                                int width, const float *mean, double *sum_dz,
                                double *sum_dz_centered) {
    float dz_total[CPU_NORM_STRIP], centered_total[CPU_NORM_STRIP], masked[CPU_NORM_STRIP];
    for (int j = 0; j < width; j++) dz_total[j] = centered_total[j] = 0.0f;
    for (int r = 0; r < count; r++) {
        const float *x_row = x + r * stride;
        const float *dz_row = dy + r * stride;
        if (silu) {
#pragma omp simd
            for (int j = 0; j < width; j++)
                masked[j] = (x_row[j] - mean[j]) * silu->scale[j] + silu->shift[j];
            cpu_silu_backward_row(masked, dz_row, dz_out + r * stride, (size_t)width);
            dz_row = dz_out + r * stride;
        } else if (relu_out) {
            const float *relu_row = relu_out + r * stride;
            float *target = dz_out ? dz_out + r * stride : masked;
#pragma omp simd
            for (int j = 0; j < width; j++) {
                const float gradient = dz_row[j];  // unconditional load: vectorises
                target[j] = relu_row[j] <= 0.0f ? 0.0f : gradient;
            }
            dz_row = target;
        } else if (dz_out && dz_out + r * stride != dz_row) {
            memcpy(dz_out + r * stride, dz_row, (size_t)width * sizeof *dz_out);  // dz = dy
        }
#pragma omp simd
        for (int j = 0; j < width; j++) {
            dz_total[j] += dz_row[j];
            centered_total[j] += dz_row[j] * (x_row[j] - mean[j]);
        }
    }
    for (int j = 0; j < width; j++) {
        sum_dz[j] += dz_total[j];
        sum_dz_centered[j] += centered_total[j];
    }
}

// sum_dz, sum_dz_centered (width) = over all rows, for channels
// [first, first + width) (see chunk_gradient_sums).
static void gradient_sums(Backend *backend, size_t rows, int channels, const float *x,
                          const float *relu_out, const SiluInput *silu, const float *dy,
                          float *dz_out, const float *save_mean, int first, int width,
                          double *sum_dz, double *sum_dz_centered) {
    const int requested = reduction_team(backend, rows, width);
    int team = 1;
#pragma omp parallel num_threads(requested)
    {
        const int t = cpu_thread_index(), size = cpu_thread_count();
        if (t == 0) team = size;
        double *t_dz = thread_partials(backend, t), *t_centered = t_dz + CPU_NORM_GROUP;
        for (int j = 0; j < width; j++) t_dz[j] = t_centered[j] = 0.0;
        const RowRange range = thread_rows(rows, t, size);
        for (size_t r = range.first; r < range.end; r += CPU_NORM_CHUNK) {
            const int count = (int)(range.end - r < CPU_NORM_CHUNK ? range.end - r
                                                                   : CPU_NORM_CHUNK);
            for (int s = 0; s < width; s += CPU_NORM_STRIP) {
                const size_t offset = r * channels + first + s;
                const SiluInput strip = {silu ? silu->scale + s : NULL,
                                         silu ? silu->shift + s : NULL};
                chunk_gradient_sums(x + offset, relu_out ? relu_out + offset : NULL,
                                    silu ? &strip : NULL, dy + offset,
                                    dz_out ? dz_out + offset : NULL, (size_t)channels, count,
                                    width - s < CPU_NORM_STRIP ? width - s : CPU_NORM_STRIP,
                                    save_mean + first + s, t_dz + s, t_centered + s);
            }
        }
    }
    for (int j = 0; j < width; j++) sum_dz[j] = sum_dz_centered[j] = 0.0;
    for (int t = 0; t < team; t++) {  // in thread order: deterministic
        const double *t_dz = thread_partials(backend, t), *t_centered = t_dz + CPU_NORM_GROUP;
        for (int j = 0; j < width; j++) {
            sum_dz[j] += t_dz[j];
            sum_dz_centered[j] += t_centered[j];
        }
    }
}

// Per-channel map of the backward pass: dx = a (dz - mean_dz) - b (x - mean).
typedef struct GradientMap {
    float a[CPU_NORM_GROUP], b[CPU_NORM_GROUP];
    float mean_dz[CPU_NORM_GROUP], mean[CPU_NORM_GROUP];
} GradientMap;

// dx (rows, C) = map(x, dz) over channels [first, first + width), dz =
// source, masked by relu_out > 0 unless relu_out is NULL; threads split the rows.
static void apply_gradient_map(Backend *backend, size_t rows, int channels, const float *x,
                               const float *relu_out, const float *source, int first, int width,
                               const GradientMap *map, float *dx) {
    const int team = cpu_team(backend, rows * (size_t)width);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const size_t offset = r * channels + first;
        const float *x_row = x + offset, *source_row = source + offset;
        float *dx_row = dx + offset;
        if (relu_out) {
            const float *relu_row = relu_out + offset;
#pragma omp simd
            for (int j = 0; j < width; j++) {
                const float gradient = source_row[j];  // unconditional load: vectorises
                const float dz = relu_row[j] <= 0.0f ? 0.0f : gradient;
                dx_row[j] =
                    map->a[j] * (dz - map->mean_dz[j]) - map->b[j] * (x_row[j] - map->mean[j]);
            }
        } else {
#pragma omp simd
            for (int j = 0; j < width; j++)
                dx_row[j] = map->a[j] * (source_row[j] - map->mean_dz[j]) -
                            map->b[j] * (x_row[j] - map->mean[j]);
        }
    }
}

// With xhat = (x - mean) inv_std over R rows and dz the gradient reaching
// the batch norm's output: dbeta = sum dz, dgamma = sum dz xhat,
// dx = gamma inv_std / R (R dz - dbeta - xhat dgamma)
// = a (dz - mean(dz)) - b (x - mean): both differences are taken first so
// dx stays accurate when inv_std is large.
// beta: with a SiLU after the norm (dz_out then required), else NULL.
static void backward(Backend *backend, size_t rows, int channels, const float *x,
                     const float *relu_out, const float *beta, const float *dy,
                     const float *gamma, const float *save_mean, const float *save_inv_std,
                     float *dx, float *dgamma, float *dbeta, float *dz_out) {
    cpu_set_threads(backend);
    GradientMap map;
    double sum_dz[CPU_NORM_GROUP], sum_dz_centered[CPU_NORM_GROUP];
    float silu_scale[CPU_NORM_GROUP], silu_shift[CPU_NORM_GROUP];
    const SiluInput silu = {silu_scale, silu_shift};
    for (int first = 0; first < channels; first += CPU_NORM_GROUP) {
        const int width = group_width(channels, first);
        for (int j = 0; beta && j < width; j++) {  // forward_train's NORM_SILU map
            silu_scale[j] = (float)((double)gamma[first + j] * save_inv_std[first + j]);
            silu_shift[j] = beta[first + j];
        }
        gradient_sums(backend, rows, channels, x, relu_out, beta ? &silu : NULL, dy, dz_out,
                      save_mean, first, width, sum_dz, sum_dz_centered);
        for (int j = 0; j < width; j++) {
            const int c = first + j;
            const double inv_std = save_inv_std[c];
            const double sum_dz_xhat = sum_dz_centered[j] * inv_std;
            map.a[j] = (float)((double)gamma[c] * inv_std);
            map.b[j] = (float)((double)gamma[c] * inv_std * inv_std * sum_dz_xhat / (double)rows);
            map.mean_dz[j] = (float)(sum_dz[j] / (double)rows);
            map.mean[j] = save_mean[c];
            dgamma[c] += (float)sum_dz_xhat;
            dbeta[c] += (float)sum_dz[j];
        }
        // With dz written out, read it back instead of masking dy again.
        apply_gradient_map(backend, rows, channels, x, dz_out ? NULL : relu_out,
                           dz_out ? dz_out : dy, first, width, &map, dx);
    }
}

void cpu_batchnorm_backward_f32(Backend *backend, size_t rows, int channels, const float *x,
                            const float *dy, const float *gamma, const float *save_mean,
                            const float *save_inv_std, float *dx, float *dgamma, float *dbeta) {
    backward(backend, rows, channels, x, NULL, NULL, dy, gamma, save_mean, save_inv_std, dx, dgamma,
             dbeta, NULL);
}

void cpu_batchnorm_backward(Backend *backend, size_t rows, int channels, const Act *x_act,
                            const Act *dy_act, const float *gamma, const float *save_mean,
                            const float *save_inv_std, Act *dx_act, float *dgamma, float *dbeta) {
    cpu_batchnorm_backward_f32(backend, rows, channels, (const float *)x_act,
                               (const float *)dy_act, gamma, save_mean, save_inv_std,
                               (float *)dx_act, dgamma, dbeta);
}

// The ReLU's input x scale + shift (the forward's affine, as ref computes it)
// in a temporary, for a backward without the ReLU's output: only its sign is
// read. Row by row across the team (ref's loop runs channel by channel on
// one thread: 19% of a ShuffleNet step when YOLO's and ShuffleNet's units
// all took it).
static float *relu_input(Backend *backend, size_t rows, int channels, const float *x,
                         const float *gamma, const float *beta, const float *mean,
                         const float *inv_std) {
    float *out = malloc(rows * (size_t)channels * sizeof *out);
    float *affine = malloc(2 * (size_t)channels * sizeof *affine);
    if (!out || !affine) {
        fprintf(stderr, "cpu backend: out of memory for a ReLU mask\n");
        abort();
    }
    for (int c = 0; c < channels; c++) {
        affine[c] = prologue_scale_rule(gamma[c], inv_std[c]);
        affine[channels + c] = prologue_shift_rule(beta[c], mean[c], affine[c]);
    }
    const int team = cpu_team(backend, rows * (size_t)channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < channels; c++)
            out[r * (size_t)channels + c] =
                fmaf(x[r * (size_t)channels + c], affine[c], affine[channels + c]);
    free(affine);
    return out;
}

// y NULL (the output not kept: a convolution prologue's ReLU, or a YOLO
// unit whose output a shortcut changed since): the ReLU's input in a
// temporary stands in for y, as ref does.
void cpu_batchnorm_relu_backward(Backend *backend, size_t rows, int channels, const Act *x_act,
                                 const Act *y_act, const Act *dy_act, const float *gamma,
                                 const float *beta, const float *save_mean,
                                 const float *save_inv_std, Act *dx_act, float *dgamma,
                                 float *dbeta, Act *dresidual_act) {
    const float *x = (const float *)x_act;
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    float *dresidual = (float *)dresidual_act;
    float *mask = y_act ? NULL
                        : relu_input(backend, rows, channels, x, gamma, beta, save_mean,
                                     save_inv_std);
    backward(backend, rows, channels, x, y_act ? (const float *)y_act : mask, NULL, dy, gamma,
             save_mean, save_inv_std, dx, dgamma, dbeta, dresidual);
    free(mask);
}

void cpu_batchnorm_silu_backward(Backend *backend, size_t rows, int channels, const Act *x_act,
                                 const Act *dy_act, const float *gamma, const float *beta,
                                 const float *save_mean, const float *save_inv_std, Act *dz_act,
                                 Act *dx_act, float *dgamma, float *dbeta) {
    backward(backend, rows, channels, (const float *)x_act, NULL, beta, (const float *)dy_act,
             gamma, save_mean, save_inv_std, (float *)dx_act, dgamma, dbeta, (float *)dz_act);
}

// ---- split for synchronised batch norm (statistics over several ranks) ---------------

void cpu_batchnorm_forward_apply(Backend *backend, size_t rows, int channels, const Act *x_act,
                                 const Act *residual_act, int relu, const float *gamma,
                                 const float *beta, const float *mean, const float *inv_std,
                                 Act *y_act) {
    const float *x = (const float *)x_act;
    const float *residual = (const float *)residual_act;
    float *y = (float *)y_act;
    cpu_set_threads(backend);
    NormMap map;
    for (int first = 0; first < channels; first += CPU_NORM_GROUP) {
        const int width = group_width(channels, first);
        for (int j = 0; j < width; j++) {
            const int c = first + j;
            map.center[j] = mean[c];
            map.center_low[j] = 0.0f;
            map.scale[j] = (float)((double)gamma[c] * inv_std[c]);
            map.shift[j] = beta[c];
        }
        apply_map(backend, rows, channels, x, residual, relu ? NORM_RELU : NORM_LINEAR, first,
                  width, &map, y);
    }
}

void cpu_batchnorm_backward_reduce(Backend *backend, size_t rows, int channels, const Act *x_act,
                                   const Act *relu_out_act, const Act *dy_act, Act *dz_out_act,
                                   const float *mean, const float *inv_std, float *dgamma,
                                   float *dbeta, float *sums) {
    const float *x = (const float *)x_act;
    const float *relu_out = (const float *)relu_out_act;
    const float *dy = (const float *)dy_act;
    float *dz_out = (float *)dz_out_act;
    cpu_set_threads(backend);
    double sum_dz[CPU_NORM_GROUP], sum_dz_centered[CPU_NORM_GROUP];
    for (int first = 0; first < channels; first += CPU_NORM_GROUP) {
        const int width = group_width(channels, first);
        gradient_sums(backend, rows, channels, x, relu_out, NULL, dy, dz_out, mean, first, width,
                      sum_dz, sum_dz_centered);
        for (int j = 0; j < width; j++) {
            const int c = first + j;
            sums[c] = (float)sum_dz[j];
            sums[channels + c] = (float)(sum_dz_centered[j] * inv_std[c]);
            dbeta[c] += sums[c];
            dgamma[c] += sums[channels + c];
        }
    }
}

void cpu_batchnorm_backward_apply(Backend *backend, size_t rows, size_t total_rows,
                                  int channels, const Act *x_act, const Act *relu_out_act,
                                  const Act *dy_act, const float *gamma, const float *mean,
                                  const float *inv_std, const float *sums, Act *dx_act) {
    const float *x = (const float *)x_act;
    const float *relu_out = (const float *)relu_out_act;
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    cpu_set_threads(backend);
    GradientMap map;
    for (int first = 0; first < channels; first += CPU_NORM_GROUP) {
        const int width = group_width(channels, first);
        for (int j = 0; j < width; j++) {
            const int c = first + j;
            const double scale = (double)gamma[c] * inv_std[c];
            map.a[j] = (float)scale;
            map.b[j] = (float)(scale * inv_std[c] * sums[channels + c] / (double)total_rows);
            map.mean_dz[j] = (float)(sums[c] / (double)total_rows);
            map.mean[j] = mean[c];
        }
        apply_gradient_map(backend, rows, channels, x, relu_out, dy, first, width, &map, dx);
    }
}
