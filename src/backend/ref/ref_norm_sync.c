// Reference ops of the batch norm split for synchronised BatchNorm (see
// backend.h): the per-rank sums, the statistics from the all-reduced sums,
// and the normalisation and gradient with statistics given. Plain loops,
// double accumulation, as ref_norm.c.
#include <math.h>

#include "backend/ref/ref_ops.h"

void ref_batchnorm_centered_squares(Backend *backend, size_t rows, int channels, const Act *x_act,
                                    const float *mean, float *squares) {
    const float *x = (const float *)x_act;
    for (int c = 0; c < channels; c++) {
        double total = 0.0;
        for (size_t r = 0; r < rows; r++) {
            const double d = (double)x[r * (size_t)channels + c] - mean[c];
            total += d * d;
        }
        squares[c] = (float)total;
    }
}

void ref_batchnorm_finish_statistics(Backend *backend, int channels, size_t total_rows,
                                     float momentum, float eps, const float *mean,
                                     float *squares_to_inv_std, float *running_mean,
                                     float *running_var) {
    for (int c = 0; c < channels; c++) {
        const double variance = squares_to_inv_std[c] / (double)total_rows;
        // Unbiased for the running statistic; with one row the biased one (as ref_norm.c).
        const double unbiased = total_rows > 1 ? squares_to_inv_std[c] / (double)(total_rows - 1)
                                               : variance;
        squares_to_inv_std[c] = (float)(1.0 / sqrt(variance + eps));
        running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean[c]);
        running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
    }
}

void ref_batchnorm_forward_apply(Backend *backend, size_t rows, int channels, const Act *x_act,
                                 const Act *residual_act, int relu, const float *gamma,
                                 const float *beta, const float *mean, const float *inv_std,
                                 Act *y_act) {
    const float *x = (const float *)x_act;
    const float *residual = (const float *)residual_act;
    float *y = (float *)y_act;
    for (size_t r = 0; r < rows; r++) {
        for (int c = 0; c < channels; c++) {
            const size_t i = r * (size_t)channels + c;
            float value = (float)(((double)x[i] - mean[c]) * inv_std[c] * gamma[c] + beta[c]);
            if (residual) value += residual[i];
            y[i] = relu && !(value > 0.0f) ? 0.0f : value;
        }
    }
    ref_round_acts(backend, y_act, rows * channels);
}

static double gradient_reaching_norm(const float *relu_out, const float *dy, size_t i) {
    return !relu_out || relu_out[i] > 0.0f ? dy[i] : 0.0;
}

void ref_batchnorm_backward_reduce(Backend *backend, size_t rows, int channels, const Act *x_act,
                                   const Act *relu_out_act, const Act *dy_act, Act *dz_out_act,
                                   const float *mean, const float *inv_std, float *dgamma,
                                   float *dbeta, float *sums) {
    const float *x = (const float *)x_act;
    const float *relu_out = (const float *)relu_out_act;
    const float *dy = (const float *)dy_act;
    float *dz_out = (float *)dz_out_act;
    for (int c = 0; c < channels; c++) {
        double sum_dz = 0.0, sum_dz_xhat = 0.0;
        for (size_t r = 0; r < rows; r++) {
            const size_t i = r * (size_t)channels + c;
            const double dz = gradient_reaching_norm(relu_out, dy, i);
            sum_dz += dz;
            sum_dz_xhat += dz * ((double)x[i] - mean[c]) * inv_std[c];
        }
        sums[c] = (float)sum_dz;
        sums[channels + c] = (float)sum_dz_xhat;
        dbeta[c] += sums[c];
        dgamma[c] += sums[channels + c];
    }
    if (dz_out)  // last: dz_out may alias dy
        for (size_t i = 0; i < rows * (size_t)channels; i++)
            dz_out[i] = (float)gradient_reaching_norm(relu_out, dy, i);
}

void ref_batchnorm_backward_apply(Backend *backend, size_t rows, size_t total_rows,
                                  int channels, const Act *x_act, const Act *relu_out_act,
                                  const Act *dy_act, const float *gamma, const float *mean,
                                  const float *inv_std, const float *sums, Act *dx_act) {
    const float *x = (const float *)x_act;
    const float *relu_out = (const float *)relu_out_act;
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    for (int c = 0; c < channels; c++) {
        const double mean_dz = sums[c] / (double)total_rows;
        const double mean_dz_xhat = sums[channels + c] / (double)total_rows;
        const double scale = (double)gamma[c] * inv_std[c];
        for (size_t r = 0; r < rows; r++) {
            const size_t i = r * (size_t)channels + c;
            const double xhat = ((double)x[i] - mean[c]) * inv_std[c];
            const double dz = gradient_reaching_norm(relu_out, dy, i);
            dx[i] = (float)(scale * (dz - mean_dz - xhat * mean_dz_xhat));
        }
    }
    ref_round_acts(backend, dx_act, rows * channels);
}
