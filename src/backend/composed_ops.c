// Fused ops written as their unfused parts (see composed_ops.h).
#include "backend/composed_ops.h"

void composed_batchnorm_silu_forward_train(Backend *backend, size_t rows, int channels,
                                           const Act *x, const float *gamma, const float *beta,
                                           float momentum, float eps, Act *y, float *save_mean,
                                           float *save_inv_std, float *running_mean,
                                           float *running_var) {
    backend->op.batchnorm_forward_train(backend, rows, channels, x, gamma, beta, momentum, eps, y,
                                        save_mean, save_inv_std, running_mean, running_var);
    backend->op.silu_forward(backend, rows * (size_t)channels, y, y);
}

void composed_batchnorm_silu_forward_eval(Backend *backend, size_t rows, int channels,
                                          const Act *x, const float *gamma, const float *beta,
                                          const float *running_mean, const float *running_var,
                                          float eps, Act *y) {
    backend->op.batchnorm_forward_eval(backend, rows, channels, x, gamma, beta, running_mean,
                                       running_var, eps, y);
    backend->op.silu_forward(backend, rows * (size_t)channels, y, y);
}

void composed_batchnorm_silu_backward(Backend *backend, size_t rows, int channels, const Act *x,
                                      const Act *dy, const float *gamma, const float *beta,
                                      const float *save_mean, const float *save_inv_std, Act *dz,
                                      Act *dx, float *dgamma, float *dbeta) {
    backend->op.batchnorm_forward_apply(backend, rows, channels, x, NULL, 0, gamma, beta,
                                        save_mean, save_inv_std, dz);
    backend->op.silu_backward(backend, rows * (size_t)channels, dz, dy, dz);
    backend->op.batchnorm_backward(backend, rows, channels, x, dz, gamma, save_mean, save_inv_std,
                                   dx, dgamma, dbeta);
}

void composed_residual_layernorm_forward(Backend *backend, int batch, size_t rows_per_sample,
                                         int channels, const Act *x, const Act *branch,
                                         const float *gamma, const float *sample_scale, Act *y,
                                         const float *ln_gamma, const float *ln_beta, float eps,
                                         Act *norm_out, float *mean, float *inv_std) {
    backend->op.residual_scale_add_forward(backend, batch, rows_per_sample, channels, x, branch,
                                           gamma, sample_scale, y);
    backend->op.layernorm_forward(backend, (size_t)batch * rows_per_sample, channels, y, ln_gamma,
                                  ln_beta, eps, norm_out, mean, inv_std);
}
