// Reference normalisations: batch norm (training with running statistics,
// evaluation, backward; also fused with the ReLU and residual add after it,
// written as the plain composition), row-wise L2 normalisation, softmax and log-softmax.
// Statistics and row sums accumulate in double.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/ref/ref_ops.h"
#include "backend/scalar_rules.h"

// ---- batch norm ------------------------------------------------------------------

// Batch mean and biased variance of one channel of x (rows, C), two passes.
static void channel_moments(size_t rows, int channels, const float *x, int c, double *mean,
                            double *variance) {
    double total = 0.0;
    for (size_t r = 0; r < rows; r++) total += x[r * (size_t)channels + c];
    const double m = total / (double)rows;
    double squares = 0.0;
    for (size_t r = 0; r < rows; r++) {
        const double d = x[r * (size_t)channels + c] - m;
        squares += d * d;
    }
    *mean = m;
    *variance = squares / (double)rows;
}

void ref_batchnorm_forward_train_f32(Backend *backend, size_t rows, int channels, const float *x,
                                 const float *gamma, const float *beta, float momentum, float eps,
                                 float *y, float *save_mean, float *save_inv_std,
                                 float *running_mean, float *running_var) {
    for (int c = 0; c < channels; c++) {
        double mean, variance;
        channel_moments(rows, channels, x, c, &mean, &variance);
        const double inv_std = 1.0 / sqrt(variance + eps);
        for (size_t r = 0; r < rows; r++) {
            const size_t i = r * (size_t)channels + c;
            y[i] = (float)((x[i] - mean) * inv_std * gamma[c] + beta[c]);
        }
        save_mean[c] = (float)mean;
        save_inv_std[c] = (float)inv_std;
        // PyTorch keeps the unbiased variance; with one row it is undefined
        // (PyTorch refuses to train), so the biased one (0) is kept instead.
        const double unbiased = rows > 1 ? variance * (double)rows / (double)(rows - 1) : variance;
        running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean);
        running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
    }
}

void ref_batchnorm_forward_train(Backend *backend, size_t rows, int channels, const Act *x_act,
                                 const float *gamma, const float *beta, float momentum, float eps,
                                 Act *y_act, float *save_mean, float *save_inv_std,
                                 float *running_mean, float *running_var) {
    ref_batchnorm_forward_train_f32(backend, rows, channels, (const float *)x_act, gamma, beta,
                                    momentum, eps, (float *)y_act, save_mean, save_inv_std,
                                    running_mean, running_var);
    ref_round_acts(backend, y_act, rows * channels);
}

static void batchnorm_eval_f32(size_t rows, int channels, const float *x, const float *gamma,
                               const float *beta, const float *running_mean,
                               const float *running_var, float eps, float *y) {
    for (int c = 0; c < channels; c++) {
        const double inv_std = 1.0 / sqrt((double)running_var[c] + eps);
        for (size_t r = 0; r < rows; r++) {
            const size_t i = r * (size_t)channels + c;
            y[i] = (float)((x[i] - (double)running_mean[c]) * inv_std * gamma[c] + beta[c]);
        }
    }
}

void ref_batchnorm_forward_eval(Backend *backend, size_t rows, int channels, const Act *x_act,
                                const float *gamma, const float *beta, const float *running_mean,
                                const float *running_var, float eps, Act *y_act) {
    batchnorm_eval_f32(rows, channels, (const float *)x_act, gamma, beta, running_mean,
                       running_var, eps, (float *)y_act);
    ref_round_acts(backend, y_act, rows * channels);
}

// y (n) = max(y + residual, 0) in fp32 (residual NULL: max(y, 0)), the
// same operations as add then relu_forward.
static void add_residual_relu(size_t n, const float *residual, float *y) {
    for (size_t i = 0; i < n; i++) {
        const float sum = residual ? y[i] + residual[i] : y[i];
        y[i] = sum <= 0.0f ? 0.0f : sum;
    }
}

void ref_batchnorm_relu_forward_train(Backend *backend, size_t rows, int channels,
                                      const Act *x_act, const Act *residual_act, const float *gamma,
                                      const float *beta, float momentum, float eps, Act *y_act,
                                      float *save_mean, float *save_inv_std, float *running_mean,
                                      float *running_var) {
    const float *residual = (const float *)residual_act;
    float *y = (float *)y_act;
    ref_batchnorm_forward_train_f32(backend, rows, channels, (const float *)x_act, gamma, beta,
                                    momentum, eps, y, save_mean, save_inv_std, running_mean,
                                    running_var);
    add_residual_relu(rows * (size_t)channels, residual, y);
    ref_round_acts(backend, y_act, rows * channels);
}

void ref_batchnorm_relu_forward_eval(Backend *backend, size_t rows, int channels,
                                     const Act *x_act, const Act *residual_act, const float *gamma,
                                     const float *beta, const float *running_mean,
                                     const float *running_var, float eps, Act *y_act) {
    const float *residual = (const float *)residual_act;
    float *y = (float *)y_act;
    batchnorm_eval_f32(rows, channels, (const float *)x_act, gamma, beta, running_mean,
                       running_var, eps, y);
    add_residual_relu(rows * (size_t)channels, residual, y);
    ref_round_acts(backend, y_act, rows * channels);
}

// The gradient reaching the batch norm's output: dy, or with a ReLU after
// it (relu_out not NULL) dy where the ReLU passed its input, else 0.
static double masked_gradient(const float *relu_out, const float *dy, size_t i) {
    return !relu_out || !(relu_out[i] <= 0.0f) ? dy[i] : 0.0;
}

// With xhat = (x - mean) inv_std and y = gamma xhat + beta over R rows and
// dz the gradient reaching y: dbeta = sum dz, dgamma = sum dz xhat,
// dx = gamma inv_std / R * (R dz - dbeta - xhat dgamma).
static void batchnorm_backward_masked(size_t rows, int channels, const float *x,
                                      const float *relu_out, const float *dy, const float *gamma,
                                      const float *save_mean, const float *save_inv_std,
                                      float *dx, float *dgamma, float *dbeta) {
    for (int c = 0; c < channels; c++) {
        const double mean = save_mean[c], inv_std = save_inv_std[c];
        double sum_dz = 0.0, sum_dz_xhat = 0.0;
        for (size_t r = 0; r < rows; r++) {
            const size_t i = r * (size_t)channels + c;
            const double dz = masked_gradient(relu_out, dy, i);
            sum_dz += dz;
            sum_dz_xhat += dz * (x[i] - mean) * inv_std;
        }
        const double scale = gamma[c] * inv_std / (double)rows;
        for (size_t r = 0; r < rows; r++) {
            const size_t i = r * (size_t)channels + c;
            const double xhat = (x[i] - mean) * inv_std;
            const double dz = masked_gradient(relu_out, dy, i);
            dx[i] = (float)(scale * ((double)rows * dz - sum_dz - xhat * sum_dz_xhat));
        }
        dgamma[c] += (float)sum_dz_xhat;
        dbeta[c] += (float)sum_dz;
    }
}

void ref_batchnorm_backward_f32(Backend *backend, size_t rows, int channels, const float *x,
                            const float *dy, const float *gamma, const float *save_mean,
                            const float *save_inv_std, float *dx, float *dgamma, float *dbeta) {
    batchnorm_backward_masked(rows, channels, x, NULL, dy, gamma, save_mean, save_inv_std, dx,
                              dgamma, dbeta);
}

void ref_batchnorm_backward(Backend *backend, size_t rows, int channels, const Act *x_act,
                            const Act *dy_act, const float *gamma, const float *save_mean,
                            const float *save_inv_std, Act *dx_act, float *dgamma, float *dbeta) {
    ref_batchnorm_backward_f32(backend, rows, channels, (const float *)x_act,
                               (const float *)dy_act, gamma, save_mean, save_inv_std,
                               (float *)dx_act, dgamma, dbeta);
    ref_round_acts(backend, dx_act, rows * channels);
}

void ref_batchnorm_relu_backward(Backend *backend, size_t rows, int channels, const Act *x_act,
                                 const Act *y_act, const Act *dy_act, const float *gamma,
                                 const float *beta, const float *save_mean,
                                 const float *save_inv_std, Act *dx_act, float *dgamma,
                                 float *dbeta, Act *dresidual_act) {
    const float *x = (const float *)x_act;
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    float *dresidual = (float *)dresidual_act;
    // Without y, the prologue's ReLU input stands in for it (only its sign is read).
    float *relu_input = y_act ? NULL
                              : ref_prologue_relu_input(backend, rows, channels, x, gamma, beta,
                                                        save_mean, save_inv_std);
    const float *y = y_act ? (const float *)y_act : relu_input;
    batchnorm_backward_masked(rows, channels, x, y, dy, gamma, save_mean, save_inv_std, dx,
                              dgamma, dbeta);
    // Last, as dresidual may alias dy (masking twice changes nothing).
    if (dresidual)
        for (size_t i = 0; i < rows * (size_t)channels; i++)
            dresidual[i] = (float)masked_gradient(y, dy, i);
    free(relu_input);
    ref_round_acts(backend, dx_act, rows * channels);
}

float *ref_prologue_relu_input(const Backend *backend, size_t rows, int channels,
                               const float *x, const float *gamma, const float *beta,
                               const float *mean, const float *inv_std) {
    float *out = malloc(rows * (size_t)channels * sizeof *out);
    if (!out) {
        fprintf(stderr, "%s backend: out of memory for a ReLU mask\n", backend->name);
        abort();
    }
    for (int c = 0; c < channels; c++) {
        const float scale = ref_round_act(backend, prologue_scale_rule(gamma[c], inv_std[c]));
        const float shift = ref_round_act(backend, prologue_shift_rule(beta[c], mean[c], scale));
        for (size_t r = 0; r < rows; r++) {
            const size_t i = r * (size_t)channels + c;
            out[i] = fmaf(x[i], scale, shift);
        }
    }
    return out;
}

// ---- L2 normalisation --------------------------------------------------------------

void ref_l2_normalize_forward(Backend *backend, int rows, int dim, const float *x, float eps,
                              float *y, float *norm) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * dim;
        double squares = 0.0;
        for (int d = 0; d < dim; d++) squares += (double)xr[d] * xr[d];
        const double length = sqrt(squares);
        const double divisor = length < eps ? eps : length;  // NaN stays NaN
        for (int d = 0; d < dim; d++) y[(size_t)r * dim + d] = (float)(xr[d] / divisor);
        norm[r] = (float)length;
    }
}

// Exact derivative of x / max(||x||, eps) as PyTorch's F.normalize has it:
// where the norm is clamped (norm < eps) y = x / eps is linear, dx = dy / eps;
// otherwise the projection of backend.h.
void ref_l2_normalize_backward(Backend *backend, int rows, int dim, const float *y,
                               const float *norm, const float *dy, float eps, float *dx) {
    for (int r = 0; r < rows; r++) {
        const float *yr = y + (size_t)r * dim, *dyr = dy + (size_t)r * dim;
        float *dxr = dx + (size_t)r * dim;
        if (norm[r] < eps) {
            for (int d = 0; d < dim; d++) dxr[d] = (float)((double)dyr[d] / eps);
            continue;
        }
        double y_dot_dy = 0.0;
        for (int d = 0; d < dim; d++) y_dot_dy += (double)yr[d] * dyr[d];
        for (int d = 0; d < dim; d++)
            dxr[d] = (float)((dyr[d] - yr[d] * y_dot_dy) / (double)norm[r]);
    }
}

// ---- softmax ---------------------------------------------------------------------------

// Row maximum of scale * x and log(sum exp(scale * x - max)): the shift that
// keeps exp from overflowing.
static void row_log_sum_exp(int dim, const float *xr, float scale, double *max_out,
                            double *log_sum_out) {
    double max = (double)scale * xr[0];
    for (int d = 1; d < dim; d++)
        if ((double)scale * xr[d] > max) max = (double)scale * xr[d];
    double total = 0.0;
    for (int d = 0; d < dim; d++) total += exp((double)scale * xr[d] - max);
    *max_out = max;
    *log_sum_out = log(total);
}

void ref_softmax_forward(Backend *backend, int rows, int dim, const float *x, float scale,
                         float *y) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * dim;
        double max, log_sum;
        row_log_sum_exp(dim, xr, scale, &max, &log_sum);
        for (int d = 0; d < dim; d++)
            y[(size_t)r * dim + d] = (float)exp((double)scale * xr[d] - max - log_sum);
    }
}

void ref_log_softmax_forward(Backend *backend, int rows, int dim, const float *x, float scale,
                             float *y) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * dim;
        double max, log_sum;
        row_log_sum_exp(dim, xr, scale, &max, &log_sum);
        for (int d = 0; d < dim; d++)
            y[(size_t)r * dim + d] = (float)((double)scale * xr[d] - max - log_sum);
    }
}

void ref_softmax_backward(Backend *backend, int rows, int dim, const float *y, const float *dy,
                          float scale, float *dx) {
    for (int r = 0; r < rows; r++) {
        const float *yr = y + (size_t)r * dim, *dyr = dy + (size_t)r * dim;
        double dy_dot_y = 0.0;
        for (int d = 0; d < dim; d++) dy_dot_y += (double)dyr[d] * yr[d];
        for (int d = 0; d < dim; d++)
            dx[(size_t)r * dim + d] = (float)((double)scale * yr[d] * (dyr[d] - dy_dot_y));
    }
}

void ref_log_softmax_backward(Backend *backend, int rows, int dim, const float *y,
                              const float *dy, float scale, float *dx) {
    for (int r = 0; r < rows; r++) {
        const float *yr = y + (size_t)r * dim, *dyr = dy + (size_t)r * dim;
        double dy_sum = 0.0;
        for (int d = 0; d < dim; d++) dy_sum += dyr[d];
        for (int d = 0; d < dim; d++) {
            const double softmax = exp((double)yr[d]);
            dx[(size_t)r * dim + d] = (float)((double)scale * (dyr[d] - softmax * dy_sum));
        }
    }
}
